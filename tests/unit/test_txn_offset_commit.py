"""Group offsets in transactions (Kafka's TxnOffsetCommit in the group coordinator), over a real
``__consumer_offsets`` log: offsets committed in a transaction are written as the producer's
transactional batch and stay pending (invisible to OffsetFetch, UNSTABLE_OFFSET_COMMIT with
require_stable) until the producer's marker; COMMIT materialises them unless a later plain commit
is newer in the log, ABORT drops them; a load replays interleaved transactions and markers and
keeps open transactions pending; the member fields are validated as Kafka's coordinator does;
expiry and group deletion leave / drop pending offsets as Kafka's do."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from test_group_coordinator import FakeReplicaManager, load, manager
from test_group_coordinator_timers import coordinator

from odradek.coordinator.group.assignors import TopicMetadata
from odradek.coordinator.group.classic_group import ClassicGroup, ClassicGroupState
from odradek.coordinator.group.consumer_group_heartbeat import consumer_group_heartbeat
from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC, GroupMetadataManager
from odradek.coordinator.group.offset_metadata_manager import CommitRequest, OffsetMetadataManager
from odradek.coordinator.group.records import parse_key, parse_offset_value
from odradek.log.append_origin import AppendOrigin
from odradek.protocol.errors import Errors
from odradek.records.batch import iter_batches
from odradek.records.control_batch import build_end_txn_marker
from odradek.records.records import iter_batch_records

PARTITIONS = {("t", 0), ("t", 1), ("u", 0)}
T0, T1 = ("t", 0), ("t", 1)


def write_marker(rm: FakeReplicaManager, mgr: GroupMetadataManager | None, pid: int, commit: bool) -> None:
    """Append the marker to partition 0 and tell the coordinator, as the replica manager does
    once it is acknowledged."""
    lg = rm.partitions[(OFFSETS_TOPIC, 0)].log
    lg.append_as_leader(build_end_txn_marker(pid, 0, 3, commit, 5000), 0, 0, AppendOrigin.COORDINATOR)
    lg.high_watermark = lg.log_end_offset
    if mgr is not None:
        mgr.on_txn_marker(OFFSETS_TOPIC, 0, pid, commit)


async def setup(tmp_path: Path, clock: list[int]) -> tuple[FakeReplicaManager, OffsetMetadataManager]:
    rm = FakeReplicaManager(tmp_path, 1)
    mgr = manager(rm, clock)
    await load(mgr)
    return rm, offsets_of(mgr, clock)


def offsets_of(mgr: GroupMetadataManager, clock: list[int]) -> OffsetMetadataManager:
    return OffsetMetadataManager(
        groups=mgr, partition_exists=lambda t, p: (t, p) in PARTITIONS, clock_ms=lambda: clock[0],
        on_member_heartbeat=lambda g: None,
    )


def c(offset: int, metadata: str | None = None) -> CommitRequest:
    return CommitRequest(offset, -1, metadata)


async def txn_commit(om: OffsetMetadataManager, group: str, pid: int, offsets: dict[Any, CommitRequest],
                     member: str = "", generation: int = -1, instance: str | None = None,
                     epoch: int = 0) -> dict[Any, Errors]:
    return await om.commit_txn_offsets(group, "tx", pid, epoch, member, generation, instance, offsets)


def fetched(om: OffsetMetadataManager, group: str, tps: list[Any] | None = None,
            stable: bool = False) -> dict[Any, Any]:
    """tp -> committed offset (None if none) or the partition's error."""
    err, rows = om.fetch_offsets(group, tps, stable)
    assert err == Errors.NONE
    return {tp: (e if e != Errors.NONE else (o.offset if o is not None else None)) for tp, o, e in rows}


def batches(rm: FakeReplicaManager) -> list[tuple[int, bool, bool, list[tuple[int, int | None]]]]:
    """(producer id, transactional, control, [(record offset, committed offset or None)])."""
    lg = rm.partitions[(OFFSETS_TOPIC, 0)].log
    data = lg.read(0, 1 << 20, isolation_max_offset=lg.log_end_offset).to_bytes()
    out = []
    for h in iter_batches(data):
        recs = []
        for r in iter_batch_records(memoryview(data)[h.position:h.position + h.size]):
            off = None
            if not h.is_control and r.value is not None and parse_key(r.key or b"") is not None:
                off = parse_offset_value(r.value).offset
            recs.append((r.offset, off))
        out.append((h.producer_id, h.is_transactional, h.is_control, recs))
    return out


