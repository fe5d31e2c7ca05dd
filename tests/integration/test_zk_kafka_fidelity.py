"""odradek.zk against the real thing: a Kafka 3.9.2 broker in ZooKeeper mode (from the Maven jars
scripts/kafka_reference.sh fetches) on a ZooKeeper of our own.

Kafka writes its znodes (registration, controller, topic, partition states, configs, change
notifications); we decode each and re-encode it, and the bytes must be Kafka's. Then the other way:
a topic and its config written with our encoders are picked up by Kafka's controller as if its own
admin client had written them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from odradek.zk import zk_data as z
from odradek.zk.kafka_zk_client import KafkaZkClient

from .zk_cluster_support import ZkModeKafka, kafka39_and_client, wait_for

pytestmark = pytest.mark.timeout(400)

@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ZkModeKafka, KafkaZkClient]]:
    with kafka39_and_client(tmp_path_factory) as pair:
        yield pair


def reencodes(data: bytes, encoded: bytes, what: str) -> None:
    assert encoded == data, f"{what}: Kafka wrote\n  {data!r}\nwe write\n  {encoded!r}"


def test_kafka_written_znodes_reencode_byte_for_byte(cluster: tuple[ZkModeKafka, KafkaZkClient]) -> None:
    kafka, client = cluster
    tools = kafka.tools
    tools.run("kafka-topics", "--bootstrap-server", kafka.bootstrap, "--create", "--topic", "fid",
              "--partitions", "12", "--replication-factor", "1",
              "--config", "retention.ms=123456", "--config", "cleanup.policy=compact",
              "--config", "max.message.bytes=2000000", "--config", "segment.bytes=1048576")
    tools.run("kafka-configs", "--bootstrap-server", kafka.bootstrap, "--alter", "--entity-type",
              "topics", "--entity-name", "fid", "--add-config", "min.insync.replicas=1")
    wait_for(lambda: len(client.get_topic_partition_states([("fid", p) for p in range(12)])) == 12,
             "partition states", kafka)
    wait_for(lambda: "min.insync.replicas" in client.get_entity_configs("topics", "fid"),
             "the altered config", kafka)

    checked: list[str] = []

    def get(path: str) -> bytes:
        got = client.get_data(path)
        assert got is not None, f"{path} missing"
        checked.append(path)
        return got[0]

    data = get("/brokers/ids/1")
    info = z.decode_broker(1, data)
    assert info.rack == "rack-a" and info.version == 5 and info.host == "127.0.0.1"
    assert {e[0] for e in info.endpoint_tuples()} == {"PLAINTEXT", "INTERNAL"}
    reencodes(data, z.encode_broker(info), "/brokers/ids/1")

    data = get("/controller")
    reg = z.decode_controller(data)
    assert reg.broker_id == 1
    reencodes(data, z.encode_controller(reg.broker_id, int(reg.timestamp), reg.kraft_controller_epoch or -1),
              "/controller")
    data = get("/controller_epoch")
    reencodes(data, z.encode_controller_epoch(z.decode_controller_epoch(data)), "/controller_epoch")
    data = get("/cluster/id")
    reencodes(data, z.encode_cluster_id(z.decode_cluster_id(data)), "/cluster/id")

    data = get("/brokers/topics/fid")
    topic = z.decode_topic("fid", data)
    assert topic.topic_id and sorted(topic.partitions) == list(range(12))
    reencodes(data, z.encode_topic(topic.topic_id, topic.partitions), "/brokers/topics/fid")
    for p in range(12):
        path = z.partition_state_path("fid", p)
        data = get(path)
        state = z.decode_partition_state(data)
        assert state.leader == 1 and state.isr == (1,)
        reencodes(data, z.encode_partition_state(state), path)

    data = get("/config/topics/fid")
    config = z.decode_config_entity(data)
    assert config["retention.ms"] == "123456" and config["min.insync.replicas"] == "1"
    reencodes(data, z.encode_config_entity(config), "/config/topics/fid")
    changes = client.get_children(z.CONFIG_CHANGES_PATH)
    assert changes, "kafka-configs --alter wrote no change notification"
    for name in changes:
        data = get(f"{z.CONFIG_CHANGES_PATH}/{name}")
        reencodes(data, z.encode_config_change_notification(z.decode_config_change_notification(data)),
                  name)
    data = get(z.FEATURE_PATH)  # the ZooKeeper-mode controller finalizes features (IBP >= 2.7)
    reencodes(data, z.encode_feature(z.decode_feature(data)), z.FEATURE_PATH)
    for path in z.PERSISTENT_PATHS:  # Kafka created the same top-level paths
        assert client.exists(path), path
    assert len(checked) >= 18


def test_kafka_adopts_a_topic_we_write(cluster: tuple[ZkModeKafka, KafkaZkClient]) -> None:
    """Kafka's controller reads our /config/topics and /brokers/topics bytes as its own (the old
    AdminZkClient path): it creates the partitions, elects leaders and keeps our topic id."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    kafka, client = cluster
    topic_id = "AAECAwQFBgcICQoLDA0ODw"
    client.set_or_create_entity_configs("topics", "ours", {"retention.ms": "777000"})
    client.create_topic_assignment("ours", topic_id, {0: z.ReplicaAssignment((1,)),
                                                      1: z.ReplicaAssignment((1,))})
    wait_for(lambda: len(client.get_topic_partition_states([("ours", 0), ("ours", 1)])) == 2,
             "Kafka's controller to create our topic's partitions", kafka)
    states = client.get_topic_partition_states([("ours", 0), ("ours", 1)])
    assert all(s.leader == 1 and s.isr == (1,) for s in states.values())
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    wait_for(lambda: len(admin.list_topics("ours", timeout=5).topics["ours"].partitions) == 2,
             "metadata of our topic", kafka)
    res = ConfigResource(ConfigResource.Type.TOPIC, "ours")
    configs = admin.describe_configs([res])[res].result(timeout=30)
    assert configs["retention.ms"].value == "777000"
    # Kafka kept our topic id (the znode it may rewrite still carries it).
    assert client.get_replica_assignment_and_topic_ids(["ours"])["ours"].topic_id == topic_id
