"""KafkaController (ZooKeeper mode) over a fake ZooKeeper and a recording channel manager:
election and failover in Kafka's order, broker failure / startup / bounce, new topics, controlled
shutdown, AlterPartition, preferred elections (ZooKeeper, admin, automatic), topic deletion with a
broker down, and epoch fencing (a controller whose epoch-checked write fails resigns)."""

from __future__ import annotations

from typing import Any

from odradek.controller import controller_event_manager as ev
from odradek.controller.controller_context import LeaderAndIsr, LeaderIsrAndControllerEpoch
from odradek.controller.kafka_controller import AlterPartitionReceived
from odradek.controller.zk_leader_movements import (
    PREFERRED,
    StaleBrokerEpochError,
)
from odradek.protocol.errors import Errors
from tests.unit.kafka_controller_fakes import FakeControllerZk, Harness
from tests.unit.zk_controller_fakes import (
    broker_epoch,
    lai_sent,
    stop_replica_sent,
    update_metadata_sent,
)


def cluster(brokers: tuple[int, ...] = (1, 2, 3)) -> FakeControllerZk:
    zk = FakeControllerZk()
    for b in brokers:
        zk.add_broker(b)
    zk.add_topic("t", {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
    return zk


def leader(zk: FakeControllerZk, tp: tuple[str, int]) -> LeaderAndIsr:
    return zk.leader_and_isr(tp)


def test_elect_wins_and_fails_over_in_kafkas_order() -> None:
    zk = cluster()
    zk.preferred = {("t", 0)}
    h = Harness(zk, 1)
    h.start()
    c = h.controller
    assert c.is_active and c.epoch == 1 and c.context.epoch_zk_version == 1
    calls = [x for x in zk.calls if x != "get_topic_partition_states"]
    order = ["watch_controller", "get_controller_id", "register_controller_and_increment_controller_epoch",
             "register_controller_watches", "delete_log_dir_event_notifications",
             "delete_isr_change_notifications", "get_all_broker_and_epochs", "get_all_topics",
             "watch_partition_modifications", "get_replica_assignment_and_topic_ids", "get_topic_deletions",
             "get_partition_reassignment", "get_preferred_replica_election", "delete_preferred_replica_election"]
    assert calls == order
    # the channel knows the brokers before anything is sent; UpdateMetadata (no partitions) goes to every
    # live broker before the state machines' LeaderAndIsr
    assert h.channel.log[0] == "startup"
    sent = h.channel.take()
    first_three = sent[:3]
    assert [(s.api_key, s.broker_id) for s in first_three] == [(6, 1), (6, 2), (6, 3)]
    assert all(s.body["topic_states"] == [] and len(s.body["live_brokers"]) == 3 for s in first_three)
    assert {s.broker_id for s in sent if s.api_key == 4} == {1, 2, 3}
    assert all(s.body["controller_epoch"] == 1 and s.body["controller_id"] == 1 for s in sent)
    assert all(s.body["broker_epoch"] == broker_epoch(s.broker_id) for s in sent)
    assert c.context.partition_leadership_info(("t", 1)) is not None
    assert h.scheduler.scheduled and h.scheduler.scheduled[0][0] == 5
    assert isinstance(h.scheduler.scheduled[0][1], ev.AutoPreferredReplicaLeaderElection)
    assert zk.preferred is None  # the znode was consumed


def test_second_controller_loses_and_takes_over_with_epoch_plus_one() -> None:
    zk = cluster()
    a, b = Harness(zk, 1), Harness(zk, 2)
    a.start()
    b.start()
    assert a.controller.is_active and not b.controller.is_active
    assert b.controller.active_controller_id == 1
    assert b.view.watches is None and b.view.controller_watch is not None and not b.channel.sent
    # /controller goes away (a's session died): b's watch fires Reelect
    zk.controller = None
    a.put(ev.Expire())
    a.run()
    assert not a.controller.is_active and a.view.watches is None and "shutdown" in a.channel.log
    b.put(ev.Reelect())
    b.run()
    assert b.controller.is_active and b.controller.epoch == 2


def test_broker_failure_elects_new_leaders_and_broker_startup_returns_them() -> None:
    zk = cluster()
    h = Harness(zk, 1)
    h.start()
    h.channel.take()
    before = leader(zk, ("t", 1))
    assert before.leader == 2
    del zk.brokers[2]
    h.put(ev.BrokerChange())
    h.run()
    after = leader(zk, ("t", 1))
    assert after.leader == 3 and after.leader_epoch == before.leader_epoch + 1 and 2 not in after.isr
    assert 2 not in leader(zk, ("t", 0)).isr
    assert "remove 2" in h.channel.log
    sent = h.channel.take()
    assert lai_sent(sent, 3)[("t", 1)]["leader"] == 3
    assert not [s for s in sent if s.broker_id == 2]
    # broker 2 comes back with a new registration (epoch)
    zk.add_broker(2, epoch=5000)
    h.put(ev.BrokerChange())
    h.run()
    assert "add 2" in h.channel.log
    sent = h.channel.take()
    ums = update_metadata_sent(sent)
    assert ums[1][0]["topic_states"] == [] and ums[2][0]["topic_states"]  # full state for the new broker
    assert ums[2][0]["broker_epoch"] == 5000
    lai = lai_sent(sent, 2)
    assert set(lai) == {("t", 0), ("t", 1), ("t", 2)}
    assert h.controller.context.broker_epoch(2) == 5000


def test_bounced_broker_is_failed_then_started() -> None:
    zk = cluster()
    h = Harness(zk, 1)
    h.start()
    h.channel.take()
    zk.add_broker(3, epoch=9999)  # restarted within the session timeout: same id, higher epoch
    h.put(ev.BrokerChange())
    h.run()
    log = h.channel.log
    assert log.index("remove 3") < log.index("add 3")
    assert leader(zk, ("t", 2)).leader != 3 or leader(zk, ("t", 2)).leader_epoch > 0
    assert h.controller.context.broker_epoch(3) == 9999


def test_new_topic_partitions_created() -> None:
    zk = cluster()
    h = Harness(zk, 1)
    h.start()
    h.channel.take()
    zk.add_topic("u", {0: [2, 3], 1: [3, 1]}, with_states=False)
    h.put(ev.TopicChange())
    h.run()
    assert leader(zk, ("u", 0)).leader == 2 and leader(zk, ("u", 1)).isr == (3, 1)
    assert zk.states[("u", 0)][0].controller_epoch == 1
    sent = h.channel.take()
    assert lai_sent(sent, 3)[("u", 0)]["is_new"] is True
    assert "u" in h.view.watched_topics


def test_controlled_shutdown_moves_leaders_first_and_stops_followers() -> None:
    zk = cluster()
    h = Harness(zk, 1)
    h.start()
    h.channel.take()
    answers: list[Any] = []
    h.put(ev.ControlledShutdown(broker_id=2, broker_epoch=broker_epoch(2), callback=answers.append))
    h.run()
    assert answers == [set()]  # nothing left led by broker 2
    assert leader(zk, ("t", 1)).leader == 3 and 2 not in leader(zk, ("t", 1)).isr
    assert 2 not in leader(zk, ("t", 0)).isr and leader(zk, ("t", 0)).leader == 1
    sent = h.channel.take()
    stops = stop_replica_sent(sent, 2)
    assert ("t", 0) in stops and stops[("t", 0)]["delete_partition"] is False
    assert 2 in h.controller.context.shutting_down_broker_ids
    # the leader elections (LeaderAndIsr) are sent before broker 2's StopReplica
    first_stop = next(i for i, s in enumerate(sent) if s.api_key == 5)
    assert any(s.api_key == 4 for s in sent[:first_stop])
    # a stale broker epoch is refused
    answers.clear()
    h.put(ev.ControlledShutdown(broker_id=3, broker_epoch=broker_epoch(3) - 1, callback=answers.append))
    h.run()
    assert isinstance(answers[0], StaleBrokerEpochError)


def alter(tp: tuple[str, int], lai: LeaderAndIsr, isr: list[int], topic_id: Any) -> dict[str, Any]:
    return {
        "broker_id": lai.leader, "broker_epoch": broker_epoch(lai.leader),
        "topics": [{"topic_id": topic_id, "partitions": [{
            "partition_index": tp[1], "leader_epoch": lai.leader_epoch,
            "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": broker_epoch(b)} for b in isr],
            "leader_recovery_state": 0, "partition_epoch": lai.partition_epoch,
        }]}],
    }


