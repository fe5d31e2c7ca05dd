"""MetadataDelta: metadata records replayed over an image, and the next image built from them.

As Kafka's ``MetadataDelta``: ``MetadataDelta(image)`` starts from an immutable image,
``replay(name, record, offset)`` takes one committed record at a time, and ``apply()`` builds the
next :class:`~odradek.metadata.image.MetadataImage`, which the owner swaps in by one reference.
The old image is never changed. ``apply()`` shares what the records did not touch: an area without
changes is the old area object, an unchanged topic is the old ``TopicImage`` (only the maps that
index the topics are copied, and only when a topic changed).

Every record type is either applied here or refused loudly (:class:`MetadataReplayError`), as is a
record that does not fit the image (a partition of an unknown topic, fencing a broker at another
epoch): Kafka's replay throws on these too. ``APPLIED_RECORD_TYPES`` lists what is applied; the
decoder (:mod:`odradek.metadata.records`) already refuses the types of features Odradek does not
have (quotas, SCRAM, delegation tokens).

The delta also keeps what changed, by name, for the publishers (the replica manager, the dynamic
broker configs, the group coordinator): ``changed_partitions``, ``created_topics``,
``deleted_topics``, ``changed_topic_configs``, ``changed_broker_configs``, ``changed_brokers``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from odradek.metadata.image import (
    BROKER_RESOURCE,
    TOPIC_RESOURCE,
    AclsImage,
    BrokerEndpoint,
    BrokerRegistration,
    ClientQuotasImage,
    ClusterImage,
    ConfigurationsImage,
    ControllerRegistration,
    FeaturesImage,
    MetadataImage,
    PartitionRegistration,
    ProducerIdsImage,
    TopicImage,
    TopicsImage,
    frozen_mapping,
)
from odradek.metadata.scram_image import ScramDelta

NO_LEADER_CHANGE = -2  # PartitionChangeRecord.leader when the leader stays
_MIGRATING = uuid.UUID(int=0)  # Kafka's DirectoryId.MIGRATING

# BrokerRegistrationChangeRecord.fenced (Kafka's BrokerRegistrationFencingChange).
_FENCING_CHANGE: dict[int, bool | None] = {1: True, 0: None, -1: False}
# BrokerRegistrationChangeRecord.in_controlled_shutdown (BrokerRegistrationInControlledShutdownChange).
_SHUTDOWN_CHANGE: dict[int, bool | None] = {0: None, 1: True}


class MetadataReplayError(Exception):
    """A metadata record that cannot be applied to the image: of a type Odradek does not apply,
    or one that contradicts the image. Start-up stops on one rather than serve a cluster whose
    state this node only partly knows."""

    def __init__(self, record: str, offset: int, reason: str) -> None:
        super().__init__(f"{record} at offset {offset}: {reason}")
        self.source = "__cluster_metadata"
        self.record = record
        self.offset = offset
        self.reason = reason


@dataclass
class _TopicChange:
    """A topic touched by the delta: its partitions before (``base``) and what changed."""

    name: str
    topic_id: uuid.UUID
    base: Mapping[int, PartitionRegistration]
    changes: dict[int, PartitionRegistration] = field(default_factory=dict)

    def partition(self, pid: int) -> PartitionRegistration | None:
        p = self.changes.get(pid)
        return self.base.get(pid) if p is None else p

    def build(self) -> TopicImage:
        parts = dict(self.base)
        parts.update(self.changes)
        return TopicImage(self.name, self.topic_id, frozen_mapping(parts))


def _ints(values: Iterable[int] | None) -> tuple[int, ...]:
    return () if values is None else tuple(values)


def _directories(dirs: list[uuid.UUID] | None, replicas: tuple[int, ...]) -> tuple[uuid.UUID, ...] | None:
    """Kafka's defaultToMigrating: none given (or all MIGRATING) is MIGRATING for each replica;
    None when they do not match the replicas."""
    if not dirs or all(d == _MIGRATING for d in dirs):
        return (_MIGRATING,) * len(replicas)
    if len(dirs) != len(replicas):
        return None
    return tuple(dirs)


def _endpoints(records: list[dict[str, Any]]) -> Mapping[str, BrokerEndpoint]:
    return frozen_mapping(
        {e["name"]: BrokerEndpoint(e["name"], e["host"], e["port"], e["security_protocol"]) for e in records}
    )


def _features(records: list[dict[str, Any]]) -> Mapping[str, tuple[int, int]]:
    return frozen_mapping(
        {f["name"]: (f["min_supported_version"], f["max_supported_version"]) for f in records}
    )


class MetadataDelta:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.offset = image.offset
        # -- what changed, for publishers (names as the broker's components know them) --
        self.changed_partitions: set[tuple[str, int]] = set()
        self.created_topics: set[str] = set()
        self.deleted_topics: dict[str, TopicImage] = {}  # the deleted topic as it was
        self.changed_topic_configs: set[str] = set()
        # BROKER config resources changed ("" = cluster default, "<id>" = one broker).
        self.changed_broker_configs: set[str] = set()
        self.changed_brokers: set[int] = set()
        # Client quota entities whose quotas changed (ClientQuotaRecords).
        self.changed_client_quotas: set[tuple[tuple[str, str | None], ...]] = set()
        # -- the changes themselves --
        self._topics: dict[uuid.UUID, _TopicChange] = {}
        self._deleted_topic_ids: set[uuid.UUID] = set()
        self._created_names: dict[str, uuid.UUID] = {}
        self._configs: dict[tuple[int, str], dict[str, str]] = {}
        self._brokers: dict[int, BrokerRegistration | None] = {}
        self._controllers: dict[int, ControllerRegistration | None] = {}
        self._feature_levels: dict[str, int] = {}
        self._zk_migration_state: int | None = None
        self._next_producer_id: int | None = None
        # ACLs added (StandardAcl) or removed (None) by id.
        self.acl_changes: dict[uuid.UUID, Any] = {}
        self.scram = ScramDelta()
        self._client_quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float]] = {}

    def is_empty(self) -> bool:
        """True when nothing a publisher follows changed."""
        return not (
            self.changed_partitions
            or self.deleted_topics
            or self.created_topics
            or self.changed_topic_configs
            or self.changed_brokers
            or self.changed_broker_configs
            or self.acl_changes
            or self.scram.changes
            or self.changed_client_quotas
        )

    # -- replay ---------------------------------------------------------------------------------

    def replay(self, name: str, record: dict[str, Any], offset: int = -1) -> None:
        """Apply one decoded, committed record (``offset`` is its offset in the log)."""
        handler = _HANDLERS.get(name)
        if handler is None:
            raise MetadataReplayError(name, offset, f"metadata record type {name} is not supported by Odradek")
        handler(self, name, record, offset)
        if offset >= 0:
            self.offset = offset

    # -- lookups over the image and what this delta changed so far --

    def _live_topic_id(self, name: str) -> uuid.UUID | None:
        tid = self._created_names.get(name)
        if tid is not None:
            return tid
        t = self.image.topics.by_name.get(name)
        if t is None or t.topic_id in self._deleted_topic_ids:
            return None
        return t.topic_id

    def _topic(self, name: str, topic_id: uuid.UUID, offset: int) -> _TopicChange:
        tc = self._topics.get(topic_id)
        if tc is not None:
            return tc
        t = self.image.topics.by_id.get(topic_id)
        if t is None or topic_id in self._deleted_topic_ids:
            raise MetadataReplayError(name, offset, f"no topic with id {topic_id}")
        tc = self._topics[topic_id] = _TopicChange(t.name, topic_id, t.partitions)
        return tc

    def _config(self, key: tuple[int, str]) -> dict[str, str]:
        cfg = self._configs.get(key)
        if cfg is None:
            cfg = self._configs[key] = dict(self.image.configs.resources.get(key, {}))
        return cfg

    def _broker(self, name: str, broker_id: int, epoch: int, offset: int) -> BrokerRegistration:
        b = self._brokers[broker_id] if broker_id in self._brokers else self.image.cluster.brokers.get(broker_id)
        if b is None:
            raise MetadataReplayError(name, offset, f"broker {broker_id} is not registered")
        if b.epoch != epoch:
            raise MetadataReplayError(
                name, offset, f"epoch {epoch} does not match broker {broker_id}'s current epoch {b.epoch}"
            )
        return b

    # -- topics --

    def _replay_topic(self, name: str, r: dict[str, Any], offset: int) -> None:
        topic, tid = r["name"], r["topic_id"]
        existing = self._live_topic_id(topic)
        if existing is not None and existing != tid:
            raise MetadataReplayError(name, offset, f"topic {topic} already exists with id {existing}")
        self._topics[tid] = _TopicChange(topic, tid, frozen_mapping({}))
        self._created_names[topic] = tid
        self.created_topics.add(topic)

    def _replay_partition(self, name: str, r: dict[str, Any], offset: int) -> None:
        tc = self._topic(name, r["topic_id"], offset)
        pid = r["partition_id"]
        replicas = _ints(r["replicas"])
        dirs = _directories(r.get("directories"), replicas)
        if dirs is None:
            raise MetadataReplayError(name, offset, f"{tc.name}-{pid} has {len(replicas)} replicas but other directories")
        tc.changes[pid] = PartitionRegistration(
            replicas=replicas,
            isr=_ints(r["isr"]),
            leader=r["leader"],
            leader_epoch=r["leader_epoch"],
            partition_epoch=r["partition_epoch"],
            removing_replicas=_ints(r.get("removing_replicas")),
            adding_replicas=_ints(r.get("adding_replicas")),
            elr=_ints(r.get("eligible_leader_replicas")),
            last_known_elr=_ints(r.get("last_known_elr")),
            leader_recovery_state=r.get("leader_recovery_state", 0),
            directories=dirs,
        )
        self.changed_partitions.add((tc.name, pid))

    def _replay_partition_change(self, name: str, r: dict[str, Any], offset: int) -> None:
        tc = self._topic(name, r["topic_id"], offset)
        pid = r["partition_id"]
        p = tc.partition(pid)
        if p is None:
            raise MetadataReplayError(name, offset, f"topic {tc.name} has no partition {pid}")
        replicas = p.replicas if r.get("replicas") is None else _ints(r["replicas"])
        dirs = _directories(r.get("directories") or list(p.directories), replicas)
        if dirs is None:
            if r.get("directories") is not None:
                raise MetadataReplayError(name, offset, f"{tc.name}-{pid}: directories do not match the replicas")
            dirs = (_MIGRATING,) * len(replicas)
        leader, leader_epoch = p.leader, p.leader_epoch
        if r.get("leader", NO_LEADER_CHANGE) != NO_LEADER_CHANGE:
            leader, leader_epoch = r["leader"], p.leader_epoch + 1
        recovery = r.get("leader_recovery_state", -1)

        def keep(key: str, old: tuple[int, ...]) -> tuple[int, ...]:
            return old if r.get(key) is None else _ints(r[key])

        tc.changes[pid] = PartitionRegistration(
            replicas=replicas,
            isr=keep("isr", p.isr),
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=p.partition_epoch + 1,
            removing_replicas=keep("removing_replicas", p.removing_replicas),
            adding_replicas=keep("adding_replicas", p.adding_replicas),
            elr=keep("eligible_leader_replicas", p.elr),
            last_known_elr=keep("last_known_elr", p.last_known_elr),
            leader_recovery_state=p.leader_recovery_state if recovery == -1 else recovery,
            directories=dirs,
        )
        self.changed_partitions.add((tc.name, pid))

    def _replay_remove_topic(self, name: str, r: dict[str, Any], offset: int) -> None:
        tid = r["topic_id"]
        created = self._topics.pop(tid, None)
        old = self.image.topics.by_id.get(tid)
        if old is not None and tid not in self._deleted_topic_ids:
            self._deleted_topic_ids.add(tid)
            self.deleted_topics[old.name] = old
            topic = old.name
        elif created is not None:
            topic = created.name  # created by this delta: neither created nor deleted
        else:
            raise MetadataReplayError(name, offset, f"no topic with id {tid}")
        if self._created_names.get(topic) == tid:
            del self._created_names[topic]
            self.created_topics.discard(topic)
        self.changed_partitions = {tp for tp in self.changed_partitions if tp[0] != topic}
        self._configs[(TOPIC_RESOURCE, topic)] = {}  # a topic's configs go with it

    def _replay_clear_elr(self, name: str, r: dict[str, Any], offset: int) -> None:
        topic = r["topic_name"]
        if topic:
            tid = self._live_topic_id(topic)
            if tid is None:
                raise MetadataReplayError(name, offset, f"no topic named {topic}")
            ids = [tid]
        else:
            ids = [t for t in self.image.topics.by_id if t not in self._deleted_topic_ids]
            ids += [t for t in self._topics if t not in self.image.topics.by_id]
        for tid in ids:
            for pid, reg in self._partitions_of(tid):
                if reg.elr or reg.last_known_elr:
                    tc = self._topic(name, tid, offset)
                    tc.changes[pid] = replace(reg, elr=(), last_known_elr=(), partition_epoch=reg.partition_epoch + 1)
                    self.changed_partitions.add((tc.name, pid))

    def _partitions_of(self, topic_id: uuid.UUID) -> list[tuple[int, PartitionRegistration]]:
        tc = self._topics.get(topic_id)
        if tc is None:
            return list(self.image.topics.by_id[topic_id].partitions.items())
        out = []
        for pid in set(tc.base) | set(tc.changes):
            p = tc.partition(pid)
            assert p is not None
            out.append((pid, p))
        return out

    # -- configs --

    def _replay_config(self, name: str, r: dict[str, Any], offset: int) -> None:
        rtype, rname = r["resource_type"], r["resource_name"]
        cfg = self._config((rtype, rname))
        if r["value"] is None:
            cfg.pop(r["name"], None)
        else:
            cfg[r["name"]] = r["value"]
        if rtype == TOPIC_RESOURCE:
            self.changed_topic_configs.add(rname)
        elif rtype == BROKER_RESOURCE:
            self.changed_broker_configs.add(rname)

    def _replay_client_quota(self, name: str, r: dict[str, Any], offset: int) -> None:
        key = tuple(sorted((e["entity_type"], e["entity_name"]) for e in r["entity"]))
        quotas = self._client_quotas.get(key)
        if quotas is None:
            quotas = self._client_quotas[key] = dict(self.image.client_quotas.entities.get(key, {}))
        if r["remove"]:
            quotas.pop(r["key"], None)
        else:
            quotas[r["key"]] = r["value"]
        self.changed_client_quotas.add(key)

    # -- cluster --

    def _replay_register_broker(self, name: str, r: dict[str, Any], offset: int) -> None:
        self._brokers[r["broker_id"]] = BrokerRegistration(
            broker_id=r["broker_id"],
            epoch=r["broker_epoch"],
            incarnation_id=r["incarnation_id"],
            endpoints=_endpoints(r["end_points"]),
            rack=r.get("rack"),
            fenced=bool(r.get("fenced", True)),
            in_controlled_shutdown=bool(r.get("in_controlled_shutdown", False)),
            supported_features=_features(r.get("features") or []),
            log_dirs=tuple(r.get("log_dirs") or ()),
            is_migrating_zk_broker=bool(r.get("is_migrating_zk_broker", False)),
        )
        self.changed_brokers.add(r["broker_id"])

    def _replay_unregister_broker(self, name: str, r: dict[str, Any], offset: int) -> None:
        self._brokers[r["broker_id"]] = None
        self.changed_brokers.add(r["broker_id"])

    def _replay_fence(self, name: str, r: dict[str, Any], offset: int) -> None:
        b = self._broker(name, r["id"], r["epoch"], offset)
        self._brokers[b.broker_id] = replace(b, fenced=name == "FenceBrokerRecord")
        self.changed_brokers.add(b.broker_id)

    def _replay_broker_registration_change(self, name: str, r: dict[str, Any], offset: int) -> None:
        b = self._broker(name, r["broker_id"], r["broker_epoch"], offset)
        fencing, shutdown = r.get("fenced", 0), r.get("in_controlled_shutdown", 0)
        if fencing not in _FENCING_CHANGE:
            raise MetadataReplayError(name, offset, f"unknown value {fencing} for fenced")
        if shutdown not in _SHUTDOWN_CHANGE:
            raise MetadataReplayError(name, offset, f"unknown value {shutdown} for in_controlled_shutdown")
        fenced, in_shutdown = _FENCING_CHANGE[fencing], _SHUTDOWN_CHANGE[shutdown]
        new = replace(
            b,
            fenced=b.fenced if fenced is None else fenced,
            in_controlled_shutdown=b.in_controlled_shutdown if in_shutdown is None else in_shutdown,
            log_dirs=tuple(r["log_dirs"]) if r.get("log_dirs") else b.log_dirs,
        )
        if new != b:
            self._brokers[b.broker_id] = new
            self.changed_brokers.add(b.broker_id)

    def _replay_register_controller(self, name: str, r: dict[str, Any], offset: int) -> None:
        self._controllers[r["controller_id"]] = ControllerRegistration(
            controller_id=r["controller_id"],
            incarnation_id=r["incarnation_id"],
            zk_migration_ready=bool(r["zk_migration_ready"]),
            endpoints=_endpoints(r["end_points"]),
            supported_features=_features(r["features"]),
        )

    # -- features, producer ids, markers --

    def _replay_feature_level(self, name: str, r: dict[str, Any], offset: int) -> None:
        self._feature_levels[r["name"]] = r["feature_level"]

    def _replay_zk_migration_state(self, name: str, r: dict[str, Any], offset: int) -> None:
        self._zk_migration_state = r["zk_migration_state"]

    def _replay_producer_ids(self, name: str, r: dict[str, Any], offset: int) -> None:
        current = self.image.producer_ids.next_producer_id if self._next_producer_id is None else self._next_producer_id
        self._next_producer_id = max(current, r["next_producer_id"])

    def _replay_acl(self, name: str, r: dict[str, Any], offset: int) -> None:
        from odradek.security.acl import StandardAcl

        self.acl_changes[r["id"]] = StandardAcl.from_record(r)

    def _replay_remove_acl(self, name: str, r: dict[str, Any], offset: int) -> None:
        acl_id = r["id"]
        known = self.acl_changes.get(acl_id) if acl_id in self.acl_changes else self.image.acls.acls.get(acl_id)
        if known is None:
            raise MetadataReplayError(name, offset, f"no ACL with id {acl_id}")
        self.acl_changes[acl_id] = None
    def _replay_scram(self, name: str, r: dict[str, Any], offset: int) -> None:
        error = self.scram.replay(name, r)
        if error is not None:
            raise MetadataReplayError(name, offset, error)

    def _replay_marker(self, name: str, r: dict[str, Any], offset: int) -> None:
        """NoOpRecord, and the transaction markers (KIP-868), whose transactions the listener's
        :class:`~odradek.metadata.transactions.MetadataTransactions` already resolved: only the
        image's offset moves."""

    # -- the next image -------------------------------------------------------------------------

    def apply(self) -> MetadataImage:
        """The image with every replayed record applied; the delta's image is left as it was."""
        old = self.image
        return MetadataImage(
            offset=self.offset,
            topics=self._apply_topics(old.topics),
            cluster=self._apply_cluster(old.cluster),
            configs=self._apply_configs(old.configs),
            features=self._apply_features(old.features),
            producer_ids=(
                old.producer_ids
                if self._next_producer_id is None
                else ProducerIdsImage(self._next_producer_id)
            ),
            acls=self._apply_acls(old.acls),
            scram=self.scram.apply(old.scram),
            client_quotas=self._apply_client_quotas(old.client_quotas),
        )

    def _apply_acls(self, old: AclsImage) -> AclsImage:
        if not self.acl_changes:
            return old
        return AclsImage(_merged(old.acls, self.acl_changes))  # type: ignore[arg-type]

    def _apply_client_quotas(self, old: ClientQuotasImage) -> ClientQuotasImage:
        if not self._client_quotas:
            return old
        entities = dict(old.entities)
        for key, quotas in self._client_quotas.items():
            if quotas:
                entities[key] = frozen_mapping(dict(quotas))
            else:
                entities.pop(key, None)
        return ClientQuotasImage(frozen_mapping(entities))

    def _apply_topics(self, old: TopicsImage) -> TopicsImage:
        if not self._topics and not self._deleted_topic_ids:
            return old
        by_id, by_name = dict(old.by_id), dict(old.by_name)
        for tid in self._deleted_topic_ids:
            t = by_id.pop(tid)
            if by_name.get(t.name) is t:
                del by_name[t.name]
        for tid, tc in self._topics.items():
            t = tc.build()
            by_id[tid] = by_name[t.name] = t
        return TopicsImage(frozen_mapping(by_id), frozen_mapping(by_name))

    def _apply_cluster(self, old: ClusterImage) -> ClusterImage:
        if not self._brokers and not self._controllers:
            return old
        return ClusterImage(_merged(old.brokers, self._brokers), _merged(old.controllers, self._controllers))

    def _apply_configs(self, old: ConfigurationsImage) -> ConfigurationsImage:
        if not self._configs:
            return old
        resources = dict(old.resources)
        for key, cfg in self._configs.items():
            if cfg:
                resources[key] = frozen_mapping(dict(cfg))
            else:
                resources.pop(key, None)
        return ConfigurationsImage(frozen_mapping(resources))

    def _apply_features(self, old: FeaturesImage) -> FeaturesImage:
        if not self._feature_levels and self._zk_migration_state is None:
            return old
        levels = dict(old.levels)
        for feature, level in self._feature_levels.items():
            if level == 0:  # as Kafka's FeaturesDelta: level 0 removes the feature
                levels.pop(feature, None)
            else:
                levels[feature] = level
        zk = old.zk_migration_state if self._zk_migration_state is None else self._zk_migration_state
        return FeaturesImage(frozen_mapping(levels), zk)


