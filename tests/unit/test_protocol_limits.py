"""Hostile frames: what decoding may create is bounded before it is allocated (issue 8, item 6)."""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from odradek.protocol import messages as m
from odradek.protocol import schema
from odradek.protocol.schema import SchemaError


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def refused_with_peak(decode: Callable[[], Any]) -> tuple[str, int]:
    """Decode, expecting a refusal; return its message and the peak memory traced meanwhile."""
    tracemalloc.start()
    try:
        with pytest.raises(SchemaError) as info:
            decode()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return str(info.value), peak


def test_array_count_is_checked_against_the_fewest_bytes_its_elements_need() -> None:
    # DescribeGroups v4: an int32 count, then int16-length strings (2 bytes at least each). The
    # count fits the bytes left (one byte per element) but not two bytes per element.
    n = 200_000
    body = struct.pack(">i", n) + b"\x00" * n
    msg, peak = refused_with_peak(lambda: m.DESCRIBE_GROUPS.decode_request(4, body))
    assert f"array groups of {n} element(s) needs at least {2 * n} byte(s)" in msg
    assert peak < 64 * 1024  # refused before decoding one element (the old code built a list)


def test_struct_elements_need_their_fixed_fields() -> None:
    # Produce v9 partition_data: index int32 + compact records + tagged count = 6 bytes at least.
    n = 1000
    topic = b"\x02t" + uvarint(n + 1) + b"\x00" * (3 * n)
    body = b"\x00" + struct.pack(">hi", 1, 1000) + uvarint(2) + topic
    msg, _ = refused_with_peak(lambda: m.PRODUCE.decode_request(9, body))
    assert "array partition_data of 1000 element(s) needs at least 6000 byte(s)" in msg


