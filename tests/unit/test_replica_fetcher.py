"""ReplicaFetcherThread / ReplicaFetcherManager against a fake leader connection: what a follower
Fetch carries (replica id and broker epoch, leader epoch, last fetched epoch, the replica.fetch.*
settings), appending what comes back with the leader's offsets and HW, truncating on a diverging
epoch, resetting on OFFSET_OUT_OF_RANGE, and which fetcher a partition goes to."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from odradek.cluster.partition import Partition, PartitionState
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.records.builder import build_batch
from odradek.server.replica_fetcher_manager import ReplicaFetcherManager, fetcher_id
from odradek.server.replica_fetcher_thread import (
    FetcherConfig,
    PartitionFetchState,
    ReplicaFetcherThread,
    SourceBroker,
)

TOPIC_ID = uuid.UUID(int=3)
TP = ("t", 0)
LEADER = SourceBroker(1, "127.0.0.1", 1)


class FakeLeader:
    """Answers ApiVersions, then Fetch (and the out-of-range lookups) from scripted handlers."""

    def __init__(self, fetch_answers: list[Any]) -> None:
        self.fetch_answers = fetch_answers
        self.requests: list[tuple[str, int, dict[str, Any]]] = []
        self.closed = False

    async def send(self, api: Any, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append((api.name, version, body))
        if api is g.API_VERSIONS:
            return {"error_code": 0, "api_keys": [
                {"api_key": m.FETCH.api_key, "min_version": 4, "max_version": 17},
                {"api_key": m.LIST_OFFSETS.api_key, "min_version": 1, "max_version": 9},
                {"api_key": m.OFFSET_FOR_LEADER_EPOCH.api_key, "min_version": 2, "max_version": 4},
            ]}
        if api is m.OFFSET_FOR_LEADER_EPOCH:
            return {"topics": [{"topic": "t", "partitions": [{"error_code": 0, "partition": 0,
                                                            "leader_epoch": 5, "end_offset": 100}]}]}
        if api is m.LIST_OFFSETS:
            return {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0,
                                                           "timestamp": -1, "offset": 50}]}]}
        if not self.fetch_answers:
            await asyncio.sleep(3600)
        answer = self.fetch_answers.pop(0)
        return answer if isinstance(answer, dict) else answer(body)

    async def close(self) -> None:
        self.closed = True


def partition_answer(**fields: Any) -> dict[str, Any]:
    pd = {"partition_index": 0, "error_code": 0, "high_watermark": 0, "last_stable_offset": 0,
          "log_start_offset": 0, "diverging_epoch": {"epoch": -1, "end_offset": -1}, "records": b""}
    pd.update(fields)
    return {"error_code": 0, "session_id": 0, "responses": [{"topic": "", "topic_id": TOPIC_ID, "partitions": [pd]}]}


class Target:
    def __init__(self, p: Partition) -> None:
        self.p = p

    def follower_partition(self, tp: tuple[str, int]) -> Partition | None:
        return self.p if tp == TP else None

    def broker_epoch(self) -> int:
        return 42

    def clock_ms(self) -> int:
        return 0

    def follower_appended(self, tp: tuple[str, int]) -> None:
        pass


def follower(tmp_path: Path) -> Partition:
    lg = Log.load(str(tmp_path / "t-0"), LogConfig(), now_ms=0, clean_shutdown=False)
    p = Partition("t", 0, TOPIC_ID, 2)
    p.make_follower(PartitionState("t", 0, TOPIC_ID, leader=1, leader_epoch=5, isr=(1, 2), replicas=(1, 2),
                                   partition_epoch=0), lg)
    return p


async def run_until(cond: Any, fetcher: ReplicaFetcherThread) -> None:
    fetcher.start()
    for _ in range(200):
        if cond():
            break
        await asyncio.sleep(0.01)
    await fetcher.shutdown()


def test_fetch_carries_the_replica_state_and_appends_with_the_leaders_offsets(tmp_path: Path) -> None:
    p = follower(tmp_path)
    assert p.log is not None
    batch = build_batch([(b"k", b"v", [], 1)] * 3, base_offset=0, partition_leader_epoch=5)
    leader = FakeLeader([partition_answer(records=batch, high_watermark=2)])
    config = FetcherConfig(node_id=2, fetch_max_bytes=1234, fetch_response_max_bytes=5678, fetch_wait_max_ms=77,
                           fetch_min_bytes=9, fetch_backoff_ms=10)
    t = ReplicaFetcherThread(0, LEADER, Target(p), config, lambda _s, _c: leader)  # type: ignore[arg-type,return-value]
    t.add_partitions({TP: PartitionFetchState(TOPIC_ID, 0, 5, -1)})

    asyncio.run(run_until(lambda: sum(r[0] == "Fetch" for r in leader.requests) >= 2, t))
    assert (p.log.log_end_offset, p.log.high_watermark, p.log.latest_epoch) == (3, 2, 5)
    name, version, body = next(r for r in leader.requests if r[0] == "Fetch")
    assert version == 17
    assert body["replica_state"] == {"replica_id": 2, "replica_epoch": 42} and body["replica_id"] == 2
    assert (body["max_wait_ms"], body["min_bytes"], body["max_bytes"], body["isolation_level"]) == (77, 9, 5678, 0)
    (part,) = body["topics"][0]["partitions"]
    assert (part["fetch_offset"], part["current_leader_epoch"], part["last_fetched_epoch"],
            part["partition_max_bytes"]) == (0, 5, -1, 1234)
    assert body["topics"][0]["topic_id"] == TOPIC_ID
    # The next fetch goes on from the new end, with the epoch it fetched.
    second = [r for r in leader.requests if r[0] == "Fetch"][1]
    p2 = second[2]["topics"][0]["partitions"][0]
    assert (p2["fetch_offset"], p2["last_fetched_epoch"]) == (3, 5)
    assert leader.closed


def test_a_diverging_epoch_truncates_where_the_logs_agree(tmp_path: Path) -> None:
    p = follower(tmp_path)
    lg = p.log
    assert lg is not None
    for offset, epoch in ((0, 3), (1, 3), (2, 4), (3, 4)):
        lg.append_as_follower(build_batch([(b"k", b"v", [], 1)], base_offset=offset, partition_leader_epoch=epoch))
    # The leader never had epoch 4, and its epoch 3 ended at 1 (this log's at 2): truncate to 1.
    leader = FakeLeader([partition_answer(diverging_epoch={"epoch": 3, "end_offset": 1})])
    t = ReplicaFetcherThread(0, LEADER, Target(p), FetcherConfig(node_id=2), lambda _s, _c: leader)  # type: ignore[arg-type,return-value]
    t.add_partitions({TP: PartitionFetchState(TOPIC_ID, lg.log_end_offset, 5, lg.latest_epoch)})
    asyncio.run(run_until(lambda: lg.log_end_offset == 1, t))
    assert lg.log_end_offset == 1 and lg.leader_epoch_cache.entries == [(3, 0)]
    sent = leader.requests[1][2]["topics"][0]["partitions"][0]
    assert (sent["fetch_offset"], sent["last_fetched_epoch"]) == (4, 4)
    assert t.partitions[TP].fetch_offset == 1 and t.partitions[TP].last_fetched_epoch == 3


def test_out_of_range_restarts_at_the_leaders_log_start(tmp_path: Path) -> None:
    p = follower(tmp_path)
    lg = p.log
    assert lg is not None
    leader = FakeLeader([partition_answer(error_code=Errors.OFFSET_OUT_OF_RANGE)])
    t = ReplicaFetcherThread(0, LEADER, Target(p), FetcherConfig(node_id=2), lambda _s, _c: leader)  # type: ignore[arg-type,return-value]
    t.add_partitions({TP: PartitionFetchState(TOPIC_ID, 0, 5, -1)})
    asyncio.run(run_until(lambda: lg.log_start_offset == 50, t))
    assert (lg.log_start_offset, lg.log_end_offset, t.partitions[TP].fetch_offset) == (50, 50, 50)


def test_fetcher_ids_and_managers() -> None:
    # Kafka's getFetcherId: abs(31 * topic.hashCode + partition) % num.replica.fetchers.
    assert fetcher_id("t", 0, 1) == 0
    assert fetcher_id("topic", 3, 4) == (31 * 110546223 + 3) % 4
    ids = {fetcher_id("topic", p, 3) for p in range(12)}
    assert ids == {0, 1, 2}

    async def run() -> None:
        mgr = ReplicaFetcherManager(Target(Partition("t", 0, TOPIC_ID, 2)), FetcherConfig(node_id=2), 2,
                                    lambda _s, _c: FakeLeader([]))  # type: ignore[arg-type,return-value]
        st = PartitionFetchState(TOPIC_ID, 0, 1)
        mgr.add_fetcher_for_partitions({("t", 0): (LEADER, st), ("t", 1): (LEADER, st)})
        keys = {k for k, f in mgr.fetchers.items() if f.partitions}
        assert keys == {(1, fetcher_id("t", 0, 2)), (1, fetcher_id("t", 1, 2))}
        # The leader moved to another port: a new fetcher takes its partitions.
        moved = SourceBroker(1, "127.0.0.1", 2)
        mgr.add_fetcher_for_partitions({("t", 0): (moved, PartitionFetchState(TOPIC_ID, 0, 2))})
        f = mgr.fetchers[(1, fetcher_id("t", 0, 2))]
        assert f.source == moved and ("t", 0) in f.partitions
        mgr.remove_fetcher_for_partitions([("t", 0), ("t", 1)])
        assert mgr.fetch_state(("t", 0)) is None
        await mgr.shutdown_idle_fetchers()
        assert mgr.fetchers == {}
        await mgr.shutdown()

    asyncio.run(run())


def test_resize_thread_pool_moves_partitions_with_their_state() -> None:
    """num.replica.fetchers changed live (Kafka's resizeThreadPool)."""

    async def run() -> None:
        mgr = ReplicaFetcherManager(Target(Partition("t", 0, TOPIC_ID, 2)), FetcherConfig(node_id=2), 1,
                                    lambda _s, _c: FakeLeader([]))  # type: ignore[arg-type,return-value]
        states = {("t", p): PartitionFetchState(TOPIC_ID, 10 * p, 1) for p in range(6)}
        mgr.add_fetcher_for_partitions({tp: (LEADER, st) for tp, st in states.items()})
        assert {k for k, f in mgr.fetchers.items() if f.partitions} == {(1, 0)}
        mgr.resize_thread_pool(3)
        busy = {k for k, f in mgr.fetchers.items() if f.partitions}
        assert busy == {(1, fetcher_id("t", p, 3)) for p in range(6)} and len(busy) == 3
        for tp, st in states.items():
            assert mgr.fetch_state(tp) is st
            assert tp in mgr.fetchers[(1, fetcher_id(tp[0], tp[1], 3))].partitions
        mgr.resize_thread_pool(1)
        await mgr.shutdown_idle_fetchers()
        assert list(mgr.fetchers) == [(1, 0)] and len(mgr.fetchers[(1, 0)].partitions) == 6
        await mgr.shutdown()

    asyncio.run(run())
