"""RecordBatch v2 at batch level: header layout, validation and in-place offset assignment.

Nothing here touches individual records. A produce buffer is walked batch by batch using only the
61-byte headers; the CRC32C is checked over each batch's bytes, and offsets / leader epoch /
LogAppendTime are written straight into the caller's buffer.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from crc32c import crc32c

from odradek.records.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    UnsupportedMagicError,
)

# --- v2 header layout -----------------------------------------------------------------------
BASE_OFFSET_OFFSET = 0  # int64
BATCH_LENGTH_OFFSET = 8  # int32, bytes after this field
PARTITION_LEADER_EPOCH_OFFSET = 12  # int32
MAGIC_OFFSET = 16  # int8
CRC_OFFSET = 17  # uint32, CRC32C of bytes [ATTRIBUTES_OFFSET, end)
ATTRIBUTES_OFFSET = 21  # int16
LAST_OFFSET_DELTA_OFFSET = 23  # int32
BASE_TIMESTAMP_OFFSET = 27  # int64
MAX_TIMESTAMP_OFFSET = 35  # int64
PRODUCER_ID_OFFSET = 43  # int64
PRODUCER_EPOCH_OFFSET = 51  # int16
BASE_SEQUENCE_OFFSET = 53  # int32
RECORDS_COUNT_OFFSET = 57  # int32
RECORD_BATCH_OVERHEAD = 61  # header size
LOG_OVERHEAD = 12  # baseOffset + batchLength
# Smallest legal batchLength value (the header minus the two leading fields).
MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD

MAGIC_V2 = 2
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

# attributes bits
COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # 0 CreateTime, 1 LogAppendTime
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4

TIMESTAMP_TYPE_CREATE_TIME = 0
TIMESTAMP_TYPE_LOG_APPEND_TIME = 1

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
assert HEADER_STRUCT.size == RECORD_BATCH_OVERHEAD

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
# baseOffset, batchLength, partitionLeaderEpoch, magic (first 17 bytes)
_PREFIX = struct.Struct(">qiib")
# attributes, lastOffsetDelta, baseTimestamp, maxTimestamp (bytes 21..43)
_MIDDLE = struct.Struct(">hiqq")
_RECORDS_COUNT = _INT32


class RecordBatchHeader(NamedTuple):
    """The parsed 61-byte v2 header, plus where the batch sits in the buffer/file."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0

    @property
    def size(self) -> int:
        """Total bytes of the batch including the 12-byte log overhead."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)


def parse_header(buf: bytes | bytearray | memoryview, position: int = 0) -> RecordBatchHeader:
    """Parse a v2 header at ``position`` (no validation beyond having 61 bytes)."""
    if len(buf) - position < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError("buffer too small for a record batch header")
    return RecordBatchHeader._make((*HEADER_STRUCT.unpack_from(buf, position), position))


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    """CRC32C of a whole batch (bytes from ``attributes`` to the end)."""
    return crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:])


class BatchInfo(NamedTuple):
    """Per-batch facts the log needs to maintain its indexes without reparsing."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    position: int
    size: int
    partition_leader_epoch: int


