"""A controller that was down while the quorum snapshotted and deleted its log catches up through
FetchSnapshot (real ``odradek server`` processes on loopback: three controller-only voters and a
broker). The controllers snapshot after every commit (``metadata.log.max.record.bytes.between.
snapshots=1``), roll metadata segments every millisecond and keep no more than the newest
snapshot (``metadata.max.retention.bytes=0``), so the records written while one controller is
stopped are gone from the leader's log when it comes back. It must fetch the leader's snapshot,
start its log there, be caught up in DescribeQuorum, and, once it leads, have the topics in its
controller image (CreateTopics of them answers TOPIC_ALREADY_EXISTS through the broker). A broker
started afterwards with an empty log starts from the leader's snapshot as well."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE
from odradek.raft.snapshot import list_snapshots, read_snapshot

from .kraft_processes import Broker, _stop_all, _wait_for_brokers
from .test_raft_quorum import Controller, _free_ports, describe_quorum, find_leader

SNAPSHOTTING = (
    "metadata.log.max.record.bytes.between.snapshots=1\n"
    "metadata.log.max.snapshot.interval.ms=1000\n"
    "metadata.log.segment.ms=1\n"
    "metadata.max.retention.bytes=0\n"
)
TOPICS = [f"snapcatch-{i}" for i in range(30)]
FETCHED = re.compile(r"fetched snapshot \S*?(\d{20}-\d{10})\.checkpoint from the leader")


def _create(admin: AdminClient, names: list[str]) -> dict[str, str | None]:
    """CreateTopics; the error name of each (None: created)."""
    futs = admin.create_topics([NewTopic(n, 1, 1) for n in names], request_timeout=15, operation_timeout=15)
    out: dict[str, str | None] = {}
    for name, fut in futs.items():
        try:
            fut.result(timeout=20)
            out[name] = None
        except Exception as e:  # noqa: BLE001 - the error is the answer
            err = e.args[0] if e.args else e
            out[name] = err.name() if hasattr(err, "name") else str(e)
    return out


async def _caught_up(nodes: list[Controller], node_id: int, deadline_s: float) -> dict[str, Any]:
    """The leader's DescribeQuorum once ``node_id``'s log end reaches its high watermark."""
    end = time.monotonic() + deadline_s
    last: dict[str, Any] = {}
    while time.monotonic() < end:
        leader = await find_leader(nodes, 30)
        part = await describe_quorum(nodes[leader["leader_id"] - 1].port)
        if part is not None and part["error_code"] == 0:
            last = part
            mine = next(v for v in part["current_voters"] if v["replica_id"] == node_id)
            if part["high_watermark"] > 0 and mine["log_end_offset"] >= part["high_watermark"]:
                return part
        await asyncio.sleep(0.2)
    raise AssertionError(f"node {node_id} not caught up: {last}\n" + nodes[node_id - 1].log_tail())


@pytest.mark.timeout(300)
def test_a_controller_behind_the_log_start_catches_up_from_a_snapshot(tmp_path: Path) -> None:
    ports = _free_ports(5)
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports[:3]))
    controllers = [Controller(i + 1, p, voters, tmp_path) for i, p in enumerate(ports[:3])]
    for c in controllers:
        c.config.write_text(c.config.read_text() + SNAPSHOTTING)
    broker = Broker(101, ports[3], voters, tmp_path)
    nodes: list[Controller] = [*controllers, broker]
    brokers: list[Controller] = [broker]
    for n in nodes:
        n.format()
    for n in nodes:
        n.start()
    try:
        _wait_for_brokers(broker, {101}, 90, nodes)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        leader = asyncio.run(find_leader(controllers, 30))
        # Stop the non-leader with the lowest id (the first successor a resigning leader
        # prefers when the followers are equally caught up).
        away = controllers[min(c.node_id for c in controllers if c.node_id != leader["leader_id"]) - 1]
        away.stop()
        away_meta = away.data / "__cluster_metadata-0"
        mine_before = set(list_snapshots(str(away_meta)))

        created = _create(admin, TOPICS)
        assert all(err is None for err in created.values()), created
        # The leader snapshotted the new topics and deleted its log below the snapshot.
        active = controllers[asyncio.run(find_leader(controllers, 30))["leader_id"] - 1]
        active_meta = active.data / "__cluster_metadata-0"
        end = time.monotonic() + 60
        snaps = []
        while time.monotonic() < end:
            snaps = list_snapshots(str(active_meta))
            if snaps and f"Metadata log now starts at offset {snaps[-1].end_offset} " in active.log_tail():
                names = {f["name"] for n, f in read_snapshot(str(active_meta / snaps[-1].filename),
                                                              METADATA_RECORD_SERDE) if n == "TopicRecord"}
                if set(TOPICS) <= names:
                    break
            time.sleep(0.2)
        else:
            raise AssertionError(f"no snapshot with the topics and the log deleted below it: {snaps}\n"
                                 f"{active.log_tail()}")

        # Only what it logs from this start on counts (before it stopped, it may already have
        # fetched an early snapshot: it then held it in ``mine_before``).
        log_start = len(away.log_path.read_text("utf-8", "replace")) if away.log_path.exists() else 0
        away.start()
        asyncio.run(_caught_up(controllers, away.node_id, 60))
        # It got there through FetchSnapshot: a snapshot it did not write, fetched from the
        # leader, with every topic; its log starts at or after that snapshot.
        end = time.monotonic() + 30
        while time.monotonic() < end and not FETCHED.search(
            away.log_path.read_text("utf-8", "replace")[log_start:]
        ):
            time.sleep(0.2)
        fetched = FETCHED.findall(away.log_path.read_text("utf-8", "replace")[log_start:])
        assert fetched, away.log_tail()
        fetched_ids = set(fetched)
        assert not {s.filename[:31] for s in mine_before} & fetched_ids
        own = list_snapshots(str(away_meta))
        assert own and own[-1].end_offset >= int(sorted(fetched_ids)[-1][:20])
        names = {f["name"] for n, f in read_snapshot(str(away_meta / own[-1].filename), METADATA_RECORD_SERDE)
                 if n == "TopicRecord"}
        assert set(TOPICS) <= names
        assert int(sorted(away_meta.glob("*.log"))[0].name[:20]) >= int(sorted(fetched_ids)[0][:20])

        # Make it the leader (resign the others in turn): its controller image has the topics.
        for _attempt in range(6):
            current = asyncio.run(find_leader(controllers, 30))
            if current["leader_id"] == away.node_id:
                break
            resigning = controllers[current["leader_id"] - 1]
            resigning.stop()  # SIGTERM: EndQuorumEpoch, caught-up followers by id first
            asyncio.run(find_leader([c for c in controllers if c is not resigning], 30,
                                    above_epoch=current["leader_epoch"]))
            resigning.start()
            asyncio.run(_caught_up(controllers, resigning.node_id, 60))
        else:
            raise AssertionError(f"controller {away.node_id} never became the leader")
        print(f"controller {away.node_id} leads after {_attempt} resignations; fetched {sorted(fetched_ids)}")
        end = time.monotonic() + 45
        answers: dict[str, str | None] = {}
        while time.monotonic() < end:
            answers = _create(admin, TOPICS[:5] + ["snapcatch-new"])
            if answers["snapcatch-new"] in (None, "TOPIC_ALREADY_EXISTS"):
                break
            time.sleep(0.5)
        assert answers == {**{t: "TOPIC_ALREADY_EXISTS" for t in TOPICS[:5]}, "snapcatch-new": None}, answers
        current = asyncio.run(find_leader(controllers, 30))
        assert current["leader_id"] == away.node_id  # it answered those as the active controller

        # A new broker (an observer with an empty log) starts from the leader's snapshot too.
        late = Broker(102, ports[4], voters, tmp_path)
        late.format()
        late.start()
        brokers.append(late)
        _wait_for_brokers(late, {101, 102}, 60, [*nodes, late])
        assert FETCHED.search(late.log_path.read_text("utf-8", "replace")), late.log_tail()
        listed = set(AdminClient({"bootstrap.servers": late.bootstrap}).list_topics(timeout=10).topics)
        assert set(TOPICS) | {"snapcatch-new"} <= listed
    finally:
        _stop_all(brokers, controllers)
