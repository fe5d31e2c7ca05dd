"""The GroupCoordinator shell driven by an injected clock and an injected CoordinatorTimer: session
and rebalance timeouts of KIP-848 members and of classic members fire when the fake time reaches
their deadline, never before; a failed write of an expiry is retried through the timer. No
sockets, no sleeping: time only moves when the test moves it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_group_coordinator import FakeReplicaManager

from odradek.coordinator.group.classic_group import ClassicGroup, ClassicGroupState
from odradek.coordinator.group.classic_group_member import JoinResult
from odradek.coordinator.group.consumer_group import ConsumerGroup
from odradek.coordinator.group.consumer_group_member import MemberState
from odradek.coordinator.group.coordinator_timer import EventLoopTimer
from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import EMPTY_IMAGE
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.protocol.errors import Errors
from odradek.server.delayed_produce import ProducePartitionStatus
from odradek.server.kafka_config import KafkaConfig

SESSION = 45_000  # group.consumer.session.timeout.ms (Kafka's default)
REBALANCE = 30_000
TOPIC_ID = uuid.UUID(int=7)


class FakeTimer:
    """A CoordinatorTimer whose time is the test's clock."""

    def __init__(self, clock: list[int]) -> None:
        self.clock = clock
        self.timers: dict[str, tuple[int, Callable[[], None]]] = {}

    def schedule(self, key: str, delay_ms: int, callback: Callable[[], None]) -> None:
        self.timers[key] = (self.clock[0] + delay_ms, callback)

    def cancel(self, key: str) -> None:
        self.timers.pop(key, None)

    def cancel_all(self) -> None:
        self.timers.clear()

    def due(self, key: str) -> int | None:
        t = self.timers.get(key)
        return None if t is None else t[0]

    def fire_due(self) -> int:
        """Run the timers due at the current time (as the loop would); how many ran."""
        ran = 0
        for key, (at, callback) in sorted(self.timers.items(), key=lambda kv: kv[1][0]):
            if at <= self.clock[0] and self.timers.get(key, (None,))[0] == at:
                del self.timers[key]
                callback()
                ran += 1
        return ran


def metadata_cache(**topics: int) -> KRaftMetadataCache:
    """A cache whose image has __consumer_offsets (1 partition) and the given topics."""
    delta = MetadataDelta(EMPTY_IMAGE)
    offset = 0
    named = {OFFSETS_TOPIC: (uuid.UUID(int=1), 1), **{n: (TOPIC_ID, c) for n, c in topics.items()}}
    for name, (topic_id, count) in named.items():
        delta.replay("TopicRecord", {"name": name, "topic_id": topic_id}, offset)
        offset += 1
        for p in range(count):
            delta.replay("PartitionRecord", {
                "partition_id": p, "topic_id": topic_id, "replicas": [1], "isr": [1],
                "removing_replicas": [], "adding_replicas": [], "leader": 1, "leader_epoch": 0,
                "partition_epoch": 0, "directories": [uuid.UUID(int=0)],
            }, offset)
            offset += 1
    cache = KRaftMetadataCache()
    cache.set_image(delta.apply())
    return cache


def kafka_config(tmp_path: Path) -> KafkaConfig:
    return KafkaConfig(
        {
            "log.dirs": str(tmp_path / "data"),
            "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
            "offsets.topic.num.partitions": "1",
        }
    )


async def coordinator(
    tmp_path: Path, clock: list[int], rm: Any = None
) -> tuple[GroupCoordinator, FakeTimer, Any]:
    rm = rm or FakeReplicaManager(tmp_path, 1)
    timer = FakeTimer(clock)
    gc = GroupCoordinator(
        node_id=1,
        config=kafka_config(tmp_path),
        replica_manager=rm,
        metadata_cache=metadata_cache(t=4),
        controller_channel=None,
        clock_ms=lambda: clock[0],
        timer=timer,
    )
    gc.metadata_manager.schedule_load(0, 0)
    for _ in range(500):
        if not gc.metadata_manager.loading:
            break
        await asyncio.sleep(0.001)
    assert gc.check_group("g") == Errors.NONE
    return gc, timer, rm


async def settle(gc: GroupCoordinator) -> None:
    """Let the tasks the timers spawned (expiry writes) finish."""
    for _ in range(100):
        if not gc._tasks:
            return
        await asyncio.sleep(0)
    raise AssertionError("coordinator tasks did not finish")


