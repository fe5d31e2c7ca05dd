"""``odradek transactions``: inspect transactions and recover hanging ones, as ``kafka-transactions.sh``.

``odradek transactions --bootstrap-server HOST:PORT [--command-config FILE] COMMAND``, COMMAND one of

* ``list [--duration-filter MS] [--state S ...] [--producer-id ID ...]``: ListTransactions to every
  broker; columns TransactionalId, Coordinator, ProducerId, TransactionState. ``--state`` and
  ``--producer-id`` are Odradek's additions (the filters of Kafka's ``ListTransactionsOptions``,
  which its tool does not expose); ``--duration-filter`` needs ListTransactions v1.
* ``describe --transactional-id ID``: FindCoordinator (TRANSACTION), then DescribeTransactions to
  the coordinator; columns CoordinatorId, TransactionalId, ProducerId, ProducerEpoch,
  TransactionState, TransactionTimeoutMs, CurrentTransactionStartTimeMs, TransactionDurationMs,
  TopicPartitions.
* ``describe-producers --topic T --partition P [--broker-id N]``: DescribeProducers to the
  partition leader (or broker N); columns ProducerId, ProducerEpoch, LatestCoordinatorEpoch,
  LastSequence, LastTimestamp, CurrentTransactionStartOffset.
* ``abort --topic T --partition P (--start-offset O | --producer-id ID --producer-epoch E
  --coordinator-epoch C)``: WriteTxnMarkers (ABORT) to the partition leader, as Admin's
  ``abortTransaction``; with ``--start-offset`` the producer is the one DescribeProducers shows
  with a transaction open at that offset. Prints nothing when it succeeds.
* ``find-hanging (--broker-id N | --topic T [--partition P]) [--max-transaction-timeout MIN]``:
  the open transactions (DescribeProducers) whose last write is older than the maximum
  transaction timeout (15 minutes by default) that their coordinator (ListTransactions by
  producer id, then DescribeTransactions) does not know, or no longer has the partition in;
  columns Topic, Partition, ProducerId, ProducerEpoch, CoordinatorEpoch, StartOffset,
  LastTimestamp, Duration(min).

Tables are Kafka's ``ToolsUtils.prettyPrintTable`` (each cell padded to its column, then a tab),
rows in the order Kafka's tool prints them (its HashMaps' iteration order where it iterates
one). Failures print Kafka's ``<what failed>: <cause>. Enable debug logging for additional
detail.`` on stderr with exit code 1; so do bad command lines (usage, then the error). ``--command-config`` may set ``default.api.timeout.ms``, ``request.timeout.ms``,
``retry.backoff.ms``, ``client.id`` and the client security keys (``security.protocol``,
``ssl.*``, ``sasl.mechanism``, ``sasl.jaas.config``; :mod:`odradek.security.client_security`).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn, TextIO

from odradek.cli.admin import AdminError
from odradek.cli.txn_admin import (
    AbortSpec,
    AdminFailure,
    ProducerState,
    TopicPartition,
    TransactionDescription,
    TxnAdmin,
    tp_str,
)
from odradek.java_order import java_hash_order, java_long_hash, java_string_hash
from odradek.protocol.errors import Errors
from odradek.server.kafka_config import parse_properties

PROG = "odradek transactions"
MAX_BATCH_SIZE = 500  # FindHangingTransactionsCommand's batches of topics and partitions
DEBUG_HINT = " Enable debug logging for additional detail."

LIST_HEADERS = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
DESCRIBE_HEADERS = [
    "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions",
]
PRODUCERS_HEADERS = [
    "ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
    "CurrentTransactionStartOffset",
]
HANGING_HEADERS = [
    "Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp",
    "Duration(min)",
]


class ToolExit(Exception):
    """Kafka's printErrorAndExit: the message goes to stderr, the exit code is 1."""


def fail(message: str, cause: Exception | None = None) -> NoReturn:
    if cause is None:
        raise ToolExit(message)
    raise ToolExit(f"{message}: {cause}.{DEBUG_HINT}")


