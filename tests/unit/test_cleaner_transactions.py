"""Log compaction with transactions: aborted records removed (and never shadowing committed
ones), markers kept while their transaction has records then removed after delete.retention.ms,
the transaction index carried to the cleaned segment, no cleaning past the last stable offset."""

from __future__ import annotations

from pathlib import Path

from odradek.log import Log, LogConfig
from odradek.log.append_origin import AppendOrigin
from odradek.log.log_cleaner import LogCleaner
from odradek.log.transaction_index import AbortedTxn
from odradek.records import decode_batch, iter_batches
from odradek.records.builder import build_batch
from odradek.records.control_batch import build_end_txn_marker, parse_end_txn_marker

HOUR = 3600 * 1000
COMPACT = LogConfig(
    segment_bytes=400,
    index_interval_bytes=128,
    segment_index_bytes=4096,
    cleanup_policy=("compact",),
    min_cleanable_dirty_ratio=0.01,
    delete_retention_ms=HOUR,
    file_delete_delay_ms=0,
)
COORD = AppendOrigin.COORDINATOR


class Env:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.log = Log.load(str(root / "t-0"), COMPACT, now_ms=0)
        self.cleaner = LogCleaner(lambda: {("t", 0): self.log})
        self.seqs: dict[int, int] = {}

    def txn(self, pid: int, kvs: list[tuple[bytes, bytes]]) -> None:
        seq = self.seqs.get(pid, 0)
        self.seqs[pid] = seq + len(kvs)
        self.log.append_as_leader(bytearray(build_batch(
            [(k, v, [], 1000) for k, v in kvs], producer_id=pid, producer_epoch=0,
            base_sequence=seq, is_transactional=True)), 0, 1000)

    def plain(self, kvs: list[tuple[bytes, bytes]]) -> None:
        self.log.append_as_leader(bytearray(build_batch([(k, v, [], 1000) for k, v in kvs])),
                                  0, 1000)

    def end(self, pid: int, commit: bool) -> None:
        self.log.append_as_leader(build_end_txn_marker(pid, 0, 0, commit, 1000), 0, 1000, COORD)

    def filler(self, n: int) -> None:
        for i in range(n):
            self.plain([(b"f%d" % i, b"x" * 60)])

    def clean(self, now_ms: int) -> int:
        self.log.high_watermark = self.log.log_end_offset
        return self.cleaner.clean_once(now_ms)

    def batches(self) -> list[tuple[int, bool, bool | None, list[tuple[bytes | None, bytes | None]]]]:
        """(base offset, transactional, marker commit (None: data), records) of every batch."""
        out = []
        for seg in self.log.segments:
            data = seg.read_bytes(0, seg.size)
            for h in iter_batches(data):
                raw = data[h.position:h.position + h.size]
                if h.is_control:
                    m = parse_end_txn_marker(raw)
                    out.append((h.base_offset, True, None if m is None else m.commit, []))
                else:
                    recs = [(r.key, r.value) for r in decode_batch(raw)] if h.records_count else []
                    out.append((h.base_offset, h.is_transactional, None, recs))
        return out

    def read_committed(self) -> dict[bytes, bytes]:
        """The key -> value view of a read_committed consumer (aborted records dropped)."""
        aborted = self.log.collect_aborted_transactions(0, self.log.log_end_offset)
        view: dict[bytes, bytes] = {}
        for seg in self.log.segments:
            data = seg.read_bytes(0, seg.size)
            for h in iter_batches(data):
                if h.is_control or not h.records_count:
                    continue
                if h.is_transactional and any(
                    a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset
                    for a in aborted
                ):
                    continue
                for r in decode_batch(data[h.position:h.position + h.size]):
                    assert r.key is not None and r.value is not None
                    view[r.key] = r.value
        return view


def test_aborted_records_removed_and_never_shadow_committed_ones(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.txn(1, [(b"a", b"committed"), (b"b", b"b1")])  # 0-1
    env.end(1, True)  # 2
    env.txn(2, [(b"a", b"aborted"), (b"c", b"c-aborted")])  # 3-4
    env.end(2, False)  # 5
    env.filler(8)
    before = env.read_committed()
    assert before[b"a"] == b"committed" and b"c" not in before
    assert env.clean(10_000) == 1
    assert env.read_committed() == before
    batches = env.batches()
    # Producer 2's aborted batch is emptied (its last data batch keeps its sequence), not gone.
    assert (3, True, None, []) in batches
    # Both markers stay while their transactions have records in this pass (producer 1's
    # records are live; producer 2's were seen and removed now).
    assert [b[0] for b in batches if b[2] is not None] == [2, 5]
    # The ABORT marker's index entry moved to the cleaned segment.
    assert env.log.collect_aborted_transactions(0, env.log.log_end_offset) == [
        AbortedTxn(2, 3, 5, 6)
    ]
    # Survives a reload.
    env.log.close()
    env.log = Log.load(str(tmp_path / "t-0"), COMPACT, now_ms=0,
                       high_watermark=env.log.log_end_offset)
    assert env.log.collect_aborted_transactions(0, env.log.log_end_offset) == [
        AbortedTxn(2, 3, 5, 6)
    ]
    assert env.read_committed() == before


def test_markers_removed_after_delete_retention(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.txn(2, [(b"a", b"aborted")])  # 0
    env.end(2, False)  # 1
    env.txn(3, [(b"k", b"v")])  # 2
    env.end(3, True)  # 3
    env.txn(3, [(b"k", b"v2")])  # 4: supersedes k
    env.end(3, True)  # 5
    env.txn(2, [(b"z", b"z")])  # 6: producer 2's last data batch
    env.end(2, True)  # 7
    env.filler(8)
    env.clean(10_000)
    markers = [b[0] for b in env.batches() if b[2] is not None]
    assert 1 in markers  # the abort: its records were removed in this pass
    # Second pass (new dirty data): nothing of transactions 0 and 2-3 is left; their markers
    # get a delete horizon and stay delete.retention.ms longer.
    env.filler(8)
    assert env.clean(20_000) == 1
    markers = [b[0] for b in env.batches() if b[2] is not None]
    assert {1, 3} <= set(markers)
    assert env.log.collect_aborted_transactions(0, env.log.log_end_offset) == []
    # Third pass, without new data: the horizon passing makes the log eligible.
    assert env.cleaner.clean_once(20_000 + HOUR + 1) == 1
    markers = [b[0] for b in env.batches() if b[2] is not None]
    assert 1 not in markers and 3 not in markers
    assert {5, 7} <= set(markers)  # their transactions still have records
    assert env.read_committed()[b"k"] == b"v2"


def test_cleaner_stops_at_the_last_stable_offset(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.filler(3)
    env.plain([(b"dup", b"old")])
    env.txn(5, [(b"t", b"open")])  # ongoing: holds the LSO
    lso_offset = env.log.log_end_offset - 1
    env.filler(6)
    env.plain([(b"dup", b"new")])
    env.filler(6)
    env.clean(10_000)
    assert env.log.last_stable_offset == lso_offset
    # Nothing at or after the open transaction was compacted: "dup"'s old value is below the
    # LSO but its newer value is above it, so the map (built below the LSO) keeps the old one.
    values = [r for b in env.batches() for r in b[3] if r[0] == b"dup"]
    assert values == [(b"dup", b"old"), (b"dup", b"new")]
    env.end(5, True)
    env.clean(20_000)
    values = [r for b in env.batches() for r in b[3] if r[0] == b"dup"]
    assert values == [(b"dup", b"new")]
