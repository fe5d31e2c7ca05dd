"""Partition leader election: pure functions over plain data, shared by both controllers.

The four algorithms are Kafka's ``PartitionLeaderElectionAlgorithms`` (ZooKeeper controller,
``kafka/controller/PartitionStateMachine.scala``); the ISR each produces is what Kafka's
``Election.scala`` writes with it:

- offline: the first replica of the assignment that is alive and in the ISR; otherwise, when
  unclean election is enabled, the first live replica (an *unclean* election, whose ISR becomes
  just the new leader). A clean election keeps the live members of the ISR.
- reassign: the first replica of the reassignment target that is alive and in the ISR; ISR kept.
- preferred: the first replica of the assignment, only if it is alive and in the ISR; ISR kept.
- controlled shutdown: the first replica that is alive, in the ISR and not shutting down; the
  shutting-down brokers leave the ISR.
- no-op: leader and ISR unchanged (Kafka's old ``NoOpLeaderSelector``).

No I/O, no image objects: replicas are lists of broker ids, sets of ids for liveness.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from dataclasses import dataclass

NO_LEADER = -1


def offline_partition_leader_election(
    assignment: Sequence[int], isr: Collection[int], live_replicas: Collection[int], unclean_enabled: bool
) -> tuple[int | None, bool]:
    """(leader or None, whether the election was unclean)."""
    for r in assignment:
        if r in live_replicas and r in isr:
            return r, False
    if unclean_enabled:
        for r in assignment:
            if r in live_replicas:
                return r, True
    return None, False


def reassign_partition_leader_election(
    reassignment: Sequence[int], isr: Collection[int], live_replicas: Collection[int]
) -> int | None:
    for r in reassignment:
        if r in live_replicas and r in isr:
            return r
    return None


def preferred_replica_partition_leader_election(
    assignment: Sequence[int], isr: Collection[int], live_replicas: Collection[int]
) -> int | None:
    if assignment and assignment[0] in live_replicas and assignment[0] in isr:
        return assignment[0]
    return None


def controlled_shutdown_partition_leader_election(
    assignment: Sequence[int],
    isr: Collection[int],
    live_replicas: Collection[int],
    shutting_down: Collection[int],
) -> int | None:
    for r in assignment:
        if r in live_replicas and r in isr and r not in shutting_down:
            return r
    return None


class ElectionType(enum.Enum):
    """Kafka's ``PartitionLeaderElectionStrategy`` cases (plus the no-op selector)."""

    OFFLINE = "OfflinePartitionLeaderElectionStrategy"
    REASSIGN = "ReassignPartitionLeaderElectionStrategy"
    PREFERRED = "PreferredReplicaPartitionLeaderElectionStrategy"
    CONTROLLED_SHUTDOWN = "ControlledShutdownPartitionLeaderElectionStrategy"
    NO_OP = "NoOpLeaderSelector"


@dataclass(frozen=True)
class PartitionLeadership:
    """What a selector sees of one partition: Kafka's assignment plus LeaderAndIsr."""

    replicas: Sequence[int]
    isr: Sequence[int]
    leader: int = NO_LEADER


@dataclass(frozen=True)
class ElectionResult:
    """The chosen leader (None: no replica may lead) and the ISR to write with it."""

    leader: int | None
    isr: list[int]
    unclean: bool = False

    @property
    def leader_or_none(self) -> int:
        """The leader as a record field: -1 when there is none."""
        return NO_LEADER if self.leader is None else self.leader


class PartitionLeaderSelector(ABC):
    """Base of the selectors (Kafka's ``PartitionLeaderSelector.selectLeader``)."""

    election_type: ElectionType

    @abstractmethod
    def select(self, partition: PartitionLeadership, live_replicas: Collection[int]) -> ElectionResult:
        """The leader (or None) and the ISR this election writes, given the live replicas."""


@dataclass(frozen=True)
class OfflinePartitionLeaderSelector(PartitionLeaderSelector):
    unclean_enabled: bool = False
    election_type = ElectionType.OFFLINE

    def select(self, partition: PartitionLeadership, live_replicas: Collection[int]) -> ElectionResult:
        leader, unclean = offline_partition_leader_election(
            partition.replicas, partition.isr, live_replicas, self.unclean_enabled
        )
        if leader is None:
            return ElectionResult(None, list(partition.isr))
        if unclean:
            return ElectionResult(leader, [leader], unclean=True)
        return ElectionResult(leader, [r for r in partition.isr if r in live_replicas])


@dataclass(frozen=True)
class ReassignedPartitionLeaderSelector(PartitionLeaderSelector):
    """Elects among the reassignment target (``target_replicas``)."""

    target_replicas: Sequence[int]
    election_type = ElectionType.REASSIGN

    def select(self, partition: PartitionLeadership, live_replicas: Collection[int]) -> ElectionResult:
        leader = reassign_partition_leader_election(self.target_replicas, partition.isr, live_replicas)
        return ElectionResult(leader, list(partition.isr))


@dataclass(frozen=True)
class PreferredReplicaPartitionLeaderSelector(PartitionLeaderSelector):
    election_type = ElectionType.PREFERRED

    def select(self, partition: PartitionLeadership, live_replicas: Collection[int]) -> ElectionResult:
        leader = preferred_replica_partition_leader_election(partition.replicas, partition.isr, live_replicas)
        return ElectionResult(leader, list(partition.isr))


@dataclass(frozen=True)
class ControlledShutdownLeaderSelector(PartitionLeaderSelector):
    """``live_replicas`` given to ``select`` include the brokers shutting down, as in Kafka."""

    shutting_down: frozenset[int]
    election_type = ElectionType.CONTROLLED_SHUTDOWN

    def select(self, partition: PartitionLeadership, live_replicas: Collection[int]) -> ElectionResult:
        leader = controlled_shutdown_partition_leader_election(
            partition.replicas, partition.isr, live_replicas, self.shutting_down
        )
        isr = [r for r in partition.isr if r not in self.shutting_down]
        if leader is None:
            return ElectionResult(None, list(partition.isr))
        return ElectionResult(leader, isr)


@dataclass(frozen=True)
class NoOpLeaderSelector(PartitionLeaderSelector):
    election_type = ElectionType.NO_OP

    def select(self, partition: PartitionLeadership, live_replicas: Collection[int]) -> ElectionResult:
        leader = partition.leader if partition.leader >= 0 else None
        return ElectionResult(leader, list(partition.isr))
