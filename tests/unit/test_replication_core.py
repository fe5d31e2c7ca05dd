"""The replication cores without sockets: the leader's view of its followers (caught-up time,
ISR shrink and expand decisions, the HW over the maximal ISR), follower appends and the KIP-320
truncation offsets, including the KIP-101 scenario of two logs diverging at the same offset."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from odradek.cluster.partition import Partition, PartitionState
from odradek.cluster.replica import IsrState, Replica, can_join_isr, out_of_sync_replicas
from odradek.log.fetch_data_info import FetchDataInfo
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.protocol.errors import Errors, KafkaError
from odradek.records.builder import build_batch
from odradek.server.replica_fetcher_thread import truncation_offset

TOPIC_ID = uuid.UUID(int=7)
LAG = 30000


def state(leader: int, leader_epoch: int, partition_epoch: int = 0, isr: tuple[int, ...] = (1, 2, 3),
          replicas: tuple[int, ...] = (1, 2, 3)) -> PartitionState:
    return PartitionState("t", 0, TOPIC_ID, leader=leader, leader_epoch=leader_epoch, isr=isr,
                          replicas=replicas, partition_epoch=partition_epoch)


def new_log(tmp_path: Path, name: str) -> Log:
    return Log.load(str(tmp_path / name / "t-0"), LogConfig(), now_ms=0, clean_shutdown=False)


def produce(p: Partition, n: int = 1, value: bytes = b"v") -> int:
    """Append n records as leader; returns the LEO after."""
    info = p.append_records_to_leader(bytearray(build_batch([(b"k", value, [], 1)] * n)), -1, 0)
    return info.last_offset + 1


def read_bytes(data: object) -> bytes:
    if isinstance(data, FetchDataInfo):
        return bytes(data.to_bytes())
    assert isinstance(data, (bytes, bytearray, memoryview))
    return bytes(data)


# -- Replica (the leader's view of one follower) -------------------------------------------------


def test_caught_up_time_follows_kafkas_rule() -> None:
    r = Replica(2)
    r.update_fetch_state(fetch_offset=5, log_start_offset=0, fetch_time_ms=100, leader_end_offset=10)
    assert (r.log_end_offset, r.last_caught_up_time_ms) == (5, 0)  # behind: not caught up
    # At t=200 it reaches 10, the LEO the leader had at its previous fetch (t=100), while the
    # leader is at 12 now: caught up as of the previous fetch.
    r.update_fetch_state(10, 0, 200, 12)
    assert r.last_caught_up_time_ms == 100
    r.update_fetch_state(12, 0, 300, 12)  # at the leader's LEO: caught up now
    assert r.last_caught_up_time_ms == 300
    assert r.is_caught_up(12, 10_000, LAG)
    assert not r.is_caught_up(13, 300 + LAG + 1, LAG)


def test_out_of_sync_replicas_after_the_lag_time() -> None:
    a, b = Replica(2), Replica(3)
    a.update_fetch_state(10, 0, 1000, 10)  # caught up at 1000
    b.update_fetch_state(4, 0, 1000, 10)  # never caught up (0)
    reps = {2: a, 3: b}
    assert out_of_sync_replicas([2, 3], reps, 10, 1000 + LAG, LAG) == [3]
    # The leader moved on; follower 2 last caught up at 1000.
    assert out_of_sync_replicas([2, 3], reps, 11, 1000 + LAG + 1, LAG) == [2, 3]
    # A follower at the leader's LEO is never out of sync, however long ago it was caught up.
    assert out_of_sync_replicas([2], reps, 10, 10**9, LAG) == []


def test_a_follower_joins_the_isr_at_the_hw_and_the_leader_epoch_start() -> None:
    r = Replica(2)
    assert not can_join_isr(r, 0, 0)  # has not fetched
    r.update_fetch_state(8, 0, 0, 10)
    assert can_join_isr(r, 8, 5)
    assert not can_join_isr(r, 9, 5)  # below the HW
    assert not can_join_isr(r, 8, 9)  # below the start of this leader's epoch


def test_maximal_isr_counts_members_being_added_and_removed() -> None:
    assert IsrState((1, 2)).maximal_isr == (1, 2)
    assert IsrState((1, 2), pending=(1, 2, 3)).maximal_isr == (1, 2, 3)
    assert IsrState((1, 2, 3), pending=(1, 3)).maximal_isr == (1, 2, 3)


# -- Partition as leader: HW, ISR changes --------------------------------------------------------


def test_hw_is_the_smallest_leo_in_the_isr(tmp_path: Path) -> None:
    p = Partition("t", 0, TOPIC_ID, 1)
    p.make_leader(state(1, 0), new_log(tmp_path, "l"), now_ms=0)
    assert p.log is not None and p.leader_epoch_start_offset == 0
    assert produce(p, 5) == 5 and p.log.high_watermark == 0
    assert p.update_follower_fetch_state(2, 5, 0, 10) is False  # 3 has not fetched: HW stays
    assert p.log.high_watermark == 0
    assert p.update_follower_fetch_state(3, 3, 0, 10) is True
    assert p.log.high_watermark == 3
    assert p.update_follower_fetch_state(3, 5, 0, 20) is True
    assert p.log.high_watermark == 5
    with pytest.raises(KafkaError) as e:
        p.update_follower_fetch_state(9, 5, 0, 20)  # not a replica
    assert e.value.code == Errors.NOT_LEADER_OR_FOLLOWER


def test_shrink_is_proposed_then_takes_effect_only_when_committed(tmp_path: Path) -> None:
    p = Partition("t", 0, TOPIC_ID, 1)
    p.make_leader(state(1, 0, partition_epoch=4), new_log(tmp_path, "l"), now_ms=1000)
    produce(p, 4)
    p.update_follower_fetch_state(2, 4, 0, 1500)
    assert p.maybe_shrink_isr(1000 + LAG, LAG) is None  # 3 was in sync at the election
    proposed = p.maybe_shrink_isr(1001 + LAG, LAG)
    assert proposed == (1, 2) and p.pending_isr == (1, 2)
    assert p.isr == [1, 2, 3] and p.log is not None and p.log.high_watermark == 0  # 3 still counts
    assert p.maybe_shrink_isr(2000 + LAG, LAG) is None  # one proposal at a time
    # A stale answer (another proposal) changes nothing; the controller's commit does.
    assert p.alter_isr_done((1,), Errors.NONE, 0, 5, (1,)) is False and p.pending_isr == (1, 2)
    assert p.alter_isr_done(proposed, Errors.NONE, 0, 5, (1, 2)) is True
    assert (p.isr, p.partition_epoch, p.pending_isr, p.log.high_watermark) == ([1, 2], 5, None, 4)


def test_refused_alter_partition_keeps_the_committed_isr(tmp_path: Path) -> None:
    p = Partition("t", 0, TOPIC_ID, 1)
    p.make_leader(state(1, 0, isr=(1, 2)), new_log(tmp_path, "l"), now_ms=0)
    produce(p, 2)
    p.update_follower_fetch_state(2, 2, 0, 5)
    p.update_follower_fetch_state(3, 2, 0, 5)
    proposed = p.maybe_expand_isr(3)
    assert proposed == (1, 2, 3) and p.maximal_isr == (1, 2, 3)
    # The controller says it did not apply it: dropped, proposed again at the next fetch.
    for error in (Errors.INELIGIBLE_REPLICA, Errors.OPERATION_NOT_ATTEMPTED):
        assert p.alter_isr_done(proposed, error) is False
        assert (p.isr, p.pending_isr) == ([1, 2], None)
        assert p.maybe_expand_isr(3) == proposed
    # Whether it was applied is unknown (a retry of a committed proposal whose answer was lost
    # gets INVALID_UPDATE_VERSION): it stays pending, the HW counting 3, until the metadata.
    for error in (Errors.INVALID_UPDATE_VERSION, Errors.FENCED_LEADER_EPOCH, Errors.NEW_LEADER_ELECTED,
                  Errors.UNKNOWN_TOPIC_OR_PARTITION):
        assert p.alter_isr_done(proposed, error) is False
        assert (p.isr, p.pending_isr, p.maximal_isr) == ([1, 2], proposed, (1, 2, 3))
        assert p.maybe_expand_isr(3) is None and p.maybe_shrink_isr(10**9, LAG) is None
    # The metadata brings the controller's state: it replaces the pending proposal.
    p.make_leader(state(1, 0, partition_epoch=1, isr=(1, 2, 3)), p.log, now_ms=10)
    assert (p.isr, p.pending_isr, p.partition_epoch) == ([1, 2, 3], None, 1)
    assert p.alter_isr_done(proposed, Errors.NONE, 0, 1, (1, 2, 3)) is False  # late answer: ignored


def test_metadata_at_the_answered_partition_epoch_keeps_a_later_proposal(tmp_path: Path) -> None:
    """Found by tests/sim/replication_sim.py: the AlterPartition answer (ISR [1, 2], partition
    epoch 1) comes before the metadata record of the same change; the leader proposes [1, 2, 3]
    at epoch 1; then the metadata for epoch 1 arrives. The proposal may still be committed, so it
    stays pending and follower 3 keeps holding back the HW — dropping it let the HW pass 3's log
    end while the controller put 3 in the ISR, and electing 3 next lost acknowledged records."""
    p = Partition("t", 0, TOPIC_ID, 1)
    p.make_leader(state(1, 0, isr=(1,)), new_log(tmp_path, "l"), now_ms=0)
    assert p.log is not None
    produce(p, 2)
    p.update_follower_fetch_state(2, 2, 0, 5)
    assert p.maybe_expand_isr(2) == (1, 2)
    assert p.alter_isr_done((1, 2), Errors.NONE, 0, 1, (1, 2)) is False
    p.update_follower_fetch_state(3, 2, 0, 6)
    proposed = p.maybe_expand_isr(3)
    assert proposed == (1, 2, 3)
    # The metadata record of partition epoch 1 (the change the answer already told).
    p.make_leader(state(1, 0, partition_epoch=1, isr=(1, 2)), p.log, now_ms=7)
    assert (p.isr, p.pending_isr, p.maximal_isr) == ([1, 2], (1, 2, 3), (1, 2, 3))
    produce(p, 3)
    p.update_follower_fetch_state(2, 5, 0, 8)
    assert p.log.high_watermark == 2  # 3, perhaps in the ISR already, is still at 2
    # A newer partition epoch supersedes the proposal.
    p.make_leader(state(1, 0, partition_epoch=2, isr=(1, 2, 3)), p.log, now_ms=9)
    assert (p.isr, p.pending_isr) == ([1, 2, 3], None)


def test_expand_waits_for_the_hw_and_the_epoch_start(tmp_path: Path) -> None:
    lg = new_log(tmp_path, "l")
    lg.append_as_follower(build_batch([(b"k", b"v", [], 1)] * 3, partition_leader_epoch=0))
    p = Partition("t", 0, TOPIC_ID, 1)
    p.make_leader(state(1, 1, isr=(1, 2)), lg, now_ms=0)  # leader epoch 1 starts at offset 3
    assert p.leader_epoch_start_offset == 3 and lg.leader_epoch_cache.entries == [(0, 0), (1, 3)]
    p.update_follower_fetch_state(3, 2, 0, 5)
    p.update_follower_fetch_state(2, 3, 0, 5)
    assert lg.high_watermark == 3
    assert p.maybe_expand_isr(3) is None  # at 2: below the HW and the epoch start
    p.update_follower_fetch_state(3, 3, 0, 6)
    assert p.maybe_expand_isr(3) == (1, 2, 3)


def test_acks_all_below_min_isr_and_after_append(tmp_path: Path) -> None:
    lg = new_log(tmp_path, "l")
    lg.update_config(LogConfig(min_insync_replicas=2))
    p = Partition("t", 0, TOPIC_ID, 1)
    p.make_leader(state(1, 0, isr=(1,)), lg, now_ms=0)
    with pytest.raises(KafkaError) as e:
        produce(p)
    assert e.value.code == Errors.NOT_ENOUGH_REPLICAS
    p.make_leader(state(1, 0, partition_epoch=1, isr=(1, 2)), lg, now_ms=0)
    required = produce(p)
    assert p.check_enough_replicas_reach_offset(required) == (False, Errors.NONE)
    p.make_leader(state(1, 0, partition_epoch=2, isr=(1,)), lg, now_ms=0)  # shrank meanwhile
    assert p.check_enough_replicas_reach_offset(required) == (True, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND)


def test_consumers_read_to_the_hw_followers_to_the_leo(tmp_path: Path) -> None:
    p = Partition("t", 0, TOPIC_ID, 1)
    p.make_leader(state(1, 0, isr=(1, 2), replicas=(1, 2)), new_log(tmp_path, "l"), now_ms=0)
    produce(p, 3)
    consumer = p.read_records(0, 1 << 20, 0, True)
    assert (consumer.high_watermark, read_bytes(consumer.records)) == (0, b"")
    follower = p.read_records(0, 1 << 20, 0, True, for_follower=True)
    assert len(read_bytes(follower.records)) > 0 and follower.log_end_offset == 3


# -- followers: append, truncation (KIP-320 / KIP-101) --------------------------------------------


def test_truncation_offsets() -> None:
    # The follower knows the leader's epoch: up to the smaller end of that epoch.
    assert truncation_offset(3, 10, (3, 12), 15) == (10, True)
    assert truncation_offset(3, 10, (3, 8), 15) == (8, True)
    # The follower does not know it: to the end of its largest epoch below, and ask again.
    assert truncation_offset(4, 10, (2, 7), 15) == (7, False)
    # No epoch at all: the leader's end offset (never beyond the log end).
    assert truncation_offset(3, 10, (-1, -1), 15) == (10, True)
    assert truncation_offset(3, 10, (-1, -1), 6) == (6, True)


def fetch_until_in_sync(leader: Partition, follower: Partition, follower_id: int, rounds: int = 10) -> None:
    """What the replica fetcher does, without the network: fetch, truncate on a diverging epoch,
    append, until nothing more comes."""
    lg = follower.log
    assert lg is not None
    for _ in range(rounds):
        res = leader.read_records(lg.log_end_offset, 1 << 20, 0, True, leader.leader_epoch,
                                  lg.latest_epoch, for_follower=True)
        assert res.error == Errors.NONE
        if res.diverging_epoch is not None:
            epoch, end = res.diverging_epoch
            offset, _ = truncation_offset(epoch, end, lg.end_offset_for_epoch(epoch), lg.log_end_offset)
            lg.truncate_to(offset)
            continue
        leader.update_follower_fetch_state(follower_id, lg.log_end_offset, lg.log_start_offset, 0)
        data = read_bytes(res.records)
        follower.append_records_as_follower(data, res.high_watermark, res.log_start_offset, 0)
        if not data and lg.log_end_offset == leader.log.log_end_offset:  # type: ignore[union-attr]
            return
    raise AssertionError("the follower did not catch up")


def test_kip_101_logs_diverging_at_the_same_offset_become_identical(tmp_path: Path) -> None:
    """A leads epoch 0 and writes 0-1 (acknowledged by B, HW 2), then offset 2 that B never gets;
    both crash; B leads epoch 1 and writes its own offset 2-3; A returns as B's follower: A's
    offset 2 (epoch 0) must go, the acknowledged prefix stays, and both logs end identical."""
    a_log, b_log = new_log(tmp_path, "a"), new_log(tmp_path, "b")
    a = Partition("t", 0, TOPIC_ID, 1)
    b = Partition("t", 0, TOPIC_ID, 2)
    a.make_leader(state(1, 0, isr=(1, 2), replicas=(1, 2)), a_log, now_ms=0)
    b.make_follower(state(1, 0, isr=(1, 2), replicas=(1, 2)), b_log)
    produce(a, 2, b"acked")
    fetch_until_in_sync(a, b, 2)
    assert a_log.high_watermark == 2 and b_log.log_end_offset == 2
    produce(a, 1, b"lost")  # never replicated
    # B leads epoch 1 (A was in the ISR but is gone), writes two records.
    b.make_leader(state(2, 1, partition_epoch=1, isr=(2,), replicas=(1, 2)), b_log, now_ms=0)
    produce(b, 2, b"new")
    assert (a_log.log_end_offset, b_log.log_end_offset) == (3, 4)
    # A returns, follows B: diverging epoch 0 ends at 2 on B -> A truncates its offset 2.
    a.make_follower(state(2, 1, partition_epoch=2, isr=(2,), replicas=(1, 2)), a_log)
    res = b.read_records(3, 1 << 20, 0, True, 1, a_log.latest_epoch, for_follower=True)
    assert res.diverging_epoch == (0, 2) and read_bytes(res.records) == b""
    fetch_until_in_sync(b, a, 1)
    assert a_log.leader_epoch_cache.entries == b_log.leader_epoch_cache.entries == [(0, 0), (1, 2)]
    a_data = read_bytes(a_log.read(0, 1 << 20, a_log.log_end_offset, True))
    b_data = read_bytes(b_log.read(0, 1 << 20, b_log.log_end_offset, True))
    assert a_data == b_data and a_log.log_end_offset == 4
    assert b"lost" not in a_data and a_data.count(b"acked") == 2
    assert a_log.high_watermark == b_log.high_watermark == 4


def test_follower_keeps_the_leaders_hw_never_beyond_its_end(tmp_path: Path) -> None:
    lg = new_log(tmp_path, "f")
    f = Partition("t", 0, TOPIC_ID, 2)
    f.make_follower(state(1, 0), lg)
    f.append_records_as_follower(build_batch([(b"k", b"v", [], 1)] * 3, partition_leader_epoch=0), 10, 0, 0)
    assert (lg.log_end_offset, lg.high_watermark, lg.latest_epoch) == (3, 3, 0)
    f.append_records_as_follower(b"", 2, 0, 0)
    assert lg.high_watermark == 2  # as Kafka's follower: the leader's HW as it is (a new leader's may lag)
    with pytest.raises(KafkaError):
        Partition("t", 0, TOPIC_ID, 1).append_records_as_follower(b"", 0, 0, 0)  # not following
