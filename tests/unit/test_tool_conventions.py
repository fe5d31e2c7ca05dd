"""Every ``odradek`` subcommand against the tools' contract (odradek/cli/tool_common.py), as real
processes: ``--help`` exits 0 with its usage, an unknown flag is a usage error, and a tool that
talks to a cluster, given an unreachable ``--bootstrap-server`` and a short timeout (``--timeout``
or ``default.api.timeout.ms`` in ``--command-config``), exits 1 within a bounded time with one
line and no traceback. The exceptions are the tools whose Kafka behaviour an existing comparison
test pins; they are listed in tool_common's docstring and here."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from odradek.cli import tool_common
from odradek.cli.main import build_parser
from odradek.security.client_security import PLAINTEXT

ROOT = Path(__file__).resolve().parents[2]
NOT_APPLICABLE = {"server", "pipeline", "console"}  # a broker, a demo, a web server: no one-shot contract
# Kafka's argparse4j exits 1 on a usage error; these tools keep it (tool_common's table).
USAGE_EXIT_1 = {"transactions", "metadata-quorum"}


def _odradek(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "odradek.cli.main", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _commands() -> list[list[str]]:
    """Every subcommand path of ``odradek`` (``storage``, ``storage format``, ...)."""
    out: list[list[str]] = []
    seen: set[int] = set()  # an alias (``cluster cluster-id`` for ``cluster id``) is the same parser

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    if (path or name not in NOT_APPLICABLE) and id(child) not in seen:
                        seen.add(id(child))
                        out.append([*path, name])
                        walk(child, [*path, name])

    walk(build_parser(), [])
    return out


COMMANDS = _commands()


def test_the_table_covers_the_older_tools() -> None:
    names = {c[0] for c in COMMANDS}
    assert {"leader-election", "reassign", "metadata-quorum", "transactions", "storage", "dump-log",
            "cluster", "topics", "configs"} <= names
    assert ["cluster", "up"] in COMMANDS and ["storage", "format"] in COMMANDS
    assert len(COMMANDS) >= 30


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_exits_0_and_an_unknown_flag_is_a_usage_error(command: list[str]) -> None:
    helped = _odradek(*command, "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith(f"usage: odradek {' '.join(command)}"), helped.stdout[:200]
    assert helped.stderr == ""
    # transactions takes its own arguments after the subcommand's name (Kafka's argparse4j parser).
    wrong = _odradek(*command, "--no-such-flag")
    expected = 1 if command[0] == "transactions" else 2
    assert wrong.returncode == expected, (wrong.returncode, wrong.stderr)
    assert "usage:" in wrong.stderr and "Traceback" not in wrong.stderr
    assert wrong.stdout == ""


# argv (BS: ``--bootstrap-server 127.0.0.1:<closed port>``); the stream the failure goes to; how
# many lines it may have there.
UNREACHABLE: list[tuple[list[str], str, int]] = [
    (["leader-election", "BS", "--election-type", "PREFERRED", "--all-topic-partitions", "--timeout", "1500"],
     "stderr", 1),
    (["leader-election", "BS", "--election-type", "UNCLEAN", "--topic", "t", "--partition", "0", "--timeout", "1500"],
     "stderr", 1),
    (["reassign", "BS", "--list", "--timeout", "1500"], "stderr", 1),
    (["reassign", "BS", "--verify", "--reassignment-json-file", "PLAN", "--timeout", "1500"], "stderr", 1),
    (["topics", "BS", "--list", "--timeout", "1500"], "stderr", 1),
    (["cluster", "info", "BS", "--timeout", "1500"], "stderr", 1),
    (["broker-api-versions", "BS", "--timeout", "1500"], "stderr", 1),
    # Kafka's text kept (tool_common's table): a blank line, ``Error: ...`` and the exception.
    (["groups", "BS", "--list", "--timeout", "1500"], "stderr", 3),
    # No --timeout in Kafka's tool: default.api.timeout.ms from --command-config is the equivalent.
    (["configs", "BS", "--describe", "--entity-type", "topics", "--command-config", "FAST"], "stderr", 2),
    (["transactions", "BS", "--command-config", "FAST", "list"], "stderr", 1),
    (["metadata-quorum", "BS", "--command-config", "FAST", "describe", "--status"], "stderr", 1),
    # The data tools (client_tools' contract): the client's connection error; consume also prints
    # Kafka's ``Processed a total of 0 messages``.
    (["produce", "BS", "--topic", "t", "--timeout", "1500"], "stderr", 1),
    (["consume", "BS", "--topic", "t"], "stderr", 2),
    (["perf", "produce", "BS", "--topic", "t", "--num-records", "1", "--record-size", "1", "--throughput", "-1"],
     "stderr", 1),
]
CONNECTION_FAILED = ("Timed out waiting for a node assignment", "could not be established")


@pytest.mark.parametrize("case", UNREACHABLE, ids=lambda c: " ".join(a for a in c[0][:3] if a != "BS"))
def test_unreachable_bootstrap_fails_in_bounded_time_with_one_line(case: tuple[list[str], str, int],
                                                                    tmp_path: Path) -> None:
    argv, stream, lines = case
    plan = tmp_path / "plan.json"
    plan.write_text('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["any"]}]}')
    fast = tmp_path / "fast.properties"
    fast.write_text("default.api.timeout.ms=1500\nrequest.timeout.ms=1000\n")
    argv = [str(plan) if a == "PLAN" else str(fast) if a == "FAST" else a for a in argv]
    start = time.monotonic()
    i = argv.index("BS")
    result = _odradek(*argv[:i], "--bootstrap-server", f"127.0.0.1:{_closed_port()}", *argv[i + 1:])
    elapsed = time.monotonic() - start
    assert result.returncode == 1, result
    assert "Traceback" not in result.stdout + result.stderr
    out = result.stderr if stream == "stderr" else result.stdout
    assert 1 <= len(out.splitlines()) <= lines, out
    assert any(text in out for text in CONNECTION_FAILED), out
    assert (result.stdout if stream == "stderr" else result.stderr) == ""
    assert elapsed < 30, elapsed  # bounded by the 1.5 s timeout plus start-up, never the 60 s default


@pytest.mark.parametrize("tool", [
    ["leader-election", "--election-type", "PREFERRED", "--all-topic-partitions"],
    ["leader-election", "--election-type", "PREFERRED", "--all-topic-partitions", "--admin.config"],
    ["reassign", "--list"],
    ["configs", "--describe", "--entity-type", "topics"],
    ["transactions", "list"],
], ids=" ".join)
def test_command_config_is_read_and_unworkable_security_refused(tool: list[str], tmp_path: Path) -> None:
    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=SASL_SSL\n")  # Kafka's default sasl.mechanism GSSAPI: not supported
    flag = "--admin.config" if tool[-1] == "--admin.config" else "--command-config"
    tool = [t for t in tool if t != "--admin.config"]
    bs = ["--bootstrap-server", f"127.0.0.1:{_closed_port()}"]
    argv = ([tool[0], *bs, flag, str(config), *tool[1:]] if tool[0] == "transactions"
            else [*tool, *bs, flag, str(config)])
    result = _odradek(*argv)
    assert (result.returncode, result.stdout) == (1, ""), result
    lines = result.stderr.splitlines()
    # transactions keeps Kafka's "Failed to create new KafkaAdminClient" line before the cause
    assert len(lines) == (2 if tool[0] == "transactions" else 1), lines
    assert "sasl.mechanism=GSSAPI (Kerberos) is not supported" in lines[-1]


def test_command_config_timeouts_and_client_id(tmp_path: Path) -> None:
    config = tmp_path / "admin.properties"
    config.write_text("default.api.timeout.ms=1000\nrequest.timeout.ms=2000\n")
    opts = argparse.Namespace(command_config=str(config), timeout=None, bootstrap_server="127.0.0.1:1")
    with pytest.raises(tool_common.AdminError, match="default.api.timeout.ms must be no smaller"):
        tool_common.client_settings(opts)
    config.write_text("request.timeout.ms=90000\nclient.id=ops\n")
    assert tool_common.client_settings(opts) == (90000, 90000, "ops", PLAINTEXT)  # the API timeout is raised to it
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config="
                      "org.apache.kafka.common.security.scram.ScramLoginModule required username=u password=p;\n")
    security = tool_common.admin_client(opts).security  # the security of the same file reaches the client
    assert (security.protocol, security.sasl and security.sasl.mechanism) == ("SASL_PLAINTEXT", "SCRAM-SHA-512")
    config.write_text("default.api.timeout.ms=5000\nrequest.timeout.ms=700\n")
    admin = tool_common.admin_client(opts, "x")
    assert (admin.timeout_ms, admin.request_timeout_ms, admin.client_id) == (5000, 700, "x")
    opts.timeout = 1234  # --timeout wins over the file
    assert tool_common.client_settings(opts)[0] == 1234


def test_the_exceptions_are_documented() -> None:
    doc = tool_common.__doc__ or ""
    for tool in (*USAGE_EXIT_1, "reassign", "leader-election", "configs", "groups", "dump-log"):
        assert f"\n{tool} " in doc, tool


@pytest.mark.parametrize("tool", [
    ["leader-election", "--election-type", "PREFERRED", "--all-topic-partitions", "--timeout", "1500"],
    ["reassign", "--list", "--timeout", "1500"],
    ["topics", "--list", "--timeout", "1500"],
], ids=lambda t: t[0])
def test_a_listener_that_never_answers_ends_within_the_timeout(tool: list[str]) -> None:
    """Connections are accepted (the kernel's backlog) but nothing is ever answered: each
    request gives up after request.timeout.ms, the tool after its timeout."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        bs = f"127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        result = _odradek(tool[0], "--bootstrap-server", bs, *tool[1:], timeout=45)
        elapsed = time.monotonic() - start
    assert result.returncode == 1, result
    [line] = result.stderr.splitlines()
    assert "Timed out waiting for a node assignment" in line and "Traceback" not in result.stderr
    assert elapsed < 30, elapsed
