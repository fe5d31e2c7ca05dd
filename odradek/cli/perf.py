"""``odradek perf produce`` / ``odradek perf consume``: Kafka's kafka-producer-perf-test.sh and
kafka-consumer-perf-test.sh against an existing cluster, with their flags and output lines.

``perf produce`` sends ``--num-records`` records of ``--record-size`` random uppercase letters
(or payloads from ``--payload-file``, or ``--payload-monotonic``) at up to ``--throughput``
records/s (-1: no limit), printing a window line every 5 s and the total line Kafka prints::

    N records sent, X records/sec (Y MB/sec), A ms avg latency, M ms max latency, P50 ms 50th, P95 ms 95th, P99 ms 99th, P999 ms 99.9th.

``perf consume`` joins ``--group`` (default perf-consumer-NNNNN), reads ``--messages`` records
from the earliest (``--from-latest``: the latest) and prints Kafka's CSV header and line
(``--show-detailed-stats``: one line per ``--reporting-interval``)."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import functools
import random
import re
import sys
import time
from pathlib import Path
from typing import Any

from odradek.cli.client_tools import Progress, ToolFailure, add_progress_flag, run_tool
from odradek.clients.cluster import Cluster
from odradek.clients.config import (
    CONSUMER_DEFAULTS,
    PRODUCER_DEFAULTS,
    ClientConfig,
    ConfigError,
    load_properties,
    parse_kv_args,
)
from odradek.clients.consumer import EARLIEST, LATEST, Consumer
from odradek.clients.group import GroupMember
from odradek.clients.producer import ProduceError, Producer

REPORTING_INTERVAL_MS = 5000
LETTERS = bytes(65 + i % 26 for i in range(256))  # random bytes -> uppercase letters, as Kafka's payloads
TOTAL_LINE = ("%d records sent, %.1f records/sec (%.2f MB/sec), %.2f ms avg latency, %.2f ms max latency, "
              "%d ms 50th, %d ms 95th, %d ms 99th, %d ms 99.9th.")


class ProducerStats:
    """Kafka's ProducerPerformance.Stats: windows, a latency sample of at most 500,000, and the
    same printf formats."""

    def __init__(self, num_records: int, reporting_interval_ms: int, out: Any) -> None:
        self.out = out
        self.start = self.window_start = time.time() * 1000
        self.sampling = max(1, num_records // min(num_records, 500_000))
        self.latencies: list[int] = []
        self.iteration = self.count = self.bytes = self.total_latency = self.max_latency = 0
        self.window_count = self.window_bytes = self.window_total_latency = self.window_max_latency = 0
        self.reporting_interval_ms = reporting_interval_ms

    def record(self, latency: int, nbytes: int, now_ms: float) -> None:
        self.count += 1
        self.bytes += nbytes
        self.total_latency += latency
        self.max_latency = max(self.max_latency, latency)
        self.window_count += 1
        self.window_bytes += nbytes
        self.window_total_latency += latency
        self.window_max_latency = max(self.window_max_latency, latency)
        if self.iteration % self.sampling == 0:
            self.latencies.append(latency)
        self.iteration += 1
        if now_ms - self.window_start >= self.reporting_interval_ms:
            self.print_window()
            self.window_start = time.time() * 1000
            self.window_count = self.window_bytes = self.window_total_latency = self.window_max_latency = 0

    def print_window(self) -> None:
        elapsed = max(time.time() * 1000 - self.window_start, 1e-3)
        print("%d records sent, %.1f records/sec (%.2f MB/sec), %.1f ms avg latency, %.1f ms max latency." % (  # noqa: UP031 - Java's printf
            self.window_count, 1000.0 * self.window_count / elapsed,
            1000.0 * self.window_bytes / elapsed / (1024 * 1024),
            self.window_total_latency / max(self.window_count, 1), float(self.window_max_latency)),
            file=self.out, flush=True)

    def print_total(self) -> None:
        elapsed = max(time.time() * 1000 - self.start, 1e-3)
        lat = sorted(self.latencies) or [0]
        p50, p95, p99, p999 = (lat[min(int(q * len(lat)), len(lat) - 1)] for q in (0.5, 0.95, 0.99, 0.999))
        print(TOTAL_LINE % (  # noqa: UP031 - Java's printf
                  self.count, 1000.0 * self.count / elapsed, 1000.0 * self.bytes / elapsed / (1024 * 1024),
                  self.total_latency / max(self.count, 1), float(self.max_latency), p50, p95, p99, p999),
              file=self.out, flush=True)


def _payloads(ns: argparse.Namespace) -> list[bytes]:
    if ns.payload_file is None:
        return []
    path = Path(ns.payload_file)
    print(f"Reading payloads from: {path.absolute()}")
    if not path.exists() or path.stat().st_size == 0:
        raise ToolFailure("File does not exist or empty file provided.")
    delimiter = "\n" if ns.payload_delimiter == "\\n" else ns.payload_delimiter
    payloads = [p.encode() for p in path.read_text(encoding="utf-8").split(delimiter) if p]
    print(f"Number of messages read: {len(payloads)}")
    return payloads


async def perf_produce(ns: argparse.Namespace, stop: asyncio.Event) -> int:
    props = load_properties(ns.producer_config)
    props.update(_perf_props(ns.producer_props))
    bootstrap = ns.bootstrap_server or props.pop("bootstrap.servers", None)
    props.pop("bootstrap.servers", None)
    if not bootstrap:
        raise ToolFailure("Missing required configuration \"bootstrap.servers\" which has no default value.")
    props.setdefault("client.id", "perf-producer-client")
    config = ClientConfig(PRODUCER_DEFAULTS, props)
    payloads = _payloads(ns)
    cluster = Cluster(bootstrap, config.get("client.id"), config.int("request.timeout.ms"), security=config.security)
    await cluster.start()
    producer = Producer(cluster, config)
    stats = ProducerStats(ns.num_records, ns.reporting_interval, sys.stdout)
    progress = Progress(ns.num_records, "rec", not ns.no_progress)
    rng = random.Random(0)
    failures = 0

    def done(fut: asyncio.Future[tuple[int, int]], start_ms: float, size: int) -> None:
        nonlocal failures
        now = time.time() * 1000
        if fut.exception() is None:
            stats.record(int(now - start_ms), size, now)
            progress.update()
        else:
            failures += 1
            if failures <= 10:
                print(fut.exception(), file=sys.stderr)

    start = time.monotonic()
    try:
        for i in range(ns.num_records):
            if stop.is_set():
                break
            if payloads:
                payload = payloads[rng.randrange(len(payloads))]
            elif ns.payload_monotonic:
                payload = str(i).encode()
            else:
                payload = rng.randbytes(ns.record_size).translate(LETTERS)
            t0 = time.time() * 1000
            try:
                fut = await producer.send(ns.topic, payload)
            except ProduceError as e:
                raise ToolFailure(str(e)) from None
            size = len(payload)
            fut.add_done_callback(functools.partial(done, start_ms=t0, size=size))
            if ns.throughput > 0:
                ahead = (i + 1) / ns.throughput - (time.monotonic() - start)
                if ahead > 0:
                    await asyncio.sleep(ahead)
            elif i % 256 == 0:
                await asyncio.sleep(0)  # let responses in
        await producer.close()
    finally:
        progress.close()
        await cluster.close()
    stats.print_total()
    return 1 if failures else 0


def _perf_props(args: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for arg in args or ():
        pieces = arg.split("=")
        if len(pieces) != 2:  # Kafka's ProducerPerformance.readProps
            raise ToolFailure(f"Invalid property: {arg}")
        out[pieces[0]] = pieces[1]
    return out


_JAVA_DATE = [("yyyy", "%Y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("mm", "%M"), ("ss", "%S"), ("SSS", "{ms}")]


def java_date(pattern: str, epoch_ms: float) -> str:
    """The subset of SimpleDateFormat the perf tool's --date-format uses (yyyy MM dd HH mm ss SSS)."""
    fmt = pattern
    for java, py in _JAVA_DATE:
        fmt = fmt.replace(java, py)
    moment = dt.datetime.fromtimestamp(epoch_ms / 1000)
    return moment.strftime(fmt).replace("{ms}", f"{int(epoch_ms) % 1000:03d}")


