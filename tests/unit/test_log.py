from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from fake_clock import FakeClock

from odradek.log import Log, LogConfig, LogManager, OffsetOutOfRangeError
from odradek.log.checkpoint import OffsetCheckpointFile
from odradek.log.leader_epoch import LeaderEpochFileCache
from odradek.log.log import parse_topic_partition_dir
from odradek.log.log_manager import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT_FILE
from odradek.records import decode_batch, iter_batches
from odradek.records.batch import is_batch_crc_valid
from odradek.records.builder import build_batch

SMALL = LogConfig(segment_bytes=4096, index_interval_bytes=256, segment_index_bytes=4096)


def batch(n: int = 2, ts: int = 1000, size: int = 20, tag: int = 0) -> bytearray:
    return bytearray(
        build_batch([(b"k", b"%d-%d-" % (tag, i) + b"x" * size, [], ts + i) for i in range(n)])
    )


def fill(log: Log, batches: int, *, n: int = 2, ts0: int = 1000, now: int = 1000) -> None:
    for i in range(batches):
        log.append_as_leader(batch(n, ts=ts0 + i * 10, tag=i), leader_epoch=0, now_ms=now + i)


def offsets_of(data: bytes) -> list[int]:
    out: list[int] = []
    for h in iter_batches(data):
        out.extend(r.offset for r in decode_batch(data[h.position : h.position + h.size]))
    return out


def read_all(log: Log, start: int = 0, max_bytes: int = 1 << 20) -> list[int]:
    out: list[int] = []
    pos = start
    while pos < log.log_end_offset:
        data = log.read(pos, max_bytes, None, True).to_bytes()
        offs = [o for o in offsets_of(data) if o >= pos]
        assert offs, f"no progress at {pos}"
        out.extend(offs)
        pos = offs[-1] + 1
    return out


def test_append_read_round_trip_across_size_rolls(tmp_path: Path) -> None:
    log = Log.load(str(tmp_path / "t-0"), SMALL, now_ms=0)
    fill(log, 300)
    assert log.log_end_offset == 600
    assert log.num_segments > 5
    assert read_all(log) == list(range(600))
    # segment files follow Kafka's naming
    names = os.listdir(tmp_path / "t-0")
    assert "00000000000000000000.log" in names
    assert any(n.endswith(".timeindex") for n in names)
    for seg in log.segments:
        assert seg.size <= SMALL.segment_bytes


def test_roll_by_time(tmp_path: Path) -> None:
    cfg = LogConfig(segment_ms=100)
    log = Log.load(str(tmp_path / "t-0"), cfg, now_ms=0)
    log.append_as_leader(batch(), 0, now_ms=1000)
    log.append_as_leader(batch(), 0, now_ms=1050)
    assert log.num_segments == 1
    log.append_as_leader(batch(), 0, now_ms=1101)
    assert log.num_segments == 2
    assert log.active_segment.base_offset == 4
    assert read_all(log) == list(range(6))


def test_index_lookup_many_offsets(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=1 << 20, index_interval_bytes=100)
    log = Log.load(str(tmp_path / "t-0"), cfg, now_ms=0)
    for i in range(500):
        log.append_as_leader(batch(n=1 + i % 4, tag=i), 0, now_ms=i)
    seg = log.active_segment
    assert len(seg.offset_index) > 50
    leo = log.log_end_offset
    for off in range(0, leo):
        h = seg.translate_offset(off)
        assert h is not None and h.base_offset <= off <= h.last_offset
        f = log.read(off, 1, None, True)
        first = next(iter_batches(f.to_bytes()))
        assert first.base_offset <= off <= first.last_offset
    assert seg.translate_offset(leo) is None


def test_read_respects_max_bytes_and_isolation(tmp_path: Path) -> None:
    log = Log.load(str(tmp_path / "t-0"), LogConfig(), now_ms=0)
    fill(log, 10)
    one = log.read(0, 10, None, True)
    assert len(list(iter_batches(one.to_bytes()))) == 1
    assert log.read(0, 10, None, False).size == 0
    hw_read = log.read(0, 1 << 20, 6, True)
    assert offsets_of(hw_read.to_bytes()) == list(range(6))
    assert log.read(6, 1 << 20, 6, True).size == 0
    assert log.read(20, 100, None, True).size == 0
    with pytest.raises(OffsetOutOfRangeError) as ei:
        log.read(21, 100, None, True)
    assert ei.value.error_code == 1
    region = log.read(2, 1 << 20, None, True).regions[0]
    assert os.pread(region.fd, 8, region.position) == struct.pack(">q", 2)


