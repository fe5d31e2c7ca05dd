"""RecordBatch v2 bytes -> Arrow columns, without a Python object per record.

The executors of the data source read raw record batches (see :mod:`odradek.spark.fetcher`) and
turn them into spark-sql-kafka's columns here:

1. :func:`scan_batches` walks the 61-byte batch headers (one Python step per *batch*).
2. The records sections of the data batches in the wanted offset range are decompressed (C codecs)
   and concatenated into one buffer, so that one pass decodes every record of a fetch response.
   The decoding works on that buffer through numpy views: the bytes, and overlapping views of
   the 2, 4 and 8 bytes starting at every byte (``_Views``).
3. Record start positions: records follow each other, so each start depends on the previous
   record's length varint. A scalar loop reads the record sizes (a table lookup on 2 bytes)
   until it has seen three records of the same size, then *guesses* that a run of records has
   that size and checks the guess for the whole run at once with numpy (each record's length
   varint must be the same bytes). Fixed-size records, the common case, cost a handful of numpy
   passes; records of varying size fall back to the scalar loop, one table lookup per record.
4. Runs of same-size records are decoded column-wise when every record of the run has its
   fields at the same place: one record is parsed in Python (``_layout``), and every record of
   the run is checked to have the same length bytes, the same continuation bits in its timestamp
   and offset deltas (so the same varint widths), the same key and value length bytes and a zero
   header count in its last byte. A run splits where that stops holding. Then each field is a
   column: long runs (``_MIN_FAST_RUN`` records) are read through strided views of the batch
   while it is in the CPU's caches, one run at a time; short runs are gathered, all the runs of a
   record size at once. Varints of one or two bytes are decoded by a table lookup on 16 bits.
5. Every other record (varying sizes, headers, anything the checks refused) goes through the
   general path: each field is decoded for all those records at once, gathering 2 bytes per
   record per field (a table gives value and width; longer varints take more passes, for the
   records that have them).
6. Keys and values: for the records decoded column-wise, one strided copy per long run and one
   gather per group of short runs into the ``binary`` array's data buffer. When there are others,
   every row's bytes are copied by Arrow's C++ ``take`` from a zero-copy binary array over the
   buffer whose rows are the keys (or values) and the gaps between them. Null keys/values
   (length -1) go into a validity bitmap.
7. Headers (only when asked for) are read per record, but only for records that have any.

Control batches and records outside ``[start, end)`` are skipped. LogAppendTime batches give
every record the batch's max timestamp, as :func:`odradek.records.records.decode_records` does.
Malformed records raise :class:`~odradek.records.errors.CorruptRecordError` whichever path
decodes them (the column-wise paths leave anything unusual to the general path, which reports
it).
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
# Bytes of zeros after a buffer of decompressed records (reads through the views of a few bytes
# past the last record stay inside it; in fetched data, only the last records need care).
_PAD = 16
# Records checked at once in a first speculative run; grows while guesses hold.
_FIRST_RUN = 4096
_MIN_RUN = 256
_MAX_RUN = 1 << 20
# A guess costs a few numpy calls: only for at least this many records (else one at a time).
_MIN_GUESS = 16
# Runs of at least this many same-size records are decoded column-wise one at a time (shorter
# ones all at once per record size); a run may split this many times where its records' layout
# changes.
_MIN_FAST_RUN = 256
_FAST_SPLITS = 8
_BATCH_SIZE = struct.Struct(">qi")
_UINT64_1 = np.uint64(1)

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


class _Views(NamedTuple):
    """The decoded buffer and overlapping little-endian views of it: ``u16[i]`` is the 2 bytes at
    ``i``, ``u32[i]`` the 4 and ``u64[i]`` the 8 bytes at ``i``. A strided slice of a view reads
    one field of every record of a run; indexing with positions gathers up to 8 bytes at each."""

    a: U8
    u16: npt.NDArray[np.uint16]
    u32: npt.NDArray[np.uint32]
    u64: npt.NDArray[np.uint64]


def _views(a: U8) -> _Views:
    return _Views(a, _overlapping(a, "<u2"), _overlapping(a, "<u4"), _overlapping(a, "<u8"))


def _overlapping(a: U8, dtype: str) -> Any:
    """``a`` seen as items of ``dtype`` starting at every byte."""
    size = np.dtype(dtype).itemsize
    return np.ndarray((max(len(a) - size + 1, 0),), dtype=dtype, buffer=a, strides=(1,))


def _view_size(width: int) -> int:
    """Item size of the narrowest view holding ``width`` (1 to 8) bytes."""
    return 1 if width == 1 else 2 if width == 2 else 4 if width <= 4 else 8


def _view(v: _Views, width: int) -> Any:
    size = _view_size(width)
    return v.a if size == 1 else v.u16 if size == 2 else v.u32 if size == 4 else v.u64


def _varint16_tables() -> tuple[I64, U8]:
    """Zigzag value and width of the varint whose first two bytes are the little-endian 16 bits
    ``x`` (width 0: it is longer than 2 bytes)."""
    x = np.arange(1 << 16, dtype=np.int64)
    b0 = x & 0xFF
    b1 = x >> 8
    one = b0 < 0x80
    two = ~one & (b1 < 0x80)
    raw = np.where(one, b0, (b0 & 0x7F) | (b1 << 7))
    values: I64 = (raw >> 1) ^ -(raw & 1)
    values[~(one | two)] = 0
    widths = np.where(one, 1, np.where(two, 2, 0)).astype(np.uint8)
    return values, widths


_V16, _W16 = _varint16_tables()


def _record_size_table() -> list[int]:
    """Record size (length varint + length) by the little-endian 16 bits at the record's start,
    for 1- and 2-byte length varints (0: longer). The sign of the zigzag length is ignored:
    a record whose length is not positive fails when its fields are decoded."""
    x = np.arange(1 << 16, dtype=np.int64)
    b0 = x & 0xFF
    b1 = x >> 8
    one = b0 < 0x80
    size = np.where(one, 1 + (b0 >> 1), 2 + (((b0 & 0x7F) | (b1 << 7)) >> 1))
    size[~one & (b1 >= 0x80)] = 0
    sizes: list[int] = size.tolist()
    return sizes


_RECORD_SIZE = _record_size_table()


# ---- record boundaries ----------------------------------------------------------------------


def _scan_segment(
    data: Buffer,
    v: _Views,
    segment: tuple[int, int, int],
    row: int,
    batch: int,
    starts: list[int],
    runs: list[list[int]],
    cap: int,
) -> int:
    """Find the records of one ``(begin, end, count)`` segment: the records section of one
    batch, ``count`` records back to back filling ``data[begin:end]`` exactly, the first of
    them at ``row``.

    Records are read one by one (a scalar loop over their length varints), but after three of
    the same size the next ones are *guessed* to have that size too, and the guess is checked
    for all of them at once. Such a run of same-size records goes to ``runs`` as ``[row,
    position, record size, count, batch]``; the other records' positions go to ``starts``.
    Returns the size of the next guess.
    """
    begin, end, count = segment
    if count > (end - begin) // 7:  # a record takes at least 7 bytes
        raise CorruptRecordError(f"{count} records cannot fit in {end - begin} bytes")
    base = len(starts)  # records so far: len(starts) - base + in_runs
    in_runs = same = 0
    pos = begin
    prev = -1
    run: list[int] | None = None  # the run the current same-size records are in
    append = starts.append
    sizes = _RECORD_SIZE
    while pos < end:
        # The record's size from its length varint: a table lookup for 1- and 2-byte varints
        # (records of up to 8193 bytes). (The second byte may be the next record's.)
        rsize = sizes[data[pos] | data[pos + 1] << 8] or _long_size(data, pos)
        if rsize != prev:
            append(pos)
            prev = rsize
            same = 0
            run = None
            pos += rsize
            continue
        same += 1
        if run is None:
            append(pos)
        else:
            run[3] += 1
            in_runs += 1
        pos += rsize
        if same >= 2:
            i = len(starts) - base + in_runs
            # Guess that the next records have the same size; check them all at once.
            k = min(count - i, (end - pos) // rsize, cap)
            if k >= _MIN_GUESS:
                m = _same_length_bytes(v, pos - rsize, rsize, k)
                if m and run is None:  # the records of this size so far join the run
                    del starts[len(starts) - same - 1 :]
                    in_runs += same + 1
                    run = [row + i - 1 - same, pos - (same + 1) * rsize, rsize, same + 1, batch]
                    runs.append(run)
                if run is not None:
                    run[3] += m
                    in_runs += m
                pos += m * rsize
                # Grow while guesses hold; after a miss, aim at about the run just seen.
                cap = min(cap * 8, _MAX_RUN) if m == k else max(_MIN_RUN, 4 * m)
    i = len(starts) - base + in_runs
    if pos != end or i != count:
        raise CorruptRecordError(
            f"{i} records take {pos - begin} bytes but their batch holds {count} in "
            f"{end - begin} bytes (bad record lengths or record count)"
        )
    return cap


def _long_size(data: Buffer, pos: int) -> int:
    """The size of the record at ``pos`` whose length varint has 3 to 5 bytes (a length that
    is not positive is let through, see :func:`_scan_segment`)."""
    raw = data[pos] & 0x7F
    w = 1
    shift = 7
    while True:
        b = data[pos + w]
        w += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return w + (raw >> 1)
        shift += 7
        if shift > 28:
            raise CorruptRecordError("record length varint too long")


def _same_length_bytes(v: _Views, first: int, stride: int, k: int) -> int:
    """How many of the ``k`` records after the one at ``first`` (every ``stride`` bytes) start
    with the same length-varint bytes as it: strided views, no gather."""
    a = v.a
    width = 1
    while a[first + width - 1] & 0x80:
        width += 1
    start = first + stride
    stop = start + (k - 1) * stride + 1
    if width <= 2:
        view = _view(v, width)
        ok = view[start:stop:stride] == view[first]
    else:
        ok = a[start:stop:stride] == a[first]
        for j in range(1, width):
            ok &= a[start + j : stop + j : stride] == a[first + j]
    return k if ok.all() else int(ok.argmin())


# ---- column-wise decoding of runs -----------------------------------------------------------


class _Layout(NamedTuple):
    """Where the fields of the records of a run are, relative to each record's start."""

    ts_col: int
    ts_width: int
    offset_col: int
    offset_width: int
    key_col: int
    key_len: int  # -1: null
    value_col: int
    value_len: int  # -1: null
    # (column, width, mask or None, expected): what must hold in every record of the run
    checks: tuple[tuple[int, int, int | None, int], ...]
    reach: int  # bytes from a record's start that the views read


