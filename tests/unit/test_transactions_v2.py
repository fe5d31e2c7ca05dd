"""Transactions version 2 (KIP-890 part 2) in the transaction coordinator and its log: the epoch
bump per EndTxn, markers with the bumped epoch, retries recognised, producer id rotation when the
epoch overflows, the ClientTransactionVersion / NextProducerId fields of ``__transaction_state``
values, and transactions version 1 unchanged beside it."""

from __future__ import annotations

from pathlib import Path

from test_transaction_coordinator import Env, _run

from odradek.coordinator.transaction.transaction_log import (
    read_value,
    value_to_bytes,
    value_version_for,
)
from odradek.coordinator.transaction.transaction_metadata import (
    MAX_PRODUCER_EPOCH,
    TransactionMetadata,
    TransactionState,
)
from odradek.log.append_origin import AppendOrigin
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.protocol.errors import Errors
from odradek.records.builder import build_batch
from odradek.records.control_batch import build_end_txn_marker

S = TransactionState


async def _complete_markers(env: Env) -> None:
    assert env.markers is not None
    pc = env.markers.sent[-1]
    pc.remaining.clear()
    await env.markers.on_complete(pc)


async def _v2_producer() -> tuple[Env, int, int]:
    """A coordinator at transactions version 2 and the producer id and epoch of "tx"."""
    env = Env()
    env.sm.transaction_version = lambda: 2
    r = await env.coord.handle_init_producer_id("tx", 10000)
    return env, r.producer_id, r.producer_epoch


def test_end_txn_v2_bumps_the_epoch_and_answers_it() -> None:
    async def go() -> None:
        env, pid, ep = await _v2_producer()
        c = env.coord
        # The broker adds the partition on the first produce (transactions version 2).
        assert await c.handle_add_partitions("tx", pid, ep, {("t", 0)}, 2) == Errors.NONE
        stored = env.last_value("tx")
        assert stored is not None and stored.client_transaction_version == 2
        res = await c.handle_end_txn("tx", pid, ep, True, 2)
        assert res == (Errors.NONE, pid, ep + 1)
        stored = env.last_value("tx")
        assert stored is not None and (stored.state, stored.producer_epoch) == (S.PREPARE_COMMIT, ep + 1)
        assert env.markers is not None
        pc = env.markers.sent[-1]
        assert (pc.producer_id, pc.producer_epoch, pc.commit) == (pid, ep + 1, True)  # bumped markers
        # A retry with the epoch before the bump while the markers go out: wait.
        assert (await c.handle_end_txn("tx", pid, ep, True, 2)).error == Errors.CONCURRENT_TRANSACTIONS
        await _complete_markers(env)
        stored = env.last_value("tx")
        assert stored is not None and (stored.state, stored.producer_epoch) == (S.COMPLETE_COMMIT, ep + 1)
        # Retried once complete: the same answer; the other outcome is INVALID_TXN_STATE.
        assert await c.handle_end_txn("tx", pid, ep, True, 2) == (Errors.NONE, pid, ep + 1)
        assert (await c.handle_end_txn("tx", pid, ep, False, 2)).error == Errors.INVALID_TXN_STATE
        # The new epoch with nothing begun is not a retry: fenced, as Kafka (no Ongoing state).
        assert (await c.handle_end_txn("tx", pid, ep + 1, True, 2)).error == Errors.PRODUCER_FENCED
        # An epoch two behind is a zombie.
        assert (await c.handle_end_txn("tx", pid, ep - 1, True, 2)).error == Errors.PRODUCER_FENCED
        # The next transaction uses the bumped epoch; its abort bumps again.
        assert await c.handle_add_partitions("tx", pid, ep, {("t", 0)}, 2) == Errors.PRODUCER_FENCED
        assert await c.handle_add_partitions("tx", pid, ep + 1, {("t", 0)}, 2) == Errors.NONE
        assert await c.handle_end_txn("tx", pid, ep + 1, False, 2) == (Errors.NONE, pid, ep + 2)
        assert not env.markers.sent[-1].commit and env.markers.sent[-1].producer_epoch == ep + 2
        await _complete_markers(env)
        assert c.describe("tx")["producer_epoch"] == ep + 2
        # The log values are version 1 (transaction.version >= 1) with ClientTransactionVersion 2.
        raw = [v for _, _, v in env.rm.appended if v is not None][-1]
        assert raw[:2] == b"\x00\x01"

    _run(go)


