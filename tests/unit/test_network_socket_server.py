"""SocketServer over real loopback sockets with a fake handler."""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import struct
from collections.abc import Awaitable
from pathlib import Path

import pytest
from socket_support import frame, read_response, run

from odradek.network.request_channel import (
    CloseConnection,
    ConnectionInfo,
    ResponseBuffers,
)
from odradek.network.socket_server import KafkaConnection, SocketServer
from odradek.network.socket_server import _Region as SocketRegion


class FakeHandler:
    """Echoes the correlation id; the request body says how to answer."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []
        self.futures: dict[int, asyncio.Future[ResponseBuffers | None]] = {}

    def handle(
        self, conn: ConnectionInfo, frame: bytearray
    ) -> ResponseBuffers | Awaitable[ResponseBuffers | None] | None:
        assert isinstance(frame, bytearray)
        corr = frame[4:8]
        body = bytes(frame[8:])
        self.seen.append((conn.connection_id, body))
        if body.startswith(b"delay"):
            fut: asyncio.Future[ResponseBuffers | None] = (
                asyncio.get_running_loop().create_future()
            )
            self.futures[int.from_bytes(corr, "big")] = fut
            return fut
        if body == b"none":
            return None
        if body == b"close":
            raise CloseConnection("client asked to close")
        if body == b"boom":
            raise RuntimeError("handler bug")
        if body.startswith(b"big"):
            frame[8:11] = b"BIG"  # rewrite in place, answer with a view of the same buffer
            return [corr, memoryview(frame)[8:]]
        return [corr, b"ok:", body]


async def _start(max_request_bytes: int = 2 * 1024 * 1024) -> tuple[SocketServer, FakeHandler]:
    handler = FakeHandler()
    server = SocketServer(
        "127.0.0.1", 0, handler, listener_name="PLAINTEXT", max_request_bytes=max_request_bytes
    )
    await server.start()
    assert server.port > 0
    return server, handler


async def _connect(
    server: SocketServer,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", server.port)


async def _assert_closed(reader: asyncio.StreamReader) -> None:
    assert await asyncio.wait_for(reader.read(), 5) == b""


def test_simple_request_response() -> None:
    async def main() -> None:
        server, handler = await _start()
        try:
            r, w = await _connect(server)
            w.write(frame(7, b"hello"))
            assert await read_response(r) == (7, b"ok:hello")
            conn_id = handler.seen[0][0]
            assert conn_id.startswith(f"127.0.0.1:{server.port}-127.0.0.1:")
            w.close()
        finally:
            await server.stop()

    run(main())


def test_pipelined_responses_in_request_order() -> None:
    async def main() -> None:
        server, handler = await _start()
        try:
            r, w = await _connect(server)
            # 1 and 3 are delayed; 2 and 4 are ready at once; 5 has no response at all.
            w.write(
                frame(1, b"delay-a")
                + frame(2, b"x")
                + frame(3, b"delay-b")
                + frame(5, b"none")
                + frame(4, b"y")
            )
            await w.drain()
            while len(handler.futures) < 2:
                await asyncio.sleep(0.01)
            assert [b for _, b in handler.seen] == [b"delay-a", b"x", b"delay-b", b"none", b"y"]
            # Complete out of order: 3 first, then 1.
            handler.futures[3].set_result([b"\x00\x00\x00\x03", b"three"])
            await asyncio.sleep(0.05)
            handler.futures[1].set_result([b"\x00\x00\x00\x01", b"one"])
            got = [await read_response(r) for _ in range(4)]
            assert got == [(1, b"one"), (2, b"ok:x"), (3, b"three"), (4, b"ok:y")]
            w.close()
        finally:
            await server.stop()

    run(main())


def test_delayed_none_is_skipped() -> None:
    async def main() -> None:
        server, handler = await _start()
        try:
            r, w = await _connect(server)
            w.write(frame(1, b"delay") + frame(2, b"x"))
            while not handler.futures:
                await asyncio.sleep(0.01)
            handler.futures[1].set_result(None)
            assert await read_response(r) == (2, b"ok:x")
            w.close()
        finally:
            await server.stop()

    run(main())


def test_large_frame_and_in_place_rewrite() -> None:
    async def main() -> None:
        server, _ = await _start()
        try:
            r, w = await _connect(server)
            body = b"big" + bytes(range(256)) * 4096  # ~1 MB
            w.write(frame(9, body) + frame(10, b"after"))
            assert await read_response(r) == (9, b"BIG" + body[3:])
            assert await read_response(r) == (10, b"ok:after")
            w.close()
        finally:
            await server.stop()

    run(main())


def test_many_small_frames_split_across_reads() -> None:
    async def main() -> None:
        server, _ = await _start()
        try:
            r, w = await _connect(server)
            data = b"".join(frame(i, b"m%d" % i) for i in range(1000))
            for i in range(0, len(data), 7):  # dribble the bytes in tiny pieces
                w.write(data[i : i + 7])
                if i % 700 == 0:
                    await w.drain()
            for i in range(1000):
                assert await read_response(r) == (i, b"ok:m%d" % i)
            w.close()
        finally:
            await server.stop()

    run(main())


def test_backpressure_many_pending() -> None:
    async def main() -> None:
        server, handler = await _start()
        try:
            r, w = await _connect(server)
            w.write(b"".join(frame(i, b"delay") for i in range(300)))
            await asyncio.sleep(0.2)
            # Reading stops after ~100 pending responses.
            assert 100 < len(handler.futures) < 300
            for i in range(300):
                while i not in handler.futures:
                    await asyncio.sleep(0.005)
                handler.futures[i].set_result([i.to_bytes(4, "big"), b"d"])
                assert await read_response(r) == (i, b"d")
            w.close()
        finally:
            await server.stop()

    run(main())


def test_oversized_frame_closes_connection_server_keeps_running(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        server, _ = await _start(max_request_bytes=1000)
        try:
            r, w = await _connect(server)
            w.write(struct.pack(">i", 5000) + b"x" * 100)
            await _assert_closed(r)
            r2, w2 = await _connect(server)
            w2.write(frame(1, b"fine"))
            assert await read_response(r2) == (1, b"ok:fine")
            w.close()
            w2.close()
        finally:
            await server.stop()

    with caplog.at_level(logging.WARNING):
        run(main())
    assert "exceeds socket.request.max.bytes=1000" in caplog.text
    assert "request of 5000 bytes from 127.0.0.1:" in caplog.text


@pytest.mark.parametrize("size", [-1, 0, 3])
def test_invalid_size_closes_connection(size: int, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        server, _ = await _start()
        try:
            r, w = await _connect(server)
            w.write(frame(1, b"first") + struct.pack(">i", size) + b"\x00" * 8)
            assert await read_response(r) == (1, b"ok:first")
            await _assert_closed(r)
            w.close()
        finally:
            await server.stop()

    with caplog.at_level(logging.WARNING):
        run(main())
    assert f"invalid request size {size} from 127.0.0.1:" in caplog.text


def test_truncated_frame_then_disconnect() -> None:
    async def main() -> None:
        server, handler = await _start()
        try:
            r, w = await _connect(server)
            w.write(struct.pack(">i", 100) + b"\x00" * 20)
            await w.drain()
            w.close()
            await w.wait_closed()
            for _ in range(100):
                if server.connection_count == 0:
                    break
                await asyncio.sleep(0.01)
            assert server.connection_count == 0
            assert handler.seen == []
            r2, w2 = await _connect(server)
            w2.write(frame(2, b"next"))
            assert await read_response(r2) == (2, b"ok:next")
            w2.close()
        finally:
            await server.stop()

    run(main())


def test_handler_exception_closes_only_that_connection(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        server, _ = await _start()
        try:
            r1, w1 = await _connect(server)
            r2, w2 = await _connect(server)
            w1.write(frame(1, b"a") + frame(2, b"boom") + frame(3, b"never"))
            assert await read_response(r1) == (1, b"ok:a")
            await _assert_closed(r1)
            w2.write(frame(4, b"b"))
            assert await read_response(r2) == (4, b"ok:b")
            w1.close()
            w2.close()
        finally:
            await server.stop()

    with caplog.at_level(logging.ERROR):
        run(main())
    assert "RuntimeError: handler bug" in caplog.text


def test_close_connection_flushes_earlier_responses() -> None:
    async def main() -> None:
        server, handler = await _start()
        try:
            r, w = await _connect(server)
            w.write(frame(1, b"delay") + frame(2, b"close") + frame(3, b"never"))
            while not handler.futures:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.02)
            handler.futures[1].set_result([b"\x00\x00\x00\x01", b"late"])
            assert await read_response(r) == (1, b"late")
            await _assert_closed(r)
            assert [b for _, b in handler.seen] == [b"delay", b"close"]
        finally:
            await server.stop()

    run(main())


def test_delayed_exception_closes_connection() -> None:
    async def main() -> None:
        server, handler = await _start()
        try:
            r, w = await _connect(server)
            w.write(frame(1, b"delay"))
            while not handler.futures:
                await asyncio.sleep(0.01)
            handler.futures[1].set_exception(RuntimeError("late failure"))
            await _assert_closed(r)
        finally:
            await server.stop()

    run(main())


def test_stop_closes_open_connections() -> None:
    async def main() -> None:
        server, handler = await _start()
        r, w = await _connect(server)
        w.write(frame(1, b"delay"))
        while not handler.futures:
            await asyncio.sleep(0.01)
        await server.stop()
        assert server.connection_count == 0
        await _assert_closed(r)

    run(main())


def test_with_uvloop() -> None:
    uvloop = pytest.importorskip("uvloop")

    async def main() -> None:
        server, handler = await _start()
        try:
            r, w = await _connect(server)
            body = b"big" + b"z" * 300_000
            w.write(frame(1, b"delay") + frame(2, body) + frame(3, b"x"))
            while not handler.futures:
                await asyncio.sleep(0.01)
            handler.futures[1].set_result([b"\x00\x00\x00\x01"])
            assert await read_response(r) == (1, b"")
            assert await read_response(r) == (2, b"BIG" + body[3:])
            assert await read_response(r) == (3, b"ok:x")
            w.close()
        finally:
            await server.stop()

    uvloop.run(asyncio.wait_for(main(), 10))


# ---- file regions (fetch responses) ---------------------------------------------------------


class _Region:
    def __init__(self, fd: int, position: int, size: int) -> None:
        self.fd = fd
        self.position = position
        self.size = size


class _FilePart:
    """A response part whose bytes are regions of an open file, like a fetch's log segments."""

    def __init__(self, regions: list[_Region]) -> None:
        self.file_regions = regions

    def __len__(self) -> int:
        return sum(r.size for r in self.file_regions)

    def to_bytes(self) -> bytes:
        import os

        return b"".join(os.pread(r.fd, r.size, r.position) for r in self.file_regions)


