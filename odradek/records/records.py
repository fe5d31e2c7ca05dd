"""Decoding individual records of a v2 batch. Only used where a feature needs the records
(ListOffsets by timestamp, compaction, internal topics, tests) -- never on the produce/fetch path.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from odradek.records.batch import (
    RECORD_BATCH_OVERHEAD,
    RecordBatchHeader,
    parse_header,
)
from odradek.records.compression import DECOMPRESS_MIN_LIMIT, decompress
from odradek.records.errors import CorruptRecordError
from odradek.records.varint import decode_varint


@dataclass
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def decode_records(header: RecordBatchHeader, payload: bytes | memoryview) -> list[Record]:
    """Decode the (already decompressed) records section of a batch."""
    return list(iter_records(header, payload))


def iter_records(header: RecordBatchHeader, payload: bytes | memoryview) -> Iterator[Record]:
    """The records of a decompressed records section, decoded one at a time (a caller keeping
    few of them never holds them all)."""
    data = payload
    pos = 0
    n = len(data)
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    log_append = header.timestamp_type == 1
    try:
        for _ in range(header.records_count):
            length, pos = decode_varint(data, pos)
            end = pos + length
            if length < 0 or end > n:
                raise CorruptRecordError("record length exceeds batch")
            pos += 1  # record attributes (unused)
            ts_delta, pos = decode_varint(data, pos)
            offset_delta, pos = decode_varint(data, pos)
            key_len, pos = decode_varint(data, pos)
            key: bytes | None
            if key_len < 0:
                key = None
            else:
                key = bytes(data[pos : pos + key_len])
                pos += key_len
            value_len, pos = decode_varint(data, pos)
            value: bytes | None
            if value_len < 0:
                value = None
            else:
                value = bytes(data[pos : pos + value_len])
                pos += value_len
            header_count, pos = decode_varint(data, pos)
            if header_count < 0:
                raise CorruptRecordError("negative header count")
            headers: list[tuple[str, bytes | None]] = []
            for _h in range(header_count):
                hk_len, pos = decode_varint(data, pos)
                if hk_len < 0:
                    raise CorruptRecordError("null header key")
                hkey = bytes(data[pos : pos + hk_len]).decode("utf-8")
                pos += hk_len
                hv_len, pos = decode_varint(data, pos)
                hval: bytes | None
                if hv_len < 0:
                    hval = None
                else:
                    hval = bytes(data[pos : pos + hv_len])
                    pos += hv_len
                headers.append((hkey, hval))
            if pos != end:
                raise CorruptRecordError("record length does not match its content")
            timestamp = header.max_timestamp if log_append else base_ts + ts_delta
            yield Record(base_offset + offset_delta, timestamp, key, value, headers)
    except (ValueError, UnicodeDecodeError, IndexError) as exc:
        raise CorruptRecordError(
            f"malformed record in batch at offset {base_offset}: {exc}"
        ) from exc


def decode_batch(
    batch_bytes: bytes | bytearray | memoryview, limit: int = DECOMPRESS_MIN_LIMIT
) -> list[Record]:
    """Decode all records of one complete v2 batch (decompressing if needed; a records section
    decompressing to more than ``limit`` bytes raises :class:`RecordTooLargeError`)."""
    return list(iter_batch_records(batch_bytes, limit))


def iter_batch_records(
    batch_bytes: bytes | bytearray | memoryview, limit: int = DECOMPRESS_MIN_LIMIT
) -> Iterator[Record]:
    """As :func:`decode_batch`, one record at a time: memory holds the decompressed section
    (at most ``limit`` bytes) and the current record, not a Python object per record."""
    mv = memoryview(batch_bytes)
    header = parse_header(mv, 0)
    end = header.size
    if end > len(mv):
        raise CorruptRecordError("batch is truncated")
    payload = mv[RECORD_BATCH_OVERHEAD:end]
    if header.compression:
        payload = memoryview(decompress(header.compression, payload, limit))
    return iter_records(header, payload)
