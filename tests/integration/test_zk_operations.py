"""ZooKeeper-mode operations on real processes: three ``odradek server`` brokers in ZooKeeper mode
on a real ZooKeeper, driven by real clients (confluent-kafka, kafka-python) and by Kafka's admin
znodes written directly with kazoo, in Kafka's JSON.

- topic deletion with a replica's broker down (stopped, or killed just before): the deletion stops
  at the ineligible replica
  (``/admin/delete_topics/<t>`` and the topic's znodes stay, the down broker's logs stay) and
  finishes when the broker returns; ``delete.topic.enable=false`` → TOPIC_DELETION_DISABLED
  (INVALID_REQUEST below v3, as Kafka 3.9) and a znode request is dropped;
- reassignment through ``/admin/reassign_partitions`` and AlterPartitionReassignments /
  ListPartitionReassignments, data intact on the new replicas, cancellation;
- preferred leader election through ``/admin/preferred_replica_election`` and the automatic
  rebalance (ElectLeaders after a restart: test_zk_mode.py);
- controlled shutdown (SIGTERM) with a producer running: no leaderless partition, nothing lost;
- DeleteTopics v6 by topic id;
- a reassignment and a deletion pending across a controller kill -9;
- ``odradek reassign`` / ``leader-election`` / ``topics`` from a bootstrap broker that is not the
  controller.

One cluster (``auto.leader.rebalance.enable=false``) serves most tests; a second one on the same
ZooKeeper (another chroot) has ``delete.topic.enable=false`` and a 1 s imbalance check.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.zk import zk_data as z
from odradek.zk.kafka_zk_client import KafkaZkClient, ZkConfig

from .support import REQUIRES_KCAT, RawConnection
from .test_zk_mode import ZkServerProcess
from .zookeeper_support import ZooKeeperServer, wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka_admin = pytest.importorskip("confluent_kafka.admin")
kafka_python = pytest.importorskip("kafka")
kazoo_client = pytest.importorskip("kazoo.client")

pytestmark = pytest.mark.timeout(600)

SESSION_S = 6


class Broker(ZkServerProcess):
    def __init__(self, data_dir: Path, zk_connect: str, broker_id: int, extra: dict[str, str]) -> None:
        super().__init__(data_dir, zk_connect, broker_id)
        self.extra = extra

    def _command(self) -> list[str]:
        cmd = super()._command()
        for k, v in self.extra.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd


@dataclass
class Cluster:
    brokers: dict[int, Broker]
    zk: KafkaZkClient  # ours, for reading
    kz: Any  # a raw kazoo client on the same chroot, for writing Kafka's znodes by hand
    clients: list[Any] = field(default_factory=list)
    admins: dict[str, Any] = field(default_factory=dict)

    def logs(self) -> str:
        return "\n".join(f"--- broker {i} ---\n{b.log_tail(4000)}" for i, b in self.brokers.items())

    def bootstrap(self, *ids: int) -> str:
        return ",".join(self.brokers[i].bootstrap_servers for i in (ids or self.brokers))

    def live(self) -> list[int]:
        return [i for i, b in self.brokers.items() if b.proc is not None]

    def controller(self) -> int:
        return int(wait_for("a controller", self.zk.get_controller_id, 30, self.logs))

    def admin(self, *ids: int) -> Any:
        """A confluent-kafka AdminClient, kept (its futures fail once the client is collected)."""
        bootstrap = self.bootstrap(*(ids or self.live()))
        if bootstrap not in self.admins:
            self.admins[bootstrap] = kafka_admin.AdminClient({"bootstrap.servers": bootstrap})
        return self.admins[bootstrap]

    def kp_admin(self) -> Any:
        a = kafka_python.KafkaAdminClient(bootstrap_servers=self.bootstrap(*self.live()), request_timeout_ms=60000)
        self.clients.append(a)
        return a

    def states(self, topic: str, n: int) -> dict[int, z.PartitionState]:
        got = self.zk.get_topic_partition_states([(topic, p) for p in range(n)])
        return {p: s for (_t, p), s in got.items()}

    def assignment(self, topic: str) -> dict[int, list[int]]:
        a = self.zk.get_replica_assignment_and_topic_ids([topic]).get(topic)
        return {} if a is None else {p: list(r.replicas) for p, r in a.partitions.items()}

    def create(self, topic: str, assignment: dict[int, list[int]], configs: dict[str, str] | None = None) -> None:
        new = kafka_admin.NewTopic(topic, len(assignment), replica_assignment=[assignment[p] for p in sorted(assignment)],
                                   config=configs or {})
        assert self.admin().create_topics([new], request_timeout=30)[topic].result(60) is None
        wait_for(f"{topic} fully replicated", lambda: len(s := self.states(topic, len(assignment))) == len(
            assignment) and all(sorted(s[p].isr) == sorted(assignment[p]) and s[p].leader == assignment[p][0]
                                for p in assignment), 60, self.logs)

    def stop(self, broker: int) -> None:
        assert self.brokers[broker].terminate(60) == 0, self.logs()
        wait_for(f"broker {broker} unregistered", lambda: broker not in self.zk.get_sorted_broker_list(),
                 SESSION_S + 30, self.logs)

    def start(self, broker: int) -> None:
        self.brokers[broker].start(60)
        wait_for(f"broker {broker} registered", lambda: broker in self.zk.get_sorted_broker_list(), 30, self.logs)


def produce(bootstrap: str, topic: str, first: int, n: int) -> list[bytes]:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "message.timeout.ms": 60000})
    acked: list[bytes] = []

    def done(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value())

    for i in range(first, first + n):
        p.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), on_delivery=done)
        p.poll(0)
    p.flush(90)
    return acked


def consume(bootstrap: str, topic: str, partitions: int, expected: int) -> list[bytes]:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    got: list[bytes] = []
    try:
        c.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                  for p in range(partitions)])
        deadline = time.monotonic() + 60
        while len(got) < expected and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        end = time.monotonic() + 1  # nothing beyond what was expected
        while time.monotonic() < end:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        c.close()
    return got


def log_dirs(broker: Broker, topic: str) -> list[str]:
    """The broker's directories of ``topic`` (live ones and ones renamed for deletion)."""
    return sorted(p.name for p in broker.data_dir.iterdir() if p.is_dir() and p.name.startswith(f"{topic}-"))


