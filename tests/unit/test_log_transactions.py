"""Transactions in the partition log: markers, last stable offset, aborted transactions, producer
epochs and coordinator epochs, followers, restart and truncation."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from odradek.log.append_origin import AppendOrigin
from odradek.log.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.log.transaction_index import AbortedTxn
from odradek.protocol.errors import Errors
from odradek.records.builder import build_batch
from odradek.records.control_batch import (
    build_end_txn_marker,
    parse_end_txn_marker,
)
from odradek.records.errors import InvalidRecordError

PID = 7000
COORD = AppendOrigin.COORDINATOR


def _txn(seq: int, n: int = 2, pid: int = PID, epoch: int = 0, ts: int = 1000,
         transactional: bool = True) -> bytearray:
    return bytearray(build_batch(
        [(None, b"v%d" % (seq + i), [], ts) for i in range(n)],
        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
        is_transactional=transactional,
    ))


def _plain(n: int = 1) -> bytearray:
    return bytearray(build_batch([(None, b"p", [], 1000)] * n))


def _marker(commit: bool, pid: int = PID, epoch: int = 0, coord: int = 0) -> bytearray:
    return build_end_txn_marker(pid, epoch, coord, commit, 2000)


def _log(path: Path, **kw: int) -> Log:
    return Log.load(str(path), LogConfig(**kw), now_ms=0)  # type: ignore[arg-type]


def _advance(log: Log) -> None:
    log.high_watermark = log.log_end_offset


# ---------------------------------------------------------------------------- control batches
def test_marker_round_trip_and_layout() -> None:
    buf = build_end_txn_marker(5, 3, 9, True, 1234)
    m = parse_end_txn_marker(buf)
    assert m is not None and (m.commit, m.coordinator_epoch, m.timestamp) == (True, 9, 1234)
    abort = parse_end_txn_marker(build_end_txn_marker(5, 3, 2, False, 1))
    assert abort is not None and not abort.commit and abort.coordinator_epoch == 2


@pytest.mark.parametrize(
    "key,value",
    [
        (b"\x00", struct.pack(">hi", 0, 1)),  # key too short
        (struct.pack(">hh", -1, 0), struct.pack(">hi", 0, 1)),  # negative key version
        (struct.pack(">hh", 0, 1), b"\x00\x00"),  # value too short
        (struct.pack(">hh", 0, 0), struct.pack(">hi", -3, 1)),  # negative value version
        (None, struct.pack(">hi", 0, 1)),  # no key
    ],
)
def test_malformed_marker_refused(tmp_path: Path, key: bytes | None, value: bytes) -> None:
    bad = bytearray(build_batch([(key, value, [], 0)], producer_id=PID, producer_epoch=0,
                                is_control=True, is_transactional=True))
    with pytest.raises(InvalidRecordError) as e:
        parse_end_txn_marker(bad)
    assert e.value.error_code == Errors.INVALID_RECORD
    log = _log(tmp_path)
    log.append_as_leader(_txn(0), 0, 1000)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(bad, 0, 1000, COORD)
    assert log.log_end_offset == 2  # nothing appended, the transaction still open
    assert log.active_producers()[0].current_txn_start_offset == 0


def test_client_control_batch_refused(tmp_path: Path) -> None:
    log = _log(tmp_path)
    with pytest.raises(InvalidRecordError) as e:
        log.append_as_leader(_marker(True), 0, 1000)
    assert e.value.error_code == Errors.INVALID_RECORD
    assert log.log_end_offset == 0


def test_client_producer_id_without_sequence_refused(tmp_path: Path) -> None:
    log = _log(tmp_path)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(_txn(-1), 0, 1000)
    assert log.log_end_offset == 0


# ------------------------------------------------------------------------------------- LSO
def test_lso_held_by_ongoing_transaction_until_marker_is_replicated(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append_as_leader(_plain(), 0, 1000)  # offset 0
    log.append_as_leader(_txn(0), 0, 1000)  # offsets 1-2
    log.append_as_leader(_plain(), 0, 1000)  # offset 3
    _advance(log)
    assert (log.high_watermark, log.last_stable_offset) == (4, 1)
    log.append_as_leader(_marker(True), 0, 2000, COORD)  # offset 4
    # The marker is not below the high watermark yet: the transaction is still unstable.
    assert log.last_stable_offset == 1
    log.high_watermark = 4
    assert log.last_stable_offset == 1
    _advance(log)
    assert log.last_stable_offset == 5
    assert log.collect_aborted_transactions(0, 5) == []


def test_abort_recorded_in_txn_index_with_lso(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append_as_leader(_txn(0, pid=1), 0, 1000)  # 0-1, producer 1
    log.append_as_leader(_txn(0, pid=2), 0, 1000)  # 2-3, producer 2
    log.append_as_leader(_marker(False, pid=1), 0, 2000, COORD)  # 4: abort producer 1
    _advance(log)
    # Producer 2's transaction still holds the LSO; the index entry records it.
    assert log.last_stable_offset == 2
    assert log.collect_aborted_transactions(0, 5) == [AbortedTxn(1, 0, 4, 2)]
    assert log.collect_aborted_transactions(5, 6) == []
    log.append_as_leader(_marker(False, pid=2), 0, 2000, COORD)  # 5
    _advance(log)
    assert log.last_stable_offset == 6
    assert log.collect_aborted_transactions(0, 6) == [AbortedTxn(1, 0, 4, 2), AbortedTxn(2, 2, 5, 6)]
    assert log.collect_aborted_transactions(5, 6) == [AbortedTxn(2, 2, 5, 6)]
    assert os.path.getsize(log.active_segment.txn_index.path) == 2 * 34


def test_marker_without_ongoing_transaction_is_accepted(tmp_path: Path) -> None:
    log = _log(tmp_path)
    info = log.append_as_leader(_marker(False, pid=99, epoch=4, coord=3), 0, 1000, COORD)
    assert info.num_batches == 1
    _advance(log)
    assert log.last_stable_offset == 1
    assert log.collect_aborted_transactions(0, 1) == []
    (p,) = log.active_producers()
    assert (p.producer_id, p.producer_epoch, p.coordinator_epoch, p.current_txn_start_offset) == (
        99, 4, 3, -1)


# ------------------------------------------------------------------------------- fencing
def test_coordinator_epoch_fencing(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append_as_leader(_txn(0), 0, 1000)
    log.append_as_leader(_marker(True, coord=5), 0, 2000, COORD)
    log.append_as_leader(_txn(2), 0, 1000)
    end = log.log_end_offset
    with pytest.raises(TransactionCoordinatorFencedError) as e:
        log.append_as_leader(_marker(False, coord=4), 0, 2000, COORD)
    assert e.value.error_code == Errors.TRANSACTION_COORDINATOR_FENCED
    assert log.log_end_offset == end
    assert log.active_producers()[0].current_txn_start_offset == 3
    log.append_as_leader(_marker(False, coord=5), 0, 2000, COORD)
    assert log.active_producers()[0].current_txn_start_offset == -1


def test_older_producer_epoch_refused_for_data_and_markers(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append_as_leader(_txn(0, epoch=2), 0, 1000)
    with pytest.raises(InvalidProducerEpochError) as e:
        log.append_as_leader(_txn(2, epoch=1), 0, 1000)
    assert e.value.error_code == Errors.INVALID_PRODUCER_EPOCH
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(_marker(False, epoch=1), 0, 2000, COORD)
    # Transactions v2: the marker bumps the epoch; the old epoch is fenced afterwards.
    log.append_as_leader(_marker(False, epoch=3), 0, 2000, COORD)
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(_txn(2, epoch=2), 0, 1000)
    # The bumped epoch starts its sequence at 0.
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(_txn(5, epoch=3), 0, 1000)
    log.append_as_leader(_txn(0, epoch=3), 0, 1000)
    assert log.active_producers()[0].producer_epoch == 3


def test_non_transactional_write_during_transaction_refused(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append_as_leader(_txn(0), 0, 1000)
    with pytest.raises(InvalidTxnStateError) as e:
        log.append_as_leader(_txn(2, transactional=False), 0, 1000)
    assert e.value.error_code == Errors.INVALID_TXN_STATE
    assert log.log_end_offset == 2


def test_refused_multi_batch_append_changes_no_state(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append_as_leader(_txn(0, pid=1), 0, 1000)
    log.append_as_leader(_marker(True, pid=1), 0, 1000, COORD)
    before = log.active_producers()
    buf = _txn(2, pid=1) + _txn(9, pid=1)  # opens a transaction, then out of sequence
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(buf, 0, 1000)
    assert log.active_producers() == before
    _advance(log)
    assert log.last_stable_offset == 3


def test_retry_of_transactional_batch_is_deduplicated(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append_as_leader(_txn(0), 0, 1000)
    info = log.append_as_leader(_txn(0), 0, 1000)
    assert (info.first_offset, info.last_offset, info.num_batches) == (0, 1, 0)
    assert log.log_end_offset == 2


# ----------------------------------------------------------------------------- followers
def test_follower_keeps_the_same_transaction_state(tmp_path: Path) -> None:
    leader = _log(tmp_path / "l")
    follower = _log(tmp_path / "f")
    steps = [
        (_txn(0, pid=1), AppendOrigin.CLIENT),
        (_txn(0, pid=2), AppendOrigin.CLIENT),
        (_marker(False, pid=1, coord=1), COORD),
        (_plain(), AppendOrigin.CLIENT),
    ]
    for buf, origin in steps:
        leader.append_as_leader(buf, 0, 1000, origin)
        follower.append_as_follower(buf, 1000)
    for log in (leader, follower):
        _advance(log)
    assert follower.last_stable_offset == leader.last_stable_offset == 2
    assert follower.active_producers() == leader.active_producers()
    assert follower.collect_aborted_transactions(0, 6) == leader.collect_aborted_transactions(0, 6)
    assert follower.collect_aborted_transactions(0, 6) == [AbortedTxn(1, 0, 4, 2)]


def test_follower_takes_a_zombie_marker_without_refusing(tmp_path: Path) -> None:
    """Replication never refuses: the leader decided (Kafka logs the older coordinator
    epoch)."""
    follower = _log(tmp_path)
    follower.append_as_follower(build_end_txn_marker(PID, 0, 5, True, 1), 1000)
    follower.append_as_follower(build_end_txn_marker(PID, 0, 4, True, 1, base_offset=1), 1000)
    assert follower.log_end_offset == 2


# ------------------------------------------------------------------------ restart, truncation
def test_state_survives_restart(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append_as_leader(_txn(0, pid=1), 0, 1000)
    log.append_as_leader(_marker(False, pid=1), 0, 2000, COORD)
    log.append_as_leader(_txn(0, pid=2), 0, 1000)  # ongoing at 3
    _advance(log)
    producers = log.active_producers()
    log.close()
    log = Log.load(str(tmp_path), LogConfig(), now_ms=0, high_watermark=5)
    assert log.last_stable_offset == 3
    assert log.active_producers() == producers
    assert log.collect_aborted_transactions(0, 5) == [AbortedTxn(1, 0, 2, 3)]
    # The producer's sequence continues after the restart.
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(_txn(5, pid=2), 0, 1000)
    log.append_as_leader(_txn(2, pid=2), 0, 1000)


def test_unclean_restart_rebuilds_a_lost_txn_index(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append_as_leader(_txn(0), 0, 1000)
    log.append_as_leader(_marker(False), 0, 2000, COORD)
    path = log.active_segment.txn_index.path
    log.flush()
    log.close()
    os.unlink(path)
    log = Log.load(str(tmp_path), LogConfig(), now_ms=0, clean_shutdown=False,
                   high_watermark=3)
    assert log.collect_aborted_transactions(0, 3) == [AbortedTxn(PID, 0, 2, 3)]
    assert os.path.exists(path)


def test_corrupt_txn_index_is_rebuilt(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append_as_leader(_txn(0), 0, 1000)
    log.append_as_leader(_marker(False), 0, 2000, COORD)
    path = log.active_segment.txn_index.path
    log.close()
    with open(path, "ab") as f:
        f.write(b"\x00\x07garbage")  # a partial entry
    log = Log.load(str(tmp_path), LogConfig(), now_ms=0, high_watermark=3)
    assert log.collect_aborted_transactions(0, 3) == [AbortedTxn(PID, 0, 2, 3)]
    assert os.path.getsize(path) == 34


def test_truncation_below_marker_reopens_the_transaction(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append_as_leader(_txn(0), 0, 1000)
    log.append_as_leader(_marker(False), 0, 2000, COORD)
    log.append_as_leader(_plain(), 0, 1000)
    assert log.truncate_to(2)
    log.high_watermark = 2
    assert log.last_stable_offset == 0
    assert log.collect_aborted_transactions(0, 2) == []
    assert log.active_producers()[0].current_txn_start_offset == 0
    log.append_as_leader(_marker(True), 0, 2000, COORD)
    _advance(log)
    assert log.last_stable_offset == 3


# ------------------------------------------------------------------- KIP-890 verification
def test_verification_guard_required_to_open_a_transaction(tmp_path: Path) -> None:
    from odradek.log.producer_state import SENTINEL_GUARD

    log = _log(tmp_path)
    # Without a verified guard a transactional batch opening a transaction is refused.
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(_txn(0), 0, 1000, verification_guard=SENTINEL_GUARD)
    guard = log.maybe_start_transaction_verification(PID, 0, 0, 1000)
    assert guard is not SENTINEL_GUARD
    assert log.verification_guard(PID) is guard
    # The ABA race: the guard of an earlier verification does not verify a later one.
    stale = guard
    log.append_as_leader(_txn(0), 0, 1000, verification_guard=guard)
    assert log.has_ongoing_transaction(PID)
    assert log.verification_guard(PID) is SENTINEL_GUARD  # verification over
    # Ongoing: later batches need no verification.
    assert log.maybe_start_transaction_verification(PID, 2, 0, 1000) is SENTINEL_GUARD
    log.append_as_leader(_txn(2), 0, 1000, verification_guard=SENTINEL_GUARD)
    log.append_as_leader(_marker(False), 0, 2000, COORD)
    assert not log.has_ongoing_transaction(PID)
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(_txn(4), 0, 1000, verification_guard=stale)
    # No guard at all (a broker that does not verify): accepted.
    log.append_as_leader(_txn(4), 0, 1000)
    assert log.has_ongoing_transaction(PID)


def test_verification_blocks_sequences_above_the_lowest_seen(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append_as_leader(_txn(0, transactional=False), 0, 1000)
    log.maybe_start_transaction_verification(PID, 4, 0, 1000)
    log.maybe_start_transaction_verification(PID, 2, 0, 1000)  # a lower one: the bound
    guard = log.verification_guard(PID)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(_txn(4), 0, 1000, verification_guard=guard)
    log.append_as_leader(_txn(2), 0, 1000, verification_guard=guard)


# ------------------------------------------------------------------------------ hostile
def test_compressed_marker_bomb_refused_with_bounded_memory(tmp_path: Path) -> None:
    from odradek.records.batch import COMPRESSION_GZIP
    from odradek.records.errors import RecordError

    log = _log(tmp_path)
    huge = bytearray(build_batch(
        [(struct.pack(">hh", 0, 1), b"\x00" * (8 << 20), [], 0)], compression=COMPRESSION_GZIP,
        producer_id=PID, producer_epoch=0, is_control=True, is_transactional=True))
    assert len(huge) < 64 * 1024
    with pytest.raises(RecordError):
        log.append_as_leader(huge, 0, 1000, COORD)
    assert log.log_end_offset == 0


def test_coordinator_control_batch_without_producer_id_refused(tmp_path: Path) -> None:
    log = _log(tmp_path)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(build_end_txn_marker(-1, -1, 0, True, 1), 0, 1000, COORD)
    assert log.log_end_offset == 0


def test_many_producers_keep_bounded_state(tmp_path: Path) -> None:
    """Each producer costs its last five batches' metadata, whatever it sends."""
    log = _log(tmp_path)
    for seq in range(0, 40, 2):
        log.append_as_leader(_txn(seq, transactional=False), 0, 1000)
    assert len(log.producer_state.producers[PID].batches) == 5
    for pid in range(200):
        log.append_as_leader(_txn(0, pid=10_000 + pid, transactional=False), 0, 1000)
    assert len(log.active_producers()) == 201
    assert log.remove_expired_producers(1000 + 86400000) == 201
