"""odradek.zk.zk_data writes Kafka 3.9's znode bytes exactly and reads them back.

The fixtures below are the bytes Kafka 3.9.2's own encoders (kafka.zk.ZkData: ``TopicZNode.encode``,
``BrokerIdZNode.encode`` ...) returned for the inputs each test builds, captured by running those
Scala objects from the kafka_2.13-3.9.2 jar (key order follows the JVM maps Kafka uses).
"""

from __future__ import annotations

import random

import pytest

from odradek.zk import zk_data as z
from odradek.zk.jvm_order import (
    java_concurrent_hashmap_order,
    java_hashmap_order,
    java_string_hash,
    scala_immutable_map_keys,
    scala_mutable_hash_order,
)

KAFKA_3_9: dict[str, bytes] = {
    'partition_state': b'{"controller_epoch":5,"leader":2,"version":1,"leader_epoch":7,"isr":[2,0,1]}',
    'partition_state_recovering': (
        b'{"controller_epoch":1,"leader":1,"version":1,"leader_recovery_state":1,"leader_e'
        b'poch":0,"isr":[1]}'
    ),
    'topic': (
        b'{"partitions":{"11":[2,0,1],"12":[0,1,2],"13":[1,2,0],"14":[2,0,1],"15":[0,1,2],'
        b'"16":[1,2,0],"17":[2,0,1],"18":[0,1,2],"19":[1,2,0],"0":[0,1,2],"1":[1,2,0],"2":'
        b'[2,0,1],"3":[0,1,2],"4":[1,2,0],"5":[2,0,1],"6":[0,1,2],"7":[1,2,0],"8":[2,0,1],'
        b'"9":[0,1,2],"10":[1,2,0]},"topic_id":"vR7hLzxQRSq5ZbNQm0x4lA","adding_replicas":'
        b'{"3":[4]},"removing_replicas":{"3":[0],"17":[2]},"version":3}'
    ),
    'topic_no_id': b'{"partitions":{"0":[1]},"adding_replicas":{},"removing_replicas":{},"version":3}',
    'broker': (
        b'{"features":{"group.version":{"min_version":0,"max_version":1},"kraft.version":{'
        b'"min_version":0,"max_version":1},"metadata.version":{"min_version":1,"max_versio'
        b'n":21},"transaction.version":{"min_version":0,"max_version":2}},"listener_securi'
        b'ty_protocol_map":{"INTERNAL":"SASL_SSL","PLAINTEXT":"PLAINTEXT"},"endpoints":["I'
        b'NTERNAL://broker1.example:9093","PLAINTEXT://127.0.0.1:9092"],"rack":"rack-a","j'
        b'mx_port":9999,"port":9092,"host":"127.0.0.1","version":5,"timestamp":"1795413376'
        b'887"}'
    ),
    'controller': b'{"version":2,"brokerid":3,"timestamp":"1700000000123","kraftControllerEpoch":-1}',
    'controller_epoch': b'42',
    'cluster_id': b'{"version":"1","id":"7Xj1Ch2dQ0uDv4mFhY3k_w"}',
    'config_entity': (
        b'{"version":1,"config":{"compression.type":"v4","file.delete.delay.ms":"v10","max'
        b'.message.bytes":"v5","message.timestamp.type":"v6","min.insync.replicas":"v3","p'
        b'reallocate":"v13","index.interval.bytes":"v12","unclean.leader.election.enable":'
        b'"v9","retention.bytes":"v7","cleanup.policy":"v0","retention.ms":"v1","segment.b'
        b'ytes":"v2","segment.ms":"v8","flush.messages":"v11"}}'
    ),
    'config_entity_small': b'{"version":1,"config":{"cleanup.policy":"compact","retention.ms":"1000"}}',
    'config_change': b'{"version":2,"entity_path":"topics/orders"}',
    'isr_change': (
        b'{"version":1,"partitions":[{"topic":"orders","partition":2},{"topic":"payments",'
        b'"partition":5},{"topic":"orders","partition":0},{"topic":"payments","partition":'
        b'1},{"topic":"orders","partition":4},{"topic":"payments","partition":3}]}'
    ),
    'preferred_replica_election': (
        b'{"version":1,"partitions":[{"topic":"payments","partition":5},{"topic":"orders",'
        b'"partition":2},{"topic":"orders","partition":4},{"topic":"payments","partition":'
        b'1},{"topic":"orders","partition":0},{"topic":"payments","partition":3}]}'
    ),
    'reassign_partitions': (
        b'{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[1,2]},{"t'
        b'opic":"orders","partition":1,"replicas":[2,0]}]}'
    ),
    'log_dir_event': b'{"version":1,"broker":4,"event":1}',
    'feature_v2': (
        b'{"features":{"kraft.version":{"max_version_level":4},"transaction.version":{"max'
        b'_version_level":3},"group.version":{"max_version_level":2},"eligible.leader.repl'
        b'icas.version":{"max_version_level":5},"metadata.version":{"max_version_level":1}'
        b'},"version":2,"status":1}'
    ),
    'feature_v1': (
        b'{"features":{"metadata.version":{"max_version_level":7,"min_version_level":7}},"'
        b'version":1,"status":0}'
    ),
}

