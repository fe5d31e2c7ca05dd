"""LogLoader: opens a partition directory and, after an unclean shutdown, recovers it (Kafka's
LogLoader). What it finds goes to :class:`~odradek.log.log.Log` as a :class:`LoadedLog`.

* Leftovers are removed: `.deleted`, `.tmp` and `.cleaned` files, uncommitted `.swap` files,
  index files without their `.log`.
* A cleaner swap that was committed (its `.log.swap` exists) but not finished is finished: the
  swapped-in segment replaces every segment within its offset range.
* After an unclean shutdown, segments holding offsets at or above the recovery point are
  rescanned (CRC included); the first corrupt or torn batch truncates the log there, later
  segments are deleted, and one warning names what was lost. Segments whose index files are
  missing or inconsistent are rebuilt whatever the shutdown was.
* The log start offset, recovery point and high watermark from the checkpoints are clamped to
  what the segments hold, and the leader-epoch cache to the log's offsets.
"""

from __future__ import annotations

import logging
import os
import re
from typing import NamedTuple

from odradek.log.checkpoint import fsync_dir
from odradek.log.errors import CorruptIndexError
from odradek.log.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILENAME, LeaderEpochFileCache
from odradek.log.log_config import LogConfig
from odradek.log.log_segments import open_segment, remove_quietly, remove_segment_files
from odradek.log.partition_metadata import read_partition_metadata
from odradek.log.segment import (
    CLEANED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    LogSegment,
    filename_prefix,
)
from odradek.log.transaction_index import TXN_INDEX_FILE_SUFFIX

logger = logging.getLogger(__name__)

_SEGMENT_FILE_RE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")


class LoadedLog(NamedTuple):
    """A loaded partition directory: what a :class:`~odradek.log.log.Log` starts from."""

    segments: list[LogSegment]  # never empty
    log_start_offset: int
    recovery_point: int
    high_watermark: int
    topic_id: bytes | None  # as stored in partition.metadata
    leader_epoch_cache: LeaderEpochFileCache


