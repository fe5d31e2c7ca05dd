"""ProducerStateManager: idempotent and transactional producer bookkeeping of one partition log
(Kafka's ProducerStateManager / ProducerAppendInfo; sans-I/O).

For every producer id it keeps the current epoch, the last five batches' sequence ranges and
offsets, the coordinator epoch of the last marker and the first offset of the producer's ongoing
transaction. A new batch must continue the sequence (else OUT_OF_ORDER_SEQUENCE_NUMBER), a
retried batch already in the log is recognised as a duplicate and answered with its original
offsets, an older epoch is fenced (INVALID_PRODUCER_EPOCH), a marker from an older coordinator
epoch is fenced (TRANSACTION_COORDINATOR_FENCED).

An append is staged in a :class:`ProducerAppend` (every batch of the request checked against the
staged state) and applied with :meth:`ProducerStateManager.commit` once the bytes are in the log,
so a refused request changes nothing.

Transactions: a transactional data batch opens the producer's transaction (its first offset);
its COMMIT/ABORT marker completes it. Completed transactions whose marker is not yet below the
high watermark stay "unreplicated"; the first unstable offset is the smallest first offset of an
ongoing or unreplicated transaction, and the last stable offset is min(that, high watermark).
"""

from __future__ import annotations

import bisect
import logging
from collections import deque
from dataclasses import dataclass, field

from odradek.log.append_origin import AppendOrigin
from odradek.log.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from odradek.records.batch import RecordBatchHeader
from odradek.records.control_batch import EndTxnMarker

logger = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1
NO_PRODUCER_EPOCH = -1


@dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass
class ProducerStateEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int = -1  # -1: no ongoing transaction

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.epoch,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
        )

    def maybe_update_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch


