"""What follows leadership, with real processes: a rolling restart of all three brokers with
controlled shutdown (SIGTERM) while a confluent-kafka consumer group reads and an idempotent
``acks=all`` producer writes.

One controller and three brokers (test_replication's cluster, here with
``offsets.topic.replication.factor`` left at Kafka's 3). Each broker in turn gets SIGTERM: before
it stops, the controller moves its leaderships (its topic partitions and its ``__consumer_offsets``
partitions) to the other ISR members; the time from SIGTERM to the metadata showing no leader on
it is printed (not asserted). It restarts and rejoins every ISR before the next one goes.

- the producer sees only retriable errors (none fatal, no failed delivery), and every
  acknowledged record is in the log exactly once, in order per partition (the idempotent
  producer's retries across leader changes are de-duplicated by the new leaders);
- the group loses nothing: every acknowledged record is consumed; the group's committed offsets
  are never seen to go back across a coordinator move, and end at the log end;
- the group's coordinator (the leader of its ``__consumer_offsets`` partition) moves off the
  broker that stops and comes back to it when its replacement stops in turn (the controller
  elects the first live ISR member in replica order).

Also: a consumer with ``client.rack`` reads from the follower in its rack (KIP-392, the
rack-aware ``replica.selector.class``), and ``__consumer_offsets`` waits (COORDINATOR_NOT_AVAILABLE)
until as many brokers as ``offsets.topic.replication.factor`` are up.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC, partition_for
from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors

from .test_replication import Cluster, _wait_for

TOPIC = "rolling"
GROUP = "rolling-group"
PARTITIONS = 3


class LeadershipCluster(Cluster):
    """test_replication's cluster with the internal topics' replication factor at Kafka's
    default (3) and no initial rebalance delay."""

    def __init__(self, base: Path) -> None:
        super().__init__(base)
        for b in self.brokers.values():
            text = b.config.read_text().replace("offsets.topic.replication.factor=1\n", "")
            b.config.write_text(text + "group.initial.rebalance.delay.ms=0\n")


def _leaders(admin: AdminClient) -> dict[tuple[str, int], Any]:
    md = admin.list_topics(timeout=5)
    out: dict[tuple[str, int], Any] = {}
    for name in (TOPIC, OFFSETS_TOPIC):
        t = md.topics.get(name)
        if t is None or t.error is not None:
            continue
        for p, pm in t.partitions.items():
            out[(name, p)] = pm
    return out


def _all_isrs_full(admin: AdminClient) -> bool:
    parts = _leaders(admin)
    return len(parts) == PARTITIONS + 50 and all(len(p.isrs) == 3 and p.leader >= 0 for p in parts.values())


def _committed(probe: Consumer) -> dict[int, int]:
    got = probe.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
    return {tp.partition: tp.offset for tp in got}


class Workload:
    """An idempotent acks=all producer and a consumer group member, each on its own thread."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.delivery_errors: list[str] = []
        self.producer_errors: list[KafkaError] = []
        self.consumed: list[bytes] = []
        self.commit_errors: list[str] = []
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.lock = threading.Lock()
        self.producer_thread = threading.Thread(target=self._produce, daemon=True)
        self.consumer_thread = threading.Thread(target=self._consume, daemon=True)

    def start(self) -> None:
        self.producer_thread.start()
        self.consumer_thread.start()

    def acked_count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.acked.values())

    def _produce(self) -> None:
        producer = Producer({
            "bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": 120000,
            "error_cb": lambda err: self.producer_errors.append(err),
        })

        def report(err: Any, msg: Any) -> None:
            with self.lock:
                if err is None:
                    self.acked[msg.partition()].append(msg.value())
                else:
                    self.delivery_errors.append(str(err))

        i = 0
        deadline = time.monotonic() + 400
        while not self.stop_producing.is_set() and i < 40000 and time.monotonic() < deadline:
            try:
                producer.produce(TOPIC, value=f"m-{i:06d}".encode(), partition=i % PARTITIONS, on_delivery=report)
                i += 1
            except BufferError:
                pass
            producer.poll(0.01)
        left = producer.flush(120)
        if left:
            self.delivery_errors.append(f"{left} record(s) not delivered at the end")

    def _consume(self) -> None:
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": GROUP, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
        })
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 500
        try:
            while not self.stop_consuming.is_set() and time.monotonic() < deadline:
                msgs = consumer.consume(200, 0.3)
                got = [m.value() for m in msgs if m.error() is None]
                if not got:
                    continue
                with self.lock:
                    self.consumed.extend(got)
                for _ in range(20):  # committed after processing: at least once
                    try:
                        consumer.commit(asynchronous=False)
                        break
                    except KafkaException as e:
                        self.commit_errors.append(str(e))
                        time.sleep(0.2)
        finally:
            consumer.close()


