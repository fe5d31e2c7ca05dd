#!/usr/bin/env python3
"""Consumer-group benchmark for Odradek: rebalance time and offset-commit throughput.

    python3 benchmarks/groups.py                    # table
    python3 benchmarks/groups.py --json             # JSON on stdout (log on stderr)
    python3 benchmarks/groups.py --repeats 3 --no-commits

1. **join** — for each ``group.initial.rebalance.delay.ms`` in ``--delays`` (3000, Kafka's
   default, and 0) a broker is started with otherwise default group settings and a topic with
   ``--partitions`` (6) partitions. For each assignment strategy (eager ``range``,
   ``cooperative-sticky`` and, when the broker advertises ConsumerGroupHeartbeat (API key 68),
   ``group.protocol=consumer`` from KIP-848), two confluent-kafka consumers in their own processes
   join a fresh group and the benchmark waits until they own disjoint halves of the topic; then a
   third one subscribes, and the time from its ``subscribe()`` until all three own disjoint,
   non-empty, balanced assignments that cover every partition is measured (from the members'
   ``on_assign`` / ``on_revoke`` callbacks, timestamped with the system-wide monotonic clock).
   ``--repeats`` (5) times each; median, min and max are reported.
2. **commits** — on a fresh broker: synchronous ``commit(offsets=[tp], asynchronous=False)``
   from one group member (latency-bound: p50/p99 per commit), asynchronous commits from 1 and 4
   members with at most ``--async-window`` commits in flight per member (completed ``on_commit``
   callbacks per second over ``--commit-seconds``), and raw OffsetCommit requests pipelined over
   one connection with :class:`odradek.network.client.NetworkClient` (the broker-side ceiling).
   Every phase reports broker CPU seconds per 1000 commits (``/proc/<pid>/task/*/schedstat``).

See README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import queue
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

from bench_support import (
    Broker,
    create_topic,
    loadavg,
    machine_busy_seconds,
    make_log,
    percentile,
    run_seconds,
    runq_wait_seconds,
    table,
)

CONSUMER_GROUP_HEARTBEAT_KEY = 68
STRATEGIES = ("range", "cooperative-sticky", "consumer")
CLASSIC_ONLY = {"heartbeat.interval.ms", "session.timeout.ms", "partition.assignment.strategy"}
# Spawned, not forked: the parent holds librdkafka/asyncio state that must not be forked.
CTX = mp.get_context("spawn")


log = make_log("groups")


# --------------------------------------------------------------------------------------------
# CPU from /proc


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds of all current threads of ``pid`` (schedstat, ns resolution); 0 if gone."""
    return run_seconds(pid) or 0.0


class BrokerMeter:
    """Broker CPU, its event-loop thread's run-queue wait and the machine's CPU over a phase."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._cpu0 = self._runq0 = self._m0 = 0.0

    def start(self) -> None:
        self._cpu0 = process_cpu_seconds(self.pid)
        self._runq0 = runq_wait_seconds(self.pid, self.pid)
        self._m0 = machine_busy_seconds()

    def stop(self) -> tuple[float, float, float]:
        """(broker CPU s, loop run-queue wait s, machine busy CPU s) since ``start``."""
        return (
            process_cpu_seconds(self.pid) - self._cpu0,
            runq_wait_seconds(self.pid, self.pid) - self._runq0,
            machine_busy_seconds() - self._m0,
        )


# --------------------------------------------------------------------------------------------
# The broker under test


async def _api_versions(host: str, port: int) -> dict[int, tuple[int, int]]:
    from odradek.network.client import NetworkClient
    from odradek.protocol import messages as m

    async with NetworkClient(host, port, client_id="odradek-bench-groups") as c:
        r = await c.send(
            m.API_VERSIONS,
            3,
            {"client_software_name": "odradek-bench", "client_software_version": "1"},
        )
    return {k["api_key"]: (k["min_version"], k["max_version"]) for k in r["api_keys"]}


def api_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    host, _, port = bootstrap.rpartition(":")
    return asyncio.run(_api_versions(host, int(port)))


# --------------------------------------------------------------------------------------------
# Group members (each in its own spawned process, so each has its own librdkafka client)


def consumer_config(
    bootstrap: str, group: str, strategy: str, extra: dict[str, str] | None = None
) -> dict[str, Any]:
    """librdkafka settings of a member; ``extra`` is ``-C KEY=VALUE``."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if strategy == "consumer":
        conf["group.protocol"] = "consumer"
    else:
        conf["partition.assignment.strategy"] = strategy
    for key, value in (extra or {}).items():
        # The classic protocol's client-side timers are rejected with group.protocol=consumer.
        if strategy == "consumer" and key in CLASSIC_ONLY:
            continue
        conf[key] = value
    return conf


