"""The transactional side of a partition log (Kafka's UnifiedLog producer-state parts), kept out
of :mod:`odradek.log.log`: analysing an append's producer batches, applying it (transaction
index entries for aborted transactions), rebuilding the producer state from the segments, and
collecting the aborted transactions of a ``read_committed`` fetch.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Container, Iterable, Sequence

from odradek.log.append_origin import AppendOrigin
from odradek.log.cleaner_transactions import LastRecord, last_records_of_producers
from odradek.log.log_config import LogConfig
from odradek.log.log_segments import LogSegments, remove_quietly
from odradek.log.producer_state import (
    BatchMetadata,
    CompletedTxn,
    ProducerAppend,
    ProducerInfo,
    ProducerStateManager,
    VerificationGuard,
)
from odradek.log.producer_state_snapshot import (
    CorruptSnapshotError,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)
from odradek.log.segment import LogSegment
from odradek.log.transaction_index import ENTRY_SIZE, AbortedTxn
from odradek.records.batch import AppendInfo, RecordBatchHeader, parse_header
from odradek.records.control_batch import parse_end_txn_marker
from odradek.records.errors import InvalidRecordError, RecordError

logger = logging.getLogger(__name__)


def analyze_append(
    psm: ProducerStateManager,
    buf: bytes | bytearray | memoryview,
    info: AppendInfo,
    origin: AppendOrigin,
    name: str,
    verification_guard: VerificationGuard | None = None,
) -> ProducerAppend | BatchMetadata:
    """Check every batch of a validated (offsets assigned) buffer against the producer state.
    Returns the staged changes, or for a client's retry the batch already in the log. Raises
    the log errors of a refused append (nothing is changed then)."""
    append = psm.begin(origin, name, verification_guard)
    for b in info.batches:
        h = parse_header(buf, b.position)
        if origin is AppendOrigin.CLIENT:
            if h.is_control:
                raise InvalidRecordError(
                    f"Clients are not allowed to write control records in topic partition {name}"
                )
            if h.producer_id >= 0 and h.base_sequence < 0:
                raise InvalidRecordError(
                    f"Invalid sequence number {h.base_sequence} in record batch with producerId "
                    f"{h.producer_id} in topic partition {name}"
                )
        if h.producer_id < 0:
            if h.is_control and origin is AppendOrigin.COORDINATOR:
                raise InvalidRecordError(f"control batch without a producer id in {name}")
            continue
        if origin is AppendOrigin.CLIENT:
            dup = append.duplicate_of(h)
            if dup is not None:
                return dup
        _stage(append, buf, h, origin)
    return append


def _stage(
    append: ProducerAppend,
    buf: bytes | bytearray | memoryview,
    h: RecordBatchHeader,
    origin: AppendOrigin,
) -> None:
    if not h.is_control:
        append.append_data(h)
        return
    try:
        marker = parse_end_txn_marker(memoryview(buf)[h.position : h.position + h.size], h)
    except RecordError as e:
        if origin in (AppendOrigin.CLIENT, AppendOrigin.COORDINATOR):
            raise
        # Taken from a leader or read back from our own log: keep going without it.
        logger.warning("Ignoring an unreadable transaction marker at offset %d in %s: %s",
                       h.base_offset, append.name, e)
        return
    if marker is not None:
        append.append_marker(h, marker)


def apply_append(
    psm: ProducerStateManager,
    append: ProducerAppend,
    segment: LogSegment,
    end_offset: int,
) -> list[CompletedTxn]:
    """Apply a staged append whose batches are now in ``segment``; aborted transactions go to
    its transaction index (an index write error leaves the entry missing until recovery, as
    in Kafka)."""
    done = psm.commit(append, end_offset)
    for txn, lso in done:
        if txn.is_aborted:
            segment.txn_index.append(
                AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso)
            )
    return [txn for txn, _ in done]


def replay_segments(
    psm: ProducerStateManager,
    segments: Sequence[LogSegment],
    start_offset: int,
    end_offset: int,
    name: str,
    *,
    rebuild_txn_index: Container[int] = (),
) -> None:
    """Apply the batches in [start_offset, end_offset) of ``segments`` to ``psm`` (taken as
    they are, as a follower does). The transaction index of each segment whose base offset is
    in ``rebuild_txn_index`` (recovered ones) is rewritten where it differs from what the
    replay finds (entries before ``start_offset`` are kept): the replay reproduces what the
    appends wrote."""
    for seg in segments:
        if seg.next_offset <= start_offset or seg.base_offset >= end_offset:
            continue
        found: list[AbortedTxn] = []
        for h in seg.iter_batch_headers(_start_position(seg, start_offset)):
            if h.base_offset >= end_offset:
                break
            if h.last_offset < start_offset or h.producer_id < 0:
                continue
            append = psm.begin(AppendOrigin.REPLICATION, name)
            if h.is_control:
                data = seg.read_bytes(h.position, h.size)
                _stage(append, data, h._replace(position=0), AppendOrigin.REPLICATION)
            else:
                append.append_data(h)
            for txn, lso in psm.commit(append, h.next_offset):
                if txn.is_aborted:
                    found.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))
        if seg.base_offset in rebuild_txn_index:
            _reconcile_txn_index(seg, found, start_offset, end_offset)
    psm.map_end_offset = end_offset


def _start_position(seg: LogSegment, offset: int) -> int:
    if offset <= seg.base_offset:
        return 0
    h = seg.translate_offset(offset)
    return h.position if h is not None else seg.size


def _reconcile_txn_index(
    seg: LogSegment, found: list[AbortedTxn], start_offset: int, end_offset: int
) -> None:
    idx = seg.txn_index
    try:
        current = idx.all_aborted()
    except Exception:  # an unreadable index is rebuilt
        current = []
        idx.reset()
    kept = [t for t in current if t.last_offset < start_offset]
    wanted = kept + found  # entries at or past end_offset describe data no longer there
    if wanted != current or idx.size != len(wanted) * ENTRY_SIZE:
        if current:
            logger.info("Rebuilt the transaction index %s (%d aborted transactions)",
                        idx.path, len(wanted))
        idx.rewrite(wanted)


def collect_aborted(
    segments: Iterable[LogSegment], start_offset: int, upper_bound_offset: int
) -> list[AbortedTxn]:
    """Aborted transactions overlapping [start_offset, upper_bound_offset), reading the
    transaction indexes of ``segments`` (from the one holding ``start_offset`` on) until an
    entry's LSO reaches the bound."""
    result: list[AbortedTxn] = []
    for seg in segments:
        found, complete = seg.txn_index.collect(start_offset, upper_bound_offset)
        result.extend(found)
        if complete:
            break
    return result


