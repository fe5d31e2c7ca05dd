"""Control records: the records of a control batch (Kafka's ``ControlRecordType`` / ``ControlRecordUtils``).

A control record's key is ``int16 version, int16 type``; its value depends on the type:

* ABORT (0) / COMMIT (1): an ``EndTxnMarker``: ``int16 version, int32 coordinatorEpoch``;
* LEADER_CHANGE (2), SNAPSHOT_HEADER (3), SNAPSHOT_FOOTER (4), KRAFT_VERSION (5),
  KRAFT_VOTERS (6): a flexible message (``clients/src/main/resources/common/message/
  {LeaderChangeMessage,SnapshotHeaderRecord,SnapshotFooterRecord,KRaftVersionRecord,
  VotersRecord}.json``) encoded at version 0, whose first field is its own ``version``.
"""

from __future__ import annotations

import struct
from typing import Any

from odradek.protocol.schema import A, Buffer, F, S, Schema, SchemaError

ABORT = 0
COMMIT = 1
LEADER_CHANGE = 2
SNAPSHOT_HEADER = 3
SNAPSHOT_FOOTER = 4
KRAFT_VERSION = 5
KRAFT_VOTERS = 6

# Kafka's ControlRecordType enum names, by type id.
CONTROL_TYPE_NAMES: dict[int, str] = {
    ABORT: "ABORT",
    COMMIT: "COMMIT",
    LEADER_CHANGE: "LEADER_CHANGE",
    SNAPSHOT_HEADER: "SNAPSHOT_HEADER",
    SNAPSHOT_FOOTER: "SNAPSHOT_FOOTER",
    KRAFT_VERSION: "KRAFT_VERSION",
    KRAFT_VOTERS: "KRAFT_VOTERS",
}

_VOTER = S(F("voter_id", "int32", "0+"))

LEADER_CHANGE_MESSAGE = Schema(
    "LeaderChangeMessage",
    0,
    0,
    0,
    [
        F("version", "int16", "0+"),
        F("leader_id", "int32", "0+"),
        F("voters", A(_VOTER), "0+"),
        F("granting_voters", A(_VOTER), "0+"),
    ],
)

SNAPSHOT_HEADER_RECORD = Schema(
    "SnapshotHeaderRecord",
    0,
    0,
    0,
    [
        F("version", "int16", "0+"),
        F("last_contained_log_timestamp", "int64", "0+"),
    ],
)

SNAPSHOT_FOOTER_RECORD = Schema(
    "SnapshotFooterRecord",
    0,
    0,
    0,
    [F("version", "int16", "0+")],
)

KRAFT_VERSION_RECORD = Schema(
    "KRaftVersionRecord",
    0,
    0,
    0,
    [
        F("version", "int16", "0+"),
        F("k_raft_version", "int16", "0+"),
    ],
)

VOTERS_RECORD = Schema(
    "VotersRecord",
    0,
    0,
    0,
    [
        F("version", "int16", "0+"),
        F(
            "voters",
            A(
                S(
                    F("voter_id", "int32", "0+"),
                    F("voter_directory_id", "uuid", "0+"),
                    F(
                        "endpoints",
                        A(
                            S(
                                F("name", "string", "0+"),
                                F("host", "string", "0+"),
                                F("port", "uint16", "0+"),
                            )
                        ),
                        "0+",
                    ),
                    F(
                        "k_raft_version_feature",
                        S(
                            F("min_supported_version", "int16", "0+"),
                            F("max_supported_version", "int16", "0+"),
                        ),
                        "0+",
                    ),
                )
            ),
            "0+",
        ),
    ],
)

SCHEMAS: dict[int, Schema] = {
    LEADER_CHANGE: LEADER_CHANGE_MESSAGE,
    SNAPSHOT_HEADER: SNAPSHOT_HEADER_RECORD,
    SNAPSHOT_FOOTER: SNAPSHOT_FOOTER_RECORD,
    KRAFT_VERSION: KRAFT_VERSION_RECORD,
    KRAFT_VOTERS: VOTERS_RECORD,
}

_KEY = struct.Struct(">hh")
_END_TXN_MARKER = struct.Struct(">hi")


def control_key(control_type: int, version: int = 0) -> bytes:
    return _KEY.pack(version, control_type)


def parse_control_type(key: Buffer | None) -> int:
    """The type id in a control record's key (Kafka's ``ControlRecordType.parseTypeId``)."""
    if key is None or len(key) < _KEY.size:
        raise SchemaError(f"invalid control record key of {0 if key is None else len(key)} bytes")
    return int(_KEY.unpack_from(key, 0)[1])


def decode_control_value(control_type: int, value: Buffer) -> dict[str, Any]:
    """The value of a control record of one of the types in :data:`SCHEMAS`."""
    schema = SCHEMAS.get(control_type)
    if schema is None:
        raise SchemaError(f"no schema for control record type {control_type}")
    fields, end = schema.decode(0, value, 0)
    if end != len(value):
        raise SchemaError(f"{len(value) - end} trailing bytes after {schema.name}")
    return fields


def encode_control_value(control_type: int, obj: dict[str, Any]) -> bytes:
    return SCHEMAS[control_type].encode(0, obj)


def decode_end_txn_marker(value: Buffer) -> tuple[int, int]:
    """(version, coordinator epoch) of an ABORT/COMMIT marker's value."""
    if len(value) < _END_TXN_MARKER.size:
        raise SchemaError(f"invalid end transaction marker of {len(value)} bytes")
    version, epoch = _END_TXN_MARKER.unpack_from(value, 0)
    return int(version), int(epoch)


class ControlRecord:
    """A control record the Raft core writes other than the LeaderChangeMessage (which it
    appends as a plain dict): KRaftVersionRecord and VotersRecord (KIP-853)."""

    __slots__ = ("control_type", "data")

    def __init__(self, control_type: int, data: dict[str, Any]) -> None:
        self.control_type = control_type
        self.data = data

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ControlRecord)
            and other.control_type == self.control_type
            and other.data == self.data
        )

    def __hash__(self) -> int:
        return hash(self.control_type)

    def __repr__(self) -> str:
        return f"ControlRecord({CONTROL_TYPE_NAMES.get(self.control_type)}, {self.data})"
