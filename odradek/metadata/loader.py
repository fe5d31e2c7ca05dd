"""MetadataLoader: the broker's reader of ``__cluster_metadata``.

It replays committed records into the broker's metadata image and hands each batch of changes
(a :class:`~odradek.metadata.image.MetadataDelta`) to its publishers — the replica manager, which
turns partition changes into leadership, and anyone else who must follow metadata.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from odradek.metadata.image import MetadataDelta, MetadataImage
from odradek.raft.metadata_log import MetadataLog

log = logging.getLogger(__name__)

Publisher = Callable[[MetadataDelta, MetadataImage], None]


class MetadataLoader:
    def __init__(self, metadata_log: MetadataLog, image: MetadataImage) -> None:
        self.metadata_log = metadata_log
        self.image = image
        self.publishers: list[Publisher] = []

    def catch_up(self) -> MetadataDelta:
        """Apply every committed record not yet applied, then publish the delta."""
        delta = MetadataDelta()
        for offset, name, _version, rec in self.metadata_log.read(self.image.offset + 1):
            self.image.apply(name, rec, delta, offset)
        if not delta.is_empty():
            for publish in self.publishers:
                try:
                    publish(delta, self.image)
                except Exception:
                    # A publisher failing must not stop metadata from flowing to the others.
                    log.exception("Metadata publisher %r failed at offset %d", publish, self.image.offset)
        return delta