TPS = [("orders" if i % 2 == 0 else "payments", i) for i in range(6)]
CONFIG_KEYS = [
    "cleanup.policy", "retention.ms", "segment.bytes", "min.insync.replicas", "compression.type",
    "max.message.bytes", "message.timestamp.type", "retention.bytes", "segment.ms",
    "unclean.leader.election.enable", "file.delete.delay.ms", "flush.messages",
    "index.interval.bytes", "preallocate",
]
FEATURES_V2 = ["metadata.version", "group.version", "transaction.version", "kraft.version",
               "eligible.leader.replicas.version"]


def _assignment() -> dict[int, z.ReplicaAssignment]:
    return {
        i: z.ReplicaAssignment(
            (i % 3, (i + 1) % 3, (i + 2) % 3), (4,) if i == 3 else (),
            (0,) if i == 3 else ((2,) if i == 17 else ()))
        for i in range(20)
    }


def _broker() -> z.BrokerInfo:
    return z.BrokerInfo.create(
        5, [("INTERNAL", "SASL_SSL", "broker1.example", 9093),
            ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)],
        timestamp_ms=1795413376887, rack="rack-a", jmx_port=9999,
        features={"metadata.version": (1, 21), "group.version": (0, 1),
                  "transaction.version": (0, 2), "kraft.version": (0, 1)})


def test_partition_state_bytes_and_round_trip() -> None:
    state = z.PartitionState(2, 7, (2, 0, 1), 5)
    assert z.encode_partition_state(state) == KAFKA_3_9["partition_state"]
    recovering = z.PartitionState(1, 0, (1,), 1, leader_recovery_state=1)
    assert z.encode_partition_state(recovering) == KAFKA_3_9["partition_state_recovering"]
    back = z.decode_partition_state(KAFKA_3_9["partition_state"], zk_version=3)
    assert back == z.PartitionState(2, 7, (2, 0, 1), 5, 0, 3)
    assert z.decode_partition_state(KAFKA_3_9["partition_state_recovering"]).leader_recovery_state == 1


def test_topic_bytes_and_round_trip() -> None:
    assignment = _assignment()
    assert z.encode_topic("vR7hLzxQRSq5ZbNQm0x4lA", assignment) == KAFKA_3_9["topic"]
    assert z.encode_topic(None, {0: z.ReplicaAssignment((1,))}) == KAFKA_3_9["topic_no_id"]
    back = z.decode_topic("orders", KAFKA_3_9["topic"])
    assert back.topic_id == "vR7hLzxQRSq5ZbNQm0x4lA"
    assert back.partitions == assignment
    assert z.encode_topic(back.topic_id, back.partitions) == KAFKA_3_9["topic"]


