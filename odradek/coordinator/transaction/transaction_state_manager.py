"""TransactionStateManager: the transactional ids of the ``__transaction_state`` partitions this
node leads, and their life on the log (Kafka's ``TransactionStateManager``).

* Ownership: a transactional id lives in partition ``abs(hashCode(id)) % partitions``; the
  coordinator epoch of a partition is its leader epoch here.
* Immigration: when this node becomes leader of a partition (a ReplicaManager leadership
  listener), the partition is read from its start to its end and replayed, the last record per
  transactional id winning and tombstones deleting. Meanwhile requests for its ids get
  COORDINATOR_LOAD_IN_PROGRESS. Once loaded, ``on_loaded`` hears of the partition's transactions
  (the coordinator sends the markers of those found in PrepareCommit/PrepareAbort again).
* Emigration: when leadership is lost the partition's ids are dropped (NOT_COORDINATOR from then
  on, and ``on_unloaded`` stops their marker sending).
* Writes: :meth:`append` writes one prepared transition with acks=-1 and completes it in memory
  only once it is acknowledged (and only if the partition is still led with the same epoch).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from odradek.coordinator.group.group_metadata_manager import ReplicaManagerLike
from odradek.coordinator.internal_topic import CoordinatorPartitions, read_to_log_end
from odradek.coordinator.internal_topic import append_error as coordinator_append_error
from odradek.coordinator.transaction.transaction_log import (
    TRANSACTION_STATE_TOPIC,
    key_to_bytes,
    read_key,
    read_value,
    value_to_bytes,
    value_version_for,
)
from odradek.coordinator.transaction.transaction_metadata import (
    COMPLETED_STATES,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from odradek.java_order import java_abs, java_string_hash
from odradek.protocol.errors import Errors
from odradek.protocol.schema import SchemaError
from odradek.records.batch import CONTROL_FLAG_MASK
from odradek.records.builder import build_batch
from odradek.records.errors import RecordError
from odradek.records.records import iter_batch_records

log = logging.getLogger(__name__)


def partition_for(transactional_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % partitions``, as for groups."""
    return java_abs(java_string_hash(transactional_id)) % num_partitions


def append_error(code: Errors) -> Errors:
    """A failed ``__transaction_state`` append as the client is told (Kafka's mapping)."""
    return coordinator_append_error(code, Errors.UNKNOWN_SERVER_ERROR)


