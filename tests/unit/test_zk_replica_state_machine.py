"""ZkReplicaStateMachine: Kafka's legal transitions, OfflineReplica's conditional ISR removal (with
BADVERSION retries), and the requests of Kafka's broker-failure flow (onReplicasBecomeOffline)."""

from __future__ import annotations

import logging

import pytest
from zk_controller_fakes import (
    lai_sent,
    make_cluster,
    online_cluster,
    stop_replica_sent,
    update_metadata_sent,
)

from odradek.controller.controller_context import (
    LeaderAndIsr,
    PartitionAndReplica,
    PartitionState,
    ReplicaState,
)
from odradek.controller.partition_state_machine import OfflinePartitionLeaderElectionStrategy

R = ReplicaState
T0 = ("t", 0)
T1 = ("t", 1)


def test_legal_transitions_table() -> None:
    legal = {
        (R.NonExistentReplica, R.NewReplica),
        *((p, R.OnlineReplica) for p in (R.NewReplica, R.OnlineReplica, R.OfflineReplica, R.ReplicaDeletionIneligible)),
        *((p, R.OfflineReplica) for p in (R.NewReplica, R.OnlineReplica, R.OfflineReplica, R.ReplicaDeletionIneligible)),
        (R.OfflineReplica, R.ReplicaDeletionStarted),
        (R.ReplicaDeletionStarted, R.ReplicaDeletionSuccessful),
        (R.OfflineReplica, R.ReplicaDeletionIneligible), (R.ReplicaDeletionStarted, R.ReplicaDeletionIneligible),
        (R.ReplicaDeletionSuccessful, R.NonExistentReplica),
    }
    for target in R:
        for prev in R:
            assert (prev in target.valid_previous_states) == ((prev, target) in legal), (prev, target)


def test_illegal_transitions_are_logged_and_refused(caplog: pytest.LogCaptureFixture) -> None:
    c = online_cluster()
    r = PartitionAndReplica(T0, 2)
    caplog.set_level(logging.ERROR, logger="odradek.state.change.logger")
    c.rsm.handle_state_changes([r], R.ReplicaDeletionStarted)  # Online -> DeletionStarted: illegal
    assert c.ctx.replica_state(r) == R.OnlineReplica
    assert c.sender.sent == []
    assert "should be in the OfflineReplica states before moving to ReplicaDeletionStarted" in caplog.text
    c.rsm.handle_state_changes([r], R.NonExistentReplica)  # Online -> NonExistent: illegal
    assert c.ctx.replica_state(r) == R.OnlineReplica
    assert 2 in c.ctx.partition_replica_assignment(T0)
    fresh = PartitionAndReplica(("t", 7), 3)  # unknown replica: NonExistent -> Online illegal
    c.rsm.handle_state_changes([fresh], R.OnlineReplica)
    assert c.ctx.replica_state(fresh) == R.NonExistentReplica


def test_new_replica_of_a_led_partition_gets_leader_and_isr_is_new() -> None:
    c = online_cluster(brokers=(1, 2, 3, 4))
    r = PartitionAndReplica(T0, 4)
    c.rsm.handle_state_changes([r], R.NewReplica)
    assert c.ctx.replica_state(r) == R.NewReplica
    ps = lai_sent(c.sender.take(), 4)[T0]
    assert ps["is_new"] is True and ps["leader"] == 1
    # the leader itself can't be a NewReplica
    leader = PartitionAndReplica(T0, 1)
    c.ctx.remove_replica_state(leader)
    c.rsm.handle_state_changes([leader], R.NewReplica)
    assert c.ctx.replica_state(leader) == R.NonExistentReplica
    assert c.sender.sent == []
    # New -> Online: a replica missing from the assignment is added to it
    c.rsm.handle_state_changes([r], R.OnlineReplica)
    assert c.ctx.partition_replica_assignment(T0) == (1, 2, 3, 4)


def test_offline_replica_leaves_isr_by_conditional_write_and_gets_stop_replica() -> None:
    c = online_cluster()
    r = PartitionAndReplica(T0, 3)  # a follower of t-0 (leader 1)
    c.rsm.handle_state_changes([r], R.OfflineReplica)
    assert c.ctx.replica_state(r) == R.OfflineReplica
    assert c.zk.leader_and_isr(T0) == LeaderAndIsr(1, (1, 2), 1, 0, 1)
    sent = c.sender.take()
    # added before the ISR write, as in Kafka: it carries the leader epoch of that moment
    assert stop_replica_sent(sent, 3)[T0] == {"partition_index": 0, "leader_epoch": 0, "delete_partition": False}
    assert {s.broker_id for s in sent if s.api_key == 4} == {1, 2}
    assert lai_sent(sent, 1)[T0]["isr"] == [1, 2]
    assert sorted(update_metadata_sent(sent)) == [1, 2, 3]


def test_offline_leader_replica_leaves_leadership_and_last_isr_member_stays() -> None:
    c = online_cluster(topics={"t": {0: [1, 2], 1: [2]}})
    c.rsm.handle_state_changes([PartitionAndReplica(T0, 1)], R.OfflineReplica)
    assert c.zk.leader_and_isr(T0) == LeaderAndIsr(-1, (2,), 1, 0, 1)
    c.rsm.handle_state_changes([PartitionAndReplica(T1, 2)], R.OfflineReplica)
    assert c.zk.leader_and_isr(T1) == LeaderAndIsr(-1, (2,), 1, 0, 1)  # ISR of one is kept


