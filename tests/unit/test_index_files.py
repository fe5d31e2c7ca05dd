"""Index files that hold no descriptor: entries appended in memory, written at flush, roll, close
or spill; files that lag their log (a crash before the write) or outlived it load correctly."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
from test_log import fill, read_all

from odradek.log import Log, LogConfig
from odradek.log.index import SPILL_ENTRIES, OffsetIndex
from odradek.log.segment import LogSegment

EVERY_BATCH = LogConfig(index_interval_bytes=0)  # an index entry for (nearly) every batch


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def check_lookups(log: Log, batches: int) -> None:
    """Every offset reads back, and each batch's first timestamp finds its first offset."""
    assert read_all(log) == list(range(2 * batches))
    for i in range(0, batches, 7):
        found = log.fetch_offset_by_timestamp(1000 + 10 * i)
        assert found is not None and found[:2] == (2 * i, 1000 + 10 * i)
        assert log.read(2 * i + 1, 1 << 20, None, True).to_bytes()


def test_a_segment_holds_one_descriptor_not_three(tmp_path: Path) -> None:
    config = LogConfig(index_interval_bytes=64)
    before = open_fds()
    logs = [Log.load(str(tmp_path / f"t-{i}"), config, now_ms=0) for i in range(200)]
    for log in logs:
        fill(log, 5)
        seg = log.active_segment
        assert len(seg.offset_index) and len(seg.time_index)
    opened = open_fds() - before
    assert 200 <= opened <= 210, opened  # the 200 .log files (was 600 with the indexes)
    for log in logs:
        log.flush()
        log.roll()
        fill(log, 2, ts0=5000)
    assert open_fds() - before <= 410  # two segments each: still one descriptor per segment
    for log in logs:
        log.close()
    assert open_fds() == before


def test_appending_entries_makes_no_index_syscall_until_the_spill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log.load(str(tmp_path / "t-0"), EVERY_BATCH, now_ms=0)
    seg = log.active_segment
    index_writes: list[str] = []
    real_pwrite, real_open = os.pwrite, os.open

    def pwrite(fd: int, data: Any, position: int) -> int:
        if not os.readlink(f"/proc/self/fd/{fd}").endswith(".log"):
            index_writes.append("pwrite")
        return real_pwrite(fd, data, position)

    def open_(path: str, flags: int, *args: Any) -> int:
        if "index" in path:
            index_writes.append("open")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(os, "open", open_)
    fill(log, SPILL_ENTRIES)  # one entry per batch after the first
    assert len(seg.offset_index) == SPILL_ENTRIES - 1
    assert index_writes == []
    assert seg.offset_index.unwritten_entries == SPILL_ENTRIES - 1
    fill(log, 2, ts0=1000 + 10 * SPILL_ENTRIES)  # the 256th entry: the tail is written out
    assert index_writes.count("open") == 2  # each index opened once, for that write only
    assert seg.offset_index.unwritten_entries == 1
    assert os.path.getsize(seg.offset_index.path) == 8 * SPILL_ENTRIES
    monkeypatch.undo()
    log.close()


def assert_indexes_on_disk(seg: Any) -> None:
    """Every entry of the segment's two indexes is in its file, and nothing more."""
    assert seg.offset_index.unwritten_entries == 0 and seg.time_index.unwritten_entries == 0
    assert os.path.getsize(seg.offset_index.path) == 8 * len(seg.offset_index)
    assert os.path.getsize(seg.time_index.path) == 12 * len(seg.time_index)


def test_entries_survive_flush_close_and_reopen(tmp_path: Path) -> None:
    d = str(tmp_path / "t-0")
    log = Log.load(d, EVERY_BATCH, now_ms=0)
    fill(log, 600)
    seg = log.active_segment
    assert 0 < seg.offset_index.unwritten_entries < SPILL_ENTRIES
    log.flush()
    assert_indexes_on_disk(seg)
    fill(log, 10, ts0=7000)  # unwritten again: close writes them
    entries = (seg.offset_index.entries(), seg.time_index.entries())
    log.close()
    log = Log.load(d, EVERY_BATCH, now_ms=0)
    seg = log.active_segment
    assert (seg.offset_index.entries(), seg.time_index.entries()) == entries
    assert read_all(log) == list(range(1220))
    log.close()


def test_rolled_segment_writes_its_indexes(tmp_path: Path) -> None:
    d = str(tmp_path / "t-0")
    log = Log.load(d, EVERY_BATCH, now_ms=0)
    fill(log, 100)
    old = log.active_segment
    log.roll()
    assert_indexes_on_disk(old)
    log.close()


@pytest.mark.parametrize("clean_shutdown", [True, False])
def test_index_tail_lost_in_a_crash_still_loads(tmp_path: Path, clean_shutdown: bool) -> None:
    """A kill -9 before the tail was written: the copy's index files lag the log (a sparser
    index). Trusted (before the recovery point) or rebuilt, every lookup is right."""
    log = Log.load(str(tmp_path / "t-0"), EVERY_BATCH, now_ms=0)
    fill(log, 600)
    seg = log.active_segment
    in_memory = len(seg.offset_index)
    shutil.copytree(tmp_path / "t-0", tmp_path / "c-0")  # no flush, no close: the "crash"
    on_disk = os.path.getsize(tmp_path / "c-0" / Path(seg.offset_index.path).name) // 8
    assert 0 < on_disk < in_memory
    log.close()
    crashed = Log.load(
        str(tmp_path / "c-0"), EVERY_BATCH, recovery_point=1200, now_ms=0,
        clean_shutdown=clean_shutdown,
    )
    loaded = len(crashed.active_segment.offset_index)
    assert loaded == (on_disk if clean_shutdown else in_memory)
    assert crashed.log_end_offset == 1200
    check_lookups(crashed, 600)
    fill(crashed, 10, ts0=1000 + 6000)  # appends go on after the entries it has
    assert read_all(crashed) == list(range(1220))
    crashed.close()


