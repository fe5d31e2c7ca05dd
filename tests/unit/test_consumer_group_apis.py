"""KIP-848 consumer groups through the broker in-process: ConsumerGroupHeartbeat and
ConsumerGroupDescribe sent with our own client over a real socket, with the group APIs around
them (OffsetCommit/OffsetFetch with member epochs, ListGroups, DescribeGroups, DeleteGroups), the
session timer, metadata changes and a restart that reloads the group from __consumer_offsets."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from odradek.coordinator.group.consumer_group import ConsumerGroup
from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.server.kafka_config import KafkaConfig
from odradek.server.kafka_raft_server import KafkaRaftServer

GROUP_CONFIG = {
    "offsets.topic.num.partitions": "3",
    "group.consumer.min.session.timeout.ms": "500",
    "group.consumer.session.timeout.ms": "1500",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "300",
}


def run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(fn())  # type: ignore[arg-type]


@asynccontextmanager
async def broker(data: Path, **overrides: str) -> AsyncIterator[tuple[KafkaRaftServer, NetworkClient]]:
    props = {
        "log.dirs": str(data),
        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        **GROUP_CONFIG,
        **overrides,
    }
    server = KafkaRaftServer(KafkaConfig(props))
    await server.startup()
    client = NetworkClient("127.0.0.1", server.bound_ports["PLAINTEXT"], client_id="unit-client")
    await client.connect()
    try:
        yield server, client
    finally:
        await client.close()
        await server.shutdown()


async def wait_until(cond: Callable[[], Any], what: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if asyncio.iscoroutine(v):
            v = await v
        if v:
            return v
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def create_topic(c: NetworkClient, name: str, partitions: int) -> uuid.UUID:
    r = await c.send(
        m.CREATE_TOPICS,
        7,
        {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                     "assignments": [], "configs": []}], "timeout_ms": 5000},
    )
    t = r["topics"][0]
    assert t["error_code"] == 0, t
    return t["topic_id"]  # type: ignore[no-any-return]


async def coordinator_ready(c: NetworkClient, group: str) -> None:
    async def ready() -> bool:
        r = await c.send(m.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
        return bool(r["coordinators"][0]["error_code"] == Errors.NONE)

    await wait_until(ready, "the group coordinator")


class Member:
    """A KIP-848 consumer as the broker sees it: heartbeats reporting what it owns."""

    def __init__(self, c: NetworkClient, group: str, topics: list[str]) -> None:
        self.c, self.group, self.topics = c, group, topics
        self.member_id = ""
        self.epoch = 0
        self.owned: dict[uuid.UUID, list[int]] = {}

    async def heartbeat(self, **over: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "group_id": self.group,
            "member_id": self.member_id,
            "member_epoch": self.epoch,
            "rebalance_timeout_ms": 30000 if self.epoch == 0 else -1,
            "subscribed_topic_names": self.topics if self.epoch == 0 else None,
            "topic_partitions": [
                {"topic_id": t, "partitions": ps} for t, ps in self.owned.items()
            ],
        }
        body.update(over)
        r = await self.c.send(m.CONSUMER_GROUP_HEARTBEAT, 1, body)
        if r["error_code"] == Errors.NONE:
            self.member_id = r["member_id"]
            self.epoch = r["member_epoch"]
            if r["assignment"] is not None:
                self.owned = {
                    tp["topic_id"]: sorted(tp["partitions"])
                    for tp in r["assignment"]["topic_partitions"]
                }
        return r

    def partitions(self) -> set[int]:
        return {p for ps in self.owned.values() for p in ps}

    async def leave(self) -> dict[str, Any]:
        r = await self.c.send(
            m.CONSUMER_GROUP_HEARTBEAT,
            1,
            {"group_id": self.group, "member_id": self.member_id, "member_epoch": -1},
        )
        self.owned, self.epoch = {}, -1
        return r


async def converge(members: list[Member], total: int, rounds: int = 20) -> None:
    """Heartbeat everybody until the partitions are split without overlap."""
    for _ in range(rounds):
        for mem in members:
            r = await mem.heartbeat()
            assert r["error_code"] == Errors.NONE, r
        parts = [mem.partitions() for mem in members]
        if sum(len(p) for p in parts) == total and len(set().union(*parts)) == total and all(parts):
            if len({mem.epoch for mem in members}) == 1:
                return
    raise AssertionError(f"no convergence: {[mem.partitions() for mem in members]}")


async def commit(c: NetworkClient, group: str, member: str, epoch: int, topic: str,
                 offsets: dict[int, int], version: int = 9) -> list[int]:
    r = await c.send(
        m.OFFSET_COMMIT,
        version,
        {"group_id": group, "generation_id_or_member_epoch": epoch, "member_id": member,
         "group_instance_id": None, "retention_time_ms": -1,
         "topics": [{"name": topic, "partitions": [
             {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
              "committed_metadata": ""} for p, o in offsets.items()]}]},
    )
    return [p["error_code"] for t in r["topics"] for p in t["partitions"]]


async def fetch_offsets(c: NetworkClient, group: str, member: str | None, epoch: int) -> dict[str, Any]:
    r = await c.send(
        m.OFFSET_FETCH,
        9,
        {"groups": [{"group_id": group, "member_id": member, "member_epoch": epoch, "topics": None}],
         "require_stable": True},
    )
    return r["groups"][0]  # type: ignore[no-any-return]


async def describe(c: NetworkClient, *groups: str) -> list[dict[str, Any]]:
    r = await c.send(m.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": list(groups),
                                                   "include_authorized_operations": False})
    return r["groups"]  # type: ignore[no-any-return]


def test_apis_are_advertised(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path) as (_, c):
            r = await c.send(m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
            keys = {a["api_key"]: (a["min_version"], a["max_version"]) for a in r["api_keys"]}
            assert keys[68] == (0, 1) and keys[69] == (0, 0)

    run(main)


def test_join_rebalance_commit_describe_leave_delete(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path) as (server, c):
            tid = await create_topic(c, "orders", 4)
            group = "g-" + uuid.uuid4().hex[:6]
            await coordinator_ready(c, group)

            a = Member(c, group, ["orders"])
            r = await a.heartbeat()
            assert r["error_code"] == 0 and r["member_id"] and r["member_epoch"] == 1
            assert r["heartbeat_interval_ms"] == 300
            assert a.owned == {tid: [0, 1, 2, 3]}

            b = Member(c, group, ["orders"])
            await b.heartbeat()
            assert b.epoch == 2 and b.partitions() == set()  # A still owns everything
            await converge([a, b], 4)
            assert len(a.partitions()) == len(b.partitions()) == 2

            # OffsetCommit with the member epoch (v9).
            assert await commit(c, group, a.member_id, a.epoch, "orders", {p: 10 for p in a.partitions()}) == [0, 0]
            assert await commit(c, group, a.member_id, a.epoch - 1, "orders", {0: 1}) == [Errors.STALE_MEMBER_EPOCH]
            assert await commit(c, group, a.member_id, a.epoch + 1, "orders", {0: 1}) == [Errors.STALE_MEMBER_EPOCH]
            assert await commit(c, group, "nobody", a.epoch, "orders", {0: 1}) == [Errors.UNKNOWN_MEMBER_ID]
            assert await commit(c, group, "", -1, "orders", {0: 1}) == [Errors.UNKNOWN_MEMBER_ID]
            assert await commit(c, group, a.member_id, a.epoch, "orders", {0: 1}, version=8) == [Errors.UNSUPPORTED_VERSION]
            assert await commit(c, "nope-" + group, "x", 3, "orders", {0: 1}) == [Errors.GROUP_ID_NOT_FOUND]

            # OffsetFetch with the member epoch (v9); an admin (no member, epoch -1) may always.
            f = await fetch_offsets(c, group, a.member_id, a.epoch)
            assert f["error_code"] == 0
            got = {p["partition_index"]: p["committed_offset"] for t in f["topics"] for p in t["partitions"]}
            assert got == {p: 10 for p in a.partitions()}
            assert (await fetch_offsets(c, group, a.member_id, a.epoch - 1))["error_code"] == Errors.STALE_MEMBER_EPOCH
            assert (await fetch_offsets(c, group, "nobody", 1))["error_code"] == Errors.UNKNOWN_MEMBER_ID
            assert (await fetch_offsets(c, group, None, -1))["error_code"] == 0

            # ConsumerGroupDescribe.
            d, unknown = await describe(c, group, "unknown-" + group)
            assert d["error_code"] == 0 and d["group_state"] == "Stable"
            assert d["group_epoch"] == d["assignment_epoch"] == 2 and d["assignor_name"] == "uniform"
            by_id = {mm["member_id"]: mm for mm in d["members"]}
            assert set(by_id) == {a.member_id, b.member_id}
            ma = by_id[a.member_id]
            assert ma["client_id"] == "unit-client" and ma["client_host"] == "/127.0.0.1"
            assert ma["subscribed_topic_names"] == ["orders"] and ma["member_epoch"] == 2
            assert ma["assignment"]["topic_partitions"] == [
                {"topic_id": tid, "topic_name": "orders", "partitions": sorted(a.partitions())}
            ]
            assert ma["target_assignment"] == ma["assignment"]
            assert unknown["error_code"] == Errors.GROUP_ID_NOT_FOUND

            # ListGroups shows the type; DescribeGroups (classic) answers Dead as Kafka < v6.
            lg = await c.send(m.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["consumer"]})
            listed = {g["group_id"]: g for g in lg["groups"]}
            assert listed[group]["group_type"] == "consumer" and listed[group]["group_state"] == "Stable"
            assert listed[group]["protocol_type"] == "consumer"
            lg = await c.send(m.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["classic"]})
            assert group not in {g["group_id"] for g in lg["groups"]}
            dg = (await c.send(m.DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False}))["groups"][0]
            assert dg["error_code"] == 0 and dg["group_state"] == "Dead" and dg["members"] == []

            # Classic APIs on a consumer group, and a non-empty group cannot be deleted.
            jg = await c.send(m.JOIN_GROUP, 5, {"group_id": group, "session_timeout_ms": 10000,
                                                 "rebalance_timeout_ms": 10000, "member_id": "",
                                                 "group_instance_id": None, "protocol_type": "consumer",
                                                 "protocols": [{"name": "range", "metadata": b""}]})
            assert jg["error_code"] == Errors.INCONSISTENT_GROUP_PROTOCOL
            dl = await c.send(m.DELETE_GROUPS, 2, {"groups_names": [group]})
            assert dl["results"][0]["error_code"] == Errors.NON_EMPTY_GROUP

            # A leaves: B gets all four partitions.
            r = await a.leave()
            assert r["error_code"] == 0 and r["member_epoch"] == -1
            for _ in range(5):
                await b.heartbeat()
            assert b.partitions() == {0, 1, 2, 3} and b.epoch == 3
            assert (await b.heartbeat(member_epoch=1))["error_code"] == Errors.FENCED_MEMBER_EPOCH
            assert (await a.heartbeat(member_epoch=3, member_id=a.member_id))["error_code"] == Errors.UNKNOWN_MEMBER_ID

            # B leaves: the group is empty, keeps its offsets, and can be deleted.
            await b.leave()
            (d,) = await describe(c, group)
            assert d["group_state"] == "Empty" and d["members"] == []
            dl = await c.send(m.DELETE_GROUPS, 2, {"groups_names": [group]})
            assert dl["results"][0]["error_code"] == 0
            assert server.broker.group_coordinator is not None
            assert server.broker.group_coordinator.metadata_manager.get_group(group) is None
            (d,) = await describe(c, group)
            assert d["error_code"] == Errors.GROUP_ID_NOT_FOUND
            assert (await fetch_offsets(c, group, None, -1))["topics"] == []

    run(main)


def test_session_timeout_fences_a_silent_member(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path) as (_, c):
            await create_topic(c, "t", 2)
            group = "g-session"
            await coordinator_ready(c, group)
            a, b = Member(c, group, ["t"]), Member(c, group, ["t"])
            await a.heartbeat()
            await b.heartbeat()
            await converge([a, b], 2)
            started = time.monotonic()

            async def b_alone() -> bool:
                await b.heartbeat()
                (d,) = await describe(c, group)
                return len(d["members"]) == 1 and b.partitions() == {0, 1}

            await wait_until(b_alone, "A's session to expire and B to own everything")
            assert time.monotonic() - started >= 1.0  # the 1500 ms session, minus slack
            assert (await a.heartbeat())["error_code"] == Errors.UNKNOWN_MEMBER_ID

    run(main)


def test_new_partitions_and_topics_reach_the_group(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path) as (_, c):
            await create_topic(c, "grow", 2)
            group = "g-grow"
            await coordinator_ready(c, group)
            a = Member(c, group, ["grow", "later"])
            await a.heartbeat()
            assert a.partitions() == {0, 1} and a.epoch == 1
            r = await c.send(m.CREATE_PARTITIONS, 3, {"topics": [{"name": "grow", "count": 5, "assignments": None}],
                                                      "timeout_ms": 5000, "validate_only": False})
            assert r["results"][0]["error_code"] == 0
            await a.heartbeat()
            assert a.partitions() == {0, 1, 2, 3, 4} and a.epoch == 2
            later = await create_topic(c, "later", 3)
            await a.heartbeat()
            assert a.owned[later] == [0, 1, 2] and a.epoch == 3
            r = await c.send(m.CONSUMER_GROUP_HEARTBEAT, 1, {
                "group_id": group, "member_id": "", "member_epoch": 0, "rebalance_timeout_ms": 1000,
                "subscribed_topic_names": None, "subscribed_topic_regex": "gr.*", "topic_partitions": []})
            assert r["error_code"] == 0
            (d,) = await describe(c, group)
            assert {mm["subscribed_topic_regex"] for mm in d["members"]} == {None, "gr.*"}

    run(main)


def test_group_survives_a_restart(tmp_path: Path) -> None:
    async def main() -> None:
        group = "g-restart"
        async with broker(tmp_path) as (_, c):
            tid = await create_topic(c, "t", 3)
            await coordinator_ready(c, group)
            a, b = Member(c, group, ["t"]), Member(c, group, ["t"])
            await a.heartbeat()
            await b.heartbeat()
            await converge([a, b], 3)
            assert await commit(c, group, a.member_id, a.epoch, "t", {p: 7 for p in a.partitions()}) == [0] * len(a.partitions())
            before = (await describe(c, group))[0]
        async with broker(tmp_path, **{"group.consumer.session.timeout.ms": "60000",
                                       "group.consumer.max.session.timeout.ms": "60000"}) as (server, c):
            await coordinator_ready(c, group)
            (after,) = await describe(c, group)
            assert after == before
            # Members carry on with their epochs; their commits are still valid.
            a.c = b.c = c
            r = await a.heartbeat()
            assert r["error_code"] == 0 and r["member_epoch"] == before["group_epoch"]
            f = await fetch_offsets(c, group, a.member_id, a.epoch)
            got = {p["partition_index"]: p["committed_offset"] for t in f["topics"] for p in t["partitions"]}
            assert got == {p: 7 for p in a.partitions()}
            assert server.broker.group_coordinator is not None
            g = server.broker.group_coordinator.metadata_manager.get_group(group)
            assert isinstance(g, ConsumerGroup) and g.target_assignment_epoch == before["assignment_epoch"]
            assert set(g.target_assignment) == {a.member_id, b.member_id}
            assert tid in a.owned
            # The reloaded members got fresh sessions (timers armed at load).
            assert g.session_deadline(b.member_id) is not None

    run(main)


def test_classic_and_consumer_groups_share_ids_only_when_empty(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, **{"group.initial.rebalance.delay.ms": "0"}) as (server, c):
            await create_topic(c, "t", 2)
            group = "g-mixed"
            await coordinator_ready(c, group)
            # A standalone commit makes an empty classic group holding offsets.
            assert await commit(c, group, "", -1, "t", {0: 5}, version=8) == [0]
            a = Member(c, group, ["t"])
            r = await a.heartbeat()
            assert r["error_code"] == 0, r  # the empty classic group became a consumer group
            assert server.broker.group_coordinator is not None
            g = server.broker.group_coordinator.metadata_manager.get_group(group)
            assert isinstance(g, ConsumerGroup) and g.offsets[("t", 0)].offset == 5
            await a.leave()
            # Now empty: a classic member may take the id back (offsets kept).
            jg = await c.send(m.JOIN_GROUP, 5, {"group_id": group, "session_timeout_ms": 10000,
                                                 "rebalance_timeout_ms": 10000, "member_id": "",
                                                 "group_instance_id": None, "protocol_type": "consumer",
                                                 "protocols": [{"name": "range", "metadata": b""}]})
            assert jg["error_code"] == Errors.MEMBER_ID_REQUIRED
            g2 = server.broker.group_coordinator.metadata_manager.get_group(group)
            assert g2 is not None and g2.group_type == "classic" and g2.offsets[("t", 0)].offset == 5
            jg = await c.send(m.JOIN_GROUP, 5, {"group_id": group, "session_timeout_ms": 10000,
                                                 "rebalance_timeout_ms": 10000, "member_id": jg["member_id"],
                                                 "group_instance_id": None, "protocol_type": "consumer",
                                                 "protocols": [{"name": "range", "metadata": b""}]})
            assert jg["error_code"] == 0
            # A classic group with a member: a consumer-protocol member is refused.
            r = await Member(c, group, ["t"]).heartbeat()
            assert r["error_code"] == Errors.GROUP_ID_NOT_FOUND
            r = await Member(c, "g-never-seen", ["t"]).heartbeat(member_epoch=3, member_id="x")
            assert r["error_code"] == Errors.GROUP_ID_NOT_FOUND

    run(main)


def test_a_failed_write_undoes_the_change(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path) as (server, c):
            await create_topic(c, "t", 2)
            group = "g-fail"
            await coordinator_ready(c, group)
            coord = server.broker.group_coordinator
            assert coord is not None
            mgr = coord.metadata_manager
            real_append = mgr._append
            failing = [True]

            async def append(partition: int, records: list[tuple[bytes, bytes | None]]) -> Errors:
                if failing[0]:
                    return Errors.NOT_ENOUGH_REPLICAS
                return await real_append(partition, records)

            mgr._append = append  # type: ignore[method-assign]
            # The very first join cannot be written: no group is left behind.
            r = await Member(c, group, ["t"]).heartbeat()
            assert r["error_code"] == Errors.COORDINATOR_NOT_AVAILABLE
            assert mgr.get_group(group) is None
            failing[0] = False
            a = Member(c, group, ["t"])
            await a.heartbeat()
            (before,) = await describe(c, group)
            g = mgr.get_group(group)
            assert isinstance(g, ConsumerGroup)
            records_before = g.records()
            # A second member's join fails: the group is as it was, A keeps everything.
            failing[0] = True
            r = await Member(c, group, ["t"]).heartbeat()
            assert r["error_code"] == Errors.COORDINATOR_NOT_AVAILABLE
            assert g.records() == records_before and (await describe(c, group))[0] == before
            r = await a.heartbeat()
            assert r["error_code"] == 0 and a.epoch == 1 and a.partitions() == {0, 1}
            failing[0] = False
            b = Member(c, group, ["t"])
            await b.heartbeat()
            await converge([a, b], 2)

            # OffsetDelete: refused for a topic the group subscribes to, fine for others.
            await create_topic(c, "other", 1)
            assert await commit(c, group, a.member_id, a.epoch, "other", {0: 4}) == [0]
            od = await c.send(m.OFFSET_DELETE, 0, {"group_id": group, "topics": [
                {"name": "t", "partitions": [{"partition_index": 0}]},
                {"name": "other", "partitions": [{"partition_index": 0}]}]})
            codes = {t["name"]: t["partitions"][0]["error_code"] for t in od["topics"]}
            assert od["error_code"] == 0 and codes == {"t": Errors.GROUP_SUBSCRIBED_TO_TOPIC, "other": 0}
            assert ("other", 0) not in g.offsets
            assert coord._locks == {}  # per-group locks live only while in use

    run(main)