def test_list_offsets_semantics(tmp_path: Path) -> None:
    log = Log.load(str(tmp_path / "t-0"), SMALL, now_ms=0)
    # timestamps: batch i holds ts0+i*10, ts0+i*10+1; make one batch carry the max in the middle
    fill(log, 100, ts0=1000)
    log.append_as_leader(batch(3, ts=99999), 4, now_ms=5)
    fill(log, 50, ts0=3000)
    assert log.fetch_offset_by_timestamp(-2) == (0, -1, 0)
    assert log.fetch_offset_by_timestamp(-1) == (log.log_end_offset, -1, 4)
    off, ts, epoch = log.fetch_offset_by_timestamp(-3) or (None, None, None)
    assert (off, ts, epoch) == (202, 100001, 4)
    assert log.fetch_offset_by_timestamp(1000) == (0, 1000, 0)
    assert log.fetch_offset_by_timestamp(1501) == (101, 1501, 0)
    found = log.fetch_offset_by_timestamp(1505)
    assert found is not None and found[1] >= 1505 and found[0] == 102
    assert log.fetch_offset_by_timestamp(100002) is None


def test_retention_by_time_and_bytes(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=2048, retention_ms=1000)
    log = Log.load(str(tmp_path / "t-0"), cfg, now_ms=0)
    for i in range(100):
        log.append_as_leader(batch(ts=i * 100, tag=i), 0, now_ms=i * 100)
    log.high_watermark = log.log_end_offset
    nseg = log.num_segments
    assert nseg > 3
    deleted = log.delete_old_segments(now_ms=20_000)  # everything expired but the active one
    assert deleted == nseg - 1
    assert log.num_segments == 1
    assert log.log_start_offset == log.active_segment.base_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100, None, True)

    cfg2 = LogConfig(segment_bytes=2048, retention_bytes=5000, retention_ms=-1)
    log2 = Log.load(str(tmp_path / "u-0"), cfg2, now_ms=0)
    fill(log2, 100)
    # nothing deletable above the high watermark
    assert log2.delete_old_segments(now_ms=10**9) == 0
    log2.high_watermark = log2.log_end_offset
    assert log2.delete_old_segments(now_ms=10**9) > 0
    # Kafka deletes whole segments only while the remainder stays >= retention.bytes
    assert log2.size - 5000 < log2.segments[0].size
    assert log2.size - log2.segments[0].size < 5000
    assert log2.log_start_offset == log2.segments[0].base_offset > 0
    assert read_all(log2, log2.log_start_offset)[-1] == log2.log_end_offset - 1


def test_delete_records(tmp_path: Path) -> None:
    log = Log.load(str(tmp_path / "t-0"), SMALL, now_ms=0)
    fill(log, 200)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(10)  # above the high watermark (0)
    log.high_watermark = 400
    before = log.num_segments
    assert log.delete_records(151) == 151
    assert log.log_start_offset == 151
    assert log.num_segments < before
    assert log.segments[0].base_offset <= 151
    with pytest.raises(OffsetOutOfRangeError):
        log.read(150, 100, None, True)
    assert read_all(log, 151) == list(range(151, 400))
    assert log.fetch_offset_by_timestamp(-2) == (151, -1, 0)
    assert log.delete_records(-1) == 400


def test_recovery_after_torn_tail(tmp_path: Path) -> None:
    d = str(tmp_path / "t-0")
    log = Log.load(d, SMALL, now_ms=0)
    fill(log, 30)
    seg_path = log.active_segment.log_path
    leo = log.log_end_offset
    log.close()
    size = os.path.getsize(seg_path)
    # garbage tail
    with open(seg_path, "ab") as f:
        f.write(b"\x00\x01garbage" * 10)
    log = Log.load(d, SMALL, recovery_point=0, now_ms=0, clean_shutdown=False)
    assert log.log_end_offset == leo
    assert os.path.getsize(seg_path) == size
    log.close()
    # truncate mid-batch
    os.truncate(seg_path, size - 7)
    log = Log.load(d, SMALL, recovery_point=0, now_ms=0, clean_shutdown=False)
    assert log.log_end_offset == leo - 2
    assert read_all(log) == list(range(leo - 2))
    log.append_as_leader(batch(), 0, now_ms=1)
    assert log.log_end_offset == leo
    assert read_all(log) == list(range(leo))
    log.close()
    log = Log.load(d, SMALL, recovery_point=log.recovery_point, now_ms=0, clean_shutdown=True)
    assert log.log_end_offset == leo


