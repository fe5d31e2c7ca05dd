"""ControllerEventManager core (ZooKeeper mode): event -> ControllerState mapping with Kafka's ids,
put / clear_and_put (preemption) semantics, Idle between events, errors don't stop the queue."""

from __future__ import annotations

from typing import Any

from odradek.controller import controller_event_manager as m

S = m.ControllerState


def test_states_have_kafkas_ids_and_metric_names() -> None:
    assert [s.value_id for s in S] == list(range(18))
    assert S.BrokerChange.rate_and_time_metric_name == "LeaderElectionRateAndTimeMs"
    assert S.AlterPartitionReassignment.rate_and_time_metric_name == "PartitionReassignmentRateAndTimeMs"
    assert S.Idle.rate_and_time_metric_name is None
    assert S.UpdateMetadataResponseReceived.rate_and_time_metric_name is None
    assert S.TopicChange.rate_and_time_metric_name == "TopicChangeRateAndTimeMs"


def test_each_event_maps_to_kafkas_controller_state() -> None:
    expected = [
        (m.Startup(), S.ControllerChange),
        (m.ControllerChange(), S.ControllerChange),
        (m.Reelect(), S.ControllerChange),
        (m.Expire(), S.ControllerChange),
        (m.BrokerChange(), S.BrokerChange),
        (m.BrokerModifications(broker_id=1), S.BrokerChange),
        (m.TopicChange(), S.TopicChange),
        (m.PartitionModifications(topic="t"), S.TopicChange),
        (m.TopicDeletion(), S.TopicDeletion),
        (m.ZkPartitionReassignment(), S.AlterPartitionReassignment),
        (m.IsrChangeNotification(), S.IsrChange),
        (m.LogDirEventNotification(), S.LogDirChange),
        (m.ReplicaLeaderElection(), S.ManualLeaderBalance),
        (m.ControlledShutdown(broker_id=1), S.ControlledShutdown),
        (m.AutoPreferredReplicaLeaderElection(), S.AutoLeaderBalance),
        (m.UncleanLeaderElectionEnable(), S.UncleanLeaderElectionEnable),
        (m.TopicUncleanLeaderElectionEnable(topic="t"), S.TopicUncleanLeaderElectionEnable),
        (m.LeaderAndIsrResponseReceived(), S.LeaderAndIsrResponseReceived),
        (m.UpdateMetadataResponseReceived(), S.UpdateMetadataResponseReceived),
        (m.ShutdownEventThread(), S.ControllerShutdown),
    ]
    for event, state in expected:
        assert event.state == state, event
    assert m.PreferredReplicaLeaderElection is m.ReplicaLeaderElection
    assert m.PartitionReassignment is m.ZkPartitionReassignment


class Processor:
    def __init__(self, queue_ref: list[m.ControllerEventQueue]) -> None:
        self.processed: list[tuple[m.ControllerEvent, m.ControllerState]] = []
        self.preempted: list[m.ControllerEvent] = []
        self.queue_ref = queue_ref

    def process(self, event: m.ControllerEvent) -> None:
        self.processed.append((event, self.queue_ref[0].state))
        if isinstance(event, m.TopicChange):
            raise RuntimeError("boom")

    def preempt(self, event: m.ControllerEvent) -> None:
        self.preempted.append(event)
        event.preempt()


def make() -> tuple[m.ControllerEventQueue, Processor]:
    ref: list[m.ControllerEventQueue] = []
    p = Processor(ref)
    q = m.ControllerEventQueue(1, p)
    ref.append(q)
    return q, p


def test_events_run_in_order_with_their_state_then_idle_and_errors_are_contained() -> None:
    q, p = make()
    q.put(m.BrokerChange(), 0)
    q.put(m.TopicChange(), 5)
    q.put(m.IsrChangeNotification(), 7)
    assert len(q) == 3
    clock = iter([12, 13, 20])
    for _ in range(3):
        q.process_next(10, clock=lambda: next(clock))
        assert q.state == S.Idle
    assert [(type(e).__name__, s) for e, s in p.processed] == [
        ("BrokerChange", S.BrokerChange), ("TopicChange", S.TopicChange), ("IsrChangeNotification", S.IsrChange)
    ]
    assert q.queue_times_ms == [10, 5, 3]
    assert q.processing_times_ms[S.BrokerChange] == [2]
    assert q.process_next(30) is None and q.is_empty()


def test_clear_and_put_preempts_queued_events_and_answers_their_callbacks() -> None:
    q, p = make()
    answers: list[Any] = []
    q.put(m.BrokerChange(), 0)
    cs = m.ControlledShutdown(broker_id=2, broker_epoch=7, callback=answers.append)
    q.put(cs, 0)
    q.put(m.ReplicaLeaderElection(partitions={("t", 0)}, callback=answers.append), 0)
    queued = q.clear_and_put(m.Expire(), 1)
    assert [type(e).__name__ for e in p.preempted] == ["BrokerChange", "ControlledShutdown", "ReplicaLeaderElection"]
    assert isinstance(answers[0], m.ControllerMovedError)
    assert answers[1] == {("t", 0): "NOT_CONTROLLER"}
    assert len(q) == 1
    q.process_next(2)
    assert [type(e).__name__ for e, _ in p.processed] == ["Expire"]
    assert queued.spent and not queued.preempt(p)  # processed once, never preempted after


def test_shutdown_event_is_not_processed() -> None:
    q, p = make()
    q.put(m.ShutdownEventThread(), 0)
    assert isinstance(q.process_next(0), m.ShutdownEventThread)
    assert p.processed == []
