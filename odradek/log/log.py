"""Log: one partition's log (Kafka's UnifiedLog) in `<log_dir>/<topic>-<partition>/`.

It owns the log start offset, high watermark, recovery point, leader epochs and producer state;
the segments are a :class:`~odradek.log.log_segments.LogSegments`, opening and recovery are
:class:`~odradek.log.log_loader.LogLoader`'s, and reads return a
:class:`~odradek.log.fetch_data_info.FetchDataInfo`. Transactions (producer state with its
`.snapshot` files, last stable offset, `.txnindex`) are :mod:`odradek.log.log_transactions`'.

Synchronous and clock-free: every time-dependent method takes ``now_ms``. One writer thread plus
concurrent flushes/reads are safe: segment-list mutation, appends and reads hold ``self._lock``;
fsyncs run outside it.
"""

from __future__ import annotations

import os
import shutil
import threading
import time

from odradek.log.append_origin import AppendOrigin
from odradek.log.checkpoint import fsync_dir
from odradek.log.errors import (
    CorruptIndexError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    UnexpectedAppendOffsetError,
)
from odradek.log.fetch_data_info import FetchDataInfo, FileRegion
from odradek.log.leader_epoch import UNDEFINED_EPOCH, LeaderEpochFileCache
from odradek.log.log_config import LogConfig
from odradek.log.log_flush_stats import LOG_FLUSH_STATS
from odradek.log.log_loader import LogLoader
from odradek.log.log_segments import LogSegments, open_segment, remove_quietly
from odradek.log.log_transactions import (
    LogTransactionsMixin,
    ProducerStateStore,
    analyze_append,
    apply_append,
)
from odradek.log.partition_metadata import write_partition_metadata
from odradek.log.producer_state import BatchMetadata, ProducerStateManager, VerificationGuard
from odradek.log.record_validation import check_batch_timestamps, check_records
from odradek.log.segment import (
    CLEANED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    LogSegment,
    filename_prefix,
)
from odradek.log.storage_health import STORAGE_HEALTH
from odradek.log.storage_health import describe as describe_os_error
from odradek.log.transaction_index import TXN_INDEX_FILE_SUFFIX
from odradek.records.batch import (
    AppendInfo,
    validate,
    validate_and_assign,
)
from odradek.records.errors import (
    InvalidTimestampError,
    RecordBatchTooLargeError,
)
from odradek.records.recompress import recompress_batches

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