def _layout(data: Buffer, pos: int, size: int) -> _Layout | None:
    """The layout of the record at ``pos`` if the column-wise path can decode a run of records
    like it: a valid record without headers, with a timestamp delta of at most 8 bytes. ``None``
    otherwise (the general path decodes the run then, and says what is wrong with it)."""
    end = pos + size
    fields: list[int] = []  # column and width of each varint; value of the last three
    values: list[int] = []
    p = pos
    for limit in (5, 0, 8, 5, 5, 5):  # length, attributes, ts, offset, key length, value length
        if limit == 0:
            p += 1
            continue
        raw = shift = 0
        q = p
        while True:
            if q >= end or q - p >= limit:
                return None
            b = data[q]
            q += 1
            raw |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
        value = (raw >> 1) ^ -(raw & 1)
        fields.append(p - pos)
        fields.append(q - p)
        values.append(value)
        p = q
        if len(values) == 4:  # key length: skip the key
            if value < -1:
                return None
            p += max(value, 0)
    length, _ts, _off, key_len, value_len = values
    if value_len < -1:
        return None
    p += max(value_len, 0)
    if length != size - fields[1] or p != end - 1 or data[p] != 0:  # no headers, and the end
        return None
    width = fields[1]
    ts_col, ts_width, offset_col, offset_width, key_len_col, key_len_width = fields[2:8]
    value_len_col, value_len_width = fields[8:10]
    key_col = key_len_col + key_len_width
    # Same length bytes, same continuation bits of the timestamp and offset deltas (so the
    # same widths), same key length bytes; then the same value length bytes, and a 0 header
    # count in the last byte.
    mask = bytearray(key_col)
    mask[:width] = b"\xff" * width
    mask[ts_col:key_len_col] = b"\x80" * (key_len_col - ts_col)
    mask[key_len_col:] = b"\xff" * key_len_width
    checks: list[tuple[int, int, int | None, int]] = []
    for off in range(0, key_col, 8):
        n = min(8, key_col - off)
        chunk_mask = int.from_bytes(mask[off : off + n], "little")
        expected = int.from_bytes(data[pos + off : pos + off + n], "little") & chunk_mask
        checks.append((off, n, chunk_mask, expected))
    value_col = value_len_col + value_len_width
    expected = int.from_bytes(data[pos + value_len_col : pos + value_col], "little")
    checks.append((value_len_col, value_len_width, None, expected))
    checks.append((size - 1, 1, None, 0))
    reach = max(col + _view_size(w) for col, w, _, _ in checks)
    reach = max(reach, ts_col + _view_size(ts_width), offset_col + _view_size(offset_width))
    return _Layout(
        ts_col,
        ts_width,
        offset_col,
        offset_width,
        key_col,
        key_len,
        value_col,
        value_len,
        tuple(checks),
        reach,
    )


