"""KRaft metadata records: the values written to the ``__cluster_metadata`` log.

Each record type is a :class:`~odradek.protocol.schema.Schema` written from Kafka's
``metadata/src/main/resources/common/metadata/*.json`` (every one is flexible from version 0).
Decoded records are dicts with snake_case keys, exactly like decoded requests; UUID fields decode to
:class:`uuid.UUID`.

Framing (Kafka's ``AbstractApiMessageSerde``, used by ``MetadataRecordSerde``): the value of each log
record is::

    frame_version  unsigned varint   always 1 (0 was the KRaft preview in 2.8; Kafka rejects it)
    api_key        unsigned varint   the record type ("apiKey" in the JSON)
    version        unsigned varint   the record's version
    body           the record encoded at that version (flexible: compact types, tagged fields)
"""

from __future__ import annotations

import struct
from typing import Any

from odradek.protocol.schema import (
    A,
    Buffer,
    F,
    S,
    Schema,
    SchemaError,
    read_uvarint,
    write_uvarint,
)

FRAME_VERSION = 1

_ENDPOINT = S(
    F("name", "string", "0+"),
    F("host", "string", "0+"),
    F("port", "uint16", "0+"),
    F("security_protocol", "int16", "0+"),
)

_FEATURE = S(
    F("name", "string", "0+"),
    F("min_supported_version", "int16", "0+"),
    F("max_supported_version", "int16", "0+"),
)

REGISTER_BROKER_RECORD = Schema(
    "RegisterBrokerRecord",
    0,
    4,
    0,
    [
        F("broker_id", "int32", "0+"),
        F("is_migrating_zk_broker", "bool", "2+", default="false"),
        F("incarnation_id", "uuid", "0+"),
        F("broker_epoch", "int64", "0+"),
        F("end_points", A(_ENDPOINT), "0+"),
        F("features", A(_FEATURE), "0+"),
        F("rack", "string", "0+", nullable="0+"),
        F("fenced", "bool", "0+", default="true"),
        F("in_controlled_shutdown", "bool", "1+", default="false"),
        F("log_dirs", A("uuid"), "3+", tag=0, tagged="3+"),
        F("cordoned_log_dirs", A("uuid"), "4+", nullable="4+", tag=1, tagged="4+", default="null"),
    ],
)

UNREGISTER_BROKER_RECORD = Schema(
    "UnregisterBrokerRecord",
    0,
    0,
    0,
    [
        F("broker_id", "int32", "0+"),
        F("broker_epoch", "int64", "0+"),
    ],
)

TOPIC_RECORD = Schema(
    "TopicRecord",
    0,
    0,
    0,
    [
        F("name", "string", "0+"),
        F("topic_id", "uuid", "0+"),
    ],
)

PARTITION_RECORD = Schema(
    "PartitionRecord",
    0,
    2,
    0,
    [
        F("partition_id", "int32", "0+", default="-1"),
        F("topic_id", "uuid", "0+"),
        F("replicas", A("int32"), "0+"),
        F("isr", A("int32"), "0+"),
        F("removing_replicas", A("int32"), "0+"),
        F("adding_replicas", A("int32"), "0+"),
        F("leader", "int32", "0+", default="-1"),
        F("leader_recovery_state", "int8", "0+", tag=0, tagged="0+", default="0"),
        F("leader_epoch", "int32", "0+", default="-1"),
        F("partition_epoch", "int32", "0+", default="-1"),
        F("directories", A("uuid"), "1+"),
        F(
            "eligible_leader_replicas",
            A("int32"),
            "2+",
            nullable="2+",
            tag=1,
            tagged="2+",
            default="null",
        ),
        F("last_known_elr", A("int32"), "2+", nullable="2+", tag=2, tagged="2+", default="null"),
    ],
)

CONFIG_RECORD = Schema(
    "ConfigRecord",
    0,
    0,
    0,
    [
        F("resource_type", "int8", "0+"),
        F("resource_name", "string", "0+"),
        F("name", "string", "0+"),
        F("value", "string", "0+", nullable="0+"),
    ],
)

