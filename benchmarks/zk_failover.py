#!/usr/bin/env python3
"""ZooKeeper mode beside KRaft: controller failover, and leader election for many partitions.

    python3 benchmarks/zk_failover.py                         # 3 rounds, 1,000 partitions
    python3 benchmarks/zk_failover.py --rounds 5 --partitions 2000 --json
    python3 benchmarks/zk_failover.py --skip-kraft            # ZooKeeper mode only

ZooKeeper mode: one ZooKeeper (Debian's ``zookeeper`` jars, ``ZooKeeperServerMain`` on a free
loopback port) and 3 ``odradek server`` processes with ``zookeeper.connect`` and no
``process.roles``. KRaft: :class:`odradek.cli.cluster.LocalCluster` with 3 controllers and 3
brokers (separate processes; Odradek has no combined mode in LocalCluster).

1. **controller failover** (``--rounds`` rounds): kill -9 of the controller (ZooKeeper mode: the
   broker named in ``/controller``; KRaft: the active controller from DescribeQuorum) → the first
   CreateTopics (confluent-kafka AdminClient, bootstrap = the survivors; a new client per attempt,
   so no cached controller id decides where it goes, with a 2 s request timeout; retried 50 ms
   after each failure, for at most 120 s) that succeeds. The killed node is restarted between rounds.
2. **leader election** (once): a topic of ``--partitions`` partitions with replication factor 3;
   kill -9 of the broker leading the most of them (ZooKeeper mode: not the controller, so
   that only the leader elections are timed) → the first Metadata answer (from the survivors,
   polled every 100 ms) in which every partition has a live leader.

In ZooKeeper mode the controller learns of a dead broker when its ZooKeeper session expires:
``--zk-session-timeout-ms`` (Kafka's default 18000) bounds both figures from below. KRaft's
counterparts are ``controller.quorum.fetch.timeout.ms`` (2000) and ``broker.session.timeout.ms``
(9000), Kafka's defaults.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the odradek of this checkout, as its servers run it

from bench_support import READY_LINE, free_ports, make_log, table  # noqa: E402
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from odradek.cli.cluster import LocalCluster  # noqa: E402

log = make_log("zk_failover")
JARS = Path("/usr/share/java")
ZK_JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar")
CREATE_RETRY_S = 0.05
POLL_S = 0.1
LIMIT_S = 120.0


# --------------------------------------------------------------------------------------------
# Measurements shared by both modes


def admin(bootstrap: str) -> AdminClient:
    """A fresh AdminClient that learns the controller from Metadata every 250 ms (librdkafka's
    default of 5 minutes would keep a long-lived client on the dead controller) and keeps
    librdkafka's connection-refused lines off stderr."""
    return AdminClient({"bootstrap.servers": bootstrap, "topic.metadata.refresh.interval.ms": 250,
                        "socket.connection.setup.timeout.ms": 2000, "log_level": 0})


def create_until_ok(bootstrap: str, name: str) -> tuple[float, int, list[str]]:
    """CreateTopics of a 1-partition topic until it succeeds: (when, attempts, errors seen).
    Each attempt uses a new client (no cached controller) with a 2 s request timeout."""
    errors: list[str] = []
    attempts = 0
    deadline = time.monotonic() + LIMIT_S
    while time.monotonic() < deadline:
        attempts += 1
        client = admin(bootstrap)  # held until the future is done: it resolves the future
        try:
            client.create_topics([NewTopic(name, 1, 1)], operation_timeout=5,
                                 request_timeout=2)[name].result(10)
            return time.monotonic(), attempts, errors
        except concurrent.futures.TimeoutError:
            errors.append("no answer in 10 s")
        except KafkaException as e:
            err = e.args[0]
            if err.name() == "TOPIC_ALREADY_EXISTS":
                return time.monotonic(), attempts, errors
            errors.append(err.name())
        time.sleep(CREATE_RETRY_S)
    raise TimeoutError(f"CreateTopics {name} did not succeed within {LIMIT_S}s: {errors[-5:]}")


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = admin(bootstrap).list_topics(topic, timeout=10).topics.get(topic)
    if md is None or md.error is not None:
        return {}
    return {p: pm.leader for p, pm in md.partitions.items()}


