"""Replication throttles (Kafka's ReplicationQuotaManager): the windowed rate, which partitions a
``*.replication.throttled.replicas`` value throttles on a broker, the leader and follower throttle
decisions, and their effect on a follower's fetcher and on a leader's answer to a follower."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_replica_fetcher import (
    LEADER,
    TOPIC_ID,
    TP,
    FakeLeader,
    Target,
    follower,
    partition_answer,
    run_until,
)
from test_replica_manager import Setup, produce
from test_replica_manager_replication import follower_fetch, register, topic

from odradek.records.builder import build_batch
from odradek.server.replica_fetcher_thread import (
    FetcherConfig,
    PartitionFetchState,
    ReplicaFetcherThread,
)
from odradek.server.replication_quota_manager import (
    ALL_REPLICAS,
    LONG_MAX,
    ReplicationQuotaManager,
    ReplicationQuotas,
    SimpleRate,
    parse_throttled_partitions,
    should_follower_throttle,
    should_leader_throttle,
)


def test_simple_rate_is_windowed_with_at_least_one_sample_of_elapsed_time() -> None:
    r = SimpleRate(num_samples=11, sample_ms=1000)
    assert r.measure(0) == 0.0
    r.record(500, 0)
    assert r.measure(0) == 500.0  # one sample's length at least: 500 B over 1 s
    r.record(1500, 1500)
    assert r.measure(2000) == 1000.0  # 2000 B since the oldest sample began 2 s ago
    # 11 samples later the old bytes have left the window.
    assert r.measure(13_000) == 0.0
    r.record(100, 13_000)
    assert r.measure(13_500) == 100.0


def test_quota_is_exceeded_only_above_the_rate_and_never_at_long_max() -> None:
    q = ReplicationQuotaManager("Leader", 11, 1)
    q.record(10**12, 0)
    assert not q.is_quota_exceeded(0)  # default Long.MAX: unthrottled
    q.update_quota(1000)
    assert q.is_quota_exceeded(0)
    q2 = ReplicationQuotaManager("Follower", 11, 1, rate=1000)
    q2.record(1000, 0)
    assert not q2.is_quota_exceeded(0)  # at the rate, not above
    q2.record(1, 0)
    assert q2.is_quota_exceeded(0)
    assert q2.recorded_bytes == 1001
    assert not q2.is_quota_exceeded(20_000)  # the window moved on
    assert LONG_MAX == 9223372036854775807


def test_throttled_replicas_are_those_naming_this_broker() -> None:
    assert parse_throttled_partitions("0:1,1:2,2:1", 1) == {0, 2}
    assert parse_throttled_partitions(" 0:1 , 3:1 ", 1) == {0, 3}
    assert parse_throttled_partitions("0:2", 1) == set()
    assert parse_throttled_partitions("", 1) == set()
    assert parse_throttled_partitions("*", 7) == ALL_REPLICAS
    quotas = ReplicationQuotas(1)
    quotas.update_topic("t", {"leader.replication.throttled.replicas": "0:1,1:2",
                              "follower.replication.throttled.replicas": "*"})
    assert quotas.leader.is_throttled(("t", 0)) and not quotas.leader.is_throttled(("t", 1))
    assert quotas.follower.is_throttled(("t", 1)) and not quotas.follower.is_throttled(("u", 0))
    quotas.update_topic("t", {})  # throttle removed from the topic
    assert not quotas.leader.is_throttled(("t", 0)) and not quotas.follower.is_throttled(("t", 1))
    quotas.update_topic("t", {"leader.replication.throttled.replicas": "*"})
    quotas.update_topic("t", None)  # topic deleted
    assert not quotas.leader.is_throttled(("t", 0))


def test_throttle_decisions_spare_in_sync_replicas_and_unthrottled_partitions() -> None:
    q = ReplicationQuotaManager("Leader", 11, 1, rate=10)
    q.mark_throttled("t", {0})
    assert not should_leader_throttle(q, ("t", 0), False, 0)  # quota not exceeded yet
    q.record(1000, 0)
    assert should_leader_throttle(q, ("t", 0), replica_in_isr=False, now_ms=0)
    assert not should_leader_throttle(q, ("t", 0), replica_in_isr=True, now_ms=0)
    assert not should_leader_throttle(q, ("t", 1), False, 0)
    assert not should_leader_throttle(None, ("t", 0), False, 0)
    assert should_follower_throttle(q, ("t", 0), replica_in_sync=False, now_ms=0)
    assert not should_follower_throttle(q, ("t", 0), replica_in_sync=True, now_ms=0)
    assert not should_follower_throttle(q, ("t", 1), False, 0)


def test_fetch_state_is_in_sync_only_with_no_lag() -> None:
    st = PartitionFetchState(TOPIC_ID, 0, 5)
    assert not st.is_replica_in_sync  # lag unknown before the first fetch
    st.lag = 3
    assert not st.is_replica_in_sync
    st.lag = 0
    assert st.is_replica_in_sync


def test_follower_leaves_a_throttled_partition_out_of_its_fetch_once_over_the_quota(tmp_path: Path) -> None:
    p = follower(tmp_path)
    assert p.log is not None
    batch = build_batch([(b"k", b"v" * 100, [], 1)] * 3, base_offset=0, partition_leader_epoch=5)
    leader = FakeLeader([partition_answer(records=batch, high_watermark=100)])
    quota = ReplicationQuotaManager("Follower", 11, 1, rate=10)  # 10 B/s: one batch exceeds it
    quota.mark_throttled("t", {0})
    config = FetcherConfig(node_id=2, fetch_backoff_ms=10)
    t = ReplicaFetcherThread(0, LEADER, Target(p), config, lambda _s, _c: leader,  # type: ignore[arg-type,return-value]
                             quota=quota)
    t.add_partitions({TP: PartitionFetchState(TOPIC_ID, 0, 5, -1)})

    asyncio.run(run_until(lambda: quota.throttled_count >= 3, t))
    assert p.log.log_end_offset == 3
    assert quota.recorded_bytes == len(batch)
    assert quota.throttled_count >= 3
    # One fetch went out; the partition, still behind the HW (100), was left out of every later one.
    assert sum(r[0] == "Fetch" for r in leader.requests) == 1


def test_follower_keeps_fetching_an_unthrottled_or_in_sync_partition(tmp_path: Path) -> None:
    p = follower(tmp_path)
    batch = build_batch([(b"k", b"v" * 100, [], 1)] * 3, base_offset=0, partition_leader_epoch=5)
    leader = FakeLeader([partition_answer(records=batch, high_watermark=3)])
    quota = ReplicationQuotaManager("Follower", 11, 1, rate=10)
    quota.mark_throttled("t", {0})
    t = ReplicaFetcherThread(0, LEADER, Target(p), FetcherConfig(node_id=2, fetch_backoff_ms=10),
                             lambda _s, _c: leader, quota=quota)  # type: ignore[arg-type,return-value]
    t.add_partitions({TP: PartitionFetchState(TOPIC_ID, 0, 5, -1)})
    # Caught up with the HW (3) after the first fetch: in sync, so never throttled.
    asyncio.run(run_until(lambda: sum(r[0] == "Fetch" for r in leader.requests) >= 2, t))
    assert sum(r[0] == "Fetch" for r in leader.requests) >= 2
    assert quota.throttled_count == 0


@pytest.fixture
def s(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


def test_leader_sends_no_records_of_a_throttled_partition_to_an_out_of_sync_follower(s: Setup) -> None:
    register(s, 1, 2)
    topic(s, leader=1, isr=[1])  # follower 2 is not in the ISR
    s.worker.run_all()
    quotas = ReplicationQuotas(1)  # this leader is broker 1
    quotas.update_rates(10, LONG_MAX)
    quotas.update_topic("t", {"leader.replication.throttled.replicas": "0:1,0:2"})
    quota = quotas.leader
    s.rm.leader_quota = quota

    async def run() -> None:
        res = produce(s, 3)
        if not isinstance(res, dict):
            await res
        (r,) = follower_fetch(s, 0)  # not exceeded yet: the records go, and are recorded
        assert len(r.result.records) > 0
        assert quota.recorded_bytes == len(r.result.records) and quota.is_quota_exceeded(0)
        (r,) = follower_fetch(s, 0)  # over the quota now: nothing for an out-of-ISR follower
        assert r.result.records == b"" and quota.throttled_count == 1
        quota.remove_throttle("t")  # not throttled: served whatever the rate
        (r,) = follower_fetch(s, 0)
        assert len(r.result.records) > 0

    asyncio.run(run())


def test_leader_never_throttles_an_in_sync_follower(s: Setup) -> None:
    register(s, 1, 2)
    topic(s, leader=1, isr=[1, 2])
    s.worker.run_all()
    quota = ReplicationQuotaManager("Leader", 11, 1, rate=10)
    quota.mark_throttled("t", ALL_REPLICAS)
    quota.record(10_000, 0)
    s.rm.leader_quota = quota

    async def run() -> None:
        res = produce(s, 3)
        if not isinstance(res, dict):
            await res
        (r,) = follower_fetch(s, 0)
        assert len(r.result.records) > 0 and quota.throttled_count == 0

    asyncio.run(run())


def test_throttled_fetches_are_counted_and_logged_at_most_every_five_seconds(caplog: pytest.LogCaptureFixture) -> None:
    q = ReplicationQuotaManager("Follower", 11, 1, rate=100)
    q.record(5000, 0)
    with caplog.at_level("INFO", logger="odradek.server.replication_quota_manager"):
        for now in (0, 100, 4999, 5000, 5001):
            q.note_throttled(("t", 3), now)
    assert q.throttled_count == 5
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("Follower replication throttle: holding back t-3 (5000 B/s over the quota of 100 B/s")
