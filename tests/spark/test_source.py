"""The ``odradek`` Spark data source against a real broker and a real local Spark."""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.embedded import EmbeddedBroker

from .support import consume_all, create_topic, produce


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def reader(spark: Any, broker: EmbeddedBroker, **options: str) -> Any:
    r = spark.read.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap_servers)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def stream_reader(spark: Any, broker: EmbeddedBroker, **options: str) -> Any:
    r = spark.readStream.format("odradek").option(
        "kafka.bootstrap.servers", broker.bootstrap_servers
    )
    for k, v in options.items():
        r = r.option(k, v)
    return r


def checksum(rows: list[tuple[int, int, bytes | None, bytes | None]]) -> int:
    return sum(zlib.crc32((k or b"") + (v or b"") + str(o).encode()) for _, o, k, v in rows)


SPARK_CHECKSUM = (
    "sum(crc32(concat(coalesce(key, X''), coalesce(value, X''), "
    "cast(cast(offset as string) as binary)))) as crc"
)


# ---- batch read ------------------------------------------------------------------------


def test_batch_read_100k_records_equals_what_was_produced(
    spark: Any, broker: EmbeddedBroker, topic: str
) -> None:
    create_topic(broker.bootstrap_servers, topic, 4)
    produced = produce(
        broker.bootstrap_servers,
        topic,
        (
            {
                "key": None if i % 97 == 0 else f"k{i}".encode(),
                "value": f"value-{i}-".encode() * (1 + i % 5),
                "partition": i % 4,
            }
            for i in range(100_000)
        ),
    )
    assert len(produced) == 100_000
    df = reader(spark, broker, subscribe=topic).load()
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    assert df.rdd.getNumPartitions() == 4
    per_partition = {
        r["partition"]: (r["n"], r["lo"], r["hi"])
        for r in df.groupBy("partition")
        .agg({"*": "count", "offset": "min"})
        .withColumnRenamed("count(1)", "n")
        .withColumnRenamed("min(offset)", "lo")
        .join(df.groupBy("partition").agg({"offset": "max"}), "partition")
        .withColumnRenamed("max(offset)", "hi")
        .collect()
    }
    assert per_partition == {p: (25_000, 0, 24_999) for p in range(4)}
    row = df.selectExpr("count(*) as n", SPARK_CHECKSUM, "count(key) as keyed").first()
    assert row["n"] == 100_000
    assert row["crc"] == checksum(produced)
    assert row["keyed"] == sum(1 for _, _, k, _ in produced if k is not None)
    assert df.where(f"topic != '{topic}' or timestampType != 0").count() == 0

    # minPartitions splits the ranges; the result is the same.
    split = reader(spark, broker, subscribe=topic, minPartitions="10").load()
    assert split.rdd.getNumPartitions() >= 10
    row = split.selectExpr("count(*) as n", SPARK_CHECKSUM).first()
    assert (row["n"], row["crc"]) == (100_000, checksum(produced))


