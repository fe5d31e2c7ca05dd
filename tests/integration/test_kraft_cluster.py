"""A KRaft cluster of real ``odradek server`` processes on loopback: three controller-only voters
and two broker-only nodes (``process.roles=broker``) that follow the metadata log as Raft
observers and reach the active controller over the network. An AdminClient creates a topic
through one broker, both brokers list it, records produced through one broker are consumed
through the other, and after kill -9 of the active controller, CreateTopics through a broker
succeeds again once a new controller is elected. The same with three combined
(``process.roles=broker,controller``) voters."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from odradek.cli.cluster import LocalCluster

from .kraft_processes import _create_topic
from .test_raft_quorum import Controller, _free_ports, find_leader


@pytest.mark.timeout(240)
def test_three_controllers_two_brokers(tmp_path: Path) -> None:
    cluster = LocalCluster(3, 2, tmp_path, die_with_parent=True)
    broker_a, broker_b = cluster.brokers
    try:
        started = time.monotonic()
        # start() returns once the Metadata of both brokers lists both (registered, unfenced).
        cluster.start(timeout=90)
        for b in (broker_a, broker_b):
            assert set(AdminClient({"bootstrap.servers": b.address}).list_topics(timeout=10).brokers) == {101, 102}
        print(f"both brokers registered and serving after {time.monotonic() - started:.2f}s")

        topic = "kraft-cluster"
        admin_a = AdminClient({"bootstrap.servers": broker_a.address})
        _create_topic(admin_a, topic, 2)

        # Both brokers list the topic with a live leader for each partition.
        leaders: dict[int, int] = {}
        for b in (broker_a, broker_b):
            admin = AdminClient({"bootstrap.servers": b.address})
            end = time.monotonic() + 30
            parts: dict[int, int] = {}
            while time.monotonic() < end:
                md = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
                if md is not None and md.error is None:
                    parts = {p: pm.leader for p, pm in md.partitions.items()}
                    if len(parts) == 2 and all(v in (101, 102) for v in parts.values()):
                        break
                time.sleep(0.2)
            assert sorted(parts) == [0, 1] and all(v in (101, 102) for v in parts.values()), (b.node_id, parts)
            if leaders:
                assert parts == leaders  # the same metadata on both brokers
            leaders = parts
        print(f"partition leaders: {leaders}")

        # Produce through broker A (librdkafka sends each partition to its leader, whichever
        # broker that is), consume back through bootstrap broker B.
        producer = Producer({"bootstrap.servers": broker_a.address, "acks": "all"})
        sent = {(p, f"v{p}-{i}".encode()) for p in (0, 1) for i in range(10)}
        errors: list[str] = []

        def report(err: object, _msg: object) -> None:
            if err is not None:
                errors.append(str(err))

        for p, v in sorted(sent):
            producer.produce(topic, value=v, partition=p, on_delivery=report)
        assert producer.flush(30) == 0
        assert errors == []

        consumer = Consumer({"bootstrap.servers": broker_b.address, "group.id": "kraft-cluster",
                             "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
            got: set[tuple[int, bytes]] = set()
            end = time.monotonic() + 30
            while time.monotonic() < end and len(got) < len(sent):
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.add((msg.partition(), msg.value()))
            assert got == sent
        finally:
            consumer.close()

        # kill -9 the active controller: CreateTopics through a broker succeeds again once the
        # other voters elect a new leader and the brokers follow it.
        leader = cluster.wait_active_controller(30)
        cluster.kill(leader)
        killed_at = time.monotonic()
        admin_b = AdminClient({"bootstrap.servers": broker_b.address})
        last: Exception | None = None
        created = False
        while time.monotonic() < killed_at + 45 and not created:
            try:
                _create_topic(admin_b, "after-failover", 1, timeout_s=10)
                created = True
            except Exception as e:  # noqa: BLE001 - retried until the deadline, reported below
                last = e
                if "TOPIC_ALREADY_EXISTS" in str(e):
                    created = True
                time.sleep(0.5)
        assert created, f"CreateTopics after failover: {last}\n" + "\n".join(n.log_tail() for n in cluster.nodes)
        print(f"CreateTopics after kill -9 of controller {leader.node_id} succeeded after "
              f"{time.monotonic() - killed_at:.2f}s")
        md = admin_a.list_topics(topic="after-failover", timeout=10).topics["after-failover"]
        end = time.monotonic() + 15
        while md.error is not None and time.monotonic() < end:
            time.sleep(0.2)
            md = admin_a.list_topics(topic="after-failover", timeout=10).topics["after-failover"]
        assert md.error is None and len(md.partitions) == 1
    finally:
        cluster.stop()


@pytest.mark.timeout(240)
def test_three_combined_voters(tmp_path: Path) -> None:
    """Three process.roles=broker,controller voters: each broker reaches the active controller
    (in its own process or another) over the network."""
    ports = _free_ports(6)
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports[:3]))
    nodes = [Controller(i + 1, p, voters, tmp_path) for i, p in enumerate(ports[:3])]
    for i, n in enumerate(nodes):
        n.config.write_text(
            "process.roles=broker,controller\n"
            f"node.id={n.node_id}\n"
            f"listeners=PLAINTEXT://127.0.0.1:{ports[3 + i]},CONTROLLER://127.0.0.1:{n.port}\n"
            "controller.listener.names=CONTROLLER\n"
            f"controller.quorum.voters={voters}\n"
            f"log.dirs={n.data}\n"
            "offsets.topic.replication.factor=1\n"
        )
    for n in nodes:
        n.format()
    for n in nodes:
        n.start()
    bootstrap = {n.node_id: f"127.0.0.1:{ports[3 + i]}" for i, n in enumerate(nodes)}
    try:
        started = time.monotonic()
        admins = {i: AdminClient({"bootstrap.servers": b}) for i, b in bootstrap.items()}
        end = time.monotonic() + 90
        seen: set[int] = set()
        while time.monotonic() < end and seen != {1, 2, 3}:
            try:
                seen = set(admins[1].list_topics(timeout=2).brokers)
            except KafkaException:
                seen = set()
            time.sleep(0.2)
        assert seen == {1, 2, 3}, "\n".join(n.log_tail() for n in nodes)
        print(f"three combined nodes registered after {time.monotonic() - started:.2f}s")

        _create_topic(admins[1], "combined", 3)
        producer = Producer({"bootstrap.servers": bootstrap[1], "acks": "all"})
        sent = {(p, f"c{p}".encode()) for p in range(3)}
        for p, v in sorted(sent):
            producer.produce("combined", value=v, partition=p)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap[2], "group.id": "combined",
                             "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition("combined", p, 0) for p in range(3)])
            got: set[tuple[int, bytes]] = set()
            end = time.monotonic() + 30
            while time.monotonic() < end and len(got) < len(sent):
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.add((msg.partition(), msg.value()))
            assert got == sent
        finally:
            consumer.close()

        leader = asyncio.run(find_leader(nodes, 30))["leader_id"]
        nodes[leader - 1].kill()
        killed_at = time.monotonic()
        survivor = next(i for i in admins if i != leader)
        last: Exception | None = None
        created = False
        while time.monotonic() < killed_at + 45 and not created:
            try:
                # A new client each time: librdkafka keeps waiting for the controller its
                # cached metadata named (the killed node) instead of asking again.
                _create_topic(AdminClient({"bootstrap.servers": bootstrap[survivor]}), "combined-after", 1,
                              timeout_s=5)
                created = True
            except Exception as e:  # noqa: BLE001 - retried until the deadline, reported below
                last = e
                created = "TOPIC_ALREADY_EXISTS" in str(e)
                time.sleep(0.5)
        assert created, f"CreateTopics after failover: {last}\n" + "\n".join(n.log_tail() for n in nodes)
        print(f"CreateTopics through node {survivor} after kill -9 of node {leader} (active controller) "
              f"succeeded after {time.monotonic() - killed_at:.2f}s")
    finally:
        for n in nodes:
            if n.proc is not None:
                n.proc.terminate()
        for n in nodes:
            n.stop()
