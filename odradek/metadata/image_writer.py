"""ImageWriter: the metadata records that rebuild an image (Kafka's ``MetadataImage.write`` over an
``ImageWriter``), which is what a snapshot holds.

:func:`write_image` walks an immutable :class:`~odradek.metadata.image.MetadataImage` in Kafka's
order — features (``metadata.version`` first, so that a reader knows the version before anything
else), the cluster (brokers, then controllers), the topics (each TopicRecord followed by its
PartitionRecords), the dynamic configs, the producer-id block — and returns one record per fact.
Replaying them into an empty :class:`~odradek.metadata.delta.MetadataDelta` gives back an equal
image; that is the contract the snapshot tests check.

As Kafka's ``ProducerIdsImage.write``, the ProducerIdsRecord carries broker id -1 and broker epoch
-1: the image keeps only the next producer id, not who asked for the last block.
"""

from __future__ import annotations

from collections.abc import Mapping

from odradek.java_order import java_hash_map_order
from odradek.metadata.image import (
    BrokerEndpoint,
    BrokerRegistration,
    ControllerRegistration,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from odradek.metadata.metadata_record_serde import MetadataRecord
from odradek.metadata.scram_image import scram_records

METADATA_VERSION = "metadata.version"


def write_image(image: MetadataImage) -> list[MetadataRecord]:
    """The records that rebuild ``image`` from the empty image, in Kafka's order."""
    out: list[MetadataRecord] = []
    _write_features(image, out)
    for _, broker in sorted(image.cluster.brokers.items()):
        out.append(("RegisterBrokerRecord", _broker_record(broker)))
    for _, controller in sorted(image.cluster.controllers.items()):
        out.append(("RegisterControllerRecord", _controller_record(controller)))
    for topic in sorted(image.topics.by_id.values(), key=lambda t: t.name):
        _write_topic(topic, out)
    for (rtype, rname), configs in sorted(image.configs.resources.items()):
        for name, value in sorted(configs.items()):
            out.append(
                (
                    "ConfigRecord",
                    {"resource_type": rtype, "resource_name": rname, "name": name, "value": value},
                )
            )
    for acl_id, acl in sorted(image.acls.acls.items(), key=lambda kv: str(kv[0])):
        out.append(("AccessControlEntryRecord", acl.to_record(acl_id)))
    for entity, quotas in sorted(image.client_quotas.entities.items(), key=lambda e: repr(e[0])):
        for key, rate in sorted(quotas.items()):
            out.append(
                (
                    "ClientQuotaRecord",
                    {
                        "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                        "key": key, "value": rate, "remove": False,
                    },
                )
            )
    if image.producer_ids.next_producer_id > 0:
        out.append(
            (
                "ProducerIdsRecord",
                {"broker_id": -1, "broker_epoch": -1, "next_producer_id": image.producer_ids.next_producer_id},
            )
        )
    out.extend(scram_records(image.scram))
    return out


def _write_features(image: MetadataImage, out: list[MetadataRecord]) -> None:
    levels = image.features.levels
    if METADATA_VERSION in levels:
        out.append(("FeatureLevelRecord", {"name": METADATA_VERSION, "feature_level": levels[METADATA_VERSION]}))
    for name in java_hash_map_order([n for n in levels if n != METADATA_VERSION]):
        out.append(("FeatureLevelRecord", {"name": name, "feature_level": levels[name]}))
    if image.features.zk_migration_state != 0:
        out.append(("ZkMigrationStateRecord", {"zk_migration_state": image.features.zk_migration_state}))


def _endpoints(endpoints: Mapping[str, BrokerEndpoint]) -> list[dict[str, object]]:
    return [
        {"name": e.name, "host": e.host, "port": e.port, "security_protocol": e.security_protocol}
        for e in endpoints.values()
    ]


def _features(features: Mapping[str, tuple[int, int]]) -> list[dict[str, object]]:
    return [
        {"name": name, "min_supported_version": lo, "max_supported_version": hi}
        for name, (lo, hi) in features.items()
    ]


def _broker_record(b: BrokerRegistration) -> dict[str, object]:
    return {
        "broker_id": b.broker_id,
        "is_migrating_zk_broker": b.is_migrating_zk_broker,
        "incarnation_id": b.incarnation_id,
        "broker_epoch": b.epoch,
        "end_points": _endpoints(b.endpoints),
        "features": _features(b.supported_features),
        "rack": b.rack,
        "fenced": b.fenced,
        "in_controlled_shutdown": b.in_controlled_shutdown,
        "log_dirs": list(b.log_dirs),
    }


def _controller_record(c: ControllerRegistration) -> dict[str, object]:
    return {
        "controller_id": c.controller_id,
        "incarnation_id": c.incarnation_id,
        "zk_migration_ready": c.zk_migration_ready,
        "end_points": _endpoints(c.endpoints),
        "features": _features(c.supported_features),
    }


def _write_topic(topic: TopicImage, out: list[MetadataRecord]) -> None:
    out.append(("TopicRecord", {"name": topic.name, "topic_id": topic.topic_id}))
    for pid, p in sorted(topic.partitions.items()):
        out.append(("PartitionRecord", partition_record(topic, pid, p)))


def partition_record(topic: TopicImage, pid: int, p: PartitionRegistration) -> dict[str, object]:
    """The PartitionRecord of one partition (Kafka's ``PartitionRegistration.toRecord``)."""
    return {
        "partition_id": pid,
        "topic_id": topic.topic_id,
        "replicas": list(p.replicas),
        "isr": list(p.isr),
        "removing_replicas": list(p.removing_replicas),
        "adding_replicas": list(p.adding_replicas),
        "leader": p.leader,
        "leader_recovery_state": p.leader_recovery_state,
        "leader_epoch": p.leader_epoch,
        "partition_epoch": p.partition_epoch,
        "directories": list(p.directories),
        "eligible_leader_replicas": list(p.elr) if p.elr else None,
        "last_known_elr": list(p.last_known_elr) if p.last_known_elr else None,
    }
