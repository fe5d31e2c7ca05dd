"""Reading KRaft snapshots (Apache Kafka's ``<end offset>-<epoch>.checkpoint`` files).

A snapshot sits in the ``__cluster_metadata-0`` directory beside the log; its name is the
snapshot id: the end offset (exclusive: it holds the state of every record below it) as 20 digits
and the epoch of the record before it as 10. Its contents are a log of record batches: a control
batch with a SnapshotHeader record first, the metadata records (framed exactly as in the log),
KRaftVersion / Voters control records in newer versions, and a control batch with a
SnapshotFooter last. A snapshot without its footer was not finished and is not used.

Odradek reads these (after a migration from Apache Kafka, whose metadata log may start after
offset 0 once Kafka has deleted the segments a snapshot covers, and its own) and writes them as
Kafka's ``FileRawSnapshotWriter`` does: :func:`snapshot_bytes` lays the batches out (header batch,
record batches of at most ``MAX_BATCH_BYTES``, footer batch; base offsets from 0, every batch at
the snapshot's epoch) and :func:`write_snapshot` writes them to ``<id>.checkpoint.part``, fsyncs,
renames it to ``<id>.checkpoint`` and fsyncs the directory, so that a crash leaves either a whole
snapshot or a ``.part`` file, which start-up deletes.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from odradek.log.checkpoint import fsync_dir
from odradek.protocol.schema import SchemaError
from odradek.raft import control_records as cr
from odradek.raft.serde import RecordSerde, RecordSerdeError
from odradek.records.batch import iter_batches
from odradek.records.builder import build_batch
from odradek.records.records import decode_batch

T = TypeVar("T")

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"  # being written (Kafka's Snapshots.PARTIAL_SUFFIX)
DELETE_SUFFIX = ".checkpoint.deleted"  # removed, not yet unlinked (Kafka's DELETE_SUFFIX)
_NAME_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_ANY_NAME_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint(\.part|\.deleted)?$")
# The largest batch of a snapshot (Kafka's KafkaRaftClient.MAX_BATCH_SIZE_BYTES).
MAX_BATCH_BYTES = 8 * 1024 * 1024

SNAPSHOT_HEADER = 3
SNAPSHOT_FOOTER = 4


class SnapshotError(Exception):
    """A snapshot file that cannot be read (truncated, unfinished, undecodable)."""


@dataclass(frozen=True, order=True)
class SnapshotId:
    end_offset: int
    epoch: int

    @property
    def filename(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{SUFFIX}"


def list_snapshots(directory: str) -> list[SnapshotId]:
    """The snapshot ids in ``directory``, oldest first (partial and deleted ones left out)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        m = _NAME_RE.match(name)
        if m:
            out.append(SnapshotId(int(m.group(1)), int(m.group(2))))
    return sorted(out)