def test_recovery_corrupt_crc_in_middle(tmp_path: Path) -> None:
    d = str(tmp_path / "t-0")
    log = Log.load(d, SMALL, now_ms=0)
    fill(log, 100)
    segs = log.segments
    assert len(segs) >= 3
    victim = segs[1]
    victim_path = victim.log_path
    h = list(victim.iter_batch_headers())[3]
    log.close()
    with open(victim_path, "r+b") as f:
        f.seek(h.position + h.size - 1)
        b = f.read(1)
        f.seek(h.position + h.size - 1)
        f.write(bytes([b[0] ^ 0xFF]))
    log = Log.load(d, SMALL, recovery_point=0, now_ms=0, clean_shutdown=False)
    assert log.log_end_offset == h.base_offset
    assert log.num_segments == 2
    assert read_all(log) == list(range(h.base_offset))
    for seg in log.segments:
        for hh in seg.iter_batch_headers():
            assert is_batch_crc_valid(seg.read_bytes(hh.position, hh.size), 0, hh.size)
    log.append_as_leader(batch(), 0, now_ms=1)
    assert read_all(log)[-2:] == [h.base_offset, h.base_offset + 1]


def test_recovery_only_from_recovery_point(tmp_path: Path) -> None:
    d = str(tmp_path / "t-0")
    log = Log.load(d, SMALL, now_ms=0)
    fill(log, 100)
    first = log.segments[0]
    h = list(first.iter_batch_headers())[2]
    rp = log.segments[2].base_offset
    log.close()
    # corrupt an early segment below the recovery point: it is trusted, not rescanned
    with open(first.log_path, "r+b") as f:
        f.seek(h.position + h.size - 1)
        f.write(b"\xff")
    log = Log.load(d, SMALL, recovery_point=rp, now_ms=0, clean_shutdown=False)
    assert log.log_end_offset == 200


def test_rebuilds_missing_index(tmp_path: Path) -> None:
    d = str(tmp_path / "t-0")
    log = Log.load(d, LogConfig(index_interval_bytes=64), now_ms=0)
    fill(log, 100)
    idx = log.active_segment.offset_index.path
    log.close()
    os.unlink(idx)
    log = Log.load(d, LogConfig(index_interval_bytes=64), recovery_point=200, now_ms=0)
    assert log.log_end_offset == 200
    assert len(log.active_segment.offset_index) > 10
    assert read_all(log) == list(range(200))


def test_truncate_to_and_fully(tmp_path: Path) -> None:
    log = Log.load(str(tmp_path / "t-0"), SMALL, now_ms=0)
    fill(log, 100)
    log.append_as_leader(batch(), 3, now_ms=1)
    log.high_watermark = 202
    assert log.truncate_to(201)  # mid-batch: the whole batch goes
    assert log.log_end_offset == 200
    assert log.high_watermark == 200
    assert log.leader_epoch_cache.entries == [(0, 0)]
    assert log.truncate_to(77)
    assert log.log_end_offset == 76
    assert read_all(log) == list(range(76))
    fill(log, 3)
    assert read_all(log) == list(range(82))
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, log.num_segments) == (500, 500, 1)
    fill(log, 2)
    assert read_all(log, 500) == [500, 501, 502, 503]



