"""The consumer-group calls of ``odradek groups`` (kafka-consumer-groups.sh) over the admin client.

What Kafka's Admin does for the tool: list groups on every broker, find a group's coordinator and
describe the group there (ConsumerGroupDescribe for a KIP-848 group, DescribeGroups for a classic
one), fetch, commit and delete its offsets, delete it, and list partition offsets at their leaders.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from odradek.cli.admin import AdminClient, AdminError
from odradek.coordinator.group.consumer_protocol import parse_assignment
from odradek.java_order import java_hash_order, java_string_hash
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors

TopicPartition = tuple[str, int]
EARLIEST, LATEST = -2, -1

_PKG = "org.apache.kafka.common.errors."
# Kafka's exception class and default message (Errors.exception()) for the errors the tool prints.
_EXCEPTIONS: dict[int, tuple[str, str]] = {
    Errors.GROUP_ID_NOT_FOUND: ("GroupIdNotFoundException", "The group id does not exist."),
    Errors.NON_EMPTY_GROUP: ("GroupNotEmptyException", "The group is not empty."),
    Errors.INVALID_GROUP_ID: ("InvalidGroupIdException", "The configured groupId is invalid."),
    Errors.GROUP_AUTHORIZATION_FAILED: ("GroupAuthorizationException", "Group authorization failed."),
    Errors.GROUP_SUBSCRIBED_TO_TOPIC: (
        "GroupSubscribedToTopicException", "The consumer group is actively subscribed to the topic"),
    Errors.UNKNOWN_TOPIC_OR_PARTITION: (
        "UnknownTopicOrPartitionException", "This server does not host this topic-partition."),
    Errors.TOPIC_AUTHORIZATION_FAILED: ("TopicAuthorizationException", "Topic authorization failed."),
    Errors.UNKNOWN_MEMBER_ID: ("UnknownMemberIdException", "The coordinator is not aware of this member."),
    Errors.COORDINATOR_NOT_AVAILABLE: ("CoordinatorNotAvailableException", "The coordinator is not available."),
    Errors.OFFSET_METADATA_TOO_LARGE: (
        "OffsetMetadataTooLargeException", "The metadata field of the offset request was too large."),
}
_RETRIABLE = frozenset({Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR})


def exception_text(code: int, message: str | None = None) -> str:
    """``org.apache.kafka.common.errors.XxxException: message`` as Java prints a Throwable."""
    name, default = _EXCEPTIONS.get(code, ("", ""))
    if not name:
        try:
            name = "".join(w.capitalize() for w in Errors(code).name.split("_")) + "Exception"
        except ValueError:
            name, default = "UnknownServerException", f"The server experienced an unexpected error code {code}"
    return f"{_PKG}{name}: {message or default or name}"


class GroupError(AdminError):
    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(exception_text(code, message))
        self.code = code


@dataclass
class Member:
    consumer_id: str
    instance_id: str | None
    host: str
    client_id: str
    assignment: list[TopicPartition]
    member_epoch: int | None = None  # KIP-848 groups only
    target: list[TopicPartition] | None = None  # KIP-848 groups only


@dataclass
class Coordinator:
    node_id: int
    host: str
    port: int


@dataclass
class GroupDescription:
    group_id: str
    state: str  # Kafka's GroupState names: Stable, Empty, Dead, PreparingRebalance...
    coordinator: Coordinator
    assignor: str
    members: list[Member] = field(default_factory=list)
    group_epoch: int | None = None  # KIP-848 groups only
    target_assignment_epoch: int | None = None


def _tps(parts: dict[str, Any]) -> list[TopicPartition]:
    return [(tp["topic_name"], p) for tp in parts["topic_partitions"] for p in tp["partitions"]]


class GroupAdmin:
    """Group calls routed as Kafka's Admin routes them: coordinator-bound, leader-bound, any broker."""

    def __init__(self, admin: AdminClient) -> None:
        self.admin = admin
        self._nodes: dict[tuple[str, int], AdminClient] = {}
        self._deadline = time.monotonic() + admin.timeout_ms / 1000

    async def close(self) -> None:
        for c in self._nodes.values():
            await c.close()

    def _node(self, host: str, port: int) -> AdminClient:
        c = self._nodes.get((host, port))
        if c is None:
            c = AdminClient(f"{host}:{port}", self.admin.timeout_ms, self.admin.client_id,
                            self.admin.request_timeout_ms, self.admin.security)
            self._nodes[(host, port)] = c
        return c

    async def _wait(self, what: str) -> None:
        if time.monotonic() >= self._deadline:
            raise AdminError(f"{_PKG}TimeoutException: Timed out waiting for a node assignment. Call: {what}")
        await asyncio.sleep(0.1)

    async def brokers(self) -> dict[int, tuple[str, int]]:
        md = await self.admin.metadata([])
        return {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}

    async def list_groups(self, states: list[str], types: list[str]) -> list[tuple[str, str, str]]:
        """(group id, type as Kafka prints it, state) of the consumer groups on every broker, in the
        brokers' order; only groups of the consumer protocol (or of none, offsets only)."""
        seen: dict[str, tuple[str, str, str]] = {}
        for node in sorted(brokers := await self.brokers()):
            client = self._node(*brokers[node])
            await client.connect()
            body = {"states_filter": states, "types_filter": types}
            if client.version(m.LIST_GROUPS) < 5 and types:
                raise AdminError(f"{_PKG}UnsupportedVersionException: The broker does not support ListGroups with types")
            r = await client.send(m.LIST_GROUPS, body)
            if r["error_code"]:
                raise GroupError(r["error_code"])
            for g in r["groups"]:
                gtype = (g.get("group_type") or "classic").lower()
                if gtype not in ("classic", "consumer") or g["protocol_type"] not in ("consumer", ""):
                    continue
                seen.setdefault(g["group_id"], (g["group_id"], gtype.capitalize(), g.get("group_state") or "Unknown"))
        return [seen[g] for g in java_hash_order(seen, java_string_hash)]  # Kafka's ListGroupsResult is a HashMap

    async def coordinator(self, group: str) -> Coordinator:
        while True:
            r = await self.admin.send(m.FIND_COORDINATOR, {"key_type": 0, "key": group, "coordinator_keys": [group]},
                                      top_error=None)
            c = r["coordinators"][0] if r.get("coordinators") else r
            if c["error_code"] == Errors.NONE:
                return Coordinator(c["node_id"], c["host"], c["port"])
            if c["error_code"] not in _RETRIABLE:
                raise GroupError(c["error_code"], c.get("error_message"))
            await self._wait("findCoordinator")

    async def _to_coordinator(self, group: str, api: Any, body: dict[str, Any], error_of: Any) -> dict[str, Any]:
        """Send to the group's coordinator; retries while it moves or loads."""
        while True:
            coord = await self.coordinator(group)
            r = await self._node(coord.host, coord.port).send(api, body, top_error=None)
            if error_of(r) not in _RETRIABLE:
                return r
            await self._wait(api.name)

    async def describe(self, group: str) -> GroupDescription:
        coord = await self.coordinator(group)
        client = self._node(coord.host, coord.port)
        await client.connect()
        if client._versions.get(m.CONSUMER_GROUP_DESCRIBE.api_key, -1) >= 0:
            r = await self._to_coordinator(
                group, m.CONSUMER_GROUP_DESCRIBE, {"group_ids": [group], "include_authorized_operations": False},
                lambda r: r["groups"][0]["error_code"])
            d = r["groups"][0]
            if d["error_code"] == Errors.NONE:
                return GroupDescription(
                    group, d["group_state"], coord, d["assignor_name"],
                    [Member(x["member_id"], x["instance_id"], x["client_host"], x["client_id"],
                            _tps(x["assignment"]), x["member_epoch"], _tps(x["target_assignment"]))
                     for x in d["members"]],
                    d["group_epoch"], d["assignment_epoch"])
            if d["error_code"] not in (Errors.GROUP_ID_NOT_FOUND, Errors.UNSUPPORTED_VERSION):
                raise GroupError(d["error_code"], d.get("error_message"))
        r = await self._to_coordinator(group, m.DESCRIBE_GROUPS, {"groups": [group], "include_authorized_operations": False},
                                       lambda r: r["groups"][0]["error_code"])
        d = r["groups"][0]
        if d["error_code"] != Errors.NONE:
            raise GroupError(d["error_code"], d.get("error_message"))
        if d["protocol_type"] not in ("consumer", ""):
            raise AdminError(f"java.lang.IllegalArgumentException: Group {group} is not a consumer group")
        members = []
        for x in d["members"]:
            assigned: list[TopicPartition] = []
            if d["protocol_type"] == "consumer" and x["member_assignment"]:
                try:
                    assigned = [(t, p) for t, ps in parse_assignment(bytes(x["member_assignment"])).items() for p in ps]
                except ValueError:
                    assigned = []
            members.append(Member(x["member_id"], x["group_instance_id"], x["client_host"], x["client_id"], assigned))
        return GroupDescription(group, d["group_state"], coord, d["protocol_data"] or "", members)

    async def committed(self, group: str) -> dict[TopicPartition, tuple[int, int]]:
        """The group's committed offsets: (offset, leader epoch or -1) per partition."""
        r = await self._to_coordinator(
            group, m.OFFSET_FETCH,
            {"group_id": group, "topics": None, "groups": [{"group_id": group, "topics": None}], "require_stable": True},
            lambda r: r["groups"][0]["error_code"] if r.get("groups") else r["error_code"])
        g = r["groups"][0] if r.get("groups") else r
        if g["error_code"] != Errors.NONE:
            raise GroupError(g["error_code"])
        out: dict[TopicPartition, tuple[int, int]] = {}
        for t in g["topics"]:
            for p in t["partitions"]:
                if p["error_code"] == Errors.NONE and p["committed_offset"] >= 0:
                    out[(t["name"], p["partition_index"])] = (p["committed_offset"], p.get("committed_leader_epoch", -1))
        return out

    async def commit(self, group: str, offsets: dict[TopicPartition, int]) -> None:
        topics: dict[str, list[dict[str, Any]]] = {}
        for (t, p), off in sorted(offsets.items()):
            topics.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                             "committed_leader_epoch": -1, "committed_metadata": ""})
        r = await self._to_coordinator(
            group, m.OFFSET_COMMIT,
            {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
             "retention_time_ms": -1, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
            lambda r: next((p["error_code"] for t in r["topics"] for p in t["partitions"] if p["error_code"]), 0))
        for t in r["topics"]:
            for p in t["partitions"]:
                if p["error_code"]:
                    raise GroupError(p["error_code"])

    async def delete_group(self, group: str) -> int:
        r = await self._to_coordinator(group, m.DELETE_GROUPS, {"groups_names": [group]},
                                       lambda r: r["results"][0]["error_code"])
        return int(r["results"][0]["error_code"])

    async def delete_offsets(self, group: str, tps: list[TopicPartition]) -> tuple[int, dict[TopicPartition, int]]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append({"partition_index": p})
        r = await self._to_coordinator(
            group, m.OFFSET_DELETE,
            {"group_id": group, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
            lambda r: r["error_code"])
        per = {(t["name"], p["partition_index"]): p["error_code"] for t in r["topics"] for p in t["partitions"]}
        return int(r["error_code"]), per

    async def partitions(self, topics: list[str]) -> dict[str, list[int] | int]:
        """Each topic's partitions, or its error code."""
        md = await self.admin.metadata(topics)
        return {t["name"]: (sorted(p["partition_index"] for p in t["partitions"]) if t["error_code"] == 0
                            else t["error_code"]) for t in md["topics"]}

    async def list_offsets(self, tps: list[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
        """The offset at ``timestamp`` (EARLIEST, LATEST or ms) per partition, from its leader; -1 where
        no record is at or after the time; partitions without a leader or unknown are left out."""
        if not tps:
            return {}
        md = await self.admin.metadata(sorted({t for t, _ in tps}))
        brokers = {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}
        leaders = {(t["name"], p["partition_index"]): p["leader_id"] for t in md["topics"] for p in t["partitions"]}
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            if leaders.get(tp, -1) in brokers:
                by_leader.setdefault(leaders[tp], []).append(tp)
        out: dict[TopicPartition, int] = {}
        for leader, group in by_leader.items():
            topics: dict[str, list[dict[str, Any]]] = {}
            for t, p in group:
                topics.setdefault(t, []).append({"partition_index": p, "timestamp": timestamp, "current_leader_epoch": -1})
            r = await self._node(*brokers[leader]).send(
                m.LIST_OFFSETS,
                {"replica_id": -1, "isolation_level": 0, "timeout_ms": self.admin.timeout_ms,
                 "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
                top_error=None)
            for t in r["topics"]:
                for p in t["partitions"]:
                    if p["error_code"] == Errors.NONE:
                        out[(t["name"], p["partition_index"])] = p["offset"]
        return out