def test_pending_until_the_commit_marker(tmp_path: Path) -> None:
    async def run() -> None:
        clock = [1000]
        rm, om = await setup(tmp_path, clock)
        mgr = om.groups
        assert await om.commit_offsets("g", "", -1, None, {T0: c(5)}) == {T0: Errors.NONE}
        # Twice in one transaction (same producer epoch, both with sequence 0): both written.
        assert await txn_commit(om, "g", 100, {T0: c(7), T1: c(8, "m")}) == {T0: Errors.NONE, T1: Errors.NONE}
        assert await txn_commit(om, "g", 100, {T0: c(9)}) == {T0: Errors.NONE}
        log_batches = batches(rm)
        assert [(pid, txn, ctl) for pid, txn, ctl, _ in log_batches] == [
            (-1, False, False), (100, True, False), (100, True, False)
        ]
        assert [off for _, _, _, recs in log_batches for _, off in recs] == [5, 7, 8, 9]
        # Pending: not visible, unstable for require_stable.
        assert fetched(om, "g", [T0, T1]) == {T0: 5, T1: None}
        assert fetched(om, "g") == {T0: 5}
        assert fetched(om, "g", [T0, T1, ("u", 0)], stable=True) == {
            T0: Errors.UNSTABLE_OFFSET_COMMIT, T1: Errors.UNSTABLE_OFFSET_COMMIT, ("u", 0): None
        }
        # A marker for another producer or another topic changes nothing.
        mgr.on_txn_marker(OFFSETS_TOPIC, 0, 101, True)
        mgr.on_txn_marker("other", 0, 100, True)
        assert fetched(om, "g", [T0, T1]) == {T0: 5, T1: None}
        write_marker(rm, mgr, 100, commit=True)
        assert fetched(om, "g", [T0, T1], stable=True) == {T0: 9, T1: 8}
        g = mgr.get_group("g")
        assert g.offsets[T1].metadata == "m" and g.offsets[T0].record_offset == 3

    asyncio.run(run())


def test_abort_drops_the_pending_offsets(tmp_path: Path) -> None:
    async def run() -> None:
        clock = [1000]
        rm, om = await setup(tmp_path, clock)
        assert await om.commit_offsets("g", "", -1, None, {T0: c(5)}) == {T0: Errors.NONE}
        assert await txn_commit(om, "g", 100, {T0: c(7), T1: c(8)}) == {T0: Errors.NONE, T1: Errors.NONE}
        write_marker(rm, om.groups, 100, commit=False)
        assert fetched(om, "g", [T0, T1], stable=True) == {T0: 5, T1: None}
        # The next transaction of the producer (same epoch, as transactions v1) commits.
        assert await txn_commit(om, "g", 100, {T1: c(11)}) == {T1: Errors.NONE}
        write_marker(rm, om.groups, 100, commit=True)
        assert fetched(om, "g", [T0, T1], stable=True) == {T0: 5, T1: 11}

    asyncio.run(run())


def test_a_later_plain_commit_wins_over_an_earlier_transactional_one(tmp_path: Path) -> None:
    async def run() -> None:
        clock = [1000]
        rm, om = await setup(tmp_path, clock)
        assert await txn_commit(om, "g", 100, {T0: c(50), T1: c(51)}) == {T0: Errors.NONE, T1: Errors.NONE}
        assert await om.commit_offsets("g", "", -1, None, {T0: c(60)}) == {T0: Errors.NONE}
        assert fetched(om, "g", [T0], stable=True) == {T0: Errors.UNSTABLE_OFFSET_COMMIT}
        write_marker(rm, om.groups, 100, commit=True)
        # T0's transactional commit is older in the log than the plain one: the plain one stays.
        assert fetched(om, "g", [T0, T1], stable=True) == {T0: 60, T1: 51}
        # Replayed the same way.
        mgr2 = manager(rm, clock)
        await load(mgr2)
        assert fetched(offsets_of(mgr2, clock), "g", [T0, T1], stable=True) == {T0: 60, T1: 51}

    asyncio.run(run())


