"""README's "Operating Odradek" section, run as written.

The section's code blocks are the walkthrough: every command line in them is one of ``STEPS``
below, in the same order (``test_the_readme_blocks_are_the_walkthrough`` fails when the README and
this file disagree, so neither can drift). The ``walkthrough`` fixture starts a fresh ``odradek
server`` process with the README's overrides, then runs each line as a shell command (``odradek``
is this checkout's ``python -m odradek.cli.main``; the README's addresses are swapped for free
ports), keeping each line's exit code and output and a /metrics scrape after it; ``odradek
console`` is started and its pages fetched. One test per step checks what that step printed.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .support import ServerProcess

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
SECTION = "## Operating Odradek"

# The README's addresses, replaced by free ports when a line runs.
README_BOOTSTRAP = "localhost:9092"
README_METRICS = "http://127.0.0.1:9404"
README_CONSOLE_PORT = "8080"

# Every command line of the section's code blocks, in order (trailing "   # comments" dropped).
SERVER = "odradek server --override metrics.prometheus.listener=http://127.0.0.1:9404"
CREATE = "odradek topics --bootstrap-server localhost:9092 --create --topic orders --partitions 3"
DESCRIBE = "odradek topics --bootstrap-server localhost:9092 --describe --topic orders"
PRODUCE = (
    "printf 'k1:hello\\nk2:world\\n' | odradek produce --bootstrap-server localhost:9092 --topic orders"
    " --property parse.key=true --property key.separator=:"
)
CONSUME = (
    "odradek consume --bootstrap-server localhost:9092 --topic orders --group app --from-beginning"
    " --max-messages 2 --property print.key=true"
)
GROUPS = "odradek groups --bootstrap-server localhost:9092 --describe --group app"
CONFIG_ALTER = (
    "odradek configs --bootstrap-server localhost:9092 --alter --entity-type topics --entity-name orders"
    " --add-config retention.ms=86400000"
)
CONFIG_DESCRIBE = (
    "odradek configs --bootstrap-server localhost:9092 --describe --entity-type topics --entity-name orders"
)
CURL = "curl -s http://127.0.0.1:9404/metrics | grep 'messagesin_total{topic=\"orders\"}'"
CONSOLE = "odradek console --bootstrap-server localhost:9092 --port 8080"
ALTER = "odradek topics --bootstrap-server localhost:9092 --alter --topic orders --partitions 4"
GET_OFFSETS = "odradek get-offsets --bootstrap-server localhost:9092 --topic orders"
LOG_DIRS = "odradek log-dirs --bootstrap-server localhost:9092 --describe --topic-list orders"
CLUSTER_INFO = "odradek cluster info --bootstrap-server localhost:9092"
FEATURES = "odradek features --bootstrap-server localhost:9092 describe"
PERF = (
    "odradek perf produce --bootstrap-server localhost:9092 --topic orders --num-records 1000"
    " --record-size 100 --throughput -1"
)
STEPS: tuple[str, ...] = (
    SERVER, CREATE, DESCRIBE, PRODUCE, CONSUME, GROUPS, CONFIG_ALTER, CONFIG_DESCRIBE, CURL, CONSOLE,
    ALTER, GET_OFFSETS, LOG_DIRS, CLUSTER_INFO, FEATURES, PERF,
)
# The console's pages fetched while it runs (after the CONSOLE step).
CONSOLE_PAGES = (
    "/", "/topics", "/topic?name=orders", "/groups", "/group?id=app",
    "/messages?topic=orders&partition=0", "/messages?topic=orders&partition=1",
    "/messages?topic=orders&partition=2",
)


def readme_command_lines() -> list[str]:
    """The command lines of the code blocks of README's "Operating Odradek" section."""
    text = README.read_text("utf-8")
    start = text.index(SECTION + "\n")
    end = text.find("\n## ", start + len(SECTION))
    section = text[start:end if end >= 0 else len(text)]
    lines: list[str] = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", section, re.S | re.M):
        for line in block.splitlines():
            line = re.sub(r"\s{2,}#.*$", "", line).strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


@dataclass
class Ran:
    """One line's run: exit code, output, and the metrics scraped after it."""

    code: int
    out: str
    err: str
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)


