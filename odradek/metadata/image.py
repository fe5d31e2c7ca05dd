"""The metadata image: what a node knows of the cluster, as of one offset of ``__cluster_metadata``.

An image is immutable (Kafka's ``MetadataImage``): frozen dataclasses over read-only mappings,
one per area as Kafka splits it — :class:`TopicsImage`, :class:`ClusterImage`,
:class:`ConfigurationsImage`, :class:`FeaturesImage`, :class:`ProducerIdsImage`. The only way to a
new image is a :class:`~odradek.metadata.delta.MetadataDelta` over the current one: it replays
records and ``apply()`` builds the next image, sharing every part the records did not touch (an
unchanged topic is the same object in both images). Whoever holds an image may keep reading it
while the next one is built and swapped in by one reference.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from odradek.metadata.scram_image import ScramImage

# ConfigResource types as the protocol numbers them.
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4

NO_LEADER = -1
# Kafka's LeaderRecoveryState.
RECOVERED = 0
RECOVERING = 1

K = TypeVar("K")
V = TypeVar("V")


def frozen_mapping(d: dict[K, V]) -> Mapping[K, V]:
    """A read-only view of ``d``; whoever builds it must not keep ``d`` to change it later."""
    return MappingProxyType(d)


def _empty() -> Mapping[Any, Any]:
    return MappingProxyType({})


# -- topics ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    # KIP-966 eligible leader replicas (written by Apache Kafka when the last ISR member shuts
    # down: isr=[], elr=[that member]); Odradek reads them to elect a leader after a migration.
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()
    leader_recovery_state: int = RECOVERED
    # The log directory of each replica (KIP-858); all-zero is Kafka's DirectoryId.MIGRATING.
    directories: tuple[uuid.UUID, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration] = field(default_factory=_empty)


@dataclass(frozen=True, slots=True)
class TopicsImage:
    by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=_empty)
    by_name: Mapping[str, TopicImage] = field(default_factory=_empty)

    def partition(self, topic: str, partition: int) -> PartitionRegistration | None:
        t = self.by_name.get(topic)
        return None if t is None else t.partitions.get(partition)


# -- cluster --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    name: str
    host: str
    port: int
    security_protocol: int = 0


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    epoch: int
    incarnation_id: uuid.UUID
    endpoints: Mapping[str, BrokerEndpoint]
    rack: str | None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    # KIP-584 features this broker can run: name -> (min, max) level.
    supported_features: Mapping[str, tuple[int, int]] = field(default_factory=_empty)
    log_dirs: tuple[uuid.UUID, ...] = ()
    is_migrating_zk_broker: bool = False


@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    controller_id: int
    incarnation_id: uuid.UUID
    zk_migration_ready: bool
    endpoints: Mapping[str, BrokerEndpoint]
    supported_features: Mapping[str, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class ClusterImage:
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=_empty)
    controllers: Mapping[int, ControllerRegistration] = field(default_factory=_empty)

    def live_brokers(self) -> list[BrokerRegistration]:
        """The unfenced brokers, by id."""
        return [b for _, b in sorted(self.brokers.items()) if not b.fenced]


# -- configs, features, producer ids --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigurationsImage:
    # (resource type, resource name) -> the resource's dynamic configs; never an empty mapping.
    resources: Mapping[tuple[int, str], Mapping[str, str]] = field(default_factory=_empty)

    def config(self, resource_type: int, name: str) -> Mapping[str, str]:
        return self.resources.get((resource_type, name), _EMPTY_CONFIG)


_EMPTY_CONFIG: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ClientQuotasImage:
    # Quota entity (sorted (entity type, name or None for <default>) pairs) -> quota key -> value;
    # never an empty mapping (Kafka's ClientQuotasImage).
    entities: Mapping[tuple[tuple[str, str | None], ...], Mapping[str, float]] = field(default_factory=_empty)


@dataclass(frozen=True, slots=True)
class FeaturesImage:
    # Finalized feature levels (KIP-584); a feature set to level 0 is absent.
    levels: Mapping[str, int] = field(default_factory=_empty)
    # ZkMigrationStateRecord: 0 none, 1 migration, 2 pre-migration, 3 post-migration (Kafka 3.5+).
    zk_migration_state: int = 0


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    next_producer_id: int = 0


@dataclass(frozen=True, slots=True)
class AclsImage:
    """The ACLs (AccessControlEntryRecords) by id; values are
    :class:`~odradek.security.acl.StandardAcl`."""

    acls: Mapping[uuid.UUID, Any] = field(default_factory=_empty)


# -- the image ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetadataImage:
    offset: int = -1  # offset of the last record applied
    topics: TopicsImage = field(default_factory=TopicsImage)
    cluster: ClusterImage = field(default_factory=ClusterImage)
    configs: ConfigurationsImage = field(default_factory=ConfigurationsImage)
    features: FeaturesImage = field(default_factory=FeaturesImage)
    producer_ids: ProducerIdsImage = field(default_factory=ProducerIdsImage)
    acls: AclsImage = field(default_factory=AclsImage)
    scram: ScramImage = field(default_factory=ScramImage)
    client_quotas: ClientQuotasImage = field(default_factory=ClientQuotasImage)

    # -- shorthands the controller's managers read ------------------------------------------------

    @property
    def topics_by_name(self) -> Mapping[str, TopicImage]:
        return self.topics.by_name

    @property
    def topics_by_id(self) -> Mapping[uuid.UUID, TopicImage]:
        return self.topics.by_id

    @property
    def brokers(self) -> Mapping[int, BrokerRegistration]:
        return self.cluster.brokers

    @property
    def next_producer_id(self) -> int:
        return self.producer_ids.next_producer_id

    def partition(self, topic: str, partition: int) -> PartitionRegistration | None:
        return self.topics.partition(topic, partition)

    def live_brokers(self) -> list[BrokerRegistration]:
        return self.cluster.live_brokers()

    def topic_config(self, topic: str) -> Mapping[str, str]:
        return self.configs.config(TOPIC_RESOURCE, topic)

    def broker_config(self, name: str) -> Mapping[str, str]:
        """Dynamic configs of BROKER resource ``name`` ("" = the cluster-wide default)."""
        return self.configs.config(BROKER_RESOURCE, name)


EMPTY_IMAGE = MetadataImage()
