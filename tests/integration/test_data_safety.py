"""Data safety of ``odradek server`` processes: one process per data directory, a start that
fails on a taken port leaves the data alone."""

from __future__ import annotations

import errno
import hashlib
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
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


# ---- disk full ----------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs (CI runs as root); skipped where mounting is not possible."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)],
            capture_output=True, text=True, timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"cannot mount a tmpfs: {e}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def fill_disk(path: Path) -> Path:
    """Write a file until the file system is full; returns it (delete it to free the space)."""
    filler = path / "filler"
    chunk = b"\0" * (64 * 1024)
    with open(filler, "wb", buffering=0) as f:
        for _ in range(10_000):  # 16 MiB / 64 KiB = 256 at most
            try:
                f.write(chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                break
        for _ in range(64 * 1024):  # then byte by byte to the last one
            try:
                f.write(b"\0")
            except OSError:
                break
    return filler


def test_full_disk_answers_kafka_storage_error_and_writes_resume(small_disk: Path) -> None:
    """A real ``odradek server`` on a real full disk: the producer gets KAFKA_STORAGE_ERROR (not a
    timeout), the broker logs it once, reads go on, and once space is back produce works again
    with every record acknowledged before still there."""
    server = ServerProcess(small_disk).start()
    try:
        bootstrap = server.bootstrap_servers
        topic = unique_name("full")
        create_topic(bootstrap, topic)
        acked = [b"early-%d-" % i + b"x" * 200 for i in range(300)]
        produce_acked(bootstrap, topic, acked)
        filler = fill_disk(small_disk)

        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0,
                             "linger.ms": 0, "message.timeout.ms": 60_000})
        outcome: dict[bytes, int] = {}

        def report(err: KafkaError | None, msg: Message) -> None:
            value = msg.value()
            assert isinstance(value, bytes)
            outcome[value] = 0 if err is None else err.code()

        # The page the segment ends in may hold a few more records; then the disk is full.
        storage_errors = 0
        for i in range(2000):
            value = b"full-%d-" % i + b"y" * 2000
            producer.produce(topic, value=value, partition=0, on_delivery=report)
            assert producer.flush(30) == 0
            assert outcome[value] in (0, KafkaError.KAFKA_STORAGE_ERROR), KafkaError(outcome[value])
            if outcome[value] == 0:
                acked.append(value)
            else:
                storage_errors += 1
                if storage_errors == 20:
                    break
        assert storage_errors == 20, "the disk never filled up"

        # Reads go on: Fetch, ListOffsets, Metadata.
        assert read_all(bootstrap, topic) == acked
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert topic in admin.list_topics(timeout=30).topics

        filler.unlink()  # space is back
        later = [b"later-%d" % i for i in range(100)]
        produce_acked(bootstrap, topic, later)
        assert read_all(bootstrap, topic) == acked + later

        assert server.terminate() == 0
        server.start()  # and all of it survives a restart
        assert read_all(server.bootstrap_servers, topic) == acked + later
        text = server.log_tail(200_000)
        assert text.count("fail: No space left on device") == 1, text[-5000:]  # logged once
        assert "succeed again" in text
        assert "Traceback" not in text, text[-5000:]
    finally:
        server.kill()


def test_storage_error_reaches_the_producer_without_a_real_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same through an embedded broker, the full disk simulated (ENOSPC from every write to
    the topic's files): runs where a tmpfs cannot be mounted."""
    topic = unique_name("enospc")
    real_pwrite = os.pwrite
    full = {"on": False}

    def pwrite(fd: int, data: Any, position: int) -> int:
        if full["on"] and f"/{topic}-0/" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(fd, data, position)

    monkeypatch.setattr(os, "pwrite", pwrite)
    with EmbeddedBroker(log_dir=str(tmp_path / "data")) as broker:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, topic)
        early = [b"early-%d" % i for i in range(50)]
        produce_acked(bootstrap, topic, early)
        full["on"] = True
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0})
        codes: list[int | None] = []
        for i in range(5):
            producer.produce(
                topic, value=b"lost-%d" % i, partition=0,
                on_delivery=lambda err, _m: codes.append(None if err is None else err.code()),
            )
            assert producer.flush(30) == 0
        assert codes == [KafkaError.KAFKA_STORAGE_ERROR] * 5
        assert read_all(bootstrap, topic) == early  # reads go on
        full["on"] = False
        later = [b"later-%d" % i for i in range(50)]
        produce_acked(bootstrap, topic, later)
        assert read_all(bootstrap, topic) == early + later
