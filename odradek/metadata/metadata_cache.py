"""KRaftMetadataCache: the broker's read API over its current metadata image.

Kafka's ``KRaftMetadataCache``: the request handlers (KafkaApis, the admin and group APIs), the
replica manager and the group coordinator ask it for topics, partitions, brokers, configs and
features; none of them holds an image. The cache holds one reference to the current immutable
:class:`~odradek.metadata.image.MetadataImage`, replaced in one assignment when the metadata
loader publishes the next image (:meth:`set_image`), so every answer comes from one whole image.
A caller that needs several answers from the same image (one Metadata response) takes
:attr:`image` once and passes it on.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Set
from dataclasses import dataclass

from odradek.metadata.image import (
    EMPTY_IMAGE,
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
)


@dataclass(frozen=True, slots=True)
class Node:
    """A broker as clients are told of it on one listener (Kafka's ``Node``)."""

    id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class FinalizedFeatures:
    """KIP-584 finalized feature levels and their epoch (the offset of the image, -1 with none)."""

    levels: Mapping[str, int]
    epoch: int

    @classmethod
    def of(cls, image: MetadataImage) -> FinalizedFeatures:
        levels = image.features.levels
        return cls(levels, image.offset if levels else -1)


class KRaftMetadataCache:
    def __init__(self, image: MetadataImage = EMPTY_IMAGE) -> None:
        self._image = image

    # -- the image --------------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        """The current image (immutable: safe to keep for the length of one request)."""
        return self._image

    def set_image(self, image: MetadataImage) -> None:
        self._image = image

    # -- topics -----------------------------------------------------------------------------------

    def get_all_topics(self) -> Set[str]:
        return self._image.topics.by_name.keys()

    def contains_topic(self, topic: str) -> bool:
        return topic in self._image.topics.by_name

    def get_topic_id(self, topic: str) -> uuid.UUID | None:
        t = self._image.topics.by_name.get(topic)
        return None if t is None else t.topic_id

    def get_topic_name(self, topic_id: uuid.UUID) -> str | None:
        t = self._image.topics.by_id.get(topic_id)
        return None if t is None else t.name

    def get_topic_partitions(self, topic: str) -> Mapping[int, PartitionRegistration]:
        """The topic's partitions by index (empty for an unknown topic)."""
        t = self._image.topics.by_name.get(topic)
        return {} if t is None else t.partitions

    def num_partitions(self, topic: str) -> int | None:
        t = self._image.topics.by_name.get(topic)
        return None if t is None else len(t.partitions)

    def get_partition_info(self, topic: str, partition: int) -> PartitionRegistration | None:
        return self._image.topics.partition(topic, partition)

    def contains_partition(self, topic: str, partition: int) -> bool:
        return self._image.topics.partition(topic, partition) is not None

    # -- brokers ----------------------------------------------------------------------------------

    def get_alive_brokers(self) -> list[BrokerRegistration]:
        """The unfenced brokers, by id."""
        return self._image.cluster.live_brokers()

    def get_alive_broker_ids(self) -> set[int]:
        return {b.broker_id for b in self._image.cluster.brokers.values() if not b.fenced}

    def is_broker_fenced(self, broker_id: int) -> bool:
        b = self._image.cluster.brokers.get(broker_id)
        return b is None or b.fenced

    def get_alive_broker_nodes(self, listener: str) -> list[Node]:
        """The unfenced brokers with an endpoint on ``listener``, by id."""
        return _nodes(self._image.cluster.live_brokers(), listener)

    def get_broker_nodes(self, listener: str) -> list[Node]:
        """Every registered broker with an endpoint on ``listener``, fenced or not, by id."""
        return _nodes([b for _, b in sorted(self._image.cluster.brokers.items())], listener)

    def get_alive_broker_node(self, broker_id: int, listener: str) -> Node | None:
        b = self._image.cluster.brokers.get(broker_id)
        if b is None or b.fenced:
            return None
        nodes = _nodes([b], listener)
        return nodes[0] if nodes else None

    # -- configs and features ---------------------------------------------------------------------

    def topic_config(self, topic: str) -> Mapping[str, str]:
        """The topic's dynamic configs (its overrides)."""
        return self._image.topic_config(topic)

    def broker_config(self, name: str) -> Mapping[str, str]:
        """Dynamic configs of BROKER resource ``name`` ("" = the cluster-wide default)."""
        return self._image.broker_config(name)

    def group_config(self, group_id: str) -> Mapping[str, str]:
        """The group's dynamic configs (resource type GROUP, KIP-848)."""
        return self._image.configs.config(32, group_id)

    def features(self) -> FinalizedFeatures:
        return FinalizedFeatures.of(self._image)

    def metadata_version(self) -> int:
        """The finalized ``metadata.version`` level (0 before the bootstrap records)."""
        return self._image.features.levels.get("metadata.version", 0)


def _nodes(brokers: list[BrokerRegistration], listener: str) -> list[Node]:
    out = []
    for b in brokers:
        ep = b.endpoints.get(listener)
        if ep is not None:
            out.append(Node(b.broker_id, ep.host, ep.port, b.rack))
    return out
