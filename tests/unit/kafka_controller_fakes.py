"""Fakes for KafkaController's tests: the whole of KafkaControllerZkClient in memory (election
znodes, brokers, topics, admin znodes, watches, every call recorded), a channel manager that
records requests and broker membership, and a harness that runs the controller's queued events."""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.controller import controller_event_manager as ev
from odradek.controller.controller_context import (
    Broker,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    ReplicaAssignment,
    TopicPartition,
)
from odradek.controller.controller_zk_client import (
    ControllerMovedException,
    UpdateLeaderAndIsrResult,
    ZkCode,
)
from odradek.controller.kafka_controller import KafkaController, KafkaControllerConfig
from tests.unit.zk_controller_fakes import FakeZk, Sent, broker, broker_epoch

EventSink = Callable[[ev.ControllerEvent], None]


class FakeControllerZk(FakeZk):
    """One ZooKeeper shared by several controllers: each gets a :class:`ZkView` (its own watches)."""

    def __init__(self) -> None:
        super().__init__(controller_epoch_zk_version=0)
        self.controller: int | None = None
        self.controller_epoch = 0
        self.brokers: dict[int, tuple[Broker, int]] = {}
        self.topics: dict[str, tuple[uuid.UUID, dict[TopicPartition, ReplicaAssignment]]] = {}
        self.deletions: set[str] = set()
        self.preferred: set[TopicPartition] | None = None
        self.reassignment: dict[TopicPartition, list[int]] | None = None
        self.producer_id_block: tuple[bytes | None, int] = (None, -1)
        self.producer_id_race: bytes | None = None
        self.log_dir_events: dict[str, int] = {}
        self.isr_notifications: dict[str, set[TopicPartition]] = {}
        self.deleted_topics: list[str] = []
        self.calls: list[str] = []

    def add_broker(self, i: int, epoch: int | None = None) -> None:
        self.brokers[i] = (broker(i), epoch if epoch is not None else broker_epoch(i))

    def add_topic(self, name: str, assignment: Mapping[int, list[int]], with_states: bool = True,
                  controller_epoch: int = 0) -> None:
        self.topics[name] = (uuid.uuid5(uuid.NAMESPACE_DNS, name),
                             {(name, p): ReplicaAssignment.of(r) for p, r in assignment.items()})
        if with_states:
            for p, r in assignment.items():
                self.states[(name, p)] = (LeaderIsrAndControllerEpoch(LeaderAndIsr(r[0], tuple(r)), controller_epoch), 0)

    def take_over(self, controller_id: int) -> None:
        """Another broker becomes controller: /controller and /controller_epoch move on."""
        self.controller = controller_id
        self.controller_epoch += 1
        self.controller_epoch_zk_version += 1

    def _check(self, expected: int) -> None:
        if expected != self.controller_epoch_zk_version:
            raise ControllerMovedException(f"epoch zkVersion {self.controller_epoch_zk_version} != {expected}")


