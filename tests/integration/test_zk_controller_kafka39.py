"""Fidelity: the Odradek ZooKeeper-mode controller drives a real Kafka 3.9.2 broker.

Our controller wins ``/controller`` first (Kafka's own controller then stays inactive, as any
broker that loses the election does); the Kafka broker registers, our controller sees it
(BrokerChange: UpdateMetadata, then LeaderAndIsr), a topic znode we write becomes partition state
znodes and a LeaderAndIsr that makes the Kafka broker the leader, and a real client produces to it
and reads everything back. Then the broker is stopped: our controller marks its partition offline
(leader -1 in ZooKeeper).

And the replication scenario: two Kafka 3.9 brokers, a topic with replicas on both, acks=all
load; the leader is killed (kill -9): when its registration expires our controller elects the
other replica (in the ISR), removes the dead one from the ISR, and every acknowledged message is
still there when everything is read back from the survivor.

And a SIGSTOPped controller of ours is replaced (by a second controller of ours or by the Kafka
broker's own controller: both are candidates, either may win), and when it resumes it finds its
session expired, resigns, and nothing of its lands in ZooKeeper."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from odradek.controller.kafka_controller import KafkaControllerConfig
from odradek.controller.kafka_controller_driver import ZkControllerRuntime
from odradek.controller.kafka_zk_adapter import uuid_to_kafka
from odradek.zk import zk_data as z
from odradek.zk.kafka_zk_client import KafkaZkClient, ZkConfig

from .kafka_reference import KafkaTools, find_kafka_tools
from .support import die_with_parent
from .zk_cluster_support import ZkModeKafka, wait_until
from .zk_stale_controller import assert_resigned_and_silent
from .zookeeper_support import ZooKeeperServer

pytestmark = pytest.mark.timeout(400)

CONTROLLER_ID = 100


def controller_runtime(broker_id: int, client: KafkaZkClient,
                       loop: asyncio.AbstractEventLoop) -> ZkControllerRuntime:
    """Our controller, in-process, reaching the Kafka brokers on their INTERNAL listener."""
    return ZkControllerRuntime(KafkaControllerConfig(broker_id=broker_id, auto_leader_rebalance_enable=False,
                                                     inter_broker_listener_name="INTERNAL"), client, loop)


def controller_and_admin(connect: str, loop: asyncio.AbstractEventLoop,
                         ) -> tuple[KafkaZkClient, KafkaZkClient, ZkControllerRuntime]:
    """The controller's session (top-level paths created), an admin session, and the controller
    (not started) with id CONTROLLER_ID."""
    c = KafkaZkClient(ZkConfig(connect, 10000, 20000)).start()
    c.create_top_level_paths()
    admin = KafkaZkClient(ZkConfig(connect, 10000, 20000)).start()
    return c, admin, controller_runtime(CONTROLLER_ID, c, loop)


async def start_and_win(r: ZkControllerRuntime) -> None:
    """Start the controller and wait (up to 30 s) for it to win the election."""
    r.start()
    deadline = time.monotonic() + 30
    while not r.controller.is_active and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


def collect(c: Any, n: int, attach: Callable[[], None]) -> list[bytes]:
    """``attach`` the consumer (subscribe or assign), poll up to 60 s for ``n`` values, close it."""
    got: list[bytes] = []
    try:
        attach()
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value() or b"")
    finally:
        c.close()
    return got


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
    return collect(c, n, lambda: c.subscribe([topic]))


def test_odradek_controller_drives_a_kafka_39_broker(tmp_path: Path) -> None:
    tools = find_kafka_tools("3.9")
    with ZooKeeperServer() as zk:
        connect = zk.connect + "/odradek-drives-kafka"

        async def main() -> None:
            loop = asyncio.get_running_loop()
            c, admin, r = controller_and_admin(connect, loop)
            kafka = ZkModeKafka(tools, connect, tmp_path)
            try:
                await start_and_win(r)
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


class Kafka39Broker(ZkModeKafka):
    """ZkModeKafka with a broker id of our choosing."""

    def __init__(self, tools: KafkaTools, zk_connect: str, data_dir: Path, broker_id: int) -> None:
        super().__init__(tools, zk_connect, data_dir)
        self.broker_id = broker_id

    def start(self) -> Kafka39Broker:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return self.launch(self.broker_id, 6000, {"replica.lag.time.max.ms": "600000"}, heap="-Xmx384m")


def produce(bootstrap: str, topic: str, values: list[bytes]) -> int:
    from confluent_kafka import Producer

    acked: list[bytes] = []

    def delivered(err: object, msg: object) -> None:
        if err is None:
            acked.append(msg.value())  # type: ignore[attr-defined]

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
                  "message.timeout.ms": 60000})
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=delivered)
    p.flush(90)
    return len(acked)


def read_all(bootstrap: str, topic: str, n: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    return collect(c, n, lambda: c.assign([TopicPartition(topic, 0, 0)]))


def test_kafka_39_leader_killed_our_controller_fails_over_nothing_acknowledged_lost(tmp_path: Path) -> None:
    tools = find_kafka_tools("3.9")
    with ZooKeeperServer() as zk:
        connect = zk.connect + "/odradek-failover"

        async def main() -> None:
            loop = asyncio.get_running_loop()
            c, admin, r = controller_and_admin(connect, loop)
            brokers = {i: Kafka39Broker(tools, connect, tmp_path / f"b{i}", i) for i in (1, 2)}
            try:
                await start_and_win(r)
                assert r.controller.is_active
                for b in brokers.values():
                    b.start()
                await wait_until(lambda: r.controller.context.live_or_shutting_down_broker_ids == {1, 2},
                                 "both registrations", brokers[1])
                admin.create_topic_assignment("r", uuid_to_kafka(uuid.uuid4()), {0: z.ReplicaAssignment((1, 2))})
                await wait_until(lambda: ("r", 0) in admin.get_topic_partition_states([("r", 0)]), "r-0", brokers[1])
                first = admin.get_topic_partition_states([("r", 0)])[("r", 0)]
                assert first.leader == 1 and first.isr == (1, 2)
                bootstrap = ",".join(b.bootstrap for b in brokers.values())
                before = [f"a{i}".encode() for i in range(50)]
                assert await loop.run_in_executor(None, produce, bootstrap, "r", before) == 50
                proc = brokers[1].proc
                assert proc is not None
                proc.kill()  # kill -9 the leader
                proc.wait(30)

                def moved() -> bool:
                    s = admin.get_topic_partition_states([("r", 0)])[("r", 0)]
                    return s.leader == 2 and s.isr == (2,)

                await wait_until(moved, "r-0's leadership to move to broker 2", brokers[2], timeout=60)
                after_state = admin.get_topic_partition_states([("r", 0)])[("r", 0)]
                assert after_state.leader_epoch > first.leader_epoch
                assert after_state.controller_epoch == r.controller.epoch
                after = [f"b{i}".encode() for i in range(50)]
                assert await loop.run_in_executor(None, produce, brokers[2].bootstrap, "r", after) == 50
                got = await loop.run_in_executor(None, read_all, brokers[2].bootstrap, "r", 100)
                assert got == before + after
            finally:
                await r.close()
                c.close()
                admin.close()
                for b in brokers.values():
                    b.stop()

        asyncio.run(main())


@pytest.mark.parametrize("with_b", [True, False], ids=["odradek-b-and-kafka-race", "kafka-takes-over"])
def test_sigstopped_controller_is_replaced_and_writes_nothing_when_it_resumes(tmp_path: Path, with_b: bool) -> None:
    """Our controller A (in a process of its own) leads a Kafka 3.9 broker; A is SIGSTOPped past
    its session: a successor wins with epoch 2. The Kafka broker's own controller is always a
    candidate; with ``with_b`` a second controller of ours (B) races it and either may win (which
    one is a race, as between any two brokers); without, Kafka's must win. A resumes, resigns,
    and nothing of its lands in ZooKeeper."""
    import signal
    import sys

    tools = find_kafka_tools("3.9")
    with ZooKeeperServer() as zk:
        connect = zk.connect + "/odradek-sigstop"

        async def main() -> None:
            loop = asyncio.get_running_loop()
            admin = KafkaZkClient(ZkConfig(connect, 10000, 20000)).start()
            admin.create_top_level_paths()
            log_a = tmp_path / "controller-a.log"
            with open(log_a, "wb") as out:
                proc_a = subprocess.Popen(
                    [sys.executable, "-m", "tests.integration.zk_controller_proc", connect, "100", "INTERNAL"],
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent,
                    cwd=str(Path(__file__).resolve().parents[2]))
            kafka = Kafka39Broker(tools, connect, tmp_path / "b1", 1)
            proc_b: subprocess.Popen[bytes] | None = None
            log_b = tmp_path / "controller-b.log"
            try:
                await wait_until(lambda: admin.get_controller_id() == 100, "controller A", kafka_stub(proc_a, log_a))
                kafka.start()
                admin.create_topic_assignment("t1", uuid_to_kafka(uuid.uuid4()), {0: z.ReplicaAssignment((1,))})
                await wait_until(lambda: ("t1", 0) in admin.get_topic_partition_states([("t1", 0)]), "t1-0", kafka)
                t1_before = admin.get_topic_partition_states([("t1", 0)])[("t1", 0)]
                assert t1_before.controller_epoch == 1
                if with_b:  # B in a process of its own, as A: the test process only watches ZooKeeper
                    with open(log_b, "wb") as out:
                        proc_b = subprocess.Popen(
                            [sys.executable, "-m", "tests.integration.zk_controller_proc", connect, "101", "INTERNAL"],
                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            preexec_fn=die_with_parent, cwd=str(Path(__file__).resolve().parents[2]))
                    await wait_until(lambda: log_b.stat().st_size > 0, "B to start", kafka_stub(proc_b, log_b))
                    await asyncio.sleep(3)
                assert admin.get_controller_id() == 100  # B and Kafka lost the race while A lives
                proc_a.send_signal(signal.SIGSTOP)  # A stops answering ZooKeeper: its session expires
                # The candidates race for /controller once it goes: the Kafka broker's own
                # controller (every ZooKeeper-mode Kafka broker runs one; it lost to A only because
                # A was first) and B when there is one. A never wins; one controller, epoch 2.
                candidates = (101, 1) if with_b else (1,)
                await wait_until(lambda: admin.get_controller_id() in candidates, f"one of {candidates} to take over",
                                 kafka_stub(proc_b, log_b) if proc_b is not None else kafka, 60)
                successor = admin.get_controller_id()
                print(f"controller after A was stopped: {successor}")
                assert (admin.get_controller_epoch() or (0, 0))[0] == 2
                admin.create_topic_assignment("t2", uuid_to_kafka(uuid.uuid4()), {0: z.ReplicaAssignment((1,))})
                await wait_until(lambda: ("t2", 0) in admin.get_topic_partition_states([("t2", 0)]), "t2-0", kafka)
                proc_a.send_signal(signal.SIGCONT)
                await wait_until(lambda: b"Resigned" in log_a.read_bytes(), "A to resign when it resumes", kafka, 60)
                await asyncio.sleep(2)
                assert admin.get_controller_id() == successor and (admin.get_controller_epoch() or (0, 0))[0] == 2
                assert_resigned_and_silent(log_a.read_text("utf-8", "replace"))
                if with_b:  # B believes it is the controller exactly when it is (no split brain)
                    elected_b = b"101 successfully elected as the controller" in log_b.read_bytes()
                    assert elected_b == (successor == 101), (successor, log_b.read_text("utf-8", "replace")[-2000:])
                states = admin.get_topic_partition_states([("t1", 0), ("t2", 0)])
                assert states[("t2", 0)].controller_epoch == 2 and states[("t2", 0)].leader == 1
                assert states[("t1", 0)] == t1_before or states[("t1", 0)].controller_epoch == 2
                got = await loop.run_in_executor(None, produce_and_consume, kafka.bootstrap, "t2", 10)
                assert sorted(got) == sorted(f"m{i}".encode() for i in range(10))
            finally:
                if proc_a.poll() is None:
                    proc_a.send_signal(signal.SIGCONT)
                    proc_a.terminate()
                    try:
                        proc_a.wait(20)
                    except subprocess.TimeoutExpired:
                        proc_a.kill()
                if proc_b is not None and proc_b.poll() is None:
                    proc_b.terminate()
                    try:
                        proc_b.wait(20)
                    except subprocess.TimeoutExpired:
                        proc_b.kill()
                admin.close()
                kafka.stop()

        asyncio.run(main())


def kafka_stub(proc: subprocess.Popen[bytes], log: Path) -> ZkModeKafka:
    """wait_until's liveness check for a process that is not Kafka."""
    stub = ZkModeKafka.__new__(ZkModeKafka)
    stub.proc = proc
    stub.log_path = log
    return stub
