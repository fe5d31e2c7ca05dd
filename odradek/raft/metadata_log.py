"""The ``__cluster_metadata`` log for a quorum of one.

Records are appended as RecordBatches (each metadata record a Kafka record whose value is the
framed metadata record), committed when they are fsynced, and read back by anyone who replays
the log: the controller at start-up, the broker's metadata loader always. The high watermark is
the commit point. A multi-voter KafkaRaftClient will replace the commit rule (majority instead of
local fsync) behind this same interface.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

from odradek.log.errors import KafkaStorageError
from odradek.log.log import Log
from odradek.metadata.records import decode_metadata_record, encode_metadata_record
from odradek.protocol.schema import SchemaError
from odradek.raft.snapshot import SnapshotError, SnapshotId, list_snapshots, read_snapshot
from odradek.records.batch import iter_batches
from odradek.records.builder import build_batch
from odradek.records.records import decode_batch

MetadataRecord = tuple[str, dict[str, Any]]

TOPIC = "__cluster_metadata"

log = logging.getLogger(__name__)


class UnreadableMetadataRecord(Exception):
    """A committed metadata record this node cannot decode or apply: start-up must stop rather
    than serve a cluster whose state it only partly knows."""

    def __init__(self, source: str, offset: int, reason: str) -> None:
        super().__init__(f"{source} at offset {offset}: {reason}")
        self.source = source
        self.offset = offset
        self.reason = reason


class MetadataLog:
    def __init__(self, log: Log) -> None:
        self.log = log
        self._lock = threading.Lock()
        # A KRaft snapshot standing in for the records below its end offset (read from a log
        # Apache Kafka wrote and then cleaned up): (end offset, records).
        self._snapshot: tuple[int, list[tuple[str, int, dict[str, Any]]]] | None = None
        # First offset of a metadata transaction not yet ended, as of the last full read.
        self.open_transaction: int | None = None
        # Whatever survived on disk was fsynced before it was acknowledged.
        self.log.high_watermark = self.log.log_end_offset

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def committed_offset(self) -> int:
        """Offset after the last committed record."""
        return self.log.high_watermark

    def append(self, records: list[MetadataRecord], epoch: int, now_ms: int) -> tuple[int, int]:
        """Append one batch holding ``records`` (atomically: one batch). Not yet committed."""
        values: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]] = [
            (None, encode_metadata_record(name, rec), [], now_ms) for name, rec in records
        ]
        batch = bytearray(build_batch(values, partition_leader_epoch=epoch))
        with self._lock:
            info = self.log.append_as_leader(batch, epoch, now_ms)
        return info.first_offset, info.last_offset

    def commit(self, up_to: int) -> None:
        """Make everything below ``up_to`` durable and committed. Blocking: run off the loop.

        If the fsync fails (KafkaStorageError), what was appended since the last commit is
        removed again: the caller reports the operation failed, so a restart, which replays
        everything on disk, must not find it."""
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

    def load_snapshot(self) -> SnapshotId | None:
        """Make the log readable from offset 0 when its first records were deleted after a
        snapshot (Apache Kafka does this): read the newest finished snapshot that covers the
        gap. Returns the snapshot used, or None when the log starts at 0. Raises
        UnreadableMetadataRecord when records are missing and no snapshot covers them."""
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
            records = list(read_snapshot(path))
        except SnapshotError as e:
            raise UnreadableMetadataRecord(path, 0, str(e)) from e
        self._snapshot = (snap.end_offset, records)
        log.info("Read metadata snapshot %s: %d records", path, len(records))
        return snap

    def read(self, from_offset: int) -> Iterator[tuple[int, str, int, dict[str, Any]]]:
        """Committed records at or after ``from_offset``: (offset, name, version, fields).

        Below a loaded snapshot's end offset, the snapshot's records (all at its last offset).
        Kafka's metadata transactions (KIP-868) are honoured: the records between a
        BeginTransactionRecord and its EndTransactionRecord come out together at the end, those
        before an AbortTransactionRecord never (only the markers do). A transaction still open
        at the end of the log is held back (``open_transaction`` is its first offset)."""
        if self._snapshot is not None and from_offset < self._snapshot[0]:
            snap_end, records = self._snapshot
            for name, version, fields in records:
                yield snap_end - 1, name, version, fields
            from_offset = snap_end
        pending: list[tuple[int, str, int, dict[str, Any]]] | None = None
        for item in self._read_log(from_offset):
            name = item[1]
            if name == "BeginTransactionRecord":
                if pending is not None:
                    raise UnreadableMetadataRecord(
                        self.log.dir, item[0], "a transaction begins inside another one"
                    )
                pending = [item]
            elif pending is None:
                yield item
            elif name == "EndTransactionRecord":
                yield from pending
                yield item
                pending = None
            elif name == "AbortTransactionRecord":
                yield item
                pending = None
            else:
                pending.append(item)
        self.open_transaction = None if pending is None else pending[0][0]

    def _read_log(self, from_offset: int) -> Iterator[tuple[int, str, int, dict[str, Any]]]:
        offset = max(from_offset, self.log.log_start_offset)
        end = self.committed_offset
        while offset < end:
            data = self.log.read(offset, 1 << 20, end, True).to_bytes()
            if not data:
                return
            progressed = False
            for header in iter_batches(data):
                if header.is_control:
                    # KRaft's own control records (LeaderChange, SnapshotHeader/Footer,
                    # KRaftVersion, Voters), written by Apache Kafka: not metadata.
                    offset = max(offset, header.base_offset + header.last_offset_delta + 1)
                    progressed = True
                    continue
                raw = memoryview(data)[header.position : header.position + header.size]
                for rec in decode_batch(raw):
                    if rec.offset < offset or rec.offset >= end or rec.value is None:
                        continue
                    try:
                        name, version, fields = decode_metadata_record(rec.value)
                    except SchemaError as e:
                        raise UnreadableMetadataRecord(self.log.dir, rec.offset, str(e)) from e
                    yield rec.offset, name, version, fields
                offset = max(offset, header.base_offset + header.last_offset_delta + 1)
                progressed = True
            if not progressed:
                return
