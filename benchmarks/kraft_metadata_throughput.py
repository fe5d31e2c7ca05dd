#!/usr/bin/env python3
"""KRaft metadata throughput with 3 voters, and what following the metadata log costs a broker.

    python3 benchmarks/kraft_metadata_throughput.py                       # default sizes
    python3 benchmarks/kraft_metadata_throughput.py --pid-requests 20000 --topics 2000 --json

Starts a local cluster (:class:`odradek.cli.cluster.LocalCluster`: 3 controller-only processes
and 1 broker-only process on loopback, default settings) and runs, one after the other:

1. **producer-ids** — AllocateProducerIds sent straight to the active controller's listener
   (as a broker does, with the broker's id and epoch), ``--in-flight`` requests pipelined on one
   connection, ``--pid-requests`` in all. Each one is one write of one record
   (ProducerIdsRecord), answered once the quorum has committed it: this measures the write path
   (event queue, Raft append, replication to a majority, commit) per record, with nothing else
   to do for the broker but replay it.
2. **topic-configs** — IncrementalAlterConfigs of one topic sent straight to the active
   controller, 10 numeric configs set to new values per request (``--config-requests``): ten
   ConfigRecords per write, which the broker applies to that topic's one log.
3. **create-topics (controller)** — CreateTopics sent straight to the active controller,
   ``--topics-per-request`` topics of ``--partitions`` partitions each per request, pipelined
   the same way (``--topics`` topics in all): one TopicRecord and one PartitionRecord per
   partition per topic, several records per write.
4. **create-topics (AdminClient)** — ``--admin-topics`` 1-partition topics created through the
   broker with confluent-kafka's AdminClient, one ``create_topics`` call per topic, all issued
   before any is waited for (librdkafka pipelines them; the broker forwards each to the active
   controller); topics per second from the first call to the last answer.

Records committed are counted from the high watermark of ``__cluster_metadata`` that the leader
reports in DescribeQuorum, read before and after each phase (so control records and anything
else written meanwhile count too; nothing else writes records during a phase). For every phase
the CPU seconds of each process (``/proc/<pid>/task/*/schedstat``) are reported per 1000
records; for the broker, from the start of the phase until it is back to its idle CPU rate (it
applies what was committed after the writes are answered), minus that idle rate (heartbeats,
fetch polling; measured once before the first phase) over the same time: the cost of following
the metadata log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the odradek of this checkout, as its servers run it

from bench_support import make_log, run_seconds  # noqa: E402

from odradek.cli.cluster import LocalCluster, Node  # noqa: E402
from odradek.network.client import NetworkClient  # noqa: E402
from odradek.protocol import messages as m  # noqa: E402
from odradek.protocol.errors import Errors  # noqa: E402
from odradek.protocol.messages import generated as g  # noqa: E402

log = make_log("kraft_metadata")
CONFIG_TOPIC = "configs-target"
# Numeric topic configs, set to base + i by the i-th request (values change with every write).
CONFIG_KEYS = (
    ("retention.ms", 604_800_000), ("retention.bytes", 1 << 30), ("segment.ms", 604_800_000),
    ("max.message.bytes", 1_048_588), ("flush.ms", 1_000_000), ("flush.messages", 1_000_000),
    ("delete.retention.ms", 86_400_000), ("min.compaction.lag.ms", 0), ("file.delete.delay.ms", 60_000),
    ("segment.jitter.ms", 0),
)


@dataclass
class Phase:
    name: str
    requests: int
    seconds: float
    records: int
    errors: dict[str, int] = field(default_factory=dict)
    cpu_per_1k_records: dict[str, float] = field(default_factory=dict)
    broker_idle_cpu_s: float = 0.0
    units: int = 0  # topics created (topic phases)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


def broker_epoch(broker: Node) -> int:
    found = re.findall(r"Odradek broker ready: node id \d+, .* broker epoch (\d+)", broker.log_path.read_text())
    if not found:
        raise RuntimeError(f"no ready line in {broker.log_path}")
    return int(found[-1])


def cpu_of(cluster: LocalCluster) -> dict[str, float]:
    out = {}
    for n in cluster.nodes:
        s = run_seconds(n.pid)
        out[n.name] = s if s is not None else 0.0
    return out


def high_watermark(cluster: LocalCluster, leader: Node) -> int:
    """The high watermark the active controller reports (another one than ``leader`` if the
    leadership moved: the committed offset carries over)."""
    part = cluster.describe_quorum(leader)
    if part is None or part["error_code"] != 0:
        now = cluster.wait_active_controller(30)
        log(f"controller {leader.node_id} no longer leads; controller {now.node_id} does")
        part = cluster.describe_quorum(now)
        assert part is not None and part["error_code"] == 0, part
    return int(part["high_watermark"])


async def pipelined(port: int, api: Any, version: int, bodies: list[dict[str, Any]], in_flight: int,
                    error_of: Any) -> tuple[float, dict[str, int]]:
    """Send every body on one connection with at most ``in_flight`` unanswered; (seconds, errors)."""
    client = NetworkClient("127.0.0.1", port, "kraft-metadata-bench", max_in_flight=in_flight)
    errors: dict[str, int] = {}
    sem = asyncio.Semaphore(in_flight)
    await client.connect()

    async def one(body: dict[str, Any]) -> None:
        async with sem:
            resp = await client.send(api, version, body)
        for code in error_of(resp):
            if code != 0:
                name = Errors(code).name
                errors[name] = errors.get(name, 0) + 1

    try:
        start = time.monotonic()
        await asyncio.gather(*(one(b) for b in bodies))
        return time.monotonic() - start, errors
    finally:
        await client.close()


def broker_idle_rate(broker: Node, seconds: float) -> float:
    """The broker's CPU seconds per second while nothing is written (heartbeats, fetch polls)."""
    c0 = run_seconds(broker.pid) or 0.0
    time.sleep(seconds)
    return ((run_seconds(broker.pid) or 0.0) - c0) / seconds