CLIENT_QUOTA_RECORD = Schema(
    "ClientQuotaRecord",
    0,
    0,
    0,
    [
        F("entity", A(S(F("entity_type", "string", "0+"), F("entity_name", "string", "0+", nullable="0+"))), "0+"),
        F("key", "string", "0+"),
        F("value", "float64", "0+"),
        F("remove", "bool", "0+"),
    ],
)

PARTITION_CHANGE_RECORD = Schema(
    "PartitionChangeRecord",
    0,
    2,
    0,
    [
        F("partition_id", "int32", "0+", default="-1"),
        F("topic_id", "uuid", "0+"),
        F("isr", A("int32"), "0+", nullable="0+", tag=0, tagged="0+", default="null"),
        F("leader", "int32", "0+", tag=1, tagged="0+", default="-2"),
        F("replicas", A("int32"), "0+", nullable="0+", tag=2, tagged="0+", default="null"),
        F(
            "removing_replicas",
            A("int32"),
            "0+",
            nullable="0+",
            tag=3,
            tagged="0+",
            default="null",
        ),
        F("adding_replicas", A("int32"), "0+", nullable="0+", tag=4, tagged="0+", default="null"),
        F("leader_recovery_state", "int8", "0+", tag=5, tagged="0+", default="-1"),
        F("directories", A("uuid"), "1+", nullable="1+", tag=8, tagged="1+", default="null"),
        F(
            "eligible_leader_replicas",
            A("int32"),
            "2+",
            nullable="2+",
            tag=6,
            tagged="2+",
            default="null",
        ),
        F("last_known_elr", A("int32"), "2+", nullable="2+", tag=7, tagged="2+", default="null"),
    ],
)

FENCE_BROKER_RECORD = Schema(
    "FenceBrokerRecord",
    0,
    0,
    0,
    [
        F("id", "int32", "0+"),
        F("epoch", "int64", "0+"),
    ],
)

UNFENCE_BROKER_RECORD = Schema(
    "UnfenceBrokerRecord",
    0,
    0,
    0,
    [
        F("id", "int32", "0+"),
        F("epoch", "int64", "0+"),
    ],
)

REMOVE_TOPIC_RECORD = Schema(
    "RemoveTopicRecord",
    0,
    0,
    0,
    [
        F("topic_id", "uuid", "0+"),
    ],
)

FEATURE_LEVEL_RECORD = Schema(
    "FeatureLevelRecord",
    0,
    0,
    0,
    [
        F("name", "string", "0+"),
        F("feature_level", "int16", "0+"),
    ],
)

PRODUCER_IDS_RECORD = Schema(
    "ProducerIdsRecord",
    0,
    0,
    0,
    [
        F("broker_id", "int32", "0+"),
        F("broker_epoch", "int64", "0+", default="-1"),
        F("next_producer_id", "int64", "0+"),
    ],
)

BROKER_REGISTRATION_CHANGE_RECORD = Schema(
    "BrokerRegistrationChangeRecord",
    0,
    3,
    0,
    [
        F("broker_id", "int32", "0+"),
        F("broker_epoch", "int64", "0+"),
        F("fenced", "int8", "0+", tag=0, tagged="0+"),
        F("in_controlled_shutdown", "int8", "1+", tag=1, tagged="1+"),
        F("log_dirs", A("uuid"), "2+", tag=2, tagged="2+"),
        F("cordoned_log_dirs", A("uuid"), "3+", nullable="3+", tag=3, tagged="3+", default="null"),
    ],
)

NO_OP_RECORD = Schema("NoOpRecord", 0, 0, 0, [])

ACCESS_CONTROL_ENTRY_RECORD = Schema(
    "AccessControlEntryRecord",
    0,
    0,
    0,
    [
        F("id", "uuid", "0+"),
        F("resource_type", "int8", "0+"),
        F("resource_name", "string", "0+"),
        F("pattern_type", "int8", "0+"),
        F("principal", "string", "0+"),
        F("host", "string", "0+"),
        F("operation", "int8", "0+"),
        F("permission_type", "int8", "0+"),
    ],
)