def member_main(
    idx: int,
    bootstrap: str,
    group: str,
    topic: str,
    strategy: str,
    events: Any,
    go: EventType,
    stop: EventType,
    extra: dict[str, str],
) -> None:
    """Join ``group`` on ``go``; report the owned partitions after every rebalance callback."""
    from confluent_kafka import Consumer

    owned: set[int] = set()

    def report(kind: str) -> None:
        events.put((kind, idx, time.monotonic(), sorted(owned)))

    def on_assign(_c: Any, parts: list[Any]) -> None:
        owned.update(p.partition for p in parts)
        report("assign")

    def on_revoke(_c: Any, parts: list[Any]) -> None:
        owned.difference_update(p.partition for p in parts)
        report("revoke")

    def on_lost(_c: Any, parts: list[Any]) -> None:
        owned.difference_update(p.partition for p in parts)
        report("lost")

    consumer = Consumer(consumer_config(bootstrap, group, strategy, extra))
    try:
        events.put(("ready", idx, time.monotonic(), []))
        go.wait()
        events.put(("subscribe", idx, time.monotonic(), []))
        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        while not stop.is_set():
            consumer.poll(0.02)
    except Exception as e:  # reported to the parent, which fails the run
        events.put(("error", idx, time.monotonic(), [repr(e)]))
    finally:
        consumer.close()


def balanced_cover(owned: dict[int, list[int]], members: list[int], partitions: int) -> bool:
    """Every member owns something, the sets are disjoint, cover all partitions, and are
    balanced (sizes differ by at most one)."""
    sets = [owned.get(i, []) for i in members]
    sizes = [len(s) for s in sets]
    if min(sizes) == 0 or max(sizes) - min(sizes) > 1:
        return False
    union = [p for s in sets for p in s]
    return len(union) == partitions and set(union) == set(range(partitions))


class GroupWatcher:
    """Follows the members' events and tells when a set of them is stable."""

    def __init__(self, events: Any) -> None:
        self.events = events
        self.owned: dict[int, list[int]] = {}
        self.last_change: dict[int, float] = {}
        self.subscribed: dict[int, float] = {}
        self.ready: set[int] = set()
        self.callbacks: dict[int, int] = {}

    def pump(self, timeout: float) -> None:
        try:
            kind, idx, ts, parts = self.events.get(timeout=timeout)
        except queue.Empty:
            return
        if kind == "error":
            raise RuntimeError(f"member {idx} failed: {parts[0]}")
        if kind == "ready":
            self.ready.add(idx)
        elif kind == "subscribe":
            self.subscribed[idx] = ts
        else:
            self.callbacks[idx] = self.callbacks.get(idx, 0) + 1
            if self.owned.get(idx) != parts or idx not in self.last_change:
                self.last_change[idx] = ts
            self.owned[idx] = parts

    def wait_ready(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.ready) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(self.ready)} of {count} members started")
            self.pump(0.2)

    def wait_stable(self, members: list[int], partitions: int, timeout: float) -> float:
        """Monotonic time at which ``members`` reached a balanced cover (their last change)."""
        deadline = time.monotonic() + timeout
        while not balanced_cover(self.owned, members, partitions):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"group not stable after {timeout}s: "
                    f"{ {i: self.owned.get(i) for i in members} }"
                )
            self.pump(0.2)
        return max(self.last_change[i] for i in members)


