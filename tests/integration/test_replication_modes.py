"""The replication issue's end-to-end scenarios in both metadata modes, from one module: every test
takes the module-scoped ``cluster`` fixture, parametrised by ``mode``:

- ``kraft``: one controller (``process.roles=controller``) and brokers 1, 2, 3
  (:class:`~.replication_cluster.ReplicationCluster`);
- ``zk``: a real ZooKeeper started here and brokers 1, 2, 3 started with ``zookeeper.connect``
  (no ``process.roles``): Kafka 3.9's ZooKeeper mode, one of them the controller.

Every broker is in a rack of its own (``broker.rack=rack-<id>``) with
``replica.selector.class=RackAwareReplicaSelector``. One cluster per mode serves every scenario
(each uses its own topics and leaves all three brokers running). Both modes have ``auto.leader.rebalance.enable=false`` (preferred leaders come back
through ElectLeaders), ``replica.lag.time.max.ms=3000`` and a short session (KRaft
``broker.session.timeout.ms=2500``, ZooKeeper ``zookeeper.session.timeout.ms=4000``).

Where the modes differ in Kafka, each is held to its own Kafka: the KRaft controller logs a WARN
for an unclean election; Kafka 3.9's ZooKeeper controller logs none (only its
UncleanLeaderElectionsPerSec meter), so there the state-change log's lines are checked (the
unclean partition's OfflinePartition -> OnlinePartition, the clean one's failed change at ERROR).
Controlled shutdown is checked through the line each mode's broker logs when it is done.

Scenarios: RF=3 produce acks=all and consume everything; kill -9 of the leader under acks=all
load (a new leader, nothing acknowledged lost); a follower down and back (ISR shrinks and
expands, the high watermark advances); min.insync.replicas=2 with two brokers down
(NOT_ENOUGH_REPLICAS, then recovery); unclean leader election off by default and on by topic
config; the preferred leader back through ElectLeaders after a restart; controlled shutdown on
SIGTERM moves leaderships first; a consumer with ``client.rack`` reads from the follower in its
rack (KIP-392); a reassignment throttled with ``odradek reassign --throttle`` is held back and
completes once the rates are removed (KIP-73).
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from .replication_cluster import ReplicationCluster
from .support import ServerProcess
from .test_replication_faults import LAG_MS, LoadProducer, _create, _produce_acked, _read_partition
from .zookeeper_support import ZooKeeperServer

pytestmark = pytest.mark.timeout(300)

ZK_SESSION_TIMEOUT_MS = 4000
RACK_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LAYOUT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]


class ZkBroker(ServerProcess):
    """``odradek server`` in ZooKeeper mode, with the attributes :class:`ReplicationCluster`'s
    helpers use of its KRaft nodes (``node_id``, ``bootstrap``, ``start``, ``kill``, ``stop``)."""

    def __init__(self, data_dir: Path, zk_connect: str, broker_id: int) -> None:
        super().__init__(data_dir)
        self.node_id = broker_id
        self.zk_connect = zk_connect

    @property
    def bootstrap(self) -> str:
        return self.bootstrap_servers

    def _command(self) -> list[str]:
        props = {
            "broker.id": str(self.node_id),
            "zookeeper.connect": self.zk_connect,
            "zookeeper.session.timeout.ms": str(ZK_SESSION_TIMEOUT_MS),
            "log.dirs": str(self.data_dir),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "replica.lag.time.max.ms": "3000",
            "replica.fetch.backoff.ms": "200",
            "auto.leader.rebalance.enable": "false",
            "group.initial.rebalance.delay.ms": "0",
            "broker.rack": f"rack-{self.node_id}",
            "replica.selector.class": RACK_SELECTOR,
        }
        cmd = [sys.executable, "-m", "odradek.cli.main", "server"]
        for k, v in props.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 60.0) -> ZkBroker:  # type: ignore[override]
        super().start(timeout)
        return self

    def stop(self) -> None:
        self.terminate(60)


class ZkCluster(ReplicationCluster):
    """Brokers 1, 2, 3 in ZooKeeper mode on ``zk`` (chroot ``/odradek-modes``); the controller is
    whichever broker holds ``/controller``."""

    def __init__(self, base: Path, zk: ZooKeeperServer) -> None:  # noqa: D107 - no KRaft nodes
        self.zk = zk
        self.brokers = {i: ZkBroker(base / f"b{i}", zk.connect + "/odradek-modes", i)  # type: ignore[misc]
                        for i in (1, 2, 3)}

    @property
    def nodes(self) -> list[Any]:
        return list(self.brokers.values())

    def start(self) -> None:
        for b in self.brokers.values():
            b.start()
        self.wait_for_brokers({1, 2, 3}, 90)

    def stop(self) -> None:
        for b in self.brokers.values():
            b.kill()

    def logs(self) -> str:
        return "\n".join(f"--- broker {i}\n{b.log_tail()}" for i, b in self.brokers.items()) + \
            f"\n--- zookeeper\n{self.zk.log_tail(1500)}"


def controller_logs(cluster: ReplicationCluster, mode: str) -> str:
    """Everything the controller(s) logged: the KRaft controller's log, or every ZooKeeper-mode
    broker's (the controller moves with ``/controller``)."""
    if mode == "kraft":
        return cluster.controller.log_path.read_text("utf-8", "replace")
    return "\n".join(b.log_path.read_text("utf-8", "replace") for b in cluster.brokers.values())


