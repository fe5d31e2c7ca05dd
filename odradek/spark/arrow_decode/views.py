"""The buffer of records being decoded, seen through numpy: the bytes, and overlapping
little-endian views of the 2, 4 and 8 bytes starting at every byte; lookup tables for short
varints and record sizes."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

Buffer = bytes | bytearray | memoryview
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]


class Views(NamedTuple):
    """The decoded buffer and overlapping little-endian views of it: ``u16[i]`` is the 2 bytes at
    ``i``, ``u32[i]`` the 4 and ``u64[i]`` the 8 bytes at ``i``. A strided slice of a view reads
    one field of every record of a run; indexing with positions gathers up to 8 bytes at each."""

    a: U8
    u16: npt.NDArray[np.uint16]
    u32: npt.NDArray[np.uint32]
    u64: npt.NDArray[np.uint64]


def views(a: U8) -> Views:
    return Views(a, overlapping(a, "<u2"), overlapping(a, "<u4"), overlapping(a, "<u8"))


def overlapping(a: U8, dtype: str) -> Any:
    """``a`` seen as items of ``dtype`` starting at every byte."""
    size = np.dtype(dtype).itemsize
    return np.ndarray((max(len(a) - size + 1, 0),), dtype=dtype, buffer=a, strides=(1,))


def view_size(width: int) -> int:
    """Item size of the narrowest view holding ``width`` (1 to 8) bytes."""
    return 1 if width == 1 else 2 if width == 2 else 4 if width <= 4 else 8


def view(v: Views, width: int) -> Any:
    size = view_size(width)
    return v.a if size == 1 else v.u16 if size == 2 else v.u32 if size == 4 else v.u64


def _varint16_tables() -> tuple[I64, U8]:
    """Zigzag value and width of the varint whose first two bytes are the little-endian 16 bits
    ``x`` (width 0: it is longer than 2 bytes)."""
    x = np.arange(1 << 16, dtype=np.int64)
    b0 = x & 0xFF
    b1 = x >> 8
    one = b0 < 0x80
    two = ~one & (b1 < 0x80)
    raw = np.where(one, b0, (b0 & 0x7F) | (b1 << 7))
    values: I64 = (raw >> 1) ^ -(raw & 1)
    values[~(one | two)] = 0
    widths = np.where(one, 1, np.where(two, 2, 0)).astype(np.uint8)
    return values, widths


V16, W16 = _varint16_tables()


def _record_size_table() -> list[int]:
    """Record size (length varint + length) by the little-endian 16 bits at the record's start,
    for 1- and 2-byte length varints (0: longer). The sign of the zigzag length is ignored:
    a record whose length is not positive fails when its fields are decoded."""
    x = np.arange(1 << 16, dtype=np.int64)
    b0 = x & 0xFF
    b1 = x >> 8
    one = b0 < 0x80
    size = np.where(one, 1 + (b0 >> 1), 2 + (((b0 & 0x7F) | (b1 << 7)) >> 1))
    size[~one & (b1 >= 0x80)] = 0
    sizes: list[int] = size.tolist()
    return sizes


RECORD_SIZE = _record_size_table()
