"""scan_records: walking a records section that arrives in pieces, wherever the pieces split it
(inside a varint, a key, a 200 KB value, a header), gives what decoding the whole batch gives;
malformed sections are refused the same way in every split."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from odradek.records import InvalidRecordError, build_batch, decode_batch
from odradek.records.batch import RECORD_BATCH_OVERHEAD
from odradek.records.recompress import check_records
from odradek.records.scan import scan_records
from odradek.records.varint import encode_varint

RecordTuple = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def _records(rng: random.Random, n: int) -> list[RecordTuple]:
    out: list[RecordTuple] = []
    for i in range(n):
        big = rng.random() < 0.15
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randint(70_000, 200_000) if big else rng.randint(0, 300))
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 80_000 if big else 40))
        headers = [(f"h{j}", None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 20))) for j in range(rng.randint(0, 3))]
        out.append((key, value, headers, 1_000 + rng.randint(-50, 50) + i))
    return out


def _split(rng: random.Random, data: bytes) -> list[bytes]:
    pieces = []
    pos = 0
    while pos < len(data):
        n = rng.choice([1, 2, 3, 7, 100, 4096, 65536, 150_000])
        pieces.append(data[pos : pos + n])
        pos += n
    return pieces


@pytest.mark.parametrize("seed", range(8))
def test_any_split_gives_what_decoding_gives(seed: int) -> None:
    rng = random.Random(seed)
    recs = _records(rng, rng.randint(1, 40))
    batch = build_batch(recs)
    section = batch[RECORD_BATCH_OVERHEAD:]
    decoded = decode_batch(batch)
    base_ts = decoded[0].timestamp
    expected = [(i, r.offset, r.timestamp - base_ts, r.key is not None) for i, r in enumerate(decoded)]
    for pieces in ([section], _split(rng, section), [section[i : i + 1] for i in range(min(len(section), 3000))] + [section[3000:]]):
        got = [tuple(x) for x in scan_records(pieces, len(recs), check_offsets=True)]
        assert got == expected


def _record(offset_delta: int, value: bytes = b"v", extra: bytes = b"") -> bytes:
    body = b"\x00" + encode_varint(0) + encode_varint(offset_delta) + encode_varint(-1)
    body += encode_varint(len(value)) + value + encode_varint(0) + extra
    return encode_varint(len(body)) + body


BIG = bytes(100_000)


@pytest.mark.parametrize(
    ("section", "count", "needle"),
    [
        (_record(0) + _record(1), 3, "declares 3 records but holds 2"),
        (_record(0) + _record(1) + b"\x00", 2, "follow"),
        (_record(0, BIG) + b"\x00", 1, "follow"),
        (_record(0) + _record(1)[:-1], 2, "claims|truncated"),
        (_record(0, BIG)[:-10], 1, "truncated"),
        (_record(0, extra=b"zz"), 1, "more or less"),
        (_record(0, BIG, extra=b"zz"), 1, "more or less"),
        (_record(0) + _record(2), 2, "offset delta 2"),
        (_record(0, BIG) + _record(3, BIG), 2, "offset delta 3"),
    ],
)
def test_malformed_sections_are_refused_in_any_split(section: bytes, count: int, needle: str) -> None:
    rng = random.Random(len(section))
    for pieces in ([section], _split(rng, section), [section[:1], section[1:]]):
        with pytest.raises(InvalidRecordError, match=needle):
            for _ in scan_records(pieces, count, check_offsets=True):
                pass
    with pytest.raises(InvalidRecordError, match=needle):
        check_records(section, count)


def test_extra_records_stop_the_scan_without_reading_the_rest() -> None:
    consumed = []

    def pieces() -> Iterator[bytes]:
        for i in range(1_000_000):
            consumed.append(i)
            yield _record(i)

    with pytest.raises(InvalidRecordError, match="follow"):
        for _ in scan_records(pieces(), 3):
            pass
    assert len(consumed) == 4
