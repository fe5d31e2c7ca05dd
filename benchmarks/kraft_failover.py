#!/usr/bin/env python3
"""KRaft controller failover: kill -9 of the active controller → first successful CreateTopics
through a broker.

    python3 benchmarks/kraft_failover.py                 # 3 controllers, 1 broker, 5 rounds
    python3 benchmarks/kraft_failover.py --brokers 3 --rounds 10 --json
    python3 benchmarks/kraft_failover.py --stop          # SIGSTOP instead: nothing refused

Starts a local cluster (:class:`odradek.cli.cluster.LocalCluster`: 3 controller-only and
``--brokers`` broker-only ``odradek server`` processes on loopback, Kafka's default
``controller.quorum.*`` timeouts unless ``--override`` says otherwise). Each round:

1. waits until the quorum is whole (the leader's DescribeQuorum shows every voter caught up to
   the high watermark) and a CreateTopics through the broker succeeds;
2. finds the active controller (DescribeQuorum) and kills it with SIGKILL;
3. from that instant, two things run side by side on one event loop: CreateTopics of a fresh
   1-partition topic sent through the first broker over one connection (Odradek's own
   :class:`~odradek.network.client.NetworkClient`, so no client metadata cache decides where it
   goes; retried 20 ms after every failure: NOT_CONTROLLER, REQUEST_TIMED_OUT, ...) and
   DescribeQuorum polled on the surviving controllers every 20 ms. **failover** is the time to
   the first CreateTopics answered without error; **election** the time until a survivor
   says it leads a later epoch;
4. restarts the killed controller (``--stop``: SIGSTOP, not SIGKILL — a hung process, whose
   connections are not refused; it is resumed and let catch up after the round).

Prints min / median / max over ``--rounds``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the odradek of this checkout, as its servers run it

from bench_support import make_log  # noqa: E402

from odradek.cli.cluster import LocalCluster, Node  # noqa: E402
from odradek.network.client import NetworkClient  # noqa: E402
from odradek.protocol import messages as m  # noqa: E402
from odradek.protocol.errors import Errors  # noqa: E402

log = make_log("kraft_failover")
RETRY_S = 0.02


def create_topics_body(name: str, timeout_ms: int) -> dict[str, Any]:
    return {
        "topics": [{"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout_ms": timeout_ms,
        "validate_only": False,
    }


async def create_until_ok(port: int, name: str, deadline: float) -> tuple[float, int, list[str]]:
    """CreateTopics through the broker on ``port`` until it succeeds: (when, attempts, errors)."""
    errors: list[str] = []
    attempts = 0
    client = NetworkClient("127.0.0.1", port, "kraft-failover", reconnect_backoff_ms=10,
                           reconnect_backoff_max_ms=50)
    try:
        while time.monotonic() < deadline:
            attempts += 1
            try:
                resp = await asyncio.wait_for(client.send(m.CREATE_TOPICS, 7, create_topics_body(name, 5000)), 10)
                code = resp["topics"][0]["error_code"]
            except (OSError, TimeoutError) as e:
                errors.append(type(e).__name__)
                await asyncio.sleep(RETRY_S)
                continue
            if code in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS):
                return time.monotonic(), attempts, errors
            errors.append(Errors(code).name)
            await asyncio.sleep(RETRY_S)
    finally:
        await client.close()
    raise TimeoutError(f"CreateTopics {name} did not succeed; errors {errors[-5:]}")


async def wait_new_leader(survivors: list[Node], above_epoch: int, deadline: float) -> tuple[float, int, int]:
    """Until a survivor answers DescribeQuorum as leader of an epoch above ``above_epoch``."""
    from odradek.protocol.messages import generated as g

    body = {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}
    clients = [NetworkClient("127.0.0.1", n.port, "kraft-failover") for n in survivors]
    try:
        while time.monotonic() < deadline:
            for c in clients:
                try:
                    resp = await asyncio.wait_for(c.send(g.DESCRIBE_QUORUM, 2, body), 1)
                except (OSError, TimeoutError):
                    continue
                part = resp["topics"][0]["partitions"][0] if resp["topics"] else None
                if part and part["error_code"] == 0 and part["leader_epoch"] > above_epoch:
                    return time.monotonic(), part["leader_id"], part["leader_epoch"]
            await asyncio.sleep(RETRY_S)
    finally:
        for c in clients:
            await c.close()
    raise TimeoutError("no new leader")


def wait_whole_quorum(cluster: LocalCluster, timeout: float = 60) -> dict[str, Any]:
    """Until the leader sees every voter at the high watermark; its DescribeQuorum answer."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        leader = cluster.active_controller()
        part = cluster.describe_quorum(leader) if leader is not None else None
        if part is not None and part["error_code"] == 0:
            hw = part["high_watermark"]
            voters = part["current_voters"]
            if len(voters) == len(cluster.controllers) and all(v["log_end_offset"] >= hw for v in voters):
                return part
        time.sleep(0.1)
    raise TimeoutError("the quorum did not become whole\n" + "\n".join(n.log_tail() for n in cluster.controllers))


