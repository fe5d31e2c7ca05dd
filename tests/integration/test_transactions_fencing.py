"""Zombie fencing (issue 13): two producers with one transactional id.

Producer A begins a transaction and writes; producer B initialises with the same transactional id,
which bumps the producer epoch, aborts A's open transaction and fences A. B commits its own
records. A's commit fails with the fencing error -- confluent-kafka, which sends more records
first: a fatal error, PRODUCER_FENCED or librdkafka's _FENCED; the Java client, which commits at
once: ProducerFencedException (its EndTxn is refused with PRODUCER_FENCED; a Java send after the
fence fails with InvalidProducerEpochException instead, as Kafka 4.x answers such a produce).
None of A's records is visible ``read_committed``, and its writes after the fence never reach
the log.

Runs against Odradek, or Apache Kafka with ``ODRADEK_TXN_SERVERS=kafka`` (txn_support.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from .kafka_reference import find_kafka_tools
from .support import unique_name
from .txn_support import Target, create_topic, read_all, values

PARTITIONS = 2
N = 10
JAVA_DIR = Path(__file__).parent / "java"
FENCING_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED}


def _producer(bootstrap: str, txid: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txid, "linger.ms": 5})


def test_older_producer_is_fenced_confluent(txn_target: Target) -> None:
    topic = unique_name("txn-fence")
    txid = unique_name("txid-fence")
    create_topic(txn_target.bootstrap, topic, PARTITIONS)
    zombie = _producer(txn_target.bootstrap, txid)
    zombie.init_transactions(60)
    zombie.begin_transaction()
    for i in range(N):
        zombie.produce(topic, key=f"k{i}", value=f"zombie-{i}")
    assert zombie.flush(60) == 0  # in the log, inside A's open transaction

    live = _producer(txn_target.bootstrap, txid)
    live.init_transactions(60)
    live.begin_transaction()
    for i in range(N):
        live.produce(topic, key=f"k{i}", value=f"live-{i}")
    live.commit_transaction(60)

    for i in range(N):
        zombie.produce(topic, key=f"k{i}", value=f"zombie-late-{i}")
    with pytest.raises(KafkaException) as failed:
        zombie.commit_transaction(60)
    err = failed.value.args[0]
    assert err.code() in FENCING_CODES and err.fatal(), err
    # A fenced producer stays fenced: a new transaction fails too.
    with pytest.raises(KafkaException):
        zombie.begin_transaction()

    committed = read_all(txn_target.bootstrap, topic, PARTITIONS, "read_committed")
    assert values(committed) == sorted(f"live-{i}" for i in range(N))
    everything = values(read_all(txn_target.bootstrap, topic, PARTITIONS, "read_uncommitted"))
    # A's first records reached the log (and were aborted); nothing it sent after the fence did.
    assert everything == sorted([f"live-{i}" for i in range(N)] + [f"zombie-{i}" for i in range(N)])


def test_older_producer_is_fenced_java(txn_target: Target) -> None:
    tools = find_kafka_tools("4")
    topic = unique_name("txn-fence-java")
    create_topic(txn_target.bootstrap, topic, PARTITIONS)
    lib = tools.home / tools.line / "lib"
    r = subprocess.run(
        ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", f"{lib}/*",
         str(JAVA_DIR / "JavaTxnClient.java"), "fence", txn_target.bootstrap, topic,
         unique_name("txid-fence-java"), str(PARTITIONS)],
        capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines[-1:] == ["DONE"], f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    fenced = [ln.split()[1:] for ln in lines if ln.startswith("FENCED ")]
    assert len(fenced) == 1 and "ProducerFencedException" in fenced[0], lines
    committed = read_all(txn_target.bootstrap, topic, PARTITIONS, "read_committed")
    assert values(committed) == sorted(f"live-{i}" for i in range(N))
    everything = values(read_all(txn_target.bootstrap, topic, PARTITIONS, "read_uncommitted"))
    assert everything == sorted([f"live-{i}" for i in range(N)] + [f"zombie-{i}" for i in range(N)])
