"""decode_records: one pass over the batches of a fetch response (see the package docstring):
the wanted data batches picked from their headers, compressed records sections decompressed into
one buffer, then each record decoded by the fastest path that can take it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from odradek.records.batch import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
)
from odradek.records.compression import decompress
from odradek.records.errors import CorruptRecordError
from odradek.spark.arrow_decode.boundaries import (
    FIRST_RUN,
    Batches,
    BatchScan,
    Run,
    long_size,
    scan_batches,
    scan_segment,
)
from odradek.spark.arrow_decode.columns import (
    HEADERS_TYPE,
    DecodedRecords,
    binary_output,
    headers_column,
)
from odradek.spark.arrow_decode.general import General, decode_general
from odradek.spark.arrow_decode.runs import FastRun, Group, decode_runs, decode_short_runs
from odradek.spark.arrow_decode.views import I64, RECORD_SIZE, Buffer, views

MAX_OFFSET = 2**63 - 1
# Bytes of zeros after a buffer of decompressed records (reads through the views of a few bytes
# past the last record stay inside it; in fetched data, only the last records need care).
_PAD = 16
_NO_LIMIT = 2**63 - 1


def decode_records(
    data: Buffer,
    start: int = 0,
    end: int = MAX_OFFSET,
    *,
    include_headers: bool = False,
    header_type: pa.DataType = HEADERS_TYPE,
    scan: BatchScan | None = None,
) -> DecodedRecords:
    """Decode the records with offsets in ``[start, end)`` of the complete batches in ``data``.

    ``data`` is a Fetch response's records (batches back to back; a trailing partial batch is
    ignored). Control batches are skipped.
    """
    if scan is None:
        scan = scan_batches(data)
    mv = memoryview(data)
    # the records section of each data batch: (begin, end, count)
    segments: list[tuple[int, int, int]] = []
    codecs: list[int] = []
    batches = Batches([], [], [], [])
    total = 0
    for h in scan.headers:
        (base_offset, length, _epoch, _magic, _crc, attributes, last_delta, first_ts, last_ts,
         _pid, _pepoch, _seq, records_count, position) = h
        if attributes & CONTROL_FLAG_MASK or records_count <= 0:
            continue
        if base_offset + last_delta < start or base_offset >= end:
            continue
        segments.append(
            (position + RECORD_BATCH_OVERHEAD, position + LOG_OVERHEAD + length, records_count)
        )
        codecs.append(attributes & COMPRESSION_CODEC_MASK)
        total += records_count
        batches.base_offsets.append(base_offset)
        batches.base_ts.append(first_ts)
        batches.max_ts.append(last_ts)
        batches.ts_types.append(1 if attributes & TIMESTAMP_TYPE_MASK else 0)
    if total == 0:
        return _empty(include_headers, header_type)
    counts = [s[2] for s in segments]
    buf: Buffer = mv  # nothing compressed: decode in place, positions relative to ``data``
    if any(codecs):
        # decompressed and concatenated (no bound beyond the broker's: a consumer takes what
        # the topic holds, as Kafka's do)
        parts = [
            decompress(codec, mv[begin:stop], _NO_LIMIT) if codec else mv[begin:stop]
            for (begin, stop, _), codec in zip(segments, codecs, strict=True)
        ]
        pos = 0
        for j, part in enumerate(parts):
            segments[j] = (pos, pos + len(part), counts[j])
            pos += len(part)
        buf = b"".join([*parts, bytes(_PAD)])
    if len(buf) >= 2**31:  # positions are int32 in Arrow's binary arrays
        raise CorruptRecordError(f"{len(buf)} bytes of records: too many to decode at once")
    a = np.frombuffer(buf, dtype=np.uint8)
    v = views(a)
    offsets = np.empty(total, dtype=np.int64)
    timestamps = np.empty(total, dtype=np.int64)

    # Per batch: find the records, and decode the long runs of same-size records whose fields
    # all sit at the same place column-wise, while the batch is in the CPU's caches.
    starts: list[int] = []  # records not in runs
    seg_starts: list[int] = []  # len(starts) after each segment
    runs: list[list[int]] = []  # [row, position, record size, count, batch]
    fast: list[FastRun] = []
    rest: list[Run] = []  # short runs, and what the column-wise pass left of long ones
    cap = FIRST_RUN
    row = 0
    try:
        for batch, segment in enumerate(segments):
            if segment[2] == 1:  # one record (small batches: spare the scan's set-up)
                begin = segment[0]
                size = RECORD_SIZE[buf[begin] | buf[begin + 1] << 8] or long_size(buf, begin)
                if size != segment[1] - begin:
                    raise CorruptRecordError(
                        f"a record of {size} bytes in a batch of {segment[1] - begin}"
                    )
                starts.append(begin)
                seg_starts.append(len(starts))
                row += 1
                continue
            first_run = len(runs)
            cap = scan_segment(buf, v, segment, row, batch, starts, runs, cap)
            decode_runs(buf, v, runs[first_run:], batches, offsets, timestamps, fast, rest)
            seg_starts.append(len(starts))
            row += segment[2]
    except IndexError as e:  # a length varint running past the buffer
        raise CorruptRecordError(f"malformed record: {e}") from e

    # The short runs, gathering each field of all their records at once.
    key_groups: list[Group] = []
    value_groups: list[Group] = []
    left = None
    if rest:
        left = decode_short_runs(
            buf, v, rest, batches, offsets, timestamps, key_groups, value_groups
        )

    # Everything else, one field at a time for all records at once.
    general: General | None = None
    if starts or left is not None:
        g_rows, g_starts, g_batch = _general_rows(total, starts, seg_starts, runs, left)
        general = decode_general(v, g_rows, g_starts, g_batch, batches, offsets, timestamps)

    if len(counts) == 1:
        types = np.full(total, batches.ts_types[0], dtype=np.int32)
    else:
        types = np.repeat(np.array(batches.ts_types, dtype=np.int32), counts)

    # Offsets outside [start, end): left out (batches are decoded whole).
    keep: slice | I64 | None = None
    if int(offsets.min()) < start or int(offsets.max()) >= end:
        idx = np.flatnonzero((offsets >= start) & (offsets < end))
        if len(idx) == 0:
            return _empty(include_headers, header_type)
        lo, hi = int(idx[0]), int(idx[-1]) + 1
        keep = slice(lo, hi) if hi - lo == len(idx) else idx

    buffer = pa.py_buffer(buf)
    g = general
    keys = binary_output(
        buffer, v, total, [(f[0], f[1], f[2], f[3], f[4], f[5]) for f in fast], key_groups,
        None if g is None else (g.rows, g.key_start, g.key_len),
    )
    values = binary_output(
        buffer, v, total, [(f[0], f[1], f[2], f[3], f[6], f[7]) for f in fast], value_groups,
        None if g is None else (g.rows, g.value_start, g.value_len),
    )
    headers = None
    if include_headers:
        header_count = np.zeros(total, dtype=np.int64)
        header_pos = np.zeros(total, dtype=np.int64)
        ends = np.zeros(total, dtype=np.int64)
        if g is not None:
            at = slice(None) if g.rows is None else g.rows
            header_count[at] = g.header_count
            header_pos[at] = g.header_pos
            ends[at] = g.ends
        if keep is not None:
            header_count, header_pos, ends = header_count[keep], header_pos[keep], ends[keep]
        headers = headers_column(buf, header_count, header_pos, ends, header_type)
    if keep is not None:
        offsets, timestamps, types = offsets[keep], timestamps[keep], types[keep]
        if isinstance(keep, slice):
            keys = keys.slice(keep.start, keep.stop - keep.start)
            values = values.slice(keep.start, keep.stop - keep.start)
        else:
            keys, values = keys.take(keep), values.take(keep)
    return DecodedRecords(
        keys=keys,
        values=values,
        offsets=offsets,
        timestamps=timestamps,
        timestamp_types=types,
        headers=headers,
    )


def _general_rows(
    total: int,
    starts: list[int],
    seg_starts: list[int],
    runs: list[list[int]],
    left: tuple[I64, I64, I64] | None,
) -> tuple[I64 | None, I64, I64]:
    """(rows or None for all rows, positions, batches) of the records for the general path:
    those not in ``runs`` (at ``starts``, ``seg_starts`` of them up to the end of each
    segment), and those ``left`` (rows, positions, batches) by the column-wise paths."""
    per_seg = np.array(seg_starts, dtype=np.int64)
    per_seg[1:] -= per_seg[:-1].copy()
    loose = np.array(starts, dtype=np.int64)
    loose_batch = np.repeat(np.arange(len(per_seg), dtype=np.int64), per_seg)
    if not runs:
        return None, loose, loose_batch
    # rows not in runs
    arr = np.array(runs, dtype=np.int64)
    edges = np.zeros(total + 1, dtype=np.int64)
    edges[arr[:, 0]] += 1
    edges[arr[:, 0] + arr[:, 3]] -= 1
    general = np.cumsum(edges[:total]) == 0
    if left is None:
        return np.flatnonzero(general), loose, loose_batch
    pos = np.empty(total, dtype=np.int64)
    batch = np.empty(total, dtype=np.int64)
    loose_rows = np.flatnonzero(general)
    pos[loose_rows] = loose
    batch[loose_rows] = loose_batch
    l_rows, l_pos, l_batch = left
    general[l_rows] = True
    pos[l_rows] = l_pos
    batch[l_rows] = l_batch
    rows = np.flatnonzero(general)
    if len(rows) == total:
        return None, pos, batch
    return rows, pos[rows], batch[rows]


def _empty(include_headers: bool, header_type: pa.DataType) -> DecodedRecords:
    return DecodedRecords(
        keys=pa.array([], pa.binary()),
        values=pa.array([], pa.binary()),
        offsets=np.zeros(0, np.int64),
        timestamps=np.zeros(0, np.int64),
        timestamp_types=np.zeros(0, np.int32),
        headers=pa.array([], header_type) if include_headers else None,
    )

