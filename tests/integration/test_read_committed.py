"""read_committed consumers (librdkafka through confluent-kafka and kcat) against transactions
written by hand: transactional batches produced and WriteTxnMarkers sent with Odradek's own
NetworkClient, as a transaction coordinator would. The consumers see committed records only, in
order; aborted ones are in the fetched data and dropped by the clients through the fetch
response's aborted transactions; an open transaction holds back everything after it (the last
stable offset) until its marker."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.embedded import EmbeddedBroker
from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors

from .support import REQUIRES_KCAT, produce_request, transactional_batch, write_txn_markers_request


@pytest.fixture(scope="module")
def txn_broker() -> Iterator[EmbeddedBroker]:
    # No transaction coordinator is asked here: the markers are sent by hand.
    with EmbeddedBroker({"transaction.partition.verification.enable": "false"}) as b:
        yield b


class HandWrittenTransactions:
    """Transactional produce and markers over one NetworkClient on the broker's event loop."""

    def __init__(self, broker: EmbeddedBroker, topic: str) -> None:
        self.broker = broker
        self.topic = topic
        self.client = NetworkClient("127.0.0.1", broker.port)
        self.sequences: dict[int, int] = {}

    def _run(self, coro: Any) -> Any:
        return self.broker.run_coroutine(coro)

    def producer_id(self) -> int:
        r = self._run(self.client.send(m.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000}))
        assert r["error_code"] == Errors.NONE
        self.sequences[r["producer_id"]] = 0
        return int(r["producer_id"])

    def produce(self, pid: int, values: list[str]) -> None:
        seq = self.sequences[pid]
        data = transactional_batch(pid, [v.encode() for v in values], seq=seq)
        self.sequences[pid] = seq + len(values)
        r = self._run(self.client.send(m.PRODUCE, 9, produce_request(
            self.topic, 0, data, transactional_id=f"tx-{pid}", timeout_ms=5000)))
        assert r["responses"][0]["partition_responses"][0]["error_code"] == Errors.NONE

    def end(self, pid: int, commit: bool) -> None:
        r = self._run(self.client.send(m.WRITE_TXN_MARKERS, 1, write_txn_markers_request(pid, commit, self.topic)))
        assert r["markers"][0]["topics"][0]["partitions"][0]["error_code"] == Errors.NONE

    def close(self) -> None:
        self._run(self.client.close())


def create_topic(broker: EmbeddedBroker, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def consume(broker: EmbeddedBroker, topic: str, isolation: str, want: int, timeout: float) -> list[str]:
    """Values read from the start within ``timeout`` s (stops early once ``want`` arrived)."""
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": f"g-{topic}-{time.monotonic_ns()}",
                  "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(out) < want:
            msg = c.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(msg.value().decode())
        return out
    finally:
        c.close()


def test_read_committed_consumer_sees_committed_records_only(txn_broker: EmbeddedBroker, topic_name: str) -> None:
    create_topic(txn_broker, topic_name)
    tx = HandWrittenTransactions(txn_broker, topic_name)
    try:
        open_pid, later_pid, aborted_pid = tx.producer_id(), tx.producer_id(), tx.producer_id()
        tx.produce(open_pid, ["open-1"])
        tx.produce(later_pid, ["later-1", "later-2"])
        tx.end(later_pid, commit=True)
        # The first transaction is still open: the LSO holds at its first record, so the
        # committed one after it is not readable yet either.
        assert consume(txn_broker, topic_name, "read_committed", 1, 3.0) == []
        assert consume(txn_broker, topic_name, "read_uncommitted", 3, 15.0) == ["open-1", "later-1", "later-2"]
        tx.produce(open_pid, ["open-2"])
        tx.end(open_pid, commit=True)
        tx.produce(aborted_pid, ["aborted-1", "aborted-2"])
        tx.end(aborted_pid, commit=False)
        last = tx.producer_id()
        tx.produce(last, ["last-1"])
        tx.end(last, commit=True)
        committed = ["open-1", "later-1", "later-2", "open-2", "last-1"]
        assert consume(txn_broker, topic_name, "read_committed", 5, 15.0) == committed
        everything = consume(txn_broker, topic_name, "read_uncommitted", 7, 15.0)
        assert sorted(everything) == sorted(committed + ["aborted-1", "aborted-2"])
    finally:
        tx.close()


def test_list_offsets_read_committed_latest_is_the_lso(txn_broker: EmbeddedBroker, topic_name: str) -> None:
    create_topic(txn_broker, topic_name)
    tx = HandWrittenTransactions(txn_broker, topic_name)
    try:
        pid = tx.producer_id()
        tx.produce(pid, ["a", "b"])

        def latest(isolation: str) -> int:
            c = Consumer({"bootstrap.servers": txn_broker.bootstrap_servers, "group.id": "lo",
                          "isolation.level": isolation})
            try:
                return _latest(c, topic_name)
            finally:
                c.close()

        assert latest("read_committed") == 0
        assert latest("read_uncommitted") == 2
        tx.end(pid, commit=True)
        assert latest("read_committed") == 3
    finally:
        tx.close()


def _latest(c: Consumer, topic: str) -> int:
    """The end offset the consumer's ListOffsets (LATEST, with its isolation level) answers
    (librdkafka's query_watermark_offsets sends the consumer's isolation.level)."""
    _low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=15, cached=False)
    return int(high)


@REQUIRES_KCAT
def test_kcat_read_committed(txn_broker: EmbeddedBroker, topic_name: str) -> None:
    create_topic(txn_broker, topic_name)
    tx = HandWrittenTransactions(txn_broker, topic_name)
    try:
        kept, dropped, still_open = tx.producer_id(), tx.producer_id(), tx.producer_id()
        tx.produce(kept, ["kept-1"])
        tx.produce(dropped, ["dropped-1"])
        tx.end(dropped, commit=False)
        tx.end(kept, commit=True)
        tx.produce(still_open, ["open-1"])

        def kcat(isolation: str) -> list[str]:
            out = subprocess.run(
                ["kcat", "-b", txn_broker.bootstrap_servers, "-C", "-t", topic_name, "-e", "-q",
                 "-X", f"isolation.level={isolation}", "-f", "%s\\n"],
                capture_output=True, timeout=120, check=True,
            )
            return out.stdout.decode().split()

        assert kcat("read_committed") == ["kept-1"]
        assert kcat("read_uncommitted") == ["kept-1", "dropped-1", "open-1"]
    finally:
        tx.close()
