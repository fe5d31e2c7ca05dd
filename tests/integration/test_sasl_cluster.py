"""A 3-node KRaft cluster (combined broker+controller nodes) with every listener on
SASL_PLAINTEXT: brokers reach each other with SCRAM-SHA-512 (the credential bootstrapped by
``odradek storage format --add-scram``), and the controller listener uses PLAIN (as in Kafka,
SCRAM cannot secure the controller quorum: its credentials live in the log the quorum serves).
Data replicates; a credential created with AlterUserScramCredentials works at once on every broker
and survives a restart of the whole cluster."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from .support import die_with_parent, unique_name
from .test_raft_quorum import CLUSTER_ID, _free_ports

ADMIN_SCRAM = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
               'username="admin" password="admin-secret";')
CONTROLLER_PLAIN = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                    'username="ctl" password="ctl-secret" user_ctl="ctl-secret";')


class Node:
    def __init__(self, node_id: int, port: int, ctl_port: int, voters: str, base: Path) -> None:
        self.node_id = node_id
        self.port = port
        self.data = base / f"n{node_id}"
        self.log_path = base / f"n{node_id}.log"
        self.config = base / f"n{node_id}.properties"
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{ctl_port}",
            "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
            "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": voters,
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": ADMIN_SCRAM,
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": CONTROLLER_PLAIN,
            "log.dirs": str(self.data),
            "offsets.topic.replication.factor": "3",
            "group.initial.rebalance.delay.ms": "0",
        }
        self.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.proc: subprocess.Popen[bytes] | None = None

    def format(self) -> None:
        subprocess.run(
            [sys.executable, "-m", "odradek.cli.main", "storage", "format", "--config", str(self.config),
             "--cluster-id", CLUSTER_ID, "--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret]"],
            check=True, capture_output=True, timeout=60,
        )

    def start(self) -> None:
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "odradek.cli.main", "server", "--config", str(self.config)],
                stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent,
            )

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def log_tail(self) -> str:
        return f"--- node {self.node_id} ---\n" + self.log_path.read_text("utf-8", "replace")[-3000:]


def running(nodes: list[Node]) -> Iterator[list[Node]]:
    """Format and start ``nodes`` (a cluster fixture's body: ``yield from running(nodes)``), then
    stop them all: SIGTERM to every node first, so they shut down side by side."""
    for n in nodes:
        n.format()
    for n in nodes:
        n.start()
    try:
        yield nodes
    finally:
        for n in nodes:
            if n.proc is not None:
                n.proc.terminate()
        for n in nodes:
            n.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[Node]]:
    ports = _free_ports(6)
    voters = ",".join(f"{i + 1}@127.0.0.1:{ports[3 + i]}" for i in range(3))
    nodes = [Node(i + 1, ports[i], ports[3 + i], voters, tmp_path) for i in range(3)]
    yield from running(nodes)


def _conf(node: Node, user: str = "admin", password: str = "admin-secret",
          mechanism: str = "SCRAM-SHA-512") -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{node.port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def _logs(nodes: list[Node]) -> str:
    return "\n".join(n.log_tail() for n in nodes)


def _wait_brokers(nodes: list[Node], deadline_s: float = 120) -> None:
    end = time.monotonic() + deadline_s
    for n in nodes:
        admin = AdminClient(_conf(n))
        seen: set[int] = set()
        while time.monotonic() < end:
            try:
                seen = set(admin.list_topics(timeout=3).brokers)
            except KafkaException:
                seen = set()
            if seen == {1, 2, 3}:
                break
            time.sleep(0.3)
        else:
            raise AssertionError(f"node {n.node_id} sees brokers {seen}:\n{_logs(nodes)}")


def _roundtrip(node: Node, topic: str, conf: dict[str, Any], values: list[bytes]) -> None:
    p = Producer({**conf, "acks": "all"})
    for v in values:
        p.produce(topic, v)
    assert p.flush(60) == 0
    c = Consumer({**conf, "group.id": unique_name("g"), "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    end = time.monotonic() + 60
    while len(got) < len(values) and time.monotonic() < end:
        msg = c.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    c.close()
    assert got == values


def test_three_nodes_on_sasl_replicate_and_keep_credentials(cluster: list[Node]) -> None:
    _wait_brokers(cluster)
    admin = AdminClient(_conf(cluster[0]))
    topic = unique_name("sasl-rf3")
    admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=30)[topic].result(timeout=60)
    values = [f"m{i}".encode() for i in range(20)]
    _roundtrip(cluster[1], topic, _conf(cluster[1]), values)
    # Replicated over the SCRAM inter-broker connections: every replica in the ISR.
    end = time.monotonic() + 60
    isr: list[int] = []
    while time.monotonic() < end:
        md = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
        isr = sorted(md.isrs)
        if isr == [1, 2, 3]:
            break
        time.sleep(0.3)
    assert isr == [1, 2, 3], _logs(cluster)
    logs = "".join(n.log_path.read_text("utf-8", "replace") for n in cluster)
    assert "authenticated as User:admin with SCRAM-SHA-512" in logs  # brokers to brokers
    assert "authenticated as User:ctl with PLAIN" in logs  # to the controllers
    # A credential made on one node works on every broker at once.
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"frank-secret")])
    futures["frank"].result(timeout=60)
    for n in cluster:
        conf = _conf(n, "frank", "frank-secret", "SCRAM-SHA-256")
        end = time.monotonic() + 30
        while True:  # (each broker applies the record when it replays it)
            try:
                AdminClient(conf).list_topics(timeout=5)
                break
            except KafkaException:
                if time.monotonic() > end:
                    raise
    # ... and after a restart of the whole cluster.
    for n in cluster:
        assert n.proc is not None
        n.proc.terminate()
    for n in cluster:
        n.stop()
    for n in cluster:
        n.start()
    _wait_brokers(cluster)
    _roundtrip(cluster[2], topic, _conf(cluster[2], "frank", "frank-secret", "SCRAM-SHA-256"), values)
