"""``odradek produce`` and ``odradek consume`` against Odradek and against Apache Kafka 4.x: round
trips with keys, headers and JSON lines, records from and to real clients (confluent-kafka,
kcat), group offsets, starting points, and the exit codes and messages of bad input."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from .cli_tools_support import REPO, clusters, create_topic, odradek_cli
from .support import unique_name, wait_until


@pytest.fixture(scope="module", params=["odradek", "kafka"])
def bootstrap(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from clusters(request, tmp_path_factory)


def _read_all(bootstrap: str, topic: str, n: int) -> list[object]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("g"), "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[object] = []
    for _ in range(300):
        if len(out) >= n:
            break
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            out.append(m)
    c.close()
    assert len(out) == n, f"read {len(out)} of {n}"
    return out


def test_keys_headers_and_null_marker_round_trip(bootstrap: str) -> None:
    topic = unique_name("kv")
    create_topic(bootstrap, topic, 3)
    lines = "h1:a,h2:NUL\tk1\tv1\nNUL\tk2\tNUL\nx:1\tk3\tvalue\twith\ttabs\n"
    r = odradek_cli("produce", "--bootstrap-server", bootstrap, "--topic", topic, "--property", "parse.key=true",
                    "--property", "parse.headers=true", "--property", "null.marker=NUL", stdin=lines.encode())
    assert r.returncode == 0, r.stderr.decode()
    # what a Java client sees: keys partitioned by murmur2 like Kafka's, headers and nulls intact
    got = {m.key(): m for m in _read_all(bootstrap, topic, 3)}  # type: ignore[attr-defined]
    assert got[b"k1"].value() == b"v1" and got[b"k1"].headers() == [("h1", b"a"), ("h2", None)]
    assert got[b"k2"].value() is None and not got[b"k2"].headers()
    assert got[b"k3"].value() == b"value\twith\ttabs"
    ref = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    ref_topic = unique_name("ref")
    create_topic(bootstrap, ref_topic, 3)
    for k in (b"k1", b"k2", b"k3"):
        ref.produce(ref_topic, b"x", key=k)
    ref.flush(30)
    ref_parts = {m.key(): m.partition() for m in _read_all(bootstrap, ref_topic, 3)}  # type: ignore[attr-defined]
    assert {k: m.partition() for k, m in got.items()} == ref_parts

    r = odradek_cli("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                    "--max-messages", "3", "--property", "print.key=true", "--property", "print.headers=true",
                    "--property", "print.partition=true", "--property", "key.separator=|")
    assert r.returncode == 0, r.stderr.decode()
    assert b"Processed a total of 3 messages" in r.stderr
    printed = sorted(r.stdout.decode().splitlines())
    assert printed == sorted([
        f"Partition:{ref_parts[b'k1']}|h1:a,h2:null|k1|v1",
        f"Partition:{ref_parts[b'k2']}|NO_HEADERS|k2|null",
        f"Partition:{ref_parts[b'k3']}|x:1|k3|value\twith\ttabs",
    ])


def test_json_lines_round_trip_with_binary(bootstrap: str) -> None:
    topic = unique_name("json")
    create_topic(bootstrap, topic, 2)
    records = [
        {"key": "AAE=", "value": "/w==", "headers": [["h", "AA=="], ["h", None]], "partition": 1, "timestamp": 1000},
        {"value": "aGk=", "partition": 0, "timestamp": 2000},
    ]
    r = odradek_cli("produce", "--bootstrap-server", bootstrap, "--topic", topic, "--format", "json",
                    "--encoding", "base64", stdin="".join(json.dumps(x) + "\n" for x in records).encode())
    assert r.returncode == 0, r.stderr.decode()
    r = odradek_cli("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                    "--format", "json", "--encoding", "base64", "--max-messages", "2")
    assert r.returncode == 0, r.stderr.decode()
    out = sorted((json.loads(line) for line in r.stdout.decode().splitlines()), key=lambda o: o["partition"])
    assert [(o["partition"], o["offset"], o["timestamp"], o["key"], o["value"], o["headers"]) for o in out] == [
        (0, 0, 2000, None, "aGk=", []),
        (1, 0, 1000, "AAE=", "/w==", [["h", "AA=="], ["h", None]]),
    ]
    # text encoding: the non-UTF-8 value comes out as marked base64
    r = odradek_cli("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--partition", "1",
                    "--offset", "earliest", "--format", "json", "--max-messages", "1")
    o = json.loads(r.stdout)
    assert o["value"] == "/w==" and o["valueEncoding"] == "base64" and o["timestampType"] == "CreateTime"


def test_prints_what_confluent_kafka_produced_from_an_offset(bootstrap: str) -> None:
    topic = unique_name("ck")
    create_topic(bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        p.produce(topic, f"value-{i}".encode(), key=f"key-{i}".encode(), headers=[("n", str(i).encode())],
                  timestamp=1_700_000_000_000 + i * 1000)
    p.flush(30)
    r = odradek_cli("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--partition", "0",
                    "--offset", "3", "--timeout-ms", "3000", "--property", "print.key=true",
                    "--property", "print.offset=true", "--property", "print.timestamp=true",
                    "--property", "print.headers=true")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().splitlines() == [
        "CreateTime:1700000003000\tOffset:3\tn:3\tkey-3\tvalue-3",
        "CreateTime:1700000004000\tOffset:4\tn:4\tkey-4\tvalue-4",
    ]
    assert b"Processed a total of 2 messages" in r.stderr
    # by timestamp: the first record at or after it, in milliseconds or ISO-8601
    for start in ("1700000002500", "2023-11-14T22:13:22.500Z"):
        r = odradek_cli("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-timestamp", start,
                        "--timeout-ms", "3000")
        assert r.returncode == 0, r.stderr.decode()
        assert r.stdout.decode().splitlines() == ["value-3", "value-4"], start


@pytest.mark.skipif(shutil.which("kcat") is None and not os.environ.get("CI"),
                    reason="kcat is not installed (CI installs it and fails without it)")
def test_kcat_reads_what_produce_sent(bootstrap: str) -> None:
    topic = unique_name("kcat")
    create_topic(bootstrap, topic, 1)
    r = odradek_cli("produce", "--bootstrap-server", bootstrap, "--topic", topic, "--property", "parse.key=true",
                    "--property", "key.separator=:", "--property", "parse.headers=true",
                    "--property", "headers.delimiter=|", "--property", "headers.key.separator==", "--compression-codec", "lz4", "--sync",
                    stdin=b"a=1,b=2|k1:hello\nc=3|k2:world\n")
    assert r.returncode == 0, r.stderr.decode()
    out = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-e", "-q", "-f", "%k;%h;%s;%o\n"],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().splitlines() == ["k1;a=1,b=2;hello;0", "k2;c=3;world;1"]


def test_group_consumes_and_commits(bootstrap: str) -> None:
    topic = unique_name("grp")
    create_topic(bootstrap, topic, 2)
    values = [f"m{i}" for i in range(10)]
    r = odradek_cli("produce", "--bootstrap-server", bootstrap, "--topic", topic,
                    stdin="".join(v + "\n" for v in values).encode())
    assert r.returncode == 0, r.stderr.decode()
    group = unique_name("cg")
    r = odradek_cli("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--group", group,
                    "--from-beginning", "--max-messages", "10")
    assert r.returncode == 0, r.stderr.decode()
    assert sorted(r.stdout.decode().split()) == sorted(values)
    d = odradek_cli("groups", "--describe", "--group", group, "--bootstrap-server", bootstrap)
    assert d.returncode == 0, d.stderr.decode()
    rows = [line.split() for line in d.stdout.decode().splitlines() if line.startswith(group)]
    assert sum(int(row[3]) for row in rows) == 10 and all(row[5] == "0" for row in rows), d.stdout.decode()
    # the group goes on from its committed offsets
    r = odradek_cli("produce", "--bootstrap-server", bootstrap, "--topic", topic, stdin=b"later\n")
    r = odradek_cli("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--group", group,
                    "--from-beginning", "--timeout-ms", "3000")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().split() == ["later"]


def test_include_regex_without_group(bootstrap: str) -> None:
    prefix = unique_name("inc")
    for i in range(2):
        create_topic(bootstrap, f"{prefix}-{i}", 1)
        odradek_cli("produce", "--bootstrap-server", bootstrap, "--topic", f"{prefix}-{i}", stdin=f"v{i}\n".encode())
    r = odradek_cli("consume", "--bootstrap-server", bootstrap, "--include", f"{prefix}-.*", "--from-beginning",
                    "--max-messages", "2", "--format", "json")
    assert r.returncode == 0, r.stderr.decode()
    assert sorted((o["topic"], o["value"]) for o in map(json.loads, r.stdout.decode().splitlines())) == [
        (f"{prefix}-0", "v0"), (f"{prefix}-1", "v1")]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_bad_input_exit_codes_and_messages(bootstrap: str) -> None:
    missing = unique_name("missing")
    r = odradek_cli("consume", "--bootstrap-server", bootstrap, "--topic", missing, "--timeout-ms", "1000")
    assert r.returncode == 1
    assert f"UnknownTopicOrPartitionException: Topic {missing} does not exist" in r.stderr.decode()
    r = odradek_cli("produce", "--bootstrap-server", bootstrap, "--topic", missing, "--max-block-ms", "1500",
                    "--producer-property", "allow.auto.create.topics=false", stdin=b"x\n")
    assert r.returncode == 1
    assert f"TimeoutException: Topic {missing} not present in metadata after 1500 ms." in r.stderr.decode()
    dead = f"127.0.0.1:{_closed_port()}"
    for tool in (["consume", "--topic", "t"], ["produce", "--topic", "t"]):
        r = odradek_cli(*tool, "--bootstrap-server", dead, stdin=b"x\n")
        assert r.returncode == 1
        assert f"Connection to node -1 ({dead}) could not be established. Broker may not be available." in r.stderr.decode()
    topic = unique_name("bad")
    create_topic(bootstrap, topic, 1)
    r = odradek_cli("produce", "--bootstrap-server", bootstrap, "--topic", topic, "--producer-property", "acks", stdin=b"x\n")
    assert r.returncode == 1 and "Invalid command line properties: acks" in r.stderr.decode()
    # a malformed line stops the tool (exit 1) after the lines before it are delivered
    r = odradek_cli("produce", "--bootstrap-server", bootstrap, "--topic", topic, "--property", "parse.key=true",
                    stdin=b"k\tgood\nno separator\nk\tnever\n")
    assert r.returncode == 1
    assert "No key separator found on line number 2: 'no separator'" in r.stderr.decode()
    r = odradek_cli("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning", "--timeout-ms", "2000")
    assert r.returncode == 0 and r.stdout.decode().split() == ["good"]
    assert b"Processed a total of 1 messages" in r.stderr
    r = odradek_cli("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--partition", "5")
    assert r.returncode == 1 and f"Partition {topic}-5 does not exist" in r.stderr.decode()


def test_read_committed_skips_aborted_transactions(bootstrap: str) -> None:
    topic = unique_name("txn")
    create_topic(bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_name("tx")})
    p.init_transactions(30)
    for values, commit in ((["c1", "c2"], True), (["a1", "a2"], False), (["c3"], True)):
        p.begin_transaction()
        for v in values:
            p.produce(topic, v.encode())
        p.flush(30)  # in the log before the outcome (an abort purges records not yet sent)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    base = ("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning", "--timeout-ms", "3000")
    r = odradek_cli(*base, "--isolation-level", "read_committed")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().split() == ["c1", "c2", "c3"]
    r = odradek_cli(*base)  # read_uncommitted: the aborted records too, never the markers
    assert r.stdout.decode().split() == ["c1", "c2", "a1", "a2", "c3"]


def test_two_group_members_share_the_partitions(bootstrap: str) -> None:
    topic = unique_name("share")
    create_topic(bootstrap, topic, 2)
    group = unique_name("cg")
    cmd = [sys.executable, "-m", "odradek.cli.main", "consume", "--bootstrap-server", bootstrap, "--topic", topic,
           "--group", group, "--timeout-ms", "12000", "--property", "print.partition=true",
           "--consumer-property", "heartbeat.interval.ms=500"]
    members = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)]
    try:
        def group_members() -> int:
            d = odradek_cli("groups", "--describe", "--group", group, "--members", "--bootstrap-server", bootstrap)
            return sum(1 for line in d.stdout.decode().splitlines()[1:] if " console-consumer " in f" {line} ")

        wait_until(lambda: group_members() == 1, 30, 0.5, "the first member in the group")
        members.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO))
        wait_until(lambda: group_members() == 2, 30, 0.5, "both members in the group")
        time.sleep(1)  # both through SyncGroup and fetching (they start at the latest offset)
        values = [f"v{i}" for i in range(20)]
        r = odradek_cli("produce", "--bootstrap-server", bootstrap, "--topic", topic, "--property", "parse.key=true",
                        stdin="".join(f"{v}\t{v}\n" for v in values).encode())
        assert r.returncode == 0, r.stderr.decode()
        outs = [m.communicate(timeout=60) for m in members]
    finally:
        for m in members:
            if m.poll() is None:
                m.kill()
                m.wait()
    seen = [line.split("\t") for out, _ in outs for line in out.decode().splitlines()]
    assert sorted(v for _, v in seen) == sorted(values), outs  # each record once
    partitions = [{p for p, _ in (line.split("\t") for line in out.decode().splitlines())} for out, _ in outs]
    assert all(len(ps) == 1 for ps in partitions) and partitions[0] != partitions[1], partitions


def test_sigterm_ends_the_consumer_normally_and_commits(bootstrap: str) -> None:
    topic = unique_name("term")
    create_topic(bootstrap, topic, 1)
    odradek_cli("produce", "--bootstrap-server", bootstrap, "--topic", topic, stdin=b"one\ntwo\n")
    group = unique_name("cg")
    proc = subprocess.Popen([sys.executable, "-m", "odradek.cli.main", "consume", "--bootstrap-server", bootstrap,
                             "--topic", topic, "--group", group, "--from-beginning"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    try:
        assert proc.stdout is not None
        assert [proc.stdout.readline(), proc.stdout.readline()] == [b"one\n", b"two\n"]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err.decode()
    assert b"Processed a total of 2 messages" in err
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = c.committed([TopicPartition(topic, 0)], timeout=30)
    finally:
        c.close()
    assert committed[0].offset == 2
