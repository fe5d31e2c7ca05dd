"""QuorumController: the active controller of a KRaft quorum, a Raft listener.

Every write runs through one queue, in order: a manager (sans-I/O) validates the operation against
the controller's image and produces records; the controller proposes them to Raft with
``prepare_append`` at the epoch Raft gave it in ``handle_leader_change`` and waits until Raft
delivers them committed in ``handle_commit``, where (and only where) its image moves. Nobody acts
on a change before it is committed. When this node does not lead the quorum, writes are refused
with NOT_CONTROLLER. A newly active controller first writes its activation records (the abort of
a metadata transaction left open, the bootstrap metadata.version of a new log).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
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
from odradek.metadata.transactions import MetadataTransactions
from odradek.protocol.errors import Errors, KafkaError
from odradek.raft.raft_client import (
    UNKNOWN_LEADER,
    Batch,
    LeaderAndEpoch,
    Listener,
    NotLeaderError,
    RaftClient,
    SnapshotReader,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

PRODUCER_ID_BLOCK_SIZE = 1000
METADATA_VERSION = 21  # 3.9-IV0: the feature level this controller writes at bootstrap
MIN_METADATA_VERSION = 7  # 3.3-IV3, the oldest metadata.version Kafka 4.x runs
# KIP-584 features a node of this version can run: name -> (min, max) level.
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    "metadata.version": (MIN_METADATA_VERSION, METADATA_VERSION),
}


def _not_controller(leader: LeaderAndEpoch) -> KafkaError:
    if leader.leader_id is None:
        return KafkaError(Errors.NOT_CONTROLLER, "No controller appears to be active.")
    return KafkaError(Errors.NOT_CONTROLLER, f"The active controller appears to be node {leader.leader_id}.")


class QuorumController(Listener[MetadataRecord]):
    def __init__(
        self,
        node_id: int,
        raft_client: RaftClient[MetadataRecord],
        *,
        default_partitions: int,
        default_replication_factor: int,
        delete_topic_enable: bool,
        validate_config: Callable[[str, str], str | None],
        broker_configs: BrokerConfigPolicy | None = None,
    ) -> None:
        self.node_id = node_id
        self.raft_client = raft_client
        self.image: MetadataImage = EMPTY_IMAGE
        self.transactions = MetadataTransactions()
        # The quorum's leader as Raft last announced it; this node writes only while it leads.
        self.leader_and_epoch = UNKNOWN_LEADER
        # Writes waiting for their last offset to commit (Kafka's DeferredEventQueue).
        self._deferred: list[tuple[int, asyncio.Future[None]]] = []
        # Set when this node becomes leader: the activation records go first.
        self._activation_pending = False
        self._activation: asyncio.Task[None] | None = None
        self.delete_topic_enable = delete_topic_enable
        self.replication = ReplicationControlManager(
            self.image,
            default_partitions=default_partitions,
            default_replication_factor=default_replication_factor,
            validate_config=validate_config,
        )
        self.configuration = ConfigurationControlManager(self.image, validate_config, broker_configs)
        self._queue: asyncio.Lock | None = None

    @property
    def is_active(self) -> bool:
        return self.leader_and_epoch.is_leader(self.node_id)

    # -- RaftClient.Listener --------------------------------------------------------------------

    def handle_load_snapshot(self, reader: SnapshotReader[MetadataRecord]) -> None:
        self.transactions.reset()
        offset = reader.last_contained_log_offset
        self.replay(((offset, name, fields) for name, fields in reader.records), base=EMPTY_IMAGE)

    def handle_commit(self, batches: Sequence[Batch[MetadataRecord]]) -> None:
        """One delta over every committed batch, one image swapped in; then the writes whose
        records are now committed complete."""
        self.replay(
            (offset, name, fields)
            for batch in batches
            for i, rec in enumerate(batch.records)
            for offset, (name, fields) in self.transactions.feed(batch.base_offset + i, rec)
        )
        if batches:
            self._complete_up_to(batches[-1].last_offset)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        was = self.leader_and_epoch
        self.leader_and_epoch = leader
        if was.is_leader(self.node_id) and was != leader:
            # Renounce: what was proposed in the old epoch will not be committed by us.
            self._fail_deferred(_not_controller(leader))
        if leader.is_leader(self.node_id):
            log.info(
                "Node %d is the active controller in epoch %d, at metadata offset %d",
                self.node_id, leader.epoch, self.image.offset,
            )
            if was != leader:
                self._activation_pending = True
                self._schedule_activation()
        elif was.is_leader(self.node_id):
            log.warning("Node %d is no longer the active controller (%s)", self.node_id, leader)

    def begin_shutdown(self) -> None:
        self.leader_and_epoch = LeaderAndEpoch(None, self.leader_and_epoch.epoch)
        self._fail_deferred(_not_controller(self.leader_and_epoch))

    # -- the one place records reach the controller's image ------------------------------------

    def replay(
        self, records: Iterable[tuple[int, str, dict[str, Any]]], base: MetadataImage | None = None
    ) -> MetadataDelta:
        """Apply committed records (offset, name, fields) to the controller's image: one delta
        over the current image (or ``base``: a snapshot starts from the empty one), and the
        next image swapped in for the managers too."""
        delta = MetadataDelta(self.image if base is None else base)
        for offset, name, fields in records:
            delta.replay(name, fields, offset)
        self.image = self.replication.image = self.configuration.image = delta.apply()
        return delta

    # -- activation -----------------------------------------------------------------------------

    def _activation_records(self) -> list[MetadataRecord]:
        """What a newly active controller writes first (Kafka's ActivationRecordsGenerator):
        the abort of a metadata transaction left open, and the bootstrap metadata.version on a
        log without one."""
        records: list[MetadataRecord] = []
        if self.transactions.open_transaction is not None:
            # Apache Kafka stopped inside a metadata transaction: abort it, as Kafka's next
            # active controller does, so that what follows is not taken as part of it.
            log.warning(
                "Aborting the metadata transaction left open at offset %d", self.transactions.open_transaction
            )
            records.append(("AbortTransactionRecord", {"reason": "Odradek took over the metadata log"}))
        if "metadata.version" not in self.image.features.levels:
            records.append(("FeatureLevelRecord", {"name": "metadata.version", "feature_level": METADATA_VERSION}))
        return records

    def _schedule_activation(self) -> None:
        """Write the activation records now when on the event loop; else the next write does."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._activation = loop.create_task(self._activate(), name="controller-activation")

    async def _activate(self) -> None:
        try:
            await self._write(lambda: (None, []))
        except KafkaError as e:
            log.info("Controller activation did not complete: %s", e)
        except Exception:
            log.exception("Controller activation failed")

    # -- the write path -------------------------------------------------------------------------

    def _complete_up_to(self, offset: int) -> None:
        while self._deferred and self._deferred[0][0] <= offset:
            _, fut = self._deferred.pop(0)
            if not fut.done():
                fut.set_result(None)

    def _fail_deferred(self, error: Exception) -> None:
        deferred, self._deferred = self._deferred, []
        for _, fut in deferred:
            if not fut.done():
                fut.set_exception(error)

    async def _write(self, op: Callable[[], tuple[T, list[MetadataRecord]]]) -> T:
        if self._queue is None:
            self._queue = asyncio.Lock()
        async with self._queue:
            leader = self.leader_and_epoch
            if not leader.is_leader(self.node_id):
                raise _not_controller(leader)
            if self._activation_pending:
                self._activation_pending = False
                activation = self._activation_records()
                if activation:
                    await self._append(leader.epoch, activation)
            result, records = op()
            if records:
                await self._append(leader.epoch, records)
            return result

    async def _append(self, epoch: int, records: list[MetadataRecord]) -> None:
        """Propose ``records`` as one batch and wait until Raft delivers them committed."""
        try:
            last = self.raft_client.prepare_append(epoch, records)
        except NotLeaderError as e:
            raise _not_controller(self.raft_client.leader_and_epoch) from e
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._deferred.append((last, done))
        self.raft_client.schedule_prepared_append()
        await done

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
        """BrokerRegistration: register the broker, fenced until its first heartbeat from a
        caught-up broker.

        Returns the broker epoch (the offset of the registration record, as Kafka does).
        """

        def op() -> tuple[int, list[MetadataRecord]]:
            records: list[MetadataRecord] = []
            # The activation records (bootstrap metadata.version, abort of an open metadata
            # transaction) were written when this controller became active: the broker epoch
            # is the offset the registration record gets.
            epoch = self.raft_client.log_end_offset
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