def test_alter_partition_writes_conditionally_and_answers_the_new_zk_version() -> None:
    zk = cluster()
    h = Harness(zk, 1)
    h.start()
    h.channel.take()
    tp = ("t", 0)
    cur = leader(zk, tp)
    tid = zk.topics["t"][0]
    got: list[dict[str, Any]] = []
    h.put(AlterPartitionReceived(request=alter(tp, cur, [1, 2], tid), version=3, callback=got.append))
    h.run()
    part = got[0]["topics"][0]["partitions"][0]
    assert got[0]["error_code"] == 0 and part["error_code"] == 0
    now = leader(zk, tp)
    assert now.isr == (1, 2) and part["partition_epoch"] == now.partition_epoch == cur.partition_epoch + 1
    assert part["isr"] == [1, 2] and part["leader_epoch"] == cur.leader_epoch
    ums = update_metadata_sent(h.channel.take())
    assert ums[3][0]["topic_states"][0]["partition_states"][0]["isr"] == [1, 2]
    # the same request again: the partition epoch is stale (INVALID_UPDATE_VERSION unless identical)
    got.clear()
    h.put(AlterPartitionReceived(request=alter(tp, cur, [1], tid), version=3, callback=got.append))
    h.run()
    assert got[0]["topics"][0]["partitions"][0]["error_code"] == Errors.INVALID_UPDATE_VERSION
    # a stale broker epoch: the whole request
    got.clear()
    req = alter(tp, now, [1], tid)
    req["broker_epoch"] = 1
    h.put(AlterPartitionReceived(request=req, version=3, callback=got.append))
    h.run()
    assert got[0]["error_code"] == Errors.STALE_BROKER_EPOCH
    # an old leader epoch
    got.clear()
    h.put(AlterPartitionReceived(request=alter(tp, LeaderAndIsr(1, (1,), -1 + now.leader_epoch, 0, now.partition_epoch),
                                                [1], tid), version=3, callback=got.append))
    h.run()
    assert got[0]["topics"][0]["partitions"][0]["error_code"] == Errors.FENCED_LEADER_EPOCH
    # a dead broker in the new ISR
    del zk.brokers[3]
    h.put(ev.BrokerChange())
    h.run()
    now = leader(zk, tp)
    got.clear()
    h.put(AlterPartitionReceived(request=alter(tp, now, [1, 2, 3], tid), version=3, callback=got.append))
    h.run()
    assert got[0]["topics"][0]["partitions"][0]["error_code"] == Errors.INELIGIBLE_REPLICA
    assert leader(zk, tp) == now


