"""Transactions version 2 (KIP-890 part 2) with the Java client (kafka-clients 4.x, unchanged).

A node formatted with ``transaction.version=2`` (``odradek storage format --feature``) makes the
Java producer use transactions version 2: no AddPartitionsToTxn / AddOffsetsToTxn from the client
(Produce v12 and TxnOffsetCommit v5 add the partitions through the broker), EndTxn v5 bumps the
producer epoch at every commit and abort. At the default level (0) the same program runs
transactions version 1 and the epoch stays. In both, read_committed sees exactly the committed
records and the group offset of the last committed transaction.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.controller.feature_control_manager import METADATA_VERSION
from odradek.embedded import EmbeddedBroker
from odradek.server.formatter import Formatter
from odradek.server.meta_properties import random_uuid_base64

from .support import unique_name
from .test_java_client import Java, java  # noqa: F401  (the fixture)

PATTERN = "cacc"  # commit, abort, commit, commit
RECORDS = 5


def _broker(transaction_version: int | None) -> EmbeddedBroker:
    d = tempfile.mkdtemp(prefix="odradek-tv-")
    broker = EmbeddedBroker(log_dir=d)
    if transaction_version is not None:
        Formatter(
            node_id=broker._build_config().node_id,
            cluster_id=random_uuid_base64(),
            directories=[d],
            metadata_log_dir=d,
            release_version=METADATA_VERSION,
            features={"transaction.version": transaction_version},
            print_line=lambda _line: None,
        ).run()
    return broker.start()


@pytest.fixture(params=[2, None], ids=["tv2", "default-tv1"])
def tv_broker(request: pytest.FixtureRequest) -> Iterator[tuple[int | None, EmbeddedBroker]]:
    broker = _broker(request.param)
    try:
        yield request.param, broker
    finally:
        broker.stop()


def _run(java: Java, broker: EmbeddedBroker) -> list[str]:  # noqa: F811
    topic = unique_name("tv")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    lines = java.run(
        "JavaTransactions.java", broker.bootstrap_servers, topic, unique_name("g"), unique_name("tx"),
        PATTERN, str(RECORDS),
    )
    assert lines[-1] == "DONE", lines
    return lines


def test_java_transactions_version_2_bumps_the_epoch_per_transaction(
    java: Java, tv_broker: tuple[int | None, EmbeddedBroker]  # noqa: F811
) -> None:
    level, broker = tv_broker
    features = broker.server.broker.metadata_cache.features().levels
    assert features.get("transaction.version", 0) == (level or 0)
    lines = _run(java, broker)
    txns = [line.split() for line in lines if line.startswith("TXN ")]
    producers = [line.split() for line in lines if line.startswith("PRODUCER ")]
    assert [t[2] for t in txns] == list(PATTERN)
    assert [t[5] for t in txns] == ["CompleteCommit" if c == "c" else "CompleteAbort" for c in PATTERN]
    pids = {t[3] for t in txns}
    assert len(pids) == 1
    epochs = [int(t[4]) for t in txns]
    first = epochs[0]
    if level == 2:
        # One bump per EndTxn: the epoch the transaction completed with goes up by one each time,
        # and the partition saw it (its markers carry the bumped epoch).
        assert epochs == [first + i for i in range(len(PATTERN))]
        assert first >= 1
    else:
        assert epochs == [first] * len(PATTERN)
    assert [(p[1], int(p[2])) for p in producers] == [(t[3], int(t[4])) for t in txns], lines
    # read_committed: the committed transactions' records, in order, none of the aborted one.
    read = [line.split()[1] for line in lines if line.startswith("READ ")]
    assert read == [f"{i}-{r}" for i, c in enumerate(PATTERN) if c == "c" for r in range(RECORDS)]
    # The offset committed with the last committed transaction (the aborted one's dropped).
    assert [line for line in lines if line.startswith("OFFSET ")] == [f"OFFSET {len(PATTERN)}"]


def test_confluent_kafka_transactions_on_a_transaction_version_2_node(
    tv_broker: tuple[int | None, EmbeddedBroker],
) -> None:
    """librdkafka's transactional producer (whatever transactions version it speaks) commits and
    aborts on a node at either level; read_committed sees exactly the committed records."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    _level, broker = tv_broker
    topic = unique_name("tv-rdk")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": unique_name("rdk")})
    producer.init_transactions(30)
    for i, outcome in enumerate(PATTERN):
        producer.begin_transaction()
        for r in range(RECORDS):
            producer.produce(topic, f"{i}-{r}".encode(), partition=0)
        producer.flush(30)
        if outcome == "c":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap_servers, "group.id": unique_name("rdk-g"),
        "isolation.level": "read_committed", "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        expected = [f"{i}-{r}" for i, c in enumerate(PATTERN) if c == "c" for r in range(RECORDS)]
        seen: list[str] = []
        deadline = time.monotonic() + 30
        while len(seen) < len(expected) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append(msg.value().decode())
        assert seen == expected
    finally:
        consumer.close()


def test_java_zombie_producer_is_fenced(
    java: Java, tv_broker: tuple[int | None, EmbeddedBroker]  # noqa: F811
) -> None:
    """A second producer with the same transactional id fences the first (whose open
    transaction is aborted) at either transactions version; none of the zombie's records is
    visible to read_committed."""
    _level, broker = tv_broker
    topic = unique_name("tv-fence")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    lines = java.run("JavaTxnFencing.java", broker.bootstrap_servers, topic, unique_name("tx"))
    assert lines[-1] == "DONE", lines
    fenced = [line for line in lines if line.startswith(("FENCED", "NOT FENCED"))]
    assert len(fenced) == 1 and fenced[0].startswith("FENCED "), lines
    assert [line.split()[1] for line in lines if line.startswith("READ ")] == ["b-0", "b-1", "b-2"]