async def perf_consume(ns: argparse.Namespace, stop: asyncio.Event) -> int:
    props = load_properties(ns.consumer_config)
    props.update(parse_kv_args(ns.command_property))
    props["auto.offset.reset"] = "latest" if ns.from_latest else "earliest"
    props["max.partition.fetch.bytes"] = str(ns.fetch_size)
    props.setdefault("client.id", "perf-consumer-client")
    props["group.id"] = ns.group or f"perf-consumer-{random.randrange(100_000)}"
    config = ClientConfig(CONSUMER_DEFAULTS, props)
    out = sys.stdout
    if not ns.hide_header:
        extra = ", rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
        first = "time, threadId" if ns.show_detailed_stats else "start.time, end.time"
        print(f"{first}, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec{extra}", file=out, flush=True)
    cluster = Cluster(ns.bootstrap_server, config.get("client.id"), config.int("request.timeout.ms"), security=config.security)
    progress = Progress(ns.messages, "msg", not ns.no_progress)
    messages = nbytes = last_messages = last_bytes = 0
    start_ms = time.time() * 1000
    join_ms = 0.0
    join_round = 0.0
    member: GroupMember | None = None
    consumer: Consumer | None = None
    try:
        await cluster.start()
        if ns.topic is not None:
            md = await cluster.metadata([ns.topic])
            if not md["topics"] or md["topics"][0]["error_code"]:
                raise ToolFailure(f"org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
                                  f"Topic {ns.topic} does not exist")
        consumer = Consumer(cluster, config)
        member = GroupMember(cluster, config.get("group.id"), [ns.topic] if ns.topic else None, ns.include,
                             config.int("session.timeout.ms"), config.int("max.poll.interval.ms"),
                             config.int("heartbeat.interval.ms"))

        async def join() -> None:
            nonlocal join_ms, join_round
            assert member is not None and consumer is not None
            t0 = time.time() * 1000
            assigned = await member.join()
            committed = await member.committed(assigned)
            default = LATEST if ns.from_latest else EARLIEST
            await consumer.assign({tp: committed.get(tp, default) for tp in assigned})
            took = time.time() * 1000 - t0
            join_ms += took
            join_round += took

        await join()
        last_report = last_consumed = time.time() * 1000
        while messages < ns.messages and time.time() * 1000 - last_consumed <= ns.timeout and not stop.is_set():
            if member.rejoin_needed:
                await member.commit(consumer.consumed)
                await join()
            record = await consumer.next_record(0.1)
            now = time.time() * 1000
            if record is None:
                continue
            last_consumed = now
            messages += 1
            nbytes += len(record.key or b"") + len(record.value or b"")
            progress.update()
            if now - last_report >= ns.reporting_interval:
                if ns.show_detailed_stats:
                    _print_progress(out, ns.date_format, nbytes, last_bytes, messages, last_messages,
                                    last_report, now, join_round)
                join_round = 0.0
                last_report, last_messages, last_bytes = now, messages, nbytes
        if messages < ns.messages:
            print(f"WARNING: Exiting before consuming the expected number of messages: timeout ({ns.timeout} ms) "
                  "exceeded. You can use the --timeout option to increase the timeout.", file=out)
        await member.commit(consumer.consumed)
    finally:
        progress.close()
        if consumer is not None:
            await consumer.cancel_fetches()
        if member is not None:
            await member.leave()
        await cluster.close()
    end_ms = time.time() * 1000
    if not ns.show_detailed_stats:
        elapsed_s = max((end_ms - start_ms) / 1000, 1e-6)
        fetch_ms = max(end_ms - start_ms - join_ms, 1e-3)
        mb = nbytes / (1024 * 1024)
        print("%s, %s, %.4f, %.4f, %d, %.4f, %d, %d, %.4f, %.4f" % (  # noqa: UP031
            java_date(ns.date_format, start_ms), java_date(ns.date_format, end_ms), mb, mb / elapsed_s,
            messages, messages / elapsed_s, int(join_ms), int(fetch_ms), mb / (fetch_ms / 1000),
            messages / (fetch_ms / 1000)), file=out, flush=True)
    return 0


