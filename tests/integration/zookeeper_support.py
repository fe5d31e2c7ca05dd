"""A real ZooKeeper server for the ZooKeeper-mode tests: Debian's ``zookeeper`` package
(``/usr/share/java/zookeeper.jar``, installed by scripts/test.sh on CI), run as
``ZooKeeperServerMain`` on 127.0.0.1 with a random port and a temporary data directory.

Without Java or the package the tests skip, except under CI, where they fail.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .support import die_with_parent

if TYPE_CHECKING:  # conftest imports this module: kazoo only when a client is made
    from odradek.zk.kafka_zk_client import KafkaZkClient

JARS = Path("/usr/share/java")
CLASSPATH = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar")
LOGGING = "slf4j-simple.jar"  # the server's log lines, when libslf4j-java ships it


def _missing() -> str | None:
    if shutil.which("java") is None:
        return "java is not installed"
    for jar in CLASSPATH:
        if not (JARS / jar).exists():
            return f"{JARS / jar} is missing (Debian package zookeeper / libslf4j-java)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def four_letter_word(port: int, word: str, timeout: float = 2.0) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while True:
            data = s.recv(4096)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperServer:
    def __init__(self, tick_ms: int = 500) -> None:
        self.port = _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="odradek-zk-"))
        self.tick_ms = tick_ms
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> ZooKeeperServer:
        why = _missing()
        if why:
            if os.environ.get("CI"):
                pytest.fail(f"ZooKeeper unavailable under CI: {why}")
            pytest.skip(f"ZooKeeper unavailable: {why}")
        (self.dir / "data").mkdir(exist_ok=True)
        cfg = self.dir / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_ms}\ndataDir={self.dir / 'data'}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=*\n"
            f"minSessionTimeout={2 * self.tick_ms}\nmaxSessionTimeout=60000\n")
        jars = [*CLASSPATH, *([LOGGING] if (JARS / LOGGING).exists() else [])]
        cp = ":".join(str(JARS / j) for j in jars)
        self._log = open(self.dir / "zookeeper.log", "ab")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            ["java", "-Xmx128m", "-cp", cp, "org.apache.zookeeper.server.ZooKeeperServerMain",
             str(cfg)], stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited {self.proc.returncode}: {self.log_tail()}")
            try:
                if four_letter_word(self.port, "ruok") == "imok" and \
                        "Mode:" in four_letter_word(self.port, "srvr"):
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not answer ruok within {timeout}s: {self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return (self.dir / "zookeeper.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the server, keeping its port and data: :meth:`start` brings it back with its
        sessions (they are in its log); connections do not survive. Call both from the main
        thread (the server dies with the thread that started it)."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(15)
        self._log.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)
        if getattr(self, "_log", None) is not None:
            self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def zk_client(connect: str) -> KafkaZkClient:
    """A started client (6 s session) with Kafka's top-level paths created."""
    from odradek.zk.kafka_zk_client import KafkaZkClient, ZkConfig

    c = KafkaZkClient(ZkConfig(connect, 6000, 10000))
    c.start()
    c.create_top_level_paths()
    return c


async def wait_until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll ``cond`` every 50 ms from a coroutine (the in-process controller runs on the loop)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def wait_for(what: str, cond: Callable[[], Any], timeout: float, logs: Callable[[], str],
             interval: float = 0.2) -> Any:
    """Poll ``cond`` (an exception counts as not yet) until it returns something true, which is
    returned; on timeout fail with ``logs()``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = cond()
        except Exception:
            got = None
        if got:
            return got
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}\n{logs()}")
