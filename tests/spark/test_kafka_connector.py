"""Spark's own Kafka connector (``format("kafka")``, spark-sql-kafka-0-10) against Odradek.

The same checks the native ``format("odradek")`` source passes in test_source.py, through the JVM
connector, which talks to the broker with the Java client (kafka-clients): a consumer per task
(assign + seek, incremental fetch sessions), an Admin client on the driver (ListOffsets, offsets
for timestamps, metadata) and the idempotent Java producer for writes. The connector is loaded
into the session by conftest.py (``kafka_connector`` skips these tests, or fails them under CI,
when it could not be resolved).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from odradek.embedded import EmbeddedBroker

from .support import consume_all, create_topic, produce

BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def kafka_read(spark: Any, broker: EmbeddedBroker, stream: bool = False, **options: str) -> Any:
    r = (spark.readStream if stream else spark.read).format("kafka")
    r = r.option("kafka.bootstrap.servers", broker.bootstrap_servers)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


Row = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def rows_of(df: Any) -> list[Row]:
    """(partition, offset, key, value, headers, timestamp ms) of every row, sorted."""
    out = []
    for r in df.selectExpr(
        "partition", "offset", "key", "value", "headers", "unix_millis(timestamp) as ts"
    ).collect():
        headers = [(h["key"], None if h["value"] is None else bytes(h["value"]))
                   for h in (r["headers"] or [])]
        key = None if r["key"] is None else bytes(r["key"])
        value = None if r["value"] is None else bytes(r["value"])
        out.append((r["partition"], r["offset"], key, value, headers, r["ts"]))
    return sorted(out, key=lambda t: (t[0], t[1]))


def rows_consumed(broker: EmbeddedBroker, topic: str, partitions: int) -> list[Row]:
    """The same tuples, read with confluent-kafka (librdkafka) as the reference."""
    out = []
    for m in consume_all(broker.bootstrap_servers, topic, partitions):
        headers = [(k, v) for k, v in (m.headers() or [])]
        out.append((m.partition(), m.offset(), m.key(), m.value(), headers, m.timestamp()[1]))
    return sorted(out, key=lambda t: (t[0], t[1]))


def test_batch_read_everything_then_offset_ranges_timestamps_and_assign(
    spark: Any, kafka_connector: str, broker: EmbeddedBroker, topic: str
) -> None:
    create_topic(broker.bootstrap_servers, topic, 3)
    produce(
        broker.bootstrap_servers,
        topic,
        (
            {
                "key": None if i % 7 == 0 else f"k{i}".encode(),
                "value": None if i % 11 == 0 else f"value-{i}".encode() * (1 + i % 3),
                "partition": i % 3,
                "timestamp": BASE_TS + i * 1000,
                "headers": [] if i % 5 == 0 else [("h", f"{i}".encode()), ("n", None)],
            }
            for i in range(600)
        ),
    )
    reference = rows_consumed(broker, topic, 3)
    assert len(reference) == 600

    df = kafka_read(spark, broker, subscribe=topic, includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,"
        "headers:array<struct<key:string,value:binary>>>"
    )
    assert rows_of(df) == reference
    assert df.where(f"topic != '{topic}' or timestampType != 0").count() == 0

    # startingOffsets / endingOffsets as JSON: -2 earliest, -1 latest (ListOffsets).
    ranged = kafka_read(
        spark, broker, subscribe=topic,
        startingOffsets=json.dumps({topic: {"0": 5, "1": -2, "2": 150}}),
        endingOffsets=json.dumps({topic: {"0": 20, "1": 3, "2": -1}}),
    )
    got = {(r["partition"], r["offset"]) for r in ranged.select("partition", "offset").collect()}
    assert got == (
        {(0, o) for o in range(5, 20)} | {(1, o) for o in range(0, 3)}
        | {(2, o) for o in range(150, 200)}
    )

    # By timestamp (ListOffsets with a timestamp, i.e. offsetsForTimes): record i has
    # BASE_TS + i s and sits at offset i // 3 of partition i % 3.
    by_time = kafka_read(
        spark, broker, subscribe=topic,
        startingOffsetsByTimestamp=json.dumps({topic: {str(p): BASE_TS + 300_000 for p in range(3)}}),
        endingOffsetsByTimestamp=json.dumps({topic: {str(p): BASE_TS + 330_000 for p in range(3)}}),
    )
    assert sorted(r["ts"] for r in by_time.selectExpr("unix_millis(timestamp) as ts").collect()) == [
        BASE_TS + i * 1000 for i in range(300, 330)
    ]

    # No record at or after the timestamp (ListOffsets answers offset -1): the default strategy
    # fails, 'latest' reads nothing.
    future = str(BASE_TS + 10_000_000)
    with pytest.raises(Exception, match="(?i)timestamp"):
        kafka_read(spark, broker, subscribe=topic, startingTimestamp=future).count()
    assert kafka_read(
        spark, broker, subscribe=topic, startingTimestamp=future,
        startingOffsetsByTimestampStrategy="latest",
    ).count() == 0

    # assign (no subscription), with an explicit group id and a group id prefix: the connector
    # never joins or commits, so Odradek must serve the reads without creating any group state.
    assigned = kafka_read(
        spark, broker, assign=json.dumps({topic: [0, 2]}), **{"kafka.group.id": "spark-fixed"}
    )
    assert assigned.count() == 400
    prefixed = kafka_read(spark, broker, subscribe=topic, groupIdPrefix="odradek-prefix")
    assert prefixed.where("partition = 1").count() == 200
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    groups = admin.list_consumer_groups().result(30)
    assert not groups.errors
    names = {g.group_id for g in groups.valid}
    assert not {n for n in names if n == "spark-fixed" or n.startswith("odradek-prefix")}


def test_batch_and_streaming_write_then_read_back(
    spark: Any, kafka_connector: str, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap_servers, topic, 3)
    df = spark.createDataFrame(
        [
            (None if i % 9 == 0 else f"k{i}", f"v{i}".encode(), i % 3,
             [("h", f"{i}".encode())] if i % 2 else [])
            for i in range(90)
        ],
        "key string, value binary, partition int, "
        "headers array<struct<key:string,value:binary>>",
    )
    df.write.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap_servers).option(
        "topic", topic
    ).save()
    written = consume_all(broker.bootstrap_servers, topic, 3)
    assert len(written) == 90
    for m in written:
        i = int(m.value()[1:])
        assert m.partition() == i % 3
        assert m.key() == (None if i % 9 == 0 else f"k{i}".encode())
        assert (m.headers() or []) == ([("h", f"{i}".encode())] if i % 2 else [])
    # Read back through the connector: the same records as librdkafka sees.
    back = kafka_read(spark, broker, subscribe=topic, includeHeaders="true")
    assert rows_of(back) == rows_consumed(broker, topic, 3)

    # Streaming write: the topic copied to another one by a kafka -> kafka query.
    copy = f"{topic}-copy"
    create_topic(broker.bootstrap_servers, copy, 1)
    query = (
        kafka_read(spark, broker, stream=True, subscribe=topic, startingOffsets="earliest")
        .selectExpr("key", "value")
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("topic", copy)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(180), "the availableNow query did not finish"
    finally:
        query.stop()
    assert query.exception() is None
    copied = consume_all(broker.bootstrap_servers, copy, 1)
    assert Counter((m.key(), m.value()) for m in copied) == Counter(
        (m.key(), m.value()) for m in written
    )
    assert len(copied) == 90


def test_streaming_reads_new_records_exactly_once_across_a_restart_and_new_topics(
    spark: Any, kafka_connector: str, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap_servers, topic, 2)
    # Records present before the query starts: startingOffsets=latest skips them.
    produce(broker.bootstrap_servers, topic, ({"value": b"old", "partition": i % 2} for i in range(50)))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start() -> Any:
        return (
            kafka_read(spark, broker, stream=True, subscribePattern=f"{topic}(-new)?",
                       startingOffsets="latest", maxOffsetsPerTrigger="150")
            .selectExpr("topic", "partition", "offset", "cast(value as string) as value")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    def written() -> list[tuple[str, int, int, str]]:
        if not out.exists() or not any(out.glob("*.parquet")):
            return []
        return [
            (r["topic"], r["partition"], r["offset"], r["value"])
            for r in spark.read.parquet(str(out)).collect()
        ]

    def produce_batch(tag: str, n: int, to: str = topic) -> None:
        produce(
            broker.bootstrap_servers, to,
            ({"value": f"{tag}{i}".encode(), "partition": i % 2} for i in range(n)),
        )

    def wait_for(query: Any, count: int) -> None:
        deadline = time.time() + 180
        while len(written()) < count:
            assert time.time() < deadline, f"{len(written())} of {count} records in the sink"
            assert query.exception() is None, query.exception()
            time.sleep(0.5)

    query = start()
    try:
        deadline = time.time() + 120
        while query.lastProgress is None:  # the first batch has fixed the starting offsets
            assert time.time() < deadline, "no progress"
            assert query.exception() is None, query.exception()
            time.sleep(0.2)
        produce_batch("a", 400)  # newly produced while the query runs
        wait_for(query, 400)
    finally:
        query.stop()
    assert max(p["numInputRows"] for p in query.recentProgress) <= 150

    produce_batch("b", 200)  # while stopped: the restart picks them up from the checkpoint
    query = start()
    try:
        wait_for(query, 600)
        produce_batch("c", 100)  # and more while it runs again
        wait_for(query, 700)
        # A topic created now that matches the pattern: read from its start.
        create_topic(broker.bootstrap_servers, f"{topic}-new", 2)
        produce_batch("d", 30, f"{topic}-new")
        wait_for(query, 730)
        query.processAllAvailable()
    finally:
        query.stop()

    records = written()
    assert len(records) == 730  # exactly once: nothing twice, nothing old
    assert sorted(v for _, _, _, v in records) == sorted(
        [f"a{i}" for i in range(400)] + [f"b{i}" for i in range(200)]
        + [f"c{i}" for i in range(100)] + [f"d{i}" for i in range(30)]
    )
    assert sorted((t, p, o) for t, p, o, _ in records) == sorted(
        [(topic, p, o) for p in range(2) for o in range(25, 375)]
        + [(f"{topic}-new", p, o) for p in range(2) for o in range(15)]
    )


def test_fail_on_data_loss_both_ways_after_delete_records(
    spark: Any, kafka_connector: str, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    """DeleteRecords moves the log start offset: Fetch gets OFFSET_OUT_OF_RANGE and ListOffsets
    (earliest) the new start; the connector fails or skips the gap as failOnDataLoss says."""
    from confluent_kafka import TopicPartition

    create_topic(broker.bootstrap_servers, topic, 1)
    produce(broker.bootstrap_servers, topic, ({"value": str(i).encode()} for i in range(100)))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def stream(fail: str) -> Any:
        return (
            kafka_read(spark, broker, stream=True, subscribe=topic, startingOffsets="earliest",
                       failOnDataLoss=fail)
            .select("offset")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .start()
        )

    def offsets_written() -> list[int]:
        return sorted(r["offset"] for r in spark.read.parquet(str(out)).collect())

    def delete_before(offset: int) -> None:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        for f in admin.delete_records([TopicPartition(topic, 0, offset)]).values():
            f.result(30)

    query = stream("true")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert offsets_written() == list(range(100))

    # Batch: a range starting before the log start offset.
    delete_before(30)
    from_zero = json.dumps({topic: {"0": 0}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        kafka_read(spark, broker, subscribe=topic, startingOffsets=from_zero).collect()
    lenient = kafka_read(
        spark, broker, subscribe=topic, startingOffsets=from_zero, failOnDataLoss="false"
    )
    assert sorted(r["offset"] for r in lenient.select("offset").collect()) == list(range(30, 100))
    earliest = kafka_read(spark, broker, subscribe=topic)  # ListOffsets earliest: the new start
    assert earliest.selectExpr("min(offset) as lo", "count(*) as n").first() == (30, 70)

    # Streaming: the checkpoint says 100; records 100..149 are produced and deleted (up to 150)
    # before the query comes back.
    produce(broker.bootstrap_servers, topic, ({"value": str(i).encode()} for i in range(100)))
    delete_before(150)
    query = stream("true")
    with pytest.raises(Exception, match="failOnDataLoss"):
        query.processAllAvailable()
    query.stop()
    assert offsets_written() == list(range(100))
    query = stream("false")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert offsets_written() == list(range(100)) + list(range(150, 200))
