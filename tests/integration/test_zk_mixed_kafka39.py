"""Fidelity: a Kafka 3.9.2 ZooKeeper-mode controller drives Odradek brokers.

One real ZooKeeper; an Apache Kafka 3.9.2 broker (id 1) started first wins ``/controller``; two
``odradek server`` processes in ZooKeeper mode (ids 2, 3) register under it. A topic whose
replicas are on the two Odradek brokers only (RF 2, one partition led by each) is written as
Kafka's AdminZkClient writes it; Kafka's controller creates the partition states and sends the
LeaderAndIsr that makes the Odradek brokers leader and follower. confluent-kafka produces with
acks=all; the Odradek broker leading a partition is killed (kill -9); when its registration
expires Kafka's controller elects the other Odradek replica, producing goes on, and every
acknowledged record is read back.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from odradek.controller.kafka_zk_adapter import uuid_to_kafka
from odradek.zk import zk_data as z
from odradek.zk.kafka_zk_client import KafkaZkClient, ZkConfig

from . import zookeeper_support
from .kafka_reference import KafkaTools, find_kafka_tools
from .test_zk_mode import ZkServerProcess
from .zk_cluster_support import ZkModeKafka
from .zookeeper_support import ZooKeeperServer

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka_admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.timeout(400)

TOPIC = "mixed"
KAFKA_ID = 1


class PlainKafka39(ZkModeKafka):
    """Kafka 3.9 in ZooKeeper mode with one PLAINTEXT listener (the inter-broker listener too, so
    its controller reaches the Odradek brokers, which register only PLAINTEXT)."""

    def start(self) -> PlainKafka39:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return self.launch(KAFKA_ID, 6000, {"auto.leader.rebalance.enable": "false",
                                            "group.initial.rebalance.delay.ms": "0"},
                           heap="-Xmx384m", internal_listener=False)


def wait_for(what: str, cond: Callable[[], Any], timeout: float, logs: Callable[[], str]) -> Any:
    return zookeeper_support.wait_for(what, cond, timeout, logs, interval=0.25)


def logged(server: ZkServerProcess, line: str) -> bool:
    return line in server.log_tail(100000)


def non_empty(path: Path) -> bool:
    return path.stat().st_size > 0


def produce(bootstrap: str, values: list[bytes], partitions: int, idempotent: bool) -> list[bytes]:
    acked: list[bytes] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value())

    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": idempotent,
                                  "message.timeout.ms": 60000, "retry.backoff.ms": 200})
    for i, v in enumerate(values):
        p.produce(TOPIC, value=v, partition=i % partitions, on_delivery=delivered)
        p.poll(0)
    p.flush(90)
    return acked


def read_all(bootstrap: str, n: int, partitions: int) -> list[bytes]:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    got: list[bytes] = []
    try:
        c.assign([confluent_kafka.TopicPartition(TOPIC, p, confluent_kafka.OFFSET_BEGINNING)
                  for p in range(partitions)])
        deadline = time.monotonic() + 90
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value() or b"")
    finally:
        c.close()
    return got


@pytest.mark.parametrize("kafka_replica", [False, True], ids=["rf2-odradek-only", "rf3-with-kafka"])
def test_kafka_39_controller_drives_odradek_brokers_through_a_kill(tmp_path: Path, kafka_replica: bool) -> None:
    """RF 2 on the Odradek brokers only (non-idempotent producer), or RF 3 with the Kafka broker a
    follower fetching from the Odradek leaders (idempotent producer: the Odradek brokers get their
    producer id blocks from Kafka's controller with AllocateProducerIds)."""
    tools: KafkaTools = find_kafka_tools("3.9")
    with ZooKeeperServer() as zk:
        connect = zk.connect + "/mixed"
        kafka = PlainKafka39(tools, connect, tmp_path / "kafka")
        ours = {i: ZkServerProcess(tmp_path / f"odradek{i}", connect, i) for i in (2, 3)}
        admin = KafkaZkClient(ZkConfig(connect, 10000, 20000))

        def logs() -> str:
            return "\n".join([f"--- kafka ---\n{kafka.log_tail()}"] +
                             [f"--- odradek {i} ---\n{b.log_tail(3000)}" for i, b in ours.items()])

        try:
            kafka.start()
            admin.start()
            wait_for("Kafka to win /controller", lambda: admin.get_controller_id() == KAFKA_ID, 120, logs)
            for b in ours.values():
                b.start(60)
            wait_for("three registrations", lambda: admin.get_sorted_broker_list() == [1, 2, 3], 60, logs)
            assert admin.get_controller_id() == KAFKA_ID  # the Odradek brokers lost the election
            for b in ours.values():
                assert "Ready to serve as the new controller" not in b.log_tail(100000)

            extra = (KAFKA_ID,) if kafka_replica else ()
            admin.create_topic_assignment(TOPIC, uuid_to_kafka(uuid.uuid4()),
                                          {0: z.ReplicaAssignment((2, 3) + extra), 1: z.ReplicaAssignment((3, 2) + extra)})
            tps = [(TOPIC, 0), (TOPIC, 1)]

            def states() -> dict[tuple[str, int], z.PartitionState]:
                return admin.get_topic_partition_states(tps)

            wait_for("Kafka's controller to elect the Odradek replicas", lambda: len(states()) == 2 and
                     states()[tps[0]].leader == 2 and states()[tps[1]].leader == 3, 60, logs)
            first = states()
            assert all(sorted(s.isr) == sorted((2, 3) + extra) for s in first.values()), first
            # the Odradek brokers acted on Kafka's LeaderAndIsr: leader and follower on each
            bootstrap = ",".join([kafka.bootstrap] + [b.bootstrap_servers for b in ours.values()])
            ac = kafka_admin.AdminClient({"bootstrap.servers": bootstrap})
            md = wait_for("metadata with both partitions", lambda: (lambda t: t if t is not None and len(
                t.partitions) == 2 else None)(ac.list_topics(TOPIC, timeout=10).topics.get(TOPIC)), 60, logs)
            assert {p: md.partitions[p].leader for p in (0, 1)} == {0: 2, 1: 3}
            line = "Handled LeaderAndIsr from controller 1 epoch 1: 1 leader(s), 1 follower(s), 0 refused"
            for b in ours.values():
                assert wait_for("the LeaderAndIsr log line", functools.partial(logged, b, line), 30, logs)

            before = [f"a{i}".encode() for i in range(100)]
            acked = produce(bootstrap, before, 2, kafka_replica)
            assert sorted(acked) == sorted(before)

            if kafka_replica:  # the Kafka follower fetched the records from the Odradek leaders
                for p in (0, 1):
                    seg = kafka.data_dir / "logs" / f"{TOPIC}-{p}" / "00000000000000000000.log"
                    wait_for(f"Kafka's replica of {TOPIC}-{p} to fetch", functools.partial(non_empty, seg), 30, logs)
                assert all(KAFKA_ID in s.isr for s in states().values())
            # kill -9 the Odradek broker leading partition 0
            ours[2].kill()
            wait_for("Kafka's controller to move partition 0 to broker 3", lambda: (
                states()[tps[0]].leader == 3 and sorted(states()[tps[0]].isr) == sorted((3,) + extra)), 60, logs)
            after_state = states()[tps[0]]
            assert after_state.leader_epoch > first[tps[0]].leader_epoch
            survivors = ",".join([kafka.bootstrap, ours[3].bootstrap_servers])
            after = [f"b{i}".encode() for i in range(100)]
            acked += produce(survivors, after, 2, kafka_replica)
            assert set(after) <= set(acked), "records to the surviving leader were not acknowledged"
            got = read_all(survivors, len(acked), 2)
            assert set(acked) <= set(got), f"acknowledged but lost: {sorted(set(acked) - set(got))[:10]}"
            assert "STALE_CONTROLLER_EPOCH" not in kafka.log_path.read_text("utf-8", "replace")
        finally:
            admin.close()
            for b in ours.values():
                b.kill()
            kafka.stop()
