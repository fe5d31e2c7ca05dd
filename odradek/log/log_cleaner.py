"""LogCleaner: Kafka's log compaction, for logs whose ``cleanup.policy`` contains ``compact``.

What it guarantees, as in Kafka:

* the latest record of every key survives; older records of the key are removed once a later
  one is below the cleaning point; offsets never change (a rewritten batch keeps its base offset,
  ``lastOffsetDelta``, each record's offset delta, timestamps, headers, producer id / epoch / base
  sequence, partition leader epoch and compression codec);
* a tombstone (null value) survives ``delete.retention.ms`` after the cleaner first saw it, then
  goes. This is Kafka's KIP-534 scheme: the first cleaning of a batch holding tombstones sets the
  batch's delete-horizon attribute bit and stores ``now + delete.retention.ms`` in its base
  timestamp (record timestamp deltas are rebased, so record timestamps are unchanged). The horizon
  therefore lives in the log itself and survives restarts, replication and re-cleaning;
* records without a key are dropped (compacted topics reject them at produce time);
* the last batch of each idempotent producer is kept, emptied of its records if need be (a bare
  61-byte header, as Kafka writes it), so the producer's sequence continues after cleaning and
  after a reload;
* only whole, non-active segments wholly below the high watermark and older than
  ``min.compaction.lag.ms`` are cleaned (so a record a leader change could truncate never makes an
  older one disappear); the active segment is never touched;
* a log is cleaned when its dirty ratio (bytes of the cleanable dirty section over bytes of the
  clean + cleanable sections, the clean section being what is below the cleaner checkpoint)
  exceeds ``min.cleanable.dirty.ratio``, or when its oldest dirty record is older than
  ``max.compaction.lag.ms``, or when a tombstone's delete horizon has passed; the dirtiest goes
  first, one log per :meth:`LogCleaner.clean_once`.

How: an offset map (key -> latest offset) is built over the dirty section, then every segment
from the log start to the end of the dirty section is rewritten, in groups of consecutive
segments whose total size fits ``segment.bytes``, into `<base>.log.cleaned` (+ indexes, rebuilt
while writing), which :meth:`Log.replace_segments` swaps in (`.cleaned` -> `.swap` -> live
names, under the log lock, old segments' descriptors closed later so in-flight reads stay valid).
A crash anywhere leaves the old segments or the new one
(:class:`~odradek.log.log_loader.LogLoader` finishes a committed swap). The cleaning point of each log is kept in ``cleaner-offset-checkpoint`` in its log
directory (Kafka's format: ``0``, count, ``topic partition offset`` lines).

Sans-clock: every entry point takes ``now_ms``. It runs on one worker thread of its own (driven by
:meth:`odradek.log.log_manager.LogManager.clean_logs`), never on the request path: it reads
non-active segments without the log lock and takes it only to snapshot the segment list and to
swap segments.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from odradek.log.checkpoint import OffsetCheckpointFile
from odradek.log.cleaner_batches import empty_batch, rebuild_batch
from odradek.log.cleaner_transactions import (
    CleanedTransactionMetadata,
    LastRecord,
    has_delete_horizon,
    is_last_record_of_producer,
)
from odradek.log.log import Log
from odradek.log.segment import (
    CLEANED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    MAX_RELATIVE_OFFSET,
    TIME_INDEX_FILE_SUFFIX,
    LogSegment,
    filename_prefix,
)
from odradek.log.storage_health import STORAGE_HEALTH
from odradek.log.transaction_index import TXN_INDEX_FILE_SUFFIX
from odradek.records.batch import (
    DELETE_HORIZON_FLAG_MASK,
    BatchInfo,
    RecordBatchHeader,
    is_batch_crc_valid,
    iter_batches,
    parse_header,
)
from odradek.records.compression import decompressed_limit
from odradek.records.errors import CorruptRecordError
from odradek.records.records import Record, iter_batch_records

logger = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
NO_MAX_COMPACTION_LAG = 2**63 - 1
# Python-side cost of one offset-map entry beyond its key bytes (dict slot, bytes and int
# objects); dedupe_buffer_size is spent in these units.
MAP_ENTRY_OVERHEAD = 100
IO_CHUNK = 1 << 20

TopicPartition = tuple[str, int]
_UINT32 = struct.Struct(">I")


@dataclass(frozen=True)
class CleanerConfig:
    """Broker-level cleaner settings (``log.cleaner.*``)."""

    enable: bool = True  # log.cleaner.enable
    backoff_ms: int = 15000  # log.cleaner.backoff.ms: pause when nothing was cleaned
    dedupe_buffer_size: int = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size


@dataclass
class CleanerStats:
    """What one cleaning of one log did (logged, and kept as ``LogCleaner.last_stats``)."""

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int
    segments_before: int = 0
    segments_after: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0
    batches_rewritten: int = 0
    batches_removed: int = 0
    map_entries: int = 0


@dataclass
class LogToClean:
    """A compacted log's sections, as seen when choosing what to clean."""

    tp: TopicPartition
    log: Log
    log_dir: str
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_segments: list[LogSegment]  # non-active, from the log start, below first dirty
    cleanable_segments: list[LogSegment]  # dirty and eligible, up to first uncleanable
    need_compaction_now: bool  # max.compaction.lag.ms exceeded
    tombstones_expired: bool  # a delete horizon has passed in the clean section

    @property
    def clean_bytes(self) -> int:
        return sum(s.size for s in self.clean_segments)

    @property
    def cleanable_bytes(self) -> int:
        return sum(s.size for s in self.cleanable_segments)

    @property
    def cleanable_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


