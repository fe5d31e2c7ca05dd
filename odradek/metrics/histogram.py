"""A histogram cheap enough for every request: counts per bucket and a sum, no lock; exported
as a Prometheus histogram at scrape time."""

from __future__ import annotations

import bisect

# Latency bucket bounds in milliseconds (Prometheus ``le`` labels), from sub-millisecond local
# answers to long-polling fetches and delayed produces.
LATENCY_BUCKETS_MS: tuple[float, ...] = (
    0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
)

# Size bucket bounds in bytes (Kafka's RequestBytes, Odradek's response sizes): from a small
# header-only request to the default message.max.bytes and beyond.
SIZE_BUCKETS_BYTES: tuple[float, ...] = (
    64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)


class Histogram:
    """Counts per bucket (``value <= bound``, the last one unbounded) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS_MS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """``[(le, count of values <= le)]`` ending with ``+Inf``, as Prometheus buckets."""
        out: list[tuple[str, int]] = []
        total = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            total += n
            out.append((_le(bound), total))
        out.append(("+Inf", total + self.counts[-1]))
        return out


def _le(bound: float) -> str:
    return str(int(bound)) if bound == int(bound) else repr(bound)