def _cluster(zk: ZooKeeperServer, root: Path, chroot: str, extra: dict[str, str]) -> Iterator[Cluster]:
    connect = zk.connect + chroot
    brokers = {i: Broker(root / f"{chroot.strip('/')}-b{i}", connect, i, extra) for i in (1, 2, 3)}
    ours = KafkaZkClient(ZkConfig(connect, 10000, 20000))
    kz = kazoo_client.KazooClient(hosts=connect, timeout=10)
    cluster = Cluster(brokers, ours, kz)
    try:
        for b in brokers.values():
            b.start(60)
        ours.start()
        kz.start(20)
        wait_for("three registrations", lambda: ours.get_sorted_broker_list() == [1, 2, 3], 30, cluster.logs)
        cluster.controller()
        yield cluster
    finally:
        for c in cluster.clients:
            try:
                c.close()
            except Exception:
                pass
        kz.stop()
        kz.close()
        ours.close()
        for b in brokers.values():
            b.kill()


@pytest.fixture(scope="module")
def zookeeper() -> Iterator[ZooKeeperServer]:
    with ZooKeeperServer() as zk:
        yield zk


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from _cluster(zookeeper, tmp_path_factory.mktemp("zkops"), "/ops",
                        {"auto.leader.rebalance.enable": "false"})