REMOVE_ACCESS_CONTROL_ENTRY_RECORD = Schema(
    "RemoveAccessControlEntryRecord", 0, 0, 0, [F("id", "uuid", "0+")]
)

# SCRAM credentials (odradek.controller.scram_control_manager); mechanism 1 = SCRAM-SHA-256,
# 2 = SCRAM-SHA-512.
USER_SCRAM_CREDENTIAL_RECORD = Schema(
    "UserScramCredentialRecord",
    0,
    0,
    0,
    [
        F("name", "string", "0+"),
        F("mechanism", "int8", "0+"),
        F("salt", "bytes", "0+"),
        F("stored_key", "bytes", "0+"),
        F("server_key", "bytes", "0+"),
        F("iterations", "int32", "0+"),
    ],
)
REMOVE_USER_SCRAM_CREDENTIAL_RECORD = Schema(
    "RemoveUserScramCredentialRecord",
    0,
    0,
    0,
    [F("name", "string", "0+"), F("mechanism", "int8", "0+")],
)

BEGIN_TRANSACTION_RECORD = Schema(
    "BeginTransactionRecord",
    0,
    0,
    0,
    [
        F("name", "string", "0+", nullable="0+", tag=0, tagged="0+", default="null"),
    ],
)

END_TRANSACTION_RECORD = Schema("EndTransactionRecord", 0, 0, 0, [])

ABORT_TRANSACTION_RECORD = Schema(
    "AbortTransactionRecord",
    0,
    0,
    0,
    [
        F("reason", "string", "0+", nullable="0+", tag=0, tagged="0+", default="null"),
    ],
)

REGISTER_CONTROLLER_RECORD = Schema(
    "RegisterControllerRecord",
    0,
    0,
    0,
    [
        F("controller_id", "int32", "0+"),
        F("incarnation_id", "uuid", "0+"),
        F("zk_migration_ready", "bool", "0+"),
        F("end_points", A(_ENDPOINT), "0+"),
        F("features", A(_FEATURE), "0+"),
    ],
)

CLEAR_ELR_RECORD = Schema(
    "ClearElrRecord",
    0,
    0,
    0,
    [
        F("topic_name", "string", "0+"),
    ],
)

ZK_MIGRATION_STATE_RECORD = Schema(
    "ZkMigrationStateRecord",
    0,
    0,
    0,
    [
        F("zk_migration_state", "int8", "0+"),
    ],
)

RECORD_TYPES: dict[str, tuple[int, Schema]] = {
    "RegisterBrokerRecord": (0, REGISTER_BROKER_RECORD),
    "UnregisterBrokerRecord": (1, UNREGISTER_BROKER_RECORD),
    "TopicRecord": (2, TOPIC_RECORD),
    "PartitionRecord": (3, PARTITION_RECORD),
    "ConfigRecord": (4, CONFIG_RECORD),
    "ClientQuotaRecord": (14, CLIENT_QUOTA_RECORD),
    "PartitionChangeRecord": (5, PARTITION_CHANGE_RECORD),
    "FenceBrokerRecord": (7, FENCE_BROKER_RECORD),
    "UnfenceBrokerRecord": (8, UNFENCE_BROKER_RECORD),
    "RemoveTopicRecord": (9, REMOVE_TOPIC_RECORD),
    "FeatureLevelRecord": (12, FEATURE_LEVEL_RECORD),
    "ProducerIdsRecord": (15, PRODUCER_IDS_RECORD),
    "AccessControlEntryRecord": (18, ACCESS_CONTROL_ENTRY_RECORD),
    "RemoveAccessControlEntryRecord": (19, REMOVE_ACCESS_CONTROL_ENTRY_RECORD),
    "BrokerRegistrationChangeRecord": (17, BROKER_REGISTRATION_CHANGE_RECORD),
    "NoOpRecord": (20, NO_OP_RECORD),
    "BeginTransactionRecord": (23, BEGIN_TRANSACTION_RECORD),
    "EndTransactionRecord": (24, END_TRANSACTION_RECORD),
    "AbortTransactionRecord": (25, ABORT_TRANSACTION_RECORD),
    "RegisterControllerRecord": (27, REGISTER_CONTROLLER_RECORD),
    "ZkMigrationStateRecord": (21, ZK_MIGRATION_STATE_RECORD),
    "ClearElrRecord": (28, CLEAR_ELR_RECORD),
    "UserScramCredentialRecord": (11, USER_SCRAM_CREDENTIAL_RECORD),
    "RemoveUserScramCredentialRecord": (22, REMOVE_USER_SCRAM_CREDENTIAL_RECORD),
}

