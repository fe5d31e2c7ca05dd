"""RecordBatch v2 -> Arrow decoding of the data source, against the record-by-record decoder."""

from __future__ import annotations

import contextlib
import random
import struct
from collections.abc import Iterator

import pytest

pa = pytest.importorskip("pyarrow")
np = pytest.importorskip("numpy")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from odradek.records.batch import (  # noqa: E402
    HEADER_STRUCT,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    parse_header,
)
from odradek.records.builder import build_batch, encode_record  # noqa: E402
from odradek.records.compression import compress  # noqa: E402
from odradek.records.errors import CorruptRecordError, UnsupportedMagicError  # noqa: E402
from odradek.records.records import Record, decode_batch  # noqa: E402
from odradek.records.varint import decode_varint  # noqa: E402
from odradek.spark.arrow_decode import (  # noqa: E402
    HEADERS_TYPE,
    boundaries,
    decode_records,
    decoder,
    runs,
    scan_batches,
    to_record_batch,
)

BASE_TS = 1_700_000_000_000

blobs = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.tuples(st.text(max_size=6), blobs), max_size=3)
records = st.tuples(
    blobs,
    blobs,
    st.one_of(st.just([]), headers),
    st.integers(min_value=-5_000, max_value=10**7).map(lambda d: BASE_TS + d),
)
batch_specs = st.tuples(
    st.lists(records, min_size=1, max_size=40),
    st.integers(min_value=0, max_value=4),  # codec
    st.integers(min_value=0, max_value=1),  # timestamp type
    st.booleans(),  # control batch
    st.integers(min_value=0, max_value=3),  # offset gap before the batch (compaction)
)


def build(specs: list[tuple[list, int, int, bool, int]]) -> bytes:
    out = bytearray()
    offset = 0
    for recs, codec, ts_type, control, gap in specs:
        offset += gap
        out += build_batch(
            recs,
            base_offset=offset,
            compression=codec,
            timestamp_type=ts_type,
            is_control=control,
            is_transactional=control,
        )
        offset += len(recs)
    return bytes(out)


def expected(data: bytes, start: int, end: int) -> list[Record]:
    out: list[Record] = []
    pos = 0
    while pos < len(data):
        header = parse_header(data, pos)
        if not header.is_control:
            out += decode_batch(data[pos : pos + header.size])
        pos += header.size
    return [r for r in out if start <= r.offset < end]


def columns(data: bytes, start: int, end: int, include_headers: bool) -> dict:
    """What :func:`decode_records` must return, from the record-by-record decoder."""
    want = expected(data, start, end)
    types = []
    pos = 0
    while pos < len(data):
        h = parse_header(data, pos)
        if not h.is_control:
            types += [h.timestamp_type] * len(
                [r for r in decode_batch(data[pos : pos + h.size]) if start <= r.offset < end]
            )
        pos += h.size
    return {
        "offsets": [r.offset for r in want],
        "keys": [r.key for r in want],
        "values": [r.value for r in want],
        "timestamps": [r.timestamp for r in want],
        "timestamp_types": types,
        "headers": [[{"key": k, "value": v} for k, v in r.headers] for r in want]
        if include_headers
        else None,
    }


def decoded_columns(data: bytes | memoryview, start: int, end: int, include_headers: bool) -> dict:
    got = decode_records(data, start, end, include_headers=include_headers)
    assert got.count == len(got.keys) == len(got.values) == len(got.timestamps)
    return {
        "offsets": got.offsets.tolist(),
        "keys": got.keys.to_pylist(),
        "values": got.values.to_pylist(),
        "timestamps": got.timestamps.tolist(),
        "timestamp_types": got.timestamp_types.tolist(),
        "headers": None if got.headers is None else got.headers.to_pylist(),
    }


