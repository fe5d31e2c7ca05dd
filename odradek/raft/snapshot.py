"""Reading KRaft snapshots (Apache Kafka's ``<end offset>-<epoch>.checkpoint`` files).

A snapshot sits in the ``__cluster_metadata-0`` directory beside the log; its name is the
snapshot id: the end offset (exclusive: it holds the state of every record below it) as 20 digits
and the epoch of the record before it as 10. Its contents are a log of record batches: a control
batch with a SnapshotHeader record first, the metadata records (framed exactly as in the log),
KRaftVersion / Voters control records in newer versions, and a control batch with a
SnapshotFooter last. A snapshot without its footer was not finished and is not used.

Odradek reads these (after a migration from Apache Kafka, whose metadata log may start after
offset 0 once Kafka has deleted the segments a snapshot covers); it does not write any yet.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

from odradek.raft.serde import RecordSerde, RecordSerdeError
from odradek.records.batch import iter_batches
from odradek.records.records import decode_batch

T = TypeVar("T")

SUFFIX = ".checkpoint"
_NAME_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")

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
