"""Apache Kafka 4.x and Odradek side by side: the same clients, the same box, one run.

    python3 benchmarks/vs_kafka.py                      # 1M x 100 B and 200k x 1 KB, table
    python3 benchmarks/vs_kafka.py --repeat 2 --json    # alternate the order, JSON on stdout
    python3 benchmarks/vs_kafka.py --quick              # smoke check (small counts)
    python3 benchmarks/vs_kafka.py --profile ck_consume # + py-spy on Odradek in that phase

Each broker runs alone (single node, fresh data directory, default settings; Kafka in KRaft
mode from the jars ``scripts/kafka_reference.sh`` fetched, with ``-Xmx1g -Xms1g`` as
``kafka-server-start.sh`` and the JVM flags of ``kafka-run-class.sh``). For every record size it
measures, with the same clients against each broker:

- produce throughput: confluent-kafka ``acks=1`` and ``acks=all``, ``kcat -P -l FILE``
  (Debian's kcat) and ``kafka-producer-perf-test --throughput -1`` (``acks=1``);
- consume throughput: confluent-kafka (``assign`` from offset 0) and ``kafka-consumer-perf-test``
  (its fetch rate, i.e. without the group join);
- produce latency p50 / p99 / p99.9 with ``kafka-producer-perf-test --throughput R`` where R is
  half of the lower of the two brokers' perf-test peaks, so both are measured at the same rate
  (the brokers are started again for this phase, after both throughput sessions);
- broker CPU seconds per million records (whole process, all threads, from ``/proc``) in the
  perf-test produce and consume phases, and broker RSS (peak ``VmHWM`` and ``VmRSS`` at the end).

The table has Kafka, Odradek and the ratio Odradek / Kafka per row; "goal" says whether higher
(throughput) or lower (latency, CPU, memory) is better. The 1-minute load average is logged
before every phase (and kept in the JSON): on a shared machine a high one means a noisy run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from bench_support import (
    Broker,
    cpu_times,
    create_topic,
    loadavg,
    make_log,
    run_seconds,
    runq_wait_seconds,
    table,
)
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from produce_consume import (
    ProfileResult,
    PySpy,
    kcat_version,
    read_collapsed,
    summarize_profile,
    write_flamegraph,
    write_records_file,
)

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO))
from tests.integration.kafka_reference import KafkaServer, KafkaTools, kafka_home  # noqa: E402

log = make_log("vs")

# The JVM flags of Kafka's kafka-run-class.sh (KAFKA_JVM_PERFORMANCE_OPTS): the launcher's own
# default (-XX:TieredStopAtLevel=1, quick start-up for short-lived tools) would keep the C2 JIT
# out of the broker and of the perf tools.
JVM_OPTS = (
    "-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 "
    "-XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true"
)
BROKER_HEAP = "-Xmx1g -Xms1g"  # kafka-server-start.sh
TOOL_HEAP = "-Xmx512M"  # kafka-producer-perf-test.sh / kafka-consumer-perf-test.sh
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
BROKERS = ("kafka", "odradek")
THROUGHPUT_PHASES = (
    "ck_produce_acks1",
    "ck_produce_acksall",
    "kcat_produce",
    "perf_produce",
    "ck_consume",
    "perf_consume",
)
PERF_FINAL = re.compile(
    r"^(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th",
    re.M,
)


class Target(Protocol):
    @property
    def pid(self) -> int: ...
    @property
    def bootstrap(self) -> str: ...
    def stop(self) -> None: ...


class KafkaTarget:
    """:class:`KafkaServer` (tests/integration/kafka_reference.py) with the benchmark's JVM."""

    def __init__(self, tools: KafkaTools, workdir: Path) -> None:
        self.server = KafkaServer(tools, workdir / "kafka")

    def start(self) -> None:
        os.environ["KAFKA_HEAP_OPTS"] = BROKER_HEAP
        os.environ["KAFKA_JVM_OPTS"] = JVM_OPTS
        log(f"starting Apache Kafka {self.server.tools.version} ({BROKER_HEAP} {JVM_OPTS})")
        self.server.start()
        log(f"Kafka ready on {self.bootstrap} (pid {self.pid})")

    @property
    def pid(self) -> int:
        assert self.server.proc is not None
        return self.server.proc.pid  # kafka-run execs java: this is the JVM

    @property
    def bootstrap(self) -> str:
        return self.server.bootstrap_servers

    def stop(self) -> None:
        self.server.stop()


