"""A transactional gzip "bomb" for the hostile-transaction tests (tests/unit/test_txn_hostile.py
and tests/integration/test_txn_hostile_process.py): a small batch that decompresses to a huge one."""

from __future__ import annotations

import struct
import zlib

from crc32c import crc32c

from odradek.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, RECORD_BATCH_OVERHEAD
from odradek.records.builder import build_batch
from odradek.records.varint import encode_varint

GZIP = 1


def txn_bomb(pid: int, epoch: int = 0, size: int = 40 * 1024 * 1024) -> bytes:
    """A transactional gzip batch of producer ``pid``/``epoch`` holding one record whose value is
    ``size`` zero bytes, built with zlib directly (~40 KB for 40 MiB)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = b"\x00\x00\x00\x02k" + encode_varint(size)  # attributes, deltas, key "k", value length
    section = comp.compress(encode_varint(len(body) + size + 1) + body)
    zeros = bytes(1024 * 1024)
    for _ in range(size // len(zeros)):
        section += comp.compress(zeros)
    section += comp.compress(b"\x00") + comp.flush()  # no headers
    model = build_batch([(b"k", b"v", [], 1_000)], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                        is_transactional=True)
    out = bytearray(model[:RECORD_BATCH_OVERHEAD]) + section
    struct.pack_into(">i", out, 8, len(out) - 12)  # batch length
    attrs = struct.unpack_from(">h", out, ATTRIBUTES_OFFSET)[0]
    struct.pack_into(">h", out, ATTRIBUTES_OFFSET, (attrs & ~0x07) | GZIP)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(bytes(out[ATTRIBUTES_OFFSET:])))
    return bytes(out)
