"""``odradek perf produce`` / ``perf consume`` against Odradek and Apache Kafka 4.x: Kafka's
perf-test output lines (parsed by regular expression), the progress bar on a terminal, and bad
input."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import termios
import threading
from collections.abc import Iterator

import pytest

from .cli_tools_support import clusters, create_topic, odradek_cli
from .support import unique_name

TOTAL = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max latency, "
    r"(\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th\.")
WINDOW = re.compile(r"\d+ records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms max latency\.")
CSV_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
              "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
CSV_LINE = re.compile(rf"({DATE}), ({DATE}), ([\d.]+), ([\d.]+), (\d+), ([\d.]+), (\d+), (-?\d+), ([\d.]+), ([\d.]+)")


@pytest.fixture(scope="module", params=["odradek", "kafka"])
def bootstrap(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from clusters(request, tmp_path_factory)


def test_perf_produce_then_consume_print_kafkas_lines(bootstrap: str) -> None:
    topic = unique_name("perf")
    create_topic(bootstrap, topic, 2)
    r = odradek_cli("perf", "produce", "--topic", topic, "--num-records", "3000", "--record-size", "100",
                    "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all", "linger.ms=5")
    assert r.returncode == 0, r.stderr.decode()
    lines = r.stdout.decode().splitlines()
    assert all(WINDOW.fullmatch(line) for line in lines[:-1]), lines
    m = TOTAL.fullmatch(lines[-1])
    assert m is not None, lines[-1]
    assert int(m[1]) == 3000 and float(m[2]) > 0 and float(m[3]) > 0
    p50, p95, p99, p999, max_ms = int(m[6]), int(m[7]), int(m[8]), int(m[9]), float(m[5])
    assert p50 <= p95 <= p99 <= p999 <= max_ms

    r = odradek_cli("perf", "consume", "--bootstrap-server", bootstrap, "--topic", topic, "--messages", "3000",
                    "--timeout", "20000")
    assert r.returncode == 0, r.stderr.decode()
    header, line = r.stdout.decode().splitlines()
    assert header == CSV_HEADER
    m = CSV_LINE.fullmatch(line)
    assert m is not None, line
    assert int(m[5]) == 3000 and abs(float(m[3]) - 3000 * 100 / 1024 / 1024) < 0.001

    r = odradek_cli("perf", "consume", "--bootstrap-server", bootstrap, "--topic", topic, "--messages", "10",
                    "--show-detailed-stats", "--reporting-interval", "0", "--hide-header")
    assert r.returncode == 0, r.stderr.decode()
    detail = r.stdout.decode().splitlines()
    assert detail and all(re.fullmatch(rf"{DATE}, 0, [\d.]+, [\d.]+, \d+, [\d.]+, \d+, -?\d+, [\d.]+, [\d.]+", d)
                          for d in detail), detail


def _stderr_on_a_terminal(*args: str) -> tuple[int, str]:
    """Run the tool with stderr on a pseudo-terminal (stdout a pipe); its exit code and what
    the terminal showed (read while the tool runs)."""
    master, slave = pty.openpty()
    # a terminal's size (a fresh pty has 0 rows, where tqdm shows nothing)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the tool has gone and closed its end
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        r = odradek_cli(*args, stderr=slave)
    finally:
        os.close(slave)
        reader.join(10)
        os.close(master)
    return r.returncode, b"".join(chunks).decode(errors="replace")


def test_progress_bar_on_a_terminal_only(bootstrap: str) -> None:
    topic = unique_name("bar")
    create_topic(bootstrap, topic, 1)
    args = ("perf", "produce", "--topic", topic, "--num-records", "2000", "--record-size", "10", "--throughput", "-1",
            "--bootstrap-server", bootstrap)
    code, terminal = _stderr_on_a_terminal(*args)
    assert code == 0
    assert re.search(r"\d+%\|.*\| *\d+(\.\d+)?k?/2(\.00)?k? \[", terminal), terminal  # tqdm: percent, bar, n/total
    code, terminal = _stderr_on_a_terminal(*args, "--no-progress")
    assert code == 0 and "%|" not in terminal
    r = odradek_cli(*args)  # stderr a pipe
    assert r.returncode == 0 and b"%|" not in r.stderr
    # consume --max-messages with stdout elsewhere: a bar with the total
    code, terminal = _stderr_on_a_terminal("consume", "--bootstrap-server", bootstrap, "--topic", topic,
                                           "--from-beginning", "--max-messages", "2000")
    assert code == 0 and "Processed a total of 2000 messages" in terminal
    assert re.search(r"\d+%\|.*/2(\.00)?k? \[", terminal), terminal


def test_perf_bad_input(bootstrap: str) -> None:
    r = odradek_cli("perf", "produce", "--topic", "t", "--num-records", "1", "--record-size", "1", "--throughput", "-1",
                    "--producer-props", f"bootstrap.servers={bootstrap}", "acks")
    assert r.returncode == 1 and "Invalid property: acks" in r.stderr.decode()
    missing = unique_name("missing")
    r = odradek_cli("perf", "consume", "--bootstrap-server", bootstrap, "--topic", missing, "--messages", "1")
    assert r.returncode == 1 and f"Topic {missing} does not exist" in r.stderr.decode()
    r = odradek_cli("perf", "produce", "--topic", "t", "--num-records", "1", "--record-size", "1", "--throughput", "-1",
                    "--producer-props", f"bootstrap.servers={bootstrap}", "compression.type=brotli")
    assert r.returncode == 1 and "Invalid value brotli for configuration compression.type" in r.stderr.decode()