def test_nested_arrays_share_one_element_budget_per_request(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each array is small, but together they pass the request's element limit (lowered here so
    # the test stays small; the production limit is 200,000).
    monkeypatch.setattr(schema, "MAX_REQUEST_ELEMENTS", 1000, raising=False)
    part = struct.pack(">i", 0) + b"\x01\x00"  # index 0, empty records, no tagged fields
    topic = b"\x02t" + uvarint(401) + part * 400 + b"\x00"

    def produce(topics: int) -> bytes:
        return b"\x00" + struct.pack(">hi", 1, 1000) + uvarint(topics + 1) + topic * topics + b"\x00"

    req, _ = m.PRODUCE.decode_request(9, produce(2))  # 2 + 800 elements: within the limit
    assert sum(len(t["partition_data"]) for t in req["topic_data"]) == 800
    with pytest.raises(SchemaError, match="past its limit of 1000 array elements"):
        m.PRODUCE.decode_request(9, produce(3))  # 3 + 1200


def test_production_request_limit_refuses_a_big_flat_array_up_front() -> None:
    n = 200_001
    # DescribeGroups v5: compact strings, one-byte group ids (2 bytes each), all there.
    body = uvarint(n + 1) + b"\x02a" * n + b"\x00" + b"\x00"
    msg, peak = refused_with_peak(lambda: m.DESCRIBE_GROUPS.decode_request(5, body))
    assert "past its limit of 200000 array elements" in msg
    assert peak < 64 * 1024


def test_responses_get_kafkas_million_element_limit() -> None:
    n = 1_000_001
    # ListGroups v3 response groups: group_id + protocol_type compact strings + tags: 3 bytes
    # at least; give it the bytes so only the count limit can refuse it.
    body = b"\x00\x00\x00\x00" + b"\x00\x00" + uvarint(n + 1) + b"\x01\x01\x00" * n + b"\x00"
    msg, peak = refused_with_peak(lambda: m.LIST_GROUPS.decode_response(3, body))
    assert "past its limit of 1000000 array elements" in msg
    assert peak < 64 * 1024


def test_tagged_field_sections_are_bounded() -> None:
    # DescribeGroups v5 request: no groups, then 20,000 (unknown) tagged fields, each with its
    # bytes present (tag 9, size 0): more than Kafka's 10,000.
    count = 20_000
    body = b"\x01\x00" + uvarint(count) + b"\x09\x00" * count
    with pytest.raises(SchemaError, match="20000 tagged fields exceed the limit of 10000"):
        m.DESCRIBE_GROUPS.decode_request(5, body)
    # A count that cannot fit the bytes left is refused without looping over it.
    body = b"\x01\x00" + uvarint(9_000) + b"\x09\x00" * 10
    with pytest.raises(SchemaError, match="9000 tagged fields cannot fit"):
        m.DESCRIBE_GROUPS.decode_request(5, body)
    # Within the limits, unknown tags are skipped.
    req, _ = m.DESCRIBE_GROUPS.decode_request(5, b"\x01\x00" + uvarint(3) + b"\x09\x00" * 3)
    assert req["groups"] == []


def test_strings_are_bounded_by_kafkas_length_and_the_bytes_left() -> None:
    # A compact string longer than 32767 bytes (Kafka: "string field ... had invalid length").
    gid = b"g" * 40_000
    body = b"\x02" + uvarint(len(gid) + 1) + gid + b"\x00\x00"
    with pytest.raises(SchemaError, match="string had invalid length 40000"):
        m.DESCRIBE_GROUPS.decode_request(5, body)
    # A string claiming more bytes than the message has left.
    body = b"\x02" + uvarint(1001) + b"g" * 10 + b"\x00\x00"
    with pytest.raises(SchemaError, match="string of 1000 byte.s. exceeds the 12 byte.s. left"):
        m.DESCRIBE_GROUPS.decode_request(5, body)


def test_min_encoded_size_of_request_elements() -> None:
    groups = m.DESCRIBE_GROUPS.request[0]
    elem = schema.Field("_", groups.type.elem, (0, schema.INF))  # type: ignore[union-attr]
    assert schema.min_encoded_size(elem, 4, False) == 2
    assert schema.min_encoded_size(elem, 5, True) == 1
    topic_data = m.PRODUCE.request[3]
    topic = schema.Field("_", topic_data.type.elem, (0, schema.INF))  # type: ignore[union-attr]
    assert schema.min_encoded_size(topic, 9, True) == 3  # name, partition array, tags
    assert schema.min_encoded_size(topic, 8, False) == 6


def _own_bytes(f: schema.Field, version: int, flexible: bool) -> int:
    """Bytes a value of ``f`` takes at least, not counting its arrays' elements."""
    t = f.type
    if isinstance(t, str) or isinstance(t, schema.Array):
        return schema.min_encoded_size(f, version, flexible)
    if schema._in(f.nullable, version):
        return 1
    own = 1 if flexible else 0
    return own + sum(_own_bytes(g, version, flexible) for g in t if g.tag is None and g.present(version))


def test_every_array_element_of_every_api_takes_a_byte_of_its_own() -> None:
    # decode_request counts elements only in requests longer than the element limit: that is
    # sound because no element of any schema can be encoded in zero bytes of its own.
    def walk(fields: list[schema.Field], version: int, flexible: bool, where: str) -> None:
        for f in fields:
            tagged = f.tag is not None and flexible and schema._in(f.tagged, version)
            if not (f.present(version) or tagged):
                continue
            t = f.type
            if isinstance(t, schema.Array):
                elem = schema.Field("_", t.elem, (0, schema.INF))
                assert _own_bytes(elem, version, flexible) >= 1, f"{where}.{f.name} v{version}"
                if not isinstance(t.elem, str):
                    walk(t.elem, version, flexible, f"{where}.{f.name}")
            elif isinstance(t, list):
                walk(t, version, flexible, f"{where}.{f.name}")

    for api in m.ALL_APIS:
        for v in range(api.min_version, api.max_version + 1):
            walk(api.request, v, api.is_flexible(v), f"{api.name} request")
            walk(api.response, v, api.is_flexible(v), f"{api.name} response")