def pretty_table(headers: list[str], rows: list[list[str]]) -> str:
    """Kafka's ToolsUtils.prettyPrintTable: each cell padded to its column's width, then a tab."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    return "".join("".join(c.ljust(widths[i]) + "\t" for i, c in enumerate(r)) + "\n" for r in [headers, *rows])


def tp_hash(tp: TopicPartition) -> int:
    """Java's ``TopicPartition.hashCode``."""
    h = (31 * (31 + tp[1]) + java_string_hash(tp[0])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


# ---- the commands --------------------------------------------------------------------------------


async def cmd_list(admin: TxnAdmin, ns: argparse.Namespace, out: TextIO, now_ms: Callable[[], int]) -> None:
    duration = ns.duration_filter if ns.duration_filter is not None else -1
    try:
        by_broker = await admin.list_transactions(ns.state or [], ns.producer_id or [], duration)
    except AdminFailure as e:
        fail("Failed to list transactions", e)
    rows = [
        [listing.transactional_id, str(broker), str(listing.producer_id), listing.state]
        for broker in java_hash_order(list(by_broker), lambda n: n)
        for listing in by_broker[broker]
    ]
    out.write(pretty_table(LIST_HEADERS, rows))


async def cmd_describe(admin: TxnAdmin, ns: argparse.Namespace, out: TextIO, now_ms: Callable[[], int]) -> None:
    tid: str = ns.transactional_id
    result = (await admin.describe_transactions([tid]))[tid]
    if isinstance(result, AdminFailure):
        fail(f"Failed to describe transaction state of transactional-id `{tid}`", result)
    assert isinstance(result, TransactionDescription)
    start = result.transaction_start_time_ms
    row = [
        str(result.coordinator_id), tid, str(result.producer_id), str(result.producer_epoch), result.state,
        str(result.transaction_timeout_ms),
        "None" if start is None else str(start),
        "None" if start is None else str(now_ms() - start),
        ",".join(tp_str(tp) for tp in java_hash_order(list(dict.fromkeys(result.topic_partitions)), tp_hash)),
    ]
    out.write(pretty_table(DESCRIBE_HEADERS, [row]))


async def cmd_describe_producers(admin: TxnAdmin, ns: argparse.Namespace, out: TextIO, now_ms: Callable[[], int]) -> None:
    tp = (ns.topic, ns.partition)
    result = (await admin.describe_producers([tp], ns.broker_id))[tp]
    if isinstance(result, AdminFailure):
        where = f"broker {ns.broker_id}" if ns.broker_id is not None else "leader"
        fail(f"Failed to describe producers for partition {tp_str(tp)} on {where}", result)
    rows = [
        [
            str(s.producer_id), str(s.producer_epoch),
            str(s.coordinator_epoch if s.coordinator_epoch is not None else -1),
            str(s.last_sequence), str(s.last_timestamp),
            "None" if s.current_txn_start_offset is None else str(s.current_txn_start_offset),
        ]
        for s in result
    ]
    out.write(pretty_table(PRODUCERS_HEADERS, rows))


async def cmd_abort(admin: TxnAdmin, ns: argparse.Namespace, out: TextIO, now_ms: Callable[[], int]) -> None:
    tp = (ns.topic, ns.partition)
    if ns.start_offset is None and ns.producer_id is None:
        fail("The transaction to abort must be identified either with --start-offset (for brokers on 3.0 or "
             "above) or with --producer-id, --producer-epoch, and --coordinator-epoch (for older brokers)")
    if ns.start_offset is None:
        if ns.producer_epoch is None:
            fail("Missing required argument --producer-epoch")
        if ns.coordinator_epoch is None:
            fail("Missing required argument --coordinator-epoch")
        # A transaction that hung before its producer's first commit or abort shows coordinator
        # epoch -1 in DescribeProducers: 0 is no greater than any real one.
        spec = AbortSpec(tp, ns.producer_id, ns.producer_epoch, max(ns.coordinator_epoch, 0))
    else:
        result = (await admin.describe_producers([tp]))[tp]
        if isinstance(result, AdminFailure):
            fail(f"Failed to validate producer state for partition {tp_str(tp)}", result)
        found = [s for s in result if s.current_txn_start_offset == ns.start_offset]
        if not found:
            fail(f"Could not find any open transactions starting at offset {ns.start_offset} on partition "
                 f"{tp_str(tp)}")
        s = found[0]
        spec = AbortSpec(tp, s.producer_id, s.producer_epoch, s.coordinator_epoch or 0)
    try:
        await admin.abort_transaction(spec)
    except AdminFailure as e:
        fail(f"Failed to abort transaction {spec}", e)


def _optional(value: int | None) -> str:
    """Java's ``Optional<Integer>.toString()``."""
    return "Optional.empty" if value is None else f"Optional[{value}]"


async def _partitions_to_search(admin: TxnAdmin, ns: argparse.Namespace) -> list[TopicPartition]:
    if ns.topic is not None and ns.partition is not None:
        return [(ns.topic, ns.partition)]
    if ns.topic is not None:
        topics = [ns.topic]
    else:
        try:
            topics = await admin.list_topics()
        except AdminFailure as e:
            fail("Failed to list topics", e)
    out: list[TopicPartition] = []
    for i in range(0, len(topics), MAX_BATCH_SIZE):
        batch = topics[i:i + MAX_BATCH_SIZE]
        try:
            described = await admin.describe_topics(batch)
        except AdminFailure as e:
            fail(f"Failed to describe {len(batch)} topics", e)
        for topic in java_hash_order(list(described), java_string_hash):
            for p in described[topic]:
                if ns.broker_id is None or ns.broker_id in p["replica_nodes"]:
                    out.append((topic, p["partition_index"]))
    return out


async def find_hanging(
    admin: TxnAdmin, ns: argparse.Namespace, now_ms: Callable[[], int],
) -> list[tuple[TopicPartition, ProducerState]]:
    """Kafka's FindHangingTransactionsCommand, up to the rows it prints."""
    max_timeout_ms = ns.max_transaction_timeout * 60_000
    candidates: list[tuple[TopicPartition, ProducerState]] = []
    tps = await _partitions_to_search(admin, ns)
    for i in range(0, len(tps), MAX_BATCH_SIZE):
        batch = tps[i:i + MAX_BATCH_SIZE]
        results = await admin.describe_producers(batch, ns.broker_id)
        failures = [r for r in results.values() if isinstance(r, AdminFailure)]
        if failures:
            fail(f"Failed to describe producers for {len(batch)} partitions on broker {_optional(ns.broker_id)}",
                 failures[0])
        now = now_ms()
        for tp in java_hash_order(list(results), tp_hash):
            for s in results[tp]:
                if s.current_txn_start_offset is not None and now - s.last_timestamp > max_timeout_ms:
                    candidates.append((tp, s))
    if not candidates:
        return []
    by_pid: dict[int, list[tuple[TopicPartition, ProducerState]]] = {}
    for c in candidates:
        by_pid.setdefault(c[1].producer_id, []).append(c)
    pids = java_hash_order(list(by_pid), java_long_hash)
    try:
        listings = await admin.list_transactions(producer_ids=pids)
    except AdminFailure as e:
        fail(f"Failed to list transactions for {len(pids)} producers", e)
    tids: dict[int, str] = {}
    for broker_listings in listings.values():
        for listing in broker_listings:
            if listing.producer_id in by_pid:
                tids[listing.producer_id] = listing.transactional_id
    descriptions: dict[str, TransactionDescription | None] = {}
    if tids:
        described = await admin.describe_transactions(list(dict.fromkeys(tids.values())))
        for tid, d in described.items():
            if isinstance(d, AdminFailure):
                if d.code != Errors.TRANSACTIONAL_ID_NOT_FOUND:
                    fail(f"Failed to describe {len(tids)} transactions", d)
                descriptions[tid] = None
            else:
                descriptions[tid] = d
    hanging: list[tuple[TopicPartition, ProducerState]] = []
    for pid in pids:
        known = tids.get(pid)
        desc = descriptions.get(known) if known is not None else None
        for tp, s in by_pid[pid]:
            # The coordinator lists the partitions of an ongoing transaction, and those still
            # owed a marker while it prepares to commit or abort: those it will complete.
            if desc is None or tp not in desc.topic_partitions:
                hanging.append((tp, s))
    return hanging


async def cmd_find_hanging(admin: TxnAdmin, ns: argparse.Namespace, out: TextIO, now_ms: Callable[[], int]) -> None:
    if ns.topic is None and ns.broker_id is None:
        fail("The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search")
    if ns.partition is not None and ns.topic is None:
        fail("The --partition argument requires --topic to be provided")
    hanging = await find_hanging(admin, ns, now_ms)
    now = now_ms()
    rows = [
        [
            tp[0], str(tp[1]), str(s.producer_id), str(s.producer_epoch),
            str(s.coordinator_epoch if s.coordinator_epoch is not None else -1),
            str(s.current_txn_start_offset if s.current_txn_start_offset is not None else -1),
            str(s.last_timestamp), str((now - s.last_timestamp) // 60_000),
        ]
        for tp, s in hanging
    ]
    out.write(pretty_table(HANGING_HEADERS, rows))


COMMANDS: dict[str, Callable[[TxnAdmin, argparse.Namespace, TextIO, Callable[[], int]], Any]] = {
    "list": cmd_list,
    "describe": cmd_describe,
    "describe-producers": cmd_describe_producers,
    "abort": cmd_abort,
    "find-hanging": cmd_find_hanging,
}


# ---- the command line ----------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """Bad arguments: the usage and the error on stderr, exit code 1 (as argparse4j in Kafka's tool)."""

    def error(self, message: str) -> NoReturn:
        required = "the following arguments are required: "
        if message.startswith(required):  # argparse4j names the first one
            first = message[len(required):].split(", ")[0]
            message = "too few arguments" if first == "COMMAND" else f"argument {first} is required"
        self.print_usage(sys.stderr)
        self.exit(1, f"{PROG}: error: {message}\n")


def _java_number(java_type: str, bits: int) -> Callable[[str], int]:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def convert(text: str) -> int:
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise argparse.ArgumentTypeError(
                f"could not convert '{text}' to {java_type} (For input string: \"{text}\")")
        value = int(text)
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(
                f"could not convert '{text}' to {java_type} (Value out of range. Value:\"{text}\" Radix:10)")
        return value

    convert.__name__ = java_type
    return convert


SHORT, INTEGER, LONG = _java_number("Short", 16), _java_number("Integer", 32), _java_number("Long", 64)


def _add_common(p: argparse.ArgumentParser, suppress: bool) -> None:
    default = argparse.SUPPRESS if suppress else None
    p.add_argument("--bootstrap-server", metavar="host:port", default=default,
                   help="hostname and port for the broker to connect to, in the form `host:port` (multiple "
                   "comma-separated entries can be given)")
    p.add_argument("--command-config", metavar="FILE", default=default,
                   help="property file containing configs to be passed to admin client")


def build_parser() -> _Parser:
    parser = _Parser(
        prog=PROG,
        description="This tool is used to analyze the transactional state of producers in the cluster. "
        "It can be used to detect and recover from hanging transactions.",
    )
    _add_common(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    ls = sub.add_parser("list", help="list transactions")
    ls.add_argument("--duration-filter", type=LONG,
                    help="Duration (in millis) to filter by: if < 0, all transactions will be returned; "
                    "otherwise, only transactions running longer than this duration will be returned")
    ls.add_argument("--state", action="append", help="only transactions in this state (repeatable; Odradek's addition)")
    ls.add_argument("--producer-id", type=LONG, action="append",
                    help="only transactions of this producer id (repeatable; Odradek's addition)")

    d = sub.add_parser("describe", help="describe the state of an active transactional-id",
                       description="Describe the state of an active transactional-id.")
    d.add_argument("--transactional-id", required=True, help="transactional id")

    dp = sub.add_parser("describe-producers", help="describe the states of active producers for a topic partition")
    dp.add_argument("--broker-id", type=INTEGER,
                    help="optional broker id to describe the producer state on a specific replica")
    dp.add_argument("--topic", required=True, help="topic name")
    dp.add_argument("--partition", type=INTEGER, required=True, help="partition number")

    ab = sub.add_parser("abort", help="abort a hanging transaction (requires administrative privileges)")
    ab.add_argument("--topic", required=True, help="topic name")
    ab.add_argument("--partition", type=INTEGER, required=True, help="partition number")
    new = ab.add_argument_group("Brokers on versions 3.0 and above",
                                "For newer brokers, only the start offset of the transaction to be aborted is required")
    new.add_argument("--start-offset", type=LONG, help="start offset of the transaction to abort")
    old = ab.add_argument_group("Brokers on versions older than 3.0",
                                "For older brokers, you must provide all of these arguments")
    old.add_argument("--producer-id", type=LONG, help="producer id")
    old.add_argument("--producer-epoch", type=SHORT, help="producer epoch")
    old.add_argument("--coordinator-epoch", type=INTEGER, help="coordinator epoch")

    fh = sub.add_parser("find-hanging", help="find hanging transactions")
    fh.add_argument("--broker-id", type=INTEGER, help="broker id to search for hanging transactions")
    fh.add_argument("--max-transaction-timeout", type=INTEGER, default=15,
                    help="maximum transaction timeout in minutes to limit the scope of the search (15 minutes by default)")
    fh.add_argument("--topic", help="topic name to limit search to (required if --partition is specified)")
    fh.add_argument("--partition", type=INTEGER, help="partition number")

    for p in sub.choices.values():  # the connection flags may come after the command too
        _add_common(p, suppress=True)
    return parser


def _load_props(path: str | None) -> dict[str, str]:
    if path is None:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            props = parse_properties(f.read())
    except OSError as e:
        fail("Failed to load admin client properties", ToolExit(e.filename or str(e)))
    return props


def _resolvable(host: str) -> bool:
    try:
        socket.getaddrinfo(host, None)
        return True
    except (OSError, UnicodeError):
        return False


def execute(argv: list[str], out: TextIO | None = None, now_ms: Callable[[], int] | None = None) -> int:
    """Run the tool on ``argv`` (the arguments after ``transactions``); the exit code."""
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    if ns.bootstrap_server is None:
        parser.print_usage(sys.stderr)
        print(f"{PROG}: error: argument --bootstrap-server is required", file=sys.stderr)
        return 1
    stdout = out or sys.stdout
    clock = now_ms or (lambda: int(time.time() * 1000))

    async def main() -> None:
        props = _load_props(ns.command_config)
        try:
            admin = TxnAdmin(ns.bootstrap_server, props)
            if not any(_resolvable(host) for host, _ in admin.bootstrap):
                raise AdminError("No resolvable bootstrap urls given in bootstrap.servers")
        except (AdminError, AdminFailure) as e:
            # Kafka's tool dies with the stack trace of Admin.create; its two messages.
            fail("org.apache.kafka.common.KafkaException: Failed to create new KafkaAdminClient\n"
                 f"Caused by: org.apache.kafka.common.config.ConfigException: {e}")
        try:
            await COMMANDS[ns.command](admin, ns, stdout, clock)
        finally:
            await admin.close()

    try:
        asyncio.run(main())
    except ToolExit as e:
        print(e, file=sys.stderr)
        return 1
    stdout.flush()
    return 0


def run(args: argparse.Namespace) -> int:
    return execute(list(args.transactions_args))


def add_parser(sub: Any) -> None:
    # Everything after ``transactions`` goes to the tool's own parser (build_parser), whose
    # errors exit 1 as Kafka's do.
    p = sub.add_parser("transactions", add_help=False, prefix_chars="\0",
                       help="list, describe, abort and find hanging transactions (kafka-transactions.sh)")
    p.add_argument("transactions_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=run)
