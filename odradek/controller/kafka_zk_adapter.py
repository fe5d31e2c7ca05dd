"""KafkaControllerZkClient over ``odradek.zk.kafka_zk_client.KafkaZkClient`` (kazoo): the running
ZooKeeper-mode controller's ZooKeeper.

Translates between the znode data classes of ``odradek.zk.zk_data`` and the controller's
(``LeaderAndIsr`` with the znode version as partition epoch, ``Broker``, ``ReplicaAssignment``,
topic ids as UUIDs — Kafka writes them as URL-safe base64 without padding), turns the zk client's
ControllerMovedError into the controller's ControllerMovedException, and turns watches into
ControllerEvents (Kafka's ``*Handler`` classes). ZooKeeper watches are one-shot: each is re-armed
by the read the event's processing makes of the same znode (as in Kafka), and the admin znode
handlers re-arm themselves when their znode is deleted.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from odradek.controller import controller_event_manager as ev
from odradek.controller.controller_context import (
    Broker,
    EndPoint,
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
from odradek.zk import zk_data as z
from odradek.zk.kafka_zk_client import (
    ControllerMovedError,
    KafkaZkClient,
    StateChangeHandler,
    ZNodeChangeHandler,
    ZNodeChildChangeHandler,
)

log = logging.getLogger(__name__)

EventSink = Callable[[ev.ControllerEvent], None]
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


def uuid_from_kafka(s: str | None) -> uuid.UUID | None:
    if not s:
        return None
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(s + "=" * (-len(s) % 4)))
    except ValueError:
        log.error("Ignoring malformed topic id %r", s)
        return None


def uuid_to_kafka(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def broker_from_info(info: z.BrokerInfo) -> Broker:
    eps = tuple(
        EndPoint(host, port, listener, SECURITY_PROTOCOL_IDS.get(proto, 0))
        for listener, proto, host, port in info.endpoint_tuples()
    )
    return Broker(info.broker_id, eps, info.rack)


def _state_to_info(s: z.PartitionState) -> LeaderIsrAndControllerEpoch:
    return LeaderIsrAndControllerEpoch(
        LeaderAndIsr(s.leader, tuple(s.isr), s.leader_epoch, s.leader_recovery_state, s.zk_version), s.controller_epoch)


@contextmanager
def _fenced() -> Iterator[None]:
    try:
        yield
    except ControllerMovedError as e:
        raise ControllerMovedException(str(e)) from e


class _ChildHandler(ZNodeChildChangeHandler):
    def __init__(self, path: str, put: EventSink, make: Callable[[], ev.ControllerEvent]) -> None:
        self.path = path
        self.put = put
        self.make = make

    def handle_child_change(self) -> None:
        self.put(self.make())


class _NodeHandler(ZNodeChangeHandler):
    def __init__(self, client: KafkaZkClient, path: str, put: EventSink,
                 on_create: Callable[[], ev.ControllerEvent] | None = None,
                 on_delete: Callable[[], ev.ControllerEvent] | None = None,
                 on_change: Callable[[], ev.ControllerEvent] | None = None, rearm_on_delete: bool = False) -> None:
        self.client = client
        self.path = path
        self.put = put
        self.on_create, self.on_delete, self.on_change = on_create, on_delete, on_change
        self.rearm_on_delete = rearm_on_delete

    def handle_creation(self) -> None:
        if self.on_create is not None:
            self.put(self.on_create())

    def handle_deletion(self) -> None:
        if self.on_delete is not None:
            self.put(self.on_delete())
        if self.rearm_on_delete:
            self.client.exists(self.path)  # watch for the next creation

    def handle_data_change(self) -> None:
        if self.on_change is not None:
            self.put(self.on_change())


class ControllerSessionHandler(StateChangeHandler):
    """Kafka's controller state-change handler: expiry -> Expire (queue cleared), new session ->
    RegisterBrokerAndReelect."""

    name = "controller-state-change-handler"

    def __init__(self, on_expiring: Callable[[], None], on_established: Callable[[], None]) -> None:
        self.on_expiring = on_expiring
        self.on_established = on_established

    def before_initializing_session(self) -> None:
        self.on_expiring()

    def after_initializing_session(self) -> None:
        self.on_established()


_CHILD_WATCHES: tuple[tuple[str, Callable[[], ev.ControllerEvent]], ...] = (
    (z.BROKER_IDS_PATH, ev.BrokerChange),
    (z.TOPICS_PATH, ev.TopicChange),
    (z.DELETE_TOPICS_PATH, ev.TopicDeletion),
    (z.LOG_DIR_EVENT_NOTIFICATION_PATH, ev.LogDirEventNotification),
    (z.ISR_CHANGE_NOTIFICATION_PATH, ev.IsrChangeNotification),
)


class KafkaControllerZkAdapter:
    def __init__(self, client: KafkaZkClient, unclean_leader_election_enable: bool = False) -> None:
        self.client = client
        self.default_unclean = unclean_leader_election_enable  # the broker's unclean.leader.election.enable

    # --- state machines' part -----------------------------------------------------------------

    def create_topic_partition_states(
        self, states: Mapping[TopicPartition, LeaderIsrAndControllerEpoch], expected_controller_epoch_zk_version: int
    ) -> dict[TopicPartition, ZkCode]:
        zs = {tp: z.PartitionState(i.leader_and_isr.leader, i.leader_and_isr.leader_epoch, tuple(i.leader_and_isr.isr),
                                   i.controller_epoch, i.leader_and_isr.leader_recovery_state)
              for tp, i in states.items()}
        with _fenced():
            res = self.client.create_topic_partition_states(zs, expected_controller_epoch_zk_version)
        out: dict[TopicPartition, ZkCode] = {}
        for tp, r in res.items():
            if r is None:
                out[tp] = ZkCode.OK
            elif type(r).__name__ == "NodeExistsError":
                out[tp] = ZkCode.NODE_EXISTS
            else:
                log.error("Creating the state znode of %s failed: %r", tp, r)
                out[tp] = ZkCode.CONNECTION_LOSS
        return out

    def get_topic_partition_states(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, LeaderIsrAndControllerEpoch | None | Exception]:
        got = self.client.get_topic_partition_states(partitions)
        return {tp: (_state_to_info(got[tp]) if tp in got else None) for tp in partitions}

    def update_leader_and_isr(
        self, leader_and_isrs: Mapping[TopicPartition, LeaderAndIsr], controller_epoch: int,
        expected_controller_epoch_zk_version: int,
    ) -> UpdateLeaderAndIsrResult:
        zs = {tp: z.PartitionState(lai.leader, lai.leader_epoch, tuple(lai.isr), controller_epoch,
                                   lai.leader_recovery_state, lai.partition_epoch)
              for tp, lai in leader_and_isrs.items()}
        with _fenced():
            res = self.client.update_leader_and_isr(zs, expected_controller_epoch_zk_version)
        out = UpdateLeaderAndIsrResult(to_retry=list(res.partitions_to_retry))
        for tp, r in res.finished.items():
            out.finished[tp] = r if isinstance(r, Exception) else _state_to_info(r).leader_and_isr
        return out

    def unclean_leader_election_enable(self, topics: Collection[str]) -> dict[str, bool | Exception]:
        out: dict[str, bool | Exception] = {}
        for t in topics:
            try:
                v = self.client.get_entity_configs("topics", t).get("unclean.leader.election.enable")
                out[t] = self.default_unclean if v is None else v.strip().lower() == "true"
            except Exception as e:
                out[t] = e
        return out

    # --- election ------------------------------------------------------------------------------

    def register_controller_and_increment_controller_epoch(self, controller_id: int) -> tuple[int, int]:
        with _fenced():
            return self.client.register_controller_and_increment_controller_epoch(controller_id)

    def get_controller_id(self) -> int | None:
        return self.client.get_controller_id()

    def delete_controller(self, expected_epoch_zk_version: int) -> None:
        with _fenced():
            self.client.delete_controller(expected_epoch_zk_version)

    def watch_controller(self, put: EventSink) -> bool:
        return self.client.register_znode_change_handler_and_check_existence(_NodeHandler(
            self.client, z.CONTROLLER_PATH, put, on_create=ev.ControllerChange, on_delete=ev.Reelect,
            on_change=ev.ControllerChange))

    # --- watches -------------------------------------------------------------------------------

    def register_controller_watches(self, put: EventSink) -> None:
        c = self.client
        for path, make in _CHILD_WATCHES:
            c.make_sure_persistent_path_exists(path)
            c.register_znode_child_change_handler(_ChildHandler(path, put, make))
            c.get_children(path)  # arms the watch
        c.register_znode_change_handler_and_check_existence(_NodeHandler(
            c, z.PREFERRED_REPLICA_ELECTION_PATH, put, on_create=ev.ReplicaLeaderElection, rearm_on_delete=True))
        c.register_znode_change_handler_and_check_existence(_NodeHandler(
            c, z.REASSIGN_PARTITIONS_PATH, put, on_create=ev.ZkPartitionReassignment, rearm_on_delete=True))

    def unregister_controller_watches(self) -> None:
        c = self.client
        for path, _ in _CHILD_WATCHES:
            c.unregister_znode_child_change_handler(path)
        c.unregister_znode_change_handler(z.PREFERRED_REPLICA_ELECTION_PATH)
        c.unregister_znode_change_handler(z.REASSIGN_PARTITIONS_PATH)

    def watch_partition_modifications(self, topics: Collection[str], put: EventSink) -> None:
        for t in topics:
            def make(topic: str = t) -> ev.ControllerEvent:
                return ev.PartitionModifications(topic=topic)
            self.client.register_znode_change_handler_and_check_existence(
                _NodeHandler(self.client, z.topic_path(t), put, on_change=make))

    def unwatch_partition_modifications(self, topics: Collection[str]) -> None:
        for t in topics:
            self.client.unregister_znode_change_handler(z.topic_path(t))

    # --- reads ---------------------------------------------------------------------------------

    def get_all_broker_and_epochs(self) -> dict[Broker, int]:
        return {broker_from_info(info): epoch for info, epoch in self.client.get_all_broker_and_epochs().values()}

    def get_broker(self, broker_id: int) -> Broker | None:
        info = self.client.get_broker(broker_id)
        return broker_from_info(info) if info is not None else None

    def get_all_topics(self) -> set[str]:
        return self.client.get_all_topics()

    def get_replica_assignment_and_topic_ids(
        self, topics: Collection[str]
    ) -> dict[str, tuple[uuid.UUID | None, dict[TopicPartition, ReplicaAssignment]]]:
        out: dict[str, tuple[uuid.UUID | None, dict[TopicPartition, ReplicaAssignment]]] = {}
        for t, ta in self.client.get_replica_assignment_and_topic_ids(topics).items():
            out[t] = (uuid_from_kafka(ta.topic_id), {
                (t, p): ReplicaAssignment.of(ra.replicas, ra.adding_replicas, ra.removing_replicas)
                for p, ra in ta.partitions.items()
            })
        return out

    def get_topic_deletions(self) -> list[str]:
        return self.client.get_topic_deletions()

    def get_partition_reassignment(self) -> dict[TopicPartition, list[int]]:
        return self.client.get_partition_reassignment()

    def get_preferred_replica_election(self) -> set[TopicPartition]:
        return self.client.get_preferred_replica_election()

    def get_all_isr_change_notifications(self) -> list[str]:
        return self.client.get_all_isr_change_notifications()

    def get_partitions_from_isr_change_notifications(self, seqs: Collection[str]) -> set[TopicPartition]:
        return self.client.get_partitions_from_isr_change_notifications(seqs)

    # --- writes --------------------------------------------------------------------------------

    def delete_isr_change_notifications(self, seqs: Collection[str] | None, expected_epoch_zk_version: int) -> None:
        if seqs is None:
            seqs = self.client.get_all_isr_change_notifications()
        with _fenced():
            self.client.delete_isr_change_notifications(seqs, expected_epoch_zk_version)

    def get_all_log_dir_event_notifications(self) -> list[str]:
        return self.client.get_all_log_dir_event_notifications()

    def get_broker_ids_from_log_dir_events(self, seqs: Collection[str]) -> list[int]:
        return self.client.get_broker_ids_from_log_dir_events(seqs)

    def delete_log_dir_event_notifications(self, seqs: Collection[str] | None, expected_epoch_zk_version: int) -> None:
        if seqs is None:
            seqs = self.client.get_all_log_dir_event_notifications()
        with _fenced():
            self.client.delete_log_dir_event_notifications(seqs, expected_epoch_zk_version)

    def delete_preferred_replica_election(self, expected_epoch_zk_version: int) -> None:
        with _fenced():
            self.client.delete_preferred_replica_election(expected_epoch_zk_version)

    def set_partition_reassignment(
        self, reassignment: Mapping[TopicPartition, list[int]], expected_epoch_zk_version: int
    ) -> None:
        """Kafka's setOrCreatePartitionReassignment (KafkaZkClient has no such call yet: its
        epoch-checked multi is used directly)."""
        data = z.encode_reassign_partitions((t, p, r) for (t, p), r in sorted(reassignment.items()))
        path = z.REASSIGN_PARTITIONS_PATH
        with _fenced():
            res = self.client._epoch_checked(lambda tx: tx.set_data(path, data, -1), expected_epoch_zk_version, path)
        if res and isinstance(res[0], Exception):
            if type(res[0]).__name__ != "NoNodeError":
                raise res[0]
            self.client.create_partition_reassignment((t, p, r) for (t, p), r in sorted(reassignment.items()))

    def delete_partition_reassignment(self, expected_epoch_zk_version: int) -> None:
        with _fenced():
            self.client.delete_partition_reassignment(expected_epoch_zk_version)

    def get_producer_id_block(self) -> tuple[bytes | None, int]:
        got = self.client.get_data(z.PRODUCER_ID_BLOCK_PATH)
        if got is None:
            return None, -1
        # a persistent path created empty at start-up (Kafka creates it with null data): no block yet
        return (bytes(got[0]) or None), int(got[1].version)

    def set_producer_id_block(self, data: bytes, expected_version: int) -> bool:
        """Kafka's conditionalUpdatePath (KafkaZkClient has no such call yet: kazoo directly)."""
        path = z.PRODUCER_ID_BLOCK_PATH
        kz = self.client._kazoo
        try:
            if expected_version < 0:
                self.client._call(lambda: kz.create(path, data, makepath=True), path)
            else:
                self.client._call(lambda: kz.set(path, data, expected_version), path)
            return True
        except (NodeExistsError, BadVersionError, NoNodeError):
            return False

    def delete_topic(self, topic: str, expected_epoch_zk_version: int) -> None:
        """Kafka's deleteTopicZNode, deleteTopicConfigs, then the deletion request znode."""
        with _fenced():
            self.client.delete_topic_znode(topic, expected_epoch_zk_version)
            self.client._delete_checked(z.config_entity_path("topics", topic), expected_epoch_zk_version)
            self.client.delete_topic_deletions([topic], expected_epoch_zk_version)

    def delete_topic_deletions(self, topics: Collection[str], expected_epoch_zk_version: int) -> None:
        with _fenced():
            self.client.delete_topic_deletions(topics, expected_epoch_zk_version)

    def set_topic_assignment(
        self, topic: str, topic_id: uuid.UUID | None, assignment: Mapping[int, ReplicaAssignment],
        expected_epoch_zk_version: int,
    ) -> None:
        za = {p: z.ReplicaAssignment(ra.replicas, ra.adding_replicas, ra.removing_replicas)
              for p, ra in assignment.items()}
        with _fenced():
            self.client.set_topic_assignment(topic, uuid_to_kafka(topic_id) if topic_id else None, za,
                                             expected_epoch_zk_version)