# Versions this node writes when none is asked for: the newest ones a Kafka 3.9 reader decodes
# too (Kafka 4.1+ readers know newer versions, which Odradek reads from a migrated log).
WRITE_VERSIONS: dict[str, int] = {
    "RegisterBrokerRecord": 3,
    "BrokerRegistrationChangeRecord": 2,
}

# Record types Kafka writes for features Odradek does not have (delegation tokens): a log
# holding one cannot be taken over without silently dropping security state, so the loader
# refuses to start (see UnsupportedMetadata).
UNSUPPORTED_RECORD_TYPES: dict[int, str] = {
    10: "DelegationTokenRecord",
    26: "RemoveDelegationTokenRecord",
}


class UnsupportedMetadataRecord(SchemaError):
    """A well-framed metadata record of a type Odradek cannot apply (``name``)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"metadata record type {name} is not supported by Odradek")
        self.name = name

RECORD_NAMES: dict[int, str] = {key: name for name, (key, _) in RECORD_TYPES.items()}


def encode_metadata_record(name: str, obj: dict[str, Any], version: int | None = None) -> bytes:
    """Frame and encode one record; ``version`` defaults to the newest one we know."""
    entry = RECORD_TYPES.get(name)
    if entry is None:
        raise SchemaError(f"unknown metadata record type {name!r}")
    api_key, schema = entry
    if version is None:
        version = WRITE_VERSIONS.get(name, schema.max_version)
    elif not schema.min_version <= version <= schema.max_version:
        raise SchemaError(f"{name} has no version {version}")
    out = bytearray()
    write_uvarint(out, FRAME_VERSION)
    write_uvarint(out, api_key)
    write_uvarint(out, version)
    try:
        out += schema.encode(version, obj)
    except SchemaError:
        raise
    except (struct.error, TypeError, ValueError, AttributeError, OverflowError) as e:
        raise SchemaError(f"cannot encode {name}: {e}") from e
    return bytes(out)


def decode_metadata_record(data: Buffer) -> tuple[str, int, dict[str, Any]]:
    """Parse a framed record: (record type name, version, fields)."""
    buf = data if isinstance(data, memoryview) else memoryview(data)
    frame_version, pos = read_uvarint(buf, 0)
    if frame_version != FRAME_VERSION:
        raise SchemaError(f"unsupported metadata record frame version {frame_version}")
    api_key, pos = read_uvarint(buf, pos)
    version, pos = read_uvarint(buf, pos)
    name = RECORD_NAMES.get(api_key)
    if name is None and api_key in UNSUPPORTED_RECORD_TYPES:
        raise UnsupportedMetadataRecord(UNSUPPORTED_RECORD_TYPES[api_key])
    if name is None:
        raise SchemaError(f"unknown metadata record type {api_key}")
    schema = RECORD_TYPES[name][1]
    if not schema.min_version <= version <= schema.max_version:
        raise SchemaError(f"unsupported {name} version {version}")
    fields, end = schema.decode(version, buf, pos)
    if end != len(buf):
        raise SchemaError(f"{len(buf) - end} trailing bytes after {name}")
    return name, version, fields
