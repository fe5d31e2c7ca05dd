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
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench_support import (
    Broker,
    cpu_times,
    create_topic,
    free_ports,
    loadavg,
    machine_busy_seconds,
    make_log,
    run_seconds,
    runq_wait_seconds,
    table,
)
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

BENCH_DIR = Path(__file__).resolve().parent
# librdkafka's upper bound for queue.buffering.max.messages in older releases; plenty here.
MAX_QUEUED_MESSAGES = 10_000_000
LATENCY_SAMPLE_EVERY = 100
# librdkafka >= 2.4 stops fetching for fetch.queue.backoff.ms (default 1000 ms) whenever its
# prefetch queue holds more than queued.min.messages (100000). A Python loop drains 100k records
# in ~0.1 s and then waits for the rest of the second, which caps the consumer at ~250k rec/s
# whatever the broker does. 10 ms keeps the prefetch going; override with -C to compare.
CONSUMER_DEFAULTS: dict[str, str] = {"fetch.queue.backoff.ms": "10"}


log = make_log("bench")


# --------------------------------------------------------------------------------------------
# CPU accounting from /proc


@dataclass
class CpuUsage:
    wall_s: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)
    user_s: dict[str, float] = field(default_factory=dict)
    sys_s: dict[str, float] = field(default_factory=dict)
    runq_wait_s: dict[str, float] = field(default_factory=dict)
    machine_s: float = 0.0

    def add(self, name: str, user: float, system: float) -> None:
        """Account CPU measured elsewhere (e.g. the rusage of a reaped child process)."""
        self.user_s[name] = round(self.user_s.get(name, 0.0) + user, 3)
        self.sys_s[name] = round(self.sys_s.get(name, 0.0) + system, 3)
        self.cpu_s[name] = round(self.user_s[name] + self.sys_s[name], 3)

    def percent(self) -> dict[str, float]:
        """CPU per label as a percentage of the wall time (100 = one core), then ``machine``:
        everything that ran on the box in the meantime, including other people's processes."""
        if self.wall_s <= 0:
            return {k: 0.0 for k in self.cpu_s}
        out = {k: round(100.0 * v / self.wall_s, 1) for k, v in self.cpu_s.items()}
        out["machine"] = round(100.0 * self.machine_s / self.wall_s, 1)
        return out


class CpuMeter:
    """CPU seconds consumed by a set of processes between ``start`` and ``stop``."""

    def __init__(self, pids: dict[str, tuple[int | None, int | None]]) -> None:
        """``pids`` maps a label to (pid, tid); tid None = the whole process."""
        self.pids = pids
        self._t0 = 0.0
        self._c0: dict[str, tuple[float, float]] = {}
        self._ns0: dict[str, float | None] = {}
        self._r0: dict[str, float] = {}
        self._m0 = 0.0

    def start(self) -> None:
        self._c0 = {name: cpu_times(*ids) for name, ids in self.pids.items()}
        self._ns0 = {name: run_seconds(*ids) for name, ids in self.pids.items()}
        self._r0 = {name: runq_wait_seconds(*ids) for name, ids in self.pids.items()}
        self._m0 = machine_busy_seconds()
        self._t0 = time.perf_counter()

    def stop(self) -> CpuUsage:
        wall = time.perf_counter() - self._t0
        usage = CpuUsage(wall, machine_s=round(machine_busy_seconds() - self._m0, 3))
        for name, ids in self.pids.items():
            user, system = cpu_times(*ids)
            usage.add(name, user - self._c0[name][0], system - self._c0[name][1])
            ns0, ns1 = self._ns0[name], run_seconds(*ids)
            if ns0 is not None and ns1 is not None:
                usage.cpu_s[name] = round(ns1 - ns0, 4)
            if ids[1] is not None:
                usage.runq_wait_s[name] = round(runq_wait_seconds(*ids) - self._r0[name], 3)
        return usage


@dataclass
class BrokerCost:
    """What one phase cost the broker, independent of how fast the client was."""

    cpu_s: float  # utime + stime of the whole broker process during the phase
    user_s: float
    sys_s: float
    cpu_s_per_million: float  # broker CPU seconds per 1,000,000 records
    loop_cpu_s_per_million: float  # the same for the event-loop thread alone
    records_per_s_per_core: float  # 1e6 / cpu_s_per_million: the broker's ceiling on one core
    loop_runq_wait_percent: float  # share of the phase the loop thread waited for a CPU
    machine_busy_percent: float  # all processes on the box, 100 = one core


