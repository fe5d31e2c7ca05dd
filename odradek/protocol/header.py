"""Request headers v1/v2 and response headers v0/v1.

Request header v1: api_key int16, api_version int16, correlation_id int32, client_id nullable
string (int16 length — still non-compact in v2); v2 adds a tagged-fields section. Response header
v0 is the correlation id; v1 adds tagged fields. ApiVersions responses always use v0.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from odradek.protocol.schema import Buffer, SchemaError, read_tagged_section, write_uvarint

_HDR = struct.Struct(">hhi")
_CID = struct.Struct(">i")


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_request_header(buf: Buffer) -> tuple[int, int, int]:
    """api_key, api_version, correlation_id — readable whatever the API or version."""
    if len(buf) < 8:
        raise SchemaError("request shorter than a header")
    return _HDR.unpack_from(buf, 0)  # type: ignore[return-value]


def decode_request_header(buf: Buffer, header_version: int) -> tuple[RequestHeader, int]:
    """Parse the header; returns it and the offset where the request body starts."""
    api_key, api_version, correlation_id = peek_request_header(buf)
    pos = 8
    if len(buf) < pos + 2:
        raise SchemaError("request header truncated")
    (n,) = struct.unpack_from(">h", buf, pos)
    pos += 2
    client_id: str | None = None
    if n >= 0:
        if pos + n > len(buf):
            raise SchemaError("request header truncated in client id")
        try:
            client_id = bytes(buf[pos : pos + n]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise SchemaError("client id is not valid UTF-8") from e
        pos += n
    if header_version >= 2:
        pos = read_tagged_section(memoryview(buf), pos, {}, {})
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def encode_request_header(header: RequestHeader, header_version: int) -> bytes:
    out = bytearray(_HDR.pack(header.api_key, header.api_version, header.correlation_id))
    if header.client_id is None:
        out += b"\xff\xff"
    else:
        cid = header.client_id.encode("utf-8")
        out += struct.pack(">h", len(cid)) + cid
    if header_version >= 2:
        write_uvarint(out, 0)
    return bytes(out)


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    if header_version >= 1:
        return _CID.pack(correlation_id) + b"\x00"
    return _CID.pack(correlation_id)


def decode_response_header(buf: Buffer, header_version: int) -> tuple[int, int]:
    if len(buf) < 4:
        raise SchemaError("response shorter than its header")
    (cid,) = _CID.unpack_from(buf, 0)
    pos = 4
    if header_version >= 1:
        pos = read_tagged_section(memoryview(buf), pos, {}, {})
    return cid, pos