def ensure_all_up(cluster: ReplicationCluster) -> None:
    """Start any broker a failed scenario left down, so the next one starts from three."""
    for b in cluster.brokers.values():
        if b.proc is not None and b.proc.poll() is not None:
            b.proc = None
        if b.proc is None:
            b.start()
    cluster.wait_for_brokers({1, 2, 3}, 90)


@pytest.fixture(scope="module", params=["kraft", "zk"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def shared(mode: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicationCluster]:
    base = tmp_path_factory.mktemp(f"replication-{mode}")
    if mode == "kraft":
        cluster = ReplicationCluster(base, controller_extra="auto.leader.rebalance.enable=false\n",
                                     broker_extra=LAG_MS + f"replica.selector.class={RACK_SELECTOR}\n",
                                     racks={i: f"rack-{i}" for i in (1, 2, 3)})
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()
        return
    with ZooKeeperServer() as zk:
        zk_cluster = ZkCluster(base, zk)
        try:
            zk_cluster.start()
            yield zk_cluster
        finally:
            zk_cluster.stop()


@pytest.fixture
def cluster(shared: ReplicationCluster) -> ReplicationCluster:
    ensure_all_up(shared)
    return shared


def _state(cluster: ReplicationCluster, topic: str, live: set[int]) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr) from the brokers in ``live`` only (a dead broker in
    the bootstrap list would only slow librdkafka down)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": ",".join(cluster.brokers[b].bootstrap for b in sorted(live))})
    md = admin.list_topics(topic=topic, timeout=3).topics[topic]
    if md.error is not None:
        raise AssertionError(f"{topic}: {md.error}")
    return {p: (pm.leader, list(pm.replicas), list(pm.isrs)) for p, pm in md.partitions.items()}


def _wait_live(cluster: ReplicationCluster, topic: str, live: set[int], check: Any, what: str,
               deadline_s: float = 60) -> dict[int, tuple[int, list[int], list[int]]]:
    end = time.monotonic() + deadline_s
    state: Any = None
    while time.monotonic() < end:
        try:
            state = _state(cluster, topic, live)
            if check(state):
                return state
        except Exception:  # noqa: BLE001 - retried until the deadline
            pass
        time.sleep(0.3)
    raise AssertionError(f"{topic} never {what}: last {state}\n{cluster.logs()}")


def _bootstrap(cluster: ReplicationCluster, live: set[int]) -> str:
    return ",".join(cluster.brokers[b].bootstrap for b in sorted(live))


def _high_watermark(bootstrap: str, topic: str, partition: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hw-{time.time()}", "enable.auto.commit": False})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1])
    finally:
        c.close()


def test_rf3_produce_acks_all_and_consume_everything(cluster: ReplicationCluster, mode: str) -> None:
    topic = "modes-basic"
    _create(cluster, topic, LAYOUT, **{"min.insync.replicas": "2"})
    state = cluster.partitions(topic)
    assert all(v[1] == LAYOUT[p] and sorted(v[2]) == [1, 2, 3] and v[0] == LAYOUT[p][0] for p, v in state.items()), state
    load = LoadProducer(cluster.bootstrap, topic, 3)
    load.start()
    load.wait_acked(600, cluster, 60, "on a healthy cluster")
    assert load.stop() == 0 and not load.errors, load.errors[:5]
    for p in range(3):
        got = _read_partition(cluster.bootstrap, topic, p, len(load.acked[p]), 60)
        assert got == load.acked[p], (mode, p, len(got), len(load.acked[p]))
        assert _high_watermark(cluster.bootstrap, topic, p) == len(load.acked[p])


def test_kill_the_leader_under_acks_all_load(cluster: ReplicationCluster, mode: str) -> None:
    topic = "modes-kill"
    _create(cluster, topic, LAYOUT, **{"min.insync.replicas": "2"})
    load = LoadProducer(cluster.bootstrap, topic, 3)
    load.start()
    try:
        load.wait_acked(300, cluster, 60, "before the kill")
        leader = cluster.partitions(topic)[0][0]
        cluster.brokers[leader].kill()
        live = {1, 2, 3} - {leader}
        moved = _wait_live(cluster, topic, live, lambda s: all(v[0] in live and leader not in v[2] for v in s.values()),
                           f"moved off the killed leader {leader}")
        print(f"[{mode}] killed leader {leader}; now {moved}")
        load.wait_acked(300, cluster, 90, f"with broker {leader} dead")
        cluster.brokers[leader].start()
        cluster.wait_for(topic, lambda s: all(len(v[2]) == 3 for v in s.values()), deadline_s=90,
                         what=f"with broker {leader} back in every ISR")
        load.wait_acked(300, cluster, 90, f"after broker {leader} returned")
    finally:
        undelivered = load.stop()
    assert undelivered == 0 and not load.errors, (undelivered, load.errors[:5], cluster.logs())
    for p in range(3):
        acked = load.acked[p]
        got = _read_partition(cluster.bootstrap, topic, p, len(acked), 90)
        assert len(got) == len(set(got)), f"{mode} partition {p}: duplicates"
        assert got == acked, (mode, p, len(got), len(acked), len(set(acked) - set(got)))


def test_a_follower_down_and_back_shrinks_and_expands_the_isr(cluster: ReplicationCluster, mode: str) -> None:
    topic = "modes-follower"
    _create(cluster, topic, [[1, 2, 3]], **{"min.insync.replicas": "2"})
    first = _produce_acked(cluster.bootstrap, topic, [f"f-a-{i:04d}".encode() for i in range(200)], cluster)
    assert _high_watermark(cluster.bootstrap, topic, 0) == 200
    follower = 3
    cluster.brokers[follower].kill()
    live = {1, 2}
    _wait_live(cluster, topic, live, lambda s: s[0][0] == 1 and sorted(s[0][2]) == [1, 2], "with the ISR shrunk to [1, 2]")
    second = _produce_acked(_bootstrap(cluster, live), topic, [f"f-b-{i:04d}".encode() for i in range(200)], cluster)
    assert _high_watermark(_bootstrap(cluster, live), topic, 0) == 400  # acks=all with 2 of 3
    cluster.brokers[follower].start()
    cluster.wait_for(topic, lambda s: sorted(s[0][2]) == [1, 2, 3], deadline_s=60, what="with the ISR expanded again")
    third = _produce_acked(cluster.bootstrap, topic, [f"f-c-{i:04d}".encode() for i in range(100)], cluster)
    assert _high_watermark(cluster.bootstrap, topic, 0) == 500
    got = _read_partition(cluster.bootstrap, topic, 0, 500, 60)
    assert got == first + second + third, (mode, len(got))


def test_min_insync_replicas_with_two_brokers_down(cluster: ReplicationCluster, mode: str) -> None:
    topic = "modes-min-isr"
    _create(cluster, topic, [[1, 2, 3]], **{"min.insync.replicas": "2"})
    before = _produce_acked(cluster.bootstrap, topic, [f"m-a-{i:03d}".encode() for i in range(50)], cluster)
    cluster.brokers[2].kill()
    cluster.brokers[3].kill()
    _wait_live(cluster, topic, {1}, lambda s: s[0][0] == 1 and s[0][2] == [1], "with the ISR shrunk to [1]")
    producer = Producer({"bootstrap.servers": cluster.brokers[1].bootstrap, "acks": "all",
                         "message.timeout.ms": 5000, "retries": 0})
    errors: list[Any] = []
    producer.produce(topic, value=b"refused", partition=0, on_delivery=lambda err, _m: errors.append(err))
    producer.flush(20)
    assert len(errors) == 1 and errors[0] is not None, errors
    assert errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS, (mode, errors[0])
    # One follower back: the ISR reaches min.insync.replicas again and acks=all succeeds.
    cluster.brokers[2].start()
    _wait_live(cluster, topic, {1, 2}, lambda s: sorted(s[0][2]) == [1, 2], "with broker 2 back in the ISR")
    after = _produce_acked(_bootstrap(cluster, {1, 2}), topic, [f"m-b-{i:03d}".encode() for i in range(50)], cluster)
    got = _read_partition(_bootstrap(cluster, {1, 2}), topic, 0, 100, 60)
    assert got == before + after, (mode, len(got))


def test_unclean_leader_election_off_by_default_on_by_topic_config(cluster: ReplicationCluster, mode: str) -> None:
    """``clean`` (the default: unclean.leader.election.enable=false) and ``unclean`` (true), both
    replicas [1, 2, 3], min.insync.replicas=1. Brokers 2 and 3 die: the ISR is [1] and acks=all
    completes on broker 1 alone. Broker 1 dies, 2 and 3 return: ``clean`` stays offline (leader
    -1) until broker 1 returns with everything; ``unclean`` is led by 2 or 3 without the records
    only broker 1 had (lost, as Kafka documents), and broker 1 truncates them on its return."""
    _create(cluster, "modes-clean", [[1, 2, 3]], **{"min.insync.replicas": "1"})
    _create(cluster, "modes-unclean", [[1, 2, 3]], **{"min.insync.replicas": "1",
                                                     "unclean.leader.election.enable": "true"})
    acked = {t: _produce_acked(cluster.bootstrap, t, [f"{t}-a-{i:03d}".encode() for i in range(100)], cluster)
             for t in ("modes-clean", "modes-unclean")}
    for t in acked:
        cluster.wait_for(t, lambda s: len(s[0][2]) == 3, what="with the ISR full")
    cluster.brokers[2].kill()
    cluster.brokers[3].kill()
    for t in acked:
        _wait_live(cluster, t, {1}, lambda s: s[0][2] == [1], "with the ISR shrunk to [1]")
    only_1 = {t: _produce_acked(cluster.brokers[1].bootstrap, t, [f"{t}-b-{i:03d}".encode() for i in range(100)], cluster)
              for t in acked}
    cluster.brokers[1].kill()
    cluster.brokers[2].start()
    cluster.brokers[3].start()
    live = {2, 3}
    new = _wait_live(cluster, "modes-unclean", live, lambda s: s[0][0] in live, "led by broker 2 or 3 (unclean)")[0][0]
    _wait_live(cluster, "modes-clean", live, lambda s: s[0][0] == -1, "offline")
    time.sleep(2)
    assert _state(cluster, "modes-clean", live)[0][0] == -1, "clean partition elected an out-of-sync replica"
    got = _read_partition(_bootstrap(cluster, live), "modes-unclean", 0, 100, 60)
    assert got == acked["modes-unclean"], (mode, len(got))  # the records only broker 1 had are lost
    print(f"[{mode}] unclean: broker {new} elected, {len(only_1['modes-unclean'])} acknowledged records lost")
    logs = controller_logs(cluster, mode)
    if mode == "kraft":  # the KRaft controller warns of each unclean election (as Kafka 4's does)
        assert [line for line in logs.splitlines()
                if " WARN" in line and "Partition modes-unclean-0: UNCLEAN election" in line], logs[-3000:]
        assert "modes-clean-0: UNCLEAN" not in logs
    else:  # Kafka 3.9's ZooKeeper controller logs no line for an unclean election (a meter only);
        # its state-change log shows both elections, the failed one at ERROR
        assert "Changed partition modes-unclean-0 from OfflinePartition to OnlinePartition" in logs, logs[-3000:]
        assert "failed to change state for partition modes-clean-0 from OfflinePartition to OnlinePartition" \
            in logs, logs[-3000:]

    cluster.brokers[1].start()
    cluster.wait_for("modes-clean", lambda s: s[0][0] == 1, deadline_s=60, what="led by broker 1 again")
    got = _read_partition(cluster.bootstrap, "modes-clean", 0, 200, 60)
    assert got == acked["modes-clean"] + only_1["modes-clean"], (mode, len(got))
    cluster.wait_for("modes-unclean", lambda s: len(s[0][2]) == 3, deadline_s=60, what="with the ISR full again")
    more = _produce_acked(cluster.bootstrap, "modes-unclean", [b"modes-unclean-c-000"], cluster)
    got = _read_partition(cluster.bootstrap, "modes-unclean", 0, 101, 60)
    assert got == acked["modes-unclean"] + more, (mode, len(got))


def test_preferred_leader_back_through_elect_leaders(cluster: ReplicationCluster, mode: str) -> None:
    topic = "modes-preferred"
    _create(cluster, topic, LAYOUT)
    cluster.brokers[1].kill()
    _wait_live(cluster, topic, {2, 3}, lambda s: all(v[0] in (2, 3) for v in s.values()), "led by 2 and 3")
    cluster.brokers[1].start()
    state = cluster.wait_for(topic, lambda s: all(len(v[2]) == 3 for v in s.values()), deadline_s=60,
                             what="with broker 1 back in every ISR")
    assert state[0][0] != 1, state  # auto.leader.rebalance.enable=false: no move by itself
    admin = cluster.admin()
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, p) for p in range(3)]).result(60)
    errors = {tp.partition: err for tp, err in result.items() if err is not None}
    # Partitions 1 and 2 are led by their preferred replicas already: ELECTION_NOT_NEEDED.
    assert 0 not in errors and all(e.code() == KafkaError.ELECTION_NOT_NEEDED for e in errors.values()), errors
    cluster.wait_for(topic, lambda s: {p: v[0] for p, v in s.items()} == {0: 1, 1: 2, 2: 3}, deadline_s=30,
                     what="led by the preferred replicas")


