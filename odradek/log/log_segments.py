"""LogSegments: the ordered segments of one partition log (Kafka's LogSegments), and the
segments taken out of it whose files are unlinked but whose descriptors stay open a while.

Not thread-safe on its own: the owning :class:`~odradek.log.log.Log` holds its lock around every
change. The list is only ever mutated in place by single list operations, so a reader of
:attr:`LogSegments.active` without the lock sees the old last segment or the new one.
"""

from __future__ import annotations

import bisect
import os
import shutil
from collections.abc import Iterator

from odradek.log.log_config import LogConfig
from odradek.log.segment import (
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    LogSegment,
    filename_prefix,
)
from odradek.log.transaction_index import TXN_INDEX_FILE_SUFFIX


def open_segment(
    directory: str, base: int, config: LogConfig, now_ms: int, file_suffix: str = ""
) -> LogSegment:
    """Open (creating if needed) the segment of ``directory`` at ``base`` with the log's index
    settings; ``file_suffix`` names files being swapped in (`.swap`)."""
    return LogSegment(
        directory,
        base,
        index_interval_bytes=config.index_interval_bytes,
        max_index_size=config.segment_index_bytes,
        now_ms=now_ms,
        file_suffix=file_suffix,
    )


class LogSegments:
    """Segments ordered by base offset (never empty: the last one is the active segment), with
    their base offsets for floor lookups."""

    def __init__(self, segments: list[LogSegment]) -> None:
        if not segments:
            raise ValueError("a log has at least one segment")
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        # (close deadline, segment): taken out and unlinked, descriptor still open.
        self._retired: list[tuple[int, LogSegment]] = []

    # ---------------------------------------------------------------------------- reading
    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    def __getitem__(self, i: int) -> LogSegment:
        return self._segments[i]

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    def values(self) -> list[LogSegment]:
        """A copy of the list."""
        return list(self._segments)

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def floor_index(self, offset: int) -> int:
        """Index of the segment holding ``offset`` (the first one for offsets below it)."""
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    def from_offset(self, offset: int) -> list[LogSegment]:
        """The segment holding ``offset`` and every later one."""
        return self._segments[self.floor_index(offset) :]

    def count_at_or_below(self, offset: int) -> int:
        """How many leading segments are followed by one starting at or below ``offset`` (so
        lie wholly below it), never counting the active segment."""
        n = 0
        segs = self._segments
        while n + 1 < len(segs) and segs[n + 1].base_offset <= offset:
            n += 1
        return n

    def index_of(self, segment: LogSegment) -> int:
        """Position of ``segment`` (the object itself), -1 if it is not in the log."""
        return next((k for k, s in enumerate(self._segments) if s is segment), -1)

    # --------------------------------------------------------------------------- changing
    def append(self, segment: LogSegment) -> None:
        self._segments.append(segment)
        self._bases.append(segment.base_offset)

    def pop(self) -> LogSegment:
        """Take out the last segment (the caller retires or deletes it)."""
        self._bases.pop()
        return self._segments.pop()

    def take_prefix(self, n: int) -> list[LogSegment]:
        """Take out the first ``n`` segments."""
        doomed = self._segments[:n]
        del self._segments[:n]
        del self._bases[:n]
        return doomed

    def replace(self, i: int, count: int, segment: LogSegment) -> None:
        """Put ``segment`` in place of the ``count`` segments from position ``i``."""
        self._segments[i : i + count] = [segment]
        self._bases[i : i + count] = [segment.base_offset]

    def reset(self, segment: LogSegment) -> None:
        """Make ``segment`` the only one (the caller has retired the others)."""
        self._segments = [segment]
        self._bases = [segment.base_offset]

    # --------------------------------------------------------------------------- retiring
    def retire(self, segment: LogSegment, close_deadline_ms: int) -> None:
        """Unlink a segment taken out of the list now; close its descriptor at the first
        :meth:`close_retired` after the deadline, so that in-flight reads and sendfile calls on
        it stay valid and the descriptor number is not reused under them."""
        segment.unlink_files()
        self._retired.append((close_deadline_ms, segment))

    def close_retired(self, now_ms: int | None) -> None:
        """Close the retired segments whose deadline has passed (all of them if None)."""
        keep = []
        for deadline, seg in self._retired:
            if now_ms is None or now_ms >= deadline:
                seg.close()
            else:
                keep.append((deadline, seg))
        self._retired = keep

    def detach_files(self) -> None:
        """The directory is going away (and may be renamed): no index is written again."""
        for s in self._segments:
            s.detach_files()
        for _, s in self._retired:
            s.detach_files()

    def close_all(self) -> None:
        """Close every segment, retired ones included."""
        for s in self._segments:
            s.close()
        self.close_retired(None)


def remove_quietly(path: str) -> None:
    try:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def remove_segment_files(directory: str, base: int) -> None:
    prefix = os.path.join(directory, filename_prefix(base))
    for suffix in (LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX):
        remove_quietly(prefix + suffix)
