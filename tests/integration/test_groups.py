"""Consumer groups with real clients: confluent-kafka, kafka-python, aiokafka and kcat.

What a user would see: every record consumed exactly once across a group through joins, clean
leaves, a ``kill -9``ed member and a broker restart; static members that come back without a
rebalance; cooperative-sticky; and Kafka's error codes for bad commits and group operations.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.coordinator.group.consumer_protocol import parse_assignment
from odradek.embedded import EmbeddedBroker
from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors

from .support import REQUIRES_KCAT

SESSION_MS = 6000


@pytest.fixture(scope="module")
def gbroker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker({"offsets.topic.num.partitions": "10"}) as b:
        yield b


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(b: EmbeddedBroker, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(30)


def produce(b: EmbeddedBroker, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 20, "batch.num.messages": 2000})
    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=str(i).encode())
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def consumer(b: EmbeddedBroker, group: str, **extra: Any) -> Consumer:
    conf = {
        "bootstrap.servers": b.bootstrap_servers,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": 500,
    }
    conf.update(extra)
    return Consumer(conf)


def group_state(b: EmbeddedBroker, group: str) -> Any:
    return b.server.broker.group_coordinator.metadata_manager.get_group(group)


async def _request(b: EmbeddedBroker, api: Any, version: int, body: dict[str, Any]) -> dict[str, Any]:
    async with NetworkClient("127.0.0.1", b.port) as c:
        return await c.send(api, version, body)


def request(b: EmbeddedBroker, api: Any, version: int, body: dict[str, Any]) -> dict[str, Any]:
    return asyncio.run(_request(b, api, version, body))


class Worker(threading.Thread):
    """One confluent-kafka group member consuming in a thread, committing after each batch."""

    def __init__(self, b: EmbeddedBroker, group: str, topic: str, seen: list[tuple[int, int]],
                 lock: threading.Lock, **extra: Any) -> None:
        super().__init__(daemon=True)
        self.c = consumer(b, group, **extra)
        self.topic, self.seen, self.lock = topic, seen, lock
        self.stop = threading.Event()
        self.assignment: set[int] = set()
        self.error: BaseException | None = None
        self.commit_errors: list[KafkaException] = []

    def run(self) -> None:
        try:
            self.c.subscribe([self.topic])
            while not self.stop.is_set():
                msgs = self.c.consume(200, 0.2)
                self.assignment = {tp.partition for tp in self.c.assignment()}
                batch = [(int(x.partition() or 0), int(x.offset() or 0)) for x in msgs if x.error() is None]
                if batch:
                    with self.lock:
                        self.seen.extend(batch)
                    # The batch's own offsets, not "the assignment's positions": an eager
                    # rebalance may revoke the partitions between consume() and commit(), and
                    # then commit() has nothing to commit (_NO_OFFSET) while the coordinator,
                    # still preparing the rebalance, takes a commit of this generation.
                    ends: dict[int, int] = {}
                    for p, o in batch:
                        ends[p] = max(ends.get(p, -1), o + 1)
                    try:
                        self.c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in ends.items()],
                                      asynchronous=False)
                    except KafkaException as e:  # e.g. REBALANCE_IN_PROGRESS (cooperative)
                        self.commit_errors.append(e)
                    time.sleep(0.02)
            self.c.close()  # LeaveGroup
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e


def wait_for(cond: Any, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_group_of_three_then_join_and_leave_exactly_once(gbroker: EmbeddedBroker) -> None:
    topic, group = _name("g3"), _name("grp")
    create_topic(gbroker, topic, 6)
    produce(gbroker, topic, 60_000)
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()
    workers = [Worker(gbroker, group, topic, seen, lock) for _ in range(3)]
    for w in workers:
        w.start()
    try:
        def stable_three() -> bool:
            g = group_state(gbroker, group)
            return g is not None and g.state_name == "Stable" and len(g.members) == 3

        wait_for(stable_three, 30, "a stable group of three")
        # The assignment the leader computed, as the coordinator handed it out.
        parts = [parse_assignment(mm.assignment).get(topic, []) for mm in group_state(gbroker, group).members.values()]
        assert all(parts) and sorted(p for ps in parts for p in ps) == list(range(6))
        wait_for(lambda: len(seen) >= 15_000, 60, "15,000 records")
        fourth = Worker(gbroker, group, topic, seen, lock)
        fourth.start()
        workers.append(fourth)
        wait_for(lambda: len(group_state(gbroker, group).members) == 4, 30, "the fourth member")
        wait_for(lambda: len(seen) >= 30_000, 60, "30,000 records")
        workers[0].stop.set()
        workers[0].join(30)
        wait_for(lambda: len(seen) >= 60_000, 90, "all 60,000 records")
        time.sleep(1)
        for w in workers:
            assert w.error is None, w.error
            assert not w.commit_errors, w.commit_errors
        with lock:
            assert len(seen) == 60_000, f"{len(seen) - len(set(seen))} duplicate(s)"
            assert len(set(seen)) == 60_000
    finally:
        for w in workers:
            w.stop.set()
        for w in workers:
            w.join(30)
    g = group_state(gbroker, group)
    total = sum(o.offset for (t, _p), o in g.offsets.items() if t == topic)
    assert total == 60_000


KILLABLE = """
import sys, time
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "auto.offset.reset": "earliest",
              "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "enable.auto.commit": False})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.2)
    a = c.assignment()
    if a:
        print("assigned", ",".join(str(tp.partition) for tp in a), flush=True)
