"""``odradek topics``: list, create, delete and describe topics, as ``kafka-topics.sh``.

``odradek topics --bootstrap-server HOST:PORT (--list | --describe | --create | --alter |
--delete) [--topic T] [--topic-id ID] [--partitions N] [--replication-factor R]
[--replica-assignment A] [--config K=V] [--if-exists] [--if-not-exists]
[--under-replicated-partitions] [--unavailable-partitions] [--under-min-isr-partitions]
[--at-min-isr-partitions] [--topics-with-overrides] [--exclude-internal] [--command-config F]``

``--alter --partitions N`` increases the partition count (CreatePartitions), with
``--replica-assignment`` for all partitions (only the new ones are sent, as Kafka's tool does);
topic configs are changed with ``odradek configs`` (Kafka 4's TopicCommand refuses ``--config``
with ``--alter``). Failures print Kafka's ``Error while executing topic command : <message>``
(on stderr: see :mod:`odradek.cli.tool_common` for the exit codes).

``--describe`` prints Kafka's TopicCommand lines: per topic ``Topic: T\\tTopicId: ID\\t
PartitionCount: N\\tReplicationFactor: R\\tConfigs: k=v,...`` (the non-default configs), then per
partition ``\\tTopic: T\\tPartition: P\\tLeader: L|none\\tReplicas: ...\\tIsr: ...`` with
``\\tAdding Replicas: ...\\tRemoving Replicas: ...`` during a reassignment and ``\\tElr: N/A\\t
LastKnownElr: N/A`` (what Kafka 4's tool prints for a cluster without DescribeTopicPartitions,
which Odradek does not serve: the partitions come from Metadata). With the report options only
the matching partitions are printed, without the topic lines. ``--topic`` is a regular
expression, as Kafka's include list. Topics come in Kafka's order (its Admin client's HashMap).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import re
import uuid
from typing import Any

from odradek.cli.admin import AdminClient, AdminError
from odradek.cli.tool_common import add_connection_args, run_admin
from odradek.cli.txn_admin import default_message
from odradek.java_order import java_hash_map_order
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.message_json import uuid_to_kafka

_DEFAULT_CONFIG_SOURCE = 5  # DescribeConfigs DEFAULT_CONFIG: Admin's ConfigEntry.isDefault()
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def _ids(nodes: list[int]) -> str:
    return ",".join(str(n) for n in nodes)


def partition_line(topic: str, p: dict[str, Any], reassignment: dict[str, Any] | None, live: set[int]) -> str:
    """A leader that is not a live broker is ``none``, as Kafka's Admin has no Node for it."""
    leader = p["leader_id"]
    parts = [
        f"\tTopic: {topic}",
        f"\tPartition: {p['partition_index']}",
        f"\tLeader: {leader if leader >= 0 and leader in live else 'none'}",
        f"\tReplicas: {_ids(p['replica_nodes'])}",
        f"\tIsr: {_ids(p['isr_nodes'])}",
    ]
    if reassignment is not None:
        parts.append(f"\tAdding Replicas: {_ids(reassignment['adding_replicas'])}")
        parts.append(f"\tRemoving Replicas: {_ids(reassignment['removing_replicas'])}")
    parts.append("\tElr: N/A\tLastKnownElr: N/A")
    return "".join(parts)


def replication_factor(p: dict[str, Any], reassignment: dict[str, Any] | None) -> int:
    if reassignment is not None and (reassignment["adding_replicas"] or reassignment["removing_replicas"]):
        return len(reassignment["replicas"]) - len(reassignment["adding_replicas"])
    return len(p["replica_nodes"])


