"""Group offsets in transactions with a real client (librdkafka through confluent-kafka) and a
real ``odradek server`` process: a consume-transform-produce loop's ``send_offsets_to_transaction``
becomes the group's committed offset when the transaction commits and not when it aborts; while
a transaction is open its offsets are pending (OffsetFetch with require_stable answers
UNSTABLE_OFFSET_COMMIT, without it the last committed offset); after ``kill -9`` the reloaded
coordinator keeps them pending until the transaction coordinator aborts the timed-out
transaction, and the output topic read ``read_committed`` holds only committed records."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors

from .support import RawConnection, ServerProcess, unique_name, wait_until

pytestmark = pytest.mark.integration

OVERRIDES = {
    "transaction.state.log.num.partitions": "2",
    "offsets.topic.num.partitions": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


def offset_fetch(server: ServerProcess, group: str, topic: str, stable: bool) -> tuple[int, int]:
    """(error, committed offset) of partition 0, asked with OffsetFetch v7."""
    with RawConnection.to(server) as conn:
        r = conn.request(m.OFFSET_FETCH, 7, {
            "group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
            "require_stable": stable,
        })
    p = r["topics"][0]["partitions"][0]
    return p["error_code"], p["committed_offset"]


def consumer(server: ServerProcess, group: str, topic: str) -> Consumer:
    c = Consumer({
        "bootstrap.servers": server.bootstrap_servers, "group.id": group,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    })
    c.assign([TopicPartition(topic, 0)])
    return c


def poll_n(c: Consumer, n: int, timeout: float = 30.0) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and msg.error() is None:
            out.append(msg)
    assert len(out) == n, f"polled {len(out)} of {n}"
    return out


def transform(p: Producer, c: Consumer, out_topic: str, n: int) -> list[bytes]:
    """One consume-transform-produce step inside the producer's open transaction."""
    values = [msg.value() for msg in poll_n(c, n)]
    for v in values:
        p.produce(out_topic, v.upper(), partition=0)
    p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
    return values


def test_send_offsets_to_transaction_commit_abort_and_restart(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", OVERRIDES).start()
    try:
        src, dst, group = unique_name("in"), unique_name("out"), unique_name("g")
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        for f in admin.create_topics([NewTopic(src, 1, 1), NewTopic(dst, 1, 1)]).values():
            f.result(30)
        plain = Producer({"bootstrap.servers": server.bootstrap_servers})
        for i in range(12):
            plain.produce(src, f"r{i}".encode(), partition=0)
        assert plain.flush(30) == 0

        c = consumer(server, group, src)
        p = Producer({"bootstrap.servers": server.bootstrap_servers, "transactional.id": unique_name("tx"),
                      "transaction.timeout.ms": 4000})
        p.init_transactions(30)

        # KIP-890 verification: a TxnOffsetCommit of a producer whose transaction does not hold
        # the group's offsets partition (no AddOffsetsToTxn) is refused.
        with RawConnection.to(server) as conn:
            r = conn.request(m.TXN_OFFSET_COMMIT, 3, {
                "transactional_id": unique_name("nobody"), "group_id": group, "producer_id": 424242,
                "producer_epoch": 0, "generation_id": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": src, "partitions": [{"partition_index": 0, "committed_offset": 9,
                                                          "committed_leader_epoch": -1, "committed_metadata": ""}]}],
            })
        refused = r["topics"][0]["partitions"][0]["error_code"]
        assert refused == Errors.INVALID_PRODUCER_ID_MAPPING, r  # the coordinator does not know it
        assert offset_fetch(server, group, src, stable=True) == (Errors.NONE, -1)

        # Committed: the group's offset moves to 4.
        p.begin_transaction()
        transform(p, c, dst, 4)
        assert offset_fetch(server, group, src, stable=True) == (Errors.UNSTABLE_OFFSET_COMMIT, -1)
        assert offset_fetch(server, group, src, stable=False) == (Errors.NONE, -1)
        p.commit_transaction(30)
        # EndTxn answers once the commit is decided; the markers follow (as in Kafka).
        assert wait_until(
            lambda: offset_fetch(server, group, src, stable=True) == (Errors.NONE, 4),
            timeout=30, what="the COMMIT marker on the offsets partition",
        )

        # Aborted: the group's offset stays at 4.
        p.begin_transaction()
        transform(p, c, dst, 3)
        p.abort_transaction(30)
        assert wait_until(
            lambda: offset_fetch(server, group, src, stable=True) == (Errors.NONE, 4),
            timeout=30, what="the ABORT marker on the offsets partition",
        )

        # Open, then kill -9: after the restart the offsets are pending again (replayed from
        # __consumer_offsets) until the coordinator aborts the timed-out transaction.
        c.seek(TopicPartition(src, 0, 4))
        p.begin_transaction()
        transform(p, c, dst, 5)
        p.flush(30)
        assert offset_fetch(server, group, src, stable=True) == (Errors.UNSTABLE_OFFSET_COMMIT, -1)
        c.close()
        server.restart(sig=9)

        def fetched_stable() -> tuple[int, int] | None:
            try:
                r = offset_fetch(server, group, src, stable=True)
            except OSError:
                return None
            return r if r[0] != Errors.COORDINATOR_LOAD_IN_PROGRESS else None

        first = wait_until(fetched_stable, timeout=30, what="the offsets partition loaded")
        assert first in ((Errors.UNSTABLE_OFFSET_COMMIT, -1), (Errors.NONE, 4)), first
        assert wait_until(
            lambda: fetched_stable() == (Errors.NONE, 4), timeout=30, what="the timed-out transaction aborted"
        )

        # The output topic, read_committed: only the committed transaction's records.
        out = consumer(server, unique_name("reader"), dst)
        got = [msg.value() for msg in poll_n(out, 4)]
        assert got == [b"R0", b"R1", b"R2", b"R3"]
        assert out.poll(2.0) is None
        out.close()
    finally:
        server.kill()
