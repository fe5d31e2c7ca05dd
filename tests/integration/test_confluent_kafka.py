"""confluent-kafka (librdkafka) against Odradek: admin, produce/consume, offsets, long poll, crashes."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from odradek.embedded import EmbeddedBroker
from odradek.records.batch import iter_batches

from .support import (
    BASE_TIMESTAMP_MS,
    CODECS,
    Rec,
    ServerProcess,
    check_exactly_once,
    make_records,
    unique_name,
    wait_until,
)

pytestmark = pytest.mark.integration


# ---- helpers ----------------------------------------------------------------------------------


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def consumer(bootstrap: str, **extra: Any) -> Consumer:
    # librdkafka insists on a group.id even for manual assignment; nothing is ever committed.
    return Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique_name("g"), "enable.auto.commit": False, **extra}
    )


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None) -> None:
    a = admin(bootstrap)  # the futures fail if the client is collected before they complete
    a.create_topics([NewTopic(name, partitions, config=config or {})])[name].result(30)


def kafka_error(fut: Any, timeout: float = 30) -> KafkaError:
    with pytest.raises(KafkaException) as excinfo:
        fut.result(timeout)
    err = excinfo.value.args[0]
    assert isinstance(err, KafkaError)
    return err


def where(msg: Message) -> tuple[int, int]:
    """(partition, offset) of a delivered or consumed message."""
    partition, offset = msg.partition(), msg.offset()
    assert partition is not None and offset is not None
    return partition, offset


def to_rec(msg: Message) -> Rec:
    value, key = msg.value(), msg.key()
    assert isinstance(value, bytes) and (key is None or isinstance(key, bytes))
    headers: list[tuple[str, bytes | None]] = list(msg.headers() or ())  # type: ignore[arg-type]
    partition, offset = where(msg)
    return Rec(partition, key, value, tuple(headers), msg.timestamp()[1], offset=offset)


def produce_all(producer: Producer, topic: str, records: Sequence[Rec]) -> list[tuple[Rec, Message]]:
    """Produce every record, wait for every delivery report; fail on any delivery error."""
    reports: list[tuple[Rec, Message]] = []
    errors: list[KafkaError] = []

    def produce_one(rec: Rec) -> None:
        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                errors.append(err)
            else:
                reports.append((rec, msg))

        while True:
            try:
                producer.produce(
                    topic,
                    value=rec.value,
                    key=rec.key,
                    headers=list(rec.headers),
                    partition=rec.partition,
                    timestamp=rec.timestamp,
                    on_delivery=on_delivery,
                )
                return
            except BufferError:
                producer.poll(0.05)

    for rec in records:
        produce_one(rec)
        producer.poll(0)
    remaining = producer.flush(120)
    assert remaining == 0, f"{remaining} records still undelivered after 120 s"
    assert not errors, f"{len(errors)} delivery errors, first: {errors[:3]}"
    assert len(reports) == len(records)
    return reports


def consume_to_end(bootstrap: str, topic: str, partitions: int, **extra: Any) -> list[Rec]:
    """Everything in the topic from offset 0 up to each partition's high watermark."""
    c = consumer(bootstrap, **extra)
    try:
        ends = {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)
        }
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: list[Rec] = []
        position = {p: -1 for p in range(partitions)}
        deadline = time.monotonic() + 120
        while any(position[p] + 1 < ends[p] for p in range(partitions)):
            assert time.monotonic() < deadline, f"consume stalled at {position}, ends {ends}"
            for msg in c.consume(10_000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consume error: {err}")
                rec = to_rec(msg)
                out.append(rec)
                position[rec.partition] = rec.offset
        return out
    finally:
        c.close()


# ---- admin ------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_topic_lifecycle(broker: EmbeddedBroker, topic_name: str) -> None:
    a = admin(broker.bootstrap_servers)
    fs = a.create_topics([NewTopic(topic_name, 3, config={"retention.ms": "3600000"})])
    assert fs[topic_name].result(30) is None

    # list
    md = a.list_topics(timeout=30)
    assert topic_name in md.topics
    assert len(md.topics[topic_name].partitions) == 3
    assert md.topics[topic_name].error is None
    desc = a.describe_topics(TopicCollection([topic_name]))[topic_name].result(30)
    assert desc.name == topic_name and len(desc.partitions) == 3
    assert all(p.leader is not None and p.leader.id == 1 for p in desc.partitions)

    # describe configs
    resource = ConfigResource("topic", topic_name)
    configs = a.describe_configs([resource])[resource].result(30)
    assert configs["retention.ms"].value == "3600000"
    assert not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "delete"
    assert configs["max.message.bytes"].value == "1048588"

    # incremental alter: set one key, leave the others alone
    alter = ConfigResource(
        "topic",
        topic_name,
        incremental_configs=[
            ConfigEntry("segment.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    assert a.incremental_alter_configs([alter])[alter].result(30) is None
    configs = a.describe_configs([resource])[resource].result(30)
    assert configs["segment.ms"].value == "7200000"
    assert configs["retention.ms"].value == "604800000"  # back to the broker default
    assert configs["retention.ms"].is_default

    # legacy AlterConfigs replaces the whole set
    legacy = ConfigResource("topic", topic_name, set_config={"cleanup.policy": "compact"})
    assert a.alter_configs([legacy])[legacy].result(30) is None
    configs = a.describe_configs([resource])[resource].result(30)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.ms"].is_default

    # broker configs
    broker_res = ConfigResource("broker", "1")
    bconf = a.describe_configs([broker_res])[broker_res].result(30)
    assert bconf["log.retention.hours"].value == "168"

    # delete
    assert a.delete_topics([topic_name])[topic_name].result(30) is None
    wait_until(
        lambda: topic_name not in a.list_topics(timeout=30).topics, what=f"{topic_name} to disappear"
    )
    err = kafka_error(a.delete_topics([topic_name])[topic_name])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


@pytest.mark.parametrize("name", ["bad name!", "a" * 250, ".", "..", "topic/with/slash", "ümlaut"])
def test_create_invalid_topic_name(broker: EmbeddedBroker, name: str) -> None:
    a = admin(broker.bootstrap_servers)
    assert kafka_error(a.create_topics([NewTopic(name, 1)])[name]).code() == KafkaError.TOPIC_EXCEPTION


def test_create_topic_errors(broker: EmbeddedBroker, topic_name: str) -> None:
    a = admin(broker.bootstrap_servers)
    rf = kafka_error(a.create_topics([NewTopic(topic_name, 1, replication_factor=3)])[topic_name])
    assert rf.code() == KafkaError.INVALID_REPLICATION_FACTOR

    bad_config = kafka_error(
        a.create_topics([NewTopic(topic_name, 1, config={"retention.ms": "forever"})])[topic_name]
    )
    assert bad_config.code() == KafkaError.INVALID_CONFIG
    bad_policy = kafka_error(
        a.create_topics([NewTopic(topic_name, 1, config={"cleanup.policy": "shred"})])[topic_name]
    )
    assert bad_policy.code() == KafkaError.INVALID_CONFIG

    zero = kafka_error(a.create_topics([NewTopic(topic_name, 0)])[topic_name])
    assert zero.code() == KafkaError.INVALID_PARTITIONS
    # librdkafka refuses other non-positive counts itself (-1 means "broker default").
    with pytest.raises(ValueError):
        a.create_topics([NewTopic(topic_name, -3)])

    # none of the failures created anything
    assert topic_name not in a.list_topics(timeout=30).topics

    assert a.create_topics([NewTopic(topic_name, 2)])[topic_name].result(30) is None
    dup = kafka_error(a.create_topics([NewTopic(topic_name, 2)])[topic_name])
    assert dup.code() == KafkaError.TOPIC_ALREADY_EXISTS

    # validate_only on an existing name also reports TOPIC_ALREADY_EXISTS
    dup_validate = kafka_error(
        a.create_topics([NewTopic(topic_name, 2)], validate_only=True)[topic_name]
    )
    assert dup_validate.code() == KafkaError.TOPIC_ALREADY_EXISTS


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_alter_config_errors(broker: EmbeddedBroker, topic_name: str) -> None:
    a = admin(broker.bootstrap_servers)
    create_topic(broker.bootstrap_servers, topic_name, 1)
    bad = ConfigResource(
        "topic",
        topic_name,
        incremental_configs=[
            ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    assert kafka_error(a.incremental_alter_configs([bad])[bad]).code() == KafkaError.INVALID_CONFIG
    legacy = ConfigResource("topic", topic_name, set_config={"min.insync.replicas": "0"})
    assert kafka_error(a.alter_configs([legacy])[legacy]).code() == KafkaError.INVALID_CONFIG
    resource = ConfigResource("topic", topic_name)
    configs = a.describe_configs([resource])[resource].result(30)
    assert configs["retention.ms"].value == "604800000"
    assert configs["min.insync.replicas"].value == "1"

    missing = ConfigResource("topic", unique_name("missing"))
    err = kafka_error(a.describe_configs([missing])[missing])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_partitions(broker: EmbeddedBroker, topic_name: str) -> None:
    bootstrap = broker.bootstrap_servers
    a = admin(bootstrap)
    create_topic(bootstrap, topic_name, 2)
    assert a.create_partitions([NewPartitions(topic_name, 5)])[topic_name].result(30) is None
    wait_until(
        lambda: len(a.list_topics(topic_name, timeout=30).topics[topic_name].partitions) == 5,
        what="5 partitions",
    )
    # the new partitions take writes
    records = make_records(50, 5, topic_name)
    produce_all(Producer({"bootstrap.servers": bootstrap}), topic_name, records)
    check_exactly_once(records, consume_to_end(bootstrap, topic_name, 5))

    fewer = kafka_error(a.create_partitions([NewPartitions(topic_name, 3)])[topic_name])
    assert fewer.code() == KafkaError.INVALID_PARTITIONS
    same = kafka_error(a.create_partitions([NewPartitions(topic_name, 5)])[topic_name])
    assert same.code() == KafkaError.INVALID_PARTITIONS
    name = unique_name("missing")
    missing = kafka_error(a.create_partitions([NewPartitions(name, 3)])[name])
    assert missing.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_cluster(broker: EmbeddedBroker) -> None:
    a = admin(broker.bootstrap_servers)
    result = a.describe_cluster().result(30)
    assert result.cluster_id == broker.cluster_id
    assert [(n.id, n.host, n.port) for n in result.nodes] == [(1, "127.0.0.1", broker.port)]
    assert result.controller is not None and result.controller.id == 1


# ---- produce / consume ------------------------------------------------------------------------


def test_produce_consume_100k(broker: EmbeddedBroker, topic_name: str) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic_name, 4)
    records = make_records(100_000, 4, topic_name)
    reports = produce_all(Producer({"bootstrap.servers": bootstrap}), topic_name, records)
    received = consume_to_end(bootstrap, topic_name, 4)
    check_exactly_once(records, received)
    # every delivery report names the partition and offset where the record is
    found = {r.value: (r.partition, r.offset) for r in received}
    assert all(found[rec.value] == where(msg) for rec, msg in reports)


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_per_codec(broker: EmbeddedBroker, topic_name: str, codec: str) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic_name, 3)
    records = make_records(20_000, 3, f"{topic_name}-{codec}")
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec})
    produce_all(producer, topic_name, records)
    check_exactly_once(records, consume_to_end(bootstrap, topic_name, 3))


def test_topic_compression_config(broker: EmbeddedBroker, topic_name: str) -> None:
    """A topic-level compression.type does not change what consumers read."""
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic_name, 2, {"compression.type": "producer"})
    records = make_records(2_000, 2, topic_name)
    produce_all(Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4"}), topic_name, records)
    check_exactly_once(records, consume_to_end(bootstrap, topic_name, 2))


def test_topic_compression_type_recompresses(broker: EmbeddedBroker, topic_name: str) -> None:
    """lz4 batches produced to a compression.type=zstd topic are stored as zstd (levels set), and
    librdkafka reads every record back unchanged."""
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic_name, 2, {"compression.type": "zstd", "compression.zstd.level": "6"})
    records = make_records(5_000, 2, topic_name)
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4", "linger.ms": 20})
    produce_all(producer, topic_name, records)
    check_exactly_once(records, consume_to_end(bootstrap, topic_name, 2))
    codecs: list[int] = []
    for p in range(2):
        for seg in (Path(broker.log_dir) / f"{topic_name}-{p}").glob("*.log"):
            codecs.extend(h.compression for h in iter_batches(seg.read_bytes()))
    assert codecs and set(codecs) == {4}, codecs  # zstd, not the producer's lz4


# ---- offsets ----------------------------------------------------------------------------------


def test_list_offsets(broker: EmbeddedBroker, topic_name: str) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic_name, 2)
    records = make_records(1_000, 2, topic_name)  # partition p holds timestamps BASE + 2k + p
    produce_all(Producer({"bootstrap.servers": bootstrap}), topic_name, records)

    c = consumer(bootstrap)
    try:
        for p in range(2):
            assert c.get_watermark_offsets(TopicPartition(topic_name, p), timeout=30) == (0, 500)
        # offsets_for_times: the first offset whose timestamp is >= the one asked for
        query = [
            TopicPartition(topic_name, 0, BASE_TIMESTAMP_MS),  # first record
            TopicPartition(topic_name, 1, BASE_TIMESTAMP_MS + 2 * 100 + 1),  # exact: offset 100
        ]
        got = c.offsets_for_times(query, timeout=30)
        assert [(tp.partition, tp.offset, tp.error) for tp in got] == [(0, 0, None), (1, 100, None)]
        between = c.offsets_for_times([TopicPartition(topic_name, 0, BASE_TIMESTAMP_MS + 201)], timeout=30)
        assert between[0].offset == 101  # timestamps on partition 0 are even: 202 is at offset 101
        later = c.offsets_for_times([TopicPartition(topic_name, 1, BASE_TIMESTAMP_MS + 10**7)], timeout=30)
        assert later[0].offset == -1  # no such record: librdkafka's OFFSET_END
    finally:
        c.close()

    a = admin(bootstrap)
    tp0 = TopicPartition(topic_name, 0)
    specs = {
        "earliest": OffsetSpec.earliest(),
        "latest": OffsetSpec.latest(),
        "max_timestamp": OffsetSpec.max_timestamp(),
        "at": OffsetSpec.for_timestamp(BASE_TIMESTAMP_MS + 400),
    }
    results = {k: a.list_offsets({tp0: spec})[tp0].result(30) for k, spec in specs.items()}
    assert results["earliest"].offset == 0
    assert results["latest"].offset == 500
    assert results["max_timestamp"].offset == 499
    assert results["max_timestamp"].timestamp == BASE_TIMESTAMP_MS + 998
    assert results["at"].offset == 200
    assert results["at"].timestamp == BASE_TIMESTAMP_MS + 400


