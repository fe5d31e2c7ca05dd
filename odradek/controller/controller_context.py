"""The ZooKeeper-mode controller's in-memory view of the cluster: Kafka's ``ControllerContext``.

Sans-I/O. Filled from ZooKeeper by the controller's failover (``initializeControllerContext``) and
kept current by the events; read by the state machines, the request batch and topic deletion.
Also here, because every one of those modules uses them: ``LeaderAndIsr`` (the partition state
znode's content, its ``partition_epoch`` being the znode's zkVersion), ``LeaderIsrAndControllerEpoch``,
``ReplicaAssignment`` (with the adding/removing replicas of a reassignment), ``PartitionAndReplica``
and the two state enums with Kafka's legal previous states.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

TopicPartition = tuple[str, int]


def tp_name(tp: TopicPartition) -> str:
    """A partition as Kafka's ``TopicPartition.toString`` writes it in log lines and error
    messages: ``<topic>-<partition>``."""
    return f"{tp[0]}-{tp[1]}"


NO_LEADER = -1
LEADER_DURING_DELETE = -2
NO_EPOCH = -1
EPOCH_DURING_DELETE = -2
INITIAL_LEADER_EPOCH = 0
INITIAL_PARTITION_EPOCH = 0
INITIAL_CONTROLLER_EPOCH = 0
INITIAL_CONTROLLER_EPOCH_ZK_VERSION = 0

LEADER_RECOVERY_RECOVERED = 0
LEADER_RECOVERY_RECOVERING = 1

ZERO_UUID = uuid.UUID(int=0)


@dataclass(frozen=True)
class LeaderAndIsr:
    """Kafka's ``LeaderAndIsr``; ``partition_epoch`` is the state znode's zkVersion in ZooKeeper mode."""

    leader: int
    isr: tuple[int, ...]
    leader_epoch: int = INITIAL_LEADER_EPOCH
    leader_recovery_state: int = LEADER_RECOVERY_RECOVERED
    partition_epoch: int = INITIAL_PARTITION_EPOCH

    @staticmethod
    def of(leader: int, isr: Iterable[int]) -> LeaderAndIsr:
        return LeaderAndIsr(leader, tuple(isr))

    @staticmethod
    def during_delete(isr: Iterable[int]) -> LeaderAndIsr:
        """What UpdateMetadata carries for a topic queued for deletion: leader -2 (Kafka's
        ``duringDelete``: leader epoch and partition epoch are the initial 0; the -2 *epoch* is
        StopReplica's, see ``ControllerContext.leader_epoch``)."""
        return LeaderAndIsr(LEADER_DURING_DELETE, tuple(isr))

    def with_partition_epoch(self, partition_epoch: int) -> LeaderAndIsr:
        return replace(self, partition_epoch=partition_epoch)

    def new_leader(self, leader: int) -> LeaderAndIsr:
        return self.new_leader_and_isr(leader, self.isr)

    def new_leader_and_isr(self, leader: int, isr: Iterable[int]) -> LeaderAndIsr:
        """A new leader (or ISR): the leader epoch goes up by one, recovery state kept."""
        return replace(self, leader=leader, isr=tuple(isr), leader_epoch=self.leader_epoch + 1)

    def new_recovering_leader_and_isr(self, leader: int, isr: Iterable[int]) -> LeaderAndIsr:
        """An unclean leader: as ``new_leader_and_isr``, marked RECOVERING (Kafka's IBP >= 3.2)."""
        if leader == NO_LEADER:
            raise ValueError("a recovering leader needs a leader")
        return replace(
            self,
            leader=leader,
            isr=tuple(isr),
            leader_epoch=self.leader_epoch + 1,
            leader_recovery_state=LEADER_RECOVERY_RECOVERING,
        )


@dataclass(frozen=True)
class LeaderIsrAndControllerEpoch:
    leader_and_isr: LeaderAndIsr
    controller_epoch: int


@dataclass(frozen=True)
class ReplicaAssignment:
    """A partition's replicas; during a reassignment they include the adding and removing ones."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @staticmethod
    def of(replicas: Iterable[int], adding: Iterable[int] = (), removing: Iterable[int] = ()) -> ReplicaAssignment:
        return ReplicaAssignment(tuple(replicas), tuple(adding), tuple(removing))

    @property
    def origin_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    def reassign_to(self, target: Iterable[int]) -> ReplicaAssignment:
        target = tuple(target)
        origin = self.origin_replicas
        full = tuple(dict.fromkeys(target + origin))
        return ReplicaAssignment(
            full,
            tuple(r for r in full if r not in origin),
            tuple(r for r in full if r not in target),
        )

    def remove_replica(self, replica: int) -> ReplicaAssignment:
        return ReplicaAssignment(
            tuple(r for r in self.replicas if r != replica),
            tuple(r for r in self.adding_replicas if r != replica),
            tuple(r for r in self.removing_replicas if r != replica),
        )


EMPTY_ASSIGNMENT = ReplicaAssignment(())


@dataclass(frozen=True)
class PartitionAndReplica:
    topic_partition: TopicPartition
    replica: int

    @property
    def topic(self) -> str:
        return self.topic_partition[0]

    def __str__(self) -> str:
        return f"[Topic={self.topic_partition[0]},Partition={self.topic_partition[1]},Replica={self.replica}]"


@dataclass(frozen=True)
class EndPoint:
    host: str
    port: int
    listener_name: str
    security_protocol: int = 0  # SecurityProtocol id: PLAINTEXT 0, SSL 1, SASL_PLAINTEXT 2, SASL_SSL 3


@dataclass(frozen=True)
class Broker:
    """A registered broker as read from ``/brokers/ids/<id>``."""

    id: int
    endpoints: tuple[EndPoint, ...] = ()
    rack: str | None = None

    def endpoint(self, listener_name: str) -> EndPoint | None:
        for ep in self.endpoints:
            if ep.listener_name == listener_name:
                return ep
        return None


class PartitionState(enum.Enum):
    """Kafka's partition states (value = Kafka's state byte)."""

    NewPartition = 0
    OnlinePartition = 1
    OfflinePartition = 2
    NonExistentPartition = 3

    @property
    def valid_previous_states(self) -> frozenset[PartitionState]:
        return _PARTITION_PREVIOUS[self]


_P = PartitionState
_PARTITION_PREVIOUS: dict[PartitionState, frozenset[PartitionState]] = {
    _P.NewPartition: frozenset({_P.NonExistentPartition}),
    _P.OnlinePartition: frozenset({_P.NewPartition, _P.OnlinePartition, _P.OfflinePartition}),
    _P.OfflinePartition: frozenset({_P.NewPartition, _P.OnlinePartition, _P.OfflinePartition}),
    _P.NonExistentPartition: frozenset({_P.OfflinePartition}),
}


class ReplicaState(enum.Enum):
    """Kafka's replica states (value = Kafka's state byte)."""

    NewReplica = 1
    OnlineReplica = 2
    OfflineReplica = 3
    ReplicaDeletionStarted = 4
    ReplicaDeletionSuccessful = 5
    ReplicaDeletionIneligible = 6
    NonExistentReplica = 7

    @property
    def valid_previous_states(self) -> frozenset[ReplicaState]:
        return _REPLICA_PREVIOUS[self]


_R = ReplicaState
_REPLICA_PREVIOUS: dict[ReplicaState, frozenset[ReplicaState]] = {
    _R.NewReplica: frozenset({_R.NonExistentReplica}),
    _R.OnlineReplica: frozenset(
        {_R.NewReplica, _R.OnlineReplica, _R.OfflineReplica, _R.ReplicaDeletionIneligible}
    ),
    _R.OfflineReplica: frozenset(
        {_R.NewReplica, _R.OnlineReplica, _R.OfflineReplica, _R.ReplicaDeletionIneligible}
    ),
    _R.ReplicaDeletionStarted: frozenset({_R.OfflineReplica}),
    _R.ReplicaDeletionSuccessful: frozenset({_R.ReplicaDeletionStarted}),
    _R.ReplicaDeletionIneligible: frozenset({_R.OfflineReplica, _R.ReplicaDeletionStarted}),
    _R.NonExistentReplica: frozenset({_R.ReplicaDeletionSuccessful}),
}


@dataclass
class ControllerContext:
    """Kafka's ``ControllerContext``: everything the controller knows, in memory."""

    epoch: int = INITIAL_CONTROLLER_EPOCH
    epoch_zk_version: int = INITIAL_CONTROLLER_EPOCH_ZK_VERSION
    shutting_down_broker_ids: set[int] = field(default_factory=set)
    all_topics: set[str] = field(default_factory=set)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    topic_names: dict[uuid.UUID, str] = field(default_factory=dict)
    partition_assignments: dict[str, dict[int, ReplicaAssignment]] = field(default_factory=dict)
    partitions_being_reassigned: set[TopicPartition] = field(default_factory=set)
    partition_states: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    replica_states: dict[PartitionAndReplica, ReplicaState] = field(default_factory=dict)
    replicas_on_offline_dirs: dict[int, set[TopicPartition]] = field(default_factory=dict)
    topics_to_be_deleted: set[str] = field(default_factory=set)
    topics_with_deletion_started: set[str] = field(default_factory=set)
    topics_ineligible_for_deletion: set[str] = field(default_factory=set)
    offline_partition_count: int = 0
    _live_brokers: dict[int, Broker] = field(default_factory=dict)
    _live_broker_epochs: dict[int, int] = field(default_factory=dict)
    _leadership: dict[TopicPartition, LeaderIsrAndControllerEpoch] = field(default_factory=dict)

    # --- brokers -----------------------------------------------------------------------------

    def set_live_brokers(self, broker_and_epochs: Mapping[Broker, int]) -> None:
        self._live_brokers.clear()
        self._live_broker_epochs.clear()
        self.add_live_brokers(broker_and_epochs)

    def add_live_brokers(self, broker_and_epochs: Mapping[Broker, int]) -> None:
        for broker, epoch in broker_and_epochs.items():
            self._live_brokers[broker.id] = broker
            self._live_broker_epochs[broker.id] = epoch

    def remove_live_brokers(self, broker_ids: Collection[int]) -> None:
        for b in broker_ids:
            self._live_brokers.pop(b, None)
            self._live_broker_epochs.pop(b, None)

    def update_broker_metadata(self, broker: Broker) -> None:
        if broker.id in self._live_brokers:
            self._live_brokers[broker.id] = broker

    @property
    def live_broker_ids(self) -> set[int]:
        """Live brokers that are not shutting down."""
        return set(self._live_broker_epochs) - self.shutting_down_broker_ids

    def is_live_broker(self, broker_id: int) -> bool:
        return broker_id in self._live_broker_epochs and broker_id not in self.shutting_down_broker_ids

    @property
    def live_or_shutting_down_broker_ids(self) -> set[int]:
        return set(self._live_broker_epochs)

    @property
    def live_or_shutting_down_brokers(self) -> list[Broker]:
        return [self._live_brokers[b] for b in sorted(self._live_brokers)]

    def live_or_shutting_down_broker(self, broker_id: int) -> Broker | None:
        return self._live_brokers.get(broker_id)

    @property
    def live_broker_id_and_epochs(self) -> dict[int, int]:
        return dict(self._live_broker_epochs)

    def broker_epoch(self, broker_id: int) -> int:
        return self._live_broker_epochs[broker_id]

    def is_replica_online(
        self, broker_id: int, partition: TopicPartition, include_shutting_down_brokers: bool = False
    ) -> bool:
        if include_shutting_down_brokers:
            online = broker_id in self._live_broker_epochs
        else:
            online = self.is_live_broker(broker_id)
        return online and partition not in self.replicas_on_offline_dirs.get(broker_id, set())

    # --- topics and assignments --------------------------------------------------------------

    def set_all_topics(self, topics: Iterable[str]) -> None:
        self.all_topics = set(topics)

    def add_topic_id(self, topic: str, topic_id: uuid.UUID) -> None:
        if topic not in self.all_topics:
            raise ValueError(f"topic {topic} is not contained in all topics.")
        existing = self.topic_ids.get(topic)
        if existing is not None and existing != topic_id:
            raise ValueError(f"topic {topic} already has ID {existing}, not {topic_id}")
        existing_name = self.topic_names.get(topic_id)
        if existing_name is not None and existing_name != topic:
            raise ValueError(f"topic ID {topic_id} already names {existing_name}, not {topic}")
        self.topic_ids[topic] = topic_id
        self.topic_names[topic_id] = topic

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self.topic_names.get(topic_id)

    def partition_replica_assignment(self, partition: TopicPartition) -> tuple[int, ...]:
        a = self.partition_assignments.get(partition[0], {}).get(partition[1])
        return a.replicas if a is not None else ()

    def partition_full_replica_assignment(self, partition: TopicPartition) -> ReplicaAssignment:
        return self.partition_assignments.get(partition[0], {}).get(partition[1], EMPTY_ASSIGNMENT)

    def update_partition_full_replica_assignment(self, partition: TopicPartition, assignment: ReplicaAssignment) -> None:
        self.partition_assignments.setdefault(partition[0], {})[partition[1]] = assignment

    def partition_full_replica_assignment_for_topic(self, topic: str) -> dict[TopicPartition, ReplicaAssignment]:
        return {(topic, p): a for p, a in self.partition_assignments.get(topic, {}).items()}

    def all_partitions(self) -> set[TopicPartition]:
        return {(t, p) for t, parts in self.partition_assignments.items() for p in parts}

    def partitions_for_topic(self, topic: str) -> set[TopicPartition]:
        return {(topic, p) for p in self.partition_assignments.get(topic, {})}

    def partitions_on_broker(self, broker_id: int) -> set[TopicPartition]:
        return {
            (t, p)
            for t, parts in self.partition_assignments.items()
            for p, a in parts.items()
            if broker_id in a.replicas
        }

    def replicas_on_brokers(self, broker_ids: Collection[int]) -> set[PartitionAndReplica]:
        return {
            PartitionAndReplica((t, p), b)
            for b in broker_ids
            for t, parts in self.partition_assignments.items()
            for p, a in parts.items()
            if b in a.replicas
        }

    def replicas_for_topic(self, topic: str) -> set[PartitionAndReplica]:
        return {
            PartitionAndReplica((topic, p), r)
            for p, a in self.partition_assignments.get(topic, {}).items()
            for r in a.replicas
        }

    def replicas_for_partition(self, partitions: Iterable[TopicPartition]) -> set[PartitionAndReplica]:
        return {PartitionAndReplica(tp, r) for tp in partitions for r in self.partition_replica_assignment(tp)}

    def online_and_offline_replicas(self) -> tuple[set[PartitionAndReplica], set[PartitionAndReplica]]:
        online: set[PartitionAndReplica] = set()
        offline: set[PartitionAndReplica] = set()
        for t, parts in self.partition_assignments.items():
            for p, a in parts.items():
                for r in a.replicas:
                    (online if self.is_replica_online(r, (t, p)) else offline).add(PartitionAndReplica((t, p), r))
        return online, offline

    def remove_topic(self, topic: str) -> None:
        self.topics_to_be_deleted.discard(topic)
        self.topics_with_deletion_started.discard(topic)
        self.topics_ineligible_for_deletion.discard(topic)
        self.all_topics.discard(topic)
        tid = self.topic_ids.pop(topic, None)
        if tid is not None:
            self.topic_names.pop(tid, None)
        for p in self.partition_assignments.pop(topic, {}):
            self._leadership.pop((topic, p), None)
            self.partition_states.pop((topic, p), None)
        self.partitions_being_reassigned -= {tp for tp in self.partitions_being_reassigned if tp[0] == topic}

    # --- deletion ----------------------------------------------------------------------------

    def queue_topic_deletion(self, topics: Iterable[str]) -> None:
        self.topics_to_be_deleted.update(topics)

    def begin_topic_deletion(self, topics: Iterable[str]) -> None:
        self.topics_with_deletion_started.update(topics)

    def is_topic_deletion_in_progress(self, topic: str) -> bool:
        return topic in self.topics_with_deletion_started

    def is_topic_queued_up_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_be_deleted

    def is_topic_eligible_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_be_deleted and topic not in self.topics_ineligible_for_deletion

    # --- replica and partition states ---------------------------------------------------------

    def replica_state(self, replica: PartitionAndReplica) -> ReplicaState:
        return self.replica_states[replica]

    def put_replica_state(self, replica: PartitionAndReplica, state: ReplicaState) -> None:
        self.replica_states[replica] = state

    def put_replica_state_if_not_exists(self, replica: PartitionAndReplica, state: ReplicaState) -> None:
        self.replica_states.setdefault(replica, state)

    def remove_replica_state(self, replica: PartitionAndReplica) -> None:
        self.replica_states.pop(replica, None)

    def replicas_in_state(self, topic: str, state: ReplicaState) -> set[PartitionAndReplica]:
        return {r for r in self.replicas_for_topic(topic) if self.replica_states.get(r) == state}

    def are_all_replicas_in_state(self, topic: str, state: ReplicaState) -> bool:
        return all(self.replica_states.get(r) == state for r in self.replicas_for_topic(topic))

    def is_any_replica_in_state(self, topic: str, state: ReplicaState) -> bool:
        return any(self.replica_states.get(r) == state for r in self.replicas_for_topic(topic))

    def is_valid_replica_state_transition(self, replica: PartitionAndReplica, target: ReplicaState) -> bool:
        return self.replica_states[replica] in target.valid_previous_states

    def partition_state(self, partition: TopicPartition) -> PartitionState:
        return self.partition_states[partition]

    def put_partition_state(self, partition: TopicPartition, state: PartitionState) -> None:
        current = self.partition_states.get(partition, PartitionState.NonExistentPartition)
        self.partition_states[partition] = state
        self._update_offline_count(partition, current, state)

    def put_partition_state_if_not_exists(self, partition: TopicPartition, state: PartitionState) -> None:
        if partition not in self.partition_states:
            self.partition_states[partition] = state
            self._update_offline_count(partition, PartitionState.NonExistentPartition, state)

    def _update_offline_count(self, partition: TopicPartition, current: PartitionState, target: PartitionState) -> None:
        if self.is_topic_deletion_in_progress(partition[0]):
            return
        off = PartitionState.OfflinePartition
        if current != off and target == off:
            self.offline_partition_count += 1
        elif current == off and target != off:
            self.offline_partition_count -= 1

    def is_valid_partition_state_transition(self, partition: TopicPartition, target: PartitionState) -> bool:
        return self.partition_states[partition] in target.valid_previous_states

    def partitions_in_states(self, states: Collection[PartitionState], topic: str | None = None) -> set[TopicPartition]:
        return {
            tp
            for tp, s in self.partition_states.items()
            if s in states and (topic is None or tp[0] == topic)
        }

    # --- leadership --------------------------------------------------------------------------

    def put_partition_leadership_info(self, partition: TopicPartition, info: LeaderIsrAndControllerEpoch) -> None:
        self._leadership[partition] = info

    def partition_leadership_info(self, partition: TopicPartition) -> LeaderIsrAndControllerEpoch | None:
        return self._leadership.get(partition)

    @property
    def partitions_leadership_info(self) -> dict[TopicPartition, LeaderIsrAndControllerEpoch]:
        return dict(self._leadership)

    def clear_partition_leadership_info(self) -> None:
        self._leadership.clear()

    def leader_epoch(self, partition: TopicPartition) -> int:
        """-2 for a topic queued for deletion (it overrides any epoch), -1 when unknown."""
        if self.is_topic_queued_up_for_deletion(partition[0]):
            return EPOCH_DURING_DELETE
        info = self._leadership.get(partition)
        return info.leader_and_isr.leader_epoch if info is not None else NO_EPOCH

    def partitions_with_offline_leader(self) -> set[TopicPartition]:
        return {
            tp
            for tp, info in self._leadership.items()
            if not self.is_replica_online(info.leader_and_isr.leader, tp)
            and not self.is_topic_queued_up_for_deletion(tp[0])
        }

    def partition_leaders_on_broker(self, broker_id: int) -> set[TopicPartition]:
        return {
            tp
            for tp, info in self._leadership.items()
            if not self.is_topic_queued_up_for_deletion(tp[0])
            and info.leader_and_isr.leader == broker_id
            and len(self.partition_replica_assignment(tp)) > 1
        }

    def preferred_replica_imbalance_count(self) -> int:
        """Partitions (not being deleted) whose leader is not their preferred replica."""
        n = 0
        for tp, info in self._leadership.items():
            if self.is_topic_queued_up_for_deletion(tp[0]):
                continue
            a = self.partition_full_replica_assignment(tp)
            if not a.replicas:
                continue
            preferred = a.replicas[0]
            if a.is_being_reassigned and preferred in a.adding_replicas:
                balanced = preferred not in info.leader_and_isr.isr
            else:
                balanced = info.leader_and_isr.leader == preferred
            n += 0 if balanced else 1
        return n

    def reset_context(self) -> None:
        """On resignation: forget everything (Kafka's ``resetContext``)."""
        self.topics_to_be_deleted.clear()
        self.topics_with_deletion_started.clear()
        self.topics_ineligible_for_deletion.clear()
        self.shutting_down_broker_ids.clear()
        self.epoch = 0
        self.epoch_zk_version = 0
        self.all_topics.clear()
        self.topic_ids.clear()
        self.topic_names.clear()
        self.partition_assignments.clear()
        self._leadership.clear()
        self.partitions_being_reassigned.clear()
        self.replicas_on_offline_dirs.clear()
        self.partition_states.clear()
        self.replica_states.clear()
        self.offline_partition_count = 0
        self._live_brokers.clear()
        self._live_broker_epochs.clear()
