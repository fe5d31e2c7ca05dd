"""ZkAdminChannel's DeleteTopics (Kafka 3.9's ZooKeeper-mode handleDeleteTopicsRequest): topic ids
resolved to names, Kafka's per-topic errors, the request's topic id echoed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.server.controller_channel import ControllerRequest
from odradek.server.zk_admin_channel import ZkAdminChannel
from odradek.server.zk_admin_manager import TopicResult

ZERO = uuid.UUID(int=0)
KNOWN = uuid.uuid4()


class FakeManager:
    def __init__(self, enabled: bool = True) -> None:
        self.delete_topic_enable = enabled
        self.deleted: list[list[str]] = []

    async def delete_topics(self, topics: Sequence[str], timeout_ms: int) -> list[TopicResult]:
        self.deleted.append(list(topics))
        return [TopicResult(t) if t == "orders" else TopicResult(t, Errors.UNKNOWN_TOPIC_OR_PARTITION) for t in topics]


def delete(manager: FakeManager, version: int, body: dict[str, Any]) -> list[tuple[Any, ...]]:
    channel = ZkAdminChannel(manager, None, {KNOWN: "orders"}.get)  # type: ignore[arg-type]
    resp = asyncio.run(channel.send(ControllerRequest(m.DELETE_TOPICS.api_key, version, {**body, "timeout_ms": 1000})))
    return [(r["name"], r["topic_id"], r["error_code"]) for r in resp["responses"]]


def test_topic_ids_resolved_and_unknown_ones_refused() -> None:
    manager = FakeManager()
    got = delete(manager, 6, {"topics": [{"name": None, "topic_id": KNOWN}, {"name": None, "topic_id": (u := uuid.uuid4())},
                                         {"name": "gone", "topic_id": ZERO}]})
    assert got == [("orders", KNOWN, Errors.NONE), (None, u, Errors.UNKNOWN_TOPIC_ID),
                   ("gone", ZERO, Errors.UNKNOWN_TOPIC_OR_PARTITION)]
    assert manager.deleted == [["orders", "gone"]]


def test_a_name_and_an_id_together_fail_the_whole_request() -> None:
    manager = FakeManager()
    got = delete(manager, 6, {"topics": [{"name": "orders", "topic_id": KNOWN}, {"name": "other", "topic_id": ZERO}]})
    assert got == [("orders", KNOWN, Errors.INVALID_REQUEST), ("other", ZERO, Errors.INVALID_REQUEST)]
    assert manager.deleted == []


def test_deletion_disabled_is_invalid_request_below_v3() -> None:
    manager = FakeManager(enabled=False)
    assert delete(manager, 2, {"topic_names": ["orders"]}) == [("orders", ZERO, Errors.INVALID_REQUEST)]
    assert manager.deleted == []
