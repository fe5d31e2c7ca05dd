"""The Java client (Apache Kafka's kafka-clients 4.x, unchanged) against Odradek.

Single-file programs under ``java/`` run with the JDK's source launcher (``java -cp
'<kafka>/4/lib/*' Prog.java``), no build step: an idempotent producer (acks=all, every codec),
consumers in a group with the classic and the new (KIP-848) protocol, commit / seek /
offsetsForTimes, and the AdminClient. The consumers use incremental fetch sessions (KIP-227); the
tests check on the broker's session cache that they did. Skipped without Java or the fetched jars
outside CI (see :func:`find_kafka_tools`).
"""

from __future__ import annotations

import base64
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.embedded import EmbeddedBroker
from odradek.records.batch import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    iter_batches,
)
from odradek.server.fetch_session import FetchSessionCache

from .kafka_reference import KafkaTools, find_kafka_tools
from .support import unique_name, wait_until

JAVA_DIR = Path(__file__).parent / "java"
CODECS = {"gzip": COMPRESSION_GZIP, "snappy": COMPRESSION_SNAPPY, "lz4": COMPRESSION_LZ4, "zstd": COMPRESSION_ZSTD}
PER_CODEC = 150
PARTITIONS = 3


@dataclass
class Java:
    kafka: KafkaTools

    def run(self, program: str, *args: str, timeout: float = 180.0) -> list[str]:
        lib = self.kafka.home / self.kafka.line / "lib"
        cmd = [
            "java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-cp", f"{lib}/*", str(JAVA_DIR / program), *args,
        ]
        result = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
        if result.returncode != 0:
            raise AssertionError(
                f"{program} {' '.join(args)} exited {result.returncode}\n"
                f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
            )
        return result.stdout.splitlines()


@pytest.fixture(scope="module")
def java() -> Java:
    return Java(find_kafka_tools("4"))


def session_cache(broker: EmbeddedBroker) -> FetchSessionCache:
    cache: FetchSessionCache = broker.server.broker.broker_apis.fetch_manager.cache
    return cache


def create_topic(broker: EmbeddedBroker, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


@dataclass(frozen=True)
class Sent:
    codec: str
    seq: int
    partition: int
    offset: int


@pytest.fixture(scope="module")
def produced(java: Java, broker: EmbeddedBroker) -> tuple[str, list[Sent]]:
    """A topic written by the Java producer: PER_CODEC records with each codec."""
    topic = unique_name("java-produced")
    create_topic(broker, topic, PARTITIONS)
    lines = java.run("JavaProducer.java", broker.bootstrap_servers, topic, str(PER_CODEC), ",".join(CODECS))
    assert lines[-1] == "DONE"
    sent = []
    for line in lines[:-1]:
        tag, codec, seq, part, off = line.split()
        assert tag == "SENT"
        sent.append(Sent(codec, int(seq), int(part), int(off)))
    return topic, sent


def test_java_idempotent_producer_all_codecs(produced: tuple[str, list[Sent]], broker: EmbeddedBroker) -> None:
    topic, sent = produced
    assert len(sent) == PER_CODEC * len(CODECS)
    assert Counter(s.codec for s in sent) == {c: PER_CODEC for c in CODECS}
    # Every acknowledged record has its own offset; offsets are dense per partition.
    for p in range(PARTITIONS):
        offsets = sorted(s.offset for s in sent if s.partition == p)
        assert offsets == list(range(len(offsets)))
    # The batches are stored as the producer compressed them, idempotent (producer id set).
    codecs_seen: set[int] = set()
    producer_ids: set[int] = set()
    for p in range(PARTITIONS):
        for seg in sorted((Path(broker.log_dir) / f"{topic}-{p}").glob("*.log")):
            data = seg.read_bytes()
            for h in iter_batches(data):
                codecs_seen.add(h.compression)
                producer_ids.add(h.producer_id)
    assert codecs_seen == set(CODECS.values())
    assert -1 not in producer_ids and len(producer_ids) == len(CODECS)  # one producer per codec


def consume_group(java: Java, broker: EmbeddedBroker, topic: str, sent: list[Sent], protocol: str) -> None:
    cache = session_cache(broker)
    before = cache.incremental_fetches
    created_before = cache.sessions_created
    group = unique_name(f"java-{protocol}")
    lines = java.run(
        "JavaConsumer.java", "group", broker.bootstrap_servers, topic, group, protocol,
        str(len(sent)), "120000",
    )
    recs = [line.split() for line in lines if line.startswith("REC ")]
    assert lines[-1] == f"COUNT {len(sent)}"
    want = {(s.partition, s.offset): s for s in sent}
    got = [(int(p), int(o), k, v, int(seq), codec) for _, p, o, k, v, seq, codec in recs]
    # Exactly once: every produced record, no duplicates, with its key, value and headers.
    assert sorted((p, o) for p, o, *_ in got) == sorted(want)
    for p, o, k, v, seq, codec in got:
        s = want[(p, o)]
        assert (seq, codec) == (s.seq, s.codec)
        assert k == f"k{seq % 7}" and v.startswith(f"v{seq}-{codec}-")
    # In order within each partition.
    for part in range(PARTITIONS):
        offsets = [o for p, o, *_ in got if p == part]
        assert offsets == sorted(offsets)
    committed = {int(p): int(o) for _, p, o in (line.split() for line in lines if line.startswith("COMMITTED "))}
    ends = Counter(s.partition for s in sent)
    assert committed == {p: ends[p] for p in range(PARTITIONS)}
    # The Java consumer fetched through an incremental fetch session, over several epochs.
    assert cache.sessions_created > created_before
    assert cache.incremental_fetches - before >= 5, (before, cache.incremental_fetches)


def test_java_consumer_classic_group_reads_everything_once_with_fetch_sessions(
    java: Java, broker: EmbeddedBroker, produced: tuple[str, list[Sent]]
) -> None:
    consume_group(java, broker, *produced, "classic")


def test_java_consumer_kip848_group_reads_everything_once_with_fetch_sessions(
    java: Java, broker: EmbeddedBroker, produced: tuple[str, list[Sent]]
) -> None:
    consume_group(java, broker, *produced, "consumer")


BASE_TS = 1_700_000_000_000


def produce_timestamped(broker: EmbeddedBroker, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(n):
        p.produce(topic, value=f"r{i}".encode(), partition=0, timestamp=BASE_TS + 1000 * i)
    assert p.flush(30) == 0


def test_java_consumer_commit_seek_offsets_for_times(java: Java, broker: EmbeddedBroker, topic_name: str) -> None:
    create_topic(broker, topic_name, 1)
    produce_timestamped(broker, topic_name, 10)
    group = unique_name("java-offsets")
    out = dict(
        line.split(" ", 1)
        for line in java.run(
            "JavaConsumer.java", "offsets", broker.bootstrap_servers, topic_name, group,
            str(BASE_TS + 4500),
        )
    )
    assert out["FOR_TIME"] == f"5 {BASE_TS + 5000}"
    assert out["FOR_FUTURE"] == "null"
    assert out["FIRST"] == f"5 {BASE_TS + 5000} r5"
    assert out["COMMITTED"] == "6 java-meta"
    assert (out["BEGIN"], out["END"], out["OFFSETS"]) == ("0", "10", "0 10")
    # The commit is visible to another client.
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group})
    try:
        (tp,) = c.committed([TopicPartition(topic_name, 0)], timeout=30)
        assert tp.offset == 6
    finally:
        c.close()


