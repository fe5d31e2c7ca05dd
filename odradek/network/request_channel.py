"""The contract between the socket server and whatever answers requests (KafkaApis).

The socket server slices the byte stream into frames and calls :meth:`RequestHandler.handle` once
per frame, synchronously and in arrival order. The handler answers with the response buffers (the
response *without* its 4-byte size prefix), ``None`` for "no response" (acks=0 produce), or an
awaitable for a delayed operation. Responses are written back in request order per connection.
A response part may also be an object with ``file_regions`` (a fetch's
:class:`~odradek.log.log.FetchDataInfo`): the socket server sends those with ``os.sendfile``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

from odradek.security.kafka_principal import ANONYMOUS, KafkaPrincipal

ResponseBuffers: TypeAlias = Sequence[bytes | bytearray | memoryview]
"""One response, without the 4-byte size prefix, as a sequence of buffers written without joining."""


@dataclass
class ConnectionInfo:
    """What the request layer knows about the connection a request arrived on."""

    connection_id: str
    peer: str
    listener_name: str
    # The listener's security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) and who the
    # connection authenticated as; User:ANONYMOUS until (and unless) it authenticates.
    security_protocol: str = "PLAINTEXT"
    principal: KafkaPrincipal = ANONYMOUS
    # The SASL state of the connection (odradek.security.sasl_server_authenticator), if any.
    authenticator: Any = None
    # Set by the socket server: limit the size of the requests read from now on (None: back to
    # socket.request.max.bytes), with the setting's name for the log line when one is too large.
    set_max_request_bytes: Callable[[int | None, str], None] | None = None
    # Mute the connection (read no request from it) for this many ms once the responses owed
    # are out: a client over its quota (KIP-219). Set by the socket server.
    mute_for: Callable[[int], None] | None = None


class RequestHandler(Protocol):
    def handle(
        self, conn: ConnectionInfo, frame: bytearray
    ) -> ResponseBuffers | Awaitable[ResponseBuffers | None] | None:
        """Handle one request frame (header + body, no size prefix).

        ``frame`` belongs to this request alone and may be rewritten in place.
        """
        ...


class CloseConnection(Exception):
    """Raised by a handler: log the message, send nothing more, close the connection.

    Responses to earlier requests on the connection are still flushed first; ``response``, if
    given, is sent as this request's response before closing (a SASL failure's error response).
    """

    def __init__(self, message: str, response: ResponseBuffers | None = None) -> None:
        super().__init__(message)
        self.response = response