def join(member_id: str = "", epoch: int = 0, owned: list[int] | None = None) -> dict[str, Any]:
    return {
        "group_id": "g",
        "member_id": member_id,
        "member_epoch": epoch,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": REBALANCE if epoch == 0 else -1,
        "subscribed_topic_names": ["t"] if epoch == 0 else None,
        "subscribed_topic_regex": None,
        "server_assignor": None,
        "topic_partitions": [] if owned is None else [{"topic_id": TOPIC_ID, "partitions": owned}],
    }


async def heartbeat(gc: GroupCoordinator, req: dict[str, Any]) -> dict[str, Any]:
    resp = await gc.consumer_group_heartbeat(req, client_id="c", client_host="/127.0.0.1")
    assert resp["error_code"] == Errors.NONE, resp
    return resp


def owned(resp: dict[str, Any]) -> list[int]:
    return [p for t in resp["assignment"]["topic_partitions"] for p in t["partitions"]]


def test_session_timeout_fences_a_silent_member_at_its_deadline(tmp_path: Path) -> None:
    async def run() -> None:
        clock = [1_000_000]
        gc, timer, rm = await coordinator(tmp_path, clock)
        a = await heartbeat(gc, join())
        b = await heartbeat(gc, join())
        a_id, b_id = a["member_id"], b["member_id"]
        group = gc.metadata_manager.get_group("g")
        assert isinstance(group, ConsumerGroup) and set(group.members) == {a_id, b_id}
        # One timer for the group, at the earliest session deadline.
        assert timer.due("g") == 1_000_000 + SESSION
        # b keeps heartbeating, a goes silent.
        for step in (15_000, 30_000, 44_999):
            clock[0] = 1_000_000 + step
            timer.fire_due()
            await settle(gc)
            await heartbeat(gc, join(b_id, group.members[b_id].member_epoch))
        assert a_id in group.members  # not a millisecond early
        assert timer.due("g") == 1_000_000 + SESSION
        epoch = group.group_epoch
        end = rm.partitions[(OFFSETS_TOPIC, 0)].log.log_end_offset
        clock[0] = 1_000_000 + SESSION
        assert timer.fire_due() == 1
        await settle(gc)
        assert set(group.members) == {b_id}
        assert group.group_epoch == epoch + 1
        # The fencing was written (member tombstones and the new epoch) ...
        assert rm.partitions[(OFFSETS_TOPIC, 0)].log.log_end_offset > end
        # ... and the timer is re-armed at b's deadline.
        assert timer.due("g") == 1_000_000 + 44_999 + SESSION
        # a learns it is gone.
        resp = await gc.consumer_group_heartbeat(
            join(a_id, 1), client_id="c", client_host="/127.0.0.1"
        )
        assert resp["error_code"] == Errors.UNKNOWN_MEMBER_ID

    asyncio.run(run())


def test_rebalance_timeout_fences_a_member_that_does_not_revoke(tmp_path: Path) -> None:
    async def run() -> None:
        clock = [5_000]
        gc, timer, _ = await coordinator(tmp_path, clock)
        a = await heartbeat(gc, join())
        a_id, a_epoch = a["member_id"], a["member_epoch"]
        assert sorted(owned(a)) == [0, 1, 2, 3]
        # b joins: a must give up two partitions within its rebalance timeout.
        clock[0] = 6_000
        b = await heartbeat(gc, join())
        clock[0] = 7_000
        a = await heartbeat(gc, join(a_id, a_epoch, owned=[0, 1, 2, 3]))
        group = gc.metadata_manager.get_group("g")
        assert isinstance(group, ConsumerGroup)
        assert group.members[a_id].state == MemberState.UNREVOKED_PARTITIONS
        deadline = 7_000 + REBALANCE
        assert group.rebalance_deadline(a_id) == deadline
        # a keeps heartbeating (its session stays alive) but keeps reporting all four.
        for t in (17_000, 27_000, deadline - 1):
            clock[0] = t
            timer.fire_due()
            await settle(gc)
            await heartbeat(gc, join(a_id, a_epoch, owned=[0, 1, 2, 3]))
            await heartbeat(gc, join(b["member_id"], group.members[b["member_id"]].member_epoch))
        assert a_id in group.members
        assert timer.due("g") == deadline
        clock[0] = deadline
        assert timer.fire_due() == 1
        await settle(gc)
        assert a_id not in group.members and set(group.members) == {b["member_id"]}

    asyncio.run(run())