class CleaningAbortedError(Exception):
    """The log was deleted / closed, or the cleaner shut down, while it was being cleaned."""


@dataclass
class _Pass:
    """Per-cleaning state shared by the batch filter."""

    log: Log
    offset_map: dict[bytes, int]
    producer_last: dict[int, LastRecord]
    now_ms: int
    delete_retention_ms: int
    stats: CleanerStats
    min_horizon: int | None = None
    txn: CleanedTransactionMetadata = field(default_factory=CleanedTransactionMetadata)

    def note_horizon(self, horizon: int) -> None:
        if self.min_horizon is None or horizon < self.min_horizon:
            self.min_horizon = horizon


class LogCleaner:
    """Compacts the logs returned by ``logs()`` (a LogManager's ``all_logs``).

    Call :meth:`clean_once` (one log) or :meth:`clean_logs` (every eligible log) from a single
    worker thread; :meth:`abort_and_wait`, :meth:`is_cleaning`, :meth:`forget` and
    :meth:`shutdown` may be called from any thread.
    """

    def __init__(
        self,
        logs: Callable[[], Mapping[TopicPartition, Log]],
        config: CleanerConfig | None = None,
    ) -> None:
        self._logs = logs
        self.config = config or CleanerConfig()
        self._cond = threading.Condition()
        self._run_lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self._in_progress: Log | None = None
        self._stopped = False
        self._aborted: weakref.WeakSet[Log] = weakref.WeakSet()
        self._uncleanable: weakref.WeakSet[Log] = weakref.WeakSet()
        # Earliest delete horizon of a tombstone in the clean section (None: none there).
        self._horizons: weakref.WeakKeyDictionary[Log, int | None] = weakref.WeakKeyDictionary()
        self._checkpoints: dict[str, dict[TopicPartition, int]] = {}
        self.last_stats: CleanerStats | None = None

    # ====================================================================== public API
    def clean_once(self, now_ms: int) -> int:
        """Clean the dirtiest eligible log. Returns the number of logs cleaned (0 or 1): when 0,
        wait ``backoff_ms`` before trying again."""
        return self._clean_once(now_ms, set())

    def clean_logs(self, now_ms: int) -> int:
        """Clean every eligible log once, dirtiest first. Returns the number cleaned."""
        done: set[int] = set()
        cleaned = 0
        while not self._stopped:
            before = len(done)
            cleaned += self._clean_once(now_ms, done)
            if len(done) == before:
                break
        return cleaned

    def is_cleaning(self, log: Log) -> bool:
        with self._cond:
            return self._in_progress is log

    def abort_and_wait(self, log: Log) -> None:
        """Stop cleaning ``log`` (it is being deleted or closed) and wait until the cleaner no
        longer touches it. The log is never picked again."""
        with self._cond:
            self._aborted.add(log)
            while self._in_progress is log:
                self._cond.wait()

    def shutdown(self) -> None:
        """Abort the cleaning in progress, wait for it, and refuse further work."""
        with self._cond:
            self._stopped = True
            while self._in_progress is not None:
                self._cond.wait()

    def forget(self, tp: TopicPartition, log_dir: str) -> None:
        """Drop a deleted log's entry from its directory's cleaner checkpoint."""
        with self._checkpoint_lock:
            offsets = self._read_checkpoint(log_dir)
            if offsets.pop(tp, None) is not None:
                self._write_checkpoint(log_dir, offsets)

    def checkpoint_offset(self, tp: TopicPartition, log_dir: str) -> int | None:
        with self._checkpoint_lock:
            return self._read_checkpoint(log_dir).get(tp)

    # ====================================================================== selection
    def log_to_clean(self, tp: TopicPartition, log: Log, now_ms: int) -> LogToClean:
        """Split a compacted log into its clean and cleanable sections (Kafka's
        LogCleanerManager.cleanableOffsets)."""
        config = log.config
        log_dir = os.path.dirname(log.dir.rstrip(os.sep))
        segs = log.segments
        start = log.log_start_offset
        # Never past the last stable offset: undecided transactions are not compacted.
        hw = min(log.high_watermark, log.last_stable_offset)
        active = segs[-1]
        checkpoint = self.checkpoint_offset(tp, log_dir)
        first_dirty = start
        if checkpoint is not None and start <= checkpoint <= active.base_offset:
            first_dirty = checkpoint  # else: reset (truncated, or a stale entry)
        # from the segment holding the log start (segments wholly below it are retention's)
        first = max(0, bisect.bisect_right([s.base_offset for s in segs], start) - 1)
        candidates = segs[first:-1]
        clean = [s for s in candidates if s.next_offset <= first_dirty]
        dirty = [s for s in candidates if s.next_offset > first_dirty]
        cleanable: list[LogSegment] = []
        min_lag = config.min_compaction_lag_ms
        for seg in dirty:
            if seg.next_offset > hw:
                break  # not all replicated (a truncation could remove its records) or stable
            if min_lag > 0 and seg.largest_timestamp > now_ms - min_lag:
                break
            cleanable.append(seg)
        if cleanable:
            idx = next(k for k, s in enumerate(segs) if s is cleanable[-1])
            first_uncleanable = segs[idx + 1].base_offset
        else:
            first_uncleanable = first_dirty
        need_now = False
        max_lag = config.max_compaction_lag_ms
        if 0 < max_lag < NO_MAX_COMPACTION_LAG and dirty:
            firsts = [h.max_timestamp for h in (s.read_header(0) for s in dirty) if h is not None]
            firsts = [t for t in firsts if t > 0]
            need_now = bool(firsts) and min(firsts) < now_ms - max_lag
        horizon = self._pending_horizon(log, clean)
        return LogToClean(
            tp=tp,
            log=log,
            log_dir=log_dir,
            first_dirty_offset=first_dirty,
            first_uncleanable_offset=first_uncleanable,
            clean_segments=clean,
            cleanable_segments=cleanable,
            need_compaction_now=need_now,
            tombstones_expired=horizon is not None and horizon <= now_ms,
        )

    def _pending_horizon(self, log: Log, clean: list[LogSegment]) -> int | None:
        if log in self._horizons:
            return self._horizons[log]
        # First sight of this log since start-up: read the horizons from batch headers.
        horizon: int | None = None
        for seg in clean:
            for h in seg.iter_batch_headers():
                if h.attributes & DELETE_HORIZON_FLAG_MASK and h.records_count > 0:
                    if horizon is None or h.base_timestamp < horizon:
                        horizon = h.base_timestamp
        self._horizons[log] = horizon
        return horizon

    def grab_filthiest_log(self, now_ms: int, exclude: set[int] | None = None) -> LogToClean | None:
        """The log to clean now (Kafka's grabFilthiestCompactedLog), or None."""
        candidates: list[LogToClean] = []
        for tp, log in sorted(self._logs().items()):
            if (
                not log.config.compact
                or log.closed
                or log in self._aborted
                or log in self._uncleanable
                or (exclude is not None and id(log) in exclude)
            ):
                continue
            try:
                candidates.append(self.log_to_clean(tp, log, now_ms))
            except OSError:
                logger.exception("cannot inspect %s-%d for cleaning", tp[0], tp[1])
        eligible = [
            c
            for c in candidates
            if (c.need_compaction_now and c.cleanable_bytes > 0)
            or c.cleanable_ratio > c.log.config.min_cleanable_dirty_ratio
        ]
        if not eligible:
            # Nothing dirty enough: use the quiet time to drop tombstones past their horizon.
            eligible = [c for c in candidates if c.tombstones_expired]
        if not eligible:
            return None
        return max(eligible, key=lambda c: c.cleanable_ratio)

    # ======================================================================== cleaning
    def _clean_once(self, now_ms: int, done: set[int]) -> int:
        with self._run_lock:
            if self._stopped:
                return 0
            ltc = self.grab_filthiest_log(now_ms, done)
            if ltc is None:
                return 0
            log = ltc.log
            with self._cond:
                if self._stopped or log in self._aborted or log.closed:
                    return 0
                self._in_progress = log
            done.add(id(log))
            try:
                stats = self.clean(ltc, now_ms)
            except CleaningAbortedError as exc:
                logger.info("Cleaning of %s-%d aborted: %s", ltc.tp[0], ltc.tp[1], exc)
                return 0
            except OSError as exc:
                # Disk full or an I/O error: retried at the next pass; logged once until a
                # cleaning succeeds (see storage_health).
                STORAGE_HEALTH.failed(ltc.log_dir, f"cleaning {ltc.tp[0]}-{ltc.tp[1]}", exc)
                return 0
            except Exception:
                logger.exception(
                    "Cleaning of %s-%d failed; the log is marked uncleanable until restart",
                    ltc.tp[0],
                    ltc.tp[1],
                )
                self._uncleanable.add(log)
                return 0
            finally:
                with self._cond:
                    self._in_progress = None
                    self._cond.notify_all()
        self.last_stats = stats
        STORAGE_HEALTH.succeeded(ltc.log_dir)
        logger.info(
            "Cleaned log %s-%d up to offset %d: %d segments -> %d, %d -> %d bytes, "
            "%d of %d records removed (%d keys in the offset map)",
            stats.topic,
            stats.partition,
            stats.end_offset,
            stats.segments_before,
            stats.segments_after,
            stats.bytes_read,
            stats.bytes_written,
            stats.records_removed,
            stats.records_read,
            stats.map_entries,
        )
        return 1

    def _check_abort(self, log: Log) -> None:
        if self._stopped:
            raise CleaningAbortedError("the cleaner is shutting down")
        if log in self._aborted or log.closed:
            raise CleaningAbortedError("the log was closed or deleted")

    def clean(self, ltc: LogToClean, now_ms: int) -> CleanerStats:
        """Clean one log (Kafka's Cleaner.doClean) and advance its cleaner checkpoint."""
        log = ltc.log
        stats = CleanerStats(ltc.tp[0], ltc.tp[1], ltc.first_dirty_offset, ltc.first_dirty_offset)
        offset_map, mapped = self._build_offset_map(ltc, stats)
        if mapped < len(ltc.cleanable_segments):
            end_offset = ltc.cleanable_segments[mapped].base_offset
        else:
            end_offset = ltc.first_uncleanable_offset
        stats.end_offset = end_offset
        stats.map_entries = len(offset_map)
        ctx = _Pass(
            log=log,
            offset_map=offset_map,
            producer_last=log.producer_last_records(),
            now_ms=now_ms,
            delete_retention_ms=log.config.delete_retention_ms,
            stats=stats,
        )
        to_clean = ltc.clean_segments + ltc.cleanable_segments[:mapped]
        stats.segments_before = len(to_clean)
        i = 0
        while i < len(to_clean):
            self._check_abort(log)
            group = self._group(to_clean, i, log.config.segment_bytes)
            consumed = self._clean_segments(log, group, ctx)
            stats.segments_after += 1
            i += consumed
        self._horizons[log] = ctx.min_horizon
        if self.checkpoint_offset(ltc.tp, ltc.log_dir) != end_offset:
            self._update_checkpoint(ltc.log_dir, ltc.tp, end_offset)
        return stats

    def _build_offset_map(
        self, ltc: LogToClean, stats: CleanerStats
    ) -> tuple[dict[bytes, int], int]:
        """key -> latest offset over the cleanable dirty segments, stopping at a segment
        boundary once the dedupe budget is spent. Returns the map and the segments mapped."""
        budget = self.config.dedupe_buffer_size
        limit = decompressed_limit(ltc.log.config.max_message_bytes)
        used = 0
        offset_map: dict[bytes, int] = {}
        mapped = 0
        # Records of aborted transactions never enter the map (nor shadow committed ones).
        txn = CleanedTransactionMetadata()
        if ltc.cleanable_segments:
            txn.add_aborted(ltc.log.collect_aborted_transactions(
                ltc.cleanable_segments[0].base_offset, ltc.first_uncleanable_offset))
        for seg in ltc.cleanable_segments:
            if mapped and used >= budget:
                break
            for h, raw in _iter_segment_batches(seg):
                self._check_abort(ltc.log)
                if h.is_control:
                    txn.on_control_batch(h, raw)
                    continue
                if txn.on_batch(h):
                    continue
                for rec in iter_batch_records(raw, limit):
                    key = rec.key
                    if key is None:
                        continue
                    if key not in offset_map:
                        used += len(key) + MAP_ENTRY_OVERHEAD
                    offset_map[key] = rec.offset
            mapped += 1
        return offset_map, mapped

    @staticmethod
    def _group(segs: list[LogSegment], start: int, max_bytes: int) -> list[LogSegment]:
        """Consecutive segments from ``start`` whose total size fits one segment (Kafka's
        groupSegmentsBySize); relative offsets must fit the index too."""
        first = segs[start]
        group = [first]
        size = first.size
        for seg in segs[start + 1 :]:
            if size + seg.size > max_bytes:
                break
            if seg.next_offset - 1 - first.base_offset > MAX_RELATIVE_OFFSET:
                break
            group.append(seg)
            size += seg.size
        return group

    def _clean_segments(self, log: Log, group: list[LogSegment], ctx: _Pass) -> int:
        """Rewrite ``group`` into one `.cleaned` segment and swap it in. If the cleaned data
        would overflow ``segment.bytes`` (rebased tombstone batches can grow), the segment ends
        before the source segment that overflowed it. Returns the source segments consumed."""
        config = log.config
        base = group[0].base_offset
        sizes = [(s, s.size) for s in group]
        _remove_cleaned_files(log.dir, base)
        writer = LogSegment(
            log.dir,
            base,
            index_interval_bytes=config.index_interval_bytes,
            max_index_size=config.segment_index_bytes,
            now_ms=ctx.now_ms,
            file_suffix=CLEANED_FILE_SUFFIX,
        )
        consumed = 0
        ctx.txn.cleaned_index = writer.txn_index  # the ABORT markers kept, with their entries
        try:
            for src in group:
                self._check_abort(log)
                had_data = writer.size > 0
                horizons_before = ctx.min_horizon
                txn_before = ctx.txn.snapshot()
                overflow = self._clean_into(
                    src, writer, ctx, config.segment_bytes if had_data else None
                )
                if overflow:
                    writer.truncate_to(src.base_offset)
                    ctx.min_horizon = horizons_before
                    ctx.txn = txn_before
                    break
                consumed += 1
            writer.on_become_inactive()
            writer.flush()
            last_modified = max(s.last_modified_ms for s in group[:consumed])
            ns = max(last_modified, 0) * 1_000_000
            os.utime(writer.log_path, ns=(ns, ns))
            written = writer.size
        except BaseException:
            writer.close()
            _remove_cleaned_files(log.dir, base)
            raise
        writer.close()
        self._check_abort(log)
        new = log.replace_segments(sizes[:consumed], base, ctx.now_ms)
        if new is None:
            raise CleaningAbortedError("the log's segments changed while it was being cleaned")
        ctx.stats.bytes_written += written
        return consumed

    def _clean_into(
        self, src: LogSegment, writer: LogSegment, ctx: _Pass, limit: int | None
    ) -> bool:
        """Append the cleaned batches of ``src`` to ``writer``. Returns True (having maybe
        written part of them) when they would make ``writer`` larger than ``limit``."""
        buf = bytearray()
        infos: list[BatchInfo] = []
        stats = ctx.stats
        ctx.txn.add_aborted(ctx.log.collect_aborted_transactions(src.base_offset, src.next_offset))

        def flush() -> bool:
            nonlocal buf, infos
            if not buf:
                return False
            if limit is not None and writer.size + len(buf) > limit:
                return True
            writer.append(buf, infos, None)
            buf = bytearray()
            infos = []
            return False

        for h, raw in _iter_segment_batches(src):
            self._check_abort(ctx.log)
            stats.bytes_read += h.size
            out = self._clean_batch(h, raw, ctx)
            if out is None:
                stats.batches_removed += 1
                continue
            oh = parse_header(out, 0)
            infos.append(
                BatchInfo(
                    oh.base_offset,
                    oh.last_offset,
                    oh.max_timestamp,
                    len(buf),
                    oh.size,
                    oh.partition_leader_epoch,
                )
            )
            buf += out
            if len(buf) >= IO_CHUNK and flush():
                return True
        return flush()

    def _clean_batch(
        self, h: RecordBatchHeader, raw: memoryview, ctx: _Pass
    ) -> bytes | memoryview | None:
        """The batch to write in place of ``raw``: itself, a rebuilt batch holding the records
        to keep, an empty header (a producer's last batch), or None (drop it)."""
        is_last_of_producer = is_last_record_of_producer(h, ctx.producer_last)
        if h.is_control:
            return self._clean_marker(h, raw, ctx, is_last_of_producer)
        if ctx.txn.on_batch(h):  # an aborted transaction's records all go
            ctx.stats.records_read += h.records_count
            ctx.stats.records_removed += h.records_count
            if not is_last_of_producer:
                return None
            return empty_batch(h) if h.records_count else raw
        if h.records_count == 0:  # an emptied batch: kept while it is its producer's last
            return raw if is_last_of_producer else None
        flagged = bool(h.attributes & DELETE_HORIZON_FLAG_MASK)
        horizon = h.base_timestamp if flagged else None
        offset_map = ctx.offset_map
        now_ms = ctx.now_ms

        def keep(rec: Record) -> bool:
            if rec.key is None:
                return False  # not allowed in compacted topics
            latest = offset_map.get(rec.key)
            if latest is not None and latest > rec.offset:
                return False  # superseded
            # a tombstone past its delete horizon goes
            return not (rec.value is None and horizon is not None and now_ms >= horizon)

        # Records are decoded one at a time and only the kept ones are held (a batch can hold
        # millions of tiny records): a first pass decides, a second collects if anything goes.
        limit = decompressed_limit(ctx.log.config.max_message_bytes)
        count = kept = 0
        has_tombstones = False
        for rec in iter_batch_records(raw, limit):
            count += 1
            if keep(rec):
                kept += 1
                has_tombstones = has_tombstones or rec.value is None
        ctx.stats.records_read += count
        if kept == count and (flagged or not has_tombstones):
            if has_tombstones and horizon is not None:
                ctx.note_horizon(horizon)
            return raw
        retained = [rec for rec in iter_batch_records(raw, limit) if keep(rec)] if kept else []
        ctx.stats.records_removed += count - kept
        if not retained:
            if is_last_of_producer:
                ctx.stats.batches_rewritten += 1
                return empty_batch(h)
            return None
        new_horizon: int | None = None
        if has_tombstones:
            new_horizon = horizon if horizon is not None else ctx.now_ms + ctx.delete_retention_ms
            ctx.note_horizon(new_horizon)
        ctx.stats.batches_rewritten += 1
        return rebuild_batch(h, retained, new_horizon)

    @staticmethod
    def _clean_marker(
        h: RecordBatchHeader, raw: memoryview, ctx: _Pass, is_last_of_producer: bool
    ) -> bytes | memoryview | None:
        """A control batch: kept while its transaction has records; then kept
        ``delete.retention.ms`` more (a delete horizon is set) and removed (emptied if it is
        its producer's last batch)."""
        discardable = ctx.txn.on_control_batch(h, raw)
        horizon = h.base_timestamp if has_delete_horizon(h) else None
        if discardable and horizon is not None and horizon <= ctx.now_ms:
            if not is_last_of_producer:
                return None
            return empty_batch(h) if h.records_count else raw
        if not discardable or h.records_count == 0:
            return raw
        if horizon is None:
            horizon = ctx.now_ms + ctx.delete_retention_ms
            limit = decompressed_limit(ctx.log.config.max_message_bytes)
            ctx.note_horizon(horizon)
            ctx.stats.batches_rewritten += 1
            return rebuild_batch(h, list(iter_batch_records(raw, limit)), horizon)
        ctx.note_horizon(horizon)
        return raw

    # ===================================================================== checkpoints
    def _read_checkpoint(self, log_dir: str) -> dict[TopicPartition, int]:
        offsets = self._checkpoints.get(log_dir)
        if offsets is None:
            path = os.path.join(log_dir, CLEANER_OFFSET_CHECKPOINT_FILE)
            try:
                offsets = OffsetCheckpointFile(path).read()
            except (ValueError, OSError):
                logger.warning("ignoring unreadable cleaner checkpoint %s", path)
                offsets = {}
            self._checkpoints[log_dir] = offsets
        return offsets

    def _write_checkpoint(self, log_dir: str, offsets: dict[TopicPartition, int]) -> None:
        path = os.path.join(log_dir, CLEANER_OFFSET_CHECKPOINT_FILE)
        OffsetCheckpointFile(path).write(dict(sorted(offsets.items())))

    def _update_checkpoint(self, log_dir: str, tp: TopicPartition, offset: int) -> None:
        live = {
            t for t, lg in self._logs().items() if os.path.dirname(lg.dir.rstrip(os.sep)) == log_dir
        }
        with self._checkpoint_lock:
            offsets = self._read_checkpoint(log_dir)
            offsets[tp] = offset
            for stale in [t for t in offsets if t not in live and t != tp]:
                del offsets[stale]
            self._write_checkpoint(log_dir, offsets)


