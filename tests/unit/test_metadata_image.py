"""MetadataImage / MetadataDelta / KRaftMetadataCache: every record type applied (or refused),
immutability of images, structural sharing between them, removal records, and the cache's answers."""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from odradek.controller.quorum_controller import QuorumController
from odradek.metadata.delta import APPLIED_RECORD_TYPES, MetadataDelta, MetadataReplayError
from odradek.metadata.image import BROKER_RESOURCE, EMPTY_IMAGE, TOPIC_RESOURCE, MetadataImage
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.metadata_cache import KRaftMetadataCache, Node
from odradek.metadata.metadata_record_serde import MetadataRecord
from odradek.metadata.records import (
    RECORD_TYPES,
    UnsupportedMetadataRecord,
    decode_metadata_record,
    encode_metadata_record,
)
from odradek.protocol.schema import write_uvarint
from odradek.raft.raft_client import Batch

RECORDS_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "kafka-protocol" / "metadata-records"

T1 = uuid.UUID("11111111-1111-1111-1111-111111111111")
T2 = uuid.UUID("22222222-2222-2222-2222-222222222222")
INC = uuid.UUID("33333333-3333-3333-3333-333333333333")
DIR = uuid.UUID("44444444-4444-4444-4444-444444444444")

# What Odradek does with each record type of Kafka's reference: applied to the image, or refused
# (start-up stops: the decoder raises UnsupportedMetadataRecord, a delta MetadataReplayError).
APPLIED = {
    "RegisterBrokerRecord", "UnregisterBrokerRecord", "TopicRecord", "PartitionRecord", "ConfigRecord",
    "PartitionChangeRecord", "FenceBrokerRecord", "UnfenceBrokerRecord", "RemoveTopicRecord",
    "FeatureLevelRecord", "ProducerIdsRecord", "BrokerRegistrationChangeRecord", "NoOpRecord",
    "ZkMigrationStateRecord", "BeginTransactionRecord", "EndTransactionRecord", "AbortTransactionRecord",
    "RegisterControllerRecord", "AccessControlEntryRecord", "RemoveAccessControlEntryRecord",
    "UserScramCredentialRecord", "RemoveUserScramCredentialRecord", "ClientQuotaRecord",
}
REFUSED = {"DelegationTokenRecord", "RemoveDelegationTokenRecord"}
ACL_ID = uuid.UUID(int=77)


def _endpoint(port: int, name: str = "PLAINTEXT") -> dict[str, Any]:
    return {"name": name, "host": "127.0.0.1", "port": port, "security_protocol": 0}


def _feature(name: str = "metadata.version") -> dict[str, Any]:
    return {"name": name, "min_supported_version": 7, "max_supported_version": 21}


def _register(broker_id: int, epoch: int, fenced: bool = True, rack: str | None = None) -> dict[str, Any]:
    return {
        "broker_id": broker_id, "incarnation_id": INC, "broker_epoch": epoch,
        "end_points": [_endpoint(9092 + broker_id), _endpoint(19092 + broker_id, "INTERNAL")],
        "features": [_feature()], "rack": rack, "fenced": fenced, "in_controlled_shutdown": False,
        "log_dirs": [DIR],
    }


def _partition(topic_id: uuid.UUID, pid: int, replicas: list[int], leader: int, **kw: Any) -> dict[str, Any]:
    rec = {
        "partition_id": pid, "topic_id": topic_id, "replicas": replicas, "isr": list(replicas),
        "removing_replicas": [], "adding_replicas": [], "leader": leader, "leader_epoch": 0,
        "partition_epoch": 0, "directories": [uuid.UUID(int=0)] * len(replicas),
    }
    rec.update(kw)
    return rec


def _config(rtype: int, rname: str, key: str, value: str | None) -> dict[str, Any]:
    return {"resource_type": rtype, "resource_name": rname, "name": key, "value": value}


def _codec(name: str, rec: dict[str, Any]) -> dict[str, Any]:
    """The record as the metadata log gives it back: encoded and decoded again."""
    got_name, _version, fields = decode_metadata_record(encode_metadata_record(name, rec))
    assert got_name == name
    return fields


