"""Hostile-input limits of the socket server over real loopback sockets: frames are not allocated
from their declared size, queued.max.request.bytes back-pressure, max.connections(.per.ip) and
connections.max.idle.ms."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import struct
from collections.abc import Awaitable

import pytest
from socket_support import frame, read_response
from socket_support import run as _run

from odradek.network.limits import ConnectionQuotas, RequestMemoryPool, parse_ip_overrides
from odradek.network.request_channel import ConnectionInfo, ResponseBuffers
from odradek.network.socket_server import SocketServer

MiB = 1024 * 1024


class Handler:
    """Echoes ``corr`` and the body's length and first bytes; ``delay`` answers when told."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, int]] = []  # (connection, correlation id, body size)
        self.futures: dict[int, asyncio.Future[ResponseBuffers | None]] = {}

    def handle(
        self, conn: ConnectionInfo, frame: bytearray
    ) -> ResponseBuffers | Awaitable[ResponseBuffers | None] | None:
        corr = int.from_bytes(frame[4:8], "big")
        body = bytes(frame[8:])
        self.seen.append((conn.connection_id, corr, len(body)))
        if body == b"delay":
            fut: asyncio.Future[ResponseBuffers | None] = asyncio.get_running_loop().create_future()
            self.futures[corr] = fut
            return fut
        return [frame[4:8], len(body).to_bytes(4, "big"), body[:16], body[-16:]]


def expected(corr: int, body: bytes) -> tuple[int, bytes]:
    return corr, len(body).to_bytes(4, "big") + body[:16] + body[-16:]


def run(coro: Awaitable[None], timeout: float = 20) -> None:
    _run(coro, timeout)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def wait_until(cond: object, timeout: float = 5.0) -> None:
    assert callable(cond)
    for _ in range(int(timeout / 0.01)):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in time")


async def start(**kwargs: object) -> tuple[SocketServer, Handler]:
    handler = Handler()
    server = SocketServer("127.0.0.1", 0, handler, listener_name="PLAINTEXT", **kwargs)  # type: ignore[arg-type]
    await server.start()
    return server, handler


# ---- item 5: memory --------------------------------------------------------------------------


def test_declared_size_is_not_allocated_up_front() -> None:
    """30 connections each claim 32 MiB and send 1000 bytes: the server's memory grows by about
    a MiB per connection at most (the old code allocated the 960 MiB they claimed at once)."""

    async def main() -> None:
        server, handler = await start(max_request_bytes=100 * MiB)
        writers = []
        try:
            before = rss_bytes()
            for _ in range(30):
                _, w = await asyncio.open_connection("127.0.0.1", server.port)
                w.write(struct.pack(">i", 32 * MiB) + b"\x00" * 1000)
                writers.append(w)
            conns = server._connections
            await wait_until(
                lambda: len(conns) == 30 and all(c.core.reading_large_frame for c in conns)
            )
            growth = rss_bytes() - before
            assert growth < 100 * MiB, f"RSS grew by {growth / MiB:.0f} MiB"
            assert handler.seen == []
        finally:
            for w in writers:
                w.close()
            await server.stop()

    run(main())


