"""Building the batches the log cleaner writes: a batch holding a subset of its records (offsets,
producer fields and codec kept; KIP-534 delete horizon) and the records-less header Kafka keeps
for a producer's last batch."""

from __future__ import annotations

import struct

from crc32c import crc32c

from odradek.records.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_FLAG_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    RecordBatchHeader,
)
from odradek.records.builder import encode_record
from odradek.records.compression import compress
from odradek.records.records import Record

_UINT32 = struct.Struct(">I")


def rebuild_batch(h: RecordBatchHeader, records: list[Record], delete_horizon: int | None) -> bytes:
    """A v2 batch holding ``records`` (a subset of the batch ``h``) that keeps what
    ``build_batch`` cannot: the original base offset and lastOffsetDelta with each record's
    offset delta (so offsets and producer sequences are unchanged), the header's producer
    fields, leader epoch, attributes and codec. With ``delete_horizon`` the delete-horizon bit
    is set and the base timestamp holds it (KIP-534); record timestamps stay as they were."""
    log_append = bool(h.attributes & TIMESTAMP_TYPE_MASK)
    attributes = h.attributes & ~DELETE_HORIZON_FLAG_MASK
    if delete_horizon is not None:
        base_ts = delete_horizon
        attributes |= DELETE_HORIZON_FLAG_MASK
    else:
        base_ts = records[0].timestamp
    max_ts = h.max_timestamp if log_append else max(r.timestamp for r in records)
    body = bytearray()
    for rec in records:
        encode_record(
            body,
            rec.offset - h.base_offset,
            rec.timestamp - base_ts,
            rec.key,
            rec.value,
            rec.headers,
        )
    payload = compress(h.compression, body) if h.compression else bytes(body)
    size = RECORD_BATCH_OVERHEAD + len(payload)
    buf = bytearray(size)
    HEADER_STRUCT.pack_into(
        buf,
        0,
        h.base_offset,
        size - LOG_OVERHEAD,
        h.partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        h.last_offset_delta,
        base_ts,
        max_ts,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        len(records),
    )
    buf[RECORD_BATCH_OVERHEAD:] = payload
    _UINT32.pack_into(buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def empty_batch(h: RecordBatchHeader) -> bytes:
    """The records-less header Kafka keeps for a producer's last batch (writeEmptyHeader)."""
    attributes = h.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK)
    buf = bytearray(RECORD_BATCH_OVERHEAD)
    HEADER_STRUCT.pack_into(
        buf,
        0,
        h.base_offset,
        RECORD_BATCH_OVERHEAD - LOG_OVERHEAD,
        h.partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        h.last_offset_delta,
        h.max_timestamp,
        h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        0,
    )
    _UINT32.pack_into(buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)
