"""One controller and three brokers as real ``odradek server`` processes on loopback, for the
election and reassignment tests: start, kill -9 and restart brokers, read partition state with
confluent-kafka's AdminClient, send raw requests, and run the ``odradek`` tools."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from odradek.network.client import NetworkClient
from odradek.protocol.schema import Api

from .test_raft_quorum import Controller, _free_ports

FAST_FENCING = (
    "broker.heartbeat.interval.ms=300\n"
    "broker.session.timeout.ms=2500\n"
)


class Node(Controller):
    def __init__(self, node_id: int, port: int, voters: str, base: Path, config: str) -> None:
        super().__init__(node_id, port, voters, base)
        self.config.write_text(config)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


class ReplicationCluster:
    """Controller 0 and brokers 1, 2, 3. ``controller_extra``: more controller properties."""

    def __init__(
        self, base: Path, controller_extra: str = "", broker_extra: str = "", racks: dict[int, str] | None = None
    ) -> None:
        ports = _free_ports(4)
        voters = f"0@127.0.0.1:{ports[0]}"
        common = (
            "controller.listener.names=CONTROLLER\n"
            f"controller.quorum.voters={voters}\n"
            + FAST_FENCING
        )
        self.controller = Node(0, ports[0], voters, base, (
            "process.roles=controller\nnode.id=0\n"
            f"listeners=CONTROLLER://127.0.0.1:{ports[0]}\n"
            f"log.dirs={base / 'c0'}\n" + common + controller_extra
        ))
        self.brokers = {
            i: Node(i, ports[i], voters, base, (
                f"process.roles=broker\nnode.id={i}\n"
                f"listeners=PLAINTEXT://127.0.0.1:{ports[i]}\n"
                f"log.dirs={base / f'c{i}'}\n"
                "offsets.topic.replication.factor=1\n" + common + broker_extra
                + (f"broker.rack={racks[i]}\n" if racks and i in racks else "")
            ))
            for i in (1, 2, 3)
        }

    @property
    def nodes(self) -> list[Node]:
        return [self.controller, *self.brokers.values()]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self) -> None:
        for n in self.nodes:
            n.format()
        for n in self.nodes:
            n.start()
        self.wait_for_brokers({1, 2, 3}, 90)

    def stop(self) -> None:
        for n in self.brokers.values():
            if n.proc is not None:
                n.proc.send_signal(signal.SIGCONT)
        for n in self.brokers.values():
            if n.proc is not None:
                n.proc.terminate()
        for n in self.brokers.values():
            n.stop()
        self.controller.stop()

    def pause(self, broker: int) -> None:
        proc = self.brokers[broker].proc
        assert proc is not None
        proc.send_signal(signal.SIGSTOP)

    def resume(self, broker: int) -> None:
        proc = self.brokers[broker].proc
        assert proc is not None
        proc.send_signal(signal.SIGCONT)

    def logs(self) -> str:
        return "\n".join(f"--- node {n.node_id}\n{n.log_tail()}" for n in self.nodes)

    def admin(self) -> AdminClient:
        live = [b.bootstrap for b in self.brokers.values() if b.proc is not None]
        return AdminClient({"bootstrap.servers": ",".join(live)})

    def wait_for_brokers(self, ids: set[int], deadline_s: float) -> None:
        end = time.monotonic() + deadline_s
        seen: set[int] = set()
        while time.monotonic() < end:
            try:
                seen = set(self.admin().list_topics(timeout=2).brokers)
            except KafkaException:
                seen = set()
            if seen == ids:
                return
            time.sleep(0.2)
        raise AssertionError(f"live brokers {seen}, expected {ids}:\n{self.logs()}")

    def partitions(self, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
        """partition -> (leader, replicas, isr), from Metadata."""
        md = self.admin().list_topics(topic=topic, timeout=5).topics[topic]
        if md.error is not None:
            raise AssertionError(f"{topic}: {md.error}")
        return {p: (pm.leader, list(pm.replicas), list(pm.isrs)) for p, pm in md.partitions.items()}

    def wait_for(self, topic: str, check: Any, deadline_s: float = 30, what: str = "") -> dict[int, tuple[int, list[int], list[int]]]:
        end = time.monotonic() + deadline_s
        state: dict[int, tuple[int, list[int], list[int]]] = {}
        while time.monotonic() < end:
            try:
                state = self.partitions(topic)
                if check(state):
                    return state
            except (KafkaException, AssertionError, KeyError):
                pass
            time.sleep(0.2)
        raise AssertionError(f"{topic} never {what}: last {state}\n{self.logs()}")

    def send(self, api: Api, version: int, body: dict[str, Any], broker: int = 1) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            client = await NetworkClient("127.0.0.1", self.brokers[broker].port).connect()
            try:
                return await asyncio.wait_for(client.send(api, version, body), 30)
            finally:
                await client.close()

        return asyncio.run(go())

    def odradek(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "odradek.cli.main", *args],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"odradek {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result