@pytest.mark.timeout(600)
def test_rolling_restart_with_controlled_shutdown_under_a_group_and_a_producer(tmp_path: Path) -> None:
    cluster = LeadershipCluster(tmp_path)
    cluster.start()
    work: Workload | None = None
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
        _wait_for("3 brokers registered", lambda: len(admin.list_topics(timeout=3).brokers) == 3, cluster, 90)
        for _ in range(5):
            try:
                admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(30)
                break
            except Exception as e:  # noqa: BLE001 - retried (librdkafka drops its bootstrap handle)
                if "TOPIC_ALREADY_EXISTS" in str(e):
                    break
                time.sleep(0.5)
        work = Workload(cluster.bootstrap())
        work.start()
        # The group's first FindCoordinator creates __consumer_offsets (RF 3: all brokers are up).
        _wait_for("__consumer_offsets with RF 3 and the topic, all ISRs full",
                  lambda: _all_isrs_full(admin), cluster, 90)
        offsets_md = admin.list_topics(topic=OFFSETS_TOPIC, timeout=5).topics[OFFSETS_TOPIC]
        gp = partition_for(GROUP, len(offsets_md.partitions))
        assert len(offsets_md.partitions[gp].replicas) == 3
        probe = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": GROUP, "enable.auto.commit": False})
        _wait_for("the group consuming and committing", lambda: work is not None and len(work.consumed) >= 300
                  and all(o >= 0 for o in _committed(probe).values()), cluster, 90)

        def coordinator() -> int:
            return int(_leaders(admin)[(OFFSETS_TOPIC, gp)].leader)

        first = coordinator()
        replicas = list(offsets_md.partitions[gp].replicas)
        # The coordinator's broker first, then the one its partition moves to (the next live
        # ISR member in replica order), then the last: the coordinator moves and comes back.
        successor = next(r for r in replicas if r != first)
        order = [first, successor, next(b for b in cluster.brokers if b not in (first, successor))]
        coordinators = [first]
        for bid in order:
            broker = cluster.brokers[bid]
            others = AdminClient({"bootstrap.servers": cluster.bootstrap(exclude=bid)})
            before = _wait_for("the group's committed offsets", lambda: _committed(probe), cluster, 30)
            assert broker.proc is not None
            broker.proc.terminate()
            sigterm = time.monotonic()
            moved = None
            while time.monotonic() - sigterm < 30:
                try:
                    parts = _leaders(others)
                except KafkaException:
                    parts = {}
                if parts and all(p.leader != bid for p in parts.values()):
                    moved = time.monotonic() - sigterm
                    break
                time.sleep(0.05)
            broker.proc.wait(60)
            exited = time.monotonic() - sigterm
            broker.proc = None
            done = re.findall(r"controlled shutdown done in (\d+) ms", broker.log_path.read_text())
            print(f"broker {bid}: leaderships moved off {moved if moved is None else round(moved, 3)} s "
                  f"after SIGTERM as clients saw it, controlled shutdown done in {done[-1] if done else '?'} ms "
                  f"as the broker saw it, process exited after {exited:.2f} s")
            assert moved is not None, cluster.logs()
            assert done, cluster.logs()  # the controller approved it: its leaderships had moved
            now = _wait_for("the coordinator elected elsewhere", lambda bid=bid: (c := coordinator()) not in (-1, bid) and c,
                            cluster, 30)
            coordinators.append(now)
            # Committed offsets survived the move (served by the new coordinator, never lower).
            after = _wait_for("the group's committed offsets", lambda: _committed(probe), cluster, 30)
            assert all(after[p] >= before[p] >= 0 for p in before), (before, after)
            acked_before = work.acked_count()
            broker.start()
            _wait_for(f"broker {bid} back in every ISR", lambda: _all_isrs_full(admin), cluster, 120)
            _wait_for("the producer acknowledged more", lambda n=acked_before: work is not None and work.acked_count() > n,
                      cluster, 60)
            coordinators.append(coordinator())
        print(f"coordinator of {GROUP} ({OFFSETS_TOPIC}-{gp}, replicas {replicas}): {coordinators}")
        assert coordinators[1] == successor  # moved off the broker that stopped
        # Came back when its replacement stopped: the first ISR member in replica order (the
        # first coordinator, the partition's preferred leader, as a new topic's first leader is).
        assert coordinators[3] == next(r for r in replicas if r != successor) == first

        work.stop_producing.set()
        work.producer_thread.join(180)
        acked = {p: list(v) for p, v in work.acked.items()}
        all_acked = {v for vs in acked.values() for v in vs}
        _wait_for("the group consumed every acknowledged record",
                  lambda: all_acked <= set(work.consumed) if work is not None else False, cluster, 120)
        work.stop_consuming.set()
        work.consumer_thread.join(60)

        print(f"acknowledged {len(all_acked)}; consumed {len(work.consumed)} "
              f"({len(work.consumed) - len(set(work.consumed))} again after rebalances); "
              f"commit retries {len(work.commit_errors)}; producer notices "
              f"{sorted({e.name() for e in work.producer_errors})}")
        assert work.delivery_errors == []
        assert not [e for e in work.producer_errors if e.fatal()], work.producer_errors
        assert len(all_acked) == sum(len(v) for v in acked.values())

        # Exactly once and in order per partition in the log; committed offsets at the end.
        reader = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "rolling-check",
                           "enable.auto.commit": False})
        try:
            for p in range(PARTITIONS):
                _low, high = reader.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
                reader.assign([TopicPartition(TOPIC, p, 0)])
                got: list[bytes] = []
                end = time.monotonic() + 60
                while len(got) < high and time.monotonic() < end:
                    msg = reader.poll(0.5)
                    if msg is not None and msg.error() is None:
                        got.append(msg.value())
                assert got == acked[p], (p, len(got), len(acked[p]), len(set(got)))
                assert _committed(probe)[p] == high
        finally:
            reader.close()
            probe.close()
    finally:
        if work is not None:
            work.stop_producing.set()
            work.stop_consuming.set()
        cluster.stop()


