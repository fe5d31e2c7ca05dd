"""TransactionMetadata: the state of one transactional id, and its state machine (sans-I/O).

Kafka's ``TransactionMetadata``: a change is first *prepared* (``prepare_*`` returns a
:class:`TxnTransitMetadata`, the state the transactional id will have once the change is in
``__transaction_state``, and marks the metadata with a pending state so that concurrent
requests get CONCURRENT_TRANSACTIONS), then *completed* (:meth:`complete_transition`, after the
record was appended) or *abandoned* (:meth:`abort_transition`, when the append failed). Time comes
in as an argument; nothing here does I/O.

States and the states they may be entered from (Kafka's ``TransactionState.validPreviousStates``)::

    Empty             <- Empty, CompleteCommit, CompleteAbort
    Ongoing           <- Ongoing, Empty, CompleteCommit, CompleteAbort
    PrepareCommit     <- Ongoing
    PrepareAbort      <- Ongoing, PrepareEpochFence
    CompleteCommit    <- PrepareCommit
    CompleteAbort     <- PrepareAbort
    Dead              <- Empty, CompleteCommit, CompleteAbort
    PrepareEpochFence <- Ongoing
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import IntEnum

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767  # Short.MaxValue

TopicPartition = tuple[str, int]


class TransactionState(IntEnum):
    """The ids are those of the ``TransactionStatus`` field of ``__transaction_state`` records."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def state_name(self) -> str:
        """Kafka's name (DescribeTransactions, ListTransactions, kafka-transactions.sh)."""
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {v: k for k, v in _NAMES.items()}

S = TransactionState
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
# States whose transaction is finished (a transactional id in one may expire or start anew).
COMPLETED_STATES = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class IllegalTransitionError(Exception):
    """A transition the state machine does not allow (a coordinator bug, never a client's)."""


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch free so that a fenced transaction can still be aborted."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


