"""``odradek groups`` and ``odradek broker-api-versions`` next to Kafka 4's kafka-consumer-groups.sh
and kafka-broker-api-versions.sh on the same Odradek broker: the same stdout, byte for byte."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as TP

from odradek.cli.main import main
from odradek.embedded import EmbeddedBroker

from .kafka_reference import KafkaTools, find_kafka_tools
from .support import wait_until
from .test_admin_tools import _run


@pytest.fixture(scope="module")
def kafka() -> KafkaTools:
    return find_kafka_tools("4")


def _setup(bootstrap: str, name: str) -> tuple[str, str, str]:
    """Two topics with records, and two empty groups with committed offsets."""
    orders, pay = f"{name}-orders", f"{name}-pay"
    assert main(["topics", "--bootstrap-server", bootstrap, "--create", "--topic", orders, "--partitions", "3"]) == 0
    assert main(["topics", "--bootstrap-server", bootstrap, "--create", "--topic", pay, "--partitions", "2"]) == 0
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(30):
        p.produce(orders, value=b"o%d" % i, partition=i % 3, timestamp=1000 * (i + 1))
    for _ in range(5):
        p.produce(pay, value=b"p", partition=0)
    assert p.flush(30) == 0
    g1, g2 = f"{name}-g1", f"{name}-g2"
    for group, offsets in ((g1, [TP(orders, 0, 4), TP(orders, 1, 10), TP(orders, 2, 7), TP(pay, 0, 2)]),
                           (g2, [TP(pay, 0, 5)])):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        c.commit(offsets=offsets, asynchronous=False)
        c.close()
    return orders, pay, f"{name}-g"


def test_groups_output_is_kafkas(broker: EmbeddedBroker, kafka: KafkaTools, topic_name: str, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    name = topic_name.replace("_", "-")
    bs = ["--bootstrap-server", broker.bootstrap_servers]
    orders, pay, prefix = _setup(broker.bootstrap_servers, name)
    g1, g2 = f"{prefix}1", f"{prefix}2"
    live = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": f"{prefix}-live",
                     "client.id": "live-client", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    live.subscribe([orders, pay])
    deadline = time.monotonic() + 30
    while len(live.assignment()) < 5 and time.monotonic() < deadline:
        live.poll(0.2)
    assert len(live.assignment()) == 5
    # A KIP-848 group too: member and assignment epochs, target assignments.
    k848 = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": f"{prefix}-848",
                     "group.protocol": "consumer", "enable.auto.commit": False})
    k848.subscribe([orders])
    deadline = time.monotonic() + 30
    while len(k848.assignment()) < 3 and time.monotonic() < deadline:
        k848.poll(0.2)
        live.poll(0)
    assert len(k848.assignment()) == 3
    live.commit(offsets=[TP(orders, 1, 2), TP(pay, 0, 1)], asynchronous=False)
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{orders},0,3\n{orders},1,50\n")
    try:
        same = [
            ["--list"], ["--list", "--type"], ["--list", "--state"], ["--list", "--state", "Empty", "--type"],
            ["--describe", "--group", g1], ["--describe", "--group", g1, "--verbose"],
            ["--describe", "--group", g1, "--group", g2, f"--group={prefix}-live"],
            ["--describe", "--group", f"{prefix}-live", "--members"],
            ["--describe", "--group", f"{prefix}-live", "--members", "--verbose"],
            ["--describe", "--group", f"{prefix}-live", "--state"],
            ["--describe", "--group", g1, "--state", "--verbose"],
            ["--describe", "--group", g1, "--members", "--verbose"],
            ["--describe", "--group", f"{prefix}-848", "--members", "--verbose"],
            ["--describe", "--group", f"{prefix}-848", "--state", "--verbose"],
            ["--describe", "--group", f"{prefix}-848", "--verbose"],
            ["--reset-offsets", "--group", g1, "--topic", orders, "--to-earliest"],
            ["--reset-offsets", "--group", g1, "--topic", f"{orders}:0,2", "--to-offset", "5", "--dry-run"],
            ["--reset-offsets", "--group", g1, "--all-topics", "--shift-by", "-3"],
            ["--reset-offsets", "--group", g1, "--all-topics", "--to-current", "--export"],
            ["--reset-offsets", "--group", g1, "--group", g2, "--all-topics", "--to-latest", "--export"],
            ["--reset-offsets", "--group", g1, "--topic", pay, "--topic", orders, "--to-datetime", "1970-01-01T00:00:05.000"],
            ["--reset-offsets", "--group", g1, "--topic", orders, "--by-duration", "PT1H"],
            ["--reset-offsets", "--group", g1, "--from-file", str(plan)],
        ]
        for args in same:
            code, ours, err = _run(capsys, "groups", *bs, *args)
            theirs = kafka.run("kafka-consumer-groups", *bs, *args).stdout
            assert code == 0, (args, err)
            assert ours == theirs, args
            if args[0] == "--list":  # groups of other tests may come and go in between
                continue
        listed = _run(capsys, "groups", *bs, "--list")[1].split()
        assert {g1, g2, f"{prefix}-live"} <= set(listed)

        # A reset of a group with members is refused (Kafka prints this on stdout and exits 0).
        code, out, err = _run(capsys, "groups", *bs, "--reset-offsets", "--group", f"{prefix}-live",
                              "--all-topics", "--to-earliest", "--execute")
        assert code == 1 and err.startswith(f"\nError: Assignments can only be reset if the group '{prefix}-live' "
                                            "is inactive, but the current state is Stable.\n")
        # --execute commits what the dry run showed.
        args = ["--reset-offsets", "--group", g1, "--topic", f"{orders}:0", "--to-offset", "3", "--execute"]
        assert _run(capsys, "groups", *bs, *args)[1] == kafka.run("kafka-consumer-groups", *bs, *args).stdout
        code, out, _ = _run(capsys, "groups", *bs, "--describe", "--group", g1)
        assert code == 0 and f"\n{g1} {orders} ".replace(" ", "") in out.replace(" ", "")
        assert [line.split()[3] for line in out.splitlines() if line.startswith(g1) and f" {orders} " in line][0] == "3"

        code, out, err = _run(capsys, "groups", *bs, "--delete-offsets", "--group", g1, "--topic", pay)
        assert code == 0 and out.startswith(f"Request succeeded for deleting offsets from group {g1}.\n")
        assert _run(capsys, "groups", *bs, "--delete", "--group", g2) == (
            0, f"Deletion of requested consumer groups ('{g2}') was successful.\n", "")
        code, out, err = _run(capsys, "groups", *bs, "--delete", "--group", g2)
        assert (code, out) == (1, "") and err == (
            "\nError: Deletion of some consumer groups failed:\n"
            f"* Group '{g2}' could not be deleted due to: org.apache.kafka.common.errors.GroupIdNotFoundException: "
            "The group id does not exist.\n")
        theirs = kafka.run("kafka-consumer-groups", *bs, "--delete", "--group", g1).stdout
        assert theirs == f"Deletion of requested consumer groups ('{g1}') was successful.\n"
        wait_until(lambda: g1 not in _run(capsys, "groups", *bs, "--list")[1].split(), timeout=10, what="g1 deleted")
    finally:
        live.close()
        k848.close()

    assert _run(capsys, "groups", *bs, "--describe", "--group", f"{prefix}-none") == (
        1, "", f"\nError: Consumer group '{prefix}-none' does not exist.\n")


def test_groups_usage_errors_exit_2(broker: EmbeddedBroker, capsys: pytest.CaptureFixture[str]) -> None:
    bs = ["--bootstrap-server", broker.bootstrap_servers]
    for args in (["--list", "--describe"], ["--describe"], ["--reset-offsets", "--group", "g", "--all-topics"],
                 ["--reset-offsets", "--group", "g", "--to-earliest"], ["--list", "--type", "bogus"],
                 ["--reset-offsets", "--group", "g", "--all-topics", "--by-duration", "1h"],
                 ["--delete-offsets", "--group", "g"], ["--describe", "--group", "g", "--members", "--offsets"],
                 ["--reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "yesterday"]):
        code, out, err = _run(capsys, "groups", *bs, *args)
        assert (code, out) == (2, ""), args
        assert "usage:" in err, args
    # A failure while running: exit 1, Kafka's lines on stderr.
    code, out, err = _run(capsys, "groups", *bs, "--reset-offsets", "--group", "g", "--topic", "no-such-topic-x",
                          "--to-earliest", "--dry-run")
    assert (code, out) == (1, "") and err == (
        "\nError: Executing consumer group command failed due to This server does not host this topic-partition.\n"
        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: This server does not host this "
        "topic-partition.\n")


def test_broker_api_versions_is_kafkas(broker: EmbeddedBroker, kafka: KafkaTools,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    bs = ["--bootstrap-server", broker.bootstrap_servers]
    code, ours, err = _run(capsys, "broker-api-versions", *bs)
    assert (code, err) == (0, "")
    assert ours.startswith(f"{broker.bootstrap_servers} (id: 1 rack: null isFenced: false) -> (\n\tProduce(0): ")
    assert "\tSaslHandshake(17): 0 to 1 [usable: 1],\n" in ours and ours.endswith("\n)\n")
    assert ours == kafka.run("kafka-broker-api-versions", *bs).stdout