def test_delete_records(broker: EmbeddedBroker, topic_name: str) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic_name, 1)
    records = make_records(300, 1, topic_name)
    produce_all(Producer({"bootstrap.servers": bootstrap}), topic_name, records)
    a = admin(bootstrap)
    deleted = a.delete_records([TopicPartition(topic_name, 0, 120)])
    (fut,) = deleted.values()
    assert fut.result(30).low_watermark == 120

    c = consumer(bootstrap)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=30) == (120, 300)
    finally:
        c.close()
    received = consume_to_end(bootstrap, topic_name, 1)
    assert [r.offset for r in received] == list(range(120, 300))
    check_exactly_once(records[120:], received)

    # beyond the high watermark: OFFSET_OUT_OF_RANGE, and nothing moves
    too_far = a.delete_records([TopicPartition(topic_name, 0, 301)])
    (fut,) = too_far.values()
    assert kafka_error(fut).code() == KafkaError.OFFSET_OUT_OF_RANGE
    earliest = a.list_offsets({TopicPartition(topic_name, 0): OffsetSpec.earliest()})
    (fut,) = earliest.values()
    assert fut.result(30).offset == 120


# ---- long poll --------------------------------------------------------------------------------


def test_long_poll_fetch_wakes_on_produce(broker: EmbeddedBroker, topic_name: str) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic_name, 1)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.list_topics(topic_name, timeout=30)  # connected and warm before the clock starts

    c = consumer(bootstrap, **{"fetch.wait.max.ms": 5000})
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        started = time.monotonic()
        assert c.poll(1.0) is None  # the partition is empty; the consumer now waits in a fetch
        produced_at = time.monotonic()
        producer.produce(topic_name, value=b"wake up", partition=0)
        assert producer.flush(10) == 0
        msg = None
        while msg is None and time.monotonic() - started < 15:
            msg = c.poll(0.05)
        arrived = time.monotonic()
        assert msg is not None and msg.error() is None, msg and msg.error()
        assert msg.value() == b"wake up"
        assert arrived - started < 4.0, f"record arrived {arrived - started:.2f}s after polling began"
        assert arrived - produced_at < 3.0, f"record arrived {arrived - produced_at:.2f}s after produce"
    finally:
        c.close()


