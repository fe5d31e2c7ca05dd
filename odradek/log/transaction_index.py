"""TransactionIndex: a segment's `<base offset>.txnindex`, the aborted transactions whose ABORT
marker lies in the segment (Kafka's TransactionIndex, same file format).

Each entry is 34 bytes: version int16 (0), producer_id int64, first_offset int64, last_offset
int64 (the marker), last_stable_offset int64 (the LSO once the marker was written). Entries are
in increasing last offset. The file exists only once a transaction was aborted in the segment.
A ``read_committed`` fetch collects the aborted transactions overlapping its range so that the
consumer drops their records.

No descriptor is held: the file is opened for each append or read (aborts and
``read_committed`` fetches of aborted ranges are rare next to data); reads go in bounded chunks.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import NamedTuple

from odradek.log.errors import CorruptIndexError

TXN_INDEX_FILE_SUFFIX = ".txnindex"
ABORTED_TXN_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_READ_CHUNK = ENTRY_SIZE * 1024


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._detached = False
        self._dirty = False
        self._last_offset: int | None = None
        self._known_last = False

    # ------------------------------------------------------------------------------ reading
    @property
    def size(self) -> int:
        """Bytes in the file (0 when there is none)."""
        return self._size()

    def _size(self) -> int:
        try:
            return os.path.getsize(self.path)
        except OSError:
            return 0

    def __iter__(self) -> Iterator[AbortedTxn]:
        """The entries (a trailing partial entry is ignored); raises CorruptIndexError on an
        unknown entry version."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            pos = 0
            while True:
                chunk = os.pread(fd, _READ_CHUNK, pos)
                n = len(chunk) - len(chunk) % ENTRY_SIZE
                if n <= 0:
                    return
                for off in range(0, n, ENTRY_SIZE):
                    version, pid, first, last, lso = _ENTRY.unpack_from(chunk, off)
                    if version != ABORTED_TXN_VERSION:
                        raise CorruptIndexError(
                            f"Unexpected aborted transaction version {version} in transaction "
                            f"index {self.path}, current version is {ABORTED_TXN_VERSION}"
                        )
                    yield AbortedTxn(pid, first, last, lso)
                pos += n
        finally:
            os.close(fd)

    def all_aborted(self) -> list[AbortedTxn]:
        return list(self)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping [fetch_offset, upper_bound_offset), and whether the
        search is complete (an entry's LSO reached the upper bound: later segments cannot hold
        a transaction overlapping the range)."""
        found: list[AbortedTxn] = []
        for txn in self:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def sanity_check(self, next_offset: int) -> None:
        """Raise CorruptIndexError if the file is not whole entries, in increasing last
        offset, within [base offset, ``next_offset``)."""
        if self._size() % ENTRY_SIZE:
            raise CorruptIndexError(f"transaction index {self.path} has a partial entry")
        prev = -1
        for txn in self:
            if not self.base_offset <= txn.last_offset < next_offset or txn.last_offset <= prev:
                raise CorruptIndexError(
                    f"aborted transaction {txn} in index {self.path} is outside its segment "
                    f"[{self.base_offset}, {next_offset}) or out of order"
                )
            if txn.first_offset > txn.last_offset:
                raise CorruptIndexError(f"aborted transaction {txn} in {self.path} is inverted")
            prev = txn.last_offset

    @property
    def last_offset(self) -> int | None:
        if not self._known_last:
            last = None
            for txn in self:
                last = txn.last_offset
            self._last_offset, self._known_last = last, True
        return self._last_offset

    # ------------------------------------------------------------------------------ writing
    def append(self, txn: AbortedTxn) -> None:
        last = self.last_offset
        if last is not None and last >= txn.last_offset:
            raise ValueError(
                f"The last offset of appended transactions must increase sequentially, but "
                f"{txn.last_offset} is not greater than current last offset {last} of index "
                f"{self.path}"
            )
        if self._detached:
            return
        data = _ENTRY.pack(ABORTED_TXN_VERSION, *txn)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size % ENTRY_SIZE:  # a torn entry of an earlier failed write
                os.ftruncate(fd, size - size % ENTRY_SIZE)
            written = os.write(fd, data)
            if written != len(data):
                os.ftruncate(fd, size - size % ENTRY_SIZE)
                raise OSError(f"short write to {self.path}")
        finally:
            os.close(fd)
        self._last_offset, self._known_last, self._dirty = txn.last_offset, True, True

    def rewrite(self, entries: list[AbortedTxn]) -> None:
        """Replace the whole file with ``entries`` (none: the file is removed)."""
        if self._detached:
            return
        if not entries:
            self.reset()
            return
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            for txn in entries:
                f.write(_ENTRY.pack(ABORTED_TXN_VERSION, *txn))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._last_offset, self._known_last, self._dirty = entries[-1].last_offset, True, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above ``offset``."""
        kept = [t for t in self if t.last_offset < offset]
        if len(kept) * ENTRY_SIZE != self._size():
            self.rewrite(kept)

    def reset(self) -> None:
        if not self._detached:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
        self._last_offset, self._known_last, self._dirty = None, True, False

    def flush(self) -> None:
        if not self._dirty or self._detached:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._dirty = False

    def detach(self) -> None:
        """The file is deleted or moved away: never written again."""
        self._detached = True

    def unlink(self) -> None:
        self._detached = True
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
