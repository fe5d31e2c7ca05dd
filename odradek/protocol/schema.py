"""Declarative message schemas and the codec that reads and writes them.

Every API is declared as data: an :class:`Api` with a request and a response, each a list of
:class:`Field`. A field knows its type, the versions it exists in, the versions it may be null in
and, for KIP-482 flexible versions, its tag. The codec compiles a schema once per version into a
list of small closures; decoded messages are plain dicts keyed by the snake_case field names, so
handlers read ``request["topic_data"][0]["partition_data"]``.

``records`` fields are never parsed here: decoding yields a ``memoryview`` into the request
buffer (so the broker can rewrite batch headers in place), and encoding appends the value to the
output as its own chunk, so fetched log data is never copied into the response buffer.
"""

from __future__ import annotations

import struct
import threading
import uuid as _uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

INF = 0x7FFF

Buffer = bytes | bytearray | memoryview


class SchemaError(ValueError):
    """A message could not be decoded or encoded (malformed bytes or an impossible value)."""


# Limits on what decoding may create, checked before anything is allocated. As Kafka, an array
# may not claim more elements than the bytes left in the message could hold (here: times the
# fewest bytes one element takes), nor more than a million elements, and a tagged-field section
# no more than 10,000 fields. A decoded element costs Python far more than Kafka's JVM (a dict is
# 184-272 bytes, and the handler's answer to it as much again), so a *request* may hold at most
# MAX_REQUEST_ELEMENTS array elements in all, nested arrays included: at worst about 90 MB and
# one to two seconds of decoding and answering (measured on DescribeGroups and Produce), and more
# than any client puts in one request (a Produce or Fetch of 200,000 partitions). Responses and
# metadata records (which the broker itself wrote) get Kafka's limit.
MAX_ARRAY_ELEMENTS = 1_000_000
MAX_REQUEST_ELEMENTS = 200_000
MAX_TAGGED_FIELDS = 10_000
MAX_STRING_LENGTH = 0x7FFF

# ``_budget.cell``: [array elements the message being decoded in this thread may still create,
# its limit]. Only messages longer than their limit are decoded with the counting decoders:
# every element of every schema takes at least one byte no other element takes, so a shorter
# message cannot hold more elements than it has bytes, and small requests pay nothing for this.
_budget = threading.local()


def parse_versions(spec: str | None) -> tuple[int, int] | None:
    """``"3+"`` → (3, INF); ``"0-4"`` → (0, 4); ``"5"`` → (5, 5); ``"none"``/None → None."""
    if spec is None or spec == "none" or spec == "":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), INF
    if "-" in spec:
        lo, hi = spec.split("-")
        return int(lo), int(hi)
    return int(spec), int(spec)


def _in(rng: tuple[int, int] | None, v: int) -> bool:
    return rng is not None and rng[0] <= v <= rng[1]


# ---------------------------------------------------------------------------------------------
# Types


class Array:
    """An array of a primitive type name or of a struct (list of fields)."""

    __slots__ = ("elem",)

    def __init__(self, elem: str | Sequence[Field]) -> None:
        self.elem: str | list[Field] = elem if isinstance(elem, str) else list(elem)


FieldType = str | Array | list["Field"]


@dataclass
class Field:
    name: str
    type: FieldType
    versions: tuple[int, int] | None
    nullable: tuple[int, int] | None = None
    tag: int | None = None
    tagged: tuple[int, int] | None = None
    default: Any = None
    # For struct fields only: the struct's fields (same as type when type is a list).

    def present(self, v: int) -> bool:
        return _in(self.versions, v)


def F(  # noqa: N802 - short constructor used by the declarative definitions
    name: str,
    type_: FieldType,
    versions: str = "0+",
    *,
    nullable: str | None = None,
    tag: int | None = None,
    tagged: str | None = None,
    default: Any = None,
) -> Field:
    return Field(
        name,
        type_,
        parse_versions(versions),
        parse_versions(nullable),
        tag,
        parse_versions(tagged),
        default,
    )


def S(*fields: Field) -> list[Field]:  # noqa: N802
    """A struct type: its fields in order."""
    return list(fields)


def A(elem: str | list[Field]) -> Array:  # noqa: N802
    """An array type."""
    return Array(elem)


