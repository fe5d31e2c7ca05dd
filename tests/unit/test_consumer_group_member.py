"""ConsumerGroupMember's partition sets and record values (consumer_group_member)."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest

from odradek.coordinator.group.consumer_group_member import (
    ConsumerGroupError,
    ConsumerGroupMember,
    MemberState,
    as_uuid,
    assignment_value,
    from_tp_list,
    is_subset,
    new_member_id,
    owns_any,
    tp_list,
)
from odradek.protocol.errors import Errors

T = uuid.UUID("12345678-1234-5678-1234-567812345678")
U = uuid.UUID(int=3)


def test_topic_ids_in_every_spelling() -> None:
    kafka = base64.urlsafe_b64encode(T.bytes).decode().rstrip("=")  # Kafka's Uuid.toString()
    assert as_uuid(T) == as_uuid(T.bytes) == as_uuid(str(T)) == as_uuid(kafka) == T
    with pytest.raises(ConsumerGroupError) as e:
        as_uuid(42)
    assert e.value.code == Errors.INVALID_REQUEST


def test_topic_partitions_round_trip_merge_and_drop_empty() -> None:
    items: list[dict[str, Any]] = [
        {"topic_id": T, "partitions": [2, 0]},
        {"topic_id": str(T), "partitions": [1]},
        {"topic_id": U, "partitions": []},
    ]
    parts = from_tp_list(items)
    assert parts == {T: frozenset({0, 1, 2})}
    assert tp_list(parts) == [{"topic_id": T, "partitions": [0, 1, 2]}]
    assert from_tp_list(None) == {}


def test_ownership_checks_treat_unreported_as_owning() -> None:
    parts = {T: frozenset({0, 1})}
    assert owns_any(None, parts) and is_subset(None, parts)
    assert owns_any({T: frozenset({1, 5})}, parts)
    assert not owns_any({U: frozenset({0})}, parts)
    assert is_subset({T: frozenset({1})}, parts)
    assert not is_subset({T: frozenset({1, 5})}, parts)


def test_record_values_and_equality_helpers() -> None:
    m = ConsumerGroupMember("m", member_epoch=4, previous_member_epoch=3,
                            state=MemberState.UNREVOKED_PARTITIONS,
                            assigned_partitions={T: frozenset({1})},
                            partitions_pending_revocation={T: frozenset({0})})
    assert assignment_value(m) == {
        "member_epoch": 4, "previous_member_epoch": 3, "state": 1,
        "assigned_partitions": [{"topic_id": T, "partitions": [1]}],
        "partitions_pending_revocation": [{"topic_id": T, "partitions": [0]}],
    }
    other = ConsumerGroupMember("m", client_id="x", member_epoch=4, previous_member_epoch=3,
                                state=MemberState.UNREVOKED_PARTITIONS,
                                assigned_partitions={T: frozenset({1})},
                                partitions_pending_revocation={T: frozenset({0})})
    assert m.assignment_equals(other) and not m.metadata_equals(other)


def test_new_member_ids_are_kafka_uuid_strings() -> None:
    a, b = new_member_id(), new_member_id()
    assert a != b and len(a) == 22 and "=" not in a
    assert uuid.UUID(bytes=base64.urlsafe_b64decode(a + "==")).version == 4