class _FileHandler(FakeHandler):
    """``file``: the whole file (two regions); ``file-close``: the same, then closes the file
    (as a topic deletion closes its segments) before the response has been sent."""

    def __init__(self, path: str) -> None:
        super().__init__()
        import os

        self.path = path
        self.size = os.path.getsize(path)
        self.fds: list[int] = []

    def handle(
        self, conn: ConnectionInfo, frame: bytearray
    ) -> ResponseBuffers | Awaitable[ResponseBuffers | None] | None:
        import os

        body = bytes(frame[8:])
        if not body.startswith(b"file"):
            return super().handle(conn, frame)
        fd = os.open(self.path, os.O_RDONLY)
        self.fds.append(fd)
        half = self.size // 2
        part = _FilePart([_Region(fd, 0, half), _Region(fd, half, self.size - half)])
        response: ResponseBuffers = [bytes(frame[4:8]), part, b"!"]
        if body == b"file-close":
            asyncio.get_running_loop().call_soon(os.close, fd)
        return response


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_file_regions_wait_for_a_full_socket_and_go_on_with_sendfile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loop_kind: str
) -> None:
    """A slow reader: the socket fills, the rest of the response (and the responses behind it)
    waits for it to drain and then goes on with sendfile; only small chunks are copied."""
    import os
    import random

    from odradek.network import socket_server

    size = 16 * 1024 * 1024
    content = random.Random(7).randbytes(size)
    path = tmp_path / "segment.log"
    path.write_bytes(content)
    copied: list[int] = []
    real_pread = socket_server._pread_exact

    def counting_pread(fd: int, position: int, n: int) -> bytes:
        copied.append(n)
        return real_pread(fd, position, n)

    monkeypatch.setattr(socket_server, "_pread_exact", counting_pread)
    handler = _FileHandler(str(path))

    async def main() -> None:
        server = SocketServer("127.0.0.1", 0, handler, listener_name="PLAINTEXT")
        await server.start()
        try:
            r, w = await _connect(server)
            w.write(frame(1, b"file") + frame(2, b"x") + frame(3, b"file-close") + frame(4, b"y"))
            await asyncio.sleep(0.3)  # not reading: the socket fills up and sendfile blocks
            assert await read_response(r) == (1, content + b"!")
            assert await read_response(r) == (2, b"ok:x")
            # Its file was closed before it was sent: the bytes still come from that file.
            assert await read_response(r) == (3, content + b"!")
            assert await read_response(r) == (4, b"ok:y")
            w.close()
        finally:
            await server.stop()

    if loop_kind == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        uvloop.run(asyncio.wait_for(main(), 30))
    else:
        run(main())
    assert copied, "the socket never filled up: the test did not exercise the waiting path"
    # The old fallback copied everything after the first socket-buffer-full (most of 32 MB).
    assert sum(copied) < size // 2, f"{sum(copied)} of {2 * size} bytes were copied"
    for fd in handler.fds[:1]:
        os.close(fd)


