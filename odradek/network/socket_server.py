"""Asyncio socket server: Kafka framing, per-connection in-order pipelining, size limits.

Each connection is a :class:`KafkaConnection` (an ``asyncio.BufferedProtocol``). Bytes are read
into a reusable staging buffer; every complete frame is copied once into its own ``bytearray``
(the request layer may rewrite it in place). A frame too large for the staging buffer gets its
own ``bytearray`` and the transport reads the rest of it directly into that buffer. The buffer is
never allocated from the declared size (4 bytes would otherwise claim ``socket.request.max.bytes``
of memory): it starts at ``FRAME_INITIAL_BYTES`` at most and doubles, up to the declared size, only
when what has arrived fills it, so a connection holds at most ``FRAME_INITIAL_BYTES`` or twice
what it has sent.

Limits that the broker's listeners share (:mod:`odradek.network.limits`; the controller listener
has its own): ``queued.max.request.bytes`` (a pool of the bytes received and not yet handled;
reading pauses when it is full),
``max.connections`` and ``max.connections.per.ip`` (new connections over a limit are closed at
once). ``connections.max.idle.ms``: a connection with no bytes read for that long and nothing
owed to it (no response pending or unsent, not paused by the pool) is closed.

The handler runs synchronously, in arrival order, for every frame. Its results (ready buffers,
``None`` or an awaitable) go through a per-connection FIFO so responses leave in request order
even when delayed operations complete out of order. Reading pauses while more than
``MAX_PENDING_RESPONSES`` responses are waiting or while the transport holds unsent bytes (its
high-water mark is 0: the socket is full).

Fetch responses carry file regions of log segments, sent with ``os.sendfile`` straight from the
page cache whenever the transport has nothing buffered (bytes must not overtake each other).
When the socket is full, one ``SENDFILE_CHUNK_BYTES`` piece is copied through the transport
instead, which pauses it; the rest of the response, and every response after it, waits until the
transport has drained (``resume_writing``) and then goes on with ``sendfile``. A large fetch
response thus costs a small copy per socket-buffer-full instead of a copy of all of it. The waiting regions hold their own
duplicate of the segment's file descriptor, so a segment closed meanwhile (topic deletion) cannot
make them read another file.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import itertools
import logging
import os
import socket
from collections.abc import Awaitable
from typing import Any, cast

from odradek.network.limits import ConnectionQuotas, RequestMemoryPool
from odradek.network.request_channel import (
    CloseConnection,
    ConnectionInfo,
    RequestHandler,
    ResponseBuffers,
    buffers_size,
)

log = logging.getLogger(__name__)

STAGING_BUFFER_BYTES = 64 * 1024
# The most a frame's own buffer holds before the bytes that fill it have arrived; it then doubles.
FRAME_INITIAL_BYTES = 1024 * 1024
MAX_PENDING_RESPONSES = 100
# Transport write buffer limits: pause_writing as soon as anything is left buffered (the socket
# is full), resume_writing once it is empty again. Kafka likewise mutes a channel (reads no
# further requests from it) while a response to it is still being sent.
WRITE_BUFFER_HIGH = 0
WRITE_BUFFER_LOW = 0
# What a response with file regions copies through the transport when sendfile would block: the
# transport then waits for the socket to become writable, which the kernel reports only once a
# good part of its send buffer is free again, and sendfile goes on from there.
SENDFILE_CHUNK_BYTES = 16 * 1024
RESUME_PENDING_RESPONSES = MAX_PENDING_RESPONSES // 2
# The smallest request header (v0: api_key int16, api_version int16, correlation_id int32).
MIN_REQUEST_BYTES = 8

_CLOSE = object()  # FIFO marker: close the connection once everything before it is written


class _Region:
    """The part of a file region still to send; ``owned`` if ``fd`` is our own duplicate."""

    __slots__ = ("fd", "position", "size", "owned")

    def __init__(self, fd: int, position: int, size: int, owned: bool = False) -> None:
        self.fd = fd
        self.position = position
        self.size = size
        self.owned = owned

    def hold(self) -> None:
        """Keep the file open for a later send even if its segment is closed meanwhile."""
        if not self.owned:
            self.fd = os.dup(self.fd)
            self.owned = True

    def release(self) -> None:
        if self.owned:
            self.owned = False
            os.close(self.fd)

    def advance(self, n: int) -> bool:
        """``n`` bytes were sent; True (and the file released) once the region is done."""
        self.position += n
        self.size -= n
        if self.size > 0:
            return False
        self.release()
        return True


class _Rest:
    """A response whose sending waits for the transport to drain: bytes and regions, in order."""

    __slots__ = ("segments",)

    def __init__(self, segments: collections.deque[Any]) -> None:
        self.segments = segments
        for seg in segments:
            if isinstance(seg, _Region):
                seg.hold()

    def release(self) -> None:
        for seg in self.segments:
            if isinstance(seg, _Region):
                seg.release()
        self.segments.clear()


def _pread_exact(fd: int, position: int, size: int) -> bytes:
    out = bytearray()
    while len(out) < size:
        chunk = os.pread(fd, size - len(out), position + len(out))
        if not chunk:
            raise OSError(f"file region ends early at position {position + len(out)}")
        out += chunk
    return bytes(out)


def _format_address(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = str(addr[0])
        if ":" in host:
            host = f"[{host}]"
        return f"{host}:{addr[1]}"
    return str(addr)


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, server: SocketServer) -> None:
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self.info: ConnectionInfo | None = None
        # Staging buffer: valid unread bytes are _stage[_start:_end].
        self._stage = bytearray(STAGING_BUFFER_BYTES)
        self._stage_view = memoryview(self._stage)
        self._start = 0
        self._end = 0
        # A large frame being read directly into its own buffer (which grows as bytes arrive).
        self._frame: bytearray | None = None
        self._frame_view: memoryview | None = None
        self._frame_pos = 0
        self._frame_size = 0
        # Limits shared with the other connections (see odradek.network.limits).
        self._pool = server.memory_pool
        self.pool_held = 0
        self.pool_frames = 0
        self._pool_paused = False
        self._ip: str | None = None  # counted in the server's connection quotas
        self._last_read = self._loop.time()
        # Responses not yet written, in request order.
        self._pending: collections.deque[Any] = collections.deque()
        self._writer: asyncio.Task[None] | None = None
        self._closing = False  # no more requests will be handled
        self._write_paused = False
        self._drained: asyncio.Future[None] | None = None
        self._read_paused = False
        self.closed: asyncio.Future[None] = self._loop.create_future()

    # ---- connection lifecycle -------------------------------------------------------------

    _sendfile_ok = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport; they implement its interface.
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        peername = transport.get_extra_info("peername")
        quotas = self._server.quotas
        if quotas is not None:
            ip = str(peername[0]) if isinstance(peername, tuple) and peername else "?"
            if not quotas.try_acquire(ip, self._server.listener_name):
                self._closing = True
                transport.abort()
                return
            self._ip = ip
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)
        peer = _format_address(peername)
        local = _format_address(transport.get_extra_info("sockname"))
        conn_id = f"{local}-{peer}-{next(self._server._conn_counter)}"
        self.info = ConnectionInfo(
            connection_id=conn_id, peer=peer, listener_name=self._server.listener_name
        )
        self._server._connections.add(self)
        log.debug("accepted connection %s on listener %s", conn_id, self._server.listener_name)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if exc is not None:
            log.debug("connection %s lost: %s", self._conn_id, exc)
        if self._writer is not None and not self._writer.done():
            self._writer.cancel()
        # Delayed operations still pending keep running (they belong to the purgatory); their
        # results are dropped. Retrieve their exceptions so asyncio does not warn about them.
        for item in self._pending:
            if isinstance(item, asyncio.Future):
                item.add_done_callback(_discard_result)
            elif isinstance(item, _Rest):
                item.release()
        self._pending.clear()
        if self._drained is not None and not self._drained.done():
            self._drained.cancel()
        self._frame = None
        self._frame_view = None
        if self._pool is not None:
            self._pool.remove(self)
        if self._ip is not None and self._server.quotas is not None:
            self._server.quotas.release(self._ip)
            self._ip = None
        self._server._connections.discard(self)
        if not self.closed.done():
            self.closed.set_result(None)

    @property
    def _conn_id(self) -> str:
        return self.info.connection_id if self.info is not None else "?"

    @property
    def _peer(self) -> str:
        return self.info.peer if self.info is not None else "?"

    def close(self) -> None:
        """Close now (buffered output is still flushed by the transport)."""
        self._closing = True
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def drain_and_close(self) -> None:
        """Shutdown: read no further requests, write every response already owed, then close.

        A produce is appended while its request is handled, so its response must still reach
        the client; otherwise the client resends it after the restart and the batch is stored
        twice.
        """
        self._pause_reading()
        self._closing = True
        if not self._pending and self._writer is None:
            self.close()
            return
        if not self._pending or self._pending[-1] is not _CLOSE:
            self._pending.append(_CLOSE)
        self._ensure_writer()

    def abort(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.abort()

    # ---- reading ------------------------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame_view is not None:
            pos = self._frame_pos
            if pos == len(self._frame_view):
                self._grow_frame()
            pool = self._pool
            if pool is not None and pool.finisher is not self:
                # Read no more than the pool has room for (at least a staging buffer's worth).
                room = max(pool.capacity - pool.used, STAGING_BUFFER_BYTES)
                return self._frame_view[pos : pos + room]
            return self._frame_view[pos:]
        if self._end == len(self._stage):
            self._compact()
            if self._end == len(self._stage):  # only possible if frames are parked while paused
                self._stage.extend(bytes(len(self._stage)))
                self._stage_view.release()
                self._stage_view = memoryview(self._stage)
        return self._stage_view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._closing:
            return
        self._last_read = self._loop.time()
        if self._frame is not None:
            self._frame_pos += nbytes
            if self._frame_pos < self._frame_size:
                if self._pool is not None:
                    self._pool.update(self, self._frame_pos)
                return
            frame = self._frame
            self._frame = None
            self._frame_view = None
            self._frame_pos = 0
            self._dispatch(frame)
        else:
            self._end += nbytes
        self._process()
        if self._pool is not None:
            self._pool.update(self, self._end - self._start + self._frame_pos)

    def _grow_frame(self) -> None:
        """The frame's buffer is full but the frame is not: double it (up to the frame's size)."""
        frame = self._frame
        assert frame is not None and self._frame_view is not None
        old = len(frame)
        new = min(self._frame_size, max(2 * old, old + STAGING_BUFFER_BYTES))
        self._frame_view.release()
        try:
            frame += bytes(new - old)  # in place; bytes(n) of zeros costs no memory until read
        except BufferError:  # a view of it is still alive somewhere: copy instead
            grown = bytearray(new)
            grown[:old] = frame
            self._frame = frame = grown
        self._frame_view = memoryview(frame)

    def eof_received(self) -> bool | None:
        if self._frame is not None or self._end > self._start:
            log.debug("connection %s closed by peer in the middle of a request", self._conn_id)
        # Returning None closes the transport; pending responses can't be read by the peer anyway
        # once it half-closes in Kafka's protocol, but let earlier ones flush first.
        self._closing = True
        if not self._pending and self._writer is None:
            return None
        self._pending.append(_CLOSE)
        self._ensure_writer()
        return True

    def _compact(self) -> None:
        n = self._end - self._start
        if self._start and n:
            self._stage[:n] = self._stage_view[self._start : self._end]
        self._start = 0
        self._end = n

    def _process(self) -> None:
        """Slice complete frames out of the staging buffer and dispatch them in order."""
        stage = self._stage
        while not self._closing and not self._read_paused:
            avail = self._end - self._start
            if avail < 4:
                break
            start = self._start
            size = int.from_bytes(stage[start : start + 4], "big", signed=True)
            if not self._check_size(size):
                return
            if avail - 4 >= size:
                frame = bytearray(self._stage_view[start + 4 : start + 4 + size])
                self._start = start + 4 + size
                self._dispatch(frame)
                continue
            if 4 + size > len(stage):
                # Too big for the staging buffer: read the rest straight into its own buffer,
                # which grows as the bytes arrive (never allocated from the declared size).
                have = avail - 4
                frame = bytearray(min(size, max(FRAME_INITIAL_BYTES, have)))
                frame[:have] = self._stage_view[start + 4 : self._end]
                self._start = self._end = 0
                self._frame = frame
                self._frame_view = memoryview(frame)
                self._frame_pos = have
                self._frame_size = size
                return
            if start + 4 + size > len(stage):
                self._compact()
            break
        if self._start == self._end:
            self._start = self._end = 0

    def _check_size(self, size: int) -> bool:
        server = self._server
        if size < MIN_REQUEST_BYTES:
            log.warning(
                "invalid request size %d from %s on listener %s (connection %s): "
                "must be at least %d bytes; closing connection",
                size, self._peer, server.listener_name, self._conn_id, MIN_REQUEST_BYTES,
            )
            self._closing = True
            self._pending.append(_CLOSE)
            self._ensure_writer()
            return False
        if size > server.max_request_bytes:
            log.warning(
                "request of %d bytes from %s on listener %s exceeds socket.request.max.bytes=%d; "
                "closing connection %s",
                size, self._peer, server.listener_name, server.max_request_bytes, self._conn_id,
            )
            self._closing = True
            self._pending.append(_CLOSE)
            self._ensure_writer()
            return False
        return True

    # ---- handling -----------------------------------------------------------------------

    def _dispatch(self, frame: bytearray) -> None:
        info = self.info
        assert info is not None
        self.pool_frames += 1
        try:
            result = self._server.handler.handle(info, frame)
        except CloseConnection as e:
            log.warning("closing connection %s from %s: %s", self._conn_id, self._peer, e)
            self._closing = True
            self._pending.append(_CLOSE)
            self._ensure_writer()
            return
        except Exception:
            log.exception(
                "error handling a request on connection %s from %s; closing connection",
                self._conn_id, self._peer,
            )
            self._closing = True
            self._pending.append(_CLOSE)
            self._ensure_writer()
            return
        if result is None:
            return
        if not self._pending and self._writer is None and not inspect.isawaitable(result):
            rest = self._write(result)  # fast path: nothing queued ahead of it
            if rest is not None:
                self._pending.append(rest)
                self._ensure_writer()
            return
        item: Any
        if inspect.isawaitable(result):
            item = asyncio.ensure_future(result)
        elif _has_file_regions(result):
            # Queued behind other responses: hold its files now (they may be closed before
            # their turn comes).
            item = _Rest(self._segments(result))
        else:
            item = result
        self._pending.append(item)
        self._ensure_writer()
        if len(self._pending) > MAX_PENDING_RESPONSES:
            self._pause_reading()

    def _ensure_writer(self) -> None:
        if self._writer is None:
            self._writer = self._loop.create_task(self._write_pending())

    async def _write_pending(self) -> None:
        try:
            while self._pending:
                item = self._pending[0]
                if item is _CLOSE:
                    self._pending.clear()
                    self.close()
                    return
                if isinstance(item, _Rest):
                    await self._wait_drained()
                    if self._push(item.segments):
                        continue  # blocked again: wait for the next drain
                    if self._pending and self._pending[0] is item:
                        self._pending.popleft()
                    self._maybe_resume_reading()
                    continue
                if isinstance(item, asyncio.Future):
                    try:
                        buffers = await item
                    except CloseConnection as e:
                        log.warning(
                            "closing connection %s from %s: %s", self._conn_id, self._peer, e
                        )
                        self._pending.clear()
                        self.close()
                        return
                    except asyncio.CancelledError:
                        task = asyncio.current_task()
                        if not item.cancelled() or (task is not None and task.cancelling()):
                            raise  # the connection is going away
                        log.error(
                            "delayed response on connection %s was cancelled; closing connection",
                            self._conn_id,
                        )
                        self._pending.clear()
                        self.close()
                        return
                    except Exception:
                        log.exception(
                            "error completing a request on connection %s from %s; "
                            "closing connection",
                            self._conn_id, self._peer,
                        )
                        self._pending.clear()
                        self.close()
                        return
                else:
                    buffers = item
                if self._pending and self._pending[0] is item:
                    self._pending.popleft()
                if buffers is not None:
                    rest = self._write(buffers)
                    if rest is not None:
                        self._pending.appendleft(rest)
                        continue
                self._maybe_resume_reading()
        finally:
            self._writer = None

    def _write(self, buffers: ResponseBuffers) -> _Rest | None:
        """Hand a response to the socket; what must wait for the transport to drain is returned."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return None
        if not _has_file_regions(buffers):
            transport.writelines([buffers_size(buffers).to_bytes(4, "big"), *buffers])
            return None
        segments = self._segments(buffers)
        if self._push(segments):
            return _Rest(segments)
        return None

    @staticmethod
    def _segments(buffers: ResponseBuffers) -> collections.deque[Any]:
        """The size prefix and the parts of a response, file regions as :class:`_Region`."""
        segments: collections.deque[Any] = collections.deque(
            [buffers_size(buffers).to_bytes(4, "big")]
        )
        for part in buffers:
            if hasattr(part, "file_regions"):
                segments.extend(_Region(r.fd, r.position, r.size) for r in part.file_regions)
            else:
                segments.append(part)
        return segments

    def _push(self, segments: collections.deque[Any]) -> bool:
        """Send ``segments`` in order, consuming them; True if the rest must wait for a drain.

        File regions go out with ``os.sendfile`` and bytes with ``os.write`` while the transport
        has nothing buffered. When the socket is full, a chunk goes through the transport (a
        copy); once the transport pauses (it holds unsent bytes), the rest waits.
        """
        transport = self._transport
        if transport is None or transport.is_closing():
            for seg in segments:
                if isinstance(seg, _Region):
                    seg.release()
            segments.clear()
            return False
        fd = self._raw_fd(transport)
        while segments:
            if self._write_paused:
                return True
            seg = segments[0]
            direct = fd is not None and transport.get_write_buffer_size() == 0
            if isinstance(seg, _Region):
                if direct:
                    assert fd is not None
                    try:
                        n = os.sendfile(fd, seg.fd, seg.position, seg.size)
                    except BlockingIOError:
                        n = 0
                    except OSError as e:  # e.g. EINVAL: this socket cannot sendfile
                        log.debug("sendfile unavailable on %s: %s", self._conn_id, e)
                        self._sendfile_ok = False
                        fd = None
                        n = 0
                    if n > 0:
                        if seg.advance(n):
                            segments.popleft()
                        continue
                # The socket is full or bytes are buffered ahead of us: one chunk through the
                # transport, which pauses it until it has drained; then sendfile goes on. With
                # no sendfile on this connection the whole region is copied.
                chunk = min(seg.size, SENDFILE_CHUNK_BYTES) if fd is not None else seg.size
                data = _pread_exact(seg.fd, seg.position, chunk)
                if seg.advance(chunk):
                    segments.popleft()
                transport.write(data)
                continue
            segments.popleft()
            if direct:
                view = memoryview(seg)
                try:
                    n = os.write(cast(int, fd), view)
                except BlockingIOError:
                    n = 0
                if n < len(view):
                    transport.write(view[n:])
                continue
            transport.write(seg)
        return False

    async def _wait_drained(self) -> None:
        """Until the transport's write buffer is empty (``resume_writing``)."""
        while self._write_paused:
            if self._drained is None or self._drained.done():
                self._drained = self._loop.create_future()
            await self._drained

    def _raw_fd(self, transport: asyncio.Transport) -> int | None:
        if not self._sendfile_ok or transport.get_extra_info("sslcontext") is not None:
            return None
        sock = transport.get_extra_info("socket")
        if sock is None:
            self._sendfile_ok = False
            return None
        return int(sock.fileno())

    # ---- flow control -------------------------------------------------------------------

    def _pause_reading(self) -> None:
        if not self._read_paused and self._transport is not None:
            self._read_paused = True
            if not self._pool_paused and not self._transport.is_closing():
                self._transport.pause_reading()

    def _maybe_resume_reading(self) -> None:
        if (
            self._read_paused
            and not self._write_paused
            and len(self._pending) <= RESUME_PENDING_RESPONSES
            and not self._closing
        ):
            self._read_paused = False
            self._process()  # frames parked in the staging buffer first
            if self._pool is not None:
                self._pool.update(self, self._end - self._start + self._frame_pos)
            if not self._read_paused and not self._pool_paused and self._transport is not None:
                if not self._transport.is_closing():
                    self._transport.resume_reading()

    # The request memory pool (queued.max.request.bytes) pauses and resumes reading too.

    def pool_pause(self) -> None:
        if not self._pool_paused:
            self._pool_paused = True
            transport = self._transport
            if not self._read_paused and transport is not None and not transport.is_closing():
                transport.pause_reading()

    def pool_resume(self) -> None:
        if self._pool_paused:
            self._pool_paused = False
            transport = self._transport
            if not self._read_paused and transport is not None and not transport.is_closing():
                transport.resume_reading()

    def pool_can_progress(self) -> bool:
        return not self._read_paused and not self._closing

    def idle_since(self, now: float) -> float | None:
        """When this connection became idle (nothing read, nothing owed), or None if busy."""
        transport = self._transport
        if (
            self._pending
            or self._writer is not None
            or self._pool_paused
            or transport is None
            or transport.get_write_buffer_size()
        ):
            self._last_read = now  # busy: idle time counts from when it is done
            return None
        return self._last_read

    def pause_writing(self) -> None:
        self._write_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._maybe_resume_reading()