def test_alter_partition_to_a_non_controller() -> None:
    zk = cluster()
    a, b = Harness(zk, 1), Harness(zk, 2)
    a.start()
    b.start()
    got: list[dict[str, Any]] = []
    b.put(AlterPartitionReceived(request=alter(("t", 0), leader(zk, ("t", 0)), [1], zk.topics["t"][0]),
                                 version=3, callback=got.append))
    b.run()
    assert got[0]["error_code"] == Errors.NOT_CONTROLLER


def test_stale_controller_resigns_when_its_epoch_checked_write_fails() -> None:
    zk = cluster()
    h = Harness(zk, 1)
    h.start()
    h.channel.take()
    states_before = dict(zk.states)
    zk.take_over(2)  # another broker won a later election (the old one was paused)
    del zk.brokers[2]
    h.put(ev.BrokerChange())
    h.run()
    assert not h.controller.is_active and h.controller.active_controller_id == 2
    assert zk.states == states_before  # none of its writes landed
    assert "shutdown" in h.channel.log and h.view.watches is None
    assert h.scheduler.cancelled == 1
    # and it now ignores the active controller's events
    h.put(ev.BrokerChange())
    h.run()
    assert zk.states == states_before


def test_preferred_election_admin_and_auto() -> None:
    zk = cluster()
    h = Harness(zk, 1, leader_imbalance_per_broker_percentage=10)
    h.start()
    del zk.brokers[1]
    h.put(ev.BrokerChange())
    h.run()
    assert leader(zk, ("t", 0)).leader == 2
    zk.add_broker(1, epoch=7000)
    h.put(ev.BrokerChange())
    h.run()
    # broker 1 is back (a follower again, out of the ISR until it catches up: put it back)
    lai = leader(zk, ("t", 0))
    zk.external_write(("t", 0), LeaderAndIsr(lai.leader, (2, 3, 1), lai.leader_epoch), 1)
    h.put(ev.IsrChangeNotification())
    zk.isr_notifications["0000000001"] = {("t", 0)}
    h.run()
    assert h.controller.context.partition_leadership_info(("t", 0)).leader_and_isr.isr == (2, 3, 1)  # type: ignore[union-attr]
    assert not zk.isr_notifications
    results: list[dict[Any, Any]] = []
    h.put(ev.ReplicaLeaderElection(partitions={("t", 0), ("t", 1), ("x", 0)}, election_type=PREFERRED,
                                   trigger=ev.ElectionTrigger.AdminClientTriggered, callback=results.append))
    h.run()
    r = results[0]
    assert isinstance(r[("t", 0)], LeaderAndIsr) and r[("t", 0)].leader == 1
    assert r[("t", 1)][0] == Errors.ELECTION_NOT_NEEDED
    assert r[("x", 0)][0] == Errors.UNKNOWN_TOPIC_OR_PARTITION
    # automatic: t-2's preferred leader 3 dies and comes back -> imbalance on broker 3 -> rebalance
    del zk.brokers[3]
    h.put(ev.BrokerChange())
    h.run()
    zk.add_broker(3, epoch=8000)
    h.put(ev.BrokerChange())
    h.run()
    lai = leader(zk, ("t", 2))
    assert lai.leader != 3
    zk.external_write(("t", 2), LeaderAndIsr(lai.leader, (*lai.isr, 3), lai.leader_epoch), 1)
    zk.isr_notifications["0000000002"] = {("t", 2)}
    h.put(ev.IsrChangeNotification())
    h.put(ev.AutoPreferredReplicaLeaderElection())
    h.run()
    assert leader(zk, ("t", 2)).leader == 3
    assert h.scheduler.scheduled[-1][0] == 300  # rescheduled at leader.imbalance.check.interval.seconds