def test_isr_removal_retries_on_bad_zk_version() -> None:
    c = online_cluster()

    def leader_expands_isr(zk):  # noqa: ANN001
        zk.external_write(T0, LeaderAndIsr(1, (1, 2, 3), 0), 5)

    c.zk.before_update = leader_expands_isr
    c.rsm.handle_state_changes([PartitionAndReplica(T0, 2)], R.OfflineReplica)
    assert c.zk.bad_version_attempts == 1
    assert c.zk.leader_and_isr(T0) == LeaderAndIsr(1, (1, 3), 1, 0, 2)
    assert c.ctx.partition_leadership_info(T0).leader_and_isr.partition_epoch == 2  # type: ignore[union-attr]


def test_deletion_states_stop_replica_with_delete_and_nonexistent_removes_from_assignment() -> None:
    c = online_cluster()
    r = PartitionAndReplica(T0, 3)
    c.rsm.handle_state_changes([r], R.OfflineReplica)
    c.sender.take()
    c.rsm.handle_state_changes([r], R.ReplicaDeletionStarted)
    assert stop_replica_sent(c.sender.take(), 3)[T0]["delete_partition"] is True
    c.rsm.handle_state_changes([r], R.ReplicaDeletionSuccessful)
    c.rsm.handle_state_changes([r], R.NonExistentReplica)
    assert r not in c.ctx.replica_states
    assert c.ctx.partition_replica_assignment(T0) == (1, 2)


def test_broker_down_flow_sends_what_kafka_would() -> None:
    """Kafka 3.9 KafkaController.onBrokerFailure -> onReplicasBecomeOffline: partitions led by the
    dead broker go Offline, then Online (offline election), then its replicas go OfflineReplica."""
    c = online_cluster()  # t-0 led by 1 (replicas 1,2,3), t-1 led by 2 (replicas 2,3,1)
    c.broker_down(1)
    dead = sorted(c.ctx.replicas_on_brokers({1}), key=lambda r: r.topic_partition)
    offline_leaders = sorted(c.ctx.partitions_with_offline_leader())
    assert offline_leaders == [T0]
    c.psm.handle_state_changes(offline_leaders, PartitionState.OfflinePartition)
    assert c.ctx.offline_partition_count == 1
    results = c.psm.trigger_online_partition_state_change()
    assert c.ctx.offline_partition_count == 0
    first = c.sender.take()
    c.rsm.handle_state_changes(dead, R.OfflineReplica)
    second = c.sender.take()

    # round 1: t-0's new leader 2 (epoch 1, ISR 2,3) to the live replicas, UpdateMetadata to 2 and 3
    assert isinstance(results[T0], LeaderAndIsr)
    assert {s.broker_id for s in first if s.api_key == 4} == {2, 3}
    assert lai_sent(first, 2)[T0] | {} == {
        "partition_index": 0, "controller_epoch": 5, "leader": 2, "leader_epoch": 1, "isr": [2, 3],
        "partition_epoch": 1, "replicas": [1, 2, 3], "adding_replicas": [], "removing_replicas": [],
        "is_new": False, "leader_recovery_state": 0,
    }
    um = update_metadata_sent(first)
    assert sorted(um) == [2, 3]
    (st,) = [p for ts in um[2][0]["topic_states"] for p in ts["partition_states"]]
    assert st["offline_replicas"] == [1] and st["leader"] == 2
    # round 2: 1 leaves t-1's ISR (leader 2 kept, epoch +1); no StopReplica to the dead broker
    assert c.zk.leader_and_isr(T1) == LeaderAndIsr(2, (2, 3), 1, 0, 1)
    assert c.zk.leader_and_isr(T0) == LeaderAndIsr(2, (2, 3), 1, 0, 1)  # 1 was already out of it
    assert all(s.broker_id != 1 for s in first + second)
    assert {s.broker_id for s in second if s.api_key == 4} == {2, 3}
    assert lai_sent(second, 3)[T1]["isr"] == [2, 3] and lai_sent(second, 3)[T1]["leader_epoch"] == 1
    assert {r: c.ctx.replica_state(r) for r in dead} == dict.fromkeys(dead, R.OfflineReplica)


def test_broker_back_flow_replicas_online_get_leader_and_isr() -> None:
    """Kafka's onBrokerStartup: the returning broker's replicas go OnlineReplica (LeaderAndIsr to it)."""
    c = online_cluster()
    c.broker_down(1)
    c.psm.handle_state_changes([T0], PartitionState.OfflinePartition)
    c.psm.trigger_online_partition_state_change()
    dead = sorted(c.ctx.replicas_on_brokers({1}), key=lambda r: r.topic_partition)
    c.rsm.handle_state_changes(dead, R.OfflineReplica)
    c.sender.take()
    c.broker_up(1)
    c.rsm.handle_state_changes(dead, R.OnlineReplica)
    sent = c.sender.take()
    to1 = lai_sent(sent, 1)
    assert to1[T0]["leader"] == 2 and to1[T1]["leader"] == 2
    assert {s.broker_id for s in sent if s.api_key == 4} == {1}
    # the new broker epoch is what the request carries
    assert [s.body["broker_epoch"] for s in sent if s.api_key == 4] == [1001]


def test_startup_marks_replicas_of_dead_brokers_and_takes_them_offline() -> None:
    c = make_cluster()
    c.psm.handle_state_changes(sorted(c.ctx.all_partitions()), PartitionState.NewPartition)
    c.psm.handle_state_changes(
        sorted(c.ctx.all_partitions()), PartitionState.OnlinePartition, OfflinePartitionLeaderElectionStrategy()
    )
    c.sender.take()
    c.broker_down(3)
    c.rsm.startup()
    assert c.ctx.replica_state(PartitionAndReplica(T0, 3)) == R.OfflineReplica
    assert c.ctx.replica_state(PartitionAndReplica(T0, 1)) == R.OnlineReplica
    assert 3 not in c.zk.leader_and_isr(T0).isr and 3 not in c.zk.leader_and_isr(T1).isr
