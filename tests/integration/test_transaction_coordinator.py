"""The transaction coordinator with a real client (librdkafka through confluent-kafka) and a real
``odradek server`` process: init_transactions, commit and abort, a zombie producer fenced by a
newer one with the same transactional id, and the coordinator's state surviving ``kill -9``
(reloaded from ``__transaction_state``).

The data side (transactional produce, markers in the partitions, read_committed) is tested with
the partitions' work; here only what the coordinator answers is checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g

from .support import RawConnection, ServerProcess, unique_name, wait_until

pytestmark = pytest.mark.integration

OVERRIDES = {"transaction.state.log.num.partitions": "3"}


def describe(server: ServerProcess, tid: str) -> dict[str, Any]:
    with RawConnection.to(server) as conn:
        r = conn.request(g.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})
    return r["transaction_states"][0]  # type: ignore[no-any-return]


def described(server: ServerProcess, tid: str) -> dict[str, Any]:
    """DescribeTransactions once the coordinator has loaded the id's partition."""
    def ready() -> dict[str, Any] | None:
        d = describe(server, tid)
        return d if d["error_code"] == Errors.NONE else None

    return wait_until(ready, timeout=30, what=f"transactional id {tid} described")  # type: ignore[no-any-return]


def producer(server: ServerProcess, tid: str) -> Producer:
    return Producer({"bootstrap.servers": server.bootstrap_servers, "transactional.id": tid,
                     "transaction.timeout.ms": 60000})


def test_confluent_transactions_fencing_and_restart(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", OVERRIDES).start()
    try:
        tid = unique_name("tx")
        topic = unique_name("t")
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)

        p1 = producer(server, tid)
        p1.init_transactions(30)
        p1.begin_transaction()
        p1.commit_transaction(30)
        p1.begin_transaction()
        p1.abort_transaction(30)
        first = described(server, tid)
        assert first["transaction_state"] == "Empty" and first["producer_epoch"] == 0
        pid = first["producer_id"]
        assert pid >= 0

        # A second producer with the same transactional id: the epoch moves on, the first is a
        # zombie, and its next transaction is refused (AddPartitionsToTxn: PRODUCER_FENCED).
        p2 = producer(server, tid)
        p2.init_transactions(30)
        second = described(server, tid)
        assert (second["producer_id"], second["producer_epoch"]) == (pid, 1)
        p1.begin_transaction()
        p1.produce(topic, b"zombie", partition=0)
        with pytest.raises(KafkaException) as info:
            p1.commit_transaction(30)
        err = info.value.args[0]
        assert err.fatal(), err
        assert err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH), err
        assert described(server, tid)["producer_epoch"] == 1  # the zombie changed nothing

        # An ongoing transaction (the partitions added as the client does), then kill -9: the
        # restarted coordinator reloads it from __transaction_state.
        with RawConnection.to(server) as conn:
            r = conn.request(g.ADD_PARTITIONS_TO_TXN, 3, {
                "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": 1,
                "v3_and_below_topics": [{"name": topic, "partitions": [0, 1]}],
            })
        codes = {p["partition_error_code"] for t in r["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}
        assert codes == {Errors.NONE}
        server.restart()  # SIGTERM: coordinator shuts down cleanly
        server.restart(sig=9)  # and kill -9
        after = described(server, tid)
        assert (after["transaction_state"], after["producer_id"], after["producer_epoch"]) == ("Ongoing", pid, 1)
        assert after["topics"] == [{"topic": topic, "partitions": [0, 1]}]

        # A new transactional id on the restarted coordinator.
        p3 = producer(server, unique_name("tx"))
        p3.init_transactions(30)
        p3.begin_transaction()
        p3.abort_transaction(30)
    finally:
        server.kill()
