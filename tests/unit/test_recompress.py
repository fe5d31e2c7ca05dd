"""compression.type on the broker: produced batches re-encoded in the topic's codec (sans-I/O
rewrite, the leader append of a Log, and the level configs)."""

from __future__ import annotations

import itertools
import struct
from pathlib import Path
from typing import Any

import lz4.frame
import pytest
from crc32c import crc32c

import odradek.records.recompress as recompress_mod
import odradek.records.records as records_mod
from odradek.log import Log, LogConfig
from odradek.log.append_origin import AppendOrigin
from odradek.log.errors import OutOfOrderSequenceError
from odradek.records import (
    InvalidRecordError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    build_batch,
    decode_batch,
    iter_batches,
    parse_header,
    validate_and_assign,
)
from odradek.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    is_batch_crc_valid,
)
from odradek.records.compression import compress, decompress
from odradek.records.recompress import (
    check_records,
    needs_recompression,
    recompress_batch,
    recompress_batches,
    target_codec,
)
from odradek.records.varint import encode_varint
from odradek.server.config_defs import build_log_config, validate_topic_config
from odradek.server.kafka_config import ConfigError, KafkaConfig

CODECS = [0, 1, 2, 3, 4]
NAMES = {0: "uncompressed", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
PID, EPOCH, SEQ = 4242, 3, 17

RecordTuple = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def _records(n: int = 12) -> list[RecordTuple]:
    return [
        (
            None if i % 4 == 1 else b"key-%d" % i,
            None if i % 3 == 2 else b"value-%d-" % i + b"abc" * (i * 11),
            [("h1", b"x"), ("h2", None), ("h1", b"")] if i % 2 else [],
            1_700_000_000_000 + (i * 7) % 40,
        )
        for i in range(n)
    ]


def _batch(codec: int, recs: list[RecordTuple] | None = None, **kw: Any) -> bytearray:
    fields: dict[str, Any] = dict(
        producer_id=PID,
        producer_epoch=EPOCH,
        base_sequence=-1 if kw.get("is_control") else SEQ,  # markers carry no sequence
        is_transactional=True,
    )
    fields.update(kw)
    return bytearray(build_batch(recs or _records(), compression=codec, **fields))


def _content(recs: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs]


def _expected(recs: list[RecordTuple], base: int) -> list[tuple[Any, ...]]:
    return [(base + i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(recs)]


def _assigned(codec: int, base: int = 100, epoch: int = 7, **kw: Any) -> tuple[bytearray, Any]:
    buf = _batch(codec, **kw)
    info = validate_and_assign(
        buf, base, leader_epoch=epoch, max_message_bytes=1 << 30, log_append_time_ms=None
    )
    return buf, info


def _stored(log: Log) -> bytes:
    return log.read(log.log_start_offset, 1 << 24, None, True).to_bytes()


def _headers(data: bytes) -> list[Any]:
    return list(iter_batches(data))


# ------------------------------------------------------------------ sans-I/O rewrite


@pytest.mark.parametrize(
    ("source", "target"), [p for p in itertools.product(CODECS, CODECS) if p[0] != p[1]]
)
def test_every_codec_pair_is_rewritten_keeping_records_and_batch_fields(
    source: int, target: int
) -> None:
    recs = _records()
    buf, info = _assigned(source)
    before = parse_header(buf)
    result = recompress_batches(buf, info, target, None, max_message_bytes=1 << 30)
    assert result is not None
    out, new_info = result
    h = parse_header(out)
    assert h.compression == target
    assert is_batch_crc_valid(out, 0, len(out))
    assert h.size == len(out) == new_info.valid_bytes
    # batch-level fields kept, offsets as assigned
    assert (h.base_offset, h.partition_leader_epoch, h.last_offset_delta, h.records_count) == (
        100, 7, len(recs) - 1, len(recs)
    )
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (PID, EPOCH, SEQ)
    assert h.is_transactional and not h.is_control
    assert h.timestamp_type == before.timestamp_type == 0
    assert (h.base_timestamp, h.max_timestamp) == (before.base_timestamp, before.max_timestamp)
    assert h.attributes & ~0x07 == before.attributes & ~0x07
    # the same records
    assert _content(decode_batch(out)) == _expected(recs, 100)
    # the append info describes the stored bytes
    assert [(b.base_offset, b.last_offset, b.position, b.size) for b in new_info.batches] == [
        (100, 100 + len(recs) - 1, 0, len(out))
    ]
    assert (new_info.first_offset, new_info.last_offset, new_info.num_records) == (
        info.first_offset, info.last_offset, info.num_records
    )
    assert new_info.max_timestamp == info.max_timestamp


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_already_in_the_target_codec_is_left_alone(codec: int) -> None:
    buf, info = _assigned(codec)
    assert not needs_recompression(buf, info, codec)
    assert recompress_batches(buf, info, codec, None, max_message_bytes=1 << 30) is None


def test_producer_target_never_rewrites() -> None:
    assert target_codec("producer") is None
    assert [target_codec(NAMES[c]) for c in CODECS] == CODECS
    buf, info = _assigned(3)
    assert not needs_recompression(buf, info, None)
    assert recompress_batches(buf, info, None, None, max_message_bytes=1 << 30) is None
    with pytest.raises(ValueError):
        target_codec("brotli")


@pytest.mark.parametrize("target", [0, 1, 4])
def test_control_batches_are_never_rewritten(target: int) -> None:
    source = 3 if target != 3 else 0
    buf, info = _assigned(source, is_control=True, is_transactional=True, recs=_records(1))
    assert not needs_recompression(buf, info, target)
    assert recompress_batches(buf, info, target, None, max_message_bytes=1 << 30) is None


def test_recompress_batch_keeps_log_append_time_fields() -> None:
    buf = _batch(0)
    info = validate_and_assign(
        buf, 5, leader_epoch=2, max_message_bytes=1 << 30, log_append_time_ms=1_800_000_000_000
    )
    out = recompress_batch(memoryview(buf)[: info.valid_bytes], 4, 19)
    h = parse_header(out)
    assert h.compression == 4 and h.timestamp_type == 1
    assert h.max_timestamp == 1_800_000_000_000
    assert is_batch_crc_valid(out, 0, len(out))
    assert {r.timestamp for r in decode_batch(out)} == {1_800_000_000_000}


def _raw_record(offset_delta: int, *, extra: bytes = b"") -> bytes:
    body = b"\x00" + encode_varint(0) + encode_varint(offset_delta) + encode_varint(-1)
    body += encode_varint(1) + b"v" + encode_varint(0) + extra
    return encode_varint(len(body)) + body


def _handmade(records_section: bytes, count: int, codec: int = 0) -> bytearray:
    """A batch around a records section built by hand (CRC valid), as a producer could send."""
    good = _batch(0, recs=[(None, b"v", [], 1000)] * count)
    payload = compress(codec, records_section) if codec else records_section
    out = bytearray(good[:RECORD_BATCH_OVERHEAD]) + payload
    struct.pack_into(">i", out, 8, len(out) - 12)
    attrs = struct.unpack_from(">h", out, ATTRIBUTES_OFFSET)[0]
    struct.pack_into(">h", out, ATTRIBUTES_OFFSET, (attrs & ~0x07) | codec)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(bytes(out[ATTRIBUTES_OFFSET:])))
    return out


@pytest.mark.parametrize(
    ("section", "count", "needle"),
    [
        (_raw_record(0) + _raw_record(5), 2, "offset delta 5"),
        (_raw_record(0) + _raw_record(1) + b"\x00\x00", 2, "follow"),
        (_raw_record(0) + _raw_record(1)[:-2], 2, "truncated|claims"),
        (_raw_record(0, extra=b"zz"), 1, "more or less"),
    ],
)
def test_malformed_records_are_refused_when_rewriting(section: bytes, count: int, needle: str) -> None:
    with pytest.raises(InvalidRecordError, match=needle):
        check_records(section, count)
    buf = _handmade(section, count, codec=2)
    info = validate_and_assign(buf, 0, leader_epoch=0, max_message_bytes=1 << 30, log_append_time_ms=None)
    with pytest.raises(InvalidRecordError):
        recompress_batches(buf, info, 1, None, max_message_bytes=1 << 30)


def test_lz4_frames_have_independent_blocks_for_java_readers() -> None:
    data = bytes(range(256)) * 2000
    frame = compress(3, data)
    info = lz4.frame.get_frame_info(frame)
    assert info["block_linked"] is False and info["content_size"] == 0
    assert decompress(3, frame) == data
    assert decompress(3, compress(3, data, 12)) == data
    # and so do the frames of batches the broker recompresses (streamed, level or not)
    for level in (None, 12):
        rewritten = recompress_batch(_batch(1, recs=[(b"k", data, [], 1000)]), 3, level)
        info = lz4.frame.get_frame_info(rewritten[RECORD_BATCH_OVERHEAD:])
        assert info["block_linked"] is False and info["content_size"] == 0
        assert decode_batch(rewritten)[0].value == data


# ------------------------------------------------------------------ the leader append


def _log(tmp_path: Path, name: str = "t-0", **config: Any) -> Log:
    return Log.load(str(tmp_path / name), LogConfig(**config), now_ms=0)


@pytest.mark.parametrize("target", CODECS)
@pytest.mark.parametrize("source", CODECS)
def test_leader_append_stores_the_topic_codec(tmp_path: Path, source: int, target: int) -> None:
    log = _log(tmp_path, compression_type=NAMES[target])
    log.append_as_leader(_batch(0, recs=_records(2), producer_id=-1, producer_epoch=-1,
                                base_sequence=-1, is_transactional=False), 0, 0)
    sent = _batch(source)
    original = bytes(sent)
    info = log.append_as_leader(sent, 4, 1000)
    data = _stored(log)
    batches = _headers(data)
    assert [h.compression for h in batches] == [0 if target == 0 else target, target]
    stored = data[batches[1].position :]
    h = parse_header(stored)
    assert (h.base_offset, h.partition_leader_epoch) == (2, 4)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional) == (
        PID, EPOCH, SEQ, True
    )
    assert is_batch_crc_valid(stored, 0, len(stored))
    assert _content(decode_batch(stored)) == _expected(_records(), 2)
    assert info.valid_bytes == len(stored) == log.size - batches[1].position
    assert [(b.position, b.size) for b in info.batches] == [(0, len(stored))]
    if source == target:
        # stored as sent: only baseOffset and partitionLeaderEpoch differ
        assert stored[8:12] == original[8:12] and stored[16:] == original[16:]


