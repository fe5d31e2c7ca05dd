"""Disk full and I/O errors in the write path: KAFKA_STORAGE_ERROR, a rolled-back append, one
log line per episode, and writes again once space is back."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_clock import FakeClock
from test_log import batch, fill, read_all

from odradek.log import Log, LogConfig, LogManager
from odradek.log.errors import KafkaStorageError
from odradek.log.storage_health import STORAGE_HEALTH
from odradek.server.broker_server import run_periodically

SMALL = LogConfig(segment_bytes=4096, index_interval_bytes=256, segment_index_bytes=4096)
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class FailingWrites:
    """os.pwrite failing with ``error`` for files whose name ends with ``suffix`` while armed,
    after writing ``partial`` bytes of the first such call (a write cut short by a full disk)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, error: OSError = ENOSPC) -> None:
        self.real: Callable[..., int] = os.pwrite
        self.error = error
        self.armed = False
        self.suffix = ".log"
        self.partial = 0
        self.failed = 0
        monkeypatch.setattr(os, "pwrite", self)

    def arm(self, suffix: str, partial: int = 0) -> None:
        self.armed, self.suffix, self.partial, self.failed = True, suffix, partial, 0

    def disarm(self) -> None:
        self.armed = False

    def __call__(self, fd: int, data: Any, position: int) -> int:
        if self.armed and os.readlink(f"/proc/self/fd/{fd}").endswith(self.suffix):
            self.failed += 1
            if self.failed == 1 and self.partial:
                return self.real(fd, memoryview(data)[: self.partial], position)
            raise self.error
        return self.real(fd, data, position)


@pytest.fixture(autouse=True)
def _fresh_health() -> None:
    STORAGE_HEALTH._failing.clear()


def storage_records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "odradek.log.storage" and r.levelno == level]


def index_files_match(seg: Any) -> bool:
    """Each index file holds the first entries of its in-memory index, byte for byte (the
    indexes write their entries at flush, roll, close or spill: a file may lag its memory)."""
    off, tim = seg.offset_index, seg.time_index
    off_bytes = Path(off.path).read_bytes()
    tim_bytes = Path(tim.path).read_bytes()
    off_disk = [(off.base_offset + r, p) for r, p in struct.iter_unpack(">ii", off_bytes)]
    tim_disk = [(t, tim.base_offset + r) for t, r in struct.iter_unpack(">qi", tim_bytes)]
    return (
        len(off_bytes) % 8 == 0 and len(tim_bytes) % 12 == 0
        and off_disk == off.entries()[: len(off_disk)]
        and tim_disk == tim.entries()[: len(tim_disk)]
    )


