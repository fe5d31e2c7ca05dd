"""Producer state snapshots (`<offset>.snapshot`) and producer id expiration."""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c

import odradek.log.log_transactions as log_transactions
from odradek.log.append_origin import AppendOrigin
from odradek.log.errors import OutOfOrderSequenceError
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.log.producer_state import BatchMetadata, ProducerStateEntry
from odradek.log.producer_state_snapshot import (
    CorruptSnapshotError,
    decode_snapshot,
    encode_snapshot,
    list_snapshots,
)
from odradek.log.transaction_index import AbortedTxn
from odradek.records.builder import build_batch
from odradek.records.control_batch import build_end_txn_marker

COORD = AppendOrigin.COORDINATOR


def _txn(pid: int, seq: int, n: int = 2, ts: int = 1000, transactional: bool = True) -> bytearray:
    return bytearray(build_batch(
        [(None, b"x" * 100, [], ts) for _ in range(n)],
        producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=transactional,
    ))


def _abort(pid: int) -> bytearray:
    return build_end_txn_marker(pid, 0, 0, False, 2000)


def _config(**kw: Any) -> LogConfig:
    return LogConfig(segment_bytes=kw.pop("segment_bytes", 1000), **kw)


def _load(path: Path, **kw: Any) -> Log:
    hw = kw.pop("high_watermark", None)
    clean = kw.pop("clean_shutdown", True)
    now = kw.pop("now_ms", 0)
    return Log.load(str(path), _config(**kw), now_ms=now, clean_shutdown=clean,
                    high_watermark=hw)


