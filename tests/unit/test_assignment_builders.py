"""Kafka's CurrentAssignmentBuilder (one member's convergence to its target) and
TargetAssignmentBuilder (the group's target for a new epoch), driven directly."""

from __future__ import annotations

import uuid

import pytest

from odradek.coordinator.group.assignors import TopicMetadata
from odradek.coordinator.group.consumer_group import ConsumerGroup
from odradek.coordinator.group.consumer_group_member import (
    ConsumerGroupError,
    ConsumerGroupMember,
    MemberState,
    Partitions,
)
from odradek.coordinator.group.consumer_group_records import (
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    group_metadata_record,
    member_metadata_record,
    partition_metadata_record,
    target_member_record,
    target_metadata_record,
)
from odradek.coordinator.group.current_assignment_builder import CurrentAssignmentBuilder
from odradek.coordinator.group.target_assignment_builder import TargetAssignmentBuilder
from odradek.protocol.errors import Errors

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)


def parts(**by_topic: list[int]) -> Partitions:
    ids = {"t": T, "u": U}
    return {ids[name]: frozenset(ps) for name, ps in by_topic.items() if ps}


def member(epoch: int, assigned: Partitions, **kw: object) -> ConsumerGroupMember:
    return ConsumerGroupMember("m", member_epoch=epoch, previous_member_epoch=epoch - 1,
                               assigned_partitions=assigned, **kw)  # type: ignore[arg-type]


def build(m: ConsumerGroupMember, epoch: int, target: Partitions, owned: Partitions | None,
          owners: dict[tuple[uuid.UUID, int], str] | None = None) -> ConsumerGroupMember:
    table = owners or {}
    return (
        CurrentAssignmentBuilder(m)
        .with_target_assignment(epoch, target)
        .with_partition_owner(lambda tid, p: table.get((tid, p)))
        .with_owned_topic_partitions(owned)
        .build()
    )


def test_stable_member_at_the_target_epoch_is_unchanged() -> None:
    m = member(3, parts(t=[0, 1]))
    assert build(m, 3, parts(t=[2]), parts(t=[0, 1])) is m


def test_member_revokes_first_and_keeps_its_epoch() -> None:
    m = member(3, parts(t=[0, 1, 2]))
    out = build(m, 4, parts(t=[0, 3]), parts(t=[0, 1, 2]))
    assert out.state == MemberState.UNREVOKED_PARTITIONS
    assert out.member_epoch == 3 and out.previous_member_epoch == 2
    assert out.assigned_partitions == parts(t=[0])
    assert out.partitions_pending_revocation == parts(t=[1, 2])
    # Still reporting a revoked partition: nothing moves.
    assert build(out, 4, parts(t=[0, 3]), parts(t=[0, 2])) is out
    # Revoked: the member moves to the target epoch and gets the free partition.
    done = build(out, 4, parts(t=[0, 3]), parts(t=[0]))
    assert done.state == MemberState.STABLE
    assert (done.member_epoch, done.previous_member_epoch) == (4, 3)
    assert done.assigned_partitions == parts(t=[0, 3])
    assert done.partitions_pending_revocation == {}


def test_partitions_owned_by_another_member_are_unreleased() -> None:
    m = member(1, parts(t=[0]))
    out = build(m, 2, parts(t=[0, 1], u=[0]), parts(t=[0]), {(T, 1): "other"})
    assert out.state == MemberState.UNRELEASED_PARTITIONS and out.member_epoch == 2
    assert out.assigned_partitions == parts(t=[0], u=[0])
    # Once the other member released it, the next heartbeat completes the assignment.
    done = build(out, 2, parts(t=[0, 1], u=[0]), parts(t=[0], u=[0]))
    assert done.state == MemberState.STABLE
    assert done.assigned_partitions == parts(t=[0, 1], u=[0])


def test_unreported_ownership_counts_as_owning() -> None:
    m = member(1, parts(t=[0, 1]))
    out = build(m, 2, parts(t=[0]), None)
    assert out.state == MemberState.UNREVOKED_PARTITIONS
    assert out.partitions_pending_revocation == parts(t=[1])


def test_unknown_state_starts_over_or_is_fenced() -> None:
    m = member(1, parts(t=[0]), state=MemberState.UNKNOWN)
    with pytest.raises(ConsumerGroupError) as e:
        build(m, 2, parts(t=[0]), parts(t=[0]))
    assert e.value.code == Errors.FENCED_MEMBER_EPOCH
    out = build(m, 2, parts(t=[0, 1]), {})
    assert out.state == MemberState.STABLE and out.member_epoch == 2
    assert out.assigned_partitions == parts(t=[0, 1])


def group_with(members: dict[str, list[str]], epoch: int) -> ConsumerGroup:
    g = ConsumerGroup("g")
    meta = {"t": TopicMetadata(T, "t", 4)}
    g.replay(*partition_metadata_record("g", meta))
    for mid, topics in members.items():
        g.replay(*member_metadata_record(
            "g", ConsumerGroupMember(mid, subscribed_topic_names=tuple(topics), server_assignor="range")
        ))
    g.replay(*group_metadata_record("g", epoch))
    return g


def test_target_assignment_records_only_what_changed_then_the_epoch() -> None:
    g = group_with({"a": ["t"]}, 1)
    first = TargetAssignmentBuilder(g).build()
    assert [r.name for r in first] == [TARGET_ASSIGNMENT_MEMBER, TARGET_ASSIGNMENT_METADATA]
    assert first[0] == target_member_record("g", "a", parts(t=[0, 1, 2, 3]))
    assert first[1] == target_metadata_record("g", 1)
    for r in first:
        g.replay(*r)
    # b joins (epoch 2): range gives a 0-1 and b 2-3; both targets changed.
    g.replay(*member_metadata_record(
        "g", ConsumerGroupMember("b", subscribed_topic_names=("t",), server_assignor="range")
    ))
    g.replay(*group_metadata_record("g", 2))
    second = TargetAssignmentBuilder(g).build()
    assert second == [
        target_member_record("g", "a", parts(t=[0, 1])),
        target_member_record("g", "b", parts(t=[2, 3])),
        target_metadata_record("g", 2),
    ]
    for r in second:
        g.replay(*r)
    # Nothing changed but the epoch: only the metadata record.
    g.replay(*group_metadata_record("g", 3))
    assert TargetAssignmentBuilder(g).build() == [target_metadata_record("g", 3)]
    # A member listed in ``previous`` (a replacing static member) always gets its record.
    assert TargetAssignmentBuilder(g, {"a": parts(t=[0, 1])}).build() == [
        target_member_record("g", "a", parts(t=[0, 1])),
        target_metadata_record("g", 3),
    ]
    assert g.target_assignment_epoch == 2  # build() applies nothing
