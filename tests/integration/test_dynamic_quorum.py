"""Dynamic KRaft quorum (KIP-853) with real ``odradek server`` processes on loopback: controller 1
formatted with ``storage format --standalone``, controllers 2 and 3 with
``--no-initial-controllers`` and only ``controller.quorum.bootstrap.servers``; they join as
observers, ``metadata-quorum add-controller`` makes them voters one at a time, kill -9 of
controller 1 leaves a quorum of 2 + 3 that elects a leader, ``remove-controller`` removes
controller 1 from the voters, and ``describe --status`` shows every change. A broker configured
with bootstrap servers only registers and creates topics (an AdminClient) before and after the
controller 1 is killed."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from tests.integration.kraft_processes import _create_topic, _stop_all, _wait_for_brokers
from tests.integration.test_raft_quorum import (
    CLUSTER_ID,
    Controller,
    _free_ports,
    describe_quorum,
    find_leader,
)


def _odradek(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek.cli.main", *args], capture_output=True, text=True, timeout=timeout
    )


class DynamicController(Controller):
    def __init__(self, node_id: int, port: int, bootstrap: str, base: Path) -> None:
        super().__init__(node_id, port, "unused", base)
        self.bootstrap_servers = bootstrap
        self.write_config()

    def write_config(self) -> None:
        port, bootstrap, node_id = self.port, self.bootstrap_servers, self.node_id
        self.config.write_text(
            "process.roles=controller\n"
            f"node.id={node_id}\n"
            f"listeners=CONTROLLER://127.0.0.1:{port}\n"
            "controller.listener.names=CONTROLLER\n"
            f"controller.quorum.bootstrap.servers={bootstrap}\n"
            f"log.dirs={self.data}\n"
        )

    def format_dynamic(self, flag: str) -> None:
        r = _odradek("storage", "format", "--config", str(self.config), "--cluster-id", CLUSTER_ID, flag)
        assert r.returncode == 0, r.stderr

    @property
    def directory_id(self) -> str:
        text = (self.data / "meta.properties").read_text()
        match = re.search(r"^directory\.id=(\S+)$", text, re.M)
        assert match, text
        return match.group(1)


class DynamicBroker(DynamicController):
    """A broker-only node that knows only ``controller.quorum.bootstrap.servers``."""

    def write_config(self) -> None:
        port, bootstrap, node_id = self.port, self.bootstrap_servers, self.node_id
        self.config.write_text(
            "process.roles=broker\n"
            f"node.id={node_id}\n"
            f"listeners=PLAINTEXT://127.0.0.1:{port}\n"
            "controller.listener.names=CONTROLLER\n"
            f"controller.quorum.bootstrap.servers={bootstrap}\n"
            f"log.dirs={self.data}\n"
            "offsets.topic.replication.factor=1\n"
        )

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


def _status(bootstrap: str) -> str:
    r = _odradek("metadata-quorum", "--bootstrap-controller", bootstrap, "describe", "--status")
    assert r.returncode == 0, r.stderr
    return r.stdout


def _voter_ids(status: str) -> list[int]:
    line = next(x for x in status.splitlines() if x.startswith("CurrentVoters:"))
    return [int(i) for i in re.findall(r'"id": (\d+)', line)]


async def _wait_caught_up_observer(port: int, node_id: int, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        part: dict[str, Any] | None = await describe_quorum(port)
        if part is not None and part["error_code"] == 0:
            mine = [o for o in part["observers"] if o["replica_id"] == node_id]
            if mine and mine[0]["log_end_offset"] >= part["high_watermark"] > 0:
                return
        await asyncio.sleep(0.2)
    raise AssertionError(f"controller {node_id} never caught up as an observer")


def _add_controller(bootstrap: str, node: DynamicController) -> str:
    out = ""
    for _ in range(10):  # REQUEST_TIMED_OUT while the previous change commits: try again
        r = _odradek("metadata-quorum", "--bootstrap-controller", bootstrap, "--command-config", str(node.config),
                     "add-controller")
        if r.returncode == 0:
            return r.stdout
        out = r.stderr
        assert "TimeoutException" in r.stderr, r.stderr
        time.sleep(1)
    raise AssertionError(out)


@pytest.mark.timeout(300)
def test_standalone_then_add_two_controllers_kill_the_first_and_remove_it(tmp_path: Path) -> None:
    ports = _free_ports(4)
    first = f"127.0.0.1:{ports[0]}"
    nodes = [DynamicController(i + 1, p, first, tmp_path) for i, p in enumerate(ports[:3])]
    all_controllers = ",".join(f"127.0.0.1:{p}" for p in ports[:3])
    broker = DynamicBroker(10, ports[3], all_controllers, tmp_path)
    nodes[0].format_dynamic("--standalone")
    for n in nodes[1:]:
        n.format_dynamic("--no-initial-controllers")
    r = _odradek("storage", "format", "--config", str(broker.config), "--cluster-id", CLUSTER_ID)
    assert r.returncode == 0, r.stderr
    try:
        for n in nodes:
            n.start()
        broker.start()

        async def run() -> None:
            leader = await find_leader(nodes, 60)
            assert leader["leader_id"] == 1
            status = _status(first)
            assert _voter_ids(status) == [1], status
            # kraft.version 1 is finalized (ApiVersions' features, as Kafka's controller reports).
            async with NetworkClient("127.0.0.1", ports[0]) as client:
                versions = await client.send(m.API_VERSIONS, 3, {
                    "client_software_name": "t", "client_software_version": "1"})
            finalized = {f["name"]: f["max_version_level"] for f in versions["finalized_features"]}
            supported = {f["name"]: (f["min_version"], f["max_version"]) for f in versions["supported_features"]}
            assert finalized["kraft.version"] == 1 and supported["kraft.version"] == (0, 1)
            assert f'"directoryId": "{nodes[0].directory_id}"' in status
            for n in nodes[1:]:
                await _wait_caught_up_observer(ports[0], n.node_id, 60)
                out = _add_controller(first, n)
                assert out == (
                    f"Added controller {n.node_id} with directory id {n.directory_id} and endpoints: "
                    f"CONTROLLER://127.0.0.1:{n.port}\n"
                )
            status = _status(first)
            assert _voter_ids(status) == [1, 2, 3], status
            # The broker is an observer once its first metadata fetch reaches the leader (it was
            # started just before: on a loaded machine that can come after the adds).
            deadline = time.monotonic() + 60
            while "CurrentObservers:       [{\"id\": 10}]" not in status and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                status = _status(first)
            assert "CurrentObservers:       [{\"id\": 10}]" in status, status
            _wait_for_brokers(broker, {10}, 60, [*nodes, broker])
            _create_topic(AdminClient({"bootstrap.servers": broker.bootstrap}), "before-kill", 2)
            # Adding a voter twice: Kafka's DuplicateVoterException.
            r = _odradek("metadata-quorum", "--bootstrap-controller", first, "--command-config",
                         str(nodes[1].config), "add-controller")
            assert r.returncode == 1 and "DuplicateVoterException" in r.stderr, r.stderr
            epoch = (await find_leader(nodes, 10))["leader_epoch"]

            # kill -9 of the first controller: 2 and 3 are a majority of the three voters.
            nodes[0].kill()
            second = await find_leader(nodes, 30, above_epoch=epoch)
            assert second["leader_id"] in (2, 3)
            others = ",".join(f"127.0.0.1:{p}" for p in ports[1:])
            status = _status(others)
            assert _voter_ids(status) == [1, 2, 3], status
            # The broker reaches the new active controller (its endpoint from the voter set).
            _create_topic(AdminClient({"bootstrap.servers": broker.bootstrap}), "after-kill", 1, 30)

            # remove-controller takes the dead controller out of the voter set.
            r = _odradek("metadata-quorum", "--bootstrap-controller", others, "remove-controller",
                         "--controller-id", "1", "--controller-directory-id", nodes[0].directory_id)
            assert r.returncode == 0, r.stderr
            assert r.stdout == f"Removed  KRaft controller 1 with directory id {nodes[0].directory_id}\n"
            status = _status(others)
            assert _voter_ids(status) == [2, 3], status
            r = _odradek("metadata-quorum", "--bootstrap-controller", others, "remove-controller",
                         "--controller-id", "1", "--controller-directory-id", nodes[0].directory_id)
            assert r.returncode == 1 and "VoterNotFoundException" in r.stderr, r.stderr

            # Two voters left: the leader still commits (DescribeQuorum's high watermark moves
            # with the VotersRecord the removal wrote).
            part = await describe_quorum(nodes[second["leader_id"] - 1].port)
            assert part is not None and part["error_code"] == 0
            assert sorted(v["replica_id"] for v in part["current_voters"]) == [2, 3]

            # The follower restarts from disk on another port: it is a voter by the log's voter
            # set (no controller.quorum.voters), and tells the leader its new endpoint with
            # UpdateRaftVoter.
            follower = nodes[(2 if second["leader_id"] == 3 else 3) - 1]
            follower.kill()
            follower.port = _free_ports(1)[0]
            follower.write_config()
            follower.start()
            moved = f'"id": {follower.node_id}, "directoryId": "{follower.directory_id}", ' \
                f'"endpoints": ["CONTROLLER://127.0.0.1:{follower.port}"]'
            leader_port = nodes[second["leader_id"] - 1].port
            # With two voters, the leader may lose its quorum while the follower restarts
            # (check-quorum) and either may lead afterwards: ask both, and a tool run that found
            # no leader meanwhile is tried again.
            both = f"127.0.0.1:{leader_port},127.0.0.1:{follower.port}"
            end = time.monotonic() + 60
            status = ""
            while time.monotonic() < end:
                r = _odradek("metadata-quorum", "--bootstrap-controller", both, "describe", "--status")
                status = r.stdout if r.returncode == 0 else r.stderr
                if r.returncode == 0 and moved in status:
                    break
                await asyncio.sleep(0.5)
            assert moved in status, status + follower.log_tail()
            assert _voter_ids(status) == [2, 3], status

        asyncio.run(run())
    finally:
        _stop_all([broker], nodes)


@pytest.mark.timeout(180)
def test_three_initial_controllers_elect_and_remove_one(tmp_path: Path) -> None:
    """``storage format --initial-controllers`` on three controllers with only bootstrap
    servers: the voters come from the bootstrap checkpoint; a leader is elected, a follower is
    removed and the two others go on committing."""
    ports = _free_ports(3)
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)
    nodes = [DynamicController(i + 1, p, bootstrap, tmp_path) for i, p in enumerate(ports)]
    dirs = [_odradek("storage", "random-uuid").stdout.strip() for _ in nodes]
    initial = ",".join(f"{n.node_id}@127.0.0.1:{n.port}:{d}" for n, d in zip(nodes, dirs, strict=True))
    for n in nodes:
        n.format_dynamic(f"--initial-controllers={initial}")
        assert n.directory_id in dirs
    try:
        for n in nodes:
            n.start()

        async def run() -> None:
            leader = await find_leader(nodes, 60)
            status = _status(bootstrap)
            assert _voter_ids(status) == [1, 2, 3], status
            for n, d in zip(nodes, dirs, strict=True):
                assert f'"id": {n.node_id}, "directoryId": "{d}", "endpoints": ["CONTROLLER://127.0.0.1:{n.port}"]' \
                    in status, status
            gone = max({1, 2, 3} - {leader["leader_id"]})
            r = _odradek("metadata-quorum", "--bootstrap-controller", bootstrap, "remove-controller",
                         "--controller-id", str(gone), "--controller-directory-id", dirs[gone - 1])
            assert r.returncode == 0, r.stderr
            status = _status(bootstrap)
            assert _voter_ids(status) == sorted({1, 2, 3} - {gone}), status
            # The removed controller keeps following as an observer.
            assert f'"id": {gone}' in next(x for x in status.splitlines() if x.startswith("CurrentObservers")), status
            nodes[gone - 1].kill()
            part = await describe_quorum(nodes[leader["leader_id"] - 1].port)
            assert part is not None and part["error_code"] == 0 and part["leader_id"] == leader["leader_id"]

        asyncio.run(run())
    finally:
        for n in nodes:
            n.stop()


@pytest.mark.timeout(300)
def test_kafkas_tool_adds_and_removes_a_controller_through_a_broker(tmp_path: Path) -> None:
    """``kafka-metadata-quorum.sh --bootstrap-server <broker> add-controller / remove-controller``
    (Kafka 4.x's tool): Kafka's Admin sends AddRaftVoter / RemoveRaftVoter to a broker, which
    advertises them and forwards them to the active controller, as Kafka 4's KafkaApis does;
    ``odradek metadata-quorum --bootstrap-server`` goes the same way."""
    from tests.integration.kafka_reference import find_kafka_tools

    tools = find_kafka_tools("4")
    ports = _free_ports(3)
    first = f"127.0.0.1:{ports[0]}"
    nodes = [DynamicController(i + 1, p, first, tmp_path) for i, p in enumerate(ports[:2])]
    broker = DynamicBroker(10, ports[2], ",".join(f"127.0.0.1:{p}" for p in ports[:2]), tmp_path)
    nodes[0].format_dynamic("--standalone")
    nodes[1].format_dynamic("--no-initial-controllers")
    r = _odradek("storage", "format", "--config", str(broker.config), "--cluster-id", CLUSTER_ID)
    assert r.returncode == 0, r.stderr
    second = nodes[1]
    via_broker = ["--bootstrap-server", broker.bootstrap]

    def kafka_tool(*args: str) -> subprocess.CompletedProcess[str]:
        for _ in range(10):  # REQUEST_TIMED_OUT while the previous change commits: try again
            r = tools.run("kafka-metadata-quorum", *via_broker, *args, check=False)
            if r.returncode == 0 or "TimeoutException" not in r.stderr:
                return r
            time.sleep(1)
        return r

    try:
        for n in nodes:
            n.start()
        broker.start()

        async def run() -> None:
            assert (await find_leader(nodes, 60))["leader_id"] == 1
            _wait_for_brokers(broker, {10}, 60, [*nodes, broker])
            await _wait_caught_up_observer(ports[0], second.node_id, 60)

            r = kafka_tool("--command-config", str(second.config), "add-controller")
            assert (r.returncode, r.stdout) == (0, (
                f"Added controller 2 with directory id {second.directory_id} and endpoints: "
                f"CONTROLLER://127.0.0.1:{second.port}\n")), r.stderr
            assert _voter_ids(_status(first)) == [1, 2]

            r = kafka_tool("remove-controller", "--controller-id", "2",
                           "--controller-directory-id", second.directory_id)
            assert (r.returncode, r.stdout) == (
                0, f"Removed  KRaft controller 2 with directory id {second.directory_id}\n"), r.stderr
            assert _voter_ids(_status(first)) == [1]
            # The controller's error comes back through the broker as it is.
            r = kafka_tool("remove-controller", "--controller-id", "2",
                           "--controller-directory-id", second.directory_id)
            assert r.returncode == 1 and "VoterNotFoundException" in r.stderr, r.stderr

            # Odradek's tool through the broker too.
            for _ in range(10):
                r = _odradek("metadata-quorum", *via_broker, "--command-config", str(second.config),
                             "add-controller")
                if r.returncode == 0 or "TimeoutException" not in r.stderr:
                    break
                time.sleep(1)
            assert r.returncode == 0, r.stderr
            assert _voter_ids(_status(first)) == [1, 2]

        asyncio.run(run())
    finally:
        _stop_all([broker], nodes)
