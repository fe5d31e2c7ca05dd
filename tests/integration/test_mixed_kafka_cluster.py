"""Mixed clusters with Apache Kafka 4.x (issue 12, part 8): the proof that Odradek's
inter-broker protocol and metadata records are Kafka's.

A. An Apache Kafka broker (``process.roles=broker``, formatted by ``kafka-storage.sh format``
   with our cluster id) registers with an Odradek controller, follows its metadata log and
   replicates with an Odradek broker.
B. An Odradek broker registers with an Apache Kafka controller (formatted at
   ``--release-version 3.9-IV0``, the newest metadata.version Odradek runs) and does the same.

In both, beside the controller: two Odradek brokers (100, 101) and a Kafka broker (200); three
topics with replication factor 3 and ``min.insync.replicas=2``, each preferring another leader
(explicit assignments); an idempotent ``acks=all`` producer. Each broker is killed with SIGKILL in
turn under load: the controller fences it after ``broker.session.timeout.ms``, another ISR member
of either implementation leads, and every acknowledged record is read back exactly once, in
order; the victim returns, truncates and catches up as a follower and is in every ISR again. At
the end every Odradek replica's segment files hold exactly the acknowledged records. Under the
Kafka controller, its auto leader rebalance gives every partition back to its preferred leader;
under the Odradek controller, the Kafka broker runs two log directories and the controller's
metadata log records where it placed each replica (AssignReplicasToDirs).

Skipped without Java or the fetched Kafka jars (failed under CI), as the other Kafka tests.
Every process is killed in a finalizer; Kafka JVMs run with ``-Xmx384m``.
"""

from __future__ import annotations

import base64
import glob
import os
import signal
import subprocess
import sys
import time
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE
from odradek.records.batch import parse_header
from odradek.records.records import decode_batch
from odradek.server.meta_properties import read_meta_properties

from .kafka_reference import KafkaTools, find_kafka_tools
from .support import die_with_parent
from .test_raft_quorum import CLUSTER_ID, _free_ports
from .test_replication import _log_values

SESSION_TIMEOUT_MS = 4000
KAFKA_HEAP = "-Xmx384m -Xms64m"
# The metadata.version both sides run: the newest Odradek supports (Kafka 4.x runs 3.3-IV3 up).
RELEASE_VERSION = "3.9-IV0"


class Node(ABC):
    """One server process (Odradek or Apache Kafka) with its properties and log file."""

    kind = "?"

    def __init__(self, node_id: int, base: Path, props: dict[str, Any]) -> None:
        self.node_id = node_id
        self.data = base / f"n{node_id}"
        self.config = base / f"n{node_id}.properties"
        self.log_path = base / f"n{node_id}.log"
        self.props = {**props, "node.id": node_id, "log.dirs": self.data}
        self.config.write_text("".join(f"{k}={v}\n" for k, v in self.props.items()))
        self.proc: subprocess.Popen[bytes] | None = None

    @abstractmethod
    def command(self) -> list[str]:
        """The process's command line (Odradek's server, or Kafka's via java)."""

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def start(self) -> None:
        assert self.proc is None
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                self.command(), stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env(), preexec_fn=die_with_parent,
            )

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
            self.proc = None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            text = self.log_path.read_text("utf-8", "replace")
        except OSError:
            return ""
        # Kafka's stack traces drown the story: keep the lines that are not "\tat ...".
        lines = [ln for ln in text.splitlines() if not ln.startswith("\tat ")]
        return "\n".join(lines)[-chars:]


class OdradekNode(Node):
    kind = "odradek"

    def format(self) -> None:
        subprocess.run(
            [sys.executable, "-m", "odradek.cli.main", "storage", "format", "--config", str(self.config),
             "--cluster-id", CLUSTER_ID, "--release-version", RELEASE_VERSION],
            check=True, capture_output=True, timeout=60,
        )

    def command(self) -> list[str]:
        return [sys.executable, "-m", "odradek.cli.main", "server", "--config", str(self.config)]


