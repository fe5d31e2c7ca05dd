"""Hand-written bytes of requests and responses as real clients send and expect them."""

from __future__ import annotations

import pytest

from odradek.protocol.header import (
    RequestHeader,
    decode_request_header,
    decode_response_header,
    encode_request_header,
    encode_response_header,
)
from odradek.protocol.messages import ALL_APIS, API_VERSIONS, METADATA, PRODUCE
from odradek.protocol.schema import SchemaError


def test_api_versions_v3_request_with_header_v2() -> None:
    # What librdkafka sends first: header v2 (client id stays an int16-length string, followed by
    # an empty tagged-field section), then a flexible body with compact strings.
    frame = (
        b"\x00\x12"  # api key 18
        b"\x00\x03"  # version 3
        b"\x00\x00\x00\x01"  # correlation id
        b"\x00\x07rdkafka"  # client id: int16 length even in header v2
        b"\x00"  # header tagged fields
        b"\x0blibrdkafka"  # compact string: length + 1
        b"\x062.3.0"
        b"\x00"  # body tagged fields
    )
    assert API_VERSIONS.request_header_version(3) == 2
    header, pos = decode_request_header(frame, 2)
    assert header == RequestHeader(18, 3, 1, "rdkafka")
    body, end = API_VERSIONS.decode_request(3, frame, pos)
    assert end == len(frame)
    assert body == {"client_software_name": "librdkafka", "client_software_version": "2.3.0"}
    encoded = encode_request_header(header, 2) + b"".join(API_VERSIONS.encode_request(3, body))
    assert encoded == frame


def test_api_versions_v0_request_is_header_only() -> None:
    frame = b"\x00\x12\x00\x00\x00\x00\x00\x2a\xff\xff"  # null client id, empty body
    header, pos = decode_request_header(frame, API_VERSIONS.request_header_version(0))
    assert header == RequestHeader(18, 0, 42, None)
    assert pos == len(frame)
    assert API_VERSIONS.decode_request(0, frame, pos) == (
        {"client_software_name": "", "client_software_version": ""},
        pos,
    )
    assert b"".join(API_VERSIONS.encode_request(0, {})) == b""


def test_metadata_v1_null_topics_means_all_topics() -> None:
    body = b"\xff\xff\xff\xff"
    req, end = METADATA.decode_request(1, body)
    assert end == 4
    assert req["topics"] is None
    assert b"".join(METADATA.encode_request(1, {"topics": None})) == body


def test_metadata_v0_empty_array_means_all_topics_and_null_is_invalid() -> None:
    body = b"\x00\x00\x00\x00"
    req, _ = METADATA.decode_request(0, body)
    assert req["topics"] == []
    assert b"".join(METADATA.encode_request(0, {"topics": []})) == body
    with pytest.raises(SchemaError):
        METADATA.decode_request(0, b"\xff\xff\xff\xff")


def test_metadata_v1_with_topics_and_v9_compact_null() -> None:
    body = b"\x00\x00\x00\x02\x00\x01a\x00\x02bc"
    req, _ = METADATA.decode_request(1, body)
    assert [t["name"] for t in req["topics"]] == ["a", "bc"]
    # v9: compact nullable array (0 = null), three bools, tagged fields.
    req9, end = METADATA.decode_request(9, b"\x00\x00\x00\x01\x00")
    assert end == 5
    assert req9["topics"] is None
    assert req9["allow_auto_topic_creation"] is False
    assert req9["include_cluster_authorized_operations"] is False
    assert req9["include_topic_authorized_operations"] is True


def test_produce_v3_request_one_partition() -> None:
    batch = b"\x00" * 8 + b"BATCH-BYTES"
    frame = bytearray(
        b"\x00\x00\x00\x03\x00\x00\x00\x07\x00\x03cli"  # header v1: Produce v3, cid 7, "cli"
        b"\xff\xff"  # transactional id: null
        b"\xff\xff"  # acks -1
        b"\x00\x00\x75\x30"  # timeout 30000
        b"\x00\x00\x00\x01"  # one topic
        b"\x00\x05topic"
        b"\x00\x00\x00\x01"  # one partition
        b"\x00\x00\x00\x02"  # index 2
    )
    frame += len(batch).to_bytes(4, "big") + batch
    assert PRODUCE.request_header_version(3) == 1
    header, pos = decode_request_header(frame, 1)
    assert header == RequestHeader(0, 3, 7, "cli")
    req, end = PRODUCE.decode_request(3, frame, pos)
    assert end == len(frame)
    assert req["transactional_id"] is None
    assert req["acks"] == -1
    assert req["timeout_ms"] == 30000
    (topic,) = req["topic_data"]
    assert topic["name"] == "topic"
    (part,) = topic["partition_data"]
    assert part["index"] == 2
    records = part["records"]
    assert isinstance(records, memoryview)
    assert records.obj is frame  # a view into the request buffer, not a copy
    assert records.tobytes() == batch
    # The broker rewrites batch headers in place: the change is visible through the view.
    frame[len(frame) - len(batch)] = 0x42
    assert records[0] == 0x42


