"""The metadata image: what a node knows of the cluster, built only by replaying metadata records.

Both roles keep one. The controller replays the records it commits into its own image (Kafka's
controller keeps timeline structures; replaying into an image gives the same answers for one
process), and the broker replays what it reads from ``__cluster_metadata`` into its image and
publishes the changes (:class:`MetadataDelta`) to the replica manager and the log manager.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

# ConfigResource types as the protocol numbers them.
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4

NO_LEADER = -1


@dataclass
class PartitionRegistration:
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: list[int] = field(default_factory=list)
    adding_replicas: list[int] = field(default_factory=list)
    # KIP-966 eligible leader replicas (written by Apache Kafka when the last ISR member shuts
    # down: isr=[], elr=[that member]); Odradek reads them to elect a leader after a migration.
    elr: list[int] = field(default_factory=list)
    last_known_elr: list[int] = field(default_factory=list)


@dataclass
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionRegistration] = field(default_factory=dict)


@dataclass
class BrokerEndpoint:
    name: str
    host: str
    port: int
    security_protocol: int = 0


@dataclass
class BrokerRegistration:
    broker_id: int
    epoch: int
    incarnation_id: uuid.UUID
    endpoints: dict[str, BrokerEndpoint]
    rack: str | None
    fenced: bool = True


@dataclass
class MetadataDelta:
    """What one batch of records changed, for publishers."""

    changed_partitions: set[tuple[str, int]] = field(default_factory=set)
    deleted_topics: dict[str, TopicImage] = field(default_factory=dict)
    created_topics: set[str] = field(default_factory=set)
    changed_topic_configs: set[str] = field(default_factory=set)
    changed_brokers: set[int] = field(default_factory=set)
    # BROKER config resources changed ("" = cluster default, "<id>" = one broker).
    changed_broker_configs: set[str] = field(default_factory=set)

    def is_empty(self) -> bool:
        return not (
            self.changed_partitions
            or self.deleted_topics
            or self.created_topics
            or self.changed_topic_configs
            or self.changed_brokers
            or self.changed_broker_configs
        )


class MetadataImage:
    def __init__(self) -> None:
        self.topics_by_name: dict[str, TopicImage] = {}
        self.topics_by_id: dict[uuid.UUID, TopicImage] = {}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        self.brokers: dict[int, BrokerRegistration] = {}
        self.features: dict[str, int] = {}
        self.next_producer_id = 0
        self.offset = -1  # offset of the last record applied

    # -- queries --------------------------------------------------------------------------------

    def topic_config(self, topic: str) -> dict[str, str]:
        return self.configs.get((TOPIC_RESOURCE, topic), {})

    def broker_config(self, name: str) -> dict[str, str]:
        """Dynamic configs of BROKER resource ``name`` ("" = the cluster-wide default)."""
        return self.configs.get((BROKER_RESOURCE, name), {})

    def partition(self, topic: str, partition: int) -> PartitionRegistration | None:
        t = self.topics_by_name.get(topic)
        if t is None:
            return None
        return t.partitions.get(partition)

    def live_brokers(self) -> list[BrokerRegistration]:
        return [b for b in self.brokers.values() if not b.fenced]

    # -- replay --------------------------------------------------------------------------------

    def apply(self, name: str, r: dict[str, Any], delta: MetadataDelta, offset: int = -1) -> None:
        """Apply one decoded metadata record."""
        if offset >= 0:
            self.offset = offset
        handler = getattr(self, "_apply_" + name, None)
        if handler is not None:
            handler(r, delta)

    def _apply_TopicRecord(self, r: dict[str, Any], delta: MetadataDelta) -> None:  # noqa: N802
        t = TopicImage(r["name"], r["topic_id"])
        self.topics_by_name[t.name] = t
        self.topics_by_id[t.topic_id] = t
        delta.created_topics.add(t.name)
        delta.deleted_topics.pop(t.name, None)

    def _apply_PartitionRecord(self, r: dict[str, Any], delta: MetadataDelta) -> None:  # noqa: N802
        t = self.topics_by_id.get(r["topic_id"])
        if t is None:
            return
        t.partitions[r["partition_id"]] = PartitionRegistration(
            replicas=list(r["replicas"]),
            isr=list(r["isr"]),
            leader=r["leader"],
            leader_epoch=r["leader_epoch"],
            partition_epoch=r["partition_epoch"],
            removing_replicas=list(r.get("removing_replicas") or []),
            adding_replicas=list(r.get("adding_replicas") or []),
            elr=list(r.get("eligible_leader_replicas") or []),
            last_known_elr=list(r.get("last_known_elr") or []),
        )
        delta.changed_partitions.add((t.name, r["partition_id"]))

    def _apply_PartitionChangeRecord(self, r: dict[str, Any], delta: MetadataDelta) -> None:  # noqa: N802
        t = self.topics_by_id.get(r["topic_id"])
        if t is None:
            return
        p = t.partitions.get(r["partition_id"])
        if p is None:
            return
        if r.get("isr") is not None:
            p.isr = list(r["isr"])
        if r.get("replicas") is not None:
            p.replicas = list(r["replicas"])
        if r.get("eligible_leader_replicas") is not None:
            p.elr = list(r["eligible_leader_replicas"])
        if r.get("last_known_elr") is not None:
            p.last_known_elr = list(r["last_known_elr"])
        leader = r.get("leader", -2)
        if leader != -2:  # -2 means "unchanged"
            p.leader = leader
            p.leader_epoch += 1
        p.partition_epoch += 1
        delta.changed_partitions.add((t.name, r["partition_id"]))

    def _apply_RemoveTopicRecord(self, r: dict[str, Any], delta: MetadataDelta) -> None:  # noqa: N802
        t = self.topics_by_id.pop(r["topic_id"], None)
        if t is None:
            return
        self.topics_by_name.pop(t.name, None)
        self.configs.pop((TOPIC_RESOURCE, t.name), None)
        delta.deleted_topics[t.name] = t
        delta.created_topics.discard(t.name)
        delta.changed_partitions = {tp for tp in delta.changed_partitions if tp[0] != t.name}

    def _apply_ConfigRecord(self, r: dict[str, Any], delta: MetadataDelta) -> None:  # noqa: N802
        key = (r["resource_type"], r["resource_name"])
        cfg = self.configs.setdefault(key, {})
        if r["value"] is None:
            cfg.pop(r["name"], None)
        else:
            cfg[r["name"]] = r["value"]
        if r["resource_type"] == TOPIC_RESOURCE:
            delta.changed_topic_configs.add(r["resource_name"])
        elif r["resource_type"] == BROKER_RESOURCE:
            delta.changed_broker_configs.add(r["resource_name"])

    def _apply_RegisterBrokerRecord(self, r: dict[str, Any], delta: MetadataDelta) -> None:  # noqa: N802
        endpoints = {
            e["name"]: BrokerEndpoint(e["name"], e["host"], e["port"], e["security_protocol"])
            for e in r["end_points"]
        }
        self.brokers[r["broker_id"]] = BrokerRegistration(
            broker_id=r["broker_id"],
            epoch=r["broker_epoch"],
            incarnation_id=r["incarnation_id"],
            endpoints=endpoints,
            rack=r.get("rack"),
            fenced=bool(r.get("fenced", True)),
        )
        delta.changed_brokers.add(r["broker_id"])

    def _apply_UnfenceBrokerRecord(self, r: dict[str, Any], delta: MetadataDelta) -> None:  # noqa: N802
        b = self.brokers.get(r["id"])
        if b is not None and b.epoch == r["epoch"]:
            b.fenced = False
            delta.changed_brokers.add(b.broker_id)

    def _apply_FenceBrokerRecord(self, r: dict[str, Any], delta: MetadataDelta) -> None:  # noqa: N802
        b = self.brokers.get(r["id"])
        if b is not None and b.epoch == r["epoch"]:
            b.fenced = True
            delta.changed_brokers.add(b.broker_id)

    def _apply_ProducerIdsRecord(self, r: dict[str, Any], delta: MetadataDelta) -> None:  # noqa: N802
        self.next_producer_id = max(self.next_producer_id, r["next_producer_id"])

    def _apply_FeatureLevelRecord(self, r: dict[str, Any], delta: MetadataDelta) -> None:  # noqa: N802
        self.features[r["name"]] = r["feature_level"]
