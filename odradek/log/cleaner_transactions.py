"""Transactions in log compaction (Kafka's CleanedTransactionMetadata and the transactional
parts of Cleaner / LogCleanerManager).

* The cleaner never cleans past the last stable offset: an undecided transaction's records are
  never compacted (they could still be aborted, or shadow a key with an aborted value).
* Records of aborted transactions are never put in the offset map (an aborted value must not
  shadow a committed one) and are removed when their segment is cleaned.
* An ABORT marker stays while records of its transaction remain in the part being cleaned (its
  entry is copied to the cleaned segment's transaction index); a marker whose transaction has no
  records left (nothing read between the transaction's start and the marker) is kept
  ``delete.retention.ms`` longer (its batch gets a delete horizon, as a tombstone does), then
  removed. A COMMIT marker is removable the same way once no record of its transaction is left.
* A producer's last batch (its last data batch, or its last marker when it has no data since
  its epoch) stays, emptied if need be, so its sequence and epoch survive cleaning.
"""

from __future__ import annotations

import copy
import heapq
from typing import NamedTuple

from odradek.log.producer_state import ProducerStateManager
from odradek.log.transaction_index import AbortedTxn, TransactionIndex
from odradek.records.batch import DELETE_HORIZON_FLAG_MASK, RecordBatchHeader
from odradek.records.control_batch import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    control_record_type,
)
from odradek.records.errors import RecordError
from odradek.records.records import iter_batch_records

_MARKER_LIMIT = 64 * 1024


class LastRecord(NamedTuple):
    """What of a producer the cleaner must keep: the batch ending at ``last_data_offset``, or
    (no data since its epoch) its marker of epoch ``epoch``."""

    last_data_offset: int | None
    epoch: int


def last_records_of_producers(psm: ProducerStateManager) -> dict[int, LastRecord]:
    return {
        pid: LastRecord(e.batches[-1].last_offset if e.batches else None, e.epoch)
        for pid, e in psm.producers.items()
    }


def is_last_record_of_producer(h: RecordBatchHeader, last: dict[int, LastRecord]) -> bool:
    rec = last.get(h.producer_id) if h.producer_id >= 0 else None
    if rec is None:
        return False
    if rec.last_data_offset is not None:
        return h.last_offset == rec.last_data_offset
    return h.is_control and h.producer_epoch == rec.epoch


class _AbortedTxnState:
    __slots__ = ("txn", "last_observed_batch_offset")

    def __init__(self, txn: AbortedTxn) -> None:
        self.txn = txn
        self.last_observed_batch_offset: int | None = None


class CleanedTransactionMetadata:
    """The transactions the cleaner walks through, batch by batch, in offset order."""

    def __init__(self) -> None:
        self._committed: set[int] = set()  # producers with an ongoing committed transaction
        self._aborted: dict[int, _AbortedTxnState] = {}  # producers in an aborted one
        self._pending: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._seen: set[AbortedTxn] = set()
        # The cleaned segment's transaction index (entries of the ABORT markers kept).
        self.cleaned_index: TransactionIndex | None = None

    def add_aborted(self, txns: list[AbortedTxn]) -> None:
        for t in txns:
            if t not in self._seen:
                self._seen.add(t)
                heapq.heappush(self._pending, (t.first_offset, t.last_offset, t))

    def _consume_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0][0] <= offset:
            _, _, t = heapq.heappop(self._pending)
            self._aborted.setdefault(t.producer_id, _AbortedTxnState(t))

    def on_batch(self, h: RecordBatchHeader) -> bool:
        """A data batch: True if it belongs to an aborted transaction (discard it)."""
        self._consume_up_to(h.last_offset)
        if not h.is_transactional:
            return False
        state = self._aborted.get(h.producer_id)
        if state is not None:
            state.last_observed_batch_offset = h.last_offset
            return True
        self._committed.add(h.producer_id)
        return False

    def on_control_batch(self, h: RecordBatchHeader, raw: memoryview | bytes) -> bool:
        """A control batch: True if it may be discarded (its transaction has no record left
        here, or it was emptied before)."""
        self._consume_up_to(h.last_offset)
        if h.records_count <= 0:
            return True
        try:
            record = next(iter_batch_records(raw, _MARKER_LIMIT), None)
            type_id = control_record_type(record.key) if record is not None else None
        except RecordError:
            return False  # unreadable: kept as it is
        if type_id is None:
            return True
        if type_id == CONTROL_TYPE_ABORT:
            state = self._aborted.pop(h.producer_id, None)
            if state is not None and state.last_observed_batch_offset is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(state.txn)
                return False
            return True
        if type_id == CONTROL_TYPE_COMMIT:
            if h.producer_id in self._committed:
                self._committed.discard(h.producer_id)
                return False
            return True
        return False

    def snapshot(self) -> CleanedTransactionMetadata:
        """A copy to restore when a segment's cleaning is undone."""
        index, self.cleaned_index = self.cleaned_index, None
        try:
            copied = copy.deepcopy(self)
        finally:
            self.cleaned_index = index
        copied.cleaned_index = index
        return copied


def has_delete_horizon(h: RecordBatchHeader) -> bool:
    return bool(h.attributes & DELETE_HORIZON_FLAG_MASK)
