"""Sparse offset and time indexes of a log segment.

On disk they use Kafka's layout (big-endian): `.index` entries are (int32 relative offset,
int32 position), `.timeindex` entries are (int64 timestamp, int32 relative offset). Files grow as
entries are written (no preallocation), so a file's length is its used size.

The entries live in memory (arrays, for binary search); an index holds no file descriptor (a
broker with ten thousand partitions would otherwise hold three descriptors per segment; Kafka
mmaps its indexes and keeps only the `.log` open). Appending an entry is an in-memory append; the
entries not yet in the file (the *unwritten tail*) are written, opening the file for that write
only, when the segment is flushed, rolled or closed, and when the tail reaches
:data:`SPILL_ENTRIES` (so the work a crash can lose stays bounded). Truncation opens the file
only when written entries go.

An index file may therefore lag its log (fewer entries than the memory had): that is a valid,
sparser index (Kafka's own index lags the log the same way), which lookups and
:meth:`LogSegment.load` handle by scanning batch headers from the last entry. Entries that point
past the log (the log lost data the index kept) are caught by the checks of ``load`` and the
segment's own consistency check, and the index is rebuilt.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import threading
from abc import ABC, abstractmethod
from array import array

from odradek.log.errors import CorruptIndexError

logger = logging.getLogger(__name__)

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")

# Unwritten entries that make an append write them out (2 KiB of offset index, ~1 MiB of log at
# the default index.interval.bytes).
SPILL_ENTRIES = 256


def _pwrite_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        view = view[n:]
        position += n


def _read_file(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
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
    finally:
        os.close(fd)



def read_offset_index_file(path: str, base_offset: int) -> list[tuple[int, int]]:
    """Every (offset, position) entry of an ``.index`` file as written, unchecked (for tools
    that show a possibly corrupt index; a partial entry at the end is left out)."""
    data = _read_file(path)
    usable = len(data) - len(data) % _OFFSET_ENTRY.size
    return [(base_offset + rel, pos) for rel, pos in _OFFSET_ENTRY.iter_unpack(data[:usable])]


def read_time_index_file(path: str, base_offset: int) -> list[tuple[int, int]]:
    """Every (timestamp, offset) entry of a ``.timeindex`` file as written, unchecked."""
    data = _read_file(path)
    usable = len(data) - len(data) % _TIME_ENTRY.size
    return [(ts, base_offset + rel) for ts, rel in _TIME_ENTRY.iter_unpack(data[:usable])]

class _IndexFile(ABC):
    entry_size = 8

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry_size)
        # Create the file (an existing one is kept); no descriptor stays open.
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))
        self._written = 0  # the first entries that the file holds, byte for byte
        self._file_stale = False  # the file may hold bytes after those (a failed write/truncate)
        self._synced = True  # the file's content is fsynced
        self._detached = False  # closed, deleted or moved away: the file is never touched again
        # Serialises file writes with truncation: Log.flush runs on another thread than the
        # appender (appending itself takes no lock: it only adds entries after the written ones).
        self._lock = threading.Lock()

    @abstractmethod
    def __len__(self) -> int:
        """Number of entries."""

    @abstractmethod
    def _encode(self, start: int, end: int) -> bytes:
        """Entries ``start`` to ``end`` in the file's layout."""

    @abstractmethod
    def _drop_from(self, n: int) -> None:
        """Remove in-memory entries from index ``n`` on."""

    @abstractmethod
    def _clear(self) -> None:
        """Remove all in-memory entries."""

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return len(self) * self.entry_size

    @property
    def unwritten_entries(self) -> int:
        """Entries held in memory only (written at the next flush, roll, close or spill)."""
        return len(self) - self._written

    # --------------------------------------------------------------------------- file I/O
    def write(self, sync: bool = False) -> None:
        """Write the unwritten tail (and trim stale bytes after it), fsync if ``sync``; the
        file is open only during this call. Raises OSError (the entries stay in memory and
        are written by a later call)."""
        with self._lock:
            self._write_locked(sync)

    def _write_locked(self, sync: bool) -> None:
        if self._detached:
            return
        n = len(self)
        if n == self._written and not self._file_stale and (self._synced or not sync):
            return
        fd = os.open(self.path, os.O_WRONLY)
        try:
            if n > self._written:
                stale = self._file_stale
                self._synced = False
                self._file_stale = True  # until the write is complete
                _pwrite_all(fd, self._encode(self._written, n), self._written * self.entry_size)
                self._written = n
                self._file_stale = stale
            if self._file_stale:
                self._synced = False
                os.ftruncate(fd, n * self.entry_size)
                self._file_stale = False
            if sync:
                os.fsync(fd)
                self._synced = True
        finally:
            os.close(fd)

    def _spill(self) -> None:
        if not self._lock.acquire(blocking=False):
            return  # a flush is writing (and fsyncing): never wait for it on the append path
        try:
            self._write_locked(False)
        except OSError as e:  # kept in memory; the next spill, roll or flush tries again
            logger.debug("could not write index %s yet: %s", self.path, e)
        finally:
            self._lock.release()

    def _truncate_file(self, entries: int) -> None:
        """The memory now holds ``entries`` entries: drop written entries after them from the
        file (the caller holds the lock). Never raises: if the file cannot be opened or shrunk, it is marked stale and the
        next write trims it (or the segment's checks catch it after a crash)."""
        if entries >= self._written and not self._file_stale:
            return  # only unwritten entries went
        keep = min(entries, self._written)
        self._written = keep
        self._file_stale = True
        self._synced = False
        if self._detached:
            return
        try:
            fd = os.open(self.path, os.O_WRONLY)
            try:
                os.ftruncate(fd, keep * self.entry_size)
                self._file_stale = False
            finally:
                os.close(fd)
        except OSError as e:
            logger.warning("could not truncate index %s (trimmed at its next write): %s",
                           self.path, e)

    def _loaded(self, entries: int, file_bytes: int) -> None:
        with self._lock:
            self._written = entries
            self._synced = True
            self._file_stale = False
            if file_bytes != entries * self.entry_size:
                self._file_stale = True
                self._truncate_file(entries)  # a torn last entry

    def flush(self) -> None:
        self.write(sync=True)

    def close(self) -> None:
        """Write the unwritten tail (best effort: an index lagging its log is valid) and stop
        touching the file."""
        if self._detached:
            return
        try:
            self.write()
        except OSError as e:
            logger.warning("could not write index %s on close: %s", self.path, e)
        self._detached = True

    def detach(self) -> None:
        """The file is deleted or moved away: never write it again (the entries stay usable)."""
        self._detached = True

    def delete(self) -> None:
        self.detach()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def reset(self) -> None:
        with self._lock:
            self._clear()
            self._truncate_file(0)

    def truncate_to_entries(self, n: int) -> None:
        """Keep the first ``n`` entries (undoes appends that a failed segment append made)."""
        with self._lock:
            if n < len(self):
                self._drop_from(n)
                self._truncate_file(n)