def _replay(image: MetadataImage, records: list[tuple[str, dict[str, Any]]], first: int = 0) -> MetadataDelta:
    delta = MetadataDelta(image)
    for i, (name, rec) in enumerate(records):
        delta.replay(name, _codec(name, rec), first + i)
    return delta


# One record of every type a delta applies, in an order that builds a cluster from nothing.
BUILD: list[tuple[str, dict[str, Any]]] = [
    ("FeatureLevelRecord", {"name": "metadata.version", "feature_level": 21}),
    ("RegisterBrokerRecord", _register(1, 10)),
    ("UnfenceBrokerRecord", {"id": 1, "epoch": 10}),
    ("RegisterBrokerRecord", _register(2, 11, fenced=False, rack="r2")),
    ("RegisterControllerRecord", {
        "controller_id": 3000, "incarnation_id": INC, "zk_migration_ready": False,
        "end_points": [_endpoint(9093, "CONTROLLER")], "features": [_feature()],
    }),
    ("BeginTransactionRecord", {"name": "bootstrap"}),
    ("TopicRecord", {"name": "orders", "topic_id": T1}),
    ("PartitionRecord", _partition(T1, 0, [1, 2], 1)),
    ("PartitionRecord", _partition(T1, 1, [2, 1], 2, eligible_leader_replicas=[1], last_known_elr=[2])),
    ("EndTransactionRecord", {}),
    ("ConfigRecord", _config(TOPIC_RESOURCE, "orders", "retention.ms", "1000")),
    ("ConfigRecord", _config(BROKER_RESOURCE, "", "log.retention.ms", "5000")),
    ("ProducerIdsRecord", {"broker_id": 1, "broker_epoch": 10, "next_producer_id": 1000}),
    ("ZkMigrationStateRecord", {"zk_migration_state": 3}),
    ("ClientQuotaRecord", {"entity": [{"entity_type": "user", "entity_name": None}], "key": "producer_byte_rate",
                           "value": 1024.0, "remove": False}),
    ("NoOpRecord", {}),
    ("AbortTransactionRecord", {"reason": None}),
    ("AccessControlEntryRecord", {
        "id": ACL_ID, "resource_type": 2, "resource_name": "orders", "pattern_type": 3,
        "principal": "User:alice", "host": "*", "operation": 3, "permission_type": 3,
    }),
    ("UserScramCredentialRecord", {"name": "alice", "mechanism": 1, "salt": b"s", "stored_key": b"k",
                                   "server_key": b"v", "iterations": 4096}),
    ("UserScramCredentialRecord", {"name": "alice", "mechanism": 2, "salt": b"s", "stored_key": b"k",
                                   "server_key": b"v", "iterations": 8192}),
]

# Then every record type that changes or removes what BUILD made.
CHANGE: list[tuple[str, dict[str, Any]]] = [
    ("PartitionChangeRecord", {"partition_id": 0, "topic_id": T1, "leader": 2, "isr": [2]}),
    ("ClearElrRecord", {"topic_name": "orders"}),
    ("BrokerRegistrationChangeRecord", {"broker_id": 2, "broker_epoch": 11, "fenced": 0, "in_controlled_shutdown": 1}),
    ("FenceBrokerRecord", {"id": 1, "epoch": 10}),
    ("UnregisterBrokerRecord", {"broker_id": 2, "broker_epoch": 11}),
    ("TopicRecord", {"name": "payments", "topic_id": T2}),
    ("PartitionRecord", _partition(T2, 0, [1], 1)),
    ("RemoveTopicRecord", {"topic_id": T1}),
    ("FeatureLevelRecord", {"name": "group.version", "feature_level": 0}),
    ("ClientQuotaRecord", {"entity": [{"entity_type": "user", "entity_name": None}], "key": "producer_byte_rate",
                           "value": 0.0, "remove": True}),
    ("RemoveAccessControlEntryRecord", {"id": ACL_ID}),
    ("RemoveUserScramCredentialRecord", {"name": "alice", "mechanism": 1}),
]


def _built() -> MetadataImage:
    return _replay(EMPTY_IMAGE, BUILD).apply()


# -- every record type ----------------------------------------------------------------------------


