"""Walking the records of a v2 batch without holding them: the records section arrives in pieces
(see :func:`odradek.records.compression.iter_decompress`) and only what a check needs is kept --
per record its index, offset delta, timestamp delta and whether it has a key. Memory stays at a
piece or two whatever the batch expands to: keys, values and headers are skipped as they stream by.

The structure is checked as :func:`odradek.records.recompress.check_records` documents: every
record parses and ends where its length says, no null header keys, exactly the declared number of
records and nothing after them (:class:`InvalidRecordError`, INVALID_RECORD, as Kafka answers a
batch whose records do not parse).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from odradek.records.errors import InvalidRecordError

# A record at most this long is parsed in one contiguous piece; longer ones (large values) are
# parsed field by field and their contents skipped.
_CONTIGUOUS_MAX = 64 * 1024
_VARINT_MAX = 10


class RecordInfo(NamedTuple):
    batch_index: int
    offset_delta: int
    timestamp_delta: int
    has_key: bool


def _varint(buf: bytes, pos: int, limit: int) -> tuple[int, int]:
    """A zigzag varint at ``pos`` that must end by ``limit``."""
    result = 0
    shift = 0
    while True:
        if pos >= limit:
            raise InvalidRecordError("a record is truncated")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise InvalidRecordError("a record holds a varint longer than 10 bytes")


class _Stream:
    """The unread part of a records section: ``buf[pos:]`` plus the pieces still to come."""

    __slots__ = ("buf", "done", "pieces", "pos")

    def __init__(self, pieces: Iterable[bytes | bytearray | memoryview]) -> None:
        self.pieces = iter(pieces)
        self.buf = b""
        self.pos = 0
        self.done = False

    def fill(self, n: int) -> bool:
        """Make ``n`` bytes contiguous at ``pos`` if that many remain; True if they do."""
        while len(self.buf) - self.pos < n and not self.done:
            piece = next(self.pieces, None)
            if piece is None:
                self.done = True
                break
            if not piece:
                continue
            if self.pos < len(self.buf):
                self.buf = self.buf[self.pos :] + bytes(piece)
            else:
                self.buf = bytes(piece)
            self.pos = 0
        return len(self.buf) - self.pos >= n

    def varint(self) -> tuple[int, int]:
        """(value, bytes it took) of the varint at ``pos``."""
        self.fill(_VARINT_MAX)
        start = self.pos
        value, self.pos = _varint(self.buf, start, len(self.buf))
        return value, self.pos - start

    def skip(self, n: int) -> None:
        while True:
            avail = len(self.buf) - self.pos
            if avail >= n:
                self.pos += n
                return
            n -= avail
            self.buf = b""
            self.pos = 0
            if not self.fill(1):
                raise InvalidRecordError("a record is truncated")


def _parse_contiguous(
    buf: bytes, pos: int, end: int, index: int
) -> tuple[int, int, int]:
    """(timestamp delta, offset delta, key length) of a record whose body is ``buf[pos:end]``."""
    pos += 1  # record attributes (unused in v2)
    ts_delta, pos = _varint(buf, pos, end)
    offset_delta, pos = _varint(buf, pos, end)
    key_len, pos = _varint(buf, pos, end)
    if key_len >= 0:
        pos += key_len
    elif key_len != -1:
        raise InvalidRecordError(f"record {index} has an invalid key length {key_len}")
    value_len, pos = _varint(buf, pos, end)
    if value_len >= 0:
        pos += value_len
    elif value_len != -1:
        raise InvalidRecordError(f"record {index} has an invalid value length {value_len}")
    header_count, pos = _varint(buf, pos, end)
    if header_count < 0:
        raise InvalidRecordError(f"record {index} has a negative header count {header_count}")
    for _ in range(header_count):
        hkey_len, pos = _varint(buf, pos, end)
        if hkey_len < 0:
            raise InvalidRecordError(f"record {index} has a null header key")
        pos += hkey_len
        hval_len, pos = _varint(buf, pos, end)
        if hval_len >= 0:
            pos += hval_len
        elif hval_len != -1:
            raise InvalidRecordError(
                f"record {index} has an invalid header value length {hval_len}"
            )
    if pos != end:
        raise InvalidRecordError(
            f"record {index} has {end - pos} bytes more or less than its length says"
        )
    return ts_delta, offset_delta, key_len


def _parse_streaming(s: _Stream, length: int, index: int) -> tuple[int, int, int]:
    """As :func:`_parse_contiguous` for a record too long to hold: its fields are read as they
    come and its key, value and header contents skipped."""
    consumed = 0

    def varint() -> int:
        nonlocal consumed
        value, n = s.varint()
        consumed += n
        if consumed > length:
            raise InvalidRecordError(f"record {index} is longer than its length says")
        return value

    def skip(n: int) -> None:
        nonlocal consumed
        consumed += n
        if consumed > length:
            raise InvalidRecordError(f"record {index} is longer than its length says")
        s.skip(n)

    skip(1)  # attributes
    ts_delta = varint()
    offset_delta = varint()
    key_len = varint()
    if key_len >= 0:
        skip(key_len)
    elif key_len != -1:
        raise InvalidRecordError(f"record {index} has an invalid key length {key_len}")
    value_len = varint()
    if value_len >= 0:
        skip(value_len)
    elif value_len != -1:
        raise InvalidRecordError(f"record {index} has an invalid value length {value_len}")
    header_count = varint()
    if header_count < 0:
        raise InvalidRecordError(f"record {index} has a negative header count {header_count}")
    for _ in range(header_count):
        hkey_len = varint()
        if hkey_len < 0:
            raise InvalidRecordError(f"record {index} has a null header key")
        skip(hkey_len)
        hval_len = varint()
        if hval_len >= 0:
            skip(hval_len)
        elif hval_len != -1:
            raise InvalidRecordError(
                f"record {index} has an invalid header value length {hval_len}"
            )
    if consumed != length:
        raise InvalidRecordError(
            f"record {index} has {length - consumed} bytes more or less than its length says"
        )
    return ts_delta, offset_delta, key_len


def _one(s: _Stream, index: int, records_count: int) -> tuple[int, int, int]:
    """The record at ``s.pos``, however it lies across pieces: (ts delta, offset delta, key
    length)."""
    if not s.fill(1):
        raise InvalidRecordError(f"the batch declares {records_count} records but holds {index}")
    s.fill(_VARINT_MAX)
    length, pos = _varint(s.buf, s.pos, len(s.buf))
    if length <= 0:
        raise InvalidRecordError(f"record {index} claims {length} bytes")
    s.pos = pos
    if length > _CONTIGUOUS_MAX:
        return _parse_streaming(s, length, index)
    if not s.fill(length):
        raise InvalidRecordError(
            f"record {index} claims {length} bytes, {len(s.buf) - s.pos} remain in the batch"
        )
    end = s.pos + length
    fields = _parse_contiguous(s.buf, s.pos, end, index)
    s.pos = end
    return fields


def scan_records(
    pieces: Iterable[bytes | bytearray | memoryview],
    records_count: int,
    *,
    check_offsets: bool = False,
) -> Iterator[RecordInfo]:
    """The records of an uncompressed records section given in ``pieces``, one
    :class:`RecordInfo` each, checking the structure as it goes. With ``check_offsets`` the
    offset deltas must run 0, 1, 2, ...

    Stops reading once the declared ``records_count`` records are read and one more byte is
    seen (an error): a section holding more than it declares is never read to its end."""
    s = _Stream(pieces)
    index = 0
    while index < records_count:
        # Fast path: the records lying whole in the current piece, parsed with locals and
        # one-byte varints inline (the common case for every field of a small record).
        buf = s.buf
        pos = s.pos
        blen = len(buf)
        while index < records_count and pos < blen:
            b = buf[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                p = pos + 1
            elif blen - pos >= _VARINT_MAX:
                length, p = _varint(buf, pos, blen)
            else:
                break
            end = p + length
            if length <= 0 or end > blen:
                break
            p += 1  # attributes
            if p < end and buf[p] < 0x80:
                b = buf[p]
                ts_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                ts_delta, p = _varint(buf, p, end)
            if p < end and buf[p] < 0x80:
                b = buf[p]
                offset_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                offset_delta, p = _varint(buf, p, end)
            if p < end and buf[p] < 0x80:
                b = buf[p]
                key_len = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                key_len, p = _varint(buf, p, end)
            if key_len >= 0:
                p += key_len
            elif key_len != -1:
                raise InvalidRecordError(f"record {index} has an invalid key length {key_len}")
            if p < end and buf[p] < 0x80:
                b = buf[p]
                value_len = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                value_len, p = _varint(buf, p, end)
            if value_len >= 0:
                p += value_len
            elif value_len != -1:
                raise InvalidRecordError(f"record {index} has an invalid value length {value_len}")
            if p == end - 1 and buf[p] == 0:  # no headers
                p = end
            else:
                # headers, or something wrong: the general parser checks it all
                _parse_contiguous(buf, end - length, end, index)
                p = end
            if check_offsets and offset_delta != index:
                raise InvalidRecordError(
                    f"record {index} of the batch has offset delta {offset_delta}, "
                    f"expected {index}"
                )
            yield RecordInfo(index, offset_delta, ts_delta, key_len >= 0)
            index += 1
            pos = end
        s.pos = pos
        if index >= records_count:
            break
        # One record across pieces (or the next piece is needed): the general path.
        ts_delta, offset_delta, key_len = _one(s, index, records_count)
        if check_offsets and offset_delta != index:
            raise InvalidRecordError(
                f"record {index} of the batch has offset delta {offset_delta}, expected {index}"
            )
        yield RecordInfo(index, offset_delta, ts_delta, key_len >= 0)
        index += 1
    if s.fill(1):
        raise InvalidRecordError(f"bytes follow the {records_count} records the batch declares")
