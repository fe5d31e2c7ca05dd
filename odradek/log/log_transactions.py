"""The transactional side of a partition log (Kafka's UnifiedLog producer-state parts), kept out
of :mod:`odradek.log.log`: analysing an append's producer batches, applying it (transaction
index entries for aborted transactions), rebuilding the producer state from the segments, and
collecting the aborted transactions of a ``read_committed`` fetch.
"""

from __future__ import annotations

import logging
from collections.abc import Container, Iterable, Sequence

from odradek.log.append_origin import AppendOrigin
from odradek.log.producer_state import (
    BatchMetadata,
    CompletedTxn,
    ProducerAppend,
    ProducerStateManager,
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
) -> ProducerAppend | BatchMetadata:
    """Check every batch of a validated (offsets assigned) buffer against the producer state.
    Returns the staged changes, or for a client's retry the batch already in the log. Raises
    the log errors of a refused append (nothing is changed then)."""
    append = psm.begin(origin, name)
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
