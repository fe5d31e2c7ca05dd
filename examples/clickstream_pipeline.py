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
import threading

from pyspark.sql import SparkSession

from odradek.spark import OdradekDataSource, demo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", default="localhost:9092")
    parser.add_argument("--input-topic", default="clicks")
    parser.add_argument("--output-topic", default="clicks-per-minute")
    parser.add_argument("--table", default="/tmp/odradek-demo/clicks_table")
    parser.add_argument("--checkpoints", default="/tmp/odradek-demo/checkpoints")
    parser.add_argument("--trigger", default="5 seconds")
    parser.add_argument(
        "--generate", type=float, default=0.0, metavar="RATE",
        help="also produce RATE random clicks per second into the input topic",
    )
    args = parser.parse_args()

    spark = (
        SparkSession.builder.appName("odradek-clickstream")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.dataSource.register(OdradekDataSource)
    if args.generate:
        threading.Thread(
            target=demo.produce_clicks,
            args=(args.bootstrap_servers, args.input_topic,
                  demo.random_clicks(None, events_per_second=args.generate)),
            kwargs={"events_per_second": args.generate},
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
    print(f"running {[q.name for q in queries]}; Ctrl-C to stop")
    spark.streams.awaitAnyTermination()


if __name__ == "__main__":
    main()
