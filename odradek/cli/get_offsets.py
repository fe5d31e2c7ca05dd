"""``odradek get-offsets``: the offsets of topic partitions, as ``kafka-get-offsets.sh``.

``odradek get-offsets --bootstrap-server HOST:PORT [--topic REGEX] [--partitions 0,1]
[--topic-partitions PATTERNS] [--time T] [--exclude-internal-topics] [--command-config F]``

``--time``: ``-1``/``latest`` (default), ``-2``/``earliest``, ``-3``/``max-timestamp``,
``-4``/``earliest-local``, ``-5``/``latest-tiered``, or a timestamp in ms (the first offset
whose timestamp is at or after it). ``--topic-partitions`` takes Kafka's patterns
``TOPIC_REGEX[:P | :P1-P2 | :P1- | :-P2]`` separated by commas (a range's end is exclusive).
One ``topic:partition:offset`` line per partition, ordered as Kafka's tool orders them (by
``topic-partition`` as a string); partitions without an offset for the time are left out. Each
ListOffsets goes to the partition's leader. Errors: ``Error occurred: <message>``.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from typing import Any

from odradek.cli.admin import AdminClient, AdminError, kafka_exception
from odradek.cli.tool_common import add_connection_args, require_bootstrap, run_admin
from odradek.cli.txn_admin import default_message
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors

SPECS = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4, "latest-tiered": -5}
_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
INT_MAX = 2**31 - 1


def _exception(code: int) -> str:
    """ExecutionException.getMessage(): the cause's toString()."""
    return kafka_exception(code, default_message(code))


def parse_time(text: str) -> int:
    if text in SPECS:
        return SPECS[text]
    try:
        return int(text)
    except ValueError:
        raise AdminError(
            f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / -3 or max-timestamp "
            "/ -4 or earliest-local / -5 or latest-tiered, or a specified long format timestamp"
        ) from None