class KafkaNode(Node):
    kind = "kafka"

    def __init__(self, tools: KafkaTools, node_id: int, base: Path, props: dict[str, Any], log_dirs: int = 1) -> None:
        self.tools = tools
        super().__init__(node_id, base, props)
        if log_dirs > 1:
            # JBOD (KIP-858): the controller places new replicas in UNASSIGNED, the broker picks
            # a directory and reports it with AssignReplicasToDirs.
            dirs = ",".join(str(self.data / f"d{i}") for i in range(log_dirs))
            self.props["log.dirs"] = dirs
            self.config.write_text("".join(f"{k}={v}\n" for k, v in self.props.items()))

    @staticmethod
    def slf4j_binding() -> list[str]:
        """A slf4j 1.7 binding on this machine, if any (Kafka's fetched jars log to slf4j-nop)."""
        return sorted(glob.glob("/usr/share/maven-repo/org/slf4j/slf4j-simple/1.7.*/slf4j-simple-1.7.*.jar"))[-1:]

    def _java(self, *args: str) -> list[str]:
        lib = self.tools.home / self.tools.line / "lib"
        # Kafka's fetched jars log through slf4j-nop; a slf4j 1.7 binding put first (when the
        # machine has one) gives the server log a failure message can show.
        cp = ":".join([*self.slf4j_binding(), f"{lib}/*"])
        return ["java", *KAFKA_HEAP.split(), "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Dorg.slf4j.simpleLogger.showDateTime=true",
                "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=warn",
                "-Dorg.slf4j.simpleLogger.log.kafka.server.KafkaConfig=warn",
                "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.common.config=warn",
                "-cp", cp, *args]

    def format(self) -> None:
        r = subprocess.run(
            self._java("kafka.tools.StorageTool", "format", "--cluster-id", CLUSTER_ID,
                       "--config", str(self.config), "--release-version", RELEASE_VERSION),
            capture_output=True, text=True, timeout=120,
        )
        if r.returncode != 0:
            raise AssertionError(f"kafka-storage format of node {self.node_id}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")

    def command(self) -> list[str]:
        return self._java("kafka.Kafka", str(self.config))


def _controller_props(port: int, voters: str) -> dict[str, Any]:
    return {
        "leader.imbalance.check.interval.seconds": 3,
        "process.roles": "controller",
        "listeners": f"CONTROLLER://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
        "controller.quorum.voters": voters,
        "broker.session.timeout.ms": SESSION_TIMEOUT_MS,
    }


def _broker_props(port: int, voters: str) -> dict[str, Any]:
    return {
        "process.roles": "broker",
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "controller.quorum.voters": voters,
        "offsets.topic.replication.factor": 1,
        "group.initial.rebalance.delay.ms": 0,
        "broker.heartbeat.interval.ms": 500,
        "replica.lag.time.max.ms": 5000,
        "replica.fetch.backoff.ms": 200,
    }


class MixedCluster:
    """One controller and three brokers: two Odradek brokers (ids 100, 101) and a Kafka broker
    (id 200)."""

    ODRADEK, ODRADEK2, KAFKA = 100, 101, 200

    def __init__(self, base: Path, tools: KafkaTools, kafka_controller: bool) -> None:
        c, b1, b3, b2 = _free_ports(4)
        voters = f"1@127.0.0.1:{c}"
        ctl_cls: Any = KafkaNode if kafka_controller else OdradekNode
        ctl_args: tuple[Any, ...] = (tools,) if kafka_controller else ()
        self.controller: Node = ctl_cls(*ctl_args, 1, base, _controller_props(c, voters))
        self.brokers: dict[int, Node] = {
            self.ODRADEK: OdradekNode(self.ODRADEK, base, _broker_props(b1, voters)),
            self.ODRADEK2: OdradekNode(self.ODRADEK2, base, _broker_props(b3, voters)),
            # Under an Odradek controller the Kafka broker has two log directories: replicas
            # are placed by AssignReplicasToDirs.
            self.KAFKA: KafkaNode(tools, self.KAFKA, base, _broker_props(b2, voters),
                                  log_dirs=1 if kafka_controller else 2),
        }
        self.ports = {self.ODRADEK: b1, self.ODRADEK2: b3, self.KAFKA: b2}

    @property
    def nodes(self) -> list[Node]:
        return [self.controller, *self.brokers.values()]

    def bootstrap(self, only: int | None = None, exclude: int | None = None) -> str:
        return ",".join(f"127.0.0.1:{p}" for i, p in self.ports.items() if only in (None, i) and i != exclude)

    def start(self) -> None:
        for n in self.nodes:
            n.format()
        for n in self.nodes:
            n.start()

    def stop(self) -> None:
        for n in self.nodes:  # SIGKILL: nothing to wait for, and nothing left behind
            n.kill()

    def logs(self) -> str:
        return "\n".join(f"--- {n.kind} node {n.node_id}\n{n.log_tail()}" for n in self.nodes)


