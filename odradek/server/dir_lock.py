"""Exclusive use of the data directories: a ``.lock`` file in each, held while the node runs.

Kafka's LogManager locks ``<dir>/.lock`` in every log directory (and the metadata directory)
before it reads anything there, so that a second broker on the same directories fails at once
instead of both writing the same segments. The lock here is ``flock`` (which also conflicts
between two brokers in one process, e.g. two embedded brokers) plus a POSIX record lock, the kind
Kafka's ``FileChannel.tryLock`` takes, so that a Kafka broker and an Odradek node on the same
directory refuse each other too. The lock file is empty and never removed (as in Kafka: removing
it would let a third process lock a new file while the second still holds the old one).
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Iterable

LOCK_FILE = ".lock"

# Directories (real paths) locked by this process: a second lock attempt from this process
# fails here, before it opens (and by closing, would release) the POSIX lock of the first.
_held: set[str] = set()
_held_lock = threading.Lock()


class StartupError(Exception):
    """The node cannot start for a reason an operator fixes outside Odradek (a directory in
    use, a port taken); ``odradek server`` prints the message as one line and exits with 2."""


class DirLock:
    """The lock on one directory; :meth:`release` it when the node stops."""

    def __init__(self, directory: str, fd: int, key: str) -> None:
        self.directory = directory
        self._fd = fd
        self._key = key

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        with _held_lock:
            _held.discard(self._key)
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)  # also drops the POSIX lock

    def __repr__(self) -> str:
        return f"DirLock({self.directory!r}, held={self.held})"


def _in_use(directory: str) -> StartupError:
    return StartupError(
        f"data directory {directory} is in use by another process "
        f"(its {LOCK_FILE} file is locked); stop that process or use another directory"
    )


def lock_dir(directory: str) -> DirLock:
    """Create ``directory`` if needed and lock its ``.lock`` file, or raise StartupError."""
    path = os.path.abspath(directory)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise StartupError(f"cannot create data directory {path}: {e.strerror}") from e
    key = os.path.realpath(path)
    with _held_lock:
        if key in _held:
            raise _in_use(path)
        _held.add(key)
    try:
        fd = os.open(os.path.join(path, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        with _held_lock:
            _held.discard(key)
        raise StartupError(f"cannot open {os.path.join(path, LOCK_FILE)}: {e.strerror}") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        with _held_lock:
            _held.discard(key)
        if isinstance(e, BlockingIOError) or e.errno in (errno.EAGAIN, errno.EACCES):
            raise _in_use(path) from e
        raise StartupError(f"cannot lock {os.path.join(path, LOCK_FILE)}: {e.strerror}") from e
    return DirLock(path, fd, key)


def lock_dirs(directories: Iterable[str]) -> list[DirLock]:
    """Lock every distinct directory, in order; on failure release those taken and raise."""
    locks: list[DirLock] = []
    seen: set[str] = set()
    try:
        for d in directories:
            key = os.path.realpath(os.path.abspath(d))
            if key in seen:
                continue
            seen.add(key)
            locks.append(lock_dir(d))
    except BaseException:
        for lock in reversed(locks):
            lock.release()
        raise
    return locks