class RackCluster(LeadershipCluster):
    """Each broker in its own rack; leaders pick the consumer's replica by rack."""

    def __init__(self, base: Path) -> None:
        super().__init__(base)
        for bid, b in self.brokers.items():
            with open(b.config, "a") as f:
                f.write(f"broker.rack=rack-{bid}\n"
                        "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector\n")


@pytest.mark.timeout(300)
def test_a_consumer_reads_from_the_follower_in_its_rack(tmp_path: Path) -> None:
    cluster = RackCluster(tmp_path)
    cluster.start()
    topic = "near"
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
        _wait_for("3 brokers registered", lambda: len(admin.list_topics(timeout=3).brokers) == 3, cluster, 90)
        for _ in range(5):
            try:
                admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
                break
            except Exception as e:  # noqa: BLE001 - retried (librdkafka drops its bootstrap handle)
                if "TOPIC_ALREADY_EXISTS" in str(e):
                    break
                time.sleep(0.5)
        p0 = _wait_for("the ISR of 3", lambda: (p := admin.list_topics(topic=topic, timeout=5).topics[topic].partitions.get(0))
                       is not None and len(p.isrs) == 3 and p.leader >= 0 and p, cluster, 60)
        leader = p0.leader
        near = next(r for r in p0.replicas if r != leader)
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", "linger.ms": 5})
        values = [f"n-{i:04d}".encode() for i in range(500)]
        for v in values:
            producer.produce(topic, value=v, partition=0)
        assert producer.flush(60) == 0

        lines: list[str] = []

        class Capture:
            def log(self, level: int, fmt: str, *args: Any) -> None:
                lines.append(fmt % args if args else fmt)

        consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "near-group",
                             "client.rack": f"rack-{near}", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "debug": "fetch", "logger": Capture()})
        got: list[bytes] = []
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            end = time.monotonic() + 60
            while len(got) < len(values) and time.monotonic() < end:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
        finally:
            consumer.close()
        assert got == values
        # librdkafka's own account: sent to the follower by the leader, then every fetch there.
        fetches = [(int(m.group(1)), int(m.group(2))) for line in lines
                   if (m := re.search(r"/(\d+): Fetch topic near \[0\] at offset (\d+)", line))]
        print(f"leader {leader}, follower in the consumer's rack {near}; fetches (broker, offset): {fetches}")
        assert any(f"migrating from broker {leader} to {near}" in line and "preferred replica" in line
                   for line in lines), "\n".join(lines[-50:])
        assert (near, 0) in fetches and (near, len(values)) in fetches
        assert all(offset == 0 for broker, offset in fetches if broker == leader)  # the first only
    finally:
        cluster.stop()


