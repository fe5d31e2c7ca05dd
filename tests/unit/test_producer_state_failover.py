"""Idempotent producer state across a leader change: a follower's log carries the producer ids,
epochs and sequences of the leader's batches, and the follower keeps its producer state as it
appends, so once it leads a retried batch is answered with its original offsets (not appended
twice) and a gap in the sequence gets OUT_OF_ORDER_SEQUENCE_NUMBER."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from odradek.cluster.partition import Partition, PartitionState
from odradek.log.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.protocol.errors import Errors
from odradek.records.builder import build_batch

TOPIC_ID = uuid.UUID(int=3)
PID = 4000


def _batch(seq: int, n: int = 2, epoch: int = 0, pid: int = PID) -> bytearray:
    return bytearray(build_batch(
        [(None, f"v{seq + i}".encode(), [], 1000) for i in range(n)],
        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
    ))


def _state(leader: int, epoch: int) -> PartitionState:
    return PartitionState("t", 0, TOPIC_ID, leader, epoch, (1, 2), (1, 2), epoch)


def _log(path: Path) -> Log:
    return Log.load(str(path), LogConfig(), now_ms=0, clean_shutdown=False)


def test_follower_turned_leader_deduplicates_retries_and_refuses_gaps(tmp_path: Path) -> None:
    old_leader = _log(tmp_path / "b1")
    follower = Partition("t", 0, TOPIC_ID, local_broker_id=2)
    follower.make_follower(_state(1, 0), _log(tmp_path / "b2"))
    assert follower.log is not None
    # The producer state is loaded with the log (no lazy rebuild any more).
    sent: list[bytes] = []
    for seq in (0, 2, 4):  # three batches of two records, offsets 0-5
        buf = _batch(seq)
        old_leader.append_as_leader(buf, 0, 1000)
        sent.append(bytes(buf))
        follower.append_records_as_follower(buf, old_leader.log_end_offset, 0, 1000)
    # The follower's producer state followed its appends.
    entry = follower.log.producer_state.producers[PID]
    assert (entry.epoch, entry.last_seq) == (0, 5)

    # The old leader dies; the follower leads at epoch 1. The producer retries its last batch
    # (whose answer it never got), then an older one still in the last five.
    follower.make_leader(_state(2, 1), follower.log, 2000)
    leo = follower.log.log_end_offset
    info = follower.append_records_to_leader(_batch(4), 1, 2000)
    assert (info.first_offset, info.last_offset) == (4, 5)
    info = follower.append_records_to_leader(_batch(2), 1, 2000)
    assert (info.first_offset, info.last_offset) == (2, 3)
    assert follower.log.log_end_offset == leo  # nothing appended twice
    # A gap (sequence 8 after 5) is refused; the next in order is appended at the log end.
    with pytest.raises(OutOfOrderSequenceError) as gap:
        follower.append_records_to_leader(_batch(8), 1, 2000)
    assert gap.value.error_code == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    info = follower.append_records_to_leader(_batch(6), 1, 2000)
    assert (info.first_offset, info.last_offset) == (6, 7)
    # A producer that bumped its epoch (on the old leader): its older epoch is fenced here.
    bumped = _batch(0, epoch=1, pid=PID + 1)
    old_leader.append_as_leader(bumped, 0, 1000)
    follower.make_follower(_state(1, 2), follower.log)
    follower.log.truncate_to(6)  # the old leader's log: offsets 0-5, then the bumped batch
    follower.append_records_as_follower(bumped, old_leader.log_end_offset, 0, 1000)
    follower.make_leader(_state(2, 3), follower.log, 3000)
    with pytest.raises(InvalidProducerEpochError):
        follower.append_records_to_leader(_batch(2, epoch=0, pid=PID + 1), 1, 3000)


def test_follower_without_loaded_state_rebuilds_it_from_its_log_when_it_leads(tmp_path: Path) -> None:
    """A follower's producer state follows its appends (it is loaded with the log): as leader
    it answers a retry with the original offsets and refuses a gap."""
    old_leader = _log(tmp_path / "b1")
    follower = Partition("t", 0, TOPIC_ID, local_broker_id=2)
    follower.make_follower(_state(1, 0), _log(tmp_path / "b2"))
    for seq in (0, 2):
        buf = _batch(seq)
        old_leader.append_as_leader(buf, 0, 1000)
        follower.append_records_as_follower(buf, old_leader.log_end_offset, 0, 1000)
    follower.make_leader(_state(2, 1), follower.log, 2000)
    info = follower.append_records_to_leader(_batch(2), -1, 2000)
    assert (info.first_offset, info.last_offset) == (2, 3)
    with pytest.raises(OutOfOrderSequenceError):
        follower.append_records_to_leader(_batch(5), 1, 2000)
