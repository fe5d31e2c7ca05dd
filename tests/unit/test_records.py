from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from odradek.records import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    UnsupportedMagicError,
    build_batch,
    decode_batch,
    iter_batches,
    parse_header,
    validate,
    validate_and_assign,
)
from odradek.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    MAGIC_OFFSET,
    RECORDS_COUNT_OFFSET,
    is_batch_crc_valid,
)
from odradek.records.compression import XERIAL_MAGIC, compress, decompress
from odradek.records.varint import decode_varint, encode_varint, varint_size

CODECS = [0, 1, 2, 3, 4]


def _records(
    n: int, ts0: int = 1000
) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]:
    return [
        (
            None if i % 5 == 0 else b"key-%d" % i,
            None if i % 7 == 3 else b"value-%d-" % i + b"x" * (i * 37),
            [("h1", b"a"), ("h2", None)] if i % 2 else [],
            ts0 + (i * 13) % 50,
        )
        for i in range(n)
    ]


def _resign(buf: bytearray, pos: int = 0) -> None:
    size = struct.unpack_from(">i", buf, pos + 8)[0] + 12
    struct.pack_into(
        ">I", buf, pos + CRC_OFFSET, crc32c(bytes(buf[pos + ATTRIBUTES_OFFSET : pos + size]))
    )


@pytest.mark.parametrize(
    "value", [0, 1, -1, 63, -64, 64, 300, -300, 2**31 - 1, -(2**31), 2**62, -(2**63)]
)
def test_varint_round_trip(value: int) -> None:
    enc = encode_varint(value)
    assert decode_varint(enc, 0) == (value, len(enc))
    assert varint_size(value) == len(enc)


@pytest.mark.parametrize("codec", CODECS)
def test_build_decode_round_trip(codec: int) -> None:
    recs = _records(60)
    data = build_batch(
        recs, base_offset=42, compression=codec, producer_id=7, producer_epoch=1, base_sequence=3
    )
    header = parse_header(data)
    assert header.compression == codec
    assert header.records_count == 60
    assert header.last_offset_delta == 59
    assert header.max_timestamp == max(r[3] for r in recs)
    assert header.producer_id == 7 and header.base_sequence == 3
    assert is_batch_crc_valid(data, 0, len(data))
    decoded = decode_batch(data)
    assert [r.offset for r in decoded] == list(range(42, 102))
    for rec, (k, v, h, ts) in zip(decoded, recs, strict=True):
        assert (rec.key, rec.value, rec.headers, rec.timestamp) == (k, v, h, ts)


def test_snappy_raw_and_xerial_both_decode() -> None:
    payload = b"hello snappy " * 10000
    framed = compress(2, payload)
    assert framed.startswith(XERIAL_MAGIC)
    assert decompress(2, framed) == payload
    import cramjam

    raw = bytes(cramjam.snappy.compress_raw(payload))
    assert decompress(2, raw) == payload


def test_zstd_without_content_size() -> None:
    import io

    import zstandard

    payload = b"zstd streaming " * 5000
    out = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(out, closefd=False) as w:
        w.write(payload)
    assert decompress(4, out.getvalue()) == payload


def test_validate_and_assign_multi_batch() -> None:
    batches = [build_batch(_records(n, ts0=100 * n)) for n in (1, 3, 5, 2)]
    buf = bytearray(b"".join(batches))
    info = validate_and_assign(
        buf, 500, leader_epoch=9, max_message_bytes=1 << 20, log_append_time_ms=None
    )
    assert info.first_offset == 500
    assert info.last_offset == 500 + 11 - 1
    assert info.num_batches == 4
    assert info.num_records == 11
    assert info.valid_bytes == len(buf)
    assert [b.base_offset for b in info.batches] == [500, 501, 504, 509]
    assert [b.size for b in info.batches] == [len(b) for b in batches]
    assert info.max_timestamp == max(b.max_timestamp for b in info.batches)
    # batch with records of n=5 has the largest timestamps (ts0=500)
    assert info.offset_of_max_timestamp == 508
    headers = list(iter_batches(buf))
    assert [h.base_offset for h in headers] == [500, 501, 504, 509]
    assert all(h.partition_leader_epoch == 9 for h in headers)
    # base offset and leader epoch are outside the CRC: still valid.
    for h in headers:
        assert is_batch_crc_valid(buf, h.position, h.size)
    assert [r.offset for r in decode_batch(buf[headers[2].position :])] == [504, 505, 506, 507, 508]
    validate(buf)


