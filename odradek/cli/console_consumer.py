"""``odradek consume``: Kafka's console consumer (kafka-console-consumer.sh).

Prints the records of ``--topic`` (or of the topics matching ``--include``) on standard output,
as Kafka's DefaultMessageFormatter does (``--property print.key=true``, ``print.timestamp``,
``print.partition``, ``print.offset``, ``print.headers``, ``print.value``, ``key.separator``,
``line.separator``, ``headers.separator``, ``null.literal``), or as JSON lines with
``--format json``. Where to start: ``--from-beginning``, ``--partition P --offset
earliest|latest|N``, or ``--from-timestamp MS|ISO-8601`` (an odradek addition; Kafka's tool has
no flag for it): the first record whose timestamp is at or after it, in every partition read
(over committed offsets in a group). With ``--group`` the consumer joins the group (classic
protocol, range assignor) and commits its offsets (enable.auto.commit, default true); without it,
it reads every partition itself and commits nothing.

Ends after ``--max-messages`` records, after ``--timeout-ms`` without a record, or on
SIGINT/SIGTERM, printing ``Processed a total of N messages`` on stderr; exit code 0. An
unknown topic, no reachable broker or a failed request: a message and exit code 1; bad flags:
exit code 2."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import re
import sys
import time
from typing import Any, BinaryIO

from odradek.cli.client_tools import (
    Progress,
    ToolFailure,
    add_encoding_flag,
    add_progress_flag,
    encode_bytes,
    run_tool,
    stdout_is_data_sink,
)
from odradek.clients.cluster import Cluster, TopicPartition
from odradek.clients.config import CONSUMER_DEFAULTS, ClientConfig, load_properties, parse_kv_args
from odradek.clients.consumer import EARLIEST, LATEST, Consumer, ConsumerRecord
from odradek.clients.group import INTERNAL_TOPICS, GroupMember
from odradek.protocol.errors import Errors, error_name


def _bool(props: dict[str, str], key: str, default: bool) -> bool:
    return props[key].strip().lower() == "true" if key in props else default


class DefaultFormatter:
    """Kafka's DefaultMessageFormatter, byte for byte."""

    def __init__(self, props: dict[str, str]) -> None:
        self.timestamp = _bool(props, "print.timestamp", False)
        self.key = _bool(props, "print.key", False)
        self.value = _bool(props, "print.value", True)
        self.partition = _bool(props, "print.partition", False)
        self.offset = _bool(props, "print.offset", False)
        self.headers = _bool(props, "print.headers", False)
        self.key_separator = _unescape(props.get("key.separator", "\t")).encode()
        self.line_separator = _unescape(props.get("line.separator", "\n")).encode()
        self.headers_separator = _unescape(props.get("headers.separator", ",")).encode()
        self.null_literal = props.get("null.literal", "null").encode()

    def format(self, r: ConsumerRecord) -> bytes:
        fields: list[bytes] = []
        if self.timestamp:
            kind = "LogAppendTime" if r.timestamp_type == 1 else "CreateTime"
            fields.append(f"{kind}:{r.timestamp}".encode() if r.timestamp >= 0 else b"NO_TIMESTAMP")
        if self.partition:
            fields.append(f"Partition:{r.partition}".encode())
        if self.offset:
            fields.append(f"Offset:{r.offset}".encode())
        if self.headers:
            if not r.headers:
                fields.append(b"NO_HEADERS")
            else:
                fields.append(self.headers_separator.join(
                    k.encode() + b":" + (v if v is not None else self.null_literal) for k, v in r.headers))
        if self.key:
            fields.append(r.key if r.key is not None else self.null_literal)
        if self.value:
            fields.append(r.value if r.value is not None else self.null_literal)
            return self.key_separator.join(fields) + self.line_separator
        # Kafka's formatter: without the value, a separator follows every field and no line ends
        return b"".join(f + self.key_separator for f in fields[:-1]) + (fields[-1] if fields else b"")


def _unescape(text: str) -> str:
    """Kafka's tools take ``\\t``, ``\\n`` ... literally from a properties file; on a command line
    they arrive as two characters, which are translated here."""
    return text.encode("utf-8").decode("unicode_escape") if "\\" in text else text


