"""LogManager reads time only from the clock it is given: retention, flushing and cleaning run on
a fake clock here, without sleeping (the delayed close of a deleted log's files too: see
test_log.py::test_deleted_log_keeps_its_files_open_until_file_delete_delay)."""

from __future__ import annotations

from pathlib import Path

from fake_clock import FakeClock

from odradek.log import Log, LogConfig, LogManager
from odradek.log.log_cleaner import CleanerConfig
from odradek.records.builder import build_batch

T0 = 1_700_000_000_000
DAY = 24 * 3600 * 1000


def append(log: Log, count: int, ts: int, *, key: bytes = b"k") -> None:
    """``count`` one-record batches with CreateTime ``ts``, appended at broker time ``ts``."""
    for i in range(count):
        buf = bytearray(build_batch([(key, b"v%d" % i + b"x" * 60, [], ts)]))
        log.append_as_leader(buf, leader_epoch=0, now_ms=ts)
    log.high_watermark = log.log_end_offset


def test_retention_by_time_reads_the_injected_clock(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1024, retention_ms=DAY, file_delete_delay_ms=0)
    clock = FakeClock(T0)
    lm = LogManager([str(tmp_path)], config, clock)
    log = lm.get_or_create_log("t", 0, config)
    append(log, 40, T0)  # several closed segments, all with records of time T0
    segments = log.num_segments
    assert segments > 3

    clock.now_ms = T0 + DAY  # exactly retention.ms old: kept
    assert lm.cleanup_logs() == 0
    assert log.num_segments == segments

    clock.now_ms = T0 + DAY + 1
    assert lm.cleanup_logs() == segments - 1  # all but the active segment
    assert log.num_segments == 1
    assert log.log_start_offset == log.active_segment.base_offset
    lm.shutdown()


def test_a_log_created_later_takes_the_clocks_time_then(tmp_path: Path) -> None:
    # flush.ms counts from the log's creation: with the time of the manager's construction, a
    # log created a minute later would be flushed at once.
    config = LogConfig(flush_ms=30_000)
    clock = FakeClock(T0)
    lm = LogManager([str(tmp_path)], config, clock)
    clock.advance(60_000)
    log = lm.get_or_create_log("t", 0, config)
    append(log, 3, clock())
    clock.advance(29_999)
    lm.flush_dirty_logs()
    assert log.recovery_point == 0  # not yet due
    clock.advance(1)
    lm.flush_dirty_logs()
    assert log.recovery_point == 3
    lm.shutdown()


def test_cleaning_waits_for_min_compaction_lag_on_the_clock(tmp_path: Path) -> None:
    config = LogConfig(
        segment_bytes=1024,
        cleanup_policy=("compact",),
        min_cleanable_dirty_ratio=0.01,
        min_compaction_lag_ms=DAY,
        file_delete_delay_ms=0,
    )
    clock = FakeClock(T0)
    lm = LogManager([str(tmp_path)], config, clock, cleaner_config=CleanerConfig())
    log = lm.get_or_create_log("t", 0, config)
    append(log, 40, T0)  # one key, overwritten 40 times
    size = log.size
    clock.now_ms = T0 + DAY - 1
    assert lm.clean_logs() == 0
    assert log.size == size
    clock.now_ms = T0 + DAY + 1
    assert lm.clean_logs() == 1
    assert log.size < size
    lm.shutdown()
