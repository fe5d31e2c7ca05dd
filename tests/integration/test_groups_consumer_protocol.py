"""KIP-848 consumer groups with real confluent-kafka consumers (``group.protocol=consumer``).

The consumers are configured with nothing but ``bootstrap.servers``, ``group.id``,
``group.protocol`` and ``auto.offset.reset``: the broker owns session timeouts, heartbeat
intervals and the assignment. What a user would see: every record consumed exactly once while
members join and leave, a leaving member's partitions moving, a broker restart under live
consumers and a group resuming from its committed offsets, and the group described through the
AdminClient and ``odradek groups``.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from odradek.coordinator.group.consumer_group import ConsumerGroup
from odradek.embedded import EmbeddedBroker

from .test_groups import create_topic, produce, wait_for

# Short broker-side timings so that rebalances take a second, not Kafka's 5 s heartbeats.
FAST = {
    "offsets.topic.num.partitions": "10",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.session.timeout.ms": "3000",
    "group.consumer.session.timeout.ms": "6000",
}


@pytest.fixture(scope="module")
def kbroker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(FAST) as b:
        yield b


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_consumer(b: EmbeddedBroker, group: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": b.bootstrap_servers,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
    })


def group_of(b: EmbeddedBroker, group: str) -> ConsumerGroup | None:
    g = b.server.broker.group_coordinator.metadata_manager.get_group(group)
    assert g is None or isinstance(g, ConsumerGroup), g
    return g


def the_group(b: EmbeddedBroker, group: str) -> ConsumerGroup:
    g = group_of(b, group)
    assert g is not None, f"no consumer group {group}"
    return g


def is_empty(b: EmbeddedBroker, group: str) -> bool:
    g = group_of(b, group)
    return g is not None and g.state_name == "Empty"


def stable_with(b: EmbeddedBroker, group: str, n: int) -> bool:
    g = group_of(b, group)
    return g is not None and g.state_name == "Stable" and len(g.members) == n


def assigned(b: EmbeddedBroker, group: str) -> dict[str, set[int]]:
    """member id -> partitions, as the coordinator has them now."""
    g = group_of(b, group)
    assert g is not None
    return {mid: {p for ps in mm.assigned_partitions.values() for p in ps} for mid, mm in g.members.items()}


class Worker(threading.Thread):
    """One group member consuming in a thread and committing synchronously after each batch.

    Each batch of at most 100 records takes at least 50 ms to "process", so that consuming
    the topic outlasts the rebalances and restarts the tests make happen meanwhile."""

    def __init__(self, b: EmbeddedBroker, group: str, topic: str, seen: list[tuple[int, int]],
                 lock: threading.Lock) -> None:
        super().__init__(daemon=True)
        self.c = new_consumer(b, group)
        self.topic, self.seen, self.lock = topic, seen, lock
        self.stop = threading.Event()
        self.assignment: set[int] = set()
        self.error: BaseException | None = None
        self.commit_errors: list[KafkaException] = []
        self.member_id = ""
        self.count = 0

    def run(self) -> None:
        try:
            self.c.subscribe([self.topic])
            while not self.stop.is_set():
                msgs = self.c.consume(100, 0.2)
                self.assignment = {tp.partition for tp in self.c.assignment()}
                self.member_id = self.c.memberid() or ""
                batch = [(int(x.partition() or 0), int(x.offset() or 0)) for x in msgs if x.error() is None]
                if batch:
                    with self.lock:
                        self.seen.extend(batch)
                    self.count += len(batch)
                    try:
                        self.c.commit(asynchronous=False)
                    except KafkaException as e:
                        self.commit_errors.append(e)
                    time.sleep(0.05)
            self.c.close()  # leaves the group (member epoch -1)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e


def stop_all(workers: list[Worker]) -> None:
    for w in workers:
        w.stop.set()
    for w in workers:
        w.join(30)


def check_exactly_once(seen: list[tuple[int, int]], lock: threading.Lock, n: int) -> None:
    with lock:
        dups = len(seen) - len(set(seen))
        assert dups == 0, f"{dups} record(s) consumed twice"
        assert len(set(seen)) == n


def committed_total(b: EmbeddedBroker, group: str, topic: str) -> int:
    g = group_of(b, group)
    return sum(o.offset for (t, _), o in g.offsets.items() if t == topic) if g else 0


def test_two_then_three_consumers_exactly_once(kbroker: EmbeddedBroker) -> None:
    topic, group = _name("kip848"), _name("grp")
    n = 30_000
    create_topic(kbroker, topic, 6)
    produce(kbroker, topic, n)
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()
    workers = [Worker(kbroker, group, topic, seen, lock) for _ in range(2)]
    for w in workers:
        w.start()
    try:
        wait_for(lambda: stable_with(kbroker, group, 2), 30, "a stable group of two")
        parts = list(assigned(kbroker, group).values())
        assert sorted(len(p) for p in parts) == [3, 3] and set().union(*parts) == set(range(6))
        wait_for(lambda: len(seen) >= 6_000, 60, "6,000 records")
        third = Worker(kbroker, group, topic, seen, lock)
        third.start()
        workers.append(third)
        wait_for(lambda: stable_with(kbroker, group, 3), 30, "a stable group of three")
        parts = list(assigned(kbroker, group).values())
        assert sorted(len(p) for p in parts) == [2, 2, 2] and set().union(*parts) == set(range(6))
        at_three = len(seen)
        assert at_three < n, "the topic was consumed before the third member joined"
        wait_for(lambda: len(seen) >= n, 90, f"all {n:,} records")
        assert third.count > 0  # it took over partitions in the middle of the topic
        # Every member consumed and committed: the committed offsets are the log end offsets.
        wait_for(lambda: committed_total(kbroker, group, topic) == n, 30, "the last commits")
        for w in workers:
            assert w.error is None, w.error
            assert not w.commit_errors, w.commit_errors
        check_exactly_once(seen, lock, n)
        assert all(len(w.assignment) == 2 for w in workers)
    finally:
        stop_all(workers)
    wait_for(lambda: is_empty(kbroker, group), 10, "the group to empty")


def test_a_leaving_member_partitions_move(kbroker: EmbeddedBroker) -> None:
    topic, group = _name("leave"), _name("grp")
    n = 6_000
    create_topic(kbroker, topic, 6)
    produce(kbroker, topic, n)
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()
    workers = [Worker(kbroker, group, topic, seen, lock) for _ in range(2)]
    for w in workers:
        w.start()
    try:
        wait_for(lambda: stable_with(kbroker, group, 2), 30, "a stable group of two")
        wait_for(lambda: all(len(w.assignment) == 3 for w in workers), 30, "3 partitions each")
        epoch = the_group(kbroker, group).group_epoch
        leaving, staying = workers
        moving = set(leaving.assignment)
        leaving.stop.set()
        leaving.join(30)
        assert leaving.error is None, leaving.error
        # The leave is immediate (no session timeout): the survivor takes over its partitions.
        wait_for(lambda: stable_with(kbroker, group, 1), 10, "the leave")
        assert assigned(kbroker, group) == {staying.member_id: set(range(6))}
        assert the_group(kbroker, group).group_epoch == epoch + 1
        wait_for(lambda: staying.assignment == set(range(6)), 20, "the survivor to own everything")
        assert moving <= staying.assignment
        wait_for(lambda: len(set(seen)) >= n, 60, "every record")
        check_exactly_once(seen, lock, n)
        assert staying.error is None and not staying.commit_errors
    finally:
        stop_all(workers)


def test_broker_restart_under_live_consumers_and_resume_from_commits() -> None:
    log_dir = tempfile.mkdtemp(prefix="odradek-kip848-")
    # Kafka's default session timeout: the members must outlast the restart (reloading the log,
    # the clients reconnecting) on a loaded machine, or they are fenced and rejoin.
    b = EmbeddedBroker({**FAST, "offsets.topic.num.partitions": "3",
                        "group.consumer.session.timeout.ms": "45000"}, log_dir=log_dir)
    b.start()
    try:
        topic, group = _name("restart"), _name("grp")
        n = 20_000
        create_topic(b, topic, 4)
        produce(b, topic, n)
        seen: list[tuple[int, int]] = []
        lock = threading.Lock()
        workers = [Worker(b, group, topic, seen, lock) for _ in range(2)]
        for w in workers:
            w.start()
        try:
            wait_for(lambda: stable_with(b, group, 2), 30, "a stable group of two")
            wait_for(lambda: len(seen) >= 5_000, 60, "5,000 records")
            before = group_of(b, group)
            assert before is not None
            epoch, members = before.group_epoch, set(before.members)
            b.restart()
            at_restart = len(seen)
            assert at_restart < n, "the topic was consumed before the restart"
            # The group came back from __consumer_offsets with its members and epoch, so the
            # consumers carry on where they were: no rebalance, nothing consumed twice.
            wait_for(lambda: len(seen) >= n, 90, f"all {n:,} records after the restart")
            after = group_of(b, group)
            assert after is not None and after is not before
            assert after.group_epoch == epoch and set(after.members) == members
            wait_for(lambda: committed_total(b, group, topic) == n, 30, "the last commits")
            check_exactly_once(seen, lock, n)
            for w in workers:
                assert w.error is None, w.error
        finally:
            stop_all(workers)
        wait_for(lambda: is_empty(b, group), 10, "the group to empty")

        # A second round: half-way commits, everybody gone, restart, a new consumer resumes.
        produce(b, topic, 1000)
        c = new_consumer(b, group)
        c.subscribe([topic])
        got = 0
        deadline = time.time() + 30
        while got < 400 and time.time() < deadline:
            got += len([x for x in c.consume(50, 0.5) if x.error() is None])
        c.commit(asynchronous=False)
        tps = [TopicPartition(topic, p) for p in range(4)]
        committed = {tp.partition: tp.offset for tp in c.committed(tps, timeout=10)}
        c.close()
        assert sum(committed.values()) == n + got
        b.restart()
        g = group_of(b, group)
        assert g is not None and g.is_empty()
        assert {p: o.offset for (t, p), o in g.offsets.items() if t == topic} == committed
        c2 = new_consumer(b, group)
        c2.subscribe([topic])
        first: dict[int, int] = {}
        rest = 0
        deadline = time.time() + 40
        while rest < 1000 - got and time.time() < deadline:
            for x in c2.consume(100, 0.5):
                if x.error() is None:
                    first.setdefault(int(x.partition() or 0), int(x.offset() or 0))
                    rest += 1
        more = [x for x in c2.consume(100, 2.0) if x.error() is None]
        c2.close()
        assert rest == 1000 - got and not more
        for p, off in first.items():
            assert off == committed[p]
    finally:
        b.stop()
        shutil.rmtree(log_dir, ignore_errors=True)


def test_describe_with_admin_client_and_cli(broker: EmbeddedBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """On a broker with Kafka's default group.consumer.* settings (45 s session, 5 s heartbeat)."""
    from odradek.cli.main import main

    topic, group = _name("desc"), _name("grp")
    create_topic(broker, topic, 4)
    produce(broker, topic, 400)
    consumers = [new_consumer(broker, group) for _ in range(2)]
    for c in consumers:
        c.subscribe([topic])
    try:
        def settled() -> bool:
            for c in consumers:
                c.poll(0.1)
            return stable_with(broker, group, 2) and all(len(c.assignment()) == 2 for c in consumers)

        wait_for(settled, 40, "a stable group of two")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        d = admin.describe_consumer_groups([group])[group].result(10)
        assert d.group_id == group and d.state == ConsumerGroupState.STABLE
        assert d.partition_assignor == "uniform"
        assert {mm.member_id for mm in d.members} == {c.memberid() for c in consumers}
        for mm in d.members:
            assert mm.host == "/127.0.0.1" and mm.client_id == "rdkafka"
            assert {(tp.topic, tp.partition) for tp in mm.assignment.topic_partitions} <= {(topic, p) for p in range(4)}
            assert len(mm.assignment.topic_partitions) == 2
        listed = admin.list_consumer_groups().result(10)
        mine = [x for x in listed.valid if x.group_id == group]
        assert len(mine) == 1 and mine[0].state == ConsumerGroupState.STABLE

        bs = ["--bootstrap-server", broker.bootstrap_servers]
        assert main(["groups", "--list", "--type", "--state", *bs]) == 0
        line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(group))
        assert line.split()[1:] == ["Consumer", "Stable"]
        assert main(["groups", "--describe", "--group", group, "--state", *bs]) == 0
        out = capsys.readouterr().out
        assert "Stable" in out and "uniform" in out
        assert main(["groups", "--describe", "--group", group, "--members", *bs]) == 0
        out = capsys.readouterr().out
        for c in consumers:
            assert c.memberid() in out
        assert main(["groups", "--describe", "--group", group, *bs]) == 0
        rows = [x.split() for x in capsys.readouterr().out.splitlines() if x.startswith(group)]
        assert sorted(int(r[2]) for r in rows) == [0, 1, 2, 3]
        assert {r[6] for r in rows} == {c.memberid() for c in consumers}
    finally:
        for c in consumers:
            c.close()
    wait_for(lambda: is_empty(broker, group), 10, "the group to empty")
    from odradek.cli.main import main as cli

    assert cli(["groups", "--delete", "--group", group, "--bootstrap-server", broker.bootstrap_servers]) == 0
    assert group_of(broker, group) is None
