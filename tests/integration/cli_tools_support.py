"""Running the ``odradek`` data-plane tools as processes, and the clusters they run against:
Odradek (an embedded broker) and Apache Kafka 4.x (from the fetched jars)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.embedded import EmbeddedBroker

from .kafka_reference import KafkaServer, find_kafka_tools

REPO = Path(__file__).resolve().parents[2]


def odradek_cli(*args: str, stdin: bytes | None = None, timeout: float = 90.0,
                stderr: int | None = None) -> subprocess.CompletedProcess[bytes]:
    """``odradek ARGS`` in a child process; stdout and stderr captured (unless ``stderr`` is a
    file descriptor to give it instead)."""
    return subprocess.run(
        [sys.executable, "-m", "odradek.cli.main", *args], input=stdin, timeout=timeout, cwd=REPO,
        stdout=subprocess.PIPE, stderr=stderr if stderr is not None else subprocess.PIPE,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def clusters(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The bootstrap address of an Odradek broker or of a single-node Apache Kafka 4.x."""
    if request.param == "odradek":
        with EmbeddedBroker({"group.initial.rebalance.delay.ms": "0", "num.partitions": "1"}) as b:
            yield b.bootstrap_servers
        return
    server = KafkaServer(find_kafka_tools("4"), tmp_path_factory.mktemp("kafka"))
    server.start()
    try:
        yield server.bootstrap_servers
    finally:
        server.stop()


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    deadline_checks = 100
    for _ in range(deadline_checks):  # until every partition has a leader
        md = admin.list_topics(name, timeout=10)
        t = md.topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions.values()):
            return
        import time

        time.sleep(0.1)
    raise AssertionError(f"topic {name} has no leaders")
