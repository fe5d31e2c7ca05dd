"""NetworkClient: the asyncio Kafka-protocol client Odradek nodes use to talk to each other.

One connection, requests pipelined and matched to responses by correlation id, requests and
responses encoded with the same declarative definitions the server uses. Tools and tests use
it too.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from odradek.protocol.header import (
    RequestHeader,
    decode_response_header,
    encode_request_header,
)
from odradek.protocol.schema import Api

_SIZE = struct.Struct(">i")


class ConnectionClosed(ConnectionError):
    """The peer closed the connection (Kafka's way of rejecting some bad requests)."""


class NetworkClient:
    def __init__(self, host: str, port: int, client_id: str = "odradek") -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._next_id = 1
        self._pending: dict[int, tuple[Api, int, asyncio.Future[dict[str, Any]]]] = {}
        self._recv_task: asyncio.Task[None] | None = None

    async def connect(self) -> NetworkClient:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        self._recv_task = asyncio.get_running_loop().create_task(self._receive_loop())
        return self

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except (ConnectionError, OSError):
                pass
        if self._recv_task is not None:
            self._recv_task.cancel()
            try:
                await self._recv_task
            except (asyncio.CancelledError, Exception):
                pass

    async def __aenter__(self) -> NetworkClient:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def send_nowait(self, api: Api, version: int, body: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        """Write a request; the future resolves with the decoded response."""
        assert self._writer is not None, "connect() first"
        cid = self._next_id
        self._next_id += 1
        header = encode_request_header(
            RequestHeader(api.api_key, version, cid, self.client_id), api.request_header_version(version)
        )
        parts = [header, *api.encode_request(version, body)]
        size = sum(len(p) for p in parts)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[cid] = (api, version, fut)
        self._writer.write(_SIZE.pack(size))
        self._writer.writelines(parts)
        return fut

    async def send(self, api: Api, version: int, body: dict[str, Any]) -> dict[str, Any]:
        fut = self.send_nowait(api, version, body)
        assert self._writer is not None
        await self._writer.drain()
        return await fut

    async def send_raw(self, frame: bytes, expect_response: bool = True) -> bytes | None:
        """Write a pre-built frame (size prefix included); return the next raw response frame."""
        assert self._writer is not None and self._recv_task is not None
        self._recv_task.cancel()
        try:
            await self._recv_task
        except (asyncio.CancelledError, Exception):
            pass
        self._recv_task = None
        self._writer.write(frame)
        await self._writer.drain()
        if not expect_response:
            return None
        return await self._read_frame()

    async def _read_frame(self) -> bytes:
        assert self._reader is not None
        try:
            head = await self._reader.readexactly(4)
            (size,) = _SIZE.unpack(head)
            return await self._reader.readexactly(size)
        except asyncio.IncompleteReadError as e:
            raise ConnectionClosed(f"connection to {self.host}:{self.port} closed") from e

    async def _receive_loop(self) -> None:
        try:
            while True:
                frame = await self._read_frame()
                cid = _SIZE.unpack_from(frame, 0)[0]
                entry = self._pending.pop(cid, None)
                if entry is None:
                    continue
                api, version, fut = entry
                _, pos = decode_response_header(frame, api.response_header_version(version))
                body, _ = api.decode_response(version, frame, pos)
                if not fut.done():
                    fut.set_result(body)
        except (ConnectionClosed, ConnectionError, OSError) as e:
            for _api, _v, fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionClosed(str(e)))
            self._pending.clear()
