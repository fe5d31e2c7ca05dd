from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fake_clock import FakeClock

from odradek.log import Log, LogConfig, LogManager
from odradek.log.checkpoint import read_checkpoint_lines
from odradek.log.errors import OutOfOrderSequenceError
from odradek.log.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from odradek.log.log_cleaner import (
    CLEANER_OFFSET_CHECKPOINT_FILE,
    CleanerConfig,
    LogCleaner,
)
from odradek.records import InvalidRecordError, Record, decode_batch, iter_batches
from odradek.records.batch import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    DELETE_HORIZON_FLAG_MASK,
    RecordBatchHeader,
    is_batch_crc_valid,
)
from odradek.records.builder import build_batch

HOUR = 3600 * 1000
COMPACT = LogConfig(
    segment_bytes=1024,
    index_interval_bytes=128,
    segment_index_bytes=4096,
    cleanup_policy=("compact",),
    min_cleanable_dirty_ratio=0.01,
    delete_retention_ms=HOUR,
    file_delete_delay_ms=0,
)

KV = tuple[bytes | None, bytes | None]


class Env:
    """A LogManager with one log dir and a compacted log `t-0`."""

    def __init__(self, root: Path, config: LogConfig = COMPACT, **cleaner: Any) -> None:
        self.root = root
        self.config = config
        self.cleaner_config = CleanerConfig(**cleaner)
        self.clock = FakeClock(0)
        self.lm = LogManager([str(root)], config, self.clock, cleaner_config=self.cleaner_config)
        self.log = self.lm.get_or_create_log("t", 0, config)

    def produce(
        self,
        kvs: Sequence[KV],
        *,
        ts: int = 1000,
        now: int | None = None,
        compression: int = COMPRESSION_NONE,
        producer: tuple[int, int, int] | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
    ) -> int:
        pid, epoch, seq = producer if producer is not None else (-1, -1, -1)
        buf = bytearray(
            build_batch(
                [(k, v, list(headers), ts + i) for i, (k, v) in enumerate(kvs)],
                compression=compression,
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
            )
        )
        info = self.log.append_as_leader(buf, leader_epoch=0, now_ms=ts if now is None else now)
        self.log.high_watermark = self.log.log_end_offset
        return info.first_offset

    def clean(self, now: int) -> int:
        return self.lm.cleaner.clean_once(now)

    def restart(self) -> None:
        self.lm.shutdown()
        self.lm = LogManager(
            [str(self.root)], self.config, self.clock, cleaner_config=self.cleaner_config
        )
        self.lm.load_logs(lambda _t: self.config)
        log = self.lm.get_log("t", 0)
        assert log is not None
        self.log = log
        self.log.high_watermark = self.log.log_end_offset


def batches_of(data: bytes | bytearray) -> Iterator[tuple[RecordBatchHeader, list[Record]]]:
    for h in iter_batches(data):
        raw = data[h.position : h.position + h.size]
        assert is_batch_crc_valid(raw, 0, len(raw))
        yield h, decode_batch(raw)


def read_log(log: Log, start: int | None = None) -> list[Record]:
    """Every record from ``start`` (default the log start) to the log end, via Log.read."""
    out: list[Record] = []
    pos = log.log_start_offset if start is None else start
    while pos < log.log_end_offset:
        data = log.read(pos, 1 << 20).to_bytes()
        last = None
        for h, recs in batches_of(data):
            out.extend(r for r in recs if r.offset >= pos)
            last = h.last_offset
        assert last is not None, f"no progress at {pos}"
        pos = last + 1
    return out


def headers_of(log: Log) -> list[RecordBatchHeader]:
    return [h for seg in log.segments for h in seg.iter_batch_headers()]


def latest(records: Sequence[Record]) -> dict[bytes | None, bytes | None]:
    return {r.key: r.value for r in records}


def check_offsets(records: Sequence[Record]) -> None:
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets)), "offsets must be strictly increasing"


def fill_keys(env: Env, rounds: int, keys: int = 10, *, ts0: int = 1000, tag: bytes = b"") -> None:
    """``rounds`` values for each of ``keys`` keys, one record per batch."""
    n = 0
    for r in range(rounds):
        for k in range(keys):
            env.produce([(b"k%d" % k, b"v%d-%d%s" % (r, k, tag) + b"x" * 30)], ts=ts0 + n)
            n += 1


