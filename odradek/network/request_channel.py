"""The contract between the socket server and whatever answers requests (KafkaApis).

The socket server slices the byte stream into frames and calls :meth:`RequestHandler.handle` once
per frame, synchronously and in arrival order. The handler answers with the response buffers (the
response *without* its 4-byte size prefix), ``None`` for "no response" (acks=0 produce), or an
awaitable for a delayed operation. Responses are written back in request order per connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

ResponseBuffers: TypeAlias = Sequence[bytes | bytearray | memoryview]
"""One response, without the 4-byte size prefix, as a sequence of buffers written without joining."""

HandlerResult: TypeAlias = "ResponseBuffers | Awaitable[ResponseBuffers | None] | None"


@dataclass
class ConnectionInfo:
    """What the request layer knows about the connection a request arrived on."""

    connection_id: str
    peer: str
    listener_name: str
    client_id: str | None = None
    security_protocol: str = "PLAINTEXT"
    # Free-form per-connection state for the request layer (negotiated SASL, client software, ...).
    attributes: dict[str, Any] = field(default_factory=dict)


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

    Responses to earlier requests on the connection are still flushed first.
    """


class FileRegionLike(Protocol):
    fd: int
    position: int
    size: int


class SendfileBuffer(Protocol):
    """A response part whose bytes are still in files (fetched log segments).

    The socket server sends its regions with ``os.sendfile`` when the transport allows and
    falls back to :meth:`to_bytes` otherwise.
    """

    @property
    def file_regions(self) -> Sequence[FileRegionLike]: ...

    def __len__(self) -> int: ...

    def to_bytes(self) -> bytes | bytearray: ...


def buffers_size(buffers: ResponseBuffers) -> int:
    """Total byte length of a response's buffers."""
    total = 0
    for b in buffers:
        total += b.nbytes if isinstance(b, memoryview) else len(b)  # incl. SendfileBuffer
    return total
