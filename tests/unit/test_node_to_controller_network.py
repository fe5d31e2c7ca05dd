"""NodeToControllerChannel over loopback sockets against a controller-only KafkaRaftServer
(process.roles=controller): a broker registers, heartbeats until unfenced, creates a topic and
gets producer ids through it; NOT_CONTROLLER and an unreachable controller are handled."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from odradek.controller.feature_control_manager import SUPPORTED_FEATURES
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.server.broker_lifecycle_manager import BrokerLifecycleManager
from odradek.server.controller_channel import ControllerRequest, ForwardingManager, RequestClient
from odradek.server.kafka_config import KafkaConfig
from odradek.server.kafka_raft_server import KafkaRaftServer
from odradek.server.node_to_controller_channel import NodeToControllerChannel, controller_endpoints
from odradek.server.producer_id_manager import ProducerIdManager

CLIENT = RequestClient("admin-1", "127.0.0.1")


def create_topics(*names: str) -> ControllerRequest:
    topics = [
        {"name": n, "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []} for n in names
    ]
    return ControllerRequest(m.CREATE_TOPICS.api_key, 7, {"topics": topics, "timeout_ms": 5000, "validate_only": False}, CLIENT)


@asynccontextmanager
async def controller_only(tmp_path: Path) -> AsyncIterator[KafkaRaftServer]:
    config = KafkaConfig({"process.roles": "controller", "node.id": "1", "listeners": "CONTROLLER://127.0.0.1:0",
                          "log.dirs": str(tmp_path)})
    server = KafkaRaftServer(config)
    await server.startup()
    try:
        assert server.controller is not None and server.controller.controller is not None
        controller = server.controller.controller
        for _ in range(200):  # bounded: until metadata.version is bootstrapped
            if controller.image.features.levels:
                break
            await asyncio.sleep(0.02)
        assert controller.image.features.levels
        yield server
    finally:
        await server.shutdown()


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


def test_broker_registers_heartbeats_creates_topics_and_gets_producer_ids_over_the_network(tmp_path: Path) -> None:
    async def go() -> None:
        async with controller_only(tmp_path) as server:
            assert server.controller is not None and server.controller.controller is not None
            controller = server.controller.controller
            port = server.bound_ports["CONTROLLER"]
            # The endpoints as a broker would configure them: controller.quorum.voters.
            voters = KafkaConfig({"process.roles": "broker", "node.id": "2", "listeners": "PLAINTEXT://127.0.0.1:0",
                                  "controller.quorum.voters": f"1@127.0.0.1:{port}"})
            assert controller_endpoints(voters) == {1: ("127.0.0.1", port)}
            ch = NodeToControllerChannel.from_config(voters, lambda: 1)
            lifecycle = BrokerLifecycleManager(
                node_id=2, cluster_id=server.cluster_id, channel=ch, heartbeat_interval_ms=lambda: 50,
                metadata_offset=lambda: controller.image.offset,
            )
            lifecycle.start([("PLAINTEXT", "127.0.0.1", 9092)], SUPPORTED_FEATURES, None)
            try:
                await asyncio.wait_for(lifecycle.wait_for_unfence(), 15)
                b = controller.image.brokers[2]
                assert (b.epoch, b.fenced, b.incarnation_id) == (lifecycle.broker_epoch, False, lifecycle.incarnation_id)

                fwd = ForwardingManager(ch)
                resp = await fwd.forward(create_topics("net-t1"))
                [t] = resp["topics"]
                assert (t["name"], t["error_code"], t["num_partitions"]) == ("net-t1", Errors.NONE, 2)
                assert controller.image.topics_by_name["net-t1"].topic_id == t["topic_id"]
                again = await fwd.forward(create_topics("net-t1"))
                assert again["topics"][0]["error_code"] == Errors.TOPIC_ALREADY_EXISTS
                # A client's DescribeQuorum, forwarded to the controller listener, which serves it.
                quorum = await fwd.forward(ControllerRequest(
                    g.DESCRIBE_QUORUM.api_key, 2,
                    {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]},
                    RequestClient("c", "127.0.0.1"),
                ))
                part = quorum["topics"][0]["partitions"][0]
                assert (quorum["error_code"], part["error_code"], part["leader_id"]) == (0, 0, 1)
                assert [v["replica_id"] for v in part["current_voters"]] == [1]

                pids = ProducerIdManager(2, lambda: lifecycle.broker_epoch, ch)
                first = await pids.generate_producer_id()
                assert await pids.generate_producer_id() == first + 1
                assert controller.image.next_producer_id > first + 1
            finally:
                await lifecycle.close()
                await ch.close()

    asyncio.run(asyncio.wait_for(go(), 60))


def test_not_controller_and_an_unreachable_controller_over_the_network(tmp_path: Path) -> None:
    async def go() -> None:
        async with controller_only(tmp_path) as server:
            assert server.controller is not None and server.controller.controller_apis is not None
            capis = server.controller.controller_apis
            port = server.bound_ports["CONTROLLER"]
            # Node 5 is the leader as the observer first sees it, and is down.
            leader: list[int | None] = [5]
            ch = NodeToControllerChannel(lambda: leader[0], {1: ("127.0.0.1", port), 5: ("127.0.0.1", closed_port())},
                                         retry_backoff_ms=10, reconnect_backoff_ms=10, reconnect_backoff_max_ms=50)
            fwd = ForwardingManager(ch)
            try:
                task = asyncio.ensure_future(fwd.forward(create_topics("net-t2")))
                await asyncio.sleep(0.2)
                assert not task.done()  # disconnects are retried within the retry timeout
                leader[0] = 1
                resp = await task
                assert resp["topics"][0]["error_code"] == Errors.INVALID_REPLICATION_FACTOR  # no broker yet

                # A registration naming another cluster is refused with Kafka's error.
                other = {"broker_id": 9, "cluster_id": "other-cluster", "incarnation_id": uuid.uuid4(),
                         "listeners": [], "features": [], "rack": None}
                wrong = await ch.send(ControllerRequest(g.BROKER_REGISTRATION.api_key, 4, other))
                assert wrong["error_code"] == Errors.INCONSISTENT_CLUSTER_ID

                # The controller believes node 3 leads now: a client's request gets
                # NOT_CONTROLLER back; the broker's own request is retried until it is active.
                real = capis.leader_id
                capis.leader_id = lambda: 3
                refused = await fwd.forward(create_topics("net-t3"))
                assert refused["topics"][0]["error_code"] == Errors.NOT_CONTROLLER
                beat: dict[str, Any] = {"broker_id": 9, "broker_epoch": 1, "current_metadata_offset": 0,
                                        "want_fence": False, "want_shut_down": False}
                task2 = asyncio.ensure_future(ch.send(ControllerRequest(g.BROKER_HEARTBEAT.api_key, 1, beat)))
                await asyncio.sleep(0.2)
                assert not task2.done()
                capis.leader_id = real
                answered = await task2
                # the active one's answer: as Kafka, a heartbeat before registration is STALE_BROKER_EPOCH
                assert answered["error_code"] == Errors.STALE_BROKER_EPOCH
            finally:
                await ch.close()

    asyncio.run(asyncio.wait_for(go(), 60))
