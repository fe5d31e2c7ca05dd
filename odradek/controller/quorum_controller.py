"""QuorumController: the active controller of a KRaft quorum (here, a quorum of one).

Every write runs through one queue, in order: a manager (sans-I/O) validates the operation against
the controller's image and produces records; the controller appends them to ``__cluster_metadata``,
waits for the commit (fsync off the event loop), replays them into its own image and tells the
broker side that the committed offset moved. Nobody acts on a change before it is committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from odradek.controller.configuration_control import BrokerConfigPolicy, ConfigurationControlManager
from odradek.controller.election import OfflinePartitionLeaderSelector, PartitionLeadership
from odradek.controller.replication_control import (
    EXCESSIVE_BATCH_MESSAGE,
    MAX_RECORDS_PER_USER_OP,
    ExcessiveBatchError,
    MetadataRecord,
    ReplicationControlManager,
    TopicResult,
)
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import EMPTY_IMAGE, MetadataImage
from odradek.protocol.errors import Errors, KafkaError
from odradek.raft.metadata_log import MetadataLog

log = logging.getLogger(__name__)

T = TypeVar("T")

PRODUCER_ID_BLOCK_SIZE = 1000
METADATA_VERSION = 21  # 3.9-IV0: the feature level this controller writes at bootstrap
MIN_METADATA_VERSION = 7  # 3.3-IV3, the oldest metadata.version Kafka 4.x runs
# KIP-584 features a node of this version can run: name -> (min, max) level.
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    "metadata.version": (MIN_METADATA_VERSION, METADATA_VERSION),
}


class QuorumController:
    def __init__(
        self,
        node_id: int,
        metadata_log: MetadataLog,
        *,
        default_partitions: int,
        default_replication_factor: int,
        delete_topic_enable: bool,
        validate_config: Callable[[str, str], str | None],
        on_commit: Callable[[int], None],
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        broker_configs: BrokerConfigPolicy | None = None,
    ) -> None:
        self.node_id = node_id
        self.metadata_log = metadata_log
        self.image: MetadataImage = EMPTY_IMAGE
        self.epoch = 1
        self.delete_topic_enable = delete_topic_enable
        self.replication = ReplicationControlManager(
            self.image,
            default_partitions=default_partitions,
            default_replication_factor=default_replication_factor,
            validate_config=validate_config,
        )
        self.configuration = ConfigurationControlManager(self.image, validate_config, broker_configs)
        self._on_commit = on_commit
        self._clock_ms = clock_ms
        self._queue: asyncio.Lock | None = None

    # -- start-up -------------------------------------------------------------------------------

    def replay_log(self) -> None:
        """Rebuild the controller's image from the committed metadata log."""
        records = [(offset, name, rec) for offset, name, _version, rec in self.metadata_log.read(0)]
        self.replay(records)
        log.info("Controller replayed %d metadata records up to offset %d", len(records), self.image.offset)

    def replay(self, records: Iterable[tuple[int, str, dict[str, Any]]]) -> MetadataDelta:
        """Apply committed records (offset, name, fields) to the controller's image: one
        delta over the current image, and the next image swapped in for the managers too."""
        delta = MetadataDelta(self.image)
        for offset, name, rec in records:
            delta.replay(name, rec, offset)
        self.image = self.replication.image = self.configuration.image = delta.apply()
        return delta

    # -- the write path -------------------------------------------------------------------------

    async def _write(self, op: Callable[[], tuple[T, list[MetadataRecord]]]) -> T:
        if self._queue is None:
            self._queue = asyncio.Lock()
        async with self._queue:
            result, records = op()
            if records:
                await self._commit(records)
            return result

    async def _commit(self, records: list[MetadataRecord]) -> None:
        first, last = self.metadata_log.append(records, self.epoch, self._clock_ms())
        await asyncio.get_running_loop().run_in_executor(None, self.metadata_log.commit, last + 1)
        self.replay((first + i, name, rec) for i, (name, rec) in enumerate(records))
        self._on_commit(last + 1)

    # -- operations -----------------------------------------------------------------------------

    def _check_broker_epoch(self, broker_id: int, broker_epoch: int) -> None:
        """Kafka's ClusterControlManager.checkBrokerEpoch."""
        b = self.image.brokers.get(broker_id)
        if b is None:
            raise KafkaError(Errors.BROKER_ID_NOT_REGISTERED, f"No broker registration found for broker {broker_id}")
        if b.epoch != broker_epoch:
            raise KafkaError(
                Errors.STALE_BROKER_EPOCH, f"Expected broker epoch {b.epoch}, but got broker epoch {broker_epoch}"
            )

    async def register_broker(self, request: dict[str, Any]) -> int:
        """BrokerRegistration: write the bootstrap records on a new log, then register the broker,
        fenced until its first heartbeat from a caught-up broker.

        Returns the broker epoch (the offset of the registration record, as Kafka does).
        """

        def op() -> tuple[int, list[MetadataRecord]]:
            records: list[MetadataRecord] = []
            if self.metadata_log.open_transaction is not None:
                # Apache Kafka stopped inside a metadata transaction: abort it, as Kafka's next
                # active controller does, so that what follows is not taken as part of it.
                log.warning(
                    "Aborting the metadata transaction left open at offset %d",
                    self.metadata_log.open_transaction,
                )
                records.append(("AbortTransactionRecord", {"reason": "Odradek took over the metadata log"}))
                self.metadata_log.open_transaction = None
            if "metadata.version" not in self.image.features.levels:
                records.append(
                    ("FeatureLevelRecord", {"name": "metadata.version", "feature_level": METADATA_VERSION})
                )
            epoch = self.metadata_log.end_offset + len(records)
            records.append(
                (
                    "RegisterBrokerRecord",
                    {
                        "broker_id": request["broker_id"],
                        "incarnation_id": request["incarnation_id"],
                        "broker_epoch": epoch,
                        "end_points": [
                            {"name": e["name"], "host": e["host"], "port": e["port"], "security_protocol": e["security_protocol"]}
                            for e in request["listeners"]
                        ],
                        "features": [dict(f) for f in request["features"]],
                        "rack": request["rack"],
                        "fenced": True,
                    },
                )
            )
            return epoch, records

        return await self._write(op)

    async def broker_heartbeat(
        self, broker_id: int, broker_epoch: int, current_metadata_offset: int, want_fence: bool
    ) -> tuple[bool, bool]:
        """BrokerHeartbeat: (caught up, fenced). A fenced broker that has caught up with the
        metadata up to its registration and does not want to stay fenced is unfenced, and
        takes over the partitions without a leader it may lead."""

        def op() -> tuple[tuple[bool, bool], list[MetadataRecord]]:
            self._check_broker_epoch(broker_id, broker_epoch)
            b = self.image.brokers[broker_id]
            caught_up = current_metadata_offset >= broker_epoch
            if not b.fenced or not caught_up or want_fence:
                return (caught_up, b.fenced), []
            log.info("Unfencing broker %d at broker epoch %d", broker_id, broker_epoch)
            records: list[MetadataRecord] = [("UnfenceBrokerRecord", {"id": broker_id, "epoch": broker_epoch})]
            records.extend(self._elect_offline_partitions(broker_id))
            return (caught_up, False), records

        return await self._write(op)

    def _elect_offline_partitions(self, node: int) -> list[MetadataRecord]:
        """Leaders for the partitions without one that broker ``node``, just unfenced, may lead.

        Odradek never leaves a partition leaderless, but Apache Kafka's controlled shutdown of
        its last broker does (``leader=-1``, and with KIP-966 ``isr=[]`` with the broker kept in
        the eligible leader replicas): after a migration from Kafka this node, the only replica
        (or one in the ISR / ELR), takes them over as Kafka's controller does when the broker
        is unfenced again. Never an unclean election: a replica outside ISR and ELR of a
        partition with other replicas is left alone."""
        records: list[MetadataRecord] = []
        for t in self.image.topics_by_name.values():
            for pid, p in sorted(t.partitions.items()):
                if p.leader >= 0 or node not in p.replicas:
                    continue
                # Kafka's offline election over the ISR, or with KIP-966 the eligible leader
                # replicas (the last known ones once both are empty); only this node is live.
                # "Unclean" only for a partition whose sole replica is this node.
                eligible = list(dict.fromkeys([*p.isr, *p.elr] if p.isr or p.elr else p.last_known_elr))
                chosen = OfflinePartitionLeaderSelector(unclean_enabled=p.replicas == (node,)).select(
                    PartitionLeadership(p.replicas, eligible, p.leader), {node}
                )
                if chosen.leader != node:
                    log.warning(
                        "Partition %s-%d has no leader and node %d is neither in its ISR %s nor "
                        "its eligible leader replicas %s: left offline", t.name, pid, node, p.isr, p.elr,
                    )
                    continue
                records.append((
                    "PartitionChangeRecord",
                    {
                        "partition_id": pid,
                        "topic_id": t.topic_id,
                        "leader": node,
                        "isr": chosen.isr,
                        "eligible_leader_replicas": [] if p.elr else None,
                        "last_known_elr": [] if p.last_known_elr else None,
                    },
                ))
        if records:
            log.info("Electing node %d leader of %d partitions that had none", node, len(records))
        return records

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> tuple[int, int]:
        """Hand a broker a block of producer ids (Kafka's AllocateProducerIds): (first, count)."""

        def op() -> tuple[tuple[int, int], list[MetadataRecord]]:
            self._check_broker_epoch(broker_id, broker_epoch)
            first = self.image.next_producer_id
            record = {
                "broker_id": broker_id,
                "broker_epoch": broker_epoch,
                "next_producer_id": first + PRODUCER_ID_BLOCK_SIZE,
            }
            return (first, PRODUCER_ID_BLOCK_SIZE), [("ProducerIdsRecord", record)]

        return await self._write(op)

    async def create_topics(
        self, topics: list[dict[str, Any]], validate_only: bool
    ) -> list[TopicResult]:
        def op() -> tuple[list[TopicResult], list[MetadataRecord]]:
            results: list[TopicResult] = []
            records: list[MetadataRecord] = []
            pending: set[str] = set()
            for t in topics:
                try:
                    res, recs = self.replication.create_topic(
                        t["name"],
                        t.get("num_partitions", -1),
                        t.get("replication_factor", -1),
                        t.get("assignments") or [],
                        t.get("configs") or [],
                        pending_names=pending,
                        room=MAX_RECORDS_PER_USER_OP - len(records),
                    )
                except ExcessiveBatchError:
                    # As Kafka: the whole request fails (validate_only too), every topic with
                    # POLICY_VIOLATION.
                    log.warning(
                        "CreateTopics for %d topic(s) refused: more than %d metadata records",
                        len(topics), MAX_RECORDS_PER_USER_OP,
                    )
                    failed = [
                        TopicResult(x["name"], Errors.POLICY_VIOLATION, EXCESSIVE_BATCH_MESSAGE)
                        for x in topics
                    ]
                    return failed, []
                results.append(res)
                if res.error == Errors.NONE:
                    pending.add(t["name"])
                    records.extend(recs)
            if validate_only:
                return results, []
            for res in results:
                if res.error == Errors.NONE:
                    log.info(
                        "Created topic %s with topic ID %s, %d partition(s), replication factor %d",
                        res.name, res.topic_id, res.num_partitions, res.replication_factor,
                    )
            return results, records

        return await self._write(op)

    async def delete_topics(
        self, names: list[str | None], ids: list[uuid.UUID | None]
    ) -> list[tuple[str | None, uuid.UUID, Errors, str | None]]:
        """Delete by name or id (one of each pair is set)."""

        def op() -> tuple[list[tuple[str | None, uuid.UUID, Errors, str | None]], list[MetadataRecord]]:
            out: list[tuple[str | None, uuid.UUID, Errors, str | None]] = []
            records: list[MetadataRecord] = []
            done: set[uuid.UUID] = set()
            zero = uuid.UUID(int=0)
            for name, tid in zip(names, ids, strict=True):
                t = None
                if name is not None:
                    t = self.image.topics_by_name.get(name)
                    if t is None:
                        out.append((name, zero, Errors.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."))
                        continue
                elif tid is not None:
                    t = self.image.topics_by_id.get(tid)
                    if t is None:
                        out.append((None, tid, Errors.UNKNOWN_TOPIC_ID, "This server does not host this topic ID."))
                        continue
                assert t is not None
                if not self.delete_topic_enable:
                    out.append((t.name, t.topic_id, Errors.TOPIC_DELETION_DISABLED, "Topic deletion is disabled."))
                    continue
                out.append((t.name, t.topic_id, Errors.NONE, None))
                if t.topic_id not in done:
                    done.add(t.topic_id)
                    records.extend(self.replication.delete_topic(t.topic_id))
                    log.info(
                        "Deleting topic %s with topic ID %s, %d partition(s)",
                        t.name, t.topic_id, len(t.partitions),
                    )
            return out, records

        return await self._write(op)

    async def create_partitions(
        self, requests: list[dict[str, Any]], validate_only: bool
    ) -> list[tuple[str, Errors, str | None]]:
        def op() -> tuple[list[tuple[str, Errors, str | None]], list[MetadataRecord]]:
            out: list[tuple[str, Errors, str | None]] = []
            records: list[MetadataRecord] = []
            used = 0  # records the request would write (validate_only counts them too)
            for r in requests:
                code, msg, recs = self.replication.create_partitions(
                    r["name"], r["count"], r.get("assignments"), MAX_RECORDS_PER_USER_OP - used
                )
                out.append((r["name"], code, msg))
                used += len(recs)
                if code == Errors.NONE and not validate_only:
                    records.extend(recs)
                    t = self.image.topics_by_name.get(r["name"])
                    log.info(
                        "Increased the partitions of topic %s from %d to %d",
                        r["name"], len(t.partitions) if t else -1, r["count"],
                    )
            return out, records

        return await self._write(op)

    async def alter_configs(
        self, resources: list[dict[str, Any]], validate_only: bool, incremental: bool
    ) -> list[tuple[Errors, str | None]]:
        def op() -> tuple[list[tuple[Errors, str | None]], list[MetadataRecord]]:
            out: list[tuple[Errors, str | None]] = []
            records: list[MetadataRecord] = []
            for r in resources:
                fn = (
                    self.configuration.incremental_alter_configs
                    if incremental
                    else self.configuration.alter_configs
                )
                code, msg, recs = fn(r["resource_type"], r["resource_name"], r["configs"])
                out.append((code, msg))
                if code == Errors.NONE and not validate_only:
                    records.extend(recs)
                    if recs:
                        log.info(
                            "Altered the configuration of topic %s: %s",
                            r["resource_name"], _config_changes(recs),
                        )
            return out, records

        return await self._write(op)


def _config_changes(records: list[MetadataRecord]) -> str:
    """``key=value`` for each set key, ``key`` reset to its default for each removed one."""
    parts = []
    for _name, rec in records:
        value = rec.get("value")
        parts.append(f"{rec['name']} reset to default" if value is None else f"{rec['name']}={value}")
    return ", ".join(parts)