@dataclass
class JoinRun:
    first_two_s: float  # from the first of the two subscribe() calls to their stable split
    third_join_s: float  # from the third member's subscribe() to the stable 3-way split
    callbacks: int  # rebalance callbacks the three members saw during the third join
    waited_s: float  # from the two-member group becoming stable to the third subscribe()


def join_once(
    bootstrap: str, group: str, topic: str, strategy: str, partitions: int, timeout: float,
    extra: dict[str, str],
    wait_s: float,
) -> JoinRun:
    events = CTX.Queue()
    gos = [CTX.Event() for _ in range(3)]
    stop = CTX.Event()
    procs = [
        CTX.Process(
            target=member_main,
            args=(i, bootstrap, group, topic, strategy, events, gos[i], stop, extra),
            daemon=True,
        )
        for i in range(3)
    ]
    for p in procs:
        p.start()
    w = GroupWatcher(events)
    try:
        w.wait_ready(3, 60)
        gos[0].set()
        gos[1].set()
        stable2 = w.wait_stable([0, 1], partitions, timeout)
        while len(w.subscribed) < 2:
            w.pump(0.2)
        first_two = stable2 - min(w.subscribed[0], w.subscribed[1])
        # Let late callbacks of the two-member rebalance drain, then join at a random phase of
        # the old members' heartbeat timers (which restart when their rebalance completes).
        settle = stable2 + wait_s
        while time.monotonic() < settle:
            w.pump(0.05)
        before = sum(w.callbacks.values())
        gos[2].set()
        stable3 = w.wait_stable([0, 1, 2], partitions, timeout)
        while 2 not in w.subscribed:
            w.pump(0.2)
        return JoinRun(
            first_two_s=round(first_two, 3),
            third_join_s=round(stable3 - w.subscribed[2], 3),
            callbacks=sum(w.callbacks.values()) - before,
            waited_s=round(w.subscribed[2] - stable2, 3),
        )
    finally:
        stop.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()


