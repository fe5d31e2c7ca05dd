"""``odradek topics / get-offsets / delete-records / log-dirs / features / cluster`` against a
real Odradek broker, and their output next to Kafka's own tools (4.x) against the same broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Producer

from odradek.cli.cluster import LocalCluster, Node
from odradek.cli.main import main
from odradek.embedded import EmbeddedBroker

from .kafka_reference import KafkaTools, find_kafka_tools
from .support import wait_until


@pytest.fixture
def topic(topic_name: str) -> str:
    """No '_' in the name: TopicCommand warns of '.'/'_' collisions on --create."""
    return topic_name.replace("_", "-")


@pytest.fixture(scope="module")
def kafka() -> KafkaTools:
    return find_kafka_tools("4")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def _produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, n in counts.items():
        for i in range(n):
            p.produce(topic, value=b"v" * i, partition=partition, timestamp=1_000 * (i + 1))
    assert p.flush(30) == 0


def test_topics_create_alter_if_exists_delete(broker: EmbeddedBroker, topic: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    bs = ["topics", "--bootstrap-server", broker.bootstrap_servers]
    assert _run(capsys, *bs, "--create", "--topic", topic, "--partitions", "2") == (
        0, f"Created topic {topic}.\n", "")
    assert _run(capsys, *bs, "--create", "--topic", topic, "--partitions", "2") == (
        1, "", f"Error while executing topic command : Topic '{topic}' already exists.\n")
    assert _run(capsys, *bs, "--create", "--topic", topic, "--if-not-exists") == (0, "", "")

    assert _run(capsys, *bs, "--alter", "--topic", topic, "--partitions", "4", "--replica-assignment",
                "1,1,1,1") == (0, "", "")
    code, out, _ = _run(capsys, *bs, "--describe", "--topic", topic)
    assert code == 0 and "PartitionCount: 4\t" in out and out.count(f"\tTopic: {topic}\tPartition:") == 4
    assert _run(capsys, *bs, "--alter", "--topic", topic, "--partitions", "3") == (
        1, "", f"Error while executing topic command : The topic {topic} currently has 4 partition(s); "
        "3 would not be an increase.\n")

    topic_id = out.split("TopicId: ")[1].split("\t")[0]
    code, by_id, _ = _run(capsys, *bs, "--describe", "--topic-id", topic_id)
    assert code == 0 and by_id == out

    missing = f"{topic}-missing"
    for action in (["--alter", "--partitions", "5"], ["--delete"], ["--describe"]):
        assert _run(capsys, *bs, *action, "--topic", missing) == (
            1, "", f"Error while executing topic command : Topic '{missing}' does not exist as expected\n")
        assert _run(capsys, *bs, *action, "--topic", missing, "--if-exists") == (0, "", "")

    assert _run(capsys, *bs, "--delete", "--topic", topic) == (0, "", "")
    wait_until(lambda: topic not in _run(capsys, *bs, "--list")[1].split(), timeout=30, what="topic deleted")


def test_describe_by_topic_id_as_kafkas_tool(broker: EmbeddedBroker, kafka: KafkaTools, topic: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Kafka's Admin asks Metadata by id with names "" (not null): the answer names the topic
    and carries its id, so kafka-topics --describe --topic-id prints what ours does."""
    bs = ["--bootstrap-server", broker.bootstrap_servers]
    assert _run(capsys, "topics", *bs, "--create", "--topic", topic, "--partitions", "3")[0] == 0
    code, ours, _ = _run(capsys, "topics", *bs, "--describe", "--topic", topic)
    topic_id = ours.split("TopicId: ")[1].split("\t")[0]
    theirs = kafka.run("kafka-topics", *bs, "--describe", "--topic-id", topic_id, check=False)
    assert (theirs.returncode, theirs.stdout) == (0, ours)
    assert _run(capsys, "topics", *bs, "--describe", "--topic-id", topic_id) == (0, ours, "")
    unknown = "AAAAAAAAAAAAAAAAAAAAAQ"
    theirs = kafka.run("kafka-topics", *bs, "--describe", "--topic-id", unknown, check=False)
    assert (theirs.returncode, theirs.stdout) == (
        1, f"Error while executing topic command : TopicId '{unknown}' does not exist as expected\n")


def test_get_offsets_and_delete_records_as_kafkas_tools(
    broker: EmbeddedBroker, kafka: KafkaTools, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bs = ["--bootstrap-server", broker.bootstrap_servers]
    assert _run(capsys, "topics", *bs, "--create", "--topic", topic, "--partitions", "11")[0] == 0
    _produce(broker.bootstrap_servers, topic, {p: p + 1 for p in range(11)})

    for args in (["--topic", topic], ["--topic", topic, "--time", "-2"],
                 ["--topic", topic, "--time", "max-timestamp"], ["--topic", topic, "--time", "3000"],
                 ["--topic-partitions", f"{topic}:2-5,{topic}:10"],
                 ["--topic", topic, "--partitions", "1,10"]):
        code, ours, err = _run(capsys, "get-offsets", *bs, *args)
        theirs = kafka.run("kafka-get-offsets", *bs, *args).stdout
        assert (code, err) == (0, "") and ours == theirs, args
    assert f"{topic}:10:11\n" in _run(capsys, "get-offsets", *bs, "--topic", topic)[1]
    assert _run(capsys, "get-offsets", *bs, "--topic", f"{topic}-none") == (
        1, "", "Error occurred: Could not match any topic-partitions with the specified filters\n")

    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 4, "offset": 3}, {"topic": topic, "partition": 0, "offset": 99}]}))
    code, out, _ = _run(capsys, "delete-records", *bs, "--offset-json-file", str(plan))
    assert code == 0
    assert out.splitlines() == [
        "Executing records delete operation", "Records delete operation completed:",
        f"partition: {topic}-4\tlow_watermark: 3",
        f"partition: {topic}-0\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException: "
        "The requested offset is not within the range of offsets maintained by the server.",
    ]
    theirs = kafka.run("kafka-delete-records", *bs, "--offset-json-file", str(plan)).stdout
    assert sorted(theirs.splitlines()) == sorted(out.splitlines())  # Kafka's order is its map's
    earliest = _run(capsys, "get-offsets", *bs, "--topic", topic, "--partitions", "4", "--time", "earliest")
    assert earliest == (0, f"{topic}:4:3\n", "")


