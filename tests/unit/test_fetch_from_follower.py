"""Fetch from the closest replica (KIP-392): with ``replica.selector.class`` the rack-aware
selector, the leader sends a consumer (Fetch v11+ with a ``rack_id``) to an in-sync follower in its
rack through ``preferred_read_replica`` (no records then, answered at once); a follower serves a
consumer's Fetch v11+ up to its own HW, and refuses older consumers (NOT_LEADER_OR_FOLLOWER)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from test_replica_manager import TOPIC_ID, TP, Setup, produce

from odradek.protocol.errors import Errors
from odradek.records.builder import build_batch
from odradek.server.delayed_fetch import FetchPartitionRequest
from odradek.server.replica_selector import (
    RACK_AWARE,
    RackAwareReplicaSelector,
    ReplicaView,
    UnknownReplicaSelector,
    replica_selector,
)

RACKS = {1: "a", 2: "b", 3: "b", 4: "c"}


@pytest.fixture
def s(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


def cluster(s: Setup, leader: int, isr: list[int], leader_epoch: int = 0) -> None:
    s.publish(*(("RegisterBrokerRecord", {
        "broker_id": b, "broker_epoch": 10 + b, "incarnation_id": uuid.UUID(int=b), "fenced": False,
        "rack": rack,
        "end_points": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9100 + b, "security_protocol": 0}],
    }) for b, rack in RACKS.items()))
    s.publish(("TopicRecord", {"name": "t", "topic_id": TOPIC_ID}),
              ("PartitionRecord", {"partition_id": 0, "topic_id": TOPIC_ID, "replicas": [1, 2, 3], "isr": isr,
                                   "leader": leader, "leader_epoch": leader_epoch, "partition_epoch": 0}))
    s.worker.run_all()


def consumer_fetch(s: Setup, offset: int, rack: str | None, epoch: int = -1, wait: int = 0) -> Any:
    return s.rm.fetch_messages(wait, 1, 1 << 20, 0, [FetchPartitionRequest("t", 0, offset, 1 << 20, epoch)],
                               client_rack=rack)


def test_rack_aware_selector_rules() -> None:
    sel = RackAwareReplicaSelector()
    leader = ReplicaView(1, "a", 10, 0)
    near_behind = ReplicaView(2, "b", 8, 0)
    near_ahead = ReplicaView(3, "b", 10, 500)
    assert sel.select("", leader, [near_behind, near_ahead]) is leader  # no client rack
    assert sel.select("a", leader, [near_behind, near_ahead]) is leader  # the leader is in it
    assert sel.select("z", leader, [near_behind, near_ahead]) is leader  # nobody in it
    assert sel.select("b", leader, [near_behind, near_ahead]) is near_ahead  # most caught up
    recent = ReplicaView(2, "b", 10, 100)
    assert sel.select("b", leader, [recent, near_ahead]) is recent  # then most recently caught up
    assert replica_selector(None) is None and replica_selector("") is None
    assert isinstance(replica_selector(RACK_AWARE), RackAwareReplicaSelector)
    with pytest.raises(UnknownReplicaSelector):
        replica_selector("com.example.MySelector")


def test_leader_sends_a_consumer_to_an_in_sync_follower_in_its_rack(s: Setup) -> None:
    cluster(s, leader=1, isr=[1, 2, 3])
    produce(s, 4)
    (r,) = consumer_fetch(s, 0, "b")
    assert r.result.preferred_read_replica == -1  # no replica.selector.class: always the leader
    s.rm.replica_selector = replica_selector(RACK_AWARE)
    # Followers 2 and 3 (rack b) have not fetched since this leadership: none holds offset 0 yet.
    (r,) = consumer_fetch(s, 0, "b")
    assert r.result.preferred_read_replica == -1 and r.result.high_watermark == 0
    now = [0]
    s.rm.clock_ms = lambda: now[0]
    s.rm.fetch_messages(0, 1, 1 << 20, 0, [FetchPartitionRequest("t", 0, 4, 1 << 20, 0)], 2, 12)
    now[0] = 100
    s.rm.fetch_messages(0, 1, 1 << 20, 0, [FetchPartitionRequest("t", 0, 4, 1 << 20, 0)], 3, 13)
    now[0] = 200
    # A long poll is answered at once, without records, naming follower 3 (as caught up as 2,
    # and more recently).
    (r,) = consumer_fetch(s, 0, "b", wait=30_000)
    assert (r.result.error, r.result.preferred_read_replica, r.result.records) == (Errors.NONE, 3, b"")
    assert r.result.high_watermark == 4
    # The leader's own rack reads here; so does a consumer without client metadata (before
    # Fetch v11).
    (r,) = consumer_fetch(s, 0, "a")
    assert r.result.preferred_read_replica == -1 and len(r.result.records) > 0
    (r,) = consumer_fetch(s, 0, None)
    assert r.result.preferred_read_replica == -1 and len(r.result.records) > 0
    # A follower out of the ISR is never preferred.
    s.publish(("PartitionChangeRecord", {"partition_id": 0, "topic_id": TOPIC_ID, "isr": [1, 2]}))
    s.worker.run_all()
    (r,) = consumer_fetch(s, 0, "b")
    assert r.result.preferred_read_replica == 2


def test_follower_serves_consumers_up_to_its_high_watermark(s: Setup) -> None:
    cluster(s, leader=2, isr=[1, 2, 3], leader_epoch=3)
    p = s.rm.partitions[TP]
    assert p.log is not None and not p.is_leader
    buf = bytearray(build_batch([(b"k", b"v%d" % i, [], 1) for i in range(2)], partition_leader_epoch=3))
    buf += build_batch([(b"k", b"v%d" % i, [], 1) for i in range(2)], base_offset=2, partition_leader_epoch=3)
    p.append_records_as_follower(buf, 2, 0, 0)  # offsets 0-3 in two batches; the leader's HW: 2
    (r,) = consumer_fetch(s, 0, "a", epoch=3)
    res = r.result
    assert res.error == Errors.NONE and res.high_watermark == 2 and len(res.records) > 0
    assert res.records.to_bytes() == bytes(buf[: len(buf) // 2])  # the first batch only
    (r,) = consumer_fetch(s, 2, "")  # at the HW: nothing yet
    assert r.result.error == Errors.NONE and not r.result.records
    # A consumer that may only read from the leader (before Fetch v11) is refused.
    (r,) = consumer_fetch(s, 0, None)
    assert r.result.error == Errors.NOT_LEADER_OR_FOLLOWER
    (r,) = consumer_fetch(s, 0, "", epoch=2)
    assert r.result.error == Errors.FENCED_LEADER_EPOCH
    (r,) = consumer_fetch(s, 0, "", epoch=4)
    assert r.result.error == Errors.UNKNOWN_LEADER_EPOCH
    (r,) = consumer_fetch(s, 9, "")
    assert r.result.error == Errors.OFFSET_OUT_OF_RANGE