def start_target(name: str, tools: KafkaTools, workdir: Path) -> Target:
    workdir.mkdir(parents=True, exist_ok=True)
    if name == "kafka":
        k = KafkaTarget(tools, workdir)
        k.start()
        return k
    # As KafkaServer: no initial rebalance delay (Kafka's default 3 s would land in the join
    # time of kafka-consumer-perf-test; it is not in the rate the table shows either way).
    b = Broker(workdir / "odradek", overrides=["group.initial.rebalance.delay.ms=0"], log=log)
    b.start()
    return b


# --------------------------------------------------------------------------------------------
# Measuring the broker


def broker_cpu(pid: int) -> float:
    """CPU seconds of the whole broker process: the larger of the tick count of
    ``/proc/PID/stat`` (which keeps the threads that exited, 10 ms steps) and the nanosecond sum
    of the live threads' schedstat (which does not)."""
    user, system = cpu_times(pid)
    return max(user + system, run_seconds(pid) or 0.0)


def broker_runq_wait(pid: int) -> float:
    """Seconds the broker's live threads spent runnable but waiting for a CPU (schedstat
    field 2): on a busy box, how much of a phase the broker was held back by other work."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    return sum(runq_wait_seconds(pid, int(t)) for t in tids)


def rss_mb(pid: int) -> dict[str, float]:
    """``VmHWM`` (peak) and ``VmRSS`` of the process in MB (1e6 bytes); zeros if gone."""
    out = {"peak": 0.0, "now": 0.0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out["peak" if key == "VmHWM" else "now"] = int(value.split()[0]) * 1024 / 1e6
    except OSError:
        pass
    return out


class Session:
    """One broker's run: every phase is logged with the load average and its broker CPU."""

    def __init__(self, name: str, target: Target, profile: set[str], outdir: Path) -> None:
        self.name = name
        self.target = target
        self.profile = profile
        self.outdir = outdir
        self.profiles: list[ProfileResult] = []

    @contextmanager
    def phase(self, label: str, result: dict[str, Any]) -> Iterator[None]:
        result["loadavg"] = loadavg()
        log(f"{self.name} {label}: load average {result['loadavg']}")
        spy = None
        if self.name == "odradek" and (label.split()[0] in self.profile or "all" in self.profile):
            stamp = time.strftime("%Y%m%d-%H%M%S")
            raw = BENCH_DIR / f"vs-profile-{stamp}-{label.replace(' ', '-')}.txt"
            spy = PySpy(self.target.pid, raw, 100, ["--gil"])
            spy.start()
        cpu0 = broker_cpu(self.target.pid)
        wait0 = broker_runq_wait(self.target.pid)
        try:
            yield
        finally:
            result["broker_cpu_s"] = round(broker_cpu(self.target.pid) - cpu0, 3)
            result["broker_runq_wait_s"] = round(broker_runq_wait(self.target.pid) - wait0, 3)
            if spy is not None:
                spy.stop()
                stacks = read_collapsed(spy.raw_path)
                svg = spy.raw_path.with_suffix(".svg")
                write_flamegraph(stacks, svg, f"odradek broker, {label}")
                samples, top_self, top_total = summarize_profile(stacks, 25)
                self.profiles.append(
                    ProfileResult(label, str(spy.raw_path), str(svg), samples,
                                  round(spy.duration_s, 3), 100, top_self, top_total)
                )
        n = result.get("records", 0)
        if n:
            result["cpu_s_per_m"] = round(result["broker_cpu_s"] * 1e6 / n, 3)


def finish(result: dict[str, Any], n: int, size: int, seconds: float) -> dict[str, Any]:
    result.update(records=n, seconds=round(seconds, 3))
    result["records_per_s"] = round(n / seconds) if seconds > 0 else 0
    result["mb_per_s"] = round(result["records_per_s"] * size / 1e6, 2)
    return result


def log_end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{topic}"})
    try:
        return sum(
            c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        )
    finally:
        c.close()


# --------------------------------------------------------------------------------------------
# Phases (each returns what the client saw; the session adds the broker's CPU)


