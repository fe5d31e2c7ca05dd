"""Helpers for the socket-server tests: Kafka framing for hand-made requests, reading a response,
running a coroutine with a deadline."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable


def frame(corr: int, body: bytes) -> bytes:
    """A size-prefixed request: api key 0, version 0, correlation id ``corr``, then ``body``."""
    payload = struct.pack(">hhi", 0, 0, corr) + body
    return struct.pack(">i", len(payload)) + payload


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """(correlation id, rest of the response) of the next response frame."""
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    data = await reader.readexactly(size)
    return int.from_bytes(data[:4], "big"), data[4:]


def run(coro: Awaitable[None], timeout: float = 10) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))  # type: ignore[arg-type]
