"""SnapshotGenerator: when to write a snapshot of the committed metadata image (Kafka's
``org.apache.kafka.image.publisher.SnapshotGenerator``).

A publisher on the :class:`~odradek.metadata.loader.MetadataLoader`: every committed batch
delivered adds its size to the bytes replayed since the last snapshot. Once they reach
``metadata.log.max.record.bytes.between.snapshots``, or an update arrives
``metadata.log.max.snapshot.interval.ms`` (0: never) after the last snapshot, it asks its emitter
to write the new image as a snapshot — one at a time: while one is being written, further updates
only count (the next update after it finished decides again). Loading a snapshot resets the
counters, as in Kafka.

Sans-I/O: the clock comes in as a callable, the emitter (which runs the write off the event loop
and calls :meth:`SnapshotGenerator.emit_finished` when done) is the caller's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import MetadataImage
from odradek.metadata.loader import LogDeltaManifest

log = logging.getLogger(__name__)

# emitter(image, snapshot epoch, last contained log timestamp): write the image as the snapshot
# <image.offset + 1>-<epoch>.
Emitter = Callable[[MetadataImage, int, int], None]


class SnapshotGenerator:
    def __init__(
        self,
        emitter: Emitter,
        clock_ms: Callable[[], int],
        max_bytes_since_last_snapshot: int,
        max_time_since_last_snapshot_ms: int,
    ) -> None:
        self._emitter = emitter
        self._clock_ms = clock_ms
        self.max_bytes_since_last_snapshot = max_bytes_since_last_snapshot
        self.max_time_since_last_snapshot_ms = max_time_since_last_snapshot_ms
        self.bytes_since_last_snapshot = 0
        self.last_snapshot_time_ms = clock_ms()
        self.emitting = False
        self.disabled_reason: str | None = None

    def publish(self, delta: MetadataDelta, image: MetadataImage, manifest: LogDeltaManifest) -> None:
        """The loader's publisher (Kafka's ``onMetadataUpdate``)."""
        if manifest.is_snapshot:
            self._reset()
            return
        self.bytes_since_last_snapshot += manifest.num_bytes
        if self.bytes_since_last_snapshot >= self.max_bytes_since_last_snapshot:
            reason = f"we have replayed at least {self.max_bytes_since_last_snapshot} bytes"
        elif (
            self.max_time_since_last_snapshot_ms != 0
            and self._clock_ms() - self.last_snapshot_time_ms >= self.max_time_since_last_snapshot_ms
        ):
            reason = f"it has been at least {self.max_time_since_last_snapshot_ms} ms since the last snapshot"
        else:
            return
        if self.emitting or self.disabled_reason is not None:
            return
        if image.offset != manifest.offset:
            # The image stops short of the batch (an open KIP-868 transaction holds records):
            # its epoch is not known here; the next update decides again.
            return
        log.info("Creating a new snapshot at offset %d because %s", image.offset, reason)
        self._reset()
        self.emitting = True
        try:
            self._emitter(image, manifest.epoch, manifest.last_contained_log_time_ms)
        except Exception:
            self.emitting = False
            log.exception("Cannot start writing a snapshot at offset %d", image.offset)

    def emit_finished(self) -> None:
        """The emitter finished (or failed) the snapshot it was given."""
        self.emitting = False

    def disable(self, reason: str) -> None:
        """Stop generating snapshots (Kafka's ``disable``, e.g. on a fault)."""
        self.disabled_reason = reason

    def _reset(self) -> None:
        self.bytes_since_last_snapshot = 0
        self.last_snapshot_time_ms = self._clock_ms()
