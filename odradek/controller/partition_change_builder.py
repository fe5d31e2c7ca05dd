"""PartitionChangeBuilder: one partition's next state as a PartitionChangeRecord (sans-I/O).

Kafka's ``org.apache.kafka.controller.PartitionChangeBuilder``: given a partition's registration
and the targets of a change (ISR, replicas, adding and removing replicas, the kind of election),
it completes a reassignment whose adding replicas are all in the target ISR, elects a leader,
bumps the leader epoch when replicas leave the assignment, and returns the record that carries
the difference, or None when nothing would change.

Elections (Kafka's ``PartitionChangeBuilder.Election``):

- ONLINE: keep the current leader if it may still lead, else the first target replica in the
  target ISR that is active (unfenced, not in controlled shutdown);
- PREFERRED: the first target replica if it is in the ISR and active; else as ONLINE;
- UNCLEAN: as ONLINE, then, if no ISR member may lead, the first active target replica; its ISR
  becomes the new leader alone (data written only to the old ISR may be lost).

No I/O, no clock: ``is_acceptable_leader`` says whether a broker may lead.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from odradek.metadata.image import PartitionRegistration

NO_LEADER = -1
_UNASSIGNED_DIR = uuid.UUID(int=0)


class Election(enum.Enum):
    ONLINE = "ONLINE"
    PREFERRED = "PREFERRED"
    UNCLEAN = "UNCLEAN"


@dataclass(frozen=True)
class ElectionOutcome:
    leader: int
    unclean: bool


@dataclass(frozen=True)
class CompletedReassignment:
    replicas: list[int]
    isr: list[int]


def reassignment_replicas(current: Sequence[int], target: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """Kafka's ``PartitionReassignmentReplicas``: (replicas during the move = target then the
    removed ones, removing, adding); removing and adding in ascending order (Kafka's TreeSet)."""
    removing = sorted(set(current) - set(target))
    adding = sorted(set(target) - set(current))
    return [*target, *removing], removing, adding


def maybe_complete_reassignment(
    replicas: Sequence[int], removing: Sequence[int], adding: Sequence[int], isr: Sequence[int]
) -> CompletedReassignment | None:
    """The assignment and ISR once the reassignment is done, or None while it is not (Kafka's
    ``maybeCompleteReassignment``): every replica of the target assignment must be in the ISR."""
    if not removing and not adding:
        return None
    new_isr = [r for r in isr if r not in removing]
    new_replicas = [r for r in replicas if r not in removing]
    if not new_isr or not new_replicas:
        return None
    if not set(new_replicas) <= set(new_isr):
        return None
    return CompletedReassignment(new_replicas, new_isr)


class PartitionChangeBuilder:
    def __init__(
        self,
        partition: PartitionRegistration,
        topic_id: uuid.UUID,
        partition_id: int,
        is_acceptable_leader: Callable[[int], bool],
    ) -> None:
        self.partition = partition
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.is_acceptable_leader = is_acceptable_leader
        self.election = Election.ONLINE
        self.target_isr: list[int] = list(partition.isr)
        self.target_replicas: list[int] = list(partition.replicas)
        self.target_removing: list[int] = list(partition.removing_replicas)
        self.target_adding: list[int] = list(partition.adding_replicas)
        # What the last build decided (for the caller's log lines).
        self.outcome: ElectionOutcome | None = None

    # -- setters (chainable, as Kafka's) --------------------------------------------------------

    def set_election(self, election: Election) -> PartitionChangeBuilder:
        self.election = election
        return self

    def set_target_isr(self, isr: Sequence[int]) -> PartitionChangeBuilder:
        self.target_isr = list(isr)
        return self

    def set_target_replicas(self, replicas: Sequence[int]) -> PartitionChangeBuilder:
        self.target_replicas = list(replicas)
        return self

    def set_target_removing(self, removing: Sequence[int]) -> PartitionChangeBuilder:
        self.target_removing = list(removing)
        return self

    def set_target_adding(self, adding: Sequence[int]) -> PartitionChangeBuilder:
        self.target_adding = list(adding)
        return self

    # -- election -------------------------------------------------------------------------------

    def _is_valid_new_leader(self, replica: int) -> bool:
        return replica in self.target_isr and self.is_acceptable_leader(replica)

    def _elect_any_leader(self) -> ElectionOutcome:
        current = self.partition.leader
        if current != NO_LEADER and current in self.target_replicas and self._is_valid_new_leader(current):
            return ElectionOutcome(current, False)
        for r in self.target_replicas:
            if self._is_valid_new_leader(r):
                return ElectionOutcome(r, False)
        if self.election == Election.UNCLEAN:
            for r in self.target_replicas:
                if self.is_acceptable_leader(r):
                    return ElectionOutcome(r, True)
        return ElectionOutcome(NO_LEADER, False)

    def _elect_preferred_leader(self) -> ElectionOutcome:
        if self.target_replicas and self._is_valid_new_leader(self.target_replicas[0]):
            return ElectionOutcome(self.target_replicas[0], False)
        return self._elect_any_leader()

    def elect_leader(self) -> ElectionOutcome:
        if self.election == Election.PREFERRED:
            return self._elect_preferred_leader()
        return self._elect_any_leader()

    # -- build ----------------------------------------------------------------------------------

    def _complete_reassignment_if_needed(self) -> None:
        done = maybe_complete_reassignment(
            self.target_replicas, self.target_removing, self.target_adding, self.target_isr
        )
        if done is None:
            return
        self.target_isr = done.isr
        self.target_replicas = done.replicas
        self.target_removing = []
        self.target_adding = []

    def build(self) -> dict[str, Any] | None:
        """The PartitionChangeRecord's fields, or None when the partition would not change."""
        p = self.partition
        record: dict[str, Any] = {"partition_id": self.partition_id, "topic_id": self.topic_id}
        self._complete_reassignment_if_needed()
        outcome = self.elect_leader()
        self.outcome = outcome
        if outcome.leader != p.leader:
            record["leader"] = outcome.leader
            if outcome.unclean:
                record["isr"] = [outcome.leader]
        elif set(p.replicas) - set(self.target_replicas):
            # Replicas leave the assignment: bump the leader epoch so that they are fenced
            # (Kafka's triggerLeaderEpochBumpForReplicaReassignmentIfNeeded).
            record["leader"] = p.leader
        if "isr" not in record and self.target_isr != list(p.isr) and self.target_isr:
            record["isr"] = list(self.target_isr)
        if self.target_replicas != list(p.replicas):
            record["replicas"] = list(self.target_replicas)
            dirs = dict(zip(p.replicas, p.directories, strict=False))
            record["directories"] = [dirs.get(r, _UNASSIGNED_DIR) for r in self.target_replicas]
        if self.target_removing != list(p.removing_replicas):
            record["removing_replicas"] = list(self.target_removing)
        if self.target_adding != list(p.adding_replicas):
            record["adding_replicas"] = list(self.target_adding)
        if len(record) == 2:
            return None
        return record