def settle(broker: Node, idle_rate: float, limit_s: float = 60.0) -> float:
    """Wait until the broker is back to its idle CPU rate (it may still be applying what the
    phase committed: creating logs); seconds waited."""
    start = time.monotonic()
    step = 0.5
    while time.monotonic() - start < limit_s:
        c0 = run_seconds(broker.pid) or 0.0
        time.sleep(step)
        if (run_seconds(broker.pid) or 0.0) - c0 <= 2 * idle_rate * step + 0.005:
            break
    return time.monotonic() - start


def measure(cluster: LocalCluster, leader: Node, name: str, run: Any, idle_rate: float) -> Phase:
    """``run()`` -> (requests, seconds, errors, units), with the high watermark and the CPU of
    every process read around it; the broker's CPU until it is idle again, minus its idle rate
    over that time."""
    broker = cluster.brokers[0]
    settle(broker, idle_rate)
    hw0 = high_watermark(cluster, leader)
    cpu0 = cpu_of(cluster)
    t0 = time.monotonic()
    requests, seconds, errors, units = run()
    cpu1 = cpu_of(cluster)
    hw1 = high_watermark(cluster, leader)
    settle(broker, idle_rate)
    broker_window = time.monotonic() - t0
    broker_cpu = (run_seconds(broker.pid) or 0.0) - cpu0[broker.name] - idle_rate * broker_window
    records = hw1 - hw0
    phase = Phase(name, requests, seconds, records, errors, units=units)
    phase.broker_idle_cpu_s = idle_rate * broker_window
    per_k = 1000 / records if records else 0.0
    for n in cluster.nodes:
        if n.role == "broker":
            phase.cpu_per_1k_records[f"{n.name} following (minus idle)"] = broker_cpu * per_k
        else:
            used = cpu1[n.name] - cpu0[n.name]
            phase.cpu_per_1k_records[n.name + (" (leader)" if n is leader else "")] = used * per_k
    log(f"{name}: {records} records committed in {seconds:.2f}s = {phase.records_per_s:,.0f} records/s "
        f"({requests} requests, errors {errors or 'none'}); broker busy for {broker_window:.1f}s")
    return phase


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pid-requests", type=int, default=5000, help="AllocateProducerIds requests")
    ap.add_argument("--config-requests", type=int, default=500,
                    help="IncrementalAlterConfigs requests (10 topic configs each)")
    ap.add_argument("--topics", type=int, default=1000, help="topics created straight on the controller")
    ap.add_argument("--topics-per-request", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=1, help="partitions per topic (controller phase)")
    ap.add_argument("--admin-topics", type=int, default=300, help="1-partition topics through the AdminClient")
    ap.add_argument("--in-flight", type=int, default=64, help="pipelined requests on the connection")
    ap.add_argument("--idle-seconds", type=float, default=3.0, help="broker idle baseline, measured once")
    ap.add_argument("--json", action="store_true", help="JSON on stdout")
    args = ap.parse_args()

    cluster = LocalCluster(3, 1)
    phases: list[Phase] = []
    try:
        log(f"starting 3 controllers and 1 broker in {cluster.base}")
        cluster.start()
        broker = cluster.brokers[0]
        leader = cluster.wait_active_controller()
        epoch = broker_epoch(broker)
        log(f"active controller {leader.node_id}; broker {broker.node_id} epoch {epoch}")
        idle_rate = broker_idle_rate(broker, args.idle_seconds)
        log(f"broker idle: {idle_rate * 1000:.1f} CPU-ms per second")

        def producer_ids() -> tuple[int, float, dict[str, int], int]:
            body = {"broker_id": broker.node_id, "broker_epoch": epoch}
            bodies = [body] * args.pid_requests
            secs, errs = asyncio.run(pipelined(leader.port, g.ALLOCATE_PRODUCER_IDS, 0, bodies, args.in_flight,
                                               lambda r: [r["error_code"]]))
            return len(bodies), secs, errs, 0

        leader = cluster.wait_active_controller()  # it may have moved
        phases.append(measure(cluster, leader, "producer-ids (1 record per write)", producer_ids, idle_rate))

        def topic_configs() -> tuple[int, float, dict[str, int], int]:
            def body(i: int) -> dict[str, Any]:
                return {"validate_only": False, "resources": [{
                    "resource_type": 2, "resource_name": CONFIG_TOPIC,
                    "configs": [{"name": k, "config_operation": 0, "value": str(base + i)}
                                for k, base in CONFIG_KEYS],
                }]}

            bodies = [body(i) for i in range(args.config_requests)]
            secs, errs = asyncio.run(pipelined(leader.port, m.INCREMENTAL_ALTER_CONFIGS, 1, bodies, args.in_flight,
                                               lambda r: [x["error_code"] for x in r["responses"]]))
            return len(bodies), secs, errs, 0

        setup = asyncio.run(pipelined(leader.port, m.CREATE_TOPICS, 7, [{
            "topics": [{"name": CONFIG_TOPIC, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                        "configs": []}], "timeout_ms": 30000, "validate_only": False}], 1,
            lambda r: [t["error_code"] for t in r["topics"]]))
        assert not setup[1], setup
        leader = cluster.wait_active_controller()  # it may have moved
        phases.append(measure(cluster, leader, f"topic-configs ({len(CONFIG_KEYS)} ConfigRecords per write)",
                              topic_configs, idle_rate))

        def create_direct() -> tuple[int, float, dict[str, int], int]:
            bodies = []
            for start in range(0, args.topics, args.topics_per_request):
                names = [f"direct-{i}" for i in range(start, min(args.topics, start + args.topics_per_request))]
                bodies.append({
                    "topics": [{"name": n, "num_partitions": args.partitions, "replication_factor": 1,
                                "assignments": [], "configs": []} for n in names],
                    "timeout_ms": 30000, "validate_only": False,
                })
            secs, errs = asyncio.run(pipelined(leader.port, m.CREATE_TOPICS, 7, bodies, args.in_flight,
                                               lambda r: [t["error_code"] for t in r["topics"]]))
            return len(bodies), secs, errs, args.topics

        leader = cluster.wait_active_controller()  # it may have moved
        phases.append(measure(
            cluster, leader,
            f"create-topics on the controller ({args.topics_per_request} topics x {args.partitions} partitions per write)",
            create_direct, idle_rate,
        ))

        def create_admin() -> tuple[int, float, dict[str, int], int]:
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({"bootstrap.servers": broker.address})
            admin.list_topics(timeout=10)  # connected before the clock starts
            start = time.monotonic()
            futures = [admin.create_topics([NewTopic(f"admin-{i}", 1, 1)], request_timeout=60,
                                           operation_timeout=60)[f"admin-{i}"]
                       for i in range(args.admin_topics)]
            errors: dict[str, int] = {}
            for f in futures:
                try:
                    f.result(120)
                except Exception as e:  # noqa: BLE001 - counted and reported
                    key = str(e.args[0].name() if e.args and hasattr(e.args[0], "name") else e)
                    errors[key] = errors.get(key, 0) + 1
            return len(futures), time.monotonic() - start, errors, args.admin_topics

        leader = cluster.wait_active_controller()  # it may have moved
        phases.append(measure(cluster, leader, "create-topics through the AdminClient (1 topic per call)",
                              create_admin, idle_rate))
    finally:
        cluster.stop()

    if args.json:
        print(json.dumps([{**asdict(p), "records_per_s": p.records_per_s} for p in phases], indent=2))
        return 0
    print(f"3 controller-only voters + 1 broker, loopback, one box; {args.in_flight} requests in flight")
    for p in phases:
        print(f"\n{p.name}")
        print(f"  {p.records} records committed in {p.seconds:.2f}s: {p.records_per_s:,.0f} records/s"
              + (f", {p.units / p.seconds:,.0f} topics/s" if p.units else f", {p.requests / p.seconds:,.0f} writes/s"))
        if p.errors:
            print(f"  errors: {p.errors}")
        for who, cpu in p.cpu_per_1k_records.items():
            print(f"  CPU s per 1k records, {who:38} {cpu:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