def test_controlled_shutdown_moves_leaders_first(cluster: ReplicationCluster, mode: str) -> None:
    topic = "modes-shutdown"
    _create(cluster, topic, LAYOUT, **{"min.insync.replicas": "2"})
    load = LoadProducer(cluster.bootstrap, topic, 3, rate=500)
    load.start()
    try:
        load.wait_acked(200, cluster, 60, "before the SIGTERM")
        leaving = 2
        broker = cluster.brokers[leaving]
        assert broker.proc is not None
        log_before = broker.log_path.stat().st_size
        broker.proc.terminate()
        sigterm = time.monotonic()
        moved_while_running = False
        others = {1, 3}
        while time.monotonic() - sigterm < 60 and broker.proc.poll() is None:
            try:
                s = _state(cluster, topic, others)
                if all(v[0] in others for v in s.values()):
                    moved_while_running = True
                    break
            except Exception:  # noqa: BLE001 - metadata retried while the broker shuts down
                pass
            time.sleep(0.05)
        assert broker.proc.wait(60) == 0, cluster.logs()
        broker.proc = None
        with open(broker.log_path, "rb") as f:
            f.seek(log_before)
            said = f.read().decode("utf-8", "replace")
        done = "controlled shutdown done in" if mode == "kraft" else "Controlled shutdown succeeded"
        assert done in said, said[-3000:]
        assert moved_while_running, f"leaderships still on broker {leaving} when it exited\n{cluster.logs()}"
        state = _state(cluster, topic, others)
        assert all(v[0] in others and leaving not in v[2] for v in state.values()), state
        load.wait_acked(200, cluster, 60, f"with broker {leaving} shut down")
        broker.start()
        cluster.wait_for(topic, lambda s: all(len(v[2]) == 3 for v in s.values()), deadline_s=60,
                         what=f"with broker {leaving} back in every ISR")
    finally:
        undelivered = load.stop()
    assert undelivered == 0 and not load.errors, (undelivered, load.errors[:5])
    for p in range(3):
        got = _read_partition(cluster.bootstrap, topic, p, len(load.acked[p]), 60)
        assert got == load.acked[p], (mode, p, len(got), len(load.acked[p]))


