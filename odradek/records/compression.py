"""Compression codecs for RecordBatch v2 payloads (the records section after the header)."""

from __future__ import annotations

import gzip
import io
import struct
import zlib
from collections.abc import Iterator

import cramjam
import lz4.frame
import zstandard
from crc32c import crc32c

from odradek.records.batch import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
)
from odradek.records.errors import (
    CorruptRecordError,
    RecordTooLargeError,
    UnsupportedCompressionTypeError,
)

# snappy-java's SnappyOutputStream framing: magic, version, min compatible version, then
# (int32 length, raw snappy block) chunks.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
# Official snappy framing format stream identifier chunk.
SNAPPY_FRAMED_MAGIC = b"\xff\x06\x00\x00sNaPpY"

CODEC_NAMES = {
    COMPRESSION_NONE: "none",
    COMPRESSION_GZIP: "gzip",
    COMPRESSION_SNAPPY: "snappy",
    COMPRESSION_LZ4: "lz4",
    COMPRESSION_ZSTD: "zstd",
}
CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}

# libzstd's own default window limit (ZSTD_WINDOWLOG_LIMIT_DEFAULT, 128 MiB), the one Kafka's
# zstd-jni reader applies too: frames asking for a larger window are refused, not allocated.
ZSTD_MAX_WINDOW = 1 << 27
_zstd_decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)

# Decompression is streamed in pieces of this size, so that what a batch holds never has to be
# in memory at once (a few KB of zstd can stand for gigabytes).
DECOMPRESS_CHUNK = 64 * 1024
# How far the broker lets one batch expand when it must read its records (compacted topics,
# compression.type conversion, the cleaner, internal topics): DECOMPRESS_EXPANSION times
# max.message.bytes, and never less than DECOMPRESS_MIN_LIMIT (32 MiB with Kafka's default
# max.message.bytes). Memory does not depend on it -- those paths stream -- but the work does:
# a batch of tiny records costs about a microsecond per record to walk, so this caps what one
# produce can make the broker do at a few seconds. Kafka sets no such bound, so it is generous:
# librdkafka's batches are at most batch.size (1 MB) *before* compression; the Java producer
# fills batch.size (16 KB by default) *after* compression by its running ratio estimate, so its
# batches reach 32 MiB only with batch.size raised to 1 MB and data compressing 32:1, or the
# default batch.size and data compressing 2000:1.
DECOMPRESS_EXPANSION = 32
DECOMPRESS_MIN_LIMIT = 32 * 1024 * 1024
# Snappy can at best turn a 3-byte copy element into 64 bytes: no valid block expands more.
_SNAPPY_MAX_RATIO = 22
_SNAPPY_FRAME_MAX = 65536

# Kafka's compression levels (KIP-390): compression.gzip.level, compression.lz4.level,
# compression.zstd.level, with their ranges and defaults. gzip's -1 means zlib's default (6).
GZIP_LEVEL_DEFAULT = -1
GZIP_LEVEL_MIN = 1
GZIP_LEVEL_MAX = 9
LZ4_LEVEL_DEFAULT = 9
LZ4_LEVEL_MIN = 1
LZ4_LEVEL_MAX = 17
ZSTD_LEVEL_DEFAULT = 3
ZSTD_LEVEL_MIN = -131072
ZSTD_LEVEL_MAX = 22
_GZIP_CODEC_DEFAULT = 6
_LZ4_MAX_HC_LEVEL = 16


def _snappy_compress_xerial(data: bytes | bytearray | memoryview) -> bytes:
    mv = memoryview(data)
    out = bytearray(XERIAL_HEADER)
    for start in range(0, len(mv), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(mv[start : start + XERIAL_BLOCK_SIZE]))
        out += struct.pack(">i", len(block))
        out += block
    return bytes(out)


