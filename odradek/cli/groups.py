"""``odradek groups``: list, describe, delete consumer groups and reset their offsets.

In the spirit of ``kafka-consumer-groups.sh``::

    odradek groups list --bootstrap-server localhost:9092
    odradek groups describe --group my-group --bootstrap-server localhost:9092
    odradek groups delete --group my-group --bootstrap-server localhost:9092
    odradek groups reset-offsets --group my-group --topic orders --to-earliest [--execute]

``describe`` shows each member with its partitions (for a KIP-848 consumer group, from
ConsumerGroupDescribe with member epochs and target assignments; for a classic group, decoded from
its consumer-protocol assignment), and per partition the committed offset, the log end offset and
the lag. ``reset-offsets`` is a dry
run unless ``--execute`` is given; like Kafka's tool it only works on a group with no members.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
from dataclasses import dataclass, field
from typing import Any

from odradek.coordinator.group.consumer_protocol import parse_assignment
from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors, error_name

EARLIEST, LATEST = -2, -1


class ToolError(Exception):
    pass


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host or "localhost", int(port)


@dataclass
class MemberView:
    member_id: str
    instance_id: str | None
    host: str
    client_id: str
    assignment: dict[str, list[int]]
    epoch: int | None = None  # KIP-848 member epoch
    target: dict[str, list[int]] | None = None  # KIP-848 target assignment


@dataclass
class GroupView:
    group_id: str
    state: str
    summary: str
    members: list[MemberView] = field(default_factory=list)
    consumer_protocol: bool = False  # a KIP-848 consumer group


class Admin:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = _split(bootstrap)
        self.clients: dict[tuple[str, int], NetworkClient] = {}
        self._versions: dict[tuple[str, int], dict[int, int]] = {}

    async def max_version(self, api: Any, addr: tuple[str, int]) -> int:
        """The newest version of ``api`` the broker at ``addr`` serves, or -1."""
        versions = self._versions.get(addr)
        if versions is None:
            r = await self.send(
                m.API_VERSIONS, 3,
                {"client_software_name": "odradek-groups", "client_software_version": "1"}, addr,
            )
            versions = {a["api_key"]: a["max_version"] for a in r["api_keys"]}
            self._versions[addr] = versions
        return versions.get(api.api_key, -1)

    async def client(self, addr: tuple[str, int]) -> NetworkClient:
        c = self.clients.get(addr)
        if c is None:
            c = await NetworkClient(addr[0], addr[1], client_id="odradek-groups").connect()
            self.clients[addr] = c
        return c

    async def close(self) -> None:
        for c in self.clients.values():
            await c.close()

    async def send(self, api: Any, version: int, body: dict[str, Any], addr: tuple[str, int] | None = None) -> dict[str, Any]:
        return await (await self.client(addr or self.bootstrap)).send(api, version, body)

    async def metadata(self, topics: list[str] | None) -> dict[str, Any]:
        body = {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False,
        }
        return await self.send(m.METADATA, 9, body)

    async def brokers(self) -> dict[int, tuple[str, int]]:
        md = await self.metadata([])
        return {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}

    async def coordinator(self, group: str) -> tuple[str, int]:
        for _ in range(50):
            r = await self.send(m.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
            c = r["coordinators"][0]
            if c["error_code"] == Errors.NONE:
                return c["host"], c["port"]
            if c["error_code"] not in (Errors.COORDINATOR_NOT_AVAILABLE, Errors.COORDINATOR_LOAD_IN_PROGRESS):
                raise ToolError(f"cannot find the coordinator of {group}: {error_name(c['error_code'])}")
            await asyncio.sleep(0.2)
        raise ToolError(f"the coordinator of {group} is not available")

    async def list_offsets(self, tps: list[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        md = await self.metadata(sorted({t for t, _ in tps}))
        brokers = {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}
        leaders: dict[tuple[str, int], int] = {}
        for t in md["topics"]:
            for p in t["partitions"]:
                leaders[(t["name"], p["partition_index"])] = p["leader_id"]
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for tp in tps:
            by_leader.setdefault(leaders.get(tp, -1), []).append(tp)
        out: dict[tuple[str, int], int] = {}
        for leader, group in by_leader.items():
            if leader not in brokers:
                continue
            topics: dict[str, list[dict[str, Any]]] = {}
            for t, p in group:
                topics.setdefault(t, []).append({"partition_index": p, "timestamp": timestamp})
            r = await self.send(
                m.LIST_OFFSETS, 7,
                {"replica_id": -1, "isolation_level": 0,
                 "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
                brokers[leader],
            )
            for t in r["topics"]:
                for p in t["partitions"]:
                    if p["error_code"] == Errors.NONE:
                        out[(t["name"], p["partition_index"])] = p["offset"]
        return out

    async def committed(self, group: str, coord: tuple[str, int]) -> dict[tuple[str, int], int]:
        r = await self.send(m.OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": None}]}, coord)
        g = r["groups"][0]
        if g["error_code"] != Errors.NONE:
            raise ToolError(f"OffsetFetch for {group} failed: {error_name(g['error_code'])}")
        return {
            (t["name"], p["partition_index"]): p["committed_offset"]
            for t in g["topics"]
            for p in t["partitions"]
            if p["committed_offset"] >= 0
        }


def _table(rows: list[list[str]]) -> str:
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


async def cmd_list(a: Admin, args: argparse.Namespace) -> int:
    seen: dict[str, tuple[str, str, str]] = {}
    for addr in (await a.brokers()).values():
        version = min(await a.max_version(m.LIST_GROUPS, addr), 5)
        r = await a.send(m.LIST_GROUPS, version, {"states_filter": args.state or [], "types_filter": []}, addr)
        for g in r["groups"]:
            seen[g["group_id"]] = (g["group_state"], g.get("group_type") or "classic", g["protocol_type"])
    rows = [["GROUP", "STATE", "TYPE", "PROTOCOL TYPE"]]
    rows += [[g, st, ty, pt] for g, (st, ty, pt) in sorted(seen.items())]
    print(_table(rows))
    return 0


def _by_topic(parts: dict[str, Any]) -> dict[str, list[int]]:
    return {tp["topic_name"]: sorted(tp["partitions"]) for tp in parts["topic_partitions"]}


async def describe_group(a: Admin, group: str, coord: tuple[str, int]) -> GroupView:
    """ConsumerGroupDescribe for a KIP-848 group, else (or on an older broker) DescribeGroups."""
    if await a.max_version(m.CONSUMER_GROUP_DESCRIBE, coord) >= 0:
        r = await a.send(
            m.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [group], "include_authorized_operations": False}, coord
        )
        d = r["groups"][0]
        if d["error_code"] == Errors.NONE:
            return GroupView(
                group,
                d["group_state"],
                f"Group {group}: state {d['group_state']}, type consumer (KIP-848), group epoch "
                f"{d['group_epoch']}, assignment epoch {d['assignment_epoch']}, assignor "
                f"{d['assignor_name']}, {len(d['members'])} member(s)",
                [
                    MemberView(
                        mem["member_id"], mem["instance_id"], mem["client_host"], mem["client_id"],
                        _by_topic(mem["assignment"]), mem["member_epoch"], _by_topic(mem["target_assignment"]),
                    )
                    for mem in d["members"]
                ],
                consumer_protocol=True,
            )
        if d["error_code"] != Errors.GROUP_ID_NOT_FOUND:
            raise ToolError(
                f"ConsumerGroupDescribe for {group} failed: {error_name(d['error_code'])} {d['error_message'] or ''}"
            )
    d = (await a.send(m.DESCRIBE_GROUPS, 5, {"groups": [group]}, coord))["groups"][0]
    if d["error_code"] != Errors.NONE:
        raise ToolError(f"DescribeGroups for {group} failed: {error_name(d['error_code'])}")
    members = []
    for mem in d["members"]:
        asg: dict[str, list[int]] = {}
        if d["protocol_type"] == "consumer":
            try:
                asg = parse_assignment(bytes(mem["member_assignment"]))
            except ValueError:
                asg = {}
        members.append(MemberView(mem["member_id"], mem["group_instance_id"], mem["client_host"], mem["client_id"], asg))
    return GroupView(
        group,
        d["group_state"],
        f"Group {group}: state {d['group_state']}, protocol {d['protocol_type'] or '-'}/"
        f"{d['protocol_data'] or '-'}, {len(d['members'])} member(s)",
        members,
    )


async def describe_rows(a: Admin, group: str) -> tuple[GroupView, list[list[str]]]:
    coord = await a.coordinator(group)
    view = await describe_group(a, group, coord)
    owner: dict[tuple[str, int], MemberView] = {}
    for mem in view.members:
        for t, ps in mem.assignment.items():
            for p in ps:
                owner[(t, p)] = mem
    committed = await a.committed(group, coord)
    tps = sorted(set(committed) | set(owner))
    ends = await a.list_offsets(tps, LATEST) if tps else {}
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]]
    for tp in tps:
        cur = committed.get(tp)
        end = ends.get(tp)
        lag = str(end - cur) if cur is not None and end is not None else "-"
        holder = owner.get(tp)
        rows.append([
            group, tp[0], str(tp[1]), "-" if cur is None else str(cur), "-" if end is None else str(end), lag,
            holder.member_id if holder else "-", holder.host if holder else "-",
            holder.client_id if holder else "-",
        ])
    return view, rows


def _partitions_text(asg: dict[str, list[int]]) -> str:
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in sorted(asg.items())) or "-"


async def cmd_describe(a: Admin, args: argparse.Namespace) -> int:
    for group in args.group:
        view, rows = await describe_rows(a, group)
        print(view.summary)
        if args.members:
            header = ["CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
            if view.consumer_protocol:
                header[1:1] = ["MEMBER-EPOCH"]
                header.append("TARGET-ASSIGNMENT")
            mrows = [header]
            for mem in view.members:
                row = [mem.member_id, mem.instance_id or "-", mem.host, mem.client_id,
                       str(sum(len(p) for p in mem.assignment.values())), _partitions_text(mem.assignment)]
                if view.consumer_protocol:
                    row[1:1] = [str(mem.epoch)]
                    # "=" once the member has reconciled to its target.
                    row.append("=" if mem.target == mem.assignment else _partitions_text(mem.target or {}))
                mrows.append(row)
            print(_table(mrows))
        else:
            print(_table(rows))
        print()
    return 0


async def cmd_delete(a: Admin, args: argparse.Namespace) -> int:
    status = 0
    for group in args.group:
        coord = await a.coordinator(group)
        r = await a.send(m.DELETE_GROUPS, 2, {"groups_names": [group]}, coord)
        err = r["results"][0]["error_code"]
        if err == Errors.NONE:
            print(f"Deleted group {group}")
        else:
            print(f"Could not delete group {group}: {error_name(err)}", file=sys.stderr)
            status = 1
    return status


def _parse_datetime(text: str) -> int:
    when = dt.datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


async def cmd_reset(a: Admin, args: argparse.Namespace) -> int:
    group = args.group[0]
    coord = await a.coordinator(group)
    committed = await a.committed(group, coord)
    tps: list[tuple[str, int]] = []
    if args.topic:
        md = await a.metadata([t.split(":")[0] for t in args.topic])
        parts = {t["name"]: [p["partition_index"] for p in t["partitions"]] for t in md["topics"] if t["error_code"] == 0}
        for spec in args.topic:
            name, _, plist = spec.partition(":")
            if name not in parts:
                raise ToolError(f"unknown topic {name}")
            chosen = [int(x) for x in plist.split(",")] if plist else sorted(parts[name])
            tps.extend((name, p) for p in chosen)
    else:
        tps = sorted(committed)
    if not tps:
        raise ToolError("no partitions to reset (give --topic)")
    if args.to_offset is not None:
        target = {tp: args.to_offset for tp in tps}
    else:
        ts = EARLIEST if args.to_earliest else LATEST if args.to_latest else _parse_datetime(args.to_datetime)
        target = await a.list_offsets(tps, ts)
        if ts >= 0:  # no record at/after the time: the end of the log
            ends = await a.list_offsets([tp for tp in tps if target.get(tp, -1) < 0], LATEST)
            target.update({tp: ends[tp] for tp in ends if target.get(tp, -1) < 0})
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    rows += [[group, t, str(p), str(target.get((t, p), "-"))] for t, p in tps]
    print(_table(rows))
    if not args.execute:
        print("(dry run: add --execute to commit these offsets)")
        return 0
    topics: dict[str, list[dict[str, Any]]] = {}
    for (t, p), off in target.items():
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off, "committed_metadata": ""})
    r = await a.send(
        m.OFFSET_COMMIT, 8,
        {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
         "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
        coord,
    )
    errors = {error_name(p["error_code"]) for t in r["topics"] for p in t["partitions"] if p["error_code"]}
    if errors:
        hint = " (the group must have no active members)" if "UNKNOWN_MEMBER_ID" in errors else ""
        raise ToolError(f"resetting offsets of {group} failed: {', '.join(sorted(errors))}{hint}")
    print(f"Offsets of group {group} reset.")
    return 0


COMMANDS = {"list": cmd_list, "describe": cmd_describe, "delete": cmd_delete, "reset-offsets": cmd_reset}


def run(args: argparse.Namespace) -> int:
    if args.action != "list" and not args.group:
        print("--group is required", file=sys.stderr)
        return 2
    if args.action == "reset-offsets" and sum(
        bool(x) for x in (args.to_earliest, args.to_latest, args.to_datetime, args.to_offset is not None)
    ) != 1:
        print("give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset", file=sys.stderr)
        return 2

    async def main() -> int:
        a = Admin(args.bootstrap_server)
        try:
            return await COMMANDS[args.action](a, args)
        finally:
            await a.close()

    try:
        return asyncio.run(main())
    except ToolError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: cannot reach {args.bootstrap_server}: {e}", file=sys.stderr)
        return 1


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "groups", help="list, describe, delete consumer groups and reset their offsets"
    )
    p.add_argument("action", choices=sorted(COMMANDS))
    p.add_argument("--bootstrap-server", default="localhost:9092", metavar="HOST:PORT")
    p.add_argument("--group", action="append", default=[], help="group id (repeatable)")
    p.add_argument("--state", action="append", help="list: only groups in this state")
    p.add_argument("--members", action="store_true", help="describe: show members and assignments")
    p.add_argument("--topic", action="append", help="reset-offsets: TOPIC or TOPIC:P1,P2 (repeatable)")
    p.add_argument("--to-earliest", action="store_true")
    p.add_argument("--to-latest", action="store_true")
    p.add_argument("--to-datetime", metavar="ISO-8601", help="e.g. 2024-01-31T12:00:00 (UTC if no zone)")
    p.add_argument("--to-offset", type=int)
    p.add_argument("--execute", action="store_true", help="reset-offsets: commit (default: dry run)")
    p.set_defaults(func=run)