def stats(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def join_phase(
    args: argparse.Namespace, workdir: Path, extra: list[str]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    notes: dict[str, Any] = {}
    rng = random.Random(args.seed)
    for delay in args.delays:
        overrides = [f"group.initial.rebalance.delay.ms={delay}", *extra]
        broker = Broker(workdir / f"join-delay-{delay}", overrides, log)
        try:
            broker.start()
            versions = api_versions(broker.bootstrap)
            cgh = versions.get(CONSUMER_GROUP_HEARTBEAT_KEY)
            notes[f"delay_{delay}_consumer_group_heartbeat"] = list(cgh) if cgh else None
            topic = f"groups-join-{delay}"
            create_topic(broker.bootstrap, topic, args.partitions)
            for strategy in args.strategies:
                if strategy == "consumer" and cgh is None:
                    msg = (
                        "skipped: the broker does not advertise ConsumerGroupHeartbeat "
                        "(API key 68) in ApiVersions"
                    )
                    log(f"delay {delay} group.protocol=consumer {msg}")
                    rows.append({"delay_ms": delay, "strategy": strategy, "skipped": msg})
                    continue
                runs: list[JoinRun] = []
                cpu0 = process_cpu_seconds(broker.pid)
                for r in range(args.repeats):
                    group = f"G-{strategy}-{delay}-{r}"
                    run = join_once(
                        broker.bootstrap, group, topic, strategy, args.partitions, args.timeout,
                        args.consumer_extra,
                        0.5 + rng.uniform(0.0, args.join_jitter),
                    )
                    log(
                        f"delay {delay} {strategy} #{r + 1}: first two stable after "
                        f"{run.first_two_s:.3f} s, third joined in {run.third_join_s:.3f} s "
                        f"({run.callbacks} callbacks, subscribed {run.waited_s:.2f} s after "
                        f"the two were stable)"
                    )
                    runs.append(run)
                rows.append(
                    {
                        "delay_ms": delay,
                        "strategy": strategy,
                        "repeats": len(runs),
                        "third_join_s": stats([r.third_join_s for r in runs]),
                        "first_two_s": stats([r.first_two_s for r in runs]),
                        "third_join_runs_s": [r.third_join_s for r in runs],
                        "first_two_runs_s": [r.first_two_s for r in runs],
                        "callbacks_per_join": stats([float(r.callbacks) for r in runs]),
                        "waited_runs_s": [r.waited_s for r in runs],
                        "broker_cpu_s": round(process_cpu_seconds(broker.pid) - cpu0, 3),
                    }
                )
        except BaseException:
            log(f"broker log tail:\n{broker.tail()}")
            raise
        finally:
            broker.stop()
    return rows, notes


# --------------------------------------------------------------------------------------------
# Commits


def committer_main(
    idx: int,
    bootstrap: str,
    group: str,
    topic: str,
    mode: str,
    window: int,
    events: Any,
    start_at: Any,
    stop: EventType,
    results: Any,
    extra: dict[str, str],
) -> None:
    """A group member that commits as fast as it can from ``start_at`` for ``start_at[1]`` s.

    ``mode`` ``sync``: one blocking commit at a time, latency of each; ``async``: up to
    ``window`` commits in flight, completed ``on_commit`` callbacks counted.
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    owned: set[int] = set()
    sent_at: deque[float] = deque()
    latencies: list[float] = []
    state = {"inflight": 0, "done": 0, "errors": 0, "end": 0.0, "late": 0}
    first_error: list[str] = []

    def report(kind: str) -> None:
        events.put((kind, idx, time.monotonic(), sorted(owned)))

    def on_assign(_c: Any, parts: list[Any]) -> None:
        owned.update(p.partition for p in parts)
        report("assign")

    def on_revoke(_c: Any, parts: list[Any]) -> None:
        owned.difference_update(p.partition for p in parts)
        report("revoke")

    def on_commit(err: Any, parts: list[Any]) -> None:
        state["inflight"] -= 1
        # librdkafka completes one member's commits in the order they were sent.
        latencies.append(time.perf_counter() - sent_at.popleft())
        bad = err is not None or any(p.error is not None for p in parts)
        if bad:
            state["errors"] += 1
            if not first_error:
                first_error.append(str(err or next(p.error for p in parts if p.error)))
        elif time.monotonic() <= state["end"]:
            state["done"] += 1
        else:
            state["late"] += 1

    conf = consumer_config(bootstrap, group, "range", extra)
    if mode == "async":
        conf["on_commit"] = on_commit
    consumer = Consumer(conf)
    try:
        events.put(("ready", idx, time.monotonic(), []))
        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        while start_at[0] == 0.0 and not stop.is_set():
            consumer.poll(0.02)
        t_start, duration = start_at[0], start_at[1]
        while time.monotonic() < t_start:
            consumer.poll(0.001)
        parts = sorted(owned)
        offsets = dict.fromkeys(parts, 1)
        commits = 0
        state["end"] = t_start + duration
        cpu0 = time.process_time()
        now = time.monotonic()
        if mode == "sync":
            while now < state["end"]:
                p = parts[commits % len(parts)]
                tp = TopicPartition(topic, p, offsets[p])
                offsets[p] += 1
                t0 = time.perf_counter()
                try:
                    consumer.commit(offsets=[tp], asynchronous=False)
                    latencies.append(time.perf_counter() - t0)
                    state["done"] += 1
                except KafkaException as e:
                    state["errors"] += 1
                    if not first_error:
                        first_error.append(str(e))
                commits += 1
                if commits % 100 == 0:
                    consumer.poll(0)
                now = time.monotonic()
        else:
            while now < state["end"]:
                while state["inflight"] < window:
                    p = parts[commits % len(parts)]
                    sent_at.append(time.perf_counter())
                    consumer.commit(
                        offsets=[TopicPartition(topic, p, offsets[p])], asynchronous=True
                    )
                    offsets[p] += 1
                    state["inflight"] += 1
                    commits += 1
                consumer.poll(0.0005)
                now = time.monotonic()
        cpu = time.process_time() - cpu0
        drain = time.monotonic() + 10
        while state["inflight"] > 0 and time.monotonic() < drain:
            consumer.poll(0.01)
        results.put(
            {
                "idx": idx,
                "partitions": parts,
                "sent": commits,
                "completed": state["done"],
                "errors": state["errors"],
                "first_error": first_error[0] if first_error else None,
                "completed_after_window": state["late"],
                "latencies_s": latencies,
                "client_cpu_s": round(cpu, 3),
            }
        )
        while not stop.is_set():
            consumer.poll(0.05)
    except Exception as e:
        events.put(("error", idx, time.monotonic(), [repr(e)]))
    finally:
        consumer.close()


@dataclass
class CommitResult:
    phase: str
    consumers: int
    seconds: float
    commits: int
    commits_per_s: float
    errors: int
    broker_cpu_s: float
    broker_cpu_s_per_1000: float
    broker_ceiling_commits_per_s_per_core: float
    client_cpu_s: float
    broker_loop_runq_wait_percent: float  # share of the phase the loop waited for a CPU
    machine_busy_percent: float  # every process on the box, 100 = one core
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_max_ms: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)


def finish(
    phase: str, consumers: int, seconds: float, commits: int, errors: int,
    meter: tuple[float, float, float], client_cpu: float,
) -> CommitResult:
    cpu, runq, machine = meter
    per_1000 = cpu * 1000 / commits if commits else 0.0
    return CommitResult(
        phase=phase,
        consumers=consumers,
        seconds=round(seconds, 3),
        commits=commits,
        commits_per_s=round(commits / seconds, 1) if seconds > 0 else 0.0,
        errors=errors,
        broker_cpu_s=round(cpu, 3),
        broker_cpu_s_per_1000=round(per_1000, 4),
        broker_ceiling_commits_per_s_per_core=round(1000 / per_1000) if per_1000 > 0 else 0,
        client_cpu_s=round(client_cpu, 3),
        broker_loop_runq_wait_percent=round(100 * runq / seconds, 1) if seconds > 0 else 0.0,
        machine_busy_percent=round(100 * machine / seconds, 1) if seconds > 0 else 0.0,
    )


def client_commit_phase(
    broker: Broker, topic: str, partitions: int, mode: str, consumers: int,
    seconds: float, window: int, timeout: float, extra: dict[str, str],
) -> CommitResult:
    group = f"C-{mode}-{consumers}-{time.monotonic_ns()}"
    events = CTX.Queue()
    results = CTX.Queue()
    stop = CTX.Event()
    start_at = CTX.Array("d", [0.0, seconds])
    procs = [
        CTX.Process(
            target=committer_main,
            args=(i, broker.bootstrap, group, topic, mode, window, events, start_at, stop,
                  results, extra),
            daemon=True,
        )
        for i in range(consumers)
    ]
    for p in procs:
        p.start()
    w = GroupWatcher(events)
    try:
        w.wait_ready(consumers, 60)
        w.wait_stable(list(range(consumers)), partitions, timeout)
        settle = time.monotonic() + 1.0
        while time.monotonic() < settle:
            w.pump(0.05)
        t_start = time.monotonic() + 0.3
        start_at[0] = t_start
        while time.monotonic() < t_start:
            time.sleep(0.001)
        meter = BrokerMeter(broker.pid)
        meter.start()
        time.sleep(max(0.0, t_start + seconds - time.monotonic()))
        used = meter.stop()
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while len(got) < consumers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(got)} of {consumers} committers reported")
            try:
                got.append(results.get(timeout=0.2))
            except queue.Empty:
                w.pump(0.0)
        if any(w.callbacks.get(i, 0) > 1 for i in range(consumers)):
            log(f"WARNING: a rebalance happened during the {mode} commit phase")
    finally:
        stop.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()
    commits = sum(r["completed"] for r in got)
    res = finish(
        f"{mode} x{consumers}",
        consumers,
        seconds,
        commits,
        sum(r["errors"] for r in got),
        used,
        sum(r["client_cpu_s"] for r in got),
    )
    lat = [x for r in got for x in r["latencies_s"]]
    if lat:
        res.latency_p50_ms = round(percentile(lat, 0.5) * 1000, 3)
        res.latency_p99_ms = round(percentile(lat, 0.99) * 1000, 3)
        res.latency_max_ms = round(max(lat) * 1000, 3)
    res.notes = {
        "sent": sum(r["sent"] for r in got),
        "completed_after_window": sum(r["completed_after_window"] for r in got),
        "first_error": next((r["first_error"] for r in got if r["first_error"]), None),
        "window": window if mode == "async" else 1,
        "partitions_per_member": [len(r["partitions"]) for r in got],
    }
    return res


async def _raw_commits(
    host: str, port: int, pid: int, topic: str, partitions: int, seconds: float, depth: int,
    version: int,
) -> CommitResult:
    from odradek.network.client import NetworkClient
    from odradek.protocol import messages as m
    from odradek.protocol.errors import Errors

    group = "raw-commit-bench"
    async with NetworkClient(host, port, client_id="odradek-bench-groups") as c:
        coord: tuple[str, int] | None = None
        for _ in range(100):
            r = await c.send(m.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
            co = r["coordinators"][0]
            if co["error_code"] == Errors.NONE:
                coord = (co["host"], co["port"])
                break
            await asyncio.sleep(0.1)
        if coord is None:
            raise RuntimeError("no coordinator for the raw commit group")
        async with NetworkClient(coord[0], coord[1], client_id="odradek-bench-groups") as cc:
            offset = 1

            def body(p: int, off: int) -> dict[str, Any]:
                return {
                    "group_id": group,
                    "generation_id_or_member_epoch": -1,
                    "member_id": "",
                    "group_instance_id": None,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [
                                {
                                    "partition_index": p,
                                    "committed_offset": off,
                                    "committed_leader_epoch": -1,
                                    "committed_metadata": "",
                                }
                            ],
                        }
                    ],
                }

            # Warm-up (loads the group, creates nothing on the timed path).
            await cc.send(m.OFFSET_COMMIT, version, body(0, 0))
            commits = errors = 0
            first_error: str | None = None
            meter = BrokerMeter(pid)
            meter.start()
            me0 = time.process_time()
            t0 = time.monotonic()
            end = t0 + seconds
            while time.monotonic() < end:
                futs = []
                for i in range(depth):
                    futs.append(cc.send_nowait(m.OFFSET_COMMIT, version, body(i % partitions, offset)))
                    offset += 1
                for resp in await asyncio.gather(*futs):
                    code = resp["topics"][0]["partitions"][0]["error_code"]
                    if code == Errors.NONE:
                        commits += 1
                    else:
                        errors += 1
                        first_error = first_error or str(code)
            elapsed = time.monotonic() - t0
            used = meter.stop()
            me = time.process_time() - me0
    res = finish(
        f"raw OffsetCommit v{version} depth {depth}", 1, elapsed, commits, errors, used, me
    )
    res.notes = {"first_error_code": first_error, "depth": depth, "group": group}
    return res


def commit_phase(args: argparse.Namespace, workdir: Path, extra: list[str]) -> list[CommitResult]:
    broker = Broker(workdir / "commits", extra, log)
    out: list[CommitResult] = []
    try:
        broker.start()
        topic = "groups-commits"
        create_topic(broker.bootstrap, topic, args.partitions)
        log(f"sync commits, 1 consumer, {args.commit_seconds} s")
        r = client_commit_phase(
            broker, topic, args.partitions, "sync", 1, args.commit_seconds, 1, args.timeout,
            args.consumer_extra,
        )
        log(f"sync x1: {r.commits_per_s:,.0f} commits/s, p50 {r.latency_p50_ms} ms, "
            f"p99 {r.latency_p99_ms} ms, broker {r.broker_cpu_s_per_1000} CPU s/1000")
        out.append(r)
        for n in args.async_consumers:
            log(f"async commits, {n} consumer(s), window {args.async_window}, "
                f"{args.commit_seconds} s")
            r = client_commit_phase(
                broker, topic, args.partitions, "async", n, args.commit_seconds,
                args.async_window, args.timeout, args.consumer_extra,
            )
            log(f"async x{n}: {r.commits_per_s:,.0f} commits/s, errors {r.errors}, broker "
                f"{r.broker_cpu_s_per_1000} CPU s/1000")
            out.append(r)
        versions = api_versions(broker.bootstrap)
        version = min(8, versions.get(8, (2, 8))[1])
        log(f"raw pipelined OffsetCommit v{version}, depth {args.raw_depth}, "
            f"{args.commit_seconds} s")
        r = asyncio.run(
            _raw_commits(
                "127.0.0.1", broker.port, broker.pid, topic, args.partitions,
                args.commit_seconds, args.raw_depth, version,
            )
        )
        log(f"raw: {r.commits_per_s:,.0f} commits/s, errors {r.errors}, broker "
            f"{r.broker_cpu_s_per_1000} CPU s/1000")
        out.append(r)
    except BaseException:
        log(f"broker log tail:\n{broker.tail()}")
        raise
    finally:
        broker.stop()
    return out


# --------------------------------------------------------------------------------------------
# Output


def print_tables(result: dict[str, Any]) -> None:
    cfg = result["config"]
    print(
        f"\nconfluent-kafka {cfg['confluent_kafka']} (librdkafka {cfg['librdkafka']}), "
        f"{cfg['cpus']} CPUs, load average before the run {cfg['loadavg_before']}, "
        f"{cfg['partitions']} partitions"
    )
    join = result.get("join")
    if join:
        print(f"\nthird member joins a stable 2-member group ({cfg['repeats']} runs each, seconds)")
        rows: list[tuple[str, ...]] = []
        for j in join:
            label = "consumer (KIP-848)" if j["strategy"] == "consumer" else j["strategy"]
            if "skipped" in j:
                rows.append((str(j["delay_ms"]), label, "-", "-", "-", "-", j["skipped"]))
                continue
            t, f, cb = j["third_join_s"], j["first_two_s"], j["callbacks_per_join"]
            rows.append(
                (
                    str(j["delay_ms"]),
                    label,
                    f"{t['median']:.3f}",
                    f"{t['min']:.3f}",
                    f"{t['max']:.3f}",
                    f"{f['median']:.3f} ({f['min']:.3f}-{f['max']:.3f})",
                    f"{cb['median']:.0f} callbacks; runs "
                    + " ".join(f"{v:.2f}" for v in j["third_join_runs_s"]),
                )
            )
        table(
            (
                "initial delay ms",
                "assignment",
                "3rd join median",
                "min",
                "max",
                "first 2 stable median (min-max)",
                "",
            ),
            rows,
        )
    commits = result.get("commits")
    if commits:
        print(f"\noffset commits ({cfg['commit_seconds']} s per phase, one partition per commit)")
        crow: list[tuple[str, ...]] = []
        for c in commits:
            lat = (
                f"{c['latency_p50_ms']:.2f} / {c['latency_p99_ms']:.2f}"
                if c["latency_p50_ms"] is not None
                else "-"
            )
            crow.append(
                (
                    c["phase"],
                    f"{c['commits_per_s']:,.0f}",
                    lat,
                    f"{c['broker_cpu_s_per_1000']:.4f}",
                    f"{c['broker_ceiling_commits_per_s_per_core']:,.0f}",
                    f"{100 * c['broker_cpu_s'] / c['seconds']:.0f}",
                    f"{100 * c['client_cpu_s'] / c['seconds']:.0f}",
                    f"{c['broker_loop_runq_wait_percent']:.0f}",
                    f"{c['machine_busy_percent']:.0f}",
                    f"{c['commits']:,} ok, {c['errors']} errors",
                )
            )
        table(
            (
                "phase",
                "commits/s",
                "p50 / p99 ms",
                "broker CPU s/1000",
                "broker ceiling commits/s/core",
                "broker CPU %",
                "client CPU %",
                "loop runq-wait %",
                "machine CPU %",
                "",
            ),
            crow,
        )
    for note in result.get("notes", {}).get("text", []):
        print(note)


# --------------------------------------------------------------------------------------------


def int_list(s: str) -> list[int]:
    return [int(v) for v in s.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--delays",
        type=int_list,
        default=[3000, 0],
        help="group.initial.rebalance.delay.ms values, comma-separated (default 3000,0)",
    )
    ap.add_argument(
        "--strategies",
        type=lambda s: [v.strip() for v in s.split(",") if v.strip()],
        default=list(STRATEGIES),
        help="range, cooperative-sticky, consumer (KIP-848), comma-separated (default all)",
    )
    ap.add_argument(
        "--join-jitter",
        type=float,
        default=3.0,
        help="the third member subscribes 0.5 s + uniform(0, this) after the two are stable, so "
        "it lands at a random phase of their heartbeat timers (default 3.0 = librdkafka's "
        "heartbeat.interval.ms)",
    )
    ap.add_argument("--seed", type=int, default=1, help="seed of that jitter")
    ap.add_argument("--commit-seconds", type=float, default=5.0)
    ap.add_argument(
        "--async-consumers",
        type=int_list,
        default=[1, 4],
        help="asynchronous-commit phases, members per phase (default 1,4)",
    )
    ap.add_argument("--async-window", type=int, default=64, help="async commits in flight")
    ap.add_argument("--raw-depth", type=int, default=256, help="pipelined raw OffsetCommits")
    ap.add_argument("--timeout", type=float, default=90.0, help="max wait for a stable group")
    ap.add_argument("--no-join", action="store_true", help="skip the join measurements")
    ap.add_argument("--no-commits", action="store_true", help="skip the commit measurements")
    ap.add_argument(
        "--override",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra broker configuration override (repeatable)",
    )
    ap.add_argument(
        "--consumer-config",
        "-C",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka property for every consumer (repeatable); heartbeat.interval.ms "
        "and session.timeout.ms are left out for group.protocol=consumer",
    )
    ap.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args(argv)
    args.consumer_extra = {}
    for item in args.consumer_config:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"expected KEY=VALUE, got {item!r}")
        args.consumer_extra[key.strip()] = value.strip()
    bad = [s for s in args.strategies if s not in STRATEGIES]
    if bad:
        ap.error(f"unknown strategies {bad}; choose from {', '.join(STRATEGIES)}")

    import confluent_kafka

    workdir = Path(tempfile.mkdtemp(prefix="odradek-bench-groups-"))
    result: dict[str, Any] = {
        "config": {
            "partitions": args.partitions,
            "repeats": args.repeats,
            "join_jitter_s": args.join_jitter,
            "seed": args.seed,
            "delays_ms": args.delays,
            "strategies": args.strategies,
            "commit_seconds": args.commit_seconds,
            "async_window": args.async_window,
            "raw_depth": args.raw_depth,
            "broker_overrides": args.override,
            "consumer_config": args.consumer_extra,
            "confluent_kafka": confluent_kafka.__version__,
            "librdkafka": confluent_kafka.libversion()[0],
            "cpus": os.cpu_count(),
            "loadavg_before": loadavg(),
        },
    }
    try:
        if not args.no_join:
            rows, notes = join_phase(args, workdir, args.override)
            result["join"] = rows
            result["notes"] = notes
        if not args.no_commits:
            result["commits"] = [asdict(r) for r in commit_phase(args, workdir, args.override)]
    finally:
        if args.keep:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    result["config"]["loadavg_after"] = loadavg()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_tables(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