def test_load_replays_interleaved_transactions_and_keeps_open_ones_pending(tmp_path: Path) -> None:
    async def run() -> None:
        clock = [1000]
        rm, om = await setup(tmp_path, clock)
        ok = Errors.NONE
        assert await om.commit_offsets("g", "", -1, None, {T0: c(1)}) == {T0: ok}
        assert await txn_commit(om, "g", 10, {T0: c(10)}) == {T0: ok}           # A: aborted
        assert await txn_commit(om, "g", 20, {T1: c(20)}) == {T1: ok}           # B: committed, but
        assert await om.commit_offsets("g", "", -1, None, {T1: c(21)}) == {T1: ok}  # older than 21
        assert await txn_commit(om, "h", 20, {T0: c(22)}) == {T0: ok}           # B, another group
        write_marker(rm, None, 10, commit=False)
        assert await txn_commit(om, "g", 10, {T0: c(11)}) == {T0: ok}           # A again: committed
        write_marker(rm, None, 20, commit=True)
        write_marker(rm, None, 10, commit=True)
        assert await txn_commit(om, "g", 30, {("u", 0): c(30)}) == {("u", 0): ok}  # C: open
        assert await txn_commit(om, "only-pending", 30, {T0: c(31)}) == {T0: ok}   # C: open

        mgr2 = manager(rm, clock)
        await load(mgr2)
        om2 = offsets_of(mgr2, clock)
        assert fetched(om2, "g", [T0, T1]) == {T0: 11, T1: 21}
        assert fetched(om2, "h", [T0]) == {T0: 22}
        assert fetched(om2, "g", [T0, T1, ("u", 0)], stable=True) == {
            T0: 11, T1: 21, ("u", 0): Errors.UNSTABLE_OFFSET_COMMIT
        }
        # A group that has only pending offsets exists (as Kafka creates it on replay).
        assert isinstance(mgr2.get_group("only-pending"), ClassicGroup)
        assert fetched(om2, "only-pending", [T0]) == {T0: None}
        assert fetched(om2, "only-pending", [T0], stable=True) == {T0: Errors.UNSTABLE_OFFSET_COMMIT}
        # C's marker arrives after the load.
        write_marker(rm, mgr2, 30, commit=True)
        assert fetched(om2, "g", [("u", 0)], stable=True) == {("u", 0): 30}
        assert fetched(om2, "only-pending", [T0], stable=True) == {T0: 31}

    asyncio.run(run())