def test_topic_deletion_with_a_broker_down_finishes_when_it_returns() -> None:
    zk = cluster()
    h = Harness(zk, 1)
    h.start()
    del zk.brokers[3]
    h.put(ev.BrokerChange())
    h.run()
    h.channel.take()
    zk.deletions.add("t")
    h.put(ev.TopicDeletion())
    h.run()
    ctx = h.controller.context
    assert "t" in ctx.topics_ineligible_for_deletion
    sent = h.channel.take()
    for b in (1, 2):  # the live replicas get StopReplica(delete) and answer
        stops = stop_replica_sent(sent, b)
        assert stops and all(s["delete_partition"] for s in stops.values())
        for s in sent:
            if s.api_key == 5 and s.broker_id == b:
                s.callback({"error_code": 0, "partition_errors": [
                    {"topic_name": "t", "partition_index": p, "error_code": 0} for p in range(3)]})
    h.run()
    assert "t" in zk.topics  # not finished: broker 3's replicas are ineligible
    zk.add_broker(3, epoch=9000)
    h.put(ev.BrokerChange())
    h.run()
    sent = h.channel.take()
    assert stop_replica_sent(sent, 3)
    for s in sent:
        if s.api_key == 5 and s.broker_id == 3 and any(p["delete_partition"] for t in s.body["topic_states"]
                                                        for p in t["partition_states"]):
            s.callback({"error_code": 0, "partition_errors": [
                {"topic_name": "t", "partition_index": p, "error_code": 0} for p in range(3)]})
    h.run()
    assert zk.deleted_topics == ["t"] and "t" not in ctx.all_topics and not zk.deletions