def test_truncate_at_the_end_drops_an_epoch_without_records(tmp_path: Path) -> None:
    """Found by tests/sim/replication_sim.py: a replica led epoch 3 without appending (its cache
    ends with (3, LEO)), then follows a leader of epoch 4 that never saw epoch 3. The leader
    answers its fetch (last fetched epoch 3) with the diverging epoch 0 ending at the LEO;
    truncating there removes no record but must drop the empty epoch 3, as Kafka's truncateTo
    does, or the follower asks with epoch 3 forever and never catches up."""
    log = Log.load(str(tmp_path / "t-0"), SMALL, now_ms=0)
    fill(log, 2)
    log.leader_epoch_cache.assign(3, log.log_end_offset)  # became leader, appended nothing
    assert log.latest_epoch == 3
    assert log.truncate_to(log.log_end_offset) is False
    assert log.leader_epoch_cache.entries == [(0, 0)] and log.latest_epoch == 0
    assert log.log_end_offset == 4


def test_truncate_fully_at_the_active_segments_own_base(tmp_path: Path) -> None:
    # The new segment reuses the file names of the old one: the old files go first, and the
    # new, empty segment is the one left on disk.
    d = str(tmp_path / "t-0")
    log = Log.load(d, SMALL, now_ms=0)
    fill(log, 3)
    assert log.num_segments == 1
    log.truncate_fully_and_start_at(0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    fill(log, 2)
    assert read_all(log) == [0, 1, 2, 3]
    log.close()
    log = Log.load(d, SMALL, now_ms=0)
    assert read_all(log) == [0, 1, 2, 3]
    log.close()

def test_leader_epoch_cache(tmp_path: Path) -> None:
    d = str(tmp_path / "t-0")
    log = Log.load(d, SMALL, now_ms=0)
    log.append_as_leader(batch(), 1, now_ms=0)  # 0,1
    log.append_as_leader(batch(), 1, now_ms=0)  # 2,3
    log.append_as_leader(batch(), 3, now_ms=0)  # 4,5
    log.append_as_leader(batch(), 5, now_ms=0)  # 6,7
    assert log.leader_epoch_cache.entries == [(1, 0), (3, 4), (5, 6)]
    assert log.end_offset_for_epoch(5) == (5, 8)
    assert log.end_offset_for_epoch(3) == (3, 6)
    assert log.end_offset_for_epoch(2) == (1, 4)
    assert log.end_offset_for_epoch(0) == (0, 0)
    assert log.end_offset_for_epoch(6) == (-1, -1)
    assert log.end_offset_for_epoch(-1) == (-1, -1)
    text = (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text()
    assert text == "0\n3\n1 0\n3 4\n5 6\n"
    log.truncate_to(5)  # mid-batch: batch 4..5 goes whole, so epoch 3 has no data left
    assert log.leader_epoch_cache.entries == [(1, 0)]
    log.append_as_leader(batch(), 3, now_ms=0)  # 4,5
    log.truncate_to(6)
    assert log.leader_epoch_cache.entries == [(1, 0), (3, 4)]
    log.close()
    log = Log.load(d, SMALL, recovery_point=4, now_ms=0)
    assert log.leader_epoch_cache.entries == [(1, 0), (3, 4)]
    assert LeaderEpochFileCache(str(tmp_path / "t-0" / "leader-epoch-checkpoint")).latest_epoch == 3


def test_follower_append(tmp_path: Path) -> None:
    log = Log.load(str(tmp_path / "t-0"), SMALL, now_ms=0)
    data = build_batch([(None, b"a", [], 5)] * 3, base_offset=0, partition_leader_epoch=2)
    data += build_batch([(None, b"b", [], 6)] * 2, base_offset=3, partition_leader_epoch=4)
    info = log.append_as_follower(data)
    assert (info.first_offset, info.last_offset) == (0, 4)
    assert log.log_end_offset == 5
    assert log.leader_epoch_cache.entries == [(2, 0), (4, 3)]
    from odradek.log.errors import UnexpectedAppendOffsetError

    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(build_batch([(None, b"c", [], 7)], base_offset=2))


def test_topic_dir_parsing_and_partition_metadata(tmp_path: Path) -> None:
    assert parse_topic_partition_dir("my-topic-with-dashes-12") == ("my-topic-with-dashes", 12)
    assert parse_topic_partition_dir("nodash") is None
    tid = bytes(range(16))
    log = Log.load(str(tmp_path / "a-b-c-3"), SMALL, now_ms=0, topic_id=tid)
    assert (log.topic, log.partition) == ("a-b-c", 3)
    text = (tmp_path / "a-b-c-3" / "partition.metadata").read_text()
    assert text.startswith("version: 0\ntopic_id: ")
    log.close()
    assert Log.load(str(tmp_path / "a-b-c-3"), SMALL, now_ms=0).topic_id == tid


def test_log_append_time_config(tmp_path: Path) -> None:
    log = Log.load(
        str(tmp_path / "t-0"), LogConfig(message_timestamp_type="LogAppendTime"), now_ms=0
    )
    info = log.append_as_leader(batch(ts=5), 0, now_ms=777)
    assert info.max_timestamp == 777
    data = log.read(0, 1000, None, True).to_bytes()
    assert [r.timestamp for r in decode_batch(data)] == [777, 777]
    assert log.fetch_offset_by_timestamp(700) == (0, 777, 0)


def test_checkpoint_file_round_trip(tmp_path: Path) -> None:
    f = OffsetCheckpointFile(str(tmp_path / "cp"))
    data = {("a-b", 0): 5, ("x", 3): 1 << 40}
    f.write(data)
    assert f.read() == data
    assert (tmp_path / "cp").read_text().splitlines()[:2] == ["0", "2"]
    assert OffsetCheckpointFile(str(tmp_path / "missing")).read() == {}


def test_log_manager_lifecycle(tmp_path: Path) -> None:
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    clock = FakeClock(0)
    lm = LogManager(dirs, SMALL, clock)
    lm.load_logs(lambda t: SMALL)
    a = lm.get_or_create_log("my-topic", 0, SMALL, bytes(16))
    b = lm.get_or_create_log("my-topic", 1, SMALL, bytes(16))
    c = lm.get_or_create_log("other", 0)
    assert lm.get_log("my-topic", 0) is a
    fill(a, 50)
    fill(b, 5)
    fill(c, 3)
    a.high_watermark = 100
    a.delete_records(30)
    lm.checkpoint_logs()
    clock.now_ms = 10
    lm.flush_dirty_logs()
    lm.shutdown()
    assert all(os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE)) for d in dirs)
    rp = OffsetCheckpointFile(
        os.path.join(a.dir.rsplit(os.sep, 1)[0], RECOVERY_POINT_CHECKPOINT_FILE)
    ).read()
    assert rp[("my-topic", 0)] == 100

    lm2 = LogManager(dirs, SMALL, FakeClock(0))
    lm2.load_logs(lambda t: SMALL)
    assert not any(os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE)) for d in dirs)
    a2 = lm2.get_log("my-topic", 0)
    assert a2 is not None
    assert (a2.log_start_offset, a2.log_end_offset, a2.high_watermark) == (30, 100, 100)
    assert a2.topic_id == bytes(16)
    assert (
        lm2.get_log("my-topic", 1) is not None and lm2.get_log("my-topic", 1).log_end_offset == 10
    )  # type: ignore[union-attr]
    path = a2.dir
    lm2.delete_log("my-topic", 0)
    assert lm2.get_log("my-topic", 0) is None
    assert not os.path.exists(path)
    assert lm2.cleanup_logs() == 0
    lm2.shutdown()


