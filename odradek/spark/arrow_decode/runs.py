"""Column-wise decoding of runs of same-size records whose fields all sit at the same place
(see the package docstring, step 4): long runs through strided views one at a time, short runs
gathered, all the runs of one record size at once."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from odradek.spark.arrow_decode.boundaries import Batches, Run
from odradek.spark.arrow_decode.views import I64, V16, Buffer, Views, view, view_size

# Runs of at least this many same-size records are decoded column-wise one at a time (shorter
# ones all at once per record size); a run may split this many times where its records' layout
# changes.
_MIN_FAST_RUN = 256
_FAST_SPLITS = 8


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
    reach = max(col + view_size(w) for col, w, _, _ in checks)
    reach = max(reach, ts_col + view_size(ts_width), offset_col + view_size(offset_width))
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
    if mask != (1 << 8 * view_size(width)) - 1:
        x = x & mask
    return x == expected


def _check_run(v: Views, pos: int, size: int, k: int, lay: _Layout) -> int:
    """How many records of the run (from the first) follow ``lay``."""
    if lay.reach > size:  # the views would read past the last records of the buffer
        k = min(k, (len(v.a) - pos - lay.reach) // size + 1)
        if k <= 0:
            return 0
    ok: npt.NDArray[np.bool_] | None = None
    for col, width, mask, expected in lay.checks:
        start = pos + col
        same = _matches(view(v, width)[start : start + (k - 1) * size + 1 : size], width, mask,
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
        values: I64 = V16.take(x, out=out)
        return values
    x = x.astype(np.int64)
    raw = x & 0x7F
    for j in range(1, width):
        raw |= (x >> j) & (0x7F << 7 * j)
    signed: I64 = np.bitwise_xor(raw >> 1, -(raw & 1), out=out)
    return signed


def _column_varints(
    v: Views, pos: int, stride: int, k: int, width: int, add: int, out: I64
) -> None:
    """``add`` + the zigzag varints of ``width`` bytes at ``pos``, ``pos + stride``, ... (``k``
    of them) into ``out``."""
    _varint_items(view(v, width)[pos : pos + (k - 1) * stride + 1 : stride], width, out)
    out += add


# (row, count, position, record size, key column, key length, value column, value length)
FastRun = tuple[int, int, int, int, int, int, int, int]


def decode_runs(
    data: Buffer,
    v: Views,
    runs: list[list[int]],
    batches: Batches,
    offsets: I64,
    timestamps: I64,
    fast: list[FastRun],
    rest: list[Run],
) -> None:
    """The runs ``[row, position, record size, count, batch]`` found in one batch: each long
    one decoded column-wise now (the batch is in the CPU's caches), what is left to ``rest``."""
    for run in runs:
        piece = (run[0], run[1], run[2], run[3], run[4])
        if run[3] >= _MIN_FAST_RUN:
            _decode_run(data, v, piece, batches, offsets, timestamps, fast, rest)
        else:
            rest.append(piece)


def _decode_run(
    data: Buffer,
    v: Views,
    run: Run,
    batches: Batches,
    offsets: I64,
    timestamps: I64,
    fast: list[FastRun],
    rest: list[Run],
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
Group = tuple[I64, I64, int, int]


def decode_short_runs(
    data: Buffer,
    v: Views,
    runs: list[Run],
    batches: Batches,
    offsets: I64,
    timestamps: I64,
    key_groups: list[Group],
    value_groups: list[Group],
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
                ok &= _matches(view(v, width)[safe + col], width, mask, expected)
            if not ok[0]:
                break
            good = todo[ok]
            todo = todo[~ok]
            g_rows, g_starts, g_batch = rows[good], starts[good], batch_of[good]
            offsets[g_rows] = base_offsets[g_batch] + _varint_items(
                view(v, lay.offset_width)[g_starts + lay.offset_col], lay.offset_width
            )
            ts = base_ts[g_batch] + _varint_items(
                view(v, lay.ts_width)[g_starts + lay.ts_col], lay.ts_width
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

