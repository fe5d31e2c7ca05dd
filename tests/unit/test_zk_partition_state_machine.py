"""ZkPartitionStateMachine: Kafka's legal transitions, each election strategy, zkVersion-conditional
writes retried on BADVERSION, and the requests each step adds to the batch."""

from __future__ import annotations

import logging

import pytest
from zk_controller_fakes import lai_sent, make_cluster, online_cluster, update_metadata_sent

from odradek.controller.controller_context import LeaderAndIsr, PartitionState
from odradek.controller.controller_zk_client import (
    ControllerMovedException,
    StateChangeFailedException,
)
from odradek.controller.partition_state_machine import (
    ControlledShutdownPartitionLeaderElectionStrategy,
    OfflinePartitionLeaderElectionStrategy,
    PreferredReplicaPartitionLeaderElectionStrategy,
    ReassignPartitionLeaderElectionStrategy,
)

P = PartitionState
T0 = ("t", 0)
T1 = ("t", 1)
OFFLINE = OfflinePartitionLeaderElectionStrategy(False)


def test_legal_and_illegal_transitions_table() -> None:
    legal = {
        (P.NonExistentPartition, P.NewPartition),
        (P.NewPartition, P.OnlinePartition), (P.OnlinePartition, P.OnlinePartition),
        (P.OfflinePartition, P.OnlinePartition),
        (P.NewPartition, P.OfflinePartition), (P.OnlinePartition, P.OfflinePartition),
        (P.OfflinePartition, P.OfflinePartition),
        (P.OfflinePartition, P.NonExistentPartition),
    }
    for target in P:
        for prev in P:
            assert (prev in target.valid_previous_states) == ((prev, target) in legal), (prev, target)


def test_illegal_transition_is_logged_and_refused(caplog: pytest.LogCaptureFixture) -> None:
    c = make_cluster()
    caplog.set_level(logging.ERROR, logger="odradek.state.change.logger")
    # NonExistent -> Online: refused, nothing written, nothing sent
    assert c.psm.handle_state_changes([T0], P.OnlinePartition, OFFLINE) == {}
    assert c.ctx.partition_state(T0) == P.NonExistentPartition
    assert c.zk.states == {} and c.sender.sent == []
    assert "should be in one of NewPartition,OfflinePartition,OnlinePartition states" in caplog.text
    # NonExistent -> Offline refused; -> New accepted; New -> NonExistent refused
    c.psm.handle_state_changes([T0], P.OfflinePartition)
    assert c.ctx.partition_state(T0) == P.NonExistentPartition
    c.psm.handle_state_changes([T0], P.NewPartition)
    assert c.ctx.partition_state(T0) == P.NewPartition
    c.psm.handle_state_changes([T0], P.NonExistentPartition)
    assert c.ctx.partition_state(T0) == P.NewPartition
    # a refused partition does not stop the valid ones of the same call
    c.psm.handle_state_changes([T0, T1], P.NewPartition)
    assert c.ctx.partition_state(T1) == P.NewPartition


def test_new_to_online_creates_state_znodes_and_sends_leader_and_isr_to_isr() -> None:
    c = make_cluster()
    c.broker_down(1)
    c.psm.handle_state_changes([T0, T1], P.NewPartition)
    assert c.sender.sent == []
    c.psm.handle_state_changes([T0, T1], P.OnlinePartition, OFFLINE)
    # first live replica leads, the live replicas are the ISR, epoch 0, written by controller epoch 5
    assert c.zk.leader_and_isr(T0) == LeaderAndIsr(2, (2, 3), 0, 0, 0)
    assert c.zk.leader_and_isr(T1) == LeaderAndIsr(2, (2, 3), 0, 0, 0)
    assert c.zk.states[T0][0].controller_epoch == 5
    assert c.ctx.partition_state(T0) == P.OnlinePartition
    sent = c.sender.take()
    assert {s.broker_id for s in sent if s.api_key == 4} == {2, 3}  # never the dead broker
    ps = lai_sent(sent, 3)[T0]
    assert ps["is_new"] is True and ps["leader"] == 2 and ps["isr"] == [2, 3] and ps["replicas"] == [1, 2, 3]
    um = update_metadata_sent(sent)
    assert sorted(um) == [2, 3]
    assert all(s.body["controller_epoch"] == 5 for s in sent)


def test_new_to_online_without_live_replica_fails_and_stays_new() -> None:
    c = make_cluster(topics={"t": {0: [1]}})
    c.broker_down(1)
    c.psm.handle_state_changes([T0], P.NewPartition)
    c.psm.handle_state_changes([T0], P.OnlinePartition, OFFLINE)
    assert c.ctx.partition_state(T0) == P.NewPartition
    assert c.zk.states == {} and c.sender.sent == []


