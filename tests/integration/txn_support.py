"""Helpers for the transaction tests (test_transactions_*.py): one server to test against, Odradek
or Apache Kafka, and reading a topic back with either isolation level.

The tests run against Odradek (an ``odradek server`` process) by default. ``ODRADEK_TXN_SERVERS``
names the servers to run them against, comma-separated: ``kafka`` runs them against a single-node
Apache Kafka 4.x from the fetched jars (see kafka_reference.py) -- that proves a test right before
Odradek can pass it -- and ``odradek,kafka`` against both.

Both servers get the same transaction settings (:data:`TXN_BROKER_SETTINGS`): few
``__transaction_state`` and ``__consumer_offsets`` partitions with replication factor 1, and a
timed-out transaction aborted within half a second of its timeout.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .kafka_reference import KafkaServer, find_kafka_tools
from .support import ServerProcess

SERVERS_ENV = "ODRADEK_TXN_SERVERS"
KNOWN_SERVERS = ("odradek", "kafka")

TXN_BROKER_SETTINGS: dict[str, str] = {
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}


def txn_server_kinds() -> list[str]:
    """The servers named by ``ODRADEK_TXN_SERVERS`` (default: odradek)."""
    kinds = [k.strip() for k in os.environ.get(SERVERS_ENV, "odradek").split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KNOWN_SERVERS]
    if unknown or not kinds:
        raise ValueError(f"{SERVERS_ENV}={os.environ.get(SERVERS_ENV)!r}: expected a list of {KNOWN_SERVERS}")
    return kinds


class TxnServer(Protocol):
    @property
    def bootstrap_servers(self) -> str: ...

    def log_tail(self, chars: int = 4000) -> str: ...


@dataclass
class Target:
    """The server a test runs against: ``kind`` is "odradek" or "kafka"."""

    kind: str
    server: TxnServer

    @property
    def bootstrap(self) -> str:
        return self.server.bootstrap_servers

    def log_tail(self) -> str:
        return self.server.log_tail(6000)


def start_target(kind: str, base: Path, overrides: dict[str, str] | None = None) -> Iterator[Target]:
    """Start a single-node server of ``kind`` under ``base``; yields it and stops it after."""
    settings = {**TXN_BROKER_SETTINGS, **(overrides or {})}
    if kind == "kafka":
        tools = find_kafka_tools("4")
        env_heap = os.environ.get("KAFKA_HEAP_OPTS")
        os.environ["KAFKA_HEAP_OPTS"] = env_heap or "-Xmx512m -Xms256m"
        kafka = KafkaServer(tools, base / "kafka", settings)
        try:
            kafka.start()
        finally:
            if env_heap is None:
                del os.environ["KAFKA_HEAP_OPTS"]
        try:
            yield Target(kind, kafka)
        finally:
            kafka.stop()
    else:
        server = ServerProcess(base / "odradek", settings)
        server.start()
        try:
            yield Target(kind, server)
        finally:
            server.kill()


# ---- topics and reading back ------------------------------------------------------------------


def create_topic(bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None,
                 replication_factor: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, replication_factor, config=config or {})])[name].result(60)
    # Metadata of a new topic reaches every broker a moment later.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
            p.leader >= 0 for p in md.partitions.values()
        ):
            return
        time.sleep(0.2)
    raise AssertionError(f"topic {name} has no leaders after 30s")


@dataclass(frozen=True)
class Read:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def read_all(
    bootstrap: str, topic: str, partitions: int, isolation: str, timeout: float = 60.0
) -> list[Read]:
    """Every record of ``topic`` from the start up to the end (the last stable offset for
    ``read_committed``), with confluent-kafka; fails if the end is not reached in ``timeout``."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"reader-{time.monotonic_ns()}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": isolation,
        "auto.offset.reset": "earliest",
    })
    try:
        ends = end_offsets(consumer, topic, partitions, timeout)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[Read] = []
        at_end = {p for p in range(partitions) if ends[p] == 0}
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise AssertionError(f"{isolation} read of {topic} did not reach {ends} in {timeout}s "
                                     f"(at the end: {sorted(at_end)}, {len(out)} records)")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= ends[msg.partition()]:
                        at_end.add(msg.partition())
                    continue
                raise AssertionError(f"{isolation} read of {topic}: {err}")
            out.append(Read(msg.partition(), msg.offset(), msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def end_offsets(consumer: Consumer, topic: str, partitions: int, timeout: float = 30.0) -> dict[int, int]:
    """The end offset of each partition as the consumer's isolation level sees it (the high
    watermark for read_uncommitted, the last stable offset for read_committed)."""
    return {
        p: int(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout, cached=False)[1])
        for p in range(partitions)
    }


def watermarks(bootstrap: str, topic: str, partitions: int, isolation: str) -> dict[int, int]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "watermarks", "isolation.level": isolation,
    })
    try:
        return end_offsets(consumer, topic, partitions)
    finally:
        consumer.close()


def values(reads: list[Read]) -> list[str]:
    return sorted((r.value or b"").decode() for r in reads)


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int, stable: bool = True) -> dict[int, int]:
    """The group's committed offset of each partition (-1001 when none). ``stable``: as a
    read_committed consumer asks (KIP-447: the broker answers UNSTABLE_OFFSET_COMMIT, and the
    client retries, while a transaction's offsets for the group are pending)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "isolation.level": "read_committed" if stable else "read_uncommitted",
    })
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


def skip_unless(condition: bool, reason: str) -> None:
    """Skip (fail under CI, which installs everything) when a client is missing."""
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI installs it and fails without it")
    pytest.skip(reason)


class Lines:
    """A child process's output lines, read by a thread as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.proc = proc
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def wait_for(self, pattern: str, timeout: float, after: int = 0) -> int:
        """The index of the first line from ``after`` on matching ``pattern``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i in range(after, len(self.lines)):
                if re.fullmatch(pattern, self.lines[i]):
                    return i
            if self.proc.poll() is not None and not self.thread.is_alive():
                break
            time.sleep(0.02)
        raise AssertionError(f"no line {pattern!r} in {timeout}s: {self.lines[-20:]}")


class Watcher:
    """A ``read_committed`` consumer reading ``topic`` in a thread while a test runs its faults:
    what a consumer saw along the way, to check against the final state (an aborted read is a
    record shown and later found aborted). Bounded: it stops after ``limit_s`` at most."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, limit_s: float = 400.0) -> None:
        self.seen: list[Read] = []
        self._stop = threading.Event()
        self._args = (bootstrap, topic, partitions, limit_s)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        bootstrap, topic, partitions, limit_s = self._args
        consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"watcher-{time.monotonic_ns()}",
            "enable.auto.commit": False, "isolation.level": "read_committed", "auto.offset.reset": "earliest",
        })
        try:
            consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
            deadline = time.monotonic() + limit_s
            while not self._stop.is_set() and time.monotonic() < deadline:
                for m in consumer.consume(500, 0.2):
                    if m.error() is None:  # errors (brokers killed on purpose) are the client's to retry
                        self.seen.append(Read(m.partition(), m.offset(), m.key(), m.value()))
        finally:
            consumer.close()

    def stop(self) -> list[Read]:
        self._stop.set()
        self.thread.join(30)
        return self.seen
