"""Transactions through Partition (sans-I/O): a follower replicates transactional batches and
markers with the producer state, so that after a failover the new leader's last stable offset
holds at the open transaction and moves once the new leader writes its marker; read_committed
reads (leader and KIP-392 follower) stop at the LSO and list the aborted transactions."""

from __future__ import annotations

import uuid
from pathlib import Path

from odradek.cluster.partition import Partition, PartitionState
from odradek.log.append_origin import AppendOrigin
from odradek.log.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log
from odradek.log.log_config import LogConfig
from odradek.records.builder import build_batch
from odradek.records.control_batch import build_end_txn_marker

TOPIC_ID = uuid.UUID(int=7)
PID, OTHER = 5, 6


def state(leader: int, epoch: int, isr: tuple[int, ...]) -> PartitionState:
    return PartitionState("t", 0, TOPIC_ID, leader=leader, leader_epoch=epoch, isr=isr, replicas=(1, 2),
                          partition_epoch=epoch)


def txn(pid: int, n: int, seq: int = 0) -> bytearray:
    return bytearray(build_batch([(b"k", b"v", [], 1_000)] * n, producer_id=pid, producer_epoch=0,
                                 base_sequence=seq, is_transactional=True))


def replicate(leader: Partition, follower: Partition) -> None:
    """One follower fetch: the follower appends what the leader has past its LEO, then the
    leader learns the follower's LEO (the HW moves) and the follower takes the HW."""
    assert follower.log is not None and leader.log is not None
    res = leader.read_records(follower.log.log_end_offset, 1 << 20, 0, True, for_follower=True)
    data = res.records.to_bytes() if res.records else b""
    follower.append_records_as_follower(data, res.high_watermark, res.log_start_offset, 0)
    leader.update_follower_fetch_state(2, follower.log.log_end_offset, 0, 0)
    follower.append_records_as_follower(b"", leader.log.high_watermark, leader.log.log_start_offset, 0)


def test_lso_survives_failover_and_moves_with_the_new_leaders_marker(tmp_path: Path) -> None:
    logs = [Log.load(str(tmp_path / f"b{i}" / "t-0"), LogConfig(), now_ms=0, clean_shutdown=False) for i in (1, 2)]
    one, two = Partition("t", 0, TOPIC_ID, 1), Partition("t", 0, TOPIC_ID, 2)
    one.make_leader(state(1, 1, (1, 2)), logs[0])
    two.make_follower(state(1, 1, (1, 2)), logs[1])
    one.append_records_to_leader(bytearray(build_batch([(b"k", b"plain", [], 1_000)])), -1, 0)  # offset 0
    one.append_records_to_leader(txn(PID, 2), -1, 0)  # 1-2, left open
    one.append_records_to_leader(txn(OTHER, 1), -1, 0)  # 3
    one.append_records_to_leader(build_end_txn_marker(OTHER, 0, 0, False, 1_000), -1, 0, AppendOrigin.COORDINATOR)
    replicate(one, two)
    assert logs[0].high_watermark == logs[1].high_watermark == 5
    assert logs[0].last_stable_offset == logs[1].last_stable_offset == 1
    # A consumer's read_committed read on the follower (KIP-392) stops at its LSO too.
    follower_read = two.read_records(0, 1 << 20, 1, True, fetch_only_from_leader=False)
    assert follower_read.last_stable_offset == 1 and follower_read.high_watermark == 5
    assert follower_read.records.to_bytes() == logs[1].read(0, 1 << 20, 1).to_bytes()

    # Broker 1 fails; broker 2 leads with the replicated producer state.
    two.make_leader(state(2, 2, (2,)), logs[1])
    assert logs[1].last_stable_offset == 1
    assert two.fetch_offset_for_timestamp(LATEST_TIMESTAMP, 1, -1)[1] == 1
    assert two.fetch_offset_for_timestamp(LATEST_TIMESTAMP, 0, -1)[1] == 5
    read = two.read_records(1, 1 << 20, 1, True)
    assert read.last_stable_offset == 1 and not read.records and read.aborted_transactions == []
    # The coordinator retries its marker against the new leader: the LSO moves past it.
    two.append_records_to_leader(build_end_txn_marker(PID, 0, 0, True, 1_000), -1, 0, AppendOrigin.COORDINATOR)
    assert logs[1].high_watermark == logs[1].last_stable_offset == 6
    read = two.read_records(0, 1 << 20, 1, True)
    assert read.last_stable_offset == 6 and read.records
    assert read.aborted_transactions == [(OTHER, 3)]
    assert two.fetch_offset_for_timestamp(LATEST_TIMESTAMP, 1, -1)[1] == 6
    # read_uncommitted: no list (the response's null).
    assert two.read_records(0, 1 << 20, 0, True).aborted_transactions is None
    for lg in logs:
        lg.close()


def test_list_offsets_by_timestamp_and_max_timestamp_stop_at_the_lso(tmp_path: Path) -> None:
    lg = Log.load(str(tmp_path / "t-0"), LogConfig(), now_ms=0, clean_shutdown=False)
    p = Partition("t", 0, TOPIC_ID, 1)
    p.make_leader(state(1, 1, (1,)), lg)
    p.append_records_to_leader(bytearray(build_batch([(b"k", b"v", [], 1_000)])), -1, 0)  # 0 at ts 1000
    p.append_records_to_leader(bytearray(build_batch([(b"k", b"v", [], 5_000)], producer_id=PID, producer_epoch=0,
                                                     base_sequence=0, is_transactional=True)), -1, 0)  # 1, open
    assert lg.last_stable_offset == 1 and lg.high_watermark == 2
    # read_committed: the open transaction's record (offset 1, the largest timestamp) is not found.
    assert p.fetch_offset_for_timestamp(4_000, 1, -1)[1] == -1
    assert p.fetch_offset_for_timestamp(MAX_TIMESTAMP, 1, -1)[1] == -1
    assert p.fetch_offset_for_timestamp(EARLIEST_TIMESTAMP, 1, -1)[1] == 0
    # read_uncommitted: it is.
    assert p.fetch_offset_for_timestamp(4_000, 0, -1)[:2] == (5_000, 1)
    assert p.fetch_offset_for_timestamp(MAX_TIMESTAMP, 0, -1)[:2] == (5_000, 1)
    p.append_records_to_leader(build_end_txn_marker(PID, 0, 0, True, 6_000), -1, 0, AppendOrigin.COORDINATOR)
    assert p.fetch_offset_for_timestamp(4_000, 1, -1)[:2] == (5_000, 1)
    lg.close()
