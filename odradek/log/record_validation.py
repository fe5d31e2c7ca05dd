"""Checks of a leader append (Kafka's LogValidator): the batch headers' timestamps, and the
record-level checks (LogValidator.validateRecord) naming every bad record (KIP-467).

The record-level checks only run where a rule applies: on compacted topics (every record needs a key) and,
for timestamps, when the batch headers already showed a CreateTime timestamp out of range (the
headers give the batch's first and largest timestamps; the records tell which ones are out). The
records are streamed (:func:`odradek.records.scan.scan_records` over
:func:`odradek.records.compression.iter_decompress`): memory holds a piece of the batch at a
time however far it decompresses, and a batch decompressing beyond
:func:`~odradek.records.compression.decompressed_limit` is refused (RECORD_TOO_LARGE) without
decompressing the rest.
"""

from __future__ import annotations

import struct

from odradek.log.log_config import LogConfig
from odradek.records.batch import (
    BASE_TIMESTAMP_OFFSET,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    AppendInfo,
    parse_header,
)
from odradek.records.compression import decompressed_limit, iter_decompress
from odradek.records.errors import (
    InvalidRecordsError,
    InvalidTimestampError,
    InvalidTimestampsError,
)
from odradek.records.scan import scan_records

# At most this many bad records are named in a response (each entry repeats Kafka's message;
# librdkafka batches up to 10,000 messages by default). Every bad record is still counted, and
# the batch is refused whole either way.
MAX_RECORD_ERRORS = 10_000

_TIMESTAMP = struct.Struct(">q")


def check_batch_timestamps(
    buf: bytearray, info: AppendInfo, config: LogConfig, now_ms: int
) -> None:
    """Refuse CreateTime batches outside ``message.timestamp.before.max.ms`` /
    ``message.timestamp.after.max.ms`` of the broker clock (INVALID_TIMESTAMP), as Kafka does.

    Only the batch header is read (the hot path never decodes records): its max timestamp
    against the upper bound, its first record's timestamp and its max against the lower one. A
    record in the middle of a batch older than the batch's first record is not seen.
    """
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
    lowest = now_ms - before if before < now_ms else None
    highest = now_ms + after if after < 2**63 - 1 - now_ms else None
    if lowest is None and highest is None:
        return
    unpack = _TIMESTAMP.unpack_from
    for b in info.batches:
        first = unpack(buf, b.position + BASE_TIMESTAMP_OFFSET)[0]
        for ts in (first, b.max_timestamp):
            if ts == NO_TIMESTAMP:
                continue
            if (lowest is not None and ts < lowest) or (highest is not None and ts > highest):
                raise InvalidTimestampError(
                    f"timestamp {ts} in the batch at offset {b.base_offset} is out of range: "
                    f"with message.timestamp.before.max.ms={before} and "
                    f"message.timestamp.after.max.ms={after} it must lie within "
                    f"[{lowest if lowest is not None else 'any'}, "
                    f"{highest if highest is not None else 'any'}] (broker time {now_ms})"
                )


def check_records(
    buf: bytes | bytearray | memoryview,
    info: AppendInfo,
    config: LogConfig,
    now_ms: int,
    topic_partition: str,
    *,
    keys: bool,
    timestamps: bool,
) -> None:
    """Check every record of the (non-control) batches in ``buf``: with ``keys`` that it has a
    key, with ``timestamps`` that its CreateTime timestamp lies within
    ``message.timestamp.before.max.ms`` / ``message.timestamp.after.max.ms`` of ``now_ms``.

    Raises :class:`~odradek.records.errors.RecordValidationError` naming the bad records by batch
    index with Kafka's messages: :class:`InvalidTimestampsError` (INVALID_TIMESTAMP) if any
    timestamp is out, else :class:`InvalidRecordsError` (INVALID_RECORD). Decompression and
    structure errors raise as :func:`iter_decompress` and :func:`scan_records` do."""
    limit = decompressed_limit(config.max_message_bytes)
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
    view = memoryview(buf)
    errors: list[tuple[int, str | None]] = []
    total = 0
    bad_timestamp = False
    for b in info.batches:
        h = parse_header(view, b.position)
        if h.is_control:
            continue
        section = view[b.position + RECORD_BATCH_OVERHEAD : b.position + b.size]
        log_append = h.timestamp_type == 1
        for rec in scan_records(iter_decompress(h.compression, section, limit), h.records_count):
            message: str | None = None
            if keys and not rec.has_key:
                message = (
                    "Compacted topic cannot accept message without key in topic partition "
                    f"{topic_partition}"
                )
            elif timestamps:
                ts = h.max_timestamp if log_append else h.base_timestamp + rec.timestamp_delta
                if ts != NO_TIMESTAMP and (now_ms - ts > before or ts - now_ms > after):
                    bad_timestamp = True
                    message = (
                        f"Timestamp {ts} of message with offset {rec.offset_delta} is out of "
                        f"range. The timestamp should be within [{now_ms - before}, "
                        f"{now_ms + after}]"
                    )
            if message is not None:
                total += 1
                if len(errors) < MAX_RECORD_ERRORS:
                    errors.append((rec.batch_index, message))
    if not total:
        return
    if bad_timestamp:
        raise InvalidTimestampsError(
            "One or more records have been rejected due to invalid timestamp",
            errors,
        )
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    raise InvalidRecordsError(
        f"One or more records have been rejected due to {total} record errors in total, and "
        f"only showing the first three errors at most: [{shown}]",
        errors,
    )
