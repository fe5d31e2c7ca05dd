"""Producer state snapshots: `<offset, 20 digits>.snapshot` in the partition directory, the
producer state as of that offset, so that loading a log replays only what follows the latest
snapshot (Kafka's ProducerStateManager snapshot files, same format).

Layout (big-endian): version int16 (1), crc uint32 (CRC32C of everything after it), then the
entries as an array (int32 count) of: producer_id int64, epoch int16, last_sequence int32,
last_offset int64, offset_delta int32, timestamp int64, coordinator_epoch int32,
current_txn_first_offset int64 (-1: none).

A snapshot that is truncated, of another version or whose CRC does not match raises
:class:`CorruptSnapshotError`; the log then ignores it (with a log line) and rebuilds from an
older one or from the log.
"""

from __future__ import annotations

import os
import re
import struct

from crc32c import crc32c

from odradek.log.producer_state import (
    BatchMetadata,
    ProducerStateEntry,
    first_sequence,
)
from odradek.log.segment import filename_prefix

SNAPSHOT_FILE_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_SNAPSHOT_RE = re.compile(r"^(\d{20})\.snapshot$")
_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_CRC_START = 6  # the CRC covers the bytes after version and crc
_ENTRY = struct.Struct(">qhiqiqiq")
ENTRY_SIZE = _ENTRY.size  # 46


class CorruptSnapshotError(Exception):
    pass


def snapshot_path(directory: str, offset: int) -> str:
    return os.path.join(directory, filename_prefix(offset) + SNAPSHOT_FILE_SUFFIX)


def list_snapshots(directory: str) -> dict[int, str]:
    """Offset -> path of the snapshot files in ``directory``."""
    found: dict[int, str] = {}
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return found
    for name in names:
        m = _SNAPSHOT_RE.match(name)
        if m:
            found[int(m.group(1))] = os.path.join(directory, name)
    return found


def encode_snapshot(entries: dict[int, ProducerStateEntry]) -> bytes:
    body = bytearray(_HEADER.size)
    for pid, e in sorted(entries.items()):
        last = e.batches[-1] if e.batches else None
        body += _ENTRY.pack(
            pid,
            e.epoch,
            last.last_seq if last else -1,
            last.last_offset if last else -1,
            last.last_offset - last.first_offset if last else 0,
            e.last_timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
    struct.pack_into(">hIi", body, 0, SNAPSHOT_VERSION, 0, len(entries))
    struct.pack_into(">I", body, 2, crc32c(memoryview(body)[_CRC_START:]))
    return bytes(body)


def decode_snapshot(data: bytes) -> dict[int, ProducerStateEntry]:
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is truncated")
    version, crc, count = _HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"Snapshot contained an unknown file version {version}")
    if count < 0 or _HEADER.size + count * ENTRY_SIZE != len(data):
        raise CorruptSnapshotError(
            f"Snapshot failed schema validation: {count} entries in {len(data)} bytes"
        )
    computed = crc32c(memoryview(data)[_CRC_START:])
    if computed != crc:
        raise CorruptSnapshotError(
            f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. "
            f"Computed crc: {computed}"
        )
    entries: dict[int, ProducerStateEntry] = {}
    for i in range(count):
        pid, epoch, last_seq, last_offset, delta, ts, coord, txn_first = _ENTRY.unpack_from(
            data, _HEADER.size + i * ENTRY_SIZE
        )
        entry = ProducerStateEntry(epoch, coordinator_epoch=coord, last_timestamp=ts,
                                   current_txn_first_offset=txn_first if txn_first >= 0 else -1)
        if last_offset >= 0:
            first_seq = first_sequence(last_seq, delta) if last_seq >= 0 else -1
            entry.batches.append(
                BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset, ts)
            )
        entries[pid] = entry
    return entries


def write_snapshot(path: str, entries: dict[int, ProducerStateEntry], *, sync: bool) -> None:
    """Write atomically (temporary file renamed into place)."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(encode_snapshot(entries))
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def read_snapshot(path: str, max_bytes: int) -> dict[int, ProducerStateEntry]:
    """Read a snapshot file (at most ``max_bytes``: a larger file is corrupt)."""
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise CorruptSnapshotError(f"cannot read {path}: {e}") from e
    if size > max_bytes:
        raise CorruptSnapshotError(f"snapshot of {size} bytes exceeds {max_bytes}")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CorruptSnapshotError(f"cannot read {path}: {e}") from e
    return decode_snapshot(data)
