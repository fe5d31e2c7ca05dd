"""``odradek pipeline demo``: the click-stream pipeline end to end on this machine.

Starts an embedded broker unless ``--bootstrap-servers`` is given, creates the topics, runs a
click generator, the Structured Streaming job (local Spark) and a console consumer of the output
topic, for ``--duration`` seconds. Needs ``pip install 'odradek[spark]'`` and Java 17.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from typing import Any

INPUT_TOPIC = "clicks"
OUTPUT_TOPIC = "clicks-per-minute"


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "pipeline", help="Spark pipelines on Odradek topics", description=__doc__
    )
    actions = p.add_subparsers(dest="pipeline_command", metavar="ACTION")
    demo = actions.add_parser(
        "demo",
        help="run the click-stream demo: generator -> Spark -> topic + Parquet",
        description="Generator -> 'clicks' -> Spark (per-minute counts per page, watermark) -> "
        "'clicks-per-minute' + a Parquet table partitioned by date; prints the output topic.",
    )
    demo.add_argument(
        "--bootstrap-servers", help="a running cluster (default: start an embedded broker)"
    )
    demo.add_argument("--duration", type=float, default=60.0, help="seconds to run (60)")
    demo.add_argument("--rate", type=float, default=200.0, help="events per second (200)")
    demo.add_argument(
        "--speedup",
        type=float,
        default=20.0,
        help="event time runs this many times faster than the clock, so minutes close "
        "quickly (20)",
    )
    demo.add_argument("--trigger", default="2 seconds", help="micro-batch trigger (2 seconds)")
    demo.add_argument("--workdir", help="where the table and checkpoints go (default: a temp dir)")
    demo.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    demo.set_defaults(func=run_demo)

    def usage(args: argparse.Namespace) -> int:
        p.print_help(sys.stderr)
        return 2

    p.set_defaults(func=usage)


def _create_topics(bootstrap: str, names: list[str], partitions: int = 2) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    for future in futures.values():
        try:
            future.result(30)
        except Exception as e:  # noqa: BLE001 - an existing topic is fine
            if "TOPIC_ALREADY_EXISTS" not in str(e) and "already exists" not in str(e):
                raise


def _console_consumer(bootstrap: str, topic: str, stop: threading.Event) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "odradek-pipeline-demo-console",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    metadata = consumer.list_topics(topic, timeout=10)
    parts = list(metadata.topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    shown = 0
    try:
        while not stop.is_set():
            for m in consumer.consume(100, 0.5):
                if m.error() is not None:
                    continue
                row = json.loads(m.value() or b"{}")
                print(
                    f"[{OUTPUT_TOPIC}] {row['window_start']} .. {row['window_end']}  "
                    f"{row['page']:<14} {row['count']:>6}",
                    flush=True,
                )
                shown += 1
    finally:
        consumer.close()
    return shown


def run_demo(args: argparse.Namespace) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        print("odradek pipeline demo: needs pip install 'odradek[spark]'", file=sys.stderr)
        return 2
    from odradek.spark import demo

    broker = None
    bootstrap = args.bootstrap_servers
    if bootstrap is None:
        from odradek.embedded import EmbeddedBroker

        broker = EmbeddedBroker().start()
        bootstrap = broker.bootstrap_servers
        print(f"embedded broker on {bootstrap}", flush=True)
    workdir = args.workdir or tempfile.mkdtemp(prefix="odradek-pipeline-")
    table = os.path.join(workdir, "clicks_table")
    stop = threading.Event()
    threads: list[threading.Thread] = []
    spark = None
    try:
        _create_topics(bootstrap, [INPUT_TOPIC, OUTPUT_TOPIC])
        spark = (
            SparkSession.builder.master(args.master)
            .appName("odradek-pipeline-demo")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        queries = demo.start_pipeline(
            spark,
            bootstrap,
            input_topic=INPUT_TOPIC,
            output_topic=OUTPUT_TOPIC,
            table_path=table,
            checkpoint_dir=os.path.join(workdir, "checkpoints"),
            trigger=args.trigger,
        )
        generator = threading.Thread(
            target=demo.produce_clicks,
            args=(
                bootstrap,
                INPUT_TOPIC,
                demo.random_clicks(None, events_per_second=args.rate, speedup=args.speedup),
            ),
            kwargs={"events_per_second": args.rate, "stop": stop},
            daemon=True,
        )
        console = threading.Thread(
            target=_console_consumer, args=(bootstrap, OUTPUT_TOPIC, stop), daemon=True
        )
        threads = [generator, console]
        for t in threads:
            t.start()
        print(
            f"generating {args.rate:g} clicks/s into '{INPUT_TOPIC}' for {args.duration:g} s; "
            f"per-minute counts appear below as windows close",
            flush=True,
        )
        deadline = time.monotonic() + args.duration
        while time.monotonic() < deadline:
            for q in queries:
                if q.exception() is not None:
                    raise RuntimeError(f"query {q.name} failed: {q.exception()}")
            time.sleep(0.5)
        spark.sparkContext.setLogLevel("FATAL")  # stopping interrupts writers; not errors
        for q in queries:
            q.stop()
        rows = spark.read.parquet(table).count()
        dates = sorted({r[0] for r in spark.read.parquet(table).select("date").collect()})
        print(f"raw events table: {table} ({rows} rows, date partitions {dates})", flush=True)
        return 0
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
