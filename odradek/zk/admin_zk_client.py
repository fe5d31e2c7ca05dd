"""AdminZkClient: the admin writes of a ZooKeeper-mode cluster (Kafka 3.9's ``AdminZkClient``).

Creating a topic writes ``/config/topics/<t>`` (always, even empty) and then
``/brokers/topics/<t>`` (assignment and a fresh topic id); the controller's topic watch does the
rest. Adding partitions rewrites ``/brokers/topics/<t>`` with the old partitions unchanged (the
controller's partition-modification watch). Deleting creates ``/admin/delete_topics/<t>``. Config
changes write ``/config/<type>/<name>`` and a ``/config/changes/config_change_<n>`` notification.

Blocking calls (kazoo); the async admin manager runs them on the client's worker thread. Refusals
raise :class:`AdminError` carrying Kafka's error code and message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kazoo.exceptions import NodeExistsError

from odradek.controller.replica_placement import (
    BrokerMetadata,
    PlacementError,
    assign_replicas_to_brokers,
)
from odradek.controller.replication_control import topic_name_error
from odradek.protocol.errors import Errors
from odradek.server.config_defs import validate_topic_configs
from odradek.server.meta_properties import random_uuid_base64
from odradek.zk import zk_data as z
from odradek.zk.kafka_zk_client import KafkaZkClient

DEFAULT_ENTITY = "<default>"  # ZooKeeper's name of the cluster-wide default (Kafka's ZooKeeperInternals)


class AdminError(Exception):
    """An admin operation Kafka refuses: ``error`` is the code to answer with."""

    def __init__(self, error: int, message: str) -> None:
        super().__init__(message)
        self.error = int(error)
        self.message = message


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


def validate_replica_assignment(assignment: Mapping[int, Sequence[int]]) -> None:
    """AdminZkClient.validateTopicCreate's checks of a (manual or computed) assignment."""
    if len({len(r) for r in assignment.values()}) != 1:
        raise AdminError(Errors.INVALID_REPLICA_ASSIGNMENT, "All partitions should have the same number of replicas")
    for replicas in assignment.values():
        if len(replicas) != len(set(replicas)):
            shown = ", ".join(f"{p} -> List({', '.join(map(str, r))})" for p, r in assignment.items())
            raise AdminError(Errors.INVALID_REPLICA_ASSIGNMENT, f"Duplicate replica assignment found: Map({shown})")
    n = len(assignment)
    if sorted(assignment) != list(range(n)):
        raise AdminError(Errors.INVALID_REPLICA_ASSIGNMENT, "partitions should be a consecutive 0-based integer sequence")


def config_entity_name(entity_type: str, name: str) -> str:
    """The znode name of a config entity: the empty broker name is ``<default>``."""
    return DEFAULT_ENTITY if entity_type == "brokers" and name == "" else name