# ============================================================================== basics
def test_keeps_only_the_latest_value_per_key_across_segments(tmp_path: Path) -> None:
    env = Env(tmp_path)
    fill_keys(env, rounds=10)
    log = env.log
    before = read_log(log)
    by_offset = {r.offset: (r.key, r.value) for r in before}
    assert log.num_segments > 5
    active = log.active_segment
    active_bytes = active.read_bytes(0, active.size)
    active_base = active.base_offset
    end = log.log_end_offset

    assert env.clean(now=10**6) == 1

    after = read_log(log)
    check_offsets(after)
    assert log.log_end_offset == end
    assert latest(after) == latest(before)
    # offsets are preserved: each surviving record is the one that was at its offset
    assert all(by_offset[r.offset] == (r.key, r.value) for r in after)
    # below the active segment, one record per key at most
    cleaned = [r for r in after if r.offset < active_base]
    assert len({r.key for r in cleaned}) == len(cleaned)
    # the active segment was not touched
    assert log.active_segment is active
    assert active.read_bytes(0, active.size) == active_bytes
    for seg in log.segments:
        assert seg.size <= COMPACT.segment_bytes
    stats = env.lm.cleaner.last_stats
    assert stats is not None and stats.records_removed > 0
    assert stats.bytes_written < stats.bytes_read / 3
    # nothing dirty any more
    assert env.clean(now=10**6) == 0
    # full source segments were cleaned one by one; the next cleaning merges the now small
    # cleaned segments into groups of at most segment.bytes
    segments = log.num_segments
    fill_keys(env, rounds=2, tag=b"-again")
    assert env.clean(now=10**6) == 1
    assert log.num_segments < segments
    for seg in log.segments:
        assert seg.size <= COMPACT.segment_bytes
    assert latest(read_log(log))[b"k3"] == b"v1-3-again" + b"x" * 30


