"""DelayedFetch: a fetch waiting for ``min_bytes`` to arrive or ``max_wait_ms`` to pass
(Kafka's DelayedFetch.scala), with the per-partition request and result it reads with.

It completes as soon as a read returns at least ``min_bytes`` or any partition answers an
error (no longer the leader, unknown, out of range); at the timeout it answers what a read
gives then.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from odradek.cluster.partition import LogReadResult
from odradek.protocol.errors import Errors
from odradek.server.purgatory import DelayedOperation


@dataclass
class FetchPartitionRequest:
    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1  # a follower's (KIP-320)
    log_start_offset: int = -1  # a follower's


@dataclass
class FetchPartitionResult:
    request: FetchPartitionRequest
    result: LogReadResult


def fetch_can_complete(total_bytes: int, min_bytes: int, results: list[FetchPartitionResult]) -> bool:
    """Enough bytes, an error that waiting will not change, or a consumer sent to another
    replica (KIP-392: answered at once, as Kafka's hasPreferredReadReplica)."""
    return total_bytes >= min_bytes or any(
        r.result.error != Errors.NONE or r.result.preferred_read_replica >= 0 for r in results
    )


class DelayedFetch(DelayedOperation):
    def __init__(
        self,
        delay_ms: int,
        min_bytes: int,
        read: Callable[[], tuple[int, list[FetchPartitionResult]]],
        first: list[FetchPartitionResult],
    ) -> None:
        super().__init__(delay_ms)
        self.min_bytes = min_bytes
        self.read = read
        self.results = first

    def try_complete(self) -> bool:
        total, results = self.read()
        if fetch_can_complete(total, self.min_bytes, results):
            self.results = results
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        _, self.results = self.read()

    def on_complete(self) -> list[FetchPartitionResult]:
        return self.results
