"""ZooKeeper mode, the broker's own requests to the ZooKeeper controller: a leader's ISR expansion
goes out as AlterPartition to the controller the UpdateMetadata named (Kafka 3.9's
DefaultAlterPartitionManager with MetadataCacheControllerNodeProvider), and ControlledShutdown is
sent with Kafka's retries. The controller side is a fake connection that records what reaches it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_zk_broker_apis import BROKER_EPOCH, ME, Broker, lisr_part, um_part

from odradek.network.client import ConnectionClosed
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.protocol.schema import Api
from odradek.records.builder import build_batch
from odradek.server.delayed_fetch import FetchPartitionRequest
from odradek.server.kafka_config import KafkaConfig
from odradek.server.node_to_controller_channel import ControllerConnection, NodeToControllerChannel
from odradek.server.zk_broker_channels import (
    controlled_shutdown,
    controlled_shutdown_from_config,
    zk_alter_partition_manager,
    zk_controller_endpoint,
)

Answer = Callable[[int, dict[str, Any]], dict[str, Any]]


class FakeController:
    """Connections to fake controller nodes: ApiVersions answered, every other request recorded
    and answered by ``answer(node, body)`` (which may raise)."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections: list[tuple[int, str, int]] = []
        self.requests: list[tuple[int, int, int, dict[str, Any]]] = []  # node, api key, version, body

    def connect(self, node: int, host: str, port: int) -> ControllerConnection:
        self.connections.append((node, host, port))
        fake = self

        class Conn:
            async def send(self, api: Api, version: int, body: dict[str, Any], timeout: float) -> dict[str, Any]:
                if api.api_key == g.API_VERSIONS.api_key:
                    keys = [g.API_VERSIONS, g.ALTER_PARTITION, g.CONTROLLED_SHUTDOWN]
                    return {"error_code": 0, "api_keys": [
                        {"api_key": a.api_key, "min_version": a.min_version, "max_version": a.max_version}
                        for a in keys]}
                fake.requests.append((node, api.api_key, version, body))
                return fake.answer(node, body)

            async def close(self) -> None:
                pass

        return Conn()


@pytest.fixture
def b(tmp_path: Path) -> Broker:
    return Broker(tmp_path)


def test_an_isr_expansion_goes_to_the_zk_controller_as_alter_partition(b: Broker) -> None:
    def answer(_node: int, body: dict[str, Any]) -> dict[str, Any]:
        (t,) = body["topics"]
        (p,) = t["partitions"]
        return {"error_code": 0, "throttle_time_ms": 0, "topics": [{
            "topic_name": t["topic_name"], "topic_id": t["topic_id"], "partitions": [{
                "partition_index": p["partition_index"], "error_code": 0, "leader_id": ME,
                "leader_epoch": p["leader_epoch"], "isr": [e["broker_id"] for e in p["new_isr_with_epochs"]],
                "partition_epoch": p["partition_epoch"] + 1, "leader_recovery_state": 0}]}]}

    controller = FakeController(answer)

    async def run() -> None:
        channel = NodeToControllerChannel(b.cache.get_controller_id, zk_controller_endpoint(b.cache, "PLAINTEXT"),
                                          connect=controller.connect, retry_timeout_ms=10_000, retry_backoff_ms=10)
        b.rm.alter_partition_manager = zk_alter_partition_manager(b.apis.config, b.cache, lambda: BROKER_EPOCH,
                                                                  channel=channel)
        b.rm.broker_epoch = lambda: BROKER_EPOCH
        b.update_metadata(um_part(0, ME, 0, [1], [1, 2]), live=(1, 2))  # controller 2
        b.leader_and_isr(lisr_part(0, leader=ME, leader_epoch=0, isr=[1], replicas=[1, 2], partition_epoch=4))
        b.worker.run_all()
        out = b.rm.append_records(1000, 1, {("t", 0): bytearray(build_batch([(b"k", b"v", [], 1)]))})
        assert isinstance(out, dict)
        # Broker 2 fetches up to the leader's end with its broker epoch (UpdateMetadata gives none).
        fetched = b.rm.fetch_messages(0, 1, 1 << 20, 1, [FetchPartitionRequest("t", 0, 1, 1 << 20, 0)], 2, 0x222)
        assert isinstance(fetched, list) and fetched[0].result.error == Errors.NONE
        p = b.rm.partitions[("t", 0)]
        for _ in range(200):
            if p.isr == [1, 2]:
                break
            await asyncio.sleep(0.01)
        assert (p.isr, p.partition_epoch) == ([1, 2], 5)
        ((node, key, version, body),) = controller.requests
        assert (node, key, version) == (2, g.ALTER_PARTITION.api_key, g.ALTER_PARTITION.max_version)
        assert controller.connections == [(2, "127.0.0.1", 9002)]
        assert (body["broker_id"], body["broker_epoch"]) == (ME, BROKER_EPOCH)
        (pd,) = body["topics"][0]["partitions"]
        assert (pd["leader_epoch"], pd["partition_epoch"], pd["new_isr"]) == (0, 4, [1, 2])
        await b.rm.alter_partition_manager.close()
        await channel.close()

    asyncio.run(asyncio.wait_for(run(), 30))


