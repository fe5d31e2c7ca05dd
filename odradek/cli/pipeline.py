"""``odradek pipeline demo``: the click-stream pipeline end to end on this machine.

Starts an embedded broker unless ``--bootstrap-servers`` is given, creates the topics, runs a
click generator, the Structured Streaming job (local Spark) and a console consumer of the output
topic, for ``--duration`` seconds. Needs ``pip install 'odradek[spark]'`` and Java 17.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from typing import Any

from odradek.logs import add_log_level_argument, configure_logging, levels_from_args

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
    add_log_level_argument(demo, default="WARNING")
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


def _console_consumer(
    bootstrap: str, topic: str, stop: threading.Event, counter: list[int] | None = None
) -> int:
    """Print the rows of ``topic``; ``counter[0]`` follows how many were printed."""
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
                if counter is not None:
                    counter[0] = shown
    finally:
        consumer.close()
    return shown


class _Interrupt:
    """Ctrl-C during the demo: the first asks for a clean stop, a second one forces it."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self._previous: Any = None

    def install(self) -> None:
        """(Re)install: PySpark's SparkContext sets its own SIGINT handler (it cancels the jobs
        and raises KeyboardInterrupt wherever the driver is), so this is called again after."""
        previous = signal.signal(signal.SIGINT, self._handle)
        if self._previous is None:
            self._previous = previous

    def restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested.is_set():
            raise KeyboardInterrupt
        self.requested.set()
        _say("Ctrl-C: stopping the queries and Spark (Ctrl-C again to force)")


def _say(text: str) -> None:
    print(f"[demo] {text}", flush=True)


def _summary(spark: Any, table: str) -> str:
    frame = spark.read.parquet(table)
    rows = frame.count()
    dates = sorted({r[0] for r in frame.select("date").distinct().collect()})
    shown = ", ".join(d.isoformat() for d in dates) or "none"
    return f"raw events table: {table} ({rows} rows; date partitions: {shown})"


def run_demo(args: argparse.Namespace) -> int:
    configure_logging(*levels_from_args(args))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print("odradek pipeline demo: needs pip install 'odradek[spark]'", file=sys.stderr)
        return 2
    from odradek.spark import demo

    interrupt = _Interrupt()
    interrupt.install()
    broker = None
    bootstrap = args.bootstrap_servers
    stop = threading.Event()
    threads: list[threading.Thread] = []
    spark = None
    queries: list[Any] = []
    try:
        if bootstrap is None:
            from odradek.embedded import EmbeddedBroker

            broker = EmbeddedBroker().start()
            bootstrap = broker.bootstrap_servers
            _say(f"embedded broker on {bootstrap}")
        workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="odradek-pipeline-"))
        os.makedirs(workdir, exist_ok=True)
        table = os.path.join(workdir, "clicks_table")
        _say(f"table and checkpoints go to {workdir}")
        _create_topics(bootstrap, [INPUT_TOPIC, OUTPUT_TOPIC])
        if interrupt.requested.is_set():
            return 130
        _say(f"starting Spark ({args.master}): the JVM takes 10-60 s to start")
        began = time.monotonic()
        spark = demo.local_spark(
            args.master,
            "odradek-pipeline-demo",
            {
                "spark.ui.enabled": "false",
                "spark.sql.shuffle.partitions": "2",
                "spark.sql.session.timeZone": "UTC",
                "spark.ui.showConsoleProgress": "false",
            },
        )
        interrupt.install()
        spark.sparkContext.setLogLevel("ERROR")
        _say(f"Spark {spark.version} started in {time.monotonic() - began:.0f} s")
        if interrupt.requested.is_set():
            return 130
        queries = demo.start_pipeline(
            spark,
            bootstrap,
            input_topic=INPUT_TOPIC,
            output_topic=OUTPUT_TOPIC,
            table_path=table,
            checkpoint_dir=os.path.join(workdir, "checkpoints"),
            trigger=args.trigger,
        )
        shown: list[int] = [0]
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
            target=_console_consumer, args=(bootstrap, OUTPUT_TOPIC, stop, shown), daemon=True
        )
        threads = [generator, console]
        for t in threads:
            t.start()
        minute_s = 60.0 / args.speedup
        _say(
            f"generating {args.rate:g} clicks/s into '{INPUT_TOPIC}' for {args.duration:g} s; "
            f"waiting for the first micro-batch (Spark plans the query and starts its Python "
            f"workers: 10-60 s)"
        )
        _say(
            f"event time runs {args.speedup:g}x faster: a minute passes every {minute_s:g} s, and "
            f"a minute's counts appear below once the 1-minute watermark passes its end "
            f"(about {2 * minute_s:g} s later)"
        )
        started = time.monotonic()
        deadline = started + args.duration
        first_batch = False
        next_status = started + 15
        while time.monotonic() < deadline and not interrupt.requested.is_set():
            for q in queries:
                if q.exception() is not None:
                    raise RuntimeError(f"query {q.name} failed: {q.exception()}")
            now = time.monotonic()
            progress = queries[0].lastProgress
            if progress is not None and not first_batch:
                first_batch = True
                _say(f"first micro-batch done after {now - started:.0f} s")
            if now >= next_status:
                next_status = now + 15
                if not first_batch:
                    _say(f"{now - started:.0f} s: still waiting for the first micro-batch")
                elif shown[0] == 0:
                    _say(
                        f"{now - started:.0f} s: batch {progress['batchId'] if progress else '-'} done; "
                        "waiting for the first minute to close"
                    )
            interrupt.requested.wait(0.5)
        if interrupt.requested.is_set():
            return 130
        spark.sparkContext.setLogLevel("FATAL")  # stopping interrupts writers; not errors
        for q in queries:
            q.stop()
        queries = []
        _say(_summary(spark, table))
        return 0
    finally:
        stop.set()
        if queries:
            _say("stopping the queries")
        if spark is not None:
            spark.sparkContext.setLogLevel("FATAL")
            for q in queries:
                try:
                    q.stop()
                except Exception as e:  # noqa: BLE001 - stopping anyway
                    _say(f"stopping query {q.name}: {e}")
        for t in threads:
            t.join(10)
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        interrupt.restore()
        if interrupt.requested.is_set():
            _say("stopped")