def create_big_topic(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """``partitions`` partitions of RF 3; waits until all have a leader; partition → leader."""
    client = admin(bootstrap)
    client.create_topics([NewTopic(topic, partitions, 3)], operation_timeout=60,
                         request_timeout=90)[topic].result(120)
    deadline = time.monotonic() + LIMIT_S
    while time.monotonic() < deadline:
        got = leaders(bootstrap, topic)
        if len(got) == partitions and all(v >= 0 for v in got.values()):
            return got
        time.sleep(0.5)
    raise TimeoutError(f"{topic}: not every partition has a leader")


def wait_all_led(bootstrap: str, topic: str, partitions: int, live: set[int]) -> float:
    """Until a Metadata answer shows a live leader for every partition; when."""
    deadline = time.monotonic() + LIMIT_S
    while time.monotonic() < deadline:
        try:
            got = leaders(bootstrap, topic)
        except KafkaException:
            got = {}
        if len(got) == partitions and all(v in live for v in got.values()):
            return time.monotonic()
        time.sleep(POLL_S)
    raise TimeoutError(f"{topic}: some partitions had no live leader after {LIMIT_S}s")


def most_leading(led: dict[int, int], candidates: set[int]) -> tuple[int, int]:
    counts = {b: sum(1 for v in led.values() if v == b) for b in candidates}
    best = max(counts, key=lambda b: counts[b])
    return best, counts[best]


def wait_brokers(bootstrap: str, expected: set[int]) -> None:
    deadline = time.monotonic() + LIMIT_S
    while time.monotonic() < deadline:
        try:
            if set(admin(bootstrap).list_topics(timeout=5).brokers) == expected:
                return
        except KafkaException:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"the brokers {sorted(expected)} were not all registered")


# --------------------------------------------------------------------------------------------
# ZooKeeper mode