def test_batch_offsets_json_and_timestamps_select_ranges(
    spark: Any, broker: EmbeddedBroker, topic: str
) -> None:
    create_topic(broker.bootstrap_servers, topic, 2)
    base = 1_700_000_000_000
    produce(
        broker.bootstrap_servers,
        topic,
        (
            {"value": f"{p}:{i}".encode(), "partition": p, "timestamp": base + i * 1000}
            for p in range(2)
            for i in range(50)
        ),
    )

    def offsets(df: Any) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {0: [], 1: []}
        for r in df.select("partition", "offset").collect():
            out[r["partition"]].append(r["offset"])
        return {p: sorted(v) for p, v in out.items()}

    got = offsets(
        reader(
            spark,
            broker,
            subscribe=topic,
            startingOffsets=json.dumps({topic: {"0": 10, "1": -2}}),
            endingOffsets=json.dumps({topic: {"0": 20, "1": -1}}),
        ).load()
    )
    assert got == {0: list(range(10, 20)), 1: list(range(50))}

    got = offsets(
        reader(
            spark,
            broker,
            assign=json.dumps({topic: [1]}),
            startingOffsetsByTimestamp=json.dumps({topic: {"1": base + 30_500}}),
        ).load()
    )
    assert got == {0: [], 1: list(range(31, 50))}

    df = reader(
        spark, broker, subscribe=topic, startingTimestamp=str(base + 45_000),
        endingOffsets=json.dumps({topic: {"0": 48, "1": -1}}),
    ).load()
    assert offsets(df) == {0: [45, 46, 47], 1: [45, 46, 47, 48, 49]}
    ts = df.where("partition = 0").orderBy("offset").first()["timestamp"]
    assert int(ts.timestamp() * 1000) == base + 45_000

    # No record at or after the timestamp: 'error' fails, 'latest' gives nothing.
    future = str(base + 10_000_000)
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        reader(spark, broker, subscribe=topic, startingTimestamp=future).load().count()
    assert (
        reader(
            spark, broker, subscribe=topic, startingTimestamp=future,
            startingOffsetsByTimestampStrategy="latest",
        ).load().count()
        == 0
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t", "startingOffset": "earliest"}, "(?i)unknown option 'startingOffset'.*did you mean 'startingOffsets'"),
        ({"subscribe": "t", "assign": '{"t": [0]}'}, "contradictory options: 'assign' and 'subscribe'"),
        ({"subscribe": "t", "startingOffsets": "oldest"}, "option 'startingOffsets' must be"),
        ({"subscribe": "t", "startingOffsets": "{bad"}, "option 'startingOffsets' is not valid JSON"),
        ({"subscribe": "t", "startingOffsets": '{"other": {"0": 1}}'}, "option 'startingOffsets' names other-0"),
        ({"subscribe": "t", "startingTimestamp": "1", "startingOffsets": "earliest"}, "'startingOffsets' and 'startingTimestamp'"),
        ({"subscribe": "t", "maxOffsetsPerTrigger": "10", "minOffsetsPerTrigger": "20"}, "'minOffsetsPerTrigger' \\(20\\) is greater"),
        ({"subscribe": "t", "failOnDataLoss": "yes"}, "option 'failOnDataLoss' must be 'true' or 'false'"),
        ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, "option 'kafka.auto.offset.reset' is not supported"),
        ({"subscribe": "t", "kafka.no.such.property": "1"}, "option 'kafka.no.such.property'"),
        ({}, "'subscribe', 'subscribePattern' or 'assign' is required"),
    ],
)
def test_bad_options_fail_at_load_naming_the_option(
    spark: Any, broker: EmbeddedBroker, options: dict[str, str], message: str
) -> None:
    with pytest.raises(Exception, match=message):
        reader(spark, broker, **options).load()
    with pytest.raises(Exception, match=message):
        stream_reader(spark, broker, **options).load()


def test_mode_specific_options_fail_with_a_clear_message(
    spark: Any, broker: EmbeddedBroker, topic: str
) -> None:
    create_topic(broker.bootstrap_servers, topic, 1)
    with pytest.raises(Exception, match="'startingOffsets' cannot be 'latest' for a batch query"):
        reader(spark, broker, subscribe=topic, startingOffsets="latest").load().collect()
    with pytest.raises(Exception, match="'endingOffsets' does not apply to streaming queries"):
        q = (
            stream_reader(spark, broker, subscribe=topic, endingOffsets="latest")
            .load()
            .writeStream.format("noop")
            .start()
        )
        try:
            q.processAllAvailable()
        finally:
            q.stop()


# ---- streaming read --------------------------------------------------------------------


def _records_in(path: Path, spark: Any) -> list[tuple[str, int, int]]:
    return [
        (r["topic"], r["partition"], r["offset"])
        for r in spark.read.parquet(str(path)).select("topic", "partition", "offset").collect()
    ]


