"""TransactionCoordinator: InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, DescribeTransactions and ListTransactions (Kafka's
``TransactionCoordinator``, transactions version 1).

Every change goes through the :class:`~.transaction_metadata.TransactionMetadata` state machine:
prepared (other requests for the id get CONCURRENT_TRANSACTIONS meanwhile), written to
``__transaction_state`` with acks=-1 by the :class:`~.transaction_state_manager.TransactionStateManager`,
then taken. EndTxn answers once PrepareCommit/PrepareAbort is written; the markers go out through
the :class:`~.transaction_marker_channel_manager.TransactionMarkerChannelManager`, and once every
partition has its marker CompleteCommit/CompleteAbort is written. Ongoing transactions older than
their timeout are aborted with the producer epoch bumped (the producer that owned them is fenced),
and transactional ids idle for ``transactional.id.expiration.ms`` are removed (a tombstone).
Time comes from the injected clock.

Transactions version 2 (KIP-890 part 2), per transaction as Kafka chooses it: partitions added
by a broker on a producer's first produce (AddPartitionsToTxn v5 without verify_only) and EndTxn
v5 while ``transaction.version`` 2 is finalized make it a version-2 transaction: EndTxn bumps the
producer epoch (the markers carry the bumped one) and answers the new producer id/epoch; an
exhausted epoch moves the transactional id to a new producer id once the transaction is
complete; a retried EndTxn with the epoch before the bump is recognised. Everything else is
transactions version 1, unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from odradek.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC
from odradek.coordinator.transaction.transaction_marker_channel_manager import (
    PendingCompletion,
    TransactionMarkerChannelManager,
)
from odradek.coordinator.transaction.transaction_metadata import (
    COMPLETED_STATES,
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransitionError,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from odradek.coordinator.transaction.transaction_state_manager import TransactionStateManager
from odradek.protocol.errors import Errors, KafkaError

log = logging.getLogger(__name__)

S = TransactionState


def _now_ms() -> int:
    return int(time.time() * 1000)


class ProducerIdGenerator(Protocol):
    async def generate_producer_id(self) -> int: ...


@dataclass(frozen=True)
class TransactionConfig:
    """The ``transaction.*`` settings the coordinator uses (Kafka's names and defaults)."""

    num_partitions: int = 50
    replication_factor: int = 3
    min_isr: int = 2
    segment_bytes: int = 104857600
    load_buffer_size: int = 5242880
    transactional_id_expiration_ms: int = 604800000
    max_timeout_ms: int = 900000
    abort_timed_out_interval_ms: int = 10000
    remove_expired_interval_ms: int = 3600000
    request_timeout_ms: int = 30000
    retry_backoff_ms: int = 100

    @classmethod
    def from_config(cls, config: Any) -> TransactionConfig:
        def i(key: str) -> int:
            return int(config.get(key))

        return cls(
            num_partitions=i("transaction.state.log.num.partitions"),
            replication_factor=i("transaction.state.log.replication.factor"),
            min_isr=i("transaction.state.log.min.isr"),
            segment_bytes=i("transaction.state.log.segment.bytes"),
            load_buffer_size=i("transaction.state.log.load.buffer.size"),
            transactional_id_expiration_ms=i("transactional.id.expiration.ms"),
            max_timeout_ms=i("transaction.max.timeout.ms"),
            abort_timed_out_interval_ms=i("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
            remove_expired_interval_ms=i("transaction.remove.expired.transaction.cleanup.interval.ms"),
            request_timeout_ms=i("request.timeout.ms"),
        )


class InitResult(NamedTuple):
    error: Errors
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class EndTxnResult(NamedTuple):
    """EndTxn's answer; the producer id/epoch (EndTxn v5) the producer continues with."""

    error: Errors
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class TransactionCoordinator:
    def __init__(
        self,
        *,
        config: TransactionConfig,
        state_manager: TransactionStateManager,
        producer_ids: ProducerIdGenerator,
        markers: Callable[[Callable[[PendingCompletion], Awaitable[None]]], TransactionMarkerChannelManager],
        clock_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.config = config
        self.state = state_manager
        self.producer_ids = producer_ids
        self.clock_ms = clock_ms
        self.markers = markers(self._complete)
        self.state.on_loaded = self._on_loaded
        self.state.on_unloaded = self.markers.remove_markers_for_txn_partition
        self._tasks: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------------ lifecycle

    def startup(self) -> None:
        loop = asyncio.get_running_loop()
        for name, interval, fn in (
            ("transaction-abort", self.config.abort_timed_out_interval_ms, self.abort_timed_out_transactions),
            ("transactional-id-expiration", self.config.remove_expired_interval_ms,
             self.remove_expired_transactional_ids),
        ):
            if 0 < interval < 2**62:
                self._tasks.append(loop.create_task(self._every(interval, fn), name=name))

    async def _every(self, interval_ms: int, fn: Callable[[], Awaitable[int]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000.0)
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("Transaction coordinator background task failed")

    async def shutdown(self) -> None:
        for t in self._tasks:
            t.cancel()
        self._tasks.clear()
        self.state.shutdown()
        await self.markers.shutdown()

    def _validate_timeout(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.config.max_timeout_ms

    # ------------------------------------------------------------------------ InitProducerId

    async def handle_init_producer_id(
        self,
        transactional_id: str,
        transaction_timeout_ms: int,
        expected_producer_id: int = NO_PRODUCER_ID,
        expected_producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> InitResult:
        if not transactional_id:
            return InitResult(Errors.INVALID_REQUEST)
        if not self._validate_timeout(transaction_timeout_ms):
            return InitResult(Errors.INVALID_TRANSACTION_TIMEOUT)
        expected: tuple[int, int] | None = None
        if expected_producer_id != NO_PRODUCER_ID or expected_producer_epoch != NO_PRODUCER_EPOCH:
            expected = (expected_producer_id, expected_producer_epoch)
        new_pid: int | None = None
        for _ in range(3):  # a producer id is fetched (await) at most twice
            err, cepoch, meta = self.state.get(transactional_id)
            if err != Errors.NONE:
                return InitResult(err)
            if meta is None:
                if new_pid is None:
                    try:
                        new_pid = await self.producer_ids.generate_producer_id()
                    except KafkaError as e:
                        return InitResult(e.code)
                    continue
                meta = self.state.put_if_absent(TransactionMetadata(
                    transactional_id, new_pid, txn_timeout_ms=transaction_timeout_ms,
                    txn_last_update_timestamp=self.clock_ms(),
                ))
                new_pid = None
            decision = self._prepare_init(meta, transaction_timeout_ms, expected, new_pid)
            if decision == "need-pid":
                try:
                    new_pid = await self.producer_ids.generate_producer_id()
                except KafkaError as e:
                    return InitResult(e.code)
                continue
            if isinstance(decision, Errors):
                return InitResult(decision)
            assert isinstance(decision, TxnTransitMetadata)
            if decision.state == S.PREPARE_ABORT:
                # An Ongoing transaction: aborted with the epoch bumped; the producer retries
                # (and its retry bumps the epoch again, so the old producer stays fenced).
                log.info(
                    "Transactional id %s initialised again while its transaction is ongoing: "
                    "aborting it (producer id %d, epoch %d -> %d)",
                    transactional_id, meta.producer_id, meta.producer_epoch, decision.producer_epoch,
                )
                err = await self._write_prepare(meta, cepoch, decision, commit=False)
                return InitResult(err if err != Errors.NONE else Errors.CONCURRENT_TRANSACTIONS)
            err = await self.state.append(meta, cepoch, decision)
            if err != Errors.NONE:
                return InitResult(err)
            log.debug("Transactional id %s: producer id %d, epoch %d", transactional_id,
                      decision.producer_id, decision.producer_epoch)
            return InitResult(Errors.NONE, decision.producer_id, decision.producer_epoch)
        return InitResult(Errors.CONCURRENT_TRANSACTIONS)

    def _prepare_init(
        self,
        meta: TransactionMetadata,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        new_pid: int | None,
    ) -> TxnTransitMetadata | Errors | str:
        if meta.pending_transition_in_progress:
            return Errors.CONCURRENT_TRANSACTIONS
        if expected is not None and not (
            meta.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == meta.producer_id
            or (expected[0] == meta.last_producer_id and is_epoch_exhausted(expected[1]))
        ):
            return Errors.PRODUCER_FENCED
        now = self.clock_ms()
        if meta.state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
            return Errors.CONCURRENT_TRANSACTIONS
        if meta.state in COMPLETED_STATES:
            if meta.is_producer_epoch_exhausted and (expected is None or expected[1] == meta.producer_epoch):
                if new_pid is None:
                    return "need-pid"
                return meta.prepare_producer_id_rotation(new_pid, timeout_ms, now, expected is not None)
            t = meta.prepare_increment_producer_epoch(timeout_ms, expected[1] if expected else None, now)
            return Errors.PRODUCER_FENCED if t is None else t
        if meta.state == S.ONGOING:
            return meta.prepare_fence_producer_epoch_abort(now)
        log.error("Transactional id %s is in state %s: not expected here", meta.transactional_id,
                  meta.state.state_name)
        return Errors.UNKNOWN_SERVER_ERROR

    # ------------------------------------------------------------------------ AddPartitionsToTxn

    def _producers_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[Errors, int, TransactionMetadata | None]:
        """(error, coordinator epoch, metadata) of the transactional id, the error NONE only if
        the producer (id and epoch) is its current one."""
        if not transactional_id:
            return Errors.INVALID_REQUEST, -1, None
        err, cepoch, meta = self.state.get(transactional_id)
        if err != Errors.NONE:
            return err, cepoch, meta
        if meta is None or meta.producer_id != producer_id:
            return Errors.INVALID_PRODUCER_ID_MAPPING, cepoch, meta
        if meta.producer_epoch != producer_epoch:
            return Errors.PRODUCER_FENCED, cepoch, meta
        return Errors.NONE, cepoch, meta

    async def handle_add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: set[TopicPartition],
        client_transaction_version: int = 0,
    ) -> Errors:
        """AddPartitionsToTxn (and AddOffsetsToTxn): one error for all the partitions.
        ``client_transaction_version`` 2: added by a broker for a transactions-version-2 producer."""
        err, cepoch, meta = self._producers_txn(transactional_id, producer_id, producer_epoch)
        if err != Errors.NONE:
            return err
        assert meta is not None
        if meta.pending_transition_in_progress or meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return Errors.CONCURRENT_TRANSACTIONS
        if meta.state == S.ONGOING and partitions <= meta.topic_partitions:
            return Errors.NONE
        transit = meta.prepare_add_partitions(partitions, self.clock_ms(), client_transaction_version)
        return await self.state.append(meta, cepoch, transit)

    def handle_verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        abortable: bool,
    ) -> dict[TopicPartition, Errors]:
        """KIP-890 verification (AddPartitionsToTxn v4+ with verify_only, sent by brokers):
        whether each partition is part of the ongoing transaction. A partition that is not gets
        TRANSACTION_ABORTABLE (INVALID_TXN_STATE for a request older than v5)."""
        err, _, meta = self._producers_txn(transactional_id, producer_id, producer_epoch)
        if err == Errors.NONE and meta is not None and meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            err = Errors.CONCURRENT_TRANSACTIONS
        if err != Errors.NONE or meta is None:
            return dict.fromkeys(partitions, err)
        missing = Errors.TRANSACTION_ABORTABLE if abortable else Errors.INVALID_TXN_STATE
        return {tp: Errors.NONE if tp in meta.topic_partitions else missing for tp in partitions}

    # ------------------------------------------------------------------------ EndTxn

    async def handle_end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        client_transaction_version: int = 0,
    ) -> EndTxnResult:
        """EndTxn; ``client_transaction_version`` 2 (EndTxn v5 with transaction.version 2
        finalized) bumps the epoch of an ongoing transaction, as Kafka's endTransaction."""
        if not transactional_id:
            return EndTxnResult(Errors.INVALID_REQUEST)
        tv2 = client_transaction_version >= 2
        next_pid = NO_PRODUCER_ID
        for _ in range(2):  # a new producer id is fetched (await) at most once
            err, cepoch, meta = self.state.get(transactional_id)
            if err != Errors.NONE:
                return EndTxnResult(err)
            if meta is None:
                return EndTxnResult(Errors.INVALID_PRODUCER_ID_MAPPING)
            err = self._check_end_txn(meta, producer_id, producer_epoch)
            if err != Errors.NONE:
                return EndTxnResult(err)
            state = meta.state
            if state == S.ONGOING:
                if tv2 and meta.is_producer_epoch_exhausted and next_pid == NO_PRODUCER_ID:
                    try:
                        next_pid = await self.producer_ids.generate_producer_id()
                    except KafkaError as e:
                        return EndTxnResult(e.code)
                    continue  # the state may have moved meanwhile: check again
                transit = meta.prepare_abort_or_commit(
                    commit, self.clock_ms(), client_transaction_version, next_pid
                )
                err = await self._write_prepare(meta, cepoch, transit, commit)
                if err != Errors.NONE:
                    return EndTxnResult(err)
                if transit.next_producer_id >= 0:
                    log.info(
                        "Transactional id %s: epoch of producer id %d exhausted; it continues as "
                        "producer id %d", transactional_id, transit.producer_id, transit.next_producer_id,
                    )
                    return EndTxnResult(Errors.NONE, transit.next_producer_id, 0)
                return EndTxnResult(Errors.NONE, transit.producer_id, transit.producer_epoch)
            # A retried EndTxn: already done (or being done) the same way is fine.
            if state == (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
                return EndTxnResult(Errors.NONE, meta.producer_id, meta.producer_epoch)
            if state == (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
                return EndTxnResult(Errors.CONCURRENT_TRANSACTIONS)
            log.info(
                "Transactional id %s: %s requested in state %s (producer id %d, epoch %d): "
                "INVALID_TXN_STATE", transactional_id, "commit" if commit else "abort",
                state.state_name, producer_id, producer_epoch,
            )
            return EndTxnResult(Errors.INVALID_TXN_STATE)
        return EndTxnResult(Errors.CONCURRENT_TRANSACTIONS)

    @staticmethod
    def _check_end_txn(meta: TransactionMetadata, producer_id: int, producer_epoch: int) -> Errors:
        """Kafka's checks of an EndTxn against the state: with a transactions-version-2
        transaction the same epoch means the next EndTxn, and the epoch before the bump (or,
        after an overflow, the previous producer id at the last epoch) a retry of the last one."""
        v2 = meta.supports_epoch_bump
        retry_on_overflow = (
            v2 and meta.last_producer_id == producer_id and producer_epoch == MAX_PRODUCER_EPOCH - 1
            and meta.producer_epoch == 0
        )
        retry_on_bump = v2 and meta.producer_epoch == producer_epoch + 1
        if not v2:
            valid = producer_epoch == meta.producer_epoch
        elif meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            valid = retry_on_bump
        elif meta.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            valid = retry_on_bump or retry_on_overflow
        else:
            valid = producer_epoch == meta.producer_epoch
        if meta.producer_id != producer_id and not retry_on_overflow:
            return Errors.INVALID_PRODUCER_ID_MAPPING
        if not valid:
            return Errors.PRODUCER_FENCED
        if meta.pending_transition_in_progress:
            return Errors.CONCURRENT_TRANSACTIONS
        return Errors.NONE

    async def _write_prepare(
        self, meta: TransactionMetadata, cepoch: int, transit: TxnTransitMetadata, commit: bool
    ) -> Errors:
        """Write PrepareCommit/PrepareAbort; once written, send the markers."""
        err = await self.state.append(meta, cepoch, transit)
        if err != Errors.NONE:
            return err
        self._send_markers(meta, cepoch, commit)
        return Errors.NONE

    def _send_markers(self, meta: TransactionMetadata, cepoch: int, commit: bool) -> None:
        try:
            complete = meta.prepare_complete(self.clock_ms())
        except IllegalTransitionError:
            log.exception("Transactional id %s cannot complete", meta.transactional_id)
            return
        self.markers.add_txn_markers_to_send(PendingCompletion(
            meta=meta,
            txn_partition=self.state.partition_for(meta.transactional_id),
            coordinator_epoch=cepoch,
            commit=commit,
            producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            remaining=set(meta.topic_partitions),
            transit=complete,
        ))

    async def _complete(self, pc: PendingCompletion) -> None:
        """Every marker is written: CompleteCommit/CompleteAbort, retried while this node still
        coordinates the transaction with the same epoch."""
        meta, tid = pc.meta, pc.meta.transactional_id
        transit: TxnTransitMetadata = pc.transit
        backoff_ms = self.config.retry_backoff_ms
        while True:
            if self.state.txns.get(tid) is not meta or self.state.coordinator_epoch(tid) != pc.coordinator_epoch:
                return
            if meta.pending_state is None:
                if meta.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    return
                transit = meta.prepare_complete(self.clock_ms())
            err = await self.state.append(meta, pc.coordinator_epoch, transit)
            if err == Errors.NONE:
                log.debug("Transactional id %s: %s (producer id %d, epoch %d)", tid,
                          transit.state.state_name, meta.producer_id, meta.producer_epoch)
                return
            if err == Errors.NOT_COORDINATOR:
                return
            await asyncio.sleep(backoff_ms / 1000.0)
            backoff_ms = min(backoff_ms * 2, 5000)

    def _on_loaded(self, partition: int, cepoch: int, metas: list[TransactionMetadata]) -> None:
        """A loaded partition: transactions found prepared get their markers sent again."""
        for meta in metas:
            if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                commit = meta.state == S.PREPARE_COMMIT
                log.info(
                    "Transactional id %s was in %s when %s-%d was loaded: sending its markers again",
                    meta.transactional_id, meta.state.state_name, TRANSACTION_STATE_TOPIC, partition,
                )
                self._send_markers(meta, cepoch, commit)

    # ------------------------------------------------------------------------ timeouts, expiry

    async def abort_timed_out_transactions(self) -> int:
        """Abort the Ongoing transactions past their timeout, bumping the epoch (the producer
        is fenced). Returns how many were aborted."""
        now = self.clock_ms()
        aborted = 0
        for meta in self.state.timed_out_transactions(now):
            tid = meta.transactional_id
            err, cepoch, current = self.state.get(tid)
            if err != Errors.NONE or current is not meta or meta.pending_state is not None:
                continue
            log.info(
                "Aborting transaction of transactional id %s (producer id %d, epoch %d): it "
                "started %d ms ago, past its timeout of %d ms",
                tid, meta.producer_id, meta.producer_epoch, now - meta.txn_start_timestamp,
                meta.txn_timeout_ms,
            )
            transit = meta.prepare_fence_producer_epoch_abort(now)
            err = await self._write_prepare(meta, cepoch, transit, commit=False)
            if err == Errors.NONE:
                aborted += 1
            else:
                log.warning("Aborting the timed out transaction of %s failed: %s", tid, err.name)
        return aborted

    async def remove_expired_transactional_ids(self) -> int:
        now = self.clock_ms()
        removed = 0
        for meta in self.state.expired_transactional_ids(now, self.config.transactional_id_expiration_ms):
            tid = meta.transactional_id
            err, cepoch, current = self.state.get(tid)
            if err != Errors.NONE or current is not meta or meta.pending_state is not None:
                continue
            err = await self.state.append(meta, cepoch, meta.prepare_dead(now))
            if err == Errors.NONE:
                removed += 1
                log.info("Transactional id %s expired (idle for %d ms): removed", tid,
                         now - meta.txn_last_update_timestamp)
        return removed

    # ------------------------------------------------------------------------ admin

    def describe(self, transactional_id: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "error_code": Errors.NONE, "transactional_id": transactional_id,
            "transaction_state": "", "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
            "producer_id": -1, "producer_epoch": -1, "topics": [],
        }
        err, _, meta = self.state.get(transactional_id) if transactional_id else (Errors.INVALID_REQUEST, -1, None)
        if err == Errors.NONE and (meta is None or meta.state == S.DEAD):
            err = Errors.TRANSACTIONAL_ID_NOT_FOUND
        if err != Errors.NONE or meta is None:
            out["error_code"] = err
            return out
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(meta.topic_partitions):
            by_topic.setdefault(t, []).append(p)
        out.update(
            transaction_state=meta.state.state_name,
            transaction_timeout_ms=meta.txn_timeout_ms,
            transaction_start_time_ms=meta.txn_start_timestamp,
            producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        )
        return out

    def list_transactions(
        self, state_filters: list[str], producer_id_filters: list[int], duration_filter_ms: int = -1
    ) -> tuple[Errors, list[str], list[TransactionMetadata]]:
        """(error, unknown state filters, transactions) as ListTransactions answers."""
        if self.state.is_loading():
            return Errors.COORDINATOR_LOAD_IN_PROGRESS, [], []
        states: set[TransactionState] = set()
        unknown: list[str] = []
        for name in state_filters:
            s = TransactionState.from_name(name)
            if s is None:
                unknown.append(name)
            else:
                states.add(s)
        pids = set(producer_id_filters)
        now = self.clock_ms()
        out = []
        for meta in self.state.owned_transactions():
            if meta.state == S.DEAD:
                continue
            if pids and meta.producer_id not in pids:
                continue
            if state_filters and meta.state not in states:
                continue
            if duration_filter_ms >= 0 and now - meta.txn_start_timestamp <= duration_filter_ms:
                continue
            out.append(meta)
        return Errors.NONE, unknown, out