def ck_produce(bootstrap: str, topic: str, n: int, size: int, acks: str) -> float:
    errors: list[KafkaError] = []
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "queue.buffering.max.messages": max(100_000, min(n + 1000, 10_000_000)),
        "delivery.report.only.error": True,
        "on_delivery": lambda err, _msg: errors.append(err),
    })
    producer.list_topics(topic, timeout=10)
    value = b"x" * size
    produce, poll = producer.produce, producer.poll
    t0 = time.perf_counter()
    for i in range(n):
        try:
            produce(topic, value)
        except BufferError:
            poll(0.05)
            produce(topic, value)
        if i % 10_000 == 0:
            poll(0)
    if producer.flush(300):
        raise RuntimeError("records undelivered after flush")
    seconds = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, first: {errors[0]}")
    return seconds


def ck_consume(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"vs-{topic}-{time.monotonic_ns()}",
        "enable.auto.commit": False,
    })
    try:
        c.list_topics(topic, timeout=10)
        t0 = time.perf_counter()
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got = 0
        deadline = time.monotonic() + 300
        while got < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"consumed {got} of {n} in 300 s")
            for m in c.consume(min(10_000, n - got), 1.0):
                err = m.error()
                if err is None:
                    got += 1
                elif err.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"consume error: {err}")
        return time.perf_counter() - t0
    finally:
        c.close()


def kcat_produce(bootstrap: str, topic: str, path: Path) -> float:
    cmd = ["kcat", "-P", "-b", bootstrap, "-t", topic, "-X", "acks=1", "-l", str(path)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"kcat exited {r.returncode}: {r.stderr[-2000:]}")
    return seconds