def describe_lines(
    topics: list[dict[str, Any]],
    configs: dict[str, list[dict[str, Any]]],
    reassignments: dict[tuple[str, int], dict[str, Any]],
    live: set[int],
    opts: argparse.Namespace,
) -> list[str]:
    report = opts.under_replicated_partitions or opts.unavailable_partitions or opts.under_min_isr_partitions or opts.at_min_isr_partitions
    lines: list[str] = []
    for t in topics:
        name = t["name"]
        parts = sorted(t["partitions"], key=lambda p: p["partition_index"])
        entries = configs.get(name, [])
        overrides_only = getattr(opts, "topics_with_overrides", False)
        conf = ",".join(
            f"{c['name']}={c['value']}" for c in entries if c.get("config_source") != _DEFAULT_CONFIG_SOURCE
        )
        if not report and (conf or not overrides_only):
            first = parts[0] if parts else None
            rf = replication_factor(first, reassignments.get((name, first["partition_index"]))) if first else 0
            head = f"Topic: {name}"
            if t["topic_id"].int != 0:
                head += f"\tTopicId: {uuid_to_kafka(t['topic_id'])}"
            lines.append(f"{head}\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}\tConfigs: {conf}")
        min_isr = int(next((c["value"] for c in entries if c["name"] == "min.insync.replicas"), "1") or "1")
        for p in parts:
            r = reassignments.get((name, p["partition_index"]))
            has_leader = p["leader_id"] >= 0
            show = not report and not overrides_only
            show |= opts.under_replicated_partitions and replication_factor(p, r) - len(p["isr_nodes"]) > 0
            show |= opts.unavailable_partitions and (not has_leader or p["leader_id"] not in live)
            show |= opts.under_min_isr_partitions and (not has_leader or len(p["isr_nodes"]) < min_isr)
            show |= opts.at_min_isr_partitions and len(p["isr_nodes"]) == min_isr
            if show:
                lines.append(partition_line(name, p, r, live))
    return lines


def _select(names: list[str], pattern: str | None, exclude_internal: bool) -> list[str]:
    out = sorted(names)
    if exclude_internal:
        out = [n for n in out if n not in INTERNAL_TOPICS]
    if pattern is not None:
        rx = re.compile(pattern)
        out = [n for n in out if rx.fullmatch(n)]
    return out


def _topic_id(text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return uuid.UUID(bytes=raw)
    except (ValueError, binascii.Error) as e:
        raise AdminError(f"Invalid topic id: {text}") from e


async def _describe(admin: AdminClient, opts: argparse.Namespace) -> list[str]:
    notes = []
    if opts.if_exists and opts.topic and opts.topic_id:
        notes.append("Only topic id will be used when both --topic and --topic-id are specified and topicId is not Uuid.ZERO_UUID")
    return [*notes, *await _describe_topics(admin, opts)]


async def _describe_topics(admin: AdminClient, opts: argparse.Namespace) -> list[str]:
    md = await admin.metadata(None)
    topic_id = _topic_id(opts.topic_id) if opts.topic_id else None
    if topic_id is not None and topic_id.int != 0:
        # Kafka: a non-zero --topic-id wins over --topic.
        names = [t["name"] for t in md["topics"] if t["topic_id"] == topic_id]
        if opts.exclude_internal:
            names = [n for n in names if n not in INTERNAL_TOPICS]
        if not names and not opts.if_exists:
            raise AdminError(f"TopicId '{opts.topic_id}' does not exist as expected")
    else:
        names = _select([t["name"] for t in md["topics"]], opts.topic, opts.exclude_internal)
        if opts.topic and not names and not opts.if_exists:
            raise AdminError(f"Topic '{opts.topic}' does not exist as expected")
    # Kafka's tool prints the topics in the order of the Admin client's result: a HashMap sized
    # for them (DescribeTopicsResult.all).
    by_name = {t["name"]: t for t in md["topics"]}
    wanted = [by_name[n] for n in java_hash_map_order(names, initial_capacity=len(names))]
    configs = await admin.describe_topic_configs(names)
    live = {b["node_id"] for b in md["brokers"]}
    reassignments: dict[tuple[str, int], dict[str, Any]] = {}
    if names:
        resp = await admin.list_reassignments([
            {"name": t["name"], "partition_indexes": [p["partition_index"] for p in t["partitions"]]} for t in wanted
        ])
        for t in resp["topics"]:
            for p in t["partitions"]:
                reassignments[(t["name"], p["partition_index"])] = p
    return describe_lines(wanted, configs, reassignments, live, opts)




def _error(code: int, message: str | None) -> AdminError:
    """The message of the exception Kafka's Admin raises (TopicCommand prints getMessage())."""
    return AdminError(message if message else default_message(code))


def parse_replica_assignment(text: str) -> list[list[int]]:
    """``1:2,2:3`` -> [[1, 2], [2, 3]], with TopicCommand's checks."""
    out: list[list[int]] = []
    for i, group in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in group.split(":") if b.strip()]
        except ValueError as e:
            raise AdminError(f"For input string: \"{group}\"") from e
        if len(set(brokers)) != len(brokers):
            raise AdminError(f"Partition replica lists may not contain duplicate entries: {group}")
        if out and len(brokers) != len(out[0]):
            raise AdminError(f"Partition {i} has different replication factor: [{', '.join(map(str, brokers))}]")
        out.append(brokers)
    return out