@pytest.fixture(autouse=True)
def all_brokers_up(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that stops a broker of the shared cluster brings it back even when it fails."""
    yield
    for name in ("cluster", "strict"):
        if name in request.fixturenames:
            c: Cluster = request.getfixturevalue(name)
            for i, b in c.brokers.items():
                if b.proc is None:
                    c.start(i)


# --- 1. topic deletion with a broker down --------------------------------------------------------


def test_delete_topic_with_a_replica_down_finishes_when_it_returns(cluster: Cluster) -> None:
    """DeleteTopics (confluent-kafka) and a /admin/delete_topics/<t> znode while one replica's
    broker is down: the topic leaves the metadata (UpdateMetadata marks its partitions deleted, so
    the request succeeds as in Kafka 3.9), the live replicas are deleted, but the replica on the down
    broker is ineligible: /admin/delete_topics/<t> and /brokers/topics/<t> stay and its logs stay.
    When the broker returns, the deletion finishes: znodes gone, its logs deleted."""
    by_api, by_znode = "del-api", "del-znode"
    spread = {0: [1, 2, 3], 1: [2, 3, 1]}
    for t in (by_api, by_znode):
        cluster.create(t, spread)
        assert len(produce(cluster.bootstrap(), t, 0, 50)) == 50, cluster.logs()
    controller = cluster.controller()
    down = next(i for i in (3, 2, 1) if i != controller)
    live = [i for i in cluster.brokers if i != down]
    for t in (by_api, by_znode):
        wait_for(f"{t}'s logs on broker {down}", lambda t=t: len(log_dirs(cluster.brokers[down], t)) == 2,
                 30, cluster.logs)
    cluster.stop(down)

    cluster.admin().delete_topics([by_api], operation_timeout=30, request_timeout=60)[by_api].result(90)
    cluster.kz.create(f"/admin/delete_topics/{by_znode}", b"")
    for t in (by_api, by_znode):
        wait_for(f"{t} gone from the metadata", lambda t=t: t not in cluster.admin().list_topics(
            timeout=10).topics, 30, cluster.logs)
        wait_for(f"{t}'s live replicas deleted", lambda t=t: not any(
            log_dirs(cluster.brokers[i], t) for i in live), 30, cluster.logs)
    time.sleep(3)  # the controller has done all it can; nothing more may happen without broker `down`
    for t in (by_api, by_znode):
        assert cluster.kz.exists(f"/admin/delete_topics/{t}") is not None, cluster.logs()
        assert cluster.kz.exists(f"/brokers/topics/{t}") is not None
        assert cluster.kz.exists(f"/config/topics/{t}") is not None
        assert len(log_dirs(cluster.brokers[down], t)) == 2
    # the name is taken until the deletion is done (Kafka: TOPIC_ALREADY_EXISTS, marked for deletion)
    again = cluster.admin().create_topics([kafka_admin.NewTopic(by_api, 1, 2)], request_timeout=30)[by_api]
    with pytest.raises(confluent_kafka.KafkaException) as e:
        again.result(60)
    assert e.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS
    # a deletion request for a topic that does not exist is dropped by the controller
    cluster.kz.create("/admin/delete_topics/no-such-topic", b"")
    wait_for("the request for no-such-topic dropped", lambda: cluster.kz.exists(
        "/admin/delete_topics/no-such-topic") is None, 30, cluster.logs)
    halted = [line for line in cluster.brokers[controller].log_tail(400000).splitlines()
              if "Halted deletion of topics" in line]
    assert any(by_api in line for line in halted) and any(by_znode in line for line in halted), cluster.logs()

    cluster.start(down)
    for t in (by_api, by_znode):
        wait_for(f"{t}'s deletion finished", lambda t=t: cluster.kz.exists(f"/admin/delete_topics/{t}") is None
                 and cluster.kz.exists(f"/brokers/topics/{t}") is None
                 and cluster.kz.exists(f"/config/topics/{t}") is None, 60, cluster.logs)
        wait_for(f"{t}'s logs deleted on the returning broker", lambda t=t: not log_dirs(cluster.brokers[down], t),
                 30, cluster.logs)
        assert t not in cluster.admin(down).list_topics(timeout=10).topics
    assert cluster.kz.get_children("/admin/delete_topics") == []
    # the name can be used again, and nothing of the old topic comes back on the returning broker
    cluster.create(by_api, spread)
    assert consume(cluster.bootstrap(), by_api, 2, 0) == []
    assert len(produce(cluster.bootstrap(), by_api, 1000, 10)) == 10
    assert sorted(consume(cluster.bootstrap(), by_api, 2, 10)) == sorted(f"v{i}".encode() for i in range(1000, 1010))


# --- 2. reassignment -----------------------------------------------------------------------------


def reassign_znode(cluster: Cluster, moves: dict[tuple[str, int], list[int]]) -> None:
    """Kafka's /admin/reassign_partitions JSON (what kafka-reassign-partitions.sh --zookeeper wrote)."""
    data = {"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": r} for (t, p), r in moves.items()]}
    cluster.kz.create("/admin/reassign_partitions", json.dumps(data).encode())