class FailingOnceReplicaManager(FakeReplicaManager):
    """Refuses the next append after ``fail_next`` is set (NOT_LEADER_OR_FOLLOWER)."""

    fail_next = False

    def append_records(self, timeout_ms: int, acks: int, entries: dict[Any, Any]) -> Any:
        if self.fail_next:
            self.fail_next = False

            async def failed() -> dict[Any, ProducePartitionStatus]:
                return {tp: ProducePartitionStatus(error=Errors.NOT_LEADER_OR_FOLLOWER) for tp in entries}

            return failed()
        return super().append_records(timeout_ms, acks, entries)


def test_failed_expiry_write_is_undone_and_retried_through_the_timer(tmp_path: Path) -> None:
    async def run() -> None:
        clock = [0]
        rm = FailingOnceReplicaManager(tmp_path, 1)
        gc, timer, _ = await coordinator(tmp_path, clock, rm)
        a = await heartbeat(gc, join())
        group = gc.metadata_manager.get_group("g")
        assert isinstance(group, ConsumerGroup)
        epoch = group.group_epoch
        clock[0] = SESSION
        rm.fail_next = True
        assert timer.fire_due() == 1
        await settle(gc)
        # The write failed: the group is as it was, and the expiry is tried again in a second.
        assert a["member_id"] in group.members and group.group_epoch == epoch
        assert timer.due("g") == SESSION + 1000
        clock[0] = SESSION + 1000
        assert timer.fire_due() == 1
        await settle(gc)
        assert group.members == {} and group.group_epoch == epoch + 1

    asyncio.run(run())


def test_classic_join_completes_after_the_initial_delay_and_a_silent_member_expires(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        clock = [0]
        gc, timer, _ = await coordinator(tmp_path, clock)
        task = asyncio.ensure_future(
            gc.join_group(
                "classic", member_id="", group_instance_id=None, require_known_member_id=False,
                client_id="c", client_host="/127.0.0.1", rebalance_timeout_ms=60_000,
                session_timeout_ms=10_000, protocol_type="consumer", protocols=[("range", b"m")],
            )
        )
        await asyncio.sleep(0)
        assert not task.done()
        # group.initial.rebalance.delay.ms (3000): the join waits for more members.
        assert timer.due("classic") == 3_000
        clock[0] = 2_999
        assert timer.fire_due() == 0
        clock[0] = 3_000
        assert timer.fire_due() == 1
        result = await asyncio.wait_for(task, 1)
        assert isinstance(result, JoinResult) and result.error == Errors.NONE
        assert result.generation_id == 1
        group = gc.metadata_manager.get_group("classic")
        assert isinstance(group, ClassicGroup) and group.state == ClassicGroupState.COMPLETING_REBALANCE
        # The member neither syncs nor heartbeats: its session (10 s from the join) ends first.
        assert timer.due("classic") == 3_000 + 10_000
        clock[0] = 3_000 + 10_000 - 1
        assert timer.fire_due() == 0
        clock[0] = 3_000 + 10_000
        assert timer.fire_due() == 1
        await settle(gc)
        assert group.members == {}
        await gc.shutdown()
        assert timer.timers == {}

    asyncio.run(run())


def test_event_loop_timer_rearms_cancels_and_fires_once() -> None:
    async def run() -> None:
        timer = EventLoopTimer()
        fired: list[str] = []
        timer.schedule("g", 60_000, lambda: fired.append("old"))
        timer.schedule("g", 0, lambda: fired.append("new"))  # re-arming cancels the old one
        timer.schedule("h", 0, lambda: fired.append("h"))
        timer.cancel("h")
        timer.schedule("i", 60_000, lambda: fired.append("i"))
        for _ in range(50):
            if fired:
                break
            await asyncio.sleep(0.001)
        assert fired == ["new"]
        timer.cancel_all()
        await asyncio.sleep(0.01)
        assert fired == ["new"]

    asyncio.run(run())


@pytest.mark.parametrize("delay", [-5, 0])
def test_event_loop_timer_runs_past_deadlines_at_once(delay: int) -> None:
    async def run() -> None:
        timer = EventLoopTimer()
        fired: list[int] = []
        timer.schedule("g", delay, lambda: fired.append(delay))
        for _ in range(50):
            if fired:
                break
            await asyncio.sleep(0.001)
        assert fired == [delay]

    asyncio.run(run())
