"""OffsetMetadataManager (Kafka's): OffsetCommit / OffsetFetch / OffsetDelete validated against
classic and consumer groups and written through the GroupMetadataManager over a real log; and the
group coordinator's settings (GroupCoordinatorConfig)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_group_coordinator import FakeReplicaManager, load, manager

from odradek.coordinator.group.assignors import TopicMetadata
from odradek.coordinator.group.classic_group import ClassicGroup
from odradek.coordinator.group.consumer_group_heartbeat import consumer_group_heartbeat
from odradek.coordinator.group.group_coordinator_config import (
    ConsumerGroupConfig,
    classic_group_config,
    consumer_group_config,
)
from odradek.coordinator.group.offset_metadata_manager import CommitRequest, OffsetMetadataManager
from odradek.protocol.errors import Errors
from odradek.server.kafka_config import ConfigError, KafkaConfig

PARTITIONS = {("t", 0), ("t", 1)}


async def offsets_manager(tmp_path: Path, clock: list[int]) -> tuple[OffsetMetadataManager, list[Any]]:
    mgr = manager(FakeReplicaManager(tmp_path, 1), clock)
    await load(mgr)
    touched: list[Any] = []
    om = OffsetMetadataManager(
        groups=mgr,
        partition_exists=lambda t, p: (t, p) in PARTITIONS,
        clock_ms=lambda: clock[0],
        on_member_heartbeat=touched.append,
    )
    return om, touched


def test_standalone_commit_fetch_and_delete(tmp_path: Path) -> None:
    async def run() -> None:
        clock = [1000]
        om, touched = await offsets_manager(tmp_path, clock)
        commit = {
            ("t", 0): CommitRequest(10, 3, "meta"),
            ("t", 9): CommitRequest(1, -1, None),
            ("t", 1): CommitRequest(20, -1, "x" * 5000),  # over offset.metadata.max.bytes
        }
        result = await om.commit_offsets("g", "", -1, None, commit)
        assert result == {
            ("t", 0): Errors.NONE,
            ("t", 9): Errors.UNKNOWN_TOPIC_OR_PARTITION,
            ("t", 1): Errors.OFFSET_METADATA_TOO_LARGE,
        }
        g = om.groups.get_group("g")
        assert isinstance(g, ClassicGroup) and touched == [g]
        err, rows = om.fetch_offsets("g", None, require_stable=True)
        assert err == Errors.NONE and len(rows) == 1
        tp, o, e = rows[0]
        assert tp == ("t", 0) and e == Errors.NONE and o is not None
        assert (o.offset, o.leader_epoch, o.metadata, o.commit_timestamp) == (10, 3, "meta", 1000)
        # An unknown group has no offsets (not an error), a commit with a generation to it is stale.
        assert om.fetch_offsets("nope", [("t", 0)], False) == (Errors.NONE, [(("t", 0), None, Errors.NONE)])
        stale = await om.commit_offsets("nope", "m", 3, None, {("t", 0): CommitRequest(1, -1, None)})
        assert stale == {("t", 0): Errors.ILLEGAL_GENERATION}
        v9 = await om.commit_offsets("nope", "m", 3, None, {("t", 0): CommitRequest(1, -1, None)}, 9)
        assert v9 == {("t", 0): Errors.GROUP_ID_NOT_FOUND}
        # OffsetDelete on an empty group removes the offset.
        err, deleted = await om.delete_offsets("g", [("t", 0), ("t", 1)])
        assert err == Errors.NONE and deleted == {("t", 0): Errors.NONE, ("t", 1): Errors.NONE}
        assert om.fetch_offsets("g", None, False) == (Errors.NONE, [])
        assert (await om.delete_offsets("nope", [("t", 0)]))[0] == Errors.GROUP_ID_NOT_FOUND

    asyncio.run(run())


def test_consumer_group_commits_need_the_member_epoch(tmp_path: Path) -> None:
    async def run() -> None:
        clock = [1000]
        om, touched = await offsets_manager(tmp_path, clock)
        cg = om.groups.new_consumer_group("cg")
        om.groups.groups["cg"] = cg
        meta = {"t": TopicMetadata(uuid.UUID(int=1), "t", 2)}
        resp, _ = consumer_group_heartbeat(cg, {
            "group_id": "cg", "member_id": "", "member_epoch": 0, "rebalance_timeout_ms": 1000,
            "subscribed_topic_names": ["t"], "topic_partitions": [],
        }, 1000, meta)
        mid, epoch = resp["member_id"], resp["member_epoch"]
        one = {("t", 0): CommitRequest(5, -1, None)}
        assert await om.commit_offsets("cg", mid, epoch + 1, None, one, 9) == {("t", 0): Errors.STALE_MEMBER_EPOCH}
        assert await om.commit_offsets("cg", mid, epoch, None, one, 8) == {("t", 0): Errors.UNSUPPORTED_VERSION}
        assert await om.commit_offsets("cg", mid, epoch, None, one, 9) == {("t", 0): Errors.NONE}
        assert touched == []  # only classic members heartbeat by committing
        assert om.fetch_offsets("cg", None, False, "someone", 1)[0] == Errors.UNKNOWN_MEMBER_ID
        err, rows = om.fetch_offsets("cg", None, False, mid, epoch)
        assert err == Errors.NONE and rows[0][1] is not None and rows[0][1].offset == 5
        # The member subscribes to t: its offsets cannot be deleted.
        err, deleted = await om.delete_offsets("cg", [("t", 0)])
        assert err == Errors.NONE and deleted == {("t", 0): Errors.GROUP_SUBSCRIBED_TO_TOPIC}

    asyncio.run(run())


def broker_config(**extra: str) -> KafkaConfig:
    return KafkaConfig({
        "log.dirs": "/nonexistent", "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        **extra,
    })


def test_group_coordinator_config_from_the_broker() -> None:
    classic = classic_group_config(broker_config(**{"group.max.size": "7"}))
    assert (classic.min_session_timeout_ms, classic.max_session_timeout_ms) == (6000, 1_800_000)
    assert (classic.initial_rebalance_delay_ms, classic.max_size) == (3000, 7)
    consumer = consumer_group_config(broker_config(**{
        "group.consumer.assignors": "org.apache.kafka.coordinator.group.assignor.RangeAssignor,uniform",
    }))
    assert consumer == ConsumerGroupConfig(45000, 5000, 2**31 - 1, ("range", "uniform"))
    assert consumer.default_assignor == "range"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"group.consumer.session.timeout.ms": "1000"}, "must be between group.consumer.min.session"),
        ({"group.consumer.heartbeat.interval.ms": "50000", "group.consumer.max.heartbeat.interval.ms": "60000"},
         "must be less than group.consumer.session.timeout.ms"),
        ({"group.consumer.assignors": "sticky"}, "unknown assignor 'sticky'"),
    ],
)
def test_group_coordinator_config_is_checked_as_kafka_does(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        consumer_group_config(broker_config(**extra))