def test_broker_registration_bytes_and_round_trip() -> None:
    info = _broker()
    assert z.encode_broker(info) == KAFKA_3_9["broker"]
    back = z.decode_broker(5, KAFKA_3_9["broker"])
    assert back == info
    assert back.endpoint_tuples() == [("INTERNAL", "SASL_SSL", "broker1.example", 9093),
                                      ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)]
    assert z.encode_broker(back) == KAFKA_3_9["broker"]


def test_broker_without_plaintext_listener_has_null_host() -> None:
    info = z.BrokerInfo.create(1, [("SSL", "SSL", "h", 9093)], timestamp_ms=1)
    assert info.host is None and info.port == -1
    decoded = z.decode_broker(1, z.encode_broker(info))
    assert decoded.host is None and decoded.port == -1 and decoded.endpoints == ("SSL://h:9093",)


def test_controller_epoch_cluster_id_bytes() -> None:
    assert z.encode_controller(3, 1700000000123) == KAFKA_3_9["controller"]
    reg = z.decode_controller(KAFKA_3_9["controller"])
    assert (reg.broker_id, reg.timestamp, reg.kraft_controller_epoch) == (3, "1700000000123", -1)
    assert z.decode_controller(b'{"version":1,"brokerid":2,"timestamp":"5"}').kraft_controller_epoch is None
    assert z.encode_controller_epoch(42) == KAFKA_3_9["controller_epoch"]
    assert z.decode_controller_epoch(b"42") == 42
    assert z.encode_cluster_id("7Xj1Ch2dQ0uDv4mFhY3k_w") == KAFKA_3_9["cluster_id"]
    assert z.decode_cluster_id(KAFKA_3_9["cluster_id"]) == "7Xj1Ch2dQ0uDv4mFhY3k_w"