def check(data: bytes | memoryview, start: int, end: int, include_headers: bool = True) -> None:
    want = columns(bytes(data), start, end, include_headers)
    assert decoded_columns(data, start, end, include_headers) == want


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(batch_specs, min_size=1, max_size=5),
    st.integers(min_value=0, max_value=60),
    st.integers(min_value=0, max_value=250),
    st.booleans(),
)
def test_arrow_columns_equal_record_by_record_decoding(
    specs: list, start: int, length: int, include_headers: bool
) -> None:
    data = build(specs)
    check(data, start, start + length, include_headers)
    check(memoryview(bytearray(data)), 0, 2**63 - 1, include_headers)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(min_value=1, max_value=3000),
    st.integers(min_value=0, max_value=300),
    st.integers(min_value=0, max_value=4),
    st.integers(min_value=1, max_value=3),
)
def test_fixed_size_runs_are_found_at_once_and_checked(
    count: int, size: int, codec: int, batches: int
) -> None:
    # Same-size records: the speculative run path; a size change inside (a longer value at a
    # random index, a growing offset-delta varint) must end the run exactly there.
    recs = [(i.to_bytes(8, "big"), b"v" * size, [], BASE_TS + i) for i in range(count)]
    if count > 5:
        k = count // 3
        recs[k] = (recs[k][0], b"w" * (size + 1), [], recs[k][3])
    data = build([(recs, codec, 0, False, 0) for _ in range(batches)])
    check(data, 0, 2**63 - 1, include_headers=False)


def test_trailing_partial_batch_is_left_out() -> None:
    first = build_batch([(b"k", b"v", [], BASE_TS)], base_offset=0)
    second = build_batch([(b"k2", b"v2", [], BASE_TS)], base_offset=1)
    scan = scan_batches(first + second[:30])
    assert scan.next_offset == 1 and scan.incomplete_size == len(second)
    got = decode_records(first + second[:-1])
    assert got.offsets.tolist() == [0] and got.values.to_pylist() == [b"v"]


def test_empty_input_and_range_outside_give_no_rows() -> None:
    assert decode_records(b"").count == 0
    data = build_batch([(b"k", b"v", [], BASE_TS)] * 3, base_offset=10)
    assert decode_records(data, 0, 10).count == 0
    assert decode_records(data, 13, 20).count == 0
    assert decode_records(data, 11, 12).offsets.tolist() == [11]


def test_old_message_format_is_refused_clearly() -> None:
    data = bytearray(build_batch([(b"k", b"v", [], BASE_TS)]))
    data[16] = 1
    with pytest.raises(UnsupportedMagicError, match="odradek.reader=librdkafka"):
        decode_records(bytes(data))


def test_corrupt_record_length_is_an_error() -> None:
    data = bytearray(build_batch([(b"k", b"value", [], BASE_TS)] * 4))
    data[61] = 0x7E  # first record's length varint: 63 bytes, past the batch
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(data))
    short = bytearray(build_batch([(b"k", b"value", [], BASE_TS)] * 4))
    struct.pack_into(">i", short, 57, 5)  # records count says 5
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(short))


def test_record_batch_has_sparks_schema() -> None:
    schema = pa.schema(
        [
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("timestampType", pa.int32()),
            ("headers", HEADERS_TYPE),
        ]
    )
    data = build_batch(
        [(None, b"a", [("h", b"1")], BASE_TS), (b"k", None, [], BASE_TS + 5)],
        base_offset=7,
        timestamp_type=1,
    )
    batch = to_record_batch(decode_records(data, include_headers=True), "t", 3, schema)
    assert batch.schema == schema
    assert batch.to_pylist()[1]["timestamp"].timestamp() * 1000 == BASE_TS + 5  # max timestamp
    assert [r["offset"] for r in batch.to_pylist()] == [7, 8]
    assert [r["timestampType"] for r in batch.to_pylist()] == [1, 1]
    assert batch.column("partition").to_pylist() == [3, 3]
    assert HEADER_STRUCT.size == 61