class TransactionStateManager(CoordinatorPartitions[tuple[dict[str, TxnTransitMetadata], int]]):
    def __init__(
        self,
        *,
        replica_manager: ReplicaManagerLike,
        num_partitions: int,
        clock_ms: Callable[[], int],
        append_timeout_ms: int = 30000,
        load_buffer_size: int = 5 * 1024 * 1024,
        transaction_version: Callable[[], int] = lambda: 0,
    ) -> None:
        super().__init__(TRANSACTION_STATE_TOPIC, "transactional ids", clock_ms)
        self.replica_manager = replica_manager
        # The finalized transaction.version (the log value version follows it, as Kafka's).
        self.transaction_version = transaction_version
        self.num_partitions = num_partitions
        self.append_timeout_ms = append_timeout_ms
        self.load_buffer_size = max(load_buffer_size, 64 * 1024)
        self.txns: dict[str, TransactionMetadata] = {}
        # Set by the coordinator.
        self.on_loaded: Callable[[int, int, list[TransactionMetadata]], None] = lambda p, e, t: None
        self.on_unloaded: Callable[[int], None] = lambda p: None

    # ------------------------------------------------------------------------ ownership

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def partition_error(self, transactional_id: str) -> tuple[Errors, int]:
        """(NONE, coordinator epoch) if this node serves the id now, else (error, -1)."""
        p = self.partition_for(transactional_id)
        if p in self.loading:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS, -1
        epoch = self.owned.get(p)
        if epoch is None:
            return Errors.NOT_COORDINATOR, -1
        return Errors.NONE, epoch

    def get(self, transactional_id: str) -> tuple[Errors, int, TransactionMetadata | None]:
        err, epoch = self.partition_error(transactional_id)
        if err != Errors.NONE:
            return err, -1, None
        return Errors.NONE, epoch, self.txns.get(transactional_id)

    def put_if_absent(self, meta: TransactionMetadata) -> TransactionMetadata:
        return self.txns.setdefault(meta.transactional_id, meta)

    def is_loading(self) -> bool:
        return bool(self.loading)

    def owned_transactions(self) -> list[TransactionMetadata]:
        return [t for tid, t in self.txns.items() if self.partition_for(tid) in self.owned]

    def coordinator_epoch(self, transactional_id: str) -> int | None:
        return self.owned.get(self.partition_for(transactional_id))

    # ------------------------------------------------------------------------ writes

    async def append(
        self, meta: TransactionMetadata, coordinator_epoch: int, transit: TxnTransitMetadata
    ) -> Errors:
        """Write ``transit`` (prepared on ``meta``); on success ``meta`` takes it, on failure
        the pending transition is dropped. Returns the error for the client."""
        tid = meta.transactional_id
        p = self.partition_for(tid)
        value = (
            None
            if transit.state == TransactionState.DEAD
            else value_to_bytes(transit, value_version_for(self.transaction_version()))
        )
        batch = bytearray(build_batch([(key_to_bytes(tid), value, [], self.clock_ms())]))
        try:
            result = self.replica_manager.append_records(
                self.append_timeout_ms, -1, {(TRANSACTION_STATE_TOPIC, p): batch}
            )
            if not isinstance(result, dict):
                result = await result
            status = result[(TRANSACTION_STATE_TOPIC, p)]
            err = Errors(status.error)
        except asyncio.CancelledError:
            meta.abort_transition()
            raise
        except Exception:
            log.exception("Appending the state of transactional id %s to %s-%d failed", tid,
                          TRANSACTION_STATE_TOPIC, p)
            err = Errors.UNKNOWN_SERVER_ERROR
        if err != Errors.NONE:
            log.warning(
                "Writing %s of transactional id %s to %s-%d failed: %s",
                transit.state.state_name, tid, TRANSACTION_STATE_TOPIC, p, err.name,
            )
            meta.abort_transition()
            return append_error(err)
        if self.owned.get(p) != coordinator_epoch or self.txns.get(tid) is not meta:
            # Emigrated (or re-immigrated with a newer epoch) meanwhile: no longer ours.
            meta.abort_transition()
            return Errors.NOT_COORDINATOR
        meta.complete_transition(transit)
        if transit.state == TransactionState.DEAD:
            self.txns.pop(tid, None)
        return Errors.NONE

    # ------------------------------------------------------------------------ immigration/emigration

    def _install(
        self, partition: int, epoch: int, replayed: tuple[dict[str, TxnTransitMetadata], int], started_ms: int
    ) -> None:
        loaded, n = replayed
        metas = []
        for tid, transit in loaded.items():
            meta = TransactionMetadata.from_transit(tid, transit)
            self.txns[tid] = meta
            metas.append(meta)
        del self.loading[partition]
        self.owned[partition] = epoch
        pending = sum(1 for m in metas if m.state not in COMPLETED_STATES)
        log.log(
            logging.INFO if metas else logging.DEBUG,
            "Loaded %s-%d (coordinator epoch %d): %d record(s), %d transactional id(s), %d "
            "transaction(s) not complete, in %d ms",
            TRANSACTION_STATE_TOPIC, partition, epoch, n, len(metas), pending,
            self.clock_ms() - started_ms,
        )
        self.on_loaded(partition, epoch, metas)

    async def _replay(self, partition: int) -> tuple[dict[str, TxnTransitMetadata], int]:
        part: Any = self.replica_manager.partitions.get((TRANSACTION_STATE_TOPIC, partition))
        out: dict[str, TxnTransitMetadata] = {}
        count = 0
        if part is None or part.log is None:
            return out, count
        async for data, h in read_to_log_end(part.log, self.load_buffer_size):
            if h.attributes & CONTROL_FLAG_MASK:
                continue
            try:
                records = list(iter_batch_records(memoryview(data)[h.position : h.position + h.size]))
            except RecordError as e:
                log.warning("Skipping unreadable batch of %s-%d at offset %d: %s",
                            TRANSACTION_STATE_TOPIC, partition, h.base_offset, e)
                continue
            for rec in records:
                count += 1
                if rec.key is None:
                    continue
                try:
                    tid = read_key(rec.key)
                    if rec.value is None:
                        out.pop(tid, None)
                    else:
                        out[tid] = read_value(rec.value).metadata
                except (SchemaError, ValueError) as e:
                    log.warning("Skipping unreadable record at offset %d of %s-%d: %s",
                                rec.offset, TRANSACTION_STATE_TOPIC, partition, e)
        return out, count

    def unload_partition(self, partition: int) -> None:
        self._stop_loading(partition)
        was_owned = self.owned.pop(partition, None) is not None
        tids = [t for t in self.txns if self.partition_for(t) == partition]
        for tid in tids:
            del self.txns[tid]
        if was_owned:
            log.log(
                logging.INFO if tids else logging.DEBUG,
                "Unloaded %d transactional id(s) of %s-%d: this node no longer leads it",
                len(tids), TRANSACTION_STATE_TOPIC, partition,
            )
            self.on_unloaded(partition)

    # ------------------------------------------------------------------------ queries for the coordinator

    def timed_out_transactions(self, now_ms: int) -> list[TransactionMetadata]:
        """Ongoing transactions past their timeout with no transition in progress."""
        return [
            t for t in self.owned_transactions()
            if t.state == TransactionState.ONGOING and t.pending_state is None
            and t.txn_start_timestamp + t.txn_timeout_ms < now_ms
        ]

    def expired_transactional_ids(self, now_ms: int, expiration_ms: int) -> list[TransactionMetadata]:
        """Finished transactional ids untouched for ``transactional.id.expiration.ms``."""
        return [
            t for t in self.owned_transactions()
            if t.state in COMPLETED_STATES and t.pending_state is None
            and t.txn_last_update_timestamp + expiration_ms <= now_ms
        ]
