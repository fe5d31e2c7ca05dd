"""The last stable offset across a leader failover, with real ``odradek server`` processes (one
controller, three brokers): transactional batches and markers written by hand to the leader
replicate with the producer state; after kill -9 of the leader the new leader holds its LSO at
the transaction still open, serves read_committed and ListOffsets from it, and moves it once the
(retried) marker reaches it; a read_committed consumer then reads exactly the committed records."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors

from .replication_cluster import ReplicationCluster
from .support import produce_request, transactional_batch, write_txn_markers_request

TOPIC = "txn-failover"


def _produce(cluster: ReplicationCluster, broker: int, pid: int, values: list[str]) -> None:
    batch = transactional_batch(pid, [v.encode() for v in values])
    r = cluster.send(m.PRODUCE, 9, produce_request(TOPIC, 0, batch, transactional_id=f"tx-{pid}"), broker)
    assert r["responses"][0]["partition_responses"][0]["error_code"] == Errors.NONE, r


def _marker(cluster: ReplicationCluster, broker: int, pid: int, commit: bool) -> int:
    r = cluster.send(m.WRITE_TXN_MARKERS, 1, write_txn_markers_request(pid, commit, TOPIC), broker)
    return int(r["markers"][0]["topics"][0]["partitions"][0]["error_code"])


def _fetch(cluster: ReplicationCluster, broker: int, isolation: int) -> dict[str, Any]:
    r = cluster.send(m.FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": isolation,
        "session_id": 0, "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1}]}]}, broker)
    return r["responses"][0]["partitions"][0]  # type: ignore[no-any-return]


def _latest(cluster: ReplicationCluster, broker: int, isolation: int) -> tuple[int, int]:
    r = cluster.send(m.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]}, broker)
    p = r["topics"][0]["partitions"][0]
    return int(p["error_code"]), int(p["offset"])


def _until(what: str, check: Any, cluster: ReplicationCluster, deadline_s: float = 60) -> Any:
    end = time.monotonic() + deadline_s
    last: Any = None
    while time.monotonic() < end:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"never {what}: last {last}\n{cluster.logs()}")


@pytest.mark.timeout(300)
def test_lso_on_the_new_leader_after_kill_9_of_the_old(tmp_path: Path) -> None:
    cluster = ReplicationCluster(tmp_path, broker_extra="transaction.partition.verification.enable=false\n")
    cluster.start()
    try:
        admin = cluster.admin()
        admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(30)
        leader = cluster.wait_for(TOPIC, lambda s: s[0][0] > 0 and len(s[0][2]) == 3, what="fully in sync")[0][0]
        pids = []
        for _ in range(3):
            r = cluster.send(m.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000}, leader)
            assert r["error_code"] == Errors.NONE
            pids.append(r["producer_id"])
        still_open, committed, aborted = pids
        _produce(cluster, leader, still_open, ["open-1"])  # offset 0, left open
        _produce(cluster, leader, committed, ["c-1", "c-2"])  # 1-2
        assert _marker(cluster, leader, committed, True) == Errors.NONE  # 3
        _produce(cluster, leader, aborted, ["a-1"])  # 4
        assert _marker(cluster, leader, aborted, False) == Errors.NONE  # 5
        assert _latest(cluster, leader, 1) == (Errors.NONE, 0)
        assert _latest(cluster, leader, 0) == (Errors.NONE, 6)  # acks=all: every replica has it

        cluster.brokers[leader].kill()
        new = cluster.wait_for(TOPIC, lambda s: s[0][0] not in (-1, leader), what="led by another broker")[0][0]
        # The new leader's HW reaches the end once the other follower has fetched; its LSO
        # stays at the open transaction (the replicated producer state).
        _until("the new leader's HW at 6", lambda: _latest(cluster, new, 0) == (Errors.NONE, 6), cluster)
        assert _latest(cluster, new, 1) == (Errors.NONE, 0)
        rc = _fetch(cluster, new, 1)
        assert (rc["error_code"], rc["last_stable_offset"], rc["high_watermark"]) == (Errors.NONE, 0, 6)
        assert not rc["records"]
        # The coordinator retries the marker against the new leader (the dead broker leaves the
        # ISR once fenced, so acks=all completes).
        _until("the marker accepted by the new leader",
               lambda: _marker(cluster, new, still_open, True) == Errors.NONE, cluster)
        _until("the LSO past the marker", lambda: _latest(cluster, new, 1) == (Errors.NONE, 7), cluster)

        live = ",".join(b.bootstrap for i, b in cluster.brokers.items() if i != leader)
        c = Consumer({"bootstrap.servers": live, "group.id": "rc", "isolation.level": "read_committed",
                      "enable.auto.commit": False})
        try:
            c.assign([TopicPartition(TOPIC, 0, 0)])
            got: list[str] = []
            end = time.monotonic() + 30
            while time.monotonic() < end and len(got) < 3:
                msg = c.poll(0.2)
                if msg is not None and msg.error() is None:
                    got.append(msg.value().decode())
            assert got == ["open-1", "c-1", "c-2"]
            # Nothing else arrives: the aborted record is dropped by the client.
            end = time.monotonic() + 2
            while time.monotonic() < end:
                msg = c.poll(0.2)
                assert msg is None or msg.error() is not None, msg.value()
        finally:
            c.close()
    finally:
        cluster.stop()