class JsonFormatter:
    def __init__(self, encoding: str) -> None:
        self.encoding = encoding

    def format(self, r: ConsumerRecord) -> bytes:
        obj: dict[str, Any] = {
            "topic": r.topic, "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
            "timestampType": "LogAppendTime" if r.timestamp_type == 1 else "CreateTime",
            "key": encode_bytes(r.key, self.encoding), "value": encode_bytes(r.value, self.encoding),
            "headers": [[k, encode_bytes(v, self.encoding)] for k, v in r.headers],
        }
        if self.encoding == "text":  # bytes that are not UTF-8 go out as base64, marked
            for name, data in (("key", r.key), ("value", r.value)):
                if data is not None and not _is_utf8(data):
                    obj[name] = encode_bytes(data, "base64")
                    obj[f"{name}Encoding"] = "base64"
        return json.dumps(obj, ensure_ascii=False).encode() + b"\n"


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 date-time (UTC when no offset is given)."""
    if re.fullmatch(r"-?[0-9]+", text):
        value = int(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"a timestamp cannot be negative: {text}")
        return value
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"'{text}' is neither milliseconds since the epoch nor an ISO-8601 date-time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


def parse_offset(text: str) -> int:
    low = text.lower()
    if low == "earliest":
        return EARLIEST
    if low == "latest":
        return LATEST
    if re.fullmatch(r"[0-9]+", text):
        return int(text)
    raise argparse.ArgumentTypeError(
        f"The provided offset value '{text}' is incorrect. Valid values are 'earliest', 'latest', or a non-negative long.")


def check_flags(p: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    """Kafka's ConsoleConsumerOptions rules and messages, plus --from-timestamp's."""
    if (ns.topic is None) == (ns.include is None):
        p.error("Exactly one of --include/--topic is required. ")
    if ns.partition is not None:
        if ns.topic is None:
            p.error("The topic is required when partition is specified.")
        if ns.from_beginning and ns.offset is not None:
            p.error("Options from-beginning and offset cannot be specified together.")
    elif ns.offset is not None:
        p.error("The partition is required when offset is specified.")
    if ns.from_timestamp is not None and (ns.offset is not None or ns.from_beginning):
        p.error("Option from-timestamp cannot be specified with offset or from-beginning.")
    if ns.max_messages is not None and ns.max_messages <= 0:
        ns.max_messages = None if ns.max_messages < 0 else 0


def consumer_props(p: argparse.ArgumentParser, ns: argparse.Namespace) -> dict[str, str]:
    from_file = load_properties(ns.consumer_config or ns.command_config)
    extra = parse_kv_args(ns.consumer_property)
    groups = {g for g in (ns.group, from_file.get("group.id"), extra.get("group.id")) if g}
    if len(groups) > 1:
        p.error("The group ids provided in different places (directly using '--group', via "
                "'--consumer-property', or via '--consumer.config') do not match. Detected group ids: "
                + ", ".join(f"'{g}'" for g in sorted(groups)))
    if groups and ns.partition is not None:
        p.error("Options group and partition cannot be specified together.")
    props = {**from_file, **extra}
    if "auto.offset.reset" in props:
        if ns.from_beginning and props["auto.offset.reset"] != "earliest":
            raise ToolFailure(f"Can't simultaneously specify --from-beginning and "
                              f"'auto.offset.reset={props['auto.offset.reset']}', please remove one option")
    else:
        props["auto.offset.reset"] = "earliest" if ns.from_beginning else "latest"
    if ns.isolation_level is not None or "isolation.level" not in props:
        props["isolation.level"] = ns.isolation_level or "read_uncommitted"
    props.setdefault("client.id", "console-consumer")
    if groups:
        props["group.id"] = groups.pop()
    return props


async def _topic_partitions(cluster: Cluster, ns: argparse.Namespace) -> list[TopicPartition]:
    if ns.topic is not None:
        md = await cluster.metadata([ns.topic])
        code = md["topics"][0]["error_code"] if md["topics"] else Errors.UNKNOWN_TOPIC_OR_PARTITION
        if code == Errors.UNKNOWN_TOPIC_OR_PARTITION:
            raise ToolFailure(f"org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
                              f"Topic {ns.topic} does not exist")
        if code not in (Errors.NONE, Errors.LEADER_NOT_AVAILABLE):
            raise ToolFailure(f"Cannot read topic {ns.topic}: {error_name(code)}")
        parts = cluster.topics[ns.topic].partitions if ns.topic in cluster.topics else []
        if ns.partition is not None:
            if ns.partition not in parts:
                raise ToolFailure(f"org.apache.kafka.common.errors.UnknownTopicOrPartitionException: "
                                  f"Partition {ns.topic}-{ns.partition} does not exist")
            return [(ns.topic, ns.partition)]
        return [(ns.topic, p) for p in parts]
    pattern = re.compile(ns.include)
    md = await cluster.metadata(None)
    return sorted((t["name"], p["partition_index"]) for t in md["topics"]
                  if t["error_code"] == Errors.NONE and t["name"] not in INTERNAL_TOPICS
                  and pattern.fullmatch(t["name"]) for p in t["partitions"])


async def _starts(cluster: Cluster, consumer: Consumer, ns: argparse.Namespace, tps: list[TopicPartition],
                  committed: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    if ns.from_timestamp is not None:
        found = await cluster.list_offsets(tps, {tp: ns.from_timestamp for tp in tps}, int(consumer.read_committed))
        latest = [tp for tp, off in found.items() if off < 0]
        starts = {tp: off for tp, off in found.items() if off >= 0}
        starts.update(dict.fromkeys(latest, LATEST))
        return starts
    if ns.offset is not None:
        return dict.fromkeys(tps, ns.offset)
    if consumer.reset == "none" and any(tp not in committed for tp in tps):
        missing = next(tp for tp in tps if tp not in committed)
        raise ToolFailure(f"org.apache.kafka.clients.consumer.NoOffsetForPartitionException: "
                          f"Undefined offset with no reset policy for partitions: [{missing[0]}-{missing[1]}]")
    default = EARLIEST if consumer.reset == "earliest" else LATEST
    return {tp: committed.get(tp, default) for tp in tps}


async def consume(p: argparse.ArgumentParser, ns: argparse.Namespace, stop: asyncio.Event,
                  out: BinaryIO | None = None) -> int:
    props = consumer_props(p, ns)
    fmt_props = load_properties(ns.formatter_config)
    fmt_props.update(parse_kv_args(ns.property))
    formatter: DefaultFormatter | JsonFormatter = (
        JsonFormatter(ns.encoding) if ns.format == "json" else DefaultFormatter(fmt_props))
    config = ClientConfig(CONSUMER_DEFAULTS, props)
    group_id = config.get("group.id") or None
    auto_commit = group_id is not None and config.bool("enable.auto.commit")
    commit_interval = config.int("auto.commit.interval.ms") / 1000
    cluster = Cluster(ns.bootstrap_server, config.get("client.id"), config.int("request.timeout.ms"), security=config.security)
    sink = out if out is not None else sys.stdout.buffer
    count = 0
    progress = Progress(ns.max_messages, "msg", bool(ns.max_messages) and not ns.no_progress
                        and not stdout_is_data_sink())
    member: GroupMember | None = None
    consumer: Consumer | None = None
    try:
        await cluster.start()
        consumer = Consumer(cluster, config)
        tps = await _topic_partitions(cluster, ns)
        if group_id is not None:
            member = GroupMember(cluster, group_id, [ns.topic] if ns.topic else None, ns.include,
                                 config.int("session.timeout.ms"), config.int("max.poll.interval.ms"),
                                 config.int("heartbeat.interval.ms"))

        async def join() -> None:
            assert member is not None and consumer is not None
            assigned = await member.join()
            committed = await member.committed(assigned)
            await consumer.assign(await _starts(cluster, consumer, ns, assigned, committed))

        if member is not None:
            await join()
        else:
            await consumer.assign(await _starts(cluster, consumer, ns, tps, {}))
        timeout_s = ns.timeout_ms / 1000 if ns.timeout_ms is not None and ns.timeout_ms >= 0 else None
        last_commit = time.monotonic()
        last_record = time.monotonic()
        rebalance_timed_out = False
        while ns.max_messages is None or count < ns.max_messages:
            if stop.is_set():
                break
            if member is not None and member.rejoin_needed:
                if auto_commit:
                    await member.commit(consumer.consumed)
                if timeout_s is None:
                    await join()
                else:
                    # --timeout-ms bounds the rebalance too (Kafka's poll(timeout) does): a
                    # rebalance stuck waiting for a member that never rejoins ends the consumer.
                    try:
                        await asyncio.wait_for(join(), max(0.1, last_record + timeout_s - time.monotonic()))
                    except TimeoutError:
                        rebalance_timed_out = True
                        break
            wait = 0.5 if timeout_s is None else max(0.0, min(0.5, last_record + timeout_s - time.monotonic()))
            record = await consumer.next_record(wait)
            if auto_commit and member is not None and time.monotonic() - last_commit >= commit_interval:
                await member.commit(consumer.consumed)
                last_commit = time.monotonic()
            if record is None:
                if timeout_s is not None and time.monotonic() - last_record >= timeout_s:
                    break
                continue
            last_record = time.monotonic()
            try:
                sink.write(formatter.format(record))
                if not consumer.has_buffered():
                    sink.flush()
            except BrokenPipeError:
                print("Unable to write to standard out, closing consumer.", file=sys.stderr)
                count += 1
                break
            count += 1
            progress.update()
        try:
            sink.flush()
        except BrokenPipeError:
            pass
        if member is not None and auto_commit and not rebalance_timed_out:
            await member.commit(consumer.consumed)
    finally:
        progress.close()
        if consumer is not None:
            await consumer.cancel_fetches()
        if member is not None:
            await member.leave()
        await cluster.close()
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def run(ns: argparse.Namespace) -> int:
    p: argparse.ArgumentParser = ns.consume_parser
    check_flags(p, ns)
    return run_tool(lambda stop: consume(p, ns, stop))


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "consume", help="print the records of topics on standard output (kafka-console-consumer.sh)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]",
                   help="REQUIRED: the server(s) to connect to")
    p.add_argument("--topic", help="the topic to consume")
    p.add_argument("--include", metavar="REGEX", help="a regular expression of the topics to consume")
    p.add_argument("--group", help="the consumer group to join (commits its offsets)")
    p.add_argument("--partition", type=int, help="read only this partition (no group)")
    p.add_argument("--offset", type=parse_offset,
                   help="with --partition: where to start, 'earliest', 'latest' (default) or an offset")
    p.add_argument("--from-beginning", action="store_true",
                   help="without a committed offset, start at the earliest record (default: the latest)")
    p.add_argument("--from-timestamp", type=parse_timestamp, metavar="MS|ISO-8601",
                   help="start at the first record with a timestamp at or after this one (odradek's "
                        "addition; Kafka's tool has no flag for it). ISO-8601 without an offset is UTC")
    p.add_argument("--max-messages", type=int, help="stop after this many records (default: no limit)")
    p.add_argument("--timeout-ms", type=int, help="stop when no record came for this long")
    p.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"],
                   help="read_committed: skip records of aborted and open transactions")
    p.add_argument("--property", "--formatter-property", dest="property", action="append", metavar="KEY=VALUE",
                   help="formatter property: print.key, print.value, print.timestamp, print.partition, "
                        "print.offset, print.headers, key.separator, line.separator, headers.separator, null.literal")
    p.add_argument("--formatter-config", metavar="FILE", help="formatter properties file (--property wins)")
    p.add_argument("--consumer-property", "--command-property", dest="consumer_property", action="append",
                   metavar="KEY=VALUE", help="a consumer property")
    p.add_argument("--consumer.config", dest="consumer_config", metavar="FILE",
                   help="consumer properties file (--consumer-property wins)")
    p.add_argument("--command-config", metavar="FILE", help="the same as --consumer.config")
    p.add_argument("--format", choices=["default", "json"], default="default",
                   help="default: Kafka's DefaultMessageFormatter; json: one JSON object a record")
    add_encoding_flag(p, "written")
    add_progress_flag(p)
    p.set_defaults(func=run, consume_parser=p)
