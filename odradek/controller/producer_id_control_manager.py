"""ProducerIdControlManager: blocks of producer ids for the brokers (AllocateProducerIds), sans-I/O.

Each block is ``PRODUCER_ID_BLOCK_SIZE`` ids from the cluster-wide next producer id in the image;
the ``ProducerIdsRecord`` moves it on. Only a broker with its current broker epoch gets one (the
ClusterControlManager's check: ``STALE_BROKER_EPOCH`` otherwise).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from odradek.controller.cluster_control_manager import ClusterControlManager
from odradek.controller.replication_control import MetadataRecord
from odradek.metadata.image import MetadataImage
from odradek.protocol.errors import Errors, KafkaError

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
_MAX_PRODUCER_ID = 2**63 - 1


@dataclass(frozen=True)
class ProducerIdsBlock:
    assigned_broker_id: int
    first_producer_id: int
    size: int

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


class ProducerIdControlManager:
    def __init__(self, image: MetadataImage, cluster_control: ClusterControlManager) -> None:
        self.image = image
        self.cluster_control = cluster_control

    def generate_next_producer_id(
        self, broker_id: int, broker_epoch: int
    ) -> tuple[ProducerIdsBlock, list[MetadataRecord]]:
        self.cluster_control.check_broker_epoch(broker_id, broker_epoch)
        first = self.image.next_producer_id
        if first > _MAX_PRODUCER_ID - PRODUCER_ID_BLOCK_SIZE:
            raise KafkaError(
                Errors.UNKNOWN_SERVER_ERROR,
                "Exhausted all producerIds as the next block's end producerId has exceeded the int64 type limit",
            )
        block = ProducerIdsBlock(broker_id, first, PRODUCER_ID_BLOCK_SIZE)
        record = {
            "broker_id": broker_id,
            "broker_epoch": broker_epoch,
            "next_producer_id": block.next_block_first_id,
        }
        return block, [("ProducerIdsRecord", record)]
