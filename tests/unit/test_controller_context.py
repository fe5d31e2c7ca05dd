"""ControllerContext (ZooKeeper mode): brokers and their epochs, shutting-down brokers, replica
assignments with reassignment, leadership, offline dirs, deletion sets, state maps, reset."""

from __future__ import annotations

import uuid

import pytest
from zk_controller_fakes import broker

from odradek.controller.controller_context import (
    EPOCH_DURING_DELETE,
    NO_EPOCH,
    ControllerContext,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    PartitionAndReplica,
    PartitionState,
    ReplicaAssignment,
    ReplicaState,
)

T0 = ("t", 0)
T1 = ("t", 1)


def ctx_with_topic() -> ControllerContext:
    c = ControllerContext(epoch=3, epoch_zk_version=2)
    c.set_live_brokers({broker(1): 11, broker(2): 12, broker(3): 13})
    c.set_all_topics({"t"})
    c.update_partition_full_replica_assignment(T0, ReplicaAssignment.of([1, 2]))
    c.update_partition_full_replica_assignment(T1, ReplicaAssignment.of([2, 3]))
    return c


def test_live_and_shutting_down_brokers_and_epochs() -> None:
    c = ctx_with_topic()
    c.shutting_down_broker_ids.add(2)
    assert c.live_broker_ids == {1, 3}
    assert c.live_or_shutting_down_broker_ids == {1, 2, 3}
    assert not c.is_live_broker(2) and c.is_live_broker(1)
    assert c.live_broker_id_and_epochs == {1: 11, 2: 12, 3: 13}
    assert not c.is_replica_online(2, T0)
    assert c.is_replica_online(2, T0, include_shutting_down_brokers=True)
    c.remove_live_brokers([3])
    assert c.live_or_shutting_down_broker_ids == {1, 2}
    with pytest.raises(KeyError):
        c.broker_epoch(3)
    c.add_live_brokers({broker(3): 99})  # re-registered: new czxid, new epoch
    assert c.broker_epoch(3) == 99
    assert [b.id for b in c.live_or_shutting_down_brokers] == [1, 2, 3]


def test_replicas_on_offline_dirs_are_offline() -> None:
    c = ctx_with_topic()
    c.replicas_on_offline_dirs[2] = {T1}
    assert not c.is_replica_online(2, T1) and c.is_replica_online(2, T0)
    online, offline = c.online_and_offline_replicas()
    assert offline == {PartitionAndReplica(T1, 2)}
    assert len(online) == 3


def test_reassignment_adding_and_removing_replicas() -> None:
    a = ReplicaAssignment.of([1, 2, 3]).reassign_to([3, 4, 5])
    assert a.replicas == (3, 4, 5, 1, 2)
    assert a.adding_replicas == (4, 5) and a.removing_replicas == (1, 2)
    assert a.origin_replicas == (3, 1, 2) and a.target_replicas == (3, 4, 5)
    assert a.is_being_reassigned
    b = a.remove_replica(1)
    assert b.replicas == (3, 4, 5, 2) and b.removing_replicas == (2,)
    assert not ReplicaAssignment.of([1]).is_being_reassigned


def test_topic_ids_are_checked() -> None:
    c = ctx_with_topic()
    tid = uuid.uuid4()
    c.add_topic_id("t", tid)
    assert c.topic_name(tid) == "t"
    with pytest.raises(ValueError):
        c.add_topic_id("t", uuid.uuid4())
    with pytest.raises(ValueError):
        c.add_topic_id("unknown", uuid.uuid4())


def test_leadership_and_leader_epoch_sentinels() -> None:
    c = ctx_with_topic()
    assert c.leader_epoch(T0) == NO_EPOCH
    c.put_partition_leadership_info(T0, LeaderIsrAndControllerEpoch(LeaderAndIsr(1, (1, 2), 4), 3))
    c.put_partition_leadership_info(T1, LeaderIsrAndControllerEpoch(LeaderAndIsr(3, (2, 3), 1), 3))
    assert c.leader_epoch(T0) == 4
    assert c.partition_leaders_on_broker(1) == {T0}
    assert c.preferred_replica_imbalance_count() == 1  # t-1 led by 3, preferred 2
    c.remove_live_brokers([1])
    assert c.partitions_with_offline_leader() == {T0}
    c.queue_topic_deletion({"t"})
    assert c.leader_epoch(T0) == EPOCH_DURING_DELETE
    assert c.partitions_with_offline_leader() == set()  # deleted topics don't count
    assert c.preferred_replica_imbalance_count() == 0


def test_partition_state_offline_count_not_kept_for_topics_being_deleted() -> None:
    c = ctx_with_topic()
    c.put_partition_state_if_not_exists(T0, PartitionState.NonExistentPartition)
    c.put_partition_state(T0, PartitionState.OfflinePartition)
    c.put_partition_state(T1, PartitionState.OfflinePartition)
    assert c.offline_partition_count == 2
    c.put_partition_state(T1, PartitionState.OnlinePartition)
    assert c.offline_partition_count == 1
    c.begin_topic_deletion({"t"})
    c.put_partition_state(T0, PartitionState.NonExistentPartition)
    assert c.offline_partition_count == 1  # not touched once deletion started
    assert c.partitions_in_states({PartitionState.OnlinePartition}) == {T1}


def test_replica_states_queries_and_deletion_sets_and_remove_topic() -> None:
    c = ctx_with_topic()
    for r in c.replicas_for_topic("t"):
        c.put_replica_state(r, ReplicaState.ReplicaDeletionSuccessful)
    c.put_replica_state(PartitionAndReplica(T1, 3), ReplicaState.ReplicaDeletionStarted)
    assert not c.are_all_replicas_in_state("t", ReplicaState.ReplicaDeletionSuccessful)
    assert c.is_any_replica_in_state("t", ReplicaState.ReplicaDeletionStarted)
    assert c.replicas_in_state("t", ReplicaState.ReplicaDeletionStarted) == {PartitionAndReplica(T1, 3)}
    c.queue_topic_deletion({"t"})
    c.topics_ineligible_for_deletion.add("t")
    assert c.is_topic_queued_up_for_deletion("t") and not c.is_topic_eligible_for_deletion("t")
    c.remove_topic("t")
    assert c.all_topics == set() and c.all_partitions() == set()
    assert not c.is_topic_queued_up_for_deletion("t") and c.topics_ineligible_for_deletion == set()


def test_reset_context_forgets_everything() -> None:
    c = ctx_with_topic()
    c.shutting_down_broker_ids.add(1)
    c.put_partition_state(T0, PartitionState.OfflinePartition)
    c.put_partition_leadership_info(T0, LeaderIsrAndControllerEpoch(LeaderAndIsr(1, (1,)), 3))
    c.reset_context()
    assert (c.epoch, c.epoch_zk_version) == (0, 0)
    assert c.live_or_shutting_down_broker_ids == set() and c.shutting_down_broker_ids == set()
    assert c.all_partitions() == set() and c.partitions_leadership_info == {}
    assert c.partition_states == {} and c.offline_partition_count == 0
