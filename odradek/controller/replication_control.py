"""ReplicationControlManager: topics and partitions, decided as metadata records (sans-I/O).

Given the controller's metadata image and a request, it validates the request and returns the
response entries plus the records that carry the change out. It never writes anything itself:
the QuorumController commits the records and only then does anyone apply them.
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.controller.election import OfflinePartitionLeaderSelector, PartitionLeadership
from odradek.controller.replica_placement import BrokerMetadata, assign_replicas_to_brokers
from odradek.metadata.image import TOPIC_RESOURCE, MetadataImage
from odradek.protocol.errors import Errors

MetadataRecord = tuple[str, dict[str, Any]]

# Kafka's QuorumController.MAX_RECORDS_PER_USER_OP: one operation (a CreateTopics or
# CreatePartitions request) may produce at most this many metadata records, committed together as
# one batch. More is refused before anything is built, with Kafka's POLICY_VIOLATION and message.
MAX_RECORDS_PER_USER_OP = 10_000
EXCESSIVE_BATCH_MESSAGE = "Unable to perform excessively large batch operation."

MAX_NAME_LENGTH = 249


class ExcessiveBatchError(Exception):
    """An operation would produce more than MAX_RECORDS_PER_USER_OP records."""

_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
RESERVED_TOPICS = frozenset({"__cluster_metadata"})


def topic_name_error(name: str | None) -> str | None:
    """Why a topic name is illegal (Kafka's rules), or None when it is fine."""
    if name is None or name == "":
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_NAME_LENGTH:
        return (
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, "
            f"topic name: {name[:40]}..."
        )
    if not _LEGAL.match(name):
        return (
            f"Topic name \"{name}\" is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    return None


def manual_assignment_error(image: MetadataImage, replicas: list[int], replication_factor: int | None) -> str | None:
    """Kafka's validateManualPartitionAssignment (its messages), or None when fine."""
    if not replicas:
        return "The manual partition assignment includes an empty replica list."
    prev: int | None = None
    ordered = sorted(replicas)
    for b in ordered:
        if b not in image.brokers:
            return f"The manual partition assignment includes broker {b}, but no such broker is registered."
        if b == prev:
            return f"The manual partition assignment includes the broker {b} more than once."
        prev = b
    if replication_factor is not None and len(ordered) != replication_factor:
        return (
            f"The manual partition assignment includes a partition with {len(ordered)} replica(s), but "
            f"this is not consistent with previous partitions, which have {replication_factor} replica(s)."
        )
    return None


def collision_key(name: str) -> str:
    return name.replace(".", "_")


@dataclass
class TopicResult:
    name: str
    error: Errors = Errors.NONE
    message: str | None = None
    topic_id: uuid.UUID = field(default_factory=lambda: uuid.UUID(int=0))
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)


def new_topic_id() -> uuid.UUID:
    # Kafka avoids ids whose base64 form starts with '-' (it confuses command lines) and the
    # reserved all-zero and metadata-topic ids.
    while True:
        u = uuid.uuid4()
        if u.bytes[0] & 0xFC != 0xF8 and u.int > 1:
            return u


# Kafka's reserved DirectoryId values (KIP-858).
DIRECTORY_UNASSIGNED = uuid.UUID(int=0)
DIRECTORY_LOST = uuid.UUID(int=1)
DIRECTORY_MIGRATING = uuid.UUID(int=2)


class ReplicationControlManager:
    def __init__(
        self,
        image: MetadataImage,
        *,
        default_partitions: int,
        default_replication_factor: int,
        validate_config: Callable[[str, str], str | None],
        rng: random.Random | None = None,
    ) -> None:
        self.image = image
        self.default_partitions = default_partitions
        self.default_replication_factor = default_replication_factor
        self.validate_config = validate_config
        self.rng = rng if rng is not None else random.Random()

    # -- helpers --------------------------------------------------------------------------------

    def _usable_brokers(self) -> list[int]:
        return sorted(b.broker_id for b in self.image.live_brokers())

    def _placement_brokers(self) -> list[BrokerMetadata]:
        """The unfenced brokers, by id, with their racks when every one has a rack (Kafka's KRaft
        controller never refuses a mix of racked and unracked brokers, so it is placed
        rack-unaware here rather than failing as AdminUtils does)."""
        live = sorted(self.image.live_brokers(), key=lambda b: b.broker_id)
        racked = all(b.rack is not None for b in live)
        return [BrokerMetadata(b.broker_id, b.rack if racked else None) for b in live]

    def _assign(
        self, num_partitions: int, rf: int, first_partition: int = 0, partition_0_leader: int | None = None
    ) -> list[list[int]]:
        """Kafka's AdminUtils.assignReplicasToBrokers: a new topic starts the round-robin at a
        random broker; new partitions of a topic continue it from the broker that leads
        partition 0 (Kafka's addPartitions)."""
        brokers = self._placement_brokers()
        start = -1
        if first_partition > 0:
            # Kafka: max(0, allBrokers.indexWhere(_.id >= existingAssignmentPartition0.head))
            start = next(
                (i for i, b in enumerate(brokers) if partition_0_leader is not None and b.id >= partition_0_leader), 0
            )
        placed = assign_replicas_to_brokers(
            brokers, num_partitions, rf, fixed_start_index=start, start_partition_id=first_partition, rng=self.rng
        )
        return [placed[p] for p in range(first_partition, first_partition + num_partitions)]

    def _partition_records(
        self, topic_id: uuid.UUID, assignment: list[list[int]], first_partition: int
    ) -> list[MetadataRecord]:
        live = set(self._usable_brokers())
        records: list[MetadataRecord] = []
        for i, replicas in enumerate(assignment):
            # A new partition's ISR is its live replicas; its leader the offline election's
            # clean choice among them (the first live replica of the assignment).
            isr = [r for r in replicas if r in live]
            chosen = OfflinePartitionLeaderSelector().select(PartitionLeadership(replicas, isr), live)
            leader = chosen.leader_or_none
            records.append(
                (
                    "PartitionRecord",
                    {
                        "partition_id": first_partition + i,
                        "topic_id": topic_id,
                        "replicas": list(replicas),
                        "isr": isr,
                        "removing_replicas": [],
                        "adding_replicas": [],
                        "leader": leader,
                        "leader_epoch": 0,
                        "partition_epoch": 0,
                        "directories": [self.default_dir(r) for r in replicas],
                    },
                )
            )
        return records

    def _active(self) -> set[int]:
        """Kafka's ClusterControlManager.isActive: unfenced and not in controlled shutdown."""
        return {b.broker_id for b in self.image.brokers.values() if not b.fenced and not b.in_controlled_shutdown}

    def default_dir(self, broker_id: int) -> uuid.UUID:
        """The directory a new replica on ``broker_id`` is placed in (Kafka's
        ``ClusterControlManager.defaultDir``, KIP-858): the broker's only registered log
        directory; MIGRATING when it registered none; UNASSIGNED when it has several (the broker
        then chooses and reports with AssignReplicasToDirs) or is not registered."""
        broker = self.image.brokers.get(broker_id)
        if broker is None:
            return DIRECTORY_UNASSIGNED
        if not broker.log_dirs:
            return DIRECTORY_MIGRATING
        if len(broker.log_dirs) == 1:
            return broker.log_dirs[0]
        return DIRECTORY_UNASSIGNED

    # -- CreateTopics ---------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignments: list[dict[str, Any]],
        configs: list[dict[str, Any]],
        *,
        pending_names: set[str],
        room: int = MAX_RECORDS_PER_USER_OP,
    ) -> tuple[TopicResult, list[MetadataRecord]]:
        """Validate one topic and build its records. Raises ExcessiveBatchError when they would
        be more than ``room`` (what the operation may still add), before building them."""
        res = TopicResult(name)
        err = topic_name_error(name)
        if err is not None:
            res.error, res.message = Errors.INVALID_TOPIC_EXCEPTION, err
            return res, []
        if name in RESERVED_TOPICS:  # Kafka's ControllerApis answer
            res.error, res.message = Errors.INVALID_REQUEST, f"Creation of internal topic {name} is prohibited."
            return res, []
        if name in self.image.topics_by_name or name in pending_names:
            res.error, res.message = Errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
            return res, []
        key = collision_key(name)
        for other in list(self.image.topics_by_name) + list(pending_names):
            if collision_key(other) == key:
                res.error = Errors.INVALID_TOPIC_EXCEPTION
                res.message = (
                    f"Topic '{name}' collides with existing topic: {other} "
                    "(topics that differ only in '.' and '_' collide)"
                )
                return res, []
        # Configs
        overrides: dict[str, str] = {}
        for c in configs:
            cname, cval = c["name"], c["value"]
            if cval is None:
                res.error, res.message = Errors.INVALID_CONFIG, f"Null value not supported for topic configs: {cname}"
                return res, []
            msg = self.validate_config(cname, cval)
            if msg is not None:
                res.error, res.message = Errors.INVALID_CONFIG, msg
                return res, []
            overrides[cname] = cval
        # Partitions and replicas
        live = self._usable_brokers()
        if assignments:
            if replication_factor != -1:
                res.error = Errors.INVALID_REQUEST
                res.message = "A manual partition assignment was specified, but replication factor was not set to -1."
                return res, []
            if num_partitions != -1:
                res.error = Errors.INVALID_REQUEST
                res.message = "A manual partition assignment was specified, but numPartitions was not set to -1."
                return res, []
            if 1 + len(overrides) + len(assignments) > room:
                raise ExcessiveBatchError(EXCESSIVE_BATCH_MESSAGE)
            by_index: dict[int, list[int]] = {}
            manual_rf: int | None = None
            active = self._active()
            for a in assignments:
                pid, replicas = a["partition_index"], list(a["broker_ids"])
                msg = None
                if pid in by_index:
                    msg = f"Found multiple manual partition assignments for partition {pid}"
                else:
                    msg = manual_assignment_error(self.image, replicas, manual_rf)
                if msg is None and not any(r in active for r in replicas):
                    msg = (
                        f"All brokers specified in the manual partition assignment for partition {pid} "
                        "are fenced or in controlled shutdown."
                    )
                if msg is not None:
                    res.error, res.message = Errors.INVALID_REPLICA_ASSIGNMENT, msg
                    return res, []
                manual_rf = len(replicas)
                by_index[pid] = replicas
            if any(i not in by_index for i in range(len(by_index))):
                res.error = Errors.INVALID_REPLICA_ASSIGNMENT
                res.message = "partitions should be a consecutive 0-based integer sequence"
                return res, []
            assignment = [by_index[i] for i in range(len(by_index))]
        else:
            parts = self.default_partitions if num_partitions == -1 else num_partitions
            rf = self.default_replication_factor if replication_factor == -1 else replication_factor
            if parts <= 0:
                res.error = Errors.INVALID_PARTITIONS
                res.message = "Number of partitions was set to an invalid non-positive value."
                return res, []
            if rf <= 0:
                res.error = Errors.INVALID_REPLICATION_FACTOR
                res.message = "Replication factor must be larger than 0, or -1 to use the default value."
                return res, []
            if rf > len(live):
                res.error = Errors.INVALID_REPLICATION_FACTOR
                res.message = (
                    f"Unable to replicate the partition {rf} time(s): The target replication "
                    f"factor of {rf} cannot be reached because only {len(live)} broker(s) are registered."
                )
                return res, []
            if 1 + len(overrides) + parts > room:
                raise ExcessiveBatchError(EXCESSIVE_BATCH_MESSAGE)
            assignment = self._assign(parts, rf)
        topic_id = new_topic_id()
        records: list[MetadataRecord] = [("TopicRecord", {"name": name, "topic_id": topic_id})]
        for k, v in sorted(overrides.items()):
            records.append(
                (
                    "ConfigRecord",
                    {"resource_type": TOPIC_RESOURCE, "resource_name": name, "name": k, "value": v},
                )
            )
        records.extend(self._partition_records(topic_id, assignment, 0))
        res.topic_id = topic_id
        res.num_partitions = len(assignment)
        res.replication_factor = len(assignment[0])
        res.configs = overrides
        return res, records

    # -- DeleteTopics ---------------------------------------------------------------------------

    def delete_topic(self, topic_id: uuid.UUID) -> list[MetadataRecord]:
        return [("RemoveTopicRecord", {"topic_id": topic_id})]

    # -- CreatePartitions -----------------------------------------------------------------------

    def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[dict[str, Any]] | None,
        room: int = MAX_RECORDS_PER_USER_OP,
    ) -> tuple[Errors, str | None, list[MetadataRecord]]:
        """``room``: the records the operation may still add (one per new partition)."""
        t = self.image.topics_by_name.get(name)
        if t is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.", []
        current = len(t.partitions)
        if count < current:
            return (
                Errors.INVALID_PARTITIONS,
                f"The topic {name} currently has {current} partition(s); {count} would not be an increase.",
                [],
            )
        if count == current:
            return Errors.INVALID_PARTITIONS, f"Topic already has {current} partition(s).", []
        rf = len(t.partitions[0].replicas) if t.partitions else 1
        new = count - current
        if new > room:
            return Errors.POLICY_VIOLATION, EXCESSIVE_BATCH_MESSAGE, []
        if assignments:
            assignment = [list(a["broker_ids"]) for a in assignments]
            if len(assignment) != new:
                return (
                    Errors.INVALID_REPLICA_ASSIGNMENT,
                    f"Attempted to add {new} additional partition(s), but only {len(assignment)} assignment(s) were specified.",
                    [],
                )
            active = self._active()
            for i, replicas in enumerate(assignment):
                msg = manual_assignment_error(self.image, replicas, rf)
                if msg is None and not any(r in active for r in replicas):
                    msg = (
                        f"All brokers specified in the manual partition assignment for partition {current + i} "
                        "are fenced or in controlled shutdown."
                    )
                if msg is not None:
                    return Errors.INVALID_REPLICA_ASSIGNMENT, msg, []
        else:
            if rf > len(self._usable_brokers()):
                return (
                    Errors.INVALID_REPLICATION_FACTOR,
                    f"Unable to replicate the partition {rf} time(s): only {len(self._usable_brokers())} broker(s) are registered.",
                    [],
                )
            p0 = t.partitions.get(0)
            assignment = self._assign(new, rf, current, p0.replicas[0] if p0 is not None and p0.replicas else None)
        return Errors.NONE, None, self._partition_records(t.topic_id, assignment, current)
