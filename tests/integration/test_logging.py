"""The broker log of a real ``odradek server``: what INFO says, client text kept on one line,
``--log-level``."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from odradek.embedded import EmbeddedBroker

from .support import ServerProcess, unique_name, wait_until

FORGED = "\n[2026-01-01 00:00:00,000] INFO odradek.fake: forged line"
_LINE_RE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] (\w+) ([\w.]+): (.*)$")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path_factory.mktemp("logging") / "data")
    s.start()
    try:
        yield s
    finally:
        s.terminate()


def _lines(server: ServerProcess, since: int = 0) -> list[str]:
    text = server.log_path.read_text("utf-8", "replace")[since:]
    return [line for line in text.splitlines() if line and not line.startswith("=====")]


def _info(lines: list[str]) -> list[str]:
    return [line for line in lines if " INFO " in line]


def _join_group(bootstrap: str, group: str, topic: str) -> None:
    """One consumer joins ``group`` (creating __consumer_offsets), gets its assignment, leaves."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "session.timeout.ms": 6000,
            "auto.offset.reset": "earliest",
        }
    )
    assigned: list[int] = []
    c.subscribe([topic], on_assign=lambda _c, parts: assigned.extend(p.partition for p in parts))
    deadline = time.monotonic() + 30
    while not assigned and time.monotonic() < deadline:
        c.poll(0.2)
    c.close()
    assert assigned, "the consumer got no assignment within 30 s"


