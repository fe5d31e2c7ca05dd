"""NetworkClient: the asyncio Kafka-protocol client Odradek nodes use to talk to each other.

The I/O around :class:`~odradek.network.connection.ClientConnection`: one connection to one
broker, requests pipelined (at most ``max_in_flight`` unanswered; more wait in a queue, in order)
and matched to responses by correlation id, encoded with the same declarative definitions the
server uses. Tools and tests use it too.

A connection that goes away fails every request in flight with :class:`ConnectionClosed` naming
it; a response that breaks the protocol (a correlation id that does not match) closes the
connection the same way. The next request reconnects, after ``reconnect.backoff.ms`` doubling per
consecutive failure up to ``reconnect.backoff.max.ms`` (Kafka's semantics, 20 % jitter); a
reconnection that fails fails the requests waiting for it.

``sasl_role`` ("broker" / "controller"): the peer is a node of that role; if this process
registered a SASL login for it (:mod:`odradek.security.sasl_client_authenticator`), every new
connection authenticates before any queued request goes out, and a refused login fails them.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
from dataclasses import dataclass
from typing import Any, cast

from odradek.network.connection import (
    DEFAULT_MAX_RESPONSE_BYTES,
    ClientConnection,
    InFlightRequest,
    ProtocolError,
    ReconnectBackoff,
)
from odradek.protocol.schema import Api
from odradek.security.sasl_client_authenticator import SaslClientError, authenticate, client_login
from odradek.security.sasl_config import SaslClientConfig

log = logging.getLogger(__name__)

# The broker stops reading a connection with 100 responses owed, so a deeper pipeline only
# queues in its socket; requests beyond this wait in the client's queue.
DEFAULT_MAX_IN_FLIGHT = 1024
PRODUCE_API_KEY = 0


class ConnectionClosed(ConnectionError):
    """The connection closed with the request unanswered (Kafka's way of rejecting some bad
    requests), or it could not be made."""


@dataclass(slots=True)
class _Queued:
    """A request waiting for room in flight or for a connection."""

    api: Api | None  # None: a raw frame
    version: int
    body: Any  # the request's dict, or the raw frame's bytes
    future: asyncio.Future[Any]
    expect_response: bool


class _Protocol(asyncio.BufferedProtocol):
    def __init__(self, client: NetworkClient) -> None:
        self._client = client
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self is not self._client._protocol:  # a connection already replaced: bytes ignored
            return memoryview(bytearray(max(sizehint, 1024)))
        return self._client.core.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._client._received(self, nbytes)

    def eof_received(self) -> bool | None:
        return None  # close

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        self._client._connection_lost(self, exc)

    def pause_writing(self) -> None:
        self._client._write_paused = True

    def resume_writing(self) -> None:
        self._client._resume_writing()


class NetworkClient:
    def __init__(
        self,
        host: str,
        port: int,
        client_id: str = "odradek",
        *,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        sasl_role: str | None = None,
        sasl: SaslClientConfig | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``ssl_context``: connect with TLS (to an SSL listener), the server's name checked
        against ``host`` if the context checks host names."""
        self.host = host
        self.sasl_role = sasl_role
        self.sasl = sasl  # an explicit login (a tool's --command-config), else the role's
        self._authenticating = False
        self.ssl_context = ssl_context
        self.port = port
        self.client_id = client_id
        self.core = ClientConnection(
            client_id, max_in_flight=max_in_flight, max_response_bytes=max_response_bytes
        )
        self.backoff = ReconnectBackoff(reconnect_backoff_ms, reconnect_backoff_max_ms)
        self._transport: asyncio.Transport | None = None
        self._protocol: _Protocol | None = None
        self._queued: collections.deque[_Queued] = collections.deque()
        self._reconnect_task: asyncio.Task[None] | None = None
        self._close_reason: str | None = None
        self._closed = False
        self._write_paused = False
        self._drained: asyncio.Future[None] | None = None
        # Connections made so far: what a caller learnt on one (ApiVersions) is stale on the next.
        self.connections = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._transport is not None

    async def connect(self) -> NetworkClient:
        """Connect (an OSError if the broker cannot be reached)."""
        await self._open()
        return self

    async def close(self) -> None:
        self._closed = True
        task = self._reconnect_task
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        protocol, transport = self._protocol, self._transport
        if transport is not None and protocol is not None:
            self._close_reason = "the client was closed"
            transport.close()
            try:
                await asyncio.wait_for(asyncio.shield(protocol.lost), 5)
            except TimeoutError:
                transport.abort()
        self._fail_queued(ConnectionClosed(f"the client for {self.address} was closed"))

    async def __aenter__(self) -> NetworkClient:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- requests -----------------------------------------------------------------------

    def send_nowait(self, api: Api, version: int, body: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        """Queue a request; the future resolves with the decoded response (an empty dict for a
        Produce with acks=0, which has none)."""
        expect = not (api.api_key == PRODUCE_API_KEY and body.get("acks") == 0)
        return self._enqueue(_Queued(api, version, body, self._new_future(), expect))

    async def send(self, api: Api, version: int, body: dict[str, Any]) -> dict[str, Any]:
        fut = self.send_nowait(api, version, body)
        await self._drain()
        return await fut

    async def send_raw(self, frame: bytes, expect_response: bool = True) -> bytes | None:
        """Write a pre-built frame (size prefix included); return the raw response frame to it
        (whatever its correlation id)."""
        fut = self._enqueue(_Queued(None, -1, frame, self._new_future(), expect_response))
        await self._drain()
        result = await fut
        return cast(bytes, result) if expect_response else None

    def _new_future(self) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    def _enqueue(self, item: _Queued) -> asyncio.Future[Any]:
        if self._closed:
            raise ConnectionClosed(f"the client for {self.address} was closed")
        self._queued.append(item)
        self._pump()
        return item.future

    def _pump(self) -> None:
        """Send queued requests while there is room in flight (reconnecting if need be)."""
        if self._transport is None:
            if self._queued and not self._closed:
                self._ensure_reconnect()
            return
        if self._authenticating:
            return
        core = self.core
        while self._queued and core.can_send:
            item = self._queued.popleft()
            fut = item.future
            try:
                if item.api is None:
                    parts = core.send_raw(
                        item.body, expect_response=item.expect_response, context=fut
                    )
                else:
                    _, parts = core.send_request(
                        item.api, item.version, item.body,
                        expect_response=item.expect_response, context=fut,
                    )
            except Exception as e:  # the body does not encode
                if not fut.done():
                    fut.set_exception(e)
                continue
            self._transport.writelines(parts)
            if not item.expect_response and not fut.done():
                fut.set_result({})

    async def _drain(self) -> None:
        """Until the transport has room for more (flow control)."""
        while self._write_paused and self._transport is not None:
            if self._drained is None or self._drained.done():
                self._drained = self._new_future()
            await self._drained

    def _resume_writing(self) -> None:
        self._write_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # ---- connection ---------------------------------------------------------------------

    def _now_ms(self) -> float:
        return asyncio.get_running_loop().time() * 1000

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        self.backoff.connecting(self._now_ms())
        try:
            transport, protocol = await loop.create_connection(
                lambda: _Protocol(self), self.host, self.port, ssl=self.ssl_context,
                server_hostname=self.host if self.ssl_context is not None else None,
            )
        except OSError:
            self.backoff.disconnected(self._now_ms())
            raise
        if self._closed:
            transport.close()
            raise ConnectionClosed(f"the client for {self.address} was closed")
        self._transport = cast(asyncio.Transport, transport)
        self._protocol = protocol
        self.connections += 1
        self._close_reason = None
        self._write_paused = False
        login = self.sasl or client_login(self.sasl_role)
        if login is not None:
            await self._authenticate(login)
        self.backoff.ready()
        self._pump()

    async def _authenticate(self, login: SaslClientConfig) -> None:
        """SASL before anything queued is sent; a failure closes the connection."""
        self._authenticating = True

        async def send(api: Api, version: int, body: dict[str, Any]) -> dict[str, Any]:
            fut = self._new_future()
            _, parts = self.core.send_request(api, version, body, context=fut)
            assert self._transport is not None
            self._transport.writelines(parts)
            return cast(dict[str, Any], await fut)

        try:
            await authenticate(send, login)
        except (SaslClientError, ConnectionClosed, ProtocolError, KeyError, ValueError) as e:
            if self._transport is not None:
                self._transport.abort()
            self.backoff.disconnected(self._now_ms())
            raise ConnectionClosed(
                f"SASL {login.mechanism} authentication to {self.address} failed: {e}"
            ) from e
        finally:
            self._authenticating = False

    def _ensure_reconnect(self) -> None:
        if self._reconnect_task is None or self._reconnect_task.done():
            self._reconnect_task = asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        delay_ms = self.backoff.delay_ms(self._now_ms())
        if delay_ms > 0:
            await asyncio.sleep(delay_ms / 1000)
        try:
            await self._open()
        except OSError as e:
            log.info("reconnecting to %s failed: %s", self.address, e)
            self._fail_queued(
                ConnectionClosed(
                    f"cannot reconnect to {self.address}: {e} (reconnect.backoff.ms: next "
                    f"attempt after {self.backoff.backoff_ms} ms)"
                )
            )

    def _fail_queued(self, error: ConnectionClosed) -> None:
        queued = list(self._queued)
        self._queued.clear()
        for item in queued:
            if not item.future.done():
                item.future.set_exception(error)

    def _received(self, protocol: _Protocol, nbytes: int) -> None:
        if protocol is not self._protocol:
            return
        core = self.core
        core.buffer_updated(nbytes)
        while True:
            try:
                response = core.next_response()
            except ProtocolError as e:
                log.warning("closing the connection to %s: %s", self.address, e)
                self._close_reason = f"protocol error: {e}"
                if self._transport is not None:
                    self._transport.abort()
                return
            if response is None:
                break
            fut: asyncio.Future[Any] = response.request.context
            if not fut.done():
                fut.set_result(response.body if response.body is not None else bytes(response.frame))
        self._pump()

    def _connection_lost(self, protocol: _Protocol, exc: Exception | None) -> None:
        if protocol is not self._protocol:
            return
        self._transport = None
        self._protocol = None
        self._resume_writing()
        reason = self._close_reason or (f"{exc}" if exc is not None else "closed by the broker")
        self._close_reason = None
        pending = self.core.connection_lost()
        if not self._closed:
            self.backoff.disconnected(self._now_ms())
        for request in pending:
            fut = request.context
            if not fut.done():
                fut.set_exception(self._lost_error(request, reason, len(pending)))
        self._pump()  # requests still queued reconnect

    def _lost_error(self, request: InFlightRequest, reason: str, n: int) -> ConnectionClosed:
        return ConnectionClosed(
            f"connection to {self.address} lost ({reason}) with {request.describe()} "
            f"unanswered ({n} request(s) in flight)"
        )
