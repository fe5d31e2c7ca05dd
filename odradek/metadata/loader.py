"""MetadataLoader: the broker's Raft listener on ``__cluster_metadata``.

Raft hands it every committed batch (and a snapshot first when the log needs one); it replays the
records, honouring KIP-868 transactions, into a :class:`~odradek.metadata.delta.MetadataDelta`
over the current image, swaps the next image into the broker's :class:`KRaftMetadataCache` by one
reference, and hands the delta's changes to its publishers — the replica manager, which turns
partition changes into leadership, and anyone else who must follow metadata. The image moves
because Raft committed, never because the controller said so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import EMPTY_IMAGE, MetadataImage
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.metadata.metadata_record_serde import MetadataRecord
from odradek.metadata.transactions import MetadataTransactions, OffsetRecord
from odradek.raft.raft_client import UNKNOWN_LEADER, Batch, LeaderAndEpoch, Listener, SnapshotReader

log = logging.getLogger(__name__)

Publisher = Callable[[MetadataDelta, MetadataImage], None]


class MetadataLoader(Listener[MetadataRecord]):
    def __init__(self, metadata_cache: KRaftMetadataCache) -> None:
        self.metadata_cache = metadata_cache
        self.publishers: list[Publisher] = []
        self.transactions = MetadataTransactions()
        # The quorum's leader, the active controller (KRaft brokers learn it from Raft).
        self.leader_and_epoch = UNKNOWN_LEADER

    # -- RaftClient.Listener ------------------------------------------------------------------

    def handle_load_snapshot(self, reader: SnapshotReader[MetadataRecord]) -> None:
        self.transactions.reset()
        offset = reader.last_contained_log_offset
        self._replay(((offset, rec) for rec in reader.records), EMPTY_IMAGE)

    def handle_commit(self, batches: Sequence[Batch[MetadataRecord]]) -> None:
        self._replay(
            (
                item
                for batch in batches
                for i, rec in enumerate(batch.records)
                for item in self.transactions.feed(batch.base_offset + i, rec)
            ),
            self.metadata_cache.image,
        )

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader_and_epoch = leader

    def begin_shutdown(self) -> None:
        log.debug("Metadata loader: Raft is shutting down at offset %d", self.metadata_cache.image.offset)

    # -- the one place records reach the broker's image -----------------------------------------

    def _replay(self, records: Iterable[OffsetRecord], base: MetadataImage) -> MetadataDelta:
        """Replay committed records into one delta over ``base``, swap the next image into the
        cache, then publish the delta."""
        delta = MetadataDelta(base)
        for offset, (name, fields) in records:
            delta.replay(name, fields, offset)
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