def test_reassignment_through_the_znode_and_the_admin_api_and_cancellation(cluster: Cluster) -> None:
    topic = "reassigned"
    cluster.create(topic, {0: [1, 2], 1: [1, 2]})
    acked = produce(cluster.bootstrap(), topic, 0, 200)
    assert len(acked) == 200, cluster.logs()

    # through the znode: p0 [1, 2] -> [3, 1]; the znode goes when it is done
    reassign_znode(cluster, {(topic, 0): [3, 1]})
    wait_for("the znode reassignment done", lambda: cluster.assignment(topic)[0] == [3, 1]
             and cluster.kz.exists("/admin/reassign_partitions") is None, 60, cluster.logs)
    wait_for("p0's ISR", lambda: sorted(cluster.states(topic, 2)[0].isr) == [1, 3], 30, cluster.logs)
    wait_for("p0 deleted on broker 2", lambda: f"{topic}-0" not in log_dirs(cluster.brokers[2], topic), 30,
             cluster.logs)
    assert f"{topic}-0" in log_dirs(cluster.brokers[3], topic)

    # through AlterPartitionReassignments (kafka-python): p1 [1, 2] -> [3, 2]
    kp = cluster.kp_admin()
    tp0, tp1 = kafka_python.TopicPartition(topic, 0), kafka_python.TopicPartition(topic, 1)
    assert kp.alter_partition_reassignments({tp1: [3, 2]}) == {tp1: None}
    wait_for("the API reassignment done", lambda: cluster.assignment(topic)[1] == [3, 2]
             and kp.list_partition_reassignments() == {}, 60, cluster.logs)
    wait_for("p1's ISR", lambda: sorted(cluster.states(topic, 2)[1].isr) == [2, 3], 30, cluster.logs)
    wait_for("p1 deleted on broker 1", lambda: f"{topic}-1" not in log_dirs(cluster.brokers[1], topic), 30,
             cluster.logs)

    # both partitions led by broker 3, which got them by reassignment: everything is there
    kp.elect_leaders(0, {topic: [0, 1]})
    wait_for("broker 3 leads", lambda: all(s.leader == 3 for s in cluster.states(topic, 2).values()), 30,
             cluster.logs)
    got = consume(cluster.bootstrap(), topic, 2, len(acked))
    assert sorted(got) == sorted(acked)

    # cancellation: a znode reassignment that cannot finish (its new replica's broker is down) is
    # listed by ListPartitionReassignments and cancelled by AlterPartitionReassignments(None): the
    # replicas go back, the znode is removed
    cluster.stop(2)
    reassign_znode(cluster, {(topic, 0): [3, 1, 2]})
    listed = wait_for("the stuck reassignment listed", lambda: kp.list_partition_reassignments().get(tp0), 30,
                      cluster.logs)
    assert sorted(listed["replicas"]) == [1, 2, 3] and listed["adding_replicas"] == [2], listed
    assert listed["removing_replicas"] == []
    assert cluster.kz.exists("/admin/reassign_partitions") is not None
    assert kp.alter_partition_reassignments({tp0: None}) == {tp0: None}
    wait_for("the reassignment cancelled", lambda: cluster.assignment(topic)[0] == [3, 1]
             and kp.list_partition_reassignments() == {}
             and cluster.kz.exists("/admin/reassign_partitions") is None, 30, cluster.logs)
    # cancelling again: nothing in progress (Kafka's NO_REASSIGNMENT_IN_PROGRESS)
    errors = kp.alter_partition_reassignments({tp0: None})
    assert errors[tp0] is kafka_python.errors.NoReassignmentInProgressError, errors
    # Kafka's refusals: a new replica on a broker that is down, a duplicated list, a partition that
    # does not exist
    kerr = kafka_python.errors
    nowhere = kafka_python.TopicPartition("no-such-topic", 0)
    errors = kp.alter_partition_reassignments({tp0: [3, 1, 2], nowhere: [1, 3]})
    assert errors == {tp0: kerr.InvalidReplicationAssignmentError, nowhere: kerr.UnknownTopicOrPartitionError}, errors
    errors = kp.alter_partition_reassignments({tp1: [3, 3]})
    assert errors == {tp1: kerr.InvalidReplicationAssignmentError}, errors
    assert cluster.assignment(topic) == {0: [3, 1], 1: [3, 2]}
    cluster.start(2)

    # a move that takes the leader's replica away, written as kafka-reassign-partitions.sh writes it
    # (with log_dirs), under acks=all load: a new leader among the target replicas, nothing lost
    assert cluster.states(topic, 2)[0].leader == 3
    cluster.kz.create("/admin/reassign_partitions", json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [2, 1], "log_dirs": ["any", "any"]}]}).encode())
    acked += produce(cluster.bootstrap(), topic, 200, 200)
    assert len(acked) == 400, cluster.logs()
    wait_for("the leader moved off broker 3", lambda: cluster.assignment(topic)[0] == [2, 1]
             and cluster.states(topic, 2)[0].leader in (2, 1) and sorted(cluster.states(topic, 2)[0].isr) == [1, 2]
             and cluster.kz.exists("/admin/reassign_partitions") is None, 60, cluster.logs)
    wait_for("p0 deleted on broker 3", lambda: f"{topic}-0" not in log_dirs(cluster.brokers[3], topic), 30,
             cluster.logs)
    got = consume(cluster.bootstrap(), topic, 2, len(acked))
    assert sorted(got) == sorted(acked)


# --- 3. preferred leader election ----------------------------------------------------------------


