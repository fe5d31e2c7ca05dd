"""LogSegments (a log's segment list), LogLoader (opening and recovery) and partition.metadata,
on their own: no Log, no sockets."""

from __future__ import annotations

import os
from pathlib import Path

from odradek.log.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILENAME, LeaderEpochFileCache
from odradek.log.log_config import LogConfig
from odradek.log.log_loader import LogLoader
from odradek.log.log_segments import LogSegments, open_segment
from odradek.log.partition_metadata import (
    PARTITION_METADATA_FILENAME,
    read_partition_metadata,
    topic_id_from_string,
    topic_id_to_string,
    write_partition_metadata,
)
from odradek.log.segment import LogSegment
from odradek.records.batch import validate
from odradek.records.builder import build_batch

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=256, segment_index_bytes=4096)


def segment_with(directory: Path, base: int, records: int, now_ms: int = 0) -> LogSegment:
    """A segment at ``base`` holding ``records`` records (offsets base..base+records-1)."""
    seg = open_segment(str(directory), base, CONFIG, now_ms)
    if records:
        buf = bytearray(
            build_batch([(b"k", b"v%d" % i, [], 1000 + i) for i in range(records)], base_offset=base)
        )
        info = validate(buf, max_message_bytes=1 << 20)
        seg.append(memoryview(buf)[: info.valid_bytes], info.batches, now_ms)
    return seg


def loader(
    directory: Path,
    *,
    recovery_point: int = 0,
    log_start_offset: int = 0,
    clean_shutdown: bool = True,
    high_watermark: int | None = None,
) -> LogLoader:
    return LogLoader(
        str(directory),
        CONFIG,
        recovery_point=recovery_point,
        log_start_offset=log_start_offset,
        now_ms=0,
        clean_shutdown=clean_shutdown,
        high_watermark=high_watermark,
    )


def test_floor_lookups_follow_base_offsets(tmp_path: Path) -> None:
    segs = LogSegments(
        [segment_with(tmp_path, 0, 10), segment_with(tmp_path, 10, 5), segment_with(tmp_path, 15, 0)]
    )
    assert [segs.floor_index(o) for o in (0, 9, 10, 14, 15, 99)] == [0, 0, 1, 1, 2, 2]
    assert [s.base_offset for s in segs.from_offset(12)] == [10, 15]
    # Segments wholly below an offset; never the active one.
    assert [segs.count_at_or_below(o) for o in (0, 9, 10, 14, 15, 99)] == [0, 0, 1, 1, 2, 2]
    assert segs.active.base_offset == 15
    assert segs.size_in_bytes() == sum(s.size for s in segs)


def test_changes_keep_bases_in_step(tmp_path: Path) -> None:
    a, b, c = (segment_with(tmp_path, base, n) for base, n in ((0, 10), (10, 10), (20, 0)))
    segs = LogSegments([a, b])
    segs.append(c)
    assert segs.floor_index(25) == 2 and segs.index_of(c) == 2
    assert segs.take_prefix(1) == [a]
    assert segs.floor_index(5) == 0 and segs[0] is b and segs.index_of(a) == -1
    merged = segment_with(tmp_path, 15, 0)  # (a cleaned segment keeps its first's base)
    segs.replace(0, 1, merged)
    assert segs.values() == [merged, c]
    assert [segs.floor_index(o) for o in (17, 19, 20)] == [0, 0, 1]
    assert segs.pop() is c and len(segs) == 1
    fresh = segment_with(tmp_path, 300, 0)
    segs.reset(fresh)
    assert segs.values() == [fresh] and segs.floor_index(0) == 0 and segs.active is fresh


def test_retired_segments_close_after_their_deadline(tmp_path: Path) -> None:
    old, active = segment_with(tmp_path, 0, 10), segment_with(tmp_path, 10, 0)
    segs = LogSegments([old, active])
    path = old.log_path
    (doomed,) = segs.take_prefix(1)
    segs.retire(doomed, close_deadline_ms=5000)
    assert not os.path.exists(path)  # unlinked at once
    segs.close_retired(4999)
    assert not doomed.closed  # in-flight reads of its descriptor stay valid
    segs.close_retired(5000)
    assert doomed.closed and not active.closed
    segs.close_all()
    assert active.closed


def test_loader_removes_leftovers_and_clamps_offsets(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    d.mkdir()
    for seg in (segment_with(d, 0, 10), segment_with(d, 10, 5)):
        seg.flush()
        seg.close()
    leftovers = ["00000000000000000010.log.deleted", "x.tmp", "00000000000000000000.log.cleaned",
                 "00000000000000000000.index.swap", "00000000000000000099.index"]
    for name in leftovers:
        (d / name).write_bytes(b"junk")
    loaded = loader(d, recovery_point=99, log_start_offset=3, high_watermark=1000).load()
    assert [s.base_offset for s in loaded.segments] == [0, 10]
    assert loaded.log_start_offset == 3
    assert loaded.recovery_point == 15  # clamped to the log end
    assert loaded.high_watermark == 15
    assert loaded.topic_id is None
    assert not set(leftovers) & set(os.listdir(d))
    for s in loaded.segments:
        s.close()


def test_loader_recovers_a_torn_tail_and_the_epoch_cache_follows(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    d.mkdir()
    seg = segment_with(d, 0, 5)
    last = bytearray(build_batch([(b"k", b"v", [], 2000)] * 5, base_offset=5))
    info = validate(last, max_message_bytes=1 << 20)
    seg.append(memoryview(last), info.batches, 0)
    seg.flush()
    size = seg.size
    seg.close()
    epochs = LeaderEpochFileCache(str(d / LEADER_EPOCH_CHECKPOINT_FILENAME))
    epochs.assign(0, 0)
    epochs.assign(3, 7)  # an epoch starting inside the batch that is torn
    os.truncate(d / "00000000000000000000.log", size - 5)
    loaded = loader(d, clean_shutdown=False, recovery_point=10, high_watermark=10).load()
    assert loaded.segments[-1].next_offset == 5  # the torn batch is cut off
    assert loaded.high_watermark == 5 and loaded.recovery_point == 5
    assert loaded.leader_epoch_cache.entries == [(0, 0)]
    loaded.segments[-1].close()


def test_partition_metadata_round_trip(tmp_path: Path) -> None:
    topic_id = bytes(range(16))
    assert topic_id_from_string(topic_id_to_string(topic_id)) == topic_id
    assert read_partition_metadata(str(tmp_path)) is None
    write_partition_metadata(str(tmp_path), topic_id)
    text = (tmp_path / PARTITION_METADATA_FILENAME).read_text()
    assert text == f"version: 0\ntopic_id: {topic_id_to_string(topic_id)}\n"
    assert read_partition_metadata(str(tmp_path)) == topic_id
    (tmp_path / PARTITION_METADATA_FILENAME).write_text("version: 0\ntopic_id: A\n")
    assert read_partition_metadata(str(tmp_path)) is None
