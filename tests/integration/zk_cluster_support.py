"""Kafka 3.9.2 brokers in ZooKeeper mode (from the Maven jars scripts/kafka_reference.sh fetches)
for the ZooKeeper-mode fidelity tests, and a wait that fails early when Kafka exits."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

import pytest

from odradek.zk.kafka_zk_client import KafkaZkClient, ZkConfig

from .kafka_reference import KafkaTools, find_kafka_tools
from .support import die_with_parent
from .zookeeper_support import ZooKeeperServer, _free_port

CHROOT = "/kafka39"


class ZkModeKafka:
    """One Kafka 3.9 broker (broker.id=1) in ZooKeeper mode: it is also the controller."""

    def __init__(self, tools: KafkaTools, zk_connect: str, data_dir: Path) -> None:
        self.tools = tools
        self.port = _free_port()
        self.internal_port = _free_port()
        self.data_dir = data_dir
        self.zk_connect = zk_connect
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / "kafka.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> ZkModeKafka:
        return self.launch(1, 10000, {"broker.rack": "rack-a", "group.initial.rebalance.delay.ms": "0"},
                           heap="-Xmx512m")

    def launch(self, broker_id: int, session_timeout_ms: int, extra: dict[str, str], heap: str,
               internal_listener: bool = True) -> Self:
        """Write ``server.properties`` (listeners, log dir, replication factors of 1 for the
        internal topics, then ``extra``) and start ``kafka.Kafka`` with ``KAFKA_HEAP_OPTS`` defaulting
        to ``heap``. With ``internal_listener`` an INTERNAL listener is the inter-broker one;
        without, PLAINTEXT is the only listener."""
        props = {"broker.id": str(broker_id), "zookeeper.connect": self.zk_connect,
                 "zookeeper.session.timeout.ms": str(session_timeout_ms)}
        if internal_listener:
            props |= {
                "listeners": f"PLAINTEXT://127.0.0.1:{self.port},INTERNAL://127.0.0.1:{self.internal_port}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
                "inter.broker.listener.name": "INTERNAL",
            }
        else:
            props["listeners"] = f"PLAINTEXT://127.0.0.1:{self.port}"
        props |= {
            "log.dirs": str(self.data_dir / "logs"),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            **extra,
        }
        config = self.data_dir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        env = dict(os.environ)
        env.setdefault("KAFKA_HEAP_OPTS", heap)
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                [str(self.tools.home / "bin" / "kafka-run"), "--line", self.tools.line,
                 "kafka.Kafka", str(config)],
                stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                preexec_fn=die_with_parent)
        return self

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text("utf-8", "replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def wait_for(cond: object, what: str, kafka: ZkModeKafka, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert kafka.proc is not None
        if kafka.proc.poll() is not None:
            raise AssertionError(f"Kafka exited {kafka.proc.returncode}:\n{kafka.log_tail()}")
        try:
            if cond():  # type: ignore[operator]
                return
        except Exception:
            pass
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}\n{kafka.log_tail()}")


async def wait_until(cond: Callable[[], bool], what: str, kafka: ZkModeKafka, timeout: float = 120.0) -> None:
    """:func:`wait_for` from a coroutine (an in-process controller runs on the loop)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert kafka.proc is not None
        if kafka.proc.poll() is not None:
            raise AssertionError(f"Kafka exited {kafka.proc.returncode}:\n{kafka.log_tail()}")
        try:
            if cond():
                return
        except Exception:
            pass
        await asyncio.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}\n{kafka.log_tail()}")


@contextmanager
def kafka39_and_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ZkModeKafka, KafkaZkClient]]:
    """A ZooKeeper, one Kafka 3.9 broker under CHROOT that is also the controller, and a client of
    ours on the same chroot, once Kafka has registered and leads."""
    tools = find_kafka_tools("3.9")
    with ZooKeeperServer() as zk:
        kafka = ZkModeKafka(tools, zk.connect + CHROOT, tmp_path_factory.mktemp("kafka39")).start()
        client = KafkaZkClient(ZkConfig(zk.connect + CHROOT, 10000, 20000)).start()
        try:
            wait_for(lambda: client.get_controller_id() == 1, "Kafka to register and lead", kafka)
            yield kafka, client
        finally:
            client.close()
            kafka.stop()