@pytest.mark.parametrize("stale", ["past-the-log-size", "past-the-log-end", "time-index"])
def test_index_entries_that_outlived_their_log_are_rebuilt(tmp_path: Path, stale: str) -> None:
    """Index entries written but log bytes lost (or an index left longer than a truncated log):
    even a load that trusts the files (clean shutdown) notices and rebuilds the indexes."""
    d = tmp_path / "t-0"
    log = Log.load(str(d), EVERY_BATCH, now_ms=0)
    fill(log, 100)
    log.flush()
    seg = log.active_segment
    index_path, time_path, log_path = seg.offset_index.path, seg.time_index.path, seg.log_path
    header = seg.translate_offset(150)
    assert header is not None
    cut, last_pos = header.position, seg.offset_index.last_entry()[1]
    log.close()
    if stale == "past-the-log-size":
        os.truncate(log_path, cut)  # the log lost its tail, the index did not
    elif stale == "past-the-log-end":
        # One more entry whose position lies inside the log: an entry left from data since
        # truncated and rewritten differently.
        with open(index_path, "ab") as f:
            f.write(struct.pack(">ii", 250, last_pos + 13))
    else:
        with open(time_path, "ab") as f:
            f.write(struct.pack(">qi", 10**9, 250))
    log = Log.load(str(d), EVERY_BATCH, now_ms=0, clean_shutdown=True)
    seg = log.active_segment
    end = 150 if stale == "past-the-log-size" else 200
    assert log.log_end_offset == end
    assert seg.offset_index.last_entry()[0] < end and seg.time_index.last_entry()[1] < end
    check_lookups(log, end // 2)
    log.close()


def test_truncation_removes_written_and_unwritten_entries(tmp_path: Path) -> None:
    d = str(tmp_path / "t-0")
    log = Log.load(d, EVERY_BATCH, now_ms=0)
    fill(log, 300)
    seg = log.active_segment
    written = os.path.getsize(seg.offset_index.path) // 8
    assert written == SPILL_ENTRIES and len(seg.offset_index) > written
    log.truncate_to(541)  # only unwritten entries go (the file has those up to 513)
    assert seg.offset_index.last_entry()[0] < 540 and len(seg.offset_index) > written
    assert os.path.getsize(seg.offset_index.path) // 8 == written
    log.truncate_to(101)  # written entries go: the file shrinks
    assert seg.offset_index.last_entry()[0] < 100
    assert_indexes_on_disk(seg)
    assert log.log_end_offset == 100
    fill(log, 5, ts0=9000)
    log.close()
    log = Log.load(d, EVERY_BATCH, now_ms=0)
    assert read_all(log) == list(range(110))
    log.close()


def test_truncate_to_entries_undoes_entries_in_memory_and_file(tmp_path: Path) -> None:
    """The rollback of a failed segment append: entries it added go, written or not."""
    index = OffsetIndex(str(tmp_path / "00000000000000000000.index"), 0, 1 << 20)
    for i in range(SPILL_ENTRIES + 10):
        index.append(10 * i, 100 * i)
    assert os.path.getsize(index.path) == 8 * SPILL_ENTRIES
    index.truncate_to_entries(SPILL_ENTRIES + 5)  # unwritten entries only
    assert len(index) == SPILL_ENTRIES + 5
    assert os.path.getsize(index.path) == 8 * SPILL_ENTRIES
    index.truncate_to_entries(100)  # written ones too
    assert len(index) == 100 and index.last_entry() == (990, 9900)
    assert os.path.getsize(index.path) == 800
    index.append(2000, 50_000)
    index.flush()
    reloaded = OffsetIndex(index.path, 0, 1 << 20)
    reloaded.load(10**6)
    assert reloaded.entries() == index.entries()
    assert reloaded.lookup(1995) == (990, 9900) and reloaded.lookup(2000) == (2000, 50_000)


def test_retired_log_never_writes_its_indexes_again(tmp_path: Path) -> None:
    """A deleted log is renamed and its files closed later: its indexes must not write (and
    recreate) files under the old name, where a new log of the same partition may live."""
    d = tmp_path / "t-0"
    log = Log.load(str(d), EVERY_BATCH, now_ms=0)
    fill(log, 50)
    assert log.active_segment.offset_index.unwritten_entries > 0
    log.retire()
    log.rename_dir(str(tmp_path / "t-0.deleted"))
    new = Log.load(str(d), EVERY_BATCH, now_ms=0)  # the partition created again
    log.close_files()
    seg: LogSegment = new.active_segment
    assert os.path.getsize(seg.offset_index.path) == 0
    assert os.path.getsize(seg.time_index.path) == 0
    new.close()
