"""``odradek topics``: list, create, delete and describe topics, as ``kafka-topics.sh``.

``odradek topics --bootstrap-server HOST:PORT (--list | --describe | --create | --delete)
[--topic T] [--partitions N] [--replication-factor R] [--replica-assignment A] [--config K=V]
[--under-replicated-partitions] [--unavailable-partitions] [--under-min-isr-partitions]
[--at-min-isr-partitions] [--exclude-internal]``

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
import asyncio
import re
import sys
from typing import Any

from odradek.cli.admin import AdminClient, AdminError, kafka_exception
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
        if not report:
            conf = ",".join(
                f"{c['name']}={c['value']}" for c in entries if c.get("config_source") != _DEFAULT_CONFIG_SOURCE
            )
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
            show = not report
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


async def _describe(admin: AdminClient, opts: argparse.Namespace) -> list[str]:
    md = await admin.metadata(None)
    names = _select([t["name"] for t in md["topics"]], opts.topic, opts.exclude_internal)
    if opts.topic is not None and not names:
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


async def _main(opts: argparse.Namespace) -> list[str]:
    async with AdminClient(opts.bootstrap_server) as admin:
        if opts.describe:
            return await _describe(admin, opts)
        if opts.list:
            md = await admin.metadata(None)
            return _select([t["name"] for t in md["topics"]], opts.topic, opts.exclude_internal)
        if opts.create:
            if opts.topic is None:
                raise AdminError("Missing required argument \"[topic]\"")
            configs = []
            for kv in opts.config or []:
                k, _, v = kv.partition("=")
                configs.append({"name": k.strip(), "value": v.strip()})
            assignments = []
            if opts.replica_assignment:
                for i, group in enumerate(opts.replica_assignment.split(",")):
                    assignments.append({"partition_index": i, "broker_ids": [int(b) for b in group.split(":")]})
            topic = {
                "name": opts.topic,
                "num_partitions": -1 if assignments else (opts.partitions or -1),
                "replication_factor": -1 if assignments else (opts.replication_factor or -1),
                "assignments": assignments, "configs": configs,
            }
            resp = await admin.send(m.CREATE_TOPICS, {"topics": [topic], "timeout_ms": 30_000, "validate_only": False},
                                    top_error=None, controller=True)
            r = resp["topics"][0]
            if r["error_code"] != Errors.NONE:
                raise AdminError(f"Error while executing topic command : {kafka_exception(r['error_code'], r['error_message'])}")
            return [f"Created topic {opts.topic}."]
        if opts.delete:
            md = await admin.metadata(None)
            names = _select([t["name"] for t in md["topics"]], opts.topic, opts.exclude_internal)
            if not names:
                raise AdminError(f"Topic '{opts.topic}' does not exist as expected")
            resp = await admin.send(m.DELETE_TOPICS, {
                "topics": [{"name": n, "topic_id": None} for n in names], "topic_names": names, "timeout_ms": 30_000,
            }, top_error=None, controller=True)
            for r in resp["responses"]:
                if r["error_code"] != Errors.NONE:
                    raise AdminError(kafka_exception(r["error_code"], r.get("error_message")))
            return []
    raise AdminError("Command must include exactly one action: --list, --describe, --create, --alter or --delete")


def run(opts: argparse.Namespace) -> int:
    if opts.bootstrap_server is None:
        print("Only one of --bootstrap-server or --zookeeper must be specified", file=sys.stderr)
        return 1
    try:
        lines = asyncio.run(_main(opts))
    except AdminError as e:
        msg = str(e)
        print(msg if msg.startswith("Error while executing") else f"Error while executing topic command : {msg}")
        return 1
    for line in lines:
        print(line)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("topics", help="list, create, delete and describe topics (kafka-topics.sh)")
    p.add_argument("--bootstrap-server")
    for action in ("list", "describe", "create", "delete"):
        p.add_argument(f"--{action}", action="store_true")
    p.add_argument("--topic")
    p.add_argument("--partitions", type=int)
    p.add_argument("--replication-factor", type=int)
    p.add_argument("--replica-assignment")
    p.add_argument("--config", action="append")
    p.add_argument("--under-replicated-partitions", action="store_true")
    p.add_argument("--unavailable-partitions", action="store_true")
    p.add_argument("--under-min-isr-partitions", action="store_true")
    p.add_argument("--at-min-isr-partitions", action="store_true")
    p.add_argument("--exclude-internal", action="store_true")
    p.add_argument("--command-config", help="ignored: only PLAINTEXT")
    p.set_defaults(func=run)
