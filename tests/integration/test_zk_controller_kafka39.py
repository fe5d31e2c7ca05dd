"""Fidelity: the Odradek ZooKeeper-mode controller drives a real Kafka 3.9.2 broker.

Our controller wins ``/controller`` first (Kafka's own controller then stays inactive, as any
broker that loses the election does); the Kafka broker registers, our controller sees it
(BrokerChange: UpdateMetadata, then LeaderAndIsr), a topic znode we write becomes partition state
znodes and a LeaderAndIsr that makes the Kafka broker the leader, and a real client produces to it
and reads everything back. Then the broker is stopped: our controller marks its partition offline
(leader -1 in ZooKeeper)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from odradek.controller.kafka_controller import KafkaControllerConfig
from odradek.controller.kafka_controller_driver import ZkControllerRuntime
from odradek.controller.kafka_zk_adapter import uuid_to_kafka
from odradek.zk import zk_data as z
from odradek.zk.kafka_zk_client import KafkaZkClient, ZkConfig

from .kafka_reference import find_kafka_tools
from .test_zk_kafka_fidelity import ZkModeKafka
from .zookeeper_support import ZooKeeperServer

pytestmark = pytest.mark.timeout(400)

CONTROLLER_ID = 100


async def wait_until(cond: Callable[[], bool], what: str, kafka: ZkModeKafka, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert kafka.proc is not None
        if kafka.proc.poll() is not None:
            raise AssertionError(f"Kafka exited {kafka.proc.returncode}:\n{kafka.log_tail()}")
        try:
            if cond():
                return
        except Exception:
            pass
        await asyncio.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}\n{kafka.log_tail()}")


def produce_and_consume(bootstrap: str, topic: str, n: int) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    # not idempotent: Kafka 3.9 brokers get producer id blocks from the controller with
    # AllocateProducerIds, and this controller runs outside any broker (no endpoint to serve it)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False})
    for i in range(n):
        p.produce(topic, value=f"m{i}".encode())
    assert p.flush(60) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def test_odradek_controller_drives_a_kafka_39_broker(tmp_path: Path) -> None:
    tools = find_kafka_tools("3.9")
    with ZooKeeperServer() as zk:
        connect = zk.connect + "/odradek-drives-kafka"

        async def main() -> None:
            loop = asyncio.get_running_loop()
            c = KafkaZkClient(ZkConfig(connect, 10000, 20000)).start()
            c.create_top_level_paths()
            admin = KafkaZkClient(ZkConfig(connect, 10000, 20000)).start()
            r = ZkControllerRuntime(
                KafkaControllerConfig(broker_id=CONTROLLER_ID, auto_leader_rebalance_enable=False,
                                      inter_broker_listener_name="INTERNAL"), c, loop)
            kafka = ZkModeKafka(tools, connect, tmp_path)
            try:
                r.start()
                deadline = time.monotonic() + 30
                while not r.controller.is_active and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                assert r.controller.is_active and admin.get_controller_id() == CONTROLLER_ID
                kafka.start()
                await wait_until(lambda: r.controller.context.live_or_shutting_down_broker_ids == {1},
                                 "our controller to see Kafka's registration", kafka)
                assert admin.get_controller_id() == CONTROLLER_ID  # Kafka's controller lost the election
                topic_id = uuid.uuid4()
                admin.create_topic_assignment("t", uuid_to_kafka(topic_id), {0: z.ReplicaAssignment((1,)),
                                                                              1: z.ReplicaAssignment((1,))})
                await wait_until(lambda: len(admin.get_topic_partition_states([("t", 0), ("t", 1)])) == 2,
                                 "the partition states", kafka)
                states = admin.get_topic_partition_states([("t", 0), ("t", 1)])
                assert all(s.leader == 1 and s.controller_epoch == r.controller.epoch for s in states.values())
                got = await loop.run_in_executor(None, produce_and_consume, kafka.bootstrap, "t", 20)
                assert sorted(got) == sorted(f"m{i}".encode() for i in range(20))
                log = kafka.log_path.read_text("utf-8", "replace")
                assert "STALE_CONTROLLER_EPOCH" not in log
                # the broker goes away: its partitions go offline (leader -1), the ISR keeps it
                await loop.run_in_executor(None, kafka.stop)
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    s = admin.get_topic_partition_states([("t", 0)])[("t", 0)]
                    if s.leader == -1:
                        break
                    await asyncio.sleep(0.25)
                s = admin.get_topic_partition_states([("t", 0)])[("t", 0)]
                assert s.leader == -1 and s.isr == (1,) and s.leader_epoch > states[("t", 0)].leader_epoch
            finally:
                await r.close()
                c.close()
                admin.close()
                kafka.stop()

        asyncio.run(main())