def test_every_reference_record_type_is_applied_or_refused() -> None:
    if not RECORDS_DIR.is_dir():
        pytest.skip(f"Kafka reference record schemas not found in {RECORDS_DIR}")
    reference: dict[str, int] = {}
    for path in sorted(RECORDS_DIR.glob("*.json")):
        lines = [ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("//")]
        doc = json.loads("\n".join(lines))
        reference[doc["name"]] = doc["apiKey"]
    assert set(reference) == APPLIED | REFUSED, "a reference record type is neither applied nor refused"
    assert APPLIED <= APPLIED_RECORD_TYPES
    exercised = {name for name, _ in BUILD + CHANGE}
    for name, api_key in reference.items():
        if name in APPLIED:
            assert name in exercised, f"{name} has no replay test"
            continue
        assert name not in APPLIED_RECORD_TYPES
        frame = bytearray()
        for v in (1, api_key, 0):
            write_uvarint(frame, v)
        with pytest.raises(UnsupportedMetadataRecord, match=name):
            decode_metadata_record(bytes(frame))
        with pytest.raises(MetadataReplayError, match=f"{name} at offset 7: .* not supported by Odradek"):
            MetadataDelta(EMPTY_IMAGE).replay(name, {}, 7)


def test_every_decodable_record_type_is_applied() -> None:
    # Nothing the decoder reads is dropped by the image (ClearElrRecord is newer than the reference).
    assert set(RECORD_TYPES) == APPLIED_RECORD_TYPES
    assert set(RECORD_TYPES) <= {name for name, _ in BUILD + CHANGE}


def test_build_records_applied() -> None:
    delta = _replay(EMPTY_IMAGE, BUILD)
    image = delta.apply()
    assert image.offset == len(BUILD) - 1
    assert dict(image.features.levels) == {"metadata.version": 21}
    assert image.features.zk_migration_state == 3
    b1, b2 = image.cluster.brokers[1], image.cluster.brokers[2]
    assert (b1.epoch, b1.fenced, b1.rack, b1.log_dirs) == (10, False, None, (DIR,))
    assert (b2.fenced, b2.rack, b2.endpoints["INTERNAL"].port) == (False, "r2", 19094)
    assert dict(b1.supported_features) == {"metadata.version": (7, 21)}
    ctl = image.cluster.controllers[3000]
    assert (ctl.endpoints["CONTROLLER"].port, ctl.zk_migration_ready) == (9093, False)
    t = image.topics.by_name["orders"]
    assert image.topics.by_id[T1] is t and t.topic_id == T1
    p0, p1 = t.partitions[0], t.partitions[1]
    assert (p0.replicas, p0.isr, p0.leader, p0.leader_epoch, p0.partition_epoch) == ((1, 2), (1, 2), 1, 0, 0)
    assert (p1.elr, p1.last_known_elr, p1.directories) == ((1,), (2,), (uuid.UUID(int=0),) * 2)
    assert dict(image.topic_config("orders")) == {"retention.ms": "1000"}
    assert dict(image.broker_config("")) == {"log.retention.ms": "5000"}
    assert image.producer_ids.next_producer_id == 1000
    assert dict(image.client_quotas.entities) == {(("user", None),): {"producer_byte_rate": 1024.0}}
    acl = image.acls.acls[ACL_ID]
    assert (acl.resource_name, acl.principal, acl.operation.name, acl.permission_type.name) == (
        "orders", "User:alice", "READ", "ALLOW")
    assert delta.created_topics == {"orders"} and delta.changed_partitions == {("orders", 0), ("orders", 1)}
    assert delta.changed_topic_configs == {"orders"} and delta.changed_broker_configs == {""}
    assert delta.changed_brokers == {1, 2} and not delta.is_empty()