def list_snapshot_files(directory: str) -> list[tuple[SnapshotId, str]]:
    """Every snapshot file in ``directory``, finished or not: (id, ``""``, ``".part"`` or
    ``".deleted"``)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        m = _ANY_NAME_RE.match(name)
        if m:
            out.append((SnapshotId(int(m.group(1)), int(m.group(2))), m.group(3) or ""))
    return sorted(out)


def snapshot_bytes(
    records: Sequence[T],
    serde: RecordSerde[T],
    *,
    now_ms: int,
    last_contained_log_timestamp: int,
    control: Sequence[tuple[int, dict[str, Any]]] = (),
    epoch: int = 0,
    max_batch_bytes: int = MAX_BATCH_BYTES,
) -> bytes:
    """A snapshot file's contents: a control batch with the SnapshotHeader (and the ``control``
    records: KRaftVersion, Voters), the ``records`` in batches of at most ``max_batch_bytes`` of
    values (at least one record each), a control batch with the SnapshotFooter."""
    Rec = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]

    def ctl(kind: int, obj: dict[str, Any]) -> Rec:
        return cr.control_key(kind), cr.encode_control_value(kind, obj), [], now_ms

    out = bytearray()
    offset = 0

    def flush(batch: list[Rec], is_control: bool) -> None:
        nonlocal offset
        out.extend(build_batch(batch, base_offset=offset, partition_leader_epoch=epoch, is_control=is_control))
        offset += len(batch)

    header = {"version": 0, "last_contained_log_timestamp": last_contained_log_timestamp}
    flush([ctl(cr.SNAPSHOT_HEADER, header)] + [ctl(kind, obj) for kind, obj in control], True)
    batch: list[Rec] = []
    size = 0
    for rec in records:
        value = serde.write(rec)
        if batch and size + len(value) > max_batch_bytes:
            flush(batch, False)
            batch, size = [], 0
        batch.append((None, value, [], now_ms))
        size += len(value)
    if batch:
        flush(batch, False)
    flush([ctl(cr.SNAPSHOT_FOOTER, {"version": 0})], True)
    return bytes(out)


def write_snapshot(directory: str, snapshot_id: SnapshotId, data: bytes) -> str:
    """Write a snapshot file as Kafka's FileRawSnapshotWriter: ``<id>.checkpoint.part``, fsync,
    rename to ``<id>.checkpoint``, fsync the directory. Returns the path. An existing snapshot
    of the same id is left as it is (snapshots are immutable). Raises OSError."""
    path = os.path.join(directory, snapshot_id.filename)
    if os.path.exists(path):
        return path
    part = os.path.join(directory, snapshot_id.filename[: -len(SUFFIX)] + PARTIAL_SUFFIX)
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(part)
        except OSError:
            pass
        raise
    os.close(fd)
    os.replace(part, path)
    fsync_dir(directory)
    return path


@dataclass(frozen=True)
class SnapshotHeaderInfo:
    """What a snapshot's first (control) batch says: the SnapshotHeader's timestamp and the other
    control records beside it (KRaftVersion, Voters) as (type, fields)."""

    last_contained_log_timestamp: int
    control: tuple[tuple[int, dict[str, Any]], ...]


def read_snapshot_header(path: str) -> SnapshotHeaderInfo:
    """The header batch of a snapshot file (reads only as much of the file as that needs).
    Raises SnapshotError."""
    try:
        with open(path, "rb") as f:
            data = f.read(64 * 1024)
            first = next(iter_batches(data), None)
            if first is None or first.position + first.size > len(data):
                data += f.read()
                first = next(iter_batches(data), None)
    except OSError as e:
        raise SnapshotError(f"cannot read {path}: {e.strerror}") from e
    except ValueError as e:
        raise SnapshotError(f"{path}: {e}") from e
    if first is None or not first.is_control:
        raise SnapshotError(f"{path}: does not start with a SnapshotHeader")
    timestamp: int | None = None
    control: list[tuple[int, dict[str, Any]]] = []
    try:
        for rec in decode_batch(memoryview(data)[first.position : first.position + first.size]):
            kind = _control_type(rec.key)
            if rec.value is None:
                raise SnapshotError(f"{path}: a control record without a value")
            fields = cr.decode_control_value(kind, rec.value)
            if kind == SNAPSHOT_HEADER:
                timestamp = int(fields["last_contained_log_timestamp"])
            elif timestamp is None:
                raise SnapshotError(f"{path}: does not start with a SnapshotHeader")
            elif kind != SNAPSHOT_FOOTER:
                control.append((kind, fields))
    except (SchemaError, ValueError) as e:
        raise SnapshotError(f"{path}: {e}") from e
    if timestamp is None:
        raise SnapshotError(f"{path}: does not start with a SnapshotHeader")
    return SnapshotHeaderInfo(timestamp, tuple(control))


def _control_type(key: bytes | memoryview | None) -> int:
    if key is None or len(key) < 4:
        raise SnapshotError("control record without a valid key")
    _version, kind = struct.unpack_from(">hh", key, 0)
    return int(kind)


def read_snapshot(path: str, serde: RecordSerde[T]) -> Iterator[T]:
    """The records of a snapshot file, in order, read with ``serde``.

    Raises SnapshotError when the file has no SnapshotHeader first or no SnapshotFooter last,
    or a record cannot be decoded (the serde's error, e.g. an unsupported metadata record type,
    in its message)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SnapshotError(f"cannot read {path}: {e.strerror}") from e
    return _records(path, data, serde)


