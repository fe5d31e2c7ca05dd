#!/usr/bin/env python3
"""End-to-end produce/consume throughput benchmark for Odradek, with Redis Streams as reference.

    python3 benchmarks/produce_consume.py --records 1000000
    python3 benchmarks/produce_consume.py --records 1000000 --json
    python3 benchmarks/produce_consume.py --records 1000000 --profile

The script starts its own broker (``odradek server``) on free loopback ports with a temporary
data directory, produces ``--records`` records of ``--record-size`` bytes with a librdkafka
producer (acks=1, default batching) to a topic with ``--partitions`` partitions, reads them back
with a librdkafka consumer (manual assignment from offset 0, no group commits), then runs
``redis-benchmark`` against a private ``redis-server`` (AOF, fsync every second) doing XADD with
the same payload size. CPU time of the broker process and of this (client) process is sampled from
``/proc/<pid>/stat`` around each phase, so it is visible which side is the bottleneck.

With ``--profile`` py-spy is attached to the broker process for the produce phase and, separately,
for the consume phase; it writes the collapsed stacks (``--format raw``) next to this script,
renders a flame graph SVG from them and prints the top functions by self time. See README.md.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BENCH_DIR = Path(__file__).resolve().parent
READY_LINE = "Odradek broker ready"
CLK_TCK = os.sysconf("SC_CLK_TCK")
# librdkafka's upper bound for queue.buffering.max.messages in older releases; plenty here.
MAX_QUEUED_MESSAGES = 10_000_000
LATENCY_SAMPLE_EVERY = 100
# librdkafka >= 2.4 stops fetching for fetch.queue.backoff.ms (default 1000 ms) whenever its
# prefetch queue holds more than queued.min.messages (100000). A Python loop drains 100k records
# in ~0.1 s and then waits for the rest of the second, which caps the consumer at ~250k rec/s
# whatever the broker does. 10 ms keeps the prefetch going; override with -C to compare.
CONSUMER_DEFAULTS: dict[str, str] = {"fetch.queue.backoff.ms": "10"}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (all sockets held open together so they cannot repeat)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


# --------------------------------------------------------------------------------------------
# CPU accounting from /proc


def cpu_seconds(pid: int | None, tid: int | None = None) -> float:
    """utime + stime in seconds of a whole process (all threads), or of one thread ``tid``.

    ``pid=None`` means this process.
    """
    base = "/proc/self" if pid is None else f"/proc/{pid}"
    path = f"{base}/stat" if tid is None else f"{base}/task/{tid}/stat"
    try:
        with open(path) as f:
            data = f.read()
    except OSError:
        return 0.0
    # The command name may contain spaces/parentheses: split after the last ')'.
    fields = data[data.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


@dataclass
class CpuUsage:
    wall_s: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)

    def percent(self) -> dict[str, float]:
        if self.wall_s <= 0:
            return {k: 0.0 for k in self.cpu_s}
        return {k: round(100.0 * v / self.wall_s, 1) for k, v in self.cpu_s.items()}


class CpuMeter:
    """CPU seconds consumed by a set of processes between ``start`` and ``stop``."""

    def __init__(self, pids: dict[str, tuple[int | None, int | None]]) -> None:
        """``pids`` maps a label to (pid, tid); tid None = the whole process."""
        self.pids = pids
        self._t0 = 0.0
        self._c0: dict[str, float] = {}

    def start(self) -> None:
        self._c0 = {name: cpu_seconds(*ids) for name, ids in self.pids.items()}
        self._t0 = time.perf_counter()

    def stop(self) -> CpuUsage:
        wall = time.perf_counter() - self._t0
        used = {name: cpu_seconds(*ids) - self._c0[name] for name, ids in self.pids.items()}
        return CpuUsage(wall, {k: round(v, 3) for k, v in used.items()})


# --------------------------------------------------------------------------------------------
# The broker under test


class Broker:
    def __init__(self, workdir: Path, extra_overrides: list[str]) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.log_path = workdir / "broker.log"
        self.port, self.controller_port = free_ports(2)
        self.extra_overrides = extra_overrides
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 90.0) -> None:
        overrides = [
            f"log.dirs={self.data_dir}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
            *self.extra_overrides,
        ]
        cmd = [sys.executable, "-m", "odradek.cli.main", "server"]
        for o in overrides:
            cmd += ["--override", o]
        log(f"starting broker: {' '.join(cmd)}")
        self._log_file = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd, stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"broker exited with {self.proc.returncode} before it was ready:\n{self.tail()}"
                )
            if READY_LINE in self.log_path.read_text(errors="replace"):
                log(f"broker ready on {self.bootstrap} (pid {self.pid})")
                return
            time.sleep(0.05)
        raise RuntimeError(f"broker not ready after {timeout}s:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


# --------------------------------------------------------------------------------------------
# py-spy


@dataclass
class ProfileResult:
    phase: str
    raw_path: str
    svg_path: str
    samples: int
    duration_s: float
    rate: int
    top_self: list[tuple[str, int, float]]
    top_total: list[tuple[str, int, float]]


class PySpy:
    """``py-spy record --pid`` attached to the broker for one phase, stopped with SIGINT."""

    def __init__(self, pid: int, raw_path: Path, rate: int, extra_args: list[str]) -> None:
        self.pid = pid
        self.extra_args = extra_args
        self.raw_path = raw_path
        self.rate = rate
        self.proc: subprocess.Popen[bytes] | None = None
        self._err_path = raw_path.with_suffix(".pyspy.log")
        self._t0 = 0.0
        self.duration_s = 0.0

    def start(self) -> None:
        exe = shutil.which("py-spy")
        if exe is None:
            raise RuntimeError("py-spy is not on PATH")
        cmd = [
            exe,
            "record",
            "--pid",
            str(self.pid),
            "--format",
            "raw",
            "--function",
            "--rate",
            str(self.rate),
            "--output",
            str(self.raw_path),
            *self.extra_args,
        ]
        with open(self._err_path, "wb") as err:
            self.proc = subprocess.Popen(
                cmd, stdout=err, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        # Wait until py-spy reports that it is sampling.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"py-spy exited: {self._err_path.read_text(errors='replace')}")
            if "Sampling process" in self._err_path.read_text(errors="replace"):
                break
            time.sleep(0.05)
        self._t0 = time.perf_counter()

    def stop(self) -> None:
        assert self.proc is not None
        self.duration_s = time.perf_counter() - self._t0
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if not self.raw_path.exists():
            raise RuntimeError(
                f"py-spy wrote nothing: {self._err_path.read_text(errors='replace')}"
            )
        self._err_path.unlink(missing_ok=True)


def read_collapsed(path: Path) -> list[tuple[list[str], int]]:
    stacks: list[tuple[list[str], int]] = []
    for line in path.read_text(errors="replace").splitlines():
        line = line.rstrip()
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        try:
            n = int(count)
        except ValueError:
            continue
        stacks.append((stack.split(";"), n))
    return stacks


def summarize_profile(
    stacks: list[tuple[list[str], int]], top: int
) -> tuple[int, list[tuple[str, int, float]], list[tuple[str, int, float]]]:
    total = sum(n for _, n in stacks)
    self_c: Counter[str] = Counter()
    incl_c: Counter[str] = Counter()
    for frames, n in stacks:
        if not frames:
            continue
        self_c[frames[-1]] += n
        for fr in set(frames):
            incl_c[fr] += n

    def pct(c: Counter[str]) -> list[tuple[str, int, float]]:
        return [
            (k, v, round(100.0 * v / total, 2) if total else 0.0) for k, v in c.most_common(top)
        ]

    return total, pct(self_c), pct(incl_c)


def write_flamegraph(stacks: list[tuple[list[str], int]], out: Path, title: str) -> None:
    """A plain, dependency-free SVG flame graph (root at the bottom) from collapsed stacks."""
    tree: dict[str, Any] = {"n": 0, "c": {}}
    for frames, n in stacks:
        node = tree
        node["n"] += n
        for fr in frames:
            node = node["c"].setdefault(fr, {"n": 0, "c": {}})
            node["n"] += n

    def depth(node: dict[str, Any]) -> int:
        return 1 + max((depth(ch) for ch in node["c"].values()), default=0)

    width, row_h, top_pad = 1600.0, 17, 40
    max_depth = depth(tree)
    height = top_pad + max_depth * row_h + 10
    total = max(tree["n"], 1)
    parts: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{int(width)}" height="{height}" '
        f'font-family="monospace" font-size="11">',
        f'<rect width="100%" height="100%" fill="#fafafa"/>'
        f'<text x="10" y="20" font-size="14">{html.escape(title)} ({total} samples)</text>',
    ]

    def color(name: str) -> str:
        h = sum(ord(c) for c in name)
        return f"rgb({205 + h % 50},{(h * 7) % 200},{(h * 13) % 60})"

    def draw(name: str, node: dict[str, Any], x: float, level: int) -> None:
        w = width * node["n"] / total
        if w < 0.3:
            return
        y = height - 10 - (level + 1) * row_h
        label = f"{name} ({node['n']} samples, {100.0 * node['n'] / total:.2f}%)"
        parts.append(
            f'<g><title>{html.escape(label)}</title><rect x="{x:.2f}" y="{y}" width="{w:.2f}" '
            f'height="{row_h - 1}" fill="{color(name)}"/>'
        )
        chars = int(w / 6.6)
        if chars >= 4:
            text = name if len(name) <= chars else name[: chars - 2] + ".."
            parts.append(f'<text x="{x + 2:.2f}" y="{y + row_h - 5}">{html.escape(text)}</text>')
        parts.append("</g>")
        cx = x
        for cname, child in sorted(node["c"].items()):
            draw(cname, child, cx, level + 1)
            cx += width * child["n"] / total

    cx = 0.0
    for cname, child in sorted(tree["c"].items()):
        draw(cname, child, cx, 0)
        cx += width * child["n"] / total
    parts.append("</svg>")
    out.write_text("\n".join(parts))


@contextmanager
def maybe_profile(
    enabled: bool,
    pid: int,
    phase: str,
    stamp: str,
    rate: int,
    top: int,
    extra_args: list[str],
    results: list[ProfileResult],
) -> Iterator[None]:
    if not enabled:
        yield
        return
    raw = BENCH_DIR / f"profile-{stamp}-{phase}.txt"
    spy = PySpy(pid, raw, rate, extra_args)
    spy.start()
    try:
        yield
    finally:
        spy.stop()
        stacks = read_collapsed(raw)
        svg = raw.with_suffix(".svg")
        write_flamegraph(stacks, svg, f"odradek broker, {phase} phase")
        samples, top_self, top_total = summarize_profile(stacks, top)
        results.append(
            ProfileResult(
                phase,
                str(raw),
                str(svg),
                samples,
                round(spy.duration_s, 3),
                rate,
                top_self,
                top_total,
            )
        )


# --------------------------------------------------------------------------------------------
# Kafka phases


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
    )
    for f in futures.values():
        f.result(30)
    # Wait until every partition has a leader in the broker's metadata.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == partitions
            and all(p.leader >= 0 for p in md.partitions.values())
        ):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} not ready")


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    idx = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[idx]


@dataclass
class ProduceResult:
    records: int
    seconds: float
    enqueue_seconds: float
    records_per_s: float
    mb_per_s: float
    latency_samples: int
    latency_p50_ms: float
    latency_p99_ms: float
    latency_max_ms: float
    delivery_errors: int
    buffer_full_waits: int
    cpu_percent: dict[str, float]


def produce_phase(
    bootstrap: str, topic: str, n: int, size: int, meter: CpuMeter, extra: dict[str, str]
) -> ProduceResult:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "queue.buffering.max.messages": max(100_000, min(n + 1000, MAX_QUEUED_MESSAGES)),
            **extra,
        }
    )
    # Connect and fetch metadata before the clock starts.
    producer.list_topics(topic, timeout=10)
    value = b"x" * size
    latencies: list[float] = []
    errors: list[KafkaError] = []
    perf = time.perf_counter

    def on_sampled(sent_at: float, err: KafkaError | None, _msg: Any) -> None:
        latencies.append(perf() - sent_at)
        if err is not None:
            errors.append(err)

    produce = producer.produce
    poll = producer.poll
    waits = 0

    def produce_blocking(**kw: Any) -> None:
        nonlocal waits
        while True:
            try:
                produce(topic, value, **kw)
                return
            except BufferError:
                waits += 1
                poll(0.05)

    meter.start()
    t0 = perf()
    for base in range(0, n, LATENCY_SAMPLE_EVERY):
        k = min(LATENCY_SAMPLE_EVERY, n - base)
        try:
            produce(topic, value, on_delivery=partial(on_sampled, perf()))
        except BufferError:
            produce_blocking(on_delivery=partial(on_sampled, perf()))
        for _ in range(k - 1):
            try:
                produce(topic, value)
            except BufferError:
                produce_blocking()
        if base % 10_000 == 0:
            poll(0)
    enqueued = perf() - t0
    remaining = producer.flush(300)
    elapsed = perf() - t0
    cpu = meter.stop()
    if remaining:
        raise RuntimeError(f"{remaining} records still undelivered after flush")
    if errors:
        log(f"WARNING: {len(errors)} sampled delivery errors, first: {errors[0]}")
    lat = sorted(latencies)
    return ProduceResult(
        records=n,
        seconds=round(elapsed, 3),
        enqueue_seconds=round(enqueued, 3),
        records_per_s=round(n / elapsed),
        mb_per_s=round(n * size / elapsed / 1e6, 2),
        latency_samples=len(lat),
        latency_p50_ms=round(percentile(lat, 0.50) * 1000, 2),
        latency_p99_ms=round(percentile(lat, 0.99) * 1000, 2),
        latency_max_ms=round((lat[-1] if lat else float("nan")) * 1000, 2),
        delivery_errors=len(errors),
        buffer_full_waits=waits,
        cpu_percent=cpu.percent(),
    )


@dataclass
class ConsumeResult:
    records: int
    seconds: float
    records_per_s: float
    mb_per_s: float
    first_record_after_ms: float
    steady_records_per_s: float
    cpu_percent: dict[str, float]


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> int:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "odradek-bench-wm",
            "enable.auto.commit": False,
        }
    )
    try:
        return sum(
            c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        )
    finally:
        c.close()


def consume_phase(
    bootstrap: str,
    topic: str,
    partitions: int,
    expected: int,
    size: int,
    meter: CpuMeter,
    extra: dict[str, str],
) -> ConsumeResult:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "odradek-bench",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            **CONSUMER_DEFAULTS,
            **extra,
        }
    )
    consumer.list_topics(topic, timeout=10)
    perf = time.perf_counter
    count = 0
    first_at = 0.0
    deadline = time.monotonic() + 300
    meter.start()
    t0 = perf()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    try:
        while count < expected:
            msgs = consumer.consume(num_messages=10_000, timeout=1.0)
            if not msgs:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"consume timed out at {count}/{expected} records")
                continue
            if not first_at:
                first_at = perf()
            bad = [m.error() for m in msgs if m.error() is not None]
            if bad:
                raise KafkaException(bad[0])
            count += len(msgs)
        elapsed = perf() - t0
        cpu = meter.stop()
    finally:
        consumer.close()
    steady = elapsed - (first_at - t0)
    return ConsumeResult(
        records=count,
        seconds=round(elapsed, 3),
        records_per_s=round(count / elapsed),
        mb_per_s=round(count * size / elapsed / 1e6, 2),
        first_record_after_ms=round((first_at - t0) * 1000, 1),
        steady_records_per_s=round(count / steady) if steady > 0 else 0,
        cpu_percent=cpu.percent(),
    )


# --------------------------------------------------------------------------------------------
# Redis Streams reference


@dataclass
class RedisResult:
    records: int
    requests_per_s: float
    mb_per_s: float
    p50_ms: float | None
    command: str
    cpu_percent: dict[str, float]


def redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def redis_phase(n: int, size: int, workdir: Path, pipeline: int) -> RedisResult:
    server = shutil.which("redis-server")
    bench = shutil.which("redis-benchmark")
    if server is None or bench is None:
        raise RuntimeError("redis-server / redis-benchmark not found")
    port = free_port()
    rdir = workdir / "redis"
    rdir.mkdir()
    cmd = [
        server,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(rdir),
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--save",
        "",
        "--daemonize",
        "no",
        "--logfile",
        str(rdir / "redis.log"),
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 20
        while not redis_ping(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
        value = "v" * size
        bcmd = [
            bench,
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-n",
            str(n),
            "-P",
            str(pipeline),
            "-q",
            "XADD",
            "bench",
            "*",
            "f",
            value,
        ]
        shown = " ".join(bcmd[:-1]) + f" <{size}-byte value>"
        log(f"redis reference: {shown}")
        meter = CpuMeter({"redis-server": (proc.pid, None)})
        meter.start()
        out = subprocess.run(bcmd, capture_output=True, text=True, timeout=600, check=True)
        cpu = meter.stop()
        text = out.stdout.replace("\r", "\n")
        rates = re.findall(r"([\d.]+) requests per second", text)
        if not rates:
            raise RuntimeError(f"cannot parse redis-benchmark output: {text!r}")
        rps = float(rates[-1])
        p50s = re.findall(r"p50=([\d.]+) msec", text)
        return RedisResult(
            records=n,
            requests_per_s=round(rps),
            mb_per_s=round(rps * size / 1e6, 2),
            p50_ms=float(p50s[-1]) if p50s else None,
            command=shown,
            cpu_percent=cpu.percent(),
        )
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------------------------
# Reporting


def fmt_rate(v: float) -> str:
    return f"{v:,.0f}"


def print_table(result: dict[str, Any]) -> None:
    p: dict[str, Any] = result["produce"]
    c: dict[str, Any] = result["consume"]
    r: dict[str, Any] | None = result.get("redis")
    rows: list[tuple[str, str, str, str, str]] = [
        (
            "odradek produce",
            fmt_rate(p["records_per_s"]),
            f"{p['mb_per_s']:.1f}",
            f"p50 {p['latency_p50_ms']:.1f} / p99 {p['latency_p99_ms']:.1f}",
            _cpu_str(p["cpu_percent"]),
        ),
        (
            "odradek consume",
            fmt_rate(c["records_per_s"]),
            f"{c['mb_per_s']:.1f}",
            f"first record after {c['first_record_after_ms']:.0f}",
            _cpu_str(c["cpu_percent"]),
        ),
    ]
    if r is not None:
        rows.append(
            (
                "redis XADD (-P 16)",
                fmt_rate(r["requests_per_s"]),
                f"{r['mb_per_s']:.1f}",
                f"p50 {r['p50_ms']}" if r["p50_ms"] is not None else "",
                _cpu_str(r["cpu_percent"]),
            )
        )
    head = ("", "records/s", "MB/s", "latency ms", "CPU% (100 = one core)")
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(5)]
    cfg = result["config"]
    print(
        f"\n{cfg['records']:,} records x {cfg['record_size']} B, {cfg['partitions']} partitions, "
        f"{cfg['cpus']} CPUs{' (broker under py-spy)' if cfg['profile'] else ''}"
    )
    line = "  ".join(
        h.ljust(w) if i == 0 else h.rjust(w)
        for i, (h, w) in enumerate(zip(head, widths, strict=True))
    )
    print(line)
    print("-" * len(line))
    for row in rows:
        print(
            "  ".join(
                v.ljust(w) if i == 0 else v.rjust(w)
                for i, (v, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    print(
        f"produce: {p['seconds']} s (last produce() returned after {p['enqueue_seconds']} s), latency sampled on {p['latency_samples']} records "
        f"(max {p['latency_max_ms']} ms), buffer-full waits {p['buffer_full_waits']}; "
        f"consume: {c['seconds']} s, {fmt_rate(c['steady_records_per_s'])} rec/s after the first record"
    )
    for prof in result.get("profiles", []):
        print(
            f"\nbroker profile, {prof['phase']}: {prof['samples']} samples in "
            f"{prof['duration_s']} s at {prof['rate']} Hz "
            f"(= {100.0 * prof['samples'] / max(prof['duration_s'] * prof['rate'], 1):.0f}% of "
            f"one thread's possible samples; with --gil: share of time the GIL was held); "
            f"{prof['svg_path']}"
        )
        print(f"  {'self%':>6} {'samples':>7}  function (file:first line)")
        for name, n, pct in prof["top_self"]:
            print(f"  {pct:6.2f} {n:7d}  {name}")
        print(
            f"  top inclusive: {'; '.join(f'{n} {pct:.0f}%' for n, _, pct in prof['top_total'][:12])}"
        )


def _cpu_str(cpu: dict[str, float]) -> str:
    parts: list[str] = []
    for k, v in cpu.items():
        main, _, sub = k.partition("-")
        if sub and parts and parts[-1].startswith(main):
            parts[-1] += f" ({sub} {v:.0f})"
        else:
            parts.append(f"{k} {v:.0f}")
    return ", ".join(parts)


# --------------------------------------------------------------------------------------------


def parse_kv(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="attach py-spy to the broker for each phase (outputs in benchmarks/)",
    )
    ap.add_argument("--profile-rate", type=int, default=100, help="py-spy samples per second")
    ap.add_argument("--profile-top", type=int, default=25)
    ap.add_argument(
        "--profile-args",
        default="--gil",
        metavar="ARGS",
        help="extra py-spy record arguments (default --gil: only samples holding the GIL, so "
        "idle waits in uvloop and the executor threads are left out); e.g. '--gil --native', "
        "'--idle --threads'; ' ' for py-spy's defaults",
    )
    ap.add_argument("--no-redis", action="store_true", help="skip the Redis Streams reference")
    ap.add_argument("--redis-pipeline", type=int, default=16)
    ap.add_argument(
        "--override",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra broker configuration override (repeatable)",
    )
    ap.add_argument(
        "--producer-config",
        "-P",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka producer property (repeatable)",
    )
    ap.add_argument(
        "--consumer-config",
        "-C",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka consumer property (repeatable); default "
        + ", ".join(f"{k}={v}" for k, v in CONSUMER_DEFAULTS.items()),
    )
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args(argv)
    producer_extra = parse_kv(args.producer_config)
    consumer_extra = parse_kv(args.consumer_config)
    n: int = args.records
    size: int = args.record_size
    stamp = time.strftime("%Y%m%d-%H%M%S")
    workdir = Path(tempfile.mkdtemp(prefix="odradek-bench-"))
    topic = f"bench-{stamp}"
    result: dict[str, Any] = {
        "config": {
            "records": n,
            "record_size": size,
            "partitions": args.partitions,
            "profile": args.profile,
            "cpus": os.cpu_count(),
            "topic": topic,
            "producer_config": producer_extra,
            "consumer_config": {**CONSUMER_DEFAULTS, **consumer_extra},
            "broker_overrides": args.override,
        },
    }
    profiles: list[ProfileResult] = []
    broker = Broker(workdir, args.override)
    try:
        broker.start()
        # The broker's main thread runs the event loop; the client's main thread runs the Python
        # produce()/consume() loop, its other threads are librdkafka's.
        pids: dict[str, tuple[int | None, int | None]] = {
            "broker": (broker.pid, None),
            "broker-loop": (broker.pid, broker.pid),
            "client": (None, None),
            "client-py": (None, os.getpid()),
        }
        create_topic(broker.bootstrap, topic, args.partitions)
        prof: Callable[[str], Any] = partial(
            maybe_profile,
            args.profile,
            broker.pid,
            stamp=stamp,
            rate=args.profile_rate,
            top=args.profile_top,
            extra_args=args.profile_args.split(),
            results=profiles,
        )

        log(f"producing {n:,} records of {size} B to {topic} ({args.partitions} partitions)")
        with prof("produce"):
            pr = produce_phase(broker.bootstrap, topic, n, size, CpuMeter(pids), producer_extra)
        log(f"produce: {pr.records_per_s:,.0f} rec/s, {pr.mb_per_s} MB/s, CPU {pr.cpu_percent}")
        result["produce"] = asdict(pr)

        expected = high_watermarks(broker.bootstrap, topic, args.partitions)
        if expected != n:
            log(f"WARNING: the log holds {expected:,} records, {n:,} were produced")
        result["log_records"] = expected

        log(f"consuming {expected:,} records")
        with prof("consume"):
            cr = consume_phase(
                broker.bootstrap,
                topic,
                args.partitions,
                expected,
                size,
                CpuMeter(pids),
                consumer_extra,
            )
        log(f"consume: {cr.records_per_s:,.0f} rec/s, {cr.mb_per_s} MB/s, CPU {cr.cpu_percent}")
        result["consume"] = asdict(cr)
    except BaseException:
        log(f"broker log tail:\n{broker.tail()}")
        raise
    finally:
        broker.stop()

    try:
        if not args.no_redis:
            rr = redis_phase(n, size, workdir, args.redis_pipeline)
            log(f"redis XADD: {rr.requests_per_s:,.0f} req/s, CPU {rr.cpu_percent}")
            result["redis"] = asdict(rr)
    finally:
        if args.keep:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    result["profiles"] = [asdict(p) for p in profiles]
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