@dataclass
class Walkthrough:
    ran: dict[str, Ran]
    pages: dict[str, tuple[int, str]]
    baseline: dict[tuple[str, tuple[tuple[str, str], ...]], float]
    server_log: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 30.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def _scrape(metrics_url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, body = _get(metrics_url + "/metrics")
    assert status == 200, body
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return metrics.get((name, tuple(sorted(labels.items()))), 0.0)


def _sum(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in metrics.items() if n == name and want <= set(ls))


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walkthrough]:
    assert readme_command_lines() == list(STEPS), "README's Operating Odradek blocks changed: update STEPS"
    tmp = tmp_path_factory.mktemp("walkthrough")
    metrics_url = f"http://127.0.0.1:{_free_port()}"
    console_port = str(_free_port())
    server_words = shlex.split(SERVER)
    overrides = dict(
        server_words[i + 1].replace(README_METRICS, metrics_url).split("=", 1)
        for i, w in enumerate(server_words) if w == "--override"
    )
    # ServerProcess binds free loopback ports; the keys it sets for quick tests go back to the
    # defaults a user's `odradek server` has.
    overrides = {"offsets.topic.replication.factor": "3", "group.initial.rebalance.delay.ms": "3000",
                 **overrides}
    server = ServerProcess(tmp / "data", overrides).start()
    console: subprocess.Popen[bytes] | None = None
    console_log = tmp / "console.log"
    ran: dict[str, Ran] = {}
    pages: dict[str, tuple[int, str]] = {}

    def substitute(line: str) -> str:
        return (line.replace(README_BOOTSTRAP, server.bootstrap_servers)
                .replace(README_METRICS, metrics_url)
                .replace(f"--port {README_CONSOLE_PORT}", f"--port {console_port}"))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    shell_prelude = f'set -o pipefail; odradek() {{ {shlex.quote(sys.executable)} -m odradek.cli.main "$@"; }}\n'
    try:
        baseline = _scrape(metrics_url)
        ran[SERVER] = Ran(0, "", "", baseline)
        for line in STEPS[1:]:
            if line == CONSOLE:
                argv = [sys.executable, "-m", "odradek.cli.main", *shlex.split(substitute(line))[1:]]
                with open(console_log, "wb") as logf:
                    console = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, cwd=REPO, env=env)
                deadline = time.monotonic() + 30
                while "serving http://" not in console_log.read_text("utf-8", "replace"):
                    assert console.poll() is None and time.monotonic() < deadline, console_log.read_text()
                    time.sleep(0.05)
                for path in CONSOLE_PAGES:
                    pages[path] = _get(f"http://127.0.0.1:{console_port}{path}")
                console.terminate()
                code = console.wait(15)
                ran[line] = Ran(code, console_log.read_text("utf-8", "replace"), "")
                console = None
            else:
                p = subprocess.run(["bash", "-c", shell_prelude + substitute(line)], cwd=REPO, env=env,
                                   stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
                ran[line] = Ran(p.returncode, p.stdout.decode("utf-8", "replace"),
                                p.stderr.decode("utf-8", "replace"))
            ran[line].metrics = _scrape(metrics_url)
        yield Walkthrough(ran, pages, baseline, server.log_tail())
    finally:
        if console is not None:
            console.kill()
            console.wait(10)
        server.terminate()


def _ok(w: Walkthrough, line: str) -> Ran:
    r = w.ran[line]
    assert r.code == 0, f"{line}\nexit {r.code}\nstdout:\n{r.out}\nstderr:\n{r.err}"
    return r


def test_the_readme_blocks_are_the_walkthrough() -> None:
    assert readme_command_lines() == list(STEPS)


def test_server_serves_metrics(walkthrough: Walkthrough) -> None:
    m = walkthrough.baseline
    assert _value(m, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert _value(m, "kafka_server_brokertopicmetrics_messagesin_total", topic="orders") == 0


def test_topics_create_and_describe(walkthrough: Walkthrough) -> None:
    assert _ok(walkthrough, CREATE).out.strip() == "Created topic orders."
    out = _ok(walkthrough, DESCRIBE).out.splitlines()
    assert out[0].startswith("Topic: orders\tTopicId: ") and "PartitionCount: 3\tReplicationFactor: 1" in out[0]
    assert [re.search(r"Partition: (\d+)\tLeader: 1\t", line)[1] for line in out[1:]] == ["0", "1", "2"]  # type: ignore[index]


def test_produce_then_consume_from_the_beginning(walkthrough: Walkthrough) -> None:
    _ok(walkthrough, PRODUCE)
    after = walkthrough.ran[PRODUCE].metrics
    assert _value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic="orders") == 2
    assert _value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic="orders") > 0
    r = _ok(walkthrough, CONSUME)
    assert sorted(r.out.splitlines()) == ["k1\thello", "k2\tworld"]
    assert "Processed a total of 2 messages" in r.err
    m = r.metrics
    assert _value(m, "kafka_server_brokertopicmetrics_bytesout_total", topic="orders") > 0
    assert _sum(m, "kafka_network_requestmetrics_requests_total", request="Fetch") > _sum(
        after, "kafka_network_requestmetrics_requests_total", request="Fetch")
    # The group committed what it read: no lag on the three partitions.
    lags = {ls: v for (n, ls), v in m.items() if n == "kafka_consumergroup_lag"}
    assert {dict(ls)["partition"] for ls in lags if dict(ls)["consumergroup"] == "app"} == {"0", "1", "2"}
    assert all(v == 0 for v in lags.values())


