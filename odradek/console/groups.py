"""Consumer groups for the console: ListGroups on every broker; for one group FindCoordinator,
then ConsumerGroupDescribe (a KIP-848 group) or DescribeGroups (a classic group) for members and
assignments, OffsetFetch for the committed offsets and ListOffsets (latest) at each partition's
leader for the lag."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from odradek.console.client import LATEST, ConsoleClient, ConsoleError
from odradek.coordinator.group.consumer_protocol import parse_assignment
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors, error_name

COORDINATOR_RETRIES = 10
COORDINATOR_BACKOFF_S = 0.2
_RETRY_COORDINATOR = (Errors.COORDINATOR_NOT_AVAILABLE, Errors.COORDINATOR_LOAD_IN_PROGRESS)


@dataclass
class GroupListing:
    group_id: str
    state: str
    group_type: str
    protocol_type: str


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: dict[str, list[int]]


@dataclass
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    end: int | str | None
    member: str | None

    @property
    def lag(self) -> int | None:
        if self.committed is None or not isinstance(self.end, int):
            return None
        return max(0, self.end - self.committed)


@dataclass
class GroupDetail:
    group_id: str
    state: str
    kind: str  # "consumer (KIP-848)" or the classic protocol type
    coordinator: int
    members: list[Member] = field(default_factory=list)
    partitions: list[PartitionLag] = field(default_factory=list)

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)

    def lag_by_topic(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.partitions:
            out[p.topic] = out.get(p.topic, 0) + (p.lag or 0)
        return out


async def list_groups(client: ConsoleClient) -> tuple[list[GroupListing], list[str]]:
    """Every broker's groups, and the brokers that could not answer."""
    await client.metadata([])
    found: dict[str, GroupListing] = {}
    errors: list[str] = []

    async def one(node_id: int) -> None:
        addr = client.broker_address(node_id)
        try:
            _, r = await client.send(addr, m.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
        except ConsoleError as e:
            errors.append(f"broker {node_id}: {e}")
            return
        if r["error_code"] != Errors.NONE:
            errors.append(f"broker {node_id}: ListGroups {error_name(r['error_code'])}")
            return
        for g in r["groups"]:
            found[g["group_id"]] = GroupListing(
                g["group_id"], g.get("group_state") or "?", g.get("group_type") or "classic", g["protocol_type"])

    await asyncio.gather(*(one(n) for n in sorted(client.brokers)))
    return sorted(found.values(), key=lambda g: g.group_id), errors


async def find_coordinator(client: ConsoleClient, group: str) -> int:
    for _ in range(COORDINATOR_RETRIES):
        addr = await client.any_node()
        v = await client.version(addr, m.FIND_COORDINATOR, 6)
        if v >= 4:
            _, r = await client.send(addr, m.FIND_COORDINATOR, 6, {"key_type": 0, "coordinator_keys": [group]})
            c = r["coordinators"][0]
        else:
            _, c = await client.send(addr, m.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
        if c["error_code"] == Errors.NONE:
            if c["node_id"] not in client.brokers:
                await client.metadata([])
            return int(c["node_id"])
        if c["error_code"] not in _RETRY_COORDINATOR:
            raise ConsoleError(f"FindCoordinator for group {group!r}: {error_name(c['error_code'])}")
        await asyncio.sleep(COORDINATOR_BACKOFF_S)
    raise ConsoleError(f"the coordinator of group {group!r} is not available")


def _by_topic(assignment: dict[str, list[dict[str, object]]]) -> dict[str, list[int]]:
    return {str(tp["topic_name"]): sorted(tp["partitions"]) for tp in assignment["topic_partitions"]}  # type: ignore[call-overload]


async def _describe(client: ConsoleClient, group: str, coord: int, detail: GroupDetail) -> None:
    addr = client.broker_address(coord)
    if await client.version(addr, m.CONSUMER_GROUP_DESCRIBE, 0) >= 0:
        _, r = await client.send(addr, m.CONSUMER_GROUP_DESCRIBE, 0,
                                 {"group_ids": [group], "include_authorized_operations": False})
        d = r["groups"][0]
        if d["error_code"] == Errors.NONE:
            detail.state, detail.kind = d["group_state"], "consumer (KIP-848)"
            detail.members = [
                Member(mem["member_id"], mem["instance_id"], mem["client_id"], mem["client_host"],
                       _by_topic(mem["assignment"]))
                for mem in d["members"]
            ]
            return
        if d["error_code"] != Errors.GROUP_ID_NOT_FOUND:
            raise ConsoleError(f"ConsumerGroupDescribe: {error_name(d['error_code'])} {d.get('error_message') or ''}")
    _, r = await client.send(addr, m.DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False})
    d = r["groups"][0]
    if d["error_code"] != Errors.NONE:
        raise ConsoleError(f"DescribeGroups: {error_name(d['error_code'])}")
    detail.state, detail.kind = d["group_state"], d["protocol_type"] or "(none)"
    for mem in d["members"]:
        asg: dict[str, list[int]] = {}
        if d["protocol_type"] == "consumer":
            try:
                asg = parse_assignment(bytes(mem["member_assignment"]))
            except ValueError:
                asg = {}
        detail.members.append(Member(mem["member_id"], mem.get("group_instance_id"), mem["client_id"],
                                     mem["client_host"], asg))


async def _committed(client: ConsoleClient, group: str, coord: int) -> dict[tuple[str, int], int]:
    addr = client.broker_address(coord)
    v = await client.version(addr, m.OFFSET_FETCH, 8)
    if v >= 8:
        _, r = await client.send(addr, m.OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": None}]})
        g = r["groups"][0]
        code, topics = g["error_code"], g["topics"]
    else:
        _, r = await client.send(addr, m.OFFSET_FETCH, 7, {"group_id": group, "topics": None})
        code, topics = r.get("error_code", 0), r["topics"]
    if code != Errors.NONE:
        raise ConsoleError(f"OffsetFetch: {error_name(code)}")
    return {
        (t["name"], p["partition_index"]): p["committed_offset"]
        for t in topics for p in t["partitions"] if p["committed_offset"] >= 0
    }


async def describe_group(client: ConsoleClient, group: str) -> GroupDetail:
    coord = await find_coordinator(client, group)
    detail = GroupDetail(group, "?", "?", coord)
    await _describe(client, group, coord, detail)
    committed = await _committed(client, group, coord)
    owner = {(t, p): mem.member_id for mem in detail.members for t, ps in mem.assignment.items() for p in ps}
    tps = sorted(set(committed) | set(owner))
    ends = await client.list_offsets(tps, LATEST) if tps else {}
    detail.partitions = [PartitionLag(t, p, committed.get((t, p)), ends.get((t, p)), owner.get((t, p))) for t, p in tps]
    return detail