def test_pool_counts_the_bytes_that_arrived_not_the_declared_size() -> None:
    """queued.max.request.bytes counts what 30 slow connections sent, not the 3 GB they claimed:
    with a 10 MiB pool none of them is paused."""
    pool = RequestMemoryPool(10 * MiB)

    async def main() -> None:
        server, handler = await start(max_request_bytes=100 * MiB, memory_pool=pool)
        writers = []
        try:
            for _ in range(30):
                _, w = await asyncio.open_connection("127.0.0.1", server.port)
                w.write(struct.pack(">i", 100 * MiB) + b"\x00" * 1000)
                writers.append(w)
            await wait_until(lambda: pool.used == 30 * 1000)
            assert not pool.paused and pool.finisher is None
            r, w = await asyncio.open_connection("127.0.0.1", server.port)
            w.write(frame(1, b"still served"))
            assert await read_response(r) == expected(1, b"still served")
            writers.append(w)
        finally:
            for w in writers:
                w.close()
            await server.stop()
        assert pool.used == 0

    run(main())


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop", "views-kept"])
def test_large_frame_arriving_in_pieces_is_read_whole(
    loop_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 5 MiB frame (bigger than the first buffer, so it grows several times) in uneven pieces,
    then a small one: both handled intact and in order. ``views-kept``: every buffer handed to
    the transport stays referenced, so the frame cannot be resized in place and is copied."""
    body = random.Random(5).randbytes(5 * MiB)
    kept: list[memoryview] = []
    grows: list[bool] = []
    from odradek.network.connection import FrameReader
    from odradek.network.socket_server import KafkaConnection

    real_get_buffer = KafkaConnection.get_buffer
    real_grow = FrameReader._grow_frame

    def get_buffer(self: KafkaConnection, sizehint: int) -> memoryview:
        view = real_get_buffer(self, sizehint)
        kept.append(view)
        return view

    def grow(self: FrameReader) -> None:
        before = self._frame
        real_grow(self)
        grows.append(self._frame is before)  # True: resized in place

    monkeypatch.setattr(FrameReader, "_grow_frame", grow)
    if loop_kind == "views-kept":
        monkeypatch.setattr(KafkaConnection, "get_buffer", get_buffer)

    async def main() -> None:
        server, handler = await start(max_request_bytes=100 * MiB)
        try:
            r, w = await asyncio.open_connection("127.0.0.1", server.port)
            data = frame(1, body) + frame(2, b"after")
            rnd = random.Random(1)
            pos = 0
            while pos < len(data):
                n = rnd.randint(1, 700_000)
                w.write(data[pos : pos + n])
                await w.drain()
                pos += n
            assert await read_response(r) == expected(1, body)
            assert await read_response(r) == expected(2, b"after")
            assert [s for _, _, s in handler.seen] == [len(body), 5]
            w.close()
        finally:
            await server.stop()

    if loop_kind == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        uvloop.run(asyncio.wait_for(main(), 20))
    else:
        run(main())
    assert len(grows) >= 3
    if loop_kind == "views-kept":
        assert not any(grows)  # every growth had to copy: the fallback was taken
    else:
        assert all(grows)  # the transport let go of its views: resized in place


def test_queued_max_request_bytes_pauses_reading_then_resumes_in_order(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Connection A fills the pool with part of a big request; B's requests are not read until A's
    request is complete and handled, then all are answered, in order."""
    capacity = 256 * 1024
    pool = RequestMemoryPool(capacity)
    big = random.Random(2).randbytes(1 * MiB)
    small = [bytes([i]) * 100_000 for i in range(5)]

    async def main() -> None:
        server, handler = await start(memory_pool=pool)
        try:
            ra, wa = await asyncio.open_connection("127.0.0.1", server.port)
            rb, wb = await asyncio.open_connection("127.0.0.1", server.port)
            big_frame = frame(1, big)
            wa.write(big_frame[:400_000])
            await wait_until(lambda: pool.used >= capacity)
            wb.write(b"".join(frame(10 + i, b) for i, b in enumerate(small)))
            await wb.drain()
            await asyncio.sleep(0.3)
            # B is paused: none of its requests was read whole, and the pool held no more than
            # the limit plus one request and one read.
            assert handler.seen == []
            assert pool.used <= capacity + len(big) + 64 * 1024
            assert pool.paused  # B
            wa.write(big_frame[400_000:])
            assert await read_response(ra) == expected(1, big)
            for i, b in enumerate(small):
                assert await read_response(rb) == expected(10 + i, b)
            assert [c for _, c, _ in handler.seen] == [1, 10, 11, 12, 13, 14]
            await wait_until(lambda: pool.used == 0)
            wa.close()
            wb.close()
        finally:
            await server.stop()

    with caplog.at_level(logging.WARNING):
        run(main())
    assert "queued.max.request.bytes=262144 reached" in caplog.text


def test_queued_max_request_bytes_lets_one_partial_request_finish() -> None:
    """Two partial requests fill the pool together; neither could be read on without memory, yet
    the server does not deadlock: the one that filled the pool (B) reads on past the limit and
    finishes; A, paused meanwhile with the rest of its request waiting in the socket, follows."""
    capacity = 200_000
    pool = RequestMemoryPool(capacity)
    body_a = b"a" * 300_000
    body_b = b"b" * 300_000

    async def main() -> None:
        server, handler = await start(memory_pool=pool)
        try:
            ra, wa = await asyncio.open_connection("127.0.0.1", server.port)
            rb, wb = await asyncio.open_connection("127.0.0.1", server.port)
            fa, fb = frame(1, body_a), frame(2, body_b)
            wa.write(fa[:150_000])
            await wait_until(lambda: pool.used >= 150_000 - 4)
            wb.write(fb[:150_000])
            await wait_until(lambda: pool.used >= 300_000 - 8)
            wa.write(fa[150_000:])
            await wait_until(lambda: bool(pool.paused))  # A, after one read
            await asyncio.sleep(0.2)
            assert handler.seen == []
            assert pool.used <= 300_000 + 64 * 1024
            wb.write(fb[150_000:])
            assert await read_response(rb) == expected(2, body_b)
            assert await read_response(ra) == expected(1, body_a)
            assert [c for _, c, _ in handler.seen] == [2, 1]
            await wait_until(lambda: pool.used == 0)
            wa.close()
            wb.close()
        finally:
            await server.stop()

    run(main())


def test_pool_frees_the_bytes_of_a_connection_that_goes_away() -> None:
    pool = RequestMemoryPool(100_000)

    async def main() -> None:
        server, _ = await start(memory_pool=pool)
        try:
            _, wa = await asyncio.open_connection("127.0.0.1", server.port)
            wa.write(frame(1, b"x" * 500_000)[:150_000])
            await wait_until(lambda: pool.used >= 100_000)
            rb, wb = await asyncio.open_connection("127.0.0.1", server.port)
            wb.write(frame(2, b"y" * 200_000)[:50_000])
            await wait_until(lambda: bool(pool.paused))
            wa.transport.abort()
            await wait_until(lambda: pool.used < 100_000 and not pool.paused)
            wb.write(frame(2, b"y" * 200_000)[50_000:])
            assert await read_response(rb) == expected(2, b"y" * 200_000)
            wb.close()
        finally:
            await server.stop()

    run(main())


# ---- item 9: connection limits -----------------------------------------------------------------


async def _connect(server: SocketServer, source: str = "127.0.0.1") -> tuple[
    asyncio.StreamReader, asyncio.StreamWriter
]:
    return await asyncio.open_connection("127.0.0.1", server.port, local_addr=(source, 0))


async def _is_served(r: asyncio.StreamReader, w: asyncio.StreamWriter, corr: int) -> bool:
    """True if a request on this connection is answered, False if the server closed it."""
    try:
        w.write(frame(corr, b"ping"))
        return await asyncio.wait_for(read_response(r), 5) == expected(corr, b"ping")
    except (asyncio.IncompleteReadError, ConnectionError):
        return False


def test_max_connections_per_ip_with_overrides(caplog: pytest.LogCaptureFixture) -> None:
    quotas = ConnectionQuotas(max_connections_per_ip=1, per_ip_overrides={"127.0.0.2": 3})

    async def main() -> None:
        server, _ = await start(quotas=quotas)
        try:
            first = await _connect(server)
            assert await _is_served(*first, 1)
            second = await _connect(server)
            assert not await _is_served(*second, 2)  # 127.0.0.1 is at its limit of 1
            others = [await _connect(server, "127.0.0.2") for _ in range(4)]
            served = [await _is_served(r, w, 3 + i) for i, (r, w) in enumerate(others)]
            assert served == [True, True, True, False]  # override: 3 for 127.0.0.2
            first[1].close()
            await wait_until(lambda: quotas.counts.get("127.0.0.1", 0) == 0)
            third = await _connect(server)
            assert await _is_served(*third, 9)  # the slot was freed
            assert quotas.counts == {"127.0.0.1": 1, "127.0.0.2": 3}
        finally:
            await server.stop()
        assert quotas.total == 0 and quotas.counts == {}

    with caplog.at_level(logging.INFO, logger="odradek.network.limits"):
        run(main())
    assert (
        "Rejected connection from /127.0.0.1, address already has the configured maximum "
        "of 1 connections (listener PLAINTEXT)" in caplog.text
    )
    assert "configured maximum of 3 connections" in caplog.text


def test_max_connections_is_shared_by_listeners(caplog: pytest.LogCaptureFixture) -> None:
    quotas = ConnectionQuotas(max_connections=2)

    async def main() -> None:
        a, _ = await start(quotas=quotas)
        b, _ = await start(quotas=quotas)
        try:
            c1 = await _connect(a)
            c2 = await _connect(b, "127.0.0.3")
            assert await _is_served(*c1, 1) and await _is_served(*c2, 2)
            c3 = await _connect(b)
            assert not await _is_served(*c3, 3)
            c1[1].close()
            await wait_until(lambda: quotas.total == 1)
            c4 = await _connect(b)
            assert await _is_served(*c4, 4)
        finally:
            await a.stop()
            await b.stop()

    with caplog.at_level(logging.WARNING, logger="odradek.network.limits"):
        run(main())
    assert "max.connections=2 reached: closing new connection from /127.0.0.1" in caplog.text


def test_idle_connections_are_closed() -> None:
    """connections.max.idle.ms=500: a silent connection is closed; one waiting for a delayed
    response or sending requests now and then is not."""

    async def main() -> None:
        server, handler = await start(connections_max_idle_ms=500)
        try:
            loop = asyncio.get_running_loop()
            r_idle, _ = await _connect(server)
            r_wait, w_wait = await _connect(server)
            r_busy, w_busy = await _connect(server)
            w_wait.write(frame(1, b"delay"))
            t0 = loop.time()
            corr = 100
            while loop.time() - t0 < 1.2:
                corr += 1
                assert await _is_served(r_busy, w_busy, corr)
                await asyncio.sleep(0.1)
            assert await asyncio.wait_for(r_idle.read(), 2) == b""  # closed by the server
            assert await _is_served(r_busy, w_busy, 1000)  # requests every 0.1 s: still open
            # Waiting 1.2 s for its response (longer than the idle limit) did not count as idle.
            handler.futures[1].set_result([(1).to_bytes(4, "big"), b"late"])
            assert await read_response(r_wait) == (1, b"late")
            assert await asyncio.wait_for(r_wait.read(), 2) == b""  # idle afterwards: closed
        finally:
            await server.stop()

    run(main())


def test_negative_idle_ms_keeps_connections_open() -> None:
    async def main() -> None:
        server, _ = await start(connections_max_idle_ms=-1)
        try:
            r, w = await _connect(server)
            await asyncio.sleep(0.3)
            assert await _is_served(r, w, 1)
        finally:
            await server.stop()

    run(main())


def test_connection_limit_config() -> None:
    from odradek.server.kafka_config import KafkaConfig

    base = {"process.roles": "broker,controller", "node.id": "1",
            "controller.quorum.voters": "1@localhost:9093",
            "listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
            "controller.listener.names": "CONTROLLER"}
    c = KafkaConfig({**base, "max.connections.per.ip": "0",
                     "max.connections.per.ip.overrides": "127.0.0.2:3,localhost:4",
                     "queued.max.request.bytes": "1000000", "connections.max.idle.ms": "-1"})
    assert c.max_connections_per_ip == 0
    assert c.max_connections_per_ip_overrides["127.0.0.2"] == 3
    assert c.max_connections_per_ip_overrides["127.0.0.1"] == 4
    assert c.queued_max_request_bytes == 1000000
    assert c.connections_max_idle_ms == -1
    d = KafkaConfig(base)
    assert (d.max_connections, d.max_connections_per_ip) == (2**31 - 1, 2**31 - 1)
    assert d.max_connections_per_ip_overrides == {}
    assert (d.queued_max_request_bytes, d.connections_max_idle_ms) == (-1, 600000)


def test_impossible_connection_limits_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from odradek.cli.main import main

    assert main(["server", "--override", "max.connections.per.ip=0"]) == 2
    err = capsys.readouterr().err
    assert "If max.connections.per.ip is zero, max.connections.per.ip.overrides must be set" in err
    assert main(["server", "-o", "max.connections.per.ip.overrides=127.0.0.1:x"]) == 2
    assert "max.connections.per.ip.overrides" in capsys.readouterr().err


def test_parse_ip_overrides() -> None:
    assert parse_ip_overrides("") == {}
    assert parse_ip_overrides("127.0.0.2:3, ::1:5,[fe80::1]:0") == {
        "127.0.0.2": 3, "::1": 5, "fe80::1": 0,
    }
    assert parse_ip_overrides("localhost:7")["127.0.0.1"] == 7
    for bad in ("127.0.0.1", "127.0.0.1:x", ":3", "127.0.0.1:-1", "a:1,,b:2"):
        with pytest.raises(ValueError):
            parse_ip_overrides(bad)


# ---- sans-I/O: the pool and the quotas on their own ---------------------------------------------


class Member:
    def __init__(self, name: str) -> None:
        self.name = name
        self.pool_held = 0
        self.pool_frames = 0
        self.paused = False
        self.can_progress = True

    def pool_pause(self) -> None:
        self.paused = True

    def pool_resume(self) -> None:
        self.paused = False

    def pool_can_progress(self) -> bool:
        return self.can_progress


def test_memory_pool_pauses_all_but_one_partial_request() -> None:
    pool = RequestMemoryPool(1000)
    a, b, c = Member("a"), Member("b"), Member("c")
    pool.update(a, 600)
    pool.update(b, 300)
    assert pool.used == 900 and not (a.paused or b.paused)
    pool.update(c, 200)  # c fills the pool: it alone may read on
    assert pool.finisher is c and not c.paused
    pool.update(a, 650)  # a's next read: paused
    assert a.paused and pool.used == 1150
    pool.update(b, 0)  # b's read completed its requests: 850 bytes held, below the limit
    assert pool.finisher is None and not a.paused and not b.paused  # everyone reads again
    pool.update(c, 500)
    assert pool.finisher is c
    pool.update(a, 700)
    assert a.paused
    c.pool_frames += 1  # c's request was handled and the next one begun: c loses its turn
    pool.update(c, 400)
    assert pool.finisher is a and not a.paused and c.paused  # a holds the most
    pool.remove(a)  # a goes away: its bytes are free, everyone reads again
    assert pool.used == 400 and pool.finisher is None and not c.paused and not pool.paused


def test_memory_pool_prefers_a_finisher_that_can_read() -> None:
    pool = RequestMemoryPool(100)
    a, b, c = Member("a"), Member("b"), Member("c")
    pool.update(a, 60)
    pool.update(b, 30)
    pool.update(c, 20)
    assert pool.finisher is c
    pool.update(a, 70)
    pool.update(b, 31)
    assert a.paused and b.paused
    a.can_progress = False  # e.g. its client does not read its responses
    pool.remove(c)
    assert pool.finisher is b and not b.paused and a.paused


def test_rejections_are_logged_once_per_interval(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from odradek.network import limits

    now = [1000.0]
    monkeypatch.setattr(limits.time, "monotonic", lambda: now[0])
    quotas = ConnectionQuotas(max_connections=5, max_connections_per_ip=1)
    with caplog.at_level(logging.INFO, logger="odradek.network.limits"):
        assert quotas.try_acquire("127.0.0.1", "L")
        for _ in range(5):
            assert not quotas.try_acquire("127.0.0.1", "L")
        assert not quotas.try_acquire("::ffff:127.0.0.1", "L")  # the same address
        assert quotas.try_acquire("127.0.0.2", "L")
        now[0] += limits.REJECT_LOG_INTERVAL_S
        assert not quotas.try_acquire("127.0.0.1", "L")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "(5 similar rejections in the last 10 s were not logged)" in lines[1]
    quotas.release("127.0.0.1")
    quotas.release("127.0.0.2")
    assert quotas.total == 0 and quotas.counts == {}