@dataclass
class AppendInfo:
    first_offset: int = -1
    last_offset: int = -1
    max_timestamp: int = NO_TIMESTAMP
    # Kafka's "shallow" offset of max timestamp: the last offset of the batch holding it.
    offset_of_max_timestamp: int = -1
    num_batches: int = 0
    num_records: int = 0
    valid_bytes: int = 0
    log_append_time_ms: int = NO_TIMESTAMP  # set when LogAppendTime was applied
    batches: list[BatchInfo] = field(default_factory=list)

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def _walk(
    buf: bytearray | memoryview | bytes,
    *,
    base_offset: int | None,
    leader_epoch: int | None,
    max_message_bytes: int,
    log_append_time_ms: int | None,
    strict_count: bool,
) -> AppendInfo:
    mv = memoryview(buf)
    total = len(mv)
    info = AppendInfo()
    batches = info.batches
    pos = 0
    next_offset = base_offset
    max_ts = NO_TIMESTAMP
    offset_of_max_ts = -1
    num_records = 0
    prefix_unpack = _PREFIX.unpack_from
    middle_unpack = _MIDDLE.unpack_from
    count_unpack = _RECORDS_COUNT.unpack_from
    crc_unpack = _UINT32.unpack_from
    assign = base_offset is not None
    if assign and log_append_time_ms is not None:
        lat_bytes = _INT64.pack(log_append_time_ms)
    else:
        lat_bytes = b""
    while pos < total:
        remaining = total - pos
        if remaining < LOG_OVERHEAD + 5:
            raise CorruptRecordError(f"truncated record batch at position {pos}")
        batch_base, batch_length, _epoch, magic = prefix_unpack(mv, pos)
        if magic != MAGIC_V2:
            if magic in (0, 1):
                raise UnsupportedMagicError(
                    f"message format v{magic} is not supported; only RecordBatch v2"
                )
            raise CorruptRecordError(f"invalid magic byte {magic} at position {pos}")
        size = batch_length + LOG_OVERHEAD
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"record batch length {batch_length} is smaller than the minimum {MIN_BATCH_LENGTH}"
            )
        if size > remaining:
            raise CorruptRecordError(
                f"record batch at position {pos} claims {size} bytes but only {remaining} remain"
            )
        if size > max_message_bytes:
            raise RecordTooLargeError(
                f"record batch of {size} bytes exceeds max.message.bytes {max_message_bytes}"
            )
        end = pos + size
        (stored_crc,) = crc_unpack(mv, pos + CRC_OFFSET)
        if crc32c(mv[pos + ATTRIBUTES_OFFSET : end]) != stored_crc:
            raise CorruptRecordError(f"record batch at position {pos} failed its CRC32C check")
        attributes, last_delta, _base_ts, batch_max_ts = middle_unpack(mv, pos + ATTRIBUTES_OFFSET)
        (count,) = count_unpack(mv, pos + RECORDS_COUNT_OFFSET)
        if count <= 0:
            if strict_count or count < 0:
                raise InvalidRecordError(f"record batch at position {pos} has {count} records")
        if last_delta < 0:
            raise InvalidRecordError(f"negative lastOffsetDelta {last_delta}")
        if strict_count and last_delta != count - 1:
            raise InvalidRecordError(
                f"lastOffsetDelta {last_delta} does not match record count {count}"
            )
        if attributes & COMPRESSION_CODEC_MASK > COMPRESSION_ZSTD:
            raise CorruptRecordError(
                f"unknown compression codec {attributes & COMPRESSION_CODEC_MASK}"
            )
        if assign:
            assert next_offset is not None
            _INT64.pack_into(mv, pos, next_offset)
            if leader_epoch is not None:
                _INT32.pack_into(mv, pos + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
            if lat_bytes:
                _INT16.pack_into(mv, pos + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
                mv[pos + MAX_TIMESTAMP_OFFSET : pos + MAX_TIMESTAMP_OFFSET + 8] = lat_bytes
                _UINT32.pack_into(mv, pos + CRC_OFFSET, crc32c(mv[pos + ATTRIBUTES_OFFSET : end]))
                batch_max_ts = log_append_time_ms
            batch_base = next_offset
            next_offset += last_delta + 1
            epoch = leader_epoch if leader_epoch is not None else _epoch
        else:
            if next_offset is not None and batch_base < next_offset:
                raise InvalidRecordError(
                    f"batch base offset {batch_base} is below the previous batch's next offset "
                    f"{next_offset}"
                )
            next_offset = batch_base + last_delta + 1
            epoch = _epoch
        last = batch_base + last_delta
        if batch_max_ts > max_ts:
            max_ts = batch_max_ts
            offset_of_max_ts = last
        num_records += count
        batches.append(BatchInfo(batch_base, last, batch_max_ts, pos, size, epoch))
        pos = end
    if batches:
        info.first_offset = batches[0].base_offset
        info.last_offset = batches[-1].last_offset
        info.max_timestamp = max_ts
        info.offset_of_max_timestamp = (
            offset_of_max_ts if offset_of_max_ts >= 0 else batches[-1].last_offset
        )
    info.num_batches = len(batches)
    info.num_records = num_records
    info.valid_bytes = pos
    if lat_bytes:
        info.log_append_time_ms = log_append_time_ms  # type: ignore[assignment]
    return info


def validate_and_assign(
    buf: bytearray | memoryview,
    base_offset: int,
    *,
    leader_epoch: int,
    max_message_bytes: int,
    log_append_time_ms: int | None,
) -> AppendInfo:
    """Validate every batch of a produce buffer and assign offsets in place.

    Each batch's baseOffset becomes the next offset (starting at ``base_offset``), its
    partitionLeaderEpoch becomes ``leader_epoch``; if ``log_append_time_ms`` is given the
    timestamp-type bit and maxTimestamp are rewritten and the CRC recomputed. ``buf`` must be
    writable. Raises a :class:`~odradek.records.errors.RecordError` subclass on bad input, in
    which case the buffer may be partly rewritten (the caller discards it).
    """
    return _walk(
        buf,
        base_offset=base_offset,
        leader_epoch=leader_epoch,
        max_message_bytes=max_message_bytes,
        log_append_time_ms=log_append_time_ms,
        strict_count=True,
    )


def validate(
    buf: bytes | bytearray | memoryview,
    *,
    max_message_bytes: int = 2**31 - 1,
) -> AppendInfo:
    """Validate batches whose offsets are already assigned (replication, recovery); no rewrite.

    Offsets must be increasing; compacted batches (records count below lastOffsetDelta+1) are
    accepted.
    """
    return _walk(
        buf,
        base_offset=None,
        leader_epoch=None,
        max_message_bytes=max_message_bytes,
        log_append_time_ms=None,
        strict_count=False,
    )


def iter_batches(
    buf: bytes | bytearray | memoryview, start: int = 0
) -> Iterator[RecordBatchHeader]:
    """Yield the headers of the complete batches in ``buf`` (no CRC check).

    Stops silently at a trailing partial batch (as fetch responses may contain one); raises
    :class:`CorruptRecordError` on an impossible batch length and
    :class:`UnsupportedMagicError` on magic 0/1.
    """
    mv = memoryview(buf)
    total = len(mv)
    pos = start
    unpack = HEADER_STRUCT.unpack_from
    while total - pos >= RECORD_BATCH_OVERHEAD:
        fields = unpack(mv, pos)
        batch_length = fields[1]
        magic = fields[3]
        if magic != MAGIC_V2:
            if magic in (0, 1):
                raise UnsupportedMagicError(f"message format v{magic} at position {pos}")
            raise CorruptRecordError(f"invalid magic byte {magic} at position {pos}")
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"invalid batch length {batch_length} at position {pos}")
        size = batch_length + LOG_OVERHEAD
        if pos + size > total:
            return
        yield RecordBatchHeader._make((*fields, pos))
        pos += size


def is_batch_crc_valid(buf: bytes | bytearray | memoryview, position: int, size: int) -> bool:
    mv = memoryview(buf)
    (stored,) = _UINT32.unpack_from(mv, position + CRC_OFFSET)
    return bool(crc32c(mv[position + ATTRIBUTES_OFFSET : position + size]) == stored)
