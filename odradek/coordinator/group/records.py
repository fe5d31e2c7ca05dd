"""Offset commits and classic group metadata: the records of ``__consumer_offsets`` with key
versions 0-2 (the KIP-848 consumer group records, 3-8, are in
:mod:`~odradek.coordinator.group.consumer_group_records`).

Written from Kafka's group-coordinator record schemas. A key starts with an int16 key version that
says what the record is (0/1 = an offset commit, 2 = classic group metadata); a value starts with
an int16 value version. A record with a null value (a tombstone) deletes its key; compaction then
removes it for good.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol.schema import A, F, S, Schema, SchemaError

NEVER_FLEXIBLE = 10000

OFFSET_COMMIT_KEY = Schema(
    "OffsetCommitKey",
    0,
    1,
    NEVER_FLEXIBLE,
    [
        F("group", "string", "0-1"),
        F("topic", "string", "0-1"),
        F("partition", "int32", "0-1"),
    ],
)

OFFSET_COMMIT_VALUE = Schema(
    "OffsetCommitValue",
    0,
    4,
    4,
    [
        F("offset", "int64", "0+"),
        F("leader_epoch", "int32", "3+", default="-1"),
        F("metadata", "string", "0+"),
        F("commit_timestamp", "int64", "0+"),
        F("expire_timestamp", "int64", "1", default="-1"),
    ],
)

GROUP_METADATA_KEY = Schema(
    "GroupMetadataKey",
    2,
    2,
    NEVER_FLEXIBLE,
    [F("group", "string", "2")],
)

MEMBER_METADATA = S(
    F("member_id", "string", "0+"),
    F("group_instance_id", "string", "3+", nullable="3+", default="null"),
    F("client_id", "string", "0+"),
    F("client_host", "string", "0+"),
    F("rebalance_timeout", "int32", "1+", default="-1"),
    F("session_timeout", "int32", "0+"),
    F("subscription", "bytes", "0+"),
    F("assignment", "bytes", "0+"),
)

GROUP_METADATA_VALUE = Schema(
    "GroupMetadataValue",
    0,
    4,
    4,
    [
        F("protocol_type", "string", "0+"),
        F("generation", "int32", "0+"),
        F("protocol", "string", "0+", nullable="0+"),
        F("leader", "string", "0+", nullable="0+"),
        F("current_state_timestamp", "int64", "2+", default="-1"),
        F("members", A(MEMBER_METADATA), "0+"),
    ],
)

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
# Value versions we write: offset commit v3 (leader epoch, no expire timestamp), group v3.
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1
    # Where the commit's record is in the log (-1: not written yet): of two commits of one
    # partition the one later in the log wins when a transaction's commits are materialised.
    record_offset: int = field(default=-1, compare=False)


@dataclass
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass
class GroupRecord:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberRecord] = field(default_factory=list)


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    body = OFFSET_COMMIT_KEY.encode(
        OFFSET_COMMIT_KEY_VERSION, {"group": group, "topic": topic, "partition": partition}
    )
    return _I16.pack(OFFSET_COMMIT_KEY_VERSION) + body


def offset_commit_value(o: OffsetAndMetadata) -> bytes:
    version = OFFSET_COMMIT_VALUE_VERSION if o.expire_timestamp < 0 else 1
    body = OFFSET_COMMIT_VALUE.encode(
        version,
        {
            "offset": o.offset,
            "leader_epoch": o.leader_epoch,
            "metadata": o.metadata,
            "commit_timestamp": o.commit_timestamp,
            "expire_timestamp": o.expire_timestamp,
        },
    )
    return _I16.pack(version) + body


def group_metadata_key(group: str) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + GROUP_METADATA_KEY.encode(
        GROUP_METADATA_KEY_VERSION, {"group": group}
    )


def group_metadata_value(g: GroupRecord) -> bytes:
    obj: dict[str, Any] = {
        "protocol_type": g.protocol_type,
        "generation": g.generation,
        "protocol": g.protocol,
        "leader": g.leader,
        "current_state_timestamp": g.current_state_timestamp,
        "members": [m.__dict__ for m in g.members],
    }
    return _I16.pack(GROUP_METADATA_VALUE_VERSION) + GROUP_METADATA_VALUE.encode(
        GROUP_METADATA_VALUE_VERSION, obj
    )


def _version(buf: bytes) -> int:
    if len(buf) < 2:
        raise SchemaError("coordinator record too short for its version")
    return int(_I16.unpack_from(buf, 0)[0])


def parse_key(buf: bytes) -> OffsetKey | GroupKey | None:
    """The record's key, or None for key versions this coordinator does not know (KIP-848's
    consumer-group records and others, which a later reader may understand)."""
    v = _version(buf)
    if v in (0, 1):
        d, _ = OFFSET_COMMIT_KEY.decode(v, buf, 2)
        return OffsetKey(d["group"], d["topic"], d["partition"])
    if v == GROUP_METADATA_KEY_VERSION:
        d, _ = GROUP_METADATA_KEY.decode(v, buf, 2)
        return GroupKey(d["group"])
    return None


def parse_offset_value(buf: bytes) -> OffsetAndMetadata:
    v = min(_version(buf), OFFSET_COMMIT_VALUE.max_version)
    d, _ = OFFSET_COMMIT_VALUE.decode(v, buf, 2)
    return OffsetAndMetadata(
        d["offset"], d["leader_epoch"], d["metadata"], d["commit_timestamp"], d["expire_timestamp"]
    )


def parse_group_value(buf: bytes) -> GroupRecord:
    v = min(_version(buf), GROUP_METADATA_VALUE.max_version)
    d, _ = GROUP_METADATA_VALUE.decode(v, buf, 2)
    return GroupRecord(
        d["protocol_type"],
        d["generation"],
        d["protocol"],
        d["leader"],
        d["current_state_timestamp"],
        [MemberRecord(**m) for m in d["members"]],
    )