def _records(path: str, data: bytes, serde: RecordSerde[T]) -> Iterator[T]:
    first = True
    footer = False
    end = 0
    records: list[T] = []
    try:
        for header in iter_batches(data):
            end = header.position + header.size
            raw = memoryview(data)[header.position : end]
            if footer:
                raise SnapshotError(f"{path}: batches after the SnapshotFooter")
            for rec in decode_batch(raw):
                if header.is_control:
                    kind = _control_type(rec.key)
                    if first and kind != SNAPSHOT_HEADER:
                        raise SnapshotError(f"{path}: does not start with a SnapshotHeader")
                    if kind == SNAPSHOT_FOOTER:
                        footer = True
                elif first:
                    raise SnapshotError(f"{path}: does not start with a SnapshotHeader")
                elif rec.value is not None:
                    records.append(serde.read(rec.value))
                first = False
    except SnapshotError:
        raise
    except (RecordSerdeError, ValueError) as e:
        raise SnapshotError(f"{path}: {e}") from e
    if end != len(data):
        raise SnapshotError(f"{path}: {len(data) - end} bytes of a partial batch at the end")
    if not footer:
        raise SnapshotError(f"{path}: no SnapshotFooter (an unfinished snapshot)")
    return iter(records)


# -- FetchSnapshot: the leader's slices, the follower's download ----------------------------------


def read_snapshot_slice(directory: str, snapshot_id: SnapshotId, position: int, max_bytes: int) -> tuple[int, bytes] | None:
    """(total size, up to ``max_bytes`` from ``position``) of a finished snapshot: what a
    FetchSnapshot response carries. None when there is no such snapshot (SNAPSHOT_NOT_FOUND);
    ValueError when ``position`` is outside it (POSITION_OUT_OF_RANGE)."""
    path = os.path.join(directory, snapshot_id.filename)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if position < 0 or position >= size:
                raise ValueError(f"position {position} is outside snapshot {snapshot_id} of {size} bytes")
            f.seek(position)
            return size, f.read(max(0, min(max_bytes, size - position)))
    except FileNotFoundError:
        return None


class SnapshotDownload:
    """A snapshot a follower fetches from the leader piece by piece (FetchSnapshot), written to
    ``<id>.checkpoint.part`` and frozen (validated, fsynced, renamed) once whole; Kafka's
    ``FileRawSnapshotWriter`` as ``KafkaRaftClient.handleFetchSnapshotResponse`` uses it."""

    def __init__(self, directory: str, snapshot_id: SnapshotId) -> None:
        self.directory = directory
        self.snapshot_id = snapshot_id
        self.part_path = os.path.join(directory, snapshot_id.filename[: -len(SUFFIX)] + PARTIAL_SUFFIX)
        self.size = 0
        self._fd: int | None = os.open(self.part_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def append(self, position: int, data: bytes | memoryview) -> None:
        """Write the next piece; ``position`` must be where the previous piece ended."""
        if self._fd is None:
            raise SnapshotError(f"snapshot {self.snapshot_id} download is closed")
        if position != self.size:
            raise SnapshotError(
                f"snapshot {self.snapshot_id}: piece at position {position}, expected {self.size}"
            )
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self.size += len(data)

    def freeze(self, expected_size: int) -> str:
        """Finish: the file must be ``expected_size`` bytes and a whole snapshot (header first,
        footer last). Fsynced and renamed to ``<id>.checkpoint``; returns its path. Raises
        SnapshotError (the partial file is removed)."""
        if self._fd is None:
            raise SnapshotError(f"snapshot {self.snapshot_id} download is closed")
        try:
            if self.size != expected_size:
                raise SnapshotError(
                    f"snapshot {self.snapshot_id}: {self.size} bytes fetched, the leader's is {expected_size}"
                )
            os.fsync(self._fd)
            with open(self.part_path, "rb") as f:
                _check_whole(self.part_path, f.read())
        except (SnapshotError, OSError):
            self.abort()
            raise
        os.close(self._fd)
        self._fd = None
        path = os.path.join(self.directory, self.snapshot_id.filename)
        os.replace(self.part_path, path)
        fsync_dir(self.directory)
        return path

    def abort(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        try:
            os.unlink(self.part_path)
        except OSError:
            pass


def _check_whole(path: str, data: bytes) -> None:
    """Raise SnapshotError unless ``data`` is a whole snapshot file (any record type)."""

    class _Raw:
        def write(self, record: bytes) -> bytes:
            return record

        def read(self, data: bytes | memoryview) -> bytes:
            return bytes(data)

    for _ in _records(path, data, _Raw()):
        pass