@dataclass(eq=False)  # hashed by identity: ApiExtension.handlers() keys dicts by Api
class Api:
    api_key: int
    name: str
    min_version: int
    max_version: int
    flexible_min: int
    request: list[Field]
    response: list[Field]
    # Filled lazily: compiled codecs per version.
    _cache: dict[tuple[str, int], Any] = field(default_factory=dict, repr=False)

    def is_flexible(self, version: int) -> bool:
        return version >= self.flexible_min

    def request_header_version(self, version: int) -> int:
        return 2 if self.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        # ApiVersions responses always use header v0 so clients can parse them before they know
        # which versions the broker supports.
        if self.api_key == 18:
            return 0
        return 1 if self.is_flexible(version) else 0

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    # -- codec entry points --------------------------------------------------------------------

    def decode_request(self, version: int, buf: Buffer, pos: int = 0) -> tuple[dict[str, Any], int]:
        view = _view(buf)
        if len(view) - pos <= MAX_REQUEST_ELEMENTS:
            return self._decoder("request", version, False)(view, pos)
        _budget.cell = [MAX_REQUEST_ELEMENTS, MAX_REQUEST_ELEMENTS]
        return self._decoder("request", version, True)(view, pos)

    def decode_response(
        self, version: int, buf: Buffer, pos: int = 0
    ) -> tuple[dict[str, Any], int]:
        view = _view(buf)
        if len(view) - pos <= MAX_ARRAY_ELEMENTS:
            return self._decoder("response", version, False)(view, pos)
        _budget.cell = [MAX_ARRAY_ELEMENTS, MAX_ARRAY_ELEMENTS]
        return self._decoder("response", version, True)(view, pos)

    def encode_request(self, version: int, obj: dict[str, Any]) -> list[Buffer]:
        w = Writer()
        self._encoder("request", version)(w, obj)
        return w.finish()

    def encode_response(self, version: int, obj: dict[str, Any]) -> list[Buffer]:
        w = Writer()
        self._encoder("response", version)(w, obj)
        return w.finish()

    def encode_response_into(self, w: Writer, version: int, obj: dict[str, Any]) -> None:
        self._encoder("response", version)(w, obj)

    def encode_request_into(self, w: Writer, version: int, obj: dict[str, Any]) -> None:
        self._encoder("request", version)(w, obj)

    def _decoder(
        self, which: str, version: int, counted: bool
    ) -> Callable[[memoryview, int], tuple[dict[str, Any], int]]:
        key = ("d" + which + ("#" if counted else ""), version)
        fn = self._cache.get(key)
        if fn is None:
            fields = self.request if which == "request" else self.response
            fn = compile_struct_decoder(fields, version, self.is_flexible(version), counted)
            self._cache[key] = fn
        return fn  # type: ignore[no-any-return]

    def _encoder(self, which: str, version: int) -> Callable[[Writer, dict[str, Any]], None]:
        key = ("e" + which, version)
        fn = self._cache.get(key)
        if fn is None:
            fields = self.request if which == "request" else self.response
            fn = compile_struct_encoder(fields, version, self.is_flexible(version))
            self._cache[key] = fn
        return fn  # type: ignore[no-any-return]


@dataclass(eq=False)
class Schema:
    """A versioned standalone structure (metadata records, coordinator records)."""

    name: str
    min_version: int
    max_version: int
    flexible_min: int
    fields: list[Field]
    _cache: dict[tuple[str, int], Any] = field(default_factory=dict, repr=False)

    def decode(self, version: int, buf: Buffer, pos: int = 0) -> tuple[dict[str, Any], int]:
        view = _view(buf)
        counted = len(view) - pos > MAX_ARRAY_ELEMENTS
        key = ("d#" if counted else "d", version)
        fn = self._cache.get(key)
        if fn is None:
            fn = compile_struct_decoder(self.fields, version, version >= self.flexible_min, counted)
            self._cache[key] = fn
        if counted:
            _budget.cell = [MAX_ARRAY_ELEMENTS, MAX_ARRAY_ELEMENTS]
        return fn(view, pos)  # type: ignore[no-any-return]

    def encode(self, version: int, obj: dict[str, Any]) -> bytes:
        key = ("e", version)
        fn = self._cache.get(key)
        if fn is None:
            fn = compile_struct_encoder(self.fields, version, version >= self.flexible_min)
            self._cache[key] = fn
        w = Writer()
        fn(w, obj)
        return b"".join(w.finish())


