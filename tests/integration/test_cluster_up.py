"""``odradek cluster up`` as a real command: it starts 3 controller-only and 2 broker-only
processes, prints a ``bootstrap.servers=`` line a script can parse, the cluster serves a topic
created with the AdminClient through one broker, produced through one broker and consumed through
the other; SIGINT stops everything (exit code 0, no child left); ``--dir`` keeps the data so a
second ``cluster up --dir D`` restarts the same cluster with the topic and its records. A child
that dies stops the whole cluster (exit code 1, no child left)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cli.main import main as odradek_main


class ClusterUp:
    """``odradek cluster up`` as a child process; its stdout lines read on a thread."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.stderr_path = tmp / f"cluster-up-{time.monotonic_ns()}.err"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "odradek.cli.main", "cluster", "up", *args],
                stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
            )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(raw.decode().rstrip("\n"))

    def stderr(self) -> str:
        return self.stderr_path.read_text("utf-8", "replace")[-6000:]

    def summary(self, timeout: float = 120) -> dict[str, str]:
        """The key=value lines up to ``cluster.id``."""
        out: dict[str, str] = {}
        end = time.monotonic() + timeout
        while "cluster.id" not in out:
            try:
                line = self.lines.get(timeout=max(0.1, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no bootstrap line within {timeout}s:\n{self.stderr()}") from None
            key, _, value = line.partition("=")
            out[key] = value
        return out

    def children(self) -> list[int]:
        """Pids of this process's children (from /proc)."""
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if ppid == self.proc.pid:
                pids.append(int(entry))
        return pids

    def stop(self, sig: int = signal.SIGINT, timeout: float = 90) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"cluster up did not stop within {timeout}s:\n{self.stderr()}") from None


def _alive(pid: int) -> bool:
    """A process (not a zombie) with this pid exists."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _assert_gone(pids: list[int], timeout: float = 10) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(_alive(p) for p in pids):
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)], "child processes left behind"


def _consume(bootstrap: str, topic: str, partitions: int, want: int, group: str) -> set[tuple[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    got: set[tuple[int, bytes]] = set()
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        end = time.monotonic() + 30
        while time.monotonic() < end and len(got) < want:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.add((msg.partition(), msg.value()))
    finally:
        consumer.close()
    return got


@pytest.mark.timeout(300)
def test_cluster_up_serves_stops_and_restarts_from_dir(tmp_path: Path) -> None:
    data = tmp_path / "cluster"
    up = ClusterUp(tmp_path, "--controllers", "3", "--brokers", "2", "--dir", str(data))
    try:
        info = up.summary()
        brokers = info["bootstrap.servers"].split(",")
        assert len(brokers) == 2 and all(b.startswith("127.0.0.1:") for b in brokers)
        assert len(info["controller.quorum.voters"].split(",")) == 3
        children = up.children()
        assert len(children) == 5, children  # 3 controllers + 2 brokers

        topic = "cluster-up"
        admin = AdminClient({"bootstrap.servers": brokers[0]})
        admin.create_topics([NewTopic(topic, 2, 1)], operation_timeout=15)[topic].result(30)
        # Both brokers list every broker and the topic, with a leader for each partition.
        for b in brokers:
            md = AdminClient({"bootstrap.servers": b}).list_topics(timeout=10)
            assert set(md.brokers) == {101, 102}
            end = time.monotonic() + 20
            while (md.topics.get(topic) is None or md.topics[topic].error is not None) and time.monotonic() < end:
                time.sleep(0.2)
                md = AdminClient({"bootstrap.servers": b}).list_topics(topic=topic, timeout=10)
            assert sorted(md.topics[topic].partitions) == [0, 1]

        sent = {(p, f"v{p}-{i}".encode()) for p in (0, 1) for i in range(5)}
        producer = Producer({"bootstrap.servers": brokers[0], "acks": "all"})
        for p, v in sorted(sent):
            producer.produce(topic, value=v, partition=p)
        assert producer.flush(30) == 0
        assert _consume(brokers[1], topic, 2, len(sent), "g1") == sent

        assert up.stop(signal.SIGINT) == 0, up.stderr()
        _assert_gone(children)
        assert "stopping the brokers, then the controllers" in up.stderr()
        assert (data / "cluster.properties").exists()
    finally:
        up.stop(signal.SIGKILL)

    # The same directory again: the same cluster id and ports, the topic and its records.
    again = ClusterUp(tmp_path, "--controllers", "3", "--brokers", "2", "--dir", str(data))
    try:
        info2 = again.summary()
        assert info2 == info
        md = AdminClient({"bootstrap.servers": brokers[1]}).list_topics(topic=topic, timeout=10)
        assert md.topics[topic].error is None and sorted(md.topics[topic].partitions) == [0, 1]
        assert _consume(brokers[1], topic, 2, len(sent), "g2") == sent
        children = again.children()
        assert again.stop(signal.SIGTERM) == 0, again.stderr()
        _assert_gone(children)
    finally:
        again.stop(signal.SIGKILL)


@pytest.mark.timeout(180)
def test_a_child_that_dies_stops_the_cluster(tmp_path: Path) -> None:
    """Without --dir: a temporary directory, removed at exit. kill -9 of one broker makes
    ``cluster up`` stop the others and exit 1."""
    up = ClusterUp(tmp_path, "--controllers", "1", "--brokers", "1")
    try:
        up.summary()
        children = up.children()
        assert len(children) == 2
        base = next(line for line in up.stderr().splitlines() if " in /" in line).rsplit(" in ", 1)[1]
        assert Path(base).is_dir()
        victim = next(p for p in children if b"broker-101" in Path(f"/proc/{p}/cmdline").read_bytes())
        os.kill(victim, signal.SIGKILL)
        assert up.proc.wait(60) == 1, up.stderr()
        assert "exited with code -9" in up.stderr()
        _assert_gone(children)
        assert not Path(base).exists()
    finally:
        up.stop(signal.SIGKILL)


def test_dir_of_another_layout_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "d"
    data.mkdir()
    (data / "cluster.properties").write_text("cluster.id=abc\ncontrollers=3\nbrokers=2\nports=1,2,3,4,5\n")
    assert odradek_main(["cluster", "up", "--controllers", "1", "--brokers", "1", "--dir", str(data)]) == 2
    assert "holds a cluster of 3 controllers and 2 brokers" in capsys.readouterr().err
    assert odradek_main(["cluster", "up", "--controllers", "0"]) == 2
    assert odradek_main(["cluster", "up", "--override", "novalue"]) == 2