def test_log_append_time_rewrites_and_crc_valid() -> None:
    buf = bytearray(build_batch(_records(4), compression=3) + build_batch(_records(2)))
    info = validate_and_assign(
        buf, 0, leader_epoch=0, max_message_bytes=1 << 20, log_append_time_ms=123456
    )
    assert info.max_timestamp == 123456
    assert info.log_append_time_ms == 123456
    for h in iter_batches(buf):
        assert h.timestamp_type == 1
        assert h.max_timestamp == 123456
        assert is_batch_crc_valid(buf, h.position, h.size)
        for rec in decode_batch(buf[h.position : h.position + h.size]):
            assert rec.timestamp == 123456


def test_corrupt_crc() -> None:
    buf = bytearray(build_batch(_records(3)))
    buf[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError) as ei:
        validate_and_assign(
            buf, 0, leader_epoch=0, max_message_bytes=1 << 20, log_append_time_ms=None
        )
    assert ei.value.error_code == 2


def test_truncated_batch() -> None:
    data = build_batch(_records(3))
    for cut in (5, 30, len(data) - 1):
        with pytest.raises(CorruptRecordError):
            validate_and_assign(
                bytearray(data[:cut]),
                0,
                leader_epoch=0,
                max_message_bytes=1 << 20,
                log_append_time_ms=None,
            )
    with pytest.raises(CorruptRecordError):
        validate_and_assign(
            bytearray(data + data[:20]),
            0,
            leader_epoch=0,
            max_message_bytes=1 << 20,
            log_append_time_ms=None,
        )
    # iter_batches stops silently at a partial trailing batch
    assert len(list(iter_batches(data + data[:-3]))) == 1


def test_magic_1_is_unsupported() -> None:
    buf = bytearray(build_batch(_records(1)))
    buf[MAGIC_OFFSET] = 1
    with pytest.raises(UnsupportedMagicError) as ei:
        validate_and_assign(
            buf, 0, leader_epoch=0, max_message_bytes=1 << 20, log_append_time_ms=None
        )
    assert ei.value.error_code == 87  # INVALID_RECORD, as Kafka 4
    buf[MAGIC_OFFSET] = 7
    with pytest.raises(CorruptRecordError):
        validate_and_assign(
            buf, 0, leader_epoch=0, max_message_bytes=1 << 20, log_append_time_ms=None
        )


def test_too_large() -> None:
    buf = bytearray(build_batch([(None, b"x" * 2000, [], 0)]))
    with pytest.raises(RecordTooLargeError) as ei:
        validate_and_assign(buf, 0, leader_epoch=0, max_message_bytes=1000, log_append_time_ms=None)
    assert ei.value.error_code == 10


def test_zero_records() -> None:
    buf = bytearray(build_batch(_records(1)))
    struct.pack_into(">i", buf, RECORDS_COUNT_OFFSET, 0)
    _resign(buf)
    with pytest.raises(InvalidRecordError) as ei:
        validate_and_assign(
            buf, 0, leader_epoch=0, max_message_bytes=1 << 20, log_append_time_ms=None
        )
    assert ei.value.error_code == 87


def test_bad_batch_length() -> None:
    buf = bytearray(build_batch(_records(1)))
    struct.pack_into(">i", buf, 8, 10)
    with pytest.raises(CorruptRecordError):
        validate_and_assign(
            buf, 0, leader_epoch=0, max_message_bytes=1 << 20, log_append_time_ms=None
        )


def test_empty_buffer_is_noop() -> None:
    info = validate_and_assign(
        bytearray(), 5, leader_epoch=0, max_message_bytes=100, log_append_time_ms=None
    )
    assert info.num_batches == 0 and info.first_offset == -1
