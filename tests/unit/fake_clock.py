"""A settable clock for cores that take an injected ``clock_ms`` (no sleeps in tests)."""

from __future__ import annotations


class FakeClock:
    def __init__(self, now_ms: int = 0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms
