"""Partition replication between real ``odradek server`` processes: one controller and three
brokers, a topic with replication factor 3 and ``min.insync.replicas=2``, an idempotent
confluent-kafka producer with ``acks=all``.

- every acknowledged record is on every follower's log (read from its segment files);
- kill -9 of the leader: the controller fences it (``broker.session.timeout.ms``, shortened here)
  and elects another ISR member, the producer goes on, and every acknowledged record is read back
  exactly once, in order; the killed broker returns, catches up and is in the ISR again;
- with the ISR below ``min.insync.replicas``, ``acks=all`` gets NOT_ENOUGH_REPLICAS;
- a follower that stops fetching (SIGSTOP) while its session lasts leaves the ISR after
  ``replica.lag.time.max.ms`` through AlterPartition, so ``acks=all`` completes with the other
  two; resumed, it catches up and is added back.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.records.batch import parse_header
from odradek.records.records import decode_batch

from .test_raft_quorum import Controller, _free_ports

SESSION_TIMEOUT_MS = 4000


class Broker(Controller):
    def __init__(self, node_id: int, port: int, voters: str, base: Path) -> None:
        super().__init__(node_id, port, voters, base)
        self.config.write_text(
            "process.roles=broker\n"
            f"node.id={node_id}\n"
            f"listeners=PLAINTEXT://127.0.0.1:{port}\n"
            "controller.listener.names=CONTROLLER\n"
            f"controller.quorum.voters={voters}\n"
            f"log.dirs={self.data}\n"
            "offsets.topic.replication.factor=1\n"
            "broker.heartbeat.interval.ms=500\n"
            "replica.lag.time.max.ms=3000\n"
            "replica.fetch.backoff.ms=200\n"
        )

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


class Cluster:
    """1 controller + 3 brokers on loopback."""

    def __init__(self, base: Path, session_timeout_ms: int = SESSION_TIMEOUT_MS) -> None:
        ports = _free_ports(4)
        voters = f"1@127.0.0.1:{ports[0]}"
        self.controller = Controller(1, ports[0], voters, base)
        with open(self.controller.config, "a") as f:
            f.write(f"broker.session.timeout.ms={session_timeout_ms}\n")
        self.brokers = {i: Broker(i, ports[i + 1 - 100], voters, base) for i in (100, 101, 102)}

    @property
    def nodes(self) -> list[Controller]:
        return [self.controller, *self.brokers.values()]

    def bootstrap(self, exclude: int | None = None) -> str:
        return ",".join(b.bootstrap for i, b in self.brokers.items() if i != exclude)

    def start(self) -> None:
        for n in self.nodes:
            n.format()
        for n in self.nodes:
            n.start()

    def stop(self) -> None:
        for b in self.brokers.values():
            if b.proc is not None:
                b.proc.terminate()
        for b in self.brokers.values():
            b.stop()
        self.controller.stop()

    def logs(self) -> str:
        return "\n".join(f"--- node {n.node_id}\n{n.log_tail()}" for n in self.nodes)


def _partition(admin: AdminClient, topic: str) -> Any:
    md = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
    if md is None or md.error is not None or 0 not in md.partitions:
        return None
    return md.partitions[0]


def _wait_for(what: str, cond: Any, cluster: Cluster, deadline_s: float) -> Any:
    end = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < end:
        try:
            last = cond()
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.3)
    raise AssertionError(f"{what}: not within {deadline_s}s (last: {last!r})\n{cluster.logs()}")


def _create_topic(admin: AdminClient, topic: str, min_isr: int) -> None:
    """RF=3; retried when librdkafka drops its bootstrap connection under the request (it does
    once it has learned the brokers: "Broker handle destroyed")."""
    last: Exception | None = None
    for _ in range(5):
        try:
            admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": str(min_isr)})])[topic].result(30)
            return
        except Exception as e:  # noqa: BLE001 - retried, reported below
            if "TOPIC_ALREADY_EXISTS" in str(e):
                return
            last = e
            time.sleep(0.5)
    raise AssertionError(f"CreateTopics {topic}: {last}")


def _produce(producer: Producer, topic: str, values: list[bytes], acked: list[bytes], errors: list[str]) -> None:
    def report(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value())
        else:
            errors.append(str(err))

    for v in values:
        while True:
            try:
                producer.produce(topic, value=v, partition=0, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)


def _log_values(broker: Broker, topic: str) -> list[bytes]:
    """The record values in a (stopped or running) broker's segment files of ``topic``-0."""
    out: list[bytes] = []
    for path in sorted((broker.data / f"{topic}-0").glob("*.log")):
        buf = path.read_bytes()
        pos = 0
        while pos + 61 <= len(buf):
            size = parse_header(buf, pos).size
            if size <= 0 or pos + size > len(buf):
                break
            out.extend(bytes(r.value) for r in decode_batch(buf[pos:pos + size]) if r.value is not None)
            pos += size
    return out


