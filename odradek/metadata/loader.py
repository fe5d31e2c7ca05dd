"""MetadataLoader: the broker's reader of ``__cluster_metadata``.

It replays committed records into a :class:`~odradek.metadata.delta.MetadataDelta` over the
current image, swaps the next image into the broker's :class:`KRaftMetadataCache` by one
reference, and hands the delta's changes to its publishers — the replica manager, which turns
partition changes into leadership, and anyone else who must follow metadata.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import MetadataImage
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.raft.metadata_log import MetadataLog

log = logging.getLogger(__name__)

Publisher = Callable[[MetadataDelta, MetadataImage], None]


class MetadataLoader:
    def __init__(self, metadata_log: MetadataLog, metadata_cache: KRaftMetadataCache) -> None:
        self.metadata_log = metadata_log
        self.metadata_cache = metadata_cache
        self.publishers: list[Publisher] = []

    def catch_up(self) -> MetadataDelta:
        """Apply every committed record not yet applied, then publish the delta."""
        delta = MetadataDelta(self.metadata_cache.image)
        for offset, name, _version, rec in self.metadata_log.read(delta.image.offset + 1):
            delta.replay(name, rec, offset)
        image = delta.apply()
        self.metadata_cache.set_image(image)
        if not delta.is_empty():
            for publish in self.publishers:
                try:
                    publish(delta, image)
                except Exception:
                    # A publisher failing must not stop metadata from flowing to the others.
                    log.exception("Metadata publisher %r failed at offset %d", publish, image.offset)
        return delta