def test_member_fields_are_validated_as_kafka_does(tmp_path: Path) -> None:
    async def run() -> None:
        clock = [1000]
        rm, om = await setup(tmp_path, clock)
        mgr = om.groups
        g = mgr.get_or_create_classic_group("g")
        w: list[Any] = []
        g.join(w, member_id="", group_instance_id="inst", require_known_member_id=False, client_id="c",
               client_host="/h", rebalance_timeout_ms=10000, session_timeout_ms=10000,
               protocol_type="consumer", protocols=[("range", b"")], now_ms=1000)
        g.poll(1000)
        assert g.state == ClassicGroupState.COMPLETING_REBALANCE
        member, gen = next(iter(g.members)), g.generation_id
        one = {T0: c(1)}
        assert await txn_commit(om, "g", 1, one, "nobody", gen) == {T0: Errors.UNKNOWN_MEMBER_ID}
        assert await txn_commit(om, "g", 1, one, member, gen + 1) == {T0: Errors.ILLEGAL_GENERATION}
        assert await txn_commit(om, "g", 1, one, "other", gen, "inst") == {T0: Errors.FENCED_INSTANCE_ID}
        assert await txn_commit(om, "g", 1, one, member, gen, "unknown-inst") == {T0: Errors.UNKNOWN_MEMBER_ID}
        # The member with its generation (the group's state does not matter for transactions).
        assert await txn_commit(om, "g", 1, one, member, gen, "inst") == {T0: Errors.NONE}
        # v0-v2 carry no member fields: accepted whatever the group.
        assert await txn_commit(om, "g", 1, one) == {T0: Errors.NONE}
        # A generation for a group that does not exist is stale.
        assert await txn_commit(om, "nope", 1, one, "m", 3) == {T0: Errors.ILLEGAL_GENERATION}
        assert mgr.get_group("nope") is None
        # Per partition: metadata too large, unknown partition (whatever the group says).
        big = {T0: c(1, "x" * 5000), ("zz", 0): c(1), T1: c(2)}
        assert await txn_commit(om, "g", 1, big, member, gen) == {
            T0: Errors.OFFSET_METADATA_TOO_LARGE, ("zz", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION, T1: Errors.NONE
        }
        assert await txn_commit(om, "g", 1, {("zz", 0): c(1), T1: c(2)}, "nobody", gen) == {
            ("zz", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION, T1: Errors.UNKNOWN_MEMBER_ID
        }
        # A dead group: COORDINATOR_NOT_AVAILABLE.
        g.make_dead(Errors.COORDINATOR_NOT_AVAILABLE, 1000)
        assert await txn_commit(om, "g", 1, one, member, gen) == {T0: Errors.COORDINATOR_NOT_AVAILABLE}

        # KIP-848 consumer group: the member's epoch; an older one is ILLEGAL_GENERATION.
        cg = mgr.new_consumer_group("cg")
        mgr.groups["cg"] = cg
        resp, _ = consumer_group_heartbeat(cg, {
            "group_id": "cg", "member_id": "", "member_epoch": 0, "rebalance_timeout_ms": 1000,
            "subscribed_topic_names": ["t"], "topic_partitions": [],
        }, 1000, {"t": TopicMetadata(uuid.UUID(int=1), "t", 2)})
        mid, epoch = resp["member_id"], resp["member_epoch"]
        assert await txn_commit(om, "cg", 2, one, mid, epoch - 1) == {T0: Errors.ILLEGAL_GENERATION}
        assert await txn_commit(om, "cg", 2, one, mid, epoch + 1) == {T0: Errors.FENCED_MEMBER_EPOCH}
        assert await txn_commit(om, "cg", 2, one, "x", epoch) == {T0: Errors.UNKNOWN_MEMBER_ID}
        assert await txn_commit(om, "cg", 2, one, mid, epoch) == {T0: Errors.NONE}

    asyncio.run(run())


def test_expiry_keeps_pending_and_deleting_the_group_drops_them(tmp_path: Path) -> None:
    async def run() -> None:
        clock = [1000]
        rm, om = await setup(tmp_path, clock)
        mgr = om.groups
        assert await om.commit_offsets("g", "", -1, None, {T0: c(5)}) == {T0: Errors.NONE}
        assert await txn_commit(om, "g", 100, {T0: c(7)}) == {T0: Errors.NONE}
        assert await txn_commit(om, "p", 100, {T1: c(9)}) == {T1: Errors.NONE}
        clock[0] = 1000 + 120_000  # far past offsets.retention (60 s)
        assert await mgr.cleanup_group_metadata() == 0
        # Neither the offset with a pending transactional commit nor the group with an open
        # transaction (and no committed offsets) goes.
        assert fetched(om, "g", [T0]) == {T0: 5}
        assert mgr.get_group("p") is not None
        # The transaction ends: now both expire (the materialised offset was committed at 1000).
        write_marker(rm, mgr, 100, commit=False)
        assert await mgr.cleanup_group_metadata() == 1
        assert mgr.get_group("g") is None and mgr.get_group("p") is None

    asyncio.run(run())


def test_deleting_a_group_drops_its_pending_offsets(tmp_path: Path) -> None:
    """As Kafka: DeleteGroups of an empty group with pending transactional offsets succeeds; they
    go with it (a tombstone for each, also where no offset was committed), and neither a later
    COMMIT marker nor a reload brings them back."""

    async def run() -> None:
        clock = [1000]
        gc, _, rm = await coordinator(tmp_path, clock)
        assert await gc.commit_offsets("d", "", -1, None, {T0: c(1)}) == {T0: Errors.NONE}
        assert await gc.commit_txn_offsets("d", "tx", 200, 0, "", -1, None, {T0: c(2), T1: c(3)}) == {
            T0: Errors.NONE, T1: Errors.NONE
        }
        assert gc.fetch_offsets("d", [T1], True)[1] == [(T1, None, Errors.UNSTABLE_OFFSET_COMMIT)]
        assert await gc.delete_groups(["d"]) == {"d": Errors.NONE}
        assert gc.metadata_manager.get_group("d") is None
        last = batches(rm)[-1]
        assert (last[0], last[2], [off for _, off in last[3]]) == (-1, False, [None, None, None])
        write_marker(rm, gc.metadata_manager, 200, commit=True)
        g = gc.metadata_manager.get_group("d")
        assert g is None or not g.offsets
        mgr2 = manager(rm, clock)
        await load(mgr2)
        assert mgr2.get_group("d") is None
        await gc.shutdown()

    asyncio.run(run())


class GatedReplicaManager(FakeReplicaManager):
    """Appends at once but answers only when the gate opens."""

    gate: asyncio.Event

    def append_records(self, timeout_ms: int, acks: int, entries: dict[Any, Any],
                       origin: AppendOrigin = AppendOrigin.CLIENT) -> Any:
        inner = super().append_records(timeout_ms, acks, entries, origin)

        async def later() -> Any:
            await self.gate.wait()
            return await inner

        return later()


def test_a_marker_acknowledged_while_the_commit_is_appended(tmp_path: Path) -> None:
    async def run() -> None:
        clock = [1000]
        rm = GatedReplicaManager(tmp_path, 1)
        rm.gate = asyncio.Event()
        rm.gate.set()
        mgr = manager(rm, clock)
        await load(mgr)
        om = offsets_of(mgr, clock)
        rm.gate.clear()
        task = asyncio.ensure_future(txn_commit(om, "g", 100, {T0: c(7)}))
        await asyncio.sleep(0.01)
        assert not task.done()
        assert fetched(om, "g", [T0], stable=True) == {T0: Errors.UNSTABLE_OFFSET_COMMIT}
        write_marker(rm, mgr, 100, commit=True)
        rm.gate.set()
        assert await task == {T0: Errors.NONE}
        assert fetched(om, "g", [T0], stable=True) == {T0: 7}

        # The group object is replaced while a commit is appended (an empty classic group
        # becoming a consumer group): the offsets are pending by group id all the same, and
        # the marker commits them into the group that has the id then.
        rm.gate.clear()
        task = asyncio.ensure_future(txn_commit(om, "g", 100, {T1: c(8)}))
        await asyncio.sleep(0.01)
        cg = mgr.new_consumer_group("g")
        cg.offsets = dict(mgr.groups["g"].offsets)
        mgr.groups["g"] = cg
        rm.gate.set()
        assert await task == {T1: Errors.NONE}
        assert fetched(om, "g", [T1], stable=True) == {T1: Errors.UNSTABLE_OFFSET_COMMIT}
        write_marker(rm, mgr, 100, commit=True)
        assert fetched(om, "g", [T0, T1], stable=True) == {T0: 7, T1: 8}
        assert cg.offsets[T1].offset == 8

    asyncio.run(run())


def test_the_offsets_partition_is_verified_first_when_a_verifier_is_set(tmp_path: Path) -> None:
    """KIP-890 (transaction.partition.verification.enable): the group's offsets partition must be
    in the producer's transaction; a failed verification answers every partition, with a
    retriable failure as COORDINATOR_NOT_AVAILABLE, before the group is looked at."""

    async def run() -> None:
        clock = [1000]
        rm, om = await setup(tmp_path, clock)
        asked: list[tuple[str, int, int, list[Any]]] = []
        answer: dict[Any, tuple[Errors, str | None]] = {}

        async def verifier(txn_id: str, pid: int, epoch: int, tps: list[Any]) -> dict[Any, tuple[Errors, str | None]]:
            asked.append((txn_id, pid, epoch, tps))
            return answer

        om.txn_verifier = verifier
        offsets_tp = (OFFSETS_TOPIC, 0)
        answer[offsets_tp] = (Errors.INVALID_TXN_STATE, "Partition was not added to the transaction")
        # Refused before the group is looked at (a generation for an unknown group is not the answer).
        assert await txn_commit(om, "g", 7, {T0: c(1), ("zz", 0): c(1)}, "m", 3, epoch=2) == {
            T0: Errors.INVALID_TXN_STATE, ("zz", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION
        }
        assert asked == [("tx", 7, 2, [offsets_tp])]
        assert om.groups.get_group("g") is None and len(batches(rm)) == 0
        answer[offsets_tp] = (Errors.NOT_ENOUGH_REPLICAS, "Unable to verify")
        assert await txn_commit(om, "g", 7, {T0: c(1)}) == {T0: Errors.COORDINATOR_NOT_AVAILABLE}
        answer.clear()
        assert await txn_commit(om, "g", 7, {T0: c(1)}) == {T0: Errors.NONE}
        assert fetched(om, "g", [T0], stable=True) == {T0: Errors.UNSTABLE_OFFSET_COMMIT}

    asyncio.run(run())
