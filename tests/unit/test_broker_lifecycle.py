"""BrokerLifecycleManager's controlled shutdown: the want_shut_down heartbeats go out at once and
then every 50 ms until the controller agrees, not a heartbeat interval apart, so the broker exits
as soon as the controller says so."""

from __future__ import annotations

import asyncio
from typing import Any

from odradek.protocol.messages import generated as g
from odradek.server.broker_lifecycle_manager import BrokerLifecycleManager
from odradek.server.controller_channel import ControllerRequest


class ScriptedController:
    """Registers the broker, unfences it, and approves its controlled shutdown at the
    ``approve_at``-th want_shut_down heartbeat."""

    def __init__(self, approve_at: int) -> None:
        self.approve_at = approve_at
        self.shutdown_heartbeats: list[dict[str, Any]] = []

    async def send(self, request: ControllerRequest) -> dict[str, Any]:
        if request.api_key == g.BROKER_REGISTRATION.api_key:
            return {"error_code": 0, "broker_epoch": 7}
        data = request.data
        if data["want_shut_down"]:
            self.shutdown_heartbeats.append(data)
            done = len(self.shutdown_heartbeats) >= self.approve_at
            return {"error_code": 0, "is_caught_up": True, "is_fenced": done, "should_shut_down": done}
        return {"error_code": 0, "is_caught_up": True, "is_fenced": False, "should_shut_down": False}

    async def close(self) -> None:
        pass


def test_controlled_shutdown_heartbeats_promptly_until_the_controller_agrees() -> None:
    async def go() -> None:
        controller = ScriptedController(approve_at=4)
        offsets = iter(range(100, 200))
        lifecycle = BrokerLifecycleManager(
            node_id=5, cluster_id="c", channel=controller,  # type: ignore[arg-type]
            heartbeat_interval_ms=lambda: 60_000,  # a heartbeat interval far beyond the timeout
            metadata_offset=lambda: next(offsets),
        )
        lifecycle.start([("PLAINTEXT", "127.0.0.1", 9092)], {}, None)
        await asyncio.wait_for(lifecycle.wait_for_unfence(), 5)
        # Approved at the 4th heartbeat, within a 3 s timeout although the interval is 60 s.
        assert await lifecycle.controlled_shutdown(3000)
        assert len(controller.shutdown_heartbeats) == 4
        assert all(h["broker_id"] == 5 and h["broker_epoch"] == 7 for h in controller.shutdown_heartbeats)
        # Each carries the metadata offset applied when it left.
        offs = [h["current_metadata_offset"] for h in controller.shutdown_heartbeats]
        assert offs == sorted(offs) and len(set(offs)) == 4
        assert lifecycle.is_fenced
        await lifecycle.close()

    asyncio.run(go())


def test_controlled_shutdown_gives_up_at_its_timeout() -> None:
    async def go() -> None:
        controller = ScriptedController(approve_at=10**6)
        lifecycle = BrokerLifecycleManager(
            node_id=5, cluster_id="c", channel=controller,  # type: ignore[arg-type]
            heartbeat_interval_ms=lambda: 500, metadata_offset=lambda: 1,
        )
        lifecycle.start([("PLAINTEXT", "127.0.0.1", 9092)], {}, None)
        await asyncio.wait_for(lifecycle.wait_for_unfence(), 5)
        assert not await lifecycle.controlled_shutdown(300)
        assert 2 <= len(controller.shutdown_heartbeats) <= 8  # ~every 50 ms for 300 ms
        await lifecycle.close()

    asyncio.run(go())


def test_registration_names_each_listeners_security_protocol() -> None:
    """Kafka's SecurityProtocol ids in BrokerRegistration: PLAINTEXT 0, SSL 1."""
    registrations: list[dict[str, Any]] = []

    class Recording(ScriptedController):
        async def send(self, request: ControllerRequest) -> dict[str, Any]:
            if request.api_key == g.BROKER_REGISTRATION.api_key:
                registrations.append(request.data)
            return await super().send(request)

    async def go() -> None:
        lifecycle = BrokerLifecycleManager(
            node_id=5, cluster_id="c", channel=Recording(approve_at=1),  # type: ignore[arg-type]
            heartbeat_interval_ms=lambda: 500, metadata_offset=lambda: 1,
        )
        lifecycle.start([("PLAINTEXT", "127.0.0.1", 9092), ("SSL", "127.0.0.1", 9093)], {}, None,
                        security_protocols={"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"})
        await asyncio.wait_for(lifecycle.wait_for_unfence(), 5)
        await lifecycle.close()

    asyncio.run(go())
    assert [(ep["name"], ep["security_protocol"]) for ep in registrations[0]["listeners"]] == [
        ("PLAINTEXT", 0), ("SSL", 1)]
