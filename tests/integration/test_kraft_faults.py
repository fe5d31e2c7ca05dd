"""Faults of a real KRaft cluster: three controller-only voters and three broker-only nodes, each an
``odradek server`` process on loopback (:mod:`kraft_support`).

- a broker that stops heartbeating (SIGSTOP past ``broker.session.timeout.ms``) is fenced: its
  partitions lose their leader (or move to another live ISR member), Metadata and DescribeCluster
  through the other brokers no longer list it; SIGCONT: it heartbeats again, is unfenced, and the
  leaderless partitions get it back as leader;
- the active controller SIGSTOPped past the election timeout: the others elect a new leader; a
  write it had appended but not committed when paused is never committed (its client gets an
  error, every controller's log drops it), and resumed it follows the new epoch;
- the whole cluster stopped and started again from disk keeps its topics, configs and committed
  offsets, and the brokers register and unfence again;
- kafka-python and kcat see the same topics and partition leaders through every broker.

Timings are printed, never asserted; every wait is bounded, every process stopped in a finalizer.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from odradek.network.client import NetworkClient
from odradek.protocol import messages as m

from .kraft_support import KraftCluster, KraftNode, describe_quorum_sync
from .support import REQUIRES_KCAT

NOT_LEADER_OR_FOLLOWER = 6


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Any]:
    made: list[KraftCluster] = []

    def make(**kw: Any) -> KraftCluster:
        c = KraftCluster(tmp_path, **kw)
        made.append(c)
        c.format()
        c.start()
        return c

    try:
        yield make
    finally:
        for c in made:
            c.close()


def create_topic(bootstrap: str, name: str, partitions: int, rf: int = 1, config: dict[str, str] | None = None,
                 timeout_s: float = 30) -> None:
    """CreateTopics through a broker, retried (bounded) while the cluster settles."""
    end = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < end:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        fut = admin.create_topics([NewTopic(name, partitions, rf, config=config or {})], request_timeout=10,
                                  operation_timeout=10)[name]
        try:
            fut.result(timeout=20)
            return
        except KafkaException as e:
            if "TOPIC_ALREADY_EXISTS" in str(e):
                return
            last = e
            time.sleep(0.5)
    raise AssertionError(f"CreateTopics {name} through {bootstrap}: {last}")


def partition_leaders(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int]]]:
    """Partition -> (leader, isr) from Metadata through one broker ({} while the topic is unknown)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # All topics: Metadata for one named topic would create it (auto.create.topics.enable).
    md = admin.list_topics(timeout=5).topics.get(topic)
    if md is None or (md.error is not None and not md.partitions):
        return {}
    return {p: (pm.leader, list(pm.isrs)) for p, pm in md.partitions.items()}


def all_led(cluster: KraftCluster, through: KraftNode, topic: str, partitions: int) -> dict[int, Any] | None:
    """The partitions of ``topic`` through one broker once it has them all, each with a live leader."""
    parts = partition_leaders(through.bootstrap, topic)
    ok = len(parts) == partitions and all(v[0] in cluster.broker_ids for v in parts.values())
    return parts if ok else None


def wait_for(what: str, check: Any, deadline_s: float, logs: Any) -> Any:
    """Polls ``check()`` until it returns something true (bounded); returns it."""
    end = time.monotonic() + deadline_s
    last: Any = None
    while time.monotonic() < end:
        try:
            last = check()
        except KafkaException as e:
            last = e
        else:
            if last:
                return last
        time.sleep(0.3)
    raise AssertionError(f"{what}: not within {deadline_s}s (last: {last})\n{logs()}")


def describe_cluster_ids(bootstrap: str) -> set[int]:
    """The live brokers DescribeCluster through one broker lists."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_cluster(request_timeout=5).result(timeout=10)
    return {n.id for n in desc.nodes}


# ---- 1. a broker that stops heartbeating -------------------------------------------------------


@pytest.mark.timeout(300)
def test_silent_broker_is_fenced_and_unfenced(cluster_factory: Any) -> None:
    session_ms = 6000
    cluster: KraftCluster = cluster_factory(
        controller_overrides={"broker.session.timeout.ms": str(session_ms)},
        broker_overrides={"broker.heartbeat.interval.ms": "1000"},
    )
    started = time.monotonic()
    cluster.wait_ready()
    print(f"cluster ready after {time.monotonic() - started:.2f}s")
    a = cluster.brokers[0]
    create_topic(a.bootstrap, "single", 3, rf=1)
    create_topic(a.bootstrap, "triple", 3, rf=3)
    single = wait_for("leaders of 'single'", lambda: all_led(cluster, a, "single", 3), 30, cluster.logs)
    triple = wait_for("leaders of 'triple'", lambda: all_led(cluster, a, "triple", 3), 30, cluster.logs)
    # The victim leads a partition of each topic; it is not the broker we watch through.
    victim_id = triple[0][0]
    victim = cluster.broker(victim_id)
    watchers = [b for b in cluster.brokers if b is not victim]
    led_single = {p for p, (leader, _) in single.items() if leader == victim_id}
    led_triple = {p for p, (leader, _) in triple.items() if leader == victim_id}
    assert led_triple, triple
    print(f"victim {victim_id} leads single{sorted(led_single)} triple{sorted(led_triple)}")

    victim.pause()
    paused_at = time.monotonic()
    try:
        for w in watchers:
            wait_for(f"broker {w.node_id}: {victim_id} gone from Metadata",
                     lambda w=w: victim_id not in (ids := set(AdminClient(
                         {"bootstrap.servers": w.bootstrap}).list_topics(timeout=5).brokers)) and ids,
                     session_ms / 1000 + 40, cluster.logs)
        print(f"broker {victim_id} fenced after {time.monotonic() - paused_at:.2f}s")
        for w in watchers:
            live = describe_cluster_ids(w.bootstrap)
            assert victim_id not in live and live == {b.node_id for b in watchers}, live

            def moved(w: KraftNode = w) -> tuple[dict[int, Any], dict[int, Any]] | None:
                s, t = partition_leaders(w.bootstrap, "single"), partition_leaders(w.bootstrap, "triple")
                ok = (len(s) == 3 and len(t) == 3 and all(s[p][0] == -1 for p in led_single)
                      and all(t[p][0] not in (victim_id, -1) for p in led_triple))
                return (s, t) if ok else None

            after = wait_for(f"broker {w.node_id}: partitions led by {victim_id} move or lose their leader",
                             moved, 30, cluster.logs)
            s, t = after
            # The fenced broker left every ISR (the last member of an ISR stays in it).
            assert all(victim_id not in t[p][1] for p in range(3)), t
            # Partitions led by other brokers keep their leader.
            assert all(s[p][0] == single[p][0] for p in single if p not in led_single), (s, single)
            print(f"through {w.node_id}: single {s} triple {t}")
    finally:
        victim.resume()
    resumed_at = time.monotonic()
    for w in cluster.brokers:
        cluster.wait_brokers(w, cluster.broker_ids, 60)
    print(f"broker {victim_id} unfenced after {time.monotonic() - resumed_at:.2f}s")
    for w in cluster.brokers:
        assert describe_cluster_ids(w.bootstrap) == cluster.broker_ids

        def led_again(w: KraftNode = w) -> dict[int, Any] | None:
            s = partition_leaders(w.bootstrap, "single")
            ok = len(s) == 3 and all(s[p][0] == single[p][0] for p in s)
            return s if ok else None

        back = wait_for(f"broker {w.node_id}: leaderless partitions led by {victim_id} again", led_again, 30,
                        cluster.logs)
        assert back.keys() == single.keys()
    # The unfenced broker serves its partition again: produce to it and read back.
    if led_single:
        p = min(led_single)
        producer = Producer({"bootstrap.servers": watchers[0].bootstrap, "acks": "all", "message.timeout.ms": 30000})
        errors: list[str] = []
        producer.produce("single", value=b"after-unfence", partition=p,
                         on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
        assert producer.flush(40) == 0 and errors == [], errors


# ---- 2. the active controller paused past the election timeout ---------------------------------


def metadata_topic_records(node: KraftNode) -> list[tuple[int, str]]:
    """(offset, topic name) of every TopicRecord in the node's metadata log (the process stopped),
    decoded with ``odradek dump-log --cluster-metadata``."""
    segments = sorted((node.data / "__cluster_metadata-0").glob("*.log"))
    assert segments, f"no metadata log segments in {node.data}"
    out = subprocess.run(
        [sys.executable, "-m", "odradek.cli.main", "dump-log", "--cluster-metadata",
         "--files", ",".join(str(s) for s in segments)],
        check=True, capture_output=True, timeout=60, text=True,
    ).stdout
    found: list[tuple[int, str]] = []
    for line in out.splitlines():
        if '"type":"TOPIC_RECORD"' not in line:
            continue
        offset = int(line.split("offset: ", 1)[1].split(" ", 1)[0])
        payload = json.loads(line.split(" payload: ", 1)[1])
        found.append((offset, payload["data"]["name"]))
    return found


async def _raw_create_topic(host: str, port: int, name: str, timeout_ms: int) -> dict[str, Any]:
    """CreateTopics sent straight to a controller's listener (as an AdminClient with
    bootstrap.controllers would); the per-topic result."""
    client = NetworkClient(host, port)
    try:
        resp = await asyncio.wait_for(client.send(m.CREATE_TOPICS, 7, {
            "topics": [{"name": name, "num_partitions": 2, "replication_factor": 1, "assignments": [],
                        "configs": []}],
            "timeout_ms": timeout_ms, "validate_only": False,
        }), timeout_ms / 1000 + 60)
        return dict(resp["topics"][0])
    finally:
        await client.close()


@pytest.mark.timeout(420)
def test_paused_controller_steps_down_and_its_pending_writes_never_commit(cluster_factory: Any) -> None:
    # A longer fetch timeout than Kafka's 2 s: the leader keeps leading (check-quorum after 1.5
    # times it) while its followers are paused long enough for this test to give it a write they
    # never see. The election timeout stays Kafka's.
    cluster: KraftCluster = cluster_factory(
        brokers=2, controller_overrides={"controller.quorum.fetch.timeout.ms": "6000"})
    cluster.wait_ready()
    broker_a, broker_b = cluster.brokers
    create_topic(broker_a.bootstrap, "before", 1)
    first = cluster.find_leader(30)
    old = cluster.controller(first["leader_id"])
    followers = [c for c in cluster.controllers if c is not old]

    # -- A: a write the leader appends but cannot commit, then the leader is paused.
    result: dict[str, Any] = {}

    def send_orphan() -> None:
        try:
            result["topic"] = asyncio.run(_raw_create_topic(old.host, old.port, "orphan", 60000))
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            result["error"] = e

    sender = threading.Thread(target=send_orphan, daemon=True)
    pending_seen: dict[str, Any] | None = None
    for f in followers:
        f.pause()
    try:
        # Long-poll Fetches the followers had in flight are answered (empty) within Raft's
        # FETCH_MAX_WAIT_MS (500 ms): after that nothing the leader appends can reach them.
        time.sleep(1.5)
        sender.start()
        end = time.monotonic() + 4
        while time.monotonic() < end:
            part = describe_quorum_sync(old)
            if part is not None and part["error_code"] == 0:
                mine = next(v for v in part["current_voters"] if v["replica_id"] == old.node_id)
                if mine["log_end_offset"] > part["high_watermark"]:
                    pending_seen = {"leo": mine["log_end_offset"], "hw": part["high_watermark"],
                                    "epoch": part["leader_epoch"]}
                    break
            time.sleep(0.05)
        old.pause()
    finally:
        for f in followers:
            f.resume()
    assert pending_seen is not None and pending_seen["epoch"] == first["leader_epoch"], \
        "the leader never had an uncommitted write:\n" + cluster.logs(cluster.controllers)
    print(f"leader {old.node_id} paused with an uncommitted write: {pending_seen}")

    paused_at = time.monotonic()
    second = cluster.find_leader(60, above_epoch=first["leader_epoch"], among=followers)
    print(f"new leader {second['leader_id']} epoch {second['leader_epoch']} "
          f"{time.monotonic() - paused_at:.2f}s after the pause")
    old.resume()
    sender.join(120)
    assert not sender.is_alive(), "CreateTopics to the paused leader never answered"
    # The client of the write is told it failed (NOT_CONTROLLER, or a timeout): never success.
    assert "topic" in result and result["topic"]["error_code"] != 0, result
    print(f"CreateTopics sent to the paused leader: {result}")

    # The old leader learns the new epoch and follows it: it answers DescribeQuorum as a
    # follower, and the new leader sees its log caught up.
    new = cluster.controller(second["leader_id"])

    def old_follows() -> dict[str, Any] | None:
        mine, theirs = describe_quorum_sync(old), describe_quorum_sync(new)
        if mine is None or theirs is None or mine["error_code"] != NOT_LEADER_OR_FOLLOWER or theirs["error_code"]:
            return None
        voter = next(v for v in theirs["current_voters"] if v["replica_id"] == old.node_id)
        ok = theirs["leader_epoch"] >= second["leader_epoch"] and voter["log_end_offset"] >= theirs["high_watermark"] > 0
        return theirs if ok else None

    wait_for(f"old leader {old.node_id} follows epoch {second['leader_epoch']}", old_follows, 60, cluster.logs)

    # -- B: the new leader paused while a CreateTopics goes through a broker: the broker's
    # controller channel retries it to the next leader or the client gets an error.
    third_result: dict[str, Any] = {}

    def create_through_broker() -> None:
        admin = AdminClient({"bootstrap.servers": broker_b.bootstrap})
        fut = admin.create_topics([NewTopic("through-broker", 3, 1)], request_timeout=60,
                                  operation_timeout=60)["through-broker"]
        try:
            fut.result(timeout=90)
            third_result["ok"] = True
        except KafkaException as e:
            third_result["error"] = str(e)

    new.pause()
    creator = threading.Thread(target=create_through_broker, daemon=True)
    creator.start()
    try:
        third = cluster.find_leader(60, above_epoch=second["leader_epoch"],
                                    among=[c for c in cluster.controllers if c is not new])
    finally:
        new.resume()
    creator.join(120)
    assert not creator.is_alive()
    print(f"leader {new.node_id} paused; next leader {third['leader_id']} epoch {third['leader_epoch']}; "
          f"CreateTopics through broker {broker_b.node_id}: {third_result}")

    def settled() -> Any:
        views = [(partition_leaders(b.bootstrap, "through-broker"), partition_leaders(b.bootstrap, "orphan"),
                  partition_leaders(b.bootstrap, "before")) for b in cluster.brokers]
        if any(v != views[0] for v in views):
            return None
        tb, orphan, before = views[0]
        if len(before) != 1 or ("ok" in third_result and len(tb) != 3):
            return None
        return tb, orphan

    tb, orphan = wait_for("both brokers agree on the topics", settled, 60, cluster.logs)
    assert orphan == {}, f"the uncommitted write of the paused leader was committed: {orphan}"
    assert tb == {} or len(tb) == 3, tb  # never a partial topic
    # A retried CreateTopics that had already succeeded answers TOPIC_ALREADY_EXISTS: the
    # topic exists then.
    if "TOPIC_ALREADY_EXISTS" in third_result.get("error", ""):
        assert len(tb) == 3

    wait_for("paused leader follows", lambda: (lambda p: p is not None and p["error_code"] == NOT_LEADER_OR_FOLLOWER)(
        describe_quorum_sync(new)), 60, cluster.logs)
    # Let every controller catch up, then compare their logs: the same TopicRecords at the
    # same offsets, no 'orphan', 'through-broker' at most once.
    last = cluster.find_leader(30)
    leader_node = cluster.controller(last["leader_id"])
    wait_for("all voters caught up", lambda: (lambda p: p is not None and p["error_code"] == 0 and all(
        v["log_end_offset"] >= p["high_watermark"] for v in p["current_voters"]))(describe_quorum_sync(leader_node)),
        60, cluster.logs)
    cluster.close()
    logs = {c.node_id: metadata_topic_records(c) for c in cluster.controllers}
    print(f"TopicRecords: {logs}")
    for node_id, records in logs.items():
        names = [n for _, n in records]
        assert "orphan" not in names, (node_id, records)
        assert names.count("through-broker") <= 1 and names.count("before") == 1, (node_id, records)
    assert all(r == logs[1] for r in logs.values()), logs


# ---- 3. the whole cluster restarted from disk --------------------------------------------------


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=20)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


def topic_config(bootstrap: str, topic: str, key: str) -> str | None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([res], request_timeout=10)[res].result(timeout=20)
    entry = entries.get(key)
    return None if entry is None else entry.value


@pytest.mark.timeout(420)
@pytest.mark.parametrize("stop", ["sigterm", "kill9"])
def test_whole_cluster_restarts_from_disk(cluster_factory: Any, stop: str) -> None:
    """``sigterm``: brokers in controlled shutdown, then the controllers; restarted together.
    ``kill9``: every process killed at once; the brokers restarted before the controllers (they
    wait for the metadata quorum), and they re-register once their old sessions have expired
    (DUPLICATE_BROKER_REGISTRATION until then, as Kafka)."""
    cluster: KraftCluster = cluster_factory()
    cluster.wait_ready()
    a = cluster.brokers[0]
    create_topic(a.bootstrap, "kept", 3, config={"retention.ms": "123456789"})
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, "kept", incremental_configs=[
        ConfigEntry("max.message.bytes", "200000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res], request_timeout=15)[res].result(timeout=30)
    wait_for("every broker sees 'kept'", lambda: all(len(partition_leaders(b.bootstrap, "kept")) == 3
                                                     for b in cluster.brokers), 30, cluster.logs)
    producer = Producer({"bootstrap.servers": a.bootstrap, "acks": "all"})
    sent = {(p, f"k{p}-{i}".encode()) for p in range(3) for i in range(10)}
    for p, v in sorted(sent):
        producer.produce("kept", value=v, partition=p)
    assert producer.flush(40) == 0
    commits = {0: 4, 1: 7, 2: 10}
    consumer = Consumer({"bootstrap.servers": cluster.brokers[1].bootstrap, "group.id": "kept-group",
                         "enable.auto.commit": False})
    try:
        end = time.monotonic() + 60
        while True:
            try:
                consumer.commit(offsets=[TopicPartition("kept", p, o) for p, o in commits.items()],
                                asynchronous=False)
                break
            except KafkaException:
                if time.monotonic() > end:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()
    assert committed_offsets(a.bootstrap, "kept-group", "kept", 3) == commits
    before = {b.node_id: partition_leaders(b.bootstrap, "kept") for b in cluster.brokers}
    topic_ids = {b.node_id: describe_topic(b.bootstrap, "kept").topic_id for b in cluster.brokers}
    assert len({str(t) for t in topic_ids.values()}) == 1, topic_ids

    if stop == "sigterm":
        cluster.close()
        restarted_at = time.monotonic()
        cluster.start()
    else:
        for n in cluster.nodes:
            n.kill()
        restarted_at = time.monotonic()
        for b in cluster.brokers:
            b.start()
        time.sleep(3)
        for c in cluster.controllers:
            c.start()
    cluster.wait_ready()
    print(f"whole cluster serving again {time.monotonic() - restarted_at:.2f}s after the restart")

    for b in cluster.brokers:
        assert describe_cluster_ids(b.bootstrap) == cluster.broker_ids
        after = wait_for(f"broker {b.node_id}: 'kept' with 3 led partitions",
                         lambda b=b: all_led(cluster, b, "kept", 3), 60, cluster.logs)
        # RF 1: each partition is led by the broker it was on before.
        assert {p: v[0] for p, v in after.items()} == {p: v[0] for p, v in before[b.node_id].items()}
        desc = describe_topic(b.bootstrap, "kept")
        assert str(desc.topic_id) == str(topic_ids[a.node_id])
        assert topic_config(b.bootstrap, "kept", "retention.ms") == "123456789"
        assert topic_config(b.bootstrap, "kept", "max.message.bytes") == "200000"
    assert wait_for("committed offsets after the restart",
                    lambda: (lambda c: c if c == commits else None)(
                        committed_offsets(cluster.brokers[2].bootstrap, "kept-group", "kept", 3)),
                    60, cluster.logs) == commits
    consumer = Consumer({"bootstrap.servers": cluster.brokers[2].bootstrap, "group.id": "reader",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("kept", p, 0) for p in range(3)])
        got: set[tuple[int, bytes]] = set()
        end = time.monotonic() + 60
        while time.monotonic() < end and len(got) < len(sent):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.add((msg.partition(), msg.value()))
        assert got == sent
    finally:
        consumer.close()


def describe_topic(bootstrap: str, name: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    return admin.describe_topics(TopicCollection([name]), request_timeout=10)[name].result(timeout=20)


# ---- 4. clients other than confluent-kafka -----------------------------------------------------


def _kcat_metadata(bootstrap: str) -> dict[str, dict[int, int]]:
    out = subprocess.run(["kcat", "-b", bootstrap, "-L", "-J", "-m", "20"], capture_output=True, timeout=60,
                         text=True)
    assert out.returncode == 0, out.stderr
    md = json.loads(out.stdout)
    return {t["topic"]: {p["partition"]: p["leader"] for p in t["partitions"]} for t in md["topics"]
            if not t["topic"].startswith("__")}


@pytest.mark.timeout(300)
@REQUIRES_KCAT
def test_other_clients_see_the_same_topics_through_every_broker(cluster_factory: Any) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer

    cluster: KraftCluster = cluster_factory()
    cluster.wait_ready()
    create_topic(cluster.brokers[0].bootstrap, "alpha", 3)
    create_topic(cluster.brokers[1].bootstrap, "beta", 2, rf=2)
    expected = wait_for("confluent-kafka sees both topics through every broker", lambda: (lambda views: views[0] if all(
        v == views[0] for v in views) and len(views[0].get("alpha", {})) == 3 and len(views[0].get("beta", {})) == 2
        else None)([{t: {p: v[0] for p, v in partition_leaders(b.bootstrap, t).items()} for t in ("alpha", "beta")}
                    for b in cluster.brokers]), 30, cluster.logs)
    assert all(leader in cluster.broker_ids for parts in expected.values() for leader in parts.values()), expected
    print(f"leaders: {expected}")

    for b in cluster.brokers:
        # kcat (librdkafka's CLI): topics and partition leaders.
        kc = _kcat_metadata(b.bootstrap)
        assert {t: kc.get(t) for t in expected} == expected, (b.node_id, kc)
        # kafka-python's admin client and consumer.
        kadmin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=20000)
        try:
            assert {"alpha", "beta"} <= set(kadmin.list_topics())
            described = {d["name"]: {p["partition_index"]: p["leader_id"] for p in d["partitions"]}
                         for d in kadmin.describe_topics(["alpha", "beta"])}
            assert described == expected, (b.node_id, described)
            assert {n["broker_id"] for n in kadmin.describe_cluster()["brokers"]} == cluster.broker_ids
        finally:
            kadmin.close()
        consumer = KafkaConsumer(bootstrap_servers=b.bootstrap, request_timeout_ms=20000)
        try:
            assert {"alpha", "beta"} <= consumer.topics()
            assert consumer.partitions_for_topic("alpha") == {0, 1, 2}
            assert consumer.partitions_for_topic("beta") == {0, 1}
        finally:
            consumer.close()
