"""Dynamic broker configs (KIP-226) through Kafka's own ``kafka-configs`` tool and confluent-kafka.

The broker's effective configuration is static server.properties < dynamic cluster default <
dynamic per-broker config; the dynamic ones live in the metadata log, so they survive a restart,
and the broker defaults of topic configs reach every topic without its own value.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from confluent_kafka.error import KafkaException

from odradek.embedded import EmbeddedBroker
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors

from .kafka_reference import KafkaTools, find_kafka_tools
from .support import RawConnection, ServerProcess, unique_name, wait_until

HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def kafka() -> KafkaTools:
    return find_kafka_tools("4")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    # Retention is checked often so that a changed broker default shows in the log quickly.
    s = ServerProcess(tmp_path / "data", {"log.retention.check.interval.ms": "200"})
    s.start()
    try:
        yield s
    finally:
        s.kill()


def _configs(kafka: KafkaTools, bs: str, *args: str, check: bool = True) -> str:
    r = kafka.run("kafka-configs", "--bootstrap-server", bs, *args, check=check)
    return r.stdout + r.stderr


def _low_watermark(bs: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bs, "group.id": unique_name("g")})
    try:
        low, _ = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(low)
    finally:
        c.close()


def test_kafka_configs_broker_default_and_per_broker(kafka: KafkaTools, server: ServerProcess) -> None:
    bs = server.bootstrap_servers
    topic = unique_name("dyn")
    kafka.run("kafka-topics", "--bootstrap-server", bs, "--create", "--topic", topic, "--partitions", "1")

    # Records two hours old, one batch each. Under the static default (168 h) they are kept.
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    old = int(time.time() * 1000) - 2 * HOUR_MS
    for i in range(30):
        p.produce(topic, key=b"k%d" % i, value=b"v" * 100, timestamp=old + i)
        p.flush(10)
    assert p.flush(30) == 0

    # Per broker: small segments (no segment of its own for the topic, so it takes this one).
    out = _configs(kafka, bs, "--alter", "--entity-type", "brokers", "--entity-name", "1",
                   "--add-config", "log.segment.bytes=1024")
    assert "Completed updating config for broker 1." in out
    # Cluster-wide default: one hour of retention.
    out = _configs(kafka, bs, "--alter", "--entity-type", "brokers", "--entity-default",
                   "--add-config", "log.retention.ms=3600000")
    assert "Completed updating default config for brokers in the cluster." in out

    desc = _configs(kafka, bs, "--describe", "--entity-type", "brokers", "--entity-name", "1")
    assert "Dynamic configs for broker 1 are:" in desc
    assert ("log.segment.bytes=1024 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.segment.bytes=1024, "
            "DEFAULT_CONFIG:log.segment.bytes=1073741824}") in desc
    assert "log.retention.ms" not in desc  # a cluster default, not this broker's own
    desc = _configs(kafka, bs, "--describe", "--entity-type", "brokers", "--entity-default")
    assert "Default configs for brokers in the cluster are:" in desc
    assert "log.retention.ms=3600000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=3600000}" in desc
    assert "log.segment.bytes" not in desc

    tdesc = _configs(kafka, bs, "--describe", "--all", "--entity-type", "topics", "--entity-name", topic)
    assert ("retention.ms=3600000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=3600000, "
            "DEFAULT_CONFIG:log.retention.hours=168}") in tdesc
    assert "segment.bytes=1024 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.segment.bytes=1024" in tdesc

    # Behaviour: new records roll 1 KiB segments, and the hour of retention deletes the
    # two-hour-old ones (only a fresh record is left in the active segment).
    for i in range(20):
        p.produce(topic, key=b"n%d" % i, value=b"w" * 100, timestamp=old + 100 + i)
        p.flush(10)
    p.produce(topic, key=b"now", value=b"fresh")
    assert p.flush(30) == 0
    wait_until(lambda: _low_watermark(bs, topic) >= 30, timeout=30, what="old segments deleted by retention")

    # Kept in the metadata log across a restart.
    server.restart()
    desc = _configs(kafka, bs, "--describe", "--entity-type", "brokers", "--entity-default")
    assert "log.retention.ms=3600000" in desc
    desc = _configs(kafka, bs, "--describe", "--entity-type", "brokers", "--entity-name", "1")
    assert "log.segment.bytes=1024" in desc
    tdesc = _configs(kafka, bs, "--describe", "--all", "--entity-type", "topics", "--entity-name", topic)
    assert "segment.bytes=1024 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.segment.bytes=1024" in tdesc

    # Deleting reverts to the static / default value.
    _configs(kafka, bs, "--alter", "--entity-type", "brokers", "--entity-default", "--delete-config", "log.retention.ms")
    tdesc = _configs(kafka, bs, "--describe", "--all", "--entity-type", "topics", "--entity-name", topic)
    assert "retention.ms=604800000 sensitive=false synonyms={}" in tdesc
    desc = _configs(kafka, bs, "--describe", "--entity-type", "brokers", "--entity-default")
    assert "log.retention.ms" not in desc


def test_kafka_configs_refusals(kafka: KafkaTools, server: ServerProcess) -> None:
    bs = server.bootstrap_servers
    out = _configs(kafka, bs, "--alter", "--entity-type", "brokers", "--entity-name", "1",
                   "--add-config", "log.dirs=/tmp/elsewhere", check=False)
    assert "InvalidRequestException: Cannot update these configs dynamically: [log.dirs]" in out
    out = _configs(kafka, bs, "--alter", "--entity-type", "brokers", "--entity-default",
                   "--add-config", "log.retention.ms=soon", check=False)
    assert "Invalid value soon for configuration log.retention.ms" in out
    out = _configs(kafka, bs, "--describe", "--entity-type", "brokers", "--entity-default")
    assert "log.retention.ms" not in out and "log.dirs" not in out


@pytest.fixture
def own_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def test_confluent_incremental_alter_configs_on_broker(own_broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap_servers})
    topic = unique_name("dyn")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)

    def alter(name: str, key: str, value: str | None, validate_only: bool = False) -> None:
        op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
        res = ConfigResource("BROKER", name, incremental_configs=[
            ConfigEntry(key, value or "", incremental_operation=op)])
        admin.incremental_alter_configs([res], validate_only=validate_only)[res].result(30)

    def describe(kind: str, name: str) -> dict[str, ConfigEntry]:
        res = ConfigResource(kind, name)
        return dict(admin.describe_configs([res])[res].result(30))

    alter("1", "compression.type", "gzip", validate_only=True)
    assert describe("BROKER", "1")["compression.type"].source == ConfigSource.DEFAULT_CONFIG.value

    alter("1", "compression.type", "gzip")
    e = describe("BROKER", "1")["compression.type"]
    assert (e.value, e.source, e.is_read_only) == ("gzip", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    t = describe("TOPIC", topic)["compression.type"]
    assert (t.value, t.source) == ("gzip", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    def log_compression() -> str | None:
        # The log is created off the event loop: it may not be attached yet.
        lg = own_broker.server.broker.replica_manager.partitions[(topic, 0)].log
        return lg.config.compression_type if lg is not None else None

    wait_until(lambda: log_compression() == "gzip", timeout=10, what="log reconfigured")

    with pytest.raises(KafkaException) as err:
        alter("1", "num.partitions", "3")
    assert "Cannot update these configs dynamically: [num.partitions]" in str(err.value)
    # Clients send a BROKER resource to the broker it names; another id reaches this one only
    # from a raw request.
    with RawConnection.to(own_broker) as conn:
        for name, message in (("7", "Unexpected broker id, expected 1, but received 7"),
                              ("x", "Node id must be an integer, but it is: x")):
            body = {"resources": [{"resource_type": 4, "resource_name": name, "configs": [
                {"name": "compression.type", "config_operation": 0, "value": "lz4"}]}], "validate_only": False}
            r = conn.request(m.INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"][0]
            assert (r["error_code"], r["error_message"]) == (Errors.INVALID_REQUEST, message)

    # the cleaner's settings reach the running cleaner
    alter("1", "log.cleaner.backoff.ms", "250")
    alter("1", "log.cleaner.dedupe.buffer.size", "1048576")
    cleaner = own_broker.server.broker.log_manager.cleaner
    assert (cleaner.config.backoff_ms, cleaner.config.dedupe_buffer_size) == (250, 1048576)
    assert describe("BROKER", "1")["log.cleaner.backoff.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value

    alter("1", "compression.type", None)
    assert describe("BROKER", "1")["compression.type"].source == ConfigSource.DEFAULT_CONFIG.value
    assert describe("TOPIC", topic)["compression.type"].value == "producer"
