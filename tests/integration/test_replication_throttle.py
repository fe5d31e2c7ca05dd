"""Replication throttles in a real cluster (one controller, three brokers, real processes): a
reassignment 1 -> 1,2 with ``odradek reassign --execute --throttle`` moves a few megabytes at a
throttle of 100 kB/s; the follower (and/or the leader) holds the throttled partition back, which
its log says (the quota managers' "holding back" line: throttling is asserted through that, never
through timing); once the rates are removed the reassignment completes and the new replica holds
every record."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from .replication_cluster import ReplicationCluster

TOPIC = "throttled"
RECORDS = 3000
VALUE = b"x" * 1000  # 3 MB in all: several times the first fetch (replica.fetch.max.bytes, 1 MB)
RATE = 100_000


def _throttle_lines(cluster: ReplicationCluster) -> list[str]:
    lines: list[str] = []
    for b in (1, 2):
        text = cluster.brokers[b].log_path.read_text()
        lines += [ln for ln in text.splitlines() if f"replication throttle: holding back {TOPIC}-0" in ln]
    return lines


@pytest.mark.timeout(300)
def test_a_throttled_reassignment_is_held_back_and_completes_once_unthrottled(tmp_path: Path) -> None:
    cluster = ReplicationCluster(tmp_path)
    cluster.start()
    try:
        admin = cluster.admin()
        admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[1]])], request_timeout=20)[TOPIC].result(30)
        cluster.wait_for(TOPIC, lambda s: s[0][0] == 1, what="led by broker 1")
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "linger.ms": 20})
        for i in range(RECORDS):
            producer.produce(TOPIC, VALUE, key=str(i).encode())
            if i % 500 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0

        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": TOPIC, "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]}]}))
        out = cluster.odradek("reassign", "--bootstrap-server", cluster.bootstrap, "--execute",
                              "--reassignment-json-file", str(plan), "--throttle", str(RATE)).stdout
        assert f"The inter-broker throttle limit was set to {RATE} B/s" in out

        # Throttling happened: a broker logged that it held the partition back.
        end = time.monotonic() + 60
        while time.monotonic() < end and not _throttle_lines(cluster):
            time.sleep(0.2)
        lines = _throttle_lines(cluster)
        print("\n".join(lines))
        assert lines, cluster.logs()
        assert f"over the quota of {RATE} B/s" in lines[0]

        # The rates removed (the replica lists stay): the reassignment completes.
        for b in (1, 2, 3):
            res = ConfigResource("broker", str(b), incremental_configs=[
                ConfigEntry(k, "", incremental_operation=AlterConfigOpType.DELETE)
                for k in ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
            ])
            admin.incremental_alter_configs([res])[res].result(timeout=30)
        unthrottled = time.monotonic()
        cluster.wait_for(TOPIC, lambda s: s[0][1] == [1, 2] and sorted(s[0][2]) == [1, 2], deadline_s=120,
                         what="reassigned to 1,2 with both in the ISR")
        print(f"reassignment completed {time.monotonic() - unthrottled:.2f} s after the throttle was removed")
        verify = cluster.odradek("reassign", "--bootstrap-server", cluster.bootstrap, "--verify",
                                 "--reassignment-json-file", str(plan)).stdout
        assert "Reassignment of partition throttled-0 is completed." in verify, verify
    finally:
        cluster.stop()
