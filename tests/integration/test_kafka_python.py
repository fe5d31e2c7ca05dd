"""kafka-python against Odradek: KafkaAdminClient, KafkaProducer (defaults), KafkaConsumer (assign)."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from typing import Any

import kafka.errors as ke
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    NewPartitions,
    NewTopic,
)

from odradek.embedded import EmbeddedBroker

from .support import (
    BASE_TIMESTAMP_MS,
    CODECS,
    RawConnection,
    Rec,
    check_exactly_once,
    fetch,
    make_records,
    wait_until,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def admin(broker: EmbeddedBroker) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        yield client
    finally:
        client.close()


def topic_configs(admin: KafkaAdminClient, topic: str) -> dict[str, Any]:
    result = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all"
    )
    configs: dict[str, Any] = result["topic"][topic]
    return configs


def produce_all(bootstrap: str, topic: str, records: Sequence[Rec], **config: Any) -> list[Any]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, **config)
    try:
        futures = [
            producer.send(
                topic,
                key=r.key,
                value=r.value,
                headers=list(r.headers),
                partition=r.partition,
                timestamp_ms=r.timestamp,
            )
            for r in records
        ]
        producer.flush(120)
        return [f.get(timeout=60) for f in futures]
    finally:
        producer.close(10)


def consume_to_end(bootstrap: str, topic: str, partitions: int) -> list[Rec]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: list[Rec] = []
        deadline = time.monotonic() + 120
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "consume stalled"
            for tp, msgs in consumer.poll(timeout_ms=500).items():
                for msg in msgs:
                    out.append(
                        Rec(tp.partition, msg.key, msg.value, tuple(msg.headers), msg.timestamp, msg.offset)
                    )
        return out
    finally:
        consumer.close()


# ---- admin ------------------------------------------------------------------------------------


def test_topic_lifecycle(admin: KafkaAdminClient, topic_name: str) -> None:
    created = admin.create_topics(
        [NewTopic(topic_name, 3, 1, topic_configs={"retention.ms": "3600000"})]
    )
    (result,) = created["topics"]
    assert (result["name"], result["error_code"], result["num_partitions"]) == (topic_name, 0, 3)
    assert result["configs"]["retention.ms"]["value"] == "3600000"

    assert topic_name in admin.list_topics()
    (described,) = admin.describe_topics([topic_name])
    assert described["error_code"] == 0 and len(described["partitions"]) == 3

    configs = topic_configs(admin, topic_name)
    assert configs["retention.ms"]["value"] == "3600000"
    assert configs["cleanup.policy"]["value"] == "delete"
    modified = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name)])
    assert set(modified["topic"][topic_name]) == {"retention.ms"}

    # kafka-python uses IncrementalAlterConfigs when the broker has it: other keys stay
    altered = admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic_name, configs={"segment.ms": "7200000"})]
    )
    assert altered == {"topic": {topic_name: "OK"}}
    configs = topic_configs(admin, topic_name)
    assert configs["segment.ms"]["value"] == "7200000"
    assert configs["retention.ms"]["value"] == "3600000"
    # and the legacy AlterConfigs on request (kafka-python resends the other modified keys
    # itself, since AlterConfigs replaces the whole set)
    admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic_name, configs={"cleanup.policy": "compact"})],
        incremental=False,
    )
    configs = topic_configs(admin, topic_name)
    assert configs["cleanup.policy"]["value"] == "compact"
    assert configs["segment.ms"]["value"] == "7200000"

    broker_configs = admin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all"
    )
    assert broker_configs["broker"]["1"]["num.partitions"]["value"] == "1"

    deleted = admin.delete_topics([topic_name])
    assert [(r["name"], r["error_code"]) for r in deleted["topics"]] == [(topic_name, 0)]
    wait_until(lambda: topic_name not in admin.list_topics(), what="topic deleted")
    with pytest.raises(ke.UnknownTopicOrPartitionError):
        admin.delete_topics([topic_name])


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda n: NewTopic("bad name!", 1, 1), ke.InvalidTopicError),
        (lambda n: NewTopic("x" * 250, 1, 1), ke.InvalidTopicError),
        (lambda n: NewTopic("..", 1, 1), ke.InvalidTopicError),
        (lambda n: NewTopic(n, 1, 2), ke.InvalidReplicationFactorError),
        (lambda n: NewTopic(n, 1, 1, topic_configs={"retention.ms": "x"}), ke.InvalidConfigurationError),
        (lambda n: NewTopic(n, 1, 1, topic_configs={"no.such.config": "1"}), ke.InvalidConfigurationError),
        (lambda n: NewTopic(n, 0, 1), ke.InvalidPartitionsError),
        (lambda n: NewTopic(n, -7, 1), ke.InvalidPartitionsError),
    ],
    ids=["name", "long-name", "dotdot", "rf", "config", "unknown-config", "zero", "negative"],
)
def test_create_topic_errors(admin: KafkaAdminClient, topic_name: str, make: Any, error: type) -> None:
    with pytest.raises(error):
        admin.create_topics([make(topic_name)])
    assert topic_name not in admin.list_topics()


def test_duplicate_topic(admin: KafkaAdminClient, topic_name: str) -> None:
    admin.create_topics([NewTopic(topic_name, 1, 1)])
    with pytest.raises(ke.TopicAlreadyExistsError):
        admin.create_topics([NewTopic(topic_name, 1, 1)])
    result = admin.create_topics([NewTopic(topic_name, 1, 1)], raise_errors=False)
    assert result["topics"][0]["error_code"] == ke.TopicAlreadyExistsError.errno


def test_alter_config_invalid(admin: KafkaAdminClient, topic_name: str) -> None:
    admin.create_topics([NewTopic(topic_name, 1, 1)])
    result = admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic_name, configs={"retention.ms": "x"})]
    )
    assert str(result["topic"][topic_name]).startswith("[Error 40] InvalidConfigurationError")
    assert topic_configs(admin, topic_name)["retention.ms"]["value"] == "604800000"


def test_create_partitions_and_cluster(admin: KafkaAdminClient, broker: EmbeddedBroker, topic_name: str) -> None:
    admin.create_topics([NewTopic(topic_name, 1, 1)])
    admin.create_partitions({topic_name: NewPartitions(4)})
    wait_until(
        lambda: len(admin.describe_topics([topic_name])[0]["partitions"]) == 4, what="4 partitions"
    )
    with pytest.raises(ke.InvalidPartitionsError):
        admin.create_partitions({topic_name: NewPartitions(2)})

    cluster = admin.describe_cluster()
    assert cluster["cluster_id"] == broker.cluster_id
    assert cluster["controller_id"] == 1
    assert [(b["broker_id"], b["port"]) for b in cluster["brokers"]] == [(1, broker.port)]

    records = make_records(400, 4, topic_name, null_header_values=False)
    produce_all(broker.bootstrap_servers, topic_name, records)
    (by_broker,) = admin.describe_log_dirs()
    assert by_broker["broker"] == 1
    (log_dir,) = by_broker["log_dirs"]
    assert log_dir["error_code"] == 0 and log_dir["log_dir"] == broker.log_dir
    sizes = {
        p["partition_index"]: p["partition_size"]
        for t in log_dir["topics"]
        if t["name"] == topic_name
        for p in t["partitions"]
    }
    assert set(sizes) == {0, 1, 2, 3}
    assert all(size > 100 * 40 for size in sizes.values()), sizes


def test_delete_records(admin: KafkaAdminClient, broker: EmbeddedBroker, topic_name: str) -> None:
    admin.create_topics([NewTopic(topic_name, 2, 1)])
    records = make_records(200, 2, topic_name, null_header_values=False)
    produce_all(broker.bootstrap_servers, topic_name, records)
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    result = admin.delete_records({tp0: 30, tp1: -1})  # -1: up to the high watermark
    assert result[tp0]["low_watermark"] == 30
    assert result[tp1]["low_watermark"] == 100
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers)
    try:
        assert consumer.beginning_offsets([tp0, tp1]) == {tp0: 30, tp1: 100}
        assert consumer.end_offsets([tp0, tp1]) == {tp0: 100, tp1: 100}
    finally:
        consumer.close()
    received = consume_to_end(broker.bootstrap_servers, topic_name, 2)
    check_exactly_once([r for r in records if r.partition == 0][30:], received)


# ---- produce / consume ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume(admin: KafkaAdminClient, broker: EmbeddedBroker, topic_name: str, codec: str) -> None:
    admin.create_topics([NewTopic(topic_name, 3, 1)])
    # kafka-python refuses null header values on the producer side
    records = make_records(5_000, 3, f"{topic_name}-{codec}", null_header_values=False)
    config = {} if codec == "none" else {"compression_type": codec}
    metadata = produce_all(broker.bootstrap_servers, topic_name, records, **config)
    received = consume_to_end(broker.bootstrap_servers, topic_name, 3)
    check_exactly_once(records, received)
    where = {r.value: (r.partition, r.offset) for r in received}
    assert [where[r.value] for r in records] == [(md.partition, md.offset) for md in metadata]


def test_list_offsets(admin: KafkaAdminClient, broker: EmbeddedBroker, topic_name: str) -> None:
    admin.create_topics([NewTopic(topic_name, 2, 1)])
    records = make_records(600, 2, topic_name, null_header_values=False)
    produce_all(broker.bootstrap_servers, topic_name, records)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers)
    try:
        tps = [TopicPartition(topic_name, p) for p in range(2)]
        assert consumer.beginning_offsets(tps) == dict.fromkeys(tps, 0)
        assert consumer.end_offsets(tps) == dict.fromkeys(tps, 300)
        # partition p holds the timestamps BASE + 2 * offset + p
        found = consumer.offsets_for_times(
            {tps[0]: BASE_TIMESTAMP_MS + 100, tps[1]: BASE_TIMESTAMP_MS + 100}
        )
        assert (found[tps[0]].offset, found[tps[0]].timestamp) == (50, BASE_TIMESTAMP_MS + 100)
        assert (found[tps[1]].offset, found[tps[1]].timestamp) == (50, BASE_TIMESTAMP_MS + 101)
        assert consumer.offsets_for_times({tps[0]: BASE_TIMESTAMP_MS + 10**8}) == {tps[0]: None}
        assert consumer.offsets_for_times({tps[0]: 0})[tps[0]].offset == 0
    finally:
        consumer.close()


def test_long_poll_fetch_wakes_on_produce(admin: KafkaAdminClient, broker: EmbeddedBroker, topic_name: str) -> None:
    admin.create_topics([NewTopic(topic_name, 1, 1)])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, fetch_max_wait_ms=5000)
    try:
        producer.partitions_for(topic_name)  # metadata loaded before the clock starts
        tp = TopicPartition(topic_name, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        started = time.monotonic()
        assert consumer.poll(timeout_ms=1000) == {}
        produced_at = time.monotonic()
        producer.send(topic_name, b"wake up", partition=0).get(timeout=10)
        got: dict[Any, Any] = {}
        while not got and time.monotonic() - started < 15:
            got = consumer.poll(timeout_ms=100)
        arrived = time.monotonic()
        assert [m.value for m in got.get(tp, [])] == [b"wake up"]
        assert arrived - started < 4.0, f"record arrived {arrived - started:.2f}s after polling began"
        assert arrived - produced_at < 3.0, f"record arrived {arrived - produced_at:.2f}s after produce"
    finally:
        consumer.close()
        producer.close(5)


def test_idempotent_default_producer(broker: EmbeddedBroker, topic_name: str) -> None:
    """The default KafkaProducer (idempotent since kafka-python 3) delivers, in order, once."""
    assert KafkaProducer.DEFAULT_CONFIG["enable_idempotence"] is True
    records = make_records(2_000, 1, topic_name, null_header_values=False)
    produce_all(broker.bootstrap_servers, topic_name, records)  # auto-creates the topic
    check_exactly_once(records, consume_to_end(broker.bootstrap_servers, topic_name, 1))
    # the batches carry the producer id the broker handed out (InitProducerId) and sequences
    with RawConnection.to(broker) as conn:
        stored = bytes(fetch(conn, topic_name, 0, 0)["records"])
    producer_id, producer_epoch, base_sequence = struct.unpack_from(">qhi", stored, 43)
    assert producer_id >= 0 and producer_epoch >= 0 and base_sequence == 0