class ZkCluster:
    """A ZooKeeper and 3 ZooKeeper-mode brokers (ids 1..3) under a temporary directory."""

    def __init__(self, session_timeout_ms: int, brokers: int = 3) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="odradek-zkbench-"))
        ports = free_ports(brokers + 1)
        self.zk_port = ports[0]
        self.ports = {i + 1: ports[i + 1] for i in range(brokers)}
        self.session_timeout_ms = session_timeout_ms
        self.zk: subprocess.Popen[bytes] | None = None
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self._mark: dict[int, int] = {}

    def bootstrap(self, without: int | None = None) -> str:
        return ",".join(f"127.0.0.1:{p}" for i, p in self.ports.items() if i != without)

    def start(self) -> None:
        missing = [j for j in ZK_JARS if not (JARS / j).exists()]
        if shutil.which("java") is None or missing:
            raise RuntimeError(f"ZooKeeper needs java and the Debian zookeeper package (missing {missing})")
        (self.base / "zk").mkdir()
        cfg = self.base / "zoo.cfg"
        cfg.write_text(f"tickTime=500\ndataDir={self.base / 'zk'}\nclientPort={self.zk_port}\n"
                       "clientPortAddress=127.0.0.1\nadmin.enableServer=false\nmaxSessionTimeout=60000\n")
        cp = ":".join(str(JARS / j) for j in (*ZK_JARS, "slf4j-simple.jar") if (JARS / j).exists())
        with open(self.base / "zookeeper.log", "ab") as f:
            self.zk = subprocess.Popen(
                ["java", "-Xmx128m", "-cp", cp, "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg)],
                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        for i in self.ports:
            self.start_broker(i)
        for i in self.ports:
            self.wait_ready(i)
        wait_brokers(self.bootstrap(), set(self.ports))

    def log_path(self, i: int) -> Path:
        return self.base / f"broker-{i}.log"

    def start_broker(self, i: int) -> None:
        props = {
            "broker.id": str(i), "zookeeper.connect": f"127.0.0.1:{self.zk_port}",
            "zookeeper.session.timeout.ms": str(self.session_timeout_ms),
            "log.dirs": str(self.base / f"data-{i}"), "listeners": f"PLAINTEXT://127.0.0.1:{self.ports[i]}",
            "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
        }
        cmd = [sys.executable, "-m", "odradek.cli.main", "server"]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        self.log_path(i).touch()
        self._mark[i] = self.log_path(i).stat().st_size  # wait_ready reads from here on
        with open(self.log_path(i), "ab") as f:
            self.procs[i] = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=env, start_new_session=True)

    def wait_ready(self, i: int) -> None:
        deadline = time.monotonic() + LIMIT_S
        while time.monotonic() < deadline:
            if self.procs[i].poll() is not None:
                raise RuntimeError(f"broker {i} exited {self.procs[i].returncode}: {self.tail(i)}")
            with open(self.log_path(i), "rb") as f:
                f.seek(self._mark[i])
                if READY_LINE.encode() in f.read():
                    return
            time.sleep(0.1)
        raise TimeoutError(f"broker {i} not ready: {self.tail(i)}")

    def tail(self, i: int) -> str:
        return self.log_path(i).read_text(errors="replace")[-3000:]

    def controller(self) -> int:
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=f"127.0.0.1:{self.zk_port}", timeout=10)
        zk.start(timeout=15)
        try:
            deadline = time.monotonic() + LIMIT_S
            while time.monotonic() < deadline:
                if zk.exists("/controller"):
                    data, _ = zk.get("/controller")
                    return int(json.loads(data)["brokerid"])
                time.sleep(0.2)
        finally:
            zk.stop()
            zk.close()
        raise TimeoutError("no /controller")

    def kill(self, i: int) -> None:
        self.procs[i].kill()
        self.procs[i].wait(15)

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(15)
        if self.zk is not None and self.zk.poll() is None:
            self.zk.terminate()
            try:
                self.zk.wait(15)
            except subprocess.TimeoutExpired:
                self.zk.kill()
                self.zk.wait(15)
        shutil.rmtree(self.base, ignore_errors=True)


def run_zk(rounds: int, partitions: int, session_timeout_ms: int) -> dict[str, Any]:
    cluster = ZkCluster(session_timeout_ms)
    out: dict[str, Any] = {"zookeeper.session.timeout.ms": session_timeout_ms, "failover": []}
    try:
        log(f"ZooKeeper mode: starting ZooKeeper and 3 brokers in {cluster.base}")
        cluster.start()
        for r in range(rounds):
            create_until_ok(cluster.bootstrap(), f"zk-warm-{r}")
            ctl = cluster.controller()
            cluster.kill(ctl)
            killed_at = time.monotonic()
            created_at, attempts, errors = create_until_ok(cluster.bootstrap(without=ctl), f"zk-failover-{r}")
            row = {"round": r + 1, "killed": ctl, "failover_s": created_at - killed_at, "attempts": attempts,
                   "errors": sorted(set(errors))}
            out["failover"].append(row)
            log(f"ZK round {r + 1}: killed controller {ctl}; CreateTopics ok after {row['failover_s']:.3f}s "
                f"({attempts} attempts, {row['errors']})")
            cluster.start_broker(ctl)
            cluster.wait_ready(ctl)
            wait_brokers(cluster.bootstrap(), set(cluster.ports))
        out["election"] = elect(cluster.bootstrap, set(cluster.ports), cluster.kill, partitions,
                                avoid=cluster.controller(), tag="zk")
    finally:
        cluster.stop()
    return out


