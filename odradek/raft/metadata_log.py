"""The ``__cluster_metadata`` log: Raft's replicated log on disk (Kafka's ``KafkaMetadataLog``).

Records are appended as RecordBatches, one batch per append (each record's value is the serde's
bytes), at the offsets and epochs the Raft core assigned (:meth:`MetadataLog.append_batch`), and
truncated when the core says; the core decides what is committed. :meth:`~MetadataLog.read_batches`
readers (tools, tests) get batches below the high watermark only, decoded with the serde; control batches
(KRaft's LeaderChange, SnapshotHeader/Footer, KRaftVersion, Voters, written by Apache Kafka) are
not records of the state machine and are skipped. Below the log start offset, a snapshot stands
in for the deleted records.

Snapshots (Kafka's ``KafkaMetadataLog`` snapshot half): :meth:`MetadataLog.create_snapshot` writes
``<end offset>-<epoch>.checkpoint`` beside the segments; start-up loads the newest finished one
and replays the log from its end offset; :meth:`MetadataLog.maybe_clean` applies Kafka's
retention (``metadata.max.retention.bytes``, then ``metadata.max.retention.ms``): while the log and
the snapshots are together larger than the limit, or the oldest snapshot's last record is older
than the limit, the oldest snapshot goes and the log start offset moves up to the next snapshot's
end offset, which deletes the segments wholly below it. The newest snapshot always stays. Opening
the log deletes ``.part`` (unfinished) and ``.deleted`` snapshot files, and snapshots below the
log start offset, as Kafka's ``recoverSnapshots``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

from odradek.log.append_origin import AppendOrigin
from odradek.log.log import Log
from odradek.raft.raft_client import Batch, SnapshotReader
from odradek.raft.raft_log import LogBatch
from odradek.raft.record_batches import BatchCodec, UndecodableBatch
from odradek.raft.serde import RecordSerde, RecordSerdeError
from odradek.raft.snapshot import (
    SnapshotDownload,
    SnapshotError,
    SnapshotId,
    list_snapshot_files,
    list_snapshots,
    read_snapshot,
    read_snapshot_header,
    read_snapshot_slice,
    snapshot_bytes,
    write_snapshot,
)
from odradek.records.batch import iter_batches
from odradek.records.builder import build_batch
from odradek.records.records import decode_batch

T = TypeVar("T")

TOPIC = "__cluster_metadata"

log = logging.getLogger(__name__)


class UnreadableMetadataRecord(Exception):
    """A committed record this node cannot decode or apply: start-up must stop rather than
    serve a cluster whose state it only partly knows."""

    def __init__(self, source: str, offset: int, reason: str) -> None:
        super().__init__(f"{source} at offset {offset}: {reason}")
        self.source = source
        self.offset = offset
        self.reason = reason


class MetadataLog(Generic[T]):
    def __init__(self, log: Log, serde: RecordSerde[T]) -> None:
        self.log = log
        self.serde = serde
        self._codec = BatchCodec(serde)
        self._lock = threading.Lock()
        self._snapshot_lock = threading.Lock()  # creating vs. cleaning snapshots
        # Until Raft says otherwise: readers of the files (tools, tests) see all of it.
        self.log.high_watermark = self.log.log_end_offset
        self._recover_snapshots()

    @property
    def dir(self) -> str:
        return self.log.dir

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        """Offset after the last committed record."""
        return self.log.high_watermark

    @property
    def last_epoch(self) -> int:
        """The epoch of the newest batch (-1 for an empty log)."""
        return self.log.leader_epoch_cache.latest_epoch

    def append(self, records: Sequence[T], epoch: int, now_ms: int) -> tuple[int, int]:
        """Append one batch holding ``records`` (atomically: one batch). Not yet committed."""
        values: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]] = [
            (None, self.serde.write(rec), [], now_ms) for rec in records
        ]
        batch = bytearray(build_batch(values, partition_leader_epoch=epoch))
        with self._lock:
            info = self.log.append_as_leader(batch, epoch, now_ms, AppendOrigin.RAFT_LEADER)
        return info.first_offset, info.last_offset

    def read_log_batches(self) -> list[LogBatch]:
        """Every batch on disk, committed or not, control batches included, for the Raft core
        at start-up. Blocking. Raises UnreadableMetadataRecord."""
        out: list[LogBatch] = []
        offset, end = self.log.log_start_offset, self.log.log_end_offset
        while offset < end:
            data = self.log.read(offset, 1 << 20, end, True).to_bytes()
            if not data:
                break
            try:
                batches = list(self._codec.decode(data))
            except UndecodableBatch as e:
                raise UnreadableMetadataRecord(self.log.dir, e.offset, e.reason) from e
            batches = [b for b in batches if b.end_offset > offset]
            if not batches:
                break
            out.extend(batches)
            offset = batches[-1].end_offset
        return out

    def append_batch(self, batch: LogBatch, now_ms: int) -> None:
        """Append a batch whose offsets the Raft core assigned. Blocking (page cache).
        ``now_ms`` rolls the segment after ``metadata.log.segment.ms``, so that whole segments
        fall below a snapshot and can be deleted."""
        with self._lock:
            self.log.append_as_follower(bytearray(self._codec.encode(batch)), now_ms)

    def truncate_to(self, offset: int) -> None:
        """Remove every record at and after ``offset``."""
        with self._lock:
            self.log.truncate_to(offset)

    def flush(self) -> None:
        """fsync what was appended. Blocking. Raises KafkaStorageError."""
        self.log.flush()

    def latest_snapshot(self) -> SnapshotReader[T] | None:
        """The snapshot to load before the log: the newest finished one between the log start
        and end offsets (our own, or Apache Kafka's after it deleted the segments a snapshot
        covers). None when there is none and the log starts at 0. Raises
        UnreadableMetadataRecord when records are missing and no readable snapshot covers them;
        when the log is whole, an unreadable snapshot is skipped (the log is replayed). Blocking."""
        start, end = self.log.log_start_offset, self.log.log_end_offset
        usable = [s for s in list_snapshots(self.log.dir) if start <= s.end_offset <= end and s.end_offset > 0]
        if not usable:
            if start == 0:
                return None
            raise UnreadableMetadataRecord(
                self.log.dir, 0,
                f"the log starts at offset {start} and no snapshot covers the records below it",
            )
        snap = usable[-1]
        path = os.path.join(self.log.dir, snap.filename)
        try:
            records = list(read_snapshot(path, self.serde))
        except SnapshotError as e:
            if start == 0:
                log.warning("Ignoring snapshot %s (the whole log is replayed instead): %s", path, e)
                return None
            raise UnreadableMetadataRecord(path, 0, str(e)) from e
        log.info("Read snapshot %s: %d records", path, len(records))
        return SnapshotReader(snap.end_offset, snap.epoch, records)

    def read_batches(self, from_offset: int) -> Iterator[Batch[T]]:
        """Committed batches from ``from_offset`` on (a batch it falls inside starts there)."""
        offset = max(from_offset, self.log.log_start_offset)
        end = self.high_watermark
        while offset < end:
            data = self.log.read(offset, 1 << 20, end, True).to_bytes()
            if not data:
                return
            progressed = False
            for header in iter_batches(data):
                next_offset = header.base_offset + header.last_offset_delta + 1
                if header.is_control:
                    offset = max(offset, next_offset)
                    progressed = True
                    continue
                raw = memoryview(data)[header.position : header.position + header.size]
                records: list[T] = []
                base = -1
                timestamp = -1
                for rec in decode_batch(raw):
                    if rec.offset < offset or rec.offset >= end:
                        continue
                    if base < 0:
                        base = rec.offset
                    elif rec.offset != base + len(records):
                        raise UnreadableMetadataRecord(self.log.dir, rec.offset, "a gap inside a batch")
                    if rec.value is None:
                        raise UnreadableMetadataRecord(self.log.dir, rec.offset, "a record without a value")
                    try:
                        records.append(self.serde.read(rec.value))
                    except RecordSerdeError as e:
                        raise UnreadableMetadataRecord(self.log.dir, rec.offset, str(e)) from e
                    timestamp = max(timestamp, rec.timestamp)
                if records:
                    yield Batch(base, header.partition_leader_epoch, timestamp, records, header.size)
                offset = max(offset, next_offset)
                progressed = True
            if not progressed:
                return

    # -- snapshots (Kafka's KafkaMetadataLog.createNewSnapshot / onSnapshotFrozen / maybeClean) --

    def _recover_snapshots(self) -> None:
        """Delete unfinished (``.part``) and deleted (``.deleted``) snapshot files and finished
        snapshots below the log start offset (Kafka's ``recoverSnapshots``)."""
        start = self.log.log_start_offset
        for sid, kind in list_snapshot_files(self.log.dir):
            if kind or sid.end_offset < start:
                path = os.path.join(self.log.dir, sid.filename + kind)
                try:
                    os.unlink(path)
                    log.info("Deleted snapshot file %s", path)
                except OSError as e:
                    log.warning("Cannot delete snapshot file %s: %s", path, e.strerror)

    def latest_snapshot_id(self) -> SnapshotId | None:
        snaps = list_snapshots(self.log.dir)
        return snaps[-1] if snaps else None

    def create_snapshot(
        self,
        snapshot_id: SnapshotId,
        records: Sequence[T],
        now_ms: int,
        last_contained_log_timestamp: int,
        control: Sequence[tuple[int, dict[str, object]]] | None = None,
    ) -> str | None:
        """Write ``records`` (the state of every record below ``snapshot_id.end_offset``) as a
        finished snapshot. Blocking. Returns its path, or None (logged) when the id is not above
        the latest snapshot or is beyond the high watermark (Kafka refuses those). The control
        records of the latest snapshot (KRaftVersion, Voters of a dynamic quorum) are carried
        into the new one so that no voter set is lost when the old snapshot is deleted, unless
        ``control`` gives them (the voter set at the snapshot's end offset, KIP-853)."""
        with self._snapshot_lock:
            latest = self.latest_snapshot_id()
            if latest is not None and (latest.epoch > snapshot_id.epoch or latest.end_offset >= snapshot_id.end_offset):
                log.info("Not creating snapshot %s: not above the latest snapshot %s", snapshot_id, latest)
                return None
            if snapshot_id.end_offset > self.high_watermark or snapshot_id.end_offset <= self.log.log_start_offset:
                log.info(
                    "Not creating snapshot %s: outside the committed log [%d, %d)",
                    snapshot_id, self.log.log_start_offset, self.high_watermark,
                )
                return None
            if control is not None:
                pass
            elif latest is not None:
                try:
                    control = read_snapshot_header(os.path.join(self.log.dir, latest.filename)).control
                except SnapshotError as e:
                    log.warning("Cannot read the control records of snapshot %s: %s", latest, e)
                    control = ()
            else:
                control = ()
            data = snapshot_bytes(
                records,
                self.serde,
                now_ms=now_ms,
                last_contained_log_timestamp=last_contained_log_timestamp,
                control=control,
                epoch=snapshot_id.epoch,
            )
            path = write_snapshot(self.log.dir, snapshot_id, data)
        log.info("Wrote snapshot %s: %d records, %d bytes", path, len(records), len(data))
        return path

    def maybe_clean(self, now_ms: int, retention_ms: int, retention_bytes: int) -> bool:
        """Kafka's ``maybeClean``: first the size rule, then the age rule, each walking the
        snapshots from the oldest and stopping at the first it keeps. True if anything was
        deleted. Blocking."""
        with self._snapshot_lock:
            cleaned = False
            if retention_bytes >= 0:
                sizes = {s: self._snapshot_size(s) for s in self._retained_snapshots()}
                total = sum(sizes.values())

                def too_big(sid: SnapshotId) -> bool:
                    nonlocal total
                    if self.log.size + total > retention_bytes:
                        total -= sizes.get(sid, 0)
                        return True
                    return False

                cleaned |= self._clean_snapshots(too_big, now_ms)
            if retention_ms >= 0:

                def too_old(sid: SnapshotId) -> bool:
                    try:
                        header = read_snapshot_header(os.path.join(self.log.dir, sid.filename))
                    except SnapshotError:
                        return False
                    return now_ms - header.last_contained_log_timestamp > retention_ms

                cleaned |= self._clean_snapshots(too_old, now_ms)
            return cleaned

    def _retained_snapshots(self) -> list[SnapshotId]:
        start = self.log.log_start_offset
        return [s for s in list_snapshots(self.log.dir) if s.end_offset >= start]

    def _snapshot_size(self, sid: SnapshotId) -> int:
        try:
            return os.path.getsize(os.path.join(self.log.dir, sid.filename))
        except OSError:
            return 0

    def _clean_snapshots(self, should_delete: Callable[[SnapshotId], bool], now_ms: int) -> bool:
        snaps = self._retained_snapshots()
        cleaned = False
        for snap, next_snap in zip(snaps, snaps[1:], strict=False):
            if not should_delete(snap) or not self._delete_before_snapshot(next_snap, snaps[-1], now_ms):
                break
            cleaned = True
        return cleaned

    def _delete_before_snapshot(self, log_start: SnapshotId, latest: SnapshotId, now_ms: int) -> bool:
        """Move the log start offset up to ``log_start``'s end offset (deleting the segments
        wholly below it) and delete the snapshots before it (Kafka's ``deleteBeforeSnapshot``)."""
        if not (self.log.log_start_offset < log_start.end_offset <= latest.end_offset):
            return False
        with self._lock:
            if not self.log.maybe_increment_log_start_offset(log_start.end_offset, now_ms):
                return False
            self.log.delete_old_segments(now_ms)
        log.info("Metadata log now starts at offset %d (snapshot %s)", log_start.end_offset, log_start)
        for sid in list_snapshots(self.log.dir):
            if sid < log_start:
                path = os.path.join(self.log.dir, sid.filename)
                try:
                    os.unlink(path)
                    log.info("Deleted snapshot %s", path)
                except OSError as e:
                    log.warning("Cannot delete snapshot %s: %s", path, e.strerror)
        return True

    # -- FetchSnapshot (a replica too far behind the leader's log start) -----------------------

    def snapshot_slice(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> tuple[int, bytes] | None:
        """The leader's side: (size, bytes) of a finished snapshot from ``position``; None if
        there is none of that id (SNAPSHOT_NOT_FOUND); ValueError for a position outside it
        (POSITION_OUT_OF_RANGE). Blocking."""
        return read_snapshot_slice(self.log.dir, snapshot_id, position, max_bytes)

    def create_snapshot_download(self, snapshot_id: SnapshotId) -> SnapshotDownload:
        """The follower's side: a ``.part`` file to write the leader's snapshot into; once
        frozen, :meth:`truncate_to_latest_snapshot` makes the log start at its end offset."""
        return SnapshotDownload(self.log.dir, snapshot_id)

    def truncate_to_latest_snapshot(self) -> bool:
        """Kafka's ``truncateToLatestSnapshot``: when the latest snapshot is ahead of the log (a
        higher epoch than the log's last, or the same epoch past its end), the log is emptied to
        start at the snapshot's end offset and older snapshots are deleted. True if it was.
        For the follower right after a FetchSnapshot download is frozen. (Kafka also calls it
        when opening the log; not done here: a log whose leader-epoch cache is empty, as in
        logs carried over from elsewhere, would look behind every snapshot and be emptied.)"""
        latest = self.latest_snapshot_id()
        log_epoch = max(self.log.leader_epoch_cache.latest_epoch, 0)
        if latest is None or not (
            latest.epoch > log_epoch or (latest.epoch == log_epoch and latest.end_offset > self.log.log_end_offset)
        ):
            return False
        if self.log.log_start_offset == self.log.log_end_offset == latest.end_offset:
            return False  # already starts there, empty (its epoch cache is empty too)
        with self._snapshot_lock, self._lock:
            self.log.truncate_fully_and_start_at(latest.end_offset)
            self.log.high_watermark = latest.end_offset
        log.info("Metadata log truncated to start at snapshot %s", latest)
        for sid in list_snapshots(self.log.dir):
            if sid < latest:
                try:
                    os.unlink(os.path.join(self.log.dir, sid.filename))
                except OSError as e:
                    log.warning("Cannot delete snapshot %s: %s", sid, e.strerror)
        return True

    def snapshot_sizes(self) -> dict[SnapshotId, int]:
        """Every finished snapshot at or above the log start offset, with its size in bytes
        (what the leader can serve by FetchSnapshot)."""
        return {s: size for s in self._retained_snapshots() if (size := self._snapshot_size(s)) > 0}

    def log_start_snapshot(self) -> SnapshotId | None:
        """The snapshot the log starts at (None when the log starts at offset 0, or no
        finished snapshot has that end offset)."""
        start = self.log.log_start_offset
        if start == 0:
            return None
        at_start = [s for s in list_snapshots(self.log.dir) if s.end_offset == start]
        return at_start[-1] if at_start else None

    def install_snapshot(self, snapshot_id: SnapshotId) -> SnapshotReader[T]:
        """The follower's side once a fetched snapshot is frozen (or was already here): the log
        is emptied to start at its end offset (Kafka's ``truncateToLatestSnapshot``, done
        because the Raft core decided it), older snapshots are deleted, and the snapshot is
        read for the listeners. Blocking. Raises SnapshotError, OSError, KafkaStorageError."""
        path = os.path.join(self.log.dir, snapshot_id.filename)
        records = list(read_snapshot(path, self.serde))
        with self._snapshot_lock, self._lock:
            self.log.truncate_fully_and_start_at(snapshot_id.end_offset)
            self.log.high_watermark = snapshot_id.end_offset
            self.log.flush()
        log.info("Metadata log truncated to start at snapshot %s (%d records)", snapshot_id, len(records))
        for sid in list_snapshots(self.log.dir):
            if sid < snapshot_id:
                try:
                    os.unlink(os.path.join(self.log.dir, sid.filename))
                except OSError as e:
                    log.warning("Cannot delete snapshot %s: %s", sid, e.strerror)
        return SnapshotReader(snapshot_id.end_offset, snapshot_id.epoch, records)
