"""ZkMetadataCache: a ZooKeeper-mode broker's metadata, as the controller's UpdateMetadata requests
tell it (Kafka's ``ZkMetadataCache``).

In ZooKeeper mode a broker reads no metadata log: the controller sends it UpdateMetadata requests
(the live brokers with their endpoints and racks, and the state of some or all partitions), and
the broker keeps what they say. Each request replaces the live brokers and the controller id and
merges its partition states into the ones cached (the controller sends partial updates); a
partition whose leader is ``-2`` (Kafka's ``LeaderAndIsr.LeaderDuringDelete``) is being deleted and
leaves the cache, its topic too once no partition is left (with its topic id).

The cache answers with the same API as :class:`~odradek.metadata.metadata_cache.KRaftMetadataCache`
(it is one): after each update it builds a :class:`~odradek.metadata.image.MetadataImage` of what it
holds, so KafkaApis, the replica manager and the coordinators read a ZooKeeper-mode broker's
metadata exactly as they read a KRaft one's. What UpdateMetadata does not carry stays empty in
that image: broker epochs (-1: the replica manager then checks only that an ISR candidate is
alive, as Kafka does in ZooKeeper mode), incarnation ids, dynamic configs (ZooKeeper mode reads
them from ``/config`` znodes) and the finalized features (from the ``/feature`` znode, set with
:meth:`ZkMetadataCache.set_features`).

Versions: UpdateMetadata v0-v8 (all Kafka 3.9 accepts). v0-v4 carry ungrouped partition states,
v5+ group them by topic, v7+ carry topic ids; v0 brokers have one PLAINTEXT host/port, v1-v2
endpoints are named by their security protocol, v3+ by their listener.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from odradek.metadata.image import (
    BrokerEndpoint,
    BrokerRegistration,
    ClusterImage,
    FeaturesImage,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
    TopicsImage,
    frozen_mapping,
)
from odradek.metadata.metadata_cache import FinalizedFeatures, KRaftMetadataCache

log = logging.getLogger(__name__)

# Kafka's LeaderAndIsr.LeaderDuringDelete: the leader of a partition being deleted.
LEADER_DURING_DELETE = -2
ZERO_UUID = uuid.UUID(int=0)
# SecurityProtocol ids (the listener name of a v1-v2 endpoint is its protocol's name).
SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class UpdateMetadataPartitionState:
    """One partition as UpdateMetadata states it (Kafka's UpdateMetadataPartitionState)."""

    topic: str
    partition: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


def update_metadata_partition_states(version: int, req: Mapping[str, Any]) -> list[UpdateMetadataPartitionState]:
    """The partition states of an UpdateMetadata request of ``version``, flattened."""
    raw: list[tuple[str, Mapping[str, Any]]] = []
    if version <= 4:
        raw = [(ps["topic_name"], ps) for ps in req.get("ungrouped_partition_states") or []]
    else:
        for ts in req.get("topic_states") or []:
            raw.extend((ts["topic_name"], ps) for ps in ts.get("partition_states") or [])
    return [
        UpdateMetadataPartitionState(
            topic, ps["partition_index"], ps["controller_epoch"], ps["leader"], ps["leader_epoch"],
            tuple(ps["isr"]), ps["zk_version"], tuple(ps["replicas"]), tuple(ps.get("offline_replicas") or ()),
        )
        for topic, ps in raw
    ]


def update_metadata_topic_ids(version: int, req: Mapping[str, Any]) -> dict[str, uuid.UUID]:
    """Topic name -> the id the request gives it (v7+; the zero id means none)."""
    if version < 7:
        return {}
    return {ts["topic_name"]: ts.get("topic_id") or ZERO_UUID for ts in req.get("topic_states") or []}


def update_metadata_brokers(version: int, req: Mapping[str, Any]) -> dict[int, BrokerRegistration]:
    """The live brokers of an UpdateMetadata request of ``version``, as (unfenced) registrations
    without an epoch."""
    out: dict[int, BrokerRegistration] = {}
    for b in req.get("live_brokers") or []:
        endpoints: dict[str, BrokerEndpoint] = {}
        if version == 0:
            endpoints["PLAINTEXT"] = BrokerEndpoint("PLAINTEXT", b["v0_host"], b["v0_port"], 0)
        else:
            for ep in b.get("endpoints") or []:
                proto = ep["security_protocol"]
                name = ep.get("listener") if version >= 3 else None
                name = name or SECURITY_PROTOCOLS.get(proto, str(proto))
                endpoints[name] = BrokerEndpoint(name, ep["host"], ep["port"], proto)
        out[b["id"]] = BrokerRegistration(
            broker_id=b["id"], epoch=-1, incarnation_id=ZERO_UUID, endpoints=frozen_mapping(endpoints),
            rack=b.get("rack") if version >= 2 else None, fenced=False,
        )
    return out


class ZkMetadataCache(KRaftMetadataCache):
    """The metadata cache of a ZooKeeper-mode broker (see the module docstring)."""

    def __init__(self, broker_id: int) -> None:
        super().__init__()
        self.broker_id = broker_id
        self._controller_id: int | None = None
        self._states: dict[str, dict[int, UpdateMetadataPartitionState]] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._brokers: dict[int, BrokerRegistration] = {}
        self._features = FinalizedFeatures(frozen_mapping({}), -1)
        self._updates = 0

    # -- what ZooKeeper mode adds ------------------------------------------------------------------

    def get_controller_id(self) -> int | None:
        """The ZooKeeper controller, as the last UpdateMetadata named it (None before one)."""
        return self._controller_id

    def partition_state(self, topic: str, partition: int) -> UpdateMetadataPartitionState | None:
        """The partition as UpdateMetadata last stated it (with its controller epoch, zkVersion
        and offline replicas)."""
        return self._states.get(topic, {}).get(partition)

    def has_alive_broker(self, broker_id: int) -> bool:
        return broker_id in self._brokers

    def set_features(self, levels: Mapping[str, int], epoch: int) -> None:
        """The finalized features of the ``/feature`` znode (its version is their epoch)."""
        self._features = FinalizedFeatures(frozen_mapping(dict(levels)), epoch)
        self._image = replace(self._image, features=FeaturesImage(levels=self._features.levels))

    def features(self) -> FinalizedFeatures:
        return self._features

    # -- UpdateMetadata ------------------------------------------------------------------------------

    def update_metadata(self, version: int, req: Mapping[str, Any]) -> list[TopicPartition]:
        """Apply an UpdateMetadata request (its epochs already checked); returns the partitions
        it deleted (Kafka's ZkMetadataCache.updateMetadata)."""
        controller_id = req["controller_id"]
        self._controller_id = controller_id if controller_id >= 0 else None
        self._brokers = update_metadata_brokers(version, req)
        me = self._brokers.get(self.broker_id)
        if me is not None and any(set(b.endpoints) != set(me.endpoints) for b in self._brokers.values()):
            log.error("Listeners are not identical across brokers: %s",
                      {b: sorted(r.endpoints) for b, r in self._brokers.items()})
        for topic, tid in update_metadata_topic_ids(version, req).items():
            if tid == ZERO_UUID:
                self._topic_ids.pop(topic, None)
            else:
                self._topic_ids[topic] = tid
        deleted: dict[TopicPartition, None] = {}
        states = update_metadata_partition_states(version, req)
        for st in states:
            tp = (st.topic, st.partition)
            if st.leader == LEADER_DURING_DELETE:
                parts = self._states.get(st.topic)
                if parts is not None:
                    parts.pop(st.partition, None)
                    if not parts:
                        del self._states[st.topic]
                        self._topic_ids.pop(st.topic, None)
                deleted[tp] = None
            else:
                self._states.setdefault(st.topic, {})[st.partition] = st
                deleted.pop(tp, None)
        # A topic id named for a topic with no partition cached is not kept (Kafka's snapshot
        # keeps ids only with partition states, removePartitionInfo drops them together).
        for topic in [t for t in self._topic_ids if t not in self._states]:
            del self._topic_ids[topic]
        self._updates += 1
        self.set_image(self._build_image())
        log.info(
            "Cached %d partition(s) and deleted %d from the metadata cache on UpdateMetadata from controller %d "
            "epoch %d", len(states) - len(deleted), len(deleted), controller_id, req["controller_epoch"],
        )
        return list(deleted)

    def _build_image(self) -> MetadataImage:
        by_name: dict[str, TopicImage] = {}
        by_id: dict[uuid.UUID, TopicImage] = {}
        for topic, parts in self._states.items():
            regs = {
                p: PartitionRegistration(
                    replicas=st.replicas, isr=st.isr, leader=st.leader, leader_epoch=st.leader_epoch,
                    partition_epoch=st.zk_version,
                )
                for p, st in parts.items()
            }
            tid = self._topic_ids.get(topic, ZERO_UUID)
            img = TopicImage(topic, tid, frozen_mapping(regs))
            by_name[topic] = img
            if tid != ZERO_UUID:
                by_id[tid] = img
        return MetadataImage(
            offset=self._updates,
            topics=TopicsImage(frozen_mapping(by_id), frozen_mapping(by_name)),
            cluster=ClusterImage(frozen_mapping(dict(self._brokers))),
            features=FeaturesImage(levels=self._features.levels),
        )
