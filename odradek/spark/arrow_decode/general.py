"""The general path (see the package docstring, step 5): every record the column-wise paths did
not take, decoded one field at a time for all of them at once."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from odradek.records.errors import CorruptRecordError
from odradek.spark.arrow_decode.boundaries import Batches
from odradek.spark.arrow_decode.views import I64, U8, V16, W16, Views

_UINT64_1 = np.uint64(1)


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


def _gather16(v: Views, pos: I64) -> npt.NDArray[np.uint16]:
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


def _varints16(v: Views, pos: I64, max_bytes: int) -> tuple[I64, I64]:
    """:func:`_varints`, reading 2 bytes per record at once: varints of 1 or 2 bytes (nearly
    all) cost one gather and two table lookups; longer ones go through :func:`_varints`."""
    x = _gather16(v, pos)
    values: I64 = V16.take(x)
    widths = W16.take(x)
    after: I64 = pos + widths
    if not widths.all():
        long = np.flatnonzero(widths == 0)
        values[long], after[long] = _varints(v.a, pos[long], max_bytes)
    return values, after


class General(NamedTuple):
    """Fields of the records decoded by the general path."""

    rows: I64 | None  # ascending; None: all rows, in order
    key_start: I64
    key_len: I64
    value_start: I64
    value_len: I64
    header_count: I64
    header_pos: I64
    ends: I64


def decode_general(
    v: Views,
    rows: I64 | None,
    starts: I64,
    batch_of: I64,
    batches: Batches,
    offsets: I64,
    timestamps: I64,
) -> General:
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
    return General(
        rows, key_start, key_len, value_start, value_len, header_count, header_pos, ends
    )

