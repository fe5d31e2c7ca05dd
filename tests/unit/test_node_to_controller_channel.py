"""NodeToControllerChannel with a fake transport (no sockets): ApiVersions first and the highest
common version, leader changes, NOT_CONTROLLER retry (broker requests) or pass-through (client
requests), disconnects, timeouts, one request in flight in send order, close."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from odradek.network.client import ConnectionClosed
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.protocol.schema import Api
from odradek.server.controller_channel import (
    ControllerRequest,
    ControllerRequestTimeout,
    ForwardingManager,
    InMemoryControllerChannel,
    RequestClient,
)
from odradek.server.kafka_config import KafkaConfig
from odradek.server.node_to_controller_channel import (
    ControllerConnection,
    NodeToControllerChannel,
    broker_controller_channels,
)

ALLOCATE = g.ALLOCATE_PRODUCER_IDS.api_key
HEARTBEAT = g.BROKER_HEARTBEAT.api_key
CLIENT = RequestClient("admin-1", "127.0.0.1")


def run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(fn(), 30))  # type: ignore[arg-type]


class FakeController:
    """One controller node behind the fake transport."""

    def __init__(self, node_id: int, versions: dict[int, tuple[int, int]] | None = None) -> None:
        self.node_id = node_id
        self.versions = versions or {
            k: (api.min_version, api.max_version)
            for k, api in g.DEFINITIONS.items()
            if k in (ALLOCATE, HEARTBEAT, g.BROKER_REGISTRATION.api_key, m.CREATE_TOPICS.api_key)
        }
        self.down = 0  # refuse this many connection attempts / requests
        self.hang = 0  # never answer this many requests
        self.not_controller = 0  # answer NOT_CONTROLLER this many times
        self.delay = 0.0
        self.seen: list[tuple[int, int, dict[str, Any]]] = []  # (api key, version, body)

    def answer(self, api: Api, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.seen.append((api.api_key, version, body))
        if api.api_key == g.API_VERSIONS.api_key:
            keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in self.versions.items()]
            lo, hi = self.versions.get(api.api_key, (0, g.API_VERSIONS.max_version))
            code = Errors.NONE if lo <= version <= hi else Errors.UNSUPPORTED_VERSION
            return {"error_code": code, "api_keys": keys, "throttle_time_ms": 0}
        if self.not_controller > 0:
            self.not_controller -= 1
            if api.api_key == m.CREATE_TOPICS.api_key:
                return {"throttle_time_ms": 0, "topics": [
                    {"name": t["name"], "error_code": Errors.NOT_CONTROLLER} for t in body["topics"]]}
            return {"error_code": Errors.NOT_CONTROLLER}
        return {"error_code": Errors.NONE, "node": self.node_id, "n": body.get("n")}


class FakeNetwork:
    """The ConnectionFactory: connections to FakeControllers, counting requests in flight."""

    def __init__(self, *nodes: FakeController) -> None:
        self.nodes = {n.node_id: n for n in nodes}
        self.in_flight = 0
        self.max_in_flight = 0
        self.connects: list[int] = []

    def connect(self, node: int, host: str, port: int) -> ControllerConnection:
        assert (host, port) == (f"c{node}", 9093)
        self.connects.append(node)
        net = self

        class Conn:
            async def send(self, api: Api, version: int, body: dict[str, Any], timeout: float) -> dict[str, Any]:
                ctl = net.nodes[node]
                net.in_flight += 1
                net.max_in_flight = max(net.max_in_flight, net.in_flight)
                try:
                    await asyncio.sleep(ctl.delay)
                    if ctl.down > 0:
                        ctl.down -= 1
                        raise ConnectionClosed(f"connection to c{node}:9093 refused")
                    if ctl.hang > 0 and api.api_key != g.API_VERSIONS.api_key:
                        ctl.hang -= 1
                        ctl.seen.append((api.api_key, version, body))
                        await asyncio.wait_for(asyncio.Event().wait(), timeout)
                    return ctl.answer(api, version, body)
                finally:
                    net.in_flight -= 1

            async def close(self) -> None:
                return None

        return Conn()


ENDPOINTS = {1: ("c1", 9093), 2: ("c2", 9093), 3: ("c3", 9093)}


def channel(net: FakeNetwork, leader: list[int | None], **kw: Any) -> NodeToControllerChannel:
    kw.setdefault("retry_backoff_ms", 5)
    return NodeToControllerChannel(lambda: leader[0], ENDPOINTS, connect=net.connect, **kw)


def alloc(n: int, client: RequestClient | None = None) -> ControllerRequest:
    return ControllerRequest(ALLOCATE, 0, {"broker_id": 1, "broker_epoch": 5, "n": n}, client)


def test_api_versions_first_then_the_highest_common_version() -> None:
    async def go() -> None:
        ctl = FakeController(1)
        ctl.versions[HEARTBEAT] = (0, 0)  # an older controller: BrokerHeartbeat v0 only
        net = FakeNetwork(ctl)
        ch = channel(net, [1])
        beat = {"broker_id": 1, "broker_epoch": 5, "current_metadata_offset": 0, "want_fence": False,
                "want_shut_down": False}
        resp = await ch.send(ControllerRequest(HEARTBEAT, 1, beat))
        assert resp["node"] == 1
        assert [(k, v) for k, v, _ in ctl.seen] == [(g.API_VERSIONS.api_key, g.API_VERSIONS.max_version), (HEARTBEAT, 0)]
        # ApiVersions once per connection; a broker request goes at the highest common version.
        await ch.send(ControllerRequest(g.BROKER_REGISTRATION.api_key, 0, {"broker_id": 1}))
        assert ctl.seen[-1][:2] == (g.BROKER_REGISTRATION.api_key, g.BROKER_REGISTRATION.max_version)
        # A client's request goes at the client's version; one the controller lacks is refused.
        ok = await ch.send(ControllerRequest(m.CREATE_TOPICS.api_key, 5, {"topics": [], "timeout_ms": 1}, CLIENT))
        assert ok["error_code"] == Errors.NONE and ctl.seen[-1][:2] == (m.CREATE_TOPICS.api_key, 5)
        ctl.versions[m.CREATE_TOPICS.api_key] = (2, 4)
        ch2 = channel(net, [1])
        refused = await ch2.send(ControllerRequest(m.CREATE_TOPICS.api_key, 7, {"topics": [{"name": "t"}]}, CLIENT))
        assert refused["topics"][0]["error_code"] == Errors.UNSUPPORTED_VERSION
        assert [k for k, _, _ in ctl.seen].count(g.API_VERSIONS.api_key) == 2
        await ch.close()
        await ch2.close()

    run(go)


def test_api_versions_asked_again_at_the_controllers_newest_version() -> None:
    async def go() -> None:
        ctl = FakeController(1)
        ctl.versions[g.API_VERSIONS.api_key] = (0, 2)  # an older controller
        net = FakeNetwork(ctl)
        ch = channel(net, [1])
        assert (await ch.send(alloc(1)))["n"] == 1
        assert [(k, v) for k, v, _ in ctl.seen] == [
            (g.API_VERSIONS.api_key, g.API_VERSIONS.max_version), (g.API_VERSIONS.api_key, 2), (ALLOCATE, 0)]
        await ch.close()

    run(go)


def test_not_controller_is_retried_against_the_new_leader(caplog: pytest.LogCaptureFixture) -> None:
    async def go() -> None:
        c1, c2 = FakeController(1), FakeController(2)
        c1.not_controller = 100
        net = FakeNetwork(c1, c2)
        leader: list[int | None] = [1]
        ch = channel(net, leader)
        task = asyncio.ensure_future(ch.send(alloc(7)))
        for _ in range(200):
            if len(c1.seen) >= 3:
                break
            await asyncio.sleep(0.005)
        assert not task.done() and len(c1.seen) >= 3  # retried while node 1 says NOT_CONTROLLER
        leader[0] = 2  # the observer learns the new leader
        resp = await task
        assert (resp["error_code"], resp["node"], resp["n"]) == (Errors.NONE, 2, 7)
        assert ch.active_controller_id() == 2
        await ch.close()

    with caplog.at_level(logging.INFO, logger="odradek.server.node_to_controller_channel"):
        run(go)
    recorded = [r.getMessage() for r in caplog.records if "recorded new KRaft controller" in r.getMessage()]
    assert len(recorded) == 2 and "c1:9093 (id: 1)" in recorded[0] and "c2:9093 (id: 2)" in recorded[1]


def test_forwarded_client_request_gets_not_controller_back() -> None:
    async def go() -> None:
        c1 = FakeController(1)
        c1.not_controller = 1
        net = FakeNetwork(c1)
        fwd = ForwardingManager(channel(net, [1]))
        req = ControllerRequest(m.CREATE_TOPICS.api_key, 7, {"topics": [{"name": "t"}], "timeout_ms": 1}, CLIENT)
        resp = await fwd.forward(req)
        assert resp["topics"] == [{"name": "t", "error_code": Errors.NOT_CONTROLLER}]
        assert [k for k, _, _ in c1.seen].count(m.CREATE_TOPICS.api_key) == 1  # not retried
        await fwd.channel.close()

    run(go)


def test_disconnects_are_retried_and_logged_once_per_episode(caplog: pytest.LogCaptureFixture) -> None:
    async def go() -> None:
        c1 = FakeController(1)
        c1.down = 4
        net = FakeNetwork(c1)
        ch = channel(net, [1])
        resp = await ch.send(alloc(1))
        assert resp["n"] == 1 and c1.down == 0
        c1.down = 2  # a second episode
        assert (await ch.send(alloc(2)))["n"] == 2
        # After a disconnect the channel asks ApiVersions again before the request.
        kinds = [k for k, _, _ in c1.seen]
        assert kinds == [g.API_VERSIONS.api_key, ALLOCATE, g.API_VERSIONS.api_key, ALLOCATE]
        await ch.close()

    with caplog.at_level(logging.INFO, logger="odradek.server.node_to_controller_channel"):
        run(go)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("is unreachable" in s for s in messages) == 2  # once per episode, not per attempt
    assert sum("reachable again" in s for s in messages) == 2


def test_a_new_active_controller_cuts_the_retry_backoff_short() -> None:
    """Failover: the old controller refuses; once the Raft observer names the new one, the
    request goes there at once, not a whole retry.backoff.ms later."""

    async def go() -> None:
        c1, c2 = FakeController(1), FakeController(2)
        c1.down = 1000  # killed
        net = FakeNetwork(c1, c2)
        leader: list[int | None] = [1]
        ch = channel(net, leader, retry_backoff_ms=5000)
        loop = asyncio.get_running_loop()
        sent = asyncio.ensure_future(ch.send(alloc(7)))
        await asyncio.sleep(0.1)  # the attempt to node 1 failed: the 5 s backoff runs
        assert not sent.done()
        leader[0] = 2
        changed = loop.time()
        resp = await asyncio.wait_for(sent, 2)
        assert resp["node"] == 2 and resp["n"] == 7
        assert loop.time() - changed < 1.0
        await ch.close()

    run(go)


def test_a_request_to_a_hung_controller_goes_to_the_new_one_once_it_is_known() -> None:
    """SIGSTOP of the active controller: nothing answers, nothing is refused. Once the Raft
    observer names a new active controller, the request in flight is given up and sent there,
    not after the whole request timeout."""

    async def go() -> None:
        c1, c2 = FakeController(1), FakeController(2)
        net = FakeNetwork(c1, c2)
        leader: list[int | None] = [1]
        ch = channel(net, leader, request_timeout_ms=30_000)
        assert (await ch.send(alloc(1)))["node"] == 1  # connected, versions known
        c1.hang = 1
        loop = asyncio.get_running_loop()
        sent = asyncio.ensure_future(ch.send(alloc(2)))
        await asyncio.sleep(0.2)
        assert not sent.done() and c1.seen[-1][0] == ALLOCATE  # in flight on node 1
        leader[0] = None  # an election: nobody to go to yet, the attempt goes on
        await asyncio.sleep(0.1)
        assert not sent.done()
        leader[0] = 2
        changed = loop.time()
        resp = await asyncio.wait_for(sent, 5)
        assert resp["node"] == 2 and resp["n"] == 2
        assert loop.time() - changed < 1.0
        assert (await ch.send(alloc(3)))["node"] == 2
        await ch.close()

    run(go)


def test_a_request_unanswered_in_time_is_sent_again_then_times_out() -> None:
    async def go() -> None:
        c1, c2 = FakeController(1), FakeController(2)
        c1.hang = 1
        net = FakeNetwork(c1, c2)
        leader: list[int | None] = [1]
        ch = channel(net, leader, request_timeout_ms=50)
        task = asyncio.ensure_future(ch.send(alloc(3)))
        for _ in range(200):
            if c1.seen and c1.seen[-1][0] == ALLOCATE:
                break
            await asyncio.sleep(0.005)
        leader[0] = 2  # the old leader hangs; a new one is elected
        resp = await task
        assert resp["node"] == 2
        await ch.close()
        # Nobody answers at all: the retry timeout ends it; forwarded, that is REQUEST_TIMED_OUT.
        c2.hang = 1000
        ch = channel(net, [2], request_timeout_ms=30, retry_timeout_ms=200)
        with pytest.raises(ControllerRequestTimeout, match="within 200 ms"):
            await ch.send(alloc(4))
        fwd = ForwardingManager(ch)
        out = await fwd.forward(ControllerRequest(m.CREATE_TOPICS.api_key, 7, {"topics": [{"name": "t"}]}, CLIENT))
        assert out["topics"][0]["error_code"] == Errors.REQUEST_TIMED_OUT
        await ch.close()

    run(go)


def test_no_leader_known_waits_for_one_within_the_retry_timeout() -> None:
    async def go() -> None:
        net = FakeNetwork(FakeController(1), FakeController(3))
        leader: list[int | None] = [None]
        ch = channel(net, leader)
        task = asyncio.ensure_future(ch.send(alloc(5)))
        await asyncio.sleep(0.05)
        assert not task.done() and net.connects == []
        leader[0] = 3
        assert (await task)["node"] == 3
        await ch.close()
        ch = channel(net, [None], retry_timeout_ms=50)
        with pytest.raises(ControllerRequestTimeout, match="no active controller known"):
            await ch.send(alloc(6))
        await ch.close()

    run(go)


def test_one_in_flight_in_send_order_with_retries() -> None:
    async def go() -> None:
        c1 = FakeController(1)
        c1.not_controller = 2  # the first request is retried twice: the others wait behind it
        c1.delay = 0.002
        net = FakeNetwork(c1)
        ch = channel(net, [1])
        answers = await asyncio.gather(*(ch.send(alloc(n)) for n in range(6)))
        assert [a["n"] for a in answers] == list(range(6))
        sent = [b["n"] for k, _, b in c1.seen if k == ALLOCATE]
        assert sent == [0, 0, 0, 1, 2, 3, 4, 5]
        assert net.max_in_flight == 1
        await ch.close()

    run(go)


def test_close_fails_what_is_queued() -> None:
    async def go() -> None:
        net = FakeNetwork(FakeController(1))
        ch = channel(net, [None])
        tasks = [asyncio.ensure_future(ch.send(alloc(n))) for n in range(3)]
        await asyncio.sleep(0.02)
        await ch.close()
        for t in tasks:
            with pytest.raises(ControllerRequestTimeout, match="shutting down"):
                await t
        with pytest.raises(ControllerRequestTimeout, match="closed"):
            await ch.send(alloc(9))

    run(go)


def test_the_broker_gets_network_channels_unless_the_quorum_is_this_process() -> None:
    combined = KafkaConfig({"log.dirs": "/nonexistent"})
    local: dict[int, Any] = {1: object()}
    fwd, beat = broker_controller_channels(combined, lambda: 1, local)
    assert isinstance(fwd, InMemoryControllerChannel) and isinstance(beat, InMemoryControllerChannel)
    assert fwd is not beat
    three = KafkaConfig({"log.dirs": "/nonexistent",
                         "controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"})
    fwd, beat = broker_controller_channels(three, lambda: 2, local)
    assert isinstance(fwd, NodeToControllerChannel) and isinstance(beat, NodeToControllerChannel)
    broker_only = KafkaConfig({"process.roles": "broker", "node.id": "4", "listeners": "PLAINTEXT://127.0.0.1:0",
                               "controller.quorum.voters": "1@127.0.0.1:9093", "broker.session.timeout.ms": "300"})
    fwd, beat = broker_controller_channels(broker_only, lambda: None, {})
    assert isinstance(beat, NodeToControllerChannel) and beat.active_controller_id() is None

    async def go() -> None:
        # The heartbeat channel gives up after half the session timeout (KAFKA-14392), the
        # forwarding one keeps the request for its 60 s.
        ask = ControllerRequest(HEARTBEAT, 1, {"broker_id": 4})
        with pytest.raises(ControllerRequestTimeout, match="within 150 ms"):
            await beat.send(ask)
        pending = asyncio.ensure_future(fwd.send(ask))
        await asyncio.sleep(0.2)
        assert not pending.done()
        await fwd.close()
        with pytest.raises(ControllerRequestTimeout, match="shutting down"):
            await pending
        await beat.close()

    run(go)
