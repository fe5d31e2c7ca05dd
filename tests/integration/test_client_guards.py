"""What real clients see where Odradek guards itself or reports what it lacks: authorized
operations in admin describes, appends to internal topics, transactional producers' start."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic

from odradek.embedded import EmbeddedBroker

from .support import unique_name

pytestmark = pytest.mark.integration


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


# ---- authorized operations -------------------------------------------------------------------

TOPIC_OPS = {
    AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
    AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
}
CLUSTER_OPS = {
    AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE,
}
GROUP_OPS = {
    AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
    AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
}


def test_admin_describes_show_authorized_operations(broker: EmbeddedBroker, topic_name: str) -> None:
    a = admin(broker.bootstrap_servers)
    a.create_topics([NewTopic(topic_name, 1)])[topic_name].result(30)

    desc = a.describe_topics(TopicCollection([topic_name]), include_authorized_operations=True)[topic_name].result(30)
    assert set(desc.authorized_operations) == TOPIC_OPS
    cluster = a.describe_cluster(include_authorized_operations=True).result(30)
    assert set(cluster.authorized_operations) == CLUSTER_OPS
    plain = a.describe_cluster().result(30)
    assert not plain.authorized_operations  # not asked: "not included"

    group = unique_name("g")
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        assert c.assignment(), "the consumer never joined"
        g = a.describe_consumer_groups([group], include_authorized_operations=True)[group].result(30)
        assert set(g.authorized_operations) == GROUP_OPS
    finally:
        c.close()


# ---- internal topics -------------------------------------------------------------------------


def test_producer_cannot_append_to_consumer_offsets(broker: EmbeddedBroker, topic_name: str) -> None:
    group = unique_name("g")
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group, "enable.auto.commit": False})
    try:  # joining a group makes the coordinator create __consumer_offsets
        c.subscribe([topic_name])
        deadline = time.monotonic() + 30
        while "__consumer_offsets" not in c.list_topics(timeout=30).topics and time.monotonic() < deadline:
            c.poll(0.2)
    finally:
        c.close()
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "message.timeout.ms": 20000})
    p.produce("__consumer_offsets", key=b"forged", value=b"\x00", partition=0,
              on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0
    (err,) = errors
    assert err is not None and err.code() == KafkaError.TOPIC_EXCEPTION, err


# ---- transactions ----------------------------------------------------------------------------
# (Until the transaction coordinator, init_transactions failed at once with
# TRANSACTIONAL_ID_AUTHORIZATION_FAILED; now every client's transactional start works.)


def test_kafka_python_and_aiokafka_init_transactions(broker: EmbeddedBroker) -> None:
    import asyncio

    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, transactional_id=unique_name("tx"))
    try:
        p.init_transactions()
        p.begin_transaction()
        p.abort_transaction()
    finally:
        p.close(timeout=5)

    async def main() -> None:
        ap = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers, transactional_id=unique_name("tx"))
        try:
            await asyncio.wait_for(ap.start(), 30)
            await ap.begin_transaction()
            await asyncio.wait_for(ap.abort_transaction(), 30)
        finally:
            await ap.stop()

    asyncio.run(main())
