"""MetadataLoader: the broker's Raft listener on ``__cluster_metadata``.

Raft hands it every committed batch (and a snapshot first when the log needs one); it replays the
records into the broker's metadata image, honouring KIP-868 transactions, and hands each batch of
changes (a :class:`~odradek.metadata.image.MetadataDelta`) to its publishers — the replica
manager, which turns partition changes into leadership, and anyone else who must follow metadata.
The image moves because Raft committed, never because the controller said so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from odradek.metadata.image import MetadataDelta, MetadataImage
from odradek.metadata.metadata_record_serde import MetadataRecord
from odradek.metadata.transactions import MetadataTransactions, OffsetRecord
from odradek.raft.raft_client import UNKNOWN_LEADER, Batch, LeaderAndEpoch, Listener, SnapshotReader

log = logging.getLogger(__name__)

Publisher = Callable[[MetadataDelta, MetadataImage], None]


class MetadataLoader(Listener[MetadataRecord]):
    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.publishers: list[Publisher] = []
        self.transactions = MetadataTransactions()
        # The quorum's leader, the active controller (KRaft brokers learn it from Raft).
        self.leader_and_epoch = UNKNOWN_LEADER

    # -- RaftClient.Listener ------------------------------------------------------------------

    def handle_load_snapshot(self, reader: SnapshotReader[MetadataRecord]) -> None:
        self.transactions.reset()
        offset = reader.last_contained_log_offset
        self._replay((offset, rec) for rec in reader.records)

    def handle_commit(self, batches: Sequence[Batch[MetadataRecord]]) -> None:
        self._replay(
            item
            for batch in batches
            for i, rec in enumerate(batch.records)
            for item in self.transactions.feed(batch.base_offset + i, rec)
        )

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader_and_epoch = leader

    def begin_shutdown(self) -> None:
        log.debug("Metadata loader: Raft is shutting down at offset %d", self.image.offset)

    # -- the one place records reach the broker's image -----------------------------------------

    def _replay(self, records: Iterable[OffsetRecord]) -> MetadataDelta:
        """Apply committed records to the image, then publish the delta."""
        delta = MetadataDelta()
        for offset, (name, fields) in records:
            self.image.apply(name, fields, delta, offset)
        if not delta.is_empty():
            for publish in self.publishers:
                try:
                    publish(delta, self.image)
                except Exception:
                    # A publisher failing must not stop metadata from flowing to the others.
                    log.exception("Metadata publisher %r failed at offset %d", publish, self.image.offset)
        return delta