# The index cases ("offset-index-write-fails", "time-index-write-fails") went: an append writes
# no index file any more (see test_index_write_failure_fails_the_flush_not_the_append).
@pytest.mark.parametrize(
    ("suffix", "partial"),
    [(".log", 0), (".log", 50)],
    ids=["nothing-written", "half-a-batch-written"],
)
def test_full_disk_append_is_undone_and_answered_with_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    suffix: str, partial: int,
) -> None:
    d = str(tmp_path / "t-0")
    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=256)
    log = Log.load(d, config, now_ms=0)
    fill(log, 20)
    # A batch over index.interval.bytes: the next append writes the log and both indexes.
    log.append_as_leader(batch(n=20, size=40, ts=5000), leader_epoch=0, now_ms=1000)
    seg = log.active_segment
    state = (log.log_end_offset, seg.size, log.num_segments, len(seg.offset_index), len(seg.time_index))
    leo = log.log_end_offset
    writes = FailingWrites(monkeypatch)
    caplog.set_level(logging.DEBUG, logger="odradek.log.storage")

    for attempt in range(5):
        writes.arm(suffix, partial)
        with pytest.raises(KafkaStorageError) as exc:
            log.append_as_leader(batch(n=20, size=40, ts=6000 + 100 * attempt), 0, now_ms=2000)
        assert exc.value.error_code == 56  # KAFKA_STORAGE_ERROR
        assert "No space left on device" in str(exc.value) and "t-0" in str(exc.value)
        assert writes.failed >= 1
        # Nothing of the failed append is visible, in memory or on disk.
        assert (
            log.log_end_offset, seg.size, log.num_segments, len(seg.offset_index), len(seg.time_index)
        ) == state
        assert os.path.getsize(seg.log_path) == seg.size
        assert index_files_match(seg)
        assert read_all(log) == list(range(leo))
    errors = storage_records(caplog, logging.ERROR)
    assert len(errors) == 1, [r.getMessage() for r in errors]  # once, not per request
    assert "No space left on device" in errors[0].getMessage() and "t-0" in errors[0].getMessage()

    writes.disarm()
    info = log.append_as_leader(batch(n=20, size=40, ts=7000), leader_epoch=0, now_ms=3000)
    assert info.first_offset == leo  # the offsets the failed appends never used
    assert read_all(log) == list(range(leo + 20))
    recovered = storage_records(caplog, logging.INFO)
    assert len(recovered) == 1 and "succeed again" in recovered[0].getMessage()
    log.append_as_leader(batch(), leader_epoch=0, now_ms=3001)
    assert len(storage_records(caplog, logging.INFO)) == 1

    # The files hold exactly what was acknowledged: a recovering reload truncates nothing.
    log.close()
    caplog.clear()
    caplog.set_level(logging.WARNING, logger="odradek.log.log_loader")
    log = Log.load(d, config, recovery_point=0, now_ms=0, clean_shutdown=False)
    assert read_all(log) == list(range(leo + 22))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    log.close()