def test_create_time_outside_the_timestamp_bounds_is_refused(tmp_path: Path) -> None:
    from odradek.records.errors import InvalidTimestampsError

    now = 1_000_000
    cfg = LogConfig(message_timestamp_before_max_ms=5_000, message_timestamp_after_max_ms=1_000)
    log = Log.load(str(tmp_path / "t-0"), cfg, now_ms=0)
    # The first and the max timestamp of a batch are both checked; the bounds are inclusive.
    # The records out of range are named (KIP-467) with Kafka's messages.
    for first, bad in ((now - 5_001, 0), (now + 1_000, 1)):
        with pytest.raises(InvalidTimestampsError) as err:
            log.append_as_leader(batch(2, ts=first), leader_epoch=0, now_ms=now)
        assert err.value.error_code == 32
        assert str(err.value) == "One or more records have been rejected due to invalid timestamp"
        assert err.value.record_errors == [
            (bad, f"Timestamp {first + bad} of message with offset {bad} is out of range. "
                  f"The timestamp should be within [{now - 5_000}, {now + 1_000}]")
        ]
    assert log.log_end_offset == 0  # nothing appended
    log.append_as_leader(batch(2, ts=now - 5_000), leader_epoch=0, now_ms=now)
    log.append_as_leader(batch(2, ts=now + 999), leader_epoch=0, now_ms=now)
    # Records without a timestamp (-1) are not checked, as in Kafka.
    log.append_as_leader(
        bytearray(build_batch([(b"k", b"v", [], -1)])), leader_epoch=0, now_ms=now
    )
    assert log.log_end_offset == 5
    # LogAppendTime replaces the producer's timestamps: no bounds apply.
    lat = Log.load(
        str(tmp_path / "u-0"),
        LogConfig(message_timestamp_type="LogAppendTime", message_timestamp_after_max_ms=0),
        now_ms=0,
    )
    lat.append_as_leader(batch(2, ts=now + 10**9), leader_epoch=0, now_ms=now)
    assert lat.log_end_offset == 2