def test_produce_v9_request_is_compact() -> None:
    body = (
        b"\x00"  # compact nullable string: null
        b"\x00\x01"  # acks 1
        b"\x00\x00\x03\xe8"
        b"\x02"  # compact array: 1 topic
        b"\x02t"
        b"\x02"  # 1 partition
        b"\x00\x00\x00\x00"
        b"\x04abc"  # compact records: length + 1
        b"\x00"  # partition tagged fields
        b"\x00"  # topic tagged fields
        b"\x00"  # request tagged fields
    )
    req, end = PRODUCE.decode_request(9, body)
    assert end == len(body)
    assert req["topic_data"][0]["partition_data"][0]["records"].tobytes() == b"abc"
    assert b"".join(PRODUCE.encode_request(9, req)) == body


def test_response_header_v0_and_v1() -> None:
    assert encode_response_header(7, 0) == b"\x00\x00\x00\x07"
    assert encode_response_header(7, 1) == b"\x00\x00\x00\x07\x00"
    assert decode_response_header(b"\x00\x00\x00\x07", 0) == (7, 4)
    assert decode_response_header(b"\x00\x00\x00\x07\x00", 1) == (7, 5)
    # An unknown tagged field in the header is skipped.
    assert decode_response_header(b"\x00\x00\x00\x07\x01\x05\x02ab", 1) == (7, 9)
    with pytest.raises(SchemaError):
        decode_response_header(b"\x00\x00\x00\x07", 1)
    assert METADATA.response_header_version(8) == 0
    assert METADATA.response_header_version(9) == 1
    assert PRODUCE.response_header_version(9) == 1


def test_api_versions_response_always_uses_header_v0() -> None:
    for v in range(API_VERSIONS.min_version, API_VERSIONS.max_version + 1):
        assert API_VERSIONS.response_header_version(v) == 0
    for api in ALL_APIS:
        if api is not API_VERSIONS:
            assert api.response_header_version(api.max_version) == int(
                api.is_flexible(api.max_version)
            )


def test_api_versions_v3_response_bytes() -> None:
    resp = {
        "error_code": 0,
        "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 11}],
        "throttle_time_ms": 0,
        "finalized_features_epoch": 5,
    }
    body = (
        b"\x00\x00"  # error code
        b"\x02"  # compact array: 1 entry
        b"\x00\x00\x00\x03\x00\x0b\x00"  # key 0, versions 3..11, entry tagged fields
        b"\x00\x00\x00\x00"  # throttle
        b"\x01"  # one tagged field (the others are at their defaults)
        b"\x01\x08\x00\x00\x00\x00\x00\x00\x00\x05"  # tag 1, 8 bytes: finalized features epoch
    )
    full = encode_response_header(9, API_VERSIONS.response_header_version(3)) + b"".join(
        API_VERSIONS.encode_response(3, resp)
    )
    assert full == b"\x00\x00\x00\x09" + body
    got, end = API_VERSIONS.decode_response(3, body)
    assert end == len(body)
    assert got["finalized_features_epoch"] == 5
    assert got["supported_features"] == []
    assert got["zk_migration_ready"] is False


def test_api_versions_v0_response_bytes() -> None:
    # error 35 (UNSUPPORTED_VERSION), one entry: ApiVersions 0..4
    body = b"\x00\x23\x00\x00\x00\x01\x00\x12\x00\x00\x00\x04"
    resp, end = API_VERSIONS.decode_response(0, body)
    assert end == len(body)
    assert resp["error_code"] == 35
    assert resp["api_keys"] == [{"api_key": 18, "min_version": 0, "max_version": 4}]
    assert b"".join(API_VERSIONS.encode_response(0, resp)) == body


def test_request_header_errors() -> None:
    with pytest.raises(SchemaError):
        decode_request_header(b"\x00\x12\x00\x03", 2)
    with pytest.raises(SchemaError):
        decode_request_header(b"\x00\x12\x00\x03\x00\x00\x00\x01\x00\x09abc", 1)
    with pytest.raises(SchemaError):
        decode_request_header(b"\x00\x12\x00\x03\x00\x00\x00\x01\x00\x01\xff", 1)
    with pytest.raises(SchemaError):  # header v2 without its tagged-field section
        decode_request_header(b"\x00\x12\x00\x03\x00\x00\x00\x01\xff\xff", 2)
