"""Apache Kafka's own tools, run unchanged against Odradek.

``scripts/kafka_reference.sh`` (run by the README's test command) fetches Kafka with mvn into
``ODRADEK_KAFKA_HOME`` (default ``~/.cache/odradek/kafka``) and writes ``bin/kafka-run``, which
runs a Kafka class with ``java -cp``. :class:`KafkaTools` calls a tool by the name of its
``kafka-*.sh`` script. Without Java or the fetched jars the tests skip, except under CI, where
they fail.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from .support import die_with_parent

# kafka-*.sh script -> the class it runs (Kafka 4.x's bin/ scripts).
TOOL_CLASSES: dict[str, str] = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-dump-log": "org.apache.kafka.tools.DumpLogSegments",
    "kafka-metadata-shell": "org.apache.kafka.shell.MetadataShell",
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
}


def kafka_home() -> Path:
    env = os.environ.get("ODRADEK_KAFKA_HOME")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "odradek" / "kafka"


@dataclass
class KafkaTools:
    home: Path
    line: str = "4"

    @property
    def version(self) -> str:
        return (self.home / self.line).resolve().name

    def run(
        self,
        tool: str,
        *args: str,
        stdin: str | None = None,
        timeout: float = 120.0,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Run a ``kafka-*.sh`` tool by name; ``check`` fails the test on a non-zero exit."""
        cmd = [str(self.home / "bin" / "kafka-run"), "--line", self.line, TOOL_CLASSES[tool], *args]
        result = subprocess.run(
            cmd, input=stdin, capture_output=True, text=True, timeout=timeout,
            stdin=None if stdin is not None else subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{tool} {' '.join(args)} exited {result.returncode}\n"
                f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
            )
        return result


def find_kafka_tools(line: str = "4") -> KafkaTools:
    """The fetched Kafka of a line; skips the test (fails under CI) when it is not there."""
    home = kafka_home()
    missing = None
    if shutil.which("java") is None:
        missing = "java is not installed"
    elif not (home / "bin" / "kafka-run").exists() or not (home / line / "lib").is_dir():
        missing = f"Apache Kafka {line}.x is not fetched under {home} (run scripts/kafka_reference.sh)"
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{missing}; CI fetches it and fails without it")
        pytest.skip(missing)
    return KafkaTools(home, line)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KafkaServer:
    """A single-node Apache Kafka (KRaft, broker and controller in one JVM) on loopback.

    The reference broker beside Odradek in differential tests and benchmarks: formatted into its
    own directory, started with ``kafka.Kafka``, stopped with SIGTERM (SIGKILL after a timeout).
    """

    def __init__(
        self,
        tools: KafkaTools,
        data_dir: Path,
        overrides: dict[str, str] | None = None,
        cluster_id: str = "Odradek-Reference-Q1",
    ) -> None:
        self.tools = tools
        self.cluster_id = cluster_id
        self.data_dir = data_dir
        self.port = _free_port()
        self.controller_port = _free_port()
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-kafka.log"

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def properties(self) -> str:
        """The server.properties this broker runs with (formatted with ``cluster_id``)."""
        return self._properties()

    def _properties(self) -> str:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir / "logs"),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            **self.overrides,
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def start(self, timeout: float = 120.0) -> KafkaServer:
        assert self.proc is None, "already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "server.properties"
        config.write_text(self._properties())
        launcher = str(self.tools.home / "bin" / "kafka-run")
        fmt = subprocess.run(
            [launcher, "--line", self.tools.line, "kafka.tools.StorageTool", "format",
             "--cluster-id", self.cluster_id, "--config", str(config), "--ignore-formatted"],
            capture_output=True, text=True, timeout=120,
        )
        if fmt.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed:\n{fmt.stdout}\n{fmt.stderr}")
        env = dict(os.environ)
        env.setdefault("KAFKA_HEAP_OPTS", "-Xmx1g -Xms1g")
        env.setdefault("KAFKA_JVM_OPTS", "-XX:+UseG1GC -XX:MaxGCPauseMillis=20")
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                [launcher, "--line", self.tools.line, "kafka.Kafka", str(config)],
                stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                preexec_fn=die_with_parent,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Kafka exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
            except OSError:
                time.sleep(0.2)
                continue
            if self._answers_metadata():
                return self
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"Kafka not ready in {timeout}s:\n{self.log_tail()}")

    def _answers_metadata(self) -> bool:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        try:
            return len(admin.list_topics(timeout=5).brokers) == 1
        except Exception:
            return False

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text("utf-8", "replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 60.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)

    def __enter__(self) -> KafkaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
