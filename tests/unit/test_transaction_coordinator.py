"""The transaction coordinator: state machine, ``__transaction_state`` serde, fencing, EndTxn,
timeouts and transactional id expiry (sans-I/O cores with a fake replica manager and clock)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from odradek.coordinator.transaction.transaction_coordinator import (
    InitResult,
    TransactionConfig,
    TransactionCoordinator,
)
from odradek.coordinator.transaction.transaction_log import (
    TRANSACTION_STATE_TOPIC,
    key_to_bytes,
    read_key,
    read_value,
    value_to_bytes,
)
from odradek.coordinator.transaction.transaction_marker_channel_manager import PendingCompletion
from odradek.coordinator.transaction.transaction_metadata import (
    IllegalTransitionError,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from odradek.coordinator.transaction.transaction_state_manager import (
    TransactionStateManager,
    partition_for,
)
from odradek.protocol.errors import Errors
from odradek.records.records import iter_batch_records

S = TransactionState


# ------------------------------------------------------------------------------ state machine


def test_state_machine_allows_kafkas_transitions_only() -> None:
    meta = TransactionMetadata("tx", 7, txn_timeout_ms=1000)
    t = meta.prepare_increment_producer_epoch(1000, None, now_ms=10)
    assert t is not None and t.state == S.EMPTY and t.producer_epoch == 0
    assert meta.pending_state == S.EMPTY
    with pytest.raises(IllegalTransitionError):  # one transition at a time
        meta.prepare_add_partitions({("a", 0)}, now_ms=11)
    meta.complete_transition(t)
    assert meta.state == S.EMPTY and meta.pending_state is None and meta.producer_epoch == 0
    with pytest.raises(IllegalTransitionError):  # Empty -> PrepareCommit is not allowed
        meta.prepare_abort_or_commit(True, now_ms=12)
    assert meta.pending_state is None
    t = meta.prepare_add_partitions({("a", 0)}, now_ms=20)
    meta.complete_transition(t)
    assert meta.state == S.ONGOING and meta.txn_start_timestamp == 20
    t = meta.prepare_add_partitions({("b", 1)}, now_ms=30)
    meta.complete_transition(t)
    assert meta.topic_partitions == {("a", 0), ("b", 1)} and meta.txn_start_timestamp == 20
    meta.complete_transition(meta.prepare_abort_or_commit(True, now_ms=40))
    assert meta.state == S.PREPARE_COMMIT
    with pytest.raises(IllegalTransitionError):  # PrepareCommit -> Dead is not allowed
        meta.prepare_dead(now_ms=41)
    t = meta.prepare_complete(now_ms=50)
    assert t.state == S.COMPLETE_COMMIT and t.topic_partitions == frozenset()
    meta.complete_transition(t)
    assert meta.state == S.COMPLETE_COMMIT and not meta.topic_partitions
    # A failed write leaves the state as it was.
    t = meta.prepare_add_partitions({("c", 0)}, now_ms=60)
    meta.abort_transition()
    assert meta.state == S.COMPLETE_COMMIT and meta.pending_state is None
    with pytest.raises(IllegalTransitionError):  # completing what is not pending
        meta.complete_transition(t)


def test_epoch_bump_fencing_and_rotation_rules() -> None:
    meta = TransactionMetadata("tx", 7, producer_epoch=3, last_producer_epoch=2)
    assert meta.prepare_increment_producer_epoch(1000, 1, now_ms=1) is None  # stale: fenced
    t = meta.prepare_increment_producer_epoch(1000, 2, now_ms=1)  # a retry of the last bump
    assert t is not None and (t.producer_epoch, t.last_producer_epoch) == (3, 2)
    meta.abort_transition()
    t = meta.prepare_increment_producer_epoch(1000, 3, now_ms=1)  # KIP-360 with the current epoch
    assert t is not None and (t.producer_epoch, t.last_producer_epoch) == (4, 3)
    meta.abort_transition()
    exhausted = TransactionMetadata("tx", 7, producer_epoch=32766)
    assert exhausted.is_producer_epoch_exhausted
    with pytest.raises(IllegalTransitionError):
        exhausted.prepare_increment_producer_epoch(1000, None, now_ms=1)
    t = exhausted.prepare_producer_id_rotation(8, 1000, 1, record_last_epoch=True)
    assert (t.producer_id, t.producer_epoch, t.last_producer_id, t.last_producer_epoch) == (8, 0, 7, 32766)


# ------------------------------------------------------------------------------ log serde


def _kafka_string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def test_transaction_log_serde_matches_kafkas_encoding() -> None:
    # TransactionLogKey v0 and TransactionLogValue v0 written field by field from the schemas.
    key = struct.pack(">h", 0) + _kafka_string("my-txn")
    value = (
        struct.pack(">h", 0)  # value version
        + struct.pack(">q", 1234)  # ProducerId
        + struct.pack(">h", 5)  # ProducerEpoch
        + struct.pack(">i", 60000)  # TransactionTimeoutMs
        + struct.pack(">b", 2)  # TransactionStatus: PrepareCommit
        + struct.pack(">i", 2)  # TransactionPartitions: 2 topics
        + _kafka_string("a") + struct.pack(">i", 2) + struct.pack(">ii", 0, 3)
        + _kafka_string("b") + struct.pack(">i", 1) + struct.pack(">i", 1)
        + struct.pack(">q", 2000)  # TransactionLastUpdateTimestampMs
        + struct.pack(">q", 1000)  # TransactionStartTimestampMs
    )
    assert read_key(key) == "my-txn"
    assert key_to_bytes("my-txn") == key
    decoded = read_value(value).metadata
    assert decoded == TxnTransitMetadata(
        producer_id=1234, last_producer_id=-1, producer_epoch=5, last_producer_epoch=-1,
        txn_timeout_ms=60000, state=S.PREPARE_COMMIT,
        topic_partitions=frozenset({("a", 0), ("a", 3), ("b", 1)}),
        txn_start_timestamp=1000, txn_last_update_timestamp=2000,
    )
    assert value_to_bytes(decoded) == value
    # Empty: a null partition list (-1), as Kafka writes it.
    empty = TxnTransitMetadata(9, -1, 0, -1, 100, S.EMPTY, frozenset(), -1, 5)
    raw = value_to_bytes(empty)
    assert raw[2 + 8 + 2 + 4 + 1 : 2 + 8 + 2 + 4 + 1 + 4] == struct.pack(">i", -1)
    assert read_value(raw).metadata == empty
    # Version 1 (flexible, tagged fields) is read as well.
    v1 = value_to_bytes(decoded, version=1)
    assert v1[:2] == struct.pack(">h", 1) and read_value(v1).metadata == decoded
    with pytest.raises(ValueError):
        value_to_bytes(TxnTransitMetadata(9, -1, 0, -1, 100, S.DEAD, frozenset(), -1, 5))


# Written by Kafka 4.3.1's own generated classes (MessageUtil.toVersionPrefixedBytes of a
# TransactionLogKey / TransactionLogValue with the fields below), printed as hex.
KAFKA_KEY = "000000066d792d74786e"  # "my-txn"
KAFKA_VALUE_V0 = (  # producer 1234 epoch 5, 60 s, PrepareCommit, a-0 a-3 b-1, updated 2000, started 1000
    "000000000000000004d200050000ea600200000002000161000000020000000000000003000162000000010000000100000000"
    "000007d000000000000003e8"
)
KAFKA_VALUE_V1 = (
    "000100000000000004d200050000ea600203026103000000000000000300026202000000010000000000000007d00000000000"
    "0003e800"
)
KAFKA_EMPTY_V0 = "0000000000000000000900000000006400ffffffff0000000000000005ffffffffffffffff"
KAFKA_TAGGED_V1 = (  # as KAFKA_VALUE_V1, with PreviousProducerId 77, NextProducerId 88, ClientTransactionVersion 2
    "000100000000000004d200050000ea600203026103000000000000000300026202000000010000000000000007d00000000000"
    "0003e8030008000000000000004d0108000000000000005802020002"
)


def test_transaction_log_bytes_are_kafkas() -> None:
    t = TxnTransitMetadata(1234, -1, 5, -1, 60000, S.PREPARE_COMMIT, frozenset({("a", 0), ("a", 3), ("b", 1)}), 1000, 2000)
    assert key_to_bytes("my-txn").hex() == KAFKA_KEY and read_key(bytes.fromhex(KAFKA_KEY)) == "my-txn"
    assert value_to_bytes(t).hex() == KAFKA_VALUE_V0
    assert value_to_bytes(t, version=1).hex() == KAFKA_VALUE_V1
    assert read_value(bytes.fromhex(KAFKA_VALUE_V0)).metadata == t
    assert read_value(bytes.fromhex(KAFKA_VALUE_V1)).metadata == t
    empty = TxnTransitMetadata(9, -1, 0, -1, 100, S.EMPTY, frozenset(), -1, 5)
    assert value_to_bytes(empty).hex() == KAFKA_EMPTY_V0 and read_value(bytes.fromhex(KAFKA_EMPTY_V0)).metadata == empty
    tagged = read_value(bytes.fromhex(KAFKA_TAGGED_V1))
    assert tagged.metadata.last_producer_id == 77 and tagged.next_producer_id == 88
    assert tagged.client_transaction_version == 2 and tagged.metadata.topic_partitions == t.topic_partitions


def test_partition_for_is_kafkas_hash() -> None:
    # Printed by Java with Kafka 4.3's clients jar: s.hashCode() and Utils.abs(s.hashCode()) % 50.
    assert partition_for("hello", 50) == 22  # 99162322
    assert partition_for("tx", 50) == 16  # 3716
    assert partition_for("my-txn", 50) == 45  # -1061187895: a negative hash code is negated
    assert partition_for("polygenelubricants", 50) == 0  # Integer.MIN_VALUE: Utils.abs gives 0


# ------------------------------------------------------------------------------ coordinator


@dataclass
class _Status:
    error: Errors = Errors.NONE
    message: str | None = None


class FakeReplicaManager:
    def __init__(self) -> None:
        self.partitions: dict[tuple[str, int], Any] = {}
        self.leadership_listeners: list[Callable[[str, int, bool, int], None]] = []
        self.appended: list[tuple[tuple[str, int], bytes, bytes | None]] = []
        self.fail_with: Errors | None = None

    def append_records(self, timeout_ms: int, acks: int, entries: dict[tuple[str, int], bytearray]) -> Any:
        assert acks == -1
        out = {}
        for tp, buf in entries.items():
            if self.fail_with is not None:
                out[tp] = _Status(self.fail_with)
                continue
            for rec in iter_batch_records(memoryview(bytes(buf))):
                self.appended.append((tp, bytes(rec.key or b""), None if rec.value is None else bytes(rec.value)))
            out[tp] = _Status()

        async def later() -> dict[tuple[str, int], _Status]:
            await asyncio.sleep(0)
            return out

        return later()


class FakeMarkers:
    def __init__(self, on_complete: Callable[[PendingCompletion], Awaitable[None]]) -> None:
        self.on_complete = on_complete
        self.sent: list[PendingCompletion] = []

    def add_txn_markers_to_send(self, pc: PendingCompletion) -> None:
        self.sent.append(pc)

    def remove_markers_for_txn_partition(self, p: int) -> None:
        self.sent = [pc for pc in self.sent if pc.txn_partition != p]

    async def shutdown(self) -> None:
        pass


class Pids:
    def __init__(self) -> None:
        self.next = 1000

    async def generate_producer_id(self) -> int:
        self.next += 1
        return self.next


class Env:
    def __init__(self, **cfg: Any) -> None:
        self.now = 1_000_000
        self.rm = FakeReplicaManager()
        self.sm = TransactionStateManager(replica_manager=self.rm, num_partitions=4, clock_ms=lambda: self.now)
        for p in range(4):
            self.sm.owned[p] = 3  # coordinator epoch 3
        self.markers: FakeMarkers | None = None

        def make_markers(on_complete: Callable[[PendingCompletion], Awaitable[None]]) -> Any:
            self.markers = FakeMarkers(on_complete)
            return self.markers

        self.coord = TransactionCoordinator(
            config=TransactionConfig(**cfg), state_manager=self.sm, producer_ids=Pids(),
            markers=make_markers, clock_ms=lambda: self.now,
        )

    async def begin(self, tid: str = "tx", timeout_ms: int = 10000) -> InitResult:
        """InitProducerId, then AddPartitionsToTxn of t-0: an Ongoing transaction."""
        r = await self.coord.handle_init_producer_id(tid, timeout_ms)
        assert await self.coord.handle_add_partitions(tid, r.producer_id, r.producer_epoch, {("t", 0)}) == Errors.NONE
        return r

    def last_value(self, tid: str) -> TxnTransitMetadata | None:
        recs = [v for _, k, v in self.rm.appended if k == key_to_bytes(tid)]
        assert recs
        return None if recs[-1] is None else read_value(recs[-1]).metadata


def _run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(fn())  # type: ignore[arg-type]


def test_init_producer_id_epochs_timeouts_and_kip360() -> None:
    async def go() -> None:
        env = Env(max_timeout_ms=60000)
        c = env.coord
        assert (await c.handle_init_producer_id("tx", 60001)).error == Errors.INVALID_TRANSACTION_TIMEOUT
        assert (await c.handle_init_producer_id("tx", 0)).error == Errors.INVALID_TRANSACTION_TIMEOUT
        assert (await c.handle_init_producer_id("", 1000)).error == Errors.INVALID_REQUEST
        r = await c.handle_init_producer_id("tx", 60000)
        assert r.error == Errors.NONE and r.producer_epoch == 0 and r.producer_id == 1001
        stored = env.last_value("tx")
        assert stored is not None and stored.state == S.EMPTY and stored.producer_epoch == 0
        assert env.rm.appended[-1][0] == (TRANSACTION_STATE_TOPIC, env.sm.partition_for("tx"))
        r2 = await c.handle_init_producer_id("tx", 60000)
        assert (r2.error, r2.producer_id, r2.producer_epoch) == (Errors.NONE, 1001, 1)
        # KIP-360: a producer that knows its id and epoch bumps it; a stale one is fenced.
        r3 = await c.handle_init_producer_id("tx", 60000, 1001, 1)
        assert (r3.error, r3.producer_epoch) == (Errors.NONE, 2)
        assert (await c.handle_init_producer_id("tx", 60000, 1001, 0)).error == Errors.PRODUCER_FENCED
        assert (await c.handle_init_producer_id("tx", 60000, 999, 2)).error == Errors.PRODUCER_FENCED
        # A retry of the last bump (its answer was lost) gets the same epoch again.
        r4 = await c.handle_init_producer_id("tx", 60000, 1001, 1)
        assert (r4.error, r4.producer_epoch) == (Errors.NONE, 2)
        # Not the coordinator / still loading.
        env.sm.owned.pop(env.sm.partition_for("tx"))
        assert (await c.handle_init_producer_id("tx", 60000)).error == Errors.NOT_COORDINATOR
        env.sm.loading[env.sm.partition_for("tx")] = 4
        assert (await c.handle_init_producer_id("tx", 60000)).error == Errors.COORDINATOR_LOAD_IN_PROGRESS

    _run(go)


def test_exhausted_epoch_rotates_the_producer_id() -> None:
    async def go() -> None:
        env = Env()
        r = await env.coord.handle_init_producer_id("tx", 1000)
        env.sm.txns["tx"].producer_epoch = 32766
        r2 = await env.coord.handle_init_producer_id("tx", 1000)
        assert r2.error == Errors.NONE and r2.producer_id != r.producer_id and r2.producer_epoch == 0

    _run(go)


def test_commit_abort_end_txn_and_retries() -> None:
    async def go() -> None:
        env = Env()
        c = env.coord
        r = await c.handle_init_producer_id("tx", 10000)
        pid, ep = r.producer_id, r.producer_epoch
        assert (await c.handle_end_txn("tx", pid, ep, True)).error == Errors.INVALID_TXN_STATE  # nothing begun
        assert await c.handle_add_partitions("tx", pid + 1, ep, {("t", 0)}) == Errors.INVALID_PRODUCER_ID_MAPPING
        assert await c.handle_add_partitions("nope", pid, ep, {("t", 0)}) == Errors.INVALID_PRODUCER_ID_MAPPING
        assert await c.handle_add_partitions("tx", pid, ep, {("t", 0), ("t", 1)}) == Errors.NONE
        assert await c.handle_add_partitions("tx", pid, ep, {("__consumer_offsets", 3)}) == Errors.NONE
        stored = env.last_value("tx")
        assert stored is not None and stored.state == S.ONGOING
        assert stored.topic_partitions == {("t", 0), ("t", 1), ("__consumer_offsets", 3)}
        n = len(env.rm.appended)
        assert await c.handle_add_partitions("tx", pid, ep, {("t", 1)}) == Errors.NONE
        assert len(env.rm.appended) == n  # already in the transaction: nothing written
        # KIP-890 verification by a broker.
        assert c.handle_verify_partitions("tx", pid, ep, [("t", 0), ("u", 0)], abortable=True) == {
            ("t", 0): Errors.NONE, ("u", 0): Errors.TRANSACTION_ABORTABLE}
        assert c.handle_verify_partitions("tx", pid, ep - 1, [("t", 0)], abortable=False) == {
            ("t", 0): Errors.PRODUCER_FENCED}
        assert (await c.handle_end_txn("tx", pid, ep + 1, True)).error == Errors.PRODUCER_FENCED
        assert (await c.handle_end_txn("tx", pid, ep, True)).error == Errors.NONE
        stored = env.last_value("tx")
        assert stored is not None and stored.state == S.PREPARE_COMMIT
        assert env.markers is not None
        (pc,) = env.markers.sent
        assert pc.commit and pc.coordinator_epoch == 3 and (pc.producer_id, pc.producer_epoch) == (pid, ep)
        assert pc.remaining == {("t", 0), ("t", 1), ("__consumer_offsets", 3)}
        # While the markers are written: retries wait, other requests too.
        assert (await c.handle_end_txn("tx", pid, ep, True)).error == Errors.CONCURRENT_TRANSACTIONS
        assert await c.handle_add_partitions("tx", pid, ep, {("t", 2)}) == Errors.CONCURRENT_TRANSACTIONS
        assert (await c.handle_init_producer_id("tx", 10000)).error == Errors.CONCURRENT_TRANSACTIONS
        pc.remaining.clear()
        await env.markers.on_complete(pc)
        stored = env.last_value("tx")
        assert stored is not None and stored.state == S.COMPLETE_COMMIT and not stored.topic_partitions
        assert c.describe("tx")["transaction_state"] == "CompleteCommit"
        # A retried EndTxn after completion is idempotent; the other outcome is not.
        assert (await c.handle_end_txn("tx", pid, ep, True)).error == Errors.NONE
        assert (await c.handle_end_txn("tx", pid, ep, False)).error == Errors.INVALID_TXN_STATE
        # Next transaction: abort.
        assert await c.handle_add_partitions("tx", pid, ep, {("t", 0)}) == Errors.NONE
        assert (await c.handle_end_txn("tx", pid, ep, False)).error == Errors.NONE
        assert not env.markers.sent[-1].commit
        assert (await c.handle_end_txn("tx", pid, ep, False)).error == Errors.CONCURRENT_TRANSACTIONS

    _run(go)


def test_failed_append_leaves_the_state_and_maps_the_error() -> None:
    async def go() -> None:
        env = Env()
        r = await env.coord.handle_init_producer_id("tx", 10000)
        env.rm.fail_with = Errors.NOT_ENOUGH_REPLICAS
        err = await env.coord.handle_add_partitions("tx", r.producer_id, r.producer_epoch, {("t", 0)})
        assert err == Errors.COORDINATOR_NOT_AVAILABLE
        meta = env.sm.txns["tx"]
        assert meta.state == S.EMPTY and meta.pending_state is None
        env.rm.fail_with = Errors.NOT_LEADER_OR_FOLLOWER
        assert (await env.coord.handle_init_producer_id("tx", 10000)).error == Errors.NOT_COORDINATOR
        assert meta.producer_epoch == r.producer_epoch

    _run(go)


def test_init_while_ongoing_fences_the_old_producer_and_aborts() -> None:
    async def go() -> None:
        env = Env()
        c = env.coord
        old = await env.begin()
        # A second producer with the same transactional id.
        r = await c.handle_init_producer_id("tx", 10000)
        assert r.error == Errors.CONCURRENT_TRANSACTIONS
        stored = env.last_value("tx")
        assert stored is not None and stored.state == S.PREPARE_ABORT
        assert stored.producer_epoch == old.producer_epoch + 1
        assert env.markers is not None
        pc = env.markers.sent[-1]
        assert not pc.commit and pc.producer_epoch == old.producer_epoch + 1
        # The zombie is fenced.
        assert (await c.handle_end_txn("tx", old.producer_id, old.producer_epoch, True)).error == Errors.PRODUCER_FENCED
        pc.remaining.clear()
        await env.markers.on_complete(pc)
        r = await c.handle_init_producer_id("tx", 10000)
        assert (r.error, r.producer_epoch) == (Errors.NONE, old.producer_epoch + 2)
        assert await c.handle_add_partitions("tx", old.producer_id, old.producer_epoch, {("t", 0)}) == Errors.PRODUCER_FENCED

    _run(go)


def test_timed_out_transactions_are_aborted_with_an_epoch_bump() -> None:
    async def go() -> None:
        env = Env()
        c = env.coord
        r = await c.handle_init_producer_id("tx", 5000)
        other = await c.handle_init_producer_id("young", 60000)
        assert await c.handle_add_partitions("tx", r.producer_id, r.producer_epoch, {("t", 0)}) == Errors.NONE
        env.now += 5000
        assert await c.handle_add_partitions("young", other.producer_id, other.producer_epoch, {("t", 1)}) == Errors.NONE
        assert await c.abort_timed_out_transactions() == 0  # not older than its timeout yet
        env.now += 1
        assert await c.abort_timed_out_transactions() == 1
        stored = env.last_value("tx")
        assert stored is not None and stored.state == S.PREPARE_ABORT
        assert stored.producer_epoch == r.producer_epoch + 1
        assert env.sm.txns["young"].state == S.ONGOING
        assert (await c.handle_end_txn("tx", r.producer_id, r.producer_epoch, True)).error == Errors.PRODUCER_FENCED
        listed = c.list_transactions(["PrepareAbort", "Bogus"], [], -1)
        assert listed[0] == Errors.NONE and listed[1] == ["Bogus"]
        assert [t.transactional_id for t in listed[2]] == ["tx"]
        # KIP-994 duration filter: only transactions running longer than it.
        assert [t.transactional_id for t in c.list_transactions([], [], 5000)[2]] == ["tx"]
        assert [t.transactional_id for t in c.list_transactions([], [other.producer_id], -1)[2]] == ["young"]

    _run(go)


def test_expired_transactional_ids_are_removed_with_a_tombstone() -> None:
    async def go() -> None:
        env = Env(transactional_id_expiration_ms=1000)
        c = env.coord
        await c.handle_init_producer_id("idle", 500)
        await env.begin("busy", 500)
        env.now += 999
        assert await c.remove_expired_transactional_ids() == 0
        env.now += 1
        assert await c.remove_expired_transactional_ids() == 1  # Ongoing ones stay
        assert env.last_value("idle") is None  # a tombstone
        assert "idle" not in env.sm.txns and "busy" in env.sm.txns
        assert c.describe("idle")["error_code"] == Errors.TRANSACTIONAL_ID_NOT_FOUND
        assert c.describe("")["error_code"] == Errors.INVALID_REQUEST
        r = await c.handle_init_producer_id("idle", 500)
        assert r.error == Errors.NONE and r.producer_epoch == 0

    _run(go)


def test_loaded_prepared_transactions_get_their_markers_again() -> None:
    async def go() -> None:
        env = Env()
        prepared = TransactionMetadata("p", 5, producer_epoch=2, state=S.PREPARE_ABORT,
                                       topic_partitions={("t", 0)}, txn_start_timestamp=1)
        done = TransactionMetadata("d", 6, producer_epoch=0, state=S.COMPLETE_COMMIT)
        env.sm.on_loaded(1, 7, [prepared, done])
        assert env.markers is not None
        (pc,) = env.markers.sent
        assert (pc.meta, pc.commit, pc.coordinator_epoch, pc.remaining) == (prepared, False, 7, {("t", 0)})
        assert prepared.pending_state == S.COMPLETE_ABORT

    _run(go)


# ------------------------------------------------------------------------------ marker sender


@dataclass
class _Reg:
    leader: int


@dataclass
class _Node:
    id: int
    host: str
    port: int


class FakeMetadata:
    def __init__(self) -> None:
        self.leaders = {("t", 0): 1, ("t", 1): 2}

    def contains_topic(self, topic: str) -> bool:
        return topic == "t"

    def get_partition_info(self, topic: str, partition: int) -> _Reg | None:
        leader = self.leaders.get((topic, partition))
        return None if leader is None else _Reg(leader)

    def get_alive_broker_node(self, broker_id: int, listener: str) -> _Node | None:
        assert listener == "REPLICATION"
        return _Node(broker_id, "127.0.0.1", 9000 + broker_id)


class FakeClient:
    """Answers WriteTxnMarkers from a script: per call, an error code per partition, or an
    exception to raise."""

    def __init__(self, port: int, script: list[Any], calls: list[tuple[int, dict[str, Any]]]) -> None:
        self.host, self.port = "127.0.0.1", port
        self.script, self.calls = script, calls

    async def send(self, api: Any, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((self.port, body))
        step = self.script.pop(0) if self.script else 0
        if isinstance(step, Exception):
            raise step
        (marker,) = body["markers"]
        return {"markers": [{"producer_id": marker["producer_id"], "topics": [
            {"name": t["name"], "partitions": [{"partition_index": p, "error_code": step} for p in t["partition_indexes"]]}
            for t in marker["topics"]]}]}

    async def close(self) -> None:
        pass


def test_marker_sender_retries_until_every_leader_answered() -> None:
    from odradek.coordinator.transaction.transaction_marker_channel_manager import (
        TransactionMarkerChannelManager,
    )
    from odradek.network.client import ConnectionClosed

    async def go() -> None:
        calls: list[tuple[int, dict[str, Any]]] = []
        scripts = {
            9001: [Errors.NOT_LEADER_OR_FOLLOWER.value, Errors.NONE.value],
            9002: [ConnectionClosed("lost"), Errors.NONE.value],
            9003: [Errors.TRANSACTION_COORDINATOR_FENCED.value],
        }
        done: list[PendingCompletion] = []
        completed = asyncio.Event()

        async def on_complete(pc: PendingCompletion) -> None:
            done.append(pc)
            completed.set()

        md = FakeMetadata()
        mgr = TransactionMarkerChannelManager(
            metadata_cache=md, listener_name=lambda: "REPLICATION", on_complete=on_complete,
            client_factory=lambda h, p: FakeClient(p, scripts[p], calls),  # type: ignore[arg-type,return-value]
            retry_backoff_ms=1,
        )
        meta = TransactionMetadata("tx", 5, producer_epoch=2, state=S.PREPARE_COMMIT)
        pc = PendingCompletion(meta, 0, 4, True, 5, 2, {("t", 0), ("t", 1), ("deleted", 0)})
        mgr.add_txn_markers_to_send(pc)
        await asyncio.wait_for(completed.wait(), 5)
        assert done == [pc] and not pc.remaining
        sent = {(port, tuple(t["name"] for t in b["markers"][0]["topics"])) for port, b in calls}
        assert sent == {(9001, ("t",)), (9002, ("t",))}  # no marker for the deleted topic
        assert len(calls) == 4  # each leader twice
        body = calls[0][1]["markers"][0]
        assert (body["producer_id"], body["producer_epoch"], body["transaction_result"], body["coordinator_epoch"]) == (5, 2, True, 4)

        # A coordinator that was fenced gives the transaction up (no CompleteCommit).
        md.leaders = {("t", 0): 3}
        completed.clear()
        pc2 = PendingCompletion(meta, 0, 4, False, 5, 2, {("t", 0)})
        mgr.add_txn_markers_to_send(pc2)
        for _ in range(100):
            if mgr.pending("tx") is None:
                break
            await asyncio.sleep(0.01)
        assert mgr.pending("tx") is None and not completed.is_set() and pc2.remaining == {("t", 0)}
        await mgr.shutdown()

    _run(go)


def test_unload_drops_the_partitions_ids_and_their_marker_sending() -> None:
    async def go() -> None:
        env = Env()
        c = env.coord
        r = await env.begin()
        assert (await c.handle_end_txn("tx", r.producer_id, r.producer_epoch, False)).error == Errors.NONE
        assert env.markers is not None and len(env.markers.sent) == 1
        p = env.sm.partition_for("tx")
        env.sm.on_leadership_change("some-topic", p, False, 4)  # other topics are ignored
        assert "tx" in env.sm.txns
        env.sm.on_leadership_change(TRANSACTION_STATE_TOPIC, p, False, 4)
        assert "tx" not in env.sm.txns and p not in env.sm.owned
        assert env.markers.sent == []
        assert (await c.handle_init_producer_id("tx", 10000)).error == Errors.NOT_COORDINATOR
        assert c.describe("tx")["error_code"] == Errors.NOT_COORDINATOR

    _run(go)


def test_brokers_verify_with_the_coordinators_partitioning() -> None:
    # KIP-890 verification (server/add_partitions_to_txn_manager.py) must find the coordinator
    # the clients find: the same partition for every transactional id.
    from odradek.server import add_partitions_to_txn_manager

    assert add_partitions_to_txn_manager.partition_for is partition_for