def test_config_entity_and_change_notification_bytes() -> None:
    config = {k: f"v{i}" for i, k in enumerate(CONFIG_KEYS)}
    assert z.encode_config_entity(config) == KAFKA_3_9["config_entity"]
    assert z.decode_config_entity(KAFKA_3_9["config_entity"]) == config
    small = {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert z.encode_config_entity(small) == KAFKA_3_9["config_entity_small"]
    assert z.encode_config_change_notification("topics/orders") == KAFKA_3_9["config_change"]
    assert z.decode_config_change_notification(KAFKA_3_9["config_change"]) == "topics/orders"
    legacy = b'{"version":1,"entity_type":"topics","entity_name":"t"}'
    assert z.decode_config_change_notification(legacy) == "topics/t"


def test_admin_and_notification_bytes() -> None:
    assert z.encode_isr_change_notification(TPS) == KAFKA_3_9["isr_change"]
    assert z.decode_isr_change_notification(KAFKA_3_9["isr_change"]) == set(TPS)
    assert z.encode_preferred_replica_election(TPS) == KAFKA_3_9["preferred_replica_election"]
    assert z.decode_preferred_replica_election(KAFKA_3_9["preferred_replica_election"]) == set(TPS)
    reassign = [("orders", 0, [1, 2]), ("orders", 1, [2, 0])]
    assert z.encode_reassign_partitions(reassign) == KAFKA_3_9["reassign_partitions"]
    assert z.decode_reassign_partitions(KAFKA_3_9["reassign_partitions"]) == {
        ("orders", 0): [1, 2], ("orders", 1): [2, 0]}
    assert z.encode_log_dir_event_notification(4) == KAFKA_3_9["log_dir_event"]
    assert z.decode_log_dir_event_notification(KAFKA_3_9["log_dir_event"]) == 4
    assert z.sequence_number("isr_change_0000000012", z.ISR_CHANGE_PREFIX) == "0000000012"


def test_feature_bytes_and_round_trip() -> None:
    v2 = z.FeatureZNodeData(2, True, {n: i + 1 for i, n in enumerate(FEATURES_V2)})
    assert z.encode_feature(v2) == KAFKA_3_9["feature_v2"]
    assert z.decode_feature(KAFKA_3_9["feature_v2"]) == v2
    v1 = z.FeatureZNodeData(1, False, {"metadata.version": 7})
    assert z.encode_feature(v1) == KAFKA_3_9["feature_v1"]
    assert z.decode_feature(KAFKA_3_9["feature_v1"]) == v1


def test_paths_are_kafkas() -> None:
    assert z.partition_state_path("t", 3) == "/brokers/topics/t/partitions/3/state"
    assert z.broker_id_path(7) == "/brokers/ids/7"
    assert z.config_entity_path("topics", "t") == "/config/topics/t"
    assert z.delete_topic_path("t") == "/admin/delete_topics/t"
    assert "/config/changes" in z.PERSISTENT_PATHS and "/config/ips" in z.PERSISTENT_PATHS


BAD_INPUTS = [None, b"", b"{", b"\xff\xfe", b"[]", b"null", b'"42"', b'{"leader":"x","partitions":5}',
              b'{"partitions":{"a":[1]}}', b'{"partitions":[{"topic":1}]}',
              b"[" * 5000 + b"]" * 5000]


@pytest.mark.parametrize("data", BAD_INPUTS)
def test_bad_bytes_raise_zk_data_error_only(data: bytes | None) -> None:
    decoders = [
        lambda d: z.decode_partition_state(d), lambda d: z.decode_topic("t", d),
        lambda d: z.decode_broker(1, d), lambda d: z.decode_controller(d),
        z.decode_controller_epoch, z.decode_cluster_id, z.decode_config_change_notification,
        z.decode_reassign_partitions, z.decode_preferred_replica_election,
        z.decode_isr_change_notification, z.decode_log_dir_event_notification, z.decode_feature,
    ]
    for decode in decoders:
        with pytest.raises(z.ZkDataError):
            decode(data)


def test_specific_bad_payloads() -> None:
    with pytest.raises(z.ZkDataError, match="unsupported version 9"):
        z.decode_feature(b'{"version":9,"status":1,"features":{}}')
    with pytest.raises(z.ZkDataError, match="malformed endpoint"):
        z.decode_broker(1, b'{"version":5,"jmx_port":-1,"endpoints":["nonsense"]}')
    with pytest.raises(z.ZkDataError, match="no security protocol"):
        z.decode_broker(1, b'{"version":5,"jmx_port":-1,"endpoints":["X://h:1"],'
                           b'"listener_security_protocol_map":{}}')
    # TopicZNode.decode: a topic znode without "partitions" is an empty assignment
    assert z.decode_topic("t", b'{"version":3}').partitions == {}


def test_config_entity_tolerates_what_kafka_tolerates() -> None:
    # ConfigEntityZNode.decode: no data or no "config" object -> empty Properties
    assert z.decode_config_entity(None) == {}
    assert z.decode_config_entity(b'{"version":1}') == {}
    with pytest.raises(z.ZkDataError):
        z.decode_config_entity(b"{oops")


def test_jackson_string_escapes() -> None:
    assert z.to_json_bytes({"a": 'q"\\\n\x01é/'}) == '{"a":"q\\"\\\\\\n\\u0001é/"}'.encode()


def test_orders_are_stable_properties() -> None:
    # Hash orders depend on the key set, not on insertion (no equal hashes among these keys).
    rng = random.Random(7)
    keys = [f"k{i}.x" for i in range(30)]
    shuffled = keys[:]
    rng.shuffle(shuffled)
    assert scala_mutable_hash_order(keys, java_string_hash) == scala_mutable_hash_order(
        shuffled, java_string_hash)
    assert scala_immutable_map_keys(keys) == scala_immutable_map_keys(shuffled)
    assert sorted(java_hashmap_order(keys)) == sorted(keys)
    assert sorted(java_concurrent_hashmap_order(keys)) == sorted(keys)
    assert scala_immutable_map_keys(keys[:4]) == keys[:4]  # Map1..Map4 keep insertion order
