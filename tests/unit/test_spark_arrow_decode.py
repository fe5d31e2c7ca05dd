"""RecordBatch v2 -> Arrow decoding of the data source, against the record-by-record decoder."""

from __future__ import annotations

import struct

import pytest

pa = pytest.importorskip("pyarrow")
np = pytest.importorskip("numpy")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from odradek.records.batch import HEADER_STRUCT, parse_header  # noqa: E402
from odradek.records.builder import build_batch  # noqa: E402
from odradek.records.errors import CorruptRecordError, UnsupportedMagicError  # noqa: E402
from odradek.records.records import Record, decode_batch  # noqa: E402
from odradek.spark.arrow_decode import (  # noqa: E402
    HEADERS_TYPE,
    decode_records,
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


def check(data: bytes | memoryview, start: int, end: int, include_headers: bool = True) -> None:
    want = expected(bytes(data), start, end)
    got = decode_records(data, start, end, include_headers=include_headers)
    assert got.count == len(want)
    assert got.offsets.tolist() == [r.offset for r in want]
    assert got.keys.to_pylist() == [r.key for r in want]
    assert got.values.to_pylist() == [r.value for r in want]
    assert got.timestamps.tolist() == [r.timestamp for r in want]
    types = []
    pos = 0
    raw = bytes(data)
    while pos < len(raw):
        h = parse_header(raw, pos)
        if not h.is_control:
            types += [h.timestamp_type] * len(
                [r for r in decode_batch(raw[pos : pos + h.size]) if start <= r.offset < end]
            )
        pos += h.size
    assert got.timestamp_types.tolist() == types
    if include_headers:
        assert got.headers is not None
        assert got.headers.to_pylist() == [
            [{"key": k, "value": v} for k, v in r.headers] for r in want
        ]
    else:
        assert got.headers is None


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
