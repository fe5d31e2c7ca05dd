"""``odradek reassign``: move partition replicas, as ``kafka-reassign-partitions.sh``.

``odradek reassign --bootstrap-server HOST:PORT [--command-config FILE] [--timeout MS] (--generate --topics-to-move-json-file F
--broker-list 1,2,3 [--disable-rack-aware] | --execute --reassignment-json-file F [--throttle N]
[--additional] | --verify --reassignment-json-file F [--preserve-throttles] | --cancel
--reassignment-json-file F [--preserve-throttles] | --list)``

Kafka's JSON formats: topics to move ``{"version":1,"topics":[{"topic":"foo"}]}``; plans
``{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}``
(written compactly, as Kafka's Jackson does). Output lines are Kafka's ReassignPartitionsCommand's.
``--throttle`` sets ``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas``
on the topics (the moving replicas, as ``partition:broker``) and
``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate`` on the brokers;
``--verify`` removes them once no reassignment is in progress. Log directory moves (a ``log_dirs``
entry other than ``any``) are not supported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from typing import Any

from odradek.cli.admin import AdminClient, AdminError, kafka_exception
from odradek.cli.tool_common import (
    TIMEOUT_MESSAGE,
    add_connection_args,
    admin_client,
    client_settings,
    usage_error,
)
from odradek.controller.replica_placement import (
    BrokerMetadata,
    PlacementError,
    assign_replicas_to_brokers,
)
from odradek.protocol.errors import Errors

TP = tuple[str, int]
ANY_LOG_DIR = "any"
BROKER_LEVEL_THROTTLES = (
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
)
TOPIC_LEVEL_THROTTLES = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
CANNOT_EXECUTE = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to override this and "
    "create a new partition assignment in addition to the existing one. The --additional flag can also be used "
    "to change the throttle by resubmitting the current reassignment."
)
VERIFY_WARNING = (
    "Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is removed."
)
OP_SET, OP_DELETE = 0, 1


def _tp(t: TP) -> str:
    return f"{t[0]}-{t[1]}"


def format_plan(parts: dict[TP, list[int]]) -> str:
    return json.dumps({
        "version": 1,
        "partitions": [
            {"topic": t, "partition": p, "replicas": parts[(t, p)], "log_dirs": [ANY_LOG_DIR] * len(parts[(t, p)])}
            for t, p in sorted(parts)
        ],
    }, separators=(",", ":"))


def parse_plan(text: str) -> list[tuple[TP, list[int]]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise AdminError(f"Error: {e}") from e
    version = data.get("version", 1)
    if version != 1:
        raise AdminError(f"Not supported version field value {version}")
    out: list[tuple[TP, list[int]]] = []
    for p in data.get("partitions") or []:
        tp = (str(p["topic"]), int(p["partition"]))
        replicas = [int(r) for r in p["replicas"]]
        dirs = p.get("log_dirs") or [ANY_LOG_DIR] * len(replicas)
        if len(dirs) != len(replicas):
            raise AdminError(
                f"Size of replicas list {replicas} is different from size of log dirs list {dirs} for partition {_tp(tp)}"
            )
        if any(d != ANY_LOG_DIR for d in dirs):
            raise AdminError("Log directory moves (log_dirs other than \"any\") are not supported")
        out.append((tp, replicas))
    return out


def check_execute_plan(plan: list[tuple[TP, list[int]]]) -> dict[TP, list[int]]:
    if not plan:
        raise AdminError("Partition reassignment list cannot be empty")
    if any(not r for _, r in plan):
        raise AdminError("Partition replica list cannot be empty")
    keys = [tp for tp, _ in plan]
    dup = sorted({tp for tp in keys if keys.count(tp) > 1})
    if dup:
        raise AdminError("Partition reassignment contains duplicate topic partitions: " + ",".join(_tp(t) for t in dup))
    dups = [
        f"{_tp(tp)} contains multiple entries for {','.join(str(b) for b in sorted({b for b in r if r.count(b) > 1}))}"
        for tp, r in plan if len(set(r)) != len(r)
    ]
    if dups:
        raise AdminError("Partition replica lists may not contain duplicate entries: " + ". ".join(dups))
    return dict(plan)


async def _assignment(admin: AdminClient, topics: set[str]) -> tuple[dict[TP, list[int]], dict[str, Any]]:
    md = await admin.metadata(sorted(topics))
    out: dict[TP, list[int]] = {}
    for t in md["topics"]:
        if t["error_code"] != Errors.NONE:
            continue
        for p in t["partitions"]:
            out[(t["name"], p["partition_index"])] = list(p["replica_nodes"])
    return out, md


async def _current_reassignments(admin: AdminClient, topics: list[dict[str, Any]] | None = None) -> dict[TP, dict[str, Any]]:
    resp = await admin.list_reassignments(topics)
    if resp["error_code"] != Errors.NONE:
        raise AdminError(kafka_exception(resp["error_code"], resp["error_message"]))
    return {(t["name"], p["partition_index"]): p for t in resp["topics"] for p in t["partitions"]}


async def _alter(admin: AdminClient, targets: dict[TP, list[int] | None]) -> dict[TP, str]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (t, p), r in sorted(targets.items()):
        by_topic.setdefault(t, []).append({"partition_index": p, "replicas": r})
    resp = await admin.alter_reassignments([{"name": t, "partitions": ps} for t, ps in by_topic.items()])
    errors: dict[TP, str] = {}
    for t in resp["responses"]:
        for p in t["partitions"]:
            code = p["error_code"] or resp["error_code"]
            if code != Errors.NONE:
                errors[(t["name"], p["partition_index"])] = p["error_message"] or resp["error_message"] or Errors(code).name
    return errors


async def _alter_configs(admin: AdminClient, resources: list[tuple[int, str, list[tuple[str, str | None, int]]]]) -> None:
    body = [
        {
            "resource_type": rtype, "resource_name": name,
            "configs": [{"name": k, "config_operation": op, "value": v} for k, v, op in ops],
        }
        for rtype, name, ops in resources
    ]
    if not body:
        return
    resp = await admin.incremental_alter_configs(body)
    for r in resp["responses"]:
        if r["error_code"] != Errors.NONE:
            raise AdminError(kafka_exception(r["error_code"], r["error_message"]))


async def _clear_all_throttles(admin: AdminClient, plan: list[tuple[TP, list[int]]], brokers: set[int]) -> list[str]:
    for _, r in plan:
        brokers |= set(r)
    topics = sorted({tp[0] for tp, _ in plan})
    lines = [
        f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} {','.join(str(b) for b in sorted(brokers))}",
    ]
    await _alter_configs(admin, [(4, str(b), [(k, None, OP_DELETE) for k in BROKER_LEVEL_THROTTLES]) for b in sorted(brokers)])
    lines.append(f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} {','.join(topics)}")
    await _alter_configs(admin, [(2, t, [(k, None, OP_DELETE) for k in TOPIC_LEVEL_THROTTLES]) for t in topics])
    return lines


async def generate(admin: AdminClient, topics_json: str, broker_list: str, rack_aware: bool) -> list[str]:
    try:
        brokers = [int(b) for b in broker_list.split(",")]
    except ValueError as e:
        raise AdminError(f"Error: {e}") from e
    dup = sorted({b for b in brokers if brokers.count(b) > 1})
    if dup:
        raise AdminError(f"Broker list contains duplicate entries: [{', '.join(map(str, dup))}]")
    data = json.loads(topics_json)
    if data.get("version", 1) != 1:
        raise AdminError(f"Not supported version field value {data.get('version')}")
    topics = [str(t["topic"]) for t in data.get("topics") or []]
    dup_t = sorted({t for t in topics if topics.count(t) > 1})
    if dup_t:
        raise AdminError(f"List of topics to reassign contains duplicate entries: [{', '.join(dup_t)}]")
    current, md = await _assignment(admin, set(topics))
    racks = {b["node_id"]: b.get("rack") for b in md["brokers"]}
    metas = [BrokerMetadata(b, racks.get(b) if rack_aware else None) for b in brokers]
    if rack_aware and any(m.rack is not None for m in metas) and any(m.rack is None for m in metas):
        raise AdminError("Not all brokers have rack information for replica rack aware assignment.")
    proposed: dict[TP, list[int]] = {}
    for topic in sorted({tp[0] for tp in current}):
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        try:
            placed = assign_replicas_to_brokers(metas, len(parts), rf, rng=random.Random())
        except PlacementError as e:
            raise AdminError(f"Error: {e.message}") from e
        for pid, replicas in placed.items():
            proposed[(topic, pid)] = replicas
    return [
        "Current partition replica assignment", format_plan(current), "",
        "Proposed partition reassignment configuration", format_plan(proposed),
    ]


async def execute(admin: AdminClient, plan_json: str, throttle: int, additional: bool) -> list[str]:
    proposed = check_execute_plan(parse_plan(plan_json))
    ongoing = await _current_reassignments(admin)
    if not additional and ongoing:
        raise AdminError(CANNOT_EXECUTE)
    current, md = await _assignment(admin, {tp[0] for tp in proposed})
    live = {b["node_id"] for b in md["brokers"]}
    for b in sorted({b for r in proposed.values() for b in r}):
        if b not in live:
            raise AdminError(f"Error: Unknown broker id {b}")
    lines = [
        "Current partition replica assignment", "",
        format_plan({tp: r for tp, r in current.items() if tp in proposed}), "",
        "Save this to use as the --reassignment-json-file option during rollback",
    ]
    if throttle >= 0:
        lines.append(VERIFY_WARNING)
        leader: dict[str, set[str]] = {}
        follower: dict[str, set[str]] = {}
        moving: set[int] = set()
        for (t, p), target in proposed.items():
            r = ongoing.get((t, p))
            if r is not None:
                sources = set(r["replicas"]) - set(r["adding_replicas"])
            elif (t, p) in current:
                sources = set(current[(t, p)])
            else:
                raise AdminError(f"Trying to reassign a topic partition {t}-{p} with 0 replicas")
            dests = set(target) - sources
            leader.setdefault(t, set()).update(f"{p}:{s}" for s in sources)
            follower.setdefault(t, set()).update(f"{p}:{d}" for d in dests)
            moving |= sources | set(target)
        await _alter_configs(admin, [
            (2, t, [
                ("leader.replication.throttled.replicas", ",".join(sorted(leader[t])), OP_SET),
                ("follower.replication.throttled.replicas", ",".join(sorted(follower.get(t, set()))), OP_SET),
            ])
            for t in sorted(leader)
        ])
        await _alter_configs(admin, [
            (4, str(b), [
                ("leader.replication.throttled.rate", str(throttle), OP_SET),
                ("follower.replication.throttled.rate", str(throttle), OP_SET),
            ])
            for b in sorted(moving)
        ])
        lines.append(f"The inter-broker throttle limit was set to {throttle} B/s")
    errors = await _alter(admin, dict(proposed))
    if errors:
        raise AdminError("Error reassigning partition(s):\n" + "\n".join(
            f"{_tp(tp)}: {msg}" for tp, msg in sorted(errors.items())
        ))
    lines.append(
        f"Successfully started partition reassignment{'' if len(proposed) == 1 else 's'} for "
        + ",".join(_tp(tp) for tp in sorted(proposed))
    )
    return lines


async def verify(admin: AdminClient, plan_json: str, preserve_throttles: bool) -> list[str]:
    plan = parse_plan(plan_json)
    ongoing = await _current_reassignments(admin)
    current, md = await _assignment(admin, {tp[0] for tp, _ in plan})
    lines = ["Status of partition reassignment:"]
    for tp, target in sorted(plan):
        if tp in ongoing:
            lines.append(f"Reassignment of partition {_tp(tp)} is still in progress.")
        elif current.get(tp, []) == target:
            lines.append(f"Reassignment of partition {_tp(tp)} is completed.")
        else:
            lines.append(
                f"There is no active reassignment of partition {_tp(tp)}, but replica set is "
                f"{','.join(map(str, current.get(tp, [])))} rather than {','.join(map(str, target))}."
            )
    lines.append("")  # the (empty) log directory move states
    if not ongoing and not preserve_throttles:
        lines += await _clear_all_throttles(admin, plan, {b["node_id"] for b in md["brokers"]})
    return lines


async def cancel(admin: AdminClient, plan_json: str, preserve_throttles: bool) -> tuple[list[str], str]:
    plan = parse_plan(plan_json)
    wanted: dict[str, list[int]] = {}
    for (t, p), _ in plan:
        wanted.setdefault(t, []).append(p)
    ongoing = await _current_reassignments(admin, [{"name": t, "partition_indexes": ps} for t, ps in wanted.items()])
    active = sorted(tp for tp, r in ongoing.items() if r["adding_replicas"] or r["removing_replicas"])
    lines: list[str] = []
    if active:
        errors = await _alter(admin, dict.fromkeys(active))
        if errors:
            raise AdminError(f"Error cancelling partition reassignment{'' if len(errors) == 1 else 's'} for:\n" + "\n".join(
                f"{_tp(tp)}: {msg}" for tp, msg in sorted(errors.items())
            ))
        lines.append(
            f"Successfully cancelled partition reassignment{'' if len(active) == 1 else 's'} for: "
            + ",".join(_tp(tp) for tp in active)
        )
    else:
        lines.append("None of the specified partition reassignments are active.")
    tail = "None of the specified partition moves are active."  # printed without a newline, as Kafka
    if not preserve_throttles:
        _, md = await _assignment(admin, set())
        lines_after = await _clear_all_throttles(admin, plan, {b["node_id"] for b in md["brokers"]})
        return lines, tail + "".join("\n" + line for line in lines_after)
    return lines, tail


async def list_reassignments(admin: AdminClient) -> list[str]:
    ongoing = await _current_reassignments(admin)
    if not ongoing:
        return ["No partition reassignments found."]
    out = ["Current partition reassignments:"]
    for tp in sorted(ongoing):
        r = ongoing[tp]
        line = f"{_tp(tp)}: replicas: {','.join(map(str, r['replicas']))}."
        if r["adding_replicas"]:
            line += f" adding: {','.join(map(str, r['adding_replicas']))}."
        if r["removing_replicas"]:
            line += f" removing: {','.join(map(str, r['removing_replicas']))}."
        out.append(line)
    return out


def _read(path: str | None, option: str) -> str:
    if path is None:
        raise AdminError(f"Missing required argument \"[{option}]\"")
    with open(path) as f:
        return f.read()


async def _main(opts: argparse.Namespace) -> tuple[list[str], str | None]:
    async with admin_client(opts, "odradek-reassign-partitions") as admin:
        if opts.generate:
            if opts.broker_list is None:
                raise AdminError("Missing required argument \"[broker-list]\"")
            return await generate(admin, _read(opts.topics_to_move_json_file, "topics-to-move-json-file"),
                                  opts.broker_list, not opts.disable_rack_aware), None
        if opts.execute:
            return await execute(admin, _read(opts.reassignment_json_file, "reassignment-json-file"),
                                 opts.throttle, opts.additional), None
        if opts.verify:
            return await verify(admin, _read(opts.reassignment_json_file, "reassignment-json-file"),
                                opts.preserve_throttles), None
        if opts.cancel:
            lines, tail = await cancel(admin, _read(opts.reassignment_json_file, "reassignment-json-file"),
                                       opts.preserve_throttles)
            return lines, tail
        return await list_reassignments(admin), None


def run(opts: argparse.Namespace) -> int:
    actions = [a for a in ("generate", "execute", "verify", "cancel", "list") if getattr(opts, a)]
    if len(actions) != 1:
        return usage_error(opts.parser, "Command must include exactly one action: --generate, --execute, --verify, "
                           "--cancel, --list")
    if opts.bootstrap_server is None:
        return usage_error(opts.parser, "Please specify --bootstrap-server")
    try:  # a --command-config that cannot work: one line on stderr, before any connection
        client_settings(opts)
    except AdminError as e:
        print(e, file=sys.stderr)
        return 1
    try:
        lines, tail = asyncio.run(_main(opts))
    except (TimeoutError, ConnectionError):
        print(TIMEOUT_MESSAGE, file=sys.stderr)
        return 1
    except AdminError as e:
        # Kafka's tool prints its failures on stdout; an unreachable cluster is the tools' stderr line.
        print(e, file=sys.stderr if str(e).startswith(TIMEOUT_MESSAGE) else sys.stdout)
        return 1
    except (OSError, ValueError, KeyError) as e:
        print(f"Error: {e}")
        return 1
    for line in lines:
        print(line)
    if tail is not None:
        sys.stdout.write(tail if "\n" not in tail else tail + "\n")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("reassign", help="move partition replicas (kafka-reassign-partitions.sh)")
    add_connection_args(p)
    for action in ("generate", "execute", "verify", "cancel", "list"):
        p.add_argument(f"--{action}", action="store_true")
    p.add_argument("--topics-to-move-json-file")
    p.add_argument("--reassignment-json-file")
    p.add_argument("--broker-list")
    p.add_argument("--disable-rack-aware", action="store_true")
    p.add_argument("--throttle", type=int, default=-1)
    p.add_argument("--additional", action="store_true")
    p.add_argument("--preserve-throttles", action="store_true")
    p.set_defaults(func=run, parser=p)
