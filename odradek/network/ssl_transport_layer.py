"""SslTransportLayer: TLS for a listener's connections, over ``ssl.MemoryBIO``.

An SSL (or SASL_SSL) listener accepts TCP connections with :class:`SslTransportLayer` as their
protocol. It runs the server side of the TLS handshake itself (asyncio's ``start_tls`` and
``create_server(ssl=...)`` drop a failed handshake without a word, and uvloop's server-side
``start_tls`` does not complete) and, once it is done, hands itself as the transport to the
listener's :class:`~odradek.network.socket_server.KafkaConnection`: reads are decrypted into the
connection's buffers, writes are encrypted into the TCP transport, and flow control passes
through both ways (the TCP transport's write buffer limits and pauses are the connection's).
``get_extra_info("ssl_object")`` gives the client certificate, from which the connection takes
its principal.

A handshake that fails (a plaintext client, an untrusted or expired certificate, none where
``ssl.client.auth=required``) or does not finish within ``TLS_HANDSHAKE_TIMEOUT_S`` closes the
connection with one log line naming the peer and OpenSSL's reason.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from odradek.network.socket_server import KafkaConnection, SocketServer

log = logging.getLogger(__name__)

# A TLS client has this long to complete its handshake.
TLS_HANDSHAKE_TIMEOUT_S = 30.0
_PLAINTEXT_HINTS = ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "RECORD_LAYER", "UNEXPECTED_RECORD",
                    "PACKET_LENGTH_TOO_LONG", "UNKNOWN_PROTOCOL")


def tls_hint(size: int, security_protocol: str) -> str:
    """A size prefix 0x1603xxxx is the start of a TLS handshake record (a ClientHello)."""
    if security_protocol in ("PLAINTEXT", "SASL_PLAINTEXT") and (size >> 16) == 0x1603:
        return (
            " (this looks like a TLS handshake: a client configured for SSL connected to a "
            f"{security_protocol} listener)"
        )
    return ""


def _format_address(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)


class SslTransportLayer(asyncio.Protocol):
    """The TCP connection's protocol, and the TLS transport of its KafkaConnection."""

    def __init__(self, server: SocketServer, make_connection: Callable[[SocketServer], KafkaConnection]) -> None:
        tls = server.tls
        assert tls is not None
        self._server = server
        self._make_connection = make_connection
        self._context = tls.context
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._sslobj = tls.context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._raw: asyncio.Transport | None = None
        self._app: KafkaConnection | None = None
        self._peer = "?"
        self._timer: asyncio.TimerHandle | None = None
        self._closing = False
        self._read_paused = False
        self._eof = False

    # ---- the TCP side ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._raw = cast(asyncio.Transport, transport)
        self._peer = _format_address(transport.get_extra_info("peername"))
        self._timer = asyncio.get_running_loop().call_later(TLS_HANDSHAKE_TIMEOUT_S, self._handshake_timeout)

    def data_received(self, data: bytes) -> None:
        self._incoming.write(data)
        if self._app is None:
            self._handshake()
        if self._app is not None:
            self._deliver()

    def eof_received(self) -> bool | None:
        """The client half-closed: the connection may keep the socket open to write the
        responses it still owes (it closes it then), as over plaintext."""
        self._eof = True
        if self._app is None:
            return None
        self._deliver()
        return True if self._app.eof_received() else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        self._closing = True
        if self._app is not None:
            self._app.connection_lost(exc)
        elif not self._failed_logged:
            log.info(
                "TLS handshake with %s on listener %s did not complete: the client closed the "
                "connection%s", self._peer, self._server.listener_name, f" ({exc})" if exc else "",
            )

    def pause_writing(self) -> None:
        if self._app is not None:
            self._app.pause_writing()

    def resume_writing(self) -> None:
        if self._app is not None:
            self._app.resume_writing()

    # ---- the handshake ---------------------------------------------------------------

    _failed_logged = False

    def _handshake(self) -> None:
        try:
            self._sslobj.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            return
        except ssl.SSLError as e:
            self._flush()  # the alert, for the client to see why
            self._fail(e)
            return
        self._flush()
        self._cancel_timer()
        app = self._app = self._make_connection(self._server)
        app.connection_made(cast(asyncio.BaseTransport, self))

    def _fail(self, e: ssl.SSLError) -> None:
        reason = str(e)
        hint = (
            " (not a TLS client: a client configured for PLAINTEXT connected to a TLS listener?)"
            if any(h in reason for h in _PLAINTEXT_HINTS) else ""
        )
        log.warning(
            "TLS handshake with %s on listener %s failed, closing the connection: %s%s",
            self._peer, self._server.listener_name, reason, hint,
        )
        self._failed_logged = True
        self._closing = True
        if self._raw is not None:
            self._raw.close()

    def _handshake_timeout(self) -> None:
        self._timer = None
        if self._app is None and self._raw is not None and not self._raw.is_closing():
            log.warning(
                "TLS handshake with %s on listener %s did not complete within %.0f s, closing the "
                "connection", self._peer, self._server.listener_name, TLS_HANDSHAKE_TIMEOUT_S,
            )
            self._failed_logged = True
            self._raw.abort()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # ---- reading: decrypt into the connection's buffers --------------------------------

    def _deliver(self) -> None:
        app = self._app
        assert app is not None
        while not self._read_paused and not self._closing:
            buf = app.get_buffer(-1)
            if not len(buf):
                break
            try:
                n = cast(int, self._sslobj.read(len(buf), buf))
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                n = 0
            except ssl.SSLError as e:
                log.warning("TLS error on connection from %s on listener %s, closing it: %s",
                            self._peer, self._server.listener_name, e)
                self.abort()
                return
            if n == 0:
                # close_notify (read gives 0 bytes, or SSLZeroReturnError): the peer is done.
                # Answer with ours and close, as Kafka does at the end of stream; a client that
                # waits for the reply (asyncio's SSL shutdown does) would otherwise wait out its
                # own timeout, seconds per connection.
                self.close()
                return
            app.buffer_updated(n)
        if self._outgoing.pending:
            self._flush()

    # ---- the transport KafkaConnection writes to ---------------------------------------

    def _flush(self) -> None:
        data = self._outgoing.read()
        if data and self._raw is not None and not self._raw.is_closing():
            self._raw.write(data)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        try:
            self._sslobj.write(data)
        except ssl.SSLError as e:
            log.debug("TLS write on connection from %s failed: %s", self._peer, e)
            self.abort()
            return
        self._flush()

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        if self._closing:
            return
        try:
            for data in list_of_data:
                if data:
                    self._sslobj.write(data)
        except ssl.SSLError as e:
            log.debug("TLS write on connection from %s failed: %s", self._peer, e)
            self.abort()
            return
        self._flush()

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size() if self._raw is not None else 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if self._raw is not None:
            self._raw.set_write_buffer_limits(high=high, low=low)

    def pause_reading(self) -> None:
        self._read_paused = True
        if self._raw is not None and not self._raw.is_closing():
            self._raw.pause_reading()

    def resume_reading(self) -> None:
        if not self._read_paused:
            return
        self._read_paused = False
        if self._raw is not None and not self._raw.is_closing():
            self._raw.resume_reading()
        # Records already received and not yet decrypted are not read again from the socket.
        asyncio.get_running_loop().call_soon(self._deliver_if_open)

    def _deliver_if_open(self) -> None:
        if self._app is not None and not self._closing:
            self._deliver()

    def is_reading(self) -> bool:
        return not self._read_paused

    def is_closing(self) -> bool:
        return self._closing or self._raw is None or self._raw.is_closing()

    def close(self) -> None:
        """Send close_notify after what is buffered, then close the TCP connection."""
        if self._closing:
            return
        self._closing = True
        try:
            self._sslobj.unwrap()
        except ssl.SSLError:
            pass  # SSLWantReadError: the peer's close_notify is not awaited
        self._flush()
        if self._raw is not None:
            self._raw.close()

    def abort(self) -> None:
        self._closing = True
        if self._raw is not None:
            self._raw.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self._sslobj
        if name == "sslcontext":
            return self._context
        if name == "peercert":
            return self._sslobj.getpeercert()
        if name == "cipher":
            return self._sslobj.cipher()
        if self._raw is None:
            return default
        return self._raw.get_extra_info(name, default)
