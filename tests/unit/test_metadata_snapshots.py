"""Metadata snapshots: the file format and name (Kafka's FileRawSnapshotWriter), MetadataLog's
snapshot creation, Kafka's retention rules (segments below the log start deleted, older snapshots
removed, the newest kept), start-up from a snapshot after deletion, and the SnapshotGenerator's
triggers under a fake clock."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import EMPTY_IMAGE, MetadataImage
from odradek.metadata.image_writer import write_image
from odradek.metadata.loader import LogDeltaManifest, MetadataLoader
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE, MetadataRecord
from odradek.metadata.snapshot_generator import SnapshotGenerator
from odradek.raft import control_records as cr
from odradek.raft.kafka_raft_client import KafkaRaftClient, KafkaRaftClientDriver
from odradek.raft.metadata_log import MetadataLog
from odradek.raft.quorum_state import FileQuorumStateStore
from odradek.raft.snapshot import (
    SnapshotDownload,
    SnapshotError,
    SnapshotId,
    list_snapshots,
    read_snapshot,
    read_snapshot_header,
    snapshot_bytes,
    write_snapshot,
)
from odradek.records.batch import iter_batches
from odradek.records.records import decode_batch

SERDE = METADATA_RECORD_SERDE


def _topic(i: int) -> list[MetadataRecord]:
    tid = uuid.UUID(int=i + 1)
    return [
        ("TopicRecord", {"name": f"topic-{i}", "topic_id": tid}),
        ("PartitionRecord", {
            "partition_id": 0, "topic_id": tid, "replicas": [1], "isr": [1], "removing_replicas": [],
            "adding_replicas": [], "leader": 1, "leader_epoch": 0, "partition_epoch": 0, "directories": [],
        }),
        ("ConfigRecord", {"resource_type": 2, "resource_name": f"topic-{i}", "name": "retention.ms", "value": str(i)}),
    ]


# -- the file ---------------------------------------------------------------------------------------


def test_snapshot_file_is_header_batches_footer_named_offset_and_epoch(tmp_path: Path) -> None:
    records = [r for i in range(30) for r in _topic(i)]
    voters = {"version": 0, "voters": [{
        "voter_id": 1, "voter_directory_id": uuid.UUID(int=9),
        "endpoints": [{"name": "CONTROLLER", "host": "h", "port": 9093}],
        "k_raft_version_feature": {"min_supported_version": 0, "max_supported_version": 1},
    }]}
    control = [(cr.KRAFT_VERSION, {"version": 0, "k_raft_version": 1}), (cr.KRAFT_VOTERS, voters)]
    data = snapshot_bytes(records, SERDE, now_ms=5000, last_contained_log_timestamp=4321, control=control,
                          epoch=7, max_batch_bytes=500)
    sid = SnapshotId(1234, 7)
    path = write_snapshot(str(tmp_path), sid, data)
    assert os.path.basename(path) == "00000000000000001234-0000000007.checkpoint"
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(path)]  # no .part left behind
    raw = Path(path).read_bytes()
    batches = list(iter_batches(raw))
    assert len(batches) > 3  # header, several record batches (500-byte limit), footer
    assert batches[0].is_control and batches[-1].is_control
    assert not any(b.is_control for b in batches[1:-1])
    assert {b.partition_leader_epoch for b in batches} == {7}
    offset = 0
    for b in batches:  # consecutive offsets from 0
        assert b.base_offset == offset
        offset += b.last_offset_delta + 1
    assert offset == len(records) + 1 + len(control) + 1
    first = list(decode_batch(memoryview(raw)[: batches[0].size]))
    assert [cr.parse_control_type(r.key) for r in first] == [cr.SNAPSHOT_HEADER, cr.KRAFT_VERSION, cr.KRAFT_VOTERS]
    assert first[0].key == b"\x00\x00\x00\x03"
    last = list(decode_batch(memoryview(raw)[batches[-1].position:]))
    assert [cr.parse_control_type(r.key) for r in last] == [cr.SNAPSHOT_FOOTER]
    assert list(read_snapshot(path, SERDE)) == [SERDE.read(SERDE.write(r)) for r in records]
    header = read_snapshot_header(path)
    assert header.last_contained_log_timestamp == 4321
    assert [k for k, _ in header.control] == [cr.KRAFT_VERSION, cr.KRAFT_VOTERS]
    assert header.control[1][1]["voters"][0]["voter_id"] == 1
    assert list_snapshots(str(tmp_path)) == [sid]


def test_a_snapshot_that_cannot_be_written_leaves_no_file(tmp_path: Path) -> None:
    data = snapshot_bytes([], SERDE, now_ms=0, last_contained_log_timestamp=0)
    with pytest.raises(OSError):
        write_snapshot(str(tmp_path / "missing"), SnapshotId(1, 1), data)
    # A truncated snapshot (as a crash during a copy would leave) is refused when read.
    path = tmp_path / SnapshotId(3, 1).filename
    path.write_bytes(snapshot_bytes(_topic(0), SERDE, now_ms=0, last_contained_log_timestamp=0)[:-20])
    with pytest.raises(SnapshotError):
        list(read_snapshot(str(path), SERDE))


# -- MetadataLog: create, clean, restart ------------------------------------------------------------


def _open(d: Path, segment_bytes: int = 256) -> MetadataLog[MetadataRecord]:
    cfg = LogConfig(segment_bytes=segment_bytes, retention_ms=-1, retention_bytes=-1, file_delete_delay_ms=0)
    return MetadataLog(Log.load(str(d), cfg, now_ms=0, clean_shutdown=False), SERDE)


def _fill(mlog: MetadataLog[MetadataRecord], first: int, n: int, epoch: int = 1) -> None:
    for i in range(first, first + n):
        mlog.append(_topic(i), epoch, 1000 + i)
    mlog.flush()
    mlog.log.high_watermark = mlog.end_offset  # committed, as the Raft client would say


def _image(mlog: MetadataLog[MetadataRecord]) -> MetadataImage:
    """What a listener rebuilds: the latest snapshot, then the log after it."""
    snap = mlog.latest_snapshot()
    delta = MetadataDelta(EMPTY_IMAGE)
    start = 0
    if snap is not None:
        for rec in snap.records:
            delta.replay(*rec, snap.last_contained_log_offset)
        start = snap.end_offset
    for batch in mlog.read_batches(start):
        for i, rec in enumerate(batch.records):
            delta.replay(*rec, batch.base_offset + i)
    return delta.apply()


def test_create_snapshot_only_above_the_latest_and_within_the_committed_log(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    mlog = _open(d)
    _fill(mlog, 0, 10)
    image = _image(mlog)
    assert image.offset == 29
    assert mlog.create_snapshot(SnapshotId(30, 1), write_image(image), 0, 1009) is not None
    assert mlog.create_snapshot(SnapshotId(30, 1), write_image(image), 0, 1009) is None  # same id
    assert mlog.create_snapshot(SnapshotId(20, 1), [], 0, 0) is None  # below the latest
    assert mlog.create_snapshot(SnapshotId(31, 1), [], 0, 0) is None  # beyond the high watermark
    assert list_snapshots(str(d)) == [SnapshotId(30, 1)]
    # Start-up loads it (the log still starts at 0) and gives the same image.
    again = _open(d)
    snap = again.latest_snapshot()
    assert snap is not None and (snap.end_offset, snap.epoch) == (30, 1)
    assert _image(again) == image


def test_retention_deletes_segments_below_the_next_snapshot_and_older_snapshots(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    mlog = _open(d)
    _fill(mlog, 0, 10)
    mlog.create_snapshot(SnapshotId(30, 1), write_image(_image(mlog)), 0, 1009)
    segments_before = mlog.log.num_segments
    assert segments_before > 3
    # Within both limits: nothing goes.
    assert not mlog.maybe_clean(now_ms=2000, retention_ms=10_000, retention_bytes=10**9)
    # One snapshot only: even past both limits it stays, and so does the log.
    assert not mlog.maybe_clean(now_ms=10**9, retention_ms=0, retention_bytes=0)
    assert mlog.log.log_start_offset == 0
    _fill(mlog, 10, 10)
    image = _image(mlog)
    mlog.create_snapshot(SnapshotId(60, 1), write_image(image), 0, 1019)
    _fill(mlog, 20, 5)
    image = _image(mlog)
    # Disabled (-1) limits never clean.
    assert not mlog.maybe_clean(now_ms=10**9, retention_ms=-1, retention_bytes=-1)
    # Size rule: log + snapshots above the limit: the oldest snapshot goes, the log starts at the next one.
    assert mlog.maybe_clean(now_ms=0, retention_ms=-1, retention_bytes=0)
    assert list_snapshots(str(d)) == [SnapshotId(60, 1)]
    assert mlog.log.log_start_offset == 60
    assert mlog.log.segments[0].base_offset <= 60 < mlog.log.segments[1].base_offset
    assert mlog.log.num_segments < segments_before
    assert all(int(n.split(".")[0]) >= mlog.log.segments[0].base_offset for n in os.listdir(d) if n.endswith(".log"))
    mlog.log.close()
    # Restart after the deletion: the snapshot, then the rest of the log, give the same image.
    again = _open(d)
    assert again.log.log_start_offset > 0
    assert _image(again) == image


def test_retention_ms_uses_the_snapshots_last_contained_timestamp(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    mlog = _open(d)
    _fill(mlog, 0, 10)
    mlog.create_snapshot(SnapshotId(30, 1), write_image(_image(mlog)), 0, 1009)
    _fill(mlog, 10, 10)
    mlog.create_snapshot(SnapshotId(60, 1), write_image(_image(mlog)), 0, 1019)
    assert not mlog.maybe_clean(now_ms=1009 + 500, retention_ms=500, retention_bytes=-1)  # not older than 500
    assert mlog.maybe_clean(now_ms=1009 + 501, retention_ms=500, retention_bytes=-1)
    assert list_snapshots(str(d)) == [SnapshotId(60, 1)]
    assert mlog.log.log_start_offset == 60


def test_open_deletes_partial_and_deleted_snapshot_files(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    mlog = _open(d)
    _fill(mlog, 0, 2)
    mlog.log.close()
    (d / "00000000000000000003-0000000001.checkpoint.part").write_bytes(b"half")
    (d / "00000000000000000002-0000000001.checkpoint.deleted").write_bytes(b"old")
    again = _open(d)
    assert not [n for n in os.listdir(d) if ".checkpoint" in n]
    assert again.latest_snapshot() is None


def test_raft_client_and_loader_start_from_our_snapshot_after_deletion(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    mlog = _open(d)
    _fill(mlog, 0, 20)
    mlog.create_snapshot(SnapshotId(30, 1), write_image(_image(mlog)), 0, 1009)
    mlog.create_snapshot(SnapshotId(60, 1), write_image(_image(mlog)), 0, 1019)
    _fill(mlog, 20, 3)
    expected = _image(mlog)
    assert mlog.maybe_clean(now_ms=0, retention_ms=-1, retention_bytes=0)
    mlog.log.close()
    client = KafkaRaftClient(1, _open(d), FileQuorumStateStore(str(d / "quorum-state")), lambda: 0)
    client.initialize()
    loader = MetadataLoader(KRaftMetadataCache())
    client.register(loader)  # the snapshot now; the log after it once Raft commits it again
    assert loader.metadata_cache.image.offset == 59
    # The only voter elects itself and commits what its log holds (SharedServer.start_raft).
    asyncio.run(KafkaRaftClientDriver(client, None).process())
    assert loader.metadata_cache.image == expected
    assert sorted(loader.metadata_cache.image.topics.by_name) == sorted(f"topic-{i}" for i in range(23))


# -- the loader's manifest and the generator --------------------------------------------------------


def test_loader_hands_manifest_publishers_the_bytes_and_epoch_of_what_it_replayed(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    mlog = _open(d, segment_bytes=1 << 20)
    _fill(mlog, 0, 3, epoch=4)
    loader = MetadataLoader(KRaftMetadataCache())
    seen: list[LogDeltaManifest] = []
    loader.manifest_publishers.append(lambda delta, image, manifest: seen.append(manifest))
    loader.handle_commit(list(mlog.read_batches(0)))
    assert len(seen) == 1
    m = seen[0]
    assert (m.offset, m.epoch, m.last_contained_log_time_ms, m.is_snapshot) == (8, 4, 1002, False)
    assert m.num_bytes == mlog.log.size


class FakeClock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def _generator(max_bytes: int, interval_ms: int) -> tuple[SnapshotGenerator, FakeClock, list[tuple[int, int, int]]]:
    clock = FakeClock()
    emitted: list[tuple[int, int, int]] = []

    def emit(image: MetadataImage, epoch: int, ts: int) -> None:
        emitted.append((image.offset, epoch, ts))

    return SnapshotGenerator(emit, clock, max_bytes, interval_ms), clock, emitted


def _at(offset: int) -> MetadataImage:
    return MetadataImage(offset=offset)


def _publish(gen: SnapshotGenerator, offset: int, num_bytes: int, **kw: Any) -> None:
    gen.publish(MetadataDelta(EMPTY_IMAGE), _at(kw.pop("image_offset", offset)),
                LogDeltaManifest(offset, 3, 100 + offset, num_bytes, **kw))


def test_generator_emits_after_max_bytes_one_at_a_time() -> None:
    gen, clock, emitted = _generator(max_bytes=1000, interval_ms=0)
    _publish(gen, 1, 600)
    assert emitted == []
    _publish(gen, 2, 400)
    assert emitted == [(2, 3, 102)]
    assert gen.bytes_since_last_snapshot == 0
    # While that snapshot is being written, updates only count.
    _publish(gen, 3, 5000)
    assert emitted == [(2, 3, 102)]
    gen.emit_finished()
    _publish(gen, 4, 1)
    assert emitted == [(2, 3, 102), (4, 3, 104)]
    # interval 0: time alone never triggers.
    gen.emit_finished()
    clock.now = 10**12
    _publish(gen, 5, 1)
    assert emitted[-1][0] == 4


def test_generator_emits_after_the_interval_and_resets_on_snapshot_load() -> None:
    gen, clock, emitted = _generator(max_bytes=10**9, interval_ms=3_600_000)
    clock.now = 3_599_999
    _publish(gen, 1, 10)
    assert emitted == []
    clock.now = 3_600_000
    _publish(gen, 2, 10)
    assert emitted == [(2, 3, 102)]
    gen.emit_finished()
    assert gen.last_snapshot_time_ms == 3_600_000
    # Loading a snapshot resets both counters.
    gen.max_bytes_since_last_snapshot = 100
    _publish(gen, 3, 90)
    clock.now = 3_600_000 + 3_599_999
    _publish(gen, 4, 0, is_snapshot=True)
    assert gen.bytes_since_last_snapshot == 0 and gen.last_snapshot_time_ms == clock.now
    _publish(gen, 5, 90)
    assert emitted == [(2, 3, 102)]
    # An image short of the batch (an open metadata transaction) is not written; the next one is.
    _publish(gen, 6, 20, image_offset=5)
    assert emitted == [(2, 3, 102)]
    _publish(gen, 7, 0)
    assert emitted == [(2, 3, 102), (7, 3, 107)]
    # Disabled: nothing more.
    gen.emit_finished()
    gen.disable("shutting down")
    _publish(gen, 8, 10**6)
    assert emitted[-1][0] == 7


# -- a controller-only process (its own loader feeds the generator) ---------------------------------


def test_controller_only_process_writes_snapshots_and_restarts_from_them(tmp_path: Path) -> None:
    import asyncio

    from odradek.server.kafka_config import KafkaConfig
    from odradek.server.kafka_raft_server import KafkaRaftServer

    config = KafkaConfig({
        "process.roles": "controller", "listeners": "CONTROLLER://127.0.0.1:0", "log.dirs": str(tmp_path),
        "metadata.log.max.record.bytes.between.snapshots": "1",
    })
    meta = tmp_path / "__cluster_metadata-0"

    async def run() -> MetadataImage:
        server = KafkaRaftServer(config)
        await server.startup()
        try:
            for _ in range(200):  # bounded: the bootstrap commit, then its snapshot
                if list_snapshots(str(meta)):
                    break
                await asyncio.sleep(0.02)
            assert server.controller is not None and server.controller.controller is not None
            return server.controller.controller.image
        finally:
            await server.shutdown()

    image = asyncio.run(run())
    snaps = list_snapshots(str(meta))
    assert snaps, os.listdir(meta)
    records = list(read_snapshot(str(meta / snaps[-1].filename), SERDE))
    assert records[0] == ("FeatureLevelRecord", {"name": "metadata.version",
                                                 "feature_level": image.features.levels["metadata.version"]})
    # The next start loads that snapshot (the log is still whole: it is read from the snapshot on).
    reopened = _open(meta)
    snap = reopened.latest_snapshot()
    assert snap is not None and snap.end_offset == snaps[-1].end_offset


# -- FetchSnapshot: the leader's slices and the follower's download ---------------------------------


def test_a_follower_downloads_the_leaders_snapshot_in_pieces_and_starts_its_log_there(tmp_path: Path) -> None:
    leader_dir, follower_dir = tmp_path / "leader" / "__cluster_metadata-0", tmp_path / "follower" / "__cluster_metadata-0"
    leader = _open(leader_dir)
    _fill(leader, 0, 10)
    _fill(leader, 10, 5, epoch=2)
    sid = SnapshotId(45, 2)
    expected = _image(leader)
    leader.create_snapshot(sid, write_image(expected), 0, 1014)
    follower = _open(follower_dir)
    _fill(follower, 0, 2)  # far behind, at an older epoch
    assert leader.snapshot_slice(SnapshotId(44, 2), 0, 100) is None  # SNAPSHOT_NOT_FOUND
    with pytest.raises(ValueError):
        leader.snapshot_slice(sid, 10**6, 100)  # POSITION_OUT_OF_RANGE
    download = follower.create_snapshot_download(sid)
    position, size = 0, -1
    for _ in range(1000):  # bounded: 100-byte pieces
        piece = leader.snapshot_slice(sid, position, 100)
        assert piece is not None
        size, data = piece
        download.append(position, data)
        position += len(data)
        if position >= size:
            break
    with pytest.raises(SnapshotError, match="expected"):
        download.append(0, b"x")  # out of order
    download.freeze(size)
    assert (follower_dir / sid.filename).read_bytes() == (leader_dir / sid.filename).read_bytes()
    assert not list(follower_dir.glob("*.part"))
    assert follower.truncate_to_latest_snapshot()
    assert (follower.log.log_start_offset, follower.log.log_end_offset) == (45, 45)
    assert not follower.truncate_to_latest_snapshot()  # once
    assert _image(follower) == expected
    # The follower replicates on from there.
    follower.log.close()
    assert _image(_open(follower_dir)) == expected


def test_a_download_of_the_wrong_size_or_not_a_whole_snapshot_is_dropped(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    d.mkdir()
    data = snapshot_bytes(_topic(0), SERDE, now_ms=0, last_contained_log_timestamp=0)
    download = SnapshotDownload(str(d), SnapshotId(3, 1))
    download.append(0, data[:-5])
    with pytest.raises(SnapshotError, match="bytes fetched"):
        download.freeze(len(data))
    assert os.listdir(d) == []
    download = SnapshotDownload(str(d), SnapshotId(3, 1))
    download.append(0, data[:-5])
    with pytest.raises(SnapshotError):
        download.freeze(len(data) - 5)  # the leader's size, but no footer
    assert os.listdir(d) == []


def test_raft_client_starts_from_a_snapshot_above_the_log_start(tmp_path: Path) -> None:
    """Only whole segments below a snapshot are deleted, so the log may still hold records
    below the newest snapshot (here all of them): Raft starts its log at the snapshot's end,
    listeners load the snapshot and then get the records after it."""
    d = tmp_path / "__cluster_metadata-0"
    mlog = _open(d, segment_bytes=1 << 20)
    _fill(mlog, 0, 20)
    mlog.create_snapshot(SnapshotId(13, 1), write_image(_image(mlog)), 0, 1012)
    expected = _image(mlog)
    mlog.log.close()
    client = KafkaRaftClient(1, _open(d, segment_bytes=1 << 20), FileQuorumStateStore(str(d / "quorum-state")), lambda: 0)
    client.initialize()
    loader = MetadataLoader(KRaftMetadataCache())
    client.register(loader)
    asyncio.run(KafkaRaftClientDriver(client, None).process())
    assert loader.metadata_cache.image == expected
