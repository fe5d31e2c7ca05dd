"""The group coordinator follows the leadership of its ``__consumer_offsets`` partitions.

- a follower that becomes leader loads the partition to its log end, not to the HW it last
  heard from the old leader: records the old leader acknowledged (the follower had fetched them,
  but not yet the HW that covers them) are in the loaded state;
- losing leadership unloads the groups (NOT_COORDINATOR), a new leader epoch loads again;
- ``__consumer_offsets`` is created with ``offsets.topic.replication.factor`` as configured
  (Kafka's rule: the controller refuses it while fewer brokers are up, FindCoordinator answers
  COORDINATOR_NOT_AVAILABLE) — only a single-node cluster gets 1.
- ``__transaction_state`` is created the same way, with its own configs.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from test_group_coordinator import FakeReplicaManager

from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.coordinator.group.group_coordinator_config import GroupConfig
from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC, GroupMetadataManager
from odradek.coordinator.group.records import (
    OffsetAndMetadata,
    offset_commit_key,
    offset_commit_value,
)
from odradek.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import EMPTY_IMAGE
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.protocol.errors import Errors
from odradek.records.builder import build_batch
from odradek.server.controller_channel import ControllerRequest
from odradek.server.kafka_config import KafkaConfig
from odradek.server.txn_apis import TxnApis, build_txn_apis


def _manager(rm: FakeReplicaManager) -> GroupMetadataManager:
    return GroupMetadataManager(
        replica_manager=rm, num_partitions=1, group_config=GroupConfig(initial_rebalance_delay_ms=0),
        offsets_retention_ms=60_000, offset_metadata_max_bytes=4096, clock_ms=lambda: 1000,
    )


async def _loaded(mgr: GroupMetadataManager, epoch: int) -> None:
    mgr.on_leadership_change(OFFSETS_TOPIC, 0, True, epoch)
    for _ in range(500):
        if not mgr.loading:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the partition did not load")


def _commit_batch(leader_log: Log, offset: int, value: int) -> bytes:
    """A batch an old leader wrote: the commit of ``value`` for g/t-0."""
    om = OffsetAndMetadata(value, -1, "", 1000, -1)
    buf = bytearray(build_batch([(offset_commit_key("g", "t", 0), offset_commit_value(om), [], 1000)]))
    info = leader_log.append_as_leader(buf, 3, 1000)
    assert info.first_offset == offset
    return bytes(buf)


def test_new_leader_loads_to_its_log_end_not_its_stale_high_watermark(tmp_path: Path) -> None:
    async def run() -> None:
        old_leader = Log.load(str(tmp_path / "old" / f"{OFFSETS_TOPIC}-0"), LogConfig(), now_ms=0, clean_shutdown=False)
        rm = FakeReplicaManager(tmp_path / "new", 1)
        follower_log = rm.partitions[(OFFSETS_TOPIC, 0)].log
        for i in range(3):
            follower_log.append_as_follower(_commit_batch(old_leader, i, 10 * (i + 1)), 1000)
        # The follower heard of a HW covering the first commit only; the old leader had
        # acknowledged all three (its HW moved when this follower fetched them).
        follower_log.high_watermark = 1
        mgr = _manager(rm)
        assert mgr.partition_error("g") == Errors.NOT_COORDINATOR
        await _loaded(mgr, 4)
        assert mgr.partition_error("g") == Errors.NONE
        g = mgr.get_group("g")
        assert g is not None and g.offsets[("t", 0)].offset == 30

        # Leadership lost: the groups go, the clients hear NOT_COORDINATOR.
        mgr.on_leadership_change(OFFSETS_TOPIC, 0, False, 4)
        assert mgr.get_group("g") is None
        assert mgr.partition_error("g") == Errors.NOT_COORDINATOR
        # Leader again (a later epoch), with a commit written meanwhile by another leader.
        follower_log.append_as_follower(_commit_batch(old_leader, 3, 40), 1000)
        await _loaded(mgr, 6)
        g = mgr.get_group("g")
        assert g is not None and g.offsets[("t", 0)].offset == 40

    asyncio.run(run())


class _RecordingChannel:
    """Answers CreateTopics as the controller does with ``live`` brokers unfenced."""

    def __init__(self, live: int) -> None:
        self.live = live
        self.requests: list[dict[str, Any]] = []

    async def send(self, request: ControllerRequest) -> dict[str, Any]:
        self.requests.append(request.data)
        out = []
        for t in request.data["topics"]:
            rf = t["replication_factor"]
            ok = rf <= self.live
            out.append({
                "name": t["name"], "error_code": Errors.NONE if ok else Errors.INVALID_REPLICATION_FACTOR,
                "error_message": None if ok else (
                    f"Unable to replicate the partition {rf} time(s): The target replication factor "
                    f"of {rf} cannot be reached because only {self.live} broker(s) are registered."),
            })
        return {"topics": out}


def _cache(brokers: tuple[int, ...]) -> KRaftMetadataCache:
    d = MetadataDelta(EMPTY_IMAGE)
    for b in brokers:
        d.replay("RegisterBrokerRecord", {
            "broker_id": b, "broker_epoch": 10 + b, "incarnation_id": uuid.UUID(int=b),
            "end_points": [{"name": "PLAINTEXT", "host": "h", "port": 9000 + b, "security_protocol": 0}],
            "fenced": False, "in_controlled_shutdown": False,
        })
    cache = KRaftMetadataCache()
    cache.set_image(d.apply())
    return cache


def _coordinator(tmp_path: Path, props: dict[str, str], brokers: tuple[int, ...], live: int) -> tuple[GroupCoordinator, _RecordingChannel]:
    channel = _RecordingChannel(live)
    config = KafkaConfig({
        "log.dirs": str(tmp_path / "data"),
        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "offsets.topic.num.partitions": "1",
        **props,
    })
    gc = GroupCoordinator(
        node_id=1, config=config, replica_manager=FakeReplicaManager(tmp_path, 1),  # type: ignore[arg-type]
        metadata_cache=_cache(brokers), controller_channel=channel,  # type: ignore[arg-type]
    )
    return gc, channel


async def _find_and_wait(gc: GroupCoordinator) -> tuple[Errors, int, str, int]:
    answer = gc.coordinator_for("g", "PLAINTEXT")
    task = gc.offsets_topic._create_task
    assert task is not None
    await task
    return answer


def test_offsets_topic_gets_the_configured_replication_factor_even_with_fewer_brokers_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="odradek.coordinator.internal_topic")

    async def run() -> None:
        # Broker-only node 1 of a cluster whose controller is node 9; two brokers are up.
        gc, channel = _coordinator(tmp_path, {
            "process.roles": "broker", "controller.quorum.voters": "9@127.0.0.1:9999",
            "listeners": "PLAINTEXT://127.0.0.1:0", "controller.listener.names": "CONTROLLER",
        }, brokers=(1, 2), live=2)
        err, *_ = await _find_and_wait(gc)
        assert err == Errors.COORDINATOR_NOT_AVAILABLE
        assert [t["replication_factor"] for t in channel.requests[0]["topics"]] == [3]
        # Still no coordinator (the controller refused the topic): asked again, created again.
        err, *_ = await _find_and_wait(gc)
        assert err == Errors.COORDINATOR_NOT_AVAILABLE and len(channel.requests) == 2
        refused = [r for r in caplog.records if "until 3 brokers are up" in r.getMessage()]
        assert [r.levelno for r in refused] == [logging.WARNING, logging.DEBUG]  # said once

    asyncio.run(run())


def test_single_node_cluster_creates_offsets_topic_with_rf_1(tmp_path: Path) -> None:
    async def run() -> None:
        gc, channel = _coordinator(tmp_path / "a", {"process.roles": "broker,controller", "controller.listener.names": "CONTROLLER"}, brokers=(1,), live=1)
        await _find_and_wait(gc)
        assert channel.requests[0]["topics"][0]["replication_factor"] == 1
        # With the RF set explicitly above 1 on a single node, the same (waiting is endless).
        gc, channel = _coordinator(tmp_path / "b", {
            "process.roles": "broker,controller", "controller.listener.names": "CONTROLLER",
            "offsets.topic.replication.factor": "2"}, brokers=(1,), live=1)
        await _find_and_wait(gc)
        assert channel.requests[0]["topics"][0]["replication_factor"] == 1
        # A combined node of a cluster with three registered brokers: the configured 3.
        gc, channel = _coordinator(tmp_path / "c", {"process.roles": "broker,controller", "controller.listener.names": "CONTROLLER"}, brokers=(1, 2, 3), live=3)
        await _find_and_wait(gc)
        assert channel.requests[0]["topics"][0]["replication_factor"] == 3

    asyncio.run(run())


def test_transaction_state_topic_is_created_with_its_configs_and_replication_factor(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``__transaction_state`` goes through the same creation as ``__consumer_offsets``, with its
    own settings: min.insync.replicas capped at the replication factor it is created with."""
    caplog.set_level(logging.DEBUG, logger="odradek.coordinator.internal_topic")

    def txn_apis(path: Path, props: dict[str, str], brokers: tuple[int, ...], live: int) -> tuple[TxnApis, _RecordingChannel]:
        gc, channel = _coordinator(path, props, brokers, live)
        rm = gc.replica_manager
        rm.clock_ms = lambda: 1000  # type: ignore[attr-defined]
        apis = build_txn_apis(
            node_id=1, config=gc.config, replica_manager=rm, metadata_cache=gc.metadata_cache,
            controller_channel=channel, producer_ids=None,  # type: ignore[arg-type]
            offsets_partition_for=gc.partition_for,
        )
        return apis, channel

    async def find_and_wait(apis: TxnApis) -> Errors:
        err, *_ = apis.topics.coordinator_for("tx", "PLAINTEXT")
        task = apis.topics._create_task
        assert task is not None
        await task
        return err

    async def run() -> None:
        apis, channel = txn_apis(tmp_path / "a", {
            "process.roles": "broker,controller", "controller.listener.names": "CONTROLLER",
            "transaction.state.log.num.partitions": "3"}, brokers=(1,), live=1)
        assert await find_and_wait(apis) == Errors.COORDINATOR_NOT_AVAILABLE
        [topic] = channel.requests[0]["topics"]
        assert (topic["name"], topic["num_partitions"], topic["replication_factor"]) == (TRANSACTION_STATE_TOPIC, 3, 1)
        assert {c["name"]: c["value"] for c in topic["configs"]} == {
            "cleanup.policy": "compact", "min.insync.replicas": "1", "segment.bytes": "104857600",
            "unclean.leader.election.enable": "false", "compression.type": "uncompressed",
        }
        # A broker of a larger cluster asks for the configured 3 (min.isr 2); with two brokers
        # up the controller refuses it, said once at WARNING.
        apis, channel = txn_apis(tmp_path / "b", {
            "process.roles": "broker", "controller.quorum.voters": "9@127.0.0.1:9999",
            "listeners": "PLAINTEXT://127.0.0.1:0", "controller.listener.names": "CONTROLLER",
        }, brokers=(1, 2), live=2)
        await find_and_wait(apis)
        await find_and_wait(apis)
        topic = channel.requests[0]["topics"][0]
        assert topic["replication_factor"] == 3 and len(channel.requests) == 2
        assert {c["name"]: c["value"] for c in topic["configs"]}["min.insync.replicas"] == "2"
        refused = [r for r in caplog.records
                   if "until 3 brokers are up (transaction.state.log.replication.factor=3)" in r.getMessage()]
        assert [r.levelno for r in refused] == [logging.WARNING, logging.DEBUG]

    asyncio.run(run())
