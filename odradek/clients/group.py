"""Membership of a classic consumer group (protocol type ``consumer``): FindCoordinator,
JoinGroup (MEMBER_ID_REQUIRED answered), the range assignor when this member leads, SyncGroup,
heartbeats in the background, OffsetFetch for the starting positions, OffsetCommit and
LeaveGroup. A rebalance the heartbeat learns of sets :attr:`GroupMember.rejoin_needed`; the
owner commits and calls :meth:`GroupMember.join` again."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from odradek.clients.cluster import Cluster, ClusterError, TopicPartition
from odradek.coordinator.group.consumer_protocol import (
    encode_assignment,
    encode_subscription,
    parse_assignment,
    parse_subscription,
)
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors, error_name

ASSIGNOR = "range"
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
_COORDINATOR_GONE = frozenset({Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE,
                               Errors.COORDINATOR_LOAD_IN_PROGRESS})


def range_assign(members: dict[str, list[str]], partitions: dict[str, int]) -> dict[str, dict[str, list[int]]]:
    """Kafka's RangeAssignor: per topic, its partitions in contiguous ranges over the members
    subscribed to it (sorted by member id), the first ones getting one more."""
    out: dict[str, dict[str, list[int]]] = {mid: {} for mid in members}
    for topic in sorted(partitions):
        subscribed = sorted(mid for mid, topics in members.items() if topic in topics)
        if not subscribed:
            continue
        n = partitions[topic]
        per, extra = divmod(n, len(subscribed))
        start = 0
        for i, mid in enumerate(subscribed):
            count = per + (1 if i < extra else 0)
            if count:
                out[mid][topic] = list(range(start, start + count))
            start += count
    return out


class GroupMember:
    def __init__(self, cluster: Cluster, group_id: str, topics: list[str] | None, pattern: str | None,
                 session_timeout_ms: int, rebalance_timeout_ms: int, heartbeat_interval_ms: int) -> None:
        self.cluster = cluster
        self.group_id = group_id
        self.topics = topics
        self.pattern = re.compile(pattern) if pattern is not None else None
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_s = heartbeat_interval_ms / 1000
        self.member_id = ""
        self.generation = -1
        self.coordinator: tuple[str, int] | None = None
        self.rejoin_needed = False
        self.assignment: list[TopicPartition] = []
        self._heartbeat: asyncio.Task[None] | None = None

    async def _find_coordinator(self) -> tuple[str, int]:
        for _ in range(100):
            resp = await self.cluster.send(None, m.FIND_COORDINATOR, {
                "key": self.group_id, "key_type": 0, "coordinator_keys": [self.group_id]})
            c = resp["coordinators"][0] if resp.get("coordinators") else resp
            if c["error_code"] == Errors.NONE:
                self.coordinator = (c["host"], c["port"])
                return self.coordinator
            if c["error_code"] not in _COORDINATOR_GONE:
                raise ClusterError(f"FindCoordinator for group {self.group_id}: {error_name(c['error_code'])}")
            await asyncio.sleep(0.1)
        raise ClusterError(f"the coordinator of group {self.group_id} is not available")

    async def _send(self, api: Any, body: dict[str, Any]) -> dict[str, Any]:
        for _ in range(50):
            coord = self.coordinator or await self._find_coordinator()
            try:
                resp = await self.cluster.send(coord, api, body)
            except (OSError, ConnectionError, TimeoutError):
                self.coordinator = None
                await asyncio.sleep(0.1)
                continue
            if resp.get("error_code") in _COORDINATOR_GONE:
                self.coordinator = None
                await asyncio.sleep(0.1)
                continue
            return resp
        raise ClusterError(f"the coordinator of group {self.group_id} is not available")

    async def subscribed_topics(self) -> list[str]:
        if self.pattern is None:
            return list(self.topics or [])
        md = await self.cluster.metadata(None)
        return sorted(t["name"] for t in md["topics"]
                      if t["error_code"] == Errors.NONE and t["name"] not in INTERNAL_TOPICS
                      and self.pattern.fullmatch(t["name"]))

    async def join(self) -> list[TopicPartition]:
        """Join (or rejoin) the group; returns this member's assigned partitions."""
        await self._stop_heartbeat()
        topics = await self.subscribed_topics()
        while True:
            resp = await self._send(m.JOIN_GROUP, {
                "group_id": self.group_id, "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": ASSIGNOR, "metadata": encode_subscription(topics)}], "reason": None,
            })
            code = resp["error_code"]
            if code == Errors.MEMBER_ID_REQUIRED:
                self.member_id = resp["member_id"]
                continue
            if code in (Errors.UNKNOWN_MEMBER_ID, Errors.ILLEGAL_GENERATION):
                self.member_id = ""
                continue
            if code == Errors.REBALANCE_IN_PROGRESS:
                await asyncio.sleep(0.1)
                continue
            if code != Errors.NONE:
                raise ClusterError(f"JoinGroup for group {self.group_id} failed: {error_name(code)}")
            self.member_id = resp["member_id"]
            self.generation = resp["generation_id"]
            assignments: list[dict[str, Any]] = []
            if resp["leader"] == self.member_id:
                assignments = await self._assign(resp["members"])
            sync = await self._send(m.SYNC_GROUP, {
                "group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": "consumer", "protocol_name": ASSIGNOR,
                "assignments": assignments,
            })
            if sync["error_code"] == Errors.REBALANCE_IN_PROGRESS:
                continue
            if sync["error_code"] in (Errors.UNKNOWN_MEMBER_ID, Errors.ILLEGAL_GENERATION):
                self.member_id = ""
                continue
            if sync["error_code"] != Errors.NONE:
                raise ClusterError(f"SyncGroup for group {self.group_id} failed: {error_name(sync['error_code'])}")
            assigned = parse_assignment(bytes(sync["assignment"]))
            self.assignment = sorted((t, p) for t, ps in assigned.items() for p in ps)
            self.rejoin_needed = False
            self._heartbeat = asyncio.get_running_loop().create_task(self._heartbeats())
            return self.assignment

    async def _assign(self, members: list[dict[str, Any]]) -> list[dict[str, Any]]:
        subs = {mem["member_id"]: parse_subscription(bytes(mem["metadata"])).topics for mem in members}
        wanted = sorted({t for ts in subs.values() for t in ts})
        partitions: dict[str, int] = {}
        if wanted:
            await self.cluster.metadata(wanted)
            partitions = {t: len(self.cluster.topics[t].leaders) for t in wanted if t in self.cluster.topics}
        plan = range_assign(subs, partitions)
        return [{"member_id": mid, "assignment": encode_assignment(a)} for mid, a in plan.items()]

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            try:
                resp = await self._send(m.HEARTBEAT, {
                    "group_id": self.group_id, "generation_id": self.generation,
                    "member_id": self.member_id, "group_instance_id": None})
            except ClusterError:
                continue
            if resp["error_code"] in (Errors.REBALANCE_IN_PROGRESS, Errors.ILLEGAL_GENERATION,
                                      Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
                if resp["error_code"] != Errors.REBALANCE_IN_PROGRESS:
                    self.member_id = ""
                self.rejoin_needed = True
                return

    async def _stop_heartbeat(self) -> None:
        task, self._heartbeat = self._heartbeat, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def committed(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Committed offsets of ``tps`` (those without one are left out)."""
        if not tps:
            return {}
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
        resp = await self._send(m.OFFSET_FETCH, {
            "group_id": self.group_id, "topics": topics, "require_stable": False,
            "groups": [{"group_id": self.group_id, "member_id": None, "member_epoch": -1, "topics": topics}],
        })
        if resp.get("error_code"):
            raise ClusterError(f"OffsetFetch for group {self.group_id} failed: {error_name(resp['error_code'])}")
        out: dict[TopicPartition, int] = {}
        for t in resp["topics"]:
            for p in t["partitions"]:
                if p["error_code"] == Errors.NONE and p["committed_offset"] >= 0:
                    out[(t["name"], p["partition_index"])] = p["committed_offset"]
        return out

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        if not offsets or not self.member_id:
            return
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (t, p), off in sorted(offsets.items()):
            by_topic.setdefault(t, []).append({
                "partition_index": p, "committed_offset": off, "committed_leader_epoch": -1,
                "commit_timestamp": -1, "committed_metadata": ""})
        resp = await self._send(m.OFFSET_COMMIT, {
            "group_id": self.group_id, "generation_id_or_member_epoch": self.generation,
            "member_id": self.member_id, "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        })
        for t in resp["topics"]:
            for p in t["partitions"]:
                code = p["error_code"]
                if code in (Errors.REBALANCE_IN_PROGRESS, Errors.ILLEGAL_GENERATION, Errors.UNKNOWN_MEMBER_ID):
                    self.rejoin_needed = True
                elif code != Errors.NONE:
                    raise ClusterError(
                        f"OffsetCommit for {t['name']}-{p['partition_index']} failed: {error_name(code)}")

    async def leave(self) -> None:
        await self._stop_heartbeat()
        if not self.member_id or self.coordinator is None:
            return
        try:
            await self.cluster.send(self.coordinator, m.LEAVE_GROUP, {
                "group_id": self.group_id, "member_id": self.member_id,
                "members": [{"member_id": self.member_id, "group_instance_id": None, "reason": "the consumer is being closed"}],
            })
        except (OSError, ConnectionError, TimeoutError):
            pass
        self.member_id = ""