def _forbid_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("records decoded on a path that must not decode them")

    for mod, names in (
        (recompress_mod, ("iter_decompress", "StreamCompressor", "check_records", "recompress_batch")),
        (records_mod, ("decompress", "decode_records")),
    ):
        for name in names:
            monkeypatch.setattr(mod, name, boom)


@pytest.mark.parametrize("codec", CODECS)
def test_producer_default_never_decodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: int
) -> None:
    _forbid_decoding(monkeypatch)
    log = _log(tmp_path)
    assert log.config.compression_type == "producer"
    sent = _batch(codec)
    original = bytes(sent)
    log.append_as_leader(sent, 1, 0)
    stored = _stored(log)
    assert len(stored) == len(original)
    assert stored[8:12] == original[8:12] and stored[16:] == original[16:]


def test_same_codec_topic_never_decodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _forbid_decoding(monkeypatch)
    log = _log(tmp_path, compression_type="zstd")
    log.append_as_leader(_batch(4), 0, 0)
    # A control batch (appended by a coordinator: clients may not) keeps its codec.
    log.append_as_leader(
        _batch(0, is_control=True, recs=_records(1)), 0, 0, AppendOrigin.COORDINATOR
    )
    assert [h.compression for h in _headers(_stored(log))] == [4, 0]


