"""Where batches and records are: the batch headers of a fetched buffer (one Python step per
batch), and the record start positions inside each batch's records section, with the runs of
same-size records found by guessing (see the package docstring, steps 1 and 3)."""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from odradek.records.batch import (
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
)
from odradek.records.errors import CorruptRecordError, UnsupportedMagicError
from odradek.spark.arrow_decode.views import RECORD_SIZE, Buffer, Views, view

# Records checked at once in a first speculative run; grows while guesses hold.
FIRST_RUN = 4096
_MIN_RUN = 256
_MAX_RUN = 1 << 20
# A guess costs a few numpy calls: only for at least this many records (else one at a time).
_MIN_GUESS = 16
_BATCH_SIZE = struct.Struct(">qi")


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


class Batches(NamedTuple):
    """Per data batch (= segment)."""

    base_offsets: list[int]
    base_ts: list[int]
    max_ts: list[int]
    ts_types: list[int]

# (row, position, record size, count, batch)
Run = tuple[int, int, int, int, int]


def scan_segment(
    data: Buffer,
    v: Views,
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
    sizes = RECORD_SIZE
    while pos < end:
        # The record's size from its length varint: a table lookup for 1- and 2-byte varints
        # (records of up to 8193 bytes). (The second byte may be the next record's.)
        rsize = sizes[data[pos] | data[pos + 1] << 8] or long_size(data, pos)
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


def long_size(data: Buffer, pos: int) -> int:
    """The size of the record at ``pos`` whose length varint has 3 to 5 bytes (a length that
    is not positive is let through, see :func:`scan_segment`)."""
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


def _same_length_bytes(v: Views, first: int, stride: int, k: int) -> int:
    """How many of the ``k`` records after the one at ``first`` (every ``stride`` bytes) start
    with the same length-varint bytes as it: strided views, no gather."""
    a = v.a
    width = 1
    while a[first + width - 1] & 0x80:
        width += 1
    start = first + stride
    stop = start + (k - 1) * stride + 1
    if width <= 2:
        items = view(v, width)
        ok = items[start:stop:stride] == items[first]
    else:
        ok = a[start:stop:stride] == a[first]
        for j in range(1, width):
            ok &= a[start + j : stop + j : stride] == a[first + j]
    return k if ok.all() else int(ok.argmin())