def test_reads_and_list_offsets_on_the_cleaned_log(tmp_path: Path) -> None:
    env = Env(tmp_path)
    fill_keys(env, rounds=8, keys=5)
    log = env.log
    before = read_log(log)
    env.clean(now=10**6)
    after = read_log(log)
    survivors = [r.offset for r in after]
    # a fetch from an offset whose record was removed starts at the next surviving batch
    removed = next(o for o in range(log.log_end_offset) if o not in survivors)
    got = read_log(log, removed)
    assert got and got[0].offset == min(o for o in survivors if o > removed)
    # ListOffsets
    assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP)[0] == 0  # type: ignore[index]
    assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP)[0] == log.log_end_offset  # type: ignore[index]
    max_ts = max(r.timestamp for r in before)
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP)[:2] == (  # type: ignore[index]
        before[-1].offset,
        max_ts,
    )
    for target in (before[0].timestamp, before[len(before) // 2].timestamp):
        found = log.fetch_offset_by_timestamp(target)
        expected = next(r for r in after if r.timestamp >= target)
        assert found is not None and found[:2] == (expected.offset, expected.timestamp)


def test_in_flight_fetch_of_replaced_segments_stays_readable(tmp_path: Path) -> None:
    env = Env(tmp_path)
    fill_keys(env, rounds=6, keys=4)
    pending = env.log.read(0, 1 << 20)
    expected = bytes(pending.to_bytes())
    env.clean(now=10**6)
    assert bytes(pending.to_bytes()) == expected  # the old descriptors are still open
    env.clock.now_ms = 10**6
    env.lm.cleanup_logs()  # file.delete.delay.ms = 0: now they are closed
    assert read_log(env.log)


def test_records_above_the_high_watermark_are_not_cleaned(tmp_path: Path) -> None:
    env = Env(tmp_path)
    fill_keys(env, rounds=6, keys=4)
    env.log.high_watermark = 0
    assert env.clean(now=10**6) == 0
    env.log.high_watermark = env.log.log_end_offset
    assert env.clean(now=10**6) == 1


# ========================================================================== tombstones
def test_tombstones_kept_for_delete_retention_then_removed(tmp_path: Path) -> None:
    env = Env(tmp_path)
    fill_keys(env, rounds=3, keys=5)
    env.produce([(b"k1", None)], ts=5000)
    env.produce([(b"k2", None)], ts=5001)
    fill_keys(env, rounds=2, keys=1, ts0=6000, tag=b"-late")  # k0 again
    env.produce([(b"k9", b"pad" * 200)], ts=7000)  # roll the tombstones out of the active one
    env.produce([(b"k9", b"pad" * 200)], ts=7001)
    log = env.log
    t0 = 10**6
    assert env.clean(now=t0) == 1
    recs = latest(read_log(log))
    assert b"k1" in recs and recs[b"k1"] is None and recs[b"k2"] is None
    flagged = [h for h in headers_of(log) if h.attributes & DELETE_HORIZON_FLAG_MASK]
    assert flagged and {h.base_timestamp for h in flagged} == {t0 + HOUR}
    # record timestamps are unchanged by the rebased delete horizon
    tomb = [r for r in read_log(log) if r.value is None]
    assert sorted(r.timestamp for r in tomb) == [5000, 5001]

    # within delete.retention.ms: nothing to do, and a forced pass keeps them too
    assert env.clean(now=t0 + HOUR - 1) == 0
    env.produce([(b"k3", b"new")], ts=8000)
    env.produce([(b"k9", b"pad" * 200)], ts=8001)
    env.produce([(b"k9", b"pad" * 200)], ts=8002)
    assert env.clean(now=t0 + HOUR - 1) == 1
    recs = latest(read_log(log))
    assert recs[b"k1"] is None and recs[b"k2"] is None

    # past the horizon: picked although nothing is dirty, and the tombstones go
    assert env.clean(now=t0 + HOUR) == 1
    after = read_log(log)
    keys = {r.key for r in after}
    assert b"k1" not in keys and b"k2" not in keys
    assert all(r.value is not None for r in after)
    assert latest(after)[b"k3"] == b"new"
    assert env.clean(now=t0 + HOUR) == 0


def test_tombstone_horizon_survives_a_restart(tmp_path: Path) -> None:
    env = Env(tmp_path)
    fill_keys(env, rounds=2, keys=3)
    env.produce([(b"k0", None)], ts=5000)
    env.produce([(b"k9", b"pad" * 300)], ts=6000)
    env.produce([(b"k9", b"pad" * 300)], ts=6001)
    env.clean(now=10**6)
    env.restart()
    assert latest(read_log(env.log))[b"k0"] is None
    assert env.clean(now=10**6 + HOUR - 1) == 0
    assert env.clean(now=10**6 + HOUR) == 1
    assert b"k0" not in {r.key for r in read_log(env.log)}


# ===================================================================== eligibility knobs
def test_min_compaction_lag_is_respected(tmp_path: Path) -> None:
    cfg = LogConfig(**{**COMPACT.__dict__, "raw": {}, "min_compaction_lag_ms": 10_000})
    env = Env(tmp_path, cfg)
    fill_keys(env, rounds=3, keys=4, ts0=1000)  # timestamps 1000..1011
    fill_keys(env, rounds=3, keys=4, ts0=50_000, tag=b"-new")  # timestamps 50000..
    env.produce([(b"k9", b"pad" * 300)], ts=60_000)
    log = env.log
    before = read_log(log)
    # at now=20000 only segments whose newest record is older than 10000 may be cleaned
    assert env.clean(now=20_000) == 1
    after = read_log(log)
    new_records = [r for r in before if r.timestamp >= 50_000]
    assert all(r in after for r in new_records)  # nothing younger than the lag was touched
    assert len(after) < len(before)
    # later, the rest becomes cleanable
    assert env.clean(now=100_000) == 1
    final = read_log(log)
    assert len(final) < len(after)
    assert latest(final) == latest(before)


def test_dirty_ratio_threshold(tmp_path: Path) -> None:
    cfg = LogConfig(**{**COMPACT.__dict__, "raw": {}, "min_cleanable_dirty_ratio": 0.5})
    env = Env(tmp_path, cfg)
    # 40 distinct keys: cleaning removes little, the clean section stays large
    for k in range(40):
        env.produce([(b"key%d" % k, b"v" * 40)], ts=1000 + k)
    env.produce([(b"pad", b"p" * 600)], ts=2000)
    assert env.clean(now=10**6) == 1
    clean_bytes = sum(s.size for s in env.log.segments[:-1])
    # a little dirty data: ratio below 0.5, not cleaned
    for k in range(5):
        env.produce([(b"key%d" % k, b"w" * 40)], ts=3000 + k)
    env.produce([(b"pad", b"p" * 900)], ts=3100)
    ltc = env.lm.cleaner.log_to_clean(("t", 0), env.log, 10**6)
    assert 0 < ltc.cleanable_ratio <= 0.5
    assert ltc.clean_bytes == clean_bytes
    assert env.clean(now=10**6) == 0
    # much more: above 0.5, cleaned
    for k in range(40):
        env.produce([(b"key%d" % k, b"z" * 40)], ts=4000 + k)
    env.produce([(b"pad", b"p" * 900)], ts=5000)
    assert env.lm.cleaner.log_to_clean(("t", 0), env.log, 10**6).cleanable_ratio > 0.5
    assert env.clean(now=10**6) == 1
    assert latest(read_log(env.log))[b"key0"] == b"z" * 40


def test_max_compaction_lag_forces_cleaning_and_rolls_the_active_segment(tmp_path: Path) -> None:
    cfg = LogConfig(
        **{
            **COMPACT.__dict__,
            "raw": {},
            "min_cleanable_dirty_ratio": 0.99,
            "max_compaction_lag_ms": 60_000,
        }
    )
    env = Env(tmp_path, cfg)
    for k in range(40):
        env.produce([(b"key%d" % k, b"v" * 40)], ts=1000 + k)
    assert env.clean(now=10**6) == 1  # first cleaning: all dirty
    env.produce([(b"key1", b"new")], ts=2_000_000, now=2_000_000)
    env.produce([(b"key1", b"newer")], ts=2_000_001, now=2_000_001)
    # the active segment rolls once max.compaction.lag.ms has passed since its first append
    env.produce([(b"key2", b"x")], ts=2_070_000, now=2_070_000)
    assert env.log.active_segment.base_offset == env.log.log_end_offset - 1
    ltc = env.lm.cleaner.log_to_clean(("t", 0), env.log, 2_070_000)
    assert ltc.cleanable_ratio < 0.99 and ltc.need_compaction_now
    assert env.clean(now=2_070_000) == 1
    values = [r.value for r in read_log(env.log) if r.key == b"key1"]
    assert values == [b"newer"]


# ========================================================================= compression
@pytest.mark.parametrize(
    "codec",
    [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4, COMPRESSION_ZSTD],
)
def test_compressed_batches_are_compacted_with_their_codec(tmp_path: Path, codec: int) -> None:
    env = Env(tmp_path)
    hdrs = [("h", b"1"), ("n", None)]
    for r in range(6):
        env.produce(
            [(b"k%d" % k, b"r%d-k%d" % (r, k) + b"y" * 40) for k in range(4)],
            ts=1000 + 10 * r,
            compression=codec,
            headers=hdrs,
        )
    env.produce([(b"k0", None), (b"k5", b"five")], ts=2000, compression=codec)
    env.produce([(b"pad", b"p" * 900)], ts=3000)
    before = read_log(env.log)
    assert env.clean(now=10**6) == 1
    after = read_log(env.log)
    check_offsets(after)
    assert latest(after) == latest(before)
    original = {r.offset: r for r in before}
    for rec in after:
        o = original[rec.offset]
        assert (rec.key, rec.value, rec.timestamp, rec.headers) == (
            o.key,
            o.value,
            o.timestamp,
            o.headers,
        )
    for h in headers_of(env.log)[:-1]:
        assert h.compression == codec
    # the rebuilt batches keep their original offset span
    spans = {(h.base_offset, h.last_offset) for h in headers_of(env.log)}
    assert (24, 25) in spans  # the tombstone batch, rewritten to set its delete horizon


# ======================================================================== crash safety
class Crash(BaseException):
    pass


def _fs_mutations(monkeypatch: pytest.MonkeyPatch, crash_at: int | None) -> list[str]:
    calls: list[str] = []
    real_replace, real_unlink = os.replace, os.unlink
    # os.replace/os.unlink are patched process-wide; only this thread's calls are the cleaner's
    # (a broker left running by another test writes its checkpoints from other threads).
    me = threading.get_ident()

    def guard(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != me:
                return fn(*args, **kwargs)
            if crash_at is not None and len(calls) == crash_at:
                raise Crash(f"crash before {name}{args}")
            calls.append(f"{name} {args}")
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(os, "replace", guard("replace", real_replace))
    monkeypatch.setattr(os, "unlink", guard("unlink", real_unlink))
    return calls


def _crash_fixture(root: Path) -> Path:
    """A log cleaned once (small cleaned segments) with a new dirty section, so that the next
    cleaning merges several segments into one (the N -> 1 swap); returned shut down."""
    env = Env(root)
    fill_keys(env, rounds=6, keys=6)
    env.produce([(b"pad", b"p" * 900)], ts=8000)
    assert env.clean(now=10**5) == 1
    fill_keys(env, rounds=2, keys=3, ts0=8001, tag=b"-2")  # k3..k5 stay in the merge
    env.produce([(b"k1", None)], ts=9000)
    env.produce([(b"pad", b"p" * 900)], ts=9001)
    env.lm.shutdown()
    return root


def _reopen(fixture: Path, root: Path) -> Env:
    shutil.copytree(fixture, root)
    env = Env.__new__(Env)
    env.root, env.config, env.cleaner_config = root, COMPACT, CleanerConfig()
    env.clock = FakeClock(0)
    env.lm = LogManager([str(root)], COMPACT, env.clock)
    env.lm.load_logs(lambda _t: COMPACT)
    log = env.lm.get_log("t", 0)
    assert log is not None
    env.log = log
    log.high_watermark = log.log_end_offset
    return env


def test_crash_at_any_step_of_the_swap_leaves_a_consistent_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process crash keeps what was written: fsync makes no difference here, and is slow.
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    fixture = _crash_fixture(tmp_path / "fixture")
    # Count the file-system mutations of one cleaning, then crash before each one in turn.
    env = _reopen(fixture, tmp_path / "count")
    with monkeypatch.context() as m:
        calls = _fs_mutations(m, None)
        assert env.clean(now=10**6) == 1
        total = len(calls)
    merged = env.lm.cleaner.last_stats
    assert merged is not None and merged.segments_after < merged.segments_before
    assert total >= 12
    for crash_at in range(total):
        root = tmp_path / f"crash{crash_at}"
        env = _reopen(fixture, root)
        original = read_log(env.log)
        by_offset = {r.offset: (r.key, r.value) for r in original}
        end = env.log.log_end_offset
        with monkeypatch.context() as m:
            _fs_mutations(m, crash_at)
            with pytest.raises(Crash):
                env.clean(now=10**6)
        leftovers = [n for n in os.listdir(root / "t-0") if n.endswith((".cleaned", ".swap"))]
        # reload trusting the index files (recovery point at the end) or rescanning everything
        recovery_point = end if crash_at % 2 else 0
        log = Log.load(
            str(root / "t-0"), COMPACT, recovery_point=recovery_point, clean_shutdown=False
        )
        got = read_log(log)
        check_offsets(got)
        assert log.log_end_offset == end
        assert latest(got) == latest(original), (crash_at, leftovers)
        assert all(by_offset[r.offset] == (r.key, r.value) for r in got)
        assert not [n for n in os.listdir(root / "t-0") if n.endswith((".cleaned", ".swap"))]
        # and it takes appends afterwards
        log.append_as_leader(
            bytearray(build_batch([(b"k2", b"after", [], 10**5)])), 0, now_ms=10**5
        )
        assert latest(read_log(log))[b"k2"] == b"after"
        log.close()


def test_leftover_cleaned_and_uncommitted_swap_files_are_discarded(tmp_path: Path) -> None:
    env = Env(tmp_path)
    fill_keys(env, rounds=4, keys=3)
    before = read_log(env.log)
    env.lm.shutdown()
    d = tmp_path / "t-0"
    (d / "00000000000000000000.log.cleaned").write_bytes(b"garbage")
    (d / "00000000000000000000.index.swap").write_bytes(b"\0" * 8)  # no .log.swap: uncommitted
    log = Log.load(str(d), COMPACT, clean_shutdown=False)
    assert read_log(log) == before
    assert not [n for n in os.listdir(d) if n.endswith((".cleaned", ".swap"))]


# ===================================================================== restart, producers
def test_compacted_state_persists_across_restart(tmp_path: Path) -> None:
    env = Env(tmp_path)
    fill_keys(env, rounds=6, keys=5)
    env.clean(now=10**6)
    cleaned = read_log(env.log)
    cp_offset = env.log.active_segment.base_offset
    env.restart()
    assert read_log(env.log) == cleaned
    entries = read_checkpoint_lines(str(tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE))
    assert entries == [["t", "0", str(cp_offset)]]
    assert env.clean(now=10**6) == 0  # the checkpoint was read back: nothing dirty
    end = env.log.log_end_offset
    assert env.produce([(b"k0", b"after-restart")], ts=10**5) == end
    fill_keys(env, rounds=3, keys=5, ts0=10**5 + 1, tag=b"-2")
    assert env.clean(now=10**6) == 1
    assert latest(read_log(env.log))[b"k1"] == b"v2-1-2" + b"x" * 30


def test_idempotent_producer_sequence_continues_after_cleaning(tmp_path: Path) -> None:
    env = Env(tmp_path)
    pid, epoch = 4000, 0
    seq = 0
    for r in range(4):
        env.produce([(b"k%d" % k, b"p%d" % r) for k in range(3)], producer=(pid, epoch, seq))
        seq += 3
    last_batch_offset = env.log.log_end_offset - 1
    # a non-idempotent writer overwrites every key: all the producer's records are superseded
    fill_keys(env, rounds=3, keys=3, ts0=2000)
    env.produce([(b"pad", b"p" * 900)], ts=3000)
    assert env.clean(now=10**6) == 1
    pheaders = [h for h in headers_of(env.log) if h.producer_id == pid]
    assert len(pheaders) == 1  # only its last batch is left, as an empty header
    h = pheaders[0]
    assert (h.records_count, h.last_offset, h.base_sequence) == (0, last_batch_offset, 9)
    assert not [r for r in read_log(env.log) if r.key != b"pad" and r.value in (b"p0", b"p3")]

    # a retry of the last batch is still a duplicate; the next sequence is accepted
    dup = bytearray(
        build_batch(
            [(b"k0", b"p3", [], 1000)] * 3, producer_id=pid, producer_epoch=epoch, base_sequence=9
        )
    )
    info = env.log.append_as_leader(dup, 0, now_ms=5000)
    assert info.num_batches == 0 and info.first_offset == last_batch_offset - 2
    with pytest.raises(OutOfOrderSequenceError):
        env.produce([(b"k0", b"gap")], producer=(pid, epoch, seq + 1))
    env.produce([(b"k0", b"next")], producer=(pid, epoch, seq))
    seq += 1
    # and after a restart (producer state rebuilt from batch headers)
    env.produce([(b"pad", b"p" * 900)], ts=3000)
    env.clean(now=10**6)
    env.restart()
    with pytest.raises(OutOfOrderSequenceError):
        env.produce([(b"k0", b"gap")], producer=(pid, epoch, seq + 5))
    env.produce([(b"k0", b"after-restart")], producer=(pid, epoch, seq))
    assert latest(read_log(env.log))[b"k0"] == b"after-restart"


# ========================================================================== null keys
def test_compacted_topic_rejects_records_without_key(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.produce([(b"a", b"1")])
    end = env.log.log_end_offset
    for codec in (COMPRESSION_NONE, COMPRESSION_ZSTD):
        with pytest.raises(InvalidRecordError) as exc:
            env.produce([(b"b", b"2"), (None, b"3")], compression=codec)
        assert exc.value.error_code == 87
        assert "without key" in str(exc.value)
    assert env.log.log_end_offset == end
    plain = Log.load(str(tmp_path / "plain-0"), LogConfig(), now_ms=0)
    plain.append_as_leader(bytearray(build_batch([(None, b"x", [], 0)])), 0, now_ms=0)
    assert plain.log_end_offset == 1


def test_cleaner_drops_records_without_key(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.produce([(b"a", b"1")])
    # a follower append is not validated record by record: a keyless record gets in
    batch = bytearray(
        build_batch([(None, b"nokey", [], 1001), (b"b", b"2", [], 1002)], base_offset=1)
    )
    env.log.append_as_follower(batch, now_ms=1001)
    env.log.high_watermark = env.log.log_end_offset
    env.produce([(b"pad", b"p" * 900)], ts=2000)
    env.clean(now=10**6)
    recs = read_log(env.log)
    assert [r.key for r in recs] == [b"a", b"b", b"pad"]
    assert [r.offset for r in recs] == [0, 2, 3]


# ====================================================================== LogManager glue
def test_log_manager_cleans_only_compacted_logs_and_honours_compact_delete(
    tmp_path: Path,
) -> None:
    clock = FakeClock(0)
    lm = LogManager([str(tmp_path)], LogConfig(), clock)
    plain_cfg = LogConfig(segment_bytes=1024, retention_ms=-1)
    both = LogConfig(
        **{
            **COMPACT.__dict__,
            "raw": {},
            "cleanup_policy": ("compact", "delete"),
            "retention_ms": 100_000,
        }
    )
    logs = {
        "plain": lm.get_or_create_log("plain", 0, plain_cfg),
        "compact": lm.get_or_create_log("compact", 0, COMPACT),
        "both": lm.get_or_create_log("both", 0, both),
    }
    for log in logs.values():
        for i in range(60):
            b = bytearray(build_batch([(b"k%d" % (i % 3), b"v%d" % i + b"x" * 40, [], 1000 + i)]))
            log.append_as_leader(b, 0, now_ms=1000 + i)
        log.high_watermark = log.log_end_offset
    sizes = {n: lg.size for n, lg in logs.items()}
    assert lm.cleaner_backoff_ms == 15000
    clock.now_ms = 10_000
    assert lm.clean_logs() == 2
    assert logs["plain"].size == sizes["plain"]
    assert logs["compact"].size < sizes["compact"]
    assert logs["both"].size < sizes["both"]
    assert lm.clean_logs() == 0
    entries = read_checkpoint_lines(str(tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE))
    assert entries is not None and sorted(e[0] for e in entries) == ["both", "compact"]
    # compact,delete: retention applies too
    clock.now_ms = 10**6
    assert lm.cleanup_logs() > 0
    assert logs["both"].num_segments == 1
    assert logs["compact"].num_segments > 1
    # a deleted log leaves the checkpoint
    lm.delete_log("compact", 0)
    entries = read_checkpoint_lines(str(tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE))
    assert entries is not None and [e[0] for e in entries] == ["both"]
    lm.shutdown()


def test_cleaner_disabled_and_aborted_logs(tmp_path: Path) -> None:
    env = Env(tmp_path, enable=False)
    fill_keys(env, rounds=4, keys=3)
    env.clock.now_ms = 10**6
    assert env.lm.clean_logs() == 0
    cleaner = LogCleaner(env.lm.all_logs)
    cleaner.abort_and_wait(env.log)  # e.g. the log is being deleted
    assert cleaner.clean_once(10**6) == 0
    other = LogCleaner(env.lm.all_logs)
    other.shutdown()
    assert other.clean_once(10**6) == 0
    assert LogCleaner(env.lm.all_logs).clean_once(10**6) == 1


def test_emptied_producer_batch_goes_once_the_producer_wrote_again(tmp_path: Path) -> None:
    env = Env(tmp_path)
    pid = 77
    env.produce([(b"a", b"1")], producer=(pid, 0, 0))
    env.produce([(b"a", b"2")], ts=1001)
    env.produce([(b"pad", b"p" * 900)], ts=1002)
    env.clean(now=10**6)
    assert [h.records_count for h in headers_of(env.log) if h.producer_id == pid] == [0]
    env.produce([(b"b", b"3")], producer=(pid, 0, 1))
    env.produce([(b"pad", b"p" * 900)], ts=1003)
    env.clean(now=10**6)
    assert [h.records_count for h in headers_of(env.log) if h.producer_id == pid] == [1]


def test_cleaning_while_appending_and_reading(tmp_path: Path) -> None:
    import threading

    env = Env(tmp_path)
    log = env.log
    expected: dict[bytes | None, bytes | None] = {}
    errors: list[BaseException] = []
    stop = threading.Event()

    def appender() -> None:
        try:
            for i in range(600):
                key, value = b"k%d" % (i % 7), b"v%d" % i + b"x" * 40
                env.produce([(key, value)], ts=1000 + i)
                expected[key] = value
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            stop.set()

    def reader() -> None:
        try:
            while not stop.is_set():
                check_offsets(read_log(log))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=appender), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    cleaned = 0
    while not stop.is_set():
        cleaned += env.clean(now=10**6)
    for t in threads:
        t.join()
    cleaned += env.clean(now=10**6)
    assert not errors, errors
    assert cleaned >= 1
    final = read_log(log)
    check_offsets(final)
    assert latest(final) == expected
    assert log.log_end_offset == 600
