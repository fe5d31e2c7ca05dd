"""KIP-219 muting in the SocketServer: a throttled client gets its response at once, and no
request of its connection is handled until the throttle time has passed; other connections
are not held up."""

from __future__ import annotations

import asyncio
import time

from socket_support import frame, read_response, run

from odradek.network.request_channel import ConnectionInfo, ResponseBuffers
from odradek.network.socket_server import SocketServer


class MutingHandler:
    """``mute:<ms>`` mutes the connection; every request is answered at once."""

    def __init__(self) -> None:
        self.handled: list[tuple[bytes, float]] = []

    def handle(self, conn: ConnectionInfo, req: bytearray) -> ResponseBuffers:
        body = bytes(req[8:])
        self.handled.append((body, time.monotonic()))
        if body.startswith(b"mute:"):
            assert conn.mute_for is not None
            conn.mute_for(int(body[5:]))
        return [bytes(req[4:8]), b"ok"]


def test_muted_connection_reads_nothing_for_the_throttle_time() -> None:
    async def main() -> None:
        handler = MutingHandler()
        server = SocketServer("127.0.0.1", 0, handler, listener_name="PLAINTEXT")
        await server.start()
        try:
            r, w = await asyncio.open_connection("127.0.0.1", server.port)
            other_r, other_w = await asyncio.open_connection("127.0.0.1", server.port)
            start = time.monotonic()
            # Pipelined: the second request is already in the server's buffer when it mutes.
            w.write(frame(1, b"mute:300") + frame(2, b"after"))
            await w.drain()
            assert await read_response(r) == (1, b"ok")
            assert time.monotonic() - start < 0.25  # the throttled response is not held back
            # Another connection is served meanwhile.
            other_w.write(frame(9, b"other"))
            assert await read_response(other_r) == (9, b"ok")
            assert await read_response(r) == (2, b"ok")
            handled_at = dict(handler.handled)
            assert handled_at[b"after"] - handled_at[b"mute:300"] >= 0.29
            assert handled_at[b"other"] < handled_at[b"after"]
            # Each throttled request mutes the connection in turn (200 ms, then 50 ms).
            w.write(frame(3, b"mute:200") + frame(4, b"mute:50") + frame(5, b"last"))
            await w.drain()
            for corr in (3, 4, 5):
                assert (await read_response(r))[0] == corr
            handled_at = dict(handler.handled)
            assert handled_at[b"last"] - handled_at[b"mute:200"] >= 0.19 + 0.04
            w.close()
            other_w.close()
        finally:
            await server.stop()

    run(main())