def test_change_records_applied() -> None:
    before = _built()
    # Partition changes, ELR clearing and broker changes, before the topic goes.
    delta = _replay(before, CHANGE[:4], first=100)
    image = delta.apply()
    p0 = image.topics.partition("orders", 0)
    assert p0 is not None
    assert (p0.leader, p0.isr, p0.leader_epoch, p0.partition_epoch) == (2, (2,), 1, 1)
    p1 = image.topics.partition("orders", 1)
    assert p1 is not None and (p1.elr, p1.last_known_elr, p1.partition_epoch, p1.leader_epoch) == ((), (), 1, 0)
    b2 = image.cluster.brokers[2]
    assert (b2.fenced, b2.in_controlled_shutdown) == (False, True)
    assert image.cluster.brokers[1].fenced and image.offset == 103
    assert delta.changed_partitions == {("orders", 0), ("orders", 1)} and delta.changed_brokers == {1, 2}

    delta = _replay(image, CHANGE[4:], first=200)
    after = delta.apply()
    assert set(after.cluster.brokers) == {1}
    assert set(after.topics.by_name) == {"payments"} and set(after.topics.by_id) == {T2}
    assert dict(after.topic_config("orders")) == {}  # a topic's configs go with it
    assert delta.deleted_topics == {"orders": image.topics.by_name["orders"]}
    assert delta.created_topics == {"payments"} and delta.changed_partitions == {("payments", 0)}
    assert "group.version" not in after.features.levels  # level 0 removes a feature
    assert not after.client_quotas.entities and delta.changed_client_quotas == {(("user", None),)}
    assert not after.acls.acls and delta.acl_changes == {ACL_ID: None}


def test_partition_change_keeps_unset_fields() -> None:
    image = _built()
    delta = _replay(image, [("PartitionChangeRecord", {
        "partition_id": 1, "topic_id": T1, "replicas": [2, 1, 3], "adding_replicas": [3], "leader_recovery_state": 1,
    })])
    p = delta.apply().topics.partition("orders", 1)
    assert p is not None
    assert (p.replicas, p.adding_replicas, p.isr, p.leader, p.leader_epoch) == ((2, 1, 3), (3,), (2, 1), 2, 0)
    assert (p.partition_epoch, p.leader_recovery_state, len(p.directories)) == (1, 1, 3)


# -- immutability and sharing ---------------------------------------------------------------------