def _parse_configs(items: list[str] | None) -> list[dict[str, str]]:
    configs = []
    for kv in items or []:
        k, sep, v = kv.partition("=")
        if not sep or not k.strip():
            raise AdminError("requirement failed: Invalid topic config: all configs to be added must be in the format \"key=val\".")
        configs.append({"name": k.strip(), "value": v.strip()})
    return configs


async def _create(admin: AdminClient, opts: argparse.Namespace) -> list[str]:
    lines = []
    if "." in opts.topic or "_" in opts.topic:
        lines.append("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could "
                     "collide. To avoid issues it is best to use either, but not both.")
    if opts.replication_factor is not None and not 1 <= opts.replication_factor <= 32767:
        raise AdminError("The replication factor must be between 1 and 32767 inclusive")
    if opts.partitions is not None and opts.partitions < 1:
        raise AdminError("The partitions must be greater than 0")
    configs = _parse_configs(opts.config)
    assignment = parse_replica_assignment(opts.replica_assignment) if opts.replica_assignment else []
    topic = {
        "name": opts.topic,
        "num_partitions": -1 if assignment else (opts.partitions or -1),
        "replication_factor": -1 if assignment else (opts.replication_factor or -1),
        "assignments": [{"partition_index": i, "broker_ids": b} for i, b in enumerate(assignment)],
        "configs": configs,
    }
    resp = await admin.send(m.CREATE_TOPICS, {"topics": [topic], "timeout_ms": 30_000, "validate_only": False}, top_error=None, controller=True)
    r = resp["topics"][0]
    if r["error_code"] == Errors.TOPIC_ALREADY_EXISTS and opts.if_not_exists:
        return lines
    if r["error_code"] != Errors.NONE:
        raise _error(r["error_code"], r["error_message"])
    return [*lines, f"Created topic {opts.topic}."]


async def _alter(admin: AdminClient, opts: argparse.Namespace) -> list[str]:
    md = await admin.metadata(None)
    names = _select([t["name"] for t in md["topics"]], opts.topic, False)
    if not names:
        if opts.if_exists:
            return []
        raise AdminError(f"Topic '{opts.topic}' does not exist as expected")
    assignment = parse_replica_assignment(opts.replica_assignment) if opts.replica_assignment else None
    current = {t["name"]: len(t["partitions"]) for t in md["topics"]}
    topics = [{
        "name": n, "count": opts.partitions,
        # Kafka's tool sends the assignment of the partitions past the current count.
        "assignments": None if assignment is None else [{"broker_ids": b} for b in assignment[current[n]:]],
    } for n in names]
    resp = await admin.send(m.CREATE_PARTITIONS, {"topics": topics, "timeout_ms": 30_000, "validate_only": False}, top_error=None, controller=True)
    for r in resp["results"]:
        if r["error_code"] != Errors.NONE:
            raise _error(r["error_code"], r["error_message"])
    return []


async def _delete(admin: AdminClient, opts: argparse.Namespace) -> list[str]:
    md = await admin.metadata(None)
    names = _select([t["name"] for t in md["topics"]], opts.topic, False)
    if not names:
        if opts.if_exists:
            return []
        raise AdminError(f"Topic '{opts.topic}' does not exist as expected")
    resp = await admin.send(m.DELETE_TOPICS, {
        "topics": [{"name": n, "topic_id": None} for n in names], "topic_names": names, "timeout_ms": 30_000,
    }, top_error=None, controller=True)
    for r in resp["responses"]:
        if r["error_code"] != Errors.NONE:
            raise _error(r["error_code"], r.get("error_message"))
    return []


async def _main(admin: AdminClient, opts: argparse.Namespace) -> list[str]:
    if opts.describe:
        return await _describe(admin, opts)
    if opts.list:
        md = await admin.metadata(None)
        return _select([t["name"] for t in md["topics"]], opts.topic, opts.exclude_internal)
    if opts.create:
        return await _create(admin, opts)
    if opts.alter:
        return await _alter(admin, opts)
    return await _delete(admin, opts)


_ACTIONS = ("list", "describe", "create", "alter", "delete")


