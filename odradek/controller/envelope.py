"""Envelope (API 58) on the controller listener: how an Apache Kafka broker forwards a client's
admin request (CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, ...) to its
controller (KIP-590).

The envelope carries the client's whole request (header and body) as bytes, its principal and
its address; the controller answers with the whole response (header and body) as bytes. These
helpers are sans-I/O: unwrap the embedded request, wrap the embedded response.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from odradek.protocol.header import (
    decode_request_header,
    encode_response_header,
    peek_request_header,
)
from odradek.protocol.schema import Api, SchemaError


class EnvelopeError(Exception):
    """The embedded request cannot be served: ``code`` is the envelope's error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class EmbeddedRequest:
    api: Api
    version: int
    correlation_id: int
    client_id: str | None
    data: dict[str, Any]
    client_host: str


def unwrap(envelope: dict[str, Any], served: dict[int, Api], *, invalid_request: int,
           unsupported_version: int) -> EmbeddedRequest:
    """The request inside an Envelope; ``served``: the APIs that may be forwarded, by key.
    Raises :class:`EnvelopeError` (INVALID_REQUEST for bytes that do not parse or an API that is
    not forwardable, UNSUPPORTED_VERSION for a version this node does not serve)."""
    raw = bytes(envelope.get("request_data") or b"")
    try:
        api_key, version, _ = peek_request_header(raw)
    except SchemaError as e:
        raise EnvelopeError(invalid_request, f"Envelope request data: {e}") from e
    api = served.get(api_key)
    if api is None:
        raise EnvelopeError(invalid_request, f"API {api_key} cannot be forwarded in an Envelope")
    if not api.supports(version):
        raise EnvelopeError(unsupported_version, f"{api.name} v{version} is not supported")
    try:
        header, pos = decode_request_header(raw, api.request_header_version(version))
        data, _ = api.decode_request(version, raw, pos)
    except SchemaError as e:
        raise EnvelopeError(invalid_request, f"Envelope request data ({api.name} v{version}): {e}") from e
    addr = bytes(envelope.get("client_host_address") or b"")
    try:
        host = str(ipaddress.ip_address(addr)) if len(addr) in (4, 16) else ""
    except ValueError:
        host = ""
    return EmbeddedRequest(api, version, header.correlation_id, header.client_id, data, host)


def wrap_response(request: EmbeddedRequest, response: dict[str, Any]) -> bytes:
    """The embedded response: its header (the client's correlation id) and body."""
    out = bytearray(encode_response_header(request.correlation_id, request.api.response_header_version(request.version)))
    for part in request.api.encode_response(request.version, response):
        out += part
    return bytes(out)
