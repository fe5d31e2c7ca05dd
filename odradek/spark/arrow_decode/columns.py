"""The Arrow side (see the package docstring, steps 6 and 7): the decoded columns, the keys',
values' and headers' arrays built from where the decoding found them, and spark-sql-kafka's
row layout."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from odradek.records.errors import CorruptRecordError
from odradek.spark.arrow_decode.runs import Group
from odradek.spark.arrow_decode.views import I64, Buffer, Views, overlapping

HEADERS_TYPE = pa.list_(
    pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
)


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


def binary_output(
    buffer: pa.Buffer,
    v: Views,
    n: int,
    runs: list[tuple[int, int, int, int, int, int]],
    groups: list[Group],
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
                items[width] = overlapping(a, f"V{width}")
            at = int(offsets[row])
            start = pos + col
            dst = data[at : at + count * width].view(f"V{width}")
            dst[...] = items[width][start : start + (count - 1) * size + 1 : size]
    for g_rows, positions, col, width in groups:
        if width > 0:
            if width not in items:
                items[width] = overlapping(a, f"V{width}")
            overlapping(data, f"V{width}")[offsets[g_rows]] = items[width][positions + col]
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


def headers_column(
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
