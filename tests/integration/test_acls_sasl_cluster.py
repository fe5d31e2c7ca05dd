"""A 3-node KRaft cluster on SASL_PLAINTEXT with the StandardAuthorizer: the nodes log in to each
other as ``User:admin`` (SCRAM-SHA-512, brokers) and ``User:ctl`` (PLAIN, controllers), which
``super.users`` names, as Kafka requires (they hold CLUSTER_ACTION); data replicates, and an
ordinary user gets exactly what its ACLs grant on every broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
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

from .support import unique_name, wait_until
from .test_raft_quorum import _free_ports
from .test_sasl_cluster import Node, _conf, _logs, _roundtrip, _wait_brokers, running

ACL_PROPS = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin;User:ctl",
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[Node]]:
    ports = _free_ports(6)
    voters = ",".join(f"{i + 1}@127.0.0.1:{ports[3 + i]}" for i in range(3))
    nodes = [Node(i + 1, ports[i], ports[3 + i], voters, tmp_path) for i in range(3)]
    for n in nodes:
        with open(n.config, "a", encoding="utf-8") as f:
            f.write("".join(f"{k}={v}\n" for k, v in ACL_PROPS.items()))
    yield from running(nodes)


def test_sasl_cluster_with_authorizer_replicates_and_enforces_acls(cluster: list[Node]) -> None:
    _wait_brokers(cluster)
    admin = AdminClient(_conf(cluster[0]))
    topic = unique_name("acl-rf3")
    admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=30)[topic].result(timeout=60)
    values = [f"m{i}".encode() for i in range(10)]
    _roundtrip(cluster[1], topic, _conf(cluster[1]), values)  # the super user
    wait_until(lambda: sorted(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].isrs) == [1, 2, 3],
               timeout=60, what="three replicas in sync:\n" + _logs(cluster))
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"alice-secret")])["alice"].result(60)

    def alice_produce(node: Node) -> KafkaError | None:
        p = Producer({**_conf(node, "alice", "alice-secret"), "message.timeout.ms": 10000})
        errors: list[KafkaError | None] = []
        p.produce(topic, b"a", on_delivery=lambda err, _m: errors.append(err))
        p.flush(30)
        return errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT)

    err = alice_produce(cluster[2])
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.WRITE, AclPermissionType.ALLOW)
    admin.create_acls([binding])[binding].result(60)
    for n in cluster:  # every broker applies the ACL from the metadata log
        wait_until(lambda n=n: alice_produce(n) is None, timeout=30, what=f"alice allowed on node {n.node_id}")