def test_preempted_events_answer_not_controller() -> None:
    zk = cluster()
    h = Harness(zk, 1)
    answers: list[Any] = []
    e = ev.ControlledShutdown(broker_id=2, broker_epoch=1, callback=answers.append)
    h.controller.preempt(e)
    assert isinstance(answers[0], ev.ControllerMovedError)
    got: list[dict[str, Any]] = []
    h.controller.preempt(AlterPartitionReceived(request={}, callback=got.append))
    assert got[0]["error_code"] == Errors.NOT_CONTROLLER


def test_failover_reads_state_written_by_previous_controller() -> None:
    zk = cluster()
    zk.states[("t", 0)] = (LeaderIsrAndControllerEpoch(LeaderAndIsr(2, (2, 3), 7), 4), 12)
    zk.controller_epoch = 4
    zk.controller_epoch_zk_version = 4
    h = Harness(zk, 3)
    h.start()
    c = h.controller
    assert c.epoch == 5
    info = c.context.partition_leadership_info(("t", 0))
    assert info is not None and info.leader_and_isr.leader == 2 and info.leader_and_isr.partition_epoch == 12
    lai = lai_sent(h.channel.take(), 3)[("t", 0)]
    assert lai["leader_epoch"] == 7 and lai["partition_epoch"] == 12 and lai["isr"] == [2, 3]


def test_reassignment_through_the_api_adds_then_completes_when_the_isr_catches_up() -> None:
    zk = cluster((1, 2, 3, 4))
    h = Harness(zk, 1)
    h.start()
    h.channel.take()
    tp = ("t", 0)
    before = leader(zk, tp)
    results: list[Any] = []
    h.put(ev.ApiPartitionReassignment(reassignments={tp: [2, 3, 4]}, callback=results.append))
    h.run()
    assert results == [{tp: (Errors.NONE, None)}]
    ra = zk.topics["t"][1][tp]
    assert (ra.replicas, ra.adding_replicas, ra.removing_replicas) == ((2, 3, 4, 1), (4,), (1,))
    mid = leader(zk, tp)
    assert mid.leader == 1 and mid.leader_epoch == before.leader_epoch + 1  # phase A: epoch bumped
    sent = h.channel.take()
    assert lai_sent(sent, 4)[tp]["is_new"] is True and lai_sent(sent, 4)[tp]["adding_replicas"] == [4]
    assert lai_sent(sent, 1)[tp]["is_new"] is False and lai_sent(sent, 1)[tp]["removing_replicas"] == [1]
    assert tp in h.controller.context.partitions_being_reassigned
    listed: list[Any] = []
    from odradek.controller.zk_reassignment import ListPartitionReassignments
    h.put(ListPartitionReassignments(callback=listed.append))
    h.run()
    assert set(listed[0]) == {tp}
    # the leader takes broker 4 into the ISR (AlterPartition): phase B
    got: list[dict[str, Any]] = []
    h.put(AlterPartitionReceived(request=alter(tp, mid, [1, 2, 3, 4], zk.topics["t"][0]), version=3,
                                 callback=got.append))
    h.run()
    assert got[0]["topics"][0]["partitions"][0]["error_code"] == 0
    ra = zk.topics["t"][1][tp]
    assert (ra.replicas, ra.adding_replicas, ra.removing_replicas) == ((2, 3, 4), (), ())
    done = leader(zk, tp)
    assert done.leader == 2 and 1 not in done.isr and done.leader_epoch > mid.leader_epoch
    stops = stop_replica_sent(h.channel.take(), 1)
    assert stops[tp]["delete_partition"] is True
    assert not h.controller.context.partitions_being_reassigned


