"""Controller failover with real processes: three controller-only ``odradek server`` voters and
one broker on loopback, with Kafka's default ``controller.quorum.*`` timeouts. Three times over,
the active controller is killed with SIGKILL: the two others elect a new leader at a higher epoch
through KIP-996 pre-votes on the wire (Vote v2, advertised by the controller listener), and
CreateTopics through the broker succeeds again; the killed controller is restarted and rejoins
before the next round. How long each failover took is printed, never asserted
(``benchmarks/kraft_failover.py`` measures it)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.network.client import NetworkClient
from odradek.protocol import messages as m

from .kraft_processes import Broker, _stop_all, _wait_for_brokers
from .test_raft_quorum import Controller, _free_ports, describe_quorum, find_leader


def _create_until_ok(admin: AdminClient, name: str, deadline_s: float) -> float:
    """Seconds until CreateTopics of ``name`` succeeded (each attempt bounded)."""
    start = time.monotonic()
    last: Exception | None = None
    while time.monotonic() < start + deadline_s:
        fut = admin.create_topics([NewTopic(name, 1, 1)], request_timeout=5, operation_timeout=5)[name]
        try:
            fut.result(timeout=8)
            return time.monotonic() - start
        except Exception as e:  # noqa: BLE001 - retried until the deadline, reported below
            last = e
            if "TOPIC_ALREADY_EXISTS" in str(e):
                return time.monotonic() - start
            time.sleep(0.05)
    raise AssertionError(f"CreateTopics {name} did not succeed in {deadline_s}s: {last}")


async def _vote_versions(port: int) -> tuple[int, int] | None:
    async with NetworkClient("127.0.0.1", port) as c:
        resp = await c.send(m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    for a in resp["api_keys"]:
        if a["api_key"] == 52:
            return a["min_version"], a["max_version"]
    return None


async def _caught_up(controllers: list[Controller], deadline_s: float) -> None:
    """Every voter's log end offset reached the leader's high watermark."""
    end = time.monotonic() + deadline_s
    part = None
    while time.monotonic() < end:
        for c in controllers:
            part = await describe_quorum(c.port)
            if part is not None and part["error_code"] == 0:
                hw = part["high_watermark"]
                if all(v["log_end_offset"] >= hw >= 0 for v in part["current_voters"]):
                    return
        await asyncio.sleep(0.2)
    raise AssertionError(f"voters not caught up: {part}")


@pytest.mark.timeout(300)
def test_kill_9_of_the_active_controller_fails_over_with_pre_votes(tmp_path: Path) -> None:
    ports = _free_ports(4)
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports[:3]))
    controllers = [Controller(i + 1, p, voters, tmp_path) for i, p in enumerate(ports[:3])]
    broker = Broker(101, ports[3], voters, tmp_path)
    nodes: list[Controller] = [*controllers, broker]
    for n in nodes:
        n.format()
    for n in nodes:
        n.start()
    try:
        _wait_for_brokers(broker, {101}, 90, nodes)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        _create_until_ok(admin, "before-failover", 60)
        assert asyncio.run(_vote_versions(controllers[0].port)) == (0, 2)

        timings = []
        for round_ in range(3):
            asyncio.run(_caught_up(controllers, 60))
            first = asyncio.run(find_leader(controllers, 30))
            victim = controllers[first["leader_id"] - 1]
            marks = {c.node_id: c.log_path.stat().st_size for c in controllers}
            victim.kill()
            took = _create_until_ok(admin, f"after-kill-{round_}", 60)
            timings.append(took)
            after = asyncio.run(find_leader(controllers, 30, above_epoch=first["leader_epoch"]))
            assert after["leader_id"] != victim.node_id
            # The new leader stood after a pre-vote (KIP-996) its peer granted over the wire.
            new_log = controllers[after["leader_id"] - 1].log_path.read_bytes()[marks[after["leader_id"]]:]
            text = new_log.decode("utf-8", "replace")
            assert "prospective in epoch" in text and f"leader of epoch {after['leader_epoch']}" in text, text[-3000:]
            print(f"round {round_}: kill -9 of controller {victim.node_id} (epoch {first['leader_epoch']}) -> "
                  f"leader {after['leader_id']} (epoch {after['leader_epoch']}); CreateTopics through the "
                  f"broker succeeded after {took:.3f}s")
            victim.start()
        print("failover times: " + ", ".join(f"{t:.3f}s" for t in timings))
        # The broker serves them once its metadata log has them (it follows the new leaders).
        wanted = {f"after-kill-{i}" for i in range(3)}
        end = time.monotonic() + 30
        topics = set(admin.list_topics(timeout=10).topics)
        while not wanted <= topics and time.monotonic() < end:
            time.sleep(0.2)
            topics = set(admin.list_topics(timeout=10).topics)
        assert wanted <= topics, topics
    finally:
        _stop_all([broker], controllers)
