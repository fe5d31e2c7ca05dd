"""Leader epoch cache (Kafka's LeaderEpochFileCache) and its `leader-epoch-checkpoint` file."""

from __future__ import annotations

import bisect
import threading

from odradek.log.checkpoint import read_checkpoint_lines, write_checkpoint_lines

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
LEADER_EPOCH_CHECKPOINT_FILENAME = "leader-epoch-checkpoint"


class LeaderEpochFileCache:
    """Ordered (epoch, start_offset) entries; persisted on every change when a path is given."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._entries: list[tuple[int, int]] = []
        self._dirty = False  # the last write of the file failed: retry at the next change
        if path is not None:
            try:
                lines = read_checkpoint_lines(path, 0)
            except ValueError:
                lines = None  # corrupt: start empty, it is rebuilt as epochs are assigned
            for fields in lines or []:
                self._entries.append((int(fields[0]), int(fields[1])))

    @property
    def entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        with self._lock:
            return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    @property
    def earliest_entry(self) -> tuple[int, int] | None:
        with self._lock:
            return self._entries[0] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``.

        Entries that would break monotonicity (epoch >= new epoch or start >= new start) are
        dropped, as Kafka does.
        """
        if epoch < 0:
            return
        with self._lock:
            if self._entries and self._entries[-1] == (epoch, start_offset):
                if self._dirty:
                    self._flush()
                return
            if self._entries and self._entries[-1][0] == epoch:
                # Same epoch already known: keep the earliest start offset.
                if self._entries[-1][1] <= start_offset:
                    return
            self._entries = [(e, s) for (e, s) in self._entries if e < epoch and s < start_offset]
            self._entries.append((epoch, start_offset))
            self._flush()

    def epoch_for_offset(self, offset: int) -> int:
        with self._lock:
            starts = [s for _, s in self._entries]
            i = bisect.bisect_right(starts, offset) - 1
            return self._entries[i][0] if i >= 0 else UNDEFINED_EPOCH

    def end_offset_for_epoch(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch answer: (largest epoch <= requested, its end offset)."""
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH or not self._entries:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if requested_epoch == self._entries[-1][0]:
                return requested_epoch, log_end_offset
            epochs = [e for e, _ in self._entries]
            hi = bisect.bisect_right(epochs, requested_epoch)
            if hi >= len(self._entries):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            higher_start = self._entries[hi][1]
            if hi == 0:
                return requested_epoch, higher_start
            return self._entries[hi - 1][0], higher_start

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (log truncated to end_offset)."""
        with self._lock:
            kept = [(e, s) for (e, s) in self._entries if s < end_offset]
            if kept != self._entries:
                self._entries = kept
                self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Log start moved to ``start_offset``: drop entries fully below it, clamp the last one."""
        with self._lock:
            below = [i for i, (_, s) in enumerate(self._entries) if s <= start_offset]
            if not below:
                return
            last = below[-1]
            epoch, start = self._entries[last]
            new = [(epoch, max(start, start_offset))] + self._entries[last + 1 :]
            if new != self._entries:
                self._entries = new
                self._flush()

    def clear(self) -> None:
        with self._lock:
            self._entries = []
            self._flush()

    def _flush(self) -> None:
        if self.path is None:
            return
        self._dirty = True
        write_checkpoint_lines(self.path, 0, [f"{e} {s}" for e, s in self._entries])
        self._dirty = False
