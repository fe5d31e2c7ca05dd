"""Replication under faults, real processes and real clients (issue 12's test list): one
controller and three (or four) ``odradek server`` brokers on loopback, confluent-kafka clients.

- kill -9 of the leader of every partition in turn while an idempotent ``acks=all`` producer
  writes flat out: every acknowledged record is read back exactly once, in order per partition,
  and the preferred leaders come back (automatic leader balancing);
- the 2013 Jepsen scenario: the ISR shrinks to the leader alone (followers paused past
  ``replica.lag.time.max.ms``, ``min.insync.replicas=1``), then the leader is cut off and the
  followers resume: without unclean election the partition stays offline and nothing
  acknowledged is lost once the old leader returns; with it, a follower leads and the
  acknowledged writes it lacked are lost, counted and logged by the controller at WARN;
- reassignment 1->3 replicas and 3->3 other replicas (onto a fourth broker) under produce load,
  through AlterPartitionReassignments and through ``odradek reassign --execute/--verify``.

Every wait is bounded; no timing is asserted; processes are stopped in ``finally``.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors

from .replication_cluster import Node, ReplicationCluster
from .test_raft_quorum import _free_ports

PREFERRED_LAYOUT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
LAG_MS = "replica.lag.time.max.ms=3000\nreplica.fetch.backoff.ms=200\n"


def _create(cluster: ReplicationCluster, name: str, assignment: list[list[int]], **configs: str) -> None:
    last: Exception | None = None
    for _ in range(5):
        admin = cluster.admin()  # kept alive until the result is in
        try:
            admin.create_topics(
                [NewTopic(name, len(assignment), replica_assignment=assignment, config=configs)], request_timeout=20
            )[name].result(timeout=30)
            break
        except Exception as e:  # noqa: BLE001 - librdkafka drops its bootstrap connection at times: retried
            if "TOPIC_ALREADY_EXISTS" in str(e):
                break
            last = e
            time.sleep(0.5)
    else:
        raise AssertionError(f"CreateTopics {name}: {last}")
    rf = len(assignment[0])
    cluster.wait_for(name, lambda s: len(s) == len(assignment)
                     and all(v[0] >= 0 and len(v[2]) == rf for v in s.values()), deadline_s=60, what="led, ISR full")


class LoadProducer:
    """An idempotent ``acks=all`` confluent-kafka producer writing ``p<partition>-<seq>`` to every
    partition in turn from its own thread, at up to ``rate`` records a second (so the read-back
    stays short on a shared box), until stopped. ``acked[p]`` is the delivery order of ``p``."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int = 2000) -> None:
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": 180_000, "queue.buffering.max.messages": 5000,
            "topic.metadata.refresh.interval.ms": 1000,
        })
        self.acked: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def acked_count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def _report(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked[msg.partition()].append(msg.value())
        else:
            self.errors.append(f"{msg.partition()}: {err}")

    def _run(self) -> None:
        seq = 0
        started = time.monotonic()
        while not self._stop.is_set():
            if seq > self.rate * (time.monotonic() - started):
                self.producer.poll(0.01)
                continue
            p = seq % self.partitions
            try:
                self.producer.produce(self.topic, value=f"p{p}-{seq:07d}".encode(), partition=p,
                                      on_delivery=self._report)
                seq += 1
                self.sent = seq
            except BufferError:
                self.producer.poll(0.05)
            self.producer.poll(0)

    def stop(self, flush_s: float = 180) -> int:
        """Stops producing; returns the number of records still undelivered after the flush."""
        self._stop.set()
        self._thread.join(30)
        return self.producer.flush(flush_s)

    def wait_acked(self, more: int, cluster: ReplicationCluster, deadline_s: float, what: str) -> None:
        target = self.acked_count() + more
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.acked_count() >= target or self.errors:
                break
            time.sleep(0.2)
        assert not self.errors, f"delivery errors {what}: {self.errors[:5]}\n{cluster.logs()}"
        assert self.acked_count() >= target, f"no progress {what}: {self.acked_count()} < {target}\n{cluster.logs()}"


def _read_partition(bootstrap: str, topic: str, partition: int, expected: int, deadline_s: float) -> list[bytes]:
    """Every record of ``topic``-``partition`` from offset 0 (a little longer than ``expected``,
    so duplicates beyond it show)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": True})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        end = time.monotonic() + deadline_s
        eof_at = 0.0
        while time.monotonic() < end:
            msg = consumer.poll(0.5)
            if msg is None:
                if eof_at and len(got) >= expected and time.monotonic() - eof_at > 2:
                    break
                continue
            err = msg.error()
            value = msg.value()
            if err is None and value is not None:
                got.append(value)
            elif err is not None and err.code() == KafkaError._PARTITION_EOF:
                eof_at = time.monotonic()
    finally:
        consumer.close()
    return got


def _leader_of(cluster: ReplicationCluster, topic: str, partition: int) -> int:
    return cluster.wait_for(topic, lambda s: s[partition][0] >= 0, what=f"partition {partition} led")[partition][0]


@pytest.mark.timeout(600)
def test_kill_the_leader_of_every_partition_in_turn_under_load(tmp_path: Path) -> None:
    """3 brokers, RF=3, min.insync.replicas=2, 3 partitions: kill -9 of each partition's leader
    in turn (restarted and back in every ISR before the next), producing all along."""
    cluster = ReplicationCluster(tmp_path, controller_extra="leader.imbalance.check.interval.seconds=2\n",
                                 broker_extra=LAG_MS)
    load: LoadProducer | None = None
    cluster.start()
    try:
        topic = "jepsen-kill"
        _create(cluster, topic, PREFERRED_LAYOUT, **{"min.insync.replicas": "2"})
        load = LoadProducer(cluster.bootstrap, topic, 3)
        load.start()
        load.wait_acked(300, cluster, 60, "before the first kill")
        for p in range(3):
            leader = _leader_of(cluster, topic, p)
            cluster.brokers[leader].kill()
            print(f"partition {p}: killed its leader, broker {leader}")
            cluster.wait_for(topic, lambda s, p=p, b=leader: s[p][0] not in (-1, b)
                             and all(b not in v[2] for v in s.values()), deadline_s=60,
                             what=f"moved off broker {leader}")
            load.wait_acked(300, cluster, 90, f"with broker {leader} dead")
            cluster.brokers[leader].start()
            cluster.wait_for(topic, lambda s: all(len(v[2]) == 3 for v in s.values()), deadline_s=90,
                             what=f"with broker {leader} back in every ISR")
            # The automatic balancing gives the preferred replica its leadership back.
            cluster.wait_for(topic, lambda s: all(v[0] == v[1][0] for v in s.values()), deadline_s=60,
                             what="led by the preferred replicas")
            load.wait_acked(300, cluster, 90, f"after broker {leader} returned")
        undelivered = load.stop()
        assert undelivered == 0, f"{undelivered} records undelivered\n{cluster.logs()}"
        assert not load.errors, load.errors[:5]
        print(f"acknowledged {load.acked_count()} of {load.sent} records")
        for p in range(3):
            acked = load.acked[p]
            assert acked == sorted(acked), f"partition {p}: acknowledged out of order"
            got = _read_partition(cluster.bootstrap, topic, p, len(acked), 120)
            assert len(got) == len(set(got)), f"partition {p}: {len(got) - len(set(got))} duplicates"
            assert got == acked, (p, len(got), len(acked), set(acked) - set(got))
        final = cluster.partitions(topic)
        assert {p: v[0] for p, v in final.items()} == {0: 1, 1: 2, 2: 3}, final
    finally:
        if load is not None:
            load._stop.set()
        cluster.stop()


def _produce_acked(bootstrap: str, topic: str, values: list[bytes], cluster: ReplicationCluster) -> list[bytes]:
    """``values`` to partition 0 with an idempotent ``acks=all`` producer; the acknowledged ones."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 60_000})
    acked: list[bytes] = []
    errors: list[str] = []

    def report(err: Any, msg: Any) -> None:
        (acked.append(msg.value()) if err is None else errors.append(str(err)))

    for v in values:
        producer.produce(topic, value=v, partition=0, on_delivery=report)
        producer.poll(0)
    assert producer.flush(90) == 0, cluster.logs()
    assert errors == [], errors[:5]
    return acked


@pytest.mark.timeout(600)
def test_jepsen_2013_isr_of_the_leader_alone_then_the_leader_is_cut_off(tmp_path: Path) -> None:
    """Two topics led by broker 1, replicas [1, 2, 3], min.insync.replicas=1; ``clean`` with
    unclean.leader.election.enable=false, ``unclean`` with it true. Both followers paused past
    replica.lag.time.max.ms: the ISR is [1] and acks=all completes on the leader alone. Then the
    leader is paused and the followers resumed. The broker session (12 s) outlasts
    replica.lag.time.max.ms (3 s): the leader shrinks the ISR (AlterPartition) before the
    controller would fence the paused followers, as in Jepsen's run where ZooKeeper still saw them."""
    cluster = ReplicationCluster(tmp_path, controller_extra="auto.leader.rebalance.enable=false\n"
                                 "broker.session.timeout.ms=12000\n", broker_extra=LAG_MS)
    cluster.start()
    try:
        for name, unclean in (("clean", "false"), ("unclean", "true")):
            _create(cluster, name, [[1, 2, 3]], **{"min.insync.replicas": "1",
                                                  "unclean.leader.election.enable": unclean})
        acked: dict[str, list[bytes]] = {}
        for name in ("clean", "unclean"):
            acked[name] = _produce_acked(cluster.bootstrap, name, [f"{name}-a-{i:04d}".encode() for i in range(200)],
                                         cluster)
            cluster.wait_for(name, lambda s: len(s[0][2]) == 3, what="with the ISR full after the first writes")

        # The followers stop. A caught-up follower is in sync however long it is quiet (Kafka's
        # isCaughtUp); the next writes leave them behind, and replica.lag.time.max.ms later the
        # leader shrinks the ISR to itself (AlterPartition), which completes the acks=all.
        cluster.pause(2)
        cluster.pause(3)
        only_leader = {name: _produce_acked(cluster.brokers[1].bootstrap, name,
                                            [f"{name}-b-{i:04d}".encode() for i in range(300)], cluster)
                       for name in ("clean", "unclean")}
        for name in ("clean", "unclean"):
            cluster.wait_for(name, lambda s: s[0][0] == 1 and s[0][2] == [1], deadline_s=60,
                             what="with the ISR shrunk to [1]")
        shrinks = [line for line in cluster.brokers[1].log_path.read_text().splitlines()
                   if "shrinking the ISR from" in line and " to [1]: follower" in line]
        assert shrinks, cluster.brokers[1].log_tail()
        for name in ("clean", "unclean"):
            assert len(only_leader[name]) == 300
            acked[name] += only_leader[name]

        # The leader is cut off, the followers come back.
        cluster.pause(1)
        cluster.resume(2)
        cluster.resume(3)
        live = {2, 3}

        def by_live(topic: str, check: Any, what: str) -> Any:
            end = time.monotonic() + 60
            state: Any = None
            while time.monotonic() < end:
                try:
                    admin = cluster.admin()
                    md = admin.list_topics(topic=topic, timeout=3).topics[topic]
                    state = {p: (pm.leader, list(pm.replicas), list(pm.isrs)) for p, pm in md.partitions.items()}
                    if check(state):
                        return state
                except Exception:  # noqa: BLE001 - retried until the deadline
                    pass
                time.sleep(0.3)
            raise AssertionError(f"{topic} never {what}: last {state}\n{cluster.logs()}")

        # With unclean election on, a follower leads, without the writes only broker 1 held.
        new = by_live("unclean", lambda s: s[0][0] in live, "led by a follower (unclean)")[0][0]
        print(f"unclean: broker {new} elected")
        # Without it the partition has no leader as long as broker 1 is away.
        by_live("clean", lambda s: s[0][0] == -1, "offline")
        time.sleep(2)
        assert by_live("clean", lambda s: True, "described")[0][0] == -1
        bootstrap_live = ",".join(cluster.brokers[b].bootstrap for b in sorted(live))
        got_unclean = _read_partition(bootstrap_live, "unclean", 0, 200, 60)
        lost = [v for v in acked["unclean"] if v not in set(got_unclean)]
        print(f"unclean election: {len(lost)} of {len(acked['unclean'])} acknowledged records lost")
        assert got_unclean == acked["unclean"][:200], (len(got_unclean), got_unclean[-3:])
        assert lost == only_leader["unclean"]
        log = cluster.controller.log_path.read_text()
        warned = [line for line in log.splitlines() if " WARN" in line and "Partition unclean-0: UNCLEAN election" in line]
        assert warned, cluster.controller.log_tail()
        assert "Partition clean-0: UNCLEAN" not in log

        # The old leader returns: the clean partition is led by it again and has every write;
        # in the unclean one it truncates to the new leader's log (the loss stays, nothing doubles).
        cluster.resume(1)
        cluster.wait_for("clean", lambda s: s[0][0] == 1, deadline_s=60, what="led by 1 again")
        got_clean = _read_partition(cluster.bootstrap, "clean", 0, len(acked["clean"]), 60)
        assert got_clean == acked["clean"], (len(got_clean), len(acked["clean"]))
        cluster.wait_for("unclean", lambda s: len(s[0][2]) == 3, deadline_s=60, what="with the ISR full again")
        after = _produce_acked(cluster.bootstrap, "unclean", [b"unclean-c-0000"], cluster)
        got_unclean = _read_partition(cluster.bootstrap, "unclean", 0, 201, 60)
        assert got_unclean == acked["unclean"][:200] + after
    finally:
        cluster.stop()


def _add_broker(cluster: ReplicationCluster, tmp_path: Path, node_id: int) -> None:
    """A fourth broker, configured as broker 3 but for its id, port and log dir; started."""
    port = _free_ports(1)[0]
    template = cluster.brokers[3]
    config = template.config.read_text()
    config = config.replace("node.id=3\n", f"node.id={node_id}\n")
    config = config.replace(f"127.0.0.1:{template.port}\n", f"127.0.0.1:{port}\n")
    config = config.replace(f"log.dirs={tmp_path / 'c3'}\n", f"log.dirs={tmp_path / f'c{node_id}'}\n")
    voters = f"0@127.0.0.1:{cluster.controller.port}"
    node = Node(node_id, port, voters, tmp_path, config)
    cluster.brokers[node_id] = node
    node.format()
    node.start()
    cluster.wait_for_brokers(set(cluster.brokers), 90)


def _reassignments(cluster: ReplicationCluster) -> dict[tuple[str, int], Any]:
    listed = cluster.send(m.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 10_000, "topics": None})
    assert listed["error_code"] == Errors.NONE, listed
    return {(t["name"], p["partition_index"]): (p["replicas"], p["adding_replicas"], p["removing_replicas"])
            for t in listed["topics"] for p in t["partitions"]}