def test_apply_leaves_the_old_image_unchanged() -> None:
    image = _built()
    copy = _built()
    assert image == copy and image is not copy
    after = _replay(image, CHANGE).apply()
    assert after != image
    assert image == copy  # nothing of the old image moved
    assert image.topics.partition("orders", 0) == copy.topics.partition("orders", 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        image.offset = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        image.topics.by_name["x"] = image.topics.by_name["orders"]  # type: ignore[index]
    with pytest.raises(TypeError):
        image.topics.by_name["orders"].partitions[0] = None  # type: ignore[index]
    with pytest.raises(TypeError):
        image.topic_config("orders")["retention.ms"] = "1"  # type: ignore[index]


def test_a_failed_replay_leaves_the_image_alone() -> None:
    image = _built()
    delta = MetadataDelta(image)
    delta.replay("PartitionChangeRecord", {"partition_id": 0, "topic_id": T1, "leader": 2}, 50)
    with pytest.raises(MetadataReplayError, match="PartitionRecord at offset 51: no topic with id"):
        delta.replay("PartitionRecord", _partition(uuid.uuid4(), 0, [1], 1), 51)
    assert image == _built()


def test_structural_sharing() -> None:
    big = [("TopicRecord", {"name": "big", "topic_id": T2})]
    big += [("PartitionRecord", _partition(T2, p, [1], 1)) for p in range(10_000)]
    delta = MetadataDelta(_built())
    for i, (name, rec) in enumerate(big):
        delta.replay(name, rec, 100 + i)
    image = delta.apply()
    assert len(image.topics.by_name["big"].partitions) == 10_000

    # A partition change of another topic: the 10,000-partition topic is the same object.
    after = _replay(image, [("PartitionChangeRecord", {"partition_id": 0, "topic_id": T1, "isr": [1]})]).apply()
    assert after.topics.by_name["big"] is image.topics.by_name["big"]
    assert after.topics.by_id[T2].partitions is image.topics.by_id[T2].partitions
    assert after.topics.partition("orders", 1) is image.topics.partition("orders", 1)
    assert after.topics.partition("orders", 0) != image.topics.partition("orders", 0)
    for area in ("cluster", "configs", "features", "producer_ids"):
        assert getattr(after, area) is getattr(image, area), area

    # A config change: the topics area itself is shared.
    after2 = _replay(after, [("ConfigRecord", _config(TOPIC_RESOURCE, "big", "retention.ms", "1"))]).apply()
    assert after2.topics is after.topics and after2.configs is not after.configs
    # Records that change nothing structural: only the offset moves.
    after3 = _replay(after2, [("NoOpRecord", {})], first=20_000).apply()
    assert after3.offset == 20_000
    assert all(getattr(after3, a) is getattr(after2, a) for a in ("topics", "cluster", "configs", "features"))


# -- removals -------------------------------------------------------------------------------------


def test_remove_topic_records() -> None:
    image = _built()
    # Removed and created again under the same name in one delta: both are published.
    delta = _replay(image, [
        ("RemoveTopicRecord", {"topic_id": T1}),
        ("TopicRecord", {"name": "orders", "topic_id": T2}),
        ("PartitionRecord", _partition(T2, 0, [1], 1)),
    ])
    after = delta.apply()
    assert delta.deleted_topics["orders"].topic_id == T1 and delta.created_topics == {"orders"}
    assert after.topics.by_name["orders"].topic_id == T2 and T1 not in after.topics.by_id
    assert delta.changed_partitions == {("orders", 0)}
    assert dict(after.topic_config("orders")) == {}

    # Created and removed in one delta: neither created nor deleted.
    delta = _replay(image, [("TopicRecord", {"name": "tmp", "topic_id": T2}), ("RemoveTopicRecord", {"topic_id": T2})])
    after = delta.apply()
    assert not delta.created_topics and not delta.deleted_topics and "tmp" not in after.topics.by_name
    assert after.topics.by_name["orders"] is image.topics.by_name["orders"]

    with pytest.raises(MetadataReplayError, match="RemoveTopicRecord at offset 0: no topic with id"):
        _replay(image, [("RemoveTopicRecord", {"topic_id": T2})])
    with pytest.raises(MetadataReplayError, match="no topic with id"):  # removed twice
        _replay(image, [("RemoveTopicRecord", {"topic_id": T1}), ("RemoveTopicRecord", {"topic_id": T1})])


def test_unregister_broker_record() -> None:
    image = _built()
    after = _replay(image, [("UnregisterBrokerRecord", {"broker_id": 1, "broker_epoch": 10})]).apply()
    assert set(after.cluster.brokers) == {2} and after.cluster.controllers is image.cluster.controllers


@pytest.mark.parametrize(
    ("name", "record", "message"),
    [
        ("PartitionChangeRecord", {"partition_id": 9, "topic_id": T1, "leader": 1}, "topic orders has no partition 9"),
        ("FenceBrokerRecord", {"id": 1, "epoch": 9}, "epoch 9 does not match broker 1's current epoch 10"),
        ("UnfenceBrokerRecord", {"id": 7, "epoch": 1}, "broker 7 is not registered"),
        ("BrokerRegistrationChangeRecord", {"broker_id": 1, "broker_epoch": 10, "fenced": 5}, "unknown value 5 for fenced"),
        ("TopicRecord", {"name": "orders", "topic_id": T2}, f"topic orders already exists with id {T1}"),
        ("ClearElrRecord", {"topic_name": "nope"}, "no topic named nope"),
    ],
)
def test_records_that_contradict_the_image_are_refused(name: str, record: dict[str, Any], message: str) -> None:
    with pytest.raises(MetadataReplayError, match=f"{name} at offset 0: {message}"):
        _replay(_built(), [(name, record)])


def test_clear_elr_of_every_topic() -> None:
    image = _replay(_built(), [
        ("TopicRecord", {"name": "b", "topic_id": T2}),
        ("PartitionRecord", _partition(T2, 0, [1], 1, eligible_leader_replicas=[1])),
    ]).apply()
    delta = _replay(image, [("ClearElrRecord", {"topic_name": ""})])
    after = delta.apply()
    assert delta.changed_partitions == {("orders", 1), ("b", 0)}
    assert all(not p.elr and not p.last_known_elr for t in after.topics.by_id.values() for p in t.partitions.values())
    assert after.topics.partition("orders", 0) is image.topics.partition("orders", 0)  # had none


# -- the cache, the loader, the controller --------------------------------------------------------


def test_metadata_cache_answers() -> None:
    cache = KRaftMetadataCache()
    assert not cache.contains_topic("orders") and cache.features().epoch == -1 and cache.metadata_version() == 0
    image = _built()
    cache.set_image(image)
    assert cache.image is image
    assert set(cache.get_all_topics()) == {"orders"}
    assert cache.get_topic_id("orders") == T1 and cache.get_topic_name(T1) == "orders"
    assert cache.get_topic_id("x") is None and cache.get_topic_name(T2) is None
    assert sorted(cache.get_topic_partitions("orders")) == [0, 1] and dict(cache.get_topic_partitions("x")) == {}
    assert cache.num_partitions("orders") == 2 and cache.num_partitions("x") is None
    p = cache.get_partition_info("orders", 1)
    assert p is not None and (p.leader, p.replicas) == (2, (2, 1))
    assert cache.contains_partition("orders", 0) and not cache.contains_partition("orders", 2)
    assert cache.get_alive_broker_ids() == {1, 2}
    assert cache.get_alive_broker_nodes("INTERNAL") == [Node(1, "127.0.0.1", 19093, None), Node(2, "127.0.0.1", 19094, "r2")]
    assert cache.get_alive_broker_nodes("NOPE") == []
    assert dict(cache.topic_config("orders")) == {"retention.ms": "1000"}
    assert dict(cache.broker_config("")) == {"log.retention.ms": "5000"}
    assert cache.features().levels == {"metadata.version": 21} and cache.features().epoch == image.offset
    assert cache.metadata_version() == 21

    cache.set_image(_replay(image, [("FenceBrokerRecord", {"id": 1, "epoch": 10})]).apply())
    assert cache.get_alive_broker_ids() == {2} and cache.is_broker_fenced(1) and cache.is_broker_fenced(99)
    assert [n.id for n in cache.get_broker_nodes("PLAINTEXT")] == [1, 2]
    assert cache.get_alive_broker_node(1, "PLAINTEXT") is None
    assert cache.get_alive_broker_node(2, "PLAINTEXT") == Node(2, "127.0.0.1", 9094, "r2")
    assert cache.get_alive_broker_node(2, "NOPE") is None
    assert [b.broker_id for b in cache.get_alive_brokers()] == [2]


def _batch(base_offset: int, records: list[tuple[str, dict[str, Any]]]) -> Batch[MetadataRecord]:
    """Committed records as Raft hands them to a listener (through the record codec)."""
    return Batch(base_offset, 1, 0, [(name, _codec(name, rec)) for name, rec in records])


def test_loader_swaps_the_cache_image_and_publishes() -> None:
    cache = KRaftMetadataCache()
    loader = MetadataLoader(cache)
    seen: list[tuple[MetadataDelta, MetadataImage]] = []
    loader.publishers.append(lambda d, i: seen.append((d, i)))
    # Two committed batches in one call: one delta, one image swapped in, one publication.
    half = len(BUILD) // 2
    loader.handle_commit([_batch(0, BUILD[:half]), _batch(half, BUILD[half:])])
    first = cache.image
    assert first.offset == len(BUILD) - 1 and len(seen) == 1
    assert seen[-1][1] is first and seen[-1][0].image is EMPTY_IMAGE
    # moves the offset only: the image, not the publishers
    loader.handle_commit([_batch(len(BUILD), [("NoOpRecord", {})])])
    assert cache.image.offset == len(BUILD) and len(seen) == 1 and cache.image.topics is first.topics
    unknown_topic = [("PartitionRecord", _partition(T2, 0, [1], 1))]
    with pytest.raises(MetadataReplayError, match=f"PartitionRecord at offset {len(BUILD) + 1}"):
        loader.handle_commit([_batch(len(BUILD) + 1, unknown_topic)])
    assert cache.image.offset == len(BUILD)  # nothing of the bad batch was published


def test_controller_replay_gives_its_managers_the_new_image() -> None:
    controller = QuorumController(
        1, None,  # type: ignore[arg-type]  # replay reads no log
        default_partitions=1, default_replication_factor=1, delete_topic_enable=True,
        validate_config=lambda k, v: None, cluster_id="c",
    )
    old = controller.image
    delta = controller.replay((i, name, _codec(name, rec)) for i, (name, rec) in enumerate(BUILD))
    assert delta.created_topics == {"orders"} and old is EMPTY_IMAGE
    assert controller.image.topics_by_name["orders"].topic_id == T1
    assert controller.replication.image is controller.image and controller.configuration.image is controller.image
