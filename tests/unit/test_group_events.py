"""What a classic group's changes write at INFO (odradek.coordinator.group.group_events)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from odradek.coordinator.group.classic_group import ClassicGroup, ClassicGroupState
from odradek.coordinator.group.group_coordinator_config import GroupConfig
from odradek.coordinator.group.group_events import log_changes, membership
from odradek.protocol.errors import Errors

LOGGER = "odradek.coordinator.group.group_coordinator"


def _join(g: ClassicGroup, client: str, now: int, member_id: str = "") -> Any:
    before = membership(g)
    fx = g.join(
        object(), member_id=member_id, group_instance_id=None, require_known_member_id=False,
        client_id=client, client_host="/127.0.0.1", rebalance_timeout_ms=30_000,
        session_timeout_ms=45_000, protocol_type="consumer", protocols=[("range", b"m")],
        now_ms=now,
    )
    log_changes(g, before, now)
    return fx


def _poll(g: ClassicGroup, now: int) -> None:
    before = membership(g)
    g.poll(now)
    log_changes(g, before, now, timers=True)


def test_generations_and_timeouts_are_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    g = ClassicGroup("orders", GroupConfig(initial_rebalance_delay_ms=0), 0, new_member_id=lambda c: f"{c}-id")
    _join(g, "alice", 0)
    _join(g, "bob", 1)
    assert [r.getMessage() for r in caplog.records] == []  # joining: nothing decided yet
    _poll(g, 2)  # a member joined during the (zero) initial delay: it is extended once
    assert caplog.records == []
    _poll(g, 3)  # the join phase ends: generation 1
    assert [r.getMessage() for r in caplog.records] == [
        "Classic group orders: generation 1, protocol type consumer, protocol range, 2 member(s), "
        "leader alice-id, joined: alice-id, bob-id"
    ]
    caplog.clear()
    leader = g.leader_id
    assert leader is not None
    before = membership(g)
    g.sync(object(), member_id=leader, generation_id=1, group_instance_id=None, protocol_type=None,
           protocol_name=None, assignments={}, now_ms=4)
    log_changes(g, before, 4)
    assert caplog.records == []  # a sync changes no membership
    # bob never sends SyncGroup: the rebalance timeout removes him, alice rejoins alone
    _poll(g, 4 + 30_000)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["Member bob-id removed from group orders: no SyncGroup within the rebalance timeout (30000 ms)"]
    caplog.clear()
    _join(g, "alice", 30_005, member_id="alice-id")  # the only member rejoined: generation 2
    assert g.generation_id == 2 and g.state == ClassicGroupState.COMPLETING_REBALANCE
    assert [r.getMessage() for r in caplog.records] == [
        "Classic group orders: generation 2, protocol type consumer, protocol range, 1 member(s), "
        "leader alice-id"
    ]
    caplog.clear()
    # alice's heartbeats stop: after her session timeout she is removed and the group is empty
    before = membership(g)
    g.sync(object(), member_id="alice-id", generation_id=2, group_instance_id=None,
           protocol_type=None, protocol_name=None, assignments={}, now_ms=30_006)
    g.on_group_stored(2, Errors.NONE, 30_006)
    log_changes(g, before, 30_006)
    assert g.state == ClassicGroupState.STABLE
    _poll(g, 30_006 + 45_000)
    assert [r.getMessage() for r in caplog.records] == [
        "Member alice-id removed from group orders: no heartbeat within its session timeout (45000 ms)",
        "Classic group orders: generation 3, no members (Empty)",
    ]
    assert all(r.levelno == logging.INFO for r in caplog.records)
