"""Round trips of every declared API and version, and malformed input.

A generator walks each API's Field tree and builds a message with a non-default value for every
field present in the version (nested structs, two-element arrays, tagged fields, UUIDs, bytes,
records), in variants where every nullable field is null or where records are large enough to be
written as their own zero-copy chunk. Malformed input (random bytes, every truncation and random
mutations of valid encodings) must raise SchemaError or decode; never anything else.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_values import Gen

from odradek.protocol.messages import ALL_APIS
from odradek.protocol.schema import Api, Array, Field, SchemaError, Writer, default_value

FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def plain(value: Any) -> Any:
    """Decoded messages with memoryviews turned into bytes, for comparison."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def records_values(fields: list[Field], obj: Any, version: int) -> list[Any]:
    """Every decoded value of a ``records`` field in ``obj``."""
    found: list[Any] = []
    if obj is None:
        return found
    for f in fields:
        if not f.present(version):
            continue
        t = f.type
        v = obj.get(f.name)
        if t == "records":
            found.append(v)
        elif isinstance(t, Array) and not isinstance(t.elem, str):
            for item in v or []:
                found.extend(records_values(t.elem, item, version))
        elif isinstance(t, list):
            found.extend(records_values(t, v, version))
    return found


CASES = [
    (api, which, v)
    for api in ALL_APIS
    for which in ("request", "response")
    for v in range(api.min_version, api.max_version + 1)
]
IDS = [f"{api.name}-{which}-v{v}" for api, which, v in CASES]


def fields_of(api: Api, which: str) -> list[Field]:
    return api.request if which == "request" else api.response


def encode(api: Api, which: str, version: int, obj: dict[str, Any]) -> bytes:
    if which == "request":
        parts = api.encode_request(version, obj)
    else:
        parts = api.encode_response(version, obj)
    return b"".join(parts)


def decode(
    api: Api, which: str, version: int, data: Any, pos: int = 0
) -> tuple[dict[str, Any], int]:
    if which == "request":
        return api.decode_request(version, data, pos)
    return api.decode_response(version, data, pos)


@pytest.mark.parametrize(
    "variant", [{}, {"nulls": True}, {"records_size": 1500}], ids=["values", "nulls", "big"]
)
@pytest.mark.parametrize(("api", "which", "version"), CASES, ids=IDS)
def test_round_trip(api: Api, which: str, version: int, variant: dict[str, Any]) -> None:
    fields = fields_of(api, which)
    obj = Gen(version, **variant).struct(fields)
    data = encode(api, which, version, obj)
    got, end = decode(api, which, version, data)
    assert end == len(data)
    assert plain(got) == obj
    for rec in records_values(fields, got, version):
        assert rec is None or isinstance(rec, memoryview)
    # Decoding at an offset inside a larger buffer gives the same message and end position.
    got2, end2 = decode(api, which, version, b"\x00\x01\x02" + data + b"tail", 3)
    assert end2 == 3 + len(data)
    assert plain(got2) == obj


@pytest.mark.parametrize(("api", "which", "version"), CASES, ids=IDS)
def test_empty_message_encodes_defaults(api: Api, which: str, version: int) -> None:
    fields = fields_of(api, which)
    data = encode(api, which, version, {})
    got, end = decode(api, which, version, data)
    assert end == len(data)
    assert plain(got) == {f.name: default_value(f, version) for f in fields}


def test_tagged_fields_only_in_flexible_versions() -> None:
    for api, which, version in CASES:
        if api.is_flexible(version):
            continue
        obj = Gen(version).struct(fields_of(api, which))
        # Non-flexible encodings have no tagged sections: decoding ignores tags entirely, and
        # tagged fields come back as their defaults.
        got, _ = decode(api, which, version, encode(api, which, version, obj))
        for f in fields_of(api, which):
            if f.tag is not None:
                assert got[f.name] == default_value(f, version)


def test_large_records_are_not_copied() -> None:
    produce = next(api for api in ALL_APIS if api.api_key == 0)
    batch = bytes(range(256)) * 8
    obj = {
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}],
    }
    for version in (3, 11):
        parts = produce.encode_request(version, obj)
        assert any(p is batch for p in parts)
        w = Writer()
        produce.encode_request_into(w, version, obj)
        assert w.size() == sum(len(p) for p in parts)


# ---------------------------------------------------------------------------------------------
# Malformed input


def _decode_or_schema_error(api: Api, which: str, version: int, data: bytes) -> None:
    try:
        decode(api, which, version, data)
    except SchemaError:
        pass


@pytest.mark.parametrize(("api", "which", "version"), CASES, ids=IDS)
def test_every_truncation_raises_schema_error(api: Api, which: str, version: int) -> None:
    obj = Gen(version).struct(fields_of(api, which))
    data = encode(api, which, version, obj)
    for n in range(len(data)):
        with pytest.raises(SchemaError):
            decode(api, which, version, data[:n])


@pytest.mark.parametrize("which", ["request", "response"])
@pytest.mark.parametrize("api", ALL_APIS, ids=[a.name for a in ALL_APIS])
@FUZZ
@given(data=st.data(), junk=st.binary(max_size=200))
def test_random_bytes(api: Api, which: str, data: st.DataObject, junk: bytes) -> None:
    version = data.draw(st.integers(api.min_version, api.max_version), label="version")
    _decode_or_schema_error(api, which, version, junk)


@pytest.mark.parametrize("which", ["request", "response"])
@pytest.mark.parametrize("api", ALL_APIS, ids=[a.name for a in ALL_APIS])
@FUZZ
@given(data=st.data())
def test_mutated_encodings(api: Api, which: str, data: st.DataObject) -> None:
    version = data.draw(st.integers(api.min_version, api.max_version), label="version")
    nulls = data.draw(st.booleans(), label="nulls")
    valid = encode(api, which, version, Gen(version, nulls=nulls).struct(fields_of(api, which)))
    buf = bytearray(valid)
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        kind = data.draw(st.sampled_from(["set", "insert", "delete", "truncate"]))
        pos = data.draw(st.integers(0, max(len(buf) - 1, 0)))
        if kind == "set" and buf:
            buf[pos] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF]))
        elif kind == "insert":
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete" and buf:
            del buf[pos : pos + data.draw(st.integers(1, 8))]
        else:
            del buf[pos:]
    _decode_or_schema_error(api, which, version, bytes(buf))


@pytest.mark.parametrize("api", ALL_APIS, ids=[a.name for a in ALL_APIS])
def test_huge_lengths_are_rejected_without_allocating(api: Api) -> None:
    # An array, string or bytes length far larger than the message must be rejected up front.
    for version in (api.min_version, api.max_version):
        flexible = api.is_flexible(version)
        for prefix in (b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f", b"\x7f\xff"):
            data = prefix * 4 + b"\x00" * 16
            if flexible and prefix[0] == 0x7F and len(prefix) == 4:
                continue
            _decode_or_schema_error(api, "request", version, data)
            _decode_or_schema_error(api, "response", version, data)
