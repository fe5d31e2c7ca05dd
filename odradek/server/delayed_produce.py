"""DelayedProduce: a produce with acks=-1 waiting until the high watermark covers its appends
(Kafka's DelayedProduce.scala, with the per-partition :class:`ProducePartitionStatus`).

Each partition is done when its leader says enough replicas reached the offset after the
append (:meth:`~odradek.cluster.partition.Partition.check_enough_replicas_reach_offset`), or
with NOT_LEADER_OR_FOLLOWER when the partition is no longer here; partitions still waiting at
the timeout answer REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from odradek.cluster.partition import Partition
from odradek.protocol.errors import Errors
from odradek.server.purgatory import DelayedOperation

TopicPartition = tuple[str, int]


@dataclass
class ProducePartitionStatus:
    error: Errors = Errors.NONE
    message: str | None = None
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    required_offset: int = -1  # acks=-1 waits until the HW reaches this
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)


class DelayedProduce(DelayedOperation):
    def __init__(
        self,
        delay_ms: int,
        statuses: dict[TopicPartition, ProducePartitionStatus],
        get_partition: Callable[[TopicPartition], Partition | None],
    ) -> None:
        super().__init__(delay_ms)
        self.statuses = statuses
        self.get_partition = get_partition
        self.pending = {tp for tp, s in statuses.items() if s.error == Errors.NONE}

    def try_complete(self) -> bool:
        for tp in list(self.pending):
            p = self.get_partition(tp)
            if p is None:
                done, err = True, Errors.NOT_LEADER_OR_FOLLOWER
            else:
                done, err = p.check_enough_replicas_reach_offset(self.statuses[tp].required_offset)
            if done:
                self.pending.discard(tp)
                if err != Errors.NONE:
                    self.statuses[tp].error = err
        if not self.pending:
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        for tp in self.pending:
            self.statuses[tp].error = Errors.REQUEST_TIMED_OUT

    def on_shutdown(self) -> None:
        """The broker stops with this produce waiting: what the HW covers is acknowledged, the
        rest answers NOT_LEADER_OR_FOLLOWER (retriable: the producer sends it again to the next
        leader) — never NONE, which would acknowledge records the ISR may not have."""
        for tp in list(self.pending):
            p = self.get_partition(tp)
            done, err = (False, Errors.NONE) if p is None else p.check_enough_replicas_reach_offset(
                self.statuses[tp].required_offset
            )
            self.pending.discard(tp)
            if not done or err != Errors.NONE:
                self.statuses[tp].error = err if done else Errors.NOT_LEADER_OR_FOLLOWER

    def on_complete(self) -> dict[TopicPartition, ProducePartitionStatus]:
        return self.statuses