def _iter_segment_batches(seg: LogSegment) -> Iterator[tuple[RecordBatchHeader, memoryview]]:
    """Every batch of a (non-active) segment, CRC-checked, read in large chunks."""
    pos = 0
    size = seg.size
    while pos < size:
        chunk = seg.read_bytes(pos, min(IO_CHUNK, size - pos))
        if not chunk:
            break
        view = memoryview(chunk)
        consumed = 0
        for h in iter_batches(view):
            yield h._replace(position=pos + h.position), _checked(view, h.position, h.size, pos)
            consumed = h.position + h.size
        if consumed == 0:  # one batch larger than the chunk
            first = seg.read_header(pos)
            if first is None:
                raise CorruptRecordError(f"unreadable batch at position {pos} of {seg.log_path}")
            data = memoryview(seg.read_bytes(pos, first.size))
            if len(data) != first.size:
                raise CorruptRecordError(f"truncated batch at position {pos} of {seg.log_path}")
            yield first, _checked(data, 0, first.size, pos)
            consumed = first.size
        pos += consumed


def _checked(view: memoryview, position: int, size: int, base: int) -> memoryview:
    if not is_batch_crc_valid(view, position, size):
        raise CorruptRecordError(f"batch at file position {base + position} failed its CRC check")
    return view[position : position + size]


def _remove_cleaned_files(directory: str, base: int) -> None:
    prefix = os.path.join(directory, filename_prefix(base))
    for suffix in (LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX):
        try:
            os.unlink(prefix + suffix + CLEANED_FILE_SUFFIX)
        except FileNotFoundError:
            pass
