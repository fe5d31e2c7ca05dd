"""The Raft core's in-memory view of the replicated log (Kafka's ``ReplicatedLog``, minus I/O).

The core keeps each batch's base offset, epoch and records; the driver mirrors every append and
truncation onto the real ``__cluster_metadata`` log and reports back how far it is durable
(:meth:`RaftLog.mark_durable`). The epoch boundaries answer ``end_offset_for_epoch`` (Kafka's
leader-epoch cache) and the leader's check of a follower's fetch position.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LogBatch:
    """One batch: record ``i`` is at ``base_offset + i``; ``control`` batches hold Kafka control
    records (LeaderChangeMessage) rather than the state machine's records."""

    base_offset: int
    epoch: int
    records: tuple[Any, ...]
    append_timestamp: int = 0
    control: bool = False

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1

    @property
    def end_offset(self) -> int:
        return self.base_offset + len(self.records)


@dataclass(frozen=True)
class OffsetAndEpoch:
    offset: int
    epoch: int


class RaftLog:
    def __init__(
        self, batches: Sequence[LogBatch] = (), start: OffsetAndEpoch | None = None
    ) -> None:
        """``start``: where the log begins when a snapshot replaced the records below it (the
        snapshot's end offset and epoch); the log starts at offset 0 otherwise."""
        self.start = start if start is not None else OffsetAndEpoch(0, 0)
        self.batches: list[LogBatch] = []
        self.durable_end_offset = self.start.offset
        for batch in batches:
            self.append(batch)
        self.durable_end_offset = self.end_offset

    @property
    def end_offset(self) -> int:
        return self.batches[-1].end_offset if self.batches else self.start.offset

    @property
    def last_epoch(self) -> int:
        return self.batches[-1].epoch if self.batches else self.start.epoch

    def end_offset_and_epoch(self) -> OffsetAndEpoch:
        return OffsetAndEpoch(self.end_offset, self.last_epoch)

    def append(self, batch: LogBatch) -> None:
        if batch.base_offset != self.end_offset:
            raise ValueError(f"append at {batch.base_offset}, log ends at {self.end_offset}")
        if not batch.records:
            raise ValueError("empty batch")
        if batch.epoch < self.last_epoch:
            raise ValueError(f"epoch {batch.epoch} is older than the log's {self.last_epoch}")
        self.batches.append(batch)

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and after ``offset`` (never below the start)."""
        offset = max(offset, self.start.offset)
        while self.batches and self.batches[-1].base_offset >= offset:
            self.batches.pop()
        if self.batches and self.batches[-1].end_offset > offset:
            last = self.batches.pop()
            keep = offset - last.base_offset
            self.batches.append(
                LogBatch(
                    last.base_offset,
                    last.epoch,
                    last.records[:keep],
                    last.append_timestamp,
                    last.control,
                )
            )
        self.durable_end_offset = min(self.durable_end_offset, offset)

    def mark_durable(self, up_to_offset: int) -> None:
        self.durable_end_offset = max(self.durable_end_offset, min(up_to_offset, self.end_offset))

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """Kafka's ``endOffsetForEpoch``: the largest epoch of the log not above ``epoch`` and
        the offset where it ends; ``(0, 0)`` when the log has no such epoch."""
        # Epochs never decrease along the log: the last batch of an epoch not above ``epoch``
        # is found by a binary search.
        i = bisect.bisect_right(self.batches, epoch, key=_epoch)
        if i > 0:
            batch = self.batches[i - 1]
            return OffsetAndEpoch(batch.end_offset, batch.epoch)
        if self.start.offset > 0 and self.start.epoch <= epoch:
            return self.start
        return OffsetAndEpoch(0, 0)

    def validate_offset_and_epoch(self, offset: int, epoch: int) -> OffsetAndEpoch | None:
        """A follower fetching at ``offset`` whose last record has ``epoch``: None when that
        position is on this log, else the diverging epoch and its end offset."""
        if offset == 0:
            return None
        end = self.end_offset_for_epoch(epoch)
        if end.epoch != epoch or end.offset < offset:
            return end
        return None

    def truncation_offset(self, diverging: OffsetAndEpoch) -> int:
        """Kafka's ``truncateToEndOffset``: where a follower truncates on a diverging epoch."""
        if diverging.epoch == 0:
            return min(diverging.offset, self.end_offset)
        local = self.end_offset_for_epoch(diverging.epoch)
        if local.epoch == diverging.epoch:
            return min(local.offset, diverging.offset)
        return local.offset

    def _first_index_after(self, offset: int) -> int:
        """The index of the first batch ending after ``offset`` (a binary search: reads and
        commits cost the batches they return, not the length of the log)."""
        return bisect.bisect_right(self.batches, offset, key=_end_offset)

    def read(self, offset: int, max_batches: int) -> list[LogBatch]:
        """Batches from ``offset`` (a batch boundary, or inside the first batch returned)."""
        out: list[LogBatch] = []
        for i in range(self._first_index_after(offset), len(self.batches)):
            batch = self.batches[i]
            if batch.base_offset < offset:
                skip = offset - batch.base_offset
                batch = LogBatch(
                    offset, batch.epoch, batch.records[skip:], batch.append_timestamp, batch.control
                )
            out.append(batch)
            if len(out) >= max_batches:
                break
        return out

    def batches_between(self, start: int, end: int) -> list[LogBatch]:
        """Batches covering ``[start, end)``, cut to that range."""
        out: list[LogBatch] = []
        for i in range(self._first_index_after(start), len(self.batches)):
            batch = self.batches[i]
            if batch.base_offset >= end:
                break
            if batch.base_offset >= start and batch.end_offset <= end:
                out.append(batch)
                continue
            lo = max(start, batch.base_offset) - batch.base_offset
            hi = min(end, batch.end_offset) - batch.base_offset
            out.append(
                LogBatch(
                    batch.base_offset + lo,
                    batch.epoch,
                    batch.records[lo:hi],
                    batch.append_timestamp,
                    batch.control,
                )
            )
        return out

    # -- snapshots ---------------------------------------------------------------------------

    def delete_before(self, start: OffsetAndEpoch) -> None:
        """The log now begins at ``start`` (a snapshot stands for the records below it, which
        are dropped; Kafka's ``deleteBeforeSnapshot``). ``start`` must not be past the end."""
        if start.offset > self.end_offset:
            raise ValueError(f"log start {start.offset} past the end {self.end_offset}")
        if start.offset <= self.start.offset:
            return
        i = self._first_index_after(start.offset)
        rest = self.batches[i:]
        if rest and rest[0].base_offset < start.offset:
            b = rest[0]
            skip = start.offset - b.base_offset
            rest[0] = LogBatch(
                start.offset, b.epoch, b.records[skip:], b.append_timestamp, b.control
            )
        self.batches = rest
        self.start = start
        self.durable_end_offset = max(self.durable_end_offset, start.offset)

    def reset_to(self, start: OffsetAndEpoch) -> None:
        """Kafka's ``truncateFullyAndStartAt``: empty, beginning at ``start`` (a snapshot
        fetched from the leader stands for everything below)."""
        self.batches = []
        self.start = start
        self.durable_end_offset = start.offset


def _end_offset(batch: LogBatch) -> int:
    return batch.end_offset


def _epoch(batch: LogBatch) -> int:
    return batch.epoch
