#!/usr/bin/env python3
"""Partition replication: what RF=3 ``acks=all`` costs, beside Apache Kafka 4.x, and failover.

    python3 benchmarks/replication.py                       # 1M x 100 B, 3 rounds, table (~6 min)
    python3 benchmarks/replication.py --records 50000 --rounds 1 --json
    python3 benchmarks/replication.py --skip-kafka           # Odradek only
    python3 benchmarks/replication.py --profile              # + py-spy on one broker in (b)
    python3 benchmarks/replication.py --latency-rate 20000   # (d) at a rate of your choice

In one run on this box:

(a) one Odradek node (combined broker + controller, ``acks=1``): ``kcat -P -l FILE`` of
    ``--records`` 100-byte records into a topic of ``--partitions`` partitions (records/s, MB/s);
(b) 1 controller + 3 brokers (:class:`odradek.cli.cluster.LocalCluster`), the topic RF=3 with
    ``min.insync.replicas=2``, kcat with ``-X acks=all``: the same load; its ratio to (a)
    (target >= 40 %);
(c) the same 3-broker RF=3 ``acks=all`` run on Apache Kafka 4.x (1 controller + 3 brokers, each
    JVM with ``--kafka-heap``, the jars ``scripts/kafka_reference.sh`` fetched);
(d) produce latency p50 / p99 at half load: a confluent-kafka producer (``acks=all``,
    ``linger.ms=1``) paced in 10 ms ticks to half of the lower of the (b) and (c) rates (or
    ``--latency-rate``) for ``--latency-seconds``, every record timed from ``produce()`` to its
    delivery callback (a full local queue is waited out and counted); on both 3-broker clusters,
    the topic as in (b); ``achieved_rate`` below the target means the cluster could not keep up;
(e) failover: a 1-partition RF=3 topic; the producer (``acks=all``, one record at a time) is
    idle, the partition's leader gets SIGKILL (``kill -9``: the controller fences it after
    ``broker.session.timeout.ms``, Kafka's default 9000 ms) or SIGTERM (controlled shutdown);
    from that instant the producer sends one record after another (librdkafka retries, metadata
    refresh backoff 20-100 ms) and the time to the ack of the first record the *new* leader
    appended is reported: the records are read back afterwards and the first one whose batch
    carries a later partition leader epoch than the last record before the signal is it (during a
    controlled shutdown the old leader still acknowledges for a while; those are counted apart).
    The broker is started again and the next round waits until the ISR is whole. ``--rounds`` of
    each. ``--profile``: py-spy (``--gil``) on broker 101 in the last (b) round, a summary in
    the JSON, the raw stacks in the temp directory.

Throughput rows are the median over ``--rounds`` (a fresh topic each); the record count of every
topic is checked afterwards (sum of the log end offsets). The 1-minute load average is logged
before each phase: on a shared box a high one means a noisy figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(REPO))  # the odradek of this checkout, as its servers run it

from bench_support import Broker, free_ports, loadavg, make_log, percentile, table  # noqa: E402
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from produce_consume import PySpy, read_collapsed, summarize_profile, write_records_file  # noqa: E402

from odradek.cli.cluster import LocalCluster  # noqa: E402
from tests.integration.kafka_reference import KafkaTools, kafka_home  # noqa: E402
from tests.integration.support import die_with_parent  # noqa: E402

log = make_log("repl")
SIZE = 100
JVM_OPTS = (
    "-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 "
    "-XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true"
)
FAST_RETRY = {
    "retry.backoff.ms": 20,
    "retry.backoff.max.ms": 100,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 100,
    "topic.metadata.refresh.fast.interval.ms": 20,
}
QUIET = {"log_level": 0}  # librdkafka's connection-refused lines while brokers come and go


# --------------------------------------------------------------------------------------------
# The clusters


class Cluster(Protocol):
    name: str

    @property
    def bootstrap(self) -> str: ...
    def pid(self, broker_id: int) -> int | None: ...
    def signal(self, broker_id: int, sig: int) -> None: ...
    def wait_exit(self, broker_id: int) -> None: ...
    def restart(self, broker_id: int) -> None: ...
    def stop(self) -> None: ...


class OdradekCluster:
    """LocalCluster(1 controller, 3 brokers), Odradek's (= Kafka's) default timeouts."""

    name = "odradek"

    def __init__(self, base: Path, brokers: int = 3) -> None:
        self.lc = LocalCluster(1, brokers, base, overrides={})

    def start(self) -> None:
        log("starting Odradek: 1 controller + 3 brokers")
        self.lc.start(timeout=180)
        log(f"Odradek cluster ready on {self.bootstrap}")

    @property
    def bootstrap(self) -> str:
        return self.lc.bootstrap_servers

    def pid(self, broker_id: int) -> int | None:
        return self.lc.node(broker_id).pid

    def signal(self, broker_id: int, sig: int) -> None:
        p = self.lc.node(broker_id).proc
        assert p is not None
        p.send_signal(sig)

    def wait_exit(self, broker_id: int) -> None:
        node = self.lc.node(broker_id)
        if node.proc is not None:
            try:
                node.proc.wait(60)
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait(10)
            node.proc = None

    def restart(self, broker_id: int) -> None:
        self.wait_exit(broker_id)
        self.lc.start_node(self.lc.node(broker_id))

    def stop(self) -> None:
        self.lc.stop()


class KafkaCluster:
    """Apache Kafka 4.x in KRaft mode: 1 controller-only and 3 broker-only JVMs on loopback."""

    name = "kafka"

    def __init__(self, tools: KafkaTools, base: Path, heap: str, brokers: int = 3,
                 overrides: dict[str, str] | None = None) -> None:
        self.tools = tools
        self.overrides = dict(overrides or {})
        self.base = base
        self.heap = heap
        ports = free_ports(1 + brokers)
        self.cport = ports[0]
        self.ports = {101 + i: ports[1 + i] for i in range(brokers)}
        self.procs: dict[int, subprocess.Popen[bytes] | None] = {}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports.values())

    def _props(self, node_id: int) -> str:
        common = {
            "node.id": str(node_id),
            "controller.quorum.voters": f"1@127.0.0.1:{self.cport}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.base / f"kafka-{node_id}" / "logs"),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        if node_id == 1:
            common.update({"process.roles": "controller",
                           "listeners": f"CONTROLLER://127.0.0.1:{self.cport}"})
        else:
            port = self.ports[node_id]
            common.update({"process.roles": "broker",
                           "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                           "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
                           **self.overrides})
        return "".join(f"{k}={v}\n" for k, v in common.items())

    def _launch(self, node_id: int) -> None:
        config = self.base / f"kafka-{node_id}.properties"
        env = dict(os.environ, KAFKA_HEAP_OPTS=self.heap, KAFKA_JVM_OPTS=JVM_OPTS)
        launcher = str(self.tools.home / "bin" / "kafka-run")
        with open(self.base / f"kafka-{node_id}.log", "ab") as logf:
            self.procs[node_id] = subprocess.Popen(
                [launcher, "--line", self.tools.line, "kafka.Kafka", str(config)],
                stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                preexec_fn=die_with_parent,
            )

    def start(self) -> None:
        log(f"starting Apache Kafka {self.tools.version}: 1 controller + 3 brokers ({self.heap})")
        launcher = str(self.tools.home / "bin" / "kafka-run")
        self.base.mkdir(parents=True, exist_ok=True)
        for node_id in (1, *self.ports):
            config = self.base / f"kafka-{node_id}.properties"
            config.write_text(self._props(node_id))
            r = subprocess.run(
                [launcher, "--line", self.tools.line, "kafka.tools.StorageTool", "format",
                 "--cluster-id", "Odradek-ReplBench-Q1", "--config", str(config),
                 "--ignore-formatted"],
                capture_output=True, text=True, timeout=120,
            )
            if r.returncode != 0:
                raise RuntimeError(f"kafka-storage format failed:\n{r.stdout}\n{r.stderr}")
        for node_id in (1, *self.ports):
            self._launch(node_id)
        wait_brokers(self.bootstrap, len(self.ports), 180, self)
        log(f"Kafka cluster ready on {self.bootstrap}")

    def pid(self, broker_id: int) -> int | None:
        p = self.procs.get(broker_id)
        return None if p is None else p.pid  # kafka-run execs java: this is the JVM

    def signal(self, broker_id: int, sig: int) -> None:
        p = self.procs[broker_id]
        assert p is not None
        p.send_signal(sig)

    def wait_exit(self, broker_id: int) -> None:
        p = self.procs.get(broker_id)
        if p is not None:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
            self.procs[broker_id] = None

    def restart(self, broker_id: int) -> None:
        self.wait_exit(broker_id)
        self._launch(broker_id)

    def stop(self) -> None:
        for group in ([i for i in self.procs if i != 1], [1]):
            for i in group:
                p = self.procs.get(i)
                if p is not None and p.poll() is None:
                    p.terminate()
            for i in group:
                self.wait_exit(i)

    def alive(self) -> None:
        for i, p in self.procs.items():
            if p is not None and p.poll() is not None:
                tail = (self.base / f"kafka-{i}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"Kafka node {i} exited with {p.returncode}:\n{tail}")


def wait_brokers(bootstrap: str, n: int, timeout: float, cluster: KafkaCluster | None = None) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cluster is not None:
            cluster.alive()
        with contextlib.suppress(Exception):
            if len(AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(timeout=3).brokers) == n:
                return
        time.sleep(0.5)
    raise RuntimeError(f"{n} brokers not registered within {timeout}s")


# --------------------------------------------------------------------------------------------
# Topics and checks


def create_topic(bootstrap: str, topic: str, partitions: int, rf: int, min_isr: int | None) -> None:
    """Create the topic (retried: librdkafka may drop its bootstrap connection under the
    request), then wait until every partition has a leader and a full ISR."""
    config = {} if min_isr is None else {"min.insync.replicas": str(min_isr)}
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    last: Exception | None = None
    for _ in range(5):
        try:
            admin.create_topics([NewTopic(topic, partitions, rf, config=config)])[topic].result(30)
            break
        except Exception as e:  # noqa: BLE001 - retried, reported below
            if "TOPIC_ALREADY_EXISTS" in str(e):
                break
            last = e
            time.sleep(0.5)
    else:
        raise RuntimeError(f"creating {topic}: {last}")
    wait_isr(bootstrap, topic, partitions, rf, 60)


def wait_isr(bootstrap: str, topic: str, partitions: int, rf: int, timeout: float) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with contextlib.suppress(Exception):
            md = admin.list_topics(topic, timeout=5).topics.get(topic)
            if (md is not None and md.error is None and len(md.partitions) == partitions
                    and all(p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values())):
                return
        time.sleep(0.2)
    raise RuntimeError(f"{topic}: no leader or ISR of {rf} on every partition within {timeout}s")


def leader_of(bootstrap: str, topic: str) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap, **QUIET}).list_topics(topic, timeout=10).topics[topic]
    return int(md.partitions[0].leader)


def log_end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{topic}", **QUIET})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in range(partitions))
    finally:
        c.close()


# --------------------------------------------------------------------------------------------
# Phases


def kcat_run(bootstrap: str, topic: str, path: Path, n: int, partitions: int, acks: str) -> dict[str, Any]:
    cmd = ["kcat", "-P", "-b", bootstrap, "-t", topic, "-X", f"acks={acks}", "-l", str(path)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    secs = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"kcat exited {r.returncode}: {r.stderr[-2000:]}")
    got = log_end_offsets(bootstrap, topic, partitions)
    if got != n:
        raise RuntimeError(f"{topic}: {got} records in the log, {n} produced")
    return {"records": n, "seconds": round(secs, 3), "records_per_s": round(n / secs),
            "mb_per_s": round(n * SIZE / secs / 1e6, 2)}


def throughput(tag: str, bootstrap: str, path: Path, n: int, partitions: int, rf: int,
               min_isr: int | None, acks: str, rounds: int,
               profile_pid: int | None = None) -> dict[str, Any]:
    runs = []
    for r in range(rounds):
        topic = f"repl-{tag}-{r}"
        create_topic(bootstrap, topic, partitions, rf, min_isr)
        log(f"{tag} round {r + 1}/{rounds}: kcat acks={acks}, {n} x {SIZE} B; load {loadavg()}")
        spy = None
        if profile_pid is not None and r == rounds - 1:
            raw = Path(tempfile.gettempdir()) / f"repl-profile-{time.strftime('%Y%m%d-%H%M%S')}-{tag}.txt"
            spy = PySpy(profile_pid, raw, 100, ["--gil"])
            spy.start()
        try:
            res = kcat_run(bootstrap, topic, path, n, partitions, acks)
        finally:
            if spy is not None:
                spy.stop()
        if spy is not None:
            samples, top_self, top_total = summarize_profile(read_collapsed(spy.raw_path), 20)
            res["profile"] = {"pid": profile_pid, "file": str(spy.raw_path), "samples": samples,
                              "top_self": top_self, "top_total": top_total}
        log(f"  {res['records_per_s']} records/s, {res['mb_per_s']} MB/s")
        runs.append(res)
    rps = statistics.median(x["records_per_s"] for x in runs)
    out: dict[str, Any] = {"records_per_s": round(rps), "mb_per_s": round(rps * SIZE / 1e6, 2),
                           "runs": runs}
    return out


def latency(bootstrap: str, topic: str, rate: int, seconds: float) -> dict[str, Any]:
    """``acks=all`` producer paced to ``rate`` records/s; each record timed to its callback."""
    lat: list[float] = []
    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1,
                  "queue.buffering.max.messages": 1_000_000, **QUIET})
    p.list_topics(topic, timeout=10)
    value = b"x" * SIZE
    tick = 0.01
    per_tick = max(1, round(rate * tick))
    n_ticks = int(seconds / tick)
    perf = time.perf_counter

    def cb(t0: float) -> Any:
        def done(err: KafkaError | None, _msg: Any) -> None:
            if err is None:
                lat.append(perf() - t0)
            else:
                errors.append(str(err))
        return done

    start = perf()
    for k in range(n_ticks):
        for _ in range(per_tick):
            t0 = perf()
            while True:
                try:
                    p.produce(topic, value, on_delivery=cb(t0))
                    break
                except BufferError:  # the broker is behind the rate: the wait is latency too
                    p.poll(0.005)
        p.poll(0)
        wait = start + (k + 1) * tick - perf()
        while wait > 0:
            p.poll(wait)
            wait = start + (k + 1) * tick - perf()
    sent_s = perf() - start
    if p.flush(60):
        raise RuntimeError("records undelivered after flush")
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, first: {errors[0]}")
    n = len(lat)
    ms = [x * 1000 for x in lat]
    return {"target_rate": rate, "achieved_rate": round(n / sent_s), "records": n,
            "p50_ms": round(percentile(ms, 0.50), 2), "p99_ms": round(percentile(ms, 0.99), 2),
            "max_ms": round(max(ms), 2)}


def record_epochs(bootstrap: str, topic: str, first: int, last: int) -> dict[int, int]:
    """offset -> partition leader epoch of its stored batch, for offsets ``first..last``."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ep-{topic}-{time.monotonic_ns()}",
                  "enable.auto.commit": False, **QUIET})
    out: dict[int, int] = {}
    try:
        c.assign([TopicPartition(topic, 0, first)])
        end = time.monotonic() + 30
        while len(out) < last - first + 1 and time.monotonic() < end:
            for msg in c.consume(100, 0.5):
                offset = msg.offset()
                if msg.error() is None and offset is not None:
                    epoch = msg.leader_epoch()
                    out[offset] = -1 if epoch is None else epoch
    finally:
        c.close()
    return out


