"""The records of KIP-848 consumer groups on ``__consumer_offsets`` (key versions 3-8).

Kafka's ``ConsumerGroup*Key`` / ``ConsumerGroup*Value`` record schemas and the builders of
``GroupCoordinatorRecordHelpers``. Records are :class:`CoordinatorRecord` tuples
``(record_name, key_dict, value_dict | None)``; ``None`` is a tombstone. :func:`encode_record` /
:func:`decode_record` give them their ``__consumer_offsets`` bytes (int16 version + body for both
key and value, as Kafka's ``CoordinatorRecordSerde``).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, NamedTuple

from odradek.coordinator.group.assignors import TopicMetadata
from odradek.coordinator.group.consumer_group_member import (
    ConsumerGroupMember,
    Partitions,
    assignment_value,
    metadata_value,
    tp_list,
)
from odradek.protocol.schema import INF, A, F, S, Schema, SchemaError


class CoordinatorRecord(NamedTuple):
    name: str
    key: dict[str, Any]
    value: dict[str, Any] | None


GROUP_METADATA = "ConsumerGroupMetadata"
PARTITION_METADATA = "ConsumerGroupPartitionMetadata"
MEMBER_METADATA = "ConsumerGroupMemberMetadata"
TARGET_ASSIGNMENT_METADATA = "ConsumerGroupTargetAssignmentMetadata"
TARGET_ASSIGNMENT_MEMBER = "ConsumerGroupTargetAssignmentMember"
CURRENT_MEMBER_ASSIGNMENT = "ConsumerGroupCurrentMemberAssignment"


def group_metadata_record(group_id: str, epoch: int) -> CoordinatorRecord:
    return CoordinatorRecord(GROUP_METADATA, {"group_id": group_id}, {"epoch": epoch})


def partition_metadata_record(
    group_id: str, metadata: Mapping[str, TopicMetadata]
) -> CoordinatorRecord:
    topics = [
        {
            "topic_id": t.topic_id,
            "topic_name": t.name,
            "num_partitions": t.num_partitions,
            "partition_metadata": [],
        }
        for _, t in sorted(metadata.items())
    ]
    return CoordinatorRecord(PARTITION_METADATA, {"group_id": group_id}, {"topics": topics})


def member_metadata_record(group_id: str, m: ConsumerGroupMember) -> CoordinatorRecord:
    return CoordinatorRecord(
        MEMBER_METADATA, {"group_id": group_id, "member_id": m.member_id}, metadata_value(m)
    )


def target_member_record(group_id: str, member_id: str, parts: Partitions) -> CoordinatorRecord:
    return CoordinatorRecord(
        TARGET_ASSIGNMENT_MEMBER,
        {"group_id": group_id, "member_id": member_id},
        {"topic_partitions": tp_list(parts)},
    )


def target_metadata_record(group_id: str, epoch: int) -> CoordinatorRecord:
    return CoordinatorRecord(
        TARGET_ASSIGNMENT_METADATA, {"group_id": group_id}, {"assignment_epoch": epoch}
    )


def current_assignment_record(group_id: str, m: ConsumerGroupMember) -> CoordinatorRecord:
    return CoordinatorRecord(
        CURRENT_MEMBER_ASSIGNMENT,
        {"group_id": group_id, "member_id": m.member_id},
        assignment_value(m),
    )


def _key_schema(name: str, version: int, with_member: bool) -> Schema:
    v = str(version)
    fields = [F("group_id", "string", v)]
    if with_member:
        fields.append(F("member_id", "string", v))
    return Schema(name + "Key", version, version, INF, fields)


_TOPIC_PARTITIONS = S(F("topic_id", "uuid", "0+"), F("partitions", A("int32"), "0+"))

# record name -> (key version, key schema, value version, value schema), from Kafka's
# group-coordinator/src/main/resources/common/message/ConsumerGroup*{Key,Value}.json.
RECORD_SCHEMAS: dict[str, tuple[int, Schema, int, Schema]] = {
    GROUP_METADATA: (
        3,
        _key_schema(GROUP_METADATA, 3, False),
        0,
        Schema(GROUP_METADATA + "Value", 0, 0, 0, [F("epoch", "int32", "0+")]),
    ),
    PARTITION_METADATA: (
        4,
        _key_schema(PARTITION_METADATA, 4, False),
        0,
        Schema(
            PARTITION_METADATA + "Value",
            0,
            0,
            0,
            [
                F(
                    "topics",
                    A(
                        S(
                            F("topic_id", "uuid", "0+"),
                            F("topic_name", "string", "0+"),
                            F("num_partitions", "int32", "0+"),
                            F(
                                "partition_metadata",
                                A(
                                    S(
                                        F("partition", "int32", "0+"),
                                        F("racks", A("string"), "0+"),
                                    )
                                ),
                                "0+",
                            ),
                        )
                    ),
                    "0+",
                )
            ],
        ),
    ),
    MEMBER_METADATA: (
        5,
        _key_schema(MEMBER_METADATA, 5, True),
        0,
        Schema(
            MEMBER_METADATA + "Value",
            0,
            0,
            0,
            [
                F("instance_id", "string", "0+", nullable="0+"),
                F("rack_id", "string", "0+", nullable="0+"),
                F("client_id", "string", "0+"),
                F("client_host", "string", "0+"),
                F("subscribed_topic_names", A("string"), "0+"),
                F("subscribed_topic_regex", "string", "0+", nullable="0+"),
                F("rebalance_timeout_ms", "int32", "0+", default="-1"),
                F("server_assignor", "string", "0+", nullable="0+"),
                F(
                    "classic_member_metadata",
                    S(
                        F("session_timeout_ms", "int32", "0+"),
                        F(
                            "supported_protocols",
                            A(S(F("name", "string", "0+"), F("metadata", "bytes", "0+"))),
                            "0+",
                        ),
                    ),
                    "0+",
                    nullable="0+",
                    tag=0,
                    tagged="0+",
                    default="null",
                ),
            ],
        ),
    ),
    TARGET_ASSIGNMENT_METADATA: (
        6,
        _key_schema(TARGET_ASSIGNMENT_METADATA, 6, False),
        0,
        Schema(
            TARGET_ASSIGNMENT_METADATA + "Value", 0, 0, 0, [F("assignment_epoch", "int32", "0+")]
        ),
    ),
    TARGET_ASSIGNMENT_MEMBER: (
        7,
        _key_schema(TARGET_ASSIGNMENT_MEMBER, 7, True),
        0,
        Schema(
            TARGET_ASSIGNMENT_MEMBER + "Value",
            0,
            0,
            0,
            [F("topic_partitions", A(_TOPIC_PARTITIONS), "0+")],
        ),
    ),
    CURRENT_MEMBER_ASSIGNMENT: (
        8,
        _key_schema(CURRENT_MEMBER_ASSIGNMENT, 8, True),
        0,
        Schema(
            CURRENT_MEMBER_ASSIGNMENT + "Value",
            0,
            0,
            0,
            [
                F("member_epoch", "int32", "0+"),
                F("previous_member_epoch", "int32", "0+"),
                F("state", "int8", "0+"),
                F("assigned_partitions", A(_TOPIC_PARTITIONS), "0+"),
                F("partitions_pending_revocation", A(_TOPIC_PARTITIONS), "0+"),
            ],
        ),
    ),
}

# key version -> record name (versions 0-2 are offset commits and classic group metadata).
RECORD_NAMES_BY_KEY_VERSION: dict[int, str] = {v[0]: n for n, v in RECORD_SCHEMAS.items()}

_I16 = struct.Struct(">h")


def encode_record(
    name: str, key: Mapping[str, Any], value: Mapping[str, Any] | None
) -> tuple[bytes, bytes | None]:
    """``(key bytes, value bytes or None for a tombstone)`` of a consumer group record."""
    key_version, key_schema, value_version, value_schema = RECORD_SCHEMAS[name]
    kb = _I16.pack(key_version) + key_schema.encode(key_version, dict(key))
    if value is None:
        return kb, None
    return kb, _I16.pack(value_version) + value_schema.encode(value_version, dict(value))


def is_consumer_group_key(key: bytes) -> bool:
    return len(key) >= 2 and _I16.unpack_from(key)[0] in RECORD_NAMES_BY_KEY_VERSION


def decode_record(key: bytes, value: bytes | None) -> CoordinatorRecord:
    """The inverse of :func:`encode_record`; raises SchemaError for other records."""
    if len(key) < 2:
        raise SchemaError("coordinator record key too short")
    key_version = _I16.unpack_from(key)[0]
    name = RECORD_NAMES_BY_KEY_VERSION.get(key_version)
    if name is None:
        raise SchemaError(f"key version {key_version} is not a consumer group record")
    _, key_schema, _, value_schema = RECORD_SCHEMAS[name]
    k, _ = key_schema.decode(key_version, key, 2)
    if value is None:
        return CoordinatorRecord(name, k, None)
    if len(value) < 2:
        raise SchemaError("coordinator record value too short")
    value_version = _I16.unpack_from(value)[0]
    if value_version != 0:
        raise SchemaError(f"{name} value version {value_version} is not supported")
    v, _ = value_schema.decode(value_version, value, 2)
    return CoordinatorRecord(name, k, v)