class AdminZkClient:
    def __init__(self, zk: KafkaZkClient) -> None:
        self.zk = zk

    # --- brokers ----------------------------------------------------------------------

    def get_broker_metadatas(self, rack_aware: bool = True) -> list[BrokerMetadata]:
        """Registered brokers sorted by id (Kafka's getBrokerMetadatas); racks only when every
        broker has one (RackAwareMode.Safe) and ``rack_aware``."""
        brokers = sorted(self.zk.get_all_broker_and_epochs().items())
        racks = [info.rack for _, (info, _) in brokers]
        use_racks = rack_aware and all(r is not None for r in racks)
        return [BrokerMetadata(bid, info.rack if use_racks else None) for bid, (info, _) in brokers]

    def assign_replicas_to_brokers(self, brokers: Sequence[BrokerMetadata], n_partitions: int,
                                   replication_factor: int) -> dict[int, list[int]]:
        try:
            return assign_replicas_to_brokers(brokers, n_partitions, replication_factor)
        except PlacementError as e:
            raise AdminError(e.error, e.message) from None

    # --- topics -----------------------------------------------------------------------

    def topic_exists(self, topic: str) -> bool:
        return self.zk.exists(z.topic_path(topic))

    def is_topic_marked_for_deletion(self, topic: str) -> bool:
        return self.zk.exists(z.delete_topic_path(topic))

    def validate_topic_create(self, topic: str, assignment: Mapping[int, Sequence[int]],
                              config: Mapping[str, str]) -> None:
        err = topic_name_error(topic)
        if err is not None:
            raise AdminError(Errors.INVALID_TOPIC_EXCEPTION, err)
        if self.topic_exists(topic):
            raise AdminError(Errors.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' already exists.")
        if self.is_topic_marked_for_deletion(topic):
            raise AdminError(Errors.TOPIC_ALREADY_EXISTS, f"Topic '{topic}' is marked for deletion.")
        if "." in topic or "_" in topic:
            colliding = sorted(t for t in self.zk.get_all_topics()
                               if t != topic and _collision_key(t) == _collision_key(topic))
            if colliding:
                raise AdminError(Errors.INVALID_TOPIC_EXCEPTION,
                                 f"Topic '{topic}' collides with existing topics: {', '.join(colliding)}")
        validate_replica_assignment(assignment)
        self.validate_topic_configs(config)

    @staticmethod
    def validate_topic_configs(config: Mapping[str, str]) -> None:
        err = validate_topic_configs(dict(config))
        if err is not None:
            raise AdminError(Errors.INVALID_CONFIG, err)

    def create_topic(self, topic: str, n_partitions: int, replication_factor: int,
                     config: Mapping[str, str] | None = None,
                     brokers: Sequence[BrokerMetadata] | None = None) -> str:
        """Placement over ``brokers`` (default: every registered broker, rack-aware when all have
        racks), then :meth:`create_topic_with_assignment`. Returns the topic id."""
        metas = list(brokers) if brokers is not None else self.get_broker_metadatas()
        assignment = self.assign_replicas_to_brokers(metas, n_partitions, replication_factor)
        return self.create_topic_with_assignment(topic, config or {}, assignment)

    def create_topic_with_assignment(self, topic: str, config: Mapping[str, str],
                                     assignment: Mapping[int, Sequence[int]], *, validate: bool = True,
                                     topic_id: str | None = None) -> str:
        if validate:
            self.validate_topic_create(topic, assignment, config)
        tid = topic_id or random_uuid_base64()
        # Not transactional with the assignment, as in Kafka: the config first, so the controller
        # and brokers see it when the topic appears.
        self.zk.set_or_create_entity_configs("topics", topic, dict(config))
        try:
            self.zk.create_topic_assignment(
                topic, tid, {p: z.ReplicaAssignment(tuple(r)) for p, r in sorted(assignment.items())})
        except NodeExistsError:
            raise AdminError(Errors.TOPIC_ALREADY_EXISTS, f'Topic "{topic}" already exists.') from None
        return tid

    def get_topic_assignment(self, topic: str) -> z.TopicAssignment | None:
        return self.zk.get_replica_assignment_and_topic_ids([topic]).get(topic)

    def create_new_partitions_assignment(
        self, topic: str, existing: Mapping[int, z.ReplicaAssignment], all_brokers: Sequence[BrokerMetadata],
        n_partitions: int, replica_assignment: Mapping[int, Sequence[int]] | None = None,
    ) -> dict[int, list[int]]:
        """The new partitions' replicas (Kafka's createNewPartitionsAssignment): placement starts
        at the first broker with an id ≥ partition 0's first replica, numbering after the old ones."""
        if 0 not in existing:
            raise AdminError(Errors.UNKNOWN_SERVER_ERROR,
                             f"Unexpected existing replica assignment for topic '{topic}', partition id 0 is missing. "
                             f"Assignment: {dict(existing)}")
        p0 = existing[0].replicas
        to_add = n_partitions - len(existing)
        if to_add < 0:
            raise AdminError(Errors.INVALID_PARTITIONS,
                             f"Topic currently has {len(existing)} partitions, which is higher than the requested "
                             f"{n_partitions}.")
        if to_add == 0:
            raise AdminError(Errors.INVALID_PARTITIONS, f"Topic already has {len(existing)} partitions.")
        if replica_assignment is not None:
            proposed = {p: list(r) for p, r in replica_assignment.items()}
        else:
            ids = [b.id for b in all_brokers]
            start = next((i for i, b in enumerate(ids) if b >= p0[0]), -1) if p0 else 0
            try:
                proposed = assign_replicas_to_brokers(all_brokers, to_add, len(p0), max(0, start), len(existing))
            except PlacementError as e:
                raise AdminError(e.error, e.message) from None
        self._validate_new_partitions(proposed, len(p0), {b.id for b in all_brokers})
        return proposed

    @staticmethod
    def _validate_new_partitions(proposed: Mapping[int, Sequence[int]], expected_rf: int,
                                 available: set[int]) -> None:
        bad_rf = {p: len(r) for p, r in proposed.items() if len(r) != expected_rf}
        if bad_rf:
            raise AdminError(Errors.INVALID_REPLICA_ASSIGNMENT,
                             f"Inconsistent replication factor between partitions, partition 0 has {expected_rf} "
                             f"while partitions [{', '.join(map(str, bad_rf))}] have replication factors "
                             f"[{', '.join(map(str, bad_rf.values()))}], respectively.")
        for p, replicas in proposed.items():
            if not replicas:
                raise AdminError(Errors.INVALID_REPLICA_ASSIGNMENT, f"Cannot have replication factor of 0 for partition id {p}.")
            if len(set(replicas)) != len(replicas):
                raise AdminError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                 f"Duplicate brokers not allowed in replica assignment: {', '.join(map(str, replicas))} "
                                 f"for partition id {p}.")
            unknown = [b for b in replicas if b not in available]
            if unknown:
                raise AdminError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                 f"Some brokers specified for partition id {p} are not available. Specified brokers: "
                                 f"{', '.join(map(str, replicas))}, available brokers: "
                                 f"{', '.join(map(str, sorted(available)))}.")

    def create_partitions_with_assignment(self, topic: str, existing: z.TopicAssignment,
                                          new_partitions: Mapping[int, Sequence[int]]) -> None:
        merged = dict(existing.partitions)
        merged.update({p: z.ReplicaAssignment(tuple(r)) for p, r in new_partitions.items()})
        self.zk.set_topic_assignment(topic, existing.topic_id, merged)

    def delete_topic(self, topic: str) -> None:
        """``/admin/delete_topics/<t>``; the controller's TopicDeletionManager does the deleting."""
        if not self.topic_exists(topic):
            raise AdminError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic} to delete does not exist")
        try:
            self.zk.create_delete_topic_path(topic)
        except NodeExistsError:
            raise TopicAlreadyMarkedForDeletion(topic) from None

    # --- configs ----------------------------------------------------------------------

    def fetch_entity_config(self, entity_type: str, name: str) -> dict[str, str]:
        return self.zk.get_entity_configs(entity_type, config_entity_name(entity_type, name))

    def fetch_all_entity_configs(self, entity_type: str) -> dict[str, dict[str, str]]:
        names = self.zk.get_children(z.config_entity_type_path(entity_type))
        return {n: self.zk.get_entity_configs(entity_type, n) for n in names}

    def change_topic_config(self, topic: str, config: Mapping[str, str]) -> None:
        if not self.topic_exists(topic):
            raise AdminError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{topic}' does not exist.")
        self.validate_topic_configs(config)
        self.change_entity_config("topics", topic, config)

    def change_broker_config(self, broker: str, config: Mapping[str, str]) -> None:
        """``broker`` is an id or "" (the cluster default, ``/config/brokers/<default>``)."""
        self.change_entity_config("brokers", broker, config)

    def change_entity_config(self, entity_type: str, name: str, config: Mapping[str, str]) -> str:
        """Write the whole config of the entity and announce it; returns the notification's name."""
        entity = config_entity_name(entity_type, name)
        self.zk.set_or_create_entity_configs(entity_type, entity, dict(config))
        return self.zk.create_config_change_notification(f"{entity_type}/{entity}")


class TopicAlreadyMarkedForDeletion(AdminError):
    def __init__(self, topic: str) -> None:
        super().__init__(Errors.TOPIC_ALREADY_EXISTS, f"topic {topic} is already marked for deletion")
