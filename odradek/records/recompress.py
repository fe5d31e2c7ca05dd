"""Broker-side recompression: a topic's ``compression.type`` applied to produced batches.

Kafka's LogValidator keeps a produced batch as sent when the topic's ``compression.type`` is
``producer`` (the default) or when the batch is already in the topic's codec. Otherwise the batch
is decompressed, its records are checked, and a batch in the target codec is written in its place.

Here the rewrite is done on bytes, after :func:`~odradek.records.batch.validate_and_assign` has
checked the batch and assigned its offsets: the records section of a v2 batch does not depend on
the codec (record offsets and timestamps are deltas from the header's base offset and base
timestamp), so the decompressed records section is checked record by record and compressed again
with the target codec, under a copy of the header that differs only in the codec bits, the batch
length and the CRC. Everything else in the header is kept: base offset and partition leader epoch
(as assigned), timestamp type and max timestamp (LogAppendTime included), lastOffsetDelta,
records count, producer id, producer epoch, base sequence, and the transactional flag. Control
batches are never rewritten.

Sans-I/O: bytes in, bytes out.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from odradek.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    AppendInfo,
    BatchInfo,
    compute_crc,
    parse_header,
)
from odradek.records.compression import StreamCompressor, decompressed_limit, iter_decompress
from odradek.records.errors import CorruptRecordError, RecordTooLargeError
from odradek.records.scan import scan_records

# compression.type value -> codec id; None = keep the producer's codec.
BROKER_COMPRESSION_CODECS: dict[str, int | None] = {
    "producer": None,
    "uncompressed": COMPRESSION_NONE,
    "gzip": COMPRESSION_GZIP,
    "snappy": COMPRESSION_SNAPPY,
    "lz4": COMPRESSION_LZ4,
    "zstd": COMPRESSION_ZSTD,
}

_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")


def target_codec(compression_type: str) -> int | None:
    """The codec a ``compression.type`` value asks for, or None for ``producer``."""
    try:
        return BROKER_COMPRESSION_CODECS[compression_type]
    except KeyError:
        raise ValueError(f"unknown compression.type {compression_type!r}") from None


def check_records(data: bytes | bytearray | memoryview, records_count: int) -> None:
    """Check the structure of an uncompressed records section holding ``records_count`` records.

    Every record must parse and end where its length says, offset deltas must run 0, 1, 2, ...,
    header keys must not be null, and nothing may follow the last record. Raises
    :class:`InvalidRecordError` (INVALID_RECORD), as Kafka does for a batch that passed its CRC
    check but holds malformed records.
    """
    for _ in scan_records((data,), records_count, check_offsets=True):
        pass


def recompress_batch(
    batch: bytes | bytearray | memoryview,
    codec: int,
    level: int | None = None,
    *,
    max_message_bytes: int = 2**31 - 1,
) -> bytes:
    """One complete, CRC-checked v2 batch re-encoded with ``codec`` (at ``level``, Kafka's scale
    for that codec; None = its default). Its records are checked on the way
    (:func:`check_records`). The caller decides whether the batch needs it (see
    :func:`needs_recompression`); a batch already in ``codec`` is re-encoded all the same.

    Streams: the records section is decompressed, checked and compressed again piece by piece,
    so memory holds the new batch and a piece or two, never the whole decompressed section. A
    new batch larger than ``max_message_bytes`` raises :class:`RecordTooLargeError` as soon as
    it is (Kafka checks the size after recompression too), and so does a section decompressing
    to more than :func:`~odradek.records.compression.decompressed_limit` allows."""
    mv = memoryview(batch)
    h = parse_header(mv, 0)
    if h.size > len(mv):
        raise CorruptRecordError("record batch is truncated")
    limit = decompressed_limit(max_message_bytes)
    payload_max = max_message_bytes - RECORD_BATCH_OVERHEAD
    compressor = StreamCompressor(codec, level)
    out = bytearray(RECORD_BATCH_OVERHEAD)

    def add(piece: bytes) -> None:
        out.extend(piece)
        if len(out) - RECORD_BATCH_OVERHEAD > payload_max:
            raise RecordTooLargeError(
                f"record batch of more than {max_message_bytes} bytes after recompression "
                f"exceeds max.message.bytes {max_message_bytes}"
            )

    def pieces() -> Iterator[bytes | memoryview]:
        for piece in iter_decompress(h.compression, mv[RECORD_BATCH_OVERHEAD : h.size], limit):
            add(compressor.compress(piece))
            yield piece

    for _ in scan_records(pieces(), h.records_count, check_offsets=True):
        pass
    add(compressor.flush())
    size = len(out)
    HEADER_STRUCT.pack_into(
        out,
        0,
        h.base_offset,
        size - LOG_OVERHEAD,
        h.partition_leader_epoch,
        h.magic,
        0,
        (h.attributes & ~COMPRESSION_CODEC_MASK) | codec,
        h.last_offset_delta,
        h.base_timestamp,
        h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        h.records_count,
    )
    _CRC.pack_into(out, CRC_OFFSET, compute_crc(out))
    return bytes(out)


def _needs_rewrite(attributes: int, codec: int) -> bool:
    return not attributes & CONTROL_FLAG_MASK and attributes & COMPRESSION_CODEC_MASK != codec


def needs_recompression(
    buf: bytes | bytearray | memoryview, info: AppendInfo, codec: int | None
) -> bool:
    """Whether any batch of a validated buffer must be rewritten for the target ``codec``
    (None = ``producer``: never). Reads two bytes per batch."""
    if codec is None:
        return False
    unpack = _ATTRIBUTES.unpack_from
    return any(
        _needs_rewrite(unpack(buf, b.position + ATTRIBUTES_OFFSET)[0], codec) for b in info.batches
    )


def recompress_batches(
    buf: bytes | bytearray | memoryview,
    info: AppendInfo,
    codec: int | None,
    level: int | None,
    *,
    max_message_bytes: int,
) -> tuple[bytearray, AppendInfo] | None:
    """Apply the target ``codec`` to a buffer that :func:`validate_and_assign` accepted.

    Returns None when nothing needs rewriting (``codec`` None, every batch already in ``codec``,
    or control batches only): the caller stores ``buf`` as it is. Otherwise returns the new
    buffer and its :class:`AppendInfo` (same offsets, timestamps and counts; positions, sizes and
    ``valid_bytes`` of what will actually be stored). A rewritten batch larger than
    ``max_message_bytes`` raises :class:`RecordTooLargeError`, as Kafka checks the size again
    after recompression.
    """
    if not needs_recompression(buf, info, codec):
        return None
    assert codec is not None
    mv = memoryview(buf)
    unpack = _ATTRIBUTES.unpack_from
    out = bytearray()
    batches: list[BatchInfo] = []
    for b in info.batches:
        raw = mv[b.position : b.position + b.size]
        if _needs_rewrite(unpack(raw, ATTRIBUTES_OFFSET)[0], codec):
            new = recompress_batch(raw, codec, level, max_message_bytes=max_message_bytes)
            if len(new) > max_message_bytes:
                raise RecordTooLargeError(
                    f"record batch of {len(new)} bytes after recompression exceeds "
                    f"max.message.bytes {max_message_bytes}"
                )
            batches.append(b._replace(position=len(out), size=len(new)))
            out += new
        else:
            batches.append(b._replace(position=len(out)))
            out += raw
    new_info = AppendInfo(
        first_offset=info.first_offset,
        last_offset=info.last_offset,
        max_timestamp=info.max_timestamp,
        offset_of_max_timestamp=info.offset_of_max_timestamp,
        num_batches=info.num_batches,
        num_records=info.num_records,
        valid_bytes=len(out),
        log_append_time_ms=info.log_append_time_ms,
        batches=batches,
    )
    return out, new_info
