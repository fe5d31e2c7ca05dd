"""Data safety of ``odradek server`` processes: one process per data directory, a start that
fails on a taken port leaves the data alone."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.embedded import EmbeddedBroker
from odradek.server.dir_lock import StartupError

from .support import ServerProcess, unique_name


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions)])[name].result(30)


def produce_acked(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for v in values:
        producer.produce(topic, value=v, partition=0, on_delivery=report)
    assert producer.flush(60) == 0
    assert not errors, errors


def read_all(bootstrap: str, topic: str) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("g"),
                  "enable.auto.commit": False})
    try:
        end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[bytes] = []
        for _ in range(200):
            if len(out) >= end:
                break
            for msg in c.consume(1000, 0.5):
                if msg.error() is None:
                    value = msg.value()
                    assert isinstance(value, bytes)
                    out.append(value)
        return out
    finally:
        c.close()


def run_server(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every file and directory under ``root``: (size, mtime in ns, content hash)."""
    out: dict[str, tuple[int, int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.stat(path)
            digest = ""
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns, digest)
    st = os.stat(root)
    out["."] = (0, st.st_mtime_ns, "")
    return out


def test_second_server_on_the_same_log_dirs_exits_2_naming_the_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = ServerProcess(data).start()
    try:
        topic = unique_name("lock")
        create_topic(first.bootstrap_servers, topic)
        before = [b"before-%d" % i for i in range(200)]
        produce_acked(first.bootstrap_servers, topic, before)

        # Same data directory, other ports (port 0), and then the very same command line.
        for cmd in (ServerProcess(data)._command(), first._command()):
            result = run_server(cmd)
            assert result.returncode == 2, result.stderr[-3000:]
            lines = [ln for ln in (result.stdout + result.stderr).splitlines() if ln.strip()]
            assert len(lines) == 1, lines
            assert str(data) in lines[0] and "in use" in lines[0], lines[0]
            assert "Traceback" not in result.stderr

        # The first keeps serving, and what it acknowledged survives its restart.
        after = [b"after-%d" % i for i in range(200)]
        produce_acked(first.bootstrap_servers, topic, after)
        assert read_all(first.bootstrap_servers, topic) == before + after
        assert first.terminate() == 0
        first.start()
        assert read_all(first.bootstrap_servers, topic) == before + after
    finally:
        first.kill()


def test_start_on_a_taken_port_prints_one_line_and_leaves_the_data_untouched(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data).start()
    try:
        topic = unique_name("port")
        create_topic(server.bootstrap_servers, topic)
        values = [b"v-%d" % i for i in range(100)]
        produce_acked(server.bootstrap_servers, topic, values)
        assert server.terminate() == 0  # clean: the clean-shutdown marker is written
        assert (data / ".kafka_cleanshutdown").exists()
        before = snapshot(data)

        blocker = socket.socket()
        try:
            blocker.bind(("127.0.0.1", server.port))
            blocker.listen()
            result = run_server(server._command())
        finally:
            blocker.close()
        assert result.returncode == 2, result.stderr[-3000:]
        lines = [ln for ln in (result.stdout + result.stderr).splitlines() if ln.strip()]
        assert lines == [
            f"odradek: cannot listen on 127.0.0.1:{server.port} (listener PLAINTEXT): "
            "address already in use"
        ]
        assert snapshot(data) == before, "a start that failed on its port changed the data dir"

        server.start()
        assert read_all(server.bootstrap_servers, topic) == values
    finally:
        server.kill()


def test_embedded_broker_takes_the_lock(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with EmbeddedBroker(log_dir=str(data)) as first:
        second = EmbeddedBroker(log_dir=str(data))
        with pytest.raises(StartupError, match=str(data)):
            second.start()
        assert not second.running
        topic = unique_name("emb")
        create_topic(first.bootstrap_servers, topic)
        produce_acked(first.bootstrap_servers, topic, [b"x"])
        first.restart()  # releases and takes the lock again
        assert read_all(first.bootstrap_servers, topic) == [b"x"]
    # Once stopped, the directory is free.
    with EmbeddedBroker(log_dir=str(data)) as again:
        assert read_all(again.bootstrap_servers, topic) == [b"x"]