"""


def test_killed_member_partitions_move_after_session_timeout(gbroker: EmbeddedBroker) -> None:
    topic, group = _name("kill"), _name("grp")
    create_topic(gbroker, topic, 6)
    survivor = consumer(gbroker, group)
    survivor.subscribe([topic])
    wait_for(lambda: bool(survivor.poll(0.1) or survivor.assignment()), 30, "survivor assignment")
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLABLE, gbroker.bootstrap_servers, group, topic],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        def split() -> bool:
            survivor.poll(0.1)
            return 0 < len(survivor.assignment()) < 6

        wait_for(split, 40, "the partitions to be split between two members")
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("assigned")
        os.kill(proc.pid, signal.SIGKILL)
        killed_at = time.time()

        def all_mine() -> bool:
            survivor.poll(0.1)
            return len(survivor.assignment()) == 6

        wait_for(all_mine, 40, "the killed member's partitions to move")
        assert time.time() - killed_at >= SESSION_MS / 1000 - 1.5
    finally:
        proc.kill()
        proc.wait()
        survivor.close()


def test_broker_restart_consumers_resume_from_committed_offsets() -> None:
    log_dir = tempfile.mkdtemp(prefix="odradek-groups-")
    b = EmbeddedBroker({"offsets.topic.num.partitions": "5"}, log_dir=log_dir)
    b.start()
    try:
        topic, group = _name("restart"), _name("grp")
        create_topic(b, topic, 2)
        produce(b, topic, 1000)
        c = consumer(b, group)
        c.subscribe([topic])
        got = 0
        deadline = time.time() + 30
        while got < 400 and time.time() < deadline:
            got += len([x for x in c.consume(50, 0.5) if x.error() is None])
        c.commit(asynchronous=False)
        committed = {tp.partition: max(tp.offset, 0) for tp in c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)])}
        c.close()
        assert sum(committed.values()) == got
        b.stop()
        b.start()
        c2 = consumer(b, group)
        c2.subscribe([topic])
        first: dict[int, int] = {}
        rest = 0
        deadline = time.time() + 40
        while rest < 1000 - got and time.time() < deadline:
            for x in c2.consume(100, 0.5):
                if x.error() is None:
                    first.setdefault(int(x.partition() or 0), int(x.offset() or 0))
                    rest += 1
        c2.close()
        assert rest == 1000 - got
        for p, off in first.items():
            assert off == max(committed[p], 0)
        g = group_state(b, group)
        assert g is not None and g.generation_id >= 2  # the group record survived the restart
    finally:
        b.stop()
        shutil.rmtree(log_dir, ignore_errors=True)


def test_static_members_rejoin_without_rebalance(gbroker: EmbeddedBroker) -> None:
    topic, group = _name("static"), _name("grp")
    create_topic(gbroker, topic, 4)
    a = consumer(gbroker, group, **{"group.instance.id": "a"})
    b = consumer(gbroker, group, **{"group.instance.id": "b"})
    for c in (a, b):
        c.subscribe([topic])

    def stable() -> bool:
        a.poll(0.05)
        b.poll(0.05)
        g = group_state(gbroker, group)
        return g is not None and g.state_name == "Stable" and len(g.members) == 2 and bool(a.assignment()) and bool(b.assignment())

    wait_for(stable, 40, "a stable static group")
    generation = group_state(gbroker, group).generation_id
    b_parts = {tp.partition for tp in b.assignment()}
    b.close()  # a static member does not leave the group on close
    b2 = consumer(gbroker, group, **{"group.instance.id": "b"})
    b2.subscribe([topic])
    wait_for(lambda: bool(b2.poll(0.1) or b2.assignment()) and bool(b2.assignment()), 30, "b's return")
    assert {tp.partition for tp in b2.assignment()} == b_parts
    assert group_state(gbroker, group).generation_id == generation
    a.close()
    b2.close()


def test_cooperative_sticky(gbroker: EmbeddedBroker) -> None:
    topic, group = _name("coop"), _name("grp")
    create_topic(gbroker, topic, 6)
    produce(gbroker, topic, 6000)
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()
    extra = {"partition.assignment.strategy": "cooperative-sticky"}
    ws = [Worker(gbroker, group, topic, seen, lock, **extra)]
    ws[0].start()
    wait_for(lambda: len(seen) >= 1000, 30, "first records")
    ws.append(Worker(gbroker, group, topic, seen, lock, **extra))
    ws[1].start()
    try:
        wait_for(lambda: len(seen) >= 6000, 60, "all records")
        wait_for(lambda: ws[0].assignment and ws[1].assignment and
                 len(ws[0].assignment | ws[1].assignment) == 6 and not ws[0].assignment & ws[1].assignment,
                 30, "a disjoint, complete cooperative assignment")
        time.sleep(0.5)
        assert len(set(seen)) == 6000
        assert group_state(gbroker, group).protocol_name == "cooperative-sticky"
    finally:
        for w in ws:
            w.stop.set()
        for w in ws:
            w.join(30)


def committed_total(b: EmbeddedBroker, group: str, topic: str) -> int:
    g = group_state(b, group)
    return sum(o.offset for (t, _), o in g.offsets.items() if t == topic) if g else 0


def test_kafka_python_group(gbroker: EmbeddedBroker) -> None:
    import kafka

    topic, group = _name("kpy"), _name("grp")
    create_topic(gbroker, topic, 3)
    produce(gbroker, topic, 3000)
    c = kafka.KafkaConsumer(topic, bootstrap_servers=gbroker.bootstrap_servers, group_id=group,
                            auto_offset_reset="earliest", enable_auto_commit=False,
                            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500)
    n = 0
    deadline = time.time() + 60
    while n < 3000 and time.time() < deadline:
        for recs in c.poll(500).values():
            n += len(recs)
        c.commit()
    c.close()
    assert n == 3000
    assert committed_total(gbroker, group, topic) == 3000


def test_aiokafka_group(gbroker: EmbeddedBroker) -> None:
    import aiokafka

    topic, group = _name("aio"), _name("grp")
    create_topic(gbroker, topic, 3)
    produce(gbroker, topic, 3000)

    async def run() -> int:
        c = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=gbroker.bootstrap_servers, group_id=group,
                                      auto_offset_reset="earliest", enable_auto_commit=False,
                                      session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500)
        await c.start()
        n = 0
        try:
            deadline = time.time() + 60
            while n < 3000 and time.time() < deadline:
                batch = await c.getmany(timeout_ms=500)
                n += sum(len(v) for v in batch.values())
                await c.commit()
        finally:
            await c.stop()
        return n

    assert asyncio.run(run()) == 3000
    assert committed_total(gbroker, group, topic) == 3000


@REQUIRES_KCAT
def test_kcat_balanced_consumer(gbroker: EmbeddedBroker) -> None:
    topic, group = _name("kcat"), _name("grp")
    create_topic(gbroker, topic, 3)
    produce(gbroker, topic, 2000)
    proc = subprocess.Popen(
        ["kcat", "-b", gbroker.bootstrap_servers, "-G", group, "-o", "beginning", "-e",
         "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=200", "-f", "%o\n", topic],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert len(out.split()) == 2000
    wait_for(lambda: committed_total(gbroker, group, topic) == 2000, 10, "kcat's commits")


def test_bad_input_gets_error_codes(gbroker: EmbeddedBroker) -> None:
    topic, group = _name("bad"), _name("grp")
    create_topic(gbroker, topic, 2)
    c = consumer(gbroker, group)
    c.subscribe([topic])
    wait_for(lambda: bool(c.poll(0.1) or c.assignment()) and bool(c.assignment()), 30, "an assignment")
    g = group_state(gbroker, group)
    member, gen = next(iter(g.members)), g.generation_id

    def commit(topic_: str, generation: int, metadata: str = "", group_: str = group, member_: str = member) -> int:
        resp = request(gbroker, m.OFFSET_COMMIT, 8, {
            "group_id": group_, "generation_id_or_member_epoch": generation, "member_id": member_,
            "topics": [{"name": topic_, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                         "committed_metadata": metadata}]}]})
        return int(resp["topics"][0]["partitions"][0]["error_code"])

    assert commit(topic, gen) == Errors.NONE
    assert commit("no-such-topic-" + uuid.uuid4().hex, gen) == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert commit(topic, gen + 7) == Errors.ILLEGAL_GENERATION
    assert commit(topic, gen, "x" * 5000) == Errors.OFFSET_METADATA_TOO_LARGE
    assert commit(topic, gen, group_="") == Errors.INVALID_GROUP_ID
    assert commit(topic, gen, member_="nobody") == Errors.UNKNOWN_MEMBER_ID
    assert commit(topic, 3, group_=_name("unknown")) == Errors.ILLEGAL_GENERATION
    # A standalone commit (generation -1, no member) to a group nobody uses is fine.
    assert commit(topic, -1, group_=_name("standalone"), member_="") == Errors.NONE
    hb = request(gbroker, m.HEARTBEAT, 4, {"group_id": group, "generation_id": gen, "member_id": "nobody"})
    assert hb["error_code"] == Errors.UNKNOWN_MEMBER_ID
    unknown = _name("unknown")
    dg = request(gbroker, m.DELETE_GROUPS, 2, {"groups_names": [group, unknown, ""]})
    codes = {r["group_id"]: r["error_code"] for r in dg["results"]}
    assert codes == {group: Errors.NON_EMPTY_GROUP, unknown: Errors.GROUP_ID_NOT_FOUND, "": Errors.INVALID_GROUP_ID}
    od = request(gbroker, m.OFFSET_DELETE, 0, {"group_id": group, "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}]})
    assert od["topics"][0]["partitions"][0]["error_code"] == Errors.GROUP_SUBSCRIBED_TO_TOPIC
    fc = request(gbroker, m.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group, ""]})
    assert [x["error_code"] for x in fc["coordinators"]] == [Errors.NONE, Errors.INVALID_GROUP_ID]
    assert fc["coordinators"][0]["port"] == gbroker.port
    # Multi-group OffsetFetch (v8+), and describe/list.
    of = request(gbroker, m.OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": None}, {"group_id": unknown, "topics": None}], "require_stable": True})
    assert [x["group_id"] for x in of["groups"]] == [group, unknown]
    assert of["groups"][0]["topics"][0]["partitions"][0]["committed_offset"] == 1
    lg = request(gbroker, m.LIST_GROUPS, 5, {"states_filter": ["stable"], "types_filter": []})
    assert group in {x["group_id"] for x in lg["groups"]}
    desc = request(gbroker, m.DESCRIBE_GROUPS, 5, {"groups": [group]})
    assert desc["groups"][0]["group_state"] == "Stable" and len(desc["groups"][0]["members"]) == 1
    c.close()
    wait_for(lambda: group_state(gbroker, group).state_name == "Empty", 10, "the group to empty")
    od = request(gbroker, m.OFFSET_DELETE, 0, {"group_id": group, "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}]})
    assert od["error_code"] == Errors.NONE and od["topics"][0]["partitions"][0]["error_code"] == Errors.NONE
    dg = request(gbroker, m.DELETE_GROUPS, 2, {"groups_names": [group]})
    assert dg["results"][0]["error_code"] == Errors.NONE
    assert group_state(gbroker, group) is None


def test_groups_cli(gbroker: EmbeddedBroker, capsys: pytest.CaptureFixture[str]) -> None:
    from odradek.cli.main import main

    topic, group = _name("cli"), _name("grp")
    create_topic(gbroker, topic, 2)
    produce(gbroker, topic, 100)
    c = consumer(gbroker, group)
    c.subscribe([topic])
    n = 0
    deadline = time.time() + 30
    while n < 60 and time.time() < deadline:
        n += len([x for x in c.consume(10, 0.5) if x.error() is None])
    c.commit(asynchronous=False)
    bs = ["--bootstrap-server", gbroker.bootstrap_servers]
    assert main(["groups", "--list", *bs]) == 0
    assert group in capsys.readouterr().out.split()
    assert main(["groups", "--describe", "--group", group, "--state", *bs]) == 0
    assert "Stable" in capsys.readouterr().out
    assert main(["groups", "--describe", "--group", group, "--members", "--verbose", *bs]) == 0
    assert f"{topic}:0,1" in capsys.readouterr().out
    assert main(["groups", "--describe", "--group", group, *bs]) == 0
    out = capsys.readouterr().out
    lags = [line.split() for line in out.splitlines() if line.startswith(group)]
    assert sum(int(r[5]) for r in lags) == 100 - n and {r[4] for r in lags} <= {str(x) for x in range(101)}
    # Resetting a group with a live member is refused; after it leaves, a dry run then --execute.
    assert main(["groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute", *bs]) == 1
    c.close()
    wait_for(lambda: group_state(gbroker, group).state_name == "Empty", 10, "the group to empty")
    assert main(["groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", *bs]) == 0
    assert "NEW-OFFSET" in capsys.readouterr().out
    assert committed_total(gbroker, group, topic) == n
    assert main(["groups", "--reset-offsets", "--group", group, "--topic", f"{topic}:0", "--to-offset", "3", "--execute", *bs]) == 0
    assert group_state(gbroker, group).offsets[(topic, 0)].offset == 3
    assert main(["groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-latest", "--execute", *bs]) == 0
    assert committed_total(gbroker, group, topic) == 100
    assert main(["groups", "--delete", "--group", group, *bs]) == 0
    assert group_state(gbroker, group) is None
