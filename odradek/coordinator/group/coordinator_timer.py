"""The group coordinator's timers (Kafka's ``CoordinatorTimer``): one keyed timer per group,
re-armed at the group's next deadline.

The coordinator schedules through this interface only, so a test drives time with a fake
(:class:`CoordinatorTimer` is a protocol) and an injected clock; :class:`EventLoopTimer` is the
asyncio implementation the broker uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol


class CoordinatorTimer(Protocol):
    def schedule(self, key: str, delay_ms: int, callback: Callable[[], None]) -> None:
        """Run ``callback`` in ``delay_ms``; a timer already scheduled under ``key`` is cancelled."""

    def cancel(self, key: str) -> None:
        """Cancel the timer ``key`` if it is scheduled."""

    def cancel_all(self) -> None:
        """Cancel every timer (at shutdown)."""


class EventLoopTimer:
    """:class:`CoordinatorTimer` on the running asyncio loop (``call_later``)."""

    def __init__(self) -> None:
        self._handles: dict[str, asyncio.TimerHandle] = {}

    def schedule(self, key: str, delay_ms: int, callback: Callable[[], None]) -> None:
        self.cancel(key)

        def fire() -> None:
            self._handles.pop(key, None)
            callback()

        loop = asyncio.get_running_loop()
        self._handles[key] = loop.call_later(max(0, delay_ms) / 1000.0, fire)

    def cancel(self, key: str) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()
