"""Spark reads of a topic written in transactions (issue 13), ``read_committed``, with
``failOnDataLoss=true``: the native ``format("odradek")`` source and Spark's own Kafka connector
(``format("kafka")``, spark-sql-kafka-0-10), batch and streaming.

Four transactions of 30 records each over 3 partitions: committed, aborted, committed, aborted.
The aborted records and the commit/abort markers leave offsets without a visible record --
at the end of every partition too, where the query's end offset lies past the last visible
record. Both readers return exactly the 60 committed records, without a data-loss (gap) error;
``read_uncommitted`` the native source returns all 120 records and no markers.

Runs against Odradek, or Apache Kafka with ``ODRADEK_TXN_SERVERS=kafka`` (see
tests/integration/txn_support.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from integration.txn_support import Target, create_topic, start_target, txn_server_kinds, watermarks

PARTITIONS = 3
N = 30
TXNS = (("c1", True), ("a1", False), ("c2", True), ("a2", False))
COMMITTED = sorted(f"{p}-{i}" for p, commit in TXNS if commit for i in range(N))
EVERYTHING = sorted(f"{p}-{i}" for p, _ in TXNS for i in range(N))


@pytest.fixture(scope="module", params=txn_server_kinds())
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    yield from start_target(request.param, tmp_path_factory.mktemp("spark-txn"))


@pytest.fixture(scope="module")
def txn_topic(target: Target) -> str:
    topic = f"spark-txn-{uuid.uuid4().hex[:8]}"
    create_topic(target.bootstrap, topic, PARTITIONS)
    p = Producer({"bootstrap.servers": target.bootstrap, "transactional.id": f"spark-{topic}"})
    p.init_transactions(60)
    for prefix, commit in TXNS:
        p.begin_transaction()
        for i in range(N):
            p.produce(topic, partition=i % PARTITIONS, value=f"{prefix}-{i}".encode())
        if commit:
            p.commit_transaction(60)
        else:
            assert p.flush(60) == 0
            p.abort_transaction(60)
    # Each partition: 40 records and 4 markers; the LSO is the high watermark.
    high = watermarks(target.bootstrap, topic, PARTITIONS, "read_uncommitted")
    assert high == {p: 4 * N // PARTITIONS + 4 for p in range(PARTITIONS)}
    assert watermarks(target.bootstrap, topic, PARTITIONS, "read_committed") == high
    return topic


def _load(spark: Any, fmt: str, target: Target, topic: str, stream: bool, **options: str) -> Any:
    r = (spark.readStream if stream else spark.read).format(fmt)
    r = r.option("kafka.bootstrap.servers", target.bootstrap).option("subscribe", topic)
    r = r.option("startingOffsets", "earliest").option("failOnDataLoss", "true")
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _values(rows: list[Any]) -> list[str]:
    return sorted(bytes(r["value"]).decode() for r in rows)


def _batch(spark: Any, fmt: str, target: Target, topic: str, **options: str) -> list[str]:
    return _values(_load(spark, fmt, target, topic, False, **options).select("value").collect())


def _stream(spark: Any, fmt: str, target: Target, topic: str, tmp_path: Path, **options: str) -> list[str]:
    name = f"txn_{fmt}_{uuid.uuid4().hex[:8]}"
    query = (
        _load(spark, fmt, target, topic, True, **options).select("value")
        .writeStream.format("memory").queryName(name)
        .option("checkpointLocation", str(tmp_path / name))
        .start()
    )
    try:
        query.processAllAvailable()
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    return _values(spark.sql(f"select value from {name}").collect())


def test_native_source_read_committed(spark: Any, target: Target, txn_topic: str, tmp_path: Path) -> None:
    committed = {"kafka.isolation.level": "read_committed"}
    assert _batch(spark, "odradek", target, txn_topic, **committed) == COMMITTED
    assert _stream(spark, "odradek", target, txn_topic, tmp_path, maxOffsetsPerTrigger="7", **committed) == COMMITTED
    # read_uncommitted (Odradek's own fetch path): every record, no control record as a row.
    assert _batch(spark, "odradek", target, txn_topic) == EVERYTHING


def test_kafka_connector_read_committed(
    spark: Any, kafka_connector: str, target: Target, txn_topic: str, tmp_path: Path
) -> None:
    committed = {"kafka.isolation.level": "read_committed"}
    assert _batch(spark, "kafka", target, txn_topic, **committed) == COMMITTED
    assert _stream(spark, "kafka", target, txn_topic, tmp_path, maxOffsetsPerTrigger="7", **committed) == COMMITTED
    assert _batch(spark, "kafka", target, txn_topic) == EVERYTHING