async def measure(
    port: int, topic: str, survivors: list[Node], epoch: int, deadline: float
) -> tuple[tuple[float, int, list[str]], tuple[float, int, int]]:
    """Both clocks of one round, side by side: CreateTopics retried through the broker, and
    DescribeQuorum polled on the survivors."""
    created, elected = await asyncio.gather(
        create_until_ok(port, topic, deadline), wait_new_leader(survivors, epoch, deadline)
    )
    return created, elected


def summary(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", type=int, default=1, choices=(1, 2, 3))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--override", "-o", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting for every node (e.g. controller.quorum.fetch.timeout.ms=...)")
    ap.add_argument("--stop", action="store_true", help="SIGSTOP the active controller, not SIGKILL")
    ap.add_argument("--json", action="store_true", help="JSON on stdout")
    args = ap.parse_args()
    overrides = dict(item.split("=", 1) for item in args.override)

    cluster = LocalCluster(3, args.brokers, overrides=overrides)
    rounds: list[dict[str, Any]] = []
    try:
        log(f"starting 3 controllers and {args.brokers} brokers in {cluster.base}")
        cluster.start()
        broker = cluster.brokers[0]
        for r in range(args.rounds):
            part = wait_whole_quorum(cluster)
            asyncio.run(create_until_ok(broker.port, f"warm-{r}", time.monotonic() + 60))
            leader = cluster.node(part["leader_id"])
            epoch = part["leader_epoch"]
            survivors = [c for c in cluster.controllers if c is not leader]

            if args.stop:
                cluster.pause(leader)
            else:
                cluster.kill(leader)
            killed_at = time.monotonic()
            (created_at, attempts, errors), (elected_at, new_leader, new_epoch) = asyncio.run(
                measure(broker.port, f"failover-{r}", survivors, epoch, killed_at + 60)
            )
            row = {
                "round": r + 1, "killed": leader.node_id, "epoch": epoch, "new_leader": new_leader,
                "new_epoch": new_epoch, "election_s": elected_at - killed_at,
                "failover_s": created_at - killed_at, "attempts": attempts,
                "errors": sorted(set(errors)),
            }
            rounds.append(row)
            log(f"round {r + 1}: killed controller {leader.node_id} (epoch {epoch}); node {new_leader} leads "
                f"epoch {new_epoch} after {row['election_s']:.3f}s; CreateTopics through broker "
                f"{broker.node_id} succeeded after {row['failover_s']:.3f}s ({attempts} attempts, {row['errors']})")
            if args.stop:
                cluster.resume(leader)
            else:
                cluster.start_node(leader)
    finally:
        cluster.stop()

    result = {
        "brokers": args.brokers, "rounds": rounds, "overrides": overrides,
        "failover_s": summary([r["failover_s"] for r in rounds]),
        "election_s": summary([r["election_s"] for r in rounds]),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"kill -9 of the active controller, 3 controllers + {args.brokers} broker(s), {len(rounds)} rounds")
        print(f"{'':28}{'min':>8}{'median':>8}{'max':>8}")
        for key, label in (("election_s", "new leader elected (s)"), ("failover_s", "CreateTopics succeeds (s)")):
            s = result[key]
            print(f"{label:28}{s['min']:8.3f}{s['median']:8.3f}{s['max']:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