def _matches(x: npt.NDArray[Any], width: int, mask: int | None, expected: int) -> Any:
    """Per item of ``x`` (read through the view for ``width`` bytes): do its first ``width``
    bytes, masked, equal ``expected``?"""
    if mask is None:
        mask = (1 << 8 * width) - 1
    if mask != (1 << 8 * _view_size(width)) - 1:
        x = x & mask
    return x == expected


def _check_run(v: _Views, pos: int, size: int, k: int, lay: _Layout) -> int:
    """How many records of the run (from the first) follow ``lay``."""
    if lay.reach > size:  # the views would read past the last records of the buffer
        k = min(k, (len(v.a) - pos - lay.reach) // size + 1)
        if k <= 0:
            return 0
    ok: npt.NDArray[np.bool_] | None = None
    for col, width, mask, expected in lay.checks:
        start = pos + col
        same = _matches(_view(v, width)[start : start + (k - 1) * size + 1 : size], width, mask,
                        expected)
        if ok is None:
            ok = same
        else:
            ok &= same
    assert ok is not None
    return k if ok.all() else int(ok.argmin())


def _varint_items(x: npt.NDArray[Any], width: int, out: I64 | None = None) -> I64:
    """The zigzag varints of ``width`` bytes that start the items of ``x`` (read through the
    view for ``width`` bytes, their continuation bits checked)."""
    if width <= 2:
        values: I64 = _V16.take(x, out=out)
        return values
    x = x.astype(np.int64)
    raw = x & 0x7F
    for j in range(1, width):
        raw |= (x >> j) & (0x7F << 7 * j)
    signed: I64 = np.bitwise_xor(raw >> 1, -(raw & 1), out=out)
    return signed


def _column_varints(
    v: _Views, pos: int, stride: int, k: int, width: int, add: int, out: I64
) -> None:
    """``add`` + the zigzag varints of ``width`` bytes at ``pos``, ``pos + stride``, ... (``k``
    of them) into ``out``."""
    _varint_items(_view(v, width)[pos : pos + (k - 1) * stride + 1 : stride], width, out)
    out += add


class _Batches(NamedTuple):
    """Per data batch (= segment)."""

    base_offsets: list[int]
    base_ts: list[int]
    max_ts: list[int]
    ts_types: list[int]


# (row, count, position, record size, key column, key length, value column, value length)
_FastRun = tuple[int, int, int, int, int, int, int, int]
# (row, position, record size, count, batch)
_Run = tuple[int, int, int, int, int]


def _decode_run(
    data: Buffer,
    v: _Views,
    run: _Run,
    batches: _Batches,
    offsets: I64,
    timestamps: I64,
    fast: list[_FastRun],
    rest: list[_Run],
) -> None:
    """Decode a run of same-size records column-wise for as long as its records' layout holds
    (the run splits where it changes); the rest of it goes to ``rest``."""
    row, pos, size, count, batch = run
    for _ in range(_FAST_SPLITS):
        lay = _layout(data, pos, size)
        m = 0 if lay is None else _check_run(v, pos, size, count, lay)
        if lay is None or m < _MIN_FAST_RUN:
            break
        at = slice(row, row + m)
        _column_varints(
            v, pos + lay.offset_col, size, m, lay.offset_width, batches.base_offsets[batch],
            offsets[at],
        )
        if batches.ts_types[batch]:
            timestamps[at] = batches.max_ts[batch]
        else:
            _column_varints(
                v, pos + lay.ts_col, size, m, lay.ts_width, batches.base_ts[batch],
                timestamps[at],
            )
        fast.append((row, m, pos, size, lay.key_col, lay.key_len, lay.value_col, lay.value_len))
        row += m
        pos += m * size
        count -= m
        if count < _MIN_FAST_RUN:
            break
    if count:
        rest.append((row, pos, size, count, batch))


# (rows, record positions, column, length): keys or values of records decoded column-wise
_Group = tuple[I64, I64, int, int]


def _decode_short_runs(
    data: Buffer,
    v: _Views,
    runs: list[_Run],
    batches: _Batches,
    offsets: I64,
    timestamps: I64,
    key_groups: list[_Group],
    value_groups: list[_Group],
) -> tuple[I64, I64, I64] | None:
    """Decode the records of short runs of same-size records (too short for one strided pass
    each to pay off): all the runs of one record size at once, gathering each field from every
    record, if they have the layout of the first (then the next layout, a few times).

    Writes offsets and timestamps in place, appends where keys and values are to the groups,
    and returns (rows, positions, batches) of the records left to the general path."""
    arr = np.array(runs, dtype=np.int64)
    arr = arr[np.argsort(arr[:, 2], kind="stable")]  # by record size
    row, pos, size, count, batch = arr.T
    total = int(count.sum())
    rid = np.repeat(np.arange(len(count)), count)
    within = np.arange(total, dtype=np.int64) - (np.cumsum(count) - count)[rid]
    rows = row[rid] + within
    starts: I64 = (pos[rid] + within * size[rid]).astype(np.int64, copy=False)
    batch_of = batch[rid]
    # the records of each size: [bounds[j], bounds[j + 1])
    sizes, first = np.unique(size[rid], return_index=True)
    bounds = [*first.tolist(), total]
    base_offsets = np.array(batches.base_offsets, dtype=np.int64)
    base_ts = np.array(batches.base_ts, dtype=np.int64)
    log_append = np.array(batches.ts_types, dtype=bool)
    max_ts = np.array(batches.max_ts, dtype=np.int64)
    limit = len(v.a)
    left: list[I64] = []
    for j, rsize in enumerate(sizes.tolist()):
        todo = np.arange(bounds[j], bounds[j + 1])
        for _ in range(_FAST_SPLITS):
            lay = _layout(data, int(starts[todo[0]]), rsize)
            if lay is None:
                break
            st = starts[todo]
            ok = st <= limit - lay.reach  # the views' reads stay in the buffer
            safe = np.minimum(st, limit - lay.reach)
            for col, width, mask, expected in lay.checks:
                ok &= _matches(_view(v, width)[safe + col], width, mask, expected)
            if not ok[0]:
                break
            good = todo[ok]
            todo = todo[~ok]
            g_rows, g_starts, g_batch = rows[good], starts[good], batch_of[good]
            offsets[g_rows] = base_offsets[g_batch] + _varint_items(
                _view(v, lay.offset_width)[g_starts + lay.offset_col], lay.offset_width
            )
            ts = base_ts[g_batch] + _varint_items(
                _view(v, lay.ts_width)[g_starts + lay.ts_col], lay.ts_width
            )
            if log_append.any():
                at = log_append[g_batch]
                ts[at] = max_ts[g_batch[at]]
            timestamps[g_rows] = ts
            key_groups.append((g_rows, g_starts, lay.key_col, lay.key_len))
            value_groups.append((g_rows, g_starts, lay.value_col, lay.value_len))
            if not todo.size:
                break
        if todo.size:
            left.append(todo)
    if not left:
        return None
    rest = np.concatenate(left)
    return rows[rest], starts[rest], batch_of[rest]


# ---- the general path -----------------------------------------------------------------------


def _varints(a: U8, pos: I64, max_bytes: int) -> tuple[I64, I64]:
    """Zigzag varints starting at each of ``pos``: (values, positions after them).

    One gather of one byte per record per pass, for the records whose varint is still going.
    """
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


def _gather16(v: _Views, pos: I64) -> npt.NDArray[np.uint16]:
    """The 2 bytes at each of ``pos``; at the buffer's last byte, that byte and 0x80 (so that a
    varint going on past the buffer is read further, and fails there)."""
    try:
        return v.u16[pos]
    except IndexError:
        pass
    a = v.a
    last = len(a) - 1
    if len(pos) and (int(pos.max()) > last or int(pos.min()) < 0):
        raise IndexError("varint past the end of the records")
    x = np.full(len(pos), 0x8000, dtype=np.uint16)
    inside = pos < last
    x[inside] = v.u16[pos[inside]]
    x[~inside] |= a[last]
    return x


def _varints16(v: _Views, pos: I64, max_bytes: int) -> tuple[I64, I64]:
    """:func:`_varints`, reading 2 bytes per record at once: varints of 1 or 2 bytes (nearly
    all) cost one gather and two table lookups; longer ones go through :func:`_varints`."""
    x = _gather16(v, pos)
    values: I64 = _V16.take(x)
    widths = _W16.take(x)
    after: I64 = pos + widths
    if not widths.all():
        long = np.flatnonzero(widths == 0)
        values[long], after[long] = _varints(v.a, pos[long], max_bytes)
    return values, after


class _General(NamedTuple):
    """Fields of the records decoded by the general path."""

    rows: I64 | None  # ascending; None: all rows, in order
    key_start: I64
    key_len: I64
    value_start: I64
    value_len: I64
    header_count: I64
    header_pos: I64
    ends: I64


def _decode_general(
    v: _Views,
    rows: I64 | None,
    starts: I64,
    batch_of: I64,
    batches: _Batches,
    offsets: I64,
    timestamps: I64,
) -> _General:
    """Decode the records at ``starts`` (rows ``rows``, ascending; None: all rows) of batches
    ``batch_of``, one field at a time for all of them. Writes their offsets and timestamps in
    place."""
    try:
        # The record sizes are known (and were checked against the batches), but not how each
        # divides into length varint and the rest.
        length, p = _varints16(v, starts, 5)
        if length.min() <= 0:
            raise CorruptRecordError(f"impossible record length {int(length.min())}")
        ends = p + length
        p += 1  # record attributes
        ts_delta, p = _varints16(v, p, 10)
        offset_delta, p = _varints16(v, p, 5)
        key_len, key_start = _varints16(v, p, 5)
        value_len, value_start = _varints16(v, key_start + np.maximum(key_len, 0), 5)
        header_count, header_pos = _varints16(v, value_start + np.maximum(value_len, 0), 5)
    except IndexError as e:  # a length pointing past the buffer
        raise CorruptRecordError(f"malformed record: {e}") from e
    if key_len.min() < -1 or value_len.min() < -1 or header_count.min() < 0:
        raise CorruptRecordError("negative length in a record")
    left = ends - header_pos  # the headers' bytes
    if left.any():
        if left.min() < 0:
            raise CorruptRecordError("record content runs past its length")
        if ((left != 0) & (header_count == 0)).any():
            raise CorruptRecordError("record length does not match its content")

    base_offsets = np.array(batches.base_offsets, dtype=np.int64)
    base_ts = np.array(batches.base_ts, dtype=np.int64)
    if len(base_offsets) == 1:
        offset_delta += base_offsets[0]
        if batches.ts_types[0]:
            ts_delta[:] = batches.max_ts[0]
        else:
            ts_delta += base_ts[0]
    else:
        offset_delta += base_offsets.take(batch_of)
        ts_delta += base_ts.take(batch_of)
        if any(batches.ts_types):
            log_append = np.array(batches.ts_types, dtype=bool).take(batch_of)
            ts_delta[log_append] = np.array(batches.max_ts, dtype=np.int64).take(
                batch_of[log_append]
            )
    if rows is None:
        offsets[:] = offset_delta
        timestamps[:] = ts_delta
    else:
        offsets[rows] = offset_delta
        timestamps[rows] = ts_delta
    return _General(
        rows, key_start, key_len, value_start, value_len, header_count, header_pos, ends
    )


# ---- keys, values and headers ---------------------------------------------------------------


def _binary_column(buffer: pa.Buffer, starts: I64, lengths: I64) -> pa.Array:
    """Binary array of ``buffer[start:start+length]`` per row; length -1 is null. ``starts``
    ascend, and the slices do not overlap.

    The rows and the gaps between them are the 2n rows of a binary array over ``buffer`` (no
    copy: offsets only); taking its even rows makes Arrow's C++ kernel copy the bytes.
    """
    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary())
    lens = np.maximum(lengths, 0)
    offsets = np.empty(2 * n + 1, dtype=np.int32)
    offsets[0 : 2 * n : 2] = starts
    offsets[1 : 2 * n : 2] = starts + lens
    offsets[2 * n] = offsets[2 * n - 1]
    spans = pa.Array.from_buffers(pa.binary(), 2 * n, [None, pa.py_buffer(offsets), buffer])
    column = spans.take(pa.array(np.arange(0, 2 * n, 2)))
    valid = lengths >= 0
    if valid.all():
        return column
    _, out_offsets, out_data = column.buffers()
    validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(), n, [validity, out_offsets, out_data])


