"""The QuorumController's event queue and managers wired together, over a fake Raft the test
commits by hand and a fake clock: the fencing check is a tagged deferred event that fences a
silent broker, a write still queued past its deadline fails with REQUEST_TIMED_OUT (a timed-out
heartbeat still counts as contact), controlled shutdown moves leaders and then answers
should_shut_down, and a standby refuses with NOT_CONTROLLER."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from fake_clock import FakeClock
from test_quorum_controller import CLUSTER_ID, FakeRaft, _heartbeat, _registration

from odradek.controller.event_queue import EventTimeoutError
from odradek.controller.quorum_controller import QuorumController
from odradek.protocol.errors import Errors, KafkaError
from odradek.raft.raft_client import LeaderAndEpoch

SESSION_MS = 9000
TOPIC_ID = uuid.UUID(int=42)


class Harness:
    def __init__(self) -> None:
        self.raft = FakeRaft()
        self.clock = FakeClock(5_000_000)
        self.c = QuorumController(
            1, self.raft, default_partitions=1, default_replication_factor=1, delete_topic_enable=True,
            validate_config=lambda _k, _v: None, cluster_id=CLUSTER_ID, session_timeout_ms=SESSION_MS,
            clock_ms=self.clock,
        )
        self.committed = 0

    async def settle(self) -> None:
        for _ in range(30):
            await asyncio.sleep(0)

    async def commit_all(self) -> None:
        """Commit every proposed batch (as Raft would), repeatedly until nothing new comes."""
        for _ in range(20):
            await self.settle()
            new = self.raft.proposed[self.committed:]
            if not new:
                return
            self.committed += len(new)
            self.c.handle_commit(new)

    async def lead(self) -> None:
        self.raft.leader = LeaderAndEpoch(1, 1)
        self.c.handle_leader_change(self.raft.leader)
        await self.commit_all()

    async def write(self, coro: Any) -> Any:
        task = asyncio.ensure_future(coro)
        await self.commit_all()
        return await asyncio.wait_for(task, 5)

    async def unfenced_broker(self, broker_id: int) -> int:
        epoch = await self.write(self.c.register_broker(dict(_registration(broker_id), incarnation_id=uuid.UUID(int=broker_id))))
        reply = await self.write(self.c.broker_heartbeat(_heartbeat(broker_id, epoch, self.raft.log_end_offset - 1)))
        assert not reply.is_fenced
        return epoch

    def proposed_names(self) -> list[str]:
        return [name for batch in self.raft.proposed for name, _ in batch.records]


def test_silent_broker_is_fenced_by_the_deferred_fencing_check() -> None:
    h = Harness()

    async def run() -> None:
        await h.lead()
        await h.unfenced_broker(1)
        await h.unfenced_broker(2)
        assert h.c.queue.core.first_deferred_if_idling() is not None  # the check is scheduled
        h.clock.advance(SESSION_MS // 2)
        await h.write(h.c.broker_heartbeat(_heartbeat(2, h.c.image.brokers[2].epoch, h.raft.log_end_offset - 1)))
        h.clock.advance(SESSION_MS // 2 + 1)  # broker 1's session has run out, broker 2's not
        h.c.queue.wakeup()
        await h.commit_all()
        assert h.c.image.brokers[1].fenced and not h.c.image.brokers[2].fenced
        assert h.proposed_names()[-1] == "BrokerRegistrationChangeRecord"
        # Rescheduled for broker 2, under the same tag: one deferred event.
        assert h.c.queue.size() == 1
        h.clock.advance(SESSION_MS)
        h.c.queue.wakeup()
        await h.commit_all()
        assert h.c.image.brokers[2].fenced
        assert h.c.queue.size() == 0  # no unfenced broker left: no check scheduled

    asyncio.run(run())


def test_a_write_still_queued_past_its_deadline_times_out() -> None:
    h = Harness()

    async def run() -> None:
        await h.lead()
        epoch = await h.unfenced_broker(1)
        # An event holds the queue (writes are pipelined: one waiting for its commit no longer
        # does); the next write has 100 ms.
        release: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def hold() -> str:
            await release
            return "released"

        first = h.c.queue.submit_async("hold", hold)
        await h.settle()
        second = asyncio.ensure_future(h.c.create_topics([{"name": "t"}], validate_only=False, timeout_ms=100))
        beat = asyncio.ensure_future(h.c.broker_heartbeat(_heartbeat(1, epoch, 0), timeout_ms=100))
        await h.settle()
        h.clock.advance(101)
        release.set_result(None)
        await h.commit_all()
        assert await asyncio.wait_for(first, 5) == "released"
        with pytest.raises(EventTimeoutError) as e:
            await asyncio.wait_for(second, 5)
        assert e.value.code == Errors.REQUEST_TIMED_OUT
        assert "t" not in h.c.image.topics_by_name
        with pytest.raises(EventTimeoutError):
            await asyncio.wait_for(beat, 5)
        # The timed-out heartbeat still refreshed the broker's session.
        hb = h.c.cluster.heartbeat_manager
        assert hb is not None and hb.brokers[1].last_contact_ms == h.clock()

    asyncio.run(run())


def test_controlled_shutdown_moves_leadership_then_says_should_shut_down() -> None:
    h = Harness()

    async def run() -> None:
        await h.lead()
        e1 = await h.unfenced_broker(1)
        e2 = await h.unfenced_broker(2)
        h.c.handle_commit([_partition_batch(h, [1, 2], leader=1)])
        h.committed += 1
        reply = await h.write(h.c.broker_heartbeat(_heartbeat(1, e1, h.raft.log_end_offset - 1, want_shut_down=True)))
        assert (reply.in_controlled_shutdown, reply.should_shut_down) == (True, False)
        p = h.c.image.partition("t", 0)
        assert p is not None and (p.leader, p.isr) == (2, (2,))
        # Broker 2 has seen the change: broker 1 may go.
        await h.write(h.c.broker_heartbeat(_heartbeat(2, e2, h.raft.log_end_offset - 1)))
        reply = await h.write(h.c.broker_heartbeat(_heartbeat(1, e1, h.raft.log_end_offset - 1, want_shut_down=True)))
        assert reply.should_shut_down and h.c.image.brokers[1].fenced

    asyncio.run(run())


def _partition_batch(h: Harness, replicas: list[int], leader: int) -> Any:
    from odradek.raft.raft_client import Batch

    base = h.raft.log_end_offset
    records = [
        ("TopicRecord", {"name": "t", "topic_id": TOPIC_ID}),
        ("PartitionRecord", {
            "partition_id": 0, "topic_id": TOPIC_ID, "replicas": replicas, "isr": replicas, "leader": leader,
            "leader_epoch": 0, "partition_epoch": 0,
        }),
    ]
    h.raft._end += len(records)
    h.raft.proposed.append(Batch(base, 1, 0, records))
    return Batch(base, 1, 0, records)


def test_a_standby_refuses_and_drops_its_fencing_check() -> None:
    h = Harness()

    async def run() -> None:
        await h.lead()
        await h.unfenced_broker(1)
        assert h.c.queue.size() == 1
        h.raft.leader = LeaderAndEpoch(2, 2)
        h.c.handle_leader_change(h.raft.leader)
        assert h.c.queue.size() == 0 and h.c.cluster.heartbeat_manager is None
        with pytest.raises(KafkaError) as e:
            await h.c.register_broker(_registration(3))
        assert e.value.code == Errors.NOT_CONTROLLER
        await h.c.close()

    asyncio.run(run())