async def _find_coordinator(port: int, group: str) -> tuple[int, int]:
    client = NetworkClient("127.0.0.1", port)
    try:
        await client.connect()
        resp = await client.send(m.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
        c = resp["coordinators"][0]
        return int(c["error_code"]), int(c["node_id"])
    finally:
        await client.close()


@pytest.mark.timeout(300)
def test_offsets_topic_waits_for_enough_brokers(tmp_path: Path) -> None:
    """offsets.topic.replication.factor=3 with two of three brokers up: FindCoordinator answers
    COORDINATOR_NOT_AVAILABLE (the controller refuses the topic, as Kafka's does); once the
    third broker is up, __consumer_offsets is created with 3 replicas and the coordinator is
    the leader of the group's partition."""
    cluster = LeadershipCluster(tmp_path)
    late = cluster.brokers[102]
    for n in cluster.nodes:
        n.format()
    for n in cluster.nodes:
        if n is not late:
            n.start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap(exclude=102)})
        _wait_for("2 brokers registered", lambda: len(admin.list_topics(timeout=3).brokers) == 2, cluster, 90)
        port = cluster.brokers[100].port
        for _ in range(3):
            err, node = asyncio.run(_find_coordinator(port, "g1"))
            assert (err, node) == (Errors.COORDINATOR_NOT_AVAILABLE, -1)
            time.sleep(0.5)
        assert OFFSETS_TOPIC not in admin.list_topics(timeout=5).topics
        log_text = cluster.brokers[100].log_path.read_text()
        assert "until 3 brokers are up (offsets.topic.replication.factor=3)" in log_text, cluster.logs()

        late.start()
        _wait_for("3 brokers registered", lambda: len(admin.list_topics(timeout=3).brokers) == 3, cluster, 90)
        found = _wait_for("a coordinator", lambda: (r := asyncio.run(_find_coordinator(port, "g1")))[0] == 0 and r,
                          cluster, 60)
        md = admin.list_topics(topic=OFFSETS_TOPIC, timeout=5).topics[OFFSETS_TOPIC]
        gp = partition_for("g1", len(md.partitions))
        assert all(len(p.replicas) == 3 for p in md.partitions.values())
        assert found[1] == md.partitions[gp].leader
    finally:
        cluster.stop()
