"""The ``__cluster_metadata`` log: Raft's replicated log on disk (Kafka's ``KafkaMetadataLog``).

Records are appended as RecordBatches, one batch per append (each record's value is the serde's
bytes), at the offsets and epochs the Raft core assigned (:meth:`MetadataLog.append_batch`), and
truncated when the core says; the core decides what is committed. :meth:`~MetadataLog.read_batches`
readers (tools, tests) get batches below the high watermark only, decoded with the serde; control batches
(KRaft's LeaderChange, SnapshotHeader/Footer, KRaftVersion, Voters, written by Apache Kafka) are
not records of the state machine and are skipped. Below the log start offset, a snapshot stands
in for the deleted records.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

from odradek.log.log import Log
from odradek.raft.raft_client import Batch, SnapshotReader
from odradek.raft.raft_log import LogBatch
from odradek.raft.record_batches import BatchCodec, UndecodableBatch
from odradek.raft.serde import RecordSerde, RecordSerdeError
from odradek.raft.snapshot import SnapshotError, list_snapshots, read_snapshot
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
        # Until Raft says otherwise: readers of the files (tools, tests) see all of it.
        self.log.high_watermark = self.log.log_end_offset

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
            info = self.log.append_as_leader(batch, epoch, now_ms)
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

    def append_batch(self, batch: LogBatch) -> None:
        """Append a batch whose offsets the Raft core assigned. Blocking (page cache)."""
        with self._lock:
            self.log.append_as_follower(bytearray(self._codec.encode(batch)))

    def truncate_to(self, offset: int) -> None:
        """Remove every record at and after ``offset``."""
        with self._lock:
            self.log.truncate_to(offset)

    def flush(self) -> None:
        """fsync what was appended. Blocking. Raises KafkaStorageError."""
        self.log.flush()

    def latest_snapshot(self) -> SnapshotReader[T] | None:
        """The snapshot to load before the log when its first records were deleted (Apache
        Kafka does this after a snapshot): the newest finished one that covers the gap. None
        when the log starts at 0. Raises UnreadableMetadataRecord when records are missing and
        no snapshot covers them. Blocking."""
        start, end = self.log.log_start_offset, self.log.log_end_offset
        if start == 0:
            return None
        usable = [s for s in list_snapshots(self.log.dir) if start <= s.end_offset <= end]
        if not usable:
            raise UnreadableMetadataRecord(
                self.log.dir, 0,
                f"the log starts at offset {start} and no snapshot covers the records below it",
            )
        snap = usable[-1]
        path = os.path.join(self.log.dir, snap.filename)
        try:
            records = list(read_snapshot(path, self.serde))
        except SnapshotError as e:
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
                    yield Batch(base, header.partition_leader_epoch, timestamp, records)
                offset = max(offset, next_offset)
                progressed = True
            if not progressed:
                return
