"""A 3-node KRaft cluster (combined broker+controller nodes) with every connection on SASL_SSL:
the client and inter-broker listener authenticates with SCRAM-SHA-512 (the brokers' credential
bootstrapped by ``odradek storage format --add-scram``), the controller listener with PLAIN (SCRAM
cannot secure the quorum that serves its credentials), both over TLS with host names checked.
The StandardAuthorizer is on with the nodes' principals in super.users: a topic with three
replicas stays in sync with the same log on each node, a client with ACLs produces and consumes,
and a broker killed with SIGKILL rejoins the ISR after its restart."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.unit.tls_certs import TlsFiles, make_tls_files

from .support import unique_name, wait_until
from .test_raft_quorum import _free_ports
from .test_sasl_cluster import ADMIN_SCRAM, CONTROLLER_PLAIN, Node, _logs, _roundtrip, running


class SaslSslNode(Node):
    def __init__(self, node_id: int, port: int, ctl_port: int, voters: str, base: Path, tls: TlsFiles) -> None:
        super().__init__(node_id, port, ctl_port, voters, base)
        self.tls = tls
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "listeners": f"INTERNAL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{ctl_port}",
            "advertised.listeners": f"INTERNAL://127.0.0.1:{port}",
            "listener.security.protocol.map": "INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL",
            "inter.broker.listener.name": "INTERNAL",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": voters,
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.internal.scram-sha-512.sasl.jaas.config": ADMIN_SCRAM,
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": CONTROLLER_PLAIN,
            **tls.server_props(),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin;User:ctl",
            "log.dirs": str(self.data),
            "offsets.topic.replication.factor": "3",
            "group.initial.rebalance.delay.ms": "0",
        }
        self.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.proc = None


def _conf(node: Node, tls: TlsFiles, user: str = "admin", password: str = "admin-secret") -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{node.port}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(tls.ca_pem),
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[SaslSslNode]]:
    tls = make_tls_files(tmp_path / "certs")
    ports = _free_ports(6)
    voters = ",".join(f"{i + 1}@127.0.0.1:{ports[3 + i]}" for i in range(3))
    nodes = [SaslSslNode(i + 1, ports[i], ports[3 + i], voters, tmp_path, tls) for i in range(3)]
    yield from running(nodes)


def _brokers(admin: AdminClient) -> set[int]:
    try:
        return set(admin.list_topics(timeout=3).brokers)
    except Exception:  # noqa: BLE001 - not serving yet
        return set()


def _isr(admin: AdminClient, topic: str) -> list[int]:
    try:
        return sorted(admin.list_topics(topic, timeout=5).topics[topic].partitions[0].isrs)
    except Exception:  # noqa: BLE001 - a broker going away
        return []


def _log_sizes(nodes: list[SaslSslNode], topic: str) -> set[int]:
    return {sum(f.stat().st_size for f in (n.data / f"{topic}-0").glob("*.log")) for n in nodes}


def test_three_nodes_on_sasl_ssl_with_authorizer(cluster: list[SaslSslNode]) -> None:
    tls = cluster[0].tls
    for n in cluster:
        wait_until(lambda n=n: _brokers(AdminClient(_conf(n, tls))) == {1, 2, 3}, 120,
                   what=f"node {n.node_id} seeing three brokers:\n" + _logs(cluster))
    admin = AdminClient(_conf(cluster[0], tls))
    topic = unique_name("sasl-ssl-rf3")
    admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=30)[topic].result(timeout=60)
    values = [f"m{i}".encode() for i in range(20)]
    _roundtrip(cluster[1], topic, _conf(cluster[1], tls), values)  # the super user
    wait_until(lambda: _isr(admin, topic) == [1, 2, 3], 60, what="three replicas in sync:\n" + _logs(cluster))
    wait_until(lambda: len(_log_sizes(cluster, topic)) == 1 and _log_sizes(cluster, topic) != {0}, 60,
               what="the same log on the three nodes")
    logs = "".join(n.log_path.read_text("utf-8", "replace") for n in cluster)
    assert "authenticated as User:admin with SCRAM-SHA-512" in logs  # brokers to brokers
    assert "authenticated as User:ctl with PLAIN" in logs  # to the controllers
    assert "TLS handshake with" not in logs and "AUTHORIZATION_FAILED" not in logs, _logs(cluster)

    # A client with ACLs: refused until allowed, then produces and consumes on every broker.
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"alice-secret")])["alice"].result(60)

    def alice_produce(node: Node) -> KafkaError | None:
        p = Producer({**_conf(node, tls, "alice", "alice-secret"), "message.timeout.ms": 10000})
        errors: list[KafkaError | None] = []
        p.produce(topic, b"a", on_delivery=lambda err, _m: errors.append(err))
        p.flush(30)
        return errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT)

    err = alice_produce(cluster[2])
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    bindings = [
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*", op,
                   AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)
    ] + [AclBinding(ResourceType.GROUP, "alice-", ResourcePatternType.PREFIXED, "User:alice", "*",
                    AclOperation.READ, AclPermissionType.ALLOW)]
    for f in admin.create_acls(bindings).values():
        f.result(60)
    for n in cluster:
        wait_until(lambda n=n: alice_produce(n) is None, 30, what=f"alice allowed on node {n.node_id}")
    alice_values = [f"alice{i}".encode() for i in range(10)]
    p = Producer({**_conf(cluster[0], tls, "alice", "alice-secret"), "acks": "all"})
    for v in alice_values:
        p.produce(topic, v)
    assert p.flush(60) == 0
    c = Consumer({**_conf(cluster[2], tls, "alice", "alice-secret"), "group.id": unique_name("alice-"),
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    end = time.monotonic() + 60
    while not (got and got[-1] == alice_values[-1]) and time.monotonic() < end:
        msg = c.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    c.close()
    assert got[:len(values)] == values and got[-len(alice_values):] == alice_values, got

    # kill -9 a follower, write while it is down, restart it: it catches up and rejoins the ISR.
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    victim = next(n for n in cluster if n.node_id != leader)
    victim.kill()
    wait_until(lambda: victim.node_id not in _isr(admin, topic), 60, what="the killed broker out of the ISR")
    more = [f"late{i}".encode() for i in range(20)]
    p = Producer({**_conf(cluster[leader - 1], tls), "acks": "all"})
    for v in more:
        p.produce(topic, v)
    assert p.flush(60) == 0
    victim.start()
    wait_until(lambda: _isr(admin, topic) == [1, 2, 3], 90, what="the restarted broker back in the ISR:\n"
               + _logs(cluster))
    wait_until(lambda: len(_log_sizes(cluster, topic)) == 1, 60, what="the same log on the three nodes again")