def test_transactions_version_1_unchanged_beside_version_2() -> None:
    async def go() -> None:
        env = Env()
        c = env.coord
        r = await c.handle_init_producer_id("tx", 10000)
        pid, ep = r.producer_id, r.producer_epoch
        assert await c.handle_add_partitions("tx", pid, ep, {("t", 0)}) == Errors.NONE
        # EndTxn v0-v4 (or v5 without transaction.version 2): no bump.
        assert await c.handle_end_txn("tx", pid, ep, True, 0) == (Errors.NONE, pid, ep)
        assert env.markers is not None and env.markers.sent[-1].producer_epoch == ep
        await _complete_markers(env)
        assert await c.handle_end_txn("tx", pid, ep, True, 0) == (Errors.NONE, pid, ep)
        assert (await c.handle_end_txn("tx", pid, ep - 1, True, 0)).error == Errors.PRODUCER_FENCED
        # Values stay version 0 at transaction.version 0.
        raw = [v for _, _, v in env.rm.appended if v is not None][-1]
        assert raw[:2] == b"\x00\x00"

    _run(go)


def test_exhausted_epoch_moves_to_the_next_producer_id_at_end_txn() -> None:
    async def go() -> None:
        env, pid, _ = await _v2_producer()
        c = env.coord
        meta = env.sm.txns["tx"]
        last = MAX_PRODUCER_EPOCH - 1  # the last epoch a producer may use
        meta.producer_epoch = last
        assert await c.handle_add_partitions("tx", pid, last, {("t", 0)}, 2) == Errors.NONE
        res = await c.handle_end_txn("tx", pid, last, True, 2)
        assert res.error == Errors.NONE and res.producer_id not in (pid, -1) and res.producer_epoch == 0
        new_pid = res.producer_id
        stored = env.last_value("tx")
        assert stored is not None and stored.state == S.PREPARE_COMMIT
        assert (stored.producer_id, stored.producer_epoch, stored.next_producer_id) == (pid, MAX_PRODUCER_EPOCH, new_pid)
        # The markers still go out under the old producer id, with the last epoch.
        assert env.markers is not None
        assert (env.markers.sent[-1].producer_id, env.markers.sent[-1].producer_epoch) == (pid, MAX_PRODUCER_EPOCH)
        await _complete_markers(env)
        stored = env.last_value("tx")
        assert stored is not None and stored.state == S.COMPLETE_COMMIT
        assert (stored.producer_id, stored.producer_epoch, stored.last_producer_id) == (new_pid, 0, pid)
        # A retry from the old producer id at its last epoch is recognised: the new id again.
        assert await c.handle_end_txn("tx", pid, last, True, 2) == (Errors.NONE, new_pid, 0)
        # The new producer id starts its transaction at epoch 0.
        assert await c.handle_add_partitions("tx", new_pid, 0, {("t", 0)}, 2) == Errors.NONE
        assert await c.handle_end_txn("tx", new_pid, 0, False, 2) == (Errors.NONE, new_pid, 1)

    _run(go)


def test_a_fenced_producer_is_not_taken_for_a_retry_of_the_fencing_abort() -> None:
    async def go() -> None:
        env, pid, ep = await _v2_producer()
        c = env.coord
        assert await c.handle_add_partitions("tx", pid, ep, {("t", 0)}, 2) == Errors.NONE
        env.now += 20000  # past the transaction's timeout: aborted with the epoch bumped once
        assert await c.abort_timed_out_transactions() == 1
        await _complete_markers(env)
        assert c.describe("tx")["producer_epoch"] == ep + 1
        # The old producer's EndTxn (epoch + 1 == the state's) is no TV2 retry: it is fenced.
        assert (await c.handle_end_txn("tx", pid, ep, True, 2)).error == Errors.PRODUCER_FENCED
        assert (await c.handle_end_txn("tx", pid, ep, False, 2)).error == Errors.PRODUCER_FENCED

    _run(go)