def _merged(old: Mapping[int, Any], changes: dict[int, Any]) -> Mapping[int, Any]:
    """``old`` with ``changes`` laid over it (None removes)."""
    if not changes:
        return old
    out = dict(old)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return frozen_mapping(out)


_Handler = Callable[[MetadataDelta, str, dict[str, Any], int], None]

_HANDLERS: dict[str, _Handler] = {
    "TopicRecord": MetadataDelta._replay_topic,
    "PartitionRecord": MetadataDelta._replay_partition,
    "PartitionChangeRecord": MetadataDelta._replay_partition_change,
    "RemoveTopicRecord": MetadataDelta._replay_remove_topic,
    "ClearElrRecord": MetadataDelta._replay_clear_elr,
    "ConfigRecord": MetadataDelta._replay_config,
    "ClientQuotaRecord": MetadataDelta._replay_client_quota,
    "RegisterBrokerRecord": MetadataDelta._replay_register_broker,
    "UnregisterBrokerRecord": MetadataDelta._replay_unregister_broker,
    "FenceBrokerRecord": MetadataDelta._replay_fence,
    "UnfenceBrokerRecord": MetadataDelta._replay_fence,
    "BrokerRegistrationChangeRecord": MetadataDelta._replay_broker_registration_change,
    "RegisterControllerRecord": MetadataDelta._replay_register_controller,
    "FeatureLevelRecord": MetadataDelta._replay_feature_level,
    "ZkMigrationStateRecord": MetadataDelta._replay_zk_migration_state,
    "ProducerIdsRecord": MetadataDelta._replay_producer_ids,
    "NoOpRecord": MetadataDelta._replay_marker,
    "AccessControlEntryRecord": MetadataDelta._replay_acl,
    "RemoveAccessControlEntryRecord": MetadataDelta._replay_remove_acl,
    "UserScramCredentialRecord": MetadataDelta._replay_scram,
    "RemoveUserScramCredentialRecord": MetadataDelta._replay_scram,
    "BeginTransactionRecord": MetadataDelta._replay_marker,
    "EndTransactionRecord": MetadataDelta._replay_marker,
    "AbortTransactionRecord": MetadataDelta._replay_marker,
}

# The metadata record types a delta applies; every other one is refused (MetadataReplayError).
APPLIED_RECORD_TYPES: frozenset[str] = frozenset(_HANDLERS)
