"""Building v2 record batches (internal records, tests, produce payloads in tests)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from crc32c import crc32c

from odradek.records.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
)
from odradek.records.compression import compress
from odradek.records.varint import write_varint

RecordTuple = tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int]


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
) -> None:
    body = bytearray()
    body.append(0)  # attributes
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    if key is None:
        write_varint(body, -1)
    else:
        write_varint(body, len(key))
        body += key
    if value is None:
        write_varint(body, -1)
    else:
        write_varint(body, len(value))
        body += value
    write_varint(body, len(headers))
    for hkey, hval in headers:
        kb = hkey.encode("utf-8")
        write_varint(body, len(kb))
        body += kb
        if hval is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(hval))
            body += hval
    write_varint(out, len(body))
    out += body


def build_batch(
    records: Sequence[RecordTuple],
    *,
    base_offset: int = 0,
    compression: int = 0,
    timestamp_type: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_control: bool = False,
    is_transactional: bool = False,
) -> bytes:
    """Build one v2 batch from (key, value, headers, timestamp) tuples with a valid CRC32C.

    Offsets are consecutive from ``base_offset``. For ``timestamp_type=1`` (LogAppendTime) the
    maxTimestamp field is the largest record timestamp, as the broker would set it.
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    timestamps = [r[3] for r in records]
    base_ts = timestamps[0] if timestamps[0] >= 0 else NO_TIMESTAMP
    max_ts = max(timestamps)
    body = bytearray()
    for i, (key, value, headers, ts) in enumerate(records):
        encode_record(body, i, ts - base_ts if base_ts != NO_TIMESTAMP else 0, key, value, headers)
    payload = compress(compression, body) if compression else bytes(body)
    attributes = compression & 0x07
    if timestamp_type:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    size = RECORD_BATCH_OVERHEAD + len(payload)
    buf = bytearray(size)
    HEADER_STRUCT.pack_into(
        buf,
        0,
        base_offset,
        size - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        len(records) - 1,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    buf[RECORD_BATCH_OVERHEAD:] = payload
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def build_simple(
    values: Sequence[bytes | None],
    *,
    timestamp: int = 0,
    compression: int = 0,
    base_offset: int = 0,
) -> bytes:
    """Convenience: a batch of keyless, headerless records sharing one timestamp."""
    return build_batch(
        [(None, v, [], timestamp) for v in values], base_offset=base_offset, compression=compression
    )