@dataclass(frozen=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


@dataclass(frozen=True)
class ProducerInfo:
    """One active producer of a partition (DescribeProducers)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: none


class VerificationGuard:
    """KIP-890: a token the broker gets from :meth:`Log.maybe_start_transaction_verification`
    before asking the transaction coordinator whether the partition is in the producer's
    transaction, and hands back with the append. Compared by identity: a guard from before an
    abort marker (the ABA race) no longer verifies."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "SENTINEL" if self is SENTINEL_GUARD else f"VerificationGuard({id(self):#x})"


SENTINEL_GUARD = VerificationGuard()  # never verifies


@dataclass
class VerificationStateEntry:
    timestamp: int
    guard: VerificationGuard
    lowest_sequence: int
    epoch: int

    def maybe_update(self, sequence: int, epoch: int) -> None:
        """Keep the lowest sequence seen at the current epoch (no out-of-order loop)."""
        if epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence
        if epoch > self.epoch:
            self.epoch, self.lowest_sequence = epoch, sequence


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """Sequence numbers wrap from INT32_MAX to 0."""
    s = base_sequence + last_offset_delta
    return s - INT32_MAX - 1 if s > INT32_MAX else s


def first_sequence(last_seq: int, offset_delta: int) -> int:
    """Inverse of :func:`last_sequence`."""
    s = last_seq - offset_delta
    return s + INT32_MAX + 1 if s < 0 else s


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (last_seq == INT32_MAX and next_seq == 0)


class ProducerAppend:
    """The producer-state changes of one append, checked batch by batch against the staged
    state; :meth:`ProducerStateManager.commit` applies them."""

    def __init__(
        self,
        manager: ProducerStateManager,
        origin: AppendOrigin,
        name: str,
        verification_guard: VerificationGuard | None = None,
    ) -> None:
        self.manager = manager
        self.origin = origin
        self.name = name  # topic-partition, for messages
        # None: the broker does not verify (no KIP-890 check); else the request's guard.
        self.verification_guard = verification_guard
        self.transactional: set[int] = set()  # producers that wrote transactional batches
        self.entries: dict[int, ProducerStateEntry] = {}
        self._orig_epoch: dict[int, int] = {}
        self.started: list[tuple[int, int]] = []  # (first offset, producer id)
        self.completed: list[CompletedTxn] = []

    def _entry(self, producer_id: int) -> ProducerStateEntry:
        entry = self.entries.get(producer_id)
        if entry is None:
            current = self.manager.producers.get(producer_id)
            entry = current.copy() if current is not None else ProducerStateEntry(NO_PRODUCER_EPOCH)
            self.entries[producer_id] = entry
            self._orig_epoch[producer_id] = entry.epoch
        return entry

    def duplicate_of(self, h: RecordBatchHeader) -> BatchMetadata | None:
        """The batch already in the log that ``h`` retries (client appends), if any."""
        entry = self.manager.producers.get(h.producer_id)
        if entry is None or entry.epoch != h.producer_epoch or h.base_sequence < 0:
            return None
        last_seq = last_sequence(h.base_sequence, h.last_offset_delta)
        for b in entry.batches:
            if b.first_seq == h.base_sequence and b.last_seq == last_seq:
                return b
        return None

    def _refuse(self, error: type[Exception], message: str) -> None:
        """A leader refuses the append (``error``); a follower takes what its leader wrote, with
        a warning (Kafka's ``AppendOrigin.REPLICATION`` checks)."""
        if self.origin is AppendOrigin.REPLICATION:
            logger.warning("%s", message)
        else:
            raise error(message)

    def _check_epoch(self, entry: ProducerStateEntry, pid: int, epoch: int, offset: int) -> None:
        if epoch < entry.epoch:
            message = (
                f"Epoch of producer {pid} at offset {offset} in {self.name} is {epoch}, which is "
                f"smaller than the last seen epoch {entry.epoch}"
            )
            self._refuse(InvalidProducerEpochError, message)

    def _check_sequence(self, entry: ProducerStateEntry, pid: int, epoch: int, first_seq: int,
                        offset: int) -> None:
        verifying = self.manager.verification.get(pid)
        if verifying is not None and first_seq > verifying.lowest_sequence:
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for producer {pid} at offset {offset} in "
                f"partition {self.name}: {first_seq} (incoming seq. number), "
                f"{verifying.lowest_sequence} (earliest seen sequence)"
            )
        if epoch != entry.epoch:
            if first_seq != 0 and entry.epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"Invalid sequence number for new epoch of producer {pid} at offset {offset} "
                    f"in partition {self.name}: {epoch} (request epoch), {first_seq} (seq. "
                    f"number), {entry.epoch} (current producer epoch)"
                )
        elif not (
            self._orig_epoch.get(pid, NO_PRODUCER_EPOCH) == NO_PRODUCER_EPOCH
            or _in_sequence(entry.last_seq, first_seq)
        ):
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for producer {pid} at offset {offset} in "
                f"partition {self.name}: {first_seq} (incoming seq. number), {entry.last_seq} "
                "(current end sequence number)"
            )

    def append_data(self, h: RecordBatchHeader) -> None:
        pid, epoch = h.producer_id, h.producer_epoch
        if (
            self.verification_guard is not None
            and h.is_transactional
            and self.origin is not AppendOrigin.REPLICATION
            and not self.manager.has_ongoing_transaction(pid)
            and not self.manager.verifies(pid, self.verification_guard)
        ):
            raise InvalidTxnStateError("Record was not part of an ongoing transaction")
        if h.is_transactional:
            self.transactional.add(pid)
        entry = self._entry(pid)
        self._check_epoch(entry, pid, epoch, h.base_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(entry, pid, epoch, h.base_sequence, h.base_offset)
        entry.maybe_update_epoch(epoch)
        last_seq = (
            last_sequence(h.base_sequence, h.last_offset_delta) if h.base_sequence >= 0 else -1
        )
        entry.batches.append(
            BatchMetadata(h.base_sequence, last_seq, h.base_offset, h.last_offset, h.max_timestamp)
        )
        entry.last_timestamp = h.max_timestamp
        if entry.current_txn_first_offset >= 0 and not h.is_transactional:
            message = (
                f"Expected transactional write from producer {pid} at offset {h.base_offset} "
                f"in partition {self.name}"
            )
            self._refuse(InvalidTxnStateError, message)
        elif entry.current_txn_first_offset < 0 and h.is_transactional:
            entry.current_txn_first_offset = h.base_offset
            self.started.append((h.base_offset, pid))

    def append_marker(self, h: RecordBatchHeader, marker: EndTxnMarker) -> None:
        pid, epoch = h.producer_id, h.producer_epoch
        self.transactional.add(pid)
        entry = self._entry(pid)
        self._check_epoch(entry, pid, epoch, h.base_offset)
        if entry.coordinator_epoch > marker.coordinator_epoch:
            if self.origin is AppendOrigin.REPLICATION:
                logger.info(
                    "Detected invalid coordinator epoch for producerId %d at offset %d in "
                    "partition %s: %d is older than previously known coordinator epoch %d",
                    pid, h.base_offset, self.name, marker.coordinator_epoch,
                    entry.coordinator_epoch,
                )
            else:
                raise TransactionCoordinatorFencedError(
                    f"Invalid coordinator epoch for producerId {pid} at offset {h.base_offset} "
                    f"in partition {self.name}: {marker.coordinator_epoch} (zombie), "
                    f"{entry.coordinator_epoch} (current)"
                )
        if entry.current_txn_first_offset >= 0:
            # A marker without data in this partition completes nothing (Kafka: it affects
            # neither the last stable offset nor the transaction index).
            self.completed.append(
                CompletedTxn(pid, entry.current_txn_first_offset, h.base_offset, not marker.commit)
            )
        entry.maybe_update_epoch(epoch)
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.current_txn_first_offset = -1
        entry.last_timestamp = marker.timestamp


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: list[tuple[int, int]] = []  # (first offset, producer id), sorted
        # Completed, marker not yet below the high watermark: (first, last offset, pid), sorted.
        self._unreplicated: list[tuple[int, int, int]] = []
        self.map_end_offset = 0  # the offset up to which the log has been applied
        self.verification: dict[int, VerificationStateEntry] = {}  # KIP-890, by producer id

    # ----------------------------------------------------------------------------- updates
    def begin(
        self,
        origin: AppendOrigin,
        name: str = "",
        verification_guard: VerificationGuard | None = None,
    ) -> ProducerAppend:
        return ProducerAppend(self, origin, name, verification_guard)

    # ------------------------------------------------------------------ KIP-890 verification
    def has_ongoing_transaction(self, producer_id: int) -> bool:
        entry = self.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset >= 0

    def maybe_start_verification(
        self, producer_id: int, sequence: int, epoch: int, now_ms: int
    ) -> VerificationGuard:
        """The guard of the producer's verification (created if need be); the sentinel when
        its transaction is already ongoing here (nothing to verify)."""
        if self.has_ongoing_transaction(producer_id):
            return SENTINEL_GUARD
        entry = self.verification.get(producer_id)
        if entry is None:
            entry = VerificationStateEntry(now_ms, VerificationGuard(), sequence, epoch)
            self.verification[producer_id] = entry
        entry.maybe_update(sequence, epoch)
        return entry.guard

    def verification_guard(self, producer_id: int) -> VerificationGuard:
        entry = self.verification.get(producer_id)
        return entry.guard if entry is not None else SENTINEL_GUARD

    def verifies(self, producer_id: int, guard: VerificationGuard) -> bool:
        entry = self.verification.get(producer_id)
        return guard is not SENTINEL_GUARD and entry is not None and entry.guard is guard

    def commit(self, append: ProducerAppend, end_offset: int | None = None) -> list[tuple[CompletedTxn, int]]:
        """Apply a staged append. Returns each completed transaction with the last stable
        offset to record with it in the transaction index (the first offset of the next
        ongoing transaction of another producer, else the marker's offset + 1)."""
        self.producers.update(append.entries)
        # A transactional batch or a marker: the transaction started or ended, verification
        # is over for this producer.
        for pid in append.transactional:
            self.verification.pop(pid, None)
        for started in append.started:
            bisect.insort(self._ongoing, started)
        done: list[tuple[CompletedTxn, int]] = []
        for txn in append.completed:
            lso = next(
                (first for first, pid in self._ongoing if pid != txn.producer_id),
                txn.last_offset + 1,
            )
            try:
                self._ongoing.remove((txn.first_offset, txn.producer_id))
            except ValueError:
                pass
            bisect.insort(self._unreplicated, (txn.first_offset, txn.last_offset, txn.producer_id))
            done.append((txn, lso))
        if end_offset is not None:
            self.map_end_offset = end_offset
        return done

    def load_entry(self, producer_id: int, entry: ProducerStateEntry) -> None:
        """Put an entry read from a snapshot."""
        self.producers[producer_id] = entry
        if entry.current_txn_first_offset >= 0:
            bisect.insort(self._ongoing, (entry.current_txn_first_offset, producer_id))

    def clear(self, end_offset: int = 0) -> None:
        self.producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self.verification.clear()
        self.map_end_offset = end_offset

    # ------------------------------------------------------------------------ transactions
    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """Smallest first offset of an ongoing transaction or of a completed one whose marker
        is not yet below ``high_watermark`` (those below it are forgotten)."""
        unrep = self._unreplicated
        if unrep:
            self._unreplicated = unrep = [t for t in unrep if t[1] >= high_watermark]
        candidates = []
        if self._ongoing:
            candidates.append(self._ongoing[0][0])
        if unrep:
            candidates.append(unrep[0][0])
        return min(candidates) if candidates else None

    def first_undecided_offset(self) -> int | None:
        return self._ongoing[0][0] if self._ongoing else None

    @property
    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """(first offset, producer id) of the ongoing transactions, by first offset."""
        return list(self._ongoing)

    # -------------------------------------------------------------------------- expiration
    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``producer.id.expiration.ms`` that have no ongoing
        transaction. Returns how many were removed."""
        doomed = [
            pid
            for pid, e in self.producers.items()
            if e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms
        ]
        for pid in doomed:
            del self.producers[pid]
        for pid in [p for p, v in self.verification.items() if now_ms - v.timestamp >= expiration_ms]:
            del self.verification[pid]
        return len(doomed)

    def active_producers(self) -> list[ProducerInfo]:
        return [
            ProducerInfo(pid, e.epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch,
                         e.current_txn_first_offset)
            for pid, e in sorted(self.producers.items())
        ]