def test_java_admin_client(java: Java, broker: EmbeddedBroker, topic_name: str) -> None:
    existing = unique_name("java-admin-data")
    create_topic(broker, existing, 1)
    produce_timestamped(broker, existing, 10)
    group = unique_name("java-admin-group")
    c = Consumer({
        "bootstrap.servers": broker.bootstrap_servers, "group.id": group,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })
    try:
        c.subscribe([existing])
        seen: list[int] = []

        def drained() -> bool:
            seen.append(sum(1 for m in c.consume(10, 0.5) if m.error() is None))
            return sum(seen) >= 10

        wait_until(drained, timeout=60, what="records consumed")
        c.commit(asynchronous=False)
    finally:
        c.close()
    out: dict[str, str] = {}
    for line in java.run("JavaAdmin.java", broker.bootstrap_servers, topic_name, group, existing):
        key, _, rest = line.partition(" ")
        out[key] = rest
    cluster_id, nodes, controller = out["CLUSTER"].split()
    assert cluster_id == broker.server.cluster_id and nodes == "1"
    assert out["EXISTS"] == "true"
    name, created_id, created_parts = out["CREATED"].split()
    assert (name, created_parts) == (topic_name, "3")
    name, parts, leader, topic_id = out["DESCRIBED"].split()
    assert (name, parts, leader, topic_id) == (topic_name, "3", str(broker.server.node_id), created_id)
    assert len(base64.urlsafe_b64decode(topic_id + "==")) == 16 and topic_id != "AAAAAAAAAAAAAAAAAAAAAA"
    assert out["CONFIG"] == "retention.ms 3600000 DYNAMIC_TOPIC_CONFIG"
    assert out["ALTERED"] == "cleanup.policy compact retention.ms 604800000 DEFAULT_CONFIG"
    assert out["OFFSETS"] == f"0 10 9 {BASE_TS + 9000}"
    assert out["LISTED"].split()[0] == group and out["LISTED"].split()[1].lower() == "empty"
    gid, state, members, gtype = out["GROUP"].split()
    assert (gid, state.lower(), members, gtype.lower()) == (group, "empty", "0", "classic")
    assert out["GROUP_OFFSETS"] == "1 10"
    assert out["DELETED"] == "true"