def _replays(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the start offset of every replay of the log into the producer state."""
    starts: list[int] = []
    real = log_transactions.replay_segments

    def spy(psm: Any, segments: Any, start: int, end: int, name: str, **kw: Any) -> None:
        starts.append(start)
        real(psm, segments, start, end, name, **kw)

    monkeypatch.setattr(log_transactions, "replay_segments", spy)
    return starts


def test_format_is_kafkas() -> None:
    entry = ProducerStateEntry(3, coordinator_epoch=7, last_timestamp=1234,
                               current_txn_first_offset=40)
    entry.batches.append(BatchMetadata(10, 14, 36, 40, 1234))
    data = encode_snapshot({99: entry})
    version, crc, count = struct.unpack_from(">hIi", data, 0)
    assert (version, count, len(data)) == (1, 1, 10 + 46)
    assert crc == crc32c(data[6:])
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (99, 3, 14, 40, 4, 1234, 7, 40)
    back = decode_snapshot(data)[99]
    assert (back.epoch, back.last_seq, back.coordinator_epoch, back.current_txn_first_offset,
            back.last_timestamp) == (3, 14, 7, 40, 1234)
    assert back.batches[-1] == BatchMetadata(10, 14, 36, 40, 1234)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d[:-1],  # truncated
        lambda d: d[:12] + bytes([d[12] ^ 1]) + d[13:],  # bit flip: CRC
        lambda d: struct.pack(">h", 2) + d[2:],  # unknown version
        lambda d: d[:6] + struct.pack(">i", 2**31 - 1) + d[10:],  # hostile count
        lambda d: b"",
    ],
)
def test_corrupt_snapshot_detected(mutate: Any) -> None:
    entry = ProducerStateEntry(0)
    entry.batches.append(BatchMetadata(0, 1, 0, 1, 5))
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(mutate(encode_snapshot({1: entry})))


def _fill(log: Log) -> None:
    """Producer 1: transaction aborted; producer 2: idempotent; producer 3: transaction left
    open; across several segments."""
    log.append_as_leader(_txn(1, 0), 0, 1000)
    log.append_as_leader(_txn(2, 0, transactional=False), 0, 1000)
    log.append_as_leader(_abort(1), 0, 2000, COORD)
    log.append_as_leader(_txn(3, 0), 0, 1000)
    for i in range(6):
        log.append_as_leader(_txn(2, 2 + 2 * i, transactional=False), 0, 1000)
    log.high_watermark = log.log_end_offset


def test_roll_and_close_write_snapshots_and_restart_replays_only_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _load(tmp_path)
    _fill(log)
    assert log.num_segments > 2
    bases = [s.base_offset for s in log.segments]
    assert set(list_snapshots(str(tmp_path))) == set(bases[1:])  # one per roll
    lso, producers = log.last_stable_offset, log.active_producers()
    aborted = log.collect_aborted_transactions(0, log.log_end_offset)
    end = log.log_end_offset
    log.close()
    assert end in list_snapshots(str(tmp_path))  # the clean close
    starts = _replays(monkeypatch)
    log = _load(tmp_path, high_watermark=end)
    assert starts == [end]  # nothing replayed
    assert (log.last_stable_offset, log.active_producers()) == (lso, producers)
    assert lso == 5  # producer 3's open transaction
    assert log.collect_aborted_transactions(0, end) == aborted == [AbortedTxn(1, 0, 4, 5)]
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(_txn(2, 0, transactional=False), 0, 1000)


def test_unclean_restart_replays_from_the_snapshot_before_the_recovered_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _load(tmp_path)
    _fill(log)
    producers = log.active_producers()
    last_base = log.active_segment.base_offset
    end = log.log_end_offset
    log.flush()
    # Crash: no close, no snapshot at the log end; the recovery point is the last base.
    starts = _replays(monkeypatch)
    log2 = Log.load(str(tmp_path), _config(), now_ms=0, clean_shutdown=False,
                    recovery_point=last_base, high_watermark=end)
    assert starts == [last_base]
    assert log2.active_producers() == producers
    assert log2.last_stable_offset == 5


def test_corrupt_snapshot_is_ignored_with_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = _load(tmp_path)
    _fill(log)
    producers = log.active_producers()
    end = log.log_end_offset
    log.close()
    path = list_snapshots(str(tmp_path))[end]
    with open(path, "r+b") as f:
        f.seek(20)
        f.write(b"\xff\xff")
    with caplog.at_level(logging.WARNING):
        log = _load(tmp_path, high_watermark=end)
    assert "Failed to load producer snapshot" in caplog.text
    assert not os.path.exists(path)
    assert log.active_producers() == producers
    assert log.last_stable_offset == 5


def test_truncation_drops_later_snapshots_and_reloads(tmp_path: Path) -> None:
    log = _load(tmp_path)
    _fill(log)
    bases = [s.base_offset for s in log.segments]
    log.truncate_to(4)  # the abort marker (offset 4) and everything after go
    assert all(o <= 4 for o in list_snapshots(str(tmp_path)))
    log.high_watermark = 4
    assert log.last_stable_offset == 0  # producer 1's transaction is open again
    assert log.collect_aborted_transactions(0, 4) == []
    assert [p.producer_id for p in log.active_producers()] == [1, 2]
    assert len(bases) > 1


def test_retention_deletes_the_snapshots_of_deleted_segments(tmp_path: Path) -> None:
    log = _load(tmp_path)
    _fill(log)
    bases = [s.base_offset for s in log.segments]
    log.maybe_increment_log_start_offset(bases[2])
    assert min(list_snapshots(str(tmp_path))) == bases[2]


def test_truncate_fully_deletes_snapshots(tmp_path: Path) -> None:
    log = _load(tmp_path)
    _fill(log)
    log.truncate_fully_and_start_at(100)
    assert list_snapshots(str(tmp_path)) == {}
    assert log.active_producers() == []


# ------------------------------------------------------------------------------- expiration
def test_idle_producers_expire_but_not_with_an_ongoing_transaction(tmp_path: Path) -> None:
    log = _load(tmp_path, producer_id_expiration_ms=10_000)
    log.append_as_leader(_txn(1, 0, ts=1000, transactional=False), 0, 1000)
    log.append_as_leader(_txn(2, 0, ts=1000), 0, 1000)  # transaction open
    assert log.remove_expired_producers(10_999) == 0
    assert log.remove_expired_producers(11_000) == 1
    assert [p.producer_id for p in log.active_producers()] == [2]
    # An expired producer is unknown again: any sequence is accepted.
    log.append_as_leader(_txn(1, 40, transactional=False), 0, 12_000)


def test_expired_producers_are_not_loaded_from_a_snapshot(tmp_path: Path) -> None:
    log = _load(tmp_path, producer_id_expiration_ms=10_000)
    log.append_as_leader(_txn(1, 0, ts=1000, transactional=False), 0, 1000)
    log.append_as_leader(_txn(2, 0, ts=1000), 0, 1000)
    log.close()
    log = _load(tmp_path, producer_id_expiration_ms=10_000, now_ms=50_000)
    assert [p.producer_id for p in log.active_producers()] == [2]


def test_log_manager_expires_producers_of_every_log(tmp_path: Path) -> None:
    from odradek.log.log_manager import LogManager

    clock = [1000]
    lm = LogManager([str(tmp_path)], LogConfig(producer_id_expiration_ms=5000), lambda: clock[0])
    a = lm.get_or_create_log("a", 0)
    b = lm.get_or_create_log("b", 0)
    a.append_as_leader(_txn(1, 0, ts=1000, transactional=False), 0, 1000)
    b.append_as_leader(_txn(2, 0, ts=1000, transactional=False), 0, 1000)
    assert lm.remove_expired_producers() == 0
    clock[0] = 6000
    assert lm.remove_expired_producers() == 2
    assert a.active_producers() == b.active_producers() == []
    lm.shutdown()


def test_load_without_snapshots_replays_once_then_snapshots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upgraded log (no snapshot files): the first load replays it all and snapshots the
    end, so the next load replays nothing."""
    log = _load(tmp_path)
    _fill(log)
    producers = log.active_producers()
    end = log.log_end_offset
    log.close()
    for path in list_snapshots(str(tmp_path)).values():
        os.unlink(path)
    starts = _replays(monkeypatch)
    log = _load(tmp_path, high_watermark=end)
    assert log.active_producers() == producers and log.last_stable_offset == 5
    assert list(list_snapshots(str(tmp_path))) == [end]
    log2 = _load(tmp_path, high_watermark=end)
    assert starts == [0, end]
    assert log2.active_producers() == producers