@dataclass(frozen=True)
class TxnTransitMetadata:
    """The state a transactional id moves to (what the ``__transaction_state`` record holds)."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    # Transactions version 2 (KIP-890 part 2): the producer id the transaction moves to once
    # complete when its epoch overflowed, and the transactions version of the client.
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0

    @property
    def supports_epoch_bump(self) -> bool:
        return self.client_transaction_version >= 2


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60000
    state: TransactionState = TransactionState.EMPTY
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TransactionState | None = None
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0

    # ------------------------------------------------------------------------ queries

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def supports_epoch_bump(self) -> bool:
        """Whether the current transaction (its last transition) is a transactions-version-2 one."""
        return self.client_transaction_version >= 2

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    def snapshot(self) -> TxnTransitMetadata:
        return TxnTransitMetadata(
            self.producer_id, self.last_producer_id, self.producer_epoch, self.last_producer_epoch,
            self.txn_timeout_ms, self.state, frozenset(self.topic_partitions),
            self.txn_start_timestamp, self.txn_last_update_timestamp,
            self.next_producer_id, self.client_transaction_version,
        )

    @classmethod
    def from_transit(cls, transactional_id: str, t: TxnTransitMetadata) -> TransactionMetadata:
        return cls(
            transactional_id, t.producer_id, t.last_producer_id, t.producer_epoch,
            t.last_producer_epoch, t.txn_timeout_ms, t.state, set(t.topic_partitions),
            t.txn_start_timestamp, t.txn_last_update_timestamp,
            next_producer_id=t.next_producer_id,
            client_transaction_version=t.client_transaction_version,
        )

    # ------------------------------------------------------------------------ prepare

    def _prepare(
        self,
        state: TransactionState,
        *,
        producer_id: int | None = None,
        last_producer_id: int | None = None,
        producer_epoch: int | None = None,
        last_producer_epoch: int | None = None,
        txn_timeout_ms: int | None = None,
        topic_partitions: frozenset[TopicPartition] | None = None,
        txn_start_timestamp: int | None = None,
        next_producer_id: int = NO_PRODUCER_ID,
        client_transaction_version: int = 0,
        now_ms: int,
    ) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransitionError(
                f"transactional id {self.transactional_id}: preparing {state.state_name} while "
                f"the transition to {self.pending_state.state_name} is in progress"
            )
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTransitionError(
                f"transactional id {self.transactional_id}: {self.state.state_name} -> "
                f"{state.state_name} is not a valid transition"
            )
        if state in COMPLETED_STATES or state == S.DEAD:
            topic_partitions = frozenset()
        t = TxnTransitMetadata(
            producer_id=self.producer_id if producer_id is None else producer_id,
            last_producer_id=self.last_producer_id if last_producer_id is None else last_producer_id,
            producer_epoch=self.producer_epoch if producer_epoch is None else producer_epoch,
            last_producer_epoch=(
                self.last_producer_epoch if last_producer_epoch is None else last_producer_epoch
            ),
            txn_timeout_ms=self.txn_timeout_ms if txn_timeout_ms is None else txn_timeout_ms,
            state=state,
            topic_partitions=(
                frozenset(self.topic_partitions) if topic_partitions is None else topic_partitions
            ),
            txn_start_timestamp=(
                self.txn_start_timestamp if txn_start_timestamp is None else txn_start_timestamp
            ),
            txn_last_update_timestamp=now_ms,
            next_producer_id=next_producer_id,
            client_transaction_version=client_transaction_version,
        )
        self.pending_state = state
        return t

    def prepare_increment_producer_epoch(
        self, txn_timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransitMetadata | None:
        """InitProducerId of a known transactional id: the next epoch, Empty. None if the
        expected epoch (KIP-360) is neither the current nor the last one (PRODUCER_FENCED)."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransitionError(
                f"transactional id {self.transactional_id}: cannot bump the exhausted epoch "
                f"{self.producer_epoch}"
            )
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            next_epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            next_epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # A retry of a bump whose answer the producer never got: the same answer again.
            next_epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._prepare(
            S.EMPTY, producer_epoch=next_epoch, last_producer_epoch=last_epoch,
            txn_timeout_ms=txn_timeout_ms, topic_partitions=frozenset(), txn_start_timestamp=-1,
            now_ms=now_ms,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, txn_timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransitMetadata:
        """A new producer id with epoch 0 when the epoch of the current one is exhausted."""
        if new_producer_id < 0:
            raise IllegalTransitionError(f"invalid producer id {new_producer_id}")
        return self._prepare(
            S.EMPTY, producer_id=new_producer_id, last_producer_id=self.producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=txn_timeout_ms, topic_partitions=frozenset(), txn_start_timestamp=-1,
            now_ms=now_ms,
        )

    def prepare_add_partitions(
        self, partitions: set[TopicPartition], now_ms: int, client_transaction_version: int = 0
    ) -> TxnTransitMetadata:
        """Ongoing with ``partitions`` added; ``client_transaction_version`` 2 when a broker adds
        them on a transactions-version-2 producer's first produce."""
        start = now_ms if self.state in COMPLETED_STATES else self.txn_start_timestamp
        if self.state == S.ONGOING:
            # The transaction keeps the version it started with.
            client_transaction_version = max(client_transaction_version, self.client_transaction_version)
        return self._prepare(
            S.ONGOING, topic_partitions=frozenset(self.topic_partitions | partitions),
            txn_start_timestamp=start, client_transaction_version=client_transaction_version,
            now_ms=now_ms,
        )

    def prepare_abort_or_commit(
        self,
        commit: bool,
        now_ms: int,
        client_transaction_version: int = 0,
        next_producer_id: int = NO_PRODUCER_ID,
    ) -> TxnTransitMetadata:
        """PrepareCommit/PrepareAbort. Transactions version 2 bumps the epoch (the markers carry
        the bumped one) and, when the epoch is exhausted, names the producer id the transaction
        moves to once complete (``next_producer_id``)."""
        state = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        if client_transaction_version >= 2:
            if self.producer_epoch >= MAX_PRODUCER_EPOCH:
                raise IllegalTransitionError(
                    f"transactional id {self.transactional_id}: cannot bump the epoch {self.producer_epoch}"
                )
            if self.is_producer_epoch_exhausted and next_producer_id < 0:
                raise IllegalTransitionError(
                    f"transactional id {self.transactional_id}: epoch {self.producer_epoch} is "
                    "exhausted and no next producer id was given"
                )
            return self._prepare(
                state, producer_epoch=self.producer_epoch + 1, last_producer_epoch=self.producer_epoch,
                next_producer_id=next_producer_id if self.is_producer_epoch_exhausted else NO_PRODUCER_ID,
                client_transaction_version=client_transaction_version, now_ms=now_ms,
            )
        return self._prepare(state, client_transaction_version=client_transaction_version, now_ms=now_ms)

    def prepare_fence_producer_epoch_abort(self, now_ms: int) -> TxnTransitMetadata:
        """An Ongoing transaction aborted by the coordinator (timed out, or its transactional id
        initialised again): PrepareAbort with the epoch bumped, so that the producer that owned
        it is fenced (Kafka's PrepareEpochFence followed by the abort, in one step)."""
        if self.state != S.ONGOING:
            raise IllegalTransitionError(
                f"transactional id {self.transactional_id}: fencing in state {self.state.state_name}"
            )
        # The epoch is never exhausted while Ongoing (InitProducerId rotated the id first), but
        # a fence at the very last epoch keeps it rather than overflow.
        epoch = self.producer_epoch if self.producer_epoch >= MAX_PRODUCER_EPOCH else self.producer_epoch + 1
        # Recorded as transactions version 0 (Kafka's epoch fence): a retried EndTxn of the fenced
        # producer must not pass for a transactions-version-2 retry of this abort.
        return self._prepare(
            S.PREPARE_ABORT, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH, now_ms=now_ms
        )

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        if self.state == S.PREPARE_COMMIT:
            state = S.COMPLETE_COMMIT
        elif self.state == S.PREPARE_ABORT:
            state = S.COMPLETE_ABORT
        else:
            raise IllegalTransitionError(
                f"transactional id {self.transactional_id}: completing in state {self.state.state_name}"
            )
        tv = self.client_transaction_version
        if tv >= 2 and self.next_producer_id >= 0:
            # The epoch overflowed: the transactional id moves to the next producer id, epoch 0.
            return self._prepare(
                state, producer_id=self.next_producer_id, last_producer_id=self.producer_id,
                producer_epoch=0, last_producer_epoch=self.producer_epoch,
                client_transaction_version=tv, now_ms=now_ms,
            )
        return self._prepare(state, client_transaction_version=tv, now_ms=now_ms)

    def prepare_dead(self, now_ms: int) -> TxnTransitMetadata:
        return self._prepare(S.DEAD, now_ms=now_ms)

    # ------------------------------------------------------------------------ complete/abort

    def complete_transition(self, t: TxnTransitMetadata) -> None:
        """Take the prepared state, once its record is in ``__transaction_state``."""
        if self.pending_state != t.state:
            raise IllegalTransitionError(
                f"transactional id {self.transactional_id}: completing {t.state.state_name} but "
                f"the pending state is {self.pending_state.state_name if self.pending_state else None}"
            )
        if self.state not in VALID_PREVIOUS_STATES[t.state]:
            raise IllegalTransitionError(
                f"transactional id {self.transactional_id}: {self.state.state_name} -> "
                f"{t.state.state_name} is not a valid transition"
            )
        self.producer_id = t.producer_id
        self.last_producer_id = t.last_producer_id
        self.producer_epoch = t.producer_epoch
        self.last_producer_epoch = t.last_producer_epoch
        self.txn_timeout_ms = t.txn_timeout_ms
        self.state = t.state
        self.topic_partitions = set(t.topic_partitions)
        self.txn_start_timestamp = t.txn_start_timestamp
        self.txn_last_update_timestamp = t.txn_last_update_timestamp
        self.next_producer_id = t.next_producer_id
        self.client_transaction_version = t.client_transaction_version
        self.pending_state = None

    def abort_transition(self) -> None:
        """Forget a prepared transition whose record could not be written."""
        self.pending_state = None

    def copy(self) -> TransactionMetadata:
        return dataclasses.replace(self, topic_partitions=set(self.topic_partitions))
