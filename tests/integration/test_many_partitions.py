"""A broker with ~10,000 partitions under a descriptor limit of 12,000: one open file per
segment (its .log; the indexes hold none), so CreateTopics of 9,999 partitions (Kafka's
per-request limit is 10,000) works, and so do produce, consume and a restart."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .support import ServerProcess, unique_name

PARTITIONS = 9_999
NOFILE = 12_000
SAMPLE = (0, 1, 4_321, PARTITIONS - 1)


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def partition_dirs(data: Path, topic: str) -> int:
    return sum(1 for name in os.listdir(data) if name.startswith(topic + "-"))


def wait_for(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def produce(bootstrap: str, topic: str, tag: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for p in SAMPLE:
        for i in range(3):
            producer.produce(topic, value=f"{tag}-{p}-{i}".encode(), partition=p, on_delivery=report)
    assert producer.flush(60) == 0
    assert not errors, errors


def consume(bootstrap: str, topic: str, expected: int) -> dict[int, list[bytes]]:
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": unique_name("g"),
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })
    try:
        c.assign([TopicPartition(topic, p, 0) for p in SAMPLE])
        got: dict[int, list[bytes]] = {p: [] for p in SAMPLE}
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            value = msg.value()
            partition = msg.partition()
            assert value is not None and partition is not None
            got[partition].append(value)
        return got
    finally:
        c.close()


@pytest.mark.timeout(900)
def test_create_topics_of_9999_partitions_under_a_descriptor_limit(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data, max_open_files=NOFILE).start()
    try:
        assert server.proc is not None
        # Creating 10,000 partition directories takes three fsyncs each (partition.metadata and
        # the directories): minutes on a loaded machine, hence the long timeouts.
        admin = AdminClient(
            {"bootstrap.servers": server.bootstrap_servers, "socket.timeout.ms": 300_000}
        )
        topic = unique_name("wide")
        futures = admin.create_topics(
            [NewTopic(topic, PARTITIONS, 1)], operation_timeout=280, request_timeout=300
        )
        futures[topic].result(320)  # success: raises on an error code

        def all_created() -> bool:
            assert "Too many open files" not in server.log_tail(100_000)  # fail fast
            return partition_dirs(data, topic) == PARTITIONS

        wait_for("the partition directories", all_created, 300)
        produce(server.bootstrap_servers, topic, "a")
        got = consume(server.bootstrap_servers, topic, 3 * len(SAMPLE))
        assert got == {p: [f"a-{p}-{i}".encode() for i in range(3)] for p in SAMPLE}
        fds = open_fds(server.proc.pid)
        # One descriptor per partition (its active segment's .log) and a few hundred others;
        # three per partition would be ~30,000, over the limit.
        assert PARTITIONS <= fds < PARTITIONS + 1_000, fds

        assert server.terminate(300) == 0  # a clean shutdown, then every log is loaded again
        server.start(300)
        pid = server.proc.pid if server.proc is not None else 0
        wait_for("all logs loaded", lambda: open_fds(pid) >= PARTITIONS, 300)
        produce(server.bootstrap_servers, topic, "b")
        got = consume(server.bootstrap_servers, topic, 6 * len(SAMPLE))
        assert got == {
            p: [f"{t}-{p}-{i}".encode() for t in "ab" for i in range(3)] for p in SAMPLE
        }
        assert partition_dirs(data, topic) == PARTITIONS
    finally:
        server.terminate(120)
    text = server.log_path.read_text("utf-8", "replace")
    assert "Too many open files" not in text
    assert "Traceback" not in text, text[-4000:]
