"""MetadataLoader: the broker's Raft listener on ``__cluster_metadata``.

Raft hands it every committed batch (and a snapshot first when the log needs one); it replays the
records, honouring KIP-868 transactions, into a :class:`~odradek.metadata.delta.MetadataDelta`
over the current image, swaps the next image into the broker's :class:`KRaftMetadataCache` by one
reference, and hands the delta's changes to its publishers — the replica manager, which turns
partition changes into leadership, and anyone else who must follow metadata. The image moves
because Raft committed, never because the controller said so.

``manifest_publishers`` are called with Kafka's publisher arguments — the delta, the image and a
:class:`LogDeltaManifest` (where the records came from and how many bytes they were) — after every
delivery, even one that changed nothing a broker follows; the snapshot generator is one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import BROKER_RESOURCE, EMPTY_IMAGE, TOPIC_RESOURCE, MetadataImage
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.metadata.metadata_record_serde import MetadataRecord
from odradek.metadata.transactions import MetadataTransactions, OffsetRecord
from odradek.raft.raft_client import UNKNOWN_LEADER, Batch, LeaderAndEpoch, Listener, SnapshotReader

log = logging.getLogger(__name__)

Publisher = Callable[[MetadataDelta, MetadataImage], None]


@dataclass(frozen=True)
class LogDeltaManifest:
    """Where a delta came from (Kafka's ``LogDeltaManifest`` / ``SnapshotManifest``): the offset
    and epoch of its last record, that record's append time, and the bytes of the batches."""

    offset: int
    epoch: int
    last_contained_log_time_ms: int
    num_bytes: int
    is_snapshot: bool = False


ManifestPublisher = Callable[[MetadataDelta, MetadataImage, LogDeltaManifest], None]


class MetadataLoader(Listener[MetadataRecord]):
    def __init__(self, metadata_cache: KRaftMetadataCache) -> None:
        self.metadata_cache = metadata_cache
        self.publishers: list[Publisher] = []
        self.manifest_publishers: list[ManifestPublisher] = []
        self.transactions = MetadataTransactions()
        # The quorum's leader, the active controller (KRaft brokers learn it from Raft).
        self.leader_and_epoch = UNKNOWN_LEADER

    # -- RaftClient.Listener ------------------------------------------------------------------

    def handle_load_snapshot(self, reader: SnapshotReader[MetadataRecord]) -> None:
        """The snapshot replaces the image (at start-up, or on a running node that fetched the
        leader's snapshot): what the old image had and the snapshot has not is reported to the
        publishers as deleted or changed (Kafka's ``MetadataDelta.finishSnapshot``)."""
        self.transactions.reset()
        offset = reader.last_contained_log_offset
        manifest = LogDeltaManifest(offset, reader.epoch, -1, 0, is_snapshot=True)
        previous = self.metadata_cache.image
        self._replay(((offset, rec) for rec in reader.records), EMPTY_IMAGE, manifest, previous)

    def handle_commit(self, batches: Sequence[Batch[MetadataRecord]]) -> None:
        if not batches:
            return
        last = batches[-1]
        manifest = LogDeltaManifest(
            last.last_offset, last.epoch, last.append_timestamp, sum(b.size_in_bytes for b in batches)
        )
        self._replay(
            (
                item
                for batch in batches
                for i, rec in enumerate(batch.records)
                for item in self.transactions.feed(batch.base_offset + i, rec)
            ),
            self.metadata_cache.image,
            manifest,
        )

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader_and_epoch = leader

    def begin_shutdown(self) -> None:
        log.debug("Metadata loader: Raft is shutting down at offset %d", self.metadata_cache.image.offset)

    # -- the one place records reach the broker's image -----------------------------------------

    def _replay(
        self,
        records: Iterable[OffsetRecord],
        base: MetadataImage,
        manifest: LogDeltaManifest,
        previous: MetadataImage | None = None,
    ) -> MetadataDelta:
        """Replay committed records into one delta over ``base``, swap the next image into the
        cache, then publish the delta. ``previous``: the image a snapshot replaces."""
        delta = MetadataDelta(base)
        for offset, (name, fields) in records:
            delta.replay(name, fields, offset)
        image = delta.apply()
        if previous is not None:
            _report_absent(delta, previous, image)
        self.metadata_cache.set_image(image)
        if not delta.is_empty():
            for publish in self.publishers:
                try:
                    publish(delta, image)
                except Exception:
                    # A publisher failing must not stop metadata from flowing to the others.
                    log.exception("Metadata publisher %r failed at offset %d", publish, image.offset)
        for publish_manifest in self.manifest_publishers:
            try:
                publish_manifest(delta, image, manifest)
            except Exception:
                log.exception("Metadata publisher %r failed at offset %d", publish_manifest, image.offset)
        return delta


def _report_absent(delta: MetadataDelta, previous: MetadataImage, image: MetadataImage) -> None:
    """What ``previous`` had that the snapshot's ``image`` has not (or has otherwise): deleted
    topics, changed configs and brokers, for the publishers."""
    for tid, topic in previous.topics.by_id.items():
        if tid not in image.topics.by_id:
            delta.deleted_topics[topic.name] = topic
    for (kind, name), configs in previous.configs.resources.items():
        if image.configs.config(kind, name) != configs:
            if kind == TOPIC_RESOURCE:
                delta.changed_topic_configs.add(name)
            elif kind == BROKER_RESOURCE:
                delta.changed_broker_configs.add(name)
    for entity, quotas in previous.client_quotas.entities.items():
        if image.client_quotas.entities.get(entity) != quotas:
            delta.changed_client_quotas.add(entity)
    for broker_id, broker in previous.cluster.brokers.items():
        if image.cluster.brokers.get(broker_id) != broker:
            delta.changed_brokers.add(broker_id)