class LogLoader:
    def __init__(
        self,
        directory: str,
        config: LogConfig,
        *,
        recovery_point: int,
        log_start_offset: int,
        now_ms: int,
        clean_shutdown: bool,
        high_watermark: int | None,
    ) -> None:
        self.dir = directory
        self.config = config
        self.recovery_point = recovery_point
        self.log_start_offset = log_start_offset
        self.now_ms = now_ms
        self.clean_shutdown = clean_shutdown
        self.high_watermark = high_watermark

    def load(self) -> LoadedLog:
        """Open (creating the directory if needed) and recover the log."""
        os.makedirs(self.dir, exist_ok=True)
        bases = self._remove_leftovers_and_complete_swaps()
        segments = self._load_segments(sorted(bases))
        epoch_cache = LeaderEpochFileCache(
            os.path.join(self.dir, LEADER_EPOCH_CHECKPOINT_FILENAME)
        )
        if not segments:
            segments.append(self._open(self.log_start_offset))
        log_end = segments[-1].next_offset
        start = max(self.log_start_offset, segments[0].base_offset)
        start = min(start, log_end)
        rp = min(max(self.recovery_point, 0), log_end)
        epoch_cache.truncate_from_end(log_end)
        epoch_cache.truncate_from_start(start)
        hw_initial = self.high_watermark if self.high_watermark is not None else rp
        return LoadedLog(
            segments,
            log_start_offset=start,
            recovery_point=rp,
            high_watermark=min(max(hw_initial, start), log_end),
            topic_id=read_partition_metadata(self.dir),
            leader_epoch_cache=epoch_cache,
        )

    def _open(self, base: int, file_suffix: str = "") -> LogSegment:
        return open_segment(self.dir, base, self.config, self.now_ms, file_suffix)

    def _remove_leftovers_and_complete_swaps(self) -> set[int]:
        """The base offsets of the segments left once leftovers are removed and swaps done."""
        directory = self.dir
        bases: set[int] = set()
        swap_bases: list[int] = []
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            if name.endswith(SWAP_FILE_SUFFIX):
                m = _SEGMENT_FILE_RE.match(name[: -len(SWAP_FILE_SUFFIX)])
                if m and m.group(2) == "log":
                    swap_bases.append(int(m.group(1)))
                continue
            if name.endswith((".deleted", ".tmp", CLEANED_FILE_SUFFIX)):
                remove_quietly(path)
                continue
            m = _SEGMENT_FILE_RE.match(name)
            if m and m.group(2) == "log":
                bases.add(int(m.group(1)))
        # A `.log.swap` file is a cleaned segment whose swap was committed (see
        # Log.replace_segments) but maybe not finished: finish it. Other `.swap` files are
        # uncommitted leftovers.
        for base in sorted(swap_bases):
            self._complete_swap(base, bases)
        for name in os.listdir(directory):
            if name.endswith(SWAP_FILE_SUFFIX):
                remove_quietly(os.path.join(directory, name))
        # Orphan index files (no matching .log) are removed.
        for name in os.listdir(directory):
            m = _SEGMENT_FILE_RE.match(name)
            if m and m.group(2) != "log" and int(m.group(1)) not in bases:
                remove_quietly(os.path.join(directory, name))
        return bases

    def _complete_swap(self, base: int, bases: set[int]) -> None:
        """Finish a cleaner swap interrupted by a crash (Kafka's LogLoader does the same): the
        `.swap` segment replaces every segment whose base offset lies in its offset range."""
        directory = self.dir
        seg = self._open(base, SWAP_FILE_SUFFIX)
        try:
            mtime = os.stat(seg.log_path).st_mtime_ns
            seg.recover(self.config.max_message_bytes)  # also rebuilds its index files
            seg.flush()
            end = max(seg.next_offset, base + 1)
        finally:
            seg.close()
        for b in sorted(b for b in bases if base <= b < end):
            remove_segment_files(directory, b)
            bases.discard(b)
        prefix = os.path.join(directory, filename_prefix(base))
        os.utime(prefix + LOG_FILE_SUFFIX + SWAP_FILE_SUFFIX, ns=(mtime, mtime))
        if os.path.exists(prefix + TXN_INDEX_FILE_SUFFIX + SWAP_FILE_SUFFIX):
            os.replace(prefix + TXN_INDEX_FILE_SUFFIX + SWAP_FILE_SUFFIX, prefix + TXN_INDEX_FILE_SUFFIX)
        for suffix in (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX):
            os.replace(prefix + suffix + SWAP_FILE_SUFFIX, prefix + suffix)
        fsync_dir(directory)
        bases.add(base)

    def _load_segments(self, ordered: list[int]) -> list[LogSegment]:
        """Open the segments, recovering those that need it; a truncation by recovery deletes
        every later segment."""
        directory = self.dir
        config = self.config
        segments: list[LogSegment] = []
        truncated_at: int | None = None
        truncated: LogSegment | None = None
        later: list[tuple[int, int]] = []  # (base, bytes) of segments after the truncated one
        for i, base in enumerate(ordered):
            if truncated_at is not None:
                # An earlier segment was truncated by recovery: later data is unreachable.
                later.append((base, _file_size(os.path.join(directory, filename_prefix(base)))))
                remove_segment_files(directory, base)
                continue
            seg = self._open(base)
            had_indexes = os.path.getsize(seg.offset_index.path) > 0 or seg.size == 0
            next_base = ordered[i + 1] if i + 1 < len(ordered) else None
            needs_recovery = not self.clean_shutdown and (
                next_base is None or next_base > self.recovery_point
            )
            if not needs_recovery:
                try:
                    seg.load()
                    if not had_indexes and seg.size > 4 * config.index_interval_bytes:
                        needs_recovery = True  # index missing: rebuild it
                except CorruptIndexError:
                    needs_recovery = True
            if needs_recovery:
                if seg.recover(config.max_message_bytes) > 0:
                    truncated_at = seg.next_offset
                    truncated = seg
            if seg.size == 0 and segments and truncated_at is not None:
                seg.delete()
                continue
            segments.append(seg)
        if truncated is not None and truncated.last_truncation is not None:
            logger.warning(
                "Recovery of partition %s: %s",
                os.path.basename(directory.rstrip(os.sep)),
                truncated.last_truncation.describe(truncated.log_path, later),
            )
        return segments


def _file_size(prefix: str) -> int:
    try:
        return os.path.getsize(prefix + LOG_FILE_SUFFIX)
    except OSError:
        return 0