def _wait_for(what: str, cond: Any, cluster: MixedCluster, deadline_s: float) -> Any:
    end = time.monotonic() + deadline_s
    last: Any = None
    while time.monotonic() < end:
        try:
            last = cond()
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.3)
    raise AssertionError(f"{what}: not within {deadline_s}s (last: {last!r})\n{cluster.logs()}")


def _partition(admin: AdminClient, topic: str) -> Any:
    md = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
    if md is None or md.error is not None or 0 not in md.partitions:
        return None
    return md.partitions[0]


def _create(admin: AdminClient, topic: str, replicas: list[int], min_isr: int = 2) -> None:
    last: Exception | None = None
    for _ in range(5):
        try:
            admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[replicas],
                                          config={"min.insync.replicas": str(min_isr)})])[topic].result(30)
            return
        except Exception as e:  # noqa: BLE001 - retried (librdkafka may drop its bootstrap handle)
            if "TOPIC_ALREADY_EXISTS" in str(e):
                return
            last = e
            time.sleep(0.5)
    raise AssertionError(f"CreateTopics {topic}: {last}")


class Load:
    """An idempotent acks=all producer and what it got acknowledged, per topic."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 90000})
        self.acked: dict[str, list[bytes]] = {}
        self.errors: list[str] = []

    def send(self, topic: str, values: list[bytes]) -> None:
        def report(err: Any, msg: Any) -> None:
            if err is None:
                self.acked.setdefault(msg.topic(), []).append(msg.value())
            else:
                self.errors.append(str(err))

        for v in values:
            while True:
                try:
                    self.producer.produce(topic, value=v, partition=0, on_delivery=report)
                    break
                except BufferError:
                    self.producer.poll(0.1)
            self.producer.poll(0)

    def flush(self, cluster: MixedCluster, timeout: float = 90) -> None:
        assert self.producer.flush(timeout) == 0, f"records still unacknowledged\n{cluster.logs()}"
        assert self.errors == [], f"{self.errors[:5]}\n{cluster.logs()}"


def _consume(bootstrap: str, topic: str, expected: int, deadline_s: float) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        end = time.monotonic() + deadline_s
        while time.monotonic() < end and len(got) < expected:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        end = time.monotonic() + 2  # nothing beyond what was acknowledged may show up twice
        while time.monotonic() < end:
            msg = consumer.poll(0.3)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


# Each topic's preferred leader is another broker; every broker follows the two others.
TOPICS: dict[str, list[int]] = {
    "led-by-200": [200, 100, 101],  # Kafka leads, Odradek follows
    "led-by-100": [100, 101, 200],
    "led-by-101": [101, 200, 100],
}


def _kill_each_leader_in_turn(cluster: MixedCluster, *, preferred_restored: bool = False) -> None:
    """The issue's scenario: RF=3, min.insync.replicas=2, an idempotent acks=all producer; each
    broker is killed with SIGKILL in turn under load (the Kafka broker first: an Odradek broker
    takes over its partition; then the Odradek brokers: the Kafka broker takes over one of
    theirs); every acknowledged record is read back exactly once, in order; the killed broker
    returns, truncates and catches up as a follower of the others and is in every ISR again.
    ``preferred_restored``: the controller's auto leader rebalance then gives every partition
    back to its preferred leader (Odradek's controller has no auto rebalance yet)."""
    ids = sorted(cluster.brokers)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    _wait_for("the three brokers registered and unfenced",
              lambda: sorted(admin.list_topics(timeout=3).brokers) == ids, cluster, 120)
    for topic, replicas in TOPICS.items():
        _create(admin, topic, replicas)
        _wait_for(f"{topic}: leader {replicas[0]} with the ISR of 3",
                  lambda t=topic, r=replicas: (p := _partition(admin, t)) is not None and p.leader == r[0]
                  and sorted(p.isrs) == ids, cluster, 60)

    load = Load(cluster.bootstrap())
    sent: dict[str, list[bytes]] = {t: [] for t in TOPICS}

    def send(tag: str, n: int) -> None:
        for t in TOPICS:
            values = [f"{t}-{tag}-{i:04d}".encode() for i in range(n)]
            sent[t].extend(values)
            load.send(t, values)

    send("start", 200)
    load.flush(cluster)
    for victim in (MixedCluster.KAFKA, MixedCluster.ODRADEK, MixedCluster.ODRADEK2):
        others = AdminClient({"bootstrap.servers": cluster.bootstrap(exclude=victim)})
        led = [t for t in TOPICS if _partition(others, t).leader == victim]
        assert led, f"broker {victim} leads nothing"
        send(f"before-{victim}", 100)
        cluster.brokers[victim].kill()
        send(f"after-{victim}", 100)
        load.flush(cluster)  # acks=all with the two others (the ISR shrinks when the victim is fenced)
        for t in led:
            _wait_for(f"{t}: a new leader after broker {victim} died",
                      lambda t=t, a=others, v=victim: (p := _partition(a, t)) is not None
                      and p.leader not in (-1, v) and v not in p.isrs, cluster, 30)
        for t in TOPICS:
            got = _consume(cluster.bootstrap(exclude=victim), t, len(sent[t]), 30)
            assert got == sent[t] == load.acked[t], (victim, t, len(got), len(sent[t]), len(load.acked[t]))
        print(f"broker {victim} killed; leaders now",
              {t: _partition(others, t).leader for t in TOPICS})
        cluster.brokers[victim].start()
        for t in TOPICS:
            _wait_for(f"{t}: broker {victim} back in the ISR", lambda t=t, a=others: (p := _partition(a, t)) is not None
                      and sorted(p.isrs) == ids, cluster, 90)
    if preferred_restored:
        for t, replicas in TOPICS.items():
            _wait_for(f"{t}: the preferred leader {replicas[0]} restored",
                      lambda t=t, r=replicas: (p := _partition(admin, t)) is not None and p.leader == r[0],
                      cluster, 60)
    send("end", 100)
    load.flush(cluster)
    for t in TOPICS:
        got = _consume(cluster.bootstrap(), t, len(sent[t]), 30)
        assert got == sent[t] == load.acked[t], (t, len(got), len(sent[t]), len(load.acked[t]))
        for o in (MixedCluster.ODRADEK, MixedCluster.ODRADEK2):
            # Every Odradek replica's segment files hold exactly the acknowledged records.
            _wait_for(f"{t}: broker {o}'s log equals what was acknowledged",
                      lambda t=t, o=o: _log_values(cast(Any, cluster.brokers[o]), t) == sent[t], cluster, 30)
    load.producer.flush(5)


def _recorded_directories(controller: Node) -> dict[uuid.UUID, list[uuid.UUID]]:
    """topic id -> the directories of partition 0 in the last record of the controller's
    metadata log that set them (PartitionRecord or PartitionChangeRecord)."""
    out: dict[uuid.UUID, list[uuid.UUID]] = {}
    for path in sorted((controller.data / "__cluster_metadata-0").glob("*.log")):
        buf = path.read_bytes()
        pos = 0
        while pos + 61 <= len(buf):
            size = parse_header(buf, pos).size
            if size <= 0 or pos + size > len(buf):
                break
            for r in decode_batch(buf[pos:pos + size]):
                try:
                    name, rec = METADATA_RECORD_SERDE.read(bytes(r.value or b""))
                except Exception:  # noqa: BLE001, S112 - control records and the like
                    continue
                if name in ("PartitionRecord", "PartitionChangeRecord") and rec.get("directories"):
                    out[rec["topic_id"]] = list(rec["directories"])
            pos += size
    return out


def _dir_holding(node: Node, topic: str) -> Path:
    """The log directory of a Kafka broker holding ``topic``-0."""
    for d in str(node.props["log.dirs"]).split(","):
        if (Path(d) / f"{topic}-0").is_dir():
            return Path(d)
    raise AssertionError(f"no log directory of {node.node_id} holds {topic}-0")


def _directory_id(log_dir: Path) -> uuid.UUID:
    text = read_meta_properties(str(log_dir / "meta.properties"))["directory.id"]
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


@pytest.mark.timeout(420)
def test_kafka_broker_with_an_odradek_controller(tmp_path: Path) -> None:
    tools = find_kafka_tools("4")
    cluster = MixedCluster(tmp_path, tools, kafka_controller=False)
    try:
        cluster.start()
        _kill_each_leader_in_turn(cluster)
        # The Kafka broker (two log directories) reported where it keeps each replica with
        # AssignReplicasToDirs, and the controller recorded it (KIP-858).
        kafka = cluster.brokers[MixedCluster.KAFKA]
        recorded = _recorded_directories(cluster.controller)
        for topic, replicas in TOPICS.items():
            kafka_index = replicas.index(MixedCluster.KAFKA)
            d = _dir_holding(kafka, topic)
            meta = dict(line.split(": ", 1) for line in (d / f"{topic}-0" / "partition.metadata").read_text().split("\n") if line)
            topic_id = uuid.UUID(bytes=base64.urlsafe_b64decode(meta["topic_id"] + "=="))
            assert recorded[topic_id][kafka_index] == _directory_id(d), (topic, recorded[topic_id])
        # The Kafka broker forwards DescribeQuorum and RemoveRaftVoter in an Envelope; the
        # controller answers them (a static quorum refuses the voter change).
        via_kafka = ["--bootstrap-server", cluster.bootstrap(only=MixedCluster.KAFKA)]
        status = tools.run("kafka-metadata-quorum", *via_kafka, "describe", "--status").stdout
        assert "LeaderId:               1\n" in status, status
        r = tools.run("kafka-metadata-quorum", *via_kafka, "remove-controller", "--controller-id", "1",
                      "--controller-directory-id", "AAAAAAAAAAAAAAAAAAAAAQ", check=False)
        assert r.returncode == 1 and "UnsupportedVersionException: Cluster doesn't support removing voter" \
            in r.stderr, r.stderr
        # Every request the Kafka broker sends its controller (AssignReplicasToDirs, Envelope,
        # AlterPartition, ...) is one the controller serves. Only readable with a slf4j binding.
        if KafkaNode.slf4j_binding():
            kafka_log = cluster.brokers[MixedCluster.KAFKA].log_tail(10**7)
            assert "Kafka Server started" in kafka_log
            assert "AssignReplicasToDirs" not in kafka_log or "failed due to" not in kafka_log, kafka_log[-3000:]
            assert "unsupported version" not in kafka_log.lower(), kafka_log[-3000:]
    finally:
        cluster.stop()


@pytest.mark.timeout(420)
def test_odradek_broker_with_a_kafka_controller(tmp_path: Path) -> None:
    tools = find_kafka_tools("4")
    cluster = MixedCluster(tmp_path, tools, kafka_controller=True)
    try:
        cluster.start()
        _kill_each_leader_in_turn(cluster, preferred_restored=True)
    finally:
        cluster.stop()