def test_deleted_log_keeps_its_files_open_until_file_delete_delay(tmp_path: Path) -> None:
    """A fetch response handed to the network reads the segment's descriptor later (sendfile):
    deleting the topic unlinks the files at once but closes them file.delete.delay.ms later."""
    cfg = LogConfig(segment_bytes=SMALL.segment_bytes, file_delete_delay_ms=1000)
    clock = FakeClock(0)
    lm = LogManager([str(tmp_path / "d")], cfg, clock)
    lm.load_logs(lambda t: cfg)
    log = lm.get_or_create_log("gone", 0, cfg)
    fill(log, 20)
    log.high_watermark = log.log_end_offset
    info = log.read(0, 1 << 20)
    regions = info.file_regions
    assert regions
    expected = bytes(info.to_bytes())
    clock.now_ms = 5000
    lm.delete_log("gone", 0)
    assert not os.path.exists(log.dir)
    assert log.closed
    assert bytes(info.to_bytes()) == expected  # still readable through the open descriptors
    clock.now_ms = 5999
    lm.cleanup_logs()
    assert bytes(info.to_bytes()) == expected
    clock.now_ms = 6000
    lm.cleanup_logs()
    with pytest.raises(OSError):
        os.fstat(regions[0].fd)  # closed once the delay has passed
    lm.shutdown()


def test_log_manager_unclean_recovers(tmp_path: Path) -> None:
    lm = LogManager([str(tmp_path / "d")], SMALL, FakeClock(0))
    lm.load_logs()
    log = lm.get_or_create_log("t", 0)
    fill(log, 100)
    lm.checkpoint_logs()  # recovery point 0 recorded
    path = log.active_segment.log_path
    log.close()  # simulate crash: no clean shutdown marker
    with open(path, "ab") as f:
        f.write(b"\x00" * 30)
    lm2 = LogManager([str(tmp_path / "d")], SMALL, FakeClock(0))
    lm2.load_logs()
    log2 = lm2.get_log("t", 0)
    assert log2 is not None and log2.log_end_offset == 200
    assert read_all(log2) == list(range(200))


def test_log_manager_skips_delete_dirs(tmp_path: Path) -> None:
    d = tmp_path / "d"
    (d / "t-0.abcdef-delete").mkdir(parents=True)
    (d / "__cluster_metadata-0").mkdir()
    lm = LogManager([str(d)], SMALL, FakeClock(0))
    lm.load_logs()
    assert lm.all_logs() == {}
    assert not (d / "t-0.abcdef-delete").exists()


def test_flush_advances_recovery_point(tmp_path: Path) -> None:
    cfg = LogConfig(flush_messages=10)
    log = Log.load(str(tmp_path / "t-0"), cfg, now_ms=0)
    fill(log, 4)
    assert log.recovery_point == 0 and not log.needs_flush
    fill(log, 1)
    # flush.messages reached: the log says so; the broker fsyncs off its event loop.
    assert log.needs_flush and log.recovery_point == 0
    log.flush()
    assert log.recovery_point == 10 and not log.needs_flush
    fill(log, 1)
    log.flush(11)
    assert log.recovery_point == 11