def _print_progress(out: Any, date_format: str, nbytes: int, last_bytes: int, messages: int, last_messages: int,
                    start_ms: float, end_ms: float, join_round: float) -> None:
    elapsed = max(end_ms - start_ms, 1e-3)
    mb = nbytes / (1024 * 1024)
    interval_mb = (nbytes - last_bytes) / (1024 * 1024)
    fetch_ms = end_ms - start_ms - join_round
    fetch_mb_s = 0.0 if fetch_ms <= 0 else 1000.0 * interval_mb / fetch_ms
    fetch_n_s = 0.0 if fetch_ms <= 0 else 1000.0 * (messages - last_messages) / fetch_ms
    print("%s, %d, %.4f, %.4f, %d, %.4f, %d, %d, %.4f, %.4f" % (  # noqa: UP031
        java_date(date_format, end_ms), 0, mb, 1000.0 * interval_mb / elapsed, messages,
        1000.0 * (messages - last_messages) / elapsed, int(join_round), int(fetch_ms), fetch_mb_s, fetch_n_s),
        file=out, flush=True)


def _positive(name: str) -> Any:
    def convert(text: str) -> int:
        if not re.fullmatch(r"-?[0-9]+", text):
            raise argparse.ArgumentTypeError(f"invalid integer: {text}")
        value = int(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{name} should be greater than zero")
        return value
    return convert


def run_produce(ns: argparse.Namespace) -> int:
    if (ns.record_size is None) + (ns.payload_file is None) + (not ns.payload_monotonic) != 2:
        ns.perf_produce_parser.error("exactly one of --record-size, --payload-file or --payload-monotonic is required")
    if ns.producer_props is None and ns.producer_config is None and ns.bootstrap_server is None:
        ns.perf_produce_parser.error("Either --producer-props or --producer.config must be specified.")
    try:
        return run_tool(lambda stop: perf_produce(ns, stop))
    except ConfigError as e:
        print(f"ERROR {e}", file=sys.stderr)
        return 1


def run_consume(ns: argparse.Namespace) -> int:
    return run_tool(lambda stop: perf_consume(ns, stop))


def add_parser(sub: Any) -> None:
    perf = sub.add_parser("perf", help="producer and consumer performance tests (kafka-*-perf-test.sh)",
                          description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    tests = perf.add_subparsers(dest="perf_command", metavar="{produce,consume}", required=True)

    p = tests.add_parser("produce", help="kafka-producer-perf-test.sh",
                         description="Send records as fast as allowed and report Kafka's producer perf-test lines.")
    p.add_argument("--topic", required=True, help="produce records to this topic")
    p.add_argument("--num-records", required=True, type=_positive("--num-records"), help="number of records to produce")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--record-size", type=_positive("--record-size"), help="record size in bytes")
    group.add_argument("--payload-file", help="UTF-8 file of payloads, split by --payload-delimiter, picked at random")
    group.add_argument("--payload-monotonic", action="store_true", help="payloads are 0, 1, 2, ... as text")
    p.add_argument("--payload-delimiter", default="\\n", help="delimiter of --payload-file (default \\n)")
    p.add_argument("--throughput", required=True, type=float,
                   help="throttle to about this many records/s; -1 for no limit")
    p.add_argument("--producer-props", "--command-property", dest="producer_props", nargs="+", metavar="PROP-NAME=PROP-VALUE",
                   help="producer properties (bootstrap.servers, acks, linger.ms, batch.size, compression.type, ...)")
    p.add_argument("--producer.config", "--command-config", dest="producer_config", metavar="CONFIG-FILE",
                   help="producer properties file")
    p.add_argument("--reporting-interval", type=_positive("--reporting-interval"), default=REPORTING_INTERVAL_MS,
                   metavar="INTERVAL-MS", help="milliseconds between window lines (default 5000)")
    p.add_argument("--bootstrap-server", help="the server(s) to connect to (instead of bootstrap.servers in the properties)")
    add_progress_flag(p)
    p.set_defaults(func=run_produce, perf_produce_parser=p)

    c = tests.add_parser("consume", help="kafka-consumer-perf-test.sh",
                         description="Read records in a consumer group and report Kafka's consumer perf-test CSV.")
    c.add_argument("--bootstrap-server", required=True, help="REQUIRED: the server(s) to connect to")
    which = c.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="the topic to consume from")
    which.add_argument("--include", metavar="REGEX", help="a regular expression of the topics to consume from")
    c.add_argument("--messages", "--num-records", dest="messages", required=True, type=_positive("--messages"),
                   help="REQUIRED: the number of records to consume")
    c.add_argument("--group", help="the group id (default perf-consumer-NNNNN)")
    c.add_argument("--timeout", type=int, default=10_000, help="the most milliseconds between records (default 10000)")
    c.add_argument("--show-detailed-stats", action="store_true", help="a line per --reporting-interval")
    c.add_argument("--reporting-interval", type=int, default=5000, help="milliseconds between detailed lines (default 5000)")
    c.add_argument("--from-latest", action="store_true", help="without a committed offset, start at the latest record")
    c.add_argument("--fetch-size", type=int, default=1024 * 1024, help="max.partition.fetch.bytes (default 1048576)")
    c.add_argument("--date-format", default="yyyy-MM-dd HH:mm:ss:SSS", help="date format (yyyy MM dd HH mm ss SSS)")
    c.add_argument("--hide-header", action="store_true", help="no CSV header")
    c.add_argument("--consumer.config", "--command-config", dest="consumer_config", metavar="FILE",
                   help="consumer properties file")
    c.add_argument("--command-property", dest="command_property", nargs="+", metavar="PROP-NAME=PROP-VALUE",
                   help="consumer properties")
    add_progress_flag(c)
    c.set_defaults(func=run_consume)
