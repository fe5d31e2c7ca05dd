"""A member of a KIP-848 consumer group (Kafka's ``ConsumerGroupMember`` and ``MemberState``).

Members are immutable: every change makes a new one, which is what the group's records describe
(``ConsumerGroupMemberMetadata`` for the metadata, ``ConsumerGroupCurrentMemberAssignment`` for
the epochs, the state and the partitions). Partitions are kept as topic id -> frozenset of
partition numbers (:data:`Partitions`), without empty entries.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from odradek.protocol.errors import Errors

# ConsumerGroupHeartbeat's member epochs for a leaving member (a static one keeps its partitions).
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

Partitions = dict[uuid.UUID, frozenset[int]]


class ConsumerGroupError(Exception):
    """A heartbeat failed: becomes ``error_code``/``error_message`` in the response."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = int(code)
        self.message = message


class MemberState(IntEnum):
    """Reconciliation state of a member (Kafka's ``MemberState``; the value is what is stored)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclass(frozen=True)
class ConsumerGroupMember:
    member_id: str
    # Metadata (ConsumerGroupMemberMetadata record).
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    # Current assignment (ConsumerGroupCurrentMemberAssignment record).
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned_partitions: Partitions = field(default_factory=dict)
    partitions_pending_revocation: Partitions = field(default_factory=dict)

    def metadata_equals(self, other: ConsumerGroupMember) -> bool:
        return metadata_value(self) == metadata_value(other)

    def assignment_equals(self, other: ConsumerGroupMember) -> bool:
        return assignment_value(self) == assignment_value(other)


def metadata_value(m: ConsumerGroupMember) -> dict[str, Any]:
    """The value of the member's ``ConsumerGroupMemberMetadata`` record."""
    return {
        "instance_id": m.instance_id,
        "rack_id": m.rack_id,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "subscribed_topic_names": list(m.subscribed_topic_names),
        "subscribed_topic_regex": m.subscribed_topic_regex,
        "rebalance_timeout_ms": m.rebalance_timeout_ms,
        "server_assignor": m.server_assignor,
        "classic_member_metadata": None,
    }


def assignment_value(m: ConsumerGroupMember) -> dict[str, Any]:
    """The value of the member's ``ConsumerGroupCurrentMemberAssignment`` record."""
    return {
        "member_epoch": m.member_epoch,
        "previous_member_epoch": m.previous_member_epoch,
        "state": int(m.state),
        "assigned_partitions": tp_list(m.assigned_partitions),
        "partitions_pending_revocation": tp_list(m.partitions_pending_revocation),
    }


# -- partitions ---------------------------------------------------------------------------------


def clean(parts: Mapping[uuid.UUID, Iterable[int]]) -> Partitions:
    """``parts`` as :data:`Partitions`: frozensets, empty topics dropped."""
    out: Partitions = {}
    for tid, ps in parts.items():
        s = frozenset(ps)
        if s:
            out[tid] = s
    return out


def tp_list(parts: Mapping[uuid.UUID, Iterable[int]]) -> list[dict[str, Any]]:
    """Partitions as the ``topic_partitions`` list of requests, responses and records."""
    return [
        {"topic_id": tid, "partitions": sorted(ps)}
        for tid, ps in sorted(parts.items(), key=lambda kv: str(kv[0]))
        if ps
    ]


def as_uuid(v: Any) -> uuid.UUID:
    """A topic id as decoded (UUID, 16 bytes, or a string in either of Kafka's spellings)."""
    if isinstance(v, uuid.UUID):
        return v
    if isinstance(v, bytes | bytearray | memoryview):
        return uuid.UUID(bytes=bytes(v))
    if isinstance(v, str):
        try:
            return uuid.UUID(v)
        except ValueError:
            return uuid.UUID(bytes=base64.urlsafe_b64decode(v + "=" * (-len(v) % 4)))
    raise ConsumerGroupError(Errors.INVALID_REQUEST, f"Invalid topic id {v!r}.")


def from_tp_list(items: Iterable[Mapping[str, Any]] | None) -> Partitions:
    """The inverse of :func:`tp_list` (topics may repeat)."""
    out: dict[uuid.UUID, set[int]] = {}
    for it in items or ():
        out.setdefault(as_uuid(it["topic_id"]), set()).update(int(p) for p in it["partitions"])
    return clean(out)


def owns_any(owned: Partitions | None, parts: Partitions) -> bool:
    """Whether the member still reports any of ``parts``; not reporting counts as owning."""
    if owned is None:
        return True
    return any(owned.get(tid, frozenset()) & ps for tid, ps in parts.items())


def is_subset(owned: Partitions | None, parts: Partitions) -> bool:
    if owned is None:
        return True
    return all(ps <= parts.get(tid, frozenset()) for tid, ps in owned.items())


def new_member_id() -> str:
    """Kafka's ``Uuid.toString()`` of a random id: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
