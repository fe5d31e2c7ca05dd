"""Compression codecs for RecordBatch v2 payloads (the records section after the header)."""

from __future__ import annotations

import gzip
import io
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from odradek.records.batch import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
)
from odradek.records.errors import CorruptRecordError, UnsupportedCompressionTypeError

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

_zstd_decompressor = zstandard.ZstdDecompressor()

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


def _snappy_decompress(data: bytes | bytearray | memoryview) -> bytes:
    mv = memoryview(data)
    if bytes(mv[:8]) == XERIAL_MAGIC and len(mv) >= 16:
        out = bytearray()
        pos = 16
        n = len(mv)
        while pos < n:
            if n - pos < 4:
                raise CorruptRecordError("truncated xerial snappy block length")
            (length,) = struct.unpack_from(">i", mv, pos)
            pos += 4
            if length < 0 or pos + length > n:
                raise CorruptRecordError("truncated xerial snappy block")
            out += bytes(cramjam.snappy.decompress_raw(mv[pos : pos + length]))
            pos += length
        return bytes(out)
    if bytes(mv[:10]) == SNAPPY_FRAMED_MAGIC:
        return bytes(cramjam.snappy.decompress(mv))
    return bytes(cramjam.snappy.decompress_raw(mv))


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


def decompress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    try:
        if codec == COMPRESSION_NONE:
            return bytes(data)
        if codec == COMPRESSION_GZIP:
            # wbits 47 = auto-detect gzip or zlib header; handles concatenated members poorly,
            # so loop over members explicitly.
            out = bytearray()
            rest = bytes(data)
            while rest:
                d = zlib.decompressobj(47)
                out += d.decompress(rest)
                out += d.flush()
                if not d.eof:
                    raise CorruptRecordError("truncated gzip stream")
                rest = d.unused_data
            return bytes(out)
        if codec == COMPRESSION_SNAPPY:
            return _snappy_decompress(data)
        if codec == COMPRESSION_LZ4:
            return bytes(lz4.frame.decompress(bytes(data)))
        if codec == COMPRESSION_ZSTD:
            # Frames written by streaming compressors may lack the content size: stream it.
            reader = _zstd_decompressor.stream_reader(
                io.BytesIO(bytes(data)), read_across_frames=True
            )
            with reader:
                return reader.read()
    except CorruptRecordError:
        raise
    except Exception as exc:  # codec libraries raise assorted error types
        raise CorruptRecordError(
            f"failed to decompress {CODEC_NAMES.get(codec, codec)} records: {exc}"
        ) from exc
    raise UnsupportedCompressionTypeError(f"unknown compression codec {codec}")