def compress(codec: int, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
    """Compress a records section with ``codec`` at ``level`` (Kafka's level scale for the codec;
    None = Kafka's default level). Snappy has no levels."""
    if codec == COMPRESSION_NONE:
        return bytes(data)
    if codec == COMPRESSION_GZIP:
        if level is None or level == GZIP_LEVEL_DEFAULT:
            level = _GZIP_CODEC_DEFAULT
        return gzip.compress(bytes(data), compresslevel=level)
    if codec == COMPRESSION_SNAPPY:
        return _snappy_compress_xerial(data)
    if codec == COMPRESSION_LZ4:
        return _lz4_compress(data, LZ4_LEVEL_DEFAULT if level is None else level)
    if codec == COMPRESSION_ZSTD:
        zstd_level = ZSTD_LEVEL_DEFAULT if level is None else level
        return zstandard.ZstdCompressor(level=zstd_level).compress(data)
    raise UnsupportedCompressionTypeError(f"unknown compression codec {codec}")


def _lz4_compress(data: bytes | bytearray | memoryview, level: int) -> bytes:
    # A frame like the one Kafka's own writer produces: independent 64 KiB blocks and no content
    # size. Java clients refuse linked blocks ("Dependent block stream is unsupported"), which
    # are liblz4's default. As in Kafka, the default level (9) means lz4's fast compressor and
    # any other level the high-compression one (here 0 selects the fast compressor; liblz4 caps
    # high-compression levels and treats those below 3 as fast).
    return bytes(
        lz4.frame.compress(
            data,
            compression_level=0 if level == LZ4_LEVEL_DEFAULT else min(level, _LZ4_MAX_HC_LEVEL),
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    )




def decompressed_limit(max_message_bytes: int) -> int:
    """The most a batch of a topic with ``max.message.bytes`` may decompress to."""
    return max(DECOMPRESS_MIN_LIMIT, DECOMPRESS_EXPANSION * max(max_message_bytes, 0))


def _snappy_raw(block: bytes | bytearray | memoryview, limit: int) -> bytes:
    """One raw snappy block, after checking its declared length (the varint preamble) against
    what the block could possibly hold and against ``limit`` -- before anything is allocated."""
    mv = memoryview(block)
    declared = 0
    shift = 0
    for i in range(min(len(mv), 5)):
        b = mv[i]
        declared |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    else:
        raise CorruptRecordError("snappy block has an invalid length preamble")
    if declared > _SNAPPY_MAX_RATIO * len(mv):
        raise CorruptRecordError(
            f"snappy block of {len(mv)} bytes claims {declared} uncompressed bytes"
        )
    if declared > limit:
        raise RecordTooLargeError(
            f"snappy block claims {declared} uncompressed bytes, more than the {limit} allowed"
        )
    return bytes(cramjam.snappy.decompress_raw(mv))


def _iter_snappy(mv: memoryview, limit: int) -> Iterator[bytes]:
    n = len(mv)
    if bytes(mv[:8]) == XERIAL_MAGIC and n >= 16:
        pos = 16
        while pos < n:
            if n - pos < 4:
                raise CorruptRecordError("truncated xerial snappy block length")
            (length,) = struct.unpack_from(">i", mv, pos)
            pos += 4
            if length < 0 or pos + length > n:
                raise CorruptRecordError("truncated xerial snappy block")
            yield _snappy_raw(mv[pos : pos + length], limit)
            pos += length
        return
    if bytes(mv[:10]) == SNAPPY_FRAMED_MAGIC:
        yield from _iter_snappy_framed(mv)
        return
    yield _snappy_raw(mv, limit)


def _iter_snappy_framed(mv: memoryview) -> Iterator[bytes]:
    """The snappy framing format (stream identifier, then chunks of at most 64 KiB each)."""
    pos = 0
    n = len(mv)
    while pos < n:
        if n - pos < 4:
            raise CorruptRecordError("truncated snappy frame header")
        kind = mv[pos]
        length = mv[pos + 1] | mv[pos + 2] << 8 | mv[pos + 3] << 16
        pos += 4
        if pos + length > n:
            raise CorruptRecordError("truncated snappy frame")
        body = mv[pos : pos + length]
        pos += length
        if kind in (0x00, 0x01):
            if length < 4:
                raise CorruptRecordError("snappy frame too short for its checksum")
            if kind == 0x00:
                data = _snappy_raw(body[4:], _SNAPPY_FRAME_MAX)
            else:
                data = bytes(body[4:])
                if len(data) > _SNAPPY_FRAME_MAX:
                    raise CorruptRecordError("uncompressed snappy frame larger than 64 KiB")
            crc = crc32c(data)
            masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
            if masked != struct.unpack_from("<I", body, 0)[0]:
                raise CorruptRecordError("snappy frame failed its checksum")
            yield data
        elif 0x02 <= kind <= 0x7F:
            raise CorruptRecordError(f"reserved unskippable snappy frame type {kind}")
        # 0xff stream identifier, 0x80-0xfe skippable: nothing to yield


def _iter_gzip(data: bytes) -> Iterator[bytes]:
    rest = data
    while rest:
        d = zlib.decompressobj(47)  # gzip or zlib header; concatenated members one by one
        chunk = d.decompress(rest, DECOMPRESS_CHUNK)
        while True:
            if chunk:
                yield chunk
            if d.eof:
                break
            if not d.unconsumed_tail:
                tail = d.flush()
                if tail:
                    yield tail
                if not d.eof:
                    raise CorruptRecordError("truncated gzip stream")
                break
            chunk = d.decompress(d.unconsumed_tail, DECOMPRESS_CHUNK)
        rest = d.unused_data


def _iter_lz4(data: bytes) -> Iterator[bytes]:
    d = lz4.frame.LZ4FrameDecompressor()
    chunk = d.decompress(data, max_length=DECOMPRESS_CHUNK)
    while True:
        if chunk:
            yield chunk
        if d.eof:
            return
        if d.needs_input:
            raise CorruptRecordError("truncated lz4 frame")
        chunk = d.decompress(b"", max_length=DECOMPRESS_CHUNK)
        if not chunk and not d.eof and not d.needs_input:
            raise CorruptRecordError("lz4 frame makes no progress")


def _iter_zstd(data: bytes) -> Iterator[bytes]:
    # Frames written by streaming compressors may lack the content size: stream it.
    with _zstd_decompressor.stream_reader(io.BytesIO(data), read_across_frames=True) as reader:
        while True:
            chunk = reader.read(DECOMPRESS_CHUNK)
            if not chunk:
                return
            yield chunk


def iter_decompress(
    codec: int, data: bytes | bytearray | memoryview, limit: int
) -> Iterator[bytes | memoryview]:
    """The decompressed bytes of a records section, piece by piece (pieces of at most
    :data:`DECOMPRESS_CHUNK` bytes; a snappy block comes whole, and cannot be more than 22 times
    its compressed size). Raises :class:`RecordTooLargeError` as soon as more than ``limit``
    bytes have come out -- the rest is never decompressed -- and :class:`CorruptRecordError` on
    a stream the codec cannot read."""
    if codec == COMPRESSION_NONE:
        if len(data) > limit:
            raise RecordTooLargeError(f"records section of {len(data)} bytes exceeds {limit}")
        yield memoryview(data)
        return
    mv = memoryview(data)
    pieces: Iterator[bytes]
    if codec == COMPRESSION_GZIP:
        pieces = _iter_gzip(bytes(mv))
    elif codec == COMPRESSION_SNAPPY:
        pieces = _iter_snappy(mv, limit)
    elif codec == COMPRESSION_LZ4:
        pieces = _iter_lz4(bytes(mv))
    elif codec == COMPRESSION_ZSTD:
        pieces = _iter_zstd(bytes(mv))
    else:
        raise UnsupportedCompressionTypeError(f"unknown compression codec {codec}")
    total = 0
    while True:
        try:
            piece = next(pieces, None)
        except (CorruptRecordError, RecordTooLargeError):
            raise
        except Exception as exc:  # codec libraries raise assorted error types
            raise CorruptRecordError(
                f"failed to decompress {CODEC_NAMES.get(codec, codec)} records: {exc}"
            ) from exc
        if piece is None:
            return
        total += len(piece)
        if total > limit:
            raise RecordTooLargeError(
                f"{CODEC_NAMES.get(codec, codec)} records decompress to more than {limit} bytes"
            )
        yield piece


def decompress(
    codec: int, data: bytes | bytearray | memoryview, limit: int = DECOMPRESS_MIN_LIMIT
) -> bytes:
    """A whole decompressed records section, refused (:class:`RecordTooLargeError`) past
    ``limit`` bytes. Holds it all in memory: where a batch may be large, stream it with
    :func:`iter_decompress` instead."""
    if codec == COMPRESSION_NONE:
        return bytes(data)
    return b"".join(iter_decompress(codec, data, limit))


class StreamCompressor:
    """Compresses a records section fed piece by piece, producing what :func:`compress` would
    (up to gzip's header fields): the output can be collected as it comes."""

    def __init__(self, codec: int, level: int | None = None) -> None:
        self.codec = codec
        self._pending = bytearray()  # snappy: input waiting for a full xerial block
        if codec == COMPRESSION_GZIP:
            gz_level = _GZIP_CODEC_DEFAULT if level in (None, GZIP_LEVEL_DEFAULT) else level
            self._zlib = zlib.compressobj(gz_level, zlib.DEFLATED, 31)  # gzip wrapper
        elif codec == COMPRESSION_LZ4:
            lz4_level = LZ4_LEVEL_DEFAULT if level is None else level
            self._lz4 = lz4.frame.LZ4FrameCompressor(
                block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                block_linked=False,
                compression_level=0
                if lz4_level == LZ4_LEVEL_DEFAULT
                else min(lz4_level, _LZ4_MAX_HC_LEVEL),
                content_checksum=False,
            )
            self._started = False
        elif codec == COMPRESSION_ZSTD:
            zstd_level = ZSTD_LEVEL_DEFAULT if level is None else level
            self._zstd = zstandard.ZstdCompressor(level=zstd_level).compressobj()
        elif codec not in (COMPRESSION_NONE, COMPRESSION_SNAPPY):
            raise UnsupportedCompressionTypeError(f"unknown compression codec {codec}")
        self._header_done = False

    def compress(self, data: bytes | bytearray | memoryview) -> bytes:
        codec = self.codec
        if codec == COMPRESSION_NONE:
            return bytes(data)
        if codec == COMPRESSION_GZIP:
            return self._zlib.compress(data)
        if codec == COMPRESSION_ZSTD:
            return bytes(self._zstd.compress(data))
        if codec == COMPRESSION_LZ4:
            head = b""
            if not self._started:
                head = bytes(self._lz4.begin())
                self._started = True
            return head + bytes(self._lz4.compress(data))
        # snappy (xerial framing, 32 KiB blocks like snappy-java's)
        out = bytearray()
        if not self._header_done:
            out += XERIAL_HEADER
            self._header_done = True
        self._pending += data
        while len(self._pending) >= XERIAL_BLOCK_SIZE:
            out += self._snappy_block(memoryview(self._pending)[:XERIAL_BLOCK_SIZE])
            del self._pending[:XERIAL_BLOCK_SIZE]
        return bytes(out)

    @staticmethod
    def _snappy_block(block: memoryview) -> bytes:
        raw = bytes(cramjam.snappy.compress_raw(block))
        return struct.pack(">i", len(raw)) + raw

    def flush(self) -> bytes:
        codec = self.codec
        if codec == COMPRESSION_GZIP:
            return self._zlib.flush()
        if codec == COMPRESSION_ZSTD:
            return bytes(self._zstd.flush())
        if codec == COMPRESSION_LZ4:
            head = b"" if self._started else bytes(self._lz4.begin())
            self._started = True
            return head + bytes(self._lz4.flush())
        if codec == COMPRESSION_SNAPPY:
            out = bytearray() if self._header_done else bytearray(XERIAL_HEADER)
            self._header_done = True
            if self._pending:
                out += self._snappy_block(memoryview(self._pending))
                self._pending = bytearray()
            return bytes(out)
        return b""