def test_streaming_stop_and_restart_from_checkpoint_reads_each_record_once(
    spark: Any, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap_servers, topic, 3)
    produce(
        broker.bootstrap_servers,
        topic,
        ({"value": f"a{i}".encode(), "partition": i % 3} for i in range(3000)),
    )
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start() -> Any:
        return (
            stream_reader(
                spark, broker, subscribe=topic, startingOffsets="earliest",
                maxOffsetsPerTrigger="400",
            )
            .load()
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    query = start()
    deadline = time.time() + 120
    while (query.lastProgress or {}).get("batchId", -1) < 2:
        assert time.time() < deadline, "no progress"
        assert query.exception() is None, query.exception()
        time.sleep(0.1)
    query.stop()  # mid-stream: 3000 records need 8 micro-batches
    sizes = [p["numInputRows"] for p in query.recentProgress]
    assert max(sizes) <= 400
    first_run = len(_records_in(out, spark)) if out.exists() else 0
    assert 0 < first_run < 3000

    produce(
        broker.bootstrap_servers,
        topic,
        ({"value": f"b{i}".encode(), "partition": i % 3} for i in range(600)),
    )
    query = start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert max(p["numInputRows"] for p in query.recentProgress) <= 400
    records = _records_in(out, spark)
    assert len(records) == 3600
    assert sorted(records) == sorted(
        (topic, p, o) for p in range(3) for o in range(1200)
    )


def test_streaming_picks_up_new_topics_matching_the_pattern(
    spark: Any, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    first, second = f"{topic}-a", f"{topic}-b"
    create_topic(broker.bootstrap_servers, first, 1)
    produce(broker.bootstrap_servers, first, ({"value": b"x"} for _ in range(10)))
    query = (
        stream_reader(
            spark, broker, subscribePattern=f"{topic}-.*", startingOffsets="earliest"
        )
        .load()
        .writeStream.format("memory")
        .queryName("pattern_sink")
        .start()
    )
    try:
        query.processAllAvailable()
        create_topic(broker.bootstrap_servers, second, 2)
        produce(
            broker.bootstrap_servers,
            second,
            ({"value": b"y", "partition": i % 2} for i in range(20)),
        )
        query.processAllAvailable()
        counts = {
            r["topic"]: r["count"]
            for r in spark.sql("select topic, count(*) as count from pattern_sink group by topic")
            .collect()
        }
    finally:
        query.stop()
    assert counts == {first: 10, second: 20}


# ---- write -----------------------------------------------------------------------------


def test_batch_write_lands_in_topic_partition_with_keys_and_headers(
    spark: Any, broker: EmbeddedBroker, topic: str
) -> None:
    create_topic(broker.bootstrap_servers, topic, 3)
    other = f"{topic}-other"
    create_topic(broker.bootstrap_servers, other, 1)
    df = spark.createDataFrame(
        [
            (f"k{i}", f"v{i}".encode(), topic if i % 4 else other, i % 3 if i % 4 else 0,
             [("h", f"{i}".encode())])
            for i in range(40)
        ],
        "key string, value binary, topic string, partition int, "
        "headers array<struct<key:string,value:binary>>",
    )
    df.write.format("odradek").option(
        "kafka.bootstrap.servers", broker.bootstrap_servers
    ).mode("append").save()
    got = consume_all(broker.bootstrap_servers, topic, 3)
    assert len(got) == 30
    for m in got:
        i = int(m.key()[1:])
        assert (m.topic(), m.partition(), m.value(), m.headers()) == (
            topic, i % 3, f"v{i}".encode(), [("h", f"{i}".encode())]
        )
    assert len(consume_all(broker.bootstrap_servers, other, 1)) == 10

    # The topic option wins over the column; the data source reads back what it wrote.
    spark.range(5).selectExpr("cast(id as string) as value", "'ignored' as topic").write.format(
        "odradek"
    ).option("kafka.bootstrap.servers", broker.bootstrap_servers).option("topic", other).mode(
        "append"
    ).save()
    back = reader(spark, broker, subscribe=other, includeHeaders="true").load()
    assert back.count() == 15
    assert back.where("size(headers) = 1").count() == 10


def test_write_fails_before_writing_on_missing_topic_or_bad_types(
    spark: Any, broker: EmbeddedBroker, topic: str
) -> None:
    def save(df: Any, **options: str) -> None:
        w = df.write.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap_servers)
        for k, v in options.items():
            w = w.option(k, v)
        w.mode("append").save()

    values = spark.range(3).selectExpr("cast(id as string) as value")
    with pytest.raises(Exception, match="no topic to write to"):
        save(values)
    with pytest.raises(Exception, match="column 'value' must be string or binary"):
        save(spark.range(3).selectExpr("id as value"), topic=topic)
    with pytest.raises(Exception, match="needs a 'value' column"):
        save(spark.range(3).selectExpr("cast(id as string) as key"), topic=topic)
    with pytest.raises(Exception, match="column 'partition' must be an int"):
        save(values.selectExpr("value", "'0' as partition"), topic=topic)
    with pytest.raises(Exception, match="option 'subscribe' only applies to reading"):
        save(values, topic=topic, subscribe=topic)


def test_write_delivery_error_fails_the_task(spark: Any, broker: EmbeddedBroker, topic: str) -> None:
    create_topic(broker.bootstrap_servers, topic, 1)
    df = spark.range(3).selectExpr("cast(id as string) as value", "7 as partition")
    with pytest.raises(Exception, match="delivery failed|Unknown partition|not delivered"):
        df.write.format("odradek").option(
            "kafka.bootstrap.servers", broker.bootstrap_servers
        ).option("topic", topic).option("kafka.message.timeout.ms", "3000").mode("append").save()


def test_streaming_write_lands_in_topic_with_keys_and_headers(
    spark: Any, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    source, sink = f"{topic}-in", f"{topic}-out"
    create_topic(broker.bootstrap_servers, source, 2)
    create_topic(broker.bootstrap_servers, sink, 2)
    produce(
        broker.bootstrap_servers,
        source,
        (
            {"key": f"k{i}".encode(), "value": f"{i}".encode(), "partition": i % 2,
             "headers": [("n", str(i).encode())]}
            for i in range(200)
        ),
    )
    query = (
        stream_reader(
            spark, broker, subscribe=source, startingOffsets="earliest", includeHeaders="true"
        )
        .load()
        .selectExpr(
            "key",
            "concat(cast(value as string), '!') as value",
            "partition",
            "headers",
        )
        .writeStream.format("odradek")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    got = consume_all(broker.bootstrap_servers, sink, 2)
    assert len(got) == 200
    for m in got:
        i = int(m.key()[1:])
        assert (m.partition(), m.value(), m.headers()) == (
            i % 2, f"{i}!".encode(), [("n", str(i).encode())]
        )


# ---- failOnDataLoss --------------------------------------------------------------------


def _delete_records(broker: EmbeddedBroker, topic: str, partition: int, before: int) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for future in admin.delete_records([TopicPartition(topic, partition, before)]).values():
        future.result(30)


def test_fail_on_data_loss_both_ways_after_delete_records(
    spark: Any, broker: EmbeddedBroker, topic: str, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap_servers, topic, 1)
    produce(broker.bootstrap_servers, topic, ({"value": str(i).encode()} for i in range(100)))
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"

    def stream(fail: str) -> Any:
        return (
            stream_reader(
                spark, broker, subscribe=topic, startingOffsets="earliest", failOnDataLoss=fail
            )
            .load()
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .start()
        )

    query = stream("true")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert len(_records_in(out, spark)) == 100

    # Batch: a range starting before the log start offset.
    _delete_records(broker, topic, 0, 30)
    from_zero = json.dumps({topic: {"0": 0}})
    with pytest.raises(Exception, match=r"Records 0 to 29 of .* are no longer available.*failOnDataLoss"):
        reader(spark, broker, subscribe=topic, startingOffsets=from_zero).load().collect()
    lenient = reader(
        spark, broker, subscribe=topic, startingOffsets=from_zero, failOnDataLoss="false"
    ).load()
    assert sorted(r["offset"] for r in lenient.select("offset").collect()) == list(range(30, 100))

    # Streaming: the checkpoint says 100; records 100..149 are produced and deleted (up to 150)
    # before the query comes back.
    produce(broker.bootstrap_servers, topic, ({"value": str(i).encode()} for i in range(100)))
    _delete_records(broker, topic, 0, 150)
    query = stream("true")
    with pytest.raises(Exception, match="no longer available"):
        query.processAllAvailable()
    query.stop()
    assert len(_records_in(out, spark)) == 100
    query = stream("false")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    got = sorted(offset for _, _, offset in _records_in(out, spark))
    assert got == list(range(100)) + list(range(150, 200))