def test_preferred_replica_election_through_the_znode_after_a_restart(cluster: Cluster) -> None:
    """(ElectLeaders after a restart: test_zk_mode.py; auto rebalance: the second cluster below.)"""
    topic = "preferred"
    spread = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    cluster.create(topic, spread)
    controller = cluster.controller()
    back = next(i for i in (2, 3, 1) if i != controller)
    mine = next(p for p, r in spread.items() if r[0] == back)
    cluster.stop(back)
    wait_for("leadership moved", lambda: cluster.states(topic, 3)[mine].leader not in (back, -1), 30, cluster.logs)
    cluster.start(back)
    wait_for("the restarted broker in the ISR", lambda: back in cluster.states(topic, 3)[mine].isr, 60,
             cluster.logs)
    time.sleep(2)
    assert cluster.states(topic, 3)[mine].leader != back  # auto.leader.rebalance.enable=false here
    # (a partition that does not exist in the same request is skipped, as Kafka's controller does)
    data = {"version": 1, "partitions": [{"topic": topic, "partition": mine}, {"topic": "no-such", "partition": 0},
                                         {"topic": topic, "partition": 7}]}
    cluster.kz.create("/admin/preferred_replica_election", json.dumps(data).encode())
    wait_for("the preferred leader back", lambda: cluster.states(topic, 3)[mine].leader == back
             and cluster.kz.exists("/admin/preferred_replica_election") is None, 30, cluster.logs)
    md = cluster.admin().list_topics(topic, timeout=10).topics[topic].partitions
    wait_for("the metadata", lambda: cluster.admin().list_topics(topic, timeout=10).topics[topic].partitions[
        mine].leader == back, 30, cluster.logs)
    assert set(md) == {0, 1, 2}


# --- 4. controlled shutdown under load -----------------------------------------------------------


