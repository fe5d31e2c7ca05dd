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
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

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
