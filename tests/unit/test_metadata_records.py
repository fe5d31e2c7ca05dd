"""KRaft metadata records: framing, round trips of every type and version, malformed input."""

from __future__ import annotations

import uuid

import pytest
from schema_values import Gen

from odradek.metadata.records import (
    FRAME_VERSION,
    RECORD_TYPES,
    WRITE_VERSIONS,
    decode_metadata_record,
    encode_metadata_record,
)
from odradek.protocol.schema import SchemaError, default_value

CASES = [
    (name, version)
    for name, (_, schema) in RECORD_TYPES.items()
    for version in range(schema.min_version, schema.max_version + 1)
]


@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_round_trip(name: str, version: int, nulls: bool) -> None:
    api_key, schema = RECORD_TYPES[name]
    obj = Gen(version, nulls=nulls).struct(schema.fields)
    data = encode_metadata_record(name, obj, version)
    assert data[0] == FRAME_VERSION
    assert data[1] == api_key
    assert data[2] == version
    got_name, got_version, fields = decode_metadata_record(data)
    assert (got_name, got_version) == (name, version)
    assert fields == obj
    # Same again from a memoryview into a larger buffer.
    buf = bytearray(b"xx" + data + b"yy")
    assert decode_metadata_record(memoryview(buf)[2:-2]) == (name, version, obj)


@pytest.mark.parametrize("name", list(RECORD_TYPES))
def test_default_version_is_newest(name: str) -> None:
    """The newest version, except where a newer one only Kafka 4.1+ reads exists (WRITE_VERSIONS)."""
    _, schema = RECORD_TYPES[name]
    data = encode_metadata_record(name, {})
    got_name, version, fields = decode_metadata_record(data)
    assert (got_name, version) == (name, WRITE_VERSIONS.get(name, schema.max_version))
    assert fields == {f.name: default_value(f, version) for f in schema.fields}


def test_api_keys_are_kafkas() -> None:
    keys = {name: key for name, (key, _) in RECORD_TYPES.items()}
    assert keys["RegisterBrokerRecord"] == 0
    assert keys["TopicRecord"] == 2
    assert keys["PartitionRecord"] == 3
    assert keys["ConfigRecord"] == 4
    assert keys["PartitionChangeRecord"] == 5
    assert keys["FenceBrokerRecord"] == 7
    assert keys["UnfenceBrokerRecord"] == 8
    assert keys["RemoveTopicRecord"] == 9
    assert keys["FeatureLevelRecord"] == 12
    assert keys["NoOpRecord"] == 20
    assert len(set(keys.values())) == len(keys)


def test_topic_record_golden_bytes() -> None:
    topic_id = uuid.UUID("12345678-9abc-def0-1234-56789abcdef0")
    data = encode_metadata_record("TopicRecord", {"name": "foo", "topic_id": topic_id})
    frame = b"\x01\x02\x00"  # frame version 1, TopicRecord (2), version 0
    body = b"\x04foo" + topic_id.bytes + b"\x00"  # compact string, uuid, no tagged fields
    assert data == frame + body
    name, version, fields = decode_metadata_record(data)
    assert (name, version) == ("TopicRecord", 0)
    assert isinstance(fields["topic_id"], uuid.UUID)
    assert fields == {"name": "foo", "topic_id": topic_id}


def test_partition_change_record_only_writes_changed_tagged_fields() -> None:
    topic_id = uuid.uuid4()
    data = encode_metadata_record(
        "PartitionChangeRecord", {"partition_id": 3, "topic_id": topic_id, "leader": 5}, 0
    )
    # frame, type 5, v0, int32 partition, uuid, one tagged field: tag 1, size 4, int32 5.
    assert data == (
        b"\x01\x05\x00" + b"\x00\x00\x00\x03" + topic_id.bytes + b"\x01\x01\x04\x00\x00\x00\x05"
    )
    _, _, fields = decode_metadata_record(data)
    assert fields["leader"] == 5
    assert fields["isr"] is None  # unchanged
    assert fields["leader_recovery_state"] == -1


def test_no_op_record_bytes() -> None:
    assert encode_metadata_record("NoOpRecord", {}) == b"\x01\x14\x00\x00"
    assert decode_metadata_record(b"\x01\x14\x00\x00") == ("NoOpRecord", 0, {})


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_every_truncation_raises(name: str, version: int) -> None:
    _, schema = RECORD_TYPES[name]
    data = encode_metadata_record(name, Gen(version).struct(schema.fields), version)
    for n in range(len(data)):
        with pytest.raises(SchemaError):
            decode_metadata_record(data[:n])


def test_unknown_type_raises() -> None:
    with pytest.raises(SchemaError, match="unknown"):
        decode_metadata_record(b"\x01\x7f\x00\x00")
    with pytest.raises(SchemaError, match="unknown"):
        decode_metadata_record(b"\x01\xff\xff\x03\x00\x00")
    with pytest.raises(SchemaError):
        encode_metadata_record("NoSuchRecord", {})


def test_bad_frame_version_version_or_trailing_bytes_raise() -> None:
    with pytest.raises(SchemaError, match="frame version"):
        decode_metadata_record(b"\x00\x14\x00\x00")
    with pytest.raises(SchemaError, match="version"):
        decode_metadata_record(b"\x01\x14\x01\x00")
    with pytest.raises(SchemaError, match="trailing"):
        decode_metadata_record(b"\x01\x14\x00\x00\x00")
    with pytest.raises(SchemaError):
        encode_metadata_record("TopicRecord", {}, version=1)


def test_unknown_tagged_fields_are_skipped() -> None:
    # A newer writer may add tagged fields we do not know: tag 9, 2 bytes.
    data = b"\x01\x14\x00\x01\x09\x02ab"
    assert decode_metadata_record(data) == ("NoOpRecord", 0, {})


def test_encode_bad_value_raises_schema_error() -> None:
    with pytest.raises(SchemaError):
        encode_metadata_record("FenceBrokerRecord", {"id": 1 << 40, "epoch": 1})
    with pytest.raises(SchemaError):
        encode_metadata_record("TopicRecord", {"name": "t", "topic_id": b"short"})
