"""ReplicaManager as a leader of followers and as a follower: a follower's Fetch (replica id)
reads to the log end, moves the HW and completes what waits on it (acks=all produces, consumer
fetches), and proposes the follower for the ISR once it is caught up; the periodic ISR check
proposes a shrink; a follower partition gets a replica fetcher toward its leader's registered
inter-broker endpoint, and loses it when it leads."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_replica_manager import TOPIC_ID, TP, Setup, produce, state

from odradek.protocol.errors import Errors
from odradek.records.builder import build_batch
from odradek.server.alter_partition_manager import AlterPartitionItem
from odradek.server.delayed_fetch import FetchPartitionRequest
from odradek.server.replica_fetcher_manager import ReplicaFetcherManager
from odradek.server.replica_fetcher_thread import FetcherConfig


class FakeAlterPartitionManager:
    def __init__(self) -> None:
        self.items: list[AlterPartitionItem] = []

    def submit(self, item: AlterPartitionItem) -> bool:
        self.items.append(item)
        return True


def register(s: Setup, *brokers: int) -> None:
    s.publish(*(("RegisterBrokerRecord", {
        "broker_id": b, "broker_epoch": 10 + b, "incarnation_id": uuid.UUID(int=b), "fenced": False,
        "end_points": [{"name": "INTERNAL", "host": f"10.0.0.{b}", "port": 9000 + b, "security_protocol": 0},
                       {"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9100 + b, "security_protocol": 0}],
    }) for b in brokers))


def topic(s: Setup, leader: int, isr: list[int]) -> None:
    s.publish(("TopicRecord", {"name": "t", "topic_id": TOPIC_ID}),
              ("PartitionRecord", {"partition_id": 0, "topic_id": TOPIC_ID, "replicas": [1, 2], "isr": isr,
                                   "leader": leader, "leader_epoch": 0, "partition_epoch": 0}))


@pytest.fixture
def s(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


def follower_fetch(s: Setup, offset: int, replica: int = 2, epoch: int = 12) -> Any:
    return s.rm.fetch_messages(0, 1, 1 << 20, 1, [FetchPartitionRequest("t", 0, offset, 1 << 20, 0)], replica, epoch)


def test_follower_fetch_moves_the_hw_and_completes_acks_all(s: Setup) -> None:
    apm = FakeAlterPartitionManager()
    s.rm.alter_partition_manager = apm  # type: ignore[assignment]
    register(s, 1, 2)
    topic(s, leader=1, isr=[1, 2])
    s.worker.run_all()

    async def run() -> None:
        waiting = asyncio.ensure_future(produce(s, 3, acks=-1))
        consumer = s.rm.fetch_messages(5000, 1, 1 << 20, 0, [FetchPartitionRequest("t", 0, 0, 1 << 20)])
        assert not isinstance(consumer, list)  # nothing below the HW yet
        consumed = asyncio.ensure_future(consumer)
        await asyncio.sleep(0)
        (r,) = follower_fetch(s, 0)  # reads up to the LEO, not the HW (0)
        assert r.result.error == Errors.NONE and len(r.result.records) > 0 and r.result.high_watermark == 0
        assert not waiting.done()
        (r,) = follower_fetch(s, 3)  # the follower has it: HW 3
        assert r.result.high_watermark == 3
        assert (await waiting)[TP].error == Errors.NONE
        got = (await consumed)[0].result
        assert got.high_watermark == 3 and len(got.records) > 0
        assert apm.items == []  # already in the ISR

    asyncio.run(run())


def test_a_caught_up_follower_is_proposed_for_the_isr_and_a_lagging_one_removed(s: Setup) -> None:
    apm = FakeAlterPartitionManager()
    s.rm.alter_partition_manager = apm  # type: ignore[assignment]
    register(s, 1, 2)
    topic(s, leader=1, isr=[1])
    s.worker.run_all()
    produce(s, 2)
    follower_fetch(s, 1)
    assert apm.items == []  # below the HW (2)
    follower_fetch(s, 2, epoch=99)
    assert apm.items == []  # not at its registered broker epoch (12)
    follower_fetch(s, 2)
    (item,) = apm.items
    assert (item.tp, item.new_isr, item.isr_broker_epochs, item.leader_epoch, item.partition_epoch) == (
        TP, (1, 2), (-1, 12), 0, 0)
    p = s.rm.partitions[TP]
    assert p.pending_isr == (1, 2)
    item.callback(Errors.NONE, 0, 1, (1, 2))
    assert (p.isr, p.partition_epoch, p.pending_isr) == ([1, 2], 1, None)
    # The follower stops fetching while the leader moves on: after replica.lag.time.max.ms the
    # periodic check proposes it out.
    s.rm.replica_lag_time_max_ms = 100
    now = [0]
    s.rm.clock_ms = lambda: now[0]
    produce(s, 1)
    assert s.rm.maybe_shrink_isrs() == 0
    now[0] = 1000
    assert s.rm.maybe_shrink_isrs() == 1
    assert apm.items[-1].new_isr == (1,)


def test_committed_isr_changes_and_appends_are_counted_for_the_metrics(s: Setup) -> None:
    apm = FakeAlterPartitionManager()
    s.rm.alter_partition_manager = apm  # type: ignore[assignment]
    register(s, 1, 2)
    topic(s, leader=1, isr=[1])
    s.worker.run_all()
    produce(s, 2)
    stats = s.rm.topic_stats
    assert (stats.all_topics.messages_in, stats.topics["t"].messages_in) == (2, 2)
    assert stats.topics["t"].bytes_in > 0
    follower_fetch(s, 2)
    (expand,) = apm.items
    expand.callback(Errors.INVALID_UPDATE_VERSION, 0, 1, (1, 2))  # not committed: not counted
    assert (s.rm.isr_expands, s.rm.isr_shrinks) == (0, 0)
    s.rm.partitions[TP].pending_isr = None
    follower_fetch(s, 2)
    apm.items[-1].callback(Errors.NONE, 0, 1, (1, 2))
    assert (s.rm.isr_expands, s.rm.isr_shrinks) == (1, 0)
    s.rm.replica_lag_time_max_ms = 100
    now = [0]
    s.rm.clock_ms = lambda: now[0]
    produce(s, 1)
    now[0] = 1000
    assert s.rm.maybe_shrink_isrs() == 1
    apm.items[-1].callback(Errors.NONE, 0, 2, (1,))
    assert (s.rm.isr_expands, s.rm.isr_shrinks) == (1, 1)


def test_a_follower_fetches_from_its_leaders_inter_broker_listener(s: Setup) -> None:
    fm = ReplicaFetcherManager(s.rm, FetcherConfig(node_id=1))
    s.rm.replica_fetcher_manager = fm
    s.rm.inter_broker_listener = "INTERNAL"

    async def run() -> None:
        register(s, 1, 2)
        topic(s, leader=2, isr=[1, 2])
        s.worker.run_all()  # the follower's log is created: then it fetches
        st = fm.fetch_state(TP)
        assert st is not None and (st.fetch_offset, st.current_leader_epoch) == (0, 0)
        (f,) = fm.fetchers.values()
        assert (f.source.host, f.source.port) == ("10.0.0.2", 9002)
        # It becomes the leader: the fetcher goes.
        s.publish(("PartitionChangeRecord", {"partition_id": 0, "topic_id": TOPIC_ID, "leader": 1}))
        assert fm.fetch_state(TP) is None
        await asyncio.sleep(0.05)  # idle fetchers are stopped in the background
        assert fm.fetchers == {}
        await fm.shutdown()

    asyncio.run(run())


def test_a_log_of_an_earlier_topic_of_the_same_name_is_replaced(s: Setup) -> None:
    """A topic deleted and recreated while this broker was away: its log on disk carries the old
    topic id, so it is deleted before the new topic's is created, not reused with its records."""
    old = s.lm.get_or_create_log("t", 0, None, uuid.UUID(int=77).bytes)
    old.append_as_follower(bytearray(build_batch([(b"k", b"old", [], 1)] * 4)))
    s.rm.make_leaders([state()])
    s.worker.run_all()
    lg = s.lm.get_log(*TP)
    assert lg is not None and lg is not old
    assert (lg.log_end_offset, lg.topic_id) == (0, TOPIC_ID.bytes)
