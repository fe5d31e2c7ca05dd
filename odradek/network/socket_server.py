"""Asyncio socket server: the I/O around :class:`~odradek.network.connection.ServerConnection`.

Each connection is a :class:`KafkaConnection` (an ``asyncio.BufferedProtocol``) driving the
sans-I/O connection core (:mod:`odradek.network.connection`): the transport reads straight into the
core's buffers, the core cuts request frames (``socket.request.max.bytes``; a size out of bounds
closes the connection once earlier responses are out) and keeps responses in request order.

Limits that the broker's listeners share (:mod:`odradek.network.limits`; the controller listener
has its own): ``queued.max.request.bytes`` (a pool of the bytes received and not yet handled;
reading pauses when it is full),
``max.connections`` and ``max.connections.per.ip`` (new connections over a limit are closed at
once). ``connections.max.idle.ms``: a connection with no bytes read for that long and nothing
owed to it (no response pending or unsent, not paused by the pool) is closed.

The handler runs synchronously, in arrival order, for every frame. Its result (ready buffers,
``None`` or an awaitable) takes a place in the core's response order, so responses leave in
request order even when delayed operations complete out of order. Reading pauses while more than
``MAX_PENDING_RESPONSES`` responses are owed or while the transport holds unsent bytes (its
high-water mark is 0: the socket is full).

Fetch responses carry file regions of log segments, sent with ``os.sendfile`` straight from the
page cache whenever the transport has nothing buffered (bytes must not overtake each other).
When the socket is full, one ``SENDFILE_CHUNK_BYTES`` piece is copied through the transport
instead, which pauses it; the rest of the response, and every response after it, waits until the
transport has drained (``resume_writing``) and then goes on with ``sendfile``. A large fetch
response thus costs a small copy per socket-buffer-full instead of a copy of all of it. Regions
that wait (behind other responses or for a drain) hold their own duplicate of the segment's file
descriptor, so a segment closed meanwhile (topic deletion) cannot make them read another file.

On a TLS listener (SSL, SASL_SSL) the transport is an
:class:`~odradek.network.ssl_transport_layer.SslTransportLayer` (the handshake, then encryption in
user space): no ``sendfile``, file regions are read and written ``COPY_CHUNK_BYTES`` at a time,
each waiting for the transport to drain. The connection's principal comes from the client
certificate (``ssl.principal.mapping.rules``).
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
from typing import TYPE_CHECKING, Any, cast

from odradek.network.connection import (
    MIN_REQUEST_BYTES,
    STAGING_BUFFER_BYTES,
    Close,
    FrameTooLarge,
    InvalidFrameSize,
    ResponseSlot,
    ServerConnection,
    frame_response,
)
from odradek.network.limits import ConnectionQuotas, RequestMemoryPool
from odradek.network.request_channel import (
    CloseConnection,
    ConnectionInfo,
    RequestHandler,
    ResponseBuffers,
)
from odradek.network.ssl_transport_layer import SslTransportLayer, tls_hint

if TYPE_CHECKING:
    from odradek.security.ssl_factory import ListenerTls

log = logging.getLogger(__name__)

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
# Without sendfile (TLS: the bytes must be encrypted in user space), file regions are read and
# written in pieces of this size, each waiting for the transport to drain.
COPY_CHUNK_BYTES = 256 * 1024
RESUME_PENDING_RESPONSES = MAX_PENDING_RESPONSES // 2


def _release_all(segments: collections.deque[Any]) -> None:
    """Release the file regions among unsent response segments and forget them all."""
    for seg in segments:
        if isinstance(seg, _Region):
            seg.release()
    segments.clear()


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
        self.core: ServerConnection[ResponseBuffers | _Rest] = ServerConnection(
            server.max_request_bytes
        )
        # Limits shared with the other connections (see odradek.network.limits).
        self._pool = server.memory_pool
        self.pool_held = 0
        self.pool_frames = 0
        self._pool_paused = False
        self._ip: str | None = None  # counted in the server's connection quotas
        self._last_read = self._loop.time()
        # The response being written that waits for the transport to drain; the core keeps
        # the ones after it.
        self._rest: _Rest | None = None
        self._delayed: set[asyncio.Task[None]] = set()  # tasks awaiting delayed operations
        self._closing = False  # no more requests will be handled
        self._write_paused = False
        self._read_paused = False
        self._throttle_end = 0.0  # loop time until which the connection is muted (quotas)
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
            connection_id=conn_id, peer=peer, listener_name=self._server.listener_name,
            security_protocol=self._server.security_protocol,
            set_max_request_bytes=self._set_max_request_bytes,
            mute_for=self._throttle,
        )
        tls = self._server.tls
        if tls is not None and not self._tls_principal(tls, transport):
            return
        hook = getattr(self._server.handler, "connection_made", None)
        if hook is not None:  # a SASL listener's authenticator starts here
            hook(self.info)
        self._server._connections.add(self)
        log.debug(
            "accepted connection %s on listener %s (%s, principal %s)", conn_id,
            self._server.listener_name, self.info.security_protocol, self.info.principal,
        )

    def _tls_principal(self, tls: ListenerTls, transport: asyncio.Transport) -> bool:
        """The principal of a TLS connection: its client certificate's subject through
        ``ssl.principal.mapping.rules`` (User:ANONYMOUS without one); False (closed) if no
        rule applies."""
        from odradek.security.kafka_principal import USER_TYPE, KafkaPrincipal
        from odradek.security.ssl_principal_mapper import NoMatchingRule, distinguished_name

        info = self.info
        assert info is not None
        sslobj = transport.get_extra_info("ssl_object")
        der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
        if not der:
            return True
        dn = distinguished_name(der)
        try:
            info.principal = KafkaPrincipal(USER_TYPE, tls.mapper.get_name(dn))
        except (NoMatchingRule, ValueError) as e:
            log.warning(
                "closing TLS connection %s from %s on listener %s: no principal for the client "
                "certificate (%s)", info.connection_id, info.peer, self._server.listener_name, e,
            )
            self.abort()
            return False
        return True

    _max_request_name = "socket.request.max.bytes"

    def _set_max_request_bytes(self, limit: int | None, name: str) -> None:
        """A SASL listener's limit before authentication (``limit``), then back to the server's.
        Before authentication a frame may also be shorter than a request header (a bare SASL
        token after a v0 SaslHandshake); the authenticator judges those."""
        self.core.max_frame_bytes = self._server.max_request_bytes if limit is None else limit
        self.core.min_frame_bytes = MIN_REQUEST_BYTES if limit is None else 0
        self._max_request_name = "socket.request.max.bytes" if limit is None else name

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if exc is not None:
            log.debug("connection %s lost: %s", self._conn_id, exc)
        # Delayed operations still pending keep running (they belong to the purgatory); their
        # results are dropped when they complete (_await_response).
        if self._rest is not None:
            self._rest.release()
            self._rest = None
        for item in self.core.connection_lost():
            if isinstance(item, _Rest):
                item.release()
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
        if not self._owed():
            self.close()
            return
        self._close_after_pending()

    def abort(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.abort()

    def _owed(self) -> int:
        return self.core.owed + (self._rest is not None)

    def _close_after_pending(self) -> None:
        """Handle no further request; close once the responses owed so far are out."""
        self._closing = True
        self.core.close_after_pending()
        self._flush()

    # ---- reading ------------------------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        pool = self._pool
        if pool is not None and pool.finisher is not self:
            # Read no more than the pool has room for (at least a staging buffer's worth).
            return self.core.get_buffer(max(pool.capacity - pool.used, STAGING_BUFFER_BYTES))
        return self.core.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self._closing:
            return
        self._last_read = self._loop.time()
        core = self.core
        core.buffer_updated(nbytes)
        if not core.reading_large_frame:
            self._process()
        if self._pool is not None:
            self._pool.update(self, core.buffered_bytes)

    def eof_received(self) -> bool | None:
        if self.core.has_partial_frame:
            log.debug("connection %s closed by peer in the middle of a request", self._conn_id)
        # Returning None closes the transport; pending responses can't be read by the peer anyway
        # once it half-closes in Kafka's protocol, but let earlier ones flush first.
        self._closing = True
        if not self._owed():
            return None
        self._close_after_pending()
        return True

    def _process(self) -> None:
        """Take complete request frames from the core and dispatch them in order."""
        core = self.core
        server = self._server
        while not self._closing and not self._read_paused:
            try:
                frame = core.next_request()
            except InvalidFrameSize as e:
                log.warning(
                    "invalid request size %d from %s on listener %s (connection %s): "
                    "must be at least %d bytes; closing connection",
                    e.size, self._peer, server.listener_name, self._conn_id, e.limit,
                )
                self._close_after_pending()
                return
            except FrameTooLarge as e:
                log.warning(
                    "request of %d bytes from %s on listener %s exceeds "
                    "%s=%d; closing connection %s%s",
                    e.size, self._peer, server.listener_name, self._max_request_name, e.limit,
                    self._conn_id, tls_hint(e.size, server.security_protocol),
                )
                self._close_after_pending()
                return
            if frame is None:
                break
            self._dispatch(frame)

    # ---- handling -----------------------------------------------------------------------

    def _dispatch(self, frame: bytearray) -> None:
        info = self.info
        assert info is not None
        self.pool_frames += 1
        try:
            result = self._server.handler.handle(info, frame)
        except CloseConnection as e:
            log.warning("closing connection %s from %s: %s", self._conn_id, self._peer, e)
            if e.response is not None:
                self.core.complete(self.core.reserve_response(), self._hold(e.response))
            self._close_after_pending()
            return
        except Exception:
            log.exception(
                "error handling a request on connection %s from %s; closing connection",
                self._conn_id, self._peer,
            )
            self._close_after_pending()
            return
        if result is None:
            return
        core = self.core
        if inspect.isawaitable(result):
            task = self._loop.create_task(self._await_response(core.reserve_response(), result))
            self._delayed.add(task)
        elif not core.owed and self._rest is None:
            self._rest = self._write(result)  # fast path: nothing queued ahead of it
            return
        else:
            # Queued behind other responses: hold its files now (they may be closed before
            # their turn comes).
            core.complete(core.reserve_response(), self._hold(result))
        if self._owed() > MAX_PENDING_RESPONSES:
            self._pause_reading()

    def _hold(self, buffers: ResponseBuffers) -> ResponseBuffers | _Rest:
        return _Rest(self._segments(buffers)) if _has_file_regions(buffers) else buffers

    async def _await_response(
        self, slot: ResponseSlot, awaitable: Awaitable[ResponseBuffers | None]
    ) -> None:
        """A delayed operation: its response takes its place in the order when it completes.

        A coroutine runs inside this task (no task or callback of its own). Nothing cancels
        these tasks when the connection goes: the operation belongs to the purgatory, and its
        result is dropped.
        """
        try:
            try:
                result = await awaitable
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # the loop is going away
                self._delayed_failed(slot, None)
                return
            except Exception as e:
                self._delayed_failed(slot, e)
                return
            core = self.core
            response: ResponseBuffers | _Rest | None = result
            if result is not None and (self._rest is not None or not core.is_next(slot)):
                response = self._hold(result)
            if not core.complete(slot, response):  # the connection is gone
                if isinstance(response, _Rest):
                    response.release()
                return
            self._flush()
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._delayed.discard(task)

    def _delayed_failed(self, slot: ResponseSlot, exc: Exception | None) -> None:
        """A delayed operation raised (``exc``) or was cancelled (None): close the connection
        once the responses before it are out."""
        if self.closed.done():
            return
        if exc is None:
            log.error(
                "delayed response on connection %s was cancelled; closing connection",
                self._conn_id,
            )
        elif isinstance(exc, CloseConnection):
            log.warning("closing connection %s from %s: %s", self._conn_id, self._peer, exc)
            if exc.response is not None:  # its response first, then close
                self._closing = True
                self.core.complete(slot, self._hold(exc.response))
                self.core.close_after_pending()
                self._flush()
                return
        else:
            log.error(
                "error completing a request on connection %s from %s; closing connection",
                self._conn_id, self._peer, exc_info=exc,
            )
        self._closing = True
        self.core.complete_close(slot)
        self._flush()

    def _flush(self) -> None:
        """Write the responses that are next in order, as far as the transport allows."""
        core = self.core
        while True:
            rest = self._rest
            if rest is not None:
                if self._write_paused or self._push(rest.segments):
                    return  # blocked: resume_writing goes on
                self._rest = None
            item = core.next_response()
            if item is None:
                break
            if isinstance(item, Close):
                self.close()
                return
            self._rest = item if isinstance(item, _Rest) else self._write(item)
        self._maybe_resume_reading()

    def _write(self, buffers: ResponseBuffers) -> _Rest | None:
        """Hand a response to the socket; what must wait for the transport to drain is returned."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return None
        if not _has_file_regions(buffers):
            transport.writelines(frame_response(buffers))
            return None
        segments = self._segments(buffers)
        if self._push(segments):
            return _Rest(segments)
        return None

    @staticmethod
    def _segments(buffers: ResponseBuffers) -> collections.deque[Any]:
        """The size prefix and the parts of a response, file regions as :class:`_Region`."""
        segments: collections.deque[Any] = collections.deque()
        for part in frame_response(buffers):
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
            _release_all(segments)
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
                    except (BrokenPipeError, ConnectionResetError) as e:
                        return self._peer_gone(transport, segments, e)
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
                # no sendfile on this connection (TLS) the region is copied a piece at a time.
                chunk = min(seg.size, SENDFILE_CHUNK_BYTES if fd is not None else COPY_CHUNK_BYTES)
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
                except (BrokenPipeError, ConnectionResetError) as e:
                    return self._peer_gone(transport, segments, e)
                if n < len(view):
                    transport.write(view[n:])
                continue
            transport.write(seg)
        return False

    def _peer_gone(self, transport: asyncio.Transport, segments: collections.deque[Any], error: OSError) -> bool:
        """The client closed its end while a response was being written to the raw socket:
        drop what is left (releasing file regions) and close, as the transport does when its
        own write fails. Not an error of the broker: one debug line."""
        log.debug("Connection %s closed by the client during a write: %s", self._conn_id, error)
        _release_all(segments)
        transport.abort()
        return False

    def _raw_fd(self, transport: asyncio.Transport) -> int | None:
        if not self._sendfile_ok or transport.get_extra_info("sslcontext") is not None:
            return None
        sock = transport.get_extra_info("socket")
        if sock is None:
            self._sendfile_ok = False
            return None
        return int(sock.fileno())

    # ---- flow control -------------------------------------------------------------------

    def _throttle(self, throttle_ms: int) -> None:
        """A client over its quota (KIP-219): read nothing from it for ``throttle_ms``."""
        end = self._loop.time() + throttle_ms / 1000.0
        if end <= self._throttle_end:
            return
        first = self._throttle_end == 0.0
        self._throttle_end = end
        self._pause_reading()
        if first:
            self._loop.call_at(end, self._end_throttle)

    def _end_throttle(self) -> None:
        remaining = self._throttle_end - self._loop.time()
        if remaining > 0.0005:  # extended meanwhile
            self._loop.call_later(remaining, self._end_throttle)
            return
        self._throttle_end = 0.0
        self._maybe_resume_reading()

    def _pause_reading(self) -> None:
        if not self._read_paused and self._transport is not None:
            self._read_paused = True
            if not self._pool_paused and not self._transport.is_closing():
                self._transport.pause_reading()

    def _maybe_resume_reading(self) -> None:
        if (
            self._read_paused
            and not self._write_paused
            and not self._throttle_end
            and self._owed() <= RESUME_PENDING_RESPONSES
            and not self._closing
        ):
            self._read_paused = False
            self._process()  # frames parked in the core first
            if self._pool is not None:
                self._pool.update(self, self.core.buffered_bytes)
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
            self._owed()
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
        self._flush()
        self._maybe_resume_reading()


def _has_file_regions(buffers: ResponseBuffers) -> bool:
    return any(hasattr(p, "file_regions") for p in buffers)


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
        security_protocol: str = "PLAINTEXT",
        tls: ListenerTls | None = None,
    ) -> None:
        """``memory_pool`` and ``quotas`` may be shared by several listeners (None: no limit);
        ``connections_max_idle_ms`` < 0 keeps idle connections open forever, as in Kafka.
        ``tls``: serve TLS (SSL and SASL_SSL listeners) with this context."""
        self.host = host
        self._requested_port = port
        self.handler = handler
        self.listener_name = listener_name
        self.max_request_bytes = max_request_bytes
        self.memory_pool = memory_pool
        self.quotas = quotas
        self.connections_max_idle_ms = connections_max_idle_ms
        self.security_protocol = security_protocol
        self.tls = tls
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
        factory: Any = (lambda: KafkaConnection(self)) if self.tls is None else (lambda: SslTransportLayer(self, KafkaConnection))
        self._server = await loop.create_server(
            factory,
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