def test_controlled_shutdown_retries_until_no_partition_remains(b: Broker) -> None:
    answers = [{"error_code": 0, "remaining_partitions": [{"topic_name": "t", "partition_index": 0},
                                                          {"topic_name": "t", "partition_index": 1}]},
               {"error_code": 0, "remaining_partitions": []}]
    controller = FakeController(lambda _n, _b: answers.pop(0))
    b.update_metadata(live=(1, 2))
    result = asyncio.run(controlled_shutdown(b.cache, ME, lambda: BROKER_EPOCH, "PLAINTEXT", max_retries=3,
                                             retry_backoff_ms=1, connect=controller.connect))
    assert (result.succeeded, result.attempts, result.outcomes) == (True, 2, ["remaining=2", "NONE"])
    assert [(n, k, v, body) for n, k, v, body in controller.requests] == [
        (2, g.CONTROLLED_SHUTDOWN.api_key, 3, {"broker_id": ME, "broker_epoch": BROKER_EPOCH})] * 2
    assert controller.connections == [(2, "127.0.0.1", 9002)]  # the same controller: one connection


def test_controlled_shutdown_reconnects_after_an_io_error_and_follows_the_controller(b: Broker) -> None:
    def answer(node: int, _body: dict[str, Any]) -> dict[str, Any]:
        n = len(controller.requests)
        if n == 1:
            raise ConnectionClosed("controller 2 went away")
        if n == 2:  # the controller moved: the next UpdateMetadata names broker 3
            b.update_metadata(live=(1, 2, 3), controller_epoch=2, controller_id=3)
            return {"error_code": Errors.STALE_CONTROLLER_EPOCH, "remaining_partitions": []}
        return {"error_code": 0, "remaining_partitions": []}

    controller = FakeController(answer)
    b.update_metadata(live=(1, 2, 3))
    result = asyncio.run(controlled_shutdown(b.cache, ME, lambda: BROKER_EPOCH, "PLAINTEXT", max_retries=3,
                                             retry_backoff_ms=1, connect=controller.connect))
    assert result.succeeded and result.outcomes[1:] == ["STALE_CONTROLLER_EPOCH", "NONE"]
    assert result.outcomes[0].startswith("io: ")
    assert [c[0] for c in controller.connections] == [2, 2, 3]
    assert [r[0] for r in controller.requests] == [2, 2, 3]


def test_controlled_shutdown_gives_up_after_max_retries_without_a_controller(b: Broker) -> None:
    controller = FakeController(lambda _n, _b: {"error_code": 0, "remaining_partitions": []})
    result = asyncio.run(controlled_shutdown(b.cache, ME, lambda: BROKER_EPOCH, "PLAINTEXT", max_retries=2,
                                             retry_backoff_ms=1, connect=controller.connect))
    assert (result.succeeded, result.attempts, result.outcomes) == (False, 2, ["no controller"] * 2)
    assert controller.connections == []


def test_controlled_shutdown_from_config(b: Broker) -> None:
    controller = FakeController(lambda _n, _b: {"error_code": 0, "remaining_partitions": []})
    b.update_metadata(live=(1, 2))
    off = KafkaConfig({"log.dirs": "/nonexistent", "controlled.shutdown.enable": "false"})
    assert asyncio.run(controlled_shutdown_from_config(off, b.cache, lambda: 1, controller.connect)) is None
    assert controller.connections == []
    on = KafkaConfig({"log.dirs": "/nonexistent", "node.id": "1", "controlled.shutdown.max.retries": "1"})
    result = asyncio.run(controlled_shutdown_from_config(on, b.cache, lambda: 1, controller.connect))
    assert result is not None and result.succeeded and controller.requests[0][3] == {"broker_id": 1, "broker_epoch": 1}