def _has_file_regions(buffers: ResponseBuffers) -> bool:
    return any(hasattr(p, "file_regions") for p in buffers)


def _discard_result(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


class SocketServer:
    """Accepts connections on one listener and feeds their requests to ``handler``."""

    def __init__(
        self,
        host: str,
        port: int,
        handler: RequestHandler,
        *,
        listener_name: str,
        max_request_bytes: int = 104857600,
        memory_pool: RequestMemoryPool | None = None,
        quotas: ConnectionQuotas | None = None,
        connections_max_idle_ms: int = 600000,
    ) -> None:
        """``memory_pool`` and ``quotas`` may be shared by several listeners (None: no limit);
        ``connections_max_idle_ms`` < 0 keeps idle connections open forever, as in Kafka."""
        self.host = host
        self._requested_port = port
        self.handler = handler
        self.listener_name = listener_name
        self.max_request_bytes = max_request_bytes
        self.memory_pool = memory_pool
        self.quotas = quotas
        self.connections_max_idle_ms = connections_max_idle_ms
        self._idle_task: asyncio.Task[None] | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[KafkaConnection] = set()
        self._conn_counter = itertools.count()
        self.port: int = port

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def bind(self) -> None:
        """Bind the listener without accepting yet, so that a taken port fails the start
        before the broker touches its data (OSError, e.g. EADDRINUSE); :meth:`start` serves."""
        loop = asyncio.get_running_loop()
        host: str | None = self.host or None  # "" = all interfaces, as in Kafka's listeners
        self._server = await loop.create_server(
            lambda: KafkaConnection(self),
            host=host,
            port=self._requested_port,
            reuse_address=True,
            backlog=512,
            start_serving=False,
        )
        ports = {
            sock.getsockname()[1]
            for sock in self._server.sockets
            if sock.family in (socket.AF_INET, socket.AF_INET6)
        }
        self.port = min(ports) if ports else self._requested_port

    async def start(self) -> None:
        if self._server is None:
            await self.bind()
        assert self._server is not None
        await self._server.start_serving()
        log.info(
            "listener %s accepting connections on %s:%d",
            self.listener_name, self.host or "0.0.0.0", self.port,
        )
        if self.connections_max_idle_ms >= 0:
            self._idle_task = asyncio.get_running_loop().create_task(self._close_idle_connections())

    async def _close_idle_connections(self) -> None:
        """Every so often, close the connections idle for longer than connections.max.idle.ms."""
        max_idle_s = self.connections_max_idle_ms / 1000
        interval = min(1.0, max(0.01, max_idle_s / 4))
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            for conn in list(self._connections):
                if conn._closing:
                    continue
                since = conn.idle_since(now)
                if since is not None and now - since > max_idle_s:
                    log.debug(
                        "closing connection %s from %s: idle for more than "
                        "connections.max.idle.ms=%d",
                        conn._conn_id, conn._peer, self.connections_max_idle_ms,
                    )
                    conn.close()

    def begin_shutdown(self) -> None:
        """Stop accepting and reading; connections close once their owed responses are out."""
        if self._idle_task is not None:
            self._idle_task.cancel()
            self._idle_task = None
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.drain_and_close()

    async def stop(self) -> None:
        """Stop accepting, drain and close every connection, and wait until they are gone
        (connections still busy after 5 s are aborted)."""
        self.begin_shutdown()
        conns = list(self._connections)
        waits: list[Awaitable[Any]] = [c.closed for c in conns]
        if waits:
            _, still_open = await asyncio.wait(
                [asyncio.ensure_future(w) for w in waits], timeout=5.0
            )
            for conn in conns:
                if not conn.closed.done():
                    conn.abort()
            if still_open:
                await asyncio.wait(still_open, timeout=1.0)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
