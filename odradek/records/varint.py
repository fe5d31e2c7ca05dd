"""Zigzag varint / varlong helpers used by the v2 record format."""

from __future__ import annotations


def zigzag_encode(value: int) -> int:
    # Any width: non-negative n -> 2n, negative n -> -2n-1.
    return (value << 1) if value >= 0 else ((-value) << 1) - 1


def zigzag_decode(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def encode_varint(value: int) -> bytes:
    """Encode a signed integer as a zigzag varint (Kafka varint/varlong)."""
    v = (value << 1) if value >= 0 else ((-value) << 1) - 1
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def write_varint(out: bytearray, value: int) -> None:
    v = (value << 1) if value >= 0 else ((-value) << 1) - 1
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zigzag varint at ``pos``; returns (value, new_pos). Raises ValueError."""
    result = 0
    shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
    return (result >> 1) ^ -(result & 1), pos


def decode_unsigned_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def varint_size(value: int) -> int:
    v = (value << 1) if value >= 0 else ((-value) << 1) - 1
    size = 1
    while v > 0x7F:
        v >>= 7
        size += 1
    return size
