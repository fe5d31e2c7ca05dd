"""The ZooKeeper-mode admin path against the real thing: a Kafka 3.9.2 broker in ZooKeeper mode (its
own controller) on a ZooKeeper of our own.

Ours → Kafka: a topic our AdminZkClient creates (placement over the registered brokers, a topic
id, its config) is served by Kafka; partitions we add appear; a config change we announce through
/config/changes reaches Kafka's ZkConfigManager; a deletion we mark is carried out by Kafka's
controller. Kafka → ours: a topic Kafka's admin creates reads back through our client, and the
notification Kafka writes for a config change reaches our ZkConfigManager.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from odradek.protocol.errors import Errors
from odradek.server.zk_admin_manager import ZkAdminManager
from odradek.zk import zk_data as z
from odradek.zk.admin_zk_client import AdminZkClient
from odradek.zk.kafka_zk_client import KafkaZkClient
from odradek.zk.zk_config_manager import ZkConfigManager

from .zk_cluster_support import ZkModeKafka, kafka39_and_client, wait_for

pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ZkModeKafka, KafkaZkClient]]:
    with kafka39_and_client(tmp_path_factory) as pair:
        yield pair


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []

    def process_config_changes(self, entity_name: str, configs: dict[str, str]) -> None:
        self.seen.append((entity_name, configs))


def test_kafka_serves_what_our_admin_zk_client_writes(cluster: tuple[ZkModeKafka, KafkaZkClient]) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, ConfigResource

    kafka, client = cluster
    ours = AdminZkClient(client)
    assert [(b.id, b.rack) for b in ours.get_broker_metadatas()] == [(1, "rack-a")]
    topic_id = ours.create_topic("adm", 3, 1, {"retention.ms": "555000"})
    wait_for(lambda: len(client.get_topic_partition_states([("adm", p) for p in range(3)])) == 3,
             "Kafka's controller to create our topic's partitions", kafka)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    wait_for(lambda: len(admin.list_topics("adm", timeout=5).topics["adm"].partitions) == 3, "adm's metadata", kafka)
    res = ConfigResource(ConfigResource.Type.TOPIC, "adm")
    assert admin.describe_configs([res])[res].result(timeout=30)["retention.ms"].value == "555000"
    assert client.get_replica_assignment_and_topic_ids(["adm"])["adm"].topic_id == topic_id

    # a record through Kafka on our topic
    p = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all"})
    p.produce("adm", b"v", partition=2)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "g-adm", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["adm"])
        got = None
        deadline = time.monotonic() + 60
        while got is None and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got = (m.partition(), m.value())
        assert got == (2, b"v")
    finally:
        c.close()

    # partitions we add
    existing = ours.get_topic_assignment("adm")
    assert existing is not None
    new = ours.create_new_partitions_assignment("adm", existing.partitions, ours.get_broker_metadatas(), 5)
    assert new == {3: [1], 4: [1]}
    ours.create_partitions_with_assignment("adm", existing, new)
    wait_for(lambda: len(admin.list_topics("adm", timeout=5).topics["adm"].partitions) == 5,
             "Kafka to serve the added partitions", kafka)

    # a config change we announce: Kafka's ZkConfigManager applies it
    ours.change_topic_config("adm", {"retention.ms": "42000", "cleanup.policy": "compact"})
    wait_for(lambda: admin.describe_configs([res])[res].result(timeout=30)["retention.ms"].value == "42000",
             "Kafka to apply our config change", kafka)
    assert admin.describe_configs([res])[res].result(timeout=30)["cleanup.policy"].value == "compact"

    # a deletion we mark: Kafka's controller carries it out and removes the marker
    ours.delete_topic("adm")
    wait_for(lambda: not client.exists(z.topic_path("adm")) and not client.exists(z.delete_topic_path("adm")),
             "Kafka's controller to delete our topic", kafka)
    wait_for(lambda: "adm" not in admin.list_topics(timeout=5).topics, "adm gone from Kafka's metadata", kafka)


def test_a_topic_kafka_creates_reads_back_through_ours(cluster: tuple[ZkModeKafka, KafkaZkClient]) -> None:
    import asyncio

    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
    )

    kafka, client = cluster
    recorder = Recorder()
    listener = ZkConfigManager(client, {"topics": recorder})
    listener.startup()
    try:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        fut = admin.create_topics([NewTopic("kt", 2, 1, config={"cleanup.policy": "compact",
                                                                "retention.ms": "99000"})])["kt"]
        fut.result(timeout=60)
        ours = AdminZkClient(client)
        ta = ours.get_topic_assignment("kt")
        assert ta is not None
        assert {p: a.replicas for p, a in ta.partitions.items()} == {0: (1,), 1: (1,)}
        assert ta.topic_id is not None and len(ta.topic_id) == 22
        described = admin.describe_topics(TopicCollection(["kt"]))["kt"].result(timeout=30)
        # librdkafka prints the id in standard base64, ZooKeeper holds Kafka's URL-safe form
        assert str(described.topic_id).replace("+", "-").replace("/", "_") == ta.topic_id
        assert ours.fetch_entity_config("topics", "kt") == {"cleanup.policy": "compact", "retention.ms": "99000"}
        assert ours.fetch_all_entity_configs("topics")["kt"] == {"cleanup.policy": "compact", "retention.ms": "99000"}
        # Kafka's config change notification reaches our listener
        res = ConfigResource(ConfigResource.Type.TOPIC, "kt", incremental_configs=[
            ConfigEntry("retention.ms", "88000", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(timeout=30)
        wait_for(lambda: ("kt", {"cleanup.policy": "compact", "retention.ms": "88000"}) in recorder.seen,
                 "our ZkConfigManager to see Kafka's notification", kafka)

        # our manager refuses what Kafka's would, with Kafka's answers
        def ready(t: str, n: int) -> bool:
            return len(client.get_topic_partition_states([(t, p) for p in range(n)])) == n

        manager = ZkAdminManager(client, topic_ready=ready, topic_known=lambda t: client.exists(z.topic_path(t)))
        out = asyncio.run(manager.create_topics([{"name": "kt", "num_partitions": 1, "replication_factor": 1},
                                                 {"name": "rf2", "num_partitions": 1, "replication_factor": 2}],
                                                timeout_ms=1000))
        assert [(r.error_code, r.error_message) for r in out] == [
            (Errors.TOPIC_ALREADY_EXISTS, "Topic 'kt' already exists."),
            (Errors.INVALID_REPLICATION_FACTOR, "Replication factor: 2 larger than available brokers: 1.")]
        kafka_says = admin.create_topics([NewTopic("rf2", 1, 2)])["rf2"].exception(timeout=30)
        assert kafka_says is not None
        assert kafka_says.args[0].code() == Errors.INVALID_REPLICATION_FACTOR
        assert kafka_says.args[0].str() == "Replication factor: 2 larger than available brokers: 1."
    finally:
        listener.shutdown()
