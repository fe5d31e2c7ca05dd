"""The transaction coordinator moves with the leadership of ``__transaction_state`` on a cluster
of three brokers: markers go to partition leaders on other brokers, and when the coordinator is
killed (kill -9) with a transaction open, the broker that takes the partition over loads the
transaction and the producer's commit completes it as a whole."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors

from .replication_cluster import ReplicationCluster
from .support import read_committed, unique_name

pytestmark = pytest.mark.integration

BROKER_EXTRA = (
    "transaction.state.log.num.partitions=1\n"
    "transaction.state.log.replication.factor=3\n"
    "transaction.state.log.min.isr=2\n"
)


def _coordinator(cluster: ReplicationCluster, tid: str, via: int, not_node: int = -1) -> int:
    """FindCoordinator, until it names a broker other than ``not_node`` (a killed broker stays
    the leader until its session times out, as in Kafka)."""
    deadline = time.monotonic() + 60
    while True:
        r = cluster.send(m.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [tid]}, broker=via)
        (c,) = r["coordinators"]
        if c["error_code"] == Errors.NONE and c["node_id"] != not_node:
            return int(c["node_id"])
        assert time.monotonic() < deadline, f"no transaction coordinator for {tid}: {c}\n{cluster.logs()}"
        time.sleep(0.2)


@pytest.mark.timeout(400)
def test_coordinator_killed_with_a_transaction_open(tmp_path: Path) -> None:
    cluster = ReplicationCluster(tmp_path, broker_extra=BROKER_EXTRA)
    cluster.start()
    try:
        topic = unique_name("out")
        admin = cluster.admin()
        admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})])[topic].result(60)
        tid = unique_name("tx")
        coordinator = _coordinator(cluster, tid, via=1)
        p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid,
                      "transaction.timeout.ms": 120000, "enable.idempotence": True})
        p.init_transactions(60)
        # A first transaction: its markers go to the three partition leaders (two of them on
        # other brokers than the coordinator).
        p.begin_transaction()
        for i in range(30):
            p.produce(topic, f"first-{i}".encode(), partition=i % 3)
        p.commit_transaction(60)
        p.begin_transaction()
        for i in range(30):
            p.produce(topic, f"aborted-{i}".encode(), partition=i % 3)
        p.abort_transaction(60)

        # A transaction open when its coordinator dies.
        p.begin_transaction()
        for i in range(30):
            p.produce(topic, f"second-{i}".encode(), partition=i % 3)
        assert p.flush(60) == 0
        cluster.brokers[coordinator].kill()
        survivor = next(b for b in cluster.brokers if b != coordinator)
        new_coordinator = _coordinator(cluster, tid, via=survivor, not_node=coordinator)
        p.commit_transaction(120)

        bootstrap = ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != coordinator)
        got = read_committed(bootstrap, topic, 3, 60, timeout=60)
        expected = [f"first-{i}".encode() for i in range(30)] + [f"second-{i}".encode() for i in range(30)]
        assert sorted(got) == sorted(expected)
        d = cluster.send(m.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]}, broker=new_coordinator)
        (state,) = d["transaction_states"]
        assert state["error_code"] == Errors.NONE and state["transaction_state"] == "CompleteCommit", state
    finally:
        cluster.stop()