def test_info_says_what_changed_and_not_per_partition_chatter(server: ServerProcess) -> None:
    """Creating and loading the 50 __consumer_offsets partitions writes no per-partition INFO
    line; a group's new generation and a config change write one line each."""
    admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
    topic, group = unique_name("logged"), unique_name("group")
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    start = len(server.log_path.read_text("utf-8", "replace"))

    _join_group(server.bootstrap_servers, group, topic)
    wait_until(
        lambda: any(f"group {group}: generation 2," in line for line in _lines(server, start)),
        what="the group's Empty generation after its member left",
    )
    alter = ConfigResource(
        "topic", topic,
        incremental_configs=[ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([alter])[alter].result(30)
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
    admin.delete_topics([topic])[topic].result(30)
    wait_until(lambda: any("Deleting topic" in line for line in _lines(server, start)))

    everything = _lines(server)
    assert not [line for line in _info(everything) if "became leader" in line or "Loaded __consumer_offsets" in line]
    assert len(_info(everything)) <= 20, "\n".join(_info(everything))
    # __consumer_offsets was created during this window: at most a handful of INFO lines
    window = _info(_lines(server, start))
    assert len(window) <= 10, "\n".join(window)
    assert [line for line in window if "Created topic __consumer_offsets" in line and "50 partition(s)" in line]
    generations = [line for line in window if f"Classic group {group}: generation 1," in line]
    assert len(generations) == 1, window
    assert "protocol type consumer" in generations[0] and "1 member(s)" in generations[0]
    assert "joined: rdkafka-" in generations[0]
    assert len([line for line in window if f"Classic group {group}: generation 2, no members" in line]) == 1
    altered = [line for line in window if "Altered the configuration" in line]
    assert altered == [altered[0]] and altered[0].endswith(f"of topic {topic}: retention.ms=3600000")
    assert [line for line in window if line.endswith(f"Increased the partitions of topic {topic} from 3 to 4")]
    deleted = [line for line in window if f"Deleting topic {topic} with topic ID" in line]
    assert len(deleted) == 1 and deleted[0].endswith(", 4 partition(s)")
    assert len([line for line in everything if "Formatted new log directory" in line]) == 1
    # The per-partition detail is still there at DEBUG: nothing above is lost, only quieter.
    assert not [line for line in everything if " DEBUG " in line]


def test_client_text_cannot_forge_a_log_line(server: ServerProcess) -> None:
    """A config name, a config value and a group id with a newline and a fake log prefix stay
    on their line, escaped."""
    admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
    topic = unique_name("forge")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    start = len(server.log_path.read_text("utf-8", "replace"))

    bad_name = ConfigResource(
        "topic", topic,
        incremental_configs=[ConfigEntry("retention.ms" + FORGED, "1", incremental_operation=AlterConfigOpType.SET)],
    )
    bad_value = ConfigResource(
        "topic", topic,
        incremental_configs=[ConfigEntry("retention.ms", "1" + FORGED, incremental_operation=AlterConfigOpType.SET)],
    )
    for resource in (bad_name, bad_value):
        with pytest.raises(KafkaException) as e:
            admin.incremental_alter_configs([resource])[resource].result(30)
        assert e.value.args[0].code() == KafkaError.INVALID_CONFIG
    _join_group(server.bootstrap_servers, "g" + FORGED.replace(":", "-"), topic)
    wait_until(lambda: sum("forged line" in line for line in _lines(server, start)) >= 3)

    lines = _lines(server, start)
    for line in lines:
        assert _LINE_RE.match(line), f"a log line that is not a log record: {line!r}"
    assert not [line for line in lines if line.startswith("[2026-01-01")]
    escaped = "\\n[2026-01-01 00:00:00,000] INFO odradek.fake: forged line"
    refusals = [line for line in lines if "AlterConfigs of topic" in line]
    assert len(refusals) == 2 and all(escaped in line for line in refusals), lines
    assert [line for line in lines if "Classic group g\\n[2026-01-01 00-00-00,000] INFO" in line]


def test_log_level_options(tmp_path: Path) -> None:
    """``--log-level WARNING --log-level odradek.server.broker_server=INFO``: only the broker's
    INFO lines (its "ready" line) and nothing from the other loggers below WARNING."""
    cmd = [
        sys.executable, "-m", "odradek.cli.main", "server",
        "--override", f"log.dirs={tmp_path / 'data'}",
        "--override", "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "--log-level", "WARNING", "--log-level", "odradek.server.broker_server=INFO",
    ]
    log_path = tmp_path / "server.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until(
            lambda: "Odradek broker ready" in log_path.read_text() or proc.poll() is not None,
            timeout=60, what="the ready line",
        )
        assert proc.poll() is None, log_path.read_text()
    finally:
        proc.terminate()
        assert proc.wait(60) == 0
    lines = [line for line in log_path.read_text().splitlines() if line]
    assert [line for line in lines if "Odradek broker ready" in line]
    below_warning = [
        line for line in lines
        if re.search(r"\] (INFO|DEBUG) ", line) and " odradek.server.broker_server: " not in line
    ]
    assert below_warning == [], lines

    bad = subprocess.run(
        [sys.executable, "-m", "odradek.cli.main", "server", "--log-level", "LOUD"],
        capture_output=True, text=True, timeout=60,
    )
    assert bad.returncode == 2 and "unknown log level 'LOUD'" in bad.stderr


def test_embedded_broker_records_are_escaped_in_the_applications_handlers(
    broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """Embedded, the records go to whatever handlers the application (here pytest) has: the
    refused config name is still one line there."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    topic = unique_name("embedded-forge")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    bad = ConfigResource(
        "topic", topic,
        incremental_configs=[ConfigEntry("x" + FORGED, "1", incremental_operation=AlterConfigOpType.SET)],
    )
    with caplog.at_level(logging.INFO, logger="odradek"):
        with pytest.raises(KafkaException):
            admin.incremental_alter_configs([bad])[bad].result(30)
        wait_until(lambda: "forged line" in caplog.text)
    refused = [r for r in caplog.records if "forged line" in r.getMessage()]
    assert refused and all("\n" not in r.getMessage() for r in refused)
    assert "x\\n[2026-01-01 00:00:00,000] INFO odradek.fake: forged line" in refused[0].getMessage()
    assert not [line for line in caplog.text.splitlines() if line.startswith("[2026-01-01")]