def test_control_batch_is_stored_as_sent(tmp_path: Path) -> None:
    log = _log(tmp_path, compression_type="gzip")
    sent = _batch(0, is_control=True, recs=_records(1))
    original = bytes(sent)
    log.append_as_leader(sent, 0, 0, AppendOrigin.COORDINATOR)
    stored = _stored(log)
    assert stored[8:12] == original[8:12] and stored[16:] == original[16:]


def test_log_append_time_with_recompression(tmp_path: Path) -> None:
    log = _log(tmp_path, compression_type="gzip", message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(_batch(0), 0, 1_900_000_000_000)
    assert info.log_append_time_ms == 1_900_000_000_000
    stored = _stored(log)
    h = parse_header(stored)
    assert h.compression == 1 and h.timestamp_type == 1
    assert h.max_timestamp == 1_900_000_000_000 and is_batch_crc_valid(stored, 0, len(stored))
    assert {r.timestamp for r in decode_batch(stored)} == {1_900_000_000_000}
    assert log.fetch_offset_by_timestamp(-3) is not None


def test_size_limits_apply_to_the_stored_batch(tmp_path: Path) -> None:
    big = [(b"k", b"a" * 50_000, [], 1000)]
    compressed = _batch(4, recs=big)
    assert len(compressed) < 1_000
    # fits max.message.bytes as sent, not once stored uncompressed: MESSAGE_TOO_LARGE
    log = _log(tmp_path, "a-0", compression_type="uncompressed", max_message_bytes=10_000)
    with pytest.raises(RecordTooLargeError, match="after recompression"):
        log.append_as_leader(bytearray(compressed), 0, 0)
    assert log.log_end_offset == 0 and log.size == 0
    # too big for a segment once decompressed: RECORD_LIST_TOO_LARGE
    log = _log(tmp_path, "b-0", compression_type="uncompressed", segment_bytes=20_000)
    with pytest.raises(RecordBatchTooLargeError):
        log.append_as_leader(bytearray(compressed), 0, 0)
    assert log.log_end_offset == 0
    # too big as sent uncompressed, fits once the topic compresses it
    log = _log(tmp_path, "c-0", compression_type="zstd", segment_bytes=20_000)
    info = log.append_as_leader(_batch(0, recs=big), 0, 0)
    assert info.valid_bytes == log.size < 1_000
    assert parse_header(_stored(log)).compression == 4


def test_idempotent_producer_state_after_rewrite(tmp_path: Path) -> None:
    log = _log(tmp_path, compression_type="gzip")
    first = _batch(0, recs=_records(3), base_sequence=0, is_transactional=False)
    retry = bytearray(first)
    info = log.append_as_leader(first, 0, 0)
    assert (info.first_offset, info.last_offset) == (0, 2)
    dup = log.append_as_leader(retry, 0, 10)  # a retry: the original offsets, nothing appended
    assert (dup.first_offset, dup.last_offset, dup.num_batches) == (0, 2, 0)
    info = log.append_as_leader(
        _batch(3, recs=_records(2), base_sequence=3, is_transactional=False), 0, 20
    )
    assert (info.first_offset, info.last_offset) == (3, 4)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(_batch(0, recs=_records(1), base_sequence=9), 0, 30)
    assert log.producer_last_offsets() == {PID: 4}
    assert [h.compression for h in _headers(_stored(log))] == [1, 1]
    # rebuilt from the stored headers after a reload
    log.close()
    log = _log(tmp_path, compression_type="gzip")
    dup = log.append_as_leader(
        _batch(3, recs=_records(2), base_sequence=3, is_transactional=False), 0, 40
    )
    assert (dup.first_offset, dup.last_offset, dup.num_batches) == (3, 4, 0)
    entry = log.producer_state.producers[PID]
    assert (entry.epoch, entry.last_seq) == (EPOCH, 4)


def test_malformed_records_refused_only_when_rewriting(tmp_path: Path) -> None:
    section = _raw_record(0) + _raw_record(3)
    with pytest.raises(InvalidRecordError):
        _log(tmp_path, "a-0", compression_type="lz4").append_as_leader(_handmade(section, 2), 0, 0)
    # 'producer' keeps the batch as sent without looking inside (as before)
    log = _log(tmp_path, "b-0")
    assert log.append_as_leader(_handmade(section, 2), 0, 0).num_records == 2


def test_configured_levels_reach_the_codec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int | None]] = []
    real = recompress_mod.StreamCompressor

    def spy(codec: int, level: int | None = None) -> Any:
        seen.append((codec, level))
        return real(codec, level)

    monkeypatch.setattr(recompress_mod, "StreamCompressor", spy)
    cases = [
        ("gzip", {"compression_gzip_level": 1}, (1, 1)),
        ("gzip", {}, (1, -1)),
        ("lz4", {"compression_lz4_level": 17}, (3, 17)),
        ("lz4", {}, (3, 9)),
        ("zstd", {"compression_zstd_level": -5}, (4, -5)),
        ("zstd", {}, (4, 3)),
        ("snappy", {"compression_zstd_level": 10}, (2, None)),
    ]
    for i, (name, levels, expected) in enumerate(cases):
        log = _log(tmp_path, f"l{i}-0", compression_type=name, **levels)
        log.append_as_leader(_batch(0), 0, 0)
        assert seen[-1] == expected
        assert _content(decode_batch(_stored(log))) == _expected(_records(), 0)
    # the levels make a difference
    text = b"".join(b"record %d of a compressible text; " % i for i in range(3000))
    sizes = [len(compress(1, text, level)) for level in (1, 9)]
    assert sizes[0] > sizes[1]


