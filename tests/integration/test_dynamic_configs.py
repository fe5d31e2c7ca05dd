"""Dynamic configs through ``odradek configs`` (compared with Kafka 4's kafka-configs on the same
cluster): broker defaults applied live (message.max.bytes), per-broker over cluster default,
read-only keys refused, values kept across a restart, and KIP-848 group configs used by the
consumer-group coordinator for a real ``group.protocol=consumer`` client."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from odradek.coordinator.group.consumer_group import ConsumerGroup
from odradek.embedded import EmbeddedBroker

from .kafka_reference import KafkaTools, find_kafka_tools
from .support import ServerProcess, unique_name, wait_until

ROOT = Path(__file__).resolve().parents[2]


def odradek_configs(bs: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek.cli.main", "configs", "--bootstrap-server", bs, *args],
        capture_output=True, text=True, timeout=60, cwd=ROOT, stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def kafka() -> KafkaTools:
    return find_kafka_tools("4")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path / "data", {})
    s.start()
    try:
        yield s
    finally:
        s.kill()


def _produce(bs: str, topic: str, size: int) -> KafkaError | None:
    """Send one record of ``size`` bytes; the delivery error, if any."""
    errors: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0, "message.timeout.ms": 20000, "retries": 0})
    p.produce(topic, value=b"x" * size, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0
    return errors[0]


def test_message_max_bytes_live_precedence_refusals_restart(kafka: KafkaTools, server: ServerProcess) -> None:
    bs = server.bootstrap_servers
    topic = unique_name("mmb")
    r = subprocess.run([sys.executable, "-m", "odradek.cli.main", "topics", "--bootstrap-server", bs, "--create",
                        "--topic", topic], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert _produce(bs, topic, 3000) is None

    # Cluster-wide default lowered live: the topic (no override of its own) refuses the record.
    r = odradek_configs(bs, "--alter", "--entity-type", "brokers", "--entity-default", "--add-config", "message.max.bytes=2000")
    assert (r.returncode, r.stdout) == (0, "Completed updating default config for brokers in the cluster.\n"), r.stderr
    err = _produce(bs, topic, 3000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err

    # The per-broker value beats the cluster default.
    r = odradek_configs(bs, "--alter", "--broker", "1", "--add-config", "message.max.bytes=5000")
    assert (r.returncode, r.stdout) == (0, "Completed updating config for broker 1.\n"), r.stderr
    assert _produce(bs, topic, 3000) is None
    r = odradek_configs(bs, "--describe", "--all", "--topic", topic)
    assert ("  max.message.bytes=5000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:message.max.bytes=5000, "
            "DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000, DEFAULT_CONFIG:message.max.bytes=1048588}") in r.stdout

    # Same output as Kafka's own tool on the same cluster.
    for args in (("--describe", "--entity-type", "brokers"), ("--describe", "--all", "--topic", topic),
                 ("--describe", "--entity-type", "brokers", "--entity-default"), ("--describe", "--topic", "nosuch")):
        ours = odradek_configs(bs, *args)
        theirs = kafka.run("kafka-configs", "--bootstrap-server", bs, *args)
        assert (ours.returncode, ours.stdout) == (0, theirs.stdout), args

    # --add-config-file and --delete-config on a topic.
    props = server.data_dir.parent / "add.properties"
    props.write_text("retention.ms=7200000\ncleanup.policy=compact,delete\n")
    r = odradek_configs(bs, "--alter", "--topic", topic, "--add-config-file", str(props))
    assert (r.returncode, r.stdout) == (0, f"Completed updating config for topic {topic}.\n"), r.stderr
    r = odradek_configs(bs, "--alter", "--topic", topic, "--delete-config", "cleanup.policy")
    assert r.returncode == 0, r.stderr
    r = odradek_configs(bs, "--describe", "--entity-type", "topics", "--entity-name", topic)
    # (no broker layer sets log.retention.ms itself, so Kafka lists no broker synonym)
    assert r.stdout == (f"Dynamic configs for topic {topic} are:\n  retention.ms=7200000 sensitive=false synonyms="
                        "{DYNAMIC_TOPIC_CONFIG:retention.ms=7200000}\n")
    # Client quotas are served now (tests/integration/test_quotas.py): a user without any has none.
    r = odradek_configs(bs, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")

    # Keys Kafka needs a restart for are refused with Kafka's error.
    for key in ("log.dirs=/tmp/x", "num.io.threads=4"):
        r = odradek_configs(bs, "--alter", "--entity-type", "brokers", "--entity-default", "--add-config", key)
        name = key.split("=")[0]
        assert r.returncode == 1
        assert r.stderr.splitlines()[-1] == ("java.util.concurrent.ExecutionException: org.apache.kafka.common.errors."
                                             f"InvalidRequestException: Cannot update these configs dynamically: [{name}]")

    # num.replica.fetchers is applied live (the fetcher pool is resized), within Kafka's bounds.
    r = odradek_configs(bs, "--alter", "--broker", "1", "--add-config", "num.replica.fetchers=2")
    assert r.returncode == 0, r.stderr
    r = odradek_configs(bs, "--alter", "--broker", "1", "--add-config", "num.replica.fetchers=5")
    assert r.returncode == 1 and r.stderr.splitlines()[-1].endswith(
        "Dynamic thread count update validation failed for num.replica.fetchers=5, "
        "value should not be greater than double the current value 2")
    assert _produce(bs, topic, 100) is None

    # Broker loggers: Kafka's tool changes a log level, both tools list the same loggers.
    logger = "odradek.server.kafka_apis"
    kafka.run("kafka-configs", "--bootstrap-server", bs, "--alter", "--broker-logger", "1", "--add-config", f"{logger}=DEBUG")
    ours = odradek_configs(bs, "--describe", "--broker-logger", "1")
    assert f"  {logger}=DEBUG sensitive=false synonyms={{}}" in ours.stdout.splitlines()
    theirs = kafka.run("kafka-configs", "--bootstrap-server", bs, "--describe", "--broker-logger", "1")
    assert ours.stdout == theirs.stdout

    # Kept in the metadata log: the same after a restart, and still applied.
    before = odradek_configs(bs, "--describe", "--entity-type", "brokers").stdout
    server.restart()
    assert odradek_configs(bs, "--describe", "--entity-type", "brokers").stdout == before
    # log levels are the process's own, as in Kafka: back to the configured one
    assert f"  {logger}=INFO sensitive=false synonyms={{}}" in odradek_configs(bs, "--describe", "--broker-logger", "1").stdout
    r = odradek_configs(bs, "--alter", "--broker", "1", "--delete-config", "message.max.bytes")
    assert r.returncode == 0, r.stderr
    err = _produce(bs, topic, 3000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err


FAST = {
    "offsets.topic.num.partitions": "4",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.session.timeout.ms": "3000",
    "group.consumer.session.timeout.ms": "6000",
}


@pytest.fixture
def kbroker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(FAST) as b:
        yield b


def test_group_config_reaches_a_kip848_consumer_group(kbroker: EmbeddedBroker) -> None:
    bs = kbroker.bootstrap_servers
    topic, group = unique_name("gc"), unique_name("g")
    subprocess.run([sys.executable, "-m", "odradek.cli.main", "topics", "--bootstrap-server", bs, "--create",
                    "--topic", topic], check=True, capture_output=True, timeout=60, cwd=ROOT)
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest"})
    coordinator = kbroker.server.broker.group_coordinator
    try:
        c.subscribe([topic])

        def member_session_left_ms() -> int | None:
            c.poll(0.1)
            g = coordinator.metadata_manager.get_group(group)
            if not isinstance(g, ConsumerGroup) or not g.session_deadlines:
                return None
            return max(g.session_deadlines.values()) - coordinator.clock_ms()

        wait_until(lambda: member_session_left_ms() is not None, timeout=30, what="member joined")
        assert (member_session_left_ms() or 0) <= 6000  # the broker's group.consumer.session.timeout.ms

        r = odradek_configs(bs, "--alter", "--group", group, "--add-config", "consumer.session.timeout.ms=20000")
        assert (r.returncode, r.stdout) == (0, f"Completed updating config for group {group}.\n"), r.stderr
        # the next heartbeat sets the member's deadline from the group's own session timeout
        wait_until(lambda: (member_session_left_ms() or 0) > 15000, timeout=20, what="group session timeout used")

        r = odradek_configs(bs, "--describe", "--group", group)
        assert r.stdout == (f"Dynamic configs for group {group} are:\n  consumer.session.timeout.ms=20000 "
                            "sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:consumer.session.timeout.ms=20000}\n")
        r = odradek_configs(bs, "--alter", "--group", group, "--add-config", "consumer.session.timeout.ms=70000")
        assert r.returncode == 1 and r.stderr.splitlines()[-1].endswith(
            "InvalidConfigurationException: consumer.session.timeout.ms must be less than or equal to "
            "group.consumer.max.session.timeout.ms")
        r = odradek_configs(bs, "--alter", "--group", group, "--delete-config", "consumer.session.timeout.ms")
        assert r.returncode == 0, r.stderr
        time.sleep(1.0)
        wait_until(lambda: (member_session_left_ms() or 99999) <= 6000, timeout=20, what="back to the broker default")
    finally:
        c.close()
