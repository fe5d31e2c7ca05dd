"""Decompression bombs (issue 8, item 7): a few KB of compressed records that expand to tens of
MB, produced to a compacted topic (the key check reads every record) or to a topic whose
compression.type converts codecs. The broker refuses them with RECORD_TOO_LARGE or
CORRUPT_MESSAGE, holds a bounded amount of memory while doing so, and keeps serving; a legitimate
highly compressible batch is still accepted.

The bombs are built here with the codec libraries directly (not with Odradek's own code).
"""

from __future__ import annotations

import asyncio
import struct
import tracemalloc
import zlib
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import cramjam
import lz4.frame
import pytest
import zstandard
from crc32c import crc32c
from fake_clock import FakeClock
from test_broker_apis import broker, create, fetch, produce, records_of

from odradek.log import Log, LogConfig, LogManager
from odradek.log.log_cleaner import CleanerConfig
from odradek.records import (
    InvalidRecordError,
    RecordTooLargeError,
    build_batch,
    decode_batch,
    iter_batches,
)
from odradek.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, RECORD_BATCH_OVERHEAD
from odradek.records.varint import encode_varint

MiB = 1 << 20
BOMB = 40 * MiB  # past what a batch of a topic with the default max.message.bytes may expand to
ZEROS = bytes(MiB)
# What the broker may allocate (Python objects, traced) while refusing or accepting one batch.
PEAK_LIMIT = 4 * MiB

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
NAMES = {0: "uncompressed", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}


def _zeros(n: int) -> Iterator[bytes]:
    while n > 0:
        piece = ZEROS[: min(n, MiB)]
        n -= len(piece)
        yield piece


def record_pieces(key: bytes | None, value_len: int, offset_delta: int = 0) -> Iterator[bytes]:
    """One record whose value is ``value_len`` zero bytes, in pieces (never all in memory)."""
    head = b"\x00" + encode_varint(0) + encode_varint(offset_delta)
    head += encode_varint(-1) if key is None else encode_varint(len(key)) + key
    head += encode_varint(value_len)
    tail = encode_varint(0)  # no headers
    yield encode_varint(len(head) + value_len + len(tail)) + head
    yield from _zeros(value_len)
    yield tail


def _gzip(pieces: Iterable[bytes]) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join(c.compress(p) for p in pieces) + c.flush()


def _zstd(pieces: Iterable[bytes]) -> bytes:
    c = zstandard.ZstdCompressor(level=3).compressobj()
    return b"".join(c.compress(p) for p in pieces) + c.flush()


def _lz4(pieces: Iterable[bytes]) -> bytes:
    c = lz4.frame.LZ4FrameCompressor(
        block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False, content_checksum=False
    )
    out = [c.begin()] + [c.compress(p) for p in pieces] + [c.flush()]
    return b"".join(out)


def _xerial(pieces: Iterable[bytes]) -> bytes:
    """snappy-java's framing, as Java clients send it: blocks of raw snappy."""
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    cache: dict[int, bytes] = {}
    for p in pieces:
        for start in range(0, len(p), 32 * 1024):
            block = p[start : start + 32 * 1024]
            if block == ZEROS[: len(block)]:  # the same block over and over: compress it once
                raw = cache.setdefault(len(block), bytes(cramjam.snappy.compress_raw(block)))
            else:
                raw = bytes(cramjam.snappy.compress_raw(block))
            out += struct.pack(">i", len(raw)) + raw
    return bytes(out)


COMPRESSORS: dict[int, Callable[[Iterable[bytes]], bytes]] = {
    GZIP: _gzip,
    SNAPPY: _xerial,
    LZ4: _lz4,
    ZSTD: _zstd,
}


def batch_around(section: bytes, count: int, codec: int) -> bytearray:
    """A CRC-valid v2 batch of ``count`` records whose (compressed) records section is
    ``section``, as a producer could send it."""
    model = build_batch([(b"k", b"v", [], 1_000)] * count)
    out = bytearray(model[:RECORD_BATCH_OVERHEAD]) + section
    struct.pack_into(">i", out, 8, len(out) - 12)
    attrs = struct.unpack_from(">h", out, ATTRIBUTES_OFFSET)[0]
    struct.pack_into(">h", out, ATTRIBUTES_OFFSET, (attrs & ~0x07) | codec)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(bytes(out[ATTRIBUTES_OFFSET:])))
    return out


def bomb(codec: int, key: bytes | None = b"k", size: int = BOMB) -> bytearray:
    return batch_around(COMPRESSORS[codec](record_pieces(key, size)), 1, codec)