class ZkView:
    """A controller's session: the shared FakeControllerZk, its own watches, calls recorded."""

    def __init__(self, zk: FakeControllerZk, session: int) -> None:
        self.zk = zk
        self.session = session
        self.controller_watch: EventSink | None = None
        self.watches: EventSink | None = None
        self.watched_topics: set[str] = set()

    def _rec(self, name: str) -> None:
        self.zk.calls.append(name)

    # state machines' part
    def create_topic_partition_states(self, states: Mapping[TopicPartition, LeaderIsrAndControllerEpoch],
                                      expected: int) -> dict[TopicPartition, ZkCode]:
        self._rec("create_topic_partition_states")
        return self.zk.create_topic_partition_states(states, expected)

    def get_topic_partition_states(self, partitions: Collection[TopicPartition]
                                   ) -> dict[TopicPartition, LeaderIsrAndControllerEpoch | None | Exception]:
        self._rec("get_topic_partition_states")
        return self.zk.get_topic_partition_states(partitions)

    def update_leader_and_isr(self, lais: Mapping[TopicPartition, LeaderAndIsr], controller_epoch: int,
                              expected: int) -> UpdateLeaderAndIsrResult:
        self._rec("update_leader_and_isr")
        return self.zk.update_leader_and_isr(lais, controller_epoch, expected)

    def unclean_leader_election_enable(self, topics: Collection[str]) -> dict[str, bool | Exception]:
        return self.zk.unclean_leader_election_enable(topics)

    # election
    def register_controller_and_increment_controller_epoch(self, controller_id: int) -> tuple[int, int]:
        self._rec("register_controller_and_increment_controller_epoch")
        if self.zk.controller is not None:
            raise ControllerMovedException("Controller moved to another broker")
        self.zk.controller = controller_id
        self.zk.controller_epoch += 1
        self.zk.controller_epoch_zk_version += 1
        return self.zk.controller_epoch, self.zk.controller_epoch_zk_version

    def get_controller_id(self) -> int | None:
        self._rec("get_controller_id")
        return self.zk.controller

    def delete_controller(self, expected: int) -> None:
        self._rec("delete_controller")
        self.zk._check(expected)
        self.zk.controller = None

    def watch_controller(self, put: EventSink) -> bool:
        self._rec("watch_controller")
        self.controller_watch = put
        return self.zk.controller is not None

    def register_controller_watches(self, put: EventSink) -> None:
        self._rec("register_controller_watches")
        self.watches = put

    def unregister_controller_watches(self) -> None:
        self._rec("unregister_controller_watches")
        self.watches = None

    def watch_partition_modifications(self, topics: Collection[str], put: EventSink) -> None:
        self._rec("watch_partition_modifications")
        self.watched_topics |= set(topics)

    def unwatch_partition_modifications(self, topics: Collection[str]) -> None:
        self._rec("unwatch_partition_modifications")
        self.watched_topics -= set(topics)

    # reads
    def get_all_broker_and_epochs(self) -> dict[Broker, int]:
        self._rec("get_all_broker_and_epochs")
        return dict(self.zk.brokers.values())

    def get_broker(self, broker_id: int) -> Broker | None:
        got = self.zk.brokers.get(broker_id)
        return got[0] if got else None

    def get_all_topics(self) -> set[str]:
        self._rec("get_all_topics")
        return set(self.zk.topics)

    def get_replica_assignment_and_topic_ids(self, topics: Collection[str]
                                             ) -> dict[str, tuple[uuid.UUID | None, dict[TopicPartition, ReplicaAssignment]]]:
        self._rec("get_replica_assignment_and_topic_ids")
        return {t: (self.zk.topics[t][0], dict(self.zk.topics[t][1])) for t in topics if t in self.zk.topics}

    def get_topic_deletions(self) -> list[str]:
        self._rec("get_topic_deletions")
        return sorted(self.zk.deletions)

    def get_partition_reassignment(self) -> dict[TopicPartition, list[int]]:
        self._rec("get_partition_reassignment")
        return dict(self.zk.reassignment or {})

    def set_partition_reassignment(self, reassignment: Mapping[TopicPartition, list[int]], expected: int) -> None:
        self.zk._check(expected)
        self.zk.reassignment = dict(reassignment)

    def get_producer_id_block(self) -> tuple[bytes | None, int]:
        return self.zk.producer_id_block

    def set_producer_id_block(self, data: bytes, expected_version: int) -> bool:
        if self.zk.producer_id_race is not None:  # someone else writes first
            self.zk.producer_id_block = (self.zk.producer_id_race, self.zk.producer_id_block[1] + 1)
            self.zk.producer_id_race = None
        if expected_version != self.zk.producer_id_block[1]:
            return False
        self.zk.producer_id_block = (data, expected_version + 1)
        return True

    def delete_partition_reassignment(self, expected: int) -> None:
        self.zk._check(expected)
        self.zk.reassignment = None

    def get_preferred_replica_election(self) -> set[TopicPartition]:
        self._rec("get_preferred_replica_election")
        return set(self.zk.preferred or ())

    def get_all_isr_change_notifications(self) -> list[str]:
        return sorted(self.zk.isr_notifications)

    def get_partitions_from_isr_change_notifications(self, seqs: Collection[str]) -> set[TopicPartition]:
        return {tp for s in seqs for tp in self.zk.isr_notifications.get(s, set())}

    # writes
    def delete_isr_change_notifications(self, seqs: Collection[str] | None, expected: int) -> None:
        self._rec("delete_isr_change_notifications")
        self.zk._check(expected)
        for s in list(self.zk.isr_notifications) if seqs is None else seqs:
            self.zk.isr_notifications.pop(s, None)

    def get_all_log_dir_event_notifications(self) -> list[str]:
        return sorted(self.zk.log_dir_events)

    def get_broker_ids_from_log_dir_events(self, seqs: Collection[str]) -> list[int]:
        return [self.zk.log_dir_events[s] for s in seqs if s in self.zk.log_dir_events]

    def delete_log_dir_event_notifications(self, seqs: Collection[str] | None, expected: int) -> None:
        self._rec("delete_log_dir_event_notifications")
        self.zk._check(expected)
        for s in list(self.zk.log_dir_events) if seqs is None else seqs:
            self.zk.log_dir_events.pop(s, None)

    def delete_preferred_replica_election(self, expected: int) -> None:
        self._rec("delete_preferred_replica_election")
        self.zk._check(expected)
        self.zk.preferred = None

    def delete_topic(self, topic: str, expected: int) -> None:
        self._rec("delete_topic")
        self.zk._check(expected)
        _, parts = self.zk.topics.pop(topic)
        for tp in parts:
            self.zk.states.pop(tp, None)
        self.zk.deletions.discard(topic)
        self.zk.deleted_topics.append(topic)

    def delete_topic_deletions(self, topics: Collection[str], expected: int) -> None:
        self._rec("delete_topic_deletions")
        self.zk._check(expected)
        self.zk.deletions -= set(topics)

    def set_topic_assignment(self, topic: str, topic_id: uuid.UUID | None,
                             assignment: Mapping[int, ReplicaAssignment], expected: int) -> None:
        self.zk._check(expected)
        self.zk.topics[topic] = (topic_id or uuid.uuid4(), {(topic, p): ra for p, ra in assignment.items()})
        self.zk.calls.append("set_topic_assignment")


