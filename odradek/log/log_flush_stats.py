"""LogFlushStats: how long fsyncs of partition logs take (Kafka's
``kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs``), one histogram per process as
Kafka has one per JVM. Flushes run in worker threads, so observations take a lock (a flush is an
fsync: the lock costs nothing next to it)."""

from __future__ import annotations

import threading

from odradek.metrics.histogram import Histogram


class LogFlushStats:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.flush_time_ms = Histogram()

    def record(self, ms: float) -> None:
        with self._lock:
            self.flush_time_ms.observe(ms)

    def snapshot(self) -> tuple[list[tuple[str, int]], float]:
        """Cumulative buckets and the sum, read together."""
        with self._lock:
            return self.flush_time_ms.cumulative(), self.flush_time_ms.sum


LOG_FLUSH_STATS = LogFlushStats()
