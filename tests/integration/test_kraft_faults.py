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
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from odradek.network.client import NetworkClient
from odradek.protocol import messages as m

from .kraft_support import KraftCluster, KraftNode, describe_quorum_sync

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
    md = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
    if md is None or (md.error is not None and not md.partitions):
        return {}
    return {p: (pm.leader, list(pm.isrs)) for p, pm in md.partitions.items()}


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
    single = wait_for("leaders of 'single'", lambda: (lambda p: p if len(p) == 3 and all(
        v[0] in cluster.broker_ids for v in p.values()) else None)(partition_leaders(a.bootstrap, "single")),
        30, cluster.logs)
    triple = wait_for("leaders of 'triple'", lambda: (lambda p: p if len(p) == 3 and all(
        v[0] in cluster.broker_ids for v in p.values()) else None)(partition_leaders(a.bootstrap, "triple")),
        30, cluster.logs)
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
            after = wait_for(f"broker {w.node_id}: partitions led by {victim_id} move or lose their leader",
                             lambda w=w: (lambda s, t: (s, t) if len(s) == 3 and len(t) == 3 and all(
                                 s[p][0] == -1 for p in led_single) and all(
                                 t[p][0] not in (victim_id, -1) for p in led_triple) else None)(
                                 partition_leaders(w.bootstrap, "single"), partition_leaders(w.bootstrap, "triple")),
                             30, cluster.logs)
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
        back = wait_for(f"broker {w.node_id}: leaderless partitions led by {victim_id} again",
                        lambda w=w: (lambda s: s if len(s) == 3 and all(s[p][0] == victim_id for p in led_single)
                                     and all(s[p][0] == single[p][0] for p in s) else None)(
                            partition_leaders(w.bootstrap, "single")), 30, cluster.logs)
        assert back.keys() == single.keys()
    # The unfenced broker serves its partition again: produce to it and read back.
    if led_single:
        p = min(led_single)
        producer = Producer({"bootstrap.servers": watchers[0].bootstrap, "acks": "all", "message.timeout.ms": 30000})
        errors: list[str] = []
        producer.produce("single", value=b"after-unfence", partition=p,
                         on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
        assert producer.flush(40) == 0 and errors == [], errors