def test_a_consumer_reads_from_the_follower_in_its_rack(cluster: ReplicationCluster, mode: str) -> None:
    """KIP-392: the leader sends a consumer with ``client.rack`` to the in-sync replica in its rack
    (librdkafka's own debug log says where it fetched)."""
    topic = "modes-near"
    _create(cluster, topic, [[1, 2, 3]])
    values = _produce_acked(cluster.bootstrap, topic, [f"n-{i:04d}".encode() for i in range(300)], cluster)
    cluster.wait_for(topic, lambda s: len(s[0][2]) == 3, what="with the ISR full after the writes")
    leader, near = 1, 2
    lines: list[str] = []

    class Capture:
        def log(self, level: int, fmt: str, *args: Any) -> None:
            lines.append(fmt % args if args else fmt)

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"near-{mode}",
                         "client.rack": f"rack-{near}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "debug": "fetch", "logger": Capture()})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        end = time.monotonic() + 60
        while len(got) < len(values) and time.monotonic() < end:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None and (value := msg.value()) is not None:
                got.append(value)
    finally:
        consumer.close()
    assert got == values, (mode, len(got))
    fetches = [(int(m.group(1)), int(m.group(2))) for line in lines
               if (m := re.search(rf"/(\d+): Fetch topic {topic} \[0\] at offset (\d+)", line))]
    assert any(f"migrating from broker {leader} to {near}" in line and "preferred replica" in line
               for line in lines), (mode, "\n".join(lines[-30:]))
    assert (near, len(values)) in fetches, (mode, fetches)
    assert all(offset == 0 for broker, offset in fetches if broker == leader), (mode, fetches)


