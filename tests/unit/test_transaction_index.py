"""TransactionIndex (`.txnindex`): Kafka's file format, ordering, search, truncation, corrupt
files; and its life with the segment (retention, cleaner swap interrupted by a crash)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

import odradek.log.log as log_module
from odradek.log.append_origin import AppendOrigin
from odradek.log.errors import CorruptIndexError
from odradek.log.log import Log
from odradek.log.log_cleaner import LogCleaner
from odradek.log.log_config import LogConfig
from odradek.log.transaction_index import ENTRY_SIZE, AbortedTxn, TransactionIndex
from odradek.records.builder import build_batch
from odradek.records.control_batch import build_end_txn_marker


def _index(tmp_path: Path, base: int = 0) -> TransactionIndex:
    return TransactionIndex(str(tmp_path / f"{base:020d}.txnindex"), base)


def test_file_format_is_kafkas(tmp_path: Path) -> None:
    idx = _index(tmp_path)
    assert not os.path.exists(idx.path)  # created at the first entry
    idx.append(AbortedTxn(7, 10, 15, 11))
    data = open(idx.path, "rb").read()
    assert ENTRY_SIZE == 34 and len(data) == 34
    assert struct.unpack(">hqqqq", data) == (0, 7, 10, 15, 11)
    assert idx.all_aborted() == [AbortedTxn(7, 10, 15, 11)]


def test_entries_must_increase(tmp_path: Path) -> None:
    idx = _index(tmp_path)
    idx.append(AbortedTxn(1, 0, 5, 6))
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(2, 1, 5, 6))
    # a new object reads the last offset back from the file
    again = _index(tmp_path)
    with pytest.raises(ValueError):
        again.append(AbortedTxn(2, 1, 4, 6))
    again.append(AbortedTxn(2, 1, 9, 10))
    assert len(again.all_aborted()) == 2


def test_collect_and_completion(tmp_path: Path) -> None:
    idx = _index(tmp_path)
    idx.append(AbortedTxn(1, 0, 5, 3))
    idx.append(AbortedTxn(2, 3, 8, 9))
    idx.append(AbortedTxn(3, 9, 12, 13))
    assert idx.collect(0, 4) == ([AbortedTxn(1, 0, 5, 3), AbortedTxn(2, 3, 8, 9)], True)
    assert idx.collect(6, 9) == ([AbortedTxn(2, 3, 8, 9)], True)  # LSO 9 reaches the bound
    assert idx.collect(13, 20) == ([], False)  # may continue in the next segment


def test_truncate_to_and_reset(tmp_path: Path) -> None:
    idx = _index(tmp_path)
    for i in range(4):
        idx.append(AbortedTxn(i, i * 10, i * 10 + 5, i * 10 + 6))
    idx.truncate_to(25)  # entries with markers at 25 and 35 go
    assert [t.last_offset for t in idx] == [5, 15]
    idx.append(AbortedTxn(9, 20, 21, 22))
    idx.reset()
    assert idx.all_aborted() == [] and not os.path.exists(idx.path)


@pytest.mark.parametrize(
    "content",
    [
        struct.pack(">hqqqq", 0, 1, 0, 5, 6) + b"\x00\x01",  # partial entry
        struct.pack(">hqqqq", 0, 1, 0, 500, 6),  # marker beyond the segment
        struct.pack(">hqqqq", 0, 1, 0, 5, 6) * 2,  # not increasing
        struct.pack(">hqqqq", 0, 1, 9, 5, 6),  # first after last
    ],
)
def test_sanity_check_finds_corruption(tmp_path: Path, content: bytes) -> None:
    idx = _index(tmp_path)
    with open(idx.path, "wb") as f:
        f.write(content)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(next_offset=100)


def test_unknown_version_is_corrupt(tmp_path: Path) -> None:
    idx = _index(tmp_path)
    with open(idx.path, "wb") as f:
        f.write(struct.pack(">hqqqq", 5, 1, 0, 5, 6))
    with pytest.raises(CorruptIndexError):
        idx.all_aborted()


def test_large_index_read_in_chunks(tmp_path: Path) -> None:
    idx = _index(tmp_path)
    n = 3000  # more than one read chunk
    idx.rewrite([AbortedTxn(i, 2 * i, 2 * i + 1, 2 * i + 2) for i in range(n)])
    assert sum(1 for _ in idx) == n
    assert idx.collect(5000, 5004) == (
        [AbortedTxn(2500, 5000, 5001, 5002), AbortedTxn(2501, 5002, 5003, 5004)], True
    )


# ---------------------------------------------------------------------- with the segment
def _txn(pid: int, seq: int) -> bytearray:
    return bytearray(build_batch([(b"k%d" % seq, b"x" * 80, [], 1000)], producer_id=pid,
                                 producer_epoch=0, base_sequence=seq, is_transactional=True))


def _abort(pid: int) -> bytearray:
    return build_end_txn_marker(pid, 0, 0, False, 1000)


def test_retention_deletes_the_txn_index_with_its_segment(tmp_path: Path) -> None:
    log = Log.load(str(tmp_path), LogConfig(segment_bytes=300), now_ms=0)
    log.append_as_leader(_txn(1, 0), 0, 1000)
    log.append_as_leader(_abort(1), 0, 1000, AppendOrigin.COORDINATOR)
    first = log.segments[0].txn_index.path
    for i in range(1, 6):
        log.append_as_leader(_txn(2, i), 0, 1000)
    assert os.path.exists(first) and log.num_segments > 2
    log.high_watermark = log.log_end_offset
    log.maybe_increment_log_start_offset(log.segments[1].base_offset)
    assert not os.path.exists(first)


def test_interrupted_cleaner_swap_carries_the_txn_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash after the swap's commit point (the `.log.swap` rename): the loader finishes the
    swap, the `.txnindex.swap` included."""
    config = LogConfig(segment_bytes=400, cleanup_policy=("compact",),
                       min_cleanable_dirty_ratio=0.01, file_delete_delay_ms=0)
    d = tmp_path / "t-0"
    log = Log.load(str(d), config, now_ms=0)
    log.append_as_leader(_txn(1, 0), 0, 1000)
    log.append_as_leader(_txn(1, 1), 0, 1000)
    log.append_as_leader(_abort(1), 0, 1000, AppendOrigin.COORDINATOR)
    for _ in range(8):
        log.append_as_leader(bytearray(build_batch([(b"f", b"y" * 80, [], 1000)])), 0, 1000)
    log.high_watermark = log.log_end_offset
    aborted = log.collect_aborted_transactions(0, log.log_end_offset)
    assert aborted == [AbortedTxn(1, 0, 2, 3)]

    class Crash(Exception):
        pass

    def crash(_: str) -> None:
        raise Crash()

    monkeypatch.setattr(log_module, "fsync_dir", crash)
    with pytest.raises(Crash):
        LogCleaner(lambda: {("t", 0): log}).clean(
            LogCleaner(lambda: {("t", 0): log}).log_to_clean(("t", 0), log, 10_000), 10_000
        )
    assert any(n.endswith(".txnindex.swap") for n in os.listdir(d))
    monkeypatch.undo()
    end = log.log_end_offset
    # The swap's files are trusted (a clean start: nothing rebuilt from the log).
    log2 = Log.load(str(d), config, now_ms=0, high_watermark=end)
    assert not any(n.endswith(".swap") for n in os.listdir(d))
    assert log2.collect_aborted_transactions(0, end) == aborted
    # After an unclean one the index is rebuilt from the cleaned log: the transaction now
    # starts at its first batch left (offset 0 was removed), which reads the same.
    log2.close()
    os.unlink(log2.segments[0].txn_index.path)
    log3 = Log.load(str(d), config, now_ms=0, clean_shutdown=False, high_watermark=end)
    assert log3.collect_aborted_transactions(0, end) == [AbortedTxn(1, 1, 2, 3)]
