"""The Kafka connection core: framing, response order and correlation for one connection, sans I/O.

Like h11's ``Connection`` for HTTP, nothing here touches a socket, an event loop, a clock or a
file: the caller feeds in the bytes it read and writes out the buffers it is given. Both ends of
Kafka's protocol are here:

- :class:`FrameReader` cuts a byte stream into size-prefixed frames (4-byte signed big-endian
  size, then that many bytes). Bytes can be fed with :meth:`FrameReader.receive_data`, or read
  straight into the reader's buffers (:meth:`~FrameReader.get_buffer` /
  :meth:`~FrameReader.buffer_updated`, the shape of asyncio's ``BufferedProtocol`` and of
  ``socket.recv_into``). Small frames are read into a reusable staging buffer and copied out once;
  a frame too large for it gets its own buffer and the rest of it is read directly there. That
  buffer is never allocated from the declared size (4 bytes would otherwise claim the whole size
  limit of memory): it starts at :data:`FRAME_INITIAL_BYTES` at most and doubles, up to the
  declared size, only when what has arrived fills it. A size over the limit or under the minimum
  raises :class:`FrameTooLarge` / :class:`InvalidFrameSize`; the reader then stays failed.
- :class:`ServerConnection` is the broker's side: request frames out, and responses put back in
  request order (:meth:`~ServerConnection.reserve_response` when a request is taken,
  :meth:`~ServerConnection.complete` whenever its response is ready, in any order;
  :meth:`~ServerConnection.next_response` hands them out in order). Responses are opaque to it.
- :class:`ClientConnection` is a client's side: requests encoded with increasing correlation ids
  (:meth:`~ClientConnection.send_request` returns the buffers to write), at most
  ``max_in_flight`` of them unanswered, and response frames matched to the oldest request in
  flight (Kafka answers in order): a correlation id that is not the expected one — unknown, or a
  later request's — raises :class:`CorrelationIdMismatch` and the connection must be closed.
  :meth:`~ClientConnection.connection_lost` hands back the requests still in flight, to be failed.
- :class:`ReconnectBackoff` is the client's ``reconnect.backoff.ms`` /
  ``reconnect.backoff.max.ms`` (Kafka's ``ClusterConnectionStates`` with its
  ``ExponentialBackoff``: doubling per failed attempt, 20 % jitter); the caller passes the time.
"""

from __future__ import annotations

import collections
import math
import random
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from odradek.protocol.header import RequestHeader, decode_response_header, encode_request_header
from odradek.protocol.schema import Api

STAGING_BUFFER_BYTES = 64 * 1024
# The most a frame's own buffer holds before the bytes that fill it have arrived; it then doubles.
FRAME_INITIAL_BYTES = 1024 * 1024
# The smallest request (v0 header: api_key int16, api_version int16, correlation_id int32) and
# the smallest response (its correlation id).
MIN_REQUEST_BYTES = 8
MIN_RESPONSE_BYTES = 4
DEFAULT_MAX_RESPONSE_BYTES = 256 * 1024 * 1024
MAX_CORRELATION_ID = 2**31 - 1

R = TypeVar("R")


class ProtocolError(Exception):
    """The peer broke Kafka's framing or correlation rules: the connection must be closed."""


class FrameSizeError(ProtocolError):
    def __init__(self, message: str, size: int, limit: int) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


class FrameTooLarge(FrameSizeError):
    """A frame declares more bytes than the limit (``socket.request.max.bytes`` on a broker)."""


class InvalidFrameSize(FrameSizeError):
    """A frame declares fewer bytes than the smallest header (negative and zero included)."""


class CorrelationIdMismatch(ProtocolError):
    """A response's correlation id is not the one of the oldest request in flight."""


class TooManyInFlight(RuntimeError):
    """``send_request`` with ``max_in_flight`` requests already unanswered: wait for one."""


