"""The request handler of a SASL listener (Kafka's SaslChannelBuilder): every connection gets a
:class:`~odradek.security.sasl_server_authenticator.SaslAuthenticator`, which sees each frame
before the broker's handler does.

Until the connection has authenticated, its requests are limited to
``sasl.server.max.receive.size`` bytes (the frame reader refuses a larger one before reading it);
after that ``socket.request.max.bytes`` applies again. A failure's error response waits
``connection.failed.authentication.delay.ms`` (Kafka's delayed close of a failed channel), and the
connection is closed after it. The transport is not this module's business: the same handler
serves SASL_PLAINTEXT and, over TLS, SASL_SSL.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from odradek.network.request_channel import (
    CloseConnection,
    ConnectionInfo,
    RequestHandler,
    ResponseBuffers,
)
from odradek.security.sasl_config import SASL_PROTOCOLS, SaslListenerConfig, listener_config
from odradek.security.sasl_server_authenticator import SaslAuthenticator, StepKind
from odradek.security.scram_sasl_server import CredentialLookup

if TYPE_CHECKING:
    from odradek.server.kafka_config import KafkaConfig

log = logging.getLogger(__name__)


def _wall_ms() -> int:
    return int(time.time() * 1000)


class SaslAuthenticatingHandler:
    def __init__(self, inner: RequestHandler, config: SaslListenerConfig, scram_lookup: CredentialLookup) -> None:
        self.inner = inner
        self.config = config
        self._scram_lookup = scram_lookup

    def __getattr__(self, name: str) -> object:
        # What else the socket server and the metrics read from the handler (request_metrics,
        # ...) is the broker handler's.
        return getattr(self.inner, name)

    def connection_made(self, conn: ConnectionInfo) -> None:
        conn.security_protocol = self.config.security_protocol
        conn.authenticator = SaslAuthenticator(
            self.config, self._scram_lookup, connection_id=conn.connection_id, peer=conn.peer,
            wall_clock_ms=_wall_ms,
        )
        if conn.set_max_request_bytes is not None:
            conn.set_max_request_bytes(self.config.max_receive_size, "sasl.server.max.receive.size")

    def handle(
        self, conn: ConnectionInfo, frame: bytearray
    ) -> ResponseBuffers | Awaitable[ResponseBuffers | None] | None:
        auth: SaslAuthenticator | None = conn.authenticator
        if auth is None:  # (a connection made before this handler was installed)
            self.connection_made(conn)
            auth = conn.authenticator
            assert auth is not None
        step = auth.receive(frame, time.monotonic() * 1000.0)
        kind = step.kind
        if kind is StepKind.PASS:
            return self.inner.handle(conn, frame)
        if kind is StepKind.RESPOND:
            if auth.authenticated_now:
                principal = auth.principal
                assert principal is not None
                log.info(
                    "connection %s from %s on listener %s %s as %s with %s",
                    conn.connection_id, conn.peer, conn.listener_name,
                    "re-authenticated" if auth.reauthenticated else "authenticated", principal,
                    auth.mechanism,
                )
                conn.principal = principal
                if conn.set_max_request_bytes is not None:
                    conn.set_max_request_bytes(None, "")
            return step.response
        reason = (
            f"SASL {step.reason}" if kind is StepKind.CLOSE else f"SASL authentication failed: {step.reason}"
        )
        if kind is StepKind.CLOSE:
            raise CloseConnection(reason)
        delay_ms = self.config.failed_authentication_delay_ms
        if delay_ms <= 0:
            raise CloseConnection(reason, step.response)
        return self._delayed_failure(reason, step.response, delay_ms)

    async def _delayed_failure(self, reason: str, response: ResponseBuffers | None, delay_ms: int) -> None:
        await asyncio.sleep(delay_ms / 1000.0)
        raise CloseConnection(reason, response)


def listener_handler(
    cfg: KafkaConfig, listener: str, inner: RequestHandler, scram_lookup: CredentialLookup
) -> RequestHandler:
    """The handler of ``listener``: ``inner`` behind a SASL authenticator if the listener's
    security protocol is SASL_*, else ``inner`` itself."""
    protocol = next((lst.security_protocol for lst in cfg.listeners if lst.name == listener), "PLAINTEXT")
    if protocol not in SASL_PROTOCOLS:
        return inner
    return SaslAuthenticatingHandler(inner, listener_config(cfg, listener, protocol), scram_lookup)