def test_reassignment_through_the_znode_and_validation() -> None:
    zk = cluster()
    h = Harness(zk, 1)
    h.start()
    h.channel.take()
    tp = ("t", 1)  # replicas [2, 3, 1], leader 2
    zk.reassignment = {tp: [3, 1]}
    h.put(ev.ZkPartitionReassignment())
    h.run()
    assert zk.reassignment is None  # the znode goes with its last entry
    ra = zk.topics["t"][1][tp]
    assert ra.replicas == (3, 1) and not ra.adding_replicas
    assert leader(zk, tp).leader == 3 and 2 not in leader(zk, tp).isr
    assert stop_replica_sent(h.channel.take(), 2)[tp]["delete_partition"] is True
    results: list[Any] = []
    h.put(ev.ApiPartitionReassignment(
        reassignments={("t", 0): [], ("t", 2): [1, 1], ("t", 1): [3, 9], ("x", 0): [1], ("t", 0 + 10): None},
        callback=results.append))
    h.run()
    r = results[0]
    assert r[("t", 0)][0] == r[("t", 2)][0] == r[("t", 1)][0] == Errors.INVALID_REPLICA_ASSIGNMENT
    assert r[("x", 0)][0] == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert r[("t", 10)][0] == Errors.NO_REASSIGNMENT_IN_PROGRESS


def test_failover_resumes_a_reassignment_recorded_in_the_topic_znode() -> None:
    from odradek.controller.controller_context import ReplicaAssignment

    zk = cluster((1, 2, 3, 4))
    tp = ("t", 2)
    zk.topics["t"][1][tp] = ReplicaAssignment.of((3, 1, 2, 4), adding=(4,), removing=(2,))
    h = Harness(zk, 1)
    h.start()
    assert tp in h.controller.context.partitions_being_reassigned
    sent = h.channel.take()
    assert lai_sent(sent, 4)[tp]["is_new"] is True


def test_allocate_producer_ids_hands_out_consecutive_blocks() -> None:
    from odradek.controller.zk_producer_ids import AllocateProducerIds

    zk = cluster()
    h = Harness(zk, 1)
    h.start()
    got: list[dict[str, Any]] = []

    def ask(broker: int, epoch: int) -> dict[str, Any]:
        h.put(AllocateProducerIds(broker_id=broker, broker_epoch=epoch, callback=got.append))
        h.run()
        return got[-1]

    first = ask(2, broker_epoch(2))
    assert (first["error_code"], first["producer_id_start"], first["producer_id_len"]) == (0, 0, 1000)
    assert zk.producer_id_block[0] == b'{"version":1,"broker":2,"block_start":"0","block_end":"999"}'
    assert ask(3, broker_epoch(3))["producer_id_start"] == 1000
    # another writer takes the next block between our read and our write: we retry after it
    zk.producer_id_race = b'{"version":1,"broker":1,"block_start":"2000","block_end":"2999"}'
    assert ask(1, broker_epoch(1))["producer_id_start"] == 3000
    assert ask(1, 5)["error_code"] == Errors.STALE_BROKER_EPOCH
    assert ask(9, 5)["error_code"] == Errors.BROKER_ID_NOT_REGISTERED
    other = Harness(zk, 2)
    other.start()
    other.put(AllocateProducerIds(broker_id=1, broker_epoch=broker_epoch(1), callback=got.append))
    other.run()
    assert got[-1]["error_code"] == Errors.NOT_CONTROLLER


