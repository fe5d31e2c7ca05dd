"""The click-stream demo pipeline: generator -> topic -> Structured Streaming -> topic + Parquet.

- :func:`produce_clicks` writes JSON click events (``{"user", "page", "ts"}``) to a topic.
- :func:`start_pipeline` starts two streaming queries on one ``odradek`` source:
  per-minute counts per page (event time, 1-minute watermark, append mode: each window is
  written once, when the watermark passes its end) to an output topic as JSON keyed by page;
  and the raw parsed events to a Parquet table partitioned by ``date``.

- :func:`local_spark` starts a local SparkSession whose JVM is out of the terminal's reach, so
  Ctrl-C reaches only the driver, which stops the queries and the session cleanly.

Used by ``odradek pipeline demo`` and ``examples/clickstream_pipeline.py`` (spark-submit).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

CLICK_SCHEMA = "user STRING, page STRING, ts TIMESTAMP"
PAGES = ("/", "/products", "/products/42", "/cart", "/checkout", "/about")


def click(user: str, page: str, ts: datetime) -> dict[str, str]:
    return {"user": user, "page": page, "ts": ts.astimezone(UTC).isoformat().replace("+00:00", "Z")}


def random_clicks(
    count: int | None,
    *,
    start: datetime | None = None,
    events_per_second: float = 50.0,
    speedup: float = 1.0,
    seed: int | None = None,
) -> Iterator[dict[str, str]]:
    """Click events whose event time advances ``speedup`` times faster than one per rate."""
    rng = random.Random(seed)
    start = start or datetime.now(UTC)
    i = 0
    while count is None or i < count:
        ts = start + timedelta(seconds=i / events_per_second * speedup)
        yield click(f"u{rng.randrange(1000)}", rng.choice(PAGES), ts)
        i += 1


def produce_clicks(
    bootstrap_servers: str,
    topic: str,
    events: Iterable[dict[str, str]],
    *,
    events_per_second: float | None = None,
    stop: Any = None,
) -> int:
    """Produce ``events`` as JSON (key: the page), paced at ``events_per_second`` if given."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5})
    sent = 0
    began = time.monotonic()
    for event in events:
        if stop is not None and stop.is_set():
            break
        while True:
            try:
                key = (event.get("page") or "").encode()
                producer.produce(topic, json.dumps(event).encode(), key)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        sent += 1
        if events_per_second:
            ahead = sent / events_per_second - (time.monotonic() - began)
            if ahead > 0:
                time.sleep(ahead)
    producer.flush(30)
    return sent


def start_pipeline(
    spark: Any,
    bootstrap_servers: str,
    *,
    input_topic: str,
    output_topic: str,
    table_path: str,
    checkpoint_dir: str,
    trigger: str = "5 seconds",
    starting_offsets: str = "earliest",
    watermark: str = "1 minute",
) -> list[Any]:
    """Start the aggregate and the raw-table queries; returns them (call ``.stop()``)."""
    from pyspark.sql import functions as F

    from odradek.spark import OdradekDataSource

    spark.dataSource.register(OdradekDataSource)
    events = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", input_topic)
        .option("startingOffsets", starting_offsets)
        .load()
        .select(F.from_json(F.col("value").cast("string"), CLICK_SCHEMA).alias("e"))
        .select("e.*")
        .where("page IS NOT NULL AND ts IS NOT NULL")
    )
    counts = (
        events.withWatermark("ts", watermark)
        .groupBy(F.window("ts", "1 minute"), "page")
        .count()
        .select(
            F.col("page").alias("key"),
            F.to_json(
                F.struct(
                    F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_start"),
                    F.date_format("window.end", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_end"),
                    "page",
                    "count",
                )
            ).alias("value"),
        )
    )
    aggregates = (
        counts.writeStream.format("odradek")
        .queryName("clicks_per_minute")
        .outputMode("append")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("topic", output_topic)
        .option("checkpointLocation", f"{checkpoint_dir}/aggregates")
        .trigger(processingTime=trigger)
        .start()
    )
    raw = (
        events.withColumn("date", F.to_date("ts"))
        .writeStream.format("parquet")
        .queryName("clicks_raw")
        .partitionBy("date")
        .option("path", table_path)
        .option("checkpointLocation", f"{checkpoint_dir}/raw")
        .trigger(processingTime=trigger)
        .start()
    )
    return [aggregates, raw]


def local_spark(master: str, app_name: str, conf: dict[str, str] | None = None) -> Any:
    """A SparkSession whose JVM runs in its own session (process group).

    Ctrl-C in a terminal signals the whole foreground process group. PySpark keeps the JVM
    from dying of it, but not the Python workers the JVM starts (they restore SIGINT): each
    prints a KeyboardInterrupt traceback and the JVM logs the failed tasks with them, hundreds
    of lines. Out of the group, only the driver sees Ctrl-C and can stop the queries itself.
    Under spark-submit (the JVM already runs and started this driver) the usual session is used.
    """
    import os

    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    if "PYSPARK_GATEWAY_PORT" in os.environ or SparkContext._active_spark_context is not None:
        builder = SparkSession.builder.appName(app_name)  # spark-submit's --master applies
        for key, value in (conf or {}).items():
            builder = builder.config(key, value)
        return builder.getOrCreate()
    from pyspark.java_gateway import launch_gateway

    spark_conf = SparkConf().setMaster(master).setAppName(app_name)
    for key, value in (conf or {}).items():
        spark_conf.set(key, value)

    gateway = launch_gateway(spark_conf, popen_kwargs={"start_new_session": True})
    context = SparkContext(conf=spark_conf, gateway=gateway)
    _quiet_accumulator_server(context)
    return SparkSession.builder.getOrCreate()


def _quiet_accumulator_server(context: Any) -> None:
    """PySpark's accumulator server reads updates from the JVM on a socket; ``stop()`` stops
    the JVM side first, so its handler can meet end-of-file mid-read and socketserver prints
    the EOFError as a traceback on stderr. A connection the JVM closed while stopping is not an
    error: log it at debug level instead."""
    server = getattr(context, "_accumulatorServer", None)
    if server is None:
        return

    def handle_error(request: Any, client_address: Any) -> None:
        import sys

        error = sys.exc_info()[1]
        if isinstance(error, (EOFError, ConnectionError)):
            logging.getLogger(__name__).debug("accumulator connection closed: %r", error)
            return
        type(server).handle_error(server, request, client_address)

    server.handle_error = handle_error


def expected_counts(events: Iterable[dict[str, str]]) -> dict[tuple[str, str], int]:
    """(window start, page) -> count: what the pipeline computes, for checking it."""
    out: dict[tuple[str, str], int] = {}
    for e in events:
        ts = datetime.fromisoformat(e["ts"].replace("Z", "+00:00")).astimezone(UTC)
        minute = ts.replace(second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
        out[(minute, e["page"])] = out.get((minute, e["page"]), 0) + 1
    return out
