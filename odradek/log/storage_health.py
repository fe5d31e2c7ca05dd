"""Failing writes, logged once per episode rather than once per request.

A full disk (ENOSPC), a quota (EDQUOT) or an I/O error (EIO) makes every append to a log
directory fail until space comes back. Kafka then marks the whole directory offline; Odradek
answers KAFKA_STORAGE_ERROR to the appends that fail, undoes what they wrote, keeps serving reads,
and takes writes again as soon as one succeeds (see :class:`odradek.log.log.Log`). The operator
hears of it twice: one ERROR when a directory's writes start failing and one INFO when they
succeed again, however many requests fail in between.
"""

from __future__ import annotations

import logging
import os
import threading

logger = logging.getLogger("odradek.log.storage")


def describe(exc: BaseException) -> str:
    """``No space left on device`` rather than ``[Errno 28] No space left on device: '/x'``."""
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)
    return str(exc) or type(exc).__name__


class StorageHealth:
    """Per log directory: is it failing writes, and since which error."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failing: dict[str, int] = {}  # directory -> failures since the first one

    def is_failing(self, log_dir: str) -> bool:
        with self._lock:
            return log_dir in self._failing

    def failed(self, log_dir: str, what: str, exc: BaseException) -> None:
        """A write under ``log_dir`` failed (``what``: e.g. "appending to t-0")."""
        with self._lock:
            first = log_dir not in self._failing
            self._failing[log_dir] = self._failing.get(log_dir, 0) + 1
        if first:
            logger.error(
                "Writes to log directory %s fail: %s (while %s). Produce requests to its "
                "partitions get KAFKA_STORAGE_ERROR until a write succeeds again; reads go on. "
                "Logged once until then.",
                log_dir, describe(exc), what,
            )
        else:
            logger.debug("write to %s failed again (while %s): %s", log_dir, what, exc)

    def succeeded(self, log_dir: str) -> None:
        if not self._failing:  # the common case, without the lock
            return
        with self._lock:
            failures = self._failing.pop(log_dir, None)
        if failures is not None:
            logger.info(
                "Writes to log directory %s succeed again (%d failed in between)",
                log_dir, failures,
            )


# One per process: every Log reports here.
STORAGE_HEALTH = StorageHealth()