def test_offline_election_moves_leader_to_next_live_isr_member() -> None:
    c = online_cluster()
    assert c.zk.leader_and_isr(T0).leader == 1
    c.broker_down(1)
    c.psm.handle_state_changes([T0], P.OfflinePartition)
    result = c.psm.handle_state_changes([T0], P.OnlinePartition, OFFLINE)
    new = result[T0]
    assert isinstance(new, LeaderAndIsr)
    assert (new.leader, new.isr, new.leader_epoch, new.partition_epoch) == (2, (2, 3), 1, 1)
    assert c.zk.leader_and_isr(T0) == new
    assert c.ctx.partition_leadership_info(T0).leader_and_isr == new  # type: ignore[union-attr]
    assert c.ctx.partition_state(T0) == P.OnlinePartition
    sent = c.sender.take()
    assert {s.broker_id for s in sent if s.api_key == 4} == {2, 3}
    assert lai_sent(sent, 2)[T0]["partition_epoch"] == 1 and lai_sent(sent, 2)[T0]["is_new"] is False


def test_offline_election_without_live_isr_fails_when_unclean_disabled(caplog: pytest.LogCaptureFixture) -> None:
    c = online_cluster()
    c.zk.external_write(T0, LeaderAndIsr(1, (1,), 3), 5)  # ISR shrank to the leader alone
    c.broker_down(1)
    c.psm.handle_state_changes([T0], P.OfflinePartition)
    caplog.set_level(logging.INFO, logger="odradek.state.change.logger")
    result = c.psm.handle_state_changes([T0], P.OnlinePartition, OFFLINE)
    assert isinstance(result[T0], StateChangeFailedException)
    # Kafka's words: the partition as TopicPartition.toString writes it, the strategy as its case class
    assert str(result[T0]) == "Failed to elect leader for partition t-0 under strategy " \
        "OfflinePartitionLeaderElectionStrategy(false)"
    assert "failed to change state for partition t-0 from OfflinePartition to OnlinePartition" in caplog.text
    assert c.ctx.partition_state(T0) == P.OfflinePartition
    assert c.zk.writes == [] and c.sender.sent == []


@pytest.mark.parametrize("how", ["strategy", "topic_config"])
def test_unclean_offline_election_marks_leader_recovering(how: str) -> None:
    c = online_cluster()
    c.zk.external_write(T0, LeaderAndIsr(1, (1,), 3), 5)
    c.broker_down(1)
    c.psm.handle_state_changes([T0], P.OfflinePartition)
    if how == "topic_config":
        c.zk.unclean_config["t"] = True
    strategy = OfflinePartitionLeaderElectionStrategy(how == "strategy")
    new = c.psm.handle_state_changes([T0], P.OnlinePartition, strategy)[T0]
    assert isinstance(new, LeaderAndIsr)
    assert (new.leader, new.isr, new.leader_epoch, new.leader_recovery_state) == (2, (2,), 4, 1)
    assert lai_sent(c.sender.take(), 2)[T0]["leader_recovery_state"] == 1


def test_preferred_election_only_when_preferred_replica_in_isr() -> None:
    c = online_cluster()
    c.broker_down(1)
    c.psm.handle_state_changes([T0], P.OfflinePartition)
    c.psm.handle_state_changes([T0], P.OnlinePartition, OFFLINE)
    c.sender.take()
    c.broker_up(1)
    # 1 is back but not in the ISR yet: no preferred election
    failed = c.psm.handle_state_changes([T0], P.OnlinePartition, PreferredReplicaPartitionLeaderElectionStrategy())
    assert isinstance(failed[T0], StateChangeFailedException)
    # the leader adds 1 back to the ISR (its own write), then the preferred election succeeds
    cur = c.zk.leader_and_isr(T0)
    c.zk.external_write(T0, LeaderAndIsr(cur.leader, (2, 3, 1), cur.leader_epoch), 5)
    new = c.psm.handle_state_changes([T0], P.OnlinePartition, PreferredReplicaPartitionLeaderElectionStrategy())[T0]
    assert isinstance(new, LeaderAndIsr) and new.leader == 1 and new.isr == (2, 3, 1) and new.leader_epoch == 2
    assert {s.broker_id for s in c.sender.sent if s.api_key == 4} == {1, 2, 3}  # the whole assignment


