"""Click-stream pipeline on Odradek topics with plain PySpark (no Maven, no JVM Kafka package).

    clicks (JSON events) --> per-minute counts per page (watermark 1 minute) --> clicks-per-minute
                         \\-> raw events, Parquet, partitioned by date

Locally (a broker on localhost:9092, e.g. `odradek server`):

    python examples/clickstream_pipeline.py --bootstrap-servers localhost:9092 --generate 200

On a cluster, with `odradek[spark]` installed on every node (or shipped with --archives):

    spark-submit --master spark://master:7077 examples/clickstream_pipeline.py \\
        --bootstrap-servers broker1:9092 --table hdfs:///lake/clicks --checkpoints hdfs:///chk/clicks
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading

from odradek.spark import demo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default="localhost:9092")
    parser.add_argument("--input-topic", default="clicks")
    parser.add_argument("--output-topic", default="clicks-per-minute")
    parser.add_argument(
        "--workdir", help="where --table and --checkpoints default to (default: a new temp dir)"
    )
    parser.add_argument("--table", help="the Parquet table (default: WORKDIR/clicks_table)")
    parser.add_argument("--checkpoints", help="checkpoint root (default: WORKDIR/checkpoints)")
    parser.add_argument("--trigger", default="5 seconds")
    parser.add_argument("--master", default="local[2]", help="when not run by spark-submit")
    parser.add_argument(
        "--generate", type=float, default=0.0, metavar="RATE",
        help="also produce RATE random clicks per second into the input topic",
    )
    args = parser.parse_args()
    if args.table is None or args.checkpoints is None:
        workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="odradek-clickstream-"))
        args.table = args.table or os.path.join(workdir, "clicks_table")
        args.checkpoints = args.checkpoints or os.path.join(workdir, "checkpoints")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    print(f"table {args.table}, checkpoints {args.checkpoints}", flush=True)
    print("starting Spark: the JVM takes 10-60 s to start", flush=True)
    # Outside spark-submit the JVM gets its own process group: Ctrl-C reaches only this driver.
    spark = demo.local_spark(
        args.master, "odradek-clickstream", {"spark.sql.session.timeZone": "UTC"}
    )
    stop = threading.Event()
    # PySpark's own SIGINT handler raises KeyboardInterrupt wherever the driver is; this one
    # only asks the loop below to stop (a second Ctrl-C forces it).
    def on_sigint(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGINT, on_sigint)
    if args.generate:
        threading.Thread(
            target=demo.produce_clicks,
            args=(args.bootstrap_servers, args.input_topic,
                  demo.random_clicks(None, events_per_second=args.generate)),
            kwargs={"events_per_second": args.generate, "stop": stop},
            daemon=True,
        ).start()
    queries = demo.start_pipeline(
        spark,
        args.bootstrap_servers,
        input_topic=args.input_topic,
        output_topic=args.output_topic,
        table_path=args.table,
        checkpoint_dir=args.checkpoints,
        trigger=args.trigger,
    )
    print(
        f"running {[q.name for q in queries]}; the first micro-batch takes 10-60 s; "
        f"counts go to '{args.output_topic}' once a minute's watermark passes; Ctrl-C to stop",
        flush=True,
    )
    failed = None
    while not stop.is_set() and failed is None:
        failed = next((q for q in queries if q.exception() is not None), None)
        stop.wait(1.0)
    spark.sparkContext.setLogLevel("FATAL")  # stopping interrupts the writers: not errors
    for q in queries:
        q.stop()
    spark.stop()
    if failed is not None:
        print(f"query {failed.name} failed: {failed.exception()}", file=sys.stderr)
        return 1
    print("stopped", flush=True)
    return 130


if __name__ == "__main__":
    sys.exit(main())