def test_groups_describe(walkthrough: Walkthrough) -> None:
    lines = [line.split() for line in _ok(walkthrough, GROUPS).out.splitlines() if line.strip()]
    header = next(h for h in lines if h[:3] == ["GROUP", "TOPIC", "PARTITION"])
    rows = [dict(zip(header, row, strict=False)) for row in lines if row[:2] == ["app", "orders"]]
    assert sorted(r["PARTITION"] for r in rows) == ["0", "1", "2"]
    assert sum(int(r["CURRENT-OFFSET"]) for r in rows) == 2
    assert all(r["LAG"] == "0" for r in rows)


def test_configs_alter_and_describe(walkthrough: Walkthrough) -> None:
    assert _ok(walkthrough, CONFIG_ALTER).out.strip() == "Completed updating config for topic orders."
    out = _ok(walkthrough, CONFIG_DESCRIBE).out.splitlines()
    assert out[0] == "Dynamic configs for topic orders are:"
    assert out[1].split()[0] == "retention.ms=86400000"
    assert "DYNAMIC_TOPIC_CONFIG:retention.ms=86400000" in out[1]


def test_curl_metrics(walkthrough: Walkthrough) -> None:
    out = _ok(walkthrough, CURL).out.splitlines()
    assert out == ['kafka_server_brokertopicmetrics_messagesin_total{topic="orders"} 2.0']


def test_console_pages(walkthrough: Walkthrough) -> None:
    r = walkthrough.ran[CONSOLE]
    assert "serving http://" in r.out
    pages = walkthrough.pages
    bad = {p: s for p, (s, _) in pages.items() if s != 200}
    assert not bad, bad
    assert "orders" in pages["/topics"][1]
    topic = pages["/topic?name=orders"][1]
    assert "retention.ms" in topic and "86400000" in topic
    assert "app" in pages["/groups"][1]
    assert "orders" in pages["/group?id=app"][1]
    messages = "".join(pages[f"/messages?topic=orders&partition={p}"][1] for p in range(3))
    assert "hello" in messages and "world" in messages and "k1" in messages


def test_topics_alter_then_get_offsets(walkthrough: Walkthrough) -> None:
    _ok(walkthrough, ALTER)
    out = _ok(walkthrough, GET_OFFSETS).out.split()
    assert [line.rsplit(":", 1)[0] for line in out] == [f"orders:{p}" for p in range(4)]
    assert sum(int(line.rsplit(":", 1)[1]) for line in out) == 2


def test_log_dirs(walkthrough: Walkthrough) -> None:
    import json

    out = _ok(walkthrough, LOG_DIRS).out.splitlines()
    assert out[0] == "Querying brokers for log directories information"
    assert out[1] == "Received log directory information from brokers 1"
    doc = json.loads(out[2])
    parts = {p["partition"] for b in doc["brokers"] for d in b["logDirs"] for p in d["partitions"]}
    assert parts == {f"orders-{p}" for p in range(4)}


def test_cluster_info_and_features(walkthrough: Walkthrough) -> None:
    out = _ok(walkthrough, CLUSTER_INFO).out.splitlines()
    assert out[0].startswith("Cluster ID: ") and len(out[0]) > len("Cluster ID: ")
    assert out[1] == "Controller: 1"
    assert out[2].startswith("Broker: 1\tEndpoint: 127.0.0.1:")
    features = _ok(walkthrough, FEATURES).out
    assert re.search(r"^Feature: metadata\.version\s+SupportedMinVersion: \S+\s+SupportedMaxVersion: \S+\s+"
                     r"FinalizedVersionLevel: \S+", features, re.M), features


def test_perf_produce_and_the_numbers_moving(walkthrough: Walkthrough) -> None:
    r = _ok(walkthrough, PERF)
    assert re.search(
        r"^1000 records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms max latency,"
        r" \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$", r.out, re.M), r.out
    m = r.metrics
    assert _value(m, "kafka_server_brokertopicmetrics_messagesin_total", topic="orders") == 1002
    assert _value(m, "kafka_server_brokertopicmetrics_bytesin_total", topic="orders") > 100_000
    assert _sum(m, "kafka_network_requestmetrics_requests_total", request="Produce") > _sum(
        walkthrough.ran[CONSUME].metrics, "kafka_network_requestmetrics_requests_total", request="Produce")
    assert _sum(m, "kafka_network_requestmetrics_totaltimems_count", request="Produce") > 0
    # The group has not read the new records: its lag grew (partition 3 has no committed offset).
    assert 0 < _sum(m, "kafka_consumergroup_lag", consumergroup="app", topic="orders") <= 1000