@dataclass
class FakeChannel:
    sent: list[Sent] = field(default_factory=list)
    brokers: set[int] = field(default_factory=set)
    log: list[str] = field(default_factory=list)

    def send_request(self, broker_id: int, api_key: int, api_version: int, body: dict[str, Any],
                     callback: Callable[[dict[str, Any]], None]) -> None:
        if broker_id not in self.brokers:
            return  # Kafka: "Not sending request ... since it is offline"
        self.sent.append(Sent(broker_id, api_key, api_version, body, callback))
        self.log.append(f"send {api_key} to {broker_id}")

    def startup(self, brokers: Iterable[Broker]) -> None:
        self.log.append("startup")
        self.brokers |= {b.id for b in brokers}

    def add_broker(self, b: Broker) -> None:
        self.log.append(f"add {b.id}")
        self.brokers.add(b.id)

    def remove_broker(self, broker_id: int) -> None:
        self.log.append(f"remove {broker_id}")
        self.brokers.discard(broker_id)

    def shutdown(self) -> None:
        self.log.append("shutdown")
        self.brokers.clear()

    def take(self) -> list[Sent]:
        out, self.sent = self.sent, []
        return out


@dataclass
class FakeScheduler:
    scheduled: list[tuple[float, ev.ControllerEvent]] = field(default_factory=list)
    cancelled: int = 0

    def schedule(self, delay_s: float, event: ev.ControllerEvent) -> None:
        self.scheduled.append((delay_s, event))

    def cancel_all(self) -> None:
        self.cancelled += 1
        self.scheduled.clear()


class Harness:
    """One controller over a shared fake ZooKeeper; ``run`` processes its queued events."""

    def __init__(self, zk: FakeControllerZk, broker_id: int, **config: Any) -> None:
        self.zk = zk
        self.view = ZkView(zk, broker_id)
        self.channel = FakeChannel()
        self.scheduler = FakeScheduler()
        self.events: deque[ev.ControllerEvent] = deque()
        self.controller = KafkaController(
            KafkaControllerConfig(broker_id=broker_id, **config), self.view, self.channel, self.scheduler,
            self.events.append,
        )

    def put(self, event: ev.ControllerEvent) -> None:
        self.events.append(event)

    def run(self, limit: int = 200) -> None:
        for _ in range(limit):
            if not self.events:
                return
            self.controller.process(self.events.popleft())
        raise AssertionError("events keep coming")

    def start(self) -> None:
        self.put(ev.Startup())
        self.run()