def _view(buf: Buffer) -> memoryview:
    return buf if isinstance(buf, memoryview) else memoryview(buf)


# ---------------------------------------------------------------------------------------------
# Primitive readers: (buf, pos) -> (value, new_pos)

_i8 = struct.Struct(">b")
_i16 = struct.Struct(">h")
_u16 = struct.Struct(">H")
_i32 = struct.Struct(">i")
_u32 = struct.Struct(">I")
_i64 = struct.Struct(">q")
_f64 = struct.Struct(">d")

Reader = Callable[[memoryview, int], tuple[Any, int]]


def _fixed(st: struct.Struct) -> Reader:
    size = st.size
    unpack = st.unpack_from

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        if pos + size > len(buf):
            raise SchemaError("message truncated")
        return unpack(buf, pos)[0], pos + size

    return read


read_int8 = _fixed(_i8)
read_int16 = _fixed(_i16)
read_uint16 = _fixed(_u16)
read_int32 = _fixed(_i32)
read_uint32 = _fixed(_u32)
read_int64 = _fixed(_i64)
read_float64 = _fixed(_f64)


def read_bool(buf: memoryview, pos: int) -> tuple[bool, int]:
    if pos >= len(buf):
        raise SchemaError("message truncated")
    return buf[pos] != 0, pos + 1


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise SchemaError("message truncated in varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise SchemaError("varint too long")


def read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    v, pos = read_uvarint(buf, pos)
    return (v >> 1) ^ -(v & 1), pos


def read_uuid(buf: memoryview, pos: int) -> tuple[_uuid.UUID, int]:
    if pos + 16 > len(buf):
        raise SchemaError("message truncated")
    return _uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16


def _read_span(
    buf: memoryview, pos: int, compact: bool, nullable: bool, wide: bool, what: str
) -> tuple[int, int]:
    """Read a length prefix (compact: uvarint length+1; else int16, or int32 when ``wide``).
    Returns (start, end) of the value; start == -1 means null and end is then the next
    position."""
    if compact:
        n, pos = read_uvarint(buf, pos)
        n -= 1
        if n > 0x7FFF and not wide:  # MAX_STRING_LENGTH
            raise SchemaError(f"string had invalid length {n}")
    else:
        n, pos = (read_int32 if wide else read_int16)(buf, pos)
    if n < 0:
        if not nullable:
            raise SchemaError(f"null {what} in a non-nullable field")
        return -1, pos
    end = pos + n
    if end > len(buf):
        raise SchemaError(
            f"{what} of {n} byte(s) exceeds the {len(buf) - pos} byte(s) left in the message"
        )
    return pos, end


def _read_str(buf: memoryview, pos: int, compact: bool, nullable: bool) -> tuple[str | None, int]:
    start, end = _read_span(buf, pos, compact, nullable, False, "string")
    if start < 0:
        return None, end
    try:
        return str(buf[start:end], "utf-8"), end
    except UnicodeDecodeError as e:
        raise SchemaError("string is not valid UTF-8") from e


def _read_bytes(
    buf: memoryview, pos: int, compact: bool, nullable: bool, as_view: bool
) -> tuple[Any, int]:
    start, end = _read_span(buf, pos, compact, nullable, True, "bytes")
    if start < 0:
        return None, end
    return (buf[start:end] if as_view else bytes(buf[start:end])), end


def read_tagged_section(
    buf: memoryview, pos: int, known: dict[int, tuple[str, Reader]], out: dict[str, Any]
) -> int:
    if pos < len(buf) and buf[pos] == 0:  # the usual case: no tagged fields
        return pos + 1
    count, pos = read_uvarint(buf, pos)
    if count > MAX_TAGGED_FIELDS:
        raise SchemaError(
            f"{count} tagged fields exceed the limit of {MAX_TAGGED_FIELDS}"
        )
    if count * 2 > len(buf) - pos:  # a tag and a size: at least two bytes each
        raise SchemaError(
            f"{count} tagged fields cannot fit in the {len(buf) - pos} byte(s) left in the message"
        )
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise SchemaError("message truncated in tagged field")
        entry = known.get(tag)
        if entry is not None:
            name, reader = entry
            out[name], _ = reader(buf[:end], pos)
        pos = end
    return pos


# ---------------------------------------------------------------------------------------------
# Writer


class Writer:
    """Accumulates encoded bytes; large ``records`` values become chunks of their own."""

    __slots__ = ("buf", "parts")

    ZERO_COPY_THRESHOLD = 1024

    def __init__(self) -> None:
        self.buf = bytearray()
        self.parts: list[Buffer] = []

    def raw(self, data: Any) -> None:
        """Append a bytes-like value, or an object with ``file_regions`` and ``to_bytes()``
        (data still in files, sent with sendfile by the server); large ones stay their own part."""
        if len(data) >= self.ZERO_COPY_THRESHOLD:
            if self.buf:
                self.parts.append(self.buf)
                self.buf = bytearray()
            self.parts.append(data)
        elif isinstance(data, bytes | bytearray | memoryview):
            self.buf += data
        else:
            self.buf += data.to_bytes()

    def finish(self) -> list[Buffer]:
        if self.buf:
            self.parts.append(self.buf)
            self.buf = bytearray()
        return self.parts

    def size(self) -> int:
        return len(self.buf) + sum(len(p) for p in self.parts)


def write_uvarint(out: bytearray, v: int) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def write_varint(out: bytearray, v: int) -> None:
    write_uvarint(out, (v << 1) ^ (v >> 63))


def uvarint_bytes(v: int) -> bytes:
    out = bytearray()
    write_uvarint(out, v)
    return bytes(out)


Writer_ = Callable[[Writer, Any], None]


def _w_fixed(st: struct.Struct) -> Writer_:
    pack = st.pack

    def write(w: Writer, v: Any) -> None:
        w.buf += pack(v)

    return write


def _w_bool(w: Writer, v: Any) -> None:
    w.buf.append(1 if v else 0)


def _w_uuid(w: Writer, v: Any) -> None:
    if v is None:
        w.buf += bytes(16)
    elif isinstance(v, _uuid.UUID):
        w.buf += v.bytes
    else:
        b = bytes(v)
        if len(b) != 16:
            raise SchemaError("uuid must be 16 bytes")
        w.buf += b


# ---------------------------------------------------------------------------------------------
# Compilation

_PRIM_READERS: dict[str, Reader] = {
    "int8": read_int8,
    "int16": read_int16,
    "uint16": read_uint16,
    "int32": read_int32,
    "uint32": read_uint32,
    "int64": read_int64,
    "float64": read_float64,
    "bool": read_bool,
    "uuid": read_uuid,
}

_PRIM_WRITERS: dict[str, Writer_] = {
    "int8": _w_fixed(_i8),
    "int16": _w_fixed(_i16),
    "uint16": _w_fixed(_u16),
    "int32": _w_fixed(_i32),
    "uint32": _w_fixed(_u32),
    "int64": _w_fixed(_i64),
    "float64": _w_fixed(_f64),
    "bool": _w_bool,
    "uuid": _w_uuid,
}

_ZERO_UUID = _uuid.UUID(int=0)



def default_value(f: Field, version: int) -> Any:
    """The value a field takes when it is absent from a version or missing in an encoded dict."""
    t = f.type
    if isinstance(t, Array):
        if f.default == "null":
            return None
        return []
    if isinstance(t, list):
        if f.default == "null" or _in(f.nullable, version):
            return None
        return {g.name: default_value(g, version) for g in t}
    d = f.default
    if d == "null":
        return None
    if t in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
        if d is None or d == "":
            return 0
        return int(d, 16) if isinstance(d, str) and d.lower().startswith("0x") else int(d)
    if t == "float64":
        return float(d) if d is not None else 0.0
    if t == "bool":
        return str(d).lower() == "true" if d is not None else False
    if t == "string":
        return d if d is not None else ""
    if t == "uuid":
        return _ZERO_UUID
    if t in ("bytes", "records"):
        return None if _in(f.nullable, version) else b""
    raise SchemaError(f"unknown type {t!r}")


_FIXED_SIZES = {
    "int8": 1, "bool": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
    "int64": 8, "float64": 8, "uuid": 16,
}


def min_encoded_size(f: Field, version: int, flexible: bool) -> int:
    """The fewest bytes a value of field ``f`` takes on the wire in ``version`` (a null, an
    empty string/array, a struct of such), at least 1."""
    t = f.type
    if isinstance(t, str):
        if t in _FIXED_SIZES:
            return _FIXED_SIZES[t]
        if flexible:
            return 1  # compact length
        return 2 if t == "string" else 4
    if isinstance(t, Array):
        return 1 if flexible else 4
    if _in(f.nullable, version):
        return 1  # the -1 marker of a null struct
    size = 1 if flexible else 0  # the tagged-fields count
    for g in t:
        if g.tag is None and g.present(version):
            size += min_encoded_size(g, version, flexible)
    return max(size, 1)


def _field_reader(f: Field, version: int, flexible: bool, counted: bool = False) -> Reader:
    """``counted``: arrays charge their elements to the thread's ``_budget``."""
    t = f.type
    nullable = _in(f.nullable, version)
    if isinstance(t, str):
        if t in _PRIM_READERS:
            return _PRIM_READERS[t]
        if t == "string":
            return lambda b, p: _read_str(b, p, flexible, nullable)
        if t == "bytes":
            return lambda b, p: _read_bytes(b, p, flexible, nullable, False)
        if t == "records":
            return lambda b, p: _read_bytes(b, p, flexible, nullable, True)
        raise SchemaError(f"unknown type {t!r}")
    if isinstance(t, Array):
        elem = t.elem
        elem_reader: Reader
        if isinstance(elem, str):
            elem_field = Field("_", elem, (0, INF))
            elem_reader = _field_reader(elem_field, version, flexible)
        else:
            elem_field = Field("_", elem, (0, INF))
            elem_reader = compile_struct_decoder(elem, version, flexible, counted)
        # The fewest bytes one element can take: an array of n elements needs n times that.
        elem_size = min_encoded_size(elem_field, version, flexible)
        fname = f.name
        budget = _budget

        def read_array(b: memoryview, p: int) -> tuple[Any, int]:
            if flexible:
                n, p = read_uvarint(b, p)
                n -= 1
            else:
                n, p = read_int32(b, p)
            if n < 0:
                if not nullable:
                    raise SchemaError(f"null array in non-nullable field {fname}")
                return None, p
            if not n:
                return [], p
            if n * elem_size > len(b) - p:
                raise SchemaError(
                    f"array {fname} of {n} element(s) needs at least {n * elem_size} byte(s), "
                    f"but there are only {len(b) - p} byte(s) left in the message"
                )
            if counted:
                cell = budget.cell
                left = cell[0] - n
                if left < 0 or n > MAX_ARRAY_ELEMENTS:
                    raise SchemaError(
                        f"array {fname} of {n} element(s) takes the message past its limit of "
                        f"{cell[1]} array elements"
                    )
                cell[0] = left
            items = []
            for _ in range(n):
                v, p = elem_reader(b, p)
                items.append(v)
            return items, p

        return read_array
    # struct
    struct_reader = compile_struct_decoder(t, version, flexible, counted)
    if nullable:

        if f.tag is not None and flexible and _in(f.tagged, version):
            # A tagged nullable struct starts with an unsigned varint: 0 is null, 1 present
            # (Kafka's generated readers; Kafka 4.x writes a null ClassicMemberMetadata so).
            def read_tagged_nullable_struct(b: memoryview, p: int) -> tuple[Any, int]:
                marker, p = read_uvarint(b, p)
                if marker <= 0:
                    return None, p
                return struct_reader(b, p)

            return read_tagged_nullable_struct

        def read_nullable_struct(b: memoryview, p: int) -> tuple[Any, int]:
            marker, p = read_int8(b, p)
            if marker < 0:
                return None, p
            return struct_reader(b, p)

        return read_nullable_struct
    return struct_reader


def compile_struct_decoder(
    fields: Sequence[Field], version: int, flexible: bool, counted: bool = False
) -> Callable[[memoryview, int], tuple[dict[str, Any], int]]:
    plan: list[tuple[str, Reader]] = []
    defaults: list[tuple[str, Any]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    for f in fields:
        if f.tag is not None and flexible and _in(f.tagged, version):
            tagged[f.tag] = (f.name, _field_reader(f, version, flexible, counted))
            defaults.append((f.name, default_value(f, version)))
        elif f.tag is None and f.present(version):
            plan.append((f.name, _field_reader(f, version, flexible, counted)))
        else:
            defaults.append((f.name, default_value(f, version)))

    template = dict(defaults)
    copy = template.copy

    def decode(buf: memoryview, pos: int) -> tuple[dict[str, Any], int]:
        out = copy()
        for name, reader in plan:
            out[name], pos = reader(buf, pos)
        if flexible:
            pos = read_tagged_section(buf, pos, tagged, out)
        return out, pos

    return decode


def _write_length(w: Writer, n: int, flexible: bool, wide: bool) -> None:
    """A length prefix (-1 = null): compact uvarint length+1, else int16, or int32 when wide."""
    if flexible:
        write_uvarint(w.buf, n + 1)
    else:
        w.buf += (_i32 if wide else _i16).pack(n)


def _field_writer(f: Field, version: int, flexible: bool) -> Writer_:
    t = f.type
    nullable = _in(f.nullable, version)
    name = f.name

    def write_null(w: Writer, wide: bool) -> None:
        if not nullable:
            raise SchemaError(f"field {name} is not nullable in version {version}")
        _write_length(w, -1, flexible, wide)
    if isinstance(t, str):
        if t in _PRIM_WRITERS:
            return _PRIM_WRITERS[t]
        if t == "string":

            def write_str(w: Writer, v: Any) -> None:
                if v is None:
                    write_null(w, False)
                    return
                data = v.encode("utf-8")
                if not flexible and len(data) > 0x7FFF:
                    raise SchemaError(f"string too long for field {name}")
                _write_length(w, len(data), flexible, False)
                w.buf += data

            return write_str
        if t in ("bytes", "records"):

            def write_bytes(w: Writer, v: Any) -> None:
                if v is None:
                    write_null(w, True)
                    return
                _write_length(w, v.nbytes if isinstance(v, memoryview) else len(v), flexible, True)
                w.raw(v)

            return write_bytes
        raise SchemaError(f"unknown type {t!r}")
    if isinstance(t, Array):
        elem = t.elem
        elem_writer: Writer_
        if isinstance(elem, str):
            elem_writer = _field_writer(Field("_", elem, (0, INF)), version, flexible)
        else:
            elem_writer = compile_struct_encoder(elem, version, flexible)

        def write_array(w: Writer, v: Any) -> None:
            if v is None:
                write_null(w, True)
                return
            _write_length(w, len(v), flexible, True)
            for item in v:
                elem_writer(w, item)

        return write_array
    struct_writer = compile_struct_encoder(t, version, flexible)
    if nullable:

        def write_nullable_struct(w: Writer, v: Any) -> None:
            if v is None:
                w.buf.append(0xFF)
                return
            w.buf.append(1)
            struct_writer(w, v)

        return write_nullable_struct
    return struct_writer


def compile_struct_encoder(
    fields: Sequence[Field], version: int, flexible: bool
) -> Callable[[Writer, dict[str, Any]], None]:
    # (name, writer, default, nullable): a missing key takes the default; an explicit None in a
    # nullable field is written as null, in a non-nullable one it means "the default".
    plan: list[tuple[str, Writer_, Any, bool]] = []
    tagged: list[tuple[int, str, Writer_, Any]] = []
    for f in fields:
        dflt = default_value(f, version)
        if f.tag is not None:
            if flexible and _in(f.tagged, version):
                tagged.append((f.tag, f.name, _field_writer(f, version, flexible), dflt))
        elif f.present(version):
            plan.append((f.name, _field_writer(f, version, flexible), dflt, _in(f.nullable, version)))
    tagged.sort(key=lambda x: x[0])

    def encode(w: Writer, obj: dict[str, Any]) -> None:
        for name, writer, dflt, nullable in plan:
            v = obj.get(name, dflt)
            if v is None and not nullable:
                v = dflt
            writer(w, v)
        if flexible:
            present = []
            for tag, name, writer, dflt in tagged:
                v = obj.get(name, dflt)
                if v is not None and v != dflt:
                    present.append((tag, writer, v))
            write_uvarint(w.buf, len(present))
            for tag, writer, v in present:
                sub = Writer()
                writer(sub, v)
                data = b"".join(sub.finish())
                write_uvarint(w.buf, tag)
                write_uvarint(w.buf, len(data))
                w.buf += data

    return encode