class Watcher(threading.Thread):
    """Metadata every 50 ms from the brokers that stay: every partition's leader as seen."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.admin = kafka_admin.AdminClient({"bootstrap.servers": bootstrap, "topic.metadata.refresh.interval.ms": 100})
        self.topic = topic
        self.seen: list[tuple[float, dict[int, int]]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + 120
        while not self.stop_event.is_set() and time.monotonic() < deadline:
            try:
                t = self.admin.list_topics(self.topic, timeout=5).topics[self.topic]
                self.seen.append((time.monotonic(), {p: pm.leader if pm.error is None else -1
                                                     for p, pm in t.partitions.items()}))
            except Exception:
                pass
            time.sleep(0.05)


@REQUIRES_KCAT
def test_controlled_shutdown_moves_leaders_before_exit_under_acks_all_load(cluster: Cluster) -> None:
    """SIGTERM of a broker that leads a partition while a producer (acks=all, idempotent) keeps
    producing and Metadata is polled every 50 ms: no partition is ever seen without a live leader,
    Metadata (confluent-kafka, kcat) right after the exit names only the brokers that stay, the
    producer gets no error, everything acknowledged is read back."""
    topic = "shutdown-load"
    spread = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    cluster.create(topic, spread, {"min.insync.replicas": "2"})
    controller = cluster.controller()
    leaving = next(i for i in (3, 2, 1) if i != controller)
    stay = [i for i in cluster.brokers if i != leaving]
    led = [p for p, r in spread.items() if r[0] == leaving]

    acked: list[bytes] = []
    errors: list[str] = []
    stop = threading.Event()

    def producer() -> None:
        p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all",
                                      "enable.idempotence": True, "message.timeout.ms": 60000, "linger.ms": 5})

        def done(err: Any, msg: Any) -> None:
            (errors.append(str(err)) if err is not None else acked.append(msg.value()))

        i, deadline = 0, time.monotonic() + 120
        while not stop.is_set() and time.monotonic() < deadline:
            p.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), on_delivery=done)
            p.poll(0.01)
            i += 1
        p.flush(90)

    watcher = Watcher(cluster.bootstrap(*stay), topic)
    prod = threading.Thread(target=producer, daemon=True)
    watcher.start()
    prod.start()
    try:
        wait_for("records flowing", lambda: len(acked) >= 200, 60, cluster.logs)
        assert cluster.brokers[leaving].terminate(60) == 0
        exited = time.monotonic()
        assert "Controlled shutdown succeeded" in cluster.brokers[leaving].log_tail(100000), cluster.logs()
        # right after the exit, Metadata names live leaders for the partitions it led
        md = cluster.admin(*stay).list_topics(topic, timeout=10).topics[topic].partitions
        assert all(md[p].leader in stay for p in spread), {p: md[p].leader for p in md}
        listed = json.loads(subprocess.run(["kcat", "-b", cluster.bootstrap(*stay), "-L", "-J", "-t", topic],
                                           capture_output=True, timeout=30, check=True).stdout)
        by_kcat = {p["partition"]: p["leader"] for p in listed["topics"][0]["partitions"]}
        assert sorted(by_kcat) == [0, 1, 2] and all(ld in stay for ld in by_kcat.values()), listed
        states = cluster.states(topic, 3)
        assert all(states[p].leader in stay and leaving not in states[p].isr for p in spread), states
        before = len(acked)
        wait_for("records still flowing", lambda: len(acked) >= before + 200, 60, cluster.logs)
    finally:
        stop.set()
        prod.join(120)
        watcher.stop_event.set()
        watcher.join(30)
    assert errors == [], errors[:5]
    assert watcher.seen, "no metadata seen"
    leaderless = [(t, ls) for t, ls in watcher.seen if any(ls.get(p, -1) not in (1, 2, 3) for p in spread)]
    assert leaderless == [], leaderless[:5]
    after_exit = [ls for t, ls in watcher.seen if t >= exited]
    assert after_exit and all(ls[p] != leaving for ls in after_exit for p in led), after_exit[:3]
    cluster.start(leaving)
    got = consume(cluster.bootstrap(), topic, 3, len(acked))
    assert sorted(got) == sorted(acked)


# --- 5. DeleteTopics by topic id -----------------------------------------------------------------


def test_delete_topics_by_topic_id(cluster: Cluster) -> None:
    """DeleteTopics v6 with topic ids (name null) in ZooKeeper mode, as Kafka 3.9's KafkaApis: the
    id is resolved to its topic, which is deleted; an unknown id is UNKNOWN_TOPIC_ID; a name and an
    id together are INVALID_REQUEST. ApiVersions advertises DeleteTopics up to v6."""
    controller = cluster.brokers[cluster.controller()]
    with RawConnection.to(controller, timeout=60) as conn:
        versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in conn.request(
            m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})["api_keys"]}
        assert versions[m.DELETE_TOPICS.api_key] == (1, 6)  # v0 is not served (KIP-896 floors, both modes)

        cluster.create("by-id", {0: [1, 2, 3]})
        cluster.create("by-id-kp", {0: [2, 3, 1]})
        ids = {t: uuid.UUID(bytes=base64.urlsafe_b64decode(a.topic_id + "=="))
               for t, a in cluster.zk.get_replica_assignment_and_topic_ids(["by-id", "by-id-kp"]).items()
               if a.topic_id}
        assert set(ids) == {"by-id", "by-id-kp"}
        unknown = uuid.uuid4()
        resp = conn.request(m.DELETE_TOPICS, 6, {"topics": [
            {"name": None, "topic_id": ids["by-id"]}, {"name": None, "topic_id": unknown}], "timeout_ms": 30000})
        got = {r["topic_id"]: r for r in resp["responses"]}
        assert got[ids["by-id"]]["error_code"] == Errors.NONE and got[ids["by-id"]]["name"] == "by-id", resp
        assert got[unknown]["error_code"] == Errors.UNKNOWN_TOPIC_ID and got[unknown]["name"] is None, resp
        wait_for("by-id deleted", lambda: cluster.kz.exists("/brokers/topics/by-id") is None
                 and cluster.kz.exists("/admin/delete_topics/by-id") is None, 30, cluster.logs)

        resp = conn.request(m.DELETE_TOPICS, 6, {"topics": [
            {"name": "by-id-kp", "topic_id": ids["by-id-kp"]}], "timeout_ms": 30000})
        assert [r["error_code"] for r in resp["responses"]] == [Errors.INVALID_REQUEST], resp
        assert cluster.kz.exists("/brokers/topics/by-id-kp") is not None

    # a real client deleting by id (kafka-python sends v6 with the id)
    kp = cluster.kp_admin()
    kp.delete_topics([ids["by-id-kp"]], timeout_ms=30000)
    wait_for("by-id-kp deleted", lambda: cluster.kz.exists("/brokers/topics/by-id-kp") is None, 30, cluster.logs)


# --- the second cluster: delete.topic.enable=false, a 1 s imbalance check ------------------------


@pytest.fixture(scope="module")
def strict(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from _cluster(zookeeper, tmp_path_factory.mktemp("zkops-strict"), "/strict", {
        "delete.topic.enable": "false", "auto.leader.rebalance.enable": "true",
        "leader.imbalance.check.interval.seconds": "1"})


def test_delete_topic_enable_false_refuses_deletion(strict: Cluster) -> None:
    """Kafka 3.9: DeleteTopics v3+ → TOPIC_DELETION_DISABLED, below v3 INVALID_REQUEST; a
    /admin/delete_topics/<t> znode is removed by the controller and the topic stays."""
    topic = "undeletable"
    strict.create(topic, {0: [1, 2, 3]})
    fut = strict.admin().delete_topics([topic], operation_timeout=10, request_timeout=30)[topic]
    with pytest.raises(confluent_kafka.KafkaException) as e:
        fut.result(60)
    assert e.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_DELETION_DISABLED
    with RawConnection.to(strict.brokers[strict.controller()], timeout=30) as conn:
        for v in range(m.DELETE_TOPICS.min_version, 7):
            body: dict[str, Any] = {"timeout_ms": 10000}
            if v >= 6:
                body["topics"] = [{"name": topic, "topic_id": uuid.UUID(int=0)}]
            else:
                body["topic_names"] = [topic]
            resp = conn.request(m.DELETE_TOPICS, v, body)
            want = Errors.INVALID_REQUEST if v < 3 else Errors.TOPIC_DELETION_DISABLED
            assert [r["error_code"] for r in resp["responses"]] == [want], (v, resp)
    strict.kz.create(f"/admin/delete_topics/{topic}", b"")
    wait_for("the deletion request dropped", lambda: strict.kz.exists(f"/admin/delete_topics/{topic}") is None,
             30, strict.logs)
    assert strict.kz.exists(f"/brokers/topics/{topic}") is not None
    assert topic in strict.admin().list_topics(timeout=10).topics
    assert all(log_dirs(b, topic) == [f"{topic}-0"] for b in strict.brokers.values())


def test_auto_rebalance_returns_leadership_after_a_restart(strict: Cluster) -> None:
    topic = "rebalanced"
    spread = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    strict.create(topic, spread)
    controller = strict.controller()
    back = next(i for i in (2, 3, 1) if i != controller)
    mine = next(p for p, r in spread.items() if r[0] == back)
    strict.stop(back)
    wait_for("leadership moved", lambda: strict.states(topic, 3)[mine].leader not in (back, -1), 30, strict.logs)
    strict.start(back)
    wait_for("the preferred leader back, by the controller alone", lambda: all(
        strict.states(topic, 3)[p].leader == r[0] for p, r in spread.items()), 60, strict.logs)
    assert any("PREFERRED" in line and "triggered by AutoTriggered" in line and topic in line
               for line in strict.brokers[controller].log_tail(200000).splitlines()), strict.logs()


# --- pending work across a controller failover ---------------------------------------------------


def test_pending_reassignment_and_deletion_resume_after_controller_failover(cluster: Cluster) -> None:
    """A znode reassignment that cannot finish (its new replica's broker is down) and a deletion
    halted by the same broker; kill -9 the controller: the next controller (onControllerFailover)
    takes both up from ZooKeeper, and when the broker returns both finish."""
    controller = cluster.controller()
    x, y = (i for i in (1, 2, 3) if i != controller)
    moved, deleted = "fo-reassign", "fo-delete"
    cluster.create(moved, {0: [controller, x]})
    cluster.create(deleted, {0: [x, y]})
    acked = produce(cluster.bootstrap(), moved, 0, 50)
    assert len(acked) == 50, cluster.logs()
    cluster.stop(y)
    reassign_znode(cluster, {(moved, 0): [x, y]})
    cluster.kz.create(f"/admin/delete_topics/{deleted}", b"")
    wait_for("the reassignment started", lambda: sorted(cluster.assignment(moved)[0]) == sorted([controller, x, y]),
             30, cluster.logs)
    time.sleep(1)
    assert cluster.kz.exists("/admin/reassign_partitions") is not None
    assert cluster.kz.exists(f"/admin/delete_topics/{deleted}") is not None

    cluster.brokers[controller].kill()
    wait_for("the new controller", lambda: cluster.zk.get_controller_id() == x, SESSION_S + 30, cluster.logs)
    cluster.start(y)
    wait_for("the reassignment finished", lambda: cluster.assignment(moved)[0] == [x, y]
             and cluster.kz.exists("/admin/reassign_partitions") is None
             and sorted(cluster.states(moved, 1)[0].isr) == sorted([x, y]), 60, cluster.logs)
    wait_for("the deletion finished", lambda: cluster.kz.exists(f"/brokers/topics/{deleted}") is None
             and cluster.kz.exists(f"/admin/delete_topics/{deleted}") is None
             and not log_dirs(cluster.brokers[y], deleted), 60, cluster.logs)
    assert sorted(consume(cluster.bootstrap(x, y), moved, 1, 50)) == sorted(acked)
    cluster.start(controller)
    wait_for("a full ISR", lambda: sorted(cluster.states(moved, 1)[0].isr) == sorted([x, y]), 30, cluster.logs)


def test_delete_topic_right_after_a_replica_is_killed(cluster: Cluster) -> None:
    """kill -9 of a replica's broker, then DeleteTopics at once (its registration still there until
    its session expires): the StopReplica it never answers does not wedge the deletion — the
    broker's failure makes its replica ineligible, its return finishes the deletion."""
    topic = "del-after-kill"
    cluster.create(topic, {0: [1, 2, 3], 1: [3, 2, 1]})
    assert len(produce(cluster.bootstrap(), topic, 0, 20)) == 20, cluster.logs()
    controller = cluster.controller()
    victim = next(i for i in (3, 2, 1) if i != controller)
    wait_for("the victim's logs", lambda: len(log_dirs(cluster.brokers[victim], topic)) == 2, 30, cluster.logs)
    cluster.brokers[victim].kill()
    assert victim in cluster.zk.get_sorted_broker_list()  # its session has not expired yet
    live = [i for i in cluster.brokers if i != victim]
    cluster.admin(*live).delete_topics([topic], operation_timeout=30, request_timeout=60)[topic].result(90)
    wait_for("the victim unregistered", lambda: victim not in cluster.zk.get_sorted_broker_list(),
             SESSION_S + 30, cluster.logs)
    wait_for("the live replicas deleted", lambda: not any(log_dirs(cluster.brokers[i], topic) for i in live), 30,
             cluster.logs)
    assert cluster.kz.exists(f"/admin/delete_topics/{topic}") is not None
    cluster.start(victim)
    wait_for("the deletion finished", lambda: cluster.kz.exists(f"/admin/delete_topics/{topic}") is None
             and cluster.kz.exists(f"/brokers/topics/{topic}") is None
             and not log_dirs(cluster.brokers[victim], topic), 60, cluster.logs)