def run_java(tools: KafkaTools, cls: str, *args: str) -> str:
    env = dict(os.environ, KAFKA_HEAP_OPTS=TOOL_HEAP, KAFKA_JVM_OPTS=JVM_OPTS)
    cmd = [str(tools.home / "bin" / "kafka-run"), "--line", tools.line, cls, *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise RuntimeError(f"{cls} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout


def perf_produce(tools: KafkaTools, bootstrap: str, topic: str, n: int, size: int,
                 rate: int) -> dict[str, Any]:
    out = run_java(tools, PRODUCER_PERF, "--topic", topic, "--num-records", str(n),
                   "--record-size", str(size), "--throughput", str(rate),
                   "--bootstrap-server", bootstrap, "--command-property", "acks=1")
    m = PERF_FINAL.search(out)
    if m is None:
        raise RuntimeError(f"no summary line in kafka-producer-perf-test output:\n{out[-2000:]}")
    if int(m.group(1)) != n:
        raise RuntimeError(f"kafka-producer-perf-test sent {m.group(1)} of {n}")
    rps = float(m.group(2))
    return {
        "records": n, "records_per_s": round(rps), "mb_per_s": round(rps * size / 1e6, 2),
        "avg_ms": float(m.group(4)), "max_ms": float(m.group(5)), "p50_ms": int(m.group(6)),
        "p95_ms": int(m.group(7)), "p99_ms": int(m.group(8)), "p999_ms": int(m.group(9)),
    }


def perf_consume(tools: KafkaTools, bootstrap: str, topic: str, n: int, size: int) -> dict[str, Any]:
    out = run_java(tools, CONSUMER_PERF, "--bootstrap-server", bootstrap, "--topic", topic,
                   "--num-records", str(n), "--timeout", "60000",
                   "--group", f"perf-{topic}-{time.monotonic_ns()}")
    lines = [ln for ln in out.strip().splitlines() if "," in ln]
    fields = dict(zip([h.strip() for h in lines[-2].split(",")],
                      [v.strip() for v in lines[-1].split(",")], strict=True))
    got = int(fields["data.consumed.in.nMsg"])
    if got < n:
        raise RuntimeError(f"kafka-consumer-perf-test consumed {got} of {n}:\n{out[-2000:]}")
    rps = float(fields["fetch.nMsg.sec"])
    return {
        "records": got, "records_per_s": round(rps), "mb_per_s": round(rps * size / 1e6, 2),
        "with_join_records_per_s": round(float(fields["nMsg.sec"])),
        "rebalance_ms": float(fields["rebalance.time.ms"]),
    }


# --------------------------------------------------------------------------------------------
# Sessions


def warm_up(s: Session, tools: KafkaTools, partitions: int, records: int) -> dict[str, Any]:
    """Unmeasured traffic right after the start, the same for both brokers: a JVM runs
    interpreted until its JIT has seen the hot paths, so the first phase would pay for that."""
    res: dict[str, Any] = {}
    if records <= 0:
        return res
    topic = "vs-warmup"
    create_topic(s.target.bootstrap, topic, partitions)
    with s.phase("warmup", res):
        res.update(perf_produce(tools, s.target.bootstrap, topic, records, 100, -1))
        ck_consume(s.target.bootstrap, topic, partitions, records)
    return res


def throughput_session(
    s: Session, tools: KafkaTools, sizes: list[tuple[int, int]], partitions: int, files: Path,
    warmup: int,
) -> dict[str, Any]:
    bs = s.target.bootstrap
    out: dict[str, Any] = {"warmup": warm_up(s, tools, partitions, warmup)}
    for size, n in sizes:
        res: dict[str, dict[str, Any]] = {ph: {} for ph in THROUGHPUT_PHASES}
        tag = f"{size}B"
        topics = {ph: f"vs-{tag}-{ph}" for ph in THROUGHPUT_PHASES[:4]}
        for t in topics.values():
            create_topic(bs, t, partitions)
        for ph, acks in (("ck_produce_acks1", "1"), ("ck_produce_acksall", "all")):
            with s.phase(f"{ph} {tag}", res[ph]):
                finish(res[ph], n, size, ck_produce(bs, topics[ph], n, size, acks))
        with s.phase(f"kcat_produce {tag}", res["kcat_produce"]):
            secs = kcat_produce(bs, topics["kcat_produce"], files / f"records-{size}-{n}.txt")
            finish(res["kcat_produce"], n, size, secs)
        with s.phase(f"perf_produce {tag}", res["perf_produce"]):
            res["perf_produce"].update(
                perf_produce(tools, bs, topics["perf_produce"], n, size, -1))
        for ph in THROUGHPUT_PHASES[:4]:
            got = log_end_offsets(bs, topics[ph], partitions)
            if got != n:
                raise RuntimeError(f"{s.name} {ph} {tag}: {got} records in the log, not {n}")
        with s.phase(f"ck_consume {tag}", res["ck_consume"]):
            finish(res["ck_consume"], n, size,
                   ck_consume(bs, topics["ck_produce_acks1"], partitions, n))
        with s.phase(f"perf_consume {tag}", res["perf_consume"]):
            res["perf_consume"].update(
                perf_consume(tools, bs, topics["ck_produce_acks1"], n, size))
        for ph in THROUGHPUT_PHASES:
            r = res[ph]
            log(f"{s.name} {ph} {tag}: {r['records_per_s']:,} rec/s, {r['mb_per_s']} MB/s, "
                f"broker {r['cpu_s_per_m']} CPU s/1M, waited {r['broker_runq_wait_s']} s for a CPU")
        out[tag] = res
    out["rss_mb"] = rss_mb(s.target.pid)
    return out


def latency_session(
    s: Session, tools: KafkaTools, sizes: list[tuple[int, int]], partitions: int,
    rates: dict[str, int], seconds: float, warmup: int,
) -> dict[str, Any]:
    out: dict[str, Any] = {"warmup": warm_up(s, tools, partitions, warmup)}
    for size, n in sizes:
        tag = f"{size}B"
        rate = rates[tag]
        count = max(100, min(n, int(rate * seconds)))
        topic = f"vs-{tag}-latency"
        create_topic(s.target.bootstrap, topic, partitions)
        res: dict[str, Any] = {"rate": rate}
        with s.phase(f"latency {tag}", res):
            res.update(perf_produce(tools, s.target.bootstrap, topic, count, size, rate))
        log(f"{s.name} latency {tag} at {rate:,} rec/s: p50 {res['p50_ms']} ms, "
            f"p99 {res['p99_ms']} ms, p99.9 {res['p999_ms']} ms")
        out[tag] = res
    out["rss_mb"] = rss_mb(s.target.pid)
    return out


def run_session(
    name: str, tools: KafkaTools, workdir: Path, profile: set[str],
    body: Callable[[Session], dict[str, Any]],
) -> tuple[dict[str, Any], list[ProfileResult]]:
    target = start_target(name, tools, workdir)
    try:
        s = Session(name, target, profile, workdir)
        return body(s), s.profiles
    finally:
        target.stop()
        log(f"{name} stopped")


# --------------------------------------------------------------------------------------------
# Rows


ROW_SPECS: list[tuple[str, str, str, bool]] = [
    # (key suffix, label, unit, higher is better)
    ("ck_produce_acks1", "produce confluent-kafka acks=1", "rec/s", True),
    ("ck_produce_acksall", "produce confluent-kafka acks=all", "rec/s", True),
    ("kcat_produce", "produce kcat -P", "rec/s", True),
    ("perf_produce", "produce kafka-producer-perf-test", "rec/s", True),
    ("ck_consume", "consume confluent-kafka", "rec/s", True),
    ("perf_consume", "consume kafka-consumer-perf-test", "rec/s", True),
    ("latency_p50", "produce latency p50", "ms", False),
    ("latency_p99", "produce latency p99", "ms", False),
    ("latency_p999", "produce latency p99.9", "ms", False),
    ("cpu_produce", "broker CPU, produce (perf-test)", "s/1M rec", False),
    ("cpu_consume", "broker CPU, consume (perf-test)", "s/1M rec", False),
]


def values(run: dict[str, Any], tag: str) -> dict[str, tuple[float, float | None]]:
    """Row key -> (value, MB/s or None) for one broker's run and one size."""
    t, lat = run["throughput"][tag], run["latency"][tag]
    v: dict[str, tuple[float, float | None]] = {
        ph: (t[ph]["records_per_s"], t[ph]["mb_per_s"]) for ph in THROUGHPUT_PHASES
    }
    for q in ("p50", "p99", "p999"):
        v[f"latency_{q}"] = (lat[f"{q}_ms"], None)
    v["cpu_produce"] = (t["perf_produce"]["cpu_s_per_m"], None)
    v["cpu_consume"] = (t["perf_consume"]["cpu_s_per_m"], None)
    return v


def build_rows(reps: list[dict[str, dict[str, Any]]], tags: list[str]) -> list[dict[str, Any]]:
    """One row per measure: the median over the repetitions for each broker and the ratio."""
    rows: list[dict[str, Any]] = []

    def add(key: str, label: str, unit: str, higher: bool, per: dict[str, list[float]],
            mb: dict[str, list[float]] | None = None) -> None:
        k, o = statistics.median(per["kafka"]), statistics.median(per["odradek"])
        row: dict[str, Any] = {
            "key": key, "label": label, "unit": unit, "higher_is_better": higher,
            "kafka": k, "odradek": o, "ratio": o / k if k else None,
        }
        if mb is not None:
            row["kafka_mb_per_s"] = statistics.median(mb["kafka"])
            row["odradek_mb_per_s"] = statistics.median(mb["odradek"])
        rows.append(row)

    for tag in tags:
        rate = statistics.median(r["kafka"]["latency"][tag]["rate"] for r in reps)
        for suffix, label, unit, higher in ROW_SPECS:
            per = {b: [values(r[b], tag)[suffix][0] for r in reps] for b in BROKERS}
            mbs = {b: [values(r[b], tag)[suffix][1] or 0.0 for r in reps] for b in BROKERS}
            if suffix.startswith("latency"):
                label = f"{label} at {rate:,.0f} rec/s"
            add(f"{tag}.{suffix}", f"{tag} {label}", unit, higher, per,
                mbs if unit == "rec/s" else None)
    for which, label in (("peak", "broker RSS, peak"), ("now", "broker RSS, after the run")):
        per = {b: [r[b]["throughput"]["rss_mb"][which] for r in reps] for b in BROKERS}
        if which == "peak":
            per = {b: [max(r[b]["throughput"]["rss_mb"]["peak"], r[b]["latency"]["rss_mb"]["peak"])
                       for r in reps] for b in BROKERS}
        add(f"rss_{which}", label, "MB", False, per)
    return rows


def fmt(v: float, unit: str, mb: float | None) -> str:
    if unit == "rec/s":
        return f"{v:,.0f} ({mb:.1f} MB/s)"
    if unit == "MB" or v >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def print_rows(rows: list[dict[str, Any]]) -> None:
    out: list[tuple[str, ...]] = []
    for r in rows:
        ratio = r["ratio"]
        good = ratio is not None and (ratio >= 1 if r["higher_is_better"] else ratio <= 1)
        out.append((
            r["label"], r["unit"],
            fmt(r["kafka"], r["unit"], r.get("kafka_mb_per_s")),
            fmt(r["odradek"], r["unit"], r.get("odradek_mb_per_s")),
            "-" if ratio is None else f"{ratio:.2f}",
            ("≥1" if r["higher_is_better"] else "≤1") + ("" if good else "  behind"),
        ))
    table(("measure", "unit", "Kafka", "Odradek", "Odradek/Kafka", "goal"), out)


def markdown(rows: list[dict[str, Any]], loads: list[float]) -> str:
    """The rows as a compact Markdown table (for the README): one line per measure, the record
    sizes side by side, Kafka / Odradek / ratio for each; the latency rates and the load-average
    range of the run underneath."""
    by_key = {r["key"]: r for r in rows}
    tags = sorted({k.split(".")[0] for k in by_key if "." in k}, key=lambda t: int(t[:-1]))

    def cells(r: dict[str, Any]) -> str:
        k = fmt(r["kafka"], r["unit"], r.get("kafka_mb_per_s")).split(" (")[0]
        o = fmt(r["odradek"], r["unit"], r.get("odradek_mb_per_s")).split(" (")[0]
        ratio = "-" if r["ratio"] is None else f"**{r['ratio']:.2f}**"
        return f"{k} | {o} | {ratio}"

    head = " | ".join(f"{t} Kafka | {t} Odradek | {t} ratio" for t in tags)
    lines = [
        f"| measure (unit, better) | {head} |",
        "| --- |" + " ---: |" * (3 * len(tags)),
    ]
    for suffix, label, unit, higher in ROW_SPECS:
        goal = "higher" if higher else "lower"
        lines.append(
            f"| {label} ({unit}, {goal}) | "
            + " | ".join(cells(by_key[f"{t}.{suffix}"]) for t in tags) + " |"
        )
    for key in ("rss_peak", "rss_now"):
        r = by_key[key]
        blank = " | ".join(["", "", ""] * (len(tags) - 1))
        lines.append(f"| {r['label']} (MB, lower) | {cells(r)} | {blank} |")
    rates = ", ".join(
        re.sub(r".* at ", f"{t} at ", by_key[f"{t}.latency_p50"]["label"]) for t in tags
    )
    lines.append("")
    lines.append(f"Latency measured at {rates} (half of the lower perf-test peak).")
    if loads:
        lines.append(f"Load average during the run: {min(loads):.1f}–{max(loads):.1f} "
                     f"({os.cpu_count()} CPUs).")
    return "\n".join(lines)


def phase_loads(reps: list[dict[str, dict[str, Any]]]) -> list[float]:
    loads: list[float] = []
    for run in reps:
        for b in BROKERS:
            for session in run[b].values():
                for tag_res in session.values():
                    for res in tag_res.values() if isinstance(tag_res, dict) else ():
                        if isinstance(res, dict) and res.get("loadavg", "?") != "?":
                            loads.append(float(res["loadavg"]))
                    if isinstance(tag_res, dict) and "loadavg" in tag_res:
                        loads.append(float(tag_res["loadavg"]))
    return loads


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records-small", type=int, help="100-byte records (default 1,000,000)")
    ap.add_argument("--records-large", type=int, help="1 KB records (default 200,000)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--latency-seconds", type=float, help="length of each latency phase (10)")
    ap.add_argument("--warmup", type=int,
                    help="unmeasured 100 B records produced and consumed after each start "
                    "(default 500,000; --quick 2,000)")
    ap.add_argument("--repeat", type=int, default=1, help="repetitions (order alternates)")
    ap.add_argument("--quick", action="store_true", help="smoke check: 20k x 100 B, 5k x 1 KB")
    ap.add_argument("--json", action="store_true", help="JSON on stdout (the log is on stderr)")
    ap.add_argument("--markdown", action="store_true",
                    help="print the table as Markdown (as in the README)")
    ap.add_argument("--profile", default="",
                    help="py-spy --gil on Odradek in these phases (comma-separated, e.g. "
                    "ck_consume,perf_produce, or all); raw stacks and an SVG in benchmarks/")
    ap.add_argument("--workdir", type=Path, help="keep data and logs here (default: temporary)")
    args = ap.parse_args(argv)
    small = args.records_small or (20_000 if args.quick else 1_000_000)
    large = args.records_large or (5_000 if args.quick else 200_000)
    lat_s = args.latency_seconds or (2.0 if args.quick else 10.0)
    warm = args.warmup if args.warmup is not None else (2_000 if args.quick else 500_000)
    sizes = [(100, small), (1024, large)]
    tags = [f"{s}B" for s, _ in sizes]

    tools = KafkaTools(kafka_home())
    if not (tools.home / "bin" / "kafka-run").exists() or shutil.which("java") is None:
        log(f"Apache Kafka is not fetched under {tools.home} (scripts/kafka_reference.sh) "
            "or java is missing")
        return 2
    if shutil.which("kcat") is None:
        log("kcat is not installed (Debian: apt-get install kcat)")
        return 2
    profile = {p for p in args.profile.split(",") if p}
    if profile and shutil.which("py-spy") is None:
        log("--profile needs py-spy (pip install py-spy)")
        return 2

    root = args.workdir or Path(tempfile.mkdtemp(prefix="odradek-vs-kafka-"))
    root.mkdir(parents=True, exist_ok=True)
    files = root / "files"
    files.mkdir(exist_ok=True)
    for size, n in sizes:
        write_records_file(files / f"records-{size}-{n}.txt", n, size)
    kcat_v = kcat_version("kcat")
    log(f"Kafka {tools.version}, Odradek from {REPO}, {kcat_v}; sizes {sizes}, "
        f"{args.partitions} partitions, {os.cpu_count()} CPUs, load average {loadavg()}")

    reps: list[dict[str, dict[str, Any]]] = []
    profiles: list[ProfileResult] = []
    try:
        for rep in range(args.repeat):
            order = BROKERS if rep % 2 == 0 else BROKERS[::-1]
            log(f"repetition {rep + 1}/{args.repeat}: {' then '.join(order)}")
            runs: dict[str, dict[str, Any]] = {b: {} for b in BROKERS}
            for b in order:
                runs[b]["throughput"], prof = run_session(
                    b, tools, root / f"r{rep}-{b}-tp", profile,
                    lambda s: throughput_session(s, tools, sizes, args.partitions, files, warm))
                profiles += prof
            rates = {
                t: max(1, min(runs[b]["throughput"][t]["perf_produce"]["records_per_s"]
                              for b in BROKERS) // 2)
                for t in tags
            }
            log(f"latency rates (half of the lower perf-test peak): {rates}")
            for b in order:
                runs[b]["latency"], _ = run_session(
                    b, tools, root / f"r{rep}-{b}-lat", set(),
                    lambda s, r=rates: latency_session(  # type: ignore[misc]
                        s, tools, sizes, args.partitions, r, lat_s, warm))
            runs["order"] = {"brokers": list(order)}  # type: ignore[dict-item]
            reps.append(runs)
    finally:
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)

    rows = build_rows(reps, tags)
    result = {
        "config": {
            "kafka_version": tools.version, "kcat": kcat_v, "sizes": sizes,
            "partitions": args.partitions, "repeat": args.repeat, "latency_seconds": lat_s,
            "warmup_records": warm,
            "cpus": os.cpu_count(), "kafka_jvm_opts": JVM_OPTS, "kafka_heap_opts": BROKER_HEAP,
        },
        "rows": rows,
        "loadavg_range": [min(loads), max(loads)] if (loads := phase_loads(reps)) else None,
        "runs": reps,
        "profiles": [asdict(p) for p in profiles],
    }
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        with contextlib.redirect_stdout(sys.stderr):
            print_rows(rows)
    elif args.markdown:
        print(markdown(rows, phase_loads(reps)))
    else:
        print_rows(rows)
        print(f"\nload average during the run: {min(loads):.1f}–{max(loads):.1f} "
              f"({os.cpu_count()} CPUs)" if (loads := phase_loads(reps)) else "")
        for p in profiles:
            print(f"\nOdradek profile, {p.phase}: {p.samples} samples (py-spy --gil), top self:")
            for fn, _n, pct in p.top_self[:15]:
                print(f"  {pct:6.2f}%  {fn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