def _consume_all(bootstrap: str, topic: str, expected: int, deadline_s: float) -> list[bytes]:
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
        # A little longer: nothing beyond what was acknowledged may show up twice.
        end = time.monotonic() + 2
        while time.monotonic() < end:
            msg = consumer.poll(0.3)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


@pytest.mark.timeout(300)
def test_rf3_acks_all_survives_kill_of_the_leader(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    cluster.start()
    topic = "replicated"
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
        _wait_for("3 brokers registered", lambda: len(admin.list_topics(timeout=3).brokers) == 3, cluster, 90)
        _create_topic(admin, topic, 2)
        p0 = _wait_for("the ISR of 3", lambda: (p := _partition(admin, topic)) is not None
                       and len(p.isrs) == 3 and p.leader >= 0 and p, cluster, 60)
        leader = p0.leader
        print(f"partition 0: leader {leader}, replicas {p0.replicas}, isr {p0.isrs}")

        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 60000})
        acked: list[bytes] = []
        errors: list[str] = []
        first = [f"a-{i:05d}".encode() for i in range(300)]
        _produce(producer, topic, first, acked, errors)
        assert producer.flush(60) == 0
        assert errors == [] and acked == first

        # Every follower's log holds the same records (the HW covers them once the leader
        # hears from its followers; read the followers' files after they caught up).
        for bid in (b for b in cluster.brokers if b != leader):
            _wait_for(f"follower {bid} holds the 300 records",
                      lambda bid=bid: _log_values(cluster.brokers[bid], topic) == first, cluster, 30)

        # kill -9 the leader while producing: another ISR member takes over.
        second = [f"b-{i:05d}".encode() for i in range(300)]
        _produce(producer, topic, second[:100], acked, errors)
        cluster.brokers[leader].kill()
        killed_at = time.monotonic()
        _produce(producer, topic, second[100:], acked, errors)
        assert producer.flush(90) == 0, cluster.logs()
        print(f"all produced after the kill in {time.monotonic() - killed_at:.1f}s; errors {errors}")
        assert errors == []
        admin2 = AdminClient({"bootstrap.servers": cluster.bootstrap(exclude=leader)})
        p1 = _wait_for("a new leader", lambda: (p := _partition(admin2, topic)) is not None
                       and p.leader not in (-1, leader) and p, cluster, 30)
        print(f"new leader {p1.leader}, isr {p1.isrs}")
        assert leader not in p1.isrs

        got = _consume_all(cluster.bootstrap(exclude=leader), topic, len(acked), 30)
        assert got == first + second, (len(got), len(set(got)))
        assert sorted(acked) == sorted(first + second)

        # The killed broker returns, catches up and rejoins the ISR.
        cluster.brokers[leader].start()
        _wait_for("the ISR of 3 again", lambda: (p := _partition(admin2, topic)) is not None
                  and len(p.isrs) == 3 and p, cluster, 60)
        third = [f"c-{i:05d}".encode() for i in range(50)]
        _produce(producer, topic, third, acked, errors)
        assert producer.flush(60) == 0 and errors == []
        cluster.brokers[leader].stop()
        assert _log_values(cluster.brokers[leader], topic) == first + second + third
    finally:
        cluster.stop()