def check_args(parser: argparse.ArgumentParser, opts: argparse.Namespace) -> None:
    """TopicCommandOptions.checkArgs: each failure is a usage error (exit 2)."""
    actions = [a for a in _ACTIONS if getattr(opts, a)]
    if len(actions) != 1:
        parser.error("Command must include exactly one action: --list, --describe, --create, --alter or --delete")
    action = actions[0]
    if not opts.bootstrap_server:
        parser.error("--bootstrap-server must be specified")
    if action == "describe" and opts.if_exists and not opts.topic and not opts.topic_id:
        parser.error("--topic or --topic-id is required to describe a topic")
    if action not in ("list", "describe") and not opts.topic:
        parser.error('Missing required argument "[topic]"')
    if action == "alter":
        if opts.config:
            parser.error('Option combination "[[bootstrap-server], [config]]" can\'t be used with option "[alter]" '
                         "(To alter topic configurations, the kafka-configs tool can be used.)")
        if opts.partitions is None:
            parser.error('Missing required argument "[partitions]"')
    allowed = {
        "config": ("alter", "create"), "partitions": ("alter", "create"), "replication_factor": ("create",),
        "replica_assignment": ("alter", "create"), "under_replicated_partitions": ("describe",),
        "under_min_isr_partitions": ("describe",), "at_min_isr_partitions": ("describe",),
        "unavailable_partitions": ("describe",), "topics_with_overrides": ("describe",),
        "if_exists": ("alter", "delete", "describe"), "if_not_exists": ("create",),
        "exclude_internal": ("list", "describe"), "topic_id": ("describe",),
    }
    for dest, ok in allowed.items():
        if getattr(opts, dest) not in (None, False) and action not in ok:
            parser.error(f'Option "[{dest.replace("_", "-")}]" can\'t be used with option "[{action}]"')
    if action == "create" and opts.replica_assignment and (opts.partitions is not None or opts.replication_factor is not None):
        parser.error('Option "[replica-assignment]" can\'t be used with option "[partitions]" or "[replication-factor]"')


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "topics", help="create, alter, list, describe and delete topics (kafka-topics.sh)",
        description="Create, delete, describe, or change a topic, as kafka-topics.sh. Exit codes: "
        "0 done, 1 the command failed (Kafka's message on stderr), 2 usage error.",
    )
    add_connection_args(p)
    p.add_argument("--list", action="store_true", help="list all available topics")
    p.add_argument("--describe", action="store_true", help="list details for the given topics")
    p.add_argument("--create", action="store_true", help="create a new topic")
    p.add_argument("--alter", action="store_true", help="increase the number of partitions (with --partitions)")
    p.add_argument("--delete", action="store_true", help="delete a topic")
    p.add_argument("--topic", help="the topic (a regular expression, except with --create)")
    p.add_argument("--topic-id", help="the topic id to describe")
    p.add_argument("--partitions", type=int, metavar="N", help="the number of partitions (create, or increase to with --alter)")
    p.add_argument("--replication-factor", type=int, metavar="R", help="the replication factor (--create)")
    p.add_argument("--replica-assignment", metavar="B1:B2,B3:B4", help="manual partition-to-broker assignment")
    p.add_argument("--config", action="append", metavar="NAME=VALUE", help="a topic config override (--create)")
    p.add_argument("--if-exists", action="store_true", help="alter/delete/describe only if the topic exists")
    p.add_argument("--if-not-exists", action="store_true", help="create only if the topic does not exist")
    p.add_argument("--under-replicated-partitions", action="store_true", help="only under-replicated partitions")
    p.add_argument("--unavailable-partitions", action="store_true", help="only partitions without a live leader")
    p.add_argument("--under-min-isr-partitions", action="store_true", help="only partitions with ISR < min.insync.replicas")
    p.add_argument("--at-min-isr-partitions", action="store_true", help="only partitions with ISR = min.insync.replicas")
    p.add_argument("--topics-with-overrides", action="store_true", help="only topics that have overridden configs")
    p.add_argument("--exclude-internal", action="store_true", help="exclude internal topics (list, describe)")
    p.set_defaults(func=lambda opts: run(p, opts))


def run(parser: argparse.ArgumentParser, opts: argparse.Namespace) -> int:
    check_args(parser, opts)
    return run_admin(opts, lambda admin: _main(admin, opts), "Error while executing topic command : ")
