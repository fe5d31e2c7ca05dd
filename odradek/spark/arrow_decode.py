"""RecordBatch v2 bytes -> Arrow columns, without a Python object per record.

The executors of the data source read raw record batches (see :mod:`odradek.spark.fetcher`) and
turn them into spark-sql-kafka's columns here:

1. :func:`scan_batches` walks the 61-byte batch headers (one Python step per *batch*).
2. The records sections of the data batches in the wanted offset range are decompressed (C codecs)
   and concatenated into one buffer, so that one pass decodes every record of a fetch response.
3. Record start positions: records follow each other, so each start depends on the previous
   record's length varint. A scalar loop reads length varints until it has seen a few records of
   the same size, then *guesses* that a run of records has that size and checks the guess for the
   whole run at once with numpy (each record's length varint must say exactly that size). Fixed-size
   records, the common case, cost a handful of numpy passes; records of varying size fall back to
   the scalar loop, one varint per record.
4. Every other field is decoded for all records at once: varints by gathering one byte per record
   per pass, and only for the records whose varint is still going (most take one or two passes).
5. Keys and values become Arrow ``binary_view`` arrays (length, 4-byte prefix or inline bytes,
   position) over the buffer, cast to ``binary`` by Arrow's C++ kernels: no per-record copy in
   Python. Null keys/values (length -1) go into a validity bitmap.
6. Headers (only when asked for) are read per record, but only for records that have any.

Control batches and records outside ``[start, end)`` are skipped. LogAppendTime batches give
every record the batch's max timestamp, as :func:`odradek.records.records.decode_records` does.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from odradek.records.batch import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
)
from odradek.records.compression import decompress
from odradek.records.errors import CorruptRecordError, UnsupportedMagicError

Buffer = bytes | bytearray | memoryview
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

MAX_OFFSET = 2**63 - 1
# Bytes of zeros after the decoded buffer, so that gathering a varint or 12 inline bytes near
# its end never reads out of bounds.
_PAD = 16
# Records checked at once in a first speculative run; grows while guesses hold.
_FIRST_RUN = 4096
_MIN_RUN = 256
_MAX_RUN = 1 << 20
_BATCH_SIZE = struct.Struct(">qi")
_UINT64_1 = np.uint64(1)
_INLINE = np.arange(12, dtype=np.int64)

HEADERS_TYPE = pa.list_(
    pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
)


class BatchScan(NamedTuple):
    """What the batch headers of a fetched buffer say."""

    headers: list[Any]  # parsed HEADER_STRUCT tuples (+ position) of the complete batches
    next_offset: int | None  # offset after the last complete batch; None if there is none
    incomplete_size: int  # size of a trailing incomplete batch (0: none)


def scan_batches(data: Buffer) -> BatchScan:
    """Walk the batch headers of ``data``; a trailing partial batch (fetch limits) is left out."""
    mv = memoryview(data)
    n = len(mv)
    pos = 0
    out: list[Any] = []
    next_offset: int | None = None
    incomplete = 0
    while pos < n:
        if n - pos < LOG_OVERHEAD:
            incomplete = LOG_OVERHEAD
            break
        base_offset, length = _BATCH_SIZE.unpack_from(mv, pos)
        size = length + LOG_OVERHEAD
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"record batch at offset {base_offset} declares an impossible length {length}"
            )
        if pos + size > n:
            incomplete = size
            break
        magic = mv[pos + MAGIC_OFFSET]
        if magic != MAGIC_V2:
            raise UnsupportedMagicError(
                f"batch at offset {base_offset} uses message format v{magic}; the odradek "
                "reader reads v2 only (set the option odradek.reader=librdkafka to read it)"
            )
        header = HEADER_STRUCT.unpack_from(mv, pos)
        out.append((*header, pos))
        next_offset = base_offset + header[6] + 1  # lastOffsetDelta
        pos += size
    return BatchScan(out, next_offset, incomplete)


@dataclass
class DecodedRecords:
    """Columns of the records decoded from one buffer of batches."""

    keys: pa.Array  # binary
    values: pa.Array  # binary
    offsets: I64
    timestamps: I64  # milliseconds
    timestamp_types: npt.NDArray[np.int32]  # 0 CreateTime, 1 LogAppendTime
    headers: pa.Array | None  # list<struct<key: string, value: binary>>, if asked for

    @property
    def count(self) -> int:
        return len(self.offsets)


def _varints(a: U8, pos: I64, max_bytes: int) -> tuple[I64, I64]:
    """Zigzag varints starting at each of ``pos``: (values, positions after them)."""
    b = a[pos]
    # int64 holds up to 9 varint bytes (63 bits); only 10-byte varlongs need uint64.
    wide = max_bytes > 9
    raw = (b & 0x7F).astype(np.uint64 if wide else np.int64)
    after = pos + 1
    more = np.flatnonzero(b >= 0x80)
    shift = 7
    while more.size:
        if shift >= 7 * max_bytes:
            raise CorruptRecordError("varint too long")
        nxt = a[after[more]]
        if wide:
            raw[more] |= (nxt & 0x7F).astype(np.uint64) << np.uint64(shift)
        else:
            raw[more] |= (nxt & 0x7F).astype(np.int64) << shift
        after[more] += 1
        more = more[nxt >= 0x80]
        shift += 7
    if wide:
        values = (raw >> _UINT64_1).astype(np.int64) ^ -(raw & _UINT64_1).astype(np.int64)
        return values, after
    signed: I64 = (raw >> 1) ^ -(raw & 1)
    return signed, after


def _record_starts(data: Buffer, a: U8, segments: list[tuple[int, int, int]], total: int) -> I64:
    """Start positions of the records of each ``(begin, end, count)`` segment of ``data``.

    A segment is the records section of one batch: ``count`` records back to back, filling
    ``data[begin:end]`` exactly.
    """
    run_pos: list[int] = []
    run_size: list[int] = []
    run_len: list[int] = []
    cap = _FIRST_RUN
    for begin, size, count in segments:
        i = same = 0
        pos = begin
        prev = -1
        while i < count:
            if pos >= size:
                raise CorruptRecordError(f"records end after {i} of {count}")
            # One record's length varint, scalar.
            raw = data[pos]
            p = pos + 1
            if raw & 0x80:
                raw &= 0x7F
                shift = 7
                while True:
                    b = data[p]
                    p += 1
                    raw |= (b & 0x7F) << shift
                    if not b & 0x80:
                        break
                    shift += 7
                    if shift > 28:
                        raise CorruptRecordError("record length varint too long")
            length = (raw >> 1) ^ -(raw & 1)
            if length <= 0:
                raise CorruptRecordError(f"impossible record length {length}")
            rsize = p - pos + length
            if rsize == prev:
                run_len[-1] += 1
                same += 1
            else:
                run_pos.append(pos)
                run_size.append(rsize)
                run_len.append(1)
                prev = rsize
                same = 0
            i += 1
            pos += rsize
            if same >= 2 and i < count:
                # Guess that the next records have the same size; check them all at once.
                k = min(count - i, (size - pos) // rsize, cap)
                if k > 0:
                    # Same size means the same length varint bytes: compare them through
                    # strided views, one per varint byte (no gather).
                    ok = a[pos : pos + k * rsize : rsize] == data[pos - rsize]
                    for j in range(1, p - (pos - rsize)):
                        ok &= a[pos + j : pos + j + k * rsize : rsize] == data[pos - rsize + j]
                    m = k if ok.all() else int(ok.argmin())
                    run_len[-1] += m
                    i += m
                    pos += m * rsize
                    # Grow while guesses hold; after a miss, aim at about the run just seen.
                    cap = min(cap * 8, _MAX_RUN) if m == k else max(_MIN_RUN, 4 * m)
        if pos != size:
            raise CorruptRecordError(
                f"records take {pos - begin} bytes but their batch holds {size - begin} "
                "(bad record lengths or record count)"
            )
    if len(run_pos) == 1:
        return run_pos[0] + np.arange(total, dtype=np.int64) * run_size[0]
    rp = np.array(run_pos, dtype=np.int64)
    rs = np.array(run_size, dtype=np.int64)
    rl = np.array(run_len, dtype=np.int64)
    run_id = np.repeat(np.arange(len(rl)), rl)
    first = np.cumsum(rl) - rl
    within = np.arange(total, dtype=np.int64) - first[run_id]
    starts: I64 = (rp[run_id] + within * rs[run_id]).astype(np.int64, copy=False)
    return starts


def _binary_column(buffer: pa.Buffer, a: U8, starts: I64, lengths: I64) -> pa.Array:
    """Binary array of ``a[start:start+length]`` per row; length -1 is null."""
    n = len(starts)
    valid = lengths >= 0
    all_valid = bool(valid.all())
    if all_valid and n and (lengths == lengths[0]).all():
        # Same length everywhere (fixed-size keys/values): one 2-D gather.
        width = int(lengths[0])
        if width == 0:
            data = np.zeros(0, np.uint8)
        else:
            data = np.lib.stride_tricks.sliding_window_view(a, width)[starts].reshape(-1)
        offsets = np.arange(n + 1, dtype=np.int32) * np.int32(width)
        return pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )
    # Arrow binary views (16 bytes each): int32 length, then either up to 12 inline bytes or a
    # 4-byte prefix, buffer index and offset. Arrow's cast to binary then copies the bytes.
    lens = np.maximum(lengths, 0)
    index = starts[:, None] + _INLINE
    near_end = np.flatnonzero(starts > len(a) - 12)
    if near_end.size:
        index[near_end] = np.minimum(index[near_end], len(a) - 1)
    inline = a[index]  # (n, 12) uint8
    short = lens <= 12
    inline[short[:, None] & (_INLINE[None, :] >= lens[:, None])] = 0
    views = np.empty((n, 4), dtype=np.int32)
    views[:, 0] = lens
    views[:, 1:] = inline.view(np.int32)
    long_rows = np.flatnonzero(~short)
    views[long_rows, 2] = 0
    views[long_rows, 3] = starts[long_rows]
    validity = None if all_valid else pa.py_buffer(np.packbits(valid, bitorder="little"))
    view_array = pa.Array.from_buffers(
        pa.binary_view(), n, [validity, pa.py_buffer(views), buffer]
    )
    return view_array.cast(pa.binary())


def _read_headers(
    data: Buffer, pos: int, count: int, keys: list[str], values: list[bytes | None]
) -> int:
    for _ in range(count):
        klen, pos = _varint(data, pos)
        if klen < 0:
            raise CorruptRecordError("null header key")
        keys.append(bytes(data[pos : pos + klen]).decode("utf-8"))
        pos += klen
        vlen, pos = _varint(data, pos)
        if vlen < 0:
            values.append(None)
        else:
            values.append(bytes(data[pos : pos + vlen]))
            pos += vlen
    return pos


def _varint(data: Buffer, pos: int) -> tuple[int, int]:
    raw = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint too long")


def _headers_column(
    data: Buffer,
    header_counts: I64,
    header_pos: I64,
    ends: I64,
    header_type: pa.DataType,
) -> pa.Array:
    n = len(header_counts)
    counts = np.maximum(header_counts, 0)
    offsets = np.zeros(n + 1, dtype=np.int32)
    offsets[1:] = np.cumsum(counts)
    keys: list[str] = []
    values: list[bytes | None] = []
    for i in np.flatnonzero(counts).tolist():
        end = _read_headers(data, int(header_pos[i]), int(counts[i]), keys, values)
        if end != ends[i]:
            raise CorruptRecordError("record length does not match its content")
    struct_type = header_type.value_type
    entries = pa.StructArray.from_arrays(
        [pa.array(keys, pa.string()), pa.array(values, pa.binary())], fields=list(struct_type)
    )
    return pa.ListArray.from_arrays(pa.array(offsets), entries, type=header_type)


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
    parts: list[Buffer] = []
    counts: list[int] = []
    positions: list[tuple[int, int]] = []
    base_offsets: list[int] = []
    base_ts: list[int] = []
    max_ts: list[int] = []
    ts_types: list[int] = []
    for h in scan.headers:
        (base_offset, length, _epoch, _magic, _crc, attributes, last_delta, first_ts, last_ts,
         _pid, _pepoch, _seq, records_count, position) = h
        if attributes & CONTROL_FLAG_MASK or records_count <= 0:
            continue
        if base_offset + last_delta < start or base_offset >= end:
            continue
        payload: Buffer = mv[position + RECORD_BATCH_OVERHEAD : position + LOG_OVERHEAD + length]
        codec = attributes & COMPRESSION_CODEC_MASK
        if codec:
            payload = decompress(codec, payload)
        parts.append(payload)
        positions.append((records_count, position))
        counts.append(records_count)
        base_offsets.append(base_offset)
        base_ts.append(first_ts)
        max_ts.append(last_ts)
        ts_types.append(1 if attributes & TIMESTAMP_TYPE_MASK else 0)
    total = sum(counts)
    if total == 0:
        return _empty(include_headers, header_type)

    segments: list[tuple[int, int, int]] = []
    buf: Buffer
    if all(isinstance(p, memoryview) for p in parts):
        # Nothing compressed: decode in place, positions relative to ``data``.
        buf = mv
        for part, (h_count, h_position) in zip(parts, positions, strict=True):
            begin = h_position + RECORD_BATCH_OVERHEAD
            segments.append((begin, begin + len(part), h_count))
    else:
        pos = 0
        for part, h_count in zip(parts, counts, strict=True):
            segments.append((pos, pos + len(part), h_count))
            pos += len(part)
        buf = b"".join([*parts, bytes(_PAD)])
    a = np.frombuffer(buf, dtype=np.uint8)
    size = len(a)
    n_batches = len(counts)
    cnt = np.array(counts, dtype=np.int64)
    try:
        starts = _record_starts(buf, a, segments, total)
        lengths, p = _varints(a, starts, 5)
        ends = p + lengths
        p += 1  # record attributes
        ts_delta, p = _varints(a, p, 10)
        offset_delta, p = _varints(a, p, 5)
        key_len, p = _varints(a, p, 5)
        key_start = p
        p = p + np.maximum(key_len, 0)
        value_len, p = _varints(a, np.minimum(p, size), 5)
        value_start = p
        p = p + np.maximum(value_len, 0)
        header_count, header_pos = _varints(a, np.minimum(p, size), 5)
    except IndexError as e:  # a length pointing past the buffer
        raise CorruptRecordError(f"malformed record: {e}") from e
    if (key_len < -1).any() or (value_len < -1).any() or (header_count < 0).any():
        raise CorruptRecordError("negative length in a record")
    if (header_pos > ends).any():
        raise CorruptRecordError("record content runs past its length")
    no_headers = header_count == 0
    if not (header_pos[no_headers] == ends[no_headers]).all():
        raise CorruptRecordError("record length does not match its content")

    if n_batches == 1:
        offsets = base_offsets[0] + offset_delta
        if ts_types[0]:
            timestamps = np.full(total, max_ts[0], dtype=np.int64)
        else:
            timestamps = base_ts[0] + ts_delta
        types = np.full(total, ts_types[0], dtype=np.int32)
    else:
        offsets = np.repeat(np.array(base_offsets, dtype=np.int64), cnt) + offset_delta
        types_b = np.array(ts_types, dtype=np.int32)
        types = np.repeat(types_b, cnt)
        base = np.repeat(np.array(base_ts, dtype=np.int64), cnt) + ts_delta
        if types_b.any():
            timestamps = np.where(types == 1, np.repeat(np.array(max_ts, dtype=np.int64), cnt), base)
        else:
            timestamps = base

    keep = (offsets >= start) & (offsets < end)
    if not keep.all():
        idx = np.flatnonzero(keep)
        offsets, timestamps, types = offsets[idx], timestamps[idx], types[idx]
        key_start, key_len = key_start[idx], key_len[idx]
        value_start, value_len = value_start[idx], value_len[idx]
        header_count, header_pos, ends = header_count[idx], header_pos[idx], ends[idx]
        if len(idx) == 0:
            return _empty(include_headers, header_type)

    buffer = pa.py_buffer(buf)
    headers = None
    if include_headers:
        headers = _headers_column(buf, header_count, header_pos, ends, header_type)
    return DecodedRecords(
        keys=_binary_column(buffer, a, key_start, key_len),
        values=_binary_column(buffer, a, value_start, value_len),
        offsets=offsets,
        timestamps=timestamps,
        timestamp_types=types,
        headers=headers,
    )


def _empty(include_headers: bool, header_type: pa.DataType) -> DecodedRecords:
    return DecodedRecords(
        keys=pa.array([], pa.binary()),
        values=pa.array([], pa.binary()),
        offsets=np.zeros(0, np.int64),
        timestamps=np.zeros(0, np.int64),
        timestamp_types=np.zeros(0, np.int32),
        headers=pa.array([], header_type) if include_headers else None,
    )


def to_record_batch(
    decoded: DecodedRecords, topic: str, partition: int, schema: pa.Schema
) -> pa.RecordBatch:
    """spark-sql-kafka's row layout (``schema`` is Spark's Arrow schema of the source)."""
    n = decoded.count
    types = decoded.timestamp_types
    if n and (types == types[0]).all():
        ts_types = pa.repeat(pa.scalar(int(types[0]), pa.int32()), n)
    else:
        ts_types = pa.array(types, pa.int32())
    columns: list[pa.Array] = [
        decoded.keys,
        decoded.values,
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(decoded.offsets, pa.int64()),
        pa.array(decoded.timestamps * 1000, pa.int64()).cast(schema.field("timestamp").type),
        ts_types,
    ]
    if "headers" in schema.names:
        assert decoded.headers is not None, "decode with include_headers=True"
        columns.append(decoded.headers)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def split_batch(batch: pa.RecordBatch, rows: int) -> Sequence[pa.RecordBatch]:
    """Zero-copy slices of at most ``rows`` rows."""
    if batch.num_rows <= rows:
        return [batch]
    return [batch.slice(i, rows) for i in range(0, batch.num_rows, rows)]
