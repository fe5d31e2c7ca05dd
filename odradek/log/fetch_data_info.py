"""FetchDataInfo: what a read of a log returns (Kafka's FetchDataInfo), as regions of segment
files not yet copied, for the network layer to send with ``os.sendfile``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import NamedTuple

from odradek.log.errors import KafkaStorageError


class FileRegion(NamedTuple):
    """A byte range of an open segment file (usable with os.sendfile)."""

    fd: int
    position: int
    size: int


@dataclass
class FetchDataInfo:
    """What a fetch read: whole batches as regions of segment files, not yet copied.

    The network layer sends ``file_regions`` with ``os.sendfile`` where it can; anyone who needs
    the bytes calls :meth:`to_bytes` (one copy, straight from the files).
    """

    fetch_offset: int
    regions: list[FileRegion] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(r.size for r in self.regions)

    def __len__(self) -> int:
        return self.size

    @property
    def file_regions(self) -> list[FileRegion]:
        return self.regions

    def to_bytes(self) -> bytearray:
        out = bytearray(self.size)
        view = memoryview(out)
        at = 0
        for r in self.regions:
            pos, remaining = r.position, r.size
            while remaining > 0:
                n = os.preadv(r.fd, [view[at : at + remaining]], pos)
                if n <= 0:
                    raise KafkaStorageError(f"segment file shorter than expected at position {pos}")
                at += n
                pos += n
                remaining -= n
        return out
