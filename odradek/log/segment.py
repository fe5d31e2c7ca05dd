"""LogSegment: one `<base offset>.log` file with its `.index` and `.timeindex`.

The segment only ever reads batch *headers* (61 bytes) to navigate; record bodies are opaque
bytes, except in :meth:`LogSegment.find_offset_by_timestamp` and
:meth:`LogSegment.find_max_timestamp_record`, which decode one batch to answer ListOffsets.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from odradek.log.errors import CorruptIndexError
from odradek.log.index import OffsetIndex, TimeIndex
from odradek.log.transaction_index import TXN_INDEX_FILE_SUFFIX, TransactionIndex
from odradek.records.batch import (
    HEADER_STRUCT,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
    BatchInfo,
    RecordBatchHeader,
    is_batch_crc_valid,
)
from odradek.records.errors import RecordError
from odradek.records.records import Record, iter_batch_records

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"
MAX_RELATIVE_OFFSET = 2**31 - 1


@dataclass(frozen=True)
class Truncation:
    """What :meth:`LogSegment.recover` cut off: ``size`` bytes from byte ``position``, which
    held offsets from ``first_offset`` (to ``last_offset`` as far as readable headers tell)."""

    position: int
    size: int
    first_offset: int
    last_offset: int | None
    reason: str

    def describe(self, segment_path: str, later: Sequence[tuple[int, int]] = ()) -> str:
        """One line for the operator (Kafka's "Found invalid messages in log segment ... at
        byte offset ..."); ``later`` lists (base offset, bytes) of later segments dropped."""
        if self.last_offset is not None and self.last_offset >= self.first_offset:
            lost = f"offsets {self.first_offset} to {self.last_offset}"
        else:
            lost = f"any offsets from {self.first_offset}"
        text = (
            f"found {self.reason} in log segment {segment_path} at byte position "
            f"{self.position}: truncated {self.size} bytes, losing {lost}"
        )
        if later:
            text += (
                f", and deleted the {len(later)} later segment(s) "
                f"({sum(n for _, n in later)} bytes, offsets from {later[0][0]})"
            )
        return text + f"; the log now ends at offset {self.first_offset}"


def filename_prefix(offset: int) -> str:
    return f"{offset:020d}"


def _pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        view = view[n:]
        position += n


class LogSegment:
    def __init__(
        self,
        directory: str,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        now_ms: int,
        file_suffix: str = "",
    ) -> None:
        """``file_suffix`` (e.g. ``.cleaned``, ``.swap``) is appended to all three file names:
        the log cleaner writes and swaps in segments under such names."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        prefix = os.path.join(directory, filename_prefix(base_offset))
        self.log_path = prefix + LOG_FILE_SUFFIX + file_suffix
        # The indexes hold no descriptor (see odradek.log.index): one per segment, its .log.
        self.offset_index = OffsetIndex(
            prefix + INDEX_FILE_SUFFIX + file_suffix, base_offset, max_index_size
        )
        self.time_index = TimeIndex(
            prefix + TIME_INDEX_FILE_SUFFIX + file_suffix, base_offset, max_index_size
        )
        # Aborted transactions whose marker is in this segment (file created at the first).
        self.txn_index = TransactionIndex(
            prefix + TXN_INDEX_FILE_SUFFIX + file_suffix, base_offset
        )
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size
        self._next_offset = base_offset  # one past the last offset in the segment
        self._max_timestamp_so_far = -1
        self._offset_of_max_timestamp_so_far = -1
        self._bytes_since_last_index_entry = 0
        self._rolling_base_ms: int | None = None
        self._created_ms = now_ms
        self._last_modified_ms = now_ms
        self._closed = False
        self.last_truncation: Truncation | None = None  # set by recover()
        self.recovered = False  # recover() ran: the transaction index must be rebuilt

    # ----------------------------------------------------------------------------- properties
    @property
    def size(self) -> int:
        return self._size

    @property
    def next_offset(self) -> int:
        return self._next_offset

    @property
    def is_empty(self) -> bool:
        return self._size == 0

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_timestamp_so_far

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._offset_of_max_timestamp_so_far

    @property
    def largest_timestamp(self) -> int:
        """Max record timestamp in the segment, or last-modified time when there is none."""
        if self._max_timestamp_so_far >= 0:
            return self._max_timestamp_so_far
        return self._last_modified_ms

    @property
    def created_ms(self) -> int:
        return self._created_ms

    @property
    def last_modified_ms(self) -> int:
        return self._last_modified_ms

    @property
    def rolling_base_ms(self) -> int | None:
        """First-append time (for segment.ms); for loaded segments the first batch's timestamp."""
        return self._rolling_base_ms

    def fileno(self) -> int:
        return self._fd

    def time_waited_for_roll(self, now_ms: int) -> int:
        base = self._rolling_base_ms if self._rolling_base_ms is not None else self._created_ms
        return now_ms - base

    def can_hold(self, last_offset: int) -> bool:
        return last_offset - self.base_offset <= MAX_RELATIVE_OFFSET

    @property
    def indexes_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    # ------------------------------------------------------------------------------ loading
    def _init_from_disk_mtime(self) -> None:
        try:
            self._last_modified_ms = int(os.stat(self.log_path).st_mtime * 1000)
        except OSError:
            pass

    def load(self) -> None:
        """Load indexes trusting the files (clean shutdown); raises CorruptIndexError."""
        self._init_from_disk_mtime()
        self.offset_index.load(self._size)
        self.time_index.load()
        self._rebuild_tail_state()

    def _rebuild_tail_state(self) -> None:
        """Recompute next offset / max timestamp from the last index entries plus a header scan
        of the tail. Raises CorruptIndexError if the tail does not parse exactly to the end."""
        ts, ts_off = self.time_index.last_entry()
        self._max_timestamp_so_far = ts
        self._offset_of_max_timestamp_so_far = ts_off if ts >= 0 else -1
        last_index_offset, pos = self.offset_index.last_entry()
        self._next_offset = self.base_offset
        first = True
        last_index_pos = pos
        for h in self._iter_headers(pos, self._size):
            if first and len(self.offset_index) and h.last_offset != last_index_offset:
                # An entry that does not name the batch at its position: the index outlived
                # the log data it described (stale after a crash).
                raise CorruptIndexError(f"offset index of {self.log_path} does not match its log")
            if first and pos == 0:
                self._rolling_base_ms = h.max_timestamp if h.max_timestamp >= 0 else None
            first = False
            self._next_offset = h.next_offset
            if h.max_timestamp > self._max_timestamp_so_far:
                self._max_timestamp_so_far = h.max_timestamp
                self._offset_of_max_timestamp_so_far = h.last_offset
            pos = h.position + h.size
        if pos != self._size:
            raise CorruptIndexError(f"segment {self.log_path} does not end on a batch boundary")
        if self._size and self._next_offset == self.base_offset and len(self.offset_index):
            raise CorruptIndexError(f"segment {self.log_path} tail is unreadable")
        if len(self.time_index) and ts_off >= self._next_offset:
            raise CorruptIndexError(f"time index of {self.log_path} points past its log")
        self._bytes_since_last_index_entry = self._size - last_index_pos
        if self._rolling_base_ms is None and self._size:
            first_header = self.read_header(0)
            if first_header is not None and first_header.max_timestamp >= 0:
                self._rolling_base_ms = first_header.max_timestamp

    def recover(self, max_message_bytes: int) -> int:
        """Rescan the log validating each batch (CRC included), rebuild both indexes and
        truncate a torn or corrupt tail. Returns the number of bytes truncated."""
        self._init_from_disk_mtime()
        self.recovered = True
        self.offset_index.reset()
        self.time_index.reset()
        self._next_offset = self.base_offset
        self._max_timestamp_so_far = -1
        self._offset_of_max_timestamp_so_far = -1
        self._bytes_since_last_index_entry = 0
        self._rolling_base_ms = None
        pos = 0
        size = os.fstat(self._fd).st_size
        reason = "a torn batch header at the end of the file"
        while size - pos >= RECORD_BATCH_OVERHEAD:
            raw = os.pread(self._fd, RECORD_BATCH_OVERHEAD, pos)
            if len(raw) < RECORD_BATCH_OVERHEAD:
                break
            h = RecordBatchHeader._make((*HEADER_STRUCT.unpack_from(raw, 0), pos))
            if h.magic != MAGIC_V2 or h.batch_length < MIN_BATCH_LENGTH:
                reason = f"an invalid batch header (magic {h.magic}, length {h.batch_length})"
                break
            bsize = h.size
            if pos + bsize > size:
                reason = f"a torn batch ({size - pos} of its {bsize} bytes written)"
                break
            if bsize > max(max_message_bytes, RECORD_BATCH_OVERHEAD):
                reason = f"a batch of {bsize} bytes, over max.message.bytes {max_message_bytes}"
                break
            if h.base_offset < self._next_offset or h.last_offset_delta < 0:
                reason = f"out-of-order offsets (batch at offset {h.base_offset})"
                break
            if not self.can_hold(h.last_offset):
                reason = f"offset {h.last_offset} beyond this segment's range"
                break
            data = os.pread(self._fd, bsize, pos)
            if len(data) != bsize or not is_batch_crc_valid(data, 0, bsize):
                reason = f"a corrupt batch (CRC mismatch) at offset {h.base_offset}"
                break
            if pos == 0:
                self._rolling_base_ms = h.max_timestamp if h.max_timestamp >= 0 else None
            self._index_batch(h.last_offset, h.max_timestamp, pos, bsize)
            self._next_offset = h.next_offset
            pos += bsize
        truncated = size - pos
        self.last_truncation = None
        if truncated:
            self.last_truncation = Truncation(
                position=pos,
                size=truncated,
                first_offset=self._next_offset,
                last_offset=self._last_offset_in(pos, size),
                reason=reason,
            )
            os.ftruncate(self._fd, pos)
        self._size = pos
        return truncated

    def _last_offset_in(self, start: int, end: int) -> int | None:
        """The last offset that batch headers in [start, end) claim, read without checking
        CRCs (what recovery is about to drop); None when no header there is readable."""
        last: int | None = None
        pos = start
        while end - pos >= RECORD_BATCH_OVERHEAD:
            raw = os.pread(self._fd, RECORD_BATCH_OVERHEAD, pos)
            if len(raw) < RECORD_BATCH_OVERHEAD:
                break
            h = RecordBatchHeader._make((*HEADER_STRUCT.unpack_from(raw, 0), pos))
            if h.magic != MAGIC_V2 or h.batch_length < MIN_BATCH_LENGTH or h.last_offset_delta < 0:
                break
            if h.base_offset < self._next_offset or (last is not None and h.base_offset <= last):
                break
            last = h.last_offset
            pos += h.size
        return last

    def txn_index_sane(self) -> bool:
        """Whether the transaction index is whole and within this segment's offsets."""
        try:
            self.txn_index.sanity_check(self._next_offset)
            return True
        except CorruptIndexError:
            return False

    # ------------------------------------------------------------------------------- append
    def _index_batch(self, last_offset: int, max_timestamp: int, position: int, size: int) -> None:
        if max_timestamp > self._max_timestamp_so_far:
            self._max_timestamp_so_far = max_timestamp
            self._offset_of_max_timestamp_so_far = last_offset
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(
                self._max_timestamp_so_far, self._offset_of_max_timestamp_so_far
            )
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size

    def append(
        self,
        data: bytes | bytearray | memoryview,
        batches: Sequence[BatchInfo],
        now_ms: int | None,
    ) -> None:
        """Append already-validated bytes; ``batches`` positions are relative to ``data``."""
        if not batches:
            return
        physical = self._size
        saved = (
            self._max_timestamp_so_far,
            self._offset_of_max_timestamp_so_far,
            self._bytes_since_last_index_entry,
            len(self.offset_index),
            len(self.time_index),
        )
        try:
            _pwrite_all(self._fd, data, physical)
            for b in batches:
                self._index_batch(b.last_offset, b.max_timestamp, physical + b.position, b.size)
        except OSError:
            # Disk full or an I/O error part-way: undo, so the segment is as before the append
            # (readers never saw the new bytes: the size moves only on success).
            self._rollback(physical, saved)
            raise
        if self._size == 0:
            self._rolling_base_ms = now_ms if now_ms is not None else batches[0].max_timestamp
        self._size = physical + len(data)
        self._next_offset = batches[-1].last_offset + 1
        if now_ms is not None:
            self._last_modified_ms = now_ms

    def _rollback(self, size: int, saved: tuple[int, int, int, int, int]) -> None:
        (
            self._max_timestamp_so_far,
            self._offset_of_max_timestamp_so_far,
            self._bytes_since_last_index_entry,
            offset_entries,
            time_entries,
        ) = saved
        # Each index drops its in-memory entries (and written ones from its file; a file that
        # cannot shrink is trimmed at its next write, or rebuilt after a crash).
        for undo in (
            lambda: self.offset_index.truncate_to_entries(offset_entries),
            lambda: self.time_index.truncate_to_entries(time_entries),
            lambda: os.ftruncate(self._fd, size),  # shrinking needs no space
        ):
            try:
                undo()
            except OSError:
                pass

    def on_become_inactive(self) -> None:
        """Called when rolled or closed: make the time index cover the segment's max timestamp
        and write the indexes' unwritten entries (not fsynced: the log's flush does that; if
        the write fails, they stay in memory for the next flush or close)."""
        if self._max_timestamp_so_far >= 0:
            self.time_index.maybe_append(
                self._max_timestamp_so_far, self._offset_of_max_timestamp_so_far
            )
        for index in (self.offset_index, self.time_index):
            try:
                index.write()
            except OSError:
                pass

    # ------------------------------------------------------------------------------- lookup
    def read_header(self, position: int) -> RecordBatchHeader | None:
        if self._size - position < RECORD_BATCH_OVERHEAD:
            return None
        raw = os.pread(self._fd, RECORD_BATCH_OVERHEAD, position)
        if len(raw) < RECORD_BATCH_OVERHEAD:
            return None
        return RecordBatchHeader._make((*HEADER_STRUCT.unpack_from(raw, 0), position))

    def _iter_headers(self, start: int, end: int) -> Iterator[RecordBatchHeader]:
        pos = start
        while pos < end:
            h = self.read_header(pos)
            if h is None or h.magic != MAGIC_V2 or h.batch_length < MIN_BATCH_LENGTH:
                return
            if pos + h.size > end:
                return
            yield h
            pos += h.size

    def iter_batch_headers(self, start_position: int = 0) -> Iterator[RecordBatchHeader]:
        return self._iter_headers(start_position, self._size)

    def translate_offset(self, offset: int, starting_position: int = 0) -> RecordBatchHeader | None:
        """Header (with position) of the first batch whose last offset is >= ``offset``."""
        _, pos = self.offset_index.lookup(offset)
        pos = max(pos, starting_position)
        for h in self._iter_headers(pos, self._size):
            if h.last_offset >= offset:
                return h
        return None

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = True,
    ) -> tuple[int, int] | None:
        """Byte range (position, size) of whole batches starting at the batch holding
        ``start_offset``; None if the offset is past this segment's data."""
        first = self.translate_offset(start_offset)
        if first is None:
            return None
        end_limit = self._size if max_position is None else min(max_position, self._size)
        start = first.position
        if start + first.size > end_limit:
            return start, 0
        # Fast path: everything to the limit fits (the file holds whole batches only).
        if max_position is None or max_position >= self._size:
            if end_limit - start <= max_size:
                return start, end_limit - start
        if first.size > max_size:
            return (start, first.size) if min_one_message else (start, 0)
        total = 0
        for h in self._iter_headers(start, end_limit):
            if total + h.size > max_size:
                break
            total += h.size
        return start, total

    def read_bytes(self, position: int, size: int) -> bytes:
        chunks = []
        while size > 0:
            chunk = os.pread(self._fd, size, position)
            if not chunk:
                break
            chunks.append(chunk)
            position += len(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch) of the first record at or after ``starting_offset``
        whose timestamp is >= ``timestamp``; decodes only the one batch that holds it."""
        _, ts_offset = self.time_index.lookup(timestamp)
        _, pos = self.offset_index.lookup(max(ts_offset, starting_offset))
        for h in self._iter_headers(pos, self._size):
            if h.last_offset < starting_offset or h.max_timestamp < timestamp:
                continue
            for rec in self._decode(h):
                if rec.offset >= starting_offset and rec.timestamp >= timestamp:
                    return rec.offset, rec.timestamp, h.partition_leader_epoch
        return None

    def find_max_timestamp_record(self) -> tuple[int, int, int] | None:
        """(offset, timestamp, leader epoch) of the first record carrying the segment's max
        timestamp (KIP-734)."""
        if self._max_timestamp_so_far < 0:
            return None
        target = self._max_timestamp_so_far
        h = self.translate_offset(self._offset_of_max_timestamp_so_far)
        candidates = [h] if h is not None and h.max_timestamp == target else []
        if not candidates:
            candidates = [
                x for x in self._iter_headers(0, self._size) if x.max_timestamp == target
            ][:1]
        for hdr in candidates:
            for rec in self._decode(hdr):
                if rec.timestamp == target:
                    return rec.offset, rec.timestamp, hdr.partition_leader_epoch
            return hdr.last_offset, target, hdr.partition_leader_epoch
        return None

    def _decode(self, h: RecordBatchHeader) -> Iterator[Record]:
        # One record at a time (a batch of millions of tiny records is never a list), from a
        # decompressed section of bounded size; an unreadable batch ends the records early.
        try:
            yield from iter_batch_records(self.read_bytes(h.position, h.size))
        except RecordError:
            return

    # --------------------------------------------------------------------------- mutation
    def truncate_to(self, offset: int) -> int:
        """Remove all batches holding offsets >= ``offset`` (a batch straddling ``offset`` is
        removed whole). Returns the bytes removed."""
        h = self.translate_offset(offset)
        if h is None:
            return 0
        pos = h.position
        removed = self._size - pos
        # The batch holding ``offset`` goes whole: so do index entries from its first offset.
        self.offset_index.truncate_to(h.base_offset)
        self.time_index.truncate_to(h.base_offset)
        self.txn_index.truncate_to(h.base_offset)
        os.ftruncate(self._fd, pos)
        self._size = pos
        try:
            self._rebuild_tail_state()
        except CorruptIndexError:
            self.recover(2**31 - 1)
        if self._size == 0:
            self._rolling_base_ms = None
        return removed

    def flush(self) -> None:
        if self._closed:
            return
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Close the log file; the indexes write their unwritten entries (best effort)."""
        if self._closed:
            return
        self._closed = True
        os.close(self._fd)
        self._fd = -1
        self.offset_index.close()
        self.time_index.close()

    def detach_files(self) -> None:
        """The files are deleted or moved away: the indexes never write them again."""
        self.offset_index.detach()
        self.time_index.detach()
        self.txn_index.detach()

    @property
    def closed(self) -> bool:
        return self._closed

    def unlink_files(self) -> None:
        """Remove the files but keep descriptors open (in-flight reads/sendfile stay valid)."""
        self.detach_files()
        paths = (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path)
        for path in paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def delete(self) -> None:
        self.close()
        self.unlink_files()

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, size={self._size}, "
            f"next_offset={self._next_offset})"
        )
