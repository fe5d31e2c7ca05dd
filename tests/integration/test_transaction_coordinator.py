"""The transaction coordinator with a real client (librdkafka through confluent-kafka) and a real
``odradek server`` process: init_transactions, commit and abort, a zombie producer fenced by a
newer one with the same transactional id, and the coordinator's state surviving ``kill -9``
(reloaded from ``__transaction_state``).

With the partitions' side of transactions: what the coordinator decides reaches the data —
committed records are read by ``read_committed`` consumers, aborted ones are not, and a
transaction abandoned by its producer is aborted after its timeout so the last stable offset moves
on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.embedded import EmbeddedBroker
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g

from .kafka_reference import TOOL_CLASSES, find_kafka_tools
from .support import (
    RawConnection,
    ServerProcess,
    open_transaction,
    read_committed,
    unique_name,
    wait_until,
)

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


def watermarks(bootstrap: str, topic: str, isolation: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("g"), "isolation.level": isolation})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1])
    finally:
        c.close()


def test_committed_records_are_read_and_aborted_ones_are_not(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", OVERRIDES).start()
    try:
        topic = unique_name("t")
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
        p = producer(server, unique_name("tx"))
        p.init_transactions(30)
        for i in range(3):
            p.begin_transaction()
            for j in range(10):
                p.produce(topic, f"commit-{i}-{j}".encode(), partition=j % 2)
            p.commit_transaction(30)
            p.begin_transaction()
            for j in range(10):
                p.produce(topic, f"abort-{i}-{j}".encode(), partition=j % 2)
            p.abort_transaction(30)
        got = read_committed(server.bootstrap_servers, topic, 2, 30)
        assert sorted(got) == sorted(f"commit-{i}-{j}".encode() for i in range(3) for j in range(10))
    finally:
        server.kill()


def test_abandoned_transaction_is_aborted_after_its_timeout(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "data", {**OVERRIDES, "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}
    ).start()
    try:
        topic = unique_name("t")
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        tid = unique_name("tx")
        p = open_transaction(server.bootstrap_servers, tid, topic, [f"lost-{j}".encode() for j in range(5)],
                             **{"transaction.timeout.ms": 1500})
        # The producer goes silent: the open transaction holds the last stable offset at 0.
        assert watermarks(server.bootstrap_servers, topic, "read_uncommitted") == 5
        assert watermarks(server.bootstrap_servers, topic, "read_committed") == 0
        epoch = described(server, tid)["producer_epoch"]
        wait_until(lambda: described(server, tid)["transaction_state"] == "CompleteAbort", timeout=30,
                   what="the coordinator aborting the timed out transaction")
        assert described(server, tid)["producer_epoch"] == epoch + 1  # the producer is fenced
        # The abort marker is in: the LSO moved past it, and none of the records is readable.
        assert watermarks(server.bootstrap_servers, topic, "read_committed") == 6
        with pytest.raises(KafkaException) as info:
            p.commit_transaction(30)
        assert info.value.args[0].code() in (
            KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH,
        ), info.value.args[0]
        # A new producer with the id commits after it: only its record is read.
        p2 = producer(server, tid)
        p2.init_transactions(30)
        p2.begin_transaction()
        p2.produce(topic, b"after", partition=0)
        p2.commit_transaction(30)
        assert read_committed(server.bootstrap_servers, topic, 1, 1) == [b"after"]
    finally:
        server.kill()


def test_kafka_transactions_tool_lists_and_describes(broker: EmbeddedBroker) -> None:
    """Apache Kafka's kafka-transactions.sh (its Java admin client) against the coordinator."""
    kafka = find_kafka_tools("4")
    TOOL_CLASSES.setdefault("kafka-transactions", "org.apache.kafka.tools.TransactionsCommand")
    bs = ["--bootstrap-server", broker.bootstrap_servers]
    topic = unique_name("t")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    tid = unique_name("tx")
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": tid})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"v", partition=0)
    assert p.flush(30) == 0

    listed = kafka.run("kafka-transactions", *bs, "list").stdout
    (row,) = [line.split() for line in listed.splitlines() if tid in line]
    assert row[0] == tid and "Ongoing" in row, listed
    described_ = kafka.run("kafka-transactions", *bs, "describe", "--transactional-id", tid).stdout
    assert "Ongoing" in described_ and f"{topic}-0" in described_, described_
    missing = kafka.run("kafka-transactions", *bs, "describe", "--transactional-id", unique_name("none"),
                        check=False)
    assert missing.returncode != 0 and "could not be found" in missing.stderr, missing.stderr

    p.commit_transaction(30)
    listed = kafka.run("kafka-transactions", *bs, "list").stdout
    (row,) = [line.split() for line in listed.splitlines() if tid in line]
    assert "CompleteCommit" in row, listed


def test_kafka_python_and_aiokafka_commit_abort_and_send_offsets(broker: EmbeddedBroker) -> None:
    import asyncio

    import aiokafka
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KafkaTopicPartition

    bootstrap = broker.bootstrap_servers
    topic = unique_name("t")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    kp_group, aio_group = unique_name("g"), unique_name("g")

    kp = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique_name("tx"))
    try:
        kp.init_transactions()
        kp.begin_transaction()
        kp.send(topic, b"kafka-python-commit", partition=0)
        kp.send_offsets_to_transaction({KafkaTopicPartition(topic, 0): OffsetAndMetadata(7, "", -1)}, kp_group)
        kp.commit_transaction()
        kp.begin_transaction()
        kp.send(topic, b"kafka-python-abort", partition=0)
        kp.flush()
        kp.abort_transaction()
    finally:
        kp.close(timeout=5)

    async def aio() -> None:
        ap = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique_name("tx"))
        await asyncio.wait_for(ap.start(), 30)
        try:
            async with ap.transaction():
                await ap.send_and_wait(topic, b"aiokafka-commit", partition=0)
                await ap.send_offsets_to_transaction({aiokafka.TopicPartition(topic, 0): 9}, aio_group)
            await ap.begin_transaction()
            await ap.send_and_wait(topic, b"aiokafka-abort", partition=0)
            await ap.abort_transaction()
        finally:
            await ap.stop()

    asyncio.run(aio())
    assert read_committed(bootstrap, topic, 1, 2) == [b"kafka-python-commit", b"aiokafka-commit"]
    for group, offset in ((kp_group, 7), (aio_group, 9)):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            (tp,) = c.committed([TopicPartition(topic, 0)], 30)
            assert tp.offset == offset
        finally:
            c.close()