def test_session_expiry_resigns_then_reregisters_the_broker_and_reelects() -> None:
    zk = cluster()
    h = Harness(zk, 1)
    registered: list[int] = []

    def register() -> int:
        zk.add_broker(1, epoch=6000)
        registered.append(6000)
        return 6000

    h.controller.register_broker = register
    h.start()
    assert h.controller.is_active and h.controller.epoch == 1
    zk.controller = None  # the ephemeral /controller went with the expired session
    h.put(ev.Expire())
    h.run()
    assert not h.controller.is_active and h.view.watches is None and h.controller.context.epoch == 0
    h.put(ev.RegisterBrokerAndReelect())
    h.run()
    assert registered == [6000]
    assert h.controller.is_active and h.controller.epoch == 2
    assert h.controller.context.broker_epoch(1) == 6000


def test_log_dir_failure_queries_the_broker_and_takes_failed_replicas_offline() -> None:
    zk = cluster()
    h = Harness(zk, 1)
    h.start()
    h.channel.take()
    zk.log_dir_events["0000000000"] = 2
    h.put(ev.LogDirEventNotification())
    h.run()
    assert not zk.log_dir_events
    sent = h.channel.take()
    lai = [s for s in sent if s.api_key == 4 and s.broker_id == 2]
    assert lai and set(lai_sent(sent, 2)) == {("t", 0), ("t", 1), ("t", 2)}
    # broker 2 answers KAFKA_STORAGE_ERROR for t-1 (it leads it): the partition gets a new leader
    lai[0].callback({"error_code": 0, "topics": [{"topic_id": zk.topics["t"][0], "partition_errors": [
        {"partition_index": 1, "error_code": Errors.KAFKA_STORAGE_ERROR},
        {"partition_index": 0, "error_code": 0}]}]})
    h.run()
    assert leader(zk, ("t", 1)).leader == 3 and 2 not in leader(zk, ("t", 1)).isr
    assert 2 in leader(zk, ("t", 0)).isr


def test_config_from_kafka_config_uses_kafkas_names_and_defaults() -> None:
    from odradek.controller.kafka_controller import KafkaControllerConfig
    from odradek.server.kafka_config import KafkaConfig

    # (ZooKeeper mode is still refused by KafkaConfig: a combined KRaft config carries the same keys)
    base = {"listeners": "PLAINTEXT://127.0.0.1:0,REPL://127.0.0.1:0,CONTROLLER://127.0.0.1:0", "log.dirs": "/tmp/x",
            "node.id": "3", "broker.id": "3",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPL:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "REPL"}
    c = KafkaControllerConfig.from_kafka_config(KafkaConfig(base))
    assert (c.broker_id, c.auto_leader_rebalance_enable, c.leader_imbalance_per_broker_percentage,
            c.leader_imbalance_check_interval_seconds, c.delete_topic_enable, c.inter_broker_listener_name,
            c.controller_socket_timeout_ms, c.unclean_leader_election_enable) == (3, True, 10, 300, True, "REPL",
                                                                                 30000, False)
    c = KafkaControllerConfig.from_kafka_config(KafkaConfig({
        **base, "auto.leader.rebalance.enable": "false", "leader.imbalance.per.broker.percentage": "25",
        "leader.imbalance.check.interval.seconds": "7", "delete.topic.enable": "false",
        "controller.socket.timeout.ms": "1234", "unclean.leader.election.enable": "true"}))
    assert (c.auto_leader_rebalance_enable, c.leader_imbalance_per_broker_percentage,
            c.leader_imbalance_check_interval_seconds, c.delete_topic_enable, c.controller_socket_timeout_ms,
            c.unclean_leader_election_enable) == (False, 25, 7, False, 1234, True)