def test_index_write_failure_fails_the_flush_not_the_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Index entries are written at flush (the append only adds them in memory): a full disk
    there fails the flush (KAFKA_STORAGE_ERROR, recovery point kept), not the produce; once
    space is back the flush writes every entry."""
    d = str(tmp_path / "t-0")
    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=256)
    log = Log.load(d, config, now_ms=0)
    fill(log, 20)
    log.flush()
    writes = FailingWrites(monkeypatch)
    for k, suffix in enumerate((".index", ".timeindex")):
        writes.arm(suffix)
        rp = log.recovery_point
        for i in range(3):
            b = batch(n=20, size=40, ts=6000 + 10 * k + i)
            log.append_as_leader(b, leader_epoch=0, now_ms=2000)
        seg = log.active_segment
        assert seg.offset_index.unwritten_entries > 0 and seg.time_index.unwritten_entries > 0
        with pytest.raises(KafkaStorageError, match="No space left on device"):
            log.flush()
        assert writes.failed >= 1
        assert log.recovery_point == rp
        assert index_files_match(seg)
        writes.disarm()
        log.flush()
        assert log.recovery_point == log.log_end_offset
        assert seg.offset_index.unwritten_entries == 0 and seg.time_index.unwritten_entries == 0
        assert os.path.getsize(seg.offset_index.path) == 8 * len(seg.offset_index)
        assert os.path.getsize(seg.time_index.path) == 12 * len(seg.time_index)
        assert index_files_match(seg)
    entries = (seg.offset_index.entries(), seg.time_index.entries())
    log.close()
    log = Log.load(d, config, now_ms=0)
    seg = log.active_segment
    assert (seg.offset_index.entries(), seg.time_index.entries()) == entries
    assert read_all(log) == list(range(log.log_end_offset))
    log.close()


def test_roll_that_cannot_create_the_new_segment_leaves_the_log_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = str(tmp_path / "t-0")
    log = Log.load(d, SMALL, now_ms=0)
    fill(log, 25)
    leo, segs = log.log_end_offset, log.num_segments
    assert log.active_segment.size + len(batch(n=40, size=40)) > SMALL.segment_bytes  # must roll
    real_open = os.open

    def no_new_files(path: str, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT and not os.path.exists(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_open(path, flags, *args, **kwargs)

    fds_before = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(os, "open", no_new_files)
    with pytest.raises(OSError):
        log.roll(now_ms=1)
    with pytest.raises(KafkaStorageError):  # a produce that needs a new segment
        log.append_as_leader(batch(n=40, size=40), leader_epoch=0, now_ms=1)
    assert (log.log_end_offset, log.num_segments) == (leo, segs)
    assert len(os.listdir("/proc/self/fd")) == fds_before  # no descriptor leaked
    monkeypatch.undo()
    log.append_as_leader(batch(n=40, size=40), leader_epoch=0, now_ms=2)
    assert read_all(log) == list(range(leo + 40))
    log.close()


def test_fsync_failure_answers_storage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = Log.load(str(tmp_path / "t-0"), SMALL, now_ms=0)
    fill(log, 3)

    def eio(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", eio)
    with pytest.raises(KafkaStorageError, match="Input/output error"):
        log.flush()
    monkeypatch.undo()
    log.flush()
    assert log.recovery_point == log.log_end_offset
    log.close()


def test_checkpoint_write_on_a_full_disk_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lm = LogManager([str(tmp_path / "d")], SMALL, FakeClock(0))
    lm.load_logs()
    fill(lm.get_or_create_log("t", 0), 3)
    lm.checkpoint_logs()
    before = sorted(os.listdir(tmp_path / "d"))

    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError):
        lm.checkpoint_logs()
    assert sorted(os.listdir(tmp_path / "d")) == before  # no *.tmp left taking space
    monkeypatch.undo()
    lm.shutdown()


def test_background_task_logs_a_failure_once_and_the_recovery_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The recovery-point / high-watermark checkpoint writers on a full disk: one ERROR line
    (no traceback) however many runs fail, one INFO line when a run succeeds again."""
    state = {"runs": 0}

    def checkpoint() -> None:
        state["runs"] += 1
        if 2 <= state["runs"] <= 8:
            raise OSError(errno.ENOSPC, "No space left on device", "/data/recovery-point-offset-checkpoint.tmp")

    async def go() -> None:
        task = asyncio.ensure_future(run_periodically("recovery-point-checkpoint", 1, checkpoint))
        for _ in range(2000):
            if state["runs"] >= 12:
                break
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    caplog.set_level(logging.DEBUG, logger="odradek.server.broker_server")
    asyncio.run(go())
    assert state["runs"] >= 12
    records = [r for r in caplog.records if r.name == "odradek.server.broker_server"]
    errors = [r for r in records if r.levelno >= logging.WARNING]
    assert len(errors) == 1 and errors[0].exc_info is None
    assert "recovery-point-checkpoint" in errors[0].getMessage()
    assert "No space left on device" in errors[0].getMessage()
    infos = [r for r in records if r.levelno == logging.INFO]
    assert len(infos) == 1 and "succeeds again after 7 failed runs" in infos[0].getMessage()


def test_shutdown_on_a_full_disk_writes_no_clean_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Checkpoints that cannot be written at shutdown: no clean-shutdown marker (so the next
    start recovers rather than trusting stale checkpoints), no exception, and data intact."""
    d = tmp_path / "d"
    lm = LogManager([str(d)], SMALL, FakeClock(0))
    lm.load_logs()
    fill(lm.get_or_create_log("t", 0), 30)

    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    caplog.set_level(logging.WARNING)
    lm.shutdown()
    monkeypatch.undo()
    assert not (d / ".kafka_cleanshutdown").exists()
    assert "not marking the shutdown clean" in caplog.text
    lm2 = LogManager([str(d)], SMALL, FakeClock(0))
    lm2.load_logs()
    log = lm2.get_log("t", 0)
    assert log is not None and read_all(log) == list(range(60))
    lm2.shutdown()
    assert (d / ".kafka_cleanshutdown").exists()
