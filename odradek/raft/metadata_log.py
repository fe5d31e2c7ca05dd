"""The ``__cluster_metadata`` log: Raft's replicated log on disk (Kafka's ``KafkaMetadataLog``).

Records are appended as RecordBatches, one batch per append (each record's value is the serde's
bytes), and become committed when the high watermark passes them; with one voter that is when
they are fsynced. Readers get committed batches only, decoded with the serde; control batches
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

from odradek.log.errors import KafkaStorageError
from odradek.log.log import Log
from odradek.raft.raft_client import Batch, SnapshotReader
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
        self._lock = threading.Lock()
        # Whatever survived on disk was fsynced before it was acknowledged.
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

    def flush_and_commit(self, up_to: int) -> None:
        """Make everything below ``up_to`` durable and committed. Blocking: run off the loop.

        If the fsync fails (KafkaStorageError), what was appended since the last commit is
        removed again and the error raised: a restart, which replays everything on disk, must
        not find records whose append was reported failed."""
        try:
            self.log.flush()
        except KafkaStorageError:
            with self._lock:
                try:
                    self.log.truncate_to(self.log.high_watermark)
                except OSError:
                    log.critical("cannot remove uncommitted records from %s", self.log.dir)
            raise
        with self._lock:
            if up_to > self.log.high_watermark:
                self.log.high_watermark = up_to

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