def test_log_dirs_features_and_cluster_id_as_kafkas_tools(
    broker: EmbeddedBroker, kafka: KafkaTools, topic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bs = ["--bootstrap-server", broker.bootstrap_servers]
    assert _run(capsys, "topics", *bs, "--create", "--topic", topic, "--partitions", "6")[0] == 0
    _produce(broker.bootstrap_servers, topic, {0: 3, 5: 2})
    for args in (["--describe", "--topic-list", topic], ["--describe", "--broker-list", "1", "--topic-list", topic]):
        code, ours, _ = _run(capsys, "log-dirs", *bs, *args)
        assert code == 0 and ours == kafka.run("kafka-log-dirs", *bs, *args).stdout
    assert '"partition":"' + topic + '-0","size":' in ours
    assert _run(capsys, "log-dirs", *bs, "--describe", "--broker-list", "1,7") == (
        1, "", "ERROR: The given brokers do not exist from --broker-list: 7. Current existent brokers: 1\n")

    code, ours, _ = _run(capsys, "features", *bs, "describe")
    assert code == 0 and ours == kafka.run("kafka-features", *bs, "describe").stdout
    assert "Feature: metadata.version" in ours

    code, ours, _ = _run(capsys, "cluster", "id", *bs)
    assert code == 0 and ours == kafka.run("kafka-cluster", "cluster-id", *bs).stdout == f"Cluster ID: {broker.cluster_id}\n"

    code, out, _ = _run(capsys, "cluster", "info", *bs)
    lines = out.splitlines()
    assert code == 0 and lines[0] == f"Cluster ID: {broker.cluster_id}"
    assert lines[1] == "Controller: 1"
    host, port = broker.bootstrap_servers.split(":")
    assert lines[2].startswith(f"Broker: 1\tEndpoint: {host}:{port}\tRack: null\tApiKeys: ")
    assert "\tProduce: " in lines[2] and "\tmetadata.version: 3.9-IV0" in lines[2]


class _RackCluster(LocalCluster):
    """A LocalCluster whose brokers have racks (``rack-<id>``)."""

    def _properties(self, node: Node) -> dict[str, str]:
        props = super()._properties(node)
        if node.role == "broker":
            props["broker.rack"] = f"rack-{node.node_id}"
        return props


@pytest.mark.timeout(240)
def test_tools_on_a_two_broker_cluster(kafka: KafkaTools, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Leader-bound requests (ListOffsets, DeleteRecords) reach each partition's leader;
    broker-bound ones (DescribeLogDirs) every broker; cluster info lists both with their racks."""
    with _RackCluster(1, 2, tmp_path / "cluster") as cluster:
        bs = ["--bootstrap-server", cluster.brokers[0].address]
        assert _run(capsys, "topics", *bs, "--create", "--topic", "spread", "--replica-assignment",
                    "101,102,101,102") == (0, "Created topic spread.\n", "")
        wait_until(lambda: "Leader: none" not in _run(capsys, "topics", *bs, "--describe", "--topic", "spread")[1]
                   and _run(capsys, "topics", *bs, "--describe", "--topic", "spread")[0] == 0,
                   timeout=30, what="leaders for spread")
        _produce(cluster.bootstrap_servers, "spread", {0: 1, 1: 2, 2: 3, 3: 4})

        code, ours, err = _run(capsys, "get-offsets", *bs, "--topic", "spread")
        assert (code, ours, err) == (0, "spread:0:1\nspread:1:2\nspread:2:3\nspread:3:4\n", "")
        assert ours == kafka.run("kafka-get-offsets", *bs, "--topic", "spread").stdout

        plan = tmp_path / "delete.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": "spread", "partition": p, "offset": 1} for p in range(4)]}))
        code, out, _ = _run(capsys, "delete-records", *bs, "--offset-json-file", str(plan))
        assert code == 0 and out.count("\tlow_watermark: 1\n") == 4, out
        assert _run(capsys, "get-offsets", *bs, "--topic", "spread", "--time", "-2")[1] == (
            "spread:0:1\nspread:1:1\nspread:2:1\nspread:3:1\n")

        code, ours, _ = _run(capsys, "log-dirs", *bs, "--describe", "--topic-list", "spread")
        assert code == 0 and ours == kafka.run("kafka-log-dirs", *bs, "--describe", "--topic-list", "spread").stdout
        assert ours.splitlines()[1] == "Received log directory information from brokers 101,102"

        code, out, _ = _run(capsys, "cluster", "info", *bs)
        lines = out.splitlines()
        assert code == 0 and lines[0] == f"Cluster ID: {cluster.cluster_id}"
        assert lines[1].split(": ")[1] in ("101", "102")
        for line, node in zip(lines[2:], cluster.brokers, strict=True):
            assert line.startswith(f"Broker: {node.node_id}\tEndpoint: {node.address}\tRack: rack-{node.node_id}\t")