class OffsetIndex(_IndexFile):
    entry_size = 8

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._offsets = array("q")  # absolute offsets
        self._positions = array("q")

    def __len__(self) -> int:
        return len(self._offsets)

    def entries(self) -> list[tuple[int, int]]:
        """(offset, position) of every entry, in memory."""
        return list(zip(self._offsets, self._positions, strict=True))

    def _encode(self, start: int, end: int) -> bytes:
        base = self.base_offset
        pack = _OFFSET_ENTRY.pack
        return b"".join(
            pack(self._offsets[i] - base, self._positions[i]) for i in range(start, end)
        )

    def load(self, log_size: int) -> None:
        """Read entries from disk; raise CorruptIndexError when they make no sense."""
        data = _read_file(self.path)
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
        self._loaded(len(offsets), len(data))

    def _clear(self) -> None:
        self._offsets = array("q")
        self._positions = array("q")

    def append(self, offset: int, position: int) -> None:
        offsets = self._offsets
        if offsets and offset <= offsets[-1]:
            return
        offsets.append(offset)
        self._positions.append(position)
        if len(offsets) - self._written >= SPILL_ENTRIES:
            self._spill()

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
        with self._lock:
            i = bisect.bisect_left(self._offsets, offset)
            if i < len(self._offsets):
                self._drop_from(i)
                self._truncate_file(i)


class TimeIndex(_IndexFile):
    entry_size = 12

    def __init__(self, path: str, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._timestamps = array("q")
        self._offsets = array("q")

    def __len__(self) -> int:
        return len(self._timestamps)

    def entries(self) -> list[tuple[int, int]]:
        """(timestamp, offset) of every entry, in memory."""
        return list(zip(self._timestamps, self._offsets, strict=True))

    def _encode(self, start: int, end: int) -> bytes:
        base = self.base_offset
        pack = _TIME_ENTRY.pack
        return b"".join(
            pack(self._timestamps[i], self._offsets[i] - base) for i in range(start, end)
        )

    def load(self) -> None:
        data = _read_file(self.path)
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
        self._loaded(len(timestamps), len(data))

    def _clear(self) -> None:
        self._timestamps = array("q")
        self._offsets = array("q")

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Append only if the timestamp is larger than the last entry's (Kafka semantics)."""
        if timestamp < 0:
            return
        timestamps = self._timestamps
        if timestamps and (timestamp <= timestamps[-1] or offset < self._offsets[-1]):
            return
        timestamps.append(timestamp)
        self._offsets.append(offset)
        if len(timestamps) - self._written >= SPILL_ENTRIES:
            self._spill()

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
        with self._lock:
            i = bisect.bisect_left(self._offsets, offset)
            if i < len(self._offsets):
                self._drop_from(i)
                self._truncate_file(i)
