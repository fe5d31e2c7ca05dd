"""GroupMetadataManager in-process over a real Log: offsets, classic group records and KIP-848
consumer group records are written, replayed on immigration (tombstones delete), and expired."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from odradek.coordinator.group.assignors import TopicMetadata
from odradek.coordinator.group.classic_group import ClassicGroup, ClassicGroupState
from odradek.coordinator.group.consumer_group import ConsumerGroup
from odradek.coordinator.group.consumer_group_heartbeat import consumer_group_heartbeat
from odradek.coordinator.group.group_coordinator_config import GroupConfig
from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC, GroupMetadataManager
from odradek.coordinator.group.records import OffsetAndMetadata, group_metadata_key
from odradek.log.append_origin import AppendOrigin
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.protocol.errors import Errors
from odradek.server.delayed_produce import ProducePartitionStatus


class FakePartition:
    def __init__(self, log: Log) -> None:
        self.log = log
        self.is_leader = True
        self.leader_epoch = 0


class FakeReplicaManager:
    """One __consumer_offsets partition on a real log; appends are acknowledged at once."""

    def __init__(self, path: Path, num: int) -> None:
        self.partitions: dict[tuple[str, int], Any] = {}
        self.leadership_listeners: list[Any] = []
        self.txn_marker_listeners: list[Any] = []
        for p in range(num):
            lg = Log.load(str(path / f"{OFFSETS_TOPIC}-{p}"), LogConfig(), now_ms=0, clean_shutdown=False)
            self.partitions[(OFFSETS_TOPIC, p)] = FakePartition(lg)

    def append_records(
        self, timeout_ms: int, acks: int, entries: dict[tuple[str, int], bytearray | None],
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> Any:
        out = {}
        for tp, buf in entries.items():
            lg = self.partitions[tp].log
            assert buf is not None
            info = lg.append_as_leader(buf, 0, 0, origin)
            lg.high_watermark = lg.log_end_offset
            out[tp] = ProducePartitionStatus(base_offset=info.first_offset)

        async def later() -> dict[tuple[str, int], ProducePartitionStatus]:
            return out

        return later()


def manager(rm: FakeReplicaManager, clock: list[int]) -> GroupMetadataManager:
    return GroupMetadataManager(
        replica_manager=rm, num_partitions=1, group_config=GroupConfig(initial_rebalance_delay_ms=0),
        offsets_retention_ms=60_000, offset_metadata_max_bytes=4096, clock_ms=lambda: clock[0],
    )


async def load(mgr: GroupMetadataManager) -> None:
    mgr.schedule_load(0, 0)
    assert mgr.partition_error("g") == Errors.COORDINATOR_LOAD_IN_PROGRESS
    while mgr.loading:
        await asyncio.sleep(0.01)
    assert mgr.partition_error("g") == Errors.NONE


def test_offsets_and_groups_survive_reload_and_expire(tmp_path: Path) -> None:
    async def run() -> None:
        clock = [1000]
        rm = FakeReplicaManager(tmp_path, 1)
        mgr = manager(rm, clock)
        assert mgr.partition_error("g") == Errors.NOT_COORDINATOR
        await load(mgr)
        g = mgr.get_or_create_classic_group("g")
        w: list[Any] = []
        fx = g.join(w, member_id="", group_instance_id=None, require_known_member_id=False, client_id="c",
                    client_host="/h", rebalance_timeout_ms=10000, session_timeout_ms=10000,
                    protocol_type="consumer", protocols=[("range", b"meta")], now_ms=1000)
        fx.merge(g.poll(1000))
        assert g.state == ClassicGroupState.COMPLETING_REBALANCE
        assert await mgr.store_group(g, g.to_record()) == Errors.NONE
        offsets = {("t", 0): OffsetAndMetadata(10, -1, "a", 1000), ("t", 1): OffsetAndMetadata(20, -1, "", 1000)}
        assert await mgr.store_offsets(g, offsets) == Errors.NONE
        assert g.offsets[("t", 0)].offset == 10
        assert await mgr.store_offsets(g, {("t", 0): OffsetAndMetadata(11, -1, "b", 2000)}) == Errors.NONE
        assert await mgr.write_tombstones("g", [("t", 1)]) == Errors.NONE
        s = mgr.get_or_create_classic_group("simple")
        assert await mgr.store_offsets(s, {("t", 0): OffsetAndMetadata(5, -1, "", 1000)}) == Errors.NONE

        # A new leader replays the log.
        mgr2 = manager(rm, clock)
        await load(mgr2)
        g2 = mgr2.get_group("g")
        assert isinstance(g2, ClassicGroup) and g2.generation_id == 1 and len(g2.members) == 1
        assert {tp: o.offset for tp, o in g2.offsets.items()} == {("t", 0): 11}
        assert g2.offsets[("t", 0)].metadata == "b"
        assert mgr2.get_group("simple").offsets[("t", 0)].offset == 5

        # Retention: the standalone group's offset (committed at 1000) expires after 60 s, and
        # the empty group without offsets goes with a tombstone.
        clock[0] = 1000 + 60_000
        assert await mgr2.cleanup_group_metadata() == 1
        assert mgr2.get_group("simple") is None
        assert mgr2.get_group("g") is not None  # not empty: its offsets stay
        mgr3 = manager(rm, clock)
        await load(mgr3)
        assert mgr3.get_group("simple") is None and mgr3.get_group("g") is not None

        # Emigration drops the groups.
        mgr3.on_leadership_change(OFFSETS_TOPIC, 0, False, 1)
        assert mgr3.get_group("g") is None and mgr3.partition_error("g") == Errors.NOT_COORDINATOR

    asyncio.run(run())


def _join(group_id: str, topics: list[str]) -> dict[str, Any]:
    return {"group_id": group_id, "member_id": "", "member_epoch": 0, "rebalance_timeout_ms": 5000,
            "subscribed_topic_names": topics, "topic_partitions": []}


def test_consumer_groups_replay_convert_delete_and_expire(tmp_path: Path) -> None:
    """KIP-848 records (key versions 3-8) next to offsets and classic records on one partition."""

    async def run() -> None:
        clock = [1000]
        rm = FakeReplicaManager(tmp_path, 1)
        mgr = manager(rm, clock)
        await load(mgr)
        meta = {"t": TopicMetadata(uuid.UUID(int=1), "t", 2)}

        # "cg": a consumer group with one member and an offset.
        cg = mgr.new_consumer_group("cg")
        resp, recs = consumer_group_heartbeat(cg, _join("cg", ["t"]), 1000, meta)
        member = resp["member_id"]
        mgr.add_group(cg)
        assert await mgr.write_records("cg", recs) == Errors.NONE
        assert await mgr.store_offsets(cg, {("t", 0): OffsetAndMetadata(3, -1, "", 1000)}) == Errors.NONE

        # "conv": an empty classic group holding an offset that then becomes a consumer group
        # (the classic tombstone and the consumer records in one batch).
        classic = mgr.get_or_create_classic_group("conv")
        assert await mgr.store_group(classic, classic.to_record()) == Errors.NONE
        assert await mgr.store_offsets(classic, {("t", 1): OffsetAndMetadata(9, -1, "", 1000)}) == Errors.NONE
        conv = mgr.new_consumer_group("conv")
        _, recs = consumer_group_heartbeat(conv, _join("conv", ["t"]), 1000, meta)
        assert await mgr.write_records("conv", recs, before=[(group_metadata_key("conv"), None)]) == Errors.NONE

        # "gone": a consumer group deleted (tombstones), then a classic group under its id.
        gone = mgr.new_consumer_group("gone")
        resp, recs = consumer_group_heartbeat(gone, _join("gone", ["t"]), 1000, meta)
        assert await mgr.write_records("gone", recs) == Errors.NONE
        _, recs = consumer_group_heartbeat(gone, {"group_id": "gone", "member_id": resp["member_id"], "member_epoch": -1}, 1000, meta)
        assert await mgr.write_records("gone", recs) == Errors.NONE
        assert await mgr.delete_group_records(gone, []) == Errors.NONE
        again = mgr.get_or_create_classic_group("gone")
        assert await mgr.store_group(again, again.to_record()) == Errors.NONE

        clock[0] = 5000
        mgr2 = manager(rm, clock)
        await load(mgr2)
        g = mgr2.get_group("cg")
        assert isinstance(g, ConsumerGroup)
        assert g.records() == cg.records()
        assert g.offsets[("t", 0)].offset == 3
        assert g.session_deadline(member) == 5000 + 45000  # fresh session from on_loaded
        c = mgr2.get_group("conv")
        assert isinstance(c, ConsumerGroup) and len(c.members) == 1 and c.offsets[("t", 1)].offset == 9
        assert isinstance(mgr2.get_group("gone"), ClassicGroup)

        # The member leaves; once its offset is past retention the empty group is deleted with
        # its own tombstones, and stays deleted after a reload.
        _, recs = consumer_group_heartbeat(g, {"group_id": "cg", "member_id": member, "member_epoch": -1}, 5000, meta)
        assert await mgr2.write_records("cg", recs) == Errors.NONE
        assert g.is_empty() and g.state_name == "Empty"
        clock[0] = 1000 + 60_000
        assert await mgr2.cleanup_group_metadata() == 1
        assert mgr2.get_group("cg") is None
        mgr3 = manager(rm, clock)
        await load(mgr3)
        assert mgr3.get_group("cg") is None
        assert isinstance(mgr3.get_group("conv"), ConsumerGroup)

    asyncio.run(run())