class LogTransactionsMixin:
    """The transactional read side of :class:`~odradek.log.log.Log`."""

    _lock: threading.RLock
    _high_watermark: int
    _log_start_offset: int
    _segments: LogSegments
    config: LogConfig
    producer_state: ProducerStateManager

    @property
    def last_stable_offset(self) -> int:
        """The first offset not yet decided: min(first offset of an ongoing transaction, or of
        a completed one whose marker is not below the high watermark, high watermark)."""
        with self._lock:
            hw = self._high_watermark
            first = self.producer_state.first_unstable_offset(hw)
            if first is None:
                return hw
            return min(max(first, self._log_start_offset), hw)

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_bound_offset) (the
        aborted-transactions list of a ``read_committed`` fetch)."""
        with self._lock:
            segs = self._segments.from_offset(start_offset)
        return collect_aborted(segs, start_offset, upper_bound_offset)

    def active_producers(self) -> list[ProducerInfo]:
        """DescribeProducers: the producers this partition knows."""
        with self._lock:
            return self.producer_state.active_producers()

    def producer_last_records(self) -> dict[int, LastRecord]:
        """Per producer, the batch the cleaner must keep (see cleaner_transactions)."""
        with self._lock:
            return last_records_of_producers(self.producer_state)

    def has_ongoing_transaction(self, producer_id: int) -> bool:
        with self._lock:
            return self.producer_state.has_ongoing_transaction(producer_id)

    def maybe_start_transaction_verification(
        self, producer_id: int, sequence: int, epoch: int, now_ms: int
    ) -> VerificationGuard:
        """KIP-890: the guard to pass to ``append_as_leader(verification_guard=...)`` once the
        coordinator confirmed the partition is in the producer's transaction (SENTINEL_GUARD
        when the transaction is already ongoing here: no verification needed)."""
        with self._lock:
            return self.producer_state.maybe_start_verification(
                producer_id, sequence, epoch, now_ms
            )

    def verification_guard(self, producer_id: int) -> VerificationGuard:
        with self._lock:
            return self.producer_state.verification_guard(producer_id)

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms without an ongoing transaction."""
        with self._lock:
            return self.producer_state.remove_expired_producers(
                now_ms, self.config.producer_id_expiration_ms
            )


MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024  # 5.8 million producers; larger is corrupt


class ProducerStateStore:
    """The producer state of a log with its snapshot files: loading (latest usable snapshot,
    then a replay of the log after it), snapshots at segment rolls and clean close, and
    reloading after truncation. The caller (the log) holds its lock."""

    def __init__(self, directory: str, name: str, psm: ProducerStateManager) -> None:
        self.dir = directory
        self.name = name
        self.psm = psm
        self.snapshots: dict[int, str] = {}

    def load(
        self,
        segments: Sequence[LogSegment],
        log_start: int,
        log_end: int,
        now_ms: int,
        expiration_ms: int,
        recovered: set[int],
    ) -> None:
        """Load from the latest snapshot at or below the first recovered segment (whose
        transaction indexes are rebuilt by the replay) and replay the log after it."""
        snaps = list_snapshots(self.dir)
        bases = {s.base_offset for s in segments}
        # Snapshots belong to segment bases; the latest stray one (a clean close) is kept if
        # it is past the last segment's base. Those outside the log go.
        strays = sorted(o for o in snaps if o not in bases)
        keep = strays[-1] if strays and strays[-1] > max(bases) else None
        for o in list(snaps):
            if (o in strays and o != keep) or o > log_end or o < log_start:
                remove_quietly(snaps.pop(o))
        self.snapshots = snaps
        start = self._reload(segments, log_start, log_end, now_ms, expiration_ms, recovered)
        if segments and start < segments[-1].base_offset:
            # Replayed more than the active segment: the next start need not (Kafka also
            # snapshots the end of a load).
            self.take_snapshot(log_end, sync=False)

    def _reload(
        self,
        segments: Sequence[LogSegment],
        log_start: int,
        log_end: int,
        now_ms: int | None,
        expiration_ms: int,
        recovered: frozenset[int] | set[int] = frozenset(),
    ) -> int:
        """Load the latest usable snapshot and replay after it; returns where the replay
        started."""
        limit = min([log_end, *recovered])
        start = log_start
        self.psm.clear(log_start)
        for offset in sorted((o for o in self.snapshots if log_start <= o <= limit), reverse=True):
            path = self.snapshots[offset]
            try:
                entries = read_snapshot(path, MAX_SNAPSHOT_BYTES)
            except CorruptSnapshotError as e:
                logger.warning("Failed to load producer snapshot from '%s': %s", path, e)
                remove_quietly(self.snapshots.pop(offset))
                continue
            for pid, entry in entries.items():
                expired = (
                    now_ms is not None
                    and entry.current_txn_first_offset < 0
                    and now_ms - entry.last_timestamp >= expiration_ms
                )
                if not expired:
                    self.psm.load_entry(pid, entry)
            start = offset
            break
        replay_segments(self.psm, segments, start, log_end, self.name,
                        rebuild_txn_index=recovered)
        return start

    def take_snapshot(self, offset: int, *, sync: bool) -> None:
        """Write the state (which must be as of ``offset``) to `<offset>.snapshot`."""
        if offset in self.snapshots:
            return
        path = snapshot_path(self.dir, offset)
        try:
            write_snapshot(path, self.psm.producers, sync=sync)
        except OSError as e:
            logger.warning("Could not write producer snapshot %s: %s", path, e)
            remove_quietly(path + ".tmp")
            return
        self.snapshots[offset] = path

    def truncate(
        self, segments: Sequence[LogSegment], log_start: int, log_end: int, expiration_ms: int
    ) -> None:
        """The log was truncated to ``log_end``: drop later snapshots, reload."""
        for o in [o for o in self.snapshots if o > log_end]:
            remove_quietly(self.snapshots.pop(o))
        self._reload(segments, log_start, log_end, None, expiration_ms)

    def delete_below(self, offset: int) -> None:
        """Segments below ``offset`` were deleted: so are their snapshots."""
        for o in [o for o in self.snapshots if o < offset]:
            remove_quietly(self.snapshots.pop(o))

    def delete_all(self, start: int) -> None:
        for o in list(self.snapshots):
            remove_quietly(self.snapshots.pop(o))
        self.psm.clear(start)

    def moved(self, directory: str) -> None:
        self.dir = directory
        self.snapshots = {o: os.path.join(directory, os.path.basename(p))
                          for o, p in self.snapshots.items()}