def failover(c: Cluster, sig: int, rounds: int) -> dict[str, Any]:
    """SIGKILL or SIGTERM the leader of a 1-partition RF=3 topic; time from the signal to the
    ack of the first record the *new* leader appended (its batch carries a later partition leader
    epoch than the last record before the signal: read back after the round). Records the old
    leader still acknowledged during a controlled shutdown do not count."""
    signame = signal.Signals(sig).name
    topic = f"repl-failover-{signame.lower()}"
    create_topic(c.bootstrap, topic, 1, 3, 2)
    admin = AdminClient({"bootstrap.servers": c.bootstrap, **QUIET})
    detail: list[dict[str, Any]] = []
    acks: dict[int, float] = {}
    errs: list[str] = []

    def done(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            acks[msg.offset()] = time.perf_counter()
        else:
            errs.append(str(err))

    for r in range(rounds):
        wait_isr(c.bootstrap, topic, 1, 3, 120)
        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0,
                      "message.timeout.ms": 120_000, **FAST_RETRY, **QUIET})
        acks.clear()
        errs.clear()
        for _ in range(5):  # warm: connections and metadata in place
            p.produce(topic, b"w" * SIZE, on_delivery=done)
            p.flush(30)
        if len(acks) != 5:
            raise RuntimeError(f"{c.name}: warm-up produce failed: {errs}")
        old_leader = leader_of(c.bootstrap, topic)
        last_before = max(acks)
        log(f"{c.name} failover {signame} round {r + 1}/{rounds}: leader {old_leader}; "
            f"load {loadavg()}")
        t_sig = time.perf_counter()
        c.signal(old_leader, sig)
        end = t_sig + 60
        moved_at_ack = -1  # acks counted when metadata first showed another leader
        next_md = 0.0
        while time.perf_counter() < end:
            n = len(acks)
            p.produce(topic, b"f" * SIZE, on_delivery=done)
            while len(acks) == n and not errs and time.perf_counter() < end:
                p.poll(0.002)
            if errs:
                raise RuntimeError(f"{c.name}: produce failed after {signame}: {errs[0]}")
            now = time.perf_counter()
            if moved_at_ack < 0 and now >= next_md:
                next_md = now + 0.05
                with contextlib.suppress(Exception):
                    md = admin.list_topics(topic, timeout=2).topics[topic].partitions[0]
                    if md.leader >= 0 and md.leader != old_leader:
                        moved_at_ack = len(acks)
            if moved_at_ack >= 0 and len(acks) >= moved_at_ack + 3:
                break
        p.flush(30)
        if moved_at_ack < 0:
            raise RuntimeError(f"{c.name}: no new leader within 60 s of {signame}")
        epochs = record_epochs(c.bootstrap, topic, last_before, max(acks))
        base = epochs.get(last_before, -1)
        later = sorted(o for o, e in epochs.items() if e > base and o in acks)
        if not later:
            raise RuntimeError(f"{c.name}: no record with a leader epoch above {base}: {epochs}")
        secs = acks[later[0]] - t_sig
        old_acks = sum(1 for o in acks if last_before < o < later[0])
        new_leader = leader_of(c.bootstrap, topic)
        log(f"  first ack from the new leader {new_leader} after {secs * 1000:.0f} ms "
            f"({old_acks} acked by the old leader after the signal)")
        detail.append({"old_leader": old_leader, "new_leader": new_leader,
                       "ms": round(secs * 1000, 1), "old_leader_acks_after_signal": old_acks})
        c.restart(old_leader)
    wait_isr(c.bootstrap, topic, 1, 3, 120)
    ms = [d["ms"] for d in detail]
    return {"signal": signame, "rounds": detail, "min_ms": min(ms),
            "median_ms": statistics.median(ms), "max_ms": max(ms)}