def _binary_output(
    buffer: pa.Buffer,
    v: _Views,
    n: int,
    runs: list[tuple[int, int, int, int, int, int]],
    groups: list[_Group],
    general: tuple[I64 | None, I64, I64] | None,
) -> pa.Array:
    """Binary column of ``n`` rows, of the keys or values of: the long runs ``(row, count,
    position, record size, column, length)`` (``count`` rows of ``length`` bytes at ``column``
    of records of ``size`` bytes from ``position``), the ``groups`` (rows, record positions,
    column, length) decoded column-wise, and the rows decoded by the general path (rows or
    None for all, starts, lengths)."""
    if general is not None:  # every row's bytes through Arrow's take
        rows, g_starts, g_lens = general
        if rows is None:
            return _binary_column(buffer, g_starts, g_lens)
        starts = np.empty(n, dtype=np.int64)
        lens = np.empty(n, dtype=np.int64)
        for row, count, pos, size, col, width in runs:
            starts[row : row + count] = np.arange(pos + col, pos + col + count * size, size)
            lens[row : row + count] = width
        for g_rows, positions, col, width in groups:
            starts[g_rows] = positions + col
            lens[g_rows] = width
        starts[rows] = g_starts
        lens[rows] = g_lens
        return _binary_column(buffer, starts, lens)
    # Only fixed columns: one strided copy per long run, one gather per group.
    a = v.a
    widths = {r[5] for r in runs} | {g[3] for g in groups}
    validity = None
    if len(widths) == 1:
        width = widths.pop()
        if width < 0:
            validity = pa.py_buffer(np.zeros((n + 7) // 8, dtype=np.uint8))
        # (keys and values are parts of the buffer, which holds less than 2 GiB)
        offsets = np.arange(n + 1, dtype=np.int32)
        offsets *= max(width, 0)
    else:
        lens = np.empty(n, dtype=np.int64)
        for row, count, _pos, _size, _col, width in runs:
            lens[row : row + count] = width
        for g_rows, _positions, _col, width in groups:
            lens[g_rows] = width
        valid = lens >= 0
        if not valid.all():
            validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(np.maximum(lens, 0), out=offsets[1:])
    total = int(offsets[-1])
    data_buffer = pa.allocate_buffer(total)
    data = np.frombuffer(data_buffer, dtype=np.uint8)
    items: dict[int, Any] = {}  # the buffer as items of each width, starting at every byte
    for row, count, pos, size, col, width in runs:
        if width > 0:
            if width not in items:
                items[width] = _overlapping(a, f"V{width}")
            at = int(offsets[row])
            start = pos + col
            dst = data[at : at + count * width].view(f"V{width}")
            dst[...] = items[width][start : start + (count - 1) * size + 1 : size]
    for g_rows, positions, col, width in groups:
        if width > 0:
            if width not in items:
                items[width] = _overlapping(a, f"V{width}")
            _overlapping(data, f"V{width}")[offsets[g_rows]] = items[width][positions + col]
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets), data_buffer])