def test_reassign_election_chooses_among_target_replicas() -> None:
    c = online_cluster(brokers=(1, 2, 3, 4), topics={"t": {0: [1, 2, 3]}})
    full = c.ctx.partition_full_replica_assignment(T0).reassign_to([4, 3])
    c.ctx.update_partition_full_replica_assignment(T0, full)
    assert full.replicas == (4, 3, 1, 2) and full.adding_replicas == (4,) and full.removing_replicas == (1, 2)
    c.zk.external_write(T0, LeaderAndIsr(1, (1, 2, 3, 4), 0), 5)  # 4 caught up
    new = c.psm.handle_state_changes([T0], P.OnlinePartition, ReassignPartitionLeaderElectionStrategy())[T0]
    assert isinstance(new, LeaderAndIsr) and new.leader == 4 and new.isr == (1, 2, 3, 4)
    sent = c.sender.take()
    assert {s.broker_id for s in sent if s.api_key == 4} == {4, 3}
    ps = lai_sent(sent, 4)[T0]
    assert ps["adding_replicas"] == [4] and ps["removing_replicas"] == [1, 2]


def test_controlled_shutdown_election_moves_leader_off_and_shrinks_isr() -> None:
    c = online_cluster()
    c.ctx.shutting_down_broker_ids.add(1)
    new = c.psm.handle_state_changes(
        [T0], P.OnlinePartition, ControlledShutdownPartitionLeaderElectionStrategy()
    )[T0]
    assert isinstance(new, LeaderAndIsr) and new.leader == 2 and new.isr == (2, 3) and new.leader_epoch == 1
    # the shutting-down broker still gets the LeaderAndIsr (it becomes a follower)
    assert {s.broker_id for s in c.sender.sent if s.api_key == 4} == {1, 2, 3}


def test_bad_zk_version_is_reread_and_retried() -> None:
    c = online_cluster()
    c.broker_down(1)
    c.psm.handle_state_changes([T0], P.OfflinePartition)

    def leader_shrinks_isr(zk):  # noqa: ANN001 - the fake
        # between the controller's read and its write the ISR changed (3 fell out)
        zk.external_write(T0, LeaderAndIsr(1, (1, 2), 0), 5)

    c.zk.before_update = leader_shrinks_isr
    new = c.psm.handle_state_changes([T0], P.OnlinePartition, OFFLINE)[T0]
    assert c.zk.bad_version_attempts == 1
    assert isinstance(new, LeaderAndIsr)
    # the retry saw the new ISR: 3 is not in it any more
    assert (new.leader, new.isr, new.leader_epoch, new.partition_epoch) == (2, (2,), 1, 2)
    assert c.zk.leader_and_isr(T0) == new


def test_state_written_by_newer_controller_aborts_election() -> None:
    c = online_cluster()
    c.zk.external_write(T0, LeaderAndIsr(1, (1, 2, 3), 0), 6)  # controller epoch 6 > ours (5)
    c.broker_down(1)
    c.psm.handle_state_changes([T0], P.OfflinePartition)
    result = c.psm.handle_state_changes([T0], P.OnlinePartition, OFFLINE)
    assert isinstance(result[T0], StateChangeFailedException)
    assert "already written by another controller" in str(result[T0])
    assert c.zk.writes == []


def test_controller_moved_propagates_and_sends_nothing() -> None:
    c = online_cluster()
    c.zk.controller_epoch_zk_version += 1  # another controller bumped /controller_epoch
    c.broker_down(1)
    c.psm.handle_state_changes([T0], P.OfflinePartition)
    with pytest.raises(ControllerMovedException):
        c.psm.handle_state_changes([T0], P.OnlinePartition, OFFLINE)
    assert c.sender.sent == [] and c.batch.is_empty()


def test_startup_initializes_states_and_elects_for_offline_partitions() -> None:
    c = online_cluster()
    leadership = c.ctx.partitions_leadership_info
    # a new controller: the context is loaded from ZooKeeper; broker 2 (leader of t-1) is gone
    from zk_controller_fakes import make_cluster as mk

    d = mk()
    d.zk = c.zk
    d.psm.zk = c.zk
    for tp, info in leadership.items():
        d.ctx.put_partition_leadership_info(tp, info)
    d.broker_down(2)
    d.psm.startup()
    assert d.ctx.partition_state(T0) == P.OnlinePartition
    assert d.ctx.partition_state(T1) == P.OnlinePartition
    assert c.zk.leader_and_isr(T1).leader == 3 and c.zk.leader_and_isr(T1).leader_epoch == 1
    assert c.zk.leader_and_isr(T0).leader_epoch == 0  # its leader (1) is alive: untouched