def elect(bootstrap: Any, brokers: set[int], kill: Any, partitions: int, avoid: int | None,
          tag: str) -> dict[str, Any]:
    topic = f"{tag}-elect"
    log(f"{tag}: creating {partitions} partitions of RF 3")
    led = create_big_topic(bootstrap(), topic, partitions)
    victim, count = most_leading(led, brokers - ({avoid} if avoid is not None else set()))
    kill(victim)
    killed_at = time.monotonic()
    done = wait_all_led(bootstrap(without=victim), topic, partitions, brokers - {victim})
    row = {"killed": victim, "partitions": partitions, "led_by_killed": count, "election_s": done - killed_at}
    log(f"{tag}: killed broker {victim} leading {count}/{partitions}; every partition led by a live broker "
        f"after {row['election_s']:.3f}s")
    return row


# --------------------------------------------------------------------------------------------
# KRaft


def run_kraft(rounds: int, partitions: int) -> dict[str, Any]:
    from kraft_failover import wait_whole_quorum

    cluster = LocalCluster(3, 3)
    out: dict[str, Any] = {"failover": []}
    brokers = {b.node_id for b in cluster.brokers}

    def bootstrap(without: int | None = None) -> str:
        return ",".join(b.address for b in cluster.brokers if b.node_id != without)

    try:
        log(f"KRaft: starting 3 controllers and 3 brokers in {cluster.base}")
        cluster.start()
        for r in range(rounds):
            part = wait_whole_quorum(cluster)
            create_until_ok(bootstrap(), f"kraft-warm-{r}")
            leader = cluster.node(part["leader_id"])
            cluster.kill(leader)
            killed_at = time.monotonic()
            created_at, attempts, errors = create_until_ok(bootstrap(), f"kraft-failover-{r}")
            row = {"round": r + 1, "killed": leader.node_id, "failover_s": created_at - killed_at,
                   "attempts": attempts, "errors": sorted(set(errors))}
            out["failover"].append(row)
            log(f"KRaft round {r + 1}: killed controller {leader.node_id}; CreateTopics ok after "
                f"{row['failover_s']:.3f}s ({attempts} attempts, {row['errors']})")
            cluster.start_node(leader)
        wait_whole_quorum(cluster)
        out["election"] = elect(bootstrap, brokers, lambda i: cluster.kill(cluster.node(i)), partitions,
                                avoid=None, tag="kraft")
    finally:
        cluster.stop()
    return out


def summary(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="controller kills per mode (3)")
    ap.add_argument("--partitions", type=int, default=1000, help="partitions of the election topic (1000)")
    ap.add_argument("--zk-session-timeout-ms", type=int, default=18000,
                    help="zookeeper.session.timeout.ms of the ZooKeeper-mode brokers (Kafka's 18000)")
    ap.add_argument("--skip-kraft", action="store_true", help="ZooKeeper mode only")
    ap.add_argument("--json", action="store_true", help="JSON on stdout")
    args = ap.parse_args()

    result: dict[str, Any] = {"rounds": args.rounds, "partitions": args.partitions}
    result["zk"] = run_zk(args.rounds, args.partitions, args.zk_session_timeout_ms)
    if not args.skip_kraft:
        result["kraft"] = run_kraft(args.rounds, args.partitions)
    modes = [m for m in ("zk", "kraft") if m in result]
    for mode in modes:
        result[mode]["failover_s"] = summary([r["failover_s"] for r in result[mode]["failover"]])

    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"kill -9, 3 brokers per mode; failover over {args.rounds} rounds; election of "
          f"{args.partitions} partitions (RF 3), once")
    rows: list[tuple[str, ...]] = []
    for mode in modes:
        name = "ZooKeeper" if mode == "zk" else "KRaft"
        f = result[mode]["failover_s"]
        rows.append((f"{name}: controller → CreateTopics ok", f"{f['min']:.3f}", f"{f['median']:.3f}",
                     f"{f['max']:.3f}", "s"))
        e = result[mode]["election"]
        rows.append((f"{name}: {e['led_by_killed']} leaders re-elected", "", f"{e['election_s']:.3f}", "", "s"))
    table(("", "min", "median", "max", "unit"), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
