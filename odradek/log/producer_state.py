"""ProducerStateManager: idempotent-producer bookkeeping of one partition log (sans-I/O).

For every producer id it keeps the current epoch and the last five batches' sequence ranges and
offsets. A new batch must continue the sequence (else OUT_OF_ORDER_SEQUENCE_NUMBER), a retried
batch that is already in the log is recognised as a duplicate and answered with its original
offsets instead of being appended twice, and an older epoch is fenced (INVALID_PRODUCER_EPOCH).
Everything it needs is in the batch headers, so the state is rebuilt from them when a log loads.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from odradek.log.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from odradek.records.batch import RecordBatchHeader

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1


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

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """Sequence numbers wrap from INT32_MAX to 0."""
    s = base_sequence + last_offset_delta
    return s - INT32_MAX - 1 if s > INT32_MAX else s


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (last_seq == INT32_MAX and next_seq == 0)


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerStateEntry] = {}

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """Validate a leader append. Returns the original batch if this one is a duplicate."""
        entry = self.producers.get(producer_id)
        if entry is None:
            # Unknown producer (new, or its state expired with the log): accept any sequence.
            return None
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"Producer {producer_id} epoch {epoch} is older than the current epoch {entry.epoch}"
            )
        if epoch > entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"Producer {producer_id} bumped its epoch to {epoch} but starts at sequence "
                    f"{first_seq}, not 0"
                )
            return None
        for b in entry.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        if not _in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for producer {producer_id} at epoch {epoch}: "
                f"{first_seq} (incoming seq. number), {entry.last_seq} (current end sequence number)"
            )
        return None

    def check_epoch(self, producer_id: int, epoch: int) -> None:
        """Validate a coordinator's append for the producer: only an older epoch is refused."""
        entry = self.producers.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"Producer {producer_id} epoch {epoch} is older than the current epoch {entry.epoch}"
            )

    def update(self, producer_id: int, epoch: int, batch: BatchMetadata) -> None:
        entry = self.producers.get(producer_id)
        if entry is None or epoch != entry.epoch:
            entry = ProducerStateEntry(epoch)
            self.producers[producer_id] = entry
        entry.batches.append(batch)

    def update_from_header(self, h: RecordBatchHeader) -> None:
        if h.producer_id < 0 or h.base_sequence < 0:
            return
        self.update(
            h.producer_id,
            h.producer_epoch,
            BatchMetadata(
                h.base_sequence,
                last_sequence(h.base_sequence, h.last_offset_delta),
                h.base_offset,
                h.base_offset + h.last_offset_delta,
                h.max_timestamp,
            ),
        )

    def rebuild(self, headers: Iterable[RecordBatchHeader]) -> None:
        self.producers.clear()
        for h in headers:
            self.update_from_header(h)
