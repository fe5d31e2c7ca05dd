"""The consumer embedded protocol (``protocol_type="consumer"``): subscription and assignment bytes.

The broker never needs these to run a classic group -- it moves them as opaque bytes -- but
OffsetDelete (GROUP_SUBSCRIBED_TO_TOPIC), offset expiry of subscribed topics and the ``groups``
tool read them. Versions newer than the ones known here are read as the newest known version
(fields are only ever appended).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from odradek.protocol.schema import A, F, S, Schema, SchemaError

_TOPIC_PARTITIONS = A(S(F("topic", "string", "0+"), F("partitions", A("int32"), "0+")))

SUBSCRIPTION = Schema(
    "ConsumerProtocolSubscription",
    0,
    3,
    10000,
    [
        F("topics", A("string"), "0+"),
        F("user_data", "bytes", "0+", nullable="0+", default="null"),
        F("owned_partitions", _TOPIC_PARTITIONS, "1+"),
        F("generation_id", "int32", "2+", default="-1"),
        F("rack_id", "string", "3+", nullable="3+", default="null"),
    ],
)

ASSIGNMENT = Schema(
    "ConsumerProtocolAssignment",
    0,
    3,
    10000,
    [
        F("assigned_partitions", _TOPIC_PARTITIONS, "0+"),
        F("user_data", "bytes", "0+", nullable="0+", default="null"),
    ],
)

_I16 = struct.Struct(">h")


@dataclass
class Subscription:
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: dict[str, list[int]] = field(default_factory=dict)
    generation_id: int = -1
    rack_id: str | None = None


def _read(schema: Schema, buf: bytes) -> dict[str, object]:
    if len(buf) < 2:
        raise SchemaError(f"{schema.name} too short")
    version = _I16.unpack_from(buf, 0)[0]
    if version < 0:
        raise SchemaError(f"{schema.name} has a negative version")
    d, _ = schema.decode(min(version, schema.max_version), buf, 2)
    return d


def parse_subscription(buf: bytes) -> Subscription:
    d = _read(SUBSCRIPTION, buf)
    owned = {tp["topic"]: list(tp["partitions"]) for tp in d["owned_partitions"]}  # type: ignore[attr-defined]
    return Subscription(
        list(d["topics"]),  # type: ignore[call-overload]
        d["user_data"],  # type: ignore[arg-type]
        owned,
        int(d["generation_id"]),  # type: ignore[call-overload]
        d["rack_id"],  # type: ignore[arg-type]
    )


def parse_assignment(buf: bytes) -> dict[str, list[int]]:
    """Assigned partitions by topic (empty for an empty assignment)."""
    if not buf:
        return {}
    d = _read(ASSIGNMENT, buf)
    return {tp["topic"]: list(tp["partitions"]) for tp in d["assigned_partitions"]}  # type: ignore[attr-defined]


def encode_subscription(topics: list[str], version: int = 0, user_data: bytes | None = None) -> bytes:
    return _I16.pack(version) + SUBSCRIPTION.encode(version, {"topics": topics, "user_data": user_data})


def encode_assignment(assigned: dict[str, list[int]], version: int = 0) -> bytes:
    parts = [{"topic": t, "partitions": p} for t, p in assigned.items()]
    return _I16.pack(version) + ASSIGNMENT.encode(version, {"assigned_partitions": parts})
