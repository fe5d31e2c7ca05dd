"""The admin tools' pure parts (get-offsets filters, delete-records' file, log-dirs' JSON,
features' lines, topics' argument checks), the shell completion script, and the exit-code
contract of every admin tool (0 / 1 with one stderr line / 2 usage) as real processes."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from odradek.cli import completion, get_offsets, topics
from odradek.cli.admin import AdminError
from odradek.cli.delete_records import parse_offset_json
from odradek.cli.features import describe_lines as feature_lines
from odradek.cli.log_dirs import log_dirs_json
from odradek.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]


def _odradek(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "odradek.cli.main", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- get-offsets ------------------------------------------------------------------------------

def test_get_offsets_time_specs_and_malformed_time() -> None:
    assert [get_offsets.parse_time(t) for t in ("latest", "earliest", "max-timestamp", "earliest-local",
                                                 "latest-tiered", "-1", "1700000000000")] == [
        -1, -2, -3, -4, -5, -1, 1700000000000]
    with pytest.raises(AdminError, match=r"^Malformed time argument soon\. Please use -1 or latest"):
        get_offsets.parse_time("soon")


def test_get_offsets_topic_partition_patterns_as_kafkas() -> None:
    md = {"topics": [
        {"name": n, "error_code": 0, "is_internal": n.startswith("__"),
         "partitions": [{"partition_index": i, "leader_id": 1} for i in range(4)]}
        for n in ("a1", "a2", "b", "__consumer_offsets")
    ]}

    def chosen(rules: list[get_offsets.Rule], exclude: bool = False) -> list[str]:
        return [f"{t}:{p}" for t, p, _ in get_offsets.select_partitions(md, rules, exclude)]

    # a range's end is exclusive, an open start is 0; a single partition; a topic alone is all.
    assert chosen(get_offsets.parse_rules("a.*:1-3,b:0,:-1", None, None)) == [
        "a1:0", "a1:1", "a1:2", "a2:0", "a2:1", "a2:2", "b:0", "__consumer_offsets:0"]
    assert chosen(get_offsets.parse_rules(None, "a1,b", "0,3")) == ["a1:0", "a1:3", "b:0", "b:3"]
    assert chosen(get_offsets.parse_rules(None, None, None), exclude=True) == [
        f"{t}:{p}" for t in ("a1", "a2", "b") for p in range(4)]
    with pytest.raises(AdminError, match="--partitions expects a comma separated list"):
        get_offsets.parse_rules(None, "a1", "x")


# -- delete-records ---------------------------------------------------------------------------

def test_delete_records_offset_file_and_kafkas_refusals() -> None:
    assert parse_offset_json('{"partitions": [{"topic": "t", "partition": 1, "offset": 5}], "version": 1}') == {
        ("t", 1): 5}
    with pytest.raises(AdminError, match="^The input string is not a valid JSON$"):
        parse_offset_json("{nope")
    with pytest.raises(AdminError, match="^Not supported version field value 2$"):
        parse_offset_json('{"partitions": [], "version": 2}')
    with pytest.raises(AdminError, match="^Missing partitions field$"):
        parse_offset_json('{"version": 1}')
    with pytest.raises(AdminError, match="^Offset json file contains duplicate topic partitions: t-1$"):
        parse_offset_json('{"partitions": [{"topic": "t", "partition": 1, "offset": 5},'
                          '{"topic": "t", "partition": 1, "offset": 6}]}')


# -- log-dirs ---------------------------------------------------------------------------------

def test_log_dirs_json_is_kafkas_line() -> None:
    """The line kafka-log-dirs.sh (4.3.1) printed for the same DescribeLogDirs answer."""
    resp = {"error_code": 0, "results": [{"error_code": 0, "log_dir": "/tmp/d", "topics": [
        {"name": "a1", "partitions": [
            {"partition_index": i, "partition_size": 10 * i, "offset_lag": 0, "is_future_key": False} for i in range(5)]},
        {"name": "other", "partitions": [
            {"partition_index": 0, "partition_size": 1, "offset_lag": 0, "is_future_key": False}]},
    ]}]}
    assert log_dirs_json({1: resp}, {"a1"}) == (
        '{"brokers":[{"broker":1,"logDirs":[{"partitions":['
        '{"partition":"a1-1","size":10,"offsetLag":0,"isFuture":false},'
        '{"partition":"a1-0","size":0,"offsetLag":0,"isFuture":false},'
        '{"partition":"a1-4","size":40,"offsetLag":0,"isFuture":false},'
        '{"partition":"a1-3","size":30,"offsetLag":0,"isFuture":false},'
        '{"partition":"a1-2","size":20,"offsetLag":0,"isFuture":false}],'
        '"error":null,"logDir":"/tmp/d"}]}],"version":1}'
    )
    resp["results"][0]["error_code"] = 56  # KAFKA_STORAGE_ERROR
    assert '"error":"org.apache.kafka.common.errors.KafkaStorageException"' in log_dirs_json({1: resp}, set())


# -- features ---------------------------------------------------------------------------------

def test_features_describe_lines_are_kafka_4s_layout() -> None:
    api_versions = {
        "supported_features": [
            {"name": "metadata.version", "min_version": 7, "max_version": 21},
            {"name": "kraft.version", "min_version": 0, "max_version": 1},
        ],
        "finalized_features": [{"name": "metadata.version", "max_version_level": 21, "min_version_level": 21}],
        "finalized_features_epoch": 9,
    }
    assert feature_lines(api_versions) == [
        "Feature: kraft.version                             SupportedMinVersion: 0                "
        "SupportedMaxVersion: 1                FinalizedVersionLevel: 0                Epoch: 9",
        "Feature: metadata.version                          SupportedMinVersion: 3.3-IV3          "
        "SupportedMaxVersion: 3.9-IV0          FinalizedVersionLevel: 3.9-IV0          Epoch: 9",
    ]


# -- topics' argument checks --------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "message"), [
    (["--list", "--describe"], "Command must include exactly one action"),
    (["--alter", "--topic", "t"], 'Missing required argument "[partitions]"'),
    (["--alter", "--topic", "t", "--partitions", "3", "--config", "a=b"],
     "can't be used with option \"[alter]\" (To alter topic configurations, the kafka-configs tool can be used.)"),
    (["--list", "--if-exists"], 'Option "[if-exists]" can\'t be used with option "[list]"'),
    (["--delete", "--if-not-exists", "--topic", "t"], 'Option "[if-not-exists]" can\'t be used with option "[delete]"'),
    (["--create"], 'Missing required argument "[topic]"'),
    (["--describe", "--if-exists"], "--topic or --topic-id is required to describe a topic"),
])
def test_topics_usage_errors_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    opts = parser.parse_args(["topics", "--bootstrap-server", "127.0.0.1:1", *argv])
    sub = argparse.ArgumentParser(prog="odradek topics")
    with pytest.raises(SystemExit) as e:
        topics.check_args(sub, opts)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_topics_replica_assignment_checks() -> None:
    assert topics.parse_replica_assignment("1:2,2:3,3:1") == [[1, 2], [2, 3], [3, 1]]
    with pytest.raises(AdminError, match="may not contain duplicate entries: 1:1"):
        topics.parse_replica_assignment("1:1")
    with pytest.raises(AdminError, match="Partition 1 has different replication factor"):
        topics.parse_replica_assignment("1:2,3")


# -- completion -------------------------------------------------------------------------------

def _complete(script: Path, words: list[str]) -> list[str]:
    cword = len(words) - 1
    quoted = " ".join(f"'{w}'" for w in words)
    out = subprocess.run(
        ["bash", "-c", f"source {script}; COMP_WORDS=({quoted}); COMP_CWORD={cword}; _odradek_complete; "
         'printf "%s\\n" "${COMPREPLY[@]}"'],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout
    return out.split()


def test_bash_completion_sources_and_completes_subcommands(tmp_path: Path) -> None:
    result = _odradek("completion", "bash")
    assert result.returncode == 0, result.stderr
    script = tmp_path / "odradek.bash"
    script.write_text(result.stdout)
    registered = subprocess.run(["bash", "-c", f"source {script}; complete -p odradek"],
                                capture_output=True, text=True, timeout=30)
    assert registered.returncode == 0, registered.stderr
    assert "-F _odradek_complete odradek" in registered.stdout
    assert _complete(script, ["odradek", "get-"]) == ["get-offsets"]
    assert _complete(script, ["odradek", "cluster", "i"]) == ["info", "id"]
    assert _complete(script, ["odradek", "topics", "--bootstrap-server", "h:1", "--if"]) == [
        "--if-exists", "--if-not-exists"]
    assert _complete(script, ["odradek", "features", "--bootstrap-server", "h:1", ""]) == ["describe"]
    # every subcommand of the parser is offered at the top level
    top = set(_complete(script, ["odradek", ""]))
    assert {"topics", "get-offsets", "delete-records", "log-dirs", "features", "cluster", "completion"} <= top


def test_zsh_completion_is_the_bash_function_through_bashcompinit() -> None:
    script = completion.zsh_script(build_parser())
    assert "bashcompinit" in script and "complete -o default -F _odradek_complete odradek" in script


# -- the exit-code contract, as processes ------------------------------------------------------

TOOLS: list[list[str]] = [
    ["topics", "--list"],
    ["get-offsets"],
    ["delete-records", "--offset-json-file", "PLAN"],
    ["log-dirs", "--describe"],
    ["cluster", "info"],
    ["cluster", "id"],
    ["features", "describe"],
]


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: " ".join(t))
def test_unreachable_bootstrap_fails_within_the_timeout_with_one_line(tool: list[str], tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text('{"version": 1, "partitions": [{"topic": "t", "partition": 0, "offset": 1}]}')
    tool = [str(plan) if a == "PLAN" else a for a in tool]
    start = time.monotonic()
    result = _odradek(*tool, "--bootstrap-server", f"127.0.0.1:{_closed_port()}", "--timeout", "1500")
    elapsed = time.monotonic() - start
    assert result.returncode == 1, result
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    assert "TimeoutException: Timed out waiting for a node assignment" in line
    assert elapsed < 30  # bounded by --timeout (plus interpreter start-up), never the 60 s default


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: " ".join(t))
def test_missing_bootstrap_and_unknown_flags_are_usage_errors(tool: list[str]) -> None:
    result = _odradek(*tool)
    assert result.returncode == 2, result
    assert "usage:" in result.stderr and "Traceback" not in result.stderr
    result = _odradek(*tool, "--bootstrap-server", "127.0.0.1:1", "--no-such-flag")
    assert result.returncode == 2 and "unrecognized arguments: --no-such-flag" in result.stderr


@pytest.mark.parametrize("tool", [*TOOLS, ["completion"]], ids=lambda t: " ".join(t))
def test_every_tool_has_its_own_help(tool: list[str]) -> None:
    words = tool[:next((i for i, t in enumerate(tool) if t.startswith("-")), len(tool))]
    result = _odradek(*words, "--help")
    assert result.returncode == 0
    assert result.stdout.startswith(f"usage: odradek {' '.join(words)}")


def test_command_config_sets_the_timeout_and_refuses_other_protocols(tmp_path: Path) -> None:
    config = tmp_path / "admin.properties"
    config.write_text("# Admin client\ndefault.api.timeout.ms = 1500\nclient.id=ops\n")
    start = time.monotonic()
    result = _odradek("get-offsets", "--bootstrap-server", f"127.0.0.1:{_closed_port()}", "--command-config", str(config))
    assert result.returncode == 1 and "TimeoutException" in result.stderr
    assert time.monotonic() - start < 30  # the file's 1.5 s, not the 60 s default
    config.write_text("security.protocol=SASL_SSL\n")
    result = _odradek("topics", "--bootstrap-server", "127.0.0.1:1", "--list", "--command-config", str(config))
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == ("Error while executing topic command : Invalid client configuration: "
                             "sasl.mechanism=GSSAPI (Kerberos) is not supported by odradek's tools; use one of "
                             "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER\n")