# ---- restarts and crashes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("how", "retries", "idempotent"),
    [("restart", True, False), ("kill-9", True, False), ("kill-9", False, False), ("kill-9", True, True)],
    ids=["restart", "kill-9", "kill-9-no-retries", "kill-9-idempotent"],
)
def test_server_stops_mid_produce(
    server_process: ServerProcess, how: str, retries: bool, idempotent: bool
) -> None:
    """acks=all, no idempotence, the node stopped (SIGTERM) or killed (SIGKILL) while records are
    in flight and started again on the same data: every acknowledged record is in the log once,
    at the offset its delivery report named, and the log takes new writes afterwards.

    One exception, and only with retries after a ``kill -9``: a request the node appended but
    died before answering is sent again by the producer (at-least-once; Kafka behaves the same
    without idempotence). Such a record may appear twice, so a duplicate is allowed only for
    records that were in flight (produced, not yet acknowledged) at the kill. Any duplicate of a
    record acknowledged before the kill or produced after it is a broker bug, and so is any
    duplicate at all after a clean restart or without retries.

    With an idempotent producer even that exception goes: the restarted node rebuilds each
    producer's sequence state from the batch headers in the log and recognises the resent
    batches, so every record is in the log exactly once.
    """
    server = server_process
    bootstrap = server.bootstrap_servers
    topic = unique_name(f"crash-{how}")
    partitions = 3
    create_topic(bootstrap, topic, partitions)
    records = make_records(30_000, partitions, topic)
    index = {r.value: i for i, r in enumerate(records)}
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": idempotent,
            "retries": 1_000_000 if retries else 0,
        }
    )
    acked: dict[bytes, tuple[int, int]] = {}
    failed: dict[bytes, KafkaError] = {}
    lock = threading.Lock()
    stopped = threading.Event()
    outcome: list[BaseException] = []
    produced = [0]
    at_stop: list[tuple[int, set[bytes]]] = []  # (records produced, values acked) at the stop

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        value = msg.value()
        assert value is not None
        with lock:
            if err is None:
                acked[value] = where(msg)
            else:
                failed[value] = err

    def stop_and_start() -> None:
        try:
            wait_until(lambda: len(acked) >= 8_000, timeout=120, interval=0.01, what="8000 acks")
            if how == "restart":
                with lock:
                    at_stop.append((produced[0], set(acked)))
                code = server.terminate()
                assert code == 0, f"odradek server exited with {code} on SIGTERM"
            else:
                server.kill()
                with lock:  # nothing can be acknowledged once the process is gone
                    at_stop.append((produced[0], set(acked)))
            stopped.set()
            time.sleep(1.0)
            server.start()
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            outcome.append(e)
            stopped.set()

    killer = threading.Thread(target=stop_and_start, daemon=True)
    killer.start()
    for rec in records:
        while True:
            try:
                producer.produce(
                    topic,
                    value=rec.value,
                    key=rec.key,
                    headers=list(rec.headers),
                    partition=rec.partition,
                    timestamp=rec.timestamp,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.05)
        with lock:
            produced[0] += 1
        # a steady ~10,000 records/s, so the stop lands while records are in flight and the
        # producer keeps producing while the server is down
        producer.poll(0.01 if produced[0] % 100 == 0 else 0)
    assert producer.flush(180) == 0, "records still undelivered 180 s after the restart"
    killer.join(120)
    if outcome:
        raise outcome[0]
    ((produced_at_stop, acked_at_stop),) = at_stop
    assert len(acked_at_stop) < produced_at_stop < len(records), (
        f"not mid-produce: {produced_at_stop} produced and {len(acked_at_stop)} acked at the stop"
    )
    assert len(acked) + len(failed) == len(records)
    if retries:
        assert not failed, f"{len(failed)} delivery failures, e.g. {list(failed.items())[:3]}"
    else:  # without retries only what was in flight at the kill may fail
        assert all(index[v] < produced_at_stop and v not in acked_at_stop for v in failed)

    received = consume_to_end(bootstrap, topic, partitions)
    sent = {r.value: r for r in records}
    copies: dict[bytes, list[tuple[int, int]]] = {}
    for r in received:
        assert r.value in sent, f"a record nobody sent: {r}"
        assert r.content() == sent[r.value].content(), f"{r} differs from {sent[r.value]}"
        copies.setdefault(r.value, []).append((r.partition, r.offset))
    lost = [(v, acked[v]) for v in acked if v not in copies]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
    misplaced = [(v, acked[v], copies[v]) for v in acked if acked[v] not in copies[v]]
    assert not misplaced, (
        f"{len(misplaced)} records not at the offset acknowledged, e.g. "
        f"(value, acked at, found at) {misplaced[:5]}"
    )
    duplicated = sorted((v for v in copies if len(copies[v]) > 1), key=index.__getitem__)
    if how == "kill-9" and retries and not idempotent:
        in_flight_at_kill = {
            r.value for r in records[:produced_at_stop] if r.value not in acked_at_stop
        }
        unexplained = [v for v in duplicated if v not in in_flight_at_kill]
    else:
        unexplained = duplicated
    assert not unexplained, (
        f"{len(unexplained)} records appear more than once "
        f"({len(duplicated)} duplicates in all), e.g. (value, acked at, found at) "
        f"{[(v, acked.get(v), copies[v]) for v in unexplained[:5]]}"
    )

    # the log takes new appends after the recovery, right after what is there
    c = consumer(bootstrap)
    try:
        ends = [c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
    finally:
        c.close()
    more = make_records(300, partitions, f"{topic}-after")
    reports = produce_all(Producer({"bootstrap.servers": bootstrap}), topic, more)
    for rec, msg in reports:
        assert where(msg)[1] >= ends[rec.partition]
    received_after = consume_to_end(bootstrap, topic, partitions)
    check_exactly_once(more, [r for r in received_after if r.value.startswith(f"{topic}-after|".encode())])


def test_embedded_restart_keeps_data(topic_name: str) -> None:
    with EmbeddedBroker() as b:
        bootstrap = b.bootstrap_servers
        create_topic(bootstrap, topic_name, 2)
        first = make_records(5_000, 2, topic_name)
        produce_all(Producer({"bootstrap.servers": bootstrap}), topic_name, first)
        b.restart()
        assert b.bootstrap_servers == bootstrap
        check_exactly_once(first, consume_to_end(bootstrap, topic_name, 2))
        second = make_records(1_000, 2, f"{topic_name}-2")
        produce_all(Producer({"bootstrap.servers": bootstrap}), topic_name, second)
        b.restart()
        got = consume_to_end(bootstrap, topic_name, 2)
        check_exactly_once(first + second, got, ordered=False)


def test_signal_shutdown_is_clean(server_process: ServerProcess) -> None:
    assert server_process.terminate() == 0
    log = server_process.log_tail()
    assert "shut down cleanly" in log, log


def test_timestamps_more_than_an_hour_ahead_are_refused(broker: EmbeddedBroker, topic_name: str) -> None:
    """Kafka 4.0's message.timestamp.after.max.ms default (one hour): the producer gets
    INVALID_TIMESTAMP for a record stamped two hours ahead; one a minute ahead is stored."""
    create_topic(broker.bootstrap_servers, topic_name, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "retries": 0})
    results: list[KafkaError | None] = []
    now_ms = int(time.time() * 1000)
    for ts in (now_ms + 2 * 3600 * 1000, now_ms + 60 * 1000):
        producer.produce(
            topic_name, b"v", timestamp=ts, on_delivery=lambda err, _m: results.append(err)
        )
        assert producer.flush(30) == 0
    first, second = results
    assert first is not None and first.code() == KafkaError.INVALID_TIMESTAMP, first
    assert second is None
    c = admin(broker.bootstrap_servers)
    resource = ConfigResource("topic", topic_name)
    configs = c.describe_configs([resource])[resource].result(30)
    assert configs["message.timestamp.after.max.ms"].value == "3600000"