def test_delete_dir_name_of_a_249_character_topic_fits_in_255_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka shortens the topic part of `<topic>-<partition>.<uuid>-delete` (LocalLog.
    logDeleteDirName) so the crash-safe rename works for every legal topic name."""
    from odradek.log import log_manager as lm_module

    topic = "t" * 249
    d = tmp_path / "d"
    lm = LogManager([str(d)], SMALL, FakeClock(0))
    lm.load_logs()
    log = lm.get_or_create_log(topic, 7)
    fill(log, 5)
    renamed: list[str] = []
    real_rename = Log.rename_dir

    def spy(self: Log, new_dir: str) -> None:
        real_rename(self, new_dir)
        renamed.append(new_dir)

    monkeypatch.setattr(Log, "rename_dir", spy)
    caplog.set_level("WARNING")
    lm.delete_log(topic, 7)
    assert len(renamed) == 1, "the partition directory was not renamed before deletion"
    name = os.path.basename(renamed[0])
    assert name.endswith("-delete") and len(name.encode()) <= 255
    assert name.startswith("t" * 100) and "-7." in name
    assert "could not rename" not in caplog.text
    assert not [n for n in os.listdir(d) if n.startswith("t")]  # removed after the rename

    # A crash between the rename and the removal leaves the shortened -delete directory:
    # the next start removes it and does not mistake it for a partition.
    log2 = lm.get_or_create_log(topic, 8)
    fill(log2, 3)
    monkeypatch.setattr(lm_module.shutil, "rmtree", lambda *a, **k: None)
    lm.delete_log(topic, 8)
    monkeypatch.undo()
    leftovers = [n for n in os.listdir(d) if n.endswith("-delete")]
    assert len(leftovers) == 1 and len(leftovers[0]) <= 255 and "-8." in leftovers[0]
    lm.shutdown()
    lm2 = LogManager([str(d)], SMALL, FakeClock(0))
    lm2.load_logs()
    assert lm2.all_logs() == {}
    assert not [n for n in os.listdir(d) if n.endswith("-delete") or n.startswith("t")]
    lm2.shutdown()


def test_recovery_logs_what_it_truncates(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Like Kafka's "Found invalid messages in log segment ... at byte offset ...": a warning per
    partition naming the segment, the byte position, the bytes dropped and the offsets lost."""
    d = str(tmp_path / "orders-3")
    log = Log.load(d, SMALL, now_ms=0)
    fill(log, 30)
    seg_path = log.active_segment.log_path
    headers = list(log.active_segment.iter_batch_headers())
    leo = log.log_end_offset
    log.close()
    size = os.path.getsize(seg_path)
    last = headers[-1]
    os.truncate(seg_path, size - 7)  # the last batch (2 records) is torn
    caplog.set_level("WARNING", logger="odradek.log.log_loader")
    log = Log.load(d, SMALL, recovery_point=0, now_ms=0, clean_shutdown=False)
    log.close()
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    text = warnings[0].getMessage()
    assert "orders-3" in text and os.path.basename(seg_path) in text
    assert f"byte position {last.position}" in text
    assert f"truncated {last.size - 7} bytes" in text
    assert f"offsets {leo - 2} to {leo - 1}" in text
    assert "torn batch" in text

    # A corrupt batch in an earlier segment: the later segments go too, and the line says so.
    caplog.clear()
    d2 = str(tmp_path / "orders-4")
    log = Log.load(d2, SMALL, now_ms=0)
    fill(log, 100)
    segs = log.segments
    victim = segs[1]
    h = list(victim.iter_batch_headers())[3]
    victim_path, victim_size = victim.log_path, victim.size
    later_bytes = sum(s.size for s in segs[2:])
    log.close()
    with open(victim_path, "r+b") as f:
        f.seek(h.position + h.size - 1)
        b = f.read(1)
        f.seek(h.position + h.size - 1)
        f.write(bytes([b[0] ^ 0xFF]))
    log = Log.load(d2, SMALL, recovery_point=0, now_ms=0, clean_shutdown=False)
    log.close()
    text = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert "orders-4" in text and os.path.basename(victim_path) in text
    assert f"byte position {h.position}" in text and "CRC" in text
    assert f"truncated {victim_size - h.position} bytes" in text
    assert f"offsets {h.base_offset} to " in text
    assert f"{len(segs) - 2} later segment(s) ({later_bytes} bytes, offsets from {segs[2].base_offset})" in text

    # A clean reopen says nothing.
    caplog.clear()
    Log.load(d, SMALL, recovery_point=0, now_ms=0, clean_shutdown=False).close()
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