class FrameReader:
    """Size-prefixed frames out of a byte stream (see the module docstring).

    ``reuse_buffer``: frames are memoryviews into the reader's own buffers, valid until the next
    call that reads or takes a frame (no allocation per frame; for a client that decodes a
    response before it reads the next). Otherwise every frame is a ``bytearray`` of its own that
    the taker may keep and rewrite in place.
    """

    def __init__(
        self, max_frame_bytes: int, min_frame_bytes: int, *, what: str, reuse_buffer: bool = False
    ) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.min_frame_bytes = min_frame_bytes
        self._what = what
        self._reuse = reuse_buffer
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
        self._ready: bytearray | memoryview | None = None  # a large frame complete, not yet taken
        self._spare: bytearray | None = None  # reuse_buffer: the large-frame buffer kept
        self._error: ProtocolError | None = None

    # ---- feeding bytes ------------------------------------------------------------------

    def get_buffer(self, limit: int = -1) -> memoryview:
        """Where the next bytes read go (then call :meth:`buffer_updated` with how many).

        ``limit`` >= 0 caps what a large frame's buffer offers (a memory pool's room); the
        staging buffer offers at most its own size anyway.
        """
        if self._frame_view is not None:
            pos = self._frame_pos
            if pos == len(self._frame_view):
                self._grow_frame()
            if limit >= 0:
                return self._frame_view[pos : pos + max(limit, 1)]
            return self._frame_view[pos:]
        if self._end == len(self._stage):
            self._compact()
            if self._end == len(self._stage):  # frames not taken yet fill it
                if self._head_is_large_frame():
                    return self.get_buffer(limit)
                self._grow_stage()
        return self._stage_view[self._end :]

    def _head_is_large_frame(self) -> bool:
        """If the first frame held is too large for the staging buffer, go on reading it into
        its own buffer (frames are cut only when taken; bytes may arrive before)."""
        start = self._start
        if self._end - start < 4 or self._error is not None or self._ready is not None:
            return False  # (one large frame at a time: the last one has not been taken yet)
        size = int.from_bytes(self._stage[start : start + 4], "big", signed=True)
        if not self.min_frame_bytes <= size <= self.max_frame_bytes or 4 + size <= len(self._stage):
            return False
        self._begin_large_frame(size, self._end - start - 4)
        return True

    def _grow_stage(self) -> None:
        old = len(self._stage)
        self._stage_view.release()
        try:
            self._stage.extend(bytes(old))
        except BufferError:  # a frame handed out (reuse_buffer) still views it: copy instead
            grown = bytearray(2 * old)
            grown[:old] = self._stage
            self._stage = grown
        self._stage_view = memoryview(self._stage)

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` were written into the buffer :meth:`get_buffer` returned."""
        if self._frame is None:
            self._end += nbytes
            return
        self._frame_pos += nbytes
        if self._frame_pos < self._frame_size:
            return
        assert self._frame_view is not None
        self._ready = self._frame_view if self._reuse else self._frame
        self._frame = None
        self._frame_view = None
        self._frame_pos = 0

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes that were read elsewhere (copied into the reader's buffers)."""
        view = memoryview(data).cast("B")
        while view:
            buf = self.get_buffer()
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            self.buffer_updated(n)
            view = view[n:]

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet taken as frames."""
        ready = len(self._ready) if self._ready is not None else 0
        return self._end - self._start + self._frame_pos + ready

    @property
    def has_partial_frame(self) -> bool:
        """True if bytes of a frame not yet complete (or of frames not yet taken) are held."""
        return self._frame is not None or self._end > self._start or self._ready is not None

    @property
    def reading_large_frame(self) -> bool:
        """True while a frame too large for the staging buffer is read into its own buffer."""
        return self._frame is not None

    # ---- taking frames ------------------------------------------------------------------

    def _next_frame(self) -> bytearray | memoryview | None:
        """The next complete frame (without its size prefix), or None until more bytes arrive.

        Raises :class:`FrameSizeError` for a size out of bounds (and again on every later call).
        """
        ready = self._ready
        if ready is not None:
            self._ready = None
            return ready
        if self._error is not None:
            raise self._error
        start = self._start
        avail = self._end - start
        if avail < 4:
            if avail == 0:
                self._start = self._end = 0
            return None
        stage = self._stage
        size = int.from_bytes(stage[start : start + 4], "big", signed=True)
        if size < self.min_frame_bytes or size > self.max_frame_bytes:
            raise self._size_error(size)
        if avail - 4 >= size:
            end = start + 4 + size
            frame: bytearray | memoryview
            if self._reuse:
                frame = self._stage_view[start + 4 : end]
            else:
                frame = bytearray(self._stage_view[start + 4 : end])
            if end == self._end:
                self._start = self._end = 0
            else:
                self._start = end
            return frame
        if 4 + size > len(stage):
            self._begin_large_frame(size, avail - 4)
        elif start + 4 + size > len(stage):
            self._compact()
        return None

    def _size_error(self, size: int) -> FrameSizeError:
        error: FrameSizeError
        if size < self.min_frame_bytes:
            error = InvalidFrameSize(
                f"invalid {self._what} size {size}: must be at least {self.min_frame_bytes} bytes",
                size, self.min_frame_bytes,
            )
        else:
            error = FrameTooLarge(
                f"{self._what} of {size} bytes exceeds the limit of {self.max_frame_bytes}",
                size, self.max_frame_bytes,
            )
        self._error = error
        self._start = self._end = 0
        return error

    def _begin_large_frame(self, size: int, have: int) -> None:
        """Too big for the staging buffer: the rest is read straight into the frame's buffer."""
        start = self._start + 4
        if self._reuse:
            spare = self._spare
            if spare is None or len(spare) < size:
                # A client trusts its limit: the buffer is sized for the frame and kept.
                spare = self._spare = bytearray(max(size, 2 * len(spare) if spare else 0))
            frame = spare
            view = memoryview(spare)[:size]
        else:
            frame = bytearray(min(size, max(FRAME_INITIAL_BYTES, have)))
            view = memoryview(frame)
        view[:have] = self._stage_view[start : start + have]
        self._start = self._end = 0
        self._frame = frame
        self._frame_view = view
        self._frame_pos = have
        self._frame_size = size

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

    def _compact(self) -> None:
        n = self._end - self._start
        if self._start and n:
            self._stage[:n] = self._stage_view[self._start : self._end]
        self._start = 0
        self._end = n

    def _reset_input(self) -> None:
        """Forget every byte received (the connection is gone)."""
        if self._frame_view is not None and not self._reuse:
            self._frame_view.release()
        self._frame = None
        self._frame_view = None
        self._frame_pos = 0
        self._ready = None
        self._start = self._end = 0
        self._error = None


class ResponseSlot:
    """A reserved place in a connection's response order: waiting, done (with a response or
    None), or close."""

    __slots__ = ("state", "response")

    def __init__(self) -> None:
        self.state = _WAITING
        self.response: Any = None


_WAITING, _DONE, _CLOSE = 0, 1, 2


class Close:
    """:meth:`ServerConnection.next_response`: everything owed before is out; close now."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "CLOSE"


CLOSE = Close()


class ServerConnection(FrameReader, Generic[R]):
    """The broker's side of one connection: request frames in, responses out in request order.

    Requests are handled one at a time in arrival order (:meth:`next_request`); Kafka pipelines,
    so the next request may be taken while earlier responses are still delayed. A response slot
    reserved per request that will be answered keeps the order; a request with no response
    (acks=0) reserves none.
    """

    def __init__(self, max_request_bytes: int) -> None:
        super().__init__(max_request_bytes, MIN_REQUEST_BYTES, what="request")
        self._slots: collections.deque[ResponseSlot] = collections.deque()
        self._closing = False
        self._lost = False

    def next_request(self) -> bytearray | None:
        """The next complete request frame, or None (more bytes needed, or closing).

        Raises :class:`FrameSizeError`: the connection closes once earlier responses are out
        (:meth:`close_after_pending` was called for it).
        """
        if self._closing:
            return None
        try:
            frame = self._next_frame()
        except FrameSizeError:
            self.close_after_pending()
            raise
        return frame  # type: ignore[return-value]  # never a view: reuse_buffer is off

    @property
    def owed(self) -> int:
        """Responses reserved and not yet handed out by :meth:`next_response`."""
        return len(self._slots)

    @property
    def closing(self) -> bool:
        """No further requests will be taken."""
        return self._closing

    def reserve_response(self) -> ResponseSlot:
        """The place of the response to the request just taken (call in request order)."""
        slot = ResponseSlot()
        if not self._lost:
            self._slots.append(slot)
        return slot

    def is_next(self, slot: ResponseSlot) -> bool:
        """True if nothing is owed before ``slot``: its response can be written at once."""
        return bool(self._slots) and self._slots[0] is slot

    def complete(self, slot: ResponseSlot, response: R | None) -> bool:
        """The response for ``slot`` (None: none is sent). False if the connection is gone, so
        the caller must release what the response holds."""
        if slot.state != _WAITING:
            raise ValueError("response slot completed twice")
        slot.state = _DONE
        slot.response = response
        return not self._lost

    def complete_close(self, slot: ResponseSlot) -> None:
        """Instead of a response: close once everything before ``slot`` is out; later responses
        are dropped and no further request is taken."""
        if slot.state != _WAITING:
            raise ValueError("response slot completed twice")
        slot.state = _CLOSE
        self._closing = True

    def close_after_pending(self) -> None:
        """Take no further request; close once every response owed so far is out."""
        self._closing = True
        if self._lost or (self._slots and self._slots[-1].state == _CLOSE):
            return
        slot = ResponseSlot()
        slot.state = _CLOSE
        self._slots.append(slot)

    def next_response(self) -> R | Close | None:
        """The next response in request order, :data:`CLOSE`, or None (the next is not ready)."""
        slots = self._slots
        while slots:
            head = slots[0]
            state = head.state
            if state == _WAITING:
                return None
            if state == _CLOSE:
                return CLOSE  # stays at the head: nothing after it goes out
            slots.popleft()
            if head.response is not None:
                return head.response  # type: ignore[no-any-return]
        return None

    def connection_lost(self) -> list[R]:
        """The connection is gone: the responses completed and not handed out (to release)."""
        self._lost = True
        self._closing = True
        dropped = [s.response for s in self._slots if s.state == _DONE and s.response is not None]
        self._slots.clear()
        self._reset_input()
        return dropped


def frame_response(buffers: Any) -> list[Any]:
    """A response's size prefix followed by its buffers (written without joining them)."""
    total = 0
    for b in buffers:
        total += b.nbytes if isinstance(b, memoryview) else len(b)
    return [total.to_bytes(4, "big"), *buffers]


@dataclass(slots=True)
class InFlightRequest:
    """A request sent and not yet answered. ``api`` None: a raw frame whose response is taken
    whatever its correlation id. ``context`` is the caller's (e.g. the future to resolve)."""

    correlation_id: int
    api: Api | None
    version: int
    context: Any = None

    def describe(self) -> str:
        name = self.api.name if self.api is not None else "raw request"
        return f"{name} v{self.version} (correlation id {self.correlation_id})"


@dataclass(slots=True)
class Response:
    """A response matched to its request; ``body`` is None for a raw request."""

    request: InFlightRequest
    frame: bytearray | memoryview
    body: dict[str, Any] | None


class ClientConnection(FrameReader):
    """A client's side of one connection (see the module docstring).

    The connection object outlives a socket: after :meth:`connection_lost` it is empty and ready
    for the next one, and correlation ids keep increasing across reconnections.
    """

    def __init__(
        self,
        client_id: str | None,
        *,
        max_in_flight: int,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        reuse_buffer: bool = False,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        super().__init__(
            max_response_bytes, MIN_RESPONSE_BYTES, what="response", reuse_buffer=reuse_buffer
        )
        self.client_id = client_id
        self.max_in_flight = max_in_flight
        self._next_id = 1
        self._in_flight: collections.deque[InFlightRequest] = collections.deque()

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def oldest_in_flight(self) -> InFlightRequest | None:
        """The request the next response answers."""
        return self._in_flight[0] if self._in_flight else None

    @property
    def can_send(self) -> bool:
        return len(self._in_flight) < self.max_in_flight and self._error is None

    def _take_id(self) -> int:
        cid = self._next_id
        self._next_id = cid + 1 if cid < MAX_CORRELATION_ID else 0
        return cid

    def send_request(
        self,
        api: Api,
        version: int,
        body: dict[str, Any],
        *,
        expect_response: bool = True,
        context: Any = None,
    ) -> tuple[int, list[Any]]:
        """Encode a request: (its correlation id, the buffers to write, size prefix first).

        ``expect_response`` False (a Produce with acks=0): nothing is tracked.
        Raises :class:`TooManyInFlight` at ``max_in_flight``.
        """
        self._check_can_send()
        cid = self._take_id()
        header = encode_request_header(
            RequestHeader(api.api_key, version, cid, self.client_id),
            api.request_header_version(version),
        )
        parts: list[Any] = [b"", header, *api.encode_request(version, body)]
        parts[0] = sum(len(p) for p in parts).to_bytes(4, "big")
        if expect_response:
            self._in_flight.append(InFlightRequest(cid, api, version, context))
        return cid, parts

    def send_raw(self, frame: bytes, *, expect_response: bool = True, context: Any = None) -> list[Any]:
        """A pre-built frame (size prefix included), e.g. a deliberately malformed request; its
        response is taken raw, whatever its correlation id."""
        self._check_can_send()
        if expect_response:
            self._in_flight.append(InFlightRequest(-1, None, -1, context))
        return [frame]

    def _check_can_send(self) -> None:
        if self._error is not None:
            raise self._error
        if len(self._in_flight) >= self.max_in_flight:
            raise TooManyInFlight(f"{self.max_in_flight} requests are already in flight")

    def next_response(self) -> Response | None:
        """The next response, matched and decoded, or None until more bytes arrive.

        Raises :class:`ProtocolError` (size out of bounds, a correlation id that does not match,
        a response that cannot be decoded); the connection must then be closed.
        """
        frame = self._next_frame()
        if frame is None:
            return None
        if not self._in_flight:
            raise self._fail(
                CorrelationIdMismatch(
                    f"response with correlation id {int.from_bytes(frame[:4], 'big', signed=True)}"
                    " but no request in flight"
                )
            )
        request = self._in_flight[0]
        api = request.api
        if api is None:
            self._in_flight.popleft()
            return Response(request, frame, None)
        try:
            cid, pos = decode_response_header(frame, api.response_header_version(request.version))
        except Exception as e:
            raise self._fail(ProtocolError(f"malformed response header to {request.describe()}: {e}")) from e
        if cid != request.correlation_id:
            later = any(r.correlation_id == cid for r in self._in_flight)
            raise self._fail(
                CorrelationIdMismatch(
                    f"Correlation id for response ({cid}) does not match request "
                    f"({request.correlation_id}): {request.describe()}"
                    + ("; the response is to a later request" if later else "; unknown correlation id")
                )
            )
        self._in_flight.popleft()
        try:
            body, _ = api.decode_response(request.version, frame, pos)
        except Exception as e:
            raise self._fail(ProtocolError(f"malformed response to {request.describe()}: {e}")) from e
        return Response(request, frame, body)

    def _fail(self, error: ProtocolError) -> ProtocolError:
        self._error = error
        return error

    def connection_lost(self) -> list[InFlightRequest]:
        """The connection is gone: the requests still in flight (to fail), oldest first. The
        object is then ready for a new connection."""
        pending = list(self._in_flight)
        self._in_flight.clear()
        self._reset_input()
        return pending


class ReconnectBackoff:
    """``reconnect.backoff.ms`` / ``reconnect.backoff.max.ms`` for one peer (Kafka's
    ``ClusterConnectionStates``): after the n-th consecutive failure (a failed attempt or a lost
    connection) the next attempt waits ``reconnect.backoff.ms * 2**(n-1)`` ± 20 %, at most
    ``reconnect.backoff.max.ms``; a connection that works resets it. Times are the caller's, in ms.
    """

    MULTIPLIER = 2
    JITTER = 0.2

    def __init__(
        self,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        rng: random.Random | None = None,
    ) -> None:
        self.max_ms = reconnect_backoff_max_ms
        self.initial_ms = min(reconnect_backoff_ms, reconnect_backoff_max_ms)
        self._rng = rng or random.Random()
        if reconnect_backoff_max_ms > self.initial_ms:
            self._exp_max = math.log(reconnect_backoff_max_ms / max(self.initial_ms, 1)) / math.log(
                self.MULTIPLIER
            )
        else:
            self._exp_max = 0.0
        self.failed_attempts = 0
        self.backoff_ms = self.backoff(0)
        self._last_attempt_ms: float | None = None

    def backoff(self, attempts: int) -> int:
        """Kafka's ``ExponentialBackoff.backoff``."""
        if self._exp_max == 0:
            return self.initial_ms
        term = self.initial_ms * self.MULTIPLIER ** min(attempts, self._exp_max)
        factor = self._rng.uniform(1 - self.JITTER, 1 + self.JITTER)
        return min(int(term * factor), self.max_ms)

    def connecting(self, now_ms: float) -> None:
        self._last_attempt_ms = now_ms

    def disconnected(self, now_ms: float) -> None:
        """An attempt failed or a connection was lost."""
        self._last_attempt_ms = now_ms
        self.backoff_ms = self.backoff(self.failed_attempts)
        self.failed_attempts += 1

    def ready(self) -> None:
        """Connected and working."""
        self.failed_attempts = 0
        self.backoff_ms = self.backoff(0)

    def delay_ms(self, now_ms: float) -> float:
        """How long to wait before the next attempt."""
        if self._last_attempt_ms is None:
            return 0.0
        return max(self.backoff_ms - (now_ms - self._last_attempt_ms), 0.0)