def test_a_throttled_reassignment_is_held_back_then_completes(cluster: ReplicationCluster, mode: str) -> None:
    """``modes-throttled`` (3 MB on broker 1) reassigned to [1, 2] with ``odradek reassign
    --execute --throttle 100000``: a broker logs that the quota held the partition back (the
    throttle is asserted through that line, never through timing); with the rates deleted the
    reassignment completes."""
    topic, rate = "modes-throttled", 100_000
    _create(cluster, topic, [[1]])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "linger.ms": 20})
    for i in range(3000):
        producer.produce(topic, b"x" * 1000, key=str(i).encode(), partition=0)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    logs_before = {b: cluster.brokers[b].log_path.stat().st_size for b in (1, 2)}

    def throttle_lines() -> list[str]:
        lines: list[str] = []
        for b, offset in logs_before.items():
            with open(cluster.brokers[b].log_path, "rb") as f:
                f.seek(offset)
                text = f.read().decode("utf-8", "replace")
            lines += [ln for ln in text.splitlines() if f"replication throttle: holding back {topic}-0" in ln]
        return lines

    plan = cluster.brokers[1].log_path.parent / f"plan-{mode}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]}]}))
    admin = cluster.admin()
    # The broker Metadata names as the controller last: in ZooKeeper mode the tool's first broker
    # answers AlterPartitionReassignments with NOT_CONTROLLER and the tool goes to the controller.
    controller = admin.list_topics(timeout=10).controller_id
    bootstrap = ",".join(cluster.brokers[b].bootstrap for b in sorted(cluster.brokers, key=lambda b: b == controller))
    try:
        out = cluster.odradek("reassign", "--bootstrap-server", bootstrap, "--execute",
                              "--reassignment-json-file", str(plan), "--throttle", str(rate)).stdout
        assert f"The inter-broker throttle limit was set to {rate} B/s" in out, out
        end = time.monotonic() + 60
        while time.monotonic() < end and not throttle_lines():
            time.sleep(0.2)
        lines = throttle_lines()
        assert lines, (mode, cluster.logs())
        assert f"over the quota of {rate} B/s" in lines[0], lines[0]
    finally:
        for b in (1, 2, 3):
            res = ConfigResource("broker", str(b), incremental_configs=[
                ConfigEntry(k, "", incremental_operation=AlterConfigOpType.DELETE)
                for k in ("leader.replication.throttled.rate", "follower.replication.throttled.rate")])
            admin.incremental_alter_configs([res])[res].result(timeout=30)
    cluster.wait_for(topic, lambda s: s[0][1] == [1, 2] and sorted(s[0][2]) == [1, 2], deadline_s=120,
                     what="reassigned to [1, 2] with both in the ISR")