# ---- the decoding paths ----------------------------------------------------------------------
#
# Long runs of same-size records are decoded column-wise through strided views, shorter runs
# column-wise too but gathered per record size, and everything else one field at a time (the
# general path). Each input below is decoded through each path, and must come out as the
# record-by-record decoder has it.

PATHS = {
    "default": (runs._MIN_FAST_RUN, boundaries._MIN_GUESS),
    "strided": (1, 1),  # every run of 3+ same-size records: strided
    "grouped": (10**9, 1),  # every such run: gathered per record size
    "general": (10**9, 10**9),  # no runs at all
}


@contextlib.contextmanager
def decoding_path(name: str) -> Iterator[None]:
    saved = runs._MIN_FAST_RUN, boundaries._MIN_GUESS
    runs._MIN_FAST_RUN, boundaries._MIN_GUESS = PATHS[name]
    try:
        yield
    finally:
        runs._MIN_FAST_RUN, boundaries._MIN_GUESS = saved


def check_paths(
    data: bytes, start: int = 0, end: int = 2**63 - 1, include_headers: bool = True
) -> None:
    want = columns(data, start, end, include_headers)
    for name in PATHS:
        with decoding_path(name):
            assert decoded_columns(data, start, end, include_headers) == want, name
            view = memoryview(bytearray(data))
            assert decoded_columns(view, start, end, include_headers) == want, name


def test_each_decoding_path_is_the_one_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    # The knobs of PATHS live in the modules that read them: each setting must send fixed-size
    # records down its own path (else check_paths would compare the default path with itself).
    data = raw_batch([(100 + i, 0, b"%08d" % i, b"v" * 30, []) for i in range(600)])
    assert len(set(record_sizes(data))) == 1
    taken: list[str] = []
    for module, name in ((runs, "_decode_run"), (decoder, "decode_short_runs"),
                         (decoder, "decode_general")):
        real = getattr(module, name)

        def spy(*args: object, _real=real, _name=name) -> object:  # type: ignore[no-untyped-def]
            taken.append(_name)
            return _real(*args)

        monkeypatch.setattr(module, name, spy)
    want = {
        "default": {"_decode_run"},
        "strided": {"_decode_run"},
        "grouped": {"decode_short_runs"},
        "general": {"decode_general"},
    }
    for path, expected in want.items():
        taken.clear()
        with decoding_path(path):
            assert decode_records(data).count == 600
        assert set(taken) == expected, path


def raises_on_every_path(data: bytes) -> None:
    for name in PATHS:
        with decoding_path(name), pytest.raises(CorruptRecordError):
            decode_records(data, include_headers=True)


RawRecord = tuple[int, int, bytes | None, bytes | None, list]  # offset and timestamp deltas


def raw_batch(
    records: list[RawRecord], *, base_offset: int = 0, codec: int = 0, ts_type: int = 0
) -> bytes:
    """A batch whose records have exactly the given offset and timestamp deltas."""
    body = bytearray()
    for offset_delta, ts_delta, key, value, hdrs in records:
        encode_record(body, offset_delta, ts_delta, key, value, hdrs)
    payload = compress(codec, bytes(body)) if codec else bytes(body)
    out = bytearray(RECORD_BATCH_OVERHEAD + len(payload))
    attributes = codec | (TIMESTAMP_TYPE_MASK if ts_type else 0)
    last_delta = max(r[0] for r in records)
    max_ts = BASE_TS + max(r[1] for r in records)
    HEADER_STRUCT.pack_into(
        out, 0, base_offset, len(out) - LOG_OVERHEAD, -1, 2, 0, attributes, last_delta,
        BASE_TS, max_ts, -1, -1, -1, len(records),
    )
    out[RECORD_BATCH_OVERHEAD:] = payload
    return bytes(out)


def record_sizes(batch: bytes) -> list[int]:
    sizes = []
    pos = RECORD_BATCH_OVERHEAD
    while pos < len(batch):
        length, after = decode_varint(batch, pos)
        sizes.append(after - pos + length)
        pos = after + length
    return sizes


