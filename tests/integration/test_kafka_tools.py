"""Apache Kafka's own command-line tools (4.x, unchanged) against an Odradek broker.

Each test runs the tool a Kafka operator would run, as ``bin/kafka-*.sh`` runs it, and checks
what the operator would read in its output, cross-checked against the broker through another
client where the output alone would not prove it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from odradek.embedded import EmbeddedBroker

from .kafka_reference import KafkaTools, find_kafka_tools
from .support import wait_until


@pytest.fixture(scope="module")
def kafka() -> KafkaTools:
    return find_kafka_tools("4")


@pytest.fixture
def bs(broker: EmbeddedBroker) -> list[str]:
    return ["--bootstrap-server", broker.bootstrap_servers]


def _produce(bootstrap: str, topic: str, n: int, partition: int | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        if partition is None:
            p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
        else:
            p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=partition)
    assert p.flush(30) == 0


def _topics(kafka: KafkaTools, bs: list[str]) -> set[str]:
    return set(kafka.run("kafka-topics", *bs, "--list").stdout.split())


def test_kafka_topics_create_describe_alter_delete(kafka: KafkaTools, bs: list[str], topic_name: str) -> None:
    out = kafka.run(
        "kafka-topics", *bs, "--create", "--topic", topic_name, "--partitions", "3",
        "--replication-factor", "1", "--config", "retention.ms=86400000",
        "--config", "cleanup.policy=compact",
    ).stdout
    assert f"Created topic {topic_name}." in out
    assert topic_name in _topics(kafka, bs)

    desc = kafka.run("kafka-topics", *bs, "--describe", "--topic", topic_name).stdout
    assert re.search(rf"Topic: {re.escape(topic_name)}\s+TopicId: \S+\s+PartitionCount: 3\s+ReplicationFactor: 1", desc)
    assert "retention.ms=86400000" in desc and "cleanup.policy=compact" in desc
    for p in range(3):
        assert re.search(rf"Partition: {p}\s+Leader: 1\s+Replicas: 1\s+Isr: 1", desc), desc

    again = kafka.run("kafka-topics", *bs, "--create", "--topic", topic_name, "--partitions", "1", check=False)
    assert again.returncode != 0 and "already exists" in again.stdout + again.stderr
    kafka.run("kafka-topics", *bs, "--create", "--if-not-exists", "--topic", topic_name, "--partitions", "1")

    kafka.run("kafka-topics", *bs, "--alter", "--topic", topic_name, "--partitions", "5")
    desc = kafka.run("kafka-topics", *bs, "--describe", "--topic", topic_name).stdout
    assert "PartitionCount: 5" in desc
    shrink = kafka.run("kafka-topics", *bs, "--alter", "--topic", topic_name, "--partitions", "2", check=False)
    assert shrink.returncode != 0 and "5 partition(s); 2 would not be an increase" in shrink.stdout + shrink.stderr

    kafka.run("kafka-topics", *bs, "--delete", "--topic", topic_name)
    wait_until(lambda: topic_name not in _topics(kafka, bs), timeout=30, what="topic deleted")


def test_console_producer_and_consumer_keys_and_headers(
    kafka: KafkaTools, bs: list[str], broker: EmbeddedBroker, topic_name: str
) -> None:
    kafka.run("kafka-topics", *bs, "--create", "--topic", topic_name, "--partitions", "1")
    lines = "h1:a,h2:b\tk1:v1\nh0:\tk2:v2\nh3:c\tk3:v3 with spaces\n"
    kafka.run(
        "kafka-console-producer", *bs, "--topic", topic_name,
        "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
        "--reader-property", "parse.headers=true", stdin=lines,
    )
    out = kafka.run(
        "kafka-console-consumer", *bs, "--topic", topic_name, "--from-beginning",
        "--max-messages", "3", "--formatter-property", "print.key=true",
        "--formatter-property", "print.headers=true", "--formatter-property", "print.partition=true",
        "--formatter-property", "print.offset=true",
    ).stdout.splitlines()
    assert out == [
        "Partition:0\tOffset:0\th1:a,h2:b\tk1\tv1",
        "Partition:0\tOffset:1\th0:\tk2\tv2",
        "Partition:0\tOffset:2\th3:c\tk3\tv3 with spaces",
    ]

    # The same records through librdkafka: keys, values and headers stored as the tool sent them.
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": topic_name,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        got = []
        for _ in range(100):
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.key(), msg.value(), msg.headers()))
            if len(got) == 3:
                break
    finally:
        c.close()
    assert got == [
        (b"k1", b"v1", [("h1", b"a"), ("h2", b"b")]),
        (b"k2", b"v2", [("h0", b"")]),
        (b"k3", b"v3 with spaces", [("h3", b"c")]),
    ]


def _group_rows(out: str, group: str) -> dict[int, list[str]]:
    rows = {}
    for line in out.splitlines():
        cols = line.split()
        if cols and cols[0] == group and len(cols) >= 6 and cols[2].isdigit():
            rows[int(cols[2])] = cols
    return rows


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consumer_groups_list_describe_reset_delete(
    kafka: KafkaTools, bs: list[str], broker: EmbeddedBroker, topic_name: str, protocol: str
) -> None:
    group = f"g-{topic_name}"
    kafka.run("kafka-topics", *bs, "--create", "--topic", topic_name, "--partitions", "2")
    _produce(broker.bootstrap_servers, topic_name, 10, partition=0)
    _produce(broker.bootstrap_servers, topic_name, 4, partition=1)
    consumed = kafka.run(
        "kafka-console-consumer", *bs, "--topic", topic_name, "--group", group, "--from-beginning",
        "--max-messages", "14", "--command-property", f"group.protocol={protocol}",
    )
    assert len(consumed.stdout.splitlines()) == 14

    listed = kafka.run("kafka-consumer-groups", *bs, "--list").stdout.split()
    assert group in listed
    typed = kafka.run("kafka-consumer-groups", *bs, "--list", "--type").stdout
    assert re.search(rf"^{re.escape(group)}\s+{protocol.capitalize()}\b", typed, re.M), typed

    # Lag after two more records on partition 0.
    _produce(broker.bootstrap_servers, topic_name, 2, partition=0)
    desc = kafka.run("kafka-consumer-groups", *bs, "--describe", "--group", group).stdout
    rows = _group_rows(desc, group)
    assert rows[0][3:6] == ["10", "12", "2"], desc  # CURRENT-OFFSET LOG-END-OFFSET LAG
    assert rows[1][3:6] == ["4", "4", "0"], desc
    state = kafka.run("kafka-consumer-groups", *bs, "--describe", "--group", group, "--state").stdout
    assert re.search(rf"{re.escape(group)}\s+\S+\s+\(1\)\s+.*Empty\s+0", state), state

    dry = kafka.run("kafka-consumer-groups", *bs, "--reset-offsets", "--group", group,
                    "--topic", topic_name, "--to-earliest", "--dry-run").stdout
    assert sorted(_group_rows_reset(dry, group).values()) == [0, 0]
    desc = kafka.run("kafka-consumer-groups", *bs, "--describe", "--group", group).stdout
    assert _group_rows(desc, group)[0][3] == "10", "a dry run changed the committed offset"
    kafka.run("kafka-consumer-groups", *bs, "--reset-offsets", "--group", group,
              "--topic", f"{topic_name}:0", "--to-offset", "3", "--execute")
    desc = kafka.run("kafka-consumer-groups", *bs, "--describe", "--group", group).stdout
    assert _group_rows(desc, group)[0][3:6] == ["3", "12", "9"], desc

    deleted = kafka.run("kafka-consumer-groups", *bs, "--delete", "--group", group).stdout
    assert f"Deletion of requested consumer groups ('{group}') was successful." in deleted
    assert group not in kafka.run("kafka-consumer-groups", *bs, "--list").stdout.split()


def _group_rows_reset(out: str, group: str) -> dict[int, int]:
    rows = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) == 4 and cols[0] == group and cols[2].isdigit():
            rows[int(cols[2])] = int(cols[3])
    return rows


def test_configs_topic_describe_alter_delete(kafka: KafkaTools, bs: list[str], topic_name: str) -> None:
    kafka.run("kafka-topics", *bs, "--create", "--topic", topic_name, "--partitions", "1")
    entity = ["--entity-type", "topics", "--entity-name", topic_name]
    out = kafka.run("kafka-configs", *bs, *entity, "--alter",
                    "--add-config", "retention.ms=3600000,max.message.bytes=65536").stdout
    assert f"Completed updating config for topic {topic_name}." in out
    desc = kafka.run("kafka-configs", *bs, *entity, "--describe").stdout
    assert "retention.ms=3600000" in desc and "max.message.bytes=65536" in desc
    kafka.run("kafka-configs", *bs, *entity, "--alter", "--delete-config", "max.message.bytes")
    desc = kafka.run("kafka-configs", *bs, *entity, "--describe").stdout
    assert "retention.ms=3600000" in desc and "max.message.bytes" not in desc

    bad = kafka.run("kafka-configs", *bs, *entity, "--alter", "--add-config", "retention.ms=soon", check=False)
    assert bad.returncode != 0 and "InvalidConfigurationException" in bad.stdout + bad.stderr


def test_configs_broker_describe(kafka: KafkaTools, bs: list[str]) -> None:
    desc = kafka.run("kafka-configs", *bs, "--entity-type", "brokers", "--entity-name", "1",
                     "--describe", "--all").stdout
    assert "All configs for broker 1 are:" in desc
    assert re.search(r"^\s+log\.retention\.hours=168 sensitive=false", desc, re.M), desc
    assert re.search(r"^\s+num\.partitions=1 sensitive=false", desc, re.M), desc


def test_get_offsets_delete_records_log_dirs(
    kafka: KafkaTools, bs: list[str], broker: EmbeddedBroker, topic_name: str, tmp_path: Path
) -> None:
    kafka.run("kafka-topics", *bs, "--create", "--topic", topic_name, "--partitions", "2")
    _produce(broker.bootstrap_servers, topic_name, 7, partition=0)
    _produce(broker.bootstrap_servers, topic_name, 3, partition=1)
    latest = kafka.run("kafka-get-offsets", *bs, "--topic", topic_name).stdout.split()
    assert sorted(latest) == [f"{topic_name}:0:7", f"{topic_name}:1:3"]

    plan = json.dumps({"version": 1, "partitions": [{"topic": topic_name, "partition": 0, "offset": 5}]})
    plan_file = tmp_path / "delete.json"
    plan_file.write_text(plan)
    out = kafka.run("kafka-delete-records", *bs, "--offset-json-file", str(plan_file)).stdout
    assert f"partition: {topic_name}-0\tlow_watermark: 5" in out
    earliest = kafka.run("kafka-get-offsets", *bs, "--topic", topic_name, "--time", "-2").stdout.split()
    assert sorted(earliest) == [f"{topic_name}:0:5", f"{topic_name}:1:0"]

    out = kafka.run("kafka-log-dirs", *bs, "--describe", "--topic-list", topic_name).stdout
    doc = json.loads(out.strip().splitlines()[-1])
    [b] = doc["brokers"]
    assert b["broker"] == 1
    [d] = b["logDirs"]
    assert d["error"] is None
    sizes = {p["partition"]: p["size"] for p in d["partitions"]}
    assert set(sizes) == {f"{topic_name}-0", f"{topic_name}-1"}
    assert sizes[f"{topic_name}-0"] > 0 and sizes[f"{topic_name}-1"] > 0


def test_perf_tests(kafka: KafkaTools, bs: list[str], broker: EmbeddedBroker, topic_name: str) -> None:
    kafka.run("kafka-topics", *bs, "--create", "--topic", topic_name, "--partitions", "2")
    out = kafka.run(
        "kafka-producer-perf-test", "--topic", topic_name, "--num-records", "20000",
        "--record-size", "100", "--throughput", "-1",
        "--bootstrap-server", broker.bootstrap_servers, "--command-property", "acks=all",
    ).stdout
    assert re.search(r"^20000 records sent, [\d.]+ records/sec .* 99\.9th\.$", out, re.M), out
    out = kafka.run("kafka-consumer-perf-test", *bs, "--topic", topic_name, "--num-records", "20000",
                    "--timeout", "60000").stdout
    header, row = out.strip().splitlines()[-2:]
    fields = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in row.split(",")], strict=True))
    assert fields["data.consumed.in.nMsg"] == "20000", out


def test_verifiable_producer_and_consumer_lose_nothing(
    kafka: KafkaTools, bs: list[str], topic_name: str
) -> None:
    kafka.run("kafka-topics", *bs, "--create", "--topic", topic_name, "--partitions", "3")
    out = kafka.run("kafka-verifiable-producer", *bs, "--topic", topic_name,
                    "--max-messages", "600", "--acks", "-1").stdout
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    acked = [e for e in events if e["name"] == "producer_send_success"]
    assert len(acked) == 600
    assert not [e for e in events if e["name"] == "producer_send_error"]
    produced = {(e["partition"], e["offset"]) for e in acked}
    assert len(produced) == 600

    out = kafka.run("kafka-verifiable-consumer", *bs, "--topic", topic_name,
                    "--group-id", f"v-{topic_name}", "--max-messages", "600",
                    "--reset-policy", "earliest").stdout
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    consumed: set[tuple[int, int]] = set()
    for e in events:
        if e["name"] == "records_consumed":
            for part in e["partitions"]:
                consumed.update((part["partition"], o) for o in range(part["minOffset"], part["maxOffset"] + 1))
    assert consumed == produced
    commits = [e for e in events if e["name"] == "offsets_committed"]
    assert commits and all(e["success"] for e in commits)


def test_cluster_id_features_and_api_versions(
    kafka: KafkaTools, bs: list[str], broker: EmbeddedBroker
) -> None:
    out = kafka.run("kafka-cluster", "cluster-id", *bs).stdout
    assert out.strip() == f"Cluster ID: {broker.cluster_id}"
    out = kafka.run("kafka-features", *bs, "describe").stdout
    assert re.search(
        r"Feature: metadata\.version\s+SupportedMinVersion: \S+\s+SupportedMaxVersion: \S+\s+"
        r"FinalizedVersionLevel: \S+\s+Epoch: \d+", out,
    ), out
    out = kafka.run("kafka-broker-api-versions", *bs).stdout
    assert re.search(r"Produce\(0\): \d+ to \d+ \[usable: \d+\]", out), out
    assert re.search(r"Fetch\(1\): \d+ to \d+ \[usable: \d+\]", out), out
