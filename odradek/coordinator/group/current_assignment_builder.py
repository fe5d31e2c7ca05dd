"""How one member of a KIP-848 group converges to its target assignment (Kafka's
``CurrentAssignmentBuilder``).

A member first revokes the partitions it must give up (``UNREVOKED_PARTITIONS``: it keeps its
epoch until its heartbeat stops reporting them), then moves to the target epoch and receives its
target minus the partitions still owned by another member (``UNRELEASED_PARTITIONS`` until those
are released), and is ``STABLE`` once it has everything. No partition is ever owned twice. Pure:
the member, its target and who owns what go in, the next member comes out.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from odradek.coordinator.group.consumer_group_member import (
    ConsumerGroupError,
    ConsumerGroupMember,
    MemberState,
    Partitions,
    clean,
    owns_any,
)
from odradek.protocol.errors import Errors

PartitionOwner = Callable[[uuid.UUID, int], "str | None"]


class CurrentAssignmentBuilder:
    """The next state of ``member`` given the target assignment of the group.

    ``partition_owner(topic_id, partition)`` names the member owning a partition (assigned or
    pending revocation), if any; ``owned`` is what the member reported in its heartbeat (``None``
    when it did not report, which counts as owning everything it had)."""

    def __init__(self, member: ConsumerGroupMember) -> None:
        self.member = member
        self.target_epoch = 0
        self.target: Partitions = {}
        self.partition_owner: PartitionOwner = lambda tid, p: None
        self.owned: Partitions | None = None

    def with_target_assignment(self, epoch: int, target: Partitions) -> CurrentAssignmentBuilder:
        self.target_epoch, self.target = epoch, target
        return self

    def with_partition_owner(self, owner: PartitionOwner) -> CurrentAssignmentBuilder:
        self.partition_owner = owner
        return self

    def with_owned_topic_partitions(self, owned: Partitions | None) -> CurrentAssignmentBuilder:
        self.owned = owned
        return self

    def build(self) -> ConsumerGroupMember:
        """The reconciled member; raises FENCED_MEMBER_EPOCH for a member in an unknown state
        that still reports partitions."""
        member, owned = self.member, self.owned
        if member.state == MemberState.STABLE:
            if member.member_epoch == self.target_epoch:
                return member
            return self._next_assignment(member, member.member_epoch)
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            if owns_any(owned, member.partitions_pending_revocation):
                return member
            return self._next_assignment(member, member.member_epoch)
        if member.state == MemberState.UNRELEASED_PARTITIONS:
            return self._next_assignment(member, member.member_epoch)
        # UNKNOWN (a state from a newer version): start over from no partitions.
        if owned is None or owned:
            raise ConsumerGroupError(
                Errors.FENCED_MEMBER_EPOCH,
                "The consumer group member is in a unknown state. The member must abandon all "
                "its partitions and rejoin.",
            )
        return self._next_assignment(replace(member, assigned_partitions={}), self.target_epoch)

    def _next_assignment(self, member: ConsumerGroupMember, epoch: int) -> ConsumerGroupMember:
        target = self.target
        current = member.assigned_partitions
        keep: dict[uuid.UUID, set[int]] = {}
        revoke: dict[uuid.UUID, set[int]] = {}
        add: dict[uuid.UUID, set[int]] = {}
        unreleased = False
        for tid in set(target) | set(current):
            tgt = target.get(tid, frozenset())
            cur = current.get(tid, frozenset())
            keep[tid] = set(cur & tgt)
            revoke[tid] = set(cur - tgt)
            wanted = tgt - cur
            free = {p for p in wanted if self.partition_owner(tid, p) in (None, member.member_id)}
            unreleased = unreleased or len(free) != len(wanted)
            add[tid] = free
        revoking = clean(revoke)

        def with_epoch(new_epoch: int, **kw: Any) -> ConsumerGroupMember:
            prev = member.previous_member_epoch
            if new_epoch != member.member_epoch:
                prev = member.member_epoch
            return replace(member, member_epoch=new_epoch, previous_member_epoch=prev, **kw)

        if revoking and owns_any(self.owned, revoking):
            # Give up partitions first; the member stays in its epoch until it has.
            return with_epoch(
                epoch,
                state=MemberState.UNREVOKED_PARTITIONS,
                assigned_partitions=clean(keep),
                partitions_pending_revocation=revoking,
            )
        assigned = clean({tid: keep[tid] | add[tid] for tid in keep})
        return with_epoch(
            self.target_epoch,
            state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
            assigned_partitions=assigned,
            partitions_pending_revocation={},
        )