def test_follower_append_keeps_batches_as_the_leader_wrote_them(tmp_path: Path) -> None:
    log = _log(tmp_path, compression_type="gzip")
    sent = _batch(3)
    validate_and_assign(sent, 0, leader_epoch=1, max_message_bytes=1 << 30, log_append_time_ms=None)
    log.append_as_follower(bytes(sent))
    assert _stored(log) == bytes(sent)


# ------------------------------------------------------------------ configs


@pytest.mark.parametrize(
    ("key", "good", "bad", "rule"),
    [
        ("compression.gzip.level", ["-1", "1", "9"], ["0", "-2", "10"],
         "Value must be between 1 and 9 or equal to -1"),
        ("compression.lz4.level", ["1", "9", "17"], ["0", "18", "-1"], "Value must be in [1, 17]"),
        ("compression.zstd.level", ["-131072", "-1", "0", "3", "22"], ["-131073", "23"],
         "Value must be in [-131072, 22]"),
    ],
)
def test_level_configs_validated_like_kafka(
    key: str, good: list[str], bad: list[str], rule: str
) -> None:
    for value in good:
        assert validate_topic_config(key, value) is None
        KafkaConfig({key: value})
    for value in bad:
        assert validate_topic_config(key, value) == (
            f"Invalid value {value} for configuration {key}: {rule}"
        )
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            KafkaConfig({key: value})
    assert "configuration " + key in (validate_topic_config(key, "fast") or "")


def test_log_config_takes_compression_from_broker_then_topic() -> None:
    lc = build_log_config(KafkaConfig({}), {})
    assert (lc.compression_type, lc.compression_codec, lc.compression_level) == ("producer", None, None)
    assert (lc.compression_gzip_level, lc.compression_lz4_level, lc.compression_zstd_level) == (-1, 9, 3)
    broker = KafkaConfig({"compression.type": "zstd", "compression.zstd.level": "7",
                          "compression.gzip.level": "2"})
    lc = build_log_config(broker, {})
    assert (lc.compression_codec, lc.compression_level) == (4, 7)
    assert lc.raw["compression.type"] == "zstd" and lc.raw["compression.zstd.level"] == "7"
    lc = build_log_config(broker, {"compression.type": "gzip"})
    assert (lc.compression_codec, lc.compression_level) == (1, 2)
    lc = build_log_config(broker, {"compression.type": "lz4", "compression.lz4.level": "12"})
    assert (lc.compression_codec, lc.compression_level) == (3, 12)
    lc = build_log_config(broker, {"compression.type": "uncompressed"})
    assert (lc.compression_codec, lc.compression_level) == (0, None)
