"""Transactions with every client that has them (issue 13): commit and abort.

Each client's transactional producer writes three transactions of 10 records to its own topic:
the first committed, the second aborted (after its records reached the log), the third committed.
The first also commits offset 5 of partition 0 for a group and the aborted one offset 7
(``send_offsets_to_transaction``: AddOffsetsToTxn and TxnOffsetCommit as each client sends them):
the group's committed offset is 5.
A ``read_committed`` consumer then sees exactly the committed 20 records, once each, and a
``read_uncommitted`` one all 30; the client's own ``read_committed`` consumer (where it has one)
sees the committed 20 too. Clients: confluent-kafka (librdkafka), kafka-python, aiokafka,
kafkajs (node) and the Java client (kafka-clients 4.x).

Runs against Odradek, or Apache Kafka with ``ODRADEK_TXN_SERVERS=kafka`` (txn_support.py).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from .kafka_reference import find_kafka_tools
from .support import unique_name
from .txn_support import (
    Target,
    committed_offsets,
    create_topic,
    read_all,
    skip_unless,
    values,
    watermarks,
)

PARTITIONS = 3
N = 10
OFFSETS = {"c1": 5, "a": 7}  # group offsets of partition 0 sent in these transactions
NODE_DIR = Path(__file__).parent / "node"
JAVA_DIR = Path(__file__).parent / "java"


def expected(client: str, committed_only: bool) -> list[str]:
    prefixes = ["c1", "c2"] if committed_only else ["c1", "a", "c2"]
    return sorted(f"{client}-{p}-{i}" for p in prefixes for i in range(N))


def write_confluent(bootstrap: str, topic: str, txid: str, group: str) -> list[str] | None:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txid, "linger.ms": 5})
    p.init_transactions(60)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    for prefix, commit in (("c1", True), ("a", False), ("c2", True)):
        p.begin_transaction()
        for i in range(N):
            p.produce(topic, key=f"k{i}", value=f"confluent-{prefix}-{i}")
        if prefix in OFFSETS:
            p.send_offsets_to_transaction([TopicPartition(topic, 0, OFFSETS[prefix])], c.consumer_group_metadata(), 60)
        if commit:
            p.commit_transaction(60)
        else:
            assert p.flush(60) == 0  # the aborted records are in the log before the abort
            p.abort_transaction(60)
    c.close()
    return None


def write_kafka_python(bootstrap: str, topic: str, txid: str, group: str) -> list[str] | None:
    from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition

    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=txid, enable_idempotence=True,
                      request_timeout_ms=30000)
    try:
        p.init_transactions()
        for prefix, commit in (("c1", True), ("a", False), ("c2", True)):
            p.begin_transaction()
            for i in range(N):
                p.send(topic, key=f"k{i}".encode(), value=f"kafka-python-{prefix}-{i}".encode())
            if prefix in OFFSETS:
                p.send_offsets_to_transaction({TopicPartition(topic, 0): OffsetAndMetadata(OFFSETS[prefix], "", -1)},
                                              group)
            if commit:
                p.commit_transaction()
            else:
                p.flush(60)
                p.abort_transaction()
    finally:
        p.close(10)
    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                      enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        tps = [TopicPartition(topic, i) for i in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning()
        ends = c.end_offsets(tps)
        out: list[str] = []
        for _ in range(120):
            if all(c.position(tp) >= ends[tp] for tp in tps):
                return out
            for recs in c.poll(500).values():
                out.extend(r.value.decode() for r in recs)
        raise AssertionError(f"kafka-python did not read to {ends}: {out}")
    finally:
        c.close()


def write_aiokafka(bootstrap: str, topic: str, txid: str, group: str) -> list[str] | None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run() -> list[str]:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txid, enable_idempotence=True)
        await p.start()
        try:
            for prefix, commit in (("c1", True), ("a", False), ("c2", True)):
                await p.begin_transaction()
                futures = [await p.send(topic, key=f"k{i}".encode(), value=f"aiokafka-{prefix}-{i}".encode())
                           for i in range(N)]
                await asyncio.gather(*futures)
                if prefix in OFFSETS:
                    await p.send_offsets_to_transaction({TopicPartition(topic, 0): OFFSETS[prefix]}, group)
                if commit:
                    await p.commit_transaction()
                else:
                    await p.abort_transaction()
        finally:
            await p.stop()
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, auto_offset_reset="earliest")
        await c.start()
        try:
            tps = [TopicPartition(topic, i) for i in range(PARTITIONS)]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            ends = await c.end_offsets(tps)
            out: list[str] = []
            for _ in range(120):
                if all([await c.position(tp) >= ends[tp] for tp in tps]):
                    return out
                for recs in (await c.getmany(timeout_ms=500)).values():
                    out.extend(r.value.decode() for r in recs if r.value is not None)
            raise AssertionError(f"aiokafka did not read to {ends}: {out}")
        finally:
            await c.stop()

    return asyncio.run(asyncio.wait_for(run(), 180))


def _lines_read(cmd: list[str], cwd: Path | None = None) -> list[str]:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=cwd, stdin=subprocess.DEVNULL)
    if r.returncode != 0 or not r.stdout.splitlines() or r.stdout.splitlines()[-1] != "DONE":
        raise AssertionError(f"{cmd[:3]} exited {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}")
    return [ln.split(" ", 1)[1] for ln in r.stdout.splitlines() if ln.startswith("READ ")]


def write_kafkajs(bootstrap: str, topic: str, txid: str, group: str) -> list[str] | None:
    skip_unless(shutil.which("node") is not None and (NODE_DIR / "node_modules" / "kafkajs").is_dir(),
                "node or kafkajs is missing (npm ci in tests/integration/node)")
    return _lines_read(["node", str(NODE_DIR / "transactions.js"), bootstrap, topic, txid, str(PARTITIONS), group])


def write_java(bootstrap: str, topic: str, txid: str, group: str) -> list[str] | None:
    tools = find_kafka_tools("4")
    lib = tools.home / tools.line / "lib"
    return _lines_read([
        "java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", f"{lib}/*",
        str(JAVA_DIR / "JavaTxnClient.java"), "commit-abort", bootstrap, topic, txid, str(PARTITIONS), group,
    ])


WRITERS: dict[str, Callable[[str, str, str, str], list[str] | None]] = {
    "confluent": write_confluent,
    "kafka-python": write_kafka_python,
    "aiokafka": write_aiokafka,
    "kafkajs": write_kafkajs,
    "java": write_java,
}


@pytest.mark.parametrize("client", list(WRITERS))
def test_commit_and_abort(txn_target: Target, client: str) -> None:
    topic = unique_name(f"txn-{client}")
    create_topic(txn_target.bootstrap, topic, PARTITIONS)
    group = unique_name(f"group-{client}")
    own_read = WRITERS[client](txn_target.bootstrap, topic, unique_name(f"txid-{client}"), group)

    committed = read_all(txn_target.bootstrap, topic, PARTITIONS, "read_committed")
    assert values(committed) == expected(client, committed_only=True)
    uncommitted = read_all(txn_target.bootstrap, topic, PARTITIONS, "read_uncommitted")
    assert values(uncommitted) == expected(client, committed_only=False)
    # Every transaction ended with a marker (a control batch) in each partition it wrote: the
    # log holds at least one offset per transaction more than it has records.
    assert len({(r.partition, r.offset) for r in uncommitted}) == 3 * N
    high = watermarks(txn_target.bootstrap, topic, PARTITIONS, "read_uncommitted")
    assert sum(high.values()) >= 3 * N + 3, high
    # All transactions are complete: the last stable offsets are the high watermarks.
    assert watermarks(txn_target.bootstrap, topic, PARTITIONS, "read_committed") == high
    # The committed transaction's offset, not the aborted one's.
    assert committed_offsets(txn_target.bootstrap, group, topic, 1) == {0: OFFSETS["c1"]}
    if own_read is not None:
        assert sorted(own_read) == expected(client, committed_only=True), f"{client}'s read_committed consumer"