@pytest.mark.timeout(600)
def test_reassignment_under_produce_load(tmp_path: Path) -> None:
    """``grow`` (RF 1) and ``move`` (RF 3, min.insync.replicas=2), each written by an idempotent
    acks=all producer; a fourth broker joins; grow-0 goes 1 -> [1, 2, 3] and move-0 [1, 2, 3] ->
    [4, 2, 3] through AlterPartitionReassignments, grow-1 2 -> [2, 3, 4] and move-1 [2, 3, 1] ->
    [3, 4, 1] through ``odradek reassign --execute`` and ``--verify``."""
    cluster = ReplicationCluster(tmp_path, controller_extra="auto.leader.rebalance.enable=false\n",
                                 broker_extra=LAG_MS)
    loads: list[LoadProducer] = []
    cluster.start()
    try:
        _add_broker(cluster, tmp_path, 4)
        _create(cluster, "grow", [[1], [2]])
        _create(cluster, "move", [[1, 2, 3], [2, 3, 1]], **{"min.insync.replicas": "2"})
        loads = [LoadProducer(cluster.bootstrap, t, 2, rate=500) for t in ("grow", "move")]
        for load in loads:
            load.start()
        for load in loads:
            load.wait_acked(200, cluster, 60, "before the reassignment")

        resp = cluster.send(m.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 10_000, "topics": [
            {"name": "grow", "partitions": [{"partition_index": 0, "replicas": [1, 2, 3]}]},
            {"name": "move", "partitions": [{"partition_index": 0, "replicas": [4, 2, 3]}]},
        ]})
        assert [p["error_code"] for t in resp["responses"] for p in t["partitions"]] == [Errors.NONE] * 2, resp
        moves = {("grow", 1): [2, 3, 4], ("move", 1): [3, 4, 1]}
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": t, "partition": p, "replicas": r} for (t, p), r in moves.items()]}))
        out = cluster.odradek("reassign", "--bootstrap-server", cluster.bootstrap, "--execute",
                              "--reassignment-json-file", str(plan)).stdout
        assert "Successfully started partition reassignments for grow-1,move-1" in out or (
            "Successfully started partition reassignment for grow-1" in out
            and "Successfully started partition reassignment for move-1" in out), out

        expected = {("grow", 0): [1, 2, 3], ("move", 0): [4, 2, 3], **moves}
        end = time.monotonic() + 180
        pending: Any = None
        while time.monotonic() < end:
            pending = _reassignments(cluster)
            if not pending:
                break
            time.sleep(0.5)
        assert pending == {}, f"reassignments still in progress: {pending}\n{cluster.logs()}"
        verify = ""
        end = time.monotonic() + 60
        while time.monotonic() < end:
            verify = cluster.odradek("reassign", "--bootstrap-server", cluster.bootstrap, "--verify",
                                     "--reassignment-json-file", str(plan)).stdout
            if "Reassignment of partition grow-1 is completed." in verify \
                    and "Reassignment of partition move-1 is completed." in verify:
                break
            time.sleep(1)
        assert "Reassignment of partition grow-1 is completed." in verify, verify
        assert "Reassignment of partition move-1 is completed." in verify, verify
        for topic in ("grow", "move"):
            cluster.wait_for(topic, lambda s, topic=topic: all(
                s[p][1] == expected[(topic, p)] and sorted(s[p][2]) == sorted(expected[(topic, p)])
                and s[p][0] in expected[(topic, p)] for p in (0, 1)), deadline_s=60,
                what="with the replicas asked for, all in the ISR")
        for load in loads:
            load.wait_acked(200, cluster, 60, "after the reassignment")

        for load in loads:
            assert load.stop() == 0, cluster.logs()
            assert not load.errors, load.errors[:5]
            for p in (0, 1):
                acked = load.acked[p]
                got = _read_partition(cluster.bootstrap, load.topic, p, len(acked), 120)
                assert len(got) == len(set(got)), f"{load.topic}-{p}: duplicates"
                assert got == acked, (load.topic, p, len(got), len(acked))
            print(f"{load.topic}: {load.acked_count()} acknowledged, all read back")
    finally:
        for load in loads:
            load._stop.set()
        cluster.stop()