def _read_headers(
    data: Buffer, pos: int, count: int, keys: list[str], values: list[bytes | None]
) -> int:
    for _ in range(count):
        klen, pos = _varint(data, pos)
        if klen < 0:
            raise CorruptRecordError("null header key")
        try:
            keys.append(bytes(data[pos : pos + klen]).decode("utf-8"))
        except UnicodeDecodeError as e:
            raise CorruptRecordError(f"header key is not UTF-8: {e}") from e
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


# ---- decode_records -------------------------------------------------------------------------

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
    batches = _Batches([], [], [], [])
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
    v = _views(a)
    offsets = np.empty(total, dtype=np.int64)
    timestamps = np.empty(total, dtype=np.int64)

    # Per batch: find the records, and decode the long runs of same-size records whose fields
    # all sit at the same place column-wise, while the batch is in the CPU's caches.
    starts: list[int] = []  # records not in runs
    seg_starts: list[int] = []  # len(starts) after each segment
    runs: list[list[int]] = []  # [row, position, record size, count, batch]
    fast: list[_FastRun] = []
    rest: list[_Run] = []  # short runs, and what the column-wise pass left of long ones
    cap = _FIRST_RUN
    row = 0
    try:
        for batch, segment in enumerate(segments):
            if segment[2] == 1:  # one record (small batches: spare the scan's set-up)
                begin = segment[0]
                size = _RECORD_SIZE[buf[begin] | buf[begin + 1] << 8] or _long_size(buf, begin)
                if size != segment[1] - begin:
                    raise CorruptRecordError(
                        f"a record of {size} bytes in a batch of {segment[1] - begin}"
                    )
                starts.append(begin)
                seg_starts.append(len(starts))
                row += 1
                continue
            first_run = len(runs)
            cap = _scan_segment(buf, v, segment, row, batch, starts, runs, cap)
            for run in runs[first_run:]:
                piece = (run[0], run[1], run[2], run[3], run[4])
                if run[3] >= _MIN_FAST_RUN:
                    _decode_run(buf, v, piece, batches, offsets, timestamps, fast, rest)
                else:
                    rest.append(piece)
            seg_starts.append(len(starts))
            row += segment[2]
    except IndexError as e:  # a length varint running past the buffer
        raise CorruptRecordError(f"malformed record: {e}") from e

    # The short runs, gathering each field of all their records at once.
    key_groups: list[_Group] = []
    value_groups: list[_Group] = []
    left = None
    if rest:
        left = _decode_short_runs(
            buf, v, rest, batches, offsets, timestamps, key_groups, value_groups
        )

    # Everything else, one field at a time for all records at once.
    general: _General | None = None
    if starts or left is not None:
        g_rows, g_starts, g_batch = _general_rows(total, starts, seg_starts, runs, left)
        general = _decode_general(v, g_rows, g_starts, g_batch, batches, offsets, timestamps)

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
    keys = _binary_output(
        buffer, v, total, [(f[0], f[1], f[2], f[3], f[4], f[5]) for f in fast], key_groups,
        None if g is None else (g.rows, g.key_start, g.key_len),
    )
    values = _binary_output(
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
        headers = _headers_column(buf, header_count, header_pos, ends, header_type)
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


def to_record_batch(
    decoded: DecodedRecords, topic: str, partition: int, schema: pa.Schema
) -> pa.RecordBatch:
    """spark-sql-kafka's row layout (``schema`` is Spark's Arrow schema of the source)."""
    n = decoded.count
    types = decoded.timestamp_types
    if n and (types == types[0]).all():
        ts_types = pa.array(np.full(n, types[0], dtype=np.int32))
    else:
        ts_types = pa.array(types, pa.int32())
    columns: list[pa.Array] = [
        decoded.keys,
        decoded.values,
        _repeat_string(topic, n),
        pa.array(np.full(n, partition, dtype=np.int32)),
        pa.array(decoded.offsets, pa.int64()),
        pa.array(decoded.timestamps * 1000, pa.int64()).cast(schema.field("timestamp").type),
        ts_types,
    ]
    if "headers" in schema.names:
        assert decoded.headers is not None, "decode with include_headers=True"
        columns.append(decoded.headers)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _repeat_string(text: str, n: int) -> pa.Array:
    """``n`` times ``text`` as an Arrow string array (numpy-built: faster than ``pa.repeat``)."""
    data = text.encode("utf-8")
    if n * len(data) >= 2**31:
        return pa.repeat(pa.scalar(text, pa.string()), n)
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(data))
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)]
    )


def split_batch(batch: pa.RecordBatch, rows: int) -> Sequence[pa.RecordBatch]:
    """Zero-copy slices of at most ``rows`` rows."""
    if batch.num_rows <= rows:
        return [batch]
    return [batch.slice(i, rows) for i in range(0, batch.num_rows, rows)]