def peak_of(fn: Callable[[], Any]) -> tuple[Any, int]:
    """(result or raised exception, peak of traced allocations during the call)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        try:
            result: Any = fn()
        except Exception as exc:  # the refusals are what is measured
            result = exc
        return result, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _log(tmp_path: Path, name: str, **config: Any) -> Log:
    return Log.load(str(tmp_path / name), LogConfig(**config), now_ms=0)


def _stored(log: Log) -> bytes:
    return bytes(log.read(log.log_start_offset, 1 << 24, None, True).to_bytes())


# ------------------------------------------------------------------ the bombs, per codec


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD])
def test_bomb_on_a_compacted_topic_is_refused_in_bounded_memory(tmp_path: Path, codec: int) -> None:
    b = bomb(codec)
    assert len(b) < 300_000  # a small request...
    log = _log(tmp_path, "c-0", cleanup_policy="compact")
    result, peak = peak_of(lambda: log.append_as_leader(b, 0, 1_000))
    assert isinstance(result, RecordTooLargeError), result  # ...expanding past the bound
    assert result.error_code == 10 and "decompress to more than" in str(result)
    assert peak < PEAK_LIMIT, peak
    assert log.log_end_offset == 0
    # the log keeps taking appends
    log.append_as_leader(bytearray(build_batch([(b"k", b"v", [], 1_000)])), 0, 1_000)
    assert log.log_end_offset == 1


@pytest.mark.parametrize(
    ("codec", "target"),
    [(GZIP, "zstd"), (LZ4, "gzip"), (ZSTD, "lz4"), (ZSTD, "snappy"), (GZIP, "uncompressed")],
)
def test_bomb_on_a_recompressing_topic_is_refused_in_bounded_memory(
    tmp_path: Path, codec: int, target: str
) -> None:
    b = bomb(codec)
    log = _log(tmp_path, "r-0", compression_type=target)
    result, peak = peak_of(lambda: log.append_as_leader(b, 0, 1_000))
    assert isinstance(result, RecordTooLargeError), result
    assert result.error_code == 10
    assert peak < PEAK_LIMIT, peak
    assert log.log_end_offset == 0 and log.size == 0


def test_snappy_expands_at_most_22_times_and_is_streamed(tmp_path: Path) -> None:
    """Snappy cannot expand past the bound (21x at best, and a batch is at most
    max.message.bytes), so its batches are read in bounded memory: a batch of 3 MB holding
    64 MB of keyless records is named INVALID_RECORD on a compacted topic, and refused
    RECORD_TOO_LARGE once stored uncompressed, without ever holding the 64 MB."""
    records = (p for i in range(64) for p in record_pieces(None, MiB - 16, offset_delta=i))
    b = batch_around(_xerial(records), 64, SNAPPY)
    assert len(b) < 4 * MiB
    log = _log(tmp_path, "c-0", cleanup_policy="compact", max_message_bytes=4 * MiB)
    result, peak = peak_of(lambda: log.append_as_leader(bytearray(b), 0, 1_000))
    assert isinstance(result, InvalidRecordError) and result.error_code == 87, result
    assert [i for i, _ in getattr(result, "record_errors", [])] == list(range(64))
    assert peak < PEAK_LIMIT, peak
    log = _log(tmp_path, "u-0", compression_type="uncompressed", max_message_bytes=4 * MiB)
    result, peak = peak_of(lambda: log.append_as_leader(bytearray(b), 0, 1_000))
    assert isinstance(result, RecordTooLargeError), result
    assert peak < 4 * MiB + PEAK_LIMIT, peak  # the new batch, up to max.message.bytes


# ------------------------------------------------------------------ what is still accepted


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_highly_compressible_batch_is_accepted_in_bounded_memory(tmp_path: Path, codec: int) -> None:
    """16 MB of records in a batch far below max.message.bytes (what a producer with a large
    batch.size and very compressible data sends; Kafka accepts it): stored, on a compacted topic
    and on one converting codecs, without holding the 16 MB."""
    n = 16
    pieces = (p for i in range(n) for p in record_pieces(b"key-%d" % i, MiB, offset_delta=i))
    b = batch_around(COMPRESSORS[codec](pieces), n, codec)
    assert len(b) < MiB
    target = "gzip" if codec != GZIP else "zstd"
    for name, cfg in (("c-0", {"cleanup_policy": "compact"}), ("r-0", {"compression_type": target})):
        log = _log(tmp_path, name, **cfg)
        result, peak = peak_of(partial(log.append_as_leader, bytearray(b), 0, 1_000))
        assert not isinstance(result, Exception), result
        assert (result.first_offset, result.last_offset) == (0, n - 1)
        assert peak < PEAK_LIMIT, (name, peak)
    stored = _stored(log)  # the recompressed one
    (h,) = iter_batches(stored)
    assert h.compression == (1 if target == "gzip" else 4)
    recs = decode_batch(stored)
    assert [(r.key, len(r.value or b"")) for r in recs] == [(b"key-%d" % i, MiB) for i in range(n)]


# ------------------------------------------------------------------ through the broker


def test_broker_refuses_a_bomb_and_keeps_serving(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (_s, c):
            assert (await create(c, "compacted", 1, {"cleanup.policy": "compact"}))["error_code"] == 0
            assert (await create(c, "conv", 1, {"compression.type": "gzip"}))["error_code"] == 0
            for topic in ("compacted", "conv"):
                r = await produce(c, topic, 0, bytes(bomb(ZSTD)))
                assert r["error_code"] == 10, r  # MESSAGE_TOO_LARGE
                assert r["record_errors"] == []
                ok = build_batch([(b"k", b"still here", [], 1_000)])
                r = await produce(c, topic, 0, ok)
                assert (r["error_code"], r["base_offset"]) == (0, 0)
                f = await fetch(c, topic, 0, 0)
                assert [x.value for x in records_of(bytes(f["records"]))] == [b"still here"]

    asyncio.run(go())


# ------------------------------------------------------------------ the cleaner


def _cleaner_env(tmp_path: Path) -> tuple[LogManager, Log]:
    """A compacted log whose batches arrive as a follower's would (unchecked): how a batch
    produced before the topic became compacted looks to the cleaner."""
    config = LogConfig(
        segment_bytes=4 * MiB,
        cleanup_policy=("compact",),
        min_cleanable_dirty_ratio=0.01,
        file_delete_delay_ms=0,
    )
    lm = LogManager([str(tmp_path)], config, FakeClock(0), cleaner_config=CleanerConfig())
    return lm, lm.get_or_create_log("t", 0, config)


def _append_unchecked(log: Log, batch: bytearray) -> None:
    struct.pack_into(">q", batch, 0, log.log_end_offset)  # base offset
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c(bytes(batch[ATTRIBUTES_OFFSET:])))
    log.append_as_follower(batch, now_ms=1_000)
    log.roll(now_ms=1_000)
    log.high_watermark = log.log_end_offset


def test_cleaner_reads_a_batch_of_many_tiny_records_in_bounded_memory(tmp_path: Path) -> None:
    """10,000 records of one key: the cleaner keeps the last one without ever holding a Python
    object per record (which took ten times the memory of the batch's records). Small, because
    tracemalloc makes every allocation slow."""
    n = 10_000
    lm, log = _cleaner_env(tmp_path)
    try:
        tiny = bytearray(
            build_batch([(b"k", b"v%d" % (i % 10), [], 1_000) for i in range(n)], compression=ZSTD)
        )
        _append_unchecked(log, tiny)
        _append_unchecked(log, bytearray(build_batch([(b"pad", b"p", [], 1_000)])))
        cleaned, peak = peak_of(lambda: lm.cleaner.clean_once(10**6))
        assert cleaned == 1, cleaned
        assert peak < 1 * MiB, peak
        kept = [
            (r.offset, r.key)
            for seg in log.segments
            for h in seg.iter_batch_headers()
            for r in decode_batch(seg.read_bytes(h.position, h.size))
        ]
        assert kept == [(n - 1, b"k"), (n, b"pad")]
    finally:
        lm.shutdown()


def test_cleaner_gives_up_on_a_bomb_and_the_log_keeps_serving(tmp_path: Path) -> None:
    lm, log = _cleaner_env(tmp_path)
    try:
        _append_unchecked(log, bomb(ZSTD))
        _append_unchecked(log, bytearray(build_batch([(b"k", b"small", [], 1_000)])))
        cleaned, peak = peak_of(lambda: lm.cleaner.clean_once(10**6))
        assert cleaned == 0  # the log is left as it is (marked uncleanable until restart)
        assert peak < BOMB - 4 * MiB, peak  # stopped at the bound, never the whole 40 MB
        assert [h.base_offset for seg in log.segments for h in seg.iter_batch_headers()] == [0, 1]
        log.append_as_leader(bytearray(build_batch([(b"k", b"new", [], 1_000)])), 0, 1_000)
        assert log.log_end_offset == 3
    finally:
        lm.shutdown()


# ------------------------------------------------------------------ __consumer_offsets


def test_offsets_topic_load_skips_a_bomb_in_bounded_memory(tmp_path: Path) -> None:
    """A bomb that got into __consumer_offsets (written before client appends to internal
    topics were refused) is skipped when the partition loads; the groups around it load."""
    from test_group_coordinator import FakeReplicaManager, load, manager

    from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
    from odradek.coordinator.group.records import OffsetAndMetadata

    async def run() -> None:
        clock = [1000]
        rm = FakeReplicaManager(tmp_path, 1)
        mgr = manager(rm, clock)
        await load(mgr)
        g = mgr.get_or_create_classic_group("before")
        assert await mgr.store_offsets(g, {("t", 0): OffsetAndMetadata(7, -1, "", 1000)}) == 0
        offsets_log = rm.partitions[(OFFSETS_TOPIC, 0)].log
        b = bomb(ZSTD)
        struct.pack_into(">q", b, 0, offsets_log.log_end_offset)
        struct.pack_into(">I", b, CRC_OFFSET, crc32c(bytes(b[ATTRIBUTES_OFFSET:])))
        offsets_log.append_as_follower(b)
        offsets_log.high_watermark = offsets_log.log_end_offset
        h = mgr.get_or_create_classic_group("after")
        assert await mgr.store_offsets(h, {("t", 0): OffsetAndMetadata(9, -1, "", 1000)}) == 0

        mgr2 = manager(rm, clock)
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            await load(mgr2)
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
        assert peak < BOMB - 4 * MiB, peak  # stopped at the bound, never the whole 40 MB
        for name, offset in (("before", 7), ("after", 9)):
            group = mgr2.get_group(name)
            assert group is not None and group.offsets[("t", 0)].offset == offset

    asyncio.run(run())
