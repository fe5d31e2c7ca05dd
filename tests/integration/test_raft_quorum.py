"""A KRaft quorum of three controller-only ``odradek server`` processes on loopback: one leader is
elected (DescribeQuorum on the controller listener), kill -9 of the leader gives a new leader at
a higher epoch, and the killed node, restarted, rejoins as a follower and catches up (its log end
offset reaches the leader's high watermark); SIGTERM of a leader hands over with EndQuorumEpoch;
the whole quorum killed and restarted from disk elects again and keeps what was committed."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from odradek.network.client import NetworkClient
from odradek.protocol.messages import generated as g

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Controller:
    def __init__(self, node_id: int, port: int, voters: str, base: Path) -> None:
        self.node_id = node_id
        self.port = port
        self.data = base / f"c{node_id}"
        self.log_path = base / f"c{node_id}.log"
        self.config = base / f"c{node_id}.properties"
        self.config.write_text(
            "process.roles=controller\n"
            f"node.id={node_id}\n"
            f"listeners=CONTROLLER://127.0.0.1:{port}\n"
            "controller.listener.names=CONTROLLER\n"
            f"controller.quorum.voters={voters}\n"
            f"log.dirs={self.data}\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def format(self) -> None:
        subprocess.run(
            [sys.executable, "-m", "odradek.cli.main", "storage", "format", "--config", str(self.config),
             "--cluster-id", CLUSTER_ID],
            check=True, capture_output=True, timeout=60,
        )

    def start(self) -> None:
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "odradek.cli.main", "server", "--config", str(self.config)],
                stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.proc = None

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text("utf-8", "replace")[-3000:]
        except OSError:
            return ""


async def describe_quorum(port: int) -> dict[str, Any] | None:
    """The partition of a DescribeQuorum answer from the node on ``port`` (None: unreachable)."""
    client = NetworkClient("127.0.0.1", port)
    try:
        resp = await asyncio.wait_for(
            client.send(g.DESCRIBE_QUORUM, 2, {"topics": [
                {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}),
            5,
        )
    except (OSError, TimeoutError):
        return None
    finally:
        await client.close()
    return dict(resp["topics"][0]["partitions"][0])


async def find_leader(nodes: list[Controller], deadline_s: float, above_epoch: int = 0) -> dict[str, Any]:
    """The DescribeQuorum answer of the one node that says it leads an epoch above ``above_epoch``."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        leaders = []
        for node in nodes:
            if node.proc is None:
                continue
            part = await describe_quorum(node.port)
            if part is not None and part["error_code"] == 0 and part["leader_epoch"] > above_epoch:
                leaders.append(part)
        if len(leaders) == 1:
            return leaders[0]
        assert len({p["leader_epoch"] for p in leaders}) == len(leaders), f"two leaders of one epoch: {leaders}"
        await asyncio.sleep(0.1)
    raise AssertionError("no leader elected:\n" + "\n".join(n.log_tail() for n in nodes))


@pytest.mark.timeout(180)
def test_three_controllers_elect_fail_over_and_rejoin(tmp_path: Path) -> None:
    ports = _free_ports(3)
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
    nodes = [Controller(i + 1, p, voters, tmp_path) for i, p in enumerate(ports)]
    for n in nodes:
        n.format()
    for n in nodes:
        n.start()

    async def run() -> None:
        first = await find_leader(nodes, 60)
        leader_id, epoch = first["leader_id"], first["leader_epoch"]
        assert sorted(v["replica_id"] for v in first["current_voters"]) == [1, 2, 3]
        # The leader's LeaderChangeMessage (and the controller's bootstrap records) commit: a
        # majority has them.
        for _ in range(100):
            first = await describe_quorum(nodes[leader_id - 1].port) or first
            if first["high_watermark"] > 0:
                break
            await asyncio.sleep(0.1)
        assert first["high_watermark"] > 0
        # Non-leaders answer NOT_LEADER_OR_FOLLOWER (6) to DescribeQuorum.
        other = next(n for n in nodes if n.node_id != leader_id)
        part = await describe_quorum(other.port)
        assert part is not None and part["error_code"] == 6

        old = nodes[leader_id - 1]
        old.kill()
        killed_at = time.monotonic()
        second = await find_leader(nodes, 30, above_epoch=epoch)
        failover_s = time.monotonic() - killed_at
        assert second["leader_id"] != leader_id
        print(f"failover: new leader {second['leader_id']} epoch {second['leader_epoch']} after {failover_s:.2f}s")

        # The old leader comes back as a follower of the new epoch and catches up.
        old.start()
        new_port = nodes[second["leader_id"] - 1].port
        end = time.monotonic() + 60
        caught_up = False
        while time.monotonic() < end and not caught_up:
            part = await describe_quorum(new_port)
            if part is not None and part["error_code"] == 0:
                assert part["leader_id"] == second["leader_id"]
                mine = next(v for v in part["current_voters"] if v["replica_id"] == leader_id)
                caught_up = part["high_watermark"] > 0 and mine["log_end_offset"] >= part["high_watermark"]
            await asyncio.sleep(0.2)
        assert caught_up, old.log_tail()
        # The rejoined node follows: it does not lead, and no node claims a higher epoch.
        part = await describe_quorum(old.port)
        assert part is not None and part["error_code"] == 6
        again = await find_leader(nodes, 10)
        assert (again["leader_id"], again["leader_epoch"]) == (second["leader_id"], second["leader_epoch"])

        # SIGTERM of the leader: it resigns with EndQuorumEpoch, a successor takes over.
        stopped = nodes[second["leader_id"] - 1]
        stopping_at = time.monotonic()
        stopped.proc.terminate()  # type: ignore[union-attr]
        third = await find_leader([n for n in nodes if n is not stopped], 30, above_epoch=second["leader_epoch"])
        print(f"graceful: new leader {third['leader_id']} after {time.monotonic() - stopping_at:.2f}s")
        assert third["leader_id"] != stopped.node_id
        stopped.stop()

        # The whole quorum killed and restarted from disk: a leader of a later epoch, and
        # nothing committed before is lost (the high watermark comes back at least as far).
        for _ in range(50):
            committed = (await describe_quorum(nodes[third["leader_id"] - 1].port) or third)["high_watermark"]
            if committed > 0:
                break
            await asyncio.sleep(0.1)
        for n in nodes:
            n.kill()
        for n in nodes:
            n.start()
        fourth = await find_leader(nodes, 60, above_epoch=third["leader_epoch"])
        end = time.monotonic() + 30
        while time.monotonic() < end and fourth["high_watermark"] < committed:
            await asyncio.sleep(0.2)
            fourth = await describe_quorum(nodes[fourth["leader_id"] - 1].port) or fourth
        assert fourth["high_watermark"] >= committed > 0

    try:
        asyncio.run(run())
    finally:
        for n in nodes:
            n.stop()
