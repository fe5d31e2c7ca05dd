#!/usr/bin/env python3
"""Spark data source benchmark: batch read throughput and streaming end-to-end latency.

    python3 benchmarks/spark_read.py                       # 1,000,000 x 100 B, local[2]
    python3 benchmarks/spark_read.py --records 200000 --latency-seconds 10

1. Starts ``odradek server`` as a subprocess on free loopback ports (temporary data dir).
2. Produces ``--records`` records of ``--record-size`` bytes (8-byte keys) over ``--partitions``
   partitions.
3. Reads them all with a plain confluent-kafka consumer (manual assignment, consume() batches),
   the reference: records/s.
4. Reads them all through ``spark.read.format("odradek")`` (``local[2]`` by default), forcing
   every column to be materialised (``count``, ``sum(length(value))``, ``sum(offset)``), once
   per executor read path: ``odradek.reader=odradek`` (the default: our fetch path, Arrow
   decoding) and ``odradek.reader=librdkafka`` (confluent-kafka consumers); and, as the
   yardstick, through Spark's own JVM connector ``spark.read.format("kafka")``
   (spark-sql-kafka-0-10, the Java consumer), resolved by Spark into ``~/.cache/odradek/ivy``
   by ``scripts/spark_kafka_connector.py`` (reader ``kafka``; left out with a note if it does
   not resolve).

   A fresh Spark JVM is slow for its first queries: it starts the Python workers and then keeps
   JIT-compiling Spark's planner and executor code for a dozen queries or so (the C1/C2 compiler
   threads take about a third of the JVM's CPU in the third query, a fifth in the twentieth).
   So the first query is reported on its own ("cold"), ``--warmup`` more queries follow
   unmeasured, and the throughput is the median (and best) of ``--repeat`` measured queries.
   For the measured queries, the CPU seconds per million records are split by process: the
   Spark JVM's task threads, its JIT compiler threads and its other threads, the Python workers
   (everything the JVM forked: the data source's planning and ``read()``), and the broker.
5. Streaming latency: a producer sends ``--rate`` records/s for ``--latency-seconds`` seconds,
   each value carrying its send time; a streaming query with a 1 s trigger appends each
   micro-batch to a Parquet table (foreachBatch), and a record's latency is the time at which
   the batch holding it was written minus its send time. p50 / p99 / max are reported.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench_support import Broker, create_topic, make_log, percentile, run_seconds
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

log = make_log("spark_read", clock=False)


def produce(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
        }
    )
    payload = b"v" * size
    began = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, payload, struct.pack(">q", i), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 100_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return time.perf_counter() - began


def plain_consumer(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "spark-read-bench",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    began = time.perf_counter()
    n = 0
    total_bytes = 0
    while n < records:
        for m in consumer.consume(10_000, 5.0):
            err = m.error()
            if err is None:
                n += 1
                total_bytes += len(m.value() or b"")
            elif err.code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(err)
    elapsed = time.perf_counter() - began
    consumer.close()
    return elapsed


def kafka_connector_conf() -> dict[str, str] | None:
    """Spark settings loading spark-sql-kafka-0-10 (resolved once, cached), or None."""
    path = Path(__file__).resolve().parents[1] / "scripts" / "spark_kafka_connector.py"
    spec = importlib.util.spec_from_file_location("spark_kafka_connector", path)
    if spec is None or spec.loader is None:
        return None
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    package = helper.resolve()
    if package is None:
        return None
    log(f"Spark's Kafka connector: {package}")
    conf: dict[str, str] = helper.spark_conf(package)
    return conf


def spark_session(master: str, extra: dict[str, str] | None = None) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from odradek.spark import OdradekDataSource

    builder = SparkSession.builder
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = (
        builder.master(master)
        .appName("odradek-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(OdradekDataSource)
    return spark


def _children(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from ``/proc/*/stat``)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                data = f.read()
        except OSError:
            continue
        parent[int(entry)] = int(data[data.rindex(")") + 2 :].split()[1])
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out.extend(kids)
        todo.extend(kids)
    return out


def _thread_kind(pid: int, tid: str) -> str:
    try:
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            name = f.read().strip()
    except OSError:
        return "jvm other"
    if "CompilerThre" in name:
        return "jvm JIT"
    if name.startswith("Executor task"):
        return "jvm tasks"
    return "jvm other"


class CpuSplit:
    """CPU seconds by part between :meth:`start` and :meth:`stop`, summed over calls."""

    PARTS = ("jvm tasks", "jvm JIT", "jvm other", "python workers", "broker")

    def __init__(self, jvm_pid: int, broker_pid: int) -> None:
        self.jvm_pid = jvm_pid
        self.broker_pid = broker_pid
        self.total = dict.fromkeys(self.PARTS, 0.0)
        self._begin: dict[tuple[str, int, str], float] = {}

    def _read(self) -> dict[tuple[str, int, str], float]:
        out: dict[tuple[str, int, str], float] = {}
        try:
            tids = os.listdir(f"/proc/{self.jvm_pid}/task")
        except OSError:
            tids = []
        for tid in tids:
            secs = run_seconds(self.jvm_pid, int(tid))
            if secs is not None:
                out[(_thread_kind(self.jvm_pid, tid), self.jvm_pid, tid)] = secs
        for child in _children(self.jvm_pid):
            secs = run_seconds(child)
            if secs is not None:
                out[("python workers", child, "")] = secs
        secs = run_seconds(self.broker_pid)
        if secs is not None:
            out[("broker", self.broker_pid, "")] = secs
        return out

    def start(self) -> None:
        self._begin = self._read()

    def stop(self) -> None:
        for key, secs in self._read().items():
            self.total[key[0]] += secs - self._begin.get(key, 0.0)


def spark_read(
    spark: Any,
    bootstrap: str,
    topic: str,
    records: int,
    reader: str,
    cpu: CpuSplit | None = None,
) -> float:
    if reader == "kafka":  # Spark's own JVM connector
        df = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .load()
        )
    else:
        df = (
            spark.read.format("odradek")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("odradek.reader", reader)
            .load()
        )
    if cpu is not None:
        cpu.start()
    began = time.perf_counter()
    row = df.selectExpr("count(*) as n", "sum(length(value)) as b", "sum(offset) as o").first()
    elapsed = time.perf_counter() - began
    if cpu is not None:
        cpu.stop()
    if row["n"] != records:
        raise AssertionError(f"read {row['n']} records, expected {records}")
    return elapsed


def streaming_latency(
    spark: Any, bootstrap: str, topic: str, rate: float, seconds: float, workdir: Path
) -> list[float]:
    latencies: list[float] = []
    table = str(workdir / "latency_table")

    def sink(batch: Any, batch_id: int) -> None:
        rows = batch.select("value").collect()
        batch.write.mode("append").parquet(table)
        now = time.time()
        for r in rows:
            latencies.append(now - struct.unpack(">d", r["value"][:8])[0])

    query = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "latest")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(workdir / "latency_checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    time.sleep(3)  # let the query start from 'latest' before producing
    stop = threading.Event()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    sent = 0
    began = time.monotonic()
    while time.monotonic() - began < seconds and not stop.is_set():
        producer.produce(topic, struct.pack(">d", time.time()) + b"x" * 92)
        producer.poll(0)
        sent += 1
        ahead = sent / rate - (time.monotonic() - began)
        if ahead > 0:
            time.sleep(ahead)
    producer.flush(30)
    deadline = time.monotonic() + 60
    while len(latencies) < sent and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()
    if len(latencies) != sent:
        raise AssertionError(f"sink saw {len(latencies)} records, sent {sent}")
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--warmup", type=int, default=10, help="unmeasured queries per reader")
    parser.add_argument("--repeat", type=int, default=5, help="measured queries per reader")
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--latency-seconds", type=float, default=20.0)
    parser.add_argument(
        "--readers",
        default="odradek,librdkafka,kafka",
        help="read paths to measure: odradek, librdkafka (format odradek), kafka (spark-sql-kafka)",
    )
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="odradek-spark-bench-"))
    broker = Broker(workdir)
    spark = None
    try:
        broker.start()
        create_topic(broker.bootstrap, "bench", args.partitions)
        create_topic(broker.bootstrap, "latency", 2)
        log(f"producing {args.records:,} x {args.record_size} B")
        produce_s = produce(
            broker.bootstrap, "bench", args.records, args.record_size, args.partitions
        )
        log(f"produced in {produce_s:.2f} s")
        plain_s = plain_consumer(broker.bootstrap, "bench", args.partitions, args.records)
        log(f"plain consumer: {plain_s:.2f} s")
        readers = [r.strip() for r in args.readers.split(",") if r.strip()]
        extra = kafka_connector_conf() if "kafka" in readers else None
        if "kafka" in readers and extra is None:
            log("Spark's Kafka connector did not resolve: its row is left out")
            readers.remove("kafka")
        spark = spark_session(args.master, extra)
        jvm_pid = int(spark.sparkContext._gateway.proc.pid)
        results: dict[str, tuple[float, list[float], CpuSplit]] = {}
        for reader in readers:
            cold = spark_read(spark, broker.bootstrap, "bench", args.records, reader)
            for _ in range(args.warmup):
                spark_read(spark, broker.bootstrap, "bench", args.records, reader)
            cpu = CpuSplit(jvm_pid, broker.pid)
            runs = [
                spark_read(spark, broker.bootstrap, "bench", args.records, reader, cpu)
                for _ in range(args.repeat)
            ]
            results[reader] = (cold, runs, cpu)
            log(
                f"spark reads ({reader}): cold {cold:.2f} s, then "
                f"{', '.join(f'{r:.2f} s' for r in runs)} after {args.warmup} warm-up queries"
            )
        lat = (
            sorted(
                streaming_latency(
                    spark, broker.bootstrap, "latency", args.rate, args.latency_seconds, workdir
                )
            )
            if args.latency_seconds > 0
            else []
        )
        cores = os.cpu_count()
        print(f"machine: {cores} cores; Spark {spark.version}, master {args.master}")
        print(f"records: {args.records:,} x {args.record_size} B, {args.partitions} partitions")
        print(f"plain confluent-kafka consumer : {args.records / plain_s:>12,.0f} records/s")
        millions = args.records * args.repeat / 1e6
        for reader, (cold, runs, cpu) in results.items():
            label = (
                "spark-sql-kafka (JVM) connector"
                if reader == "kafka"
                else f"data source, {reader} reader"
            )
            median = statistics.median(runs)
            print(
                f"{label:<31}: {args.records / median:>12,.0f} records/s median of "
                f"{args.repeat} ({args.records / min(runs):,.0f} best; runs "
                f"{', '.join(f'{r:.2f}' for r in runs)} s; the cold first query took "
                f"{cold:.2f} s, {args.records / cold:,.0f} records/s)"
            )
            split = ", ".join(f"{part} {secs / millions:.2f}" for part, secs in cpu.total.items())
            total = sum(cpu.total.values()) / millions
            print(f"{'':<33}CPU-s per million records: {split}; total {total:.2f}")
        if lat:
            p50, p99 = percentile(lat, 0.5) * 1000, percentile(lat, 0.99) * 1000
            print(
                f"streaming latency, {args.rate:g} rec/s, 1 s trigger, {len(lat):,} records: "
                f"p50 {p50:.0f} ms, p99 {p99:.0f} ms, max {lat[-1] * 1000:.0f} ms"
            )
        return 0
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