def test_log_value_carries_the_transactions_version_2_fields() -> None:
    meta = TransactionMetadata("tx", 5, producer_epoch=3, txn_timeout_ms=1000, state=S.ONGOING,
                               topic_partitions={("t", 0)}, txn_start_timestamp=1, txn_last_update_timestamp=1)
    t = meta.prepare_abort_or_commit(True, 7, client_transaction_version=2)
    assert (t.producer_epoch, t.last_producer_epoch, t.next_producer_id) == (4, 3, -1)
    assert value_version_for(0) == 0 and value_version_for(1) == 1 and value_version_for(2) == 1
    v = read_value(value_to_bytes(t, 1))
    assert (v.metadata.client_transaction_version, v.client_transaction_version) == (2, 2)
    assert v.metadata.producer_epoch == 4 and v.metadata.state == S.PREPARE_COMMIT
    # Version 0 has no place for them: read back as version 0 defaults.
    v0 = read_value(value_to_bytes(t, 0))
    assert v0.metadata.client_transaction_version == 0 and v0.next_producer_id == -1
    meta.abort_transition()
    exhausted = TransactionMetadata("tx", 5, producer_epoch=MAX_PRODUCER_EPOCH - 1, state=S.ONGOING,
                                    topic_partitions={("t", 0)}, txn_start_timestamp=1)
    t2 = exhausted.prepare_abort_or_commit(False, 7, client_transaction_version=2, next_producer_id=9)
    v2 = read_value(value_to_bytes(t2, 1))
    assert (v2.metadata.producer_epoch, v2.next_producer_id) == (MAX_PRODUCER_EPOCH, 9)


def test_partition_takes_markers_with_the_bumped_epoch(tmp_path: Path) -> None:
    """Kafka's ProducerAppendInfo rule (a marker's epoch may not be older than the producer's)
    lets a transactions-version-2 marker, one epoch above the data, complete the transaction;
    the next transaction then starts at the bumped epoch with sequence 0."""
    log = Log.load(str(tmp_path), LogConfig(), now_ms=0)  # type: ignore[arg-type]
    pid = 77

    def data(seq: int, epoch: int) -> bytearray:
        return bytearray(build_batch([(None, b"v", [], 1000)], producer_id=pid, producer_epoch=epoch,
                                     base_sequence=seq, is_transactional=True))

    log.append_as_leader(data(0, 4), 0, 1000)
    log.append_as_leader(data(1, 4), 0, 1000)
    log.append_as_leader(build_end_txn_marker(pid, 5, 0, False, 2000), 0, 2000, AppendOrigin.COORDINATOR)
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == log.log_end_offset
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in log.collect_aborted_transactions(0, 10)] == [
        (pid, 0, 2)]
    (info,) = log.active_producers()
    assert (info.producer_epoch, info.current_txn_start_offset) == (5, -1)
    log.append_as_leader(data(0, 5), 0, 1000)  # the next transaction: bumped epoch, sequence 0
    log.append_as_leader(build_end_txn_marker(pid, 6, 0, True, 2000), 0, 2000, AppendOrigin.COORDINATOR)
    assert log.active_producers()[0].producer_epoch == 6


def test_feature_control_manager_finalizes_the_bootstrap_transaction_version() -> None:
    from odradek.controller.feature_control_manager import (
        SUPPORTED_FEATURES,
        FeatureControlManager,
        registration_features,
    )
    from odradek.metadata.image import EMPTY_IMAGE

    assert SUPPORTED_FEATURES["transaction.version"] == (0, 2)
    fcm = FeatureControlManager(EMPTY_IMAGE, bootstrap_metadata_version=21,
                                bootstrap_features={"transaction.version": 2, "kraft.version": 1})
    assert fcm.bootstrap_records() == [
        ("FeatureLevelRecord", {"name": "metadata.version", "feature_level": 21}),
        ("FeatureLevelRecord", {"name": "transaction.version", "feature_level": 2}),
    ]
    # Level 0 (the default) writes nothing; a broker registers with the whole supported range.
    assert len(FeatureControlManager(EMPTY_IMAGE, bootstrap_features={"transaction.version": 0})
               .bootstrap_records()) == 1
    assert registration_features({"transaction.version": 2})["transaction.version"] == (0, 2)
