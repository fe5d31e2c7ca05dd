"""Sparse offset and time indexes of a log segment.

On disk they use Kafka's layout (big-endian): `.index` entries are (int32 relative offset,
int32 position), `.timeindex` entries are (int64 timestamp, int32 relative offset). Files grow as
entries are appended (no preallocation), so a file's length is always its used size. Entries are
kept in memory as arrays for binary search.
"""

from __future__ import annotations

import bisect
import os
import struct
from abc import ABC, abstractmethod
from array import array

from odradek.log.errors import CorruptIndexError

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


def _pwrite_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        view = view[n:]
        position += n


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks = []
    pos = 0
    while pos < size:
        chunk = os.pread(fd, min(size - pos, 1 << 24), pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
    return b"".join(chunks)


class _IndexFile(ABC):
    entry_size = 8

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry_size)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    @abstractmethod
    def __len__(self) -> int:
        """Number of entries."""

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return len(self) * self.entry_size

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _truncate_file(self, entries: int) -> None:
        os.ftruncate(self._fd, entries * self.entry_size)

    def truncate_to_entries(self, n: int) -> None:
        """Keep the first ``n`` entries (undoes appends that a failed segment append made)."""
        if n < len(self):
            self._drop_from(n)
            self._truncate_file(n)

    @abstractmethod
    def _drop_from(self, n: int) -> None:
        """Remove in-memory entries from index ``n`` on."""


class OffsetIndex(_IndexFile):
    entry_size = 8

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._offsets = array("q")  # absolute offsets
        self._positions = array("q")

    def __len__(self) -> int:
        return len(self._offsets)

    def load(self, log_size: int) -> None:
        """Read entries from disk; raise CorruptIndexError when they make no sense."""
        data = _read_all(self._fd)
        usable = len(data) - len(data) % self.entry_size
        offsets = array("q")
        positions = array("q")
        last_off = -1
        last_pos = -1
        for rel, pos in _OFFSET_ENTRY.iter_unpack(data[:usable]):
            off = self.base_offset + rel
            if rel < 0 or off <= last_off or pos <= last_pos or pos >= log_size:
                raise CorruptIndexError(f"corrupt offset index {self.path}")
            offsets.append(off)
            positions.append(pos)
            last_off, last_pos = off, pos
        self._offsets, self._positions = offsets, positions
        if usable != len(data):
            self._truncate_file(len(offsets))

    def reset(self) -> None:
        self._offsets = array("q")
        self._positions = array("q")
        self._truncate_file(0)

    def append(self, offset: int, position: int) -> None:
        if self._offsets and offset <= self._offsets[-1]:
            return
        _pwrite_all(
            self._fd,
            _OFFSET_ENTRY.pack(offset - self.base_offset, position),
            len(self._offsets) * self.entry_size,
        )
        self._offsets.append(offset)
        self._positions.append(position)

    def _drop_from(self, n: int) -> None:
        del self._offsets[n:]
        del self._positions[n:]

    def lookup(self, offset: int) -> tuple[int, int]:
        """Largest entry with offset <= target, else (base_offset, 0)."""
        i = bisect.bisect_right(self._offsets, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self._offsets[i], self._positions[i]

    def last_entry(self) -> tuple[int, int]:
        if not self._offsets:
            return self.base_offset, 0
        return self._offsets[-1], self._positions[-1]

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        i = bisect.bisect_left(self._offsets, offset)
        if i < len(self._offsets):
            del self._offsets[i:]
            del self._positions[i:]
            self._truncate_file(i)


class TimeIndex(_IndexFile):
    entry_size = 12

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._timestamps = array("q")
        self._offsets = array("q")

    def __len__(self) -> int:
        return len(self._timestamps)

    def load(self) -> None:
        data = _read_all(self._fd)
        usable = len(data) - len(data) % self.entry_size
        timestamps = array("q")
        offsets = array("q")
        for ts, rel in _TIME_ENTRY.iter_unpack(data[:usable]):
            off = self.base_offset + rel
            if rel < 0 or (timestamps and (ts <= timestamps[-1] or off < offsets[-1])):
                raise CorruptIndexError(f"corrupt time index {self.path}")
            timestamps.append(ts)
            offsets.append(off)
        self._timestamps, self._offsets = timestamps, offsets
        if usable != len(data):
            self._truncate_file(len(timestamps))

    def reset(self) -> None:
        self._timestamps = array("q")
        self._offsets = array("q")
        self._truncate_file(0)

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Append only if the timestamp is larger than the last entry's (Kafka semantics)."""
        if timestamp < 0:
            return
        if self._timestamps and (timestamp <= self._timestamps[-1] or offset < self._offsets[-1]):
            return
        _pwrite_all(
            self._fd,
            _TIME_ENTRY.pack(timestamp, offset - self.base_offset),
            len(self._timestamps) * self.entry_size,
        )
        self._timestamps.append(timestamp)
        self._offsets.append(offset)

    def _drop_from(self, n: int) -> None:
        del self._timestamps[n:]
        del self._offsets[n:]

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """Largest entry with timestamp <= target, else (-1, base_offset)."""
        i = bisect.bisect_right(self._timestamps, timestamp) - 1
        if i < 0:
            return -1, self.base_offset
        return self._timestamps[i], self._offsets[i]

    def last_entry(self) -> tuple[int, int]:
        if not self._timestamps:
            return -1, self.base_offset
        return self._timestamps[-1], self._offsets[-1]

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= ``offset``."""
        i = bisect.bisect_left(self._offsets, offset)
        if i < len(self._offsets):
            del self._timestamps[i:]
            del self._offsets[i:]
            self._truncate_file(i)