def include_list(regex: str) -> re.Pattern[str]:
    """Kafka's IncludeList: commas mean alternatives, surrounding quotes are dropped."""
    return re.compile(re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", regex.strip().replace(",", "|"))))


@dataclass(frozen=True)
class Rule:
    topic: re.Pattern[str]
    low: int = 0
    high: int = INT_MAX  # exclusive
    only: frozenset[int] | None = None  # a set of partitions (empty: all)

    def topic_allowed(self, name: str) -> bool:
        return self.topic.fullmatch(name) is not None

    def allowed(self, name: str, partition: int) -> bool:
        if not self.topic_allowed(name):
            return False
        if self.only is not None:
            return not self.only or partition in self.only
        return self.low <= partition < self.high


def parse_rules(topic_partitions: str | None, topic: str | None, partitions: str | None) -> list[Rule]:
    if topic_partitions is not None:
        rules = []
        for spec in topic_partitions.split(","):
            mt = _RULE.fullmatch(spec)
            if mt is None:
                raise AdminError(f"Invalid rule specification: {spec}")
            t, single, low, high = (g or None for g in mt.groups())
            pattern = include_list(t or ".*")
            if single is not None:
                rules.append(Rule(pattern, only=frozenset({int(single)})))
            else:
                rules.append(Rule(pattern, int(low) if low else 0, int(high) if high else INT_MAX))
        return rules
    only: frozenset[int] = frozenset()
    if partitions:
        try:
            only = frozenset(int(p) for p in partitions.split(","))
        except ValueError:
            raise AdminError(
                f"--partitions expects a comma separated list of numeric partition ids, but received: {partitions}"
            ) from None
    return [Rule(include_list(topic or ".*"), only=only)]


def select_partitions(md: dict[str, Any], rules: list[Rule], exclude_internal: bool) -> list[tuple[str, int, int]]:
    """(topic, partition, leader) for every partition a rule allows."""
    out = []
    for t in md["topics"]:
        if t["error_code"] != Errors.NONE or (exclude_internal and t.get("is_internal")):
            continue
        for p in t["partitions"]:
            if any(r.allowed(t["name"], p["partition_index"]) for r in rules):
                out.append((t["name"], p["partition_index"], p["leader_id"]))
    return out


async def fetch_offsets(admin: AdminClient, opts: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The output lines and the warnings (stderr) of the tool."""
    timestamp = parse_time(opts.time)
    rules = parse_rules(opts.topic_partitions, opts.topic, opts.partitions)
    md = await admin.metadata(None)
    chosen = select_partitions(md, rules, opts.exclude_internal_topics)
    if not chosen:
        raise AdminError("Could not match any topic-partitions with the specified filters")
    brokers = {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}
    by_leader: dict[int, dict[str, list[int]]] = {}
    for topic, part, leader in chosen:
        by_leader.setdefault(leader, {}).setdefault(topic, []).append(part)
    bodies = {
        leader: {
            "replica_id": -1, "isolation_level": 0, "timeout_ms": admin.timeout_ms,
            "topics": [{"name": t, "partitions": [
                {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp, "max_num_offsets": 1}
                for p in parts]} for t, parts in topics.items()],
        }
        for leader, topics in by_leader.items()
    }
    warnings = []
    offsets: dict[str, int] = {}
    unled = {n for n in bodies if n < 0}
    for n in unled:
        for t, parts in by_leader[n].items():
            for p in parts:
                warnings.append(f"Skip getting offsets for topic-partition {t}-{p} due to error: "
                                f"{_exception(Errors.LEADER_NOT_AVAILABLE)}")
        del bodies[n]
    responses = await admin.send_to_nodes(m.LIST_OFFSETS, bodies, brokers)
    for resp in responses.values():
        for t in resp["topics"]:
            for p in t["partitions"]:
                tp = f"{t['name']}-{p['partition_index']}"
                if p["error_code"] != Errors.NONE:
                    warnings.append(f"Skip getting offsets for topic-partition {tp} due to error: "
                                    f"{_exception(p['error_code'])}")
                elif p["offset"] != -1:
                    offsets[tp] = p["offset"]
    lines = []
    for topic, part, _leader in chosen:
        tp = f"{topic}-{part}"
        if tp in offsets:
            lines.append((tp, f"{topic}:{part}:{offsets[tp]}"))
    return [line for _key, line in sorted(lines)], warnings


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "get-offsets", help="offsets of topic partitions (kafka-get-offsets.sh)",
        description="An interactive shell for getting topic-partition offsets, as kafka-get-offsets.sh: "
        "prints topic:partition:offset. Exit codes: 0 done, 1 failed (message on stderr), 2 usage error.",
    )
    add_connection_args(p)
    p.add_argument("--topic", help="the topic (a regular expression); default all")
    p.add_argument("--partitions", metavar="P1,P2", help="comma separated partition ids; default all")
    p.add_argument("--topic-partitions", metavar="PATTERNS",
                   help="comma separated TOPIC_REGEX[:P|:P1-P2|:P1-|:-P2] (not with --topic/--partitions)")
    p.add_argument("--time", default="-1", metavar="T",
                   help="-1/latest (default), -2/earliest, -3/max-timestamp, -4/earliest-local, "
                   "-5/latest-tiered, or a timestamp in ms")
    p.add_argument("--exclude-internal-topics", action="store_true", help="exclude internal topics")
    p.set_defaults(func=lambda opts: run(p, opts))


def run(parser: argparse.ArgumentParser, opts: argparse.Namespace) -> int:
    require_bootstrap(parser, opts)
    if opts.topic_partitions is not None and (opts.topic is not None or opts.partitions is not None):
        parser.error("--topic-partitions cannot be used with --topic or --partitions")

    async def work(admin: AdminClient) -> list[str]:
        lines, warnings = await fetch_offsets(admin, opts)
        for w in warnings:
            print(w, file=sys.stderr)
        return lines

    return run_admin(opts, work, "Error occurred: ", client_id="GetOffsetShell")