def measure_broker_cost(usage: CpuUsage, records: int) -> BrokerCost:
    cpu = usage.cpu_s.get("broker", 0.0)
    loop = usage.cpu_s.get("broker-loop", 0.0)
    per_m = cpu * 1e6 / records if records else 0.0
    wall = max(usage.wall_s, 1e-9)
    return BrokerCost(
        cpu_s=round(cpu, 3),
        user_s=usage.user_s.get("broker", 0.0),
        sys_s=usage.sys_s.get("broker", 0.0),
        cpu_s_per_million=round(per_m, 3),
        loop_cpu_s_per_million=round(loop * 1e6 / records if records else 0.0, 3),
        records_per_s_per_core=round(1e6 / per_m) if per_m > 0 else 0,
        loop_runq_wait_percent=round(100.0 * usage.runq_wait_s.get("broker-loop", 0.0) / wall, 1),
        machine_busy_percent=round(100.0 * usage.machine_s / wall, 1),
    )


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


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest rank ``round(q * (n - 1))``; NaN if empty. Kept apart from
    ``bench_support.percentile`` (rank ``int(q * n)``) so the figures stay comparable with
    earlier runs of this script."""
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
    broker_cost: BrokerCost
    client_cpu_s_per_million: float  # this process (Python + librdkafka threads)
    records_per_batch: float | None = None  # in the broker's log, see log_batch_stats()


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
        broker_cost=measure_broker_cost(cpu, n),
        client_cpu_s_per_million=round(cpu.cpu_s["client"] * 1e6 / n, 3),
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
    broker_cost: BrokerCost
    client_cpu_s_per_million: float


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
        broker_cost=measure_broker_cost(cpu, count),
        client_cpu_s_per_million=round(cpu.cpu_s["client"] * 1e6 / max(count, 1), 3),
    )


# --------------------------------------------------------------------------------------------
# The broker's own log: batch sizes


def log_batch_stats(data_dir: Path, topics: list[str]) -> tuple[int, int] | None:
    """(batches, records) in the broker's log files of ``topics``.

    Walks the Kafka record-batch headers of ``<log.dirs>/<topic>-<partition>/*.log`` (base offset
    int64, batch length int32, ..., record count int32 at byte 57), reading 61 bytes per batch.
    Records per batch is what the client sent per partition per request, which is what the
    broker's per-record cost depends on most. None if the files cannot be read.
    """
    batches = records = 0
    try:
        for topic in topics:
            for part_dir in data_dir.glob(f"{topic}-*"):
                if not part_dir.name[len(topic) + 1 :].isdigit():
                    continue
                for seg in sorted(part_dir.glob("*.log")):
                    fd = os.open(seg, os.O_RDONLY)
                    try:
                        size = os.fstat(fd).st_size
                        pos = 0
                        while pos + 61 <= size:
                            head = os.pread(fd, 61, pos)
                            length = int.from_bytes(head[8:12], "big", signed=True)
                            if length <= 0:
                                break
                            batches += 1
                            records += int.from_bytes(head[57:61], "big", signed=True)
                            pos += 12 + length
                    finally:
                        os.close(fd)
    except OSError:
        return None
    return batches, records


def records_per_batch(data_dir: Path, topics: list[str]) -> float | None:
    stats = log_batch_stats(data_dir, topics)
    if stats is None or stats[0] == 0:
        return None
    return round(stats[1] / stats[0], 1)


# --------------------------------------------------------------------------------------------
# kcat (librdkafka's C client, no Python in the loop)


def kcat_version(exe: str) -> str:
    out = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=10)
    text = out.stdout + out.stderr
    kcat = re.search(r"Version (\S+)", text)
    lib = re.search(r"librdkafka (\S+)", text)
    return f"kcat {kcat.group(1) if kcat else '?'}, librdkafka {lib.group(1) if lib else '?'}"


def write_records_file(path: Path, count: int, size: int) -> Path:
    """``count`` lines of ``size`` bytes each (the newline is kcat's delimiter, not payload)."""
    line = b"x" * size + b"\n"
    chunk = line * 10_000
    with open(path, "wb") as f:
        for _ in range(count // 10_000):
            f.write(chunk)
        f.write(line * (count % 10_000))
    return path


@dataclass
class ProcRun:
    command: str
    returncode: int
    seconds: float  # from the start of the phase to this process's exit
    user_s: float
    sys_s: float
    stderr: str


def run_processes(
    cmds: list[list[str]], workdir: Path, tag: str, meter: CpuMeter, timeout: float = 600
) -> tuple[CpuUsage, list[ProcRun]]:
    """Start ``cmds`` together and wait for all of them; the wall time runs from just before
    the first start to the last exit. Each child's CPU comes from its rusage (``wait4``), so
    every thread it ever had is counted; it is added to the usage as ``kcat``."""
    err_files = [open(workdir / f"{tag}-{i}.stderr", "w+b") for i in range(len(cmds))]  # noqa: SIM115
    procs: list[subprocess.Popen[bytes]] = []
    done: dict[int, tuple[float, int, Any]] = {}
    perf = time.perf_counter

    def reap(i: int, proc: subprocess.Popen[bytes]) -> None:
        _, status, rusage = os.wait4(proc.pid, 0)
        done[i] = (perf(), os.waitstatus_to_exitcode(status), rusage)

    try:
        meter.start()
        t0 = perf()
        for i, cmd in enumerate(cmds):
            procs.append(
                subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_files[i]
                )
            )
        waiters = [
            threading.Thread(target=reap, args=(i, p), daemon=True) for i, p in enumerate(procs)
        ]
        for w in waiters:
            w.start()
        deadline = time.monotonic() + timeout
        for w in waiters:
            w.join(max(0.0, deadline - time.monotonic()))
        usage = meter.stop()
        if len(done) < len(procs):
            raise RuntimeError(f"{tag}: kcat did not finish within {timeout:.0f}s")
        runs: list[ProcRun] = []
        for i, proc in enumerate(procs):
            end, rc, ru = done[i]
            proc.returncode = rc  # reaped by wait4 above
            usage.add("kcat", ru.ru_utime, ru.ru_stime)
            err_files[i].seek(0)
            runs.append(
                ProcRun(
                    command=" ".join(cmds[i]),
                    returncode=rc,
                    seconds=round(end - t0, 3),
                    user_s=round(ru.ru_utime, 3),
                    sys_s=round(ru.ru_stime, 3),
                    stderr=err_files[i].read().decode(errors="replace"),
                )
            )
        return usage, runs
    finally:
        for proc in procs:
            if proc.returncode is None and proc.poll() is None:
                proc.kill()
                proc.wait()
        for f in err_files:
            f.close()


@dataclass
class KcatResult:
    phase: str  # produce / consume
    processes: int
    records: int
    seconds: float
    records_per_s: float
    mb_per_s: float
    process_seconds: list[float]  # each process's own time to exit, from the common start
    verified: bool  # log end offsets (produce) / offsets at EOF (consume) add up to ``records``
    cpu_percent: dict[str, float]
    broker_cost: BrokerCost
    client_cpu_s_per_million: float  # all kcat processes together
    commands: list[str]
    records_per_batch: float | None = None


REACHED_END = re.compile(r"Reached end of topic (\S+) \[(\d+)\] at offset (\d+)")


def kcat_phase(
    kind: str,
    exe: str,
    bootstrap: str,
    topics: list[str],
    counts: list[int],
    size: int,
    workdir: Path,
    files: dict[int, Path],
    meter: CpuMeter,
    extra: dict[str, str],
    partitions: int,
    data_dir: Path,
) -> KcatResult:
    """One kcat process per topic, all at once: ``kind`` "produce" sends ``counts[i]`` records
    to ``topics[i]`` from a prepared file; "consume" reads ``topics[i]`` from the beginning to
    the end (``-e``) and discards the records (``-f ''``)."""
    xs = [a for k, v in extra.items() for a in ("-X", f"{k}={v}")]
    cmds: list[list[str]] = []
    for topic, count in zip(topics, counts, strict=True):
        if kind == "produce":
            if count not in files:
                files[count] = write_records_file(workdir / f"records-{count}.txt", count, size)
            cmds.append(
                [
                    exe,
                    "-P",
                    "-b",
                    bootstrap,
                    "-t",
                    topic,
                    "-X",
                    "acks=1",
                    *xs,
                    "-l",
                    str(files[count]),
                ]
            )
        else:
            # -c: exit on the last record. With -e alone kcat exits only once every partition
            # has reported EOF, which takes an empty fetch that the broker holds for
            # fetch.wait.max.ms (500 ms) - a fixed tail that is no part of the throughput.
            # -e stays as the safety net (kcat exits at the log end even if records are
            # missing) and, without -q, kcat prints "Reached end of topic T [p] at offset O"
            # lines on stderr, which are used to check the count when it stops there.
            cmds.append(
                [
                    exe,
                    "-C",
                    "-e",
                    "-c",
                    str(count),
                    "-o",
                    "beginning",
                    "-f",
                    "",
                    "-b",
                    bootstrap,
                    "-t",
                    topic,
                    *xs,
                ]
            )
    total = sum(counts)
    usage, runs = run_processes(cmds, workdir, f"kcat-{kind}-x{len(cmds)}", meter)
    for run in runs:
        if run.returncode != 0 or "ERROR" in run.stderr:
            raise RuntimeError(
                f"kcat failed ({run.returncode}): {run.command}\n{run.stderr[-2000:]}"
            )
    log_ends = {t: high_watermarks(bootstrap, t, partitions) for t in topics}
    if kind == "produce":
        verified = all(log_ends[t] == c for t, c in zip(topics, counts, strict=True))
    else:
        reached: dict[tuple[str, int], int] = {}
        for run in runs:
            for m in REACHED_END.finditer(run.stderr):
                reached[(m.group(1), int(m.group(2)))] = int(m.group(3))
        # Each process either stopped at -c (it got ``count`` records, and no partition can
        # have been read twice) or at -e, where the EOF offsets must add up to the log end.
        verified = sum(log_ends.values()) == total and all(
            log_ends[topic] == count
            and (
                sum(1 for (t, _) in reached if t == topic) < partitions
                or sum(o for (t, _), o in reached.items() if t == topic) == count
            )
            for topic, count in zip(topics, counts, strict=True)
        )
    if not verified:
        log(f"WARNING: kcat {kind} x{len(cmds)}: record counts do not add up (log ends {log_ends})")
    seconds = usage.wall_s
    return KcatResult(
        phase=kind,
        processes=len(cmds),
        records=total,
        seconds=round(seconds, 3),
        records_per_s=round(total / seconds),
        mb_per_s=round(total * size / seconds / 1e6, 2),
        process_seconds=[r.seconds for r in runs],
        verified=verified,
        cpu_percent=usage.percent(),
        broker_cost=measure_broker_cost(usage, total),
        client_cpu_s_per_million=round(usage.cpu_s["kcat"] * 1e6 / total, 3),
        commands=[r.command for r in runs],
        records_per_batch=records_per_batch(data_dir, topics) if kind == "produce" else None,
    )


def split_records(n: int, parts: int) -> list[int]:
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


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
    server_cpu_s_per_million: float  # redis-server CPU seconds per 1,000,000 XADD
    server_requests_per_s_per_core: float  # 1e6 / server_cpu_s_per_million
    benchmark_cpu_s_per_million: float  # the redis-benchmark client


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
    port = free_ports(1)[0]
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
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        meter.start()
        out = subprocess.run(bcmd, capture_output=True, text=True, timeout=600, check=True)
        cpu = meter.stop()
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.add("redis-benchmark", ru1.ru_utime - ru0.ru_utime, ru1.ru_stime - ru0.ru_stime)
        server_per_m = cpu.cpu_s["redis-server"] * 1e6 / n
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
            server_cpu_s_per_million=round(server_per_m, 3),
            server_requests_per_s_per_core=round(1e6 / server_per_m) if server_per_m else 0,
            benchmark_cpu_s_per_million=round(cpu.cpu_s["redis-benchmark"] * 1e6 / n, 3),
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

PRODUCE_TARGET = 1_000_000
CONSUME_TARGET = 2_000_000


def fmt_rate(v: float) -> str:
    return f"{v:,.0f}"


def phase_rows(result: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, kind, phase result) for every Kafka phase that ran, in run order."""
    rows: list[tuple[str, str, dict[str, Any]]] = []
    if "produce" in result:
        rows.append(("python produce", "produce", result["produce"]))
    if "consume" in result:
        rows.append(("python consume", "consume", result["consume"]))
    for k in result.get("kcat", {}).values():
        rows.append((f"kcat {k['phase']} x{k['processes']}", k["phase"], k))
    return rows


def target_summary(result: dict[str, Any]) -> dict[str, Any]:
    """Best client-observed rate and lowest broker cost per direction, against the targets."""
    out: dict[str, Any] = {}
    for kind, target in (("produce", PRODUCE_TARGET), ("consume", CONSUME_TARGET)):
        rows = [(label, ph) for label, k, ph in phase_rows(result) if k == kind]
        if not rows:
            continue
        best_label, best = max(rows, key=lambda r: r[1]["records_per_s"])
        cheap_label, cheap = min(rows, key=lambda r: r[1]["broker_cost"]["cpu_s_per_million"])
        out[kind] = {
            "target_records_per_s": target,
            "best_records_per_s": best["records_per_s"],
            "best_phase": best_label,
            "met": best["records_per_s"] >= target,
            "lowest_broker_cpu_s_per_million": cheap["broker_cost"]["cpu_s_per_million"],
            "lowest_cost_phase": cheap_label,
            "broker_ceiling_records_per_s_per_core": cheap["broker_cost"]["records_per_s_per_core"],
        }
    r = result.get("redis")
    if r is not None:
        out["redis_xadd"] = {
            "requests_per_s": r["requests_per_s"],
            "server_cpu_s_per_million": r["server_cpu_s_per_million"],
            "server_requests_per_s_per_core": r["server_requests_per_s_per_core"],
        }
    return out


def print_table(result: dict[str, Any]) -> None:
    cfg = result["config"]
    print(
        f"\n{cfg['records']:,} records x {cfg['record_size']} B, {cfg['partitions']} partitions "
        f"per topic, {cfg['cpus']} CPUs, load average before the run {cfg['loadavg_before']}"
        f"{', ' + cfg['kcat'] if cfg.get('kcat') else ''}"
        f"{' (broker under py-spy)' if cfg['profile'] else ''}"
    )
    head = (
        "phase",
        "records/s",
        "MB/s",
        "broker CPU s/1M rec",
        "broker ceiling rec/s/core",
        "client CPU s/1M",
        "loop runq-wait %",
        "CPU % (100 = one core)",
    )
    rows: list[tuple[str, ...]] = []
    for label, _, ph in phase_rows(result):
        bc = ph["broker_cost"]
        n = ph["records"]
        scale = 1e6 / n if n else 0.0
        rows.append(
            (
                label,
                fmt_rate(ph["records_per_s"]),
                f"{ph['mb_per_s']:.1f}",
                f"{bc['cpu_s_per_million']:.3f} (usr {bc['user_s'] * scale:.2f} "
                f"sys {bc['sys_s'] * scale:.2f})",
                fmt_rate(bc["records_per_s_per_core"]),
                f"{ph['client_cpu_s_per_million']:.3f}",
                f"{bc['loop_runq_wait_percent']:.0f}",
                _cpu_str(ph["cpu_percent"]),
            )
        )
    r: dict[str, Any] | None = result.get("redis")
    if r is not None:
        rows.append(
            (
                f"redis XADD (-P {cfg['redis_pipeline']})",
                fmt_rate(r["requests_per_s"]),
                f"{r['mb_per_s']:.1f}",
                f"{r['server_cpu_s_per_million']:.3f} (redis-server)",
                fmt_rate(r["server_requests_per_s_per_core"]),
                f"{r['benchmark_cpu_s_per_million']:.3f}",
                "",
                _cpu_str(r["cpu_percent"]),
            )
        )
    table(head, rows)

    p: dict[str, Any] | None = result.get("produce")
    c: dict[str, Any] | None = result.get("consume")
    if p is not None:
        print(
            f"python produce: {p['seconds']} s (last produce() returned after "
            f"{p['enqueue_seconds']} s), latency p50 {p['latency_p50_ms']:.1f} / p99 "
            f"{p['latency_p99_ms']:.1f} / max {p['latency_max_ms']} ms on "
            f"{p['latency_samples']} sampled records, buffer-full waits "
            f"{p['buffer_full_waits']}, {p['records_per_batch']} records per batch in the log"
        )
    if c is not None:
        print(
            f"python consume: {c['seconds']} s, first record after "
            f"{c['first_record_after_ms']:.0f} ms, {fmt_rate(c['steady_records_per_s'])} rec/s "
            f"after it"
        )
    for name, k in result.get("kcat", {}).items():
        batch = (
            f", {k['records_per_batch']} records per batch in the log"
            if k["records_per_batch"] is not None
            else ""
        )
        print(
            f"kcat {name}: {k['seconds']} s, processes exited after "
            f"{', '.join(f'{s} s' for s in k['process_seconds'])}{batch}"
            f"{'' if k['verified'] else ', RECORD COUNT NOT VERIFIED'}"
        )
    if r is not None:
        print(f"redis: {r['command']}, p50 {r['p50_ms']} ms")

    print()
    summary = result.get("targets", {})
    for kind in ("produce", "consume"):
        t = summary.get(kind)
        if t is None:
            continue
        print(
            f"target {kind} >= {fmt_rate(t['target_records_per_s'])} rec/s: best "
            f"{fmt_rate(t['best_records_per_s'])} ({t['best_phase']}) "
            f"{'MET' if t['met'] else 'NOT MET'}; broker ceiling "
            f"{fmt_rate(t['broker_ceiling_records_per_s_per_core'])} rec/s per core "
            f"({t['lowest_broker_cpu_s_per_million']} CPU s/1M, {t['lowest_cost_phase']})"
        )
    rx = summary.get("redis_xadd")
    if rx is not None:
        print(
            f"reference redis XADD: {fmt_rate(rx['requests_per_s'])} req/s, redis-server "
            f"{rx['server_cpu_s_per_million']} CPU s/1M = "
            f"{fmt_rate(rx['server_requests_per_s_per_core'])} req/s per core"
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
    ap.add_argument("--no-kcat", action="store_true", help="skip the kcat phases")
    ap.add_argument(
        "--kcat-parallel",
        type=int,
        default=2,
        metavar="N",
        help="also run N kcat producers (then N consumers) at once, each on its own topic with "
        "--partitions partitions and records/N records; 1 or less skips it (default 2)",
    )
    ap.add_argument(
        "--kcat-producer-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra -X property for the kcat producers (repeatable)",
    )
    ap.add_argument(
        "--kcat-consumer-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra -X property for the kcat consumers (repeatable)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args(argv)
    producer_extra = parse_kv(args.producer_config)
    consumer_extra = parse_kv(args.consumer_config)
    kcat_producer_extra = parse_kv(args.kcat_producer_config)
    kcat_consumer_extra = parse_kv(args.kcat_consumer_config)
    kcat_exe = None if args.no_kcat else shutil.which("kcat")
    if kcat_exe is None and not args.no_kcat:
        log("WARNING: kcat not found (Debian package kcat); skipping the kcat phases")
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
            "kcat": kcat_version(kcat_exe) if kcat_exe else None,
            "kcat_producer_config": {"acks": "1", **kcat_producer_extra},
            "kcat_consumer_config": kcat_consumer_extra,
            "redis_pipeline": args.redis_pipeline,
            "loadavg_before": loadavg(),
        },
    }
    profiles: list[ProfileResult] = []
    broker = Broker(workdir, args.override, log)
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
        pr.records_per_batch = records_per_batch(broker.data_dir, [topic])
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

        if kcat_exe is not None:
            broker_pids: dict[str, tuple[int | None, int | None]] = {
                "broker": (broker.pid, None),
                "broker-loop": (broker.pid, broker.pid),
            }
            files: dict[int, Path] = {}
            kcat_results: dict[str, Any] = {}
            result["kcat"] = kcat_results
            for procs in [1, args.kcat_parallel] if args.kcat_parallel > 1 else [1]:
                topics = [f"{topic}-kcat{procs}-{i}" for i in range(procs)]
                for t in topics:
                    create_topic(broker.bootstrap, t, args.partitions)
                counts = split_records(n, procs)
                for kind, extra in (
                    ("produce", kcat_producer_extra),
                    ("consume", kcat_consumer_extra),
                ):
                    log(f"kcat {kind} x{procs}: {n:,} records, topics {', '.join(topics)}")
                    with prof(f"kcat-{kind}-x{procs}"):
                        kr = kcat_phase(
                            kind,
                            kcat_exe,
                            broker.bootstrap,
                            topics,
                            counts,
                            size,
                            workdir,
                            files,
                            CpuMeter(broker_pids),
                            extra,
                            args.partitions,
                            broker.data_dir,
                        )
                    log(
                        f"kcat {kind} x{procs}: {kr.records_per_s:,.0f} rec/s, broker "
                        f"{kr.broker_cost.cpu_s_per_million} CPU s/1M, CPU {kr.cpu_percent}"
                    )
                    kcat_results[f"{kind}_x{procs}"] = asdict(kr)
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

    result["targets"] = target_summary(result)
    result["profiles"] = [asdict(p) for p in profiles]
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