def test_same_size_records_whose_fields_move_inside_a_run() -> None:
    # Timestamp delta 2 bytes then 1, offset delta 1 byte then 2: same record size, but every
    # field after them moves by a byte at record 64.
    shifted = [(i, 100 if i < 64 else 0, b"k" * 8, b"v" * 50, []) for i in range(700)]
    # Key one byte longer, value one byte shorter, every 50 records (offset deltas of 2 bytes).
    traded = [
        (100 + i, 0, b"ab" if i // 50 % 2 else b"abc", b"x" * (98 if i // 50 % 2 else 97), [])
        for i in range(700)
    ]
    for recs in (shifted, traded):
        batch = raw_batch(recs)
        assert len(set(record_sizes(batch))) == 1
        check_paths(batch)
        check_paths(raw_batch(recs, codec=3) + raw_batch(recs, base_offset=700, codec=2))


def test_null_and_empty_keys_and_values_inside_a_run() -> None:
    rng = random.Random(7)
    recs: list[RawRecord] = []
    for i in range(600):
        key = rng.choice([None, b""]) if rng.random() < 0.1 else b""
        value = rng.choice([None, b""]) if rng.random() < 0.1 else None
        recs.append((100 + i, 0, key, value, []))
    batch = raw_batch(recs)
    assert len(set(record_sizes(batch))) == 1
    check_paths(batch)
    check_paths(raw_batch([(i, 0, None, b"v" * 20, []) for i in range(500)]))  # all null keys


def test_runs_broken_by_a_record_of_another_size() -> None:
    for at in (0, 1, 2, 3, 15, 16, 17, 255, 256, 300, 598, 599):
        recs = [(b"%08d" % i, b"v" * 30, [], BASE_TS) for i in range(600)]
        recs[at] = (recs[at][0], b"w" * 31, [], BASE_TS)
        check_paths(build_batch(recs))
    # a record with a header (its value shorter by the header's 2 bytes): same size
    raw = [(100 + i, 0, b"k", b"v" * 100, []) for i in range(600)]
    raw[333] = (433, 0, b"k", b"v" * 98, [("", None)])
    batch = raw_batch(raw)
    assert len(set(record_sizes(batch))) == 1
    check_paths(batch)
    check_paths(batch, include_headers=False)


def test_runs_of_same_size_records_across_batches() -> None:
    recs = [(b"%08d" % i, b"v" * 100, [], BASE_TS + i) for i in range(300)]
    for codec in (0, 4):
        specs = [(recs, codec, 0, False, 0), (recs[:40], codec, 1, False, 0)]
        specs += [([(None, b"", [], BASE_TS)], 0, 0, True, 0), (recs, codec, 0, False, 5)]
        check_paths(build(specs))
        check_paths(build([(recs[:20], codec, 0, False, 0)] * 30))  # short runs, many batches


def test_offsets_outside_the_range_are_left_out_mid_run() -> None:
    data = build([([(b"k", b"v" * 50, [], BASE_TS + i) for i in range(1000)], 0, 0, False, 0)])
    for start, end in ((0, 1), (1, 999), (500, 501), (3, 700), (999, 2000), (1000, 2000)):
        check_paths(data, start, end)
    # offsets out of order inside the batch: the records kept are not one slice
    recs = [(i ^ 1, 0, b"k", b"v" * 20, []) for i in range(400)]
    check_paths(raw_batch(recs, base_offset=10), 15, 400)


def test_log_append_time_and_compaction_gaps_inside_runs() -> None:
    recs = [(3 * i, i, b"k", b"v" * 40, []) for i in range(500)]  # offset deltas up to 1497
    for ts_type in (0, 1):
        check_paths(raw_batch(recs, ts_type=ts_type) + raw_batch(recs, base_offset=2000))


def test_tiny_records_at_the_end_of_the_buffer() -> None:
    # 7-byte records: the views read past the last records, which must be left to the
    # general path
    for count in (1, 3, 40, 300):
        check_paths(build_batch([(None, None, [], BASE_TS)] * count))
        check_paths(build_batch([(b"", b"", [], BASE_TS)] * count, compression=1))


def test_corrupt_records_inside_a_long_run_are_errors() -> None:
    good = build_batch([(b"%08d" % i, b"v" * 100, [], BASE_TS) for i in range(1000)])
    sizes = record_sizes(good)
    size = sizes[500]
    at = RECORD_BATCH_OVERHEAD + sum(sizes[:500])  # record 500
    for offset, byte in (
        (0, 0xE4),  # record length 2 less
        (0, 0xE9),  # record length negative (zigzag: odd), but the record size the same
        (6, 0x12),  # key length 9
        (6, 0x01),  # key length -1 (the key's bytes then take the value length's place)
        (15, 0xC6),  # value length 99
        (15, 0x03),  # value length -2
        (size - 1, 0x02),  # header count 1
        (size - 1, 0x01),  # header count -1
    ):
        data = bytearray(good)
        data[at + offset] = byte
        raises_on_every_path(bytes(data))
    check_paths(good, include_headers=False)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=400),  # records
            st.integers(min_value=0, max_value=12),  # key size
            st.integers(min_value=0, max_value=200),  # value size
            st.lists(st.tuples(st.integers(0, 399), st.integers(0, 5)), max_size=4),  # odd ones
            st.integers(min_value=0, max_value=4),  # codec
            st.integers(min_value=0, max_value=1),  # timestamp type
        ),
        min_size=1,
        max_size=4,
    ),
    st.integers(min_value=0, max_value=1000),
    st.integers(min_value=0, max_value=1000),
)
def test_runs_decode_like_record_by_record_on_every_path(
    batches: list, start: int, length: int
) -> None:
    specs = []
    for count, key_size, value_size, odd, codec, ts_type in batches:
        recs = [
            (b"k" * key_size, b"v" * value_size, [], BASE_TS + i // 7) for i in range(count)
        ]
        for at, kind in odd:
            if at >= count:
                continue
            key, value, hdrs, ts = recs[at]
            if kind == 0:
                key = None
            elif kind == 1:
                value = None
            elif kind == 2:
                hdrs = [("h", b"x")]
            elif kind == 3:  # (an earlier odd one at the same record may have nulled it)
                value = (value or b"")[:-1] + b"ww"
            elif kind == 4:
                ts = BASE_TS + 10_000
            else:
                key, value = (key or b"") + b"k", (value or b"")[:-1]
            recs[at] = (key, value, hdrs, ts)
        specs.append((recs, codec, ts_type, False, 0))
    check_paths(build(specs), start, start + length)


def test_wide_varints_inside_runs() -> None:
    # offset deltas of 3 bytes (more than 8191 records), records of more than 8191 bytes
    # (3-byte lengths), timestamp deltas of 6 and 10 bytes
    check_paths(build_batch([(None, b"v", [], BASE_TS + i) for i in range(9000)]))
    check_paths(build_batch([(b"k" * 20, b"v" * 9000, [], BASE_TS) for _ in range(300)]))
    for delta in (2**40, -(2**40), 2**62, -(2**63) + BASE_TS + 1):
        recs = [(i, delta if i % 100 < 50 else 0, b"k", b"v" * 30, []) for i in range(600)]
        check_paths(raw_batch(recs))


def test_one_record_batches() -> None:
    recs = [(b"%08d" % i, b"v" * (i % 3), [], BASE_TS + i) for i in range(200)]
    check_paths(build([([r], i % 3, 0, False, 0) for i, r in enumerate(recs)]), 17, 150)
    data = bytearray(build_batch([(b"k", b"value", [], BASE_TS)], base_offset=4))
    data[RECORD_BATCH_OVERHEAD] += 2  # the record's length: one byte more than the batch holds
    raises_on_every_path(bytes(data) + build_batch([(b"k", b"v", [], BASE_TS)], base_offset=5))
