"""NetworkClient over loopback against the socket server: pending requests fail with a clear error
when the connection goes, the next request reconnects (reconnect.backoff.ms), a correlation id
that does not match closes the connection, and requests beyond max_in_flight wait in order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from socket_support import run

from odradek.network.client import ConnectionClosed, NetworkClient
from odradek.network.request_channel import ConnectionInfo, ResponseBuffers
from odradek.network.socket_server import SocketServer
from odradek.protocol import messages as m
from odradek.protocol.header import decode_request_header, encode_response_header

API = m.API_VERSIONS
VERSION = 3


def body(name: str) -> dict[str, Any]:
    return {"client_software_name": name, "client_software_version": "1"}


class Handler:
    """Answers ApiVersions with one api key per request seen; ``delay`` waits to be told,
    ``wrong-id`` answers with another correlation id."""

    def __init__(self) -> None:
        self.count = 0
        self.delayed: list[asyncio.Future[ResponseBuffers | None]] = []

    def handle(self, conn: ConnectionInfo, frame: bytearray) -> Any:
        header, pos = decode_request_header(frame, API.request_header_version(VERSION))
        name = API.decode_request(VERSION, frame, pos)[0]["client_software_name"]
        self.count += 1
        corr = header.correlation_id + (1000 if name == "wrong-id" else 0)
        response = [
            encode_response_header(corr, 0),
            *API.encode_response(
                VERSION,
                {
                    "error_code": 0,
                    "api_keys": [{"api_key": self.count, "min_version": 0, "max_version": 0}],
                    "throttle_time_ms": 0,
                },
            ),
        ]
        if name == "delay":
            fut: asyncio.Future[ResponseBuffers | None] = asyncio.get_running_loop().create_future()
            self.delayed.append(fut)
            return fut
        return response


async def start() -> tuple[SocketServer, Handler]:
    handler = Handler()
    server = SocketServer("127.0.0.1", 0, handler, listener_name="PLAINTEXT")
    await server.start()
    return server, handler


def test_disconnect_fails_pending_requests_and_the_next_request_reconnects() -> None:
    async def main() -> None:
        server, handler = await start()
        c = NetworkClient("127.0.0.1", server.port, reconnect_backoff_ms=10)
        try:
            await c.connect()
            assert (await c.send(API, VERSION, body("a")))["error_code"] == 0
            pending = c.send_nowait(API, VERSION, body("delay"))
            for _ in range(200):
                if handler.delayed:
                    break
                await asyncio.sleep(0.01)
            for conn in list(server._connections):
                conn.abort()
            with pytest.raises(ConnectionClosed, match=r"lost .* with ApiVersions v3 \(correlation id 2\) unanswered"):
                await asyncio.wait_for(pending, 5)
            assert not c.connected and c.backoff.failed_attempts == 1
            # The next request reconnects after the backoff and is answered.
            resp = await asyncio.wait_for(c.send(API, VERSION, body("b")), 5)
            assert resp["api_keys"][0]["api_key"] == 3
            assert c.connected and c.backoff.failed_attempts == 0
        finally:
            await c.close()
            await server.stop()

    run(main())


def test_a_failed_reconnection_fails_the_waiting_requests_and_backs_off_further() -> None:
    async def main() -> None:
        server, _ = await start()
        c = NetworkClient("127.0.0.1", server.port, reconnect_backoff_ms=5, reconnect_backoff_max_ms=40)
        try:
            await c.connect()
            await server.stop()
            for attempt in range(1, 4):
                with pytest.raises(ConnectionClosed, match="cannot reconnect to 127.0.0.1"):
                    await asyncio.wait_for(c.send(API, VERSION, body("x")), 5)
                # The lost connection counts as the first failure, each failed attempt as one more.
                assert c.backoff.failed_attempts == attempt + 1
                assert c.backoff.backoff_ms <= 40
        finally:
            await c.close()

    run(main())


def test_a_response_with_the_wrong_correlation_id_closes_the_connection() -> None:
    async def main() -> None:
        server, _ = await start()
        try:
            async with NetworkClient("127.0.0.1", server.port) as c:
                with pytest.raises(ConnectionClosed, match=r"protocol error: Correlation id for response \(1001\) does not match request \(1\)"):
                    await asyncio.wait_for(c.send(API, VERSION, body("wrong-id")), 5)
                resp = await asyncio.wait_for(c.send(API, VERSION, body("fine")), 5)  # reconnects
                assert resp["error_code"] == 0
        finally:
            await server.stop()

    run(main())


def test_requests_beyond_max_in_flight_wait_in_order() -> None:
    async def main() -> None:
        server, _ = await start()
        try:
            async with NetworkClient("127.0.0.1", server.port, max_in_flight=2) as c:
                futs = [c.send_nowait(API, VERSION, body(str(i))) for i in range(10)]
                assert c.core.in_flight == 2
                resps = await asyncio.wait_for(asyncio.gather(*futs), 5)
                assert [r["api_keys"][0]["api_key"] for r in resps] == list(range(1, 11))
                assert c.core.in_flight == 0
        finally:
            await server.stop()

    run(main())
