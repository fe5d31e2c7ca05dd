"""A small KRaft cluster of real ``odradek server`` processes for the fault tests.

:class:`KraftCluster` formats and starts controller-only voters and broker-only nodes on free
loopback ports (or on the addresses a test gives, e.g. inside network namespaces), finds the
active controller with DescribeQuorum, waits for the brokers to register and unfence, and stops
every process it started in its ``close`` (a finalizer: paused processes are resumed first, and
anything that does not stop in time is killed). Every wait here is bounded.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from odradek.network.client import NetworkClient
from odradek.protocol.messages import generated as g

from .support import die_with_parent
from .test_raft_quorum import CLUSTER_ID, _free_ports


class KraftNode:
    """One ``odradek server`` process: a controller-only voter or a broker-only node."""

    def __init__(
        self,
        role: str,
        node_id: int,
        host: str,
        port: int,
        voters: str,
        base: Path,
        overrides: dict[str, str] | None = None,
        netns: str | None = None,
    ) -> None:
        assert role in ("controller", "broker")
        self.role = role
        self.node_id = node_id
        self.host = host
        self.port = port
        self.netns = netns
        self.data = base / f"n{node_id}"
        self.log_path = base / f"n{node_id}.log"
        self.config = base / f"n{node_id}.properties"
        listener = "CONTROLLER" if role == "controller" else "PLAINTEXT"
        props = {
            "process.roles": role,
            "node.id": str(node_id),
            "listeners": f"{listener}://{host}:{port}",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": voters,
            "log.dirs": str(self.data),
            "offsets.topic.replication.factor": "1",
            "group.initial.rebalance.delay.ms": "0",
            **(overrides or {}),
        }
        self.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.terminating = False

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def _prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns] if self.netns else []

    def format(self) -> None:
        subprocess.run(
            [sys.executable, "-m", "odradek.cli.main", "storage", "format", "--config", str(self.config),
             "--cluster-id", CLUSTER_ID],
            check=True, capture_output=True, timeout=60,
        )

    def start(self) -> None:
        assert self.proc is None, f"node {self.node_id} already running"
        with open(self.log_path, "ab") as logf:
            logf.write(f"\n===== start at {time.strftime('%H:%M:%S')} =====\n".encode())
            logf.flush()
            # die_with_parent: a test run killed from outside leaves no server behind (every
            # start happens on the test's main thread).
            self.proc = subprocess.Popen(
                [*self._prefix(), sys.executable, "-m", "odradek.cli.main", "server", "--config", str(self.config)],
                stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent,
            )
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.paused:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None
        self.paused = False
        self.terminating = False

    def terminate(self) -> None:
        """SIGTERM without waiting (a stopped process gets SIGCONT first, or it never sees it).
        Sent once: a second SIGTERM makes ``odradek server`` exit at once, without its
        controlled shutdown."""
        if self.proc is not None and not self.terminating:
            self.resume()
            self.proc.terminate()
            self.terminating = True

    def stop(self, timeout_s: float = 20) -> None:
        if self.proc is None:
            return
        self.terminate()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None
        self.terminating = False

    def log_tail(self, n: int = 3000) -> str:
        try:
            return f"--- node {self.node_id} ---\n" + self.log_path.read_text("utf-8", "replace")[-n:]
        except OSError:
            return ""


async def describe_quorum(host: str, port: int, timeout_s: float = 3) -> dict[str, Any] | None:
    """The partition of a DescribeQuorum answer from the node at ``host:port`` (None: no answer)."""
    client = NetworkClient(host, port)
    try:
        resp = await asyncio.wait_for(
            client.send(g.DESCRIBE_QUORUM, 2, {"topics": [
                {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}),
            timeout_s,
        )
    except (OSError, TimeoutError, ConnectionError):
        return None
    finally:
        try:
            await asyncio.wait_for(client.close(), 2)
        except (OSError, TimeoutError):
            pass
    return dict(resp["topics"][0]["partitions"][0])


def describe_quorum_sync(node: KraftNode, timeout_s: float = 3) -> dict[str, Any] | None:
    return asyncio.run(describe_quorum(node.host, node.port, timeout_s))


class KraftCluster:
    """``controllers`` controller-only voters (ids 1..n) and ``brokers`` broker-only nodes (ids
    101..), all on loopback unless ``controller_hosts`` / ``broker_hosts`` name other addresses
    (and namespaces)."""

    def __init__(
        self,
        base: Path,
        controllers: int = 3,
        brokers: int = 3,
        *,
        controller_overrides: dict[str, str] | None = None,
        broker_overrides: dict[str, str] | None = None,
        controller_hosts: Sequence[tuple[str, str | None]] | None = None,
        broker_hosts: Sequence[tuple[str, str | None]] | None = None,
    ) -> None:
        ports = _free_ports(controllers + brokers)
        hosts = list(controller_hosts or [("127.0.0.1", None)] * controllers)
        bhosts = list(broker_hosts or [("127.0.0.1", None)] * brokers)
        self.voters = ",".join(f"{i + 1}@{hosts[i][0]}:{ports[i]}" for i in range(controllers))
        self.controllers = [
            KraftNode("controller", i + 1, hosts[i][0], ports[i], self.voters, base, controller_overrides,
                      netns=hosts[i][1])
            for i in range(controllers)
        ]
        self.brokers = [
            KraftNode("broker", 101 + i, bhosts[i][0], ports[controllers + i], self.voters, base, broker_overrides,
                      netns=bhosts[i][1])
            for i in range(brokers)
        ]

    @property
    def nodes(self) -> list[KraftNode]:
        return [*self.controllers, *self.brokers]

    @property
    def broker_ids(self) -> set[int]:
        return {b.node_id for b in self.brokers}

    def broker(self, node_id: int) -> KraftNode:
        return next(b for b in self.brokers if b.node_id == node_id)

    def controller(self, node_id: int) -> KraftNode:
        return next(c for c in self.controllers if c.node_id == node_id)

    def logs(self, nodes: Iterable[KraftNode] | None = None) -> str:
        return "\n".join(n.log_tail() for n in (self.nodes if nodes is None else nodes))

    def format(self) -> None:
        for n in self.nodes:
            n.format()

    def start(self) -> None:
        for n in self.nodes:
            if n.proc is None:
                n.start()

    def close(self) -> None:
        """Stop everything: brokers first (their controlled shutdown needs a controller), then
        the controllers; SIGTERM to all of a group at once, then wait (kill after a bound)."""
        for group in (self.brokers, self.controllers):
            for n in group:
                try:
                    n.terminate()
                except OSError:
                    pass
            for n in group:
                n.stop()

    # -- waits ----------------------------------------------------------------------------------

    def find_leader(self, deadline_s: float, above_epoch: int = 0,
                    among: Sequence[KraftNode] | None = None) -> dict[str, Any]:
        """The DescribeQuorum answer of the one controller that says it leads an epoch above
        ``above_epoch`` (asked of the running, unpaused controllers, or of ``among``)."""
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            leaders = []
            for node in among if among is not None else self.controllers:
                if node.proc is None or node.paused:
                    continue
                part = describe_quorum_sync(node)
                if part is not None and part["error_code"] == 0 and part["leader_epoch"] > above_epoch:
                    leaders.append(part)
            if len(leaders) == 1:
                return leaders[0]
            assert len({p["leader_epoch"] for p in leaders}) == len(leaders), f"two leaders of one epoch: {leaders}"
            time.sleep(0.2)
        raise AssertionError(f"no leader above epoch {above_epoch} within {deadline_s}s:\n" + self.logs(self.controllers))

    def wait_brokers(self, through: KraftNode, ids: set[int], deadline_s: float) -> None:
        """Until Metadata through ``through`` lists exactly the unfenced brokers ``ids``."""
        admin = AdminClient({"bootstrap.servers": through.bootstrap})
        end = time.monotonic() + deadline_s
        seen: set[int] = set()
        while time.monotonic() < end:
            try:
                seen = set(admin.list_topics(timeout=3).brokers)
            except KafkaException:
                seen = set()
            if seen == ids:
                return
            time.sleep(0.2)
        raise AssertionError(f"broker {through.node_id} lists brokers {seen}, expected {ids}:\n" + self.logs())

    def wait_ready(self, deadline_s: float = 120) -> None:
        """A leader is elected and every broker sees every broker unfenced."""
        self.find_leader(deadline_s)
        for b in self.brokers:
            self.wait_brokers(b, self.broker_ids, deadline_s)
