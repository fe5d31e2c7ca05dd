"""Controller failover: kill -9 of the active controller → first successful CreateTopics
through a broker.

    python3 benchmarks/controller_failover.py --kills 5
    python3 benchmarks/controller_failover.py --kills 5 --stop   # SIGSTOP instead: no RST
    python3 benchmarks/controller_failover.py --kills 5 --override controller.quorum.fetch.timeout.ms=2000

Starts three controller-only ``odradek server`` processes and one broker-only process on free
loopback ports (Kafka's default ``controller.quorum.*`` timeouts unless ``--override``), waits
for the broker to serve, then ``--kills`` times: finds the active controller with DescribeQuorum,
kills it with SIGKILL, and creates a 1-partition topic through the broker with a confluent-kafka
AdminClient in a loop (each attempt bounded by ``--attempt-timeout``) until one succeeds. The
time from the kill to that success is one sample. The killed controller is then restarted and
the next round waits until it is back in the quorum (DescribeQuorum on the leader shows its log
end offset at the high watermark). Prints each sample and the median, min and max; the server
logs stay in the printed directory with ``--keep``.

A killed process's connections are refused or reset at once (loopback), which the followers take
as a hint to run a pre-vote early. ``--stop`` sends SIGSTOP instead (a hung process or a dead
host: nothing answers, nothing is refused), so the failover waits for
``controller.quorum.fetch.timeout.ms`` as in Kafka; the stopped controller gets SIGCONT once the
sample is taken (it learns of the new epoch and steps down) and is then killed and restarted.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_support import free_ports, make_log
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.network.client import NetworkClient
from odradek.protocol.messages import generated as g

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
log = make_log("failover")


class Node:
    def __init__(self, node_id: int, roles: str, port: int, voters: str, base: Path,
                 overrides: list[str]) -> None:
        self.node_id, self.port = node_id, port
        self.config = base / f"n{node_id}.properties"
        self.log_path = base / f"n{node_id}.log"
        listener = "CONTROLLER" if roles == "controller" else "PLAINTEXT"
        lines = [
            f"process.roles={roles}", f"node.id={node_id}",
            f"listeners={listener}://127.0.0.1:{port}", "controller.listener.names=CONTROLLER",
            f"controller.quorum.voters={voters}", f"log.dirs={base / f'n{node_id}'}",
            "offsets.topic.replication.factor=1", *overrides,
        ]
        self.config.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def format(self) -> None:
        subprocess.run([sys.executable, "-m", "odradek.cli.main", "storage", "format", "--config",
                        str(self.config), "--cluster-id", CLUSTER_ID],
                       check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        with open(self.log_path, "ab") as f:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "odradek.cli.main", "server", "--config", str(self.config)],
                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.proc = None


async def describe_quorum(port: int) -> dict[str, Any] | None:
    client = NetworkClient("127.0.0.1", port)
    try:
        resp = await asyncio.wait_for(client.send(g.DESCRIBE_QUORUM, 2, {"topics": [
            {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}), 3)
    except (OSError, TimeoutError):
        return None
    finally:
        await client.close()
    part = dict(resp["topics"][0]["partitions"][0])
    return part if part["error_code"] == 0 else None


def leader_answer(controllers: list[Node], deadline_s: float, all_caught_up: bool) -> dict[str, Any]:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        for c in controllers:
            if c.proc is None:
                continue
            part = asyncio.run(describe_quorum(c.port))
            if part is None:
                continue
            hw = part["high_watermark"]
            voters = part["current_voters"]
            if not all_caught_up or (len(voters) == 3 and all(v["log_end_offset"] >= hw for v in voters)):
                return part
        time.sleep(0.2)
    raise SystemExit("no leader (with every voter caught up) in time")


def create_until_ok(admin: AdminClient, name: str, attempt_s: float, deadline_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() < start + deadline_s:
        fut = admin.create_topics([NewTopic(name, 1, 1)], request_timeout=attempt_s,
                                  operation_timeout=attempt_s)[name]
        try:
            fut.result(timeout=attempt_s + 2)
            return time.monotonic()
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            if "TOPIC_ALREADY_EXISTS" in str(e):
                return time.monotonic()
            time.sleep(0.02)
    raise SystemExit(f"CreateTopics {name} did not succeed within {deadline_s}s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--attempt-timeout", type=float, default=5.0)
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--keep", action="store_true", help="keep the data and log directory")
    ap.add_argument("--stop", action="store_true", help="SIGSTOP the active controller, not SIGKILL")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="odradek-failover-"))
    ports = free_ports(4)
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports[:3]))
    controllers = [Node(i + 1, "controller", p, voters, base, args.override) for i, p in enumerate(ports[:3])]
    broker = Node(101, "broker", ports[3], voters, base, args.override)
    nodes = [*controllers, broker]
    samples: list[float] = []
    try:
        for n in nodes:
            n.format()
        for n in nodes:
            n.start()
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
        create_until_ok(admin, "warm-up", 10, 120)
        log(f"cluster up in {base}")
        for i in range(args.kills):
            part = leader_answer(controllers, 60, all_caught_up=True)
            time.sleep(1.0)  # let the quorum settle (fetches in flight, broker heartbeats)
            victim = controllers[part["leader_id"] - 1]
            if args.stop:
                assert victim.proc is not None
                victim.proc.send_signal(signal.SIGSTOP)
            else:
                victim.kill()
            killed = time.monotonic()
            log(f"{'SIGSTOP' if args.stop else 'kill -9'} controller {victim.node_id} (epoch {part['leader_epoch']}) "
                f"at {time.strftime('%H:%M:%S')}.{int(time.time() * 1000) % 1000:03d}")
            done = create_until_ok(admin, f"after-kill-{i}", args.attempt_timeout, 60)
            samples.append(done - killed)
            log(f"kill {i + 1}: CreateTopics through the broker succeeded after {done - killed:.3f}s")
            if args.stop and victim.proc is not None:
                victim.proc.send_signal(signal.SIGCONT)
                time.sleep(0.5)
                victim.kill()
            victim.start()
        log("samples: " + ", ".join(f"{s:.3f}" for s in samples))
        print(f"failover over {len(samples)} kills: median {statistics.median(samples):.3f}s, "
              f"min {min(samples):.3f}s, max {max(samples):.3f}s")
    finally:
        admin = None  # noqa: F841 - librdkafka's threads stop before the broker does
        for n in [broker, *controllers]:
            n.stop()
        if args.keep:
            log(f"logs kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