def run_tool(cluster: Cluster, tool: str, *args: str) -> str:
    """An ``odradek`` tool with a broker that is not the controller first in --bootstrap-server
    (the controller-bound requests must find the controller, as Kafka's Admin does)."""
    controller = cluster.controller()
    first = sorted(cluster.live(), key=lambda i: i == controller)
    out = subprocess.run([sys.executable, "-m", "odradek.cli.main", tool, "--bootstrap-server",
                          cluster.bootstrap(*first), *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"{out.stdout}\n{out.stderr}"
    return out.stdout


def test_odradek_reassign_and_leader_election_tools(cluster: Cluster, tmp_path: Path) -> None:
    """``odradek reassign`` (kafka-reassign-partitions.sh) against ZooKeeper mode: --execute with
    --throttle writes the throttles (/config/topics, /config/brokers), --verify reports completion
    and removes them; ``odradek leader-election`` (kafka-leader-election.sh) makes the new preferred
    replica the leader; the data is on the new replicas. Both reach the controller from a
    bootstrap broker that is not it."""
    topic = "cli-moved"
    cluster.create(topic, {0: [1, 2]})
    acked = produce(cluster.bootstrap(), topic, 0, 100)
    assert len(acked) == 100, cluster.logs()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [3, 1], "log_dirs": ["any", "any"]}]}))
    out = run_tool(cluster, "reassign", "--execute", "--reassignment-json-file", str(plan), "--throttle", "50000000")
    assert f"Successfully started partition reassignment for {topic}-0" in out, out

    def configs(entity: str) -> dict[str, str]:
        got = cluster.zk.get_data(f"/config/{entity}")
        return {} if got is None else dict(json.loads(got[0])["config"])

    # (the throttles are set; the move may already be done)
    assert configs(f"topics/{topic}")["follower.replication.throttled.replicas"] == "0:3"
    assert all(configs(f"brokers/{b}").get("leader.replication.throttled.rate") == "50000000" for b in (1, 2, 3))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = run_tool(cluster, "reassign", "--verify", "--reassignment-json-file", str(plan))
        if f"Reassignment of partition {topic}-0 is completed." in out:
            break
        time.sleep(1)
    assert f"Reassignment of partition {topic}-0 is completed." in out, out + cluster.logs()
    assert "Clearing topic-level throttles" in out and "Clearing broker-level throttles" in out, out
    assert cluster.assignment(topic)[0] == [3, 1]
    wait_for("the throttles gone", lambda: not any("throttled" in k for k in configs(f"topics/{topic}")) and not any(
        "throttled" in k for b in (1, 2, 3) for k in configs(f"brokers/{b}")), 30, cluster.logs)
    out = run_tool(cluster, "leader-election", "--election-type", "PREFERRED", "--topic", topic, "--partition", "0")
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-0" in out, out
    assert cluster.states(topic, 1)[0].leader == 3
    assert sorted(consume(cluster.bootstrap(), topic, 1, 100)) == sorted(acked)
    # odradek topics --create / --delete (kafka-topics.sh) through the controller too
    assert run_tool(cluster, "topics", "--create", "--topic", "cli-made", "--partitions", "2",
                    "--replication-factor", "2").strip() == "Created topic cli-made."
    assert len(cluster.assignment("cli-made")) == 2
    run_tool(cluster, "topics", "--delete", "--topic", "cli-made")
    wait_for("cli-made deleted", lambda: cluster.kz.exists("/brokers/topics/cli-made") is None, 30, cluster.logs)
