"""The TLS side of a listener's connections (Kafka's SslTransportLayer): the handshake.

An SSL (or SASL_SSL) listener accepts TCP connections with :class:`TlsHandshake` as their protocol;
it runs the server side of the TLS handshake (``loop.start_tls``) and, once it is done, hands the
encrypted transport to the listener's :class:`~odradek.network.socket_server.KafkaConnection`,
which reads the client certificate's principal. A handshake that fails (a plaintext client, an
untrusted or expired certificate, none where ``ssl.client.auth=required``) closes the connection
with one log line naming the peer and OpenSSL's reason; asyncio would drop it silently.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from odradek.network.socket_server import KafkaConnection, SocketServer

log = logging.getLogger(__name__)

# A TLS client has this long to complete its handshake.
TLS_HANDSHAKE_TIMEOUT_S = 30.0


def _format_address(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)


def tls_hint(size: int, security_protocol: str) -> str:
    """A size prefix 0x1603xxxx is the start of a TLS handshake record (a ClientHello)."""
    if security_protocol in ("PLAINTEXT", "SASL_PLAINTEXT") and (size >> 16) == 0x1603:
        return (
            f" (this looks like a TLS handshake: a client configured for SSL connected to a "
            f"{security_protocol} listener)"
        )
    return ""


_PLAINTEXT_HINTS = ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "RECORD_LAYER", "UNEXPECTED_RECORD", "PACKET_LENGTH_TOO_LONG")


class TlsHandshake(asyncio.Protocol):
    """A connection to a TLS listener until its handshake is done: then the connection is a
    :class:`KafkaConnection` over the TLS transport. A failed handshake closes it with one log
    line naming the peer and OpenSSL's reason (the asyncio transport would fail silently)."""

    def __init__(self, server: SocketServer, make_connection: Callable[[SocketServer], KafkaConnection]) -> None:
        self._server = server
        self._make_connection = make_connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)
        transport.pause_reading()  # start_tls takes the bytes from here
        task = asyncio.get_running_loop().create_task(self._handshake(transport))
        self._server._handshakes.add(task)
        task.add_done_callback(self._server._handshakes.discard)

    def data_received(self, data: bytes) -> None:  # never: reading is paused until start_tls
        pass

    async def _handshake(self, transport: asyncio.Transport) -> None:
        server = self._server
        tls = server.tls
        assert tls is not None
        peer = _format_address(transport.get_extra_info("peername"))
        conn = self._make_connection(server)
        loop = asyncio.get_running_loop()
        try:
            tls_transport = await loop.start_tls(
                transport, conn, tls.context, server_side=True,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S,
            )
        except asyncio.CancelledError:
            transport.abort()
            raise
        except (OSError, TimeoutError, EOFError) as e:
            transport.abort()
            if isinstance(e, ssl.SSLError):
                reason = str(e)
                hint = (
                    " (not a TLS client: a client configured for PLAINTEXT connected to a TLS listener?)"
                    if any(h in reason for h in _PLAINTEXT_HINTS) else ""
                )
                log.warning(
                    "TLS handshake with %s on listener %s failed, closing the connection: %s%s",
                    peer, server.listener_name, reason, hint,
                )
            else:
                log.info(
                    "TLS handshake with %s on listener %s did not complete, closing the "
                    "connection: %s", peer, server.listener_name, e or type(e).__name__,
                )
            return
        if tls_transport is None:  # closed meanwhile
            transport.abort()
            return
        conn.connection_made(tls_transport)