def parse_topic_partition_dir(name: str) -> tuple[str, int] | None:
    """`<topic>-<partition>` -> (topic, partition); topic names may contain '-'."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


class Log(LogTransactionsMixin):
    def __init__(
        self,
        directory: str,
        config: LogConfig,
        segments: list[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        high_watermark: int,
        topic_id: bytes | None,
        leader_epoch_cache: LeaderEpochFileCache,
        now_ms: int,
    ) -> None:
        self.dir = directory
        parsed = parse_topic_partition_dir(os.path.basename(directory.rstrip(os.sep)))
        self.topic, self.partition = (
            parsed if parsed is not None else (os.path.basename(directory), 0)
        )
        self.config = config
        self._lock = threading.RLock()
        self._segments = LogSegments(segments)
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._high_watermark = high_watermark
        self._topic_id = topic_id
        self._topic_id_saved = True  # False while partition.metadata could not be written
        self.leader_epoch_cache = leader_epoch_cache
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms
        self._closed = False
        # Idempotent and transactional producer state, loaded now: the LSO must be right
        # from the start.
        self.producer_state = ProducerStateManager()
        self._producers = ProducerStateStore(directory, self._name, self.producer_state)
        self._producers.load(
            segments,
            log_start_offset,
            self.log_end_offset,
            now_ms,
            config.producer_id_expiration_ms,
            {s.base_offset for s in segments if s.recovered or not s.txn_index_sane()},
        )

    # =========================================================================== loading
    @classmethod
    def load(
        cls,
        directory: str,
        config: LogConfig,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        now_ms: int = 0,
        clean_shutdown: bool = True,
        *,
        high_watermark: int | None = None,
        topic_id: bytes | None = None,
    ) -> Log:
        """Open (creating if needed) and, after an unclean shutdown, recover a partition log
        (see :class:`~odradek.log.log_loader.LogLoader`)."""
        loaded = LogLoader(
            directory,
            config,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            now_ms=now_ms,
            clean_shutdown=clean_shutdown,
            high_watermark=high_watermark,
        ).load()
        log = cls(
            directory,
            config,
            loaded.segments,
            log_start_offset=loaded.log_start_offset,
            recovery_point=loaded.recovery_point,
            high_watermark=loaded.high_watermark,
            topic_id=loaded.topic_id,
            leader_epoch_cache=loaded.leader_epoch_cache,
            now_ms=now_ms,
        )
        if topic_id is not None and loaded.topic_id != topic_id:
            try:
                log.assign_topic_id(topic_id)
            except OSError as e:  # disk full: written at the first append that succeeds
                log._storage_failure(e, "creating")
        return log

    # ========================================================================= properties
    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments.active.next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        with self._lock:
            self._high_watermark = min(max(value, self._log_start_offset), self.log_end_offset)

    @property
    def topic_id(self) -> bytes | None:
        return self._topic_id

    @property
    def size(self) -> int:
        with self._lock:
            return self._segments.size_in_bytes()

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return self._segments.values()

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.active

    @property
    def latest_epoch(self) -> int:
        return self.leader_epoch_cache.latest_epoch

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self.config = config

    def assign_topic_id(self, topic_id: bytes) -> None:
        """Record the topic id in `partition.metadata` (`version: 0` / `topic_id: <base64>`)."""
        self._topic_id, self._topic_id_saved = topic_id, False
        write_partition_metadata(self.dir, topic_id)
        self._topic_id_saved = True

    # ============================================================================= append
    @property
    def needs_flush(self) -> bool:
        """flush.messages reached: the caller must flush (off its event loop) before acking."""
        return self._unflushed_messages >= self.config.flush_messages

    @property
    def _name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def append_as_leader(
        self,
        buf: bytearray,
        leader_epoch: int,
        now_ms: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guard: VerificationGuard | None = None,
    ) -> AppendInfo:
        """Validate a produce buffer, assign offsets in place and append it.

        With a ``compression.type`` other than ``producer``, batches in another codec are stored
        re-encoded in the topic's codec (not in ``buf``: the returned info describes what was
        stored).

        A batch an idempotent producer already wrote (a retry) is not appended again: the
        returned info carries the original offsets and ``num_batches == 0``.

        ``origin``: see :class:`AppendOrigin`; only ``COORDINATOR`` appends COMMIT/ABORT
        markers (a client's control batch is INVALID_RECORD). ``verification_guard`` (KIP-890,
        None: not verified): a transactional batch opening a transaction must carry the guard
        of :meth:`maybe_start_transaction_verification` (else INVALID_TXN_STATE).
        """
        with self._lock:
            config = self.config
            info = validate_and_assign(
                buf,
                self.log_end_offset,
                leader_epoch=leader_epoch,
                max_message_bytes=config.max_message_bytes,
                log_append_time_ms=now_ms if config.log_append_time else None,
            )
            if info.num_batches == 0:
                return info
            tp = f"{self.topic}-{self.partition}"
            if not config.log_append_time:
                try:
                    check_batch_timestamps(buf, info, config, now_ms)
                except InvalidTimestampError:
                    # Name the records that are out (KIP-467); the header's error stands if
                    # none is (its max timestamp can disagree with the records).
                    check_records(
                        buf, info, config, now_ms, tp, keys=config.compact, timestamps=True
                    )
                    raise
            if config.compact:
                check_records(
                    buf, info, config, now_ms, tp, keys=True, timestamps=not config.log_append_time
                )
            staged = analyze_append(
                self.producer_state, buf, info, origin, tp, verification_guard
            )
            if isinstance(staged, BatchMetadata):
                return AppendInfo(
                    first_offset=staged.first_offset,
                    last_offset=staged.last_offset,
                    max_timestamp=staged.max_timestamp,
                )
            codec = config.compression_codec
            if codec is not None:
                # compression.type other than 'producer': batches in another codec are
                # rewritten; sizes below are those of what is stored.
                rewritten = recompress_batches(
                    buf,
                    info,
                    codec,
                    config.compression_level,
                    max_message_bytes=config.max_message_bytes,
                )
                if rewritten is not None:
                    buf, info = rewritten
            if info.valid_bytes > config.segment_bytes:
                raise RecordBatchTooLargeError(
                    f"append of {info.valid_bytes} bytes exceeds segment.bytes {config.segment_bytes}"
                )
            try:
                if leader_epoch > self.leader_epoch_cache.latest_epoch:
                    self.leader_epoch_cache.assign(leader_epoch, info.first_offset)
                self._append(buf, info, now_ms)
            except OSError as e:
                raise self._storage_failure(e, "appending to") from e
            apply_append(self.producer_state, staged, self._segments.active, info.next_offset)
        return info

    def append_as_follower(
        self, buf: bytes | bytearray | memoryview, now_ms: int | None = None
    ) -> AppendInfo:
        """Append batches whose offsets were assigned by the leader (CRC-checked, not rewritten)."""
        with self._lock:
            config = self.config
            info = validate(buf, max_message_bytes=max(config.max_message_bytes, 1))
            if info.num_batches == 0:
                return info
            if info.first_offset < self.log_end_offset:
                raise UnexpectedAppendOffsetError(
                    f"follower append starts at {info.first_offset}, below the log end offset "
                    f"{self.log_end_offset} of {self.topic}-{self.partition}"
                )
            if info.valid_bytes > config.segment_bytes:
                raise RecordBatchTooLargeError(
                    f"append of {info.valid_bytes} bytes exceeds segment.bytes {config.segment_bytes}"
                )
            # A follower keeps the producers' state as it appends (Kafka's replication origin:
            # taken, not validated), so that as a new leader it still recognises a retried
            # batch, refuses a gap, and knows the ongoing transactions (LSO).
            staged = analyze_append(
                self.producer_state, buf, info, AppendOrigin.REPLICATION, self._name
            )
            assert not isinstance(staged, BatchMetadata)
            try:
                for b in info.batches:
                    if b.partition_leader_epoch > self.leader_epoch_cache.latest_epoch:
                        self.leader_epoch_cache.assign(b.partition_leader_epoch, b.base_offset)
                self._append(buf, info, now_ms)
            except OSError as e:
                raise self._storage_failure(e, "appending to") from e
            apply_append(self.producer_state, staged, self._segments.active, info.next_offset)
        return info

    def _append(
        self, buf: bytes | bytearray | memoryview, info: AppendInfo, now_ms: int | None
    ) -> None:
        """Write the batches; on OSError (disk full, I/O error) nothing is appended: the
        segment undoes a partial write, and the next append tries again."""
        seg = self._maybe_roll(info, now_ms)
        seg.append(memoryview(buf)[: info.valid_bytes], info.batches, now_ms)
        self._unflushed_messages += info.num_records
        STORAGE_HEALTH.succeeded(os.path.dirname(self.dir))
        if not self._topic_id_saved and self._topic_id is not None:
            try:
                self.assign_topic_id(self._topic_id)
            except OSError:
                pass  # the next append tries again

    def _storage_failure(self, e: OSError, doing: str) -> KafkaStorageError:
        """Report a failed write once per episode (see storage_health) and make it the
        KAFKA_STORAGE_ERROR the client gets."""
        STORAGE_HEALTH.failed(os.path.dirname(self.dir), f"{doing} {self.topic}-{self.partition}", e)
        return KafkaStorageError(
            f"Cannot write to {self.topic}-{self.partition}: {describe_os_error(e)}"
        )

    def _maybe_roll(self, info: AppendInfo, now_ms: int | None) -> LogSegment:
        seg = self._segments.active
        config = self.config
        segment_ms = config.segment_ms
        if config.compact and config.max_compaction_lag_ms > 0:
            # The cleaner never touches the active segment: roll it in time (Kafka's maxSegmentMs).
            segment_ms = min(segment_ms, config.max_compaction_lag_ms)
        if seg.size == 0:
            if info.first_offset != seg.base_offset and not seg.can_hold(info.last_offset):
                return self.roll(info.first_offset, now_ms)
            return seg
        if (
            seg.size + info.valid_bytes > config.segment_bytes
            or (now_ms is not None and seg.time_waited_for_roll(now_ms) > segment_ms)
            or seg.indexes_full
            or not seg.can_hold(info.last_offset)
        ):
            return self.roll(max(info.first_offset, self.log_end_offset), now_ms)
        return seg

    def roll(self, new_base: int | None = None, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at ``new_base`` (default: the log end offset)."""
        with self._lock:
            old = self._segments.active
            base = self.log_end_offset if new_base is None else max(new_base, self.log_end_offset)
            if old.size == 0 and base == old.base_offset:
                return old
            if old.size:
                old.on_become_inactive()
            # The new segment is opened before the old one changes: if that fails (disk full),
            # the log is as it was.
            seg = open_segment(
                self.dir, base, self.config, now_ms if now_ms is not None else old.last_modified_ms
            )
            if old.size == 0:
                # Replace an empty active segment rather than leaving an empty one behind.
                self._segments.pop()
                old.delete()
            self._segments.append(seg)
            self._producers.take_snapshot(base, sync=False)
            return seg

    # =============================================================================== read
    def read(
        self,
        start_offset: int,
        max_bytes: int,
        isolation_max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Regions of whole batches from the segment holding ``start_offset``; batches holding
        offsets >= ``isolation_max_offset`` (HW or LSO) are excluded."""
        with self._lock:
            leo = self.log_end_offset
            if start_offset < self._log_start_offset or start_offset > leo:
                raise OffsetOutOfRangeError(
                    f"offset {start_offset} is out of range for {self.topic}-{self.partition}: "
                    f"log start {self._log_start_offset}, log end {leo}"
                )
            result = FetchDataInfo(start_offset)
            if start_offset == leo:
                return result
            if isolation_max_offset is not None and start_offset >= isolation_max_offset:
                return result
            for seg in self._segments.from_offset(start_offset):
                max_position: int | None = None
                if isolation_max_offset is not None and isolation_max_offset < seg.next_offset:
                    h = seg.translate_offset(isolation_max_offset)
                    max_position = h.position if h is not None else seg.size
                r = seg.read(start_offset, max_bytes, max_position, min_one_message)
                if r is not None:
                    if r[1] > 0:
                        result.regions.append(FileRegion(seg.fileno(), r[0], r[1]))
                    return result
                if max_position is not None:
                    return result
            return result

    # =========================================================================== offsets
    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int, int] | None:
        """ListOffsets: (offset, timestamp, leader_epoch) or None.

        -2 earliest, -4 earliest local, -1 latest, -5 latest tiered, -3 max timestamp (KIP-734),
        otherwise the first record at or after the log start whose timestamp >= ``timestamp``.
        """
        with self._lock:
            cache = self.leader_epoch_cache
            if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                start = self._log_start_offset
                return start, -1, cache.epoch_for_offset(start)
            if timestamp in (LATEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP):
                return self.log_end_offset, -1, cache.latest_epoch
            if timestamp == MAX_TIMESTAMP:
                best: LogSegment | None = None
                for seg in self._segments:
                    if seg.max_timestamp_so_far >= 0 and (
                        best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far
                    ):
                        best = seg
                if best is None:
                    return None
                return best.find_max_timestamp_record()
            if timestamp < 0:
                return None
            for seg in self._segments:
                if (
                    seg.max_timestamp_so_far >= timestamp
                    and seg.next_offset > self._log_start_offset
                ):
                    found = seg.find_offset_by_timestamp(timestamp, self._log_start_offset)
                    if found is not None:
                        return found
            return None

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= ``epoch``, end offset of that epoch)."""
        with self._lock:
            return self.leader_epoch_cache.end_offset_for_epoch(epoch, self.log_end_offset)

    # ========================================================================= deletion
    def delete_records(self, offset: int, now_ms: int = 0) -> int:
        """DeleteRecords: move the log start offset (-1 = the high watermark). Returns the new
        low watermark. Raises OffsetOutOfRangeError beyond the high watermark."""
        with self._lock:
            target = self._high_watermark if offset == -1 else offset
            if target < 0 or target > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records of {self.topic}-{self.partition} up to {offset}: "
                    f"high watermark is {self._high_watermark}"
                )
            self.maybe_increment_log_start_offset(target, now_ms)
            return self._log_start_offset

    def maybe_increment_log_start_offset(self, offset: int, now_ms: int = 0) -> bool:
        """Advance the log start offset and delete segments wholly below it (never the active one)."""
        with self._lock:
            if offset > self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"log start offset {offset} is beyond the log end offset {self.log_end_offset}"
                )
            if offset <= self._log_start_offset:
                return False
            self._log_start_offset = offset
            if self._high_watermark < offset:
                self._high_watermark = offset
            if self._recovery_point < offset:
                self._recovery_point = offset
            self.leader_epoch_cache.truncate_from_start(offset)
            self._delete_prefix(self._segments.count_at_or_below(offset), now_ms)
            return True

    def delete_old_segments(self, now_ms: int) -> int:
        """Retention: delete segments past retention.ms / retention.bytes or wholly below the
        log start offset. Only segments below the high watermark and never the active one.
        Returns the number of segments deleted."""
        with self._lock:
            segs = self._segments
            segs.close_retired(now_ms)
            config = self.config
            # A segment is deletable only if all of it is below the high watermark.
            limit = segs.count_at_or_below(self._high_watermark)
            n = segs.count_at_or_below(self._log_start_offset)
            if config.delete:
                if config.retention_ms >= 0:
                    k = 0
                    while k < limit and now_ms - segs[k].largest_timestamp > config.retention_ms:
                        k += 1
                    n = max(n, k)
                if config.retention_bytes >= 0:
                    diff = segs.size_in_bytes() - config.retention_bytes
                    k = 0
                    while k < limit and diff - segs[k].size >= 0:
                        diff -= segs[k].size
                        k += 1
                    n = max(n, k)
            n = min(n, len(segs) - 1)
            if n == 0:
                return 0
            self._delete_prefix(n, now_ms)
            new_start = self._segments[0].base_offset
            if new_start > self._log_start_offset:
                self._log_start_offset = new_start
                self.leader_epoch_cache.truncate_from_start(new_start)
                if self._recovery_point < new_start:
                    self._recovery_point = new_start
                if self._high_watermark < new_start:
                    self._high_watermark = new_start
            return n

    def _delete_prefix(self, n: int, now_ms: int) -> None:
        if n <= 0:
            return
        # Unlinked now, closed at a retention pass after file.delete.delay.ms.
        deadline = now_ms + self.config.file_delete_delay_ms
        for seg in self._segments.take_prefix(n):
            self._segments.retire(seg, deadline)
        self._producers.delete_below(self._segments[0].base_offset)

    # ======================================================================= compaction
    def producer_last_offsets(self) -> dict[int, int]:
        """Last offset of each idempotent producer's last batch (the cleaner keeps that batch,
        emptied if need be, so the producer's sequence survives compaction and reloads)."""
        with self._lock:
            return {
                pid: entry.batches[-1].last_offset
                for pid, entry in self.producer_state.producers.items()
                if entry.batches
            }

    def replace_segments(
        self, old: list[tuple[LogSegment, int]], new_base: int, now_ms: int
    ) -> LogSegment | None:
        """Swap the cleaner's `<new_base>.{log,index,timeindex}.cleaned` files in for the
        consecutive non-active segments ``old`` ((segment, size when cleaned) pairs; the first
        has base offset ``new_base``). The files must be complete and fsynced.

        Steps, each leaving a loadable log if the process dies there: `.cleaned` -> `.swap`
        (the `.log` rename last: it is the commit point, after which
        :class:`~odradek.log.log_loader.LogLoader` finishes the swap instead of discarding it),
        directory fsync, old segments unlinked (their descriptors stay open for in-flight reads
        until ``file.delete.delay.ms`` has passed, like retention), `.swap` -> live names,
        directory fsync. All under the log lock, so readers and appenders
        see the old list or the new one.

        Returns the new segment, or None (the `.cleaned` files removed) when ``old`` is no longer
        what the log holds (retention, DeleteRecords or truncation ran meanwhile)."""
        prefix = os.path.join(self.dir, filename_prefix(new_base))
        suffixes: tuple[str, ...] = (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX)
        if os.path.exists(prefix + TXN_INDEX_FILE_SUFFIX + CLEANED_FILE_SUFFIX):
            suffixes = (TXN_INDEX_FILE_SUFFIX, *suffixes)
        with self._lock:
            segs = self._segments
            first = old[0][0] if old else None
            i = segs.index_of(first) if first is not None else -1
            valid = (
                i >= 0
                and first is not None
                and first.base_offset == new_base
                and i + len(old) < len(segs)  # never the active segment
                and all(
                    segs[i + k] is seg and seg.size == size and not seg.closed
                    for k, (seg, size) in enumerate(old)
                )
                and not self._closed
            )
            if not valid:
                for suffix in suffixes:
                    remove_quietly(prefix + suffix + CLEANED_FILE_SUFFIX)
                return None
            for suffix in suffixes:
                os.replace(
                    prefix + suffix + CLEANED_FILE_SUFFIX, prefix + suffix + SWAP_FILE_SUFFIX
                )
            fsync_dir(self.dir)
            deadline = now_ms + self.config.file_delete_delay_ms
            for seg, _ in old:
                segs.retire(seg, deadline)
            for suffix in suffixes:
                os.replace(prefix + suffix + SWAP_FILE_SUFFIX, prefix + suffix)
            fsync_dir(self.dir)
            seg = open_segment(self.dir, new_base, self.config, now_ms)
            try:
                seg.load()
            except CorruptIndexError:
                seg.recover(self.config.max_message_bytes)
            segs.replace(i, len(old), seg)
            return seg

    # ======================================================================= truncation
    def truncate_to(self, offset: int) -> bool:
        """Remove everything at or above ``offset`` (follower truncation). Returns True if
        anything was removed."""
        with self._lock:
            if offset < 0:
                raise ValueError(f"cannot truncate to a negative offset {offset}")
            if offset >= self.log_end_offset:
                # Nothing to remove, but the epoch cache may end with an epoch that has no
                # record (this replica led it without appending): drop it, as Kafka does, or
                # the follower keeps asking for that epoch and the leader keeps answering with
                # the same diverging epoch.
                self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
                return False
            if offset < self._log_start_offset or offset <= self._segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            segs = self._segments
            while len(segs) > 1 and segs.active.base_offset >= offset:
                segs.retire(segs.pop(), 0)
            segs.active.truncate_to(offset)
            leo = self.log_end_offset
            self.leader_epoch_cache.truncate_from_end(leo)
            self._recovery_point = min(self._recovery_point, leo)
            self._high_watermark = min(self._high_watermark, leo)
            self._unflushed_messages = 0
            self._producers.truncate(
                segs.values(), self._log_start_offset, leo, self.config.producer_id_expiration_ms
            )
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete all segments and restart the log empty at ``offset``."""
        with self._lock:
            segs = self._segments
            last_modified_ms = segs.active.last_modified_ms
            # The old files go first: the new segment may reuse their names.
            for old in segs.values():
                segs.retire(old, 0)
            segs.reset(open_segment(self.dir, offset, self.config, last_modified_ms))
            self.leader_epoch_cache.clear()
            self._log_start_offset = offset
            self._recovery_point = offset
            self._high_watermark = offset
            self._unflushed_messages = 0
            self._producers.delete_all(offset)

    # ============================================================================ flush
    def flush(self, up_to_offset: int | None = None, now_ms: int | None = None) -> None:
        """fsync segments holding offsets in [recovery point, up_to_offset) and advance the
        recovery point. Safe to call from another thread than the writer."""
        with self._lock:
            leo = self.log_end_offset
            target = leo if up_to_offset is None else min(up_to_offset, leo)
            start = self._recovery_point
            segs = [
                s
                for i, s in enumerate(self._segments)
                if s.base_offset < target
                and (i + 1 == len(self._segments) or self._segments[i + 1].base_offset > start)
            ]
            if target == leo:
                self._unflushed_messages = 0
        started = time.monotonic()
        for s in segs:
            try:
                s.flush()
            except OSError as e:
                if not s.closed:
                    raise self._storage_failure(e, "flushing") from e
        if segs:
            LOG_FLUSH_STATS.record((time.monotonic() - started) * 1000.0)
        with self._lock:
            if target > self._recovery_point:
                self._recovery_point = target
            if now_ms is not None:
                self._last_flush_ms = now_ms

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._segments.active.on_become_inactive()
            segs = self._segments.values()
        for s in segs:
            s.flush()
        with self._lock:
            self._producers.take_snapshot(self.log_end_offset, sync=True)
            self._recovery_point = self.log_end_offset
            self._segments.close_all()
            self._closed = True

    def retire(self) -> None:
        """The log is being deleted: no more use, nothing flushed, but its segment files stay
        open until :meth:`close_files`, so that fetch responses already handed to the network
        (sendfile reads the descriptors later) stay valid and no descriptor number is reused
        under them. Kafka likewise deletes a log's files ``file.delete.delay.ms`` later."""
        with self._lock:
            self._closed = True
            self._segments.detach_files()

    def close_files(self) -> None:
        """Close the segment files of a retired log."""
        with self._lock:
            self._segments.close_all()

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        with self._lock:
            self._segments.detach_files()
            self._segments.close_all()
            self._closed = True
            shutil.rmtree(self.dir, ignore_errors=True)

    def rename_dir(self, new_dir: str) -> None:
        """Move the partition directory (used before asynchronous deletion)."""
        with self._lock:
            self._segments.detach_files()
            os.rename(self.dir, new_dir)
            self.dir = new_dir
            self._producers.moved(new_dir)

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self._log_start_offset}, "
            f"end={self.log_end_offset}, hw={self._high_watermark}, segments={len(self._segments)})"
        )


__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "Log",
    "UNDEFINED_EPOCH",
    "parse_topic_partition_dir",
]
