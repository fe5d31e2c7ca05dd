"""Partition leader election (odradek.controller.election): Kafka's
PartitionLeaderElectionAlgorithms and the ISR Kafka's Election.scala writes with each choice."""

from __future__ import annotations

import pytest

from odradek.controller.election import (
    ControlledShutdownLeaderSelector,
    ElectionType,
    NoOpLeaderSelector,
    OfflinePartitionLeaderSelector,
    PartitionLeaderSelector,
    PartitionLeadership,
    PreferredReplicaPartitionLeaderSelector,
    ReassignedPartitionLeaderSelector,
    controlled_shutdown_partition_leader_election,
    offline_partition_leader_election,
    preferred_replica_partition_leader_election,
    reassign_partition_leader_election,
)

# -- offline --------------------------------------------------------------------------------------


def test_offline_clean_picks_first_live_isr_replica_in_assignment_order() -> None:
    # Assignment order decides, not ISR order: 3 is first in the ISR but 2 comes first.
    assert offline_partition_leader_election([1, 2, 3], [3, 2], {2, 3}, False) == (2, False)
    assert offline_partition_leader_election([1, 2, 3], [3, 2], {2, 3}, True) == (2, False)


def test_offline_unclean_disallowed_leaves_partition_offline() -> None:
    assert offline_partition_leader_election([1, 2, 3], [3], {1, 2}, False) == (None, False)


def test_offline_unclean_allowed_elects_first_live_replica() -> None:
    assert offline_partition_leader_election([1, 2, 3], [3], {2, 1}, True) == (1, True)


def test_offline_no_live_replica() -> None:
    assert offline_partition_leader_election([1, 2], [1, 2], set(), True) == (None, False)
    assert offline_partition_leader_election([1, 2], [1, 2], {5}, True) == (None, False)


def test_offline_selector_clean_keeps_live_isr() -> None:
    res = OfflinePartitionLeaderSelector().select(PartitionLeadership([1, 2, 3], [1, 2, 3], 1), {2, 3})
    assert (res.leader, res.isr, res.unclean) == (2, [2, 3], False)
    assert res.leader_or_none == 2


def test_offline_selector_unclean_sets_isr_to_new_leader() -> None:
    part = PartitionLeadership([1, 2, 3], [3], 3)
    res = OfflinePartitionLeaderSelector(unclean_enabled=True).select(part, {1, 2})
    assert (res.leader, res.isr, res.unclean) == (1, [1], True)
    refused = OfflinePartitionLeaderSelector(unclean_enabled=False).select(part, {1, 2})
    assert (refused.leader, refused.leader_or_none, refused.isr, refused.unclean) == (None, -1, [3], False)


# -- reassign -------------------------------------------------------------------------------------


def test_reassign_elects_first_live_isr_member_of_target() -> None:
    assert reassign_partition_leader_election([4, 5, 6], [1, 5, 6], {4, 5, 6}) == 5


def test_reassign_target_not_in_isr() -> None:
    assert reassign_partition_leader_election([4, 5], [1, 2], {1, 2, 4, 5}) is None
    res = ReassignedPartitionLeaderSelector([4, 5]).select(PartitionLeadership([1, 2, 4, 5], [1, 2], 1), {1, 2, 4, 5})
    assert (res.leader, res.isr) == (None, [1, 2])


def test_reassign_selector_skips_dead_target_and_keeps_isr() -> None:
    res = ReassignedPartitionLeaderSelector([4, 5]).select(PartitionLeadership([1, 4, 5], [1, 4, 5], 1), {1, 5})
    assert (res.leader, res.isr) == (5, [1, 4, 5])


# -- preferred ------------------------------------------------------------------------------------


def test_preferred_elects_first_replica_when_alive_and_in_isr() -> None:
    assert preferred_replica_partition_leader_election([2, 1], [1, 2], {1, 2}) == 2
    res = PreferredReplicaPartitionLeaderSelector().select(PartitionLeadership([2, 1], [1, 2], 1), {1, 2})
    assert (res.leader, res.isr) == (2, [1, 2])


def test_preferred_not_alive() -> None:
    # No fallback to another replica: preferred election elects the preferred one or nobody.
    assert preferred_replica_partition_leader_election([2, 1], [1, 2], {1}) is None


def test_preferred_not_in_isr() -> None:
    assert preferred_replica_partition_leader_election([2, 1], [1], {1, 2}) is None
    res = PreferredReplicaPartitionLeaderSelector().select(PartitionLeadership([2, 1], [1], 1), {1, 2})
    assert (res.leader, res.isr) == (None, [1])


def test_preferred_empty_assignment() -> None:
    assert preferred_replica_partition_leader_election([], [], {1}) is None


# -- controlled shutdown --------------------------------------------------------------------------


def test_controlled_shutdown_of_the_leader_moves_leadership_and_shrinks_isr() -> None:
    assert controlled_shutdown_partition_leader_election([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1}) == 2
    sel = ControlledShutdownLeaderSelector(frozenset({1}))
    res = sel.select(PartitionLeadership([1, 2, 3], [1, 2, 3], 1), {1, 2, 3})
    assert (res.leader, res.isr) == (2, [2, 3])


def test_controlled_shutdown_of_a_follower_keeps_leader_and_drops_follower_from_isr() -> None:
    sel = ControlledShutdownLeaderSelector(frozenset({3}))
    res = sel.select(PartitionLeadership([1, 2, 3], [1, 2, 3], 1), {1, 2, 3})
    assert (res.leader, res.isr) == (1, [1, 2])


def test_controlled_shutdown_with_no_other_isr_member() -> None:
    assert controlled_shutdown_partition_leader_election([1, 2], [1], {1, 2}, {1}) is None
    res = ControlledShutdownLeaderSelector(frozenset({1})).select(PartitionLeadership([1, 2], [1], 1), {1, 2})
    assert (res.leader, res.isr) == (None, [1])


# -- no-op ----------------------------------------------------------------------------------------


def test_noop_selector_keeps_leader_and_isr() -> None:
    res = NoOpLeaderSelector().select(PartitionLeadership([1, 2], [2, 1], 2), {1})
    assert (res.leader, res.isr, res.unclean) == (2, [2, 1], False)
    none = NoOpLeaderSelector().select(PartitionLeadership([1, 2], [], -1), {1, 2})
    assert none.leader is None


@pytest.mark.parametrize(
    ("selector", "kind"),
    [
        (OfflinePartitionLeaderSelector(), ElectionType.OFFLINE),
        (ReassignedPartitionLeaderSelector([1]), ElectionType.REASSIGN),
        (PreferredReplicaPartitionLeaderSelector(), ElectionType.PREFERRED),
        (ControlledShutdownLeaderSelector(frozenset()), ElectionType.CONTROLLED_SHUTDOWN),
        (NoOpLeaderSelector(), ElectionType.NO_OP),
    ],
)
def test_selectors_name_their_kafka_strategy(selector: PartitionLeaderSelector, kind: ElectionType) -> None:
    assert selector.election_type is kind