def test_connection_lost_while_file_regions_wait_releases_them(tmp_path: Path) -> None:
    """A client that goes away while a response waits for the socket: its duplicated file
    descriptors are closed and the server keeps serving others."""
    import os

    path = tmp_path / "segment.log"
    path.write_bytes(b"s" * (16 * 1024 * 1024))
    handler = _FileHandler(str(path))

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    async def main() -> None:
        server = SocketServer("127.0.0.1", 0, handler, listener_name="PLAINTEXT")
        await server.start()
        try:
            before = open_fds()
            r, w = await _connect(server)
            w.write(frame(1, b"file"))
            await asyncio.sleep(0.3)
            w.transport.abort()
            for _ in range(100):
                if server.connection_count == 0:
                    break
                await asyncio.sleep(0.02)
            assert server.connection_count == 0
            os.close(handler.fds.pop())
            assert open_fds() <= before  # the waiting regions' duplicates were closed
            r2, w2 = await _connect(server)
            w2.write(frame(5, b"z"))
            assert await read_response(r2) == (5, b"ok:z")
            w2.close()
        finally:
            await server.stop()

    run(main())


class _TransportOverSocket:
    """Just what KafkaConnection._push asks of a transport, over a real socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.aborted = False
        self.written: list[bytes] = []

    def get_extra_info(self, name: str) -> object:
        return self.sock if name == "socket" else None

    def is_closing(self) -> bool:
        return self.aborted

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def abort(self) -> None:
        self.aborted = True


@pytest.mark.parametrize("kind", ["bytes", "file region"])
def test_a_client_gone_mid_write_closes_quietly(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The client resets the connection while a response is written straight to its socket
    (os.write / sendfile get EPIPE or ECONNRESET): the connection is aborted, file regions are
    released, nothing is raised and nothing above debug level is logged."""

    async def main() -> None:
        server, _handler = await _start()
        ours, theirs = socket.socketpair()
        try:
            theirs.close()  # writing to ``ours`` now fails with EPIPE
            ours.setblocking(False)
            conn = KafkaConnection(server)
            transport = _TransportOverSocket(ours)
            conn._transport = transport  # type: ignore[assignment]
            segments: collections.deque[object] = collections.deque()
            if kind == "bytes":
                segments.append(b"x" * 100)
            else:
                path = tmp_path / "segment"
                path.write_bytes(b"y" * 4096)
                fd = os.open(path, os.O_RDONLY)
                region = SocketRegion(os.dup(fd), 0, 4096, owned=True)
                os.close(fd)
                segments.append(region)
            caplog.clear()  # only what the write logs counts
            with caplog.at_level(logging.INFO, logger="odradek.network.socket_server"):
                assert conn._push(segments) is False
            assert transport.aborted and not segments and transport.written == []
            assert not [
                r for r in caplog.records
                if r.levelno >= logging.INFO and r.name == "odradek.network.socket_server"
            ]
            if kind == "file region":
                with pytest.raises(OSError):
                    os.fstat(region.fd)  # released: our duplicate is closed
        finally:
            ours.close()
            await server.stop()

    run(main())
