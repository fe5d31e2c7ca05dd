"""Kafka's text checkpoint files, written atomically (tmp file + fsync + rename + dir fsync).

Format: a version line, a count line, then one entry per line with space-separated fields.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping


def fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        # Disk full: the old file stays as it was; don't leave a partial .tmp taking space.
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def write_checkpoint_lines(path: str, version: int, lines: Iterable[str]) -> None:
    body = list(lines)
    text = f"{version}\n{len(body)}\n" + "".join(line + "\n" for line in body)
    atomic_write(path, text.encode("utf-8"))


def read_checkpoint_lines(path: str, expected_version: int = 0) -> list[list[str]] | None:
    """Return the entry lines split on whitespace, or None when the file does not exist.

    Raises ValueError on a malformed file.
    """
    try:
        with open(path, encoding="utf-8") as f:
            raw = f.read().splitlines()
    except FileNotFoundError:
        return None
    if len(raw) < 2:
        raise ValueError(f"malformed checkpoint file {path}: too short")
    version = int(raw[0].strip())
    if version != expected_version:
        raise ValueError(f"unrecognised version {version} in checkpoint file {path}")
    count = int(raw[1].strip())
    entries = [line.split() for line in raw[2:] if line.strip()]
    if len(entries) != count:
        raise ValueError(f"checkpoint file {path} declares {count} entries but has {len(entries)}")
    return entries


class OffsetCheckpointFile:
    """`topic partition offset` checkpoints (recovery points, log start offsets, HWs)."""

    VERSION = 0

    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        lines = [f"{topic} {partition} {offset}" for (topic, partition), offset in offsets.items()]
        write_checkpoint_lines(self.path, self.VERSION, lines)

    def read(self) -> dict[tuple[str, int], int]:
        entries = read_checkpoint_lines(self.path, self.VERSION)
        if entries is None:
            return {}
        out: dict[tuple[str, int], int] = {}
        for fields in entries:
            if len(fields) != 3:
                raise ValueError(f"malformed line {' '.join(fields)!r} in {self.path}")
            out[(fields[0], int(fields[1]))] = int(fields[2])
        return out
