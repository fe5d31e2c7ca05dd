"""ZooKeeper-mode broker pieces without ZooKeeper: meta.properties version 0, the controller-bound
requests on a broker that is not the controller, what ApiVersions leaves out."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.server.dir_lock import StartupError
from odradek.server.meta_properties import read_meta_properties, write_meta_properties
from odradek.server.zk_broker_server import check_meta_properties
from odradek.server.zk_controller_bound_apis import ZkControllerBoundApis


def test_meta_properties_v0_written_then_checked(tmp_path: Path) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    check_meta_properties([a, b], 3, "clusterA")
    for d in (a, b):
        assert read_meta_properties(str(Path(d) / "meta.properties")) == {
            "version": "0", "broker.id": "3", "cluster.id": "clusterA"}
    check_meta_properties([a, b], 3, "clusterA")  # the same broker again: accepted
    with pytest.raises(StartupError, match="doesn't match stored clusterId clusterA"):
        check_meta_properties([a], 3, "clusterB")
    with pytest.raises(StartupError, match="Configured broker.id 4 doesn't match stored broker.id 3"):
        check_meta_properties([a], 4, "clusterA")


def test_kraft_formatted_dir_refused(tmp_path: Path) -> None:
    d = tmp_path / "k"
    d.mkdir()
    write_meta_properties(str(d), {"version": "1", "node.id": "1", "cluster.id": "c", "directory.id": "x"})
    with pytest.raises(StartupError, match="formatted for KRaft"):
        check_meta_properties([str(d)], 1, "c")


def _ctx(version: int) -> Any:
    return SimpleNamespace(version=version)


def test_controller_bound_requests_not_controller() -> None:
    put_calls: list[Any] = []
    apis = ZkControllerBoundApis(lambda: False, put_calls.append, lambda: [("t", 0), ("t", 1)])

    async def run() -> None:
        r = await apis.handle_alter_partition(_ctx(2), {"broker_id": 1, "broker_epoch": 5, "topics": []})
        assert r["error_code"] == Errors.NOT_CONTROLLER
        r = await apis.handle_controlled_shutdown(_ctx(3), {"broker_id": 1, "broker_epoch": 5})
        assert r["error_code"] == Errors.NOT_CONTROLLER and r["remaining_partitions"] == []
        r = await apis.handle_allocate_producer_ids(_ctx(0), {"broker_id": 1, "broker_epoch": 5})
        assert r["error_code"] == Errors.NOT_CONTROLLER and r["producer_id_start"] == -1
        r = await apis.handle_elect_leaders(_ctx(2), {"election_type": 0, "topic_partitions": None,
                                                      "timeout_ms": 100})
        codes = [p["error_code"] for t in r["replica_election_results"] for p in t["partition_result"]]
        assert codes == [Errors.NOT_CONTROLLER, Errors.NOT_CONTROLLER]
        r = await apis.handle_alter_partition_reassignments(_ctx(0), {"timeout_ms": 100, "topics": []})
        assert r["error_code"] == Errors.NOT_CONTROLLER
        r = await apis.handle_list_partition_reassignments(_ctx(0), {"timeout_ms": 100, "topics": None})
        assert r["error_code"] == Errors.NOT_CONTROLLER

    asyncio.run(run())
    assert put_calls == []  # nothing reached a controller that is not there


def test_restrict_removes_kraft_only_apis() -> None:
    fake = SimpleNamespace(apis={a.api_key: a for a in m.ALL_APIS}, handlers={a.api_key: None for a in m.ALL_APIS})
    ZkControllerBoundApis.restrict(fake)
    assert m.DESCRIBE_QUORUM.api_key not in fake.apis and m.DESCRIBE_QUORUM.api_key not in fake.handlers
    assert g.CONSUMER_GROUP_HEARTBEAT.api_key not in fake.apis
    assert m.PRODUCE.api_key in fake.apis and m.FETCH.api_key in fake.apis


def test_unknown_replica_selector_refused_before_zookeeper(tmp_path: Path) -> None:
    """replica.selector.class is honoured in ZooKeeper mode (KIP-392, as Kafka 3.9's KafkaServer):
    an unknown class stops the start-up at once, before any ZooKeeper connection (nothing listens
    on the port given)."""
    from odradek.server.kafka_config import KafkaConfig
    from odradek.server.zk_broker_server import ZkBrokerServer

    server = ZkBrokerServer(KafkaConfig({
        "broker.id": "1", "zookeeper.connect": "127.0.0.1:1/x", "log.dirs": str(tmp_path / "d"),
        "listeners": "PLAINTEXT://127.0.0.1:0", "replica.selector.class": "com.example.NoSuchSelector",
    }))
    with pytest.raises(StartupError, match="com.example.NoSuchSelector"):
        asyncio.run(server.startup())
    assert server.zk_client is None and server._locks == []