@pytest.mark.timeout(240)
def test_acks_all_below_min_insync_replicas_is_refused(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    cluster.start()
    topic = "min-isr"
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
        _wait_for("3 brokers registered", lambda: len(admin.list_topics(timeout=3).brokers) == 3, cluster, 90)
        _create_topic(admin, topic, 3)
        p0 = _wait_for("the ISR of 3", lambda: (p := _partition(admin, topic)) is not None
                       and len(p.isrs) == 3 and p, cluster, 60)
        follower = next(r for r in p0.replicas if r != p0.leader)
        cluster.brokers[follower].kill()
        _wait_for("the ISR of 2", lambda: (p := _partition(admin, topic)) is not None
                  and len(p.isrs) == 2 and p, cluster, 60)
        producer = Producer({"bootstrap.servers": cluster.bootstrap(exclude=follower), "acks": "all",
                             "message.timeout.ms": 5000, "retries": 0})
        errors: list[Any] = []
        producer.produce(topic, value=b"x", partition=0,
                         on_delivery=lambda err, _m: errors.append(err))
        producer.flush(20)
        assert len(errors) == 1 and errors[0] is not None
        assert errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS, errors[0]
    finally:
        cluster.stop()


@pytest.mark.timeout(240)
def test_a_stalled_follower_leaves_the_isr_after_the_lag_time_and_returns(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, session_timeout_ms=60000)  # not fenced during the test
    cluster.start()
    topic = "lagging"
    stalled: Broker | None = None
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
        _wait_for("3 brokers registered", lambda: len(admin.list_topics(timeout=3).brokers) == 3, cluster, 90)
        _create_topic(admin, topic, 2)
        p0 = _wait_for("the ISR of 3", lambda: (p := _partition(admin, topic)) is not None
                       and len(p.isrs) == 3 and p.leader >= 0 and p, cluster, 60)
        follower = next(r for r in p0.replicas if r != p0.leader)
        stalled = cluster.brokers[follower]
        assert stalled.proc is not None
        stalled.proc.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        others = cluster.bootstrap(exclude=follower)
        producer = Producer({"bootstrap.servers": others, "acks": "all", "enable.idempotence": True,
                             "message.timeout.ms": 60000})
        acked: list[bytes] = []
        errors: list[str] = []
        values = [f"l-{i:04d}".encode() for i in range(20)]
        _produce(producer, topic, values, acked, errors)
        # acks=all waits for the stalled follower until the leader drops it from the ISR.
        assert producer.flush(60) == 0 and errors == [] and acked == values
        waited = time.monotonic() - stopped_at
        admin2 = AdminClient({"bootstrap.servers": others})
        # The brokers' metadata follows the controller's commit a moment later.
        p1 = _wait_for("the ISR without the stalled follower", lambda: (p := _partition(admin2, topic)) is not None
                       and sorted(p.isrs) == sorted(r for r in p0.isrs if r != follower) and p, cluster, 10)
        print(f"acknowledged {waited:.1f}s after the follower stalled; ISR now {p1.isrs}")
        assert waited >= 2.5  # not before replica.lag.time.max.ms (3 s) passed
        leader_log = (tmp_path / f"c{p0.leader}.log").read_text()
        assert "shrinking the ISR" in leader_log
        stalled.proc.send_signal(signal.SIGCONT)
        _wait_for("the ISR of 3 again", lambda: (p := _partition(admin2, topic)) is not None
                  and len(p.isrs) == 3 and p, cluster, 60)
    finally:
        if stalled is not None and stalled.proc is not None:
            stalled.proc.send_signal(signal.SIGCONT)
        cluster.stop()


@pytest.mark.timeout(240)
def test_a_returning_leader_truncates_what_it_alone_had(tmp_path: Path) -> None:
    """KIP-101/KIP-320 with real processes: the leader takes acks=1 records its followers never
    fetch (both stalled), dies; a follower leads the next epoch and takes new records; the old
    leader returns, learns from the diverging epoch where its log left the new leader's,
    truncates its own records and ends with exactly the new leader's log."""
    cluster = Cluster(tmp_path)
    cluster.start()
    topic = "diverging"
    followers: list[Broker] = []
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
        _wait_for("3 brokers registered", lambda: len(admin.list_topics(timeout=3).brokers) == 3, cluster, 90)
        _create_topic(admin, topic, 1)
        p0 = _wait_for("the ISR of 3", lambda: (p := _partition(admin, topic)) is not None
                       and len(p.isrs) == 3 and p.leader >= 0 and p, cluster, 60)
        old_leader = p0.leader
        producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", "linger.ms": 0})
        acked: list[bytes] = []
        errors: list[str] = []
        first = [f"r-{i:03d}".encode() for i in range(10)]
        _produce(producer, topic, first, acked, errors)
        assert producer.flush(30) == 0 and errors == []
        producer = None

        followers = [cluster.brokers[r] for r in p0.replicas if r != old_leader]
        for f in followers:
            assert f.proc is not None
            f.proc.send_signal(signal.SIGSTOP)
        time.sleep(1.0)  # their fetches waiting at the leader answer (empty) and none follows
        lone = Producer({"bootstrap.servers": cluster.brokers[old_leader].bootstrap, "acks": "1"})
        lone_acked: list[bytes] = []
        _produce(lone, topic, [f"lone-{i}".encode() for i in range(5)], lone_acked, errors)
        assert lone.flush(10) == 0 and len(lone_acked) == 5
        cluster.brokers[old_leader].kill()
        for f in followers:
            assert f.proc is not None
            f.proc.send_signal(signal.SIGCONT)
        assert _log_values(cluster.brokers[old_leader], topic) == first + lone_acked

        admin2 = AdminClient({"bootstrap.servers": cluster.bootstrap(exclude=old_leader)})
        p1 = _wait_for("a new leader", lambda: (p := _partition(admin2, topic)) is not None
                       and p.leader not in (-1, old_leader) and p, cluster, 30)
        producer2 = Producer({"bootstrap.servers": cluster.bootstrap(exclude=old_leader), "acks": "all"})
        second = [f"s-{i:03d}".encode() for i in range(10)]
        _produce(producer2, topic, second, acked, errors)
        assert producer2.flush(60) == 0 and errors == [], errors

        cluster.brokers[old_leader].start()
        _wait_for("the ISR of 3 again", lambda: (p := _partition(admin2, topic)) is not None
                  and len(p.isrs) == 3 and p, cluster, 60)
        cluster.brokers[old_leader].stop()
        assert _log_values(cluster.brokers[old_leader], topic) == first + second
        assert _log_values(cluster.brokers[p1.leader], topic) == first + second
        assert "diverges from the leader at epoch" in cluster.brokers[old_leader].log_path.read_text()
    finally:
        for f in followers:
            if f.proc is not None:
                f.proc.send_signal(signal.SIGCONT)
        cluster.stop()
