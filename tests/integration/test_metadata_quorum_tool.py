"""``odradek metadata-quorum`` against Apache Kafka 4.x, beside Kafka's own kafka-metadata-quorum.sh.

One real single-node KRaft Kafka; both tools describe it through the broker listener
(``--bootstrap-server``) and through the controller listener (``--bootstrap-controller``), and
print the same bytes. The Kafka runs with ``metadata.max.idle.interval.ms=0`` so that no NoOp
records move the high watermark and the log end offset between the two runs; the values left to
normalise are the ones that are read from a clock: ``LastFetchTimestamp`` and
``LastCaughtUpTimestamp`` (epoch milliseconds, or ``N ms ago`` with ``--human-readable``).
Skipped without Java or the fetched Kafka, except under CI.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .kafka_reference import KafkaServer, KafkaTools, _free_port, find_kafka_tools

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaTools, KafkaServer]]:
    tools = find_kafka_tools("4")
    server = KafkaServer(
        tools, tmp_path_factory.mktemp("kafka-quorum") / "data",
        {"metadata.max.idle.interval.ms": "0"},
    )
    with server:
        yield tools, server


def _odradek(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek.cli.main", "metadata-quorum", *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL,
    )


_CLOCK_CELL = re.compile(r"(?<=\t)(?:\d{13}|\d+ ms ago) *(?=\t)")


def _normalise_replication(table: str) -> str:
    """Timestamps (and their padding) become ``<T>``; everything else is kept byte for byte."""
    lines = table.splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.split("\t")
        # NodeId DirectoryId LogEndOffset Lag LastFetchTimestamp LastCaughtUpTimestamp Status ''
        assert len(cells) == 8, line
        for i in (4, 5):
            assert re.fullmatch(r"(?:\d{13}|\d+ ms ago|-1) *", cells[i]), line
            cells[i] = "<T>"
        out.append("\t".join(cells))
    return "\n".join(out)


@pytest.mark.parametrize("listener", ["--bootstrap-server", "--bootstrap-controller"])
def test_describe_status_matches_kafka(kafka: tuple[KafkaTools, KafkaServer], listener: str) -> None:
    tools, server = kafka
    addr = server.bootstrap_servers if listener == "--bootstrap-server" else f"127.0.0.1:{server.controller_port}"
    theirs = tools.run("kafka-metadata-quorum", listener, addr, "describe", "--status")
    ours = _odradek(listener, addr, "describe", "--status")
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout == theirs.stdout
    # Not an empty agreement: the summary names this cluster and its one voter with its endpoint.
    assert "ClusterId:              Odradek-Reference-Q1\n" in ours.stdout
    assert f'CurrentVoters:          [{{"id": 1, "endpoints": ["CONTROLLER://127.0.0.1:{server.controller_port}"]}}]' in ours.stdout


@pytest.mark.parametrize("listener", ["--bootstrap-server", "--bootstrap-controller"])
@pytest.mark.parametrize("human", [False, True])
def test_describe_replication_matches_kafka(
    kafka: tuple[KafkaTools, KafkaServer], listener: str, human: bool
) -> None:
    tools, server = kafka
    addr = server.bootstrap_servers if listener == "--bootstrap-server" else f"127.0.0.1:{server.controller_port}"
    args = ["describe", "--replication", *(["--human-readable"] if human else [])]
    theirs = tools.run("kafka-metadata-quorum", listener, addr, *args)
    ours = _odradek(listener, addr, *args)
    assert ours.returncode == 0, ours.stderr
    assert _normalise_replication(ours.stdout) == _normalise_replication(theirs.stdout)
    assert ours.stdout.splitlines()[1].endswith("\tLeader\t")
    assert len(ours.stdout.splitlines()) == 2  # the header and the one voter, the leader


def test_bad_describe_flags_match_kafka(kafka: tuple[KafkaTools, KafkaServer], tmp_path: Path) -> None:
    tools, server = kafka
    short_timeout = tmp_path / "admin.properties"  # refused: below request.timeout.ms (30 s)
    short_timeout.write_text("default.api.timeout.ms=2000\n")
    for args in (
        ["describe"],
        ["describe", "--status", "--replication"],
        ["describe", "--status", "--human-readable"],
        ["--command-config", "/nonexistent/odradek.properties", "describe", "--status"],
    ):
        theirs = tools.run("kafka-metadata-quorum", "--bootstrap-server", server.bootstrap_servers, *args, check=False)
        ours = _odradek("--bootstrap-server", server.bootstrap_servers, *args)
        assert (ours.returncode, ours.stdout, ours.stderr) == (theirs.returncode, theirs.stdout, theirs.stderr), args
        assert ours.returncode == 1
    args = ["--command-config", str(short_timeout), "describe", "--status"]
    theirs = tools.run("kafka-metadata-quorum", "--bootstrap-server", server.bootstrap_servers, *args, check=False)
    ours = _odradek("--bootstrap-server", server.bootstrap_servers, *args)
    assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout) == (1, "")
    assert ours.stderr.splitlines()[0] == theirs.stderr.splitlines()[0] == "Failed to create new KafkaAdminClient"
    assert ours.stderr.splitlines()[1] in theirs.stderr.splitlines()  # the "Caused by:" line
    for bootstrap in ("nohostport", "127.0.0.1:abc"):
        args = ["--bootstrap-server", bootstrap, "describe", "--status"]
        theirs = tools.run("kafka-metadata-quorum", *args, check=False)
        ours = _odradek(*args)
        assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout) == (1, "")
        first, cause = ours.stderr.splitlines()
        assert first == theirs.stderr.splitlines()[0]
        assert cause in theirs.stderr.splitlines() and "Invalid url in bootstrap.servers" in cause


@pytest.mark.parametrize("command", ["--status", "--replication"])
@pytest.mark.parametrize("listener", ["--bootstrap-server", "--bootstrap-controller"])
def test_unreachable_server_matches_kafka(
    kafka: tuple[KafkaTools, KafkaServer], tmp_path: Path, command: str, listener: str
) -> None:
    """Nothing listens on the port: both tools give up after default.api.timeout.ms with the same
    TimeoutException line (Kafka adds a Java stack trace after it) and exit code 1."""
    tools, _ = kafka
    config = tmp_path / "admin.properties"
    config.write_text("default.api.timeout.ms=2000\nrequest.timeout.ms=1000\n")
    args = [listener, "127.0.0.1:1", "--command-config", str(config), "describe", command]
    theirs = tools.run("kafka-metadata-quorum", *args, check=False)
    ours = _odradek(*args)
    assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout) == (1, "")
    assert ours.stderr.splitlines()[0] == theirs.stderr.splitlines()[0]
    assert "TimeoutException: Timed out waiting for a node assignment" in ours.stderr


def test_missing_or_both_bootstrap_flags_match_kafka(kafka: tuple[KafkaTools, KafkaServer]) -> None:
    """argparse4j wraps its message and names Kafka's script in the usage; the error itself (all
    whitespace aside) and the exit code are the same."""
    tools, server = kafka
    for args in (
        ["describe", "--status"],
        ["--bootstrap-server", server.bootstrap_servers, "--bootstrap-controller", "127.0.0.1:1", "describe", "--status"],
        ["--bootstrap-server", server.bootstrap_servers],
    ):
        theirs = tools.run("kafka-metadata-quorum", *args, check=False)
        ours = _odradek(*args)
        assert ours.returncode == theirs.returncode == 1
        assert ours.stdout == theirs.stdout == ""
        mine = "".join(ours.stderr.split("error:", 1)[1].split())
        assert mine == "".join(theirs.stderr.split("error:", 1)[1].split()), args


@pytest.mark.parametrize("command", ["--status", "--replication"])
@pytest.mark.parametrize("listener", ["--bootstrap-server", "--bootstrap-controller"])
def test_against_odradek_same_as_kafka_tool(tmp_path: Path, command: str, listener: str) -> None:
    """Both tools describe an Odradek node's quorum, through its broker listener (which forwards
    DescribeQuorum to the controller, as a Kafka broker does) and its controller listener, and
    print the same description."""
    from odradek.embedded import EmbeddedBroker

    tools = find_kafka_tools("4")
    config = tmp_path / "admin.properties"
    config.write_text("default.api.timeout.ms=10000\nrequest.timeout.ms=5000\n")
    with EmbeddedBroker({"metadata.max.idle.interval.ms": "0"}) as broker:
        addr = broker.bootstrap_servers if listener == "--bootstrap-server" else f"127.0.0.1:{broker.controller_port}"
        args = [listener, addr, "--command-config", str(config), "describe", command]
        theirs = tools.run("kafka-metadata-quorum", *args, check=False)
        ours = _odradek(*args)
    assert (ours.returncode, theirs.returncode) == (0, 0), (ours.stderr, theirs.stderr)
    norm = _normalise_replication if command == "--replication" else (lambda s: s)
    assert norm(ours.stdout) == norm(theirs.stdout)
    assert ("ClusterId:" in ours.stdout) if command == "--status" else ("NodeId" in ours.stdout)


def test_static_voters_endpoints_as_kafkas_controller(kafka: tuple[KafkaTools, KafkaServer]) -> None:
    """DescribeQuorum v2 names each voter's listeners (``nodes``) with a static quorum too
    (``controller.quorum.voters``): Kafka's tool prints them in CurrentVoters from Odradek's
    answer as from Kafka's own controller's."""
    from odradek.embedded import EmbeddedBroker

    tools, server = kafka

    def voters_line(bootstrap: str) -> str:
        out = tools.run("kafka-metadata-quorum", "--bootstrap-server", bootstrap, "describe", "--status").stdout
        return next(line for line in out.splitlines() if line.startswith("CurrentVoters:"))

    theirs = voters_line(server.bootstrap_servers)
    assert f'"endpoints": ["CONTROLLER://127.0.0.1:{server.controller_port}"]' in theirs
    port = _free_port()
    with EmbeddedBroker({
        "listeners": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{port}",
        "controller.quorum.voters": f"1@127.0.0.1:{port}",
    }) as broker:
        ours = voters_line(broker.bootstrap_servers)
    assert ours == theirs.replace(str(server.controller_port), str(port))


def test_remove_controller_through_a_broker_of_a_static_quorum_as_kafka(kafka: tuple[KafkaTools, KafkaServer]) -> None:
    """A combined node forwards RemoveRaftVoter from its broker listener to its controller (in
    this process), whose static quorum (kraft.version 0) refuses it as Kafka's does."""
    from odradek.embedded import EmbeddedBroker

    tools, server = kafka
    args = ["remove-controller", "--controller-id", "1", "--controller-directory-id", "AAAAAAAAAAAAAAAAAAAAAQ"]

    def first_line(bootstrap: str) -> tuple[int, str]:
        r = tools.run("kafka-metadata-quorum", "--bootstrap-server", bootstrap, *args, check=False)
        return r.returncode, r.stderr.strip().splitlines()[0]

    theirs = first_line(server.bootstrap_servers)
    assert theirs[0] == 1 and "UnsupportedVersionException: Cluster doesn't support" in theirs[1]
    with EmbeddedBroker() as broker:
        assert first_line(broker.bootstrap_servers) == theirs