# --------------------------------------------------------------------------------------------


def three_broker_session(c: Cluster, args: argparse.Namespace, path: Path, res: dict[str, Any],
                         profile_pid: int | None = None) -> None:
    if args.warmup:
        # Unmeasured, the same for both: a fresh JVM runs interpreted until its JIT has seen
        # the hot paths; Odradek gets the same run so the two are treated alike.
        create_topic(c.bootstrap, f"repl-{c.name}-warmup", args.partitions, 3, 2)
        log(f"{c.name} warm-up: kcat acks=all, {args.records} records (not measured)")
        kcat_run(c.bootstrap, f"repl-{c.name}-warmup", path, args.records, args.partitions, "all")
    res["throughput"] = throughput(f"{c.name}-rf3", c.bootstrap, path, args.records,
                                   args.partitions, 3, 2, "all", args.rounds, profile_pid)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3, help="throughput runs and failovers of each kind")
    ap.add_argument("--latency-seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=int, default=1, help="1: one unmeasured kcat run per cluster")
    ap.add_argument("--latency-rate", type=int, default=0,
                    help="records/s for (d); 0: half of the lower of (b) and (c)")
    ap.add_argument("--kafka-heap", default="-Xmx512m -Xms512m")
    ap.add_argument("--kafka-override", action="append", default=[], metavar="KEY=VALUE",
                    help="a Kafka broker setting (repeatable)")
    ap.add_argument("--skip-kafka", action="store_true")
    ap.add_argument("--profile", action="store_true", help="py-spy on one Odradek broker in (b)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    tools = None
    if not args.skip_kafka:
        home = kafka_home()
        if not (home / "bin" / "kafka-run").exists():
            log(f"no Kafka under {home} (scripts/kafka_reference.sh): Kafka skipped")
        else:
            tools = KafkaTools(home, "4")
    out: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                           "cpus": os.cpu_count(), "records": args.records, "size": SIZE,
                           "partitions": args.partitions, "rounds": args.rounds}
    with tempfile.TemporaryDirectory(prefix="odradek-replbench-") as tmp:
        work = Path(tmp)
        path = write_records_file(work / "records.txt", args.records, SIZE)

        # (a) one node, acks=1
        single = Broker(work / "single", log=log)
        single.start()
        try:
            out["a_single_acks1"] = throughput("single", single.bootstrap, path, args.records,
                                               args.partitions, 1, None, "1", args.rounds)
        finally:
            single.stop()

        clusters: list[Cluster] = []
        od = OdradekCluster(work / "odradek")
        od.start()
        clusters.append(od)
        try:
            b: dict[str, Any] = {}
            three_broker_session(od, args, path, b, od.pid(101) if args.profile else None)
            out["b_odradek_rf3_acksall"] = b["throughput"]
            if tools is not None:
                kc = KafkaCluster(tools, work / "kafka", args.kafka_heap,
                                  overrides=dict(o.split("=", 1) for o in args.kafka_override))
                try:
                    kc.start()
                except Exception:
                    kc.stop()
                    raise
                clusters.append(kc)
                k: dict[str, Any] = {}
                three_broker_session(kc, args, path, k)
                out["c_kafka_rf3_acksall"] = k["throughput"]
            rates = [out[x]["records_per_s"] for x in ("b_odradek_rf3_acksall", "c_kafka_rf3_acksall")
                     if x in out]
            half = args.latency_rate or max(1, min(rates) // 2)
            out["d_latency"] = {}
            for c in clusters:
                topic = f"repl-latency-{c.name}"
                create_topic(c.bootstrap, topic, args.partitions, 3, 2)
                log(f"{c.name} latency at {half} records/s for {args.latency_seconds}s; load {loadavg()}")
                try:
                    out["d_latency"][c.name] = latency(c.bootstrap, topic, half, args.latency_seconds)
                except Exception as e:  # noqa: BLE001 - kept in the report, the run goes on
                    log(f"  {c.name} latency failed: {e}")
                    out["d_latency"][c.name] = {"error": str(e)}
                    continue
                log(f"  {out['d_latency'][c.name]}")
            out["e_failover"] = {}
            for c in clusters:
                out["e_failover"][c.name] = {}
                for sig in (signal.SIGKILL, signal.SIGTERM):
                    try:
                        res = failover(c, sig, args.rounds)
                    except Exception as e:  # noqa: BLE001 - kept in the report, the run goes on
                        log(f"  {c.name} failover {sig.name} failed: {e}")
                        res = {"signal": sig.name, "error": str(e)}
                    out["e_failover"][c.name][sig.name.lower()] = res
        finally:
            for c in reversed(clusters):
                c.stop()

    a = out["a_single_acks1"]["records_per_s"]
    out["b_over_a"] = round(out["b_odradek_rf3_acksall"]["records_per_s"] / a, 3)
    if "c_kafka_rf3_acksall" in out:
        out["b_over_c"] = round(out["b_odradek_rf3_acksall"]["records_per_s"]
                                / out["c_kafka_rf3_acksall"]["records_per_s"], 3)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        report(out)
    return 0


def report(out: dict[str, Any]) -> None:
    rows = [("(a) Odradek 1 node, acks=1", out["a_single_acks1"])]
    rows.append(("(b) Odradek 3 brokers RF=3 acks=all", out["b_odradek_rf3_acksall"]))
    if "c_kafka_rf3_acksall" in out:
        rows.append(("(c) Kafka 3 brokers RF=3 acks=all", out["c_kafka_rf3_acksall"]))
    print(f"replication benchmark {out['date']}, {out['records']} x {out['size']} B kcat, "
          f"{out['partitions']} partitions, median of {out['rounds']}")
    table(("run", "records/s", "MB/s"),
          [(name, str(r["records_per_s"]), str(r["mb_per_s"])) for name, r in rows])
    print(f"(b)/(a) = {out['b_over_a']:.0%}" + (f", (b)/(c) = {out['b_over_c']:.0%}"
                                              if "b_over_c" in out else ""))
    table(("(d) latency, acks=all", "rate", "achieved", "p50 ms", "p99 ms", "max ms"),
          [(n, str(r["target_rate"]), str(r["achieved_rate"]), str(r["p50_ms"]), str(r["p99_ms"]),
            str(r["max_ms"])) for n, r in out["d_latency"].items() if "error" not in r])
    table(("(e) leader failover, first ack", "signal", "min ms", "median ms", "max ms"),
          [(n, f["signal"], str(f["min_ms"]), str(f["median_ms"]), str(f["max_ms"]))
           for n, kinds in out["e_failover"].items() for f in kinds.values() if "error" not in f])


if __name__ == "__main__":
    sys.exit(main())
