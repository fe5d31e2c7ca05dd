"""QuorumController: the active controller of a KRaft quorum, a Raft listener.

Every write runs through one event queue (Kafka's KafkaEventQueue, :mod:`event_queue`), in order:
a manager (sans-I/O) validates the operation against the controller's *write image* and produces
records; the controller proposes them to Raft with ``prepare_append`` at the epoch Raft gave it in
``handle_leader_change``. Writes are pipelined as Kafka's are: the write image is the committed
image plus the records appended and not yet committed (Kafka's SnapshotRegistry state at the
log end), so the next write runs at once against it, and several writes share one fsync and one
replication round. A write is answered only once its last offset is committed (a write with no
records: once everything appended before it is); the committed image, :attr:`image`, moves only
in ``handle_commit``, and nobody outside the controller acts on a change before it is committed.
On a leader change, resignation or a failed append the write image goes back to the committed
one and the writes waiting for their commit fail with NOT_CONTROLLER. At most
:data:`MAX_UNCOMMITTED_WRITES` writes wait for their commit; the next one waits for the oldest.
A write still queued at its deadline fails with REQUEST_TIMED_OUT. When this node does not lead the quorum,
writes are refused with NOT_CONTROLLER. A newly active controller first writes its activation
records (the abort of a metadata transaction left open, the bootstrap metadata.version of a new
log), and checks for brokers whose session ran out with a tagged deferred event that each
heartbeat and registration reschedules.

Elections (ElectLeaders, unclean election when enabled, the automatic preferred-leader balancing
as a deferred event) and reassignments run through :class:`ReplicationOps`
(:mod:`odradek.controller.replication_ops`), which also reacts to each commit.

The managers: ReplicationControlManager (topics, partitions), ConfigurationControlManager,
ClusterControlManager (broker registrations, heartbeats, fencing, controlled shutdown, with its
BrokerHeartbeatManager), FeatureControlManager, ProducerIdControlManager.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from odradek.controller.acl_control_manager import (
    AclControlManager,
    AclCreateResult,
    AclDeleteResult,
)
from odradek.controller.alter_partition import alter_partition
from odradek.controller.assign_replicas_to_dirs import assign_replicas_to_dirs
from odradek.controller.broker_heartbeat_manager import DEFAULT_SESSION_TIMEOUT_MS
from odradek.controller.client_quota_control_manager import ClientQuotaControlManager
from odradek.controller.cluster_control_manager import BrokerHeartbeatReply, ClusterControlManager
from odradek.controller.configuration_control import (
    BrokerConfigPolicy,
    ConfigurationControlManager,
    GroupConfigPolicy,
)
from odradek.controller.event_queue import (
    EventTimeoutError,
    FunctionEvent,
    KafkaEventQueue,
    earliest_deadline,
)
from odradek.controller.feature_control_manager import METADATA_VERSION, FeatureControlManager
from odradek.controller.producer_id_control_manager import ProducerIdControlManager
from odradek.controller.replication_control import (
    EXCESSIVE_BATCH_MESSAGE,
    MAX_RECORDS_PER_USER_OP,
    ExcessiveBatchError,
    MetadataRecord,
    ReplicationControlManager,
    TopicResult,
)
from odradek.controller.replication_ops import ReplicationOps
from odradek.controller.scram_control_manager import ScramControlManager
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
from odradek.security.acl import AclBindingFilter, StandardAcl

log = logging.getLogger(__name__)

T = TypeVar("T")

# The tag of the deferred event that fences brokers whose session ran out (Kafka's name).
MAYBE_FENCE_REPLICAS = "maybeFenceReplicas"

# Writes appended and waiting for their commit, at most (the bound on the speculative state).
MAX_UNCOMMITTED_WRITES = 1024

# Metadata-transaction markers: MetadataTransactions handles them on commit, the image never sees
# them (the controller writes only AbortTransactionRecord, on activation).
_TRANSACTION_MARKERS = frozenset({"BeginTransactionRecord", "EndTransactionRecord", "AbortTransactionRecord"})


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


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
        cluster_id: str,
        broker_configs: BrokerConfigPolicy | None = None,
        group_configs: GroupConfigPolicy | None = None,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        clock_ms: Callable[[], int] = _monotonic_ms,
        bootstrap_metadata_version: int = METADATA_VERSION,
        bootstrap_features: Mapping[str, int] | None = None,
        colocated_broker: bool = False,
        replication_options: dict[str, Any] | None = None,
        bootstrap_records: Sequence[MetadataRecord] = (),
    ) -> None:
        """``clock_ms``: monotonic milliseconds (broker sessions and write deadlines).
        ``colocated_broker``: this process is also broker ``node_id`` (process.roles=broker,
        controller)."""
        self.node_id = node_id
        self.raft_client = raft_client
        self._colocated_broker = colocated_broker
        self._activated_before = False
        # The committed image; the managers work on the write image (committed + appended).
        self.image: MetadataImage = EMPTY_IMAGE
        self.write_image: MetadataImage = EMPTY_IMAGE
        # The last offset appended by this active controller (speculatively applied to the write
        # image) and the last offset delivered committed.
        self._speculative_end = -1
        self._committed_offset = -1
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
        self.configuration = ConfigurationControlManager(
            self.image, validate_config, broker_configs, group_configs
        )
        # metadata.version written when a new log is activated: the formatted release version
        # (bootstrap.checkpoint, as kafka-storage format --release-version writes it) or ours.
        self.features = FeatureControlManager(
            self.image, bootstrap_metadata_version=bootstrap_metadata_version,
            bootstrap_features=bootstrap_features,
        )
        self.cluster = ClusterControlManager(
            cluster_id, self.image, self.features, session_timeout_ms=session_timeout_ms
        )
        self.producer_ids = ProducerIdControlManager(self.image, self.cluster)
        self.acls = AclControlManager(self.image)
        # Called with each delta replayed into the committed image (the controller's authorizer).
        self.replay_listeners: list[Callable[[MetadataDelta, MetadataImage], None]] = []
        self.scram = ScramControlManager(self.image)
        # Written with the bootstrap features on a new log (storage format --add-scram).
        self._bootstrap_records = list(bootstrap_records)
        self.client_quotas = ClientQuotaControlManager(self.image)
        self.clock_ms = clock_ms
        self.queue = KafkaEventQueue(clock_ms, f"controller-{node_id}")
        self.replication_ops = ReplicationOps(self, **(replication_options or {}))
        self.cluster.unclean_leader_election_default = self.replication_ops.unclean_leader_election_enable

    @property
    def is_active(self) -> bool:
        return self.leader_and_epoch.is_leader(self.node_id)

    # -- RaftClient.Listener --------------------------------------------------------------------

    def handle_load_snapshot(self, reader: SnapshotReader[MetadataRecord]) -> None:
        self.transactions.reset()
        offset = reader.last_contained_log_offset
        self._committed_offset = offset
        self.replay(((offset, name, fields) for name, fields in reader.records), base=EMPTY_IMAGE)

    def handle_commit(self, batches: Sequence[Batch[MetadataRecord]]) -> None:
        """One delta over every committed batch, one image swapped in; then the writes whose
        records are now committed complete."""
        if batches:
            self._committed_offset = max(self._committed_offset, batches[-1].last_offset)
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
        if was != leader:
            # Renounce: what was proposed in the old epoch will not be committed by us.
            self._fail_deferred(_not_controller(leader))
            self._drop_speculative()
        if leader.is_leader(self.node_id):
            log.info(
                "Node %d is the active controller in epoch %d, at metadata offset %d",
                self.node_id, leader.epoch, self.image.offset,
            )
            if was != leader:
                # The broker sharing this process cannot have a live earlier incarnation when
                # this controller first activates: it died with the previous process. It may
                # register again at once instead of waiting for a session that cannot end
                # otherwise than by timing out (broker.session.timeout.ms after a kill -9).
                gone = frozenset({self.node_id}) if self._colocated_broker and not self._activated_before else frozenset()
                self._activated_before = True
                self.cluster.activate(self.clock_ms(), expired=gone)
                self._activation_pending = True
                self._schedule_activation()
        elif was.is_leader(self.node_id):
            log.warning("Node %d is no longer the active controller (%s)", self.node_id, leader)
            self._deactivate()

    def begin_shutdown(self) -> None:
        was = self.leader_and_epoch
        self.leader_and_epoch = LeaderAndEpoch(None, self.leader_and_epoch.epoch)
        self._fail_deferred(_not_controller(self.leader_and_epoch))
        self._drop_speculative()
        if was.is_leader(self.node_id):
            self._deactivate()
        self.queue.begin_shutdown("QuorumController.begin_shutdown")

    async def close(self) -> None:
        """Stop: the queued writes without a deadline still run (refused unless active), the
        others fail; returns once the queue is empty."""
        self.begin_shutdown()
        await self.queue.close()

    def _deactivate(self) -> None:
        """No longer active: the soft broker state goes, and the fencing check with it."""
        self.cluster.deactivate()
        self.queue.cancel_deferred(MAYBE_FENCE_REPLICAS)
        self.replication_ops.cancel()

    # -- the one place records reach the controller's image ------------------------------------

    def replay(
        self, records: Iterable[tuple[int, str, dict[str, Any]]], base: MetadataImage | None = None
    ) -> MetadataDelta:
        """Apply committed records (offset, name, fields) to the controller's image: one delta
        over the current image (or ``base``: a snapshot starts from the empty one); the
        managers' write image becomes it too once nothing appended is left uncommitted."""
        delta = MetadataDelta(self.image if base is None else base)
        for offset, name, fields in records:
            delta.replay(name, fields, offset)
            self.cluster.replay(name, fields, offset)
        self.image = delta.apply()
        for listener in self.replay_listeners:
            listener(delta, self.image)
        if self._speculative_end <= self._committed_offset or base is not None:
            self._drop_speculative()
        self.replication_ops.after_replay(delta, full=base is not None)
        return delta

    def _set_write_image(self, image: MetadataImage) -> None:
        self.write_image = image
        for manager in (
            self.replication, self.configuration, self.features, self.cluster, self.producer_ids, self.acls,
            self.scram, self.client_quotas,
        ):
            manager.image = image

    def _drop_speculative(self) -> None:
        """Back to the committed image: what was appended is committed, or abandoned."""
        self._speculative_end = -1
        self.cluster.drop_speculative()
        self._set_write_image(self.image)

    def _speculative_image(self, records: list[MetadataRecord], first_offset: int) -> MetadataImage:
        """The write image with ``records`` (to be appended at ``first_offset``) applied; raises
        MetadataReplayError for records that would not replay (then nothing is appended)."""
        delta = MetadataDelta(self.write_image)
        for i, (name, fields) in enumerate(records):
            if name not in _TRANSACTION_MARKERS:
                delta.replay(name, fields, first_offset + i)
        return delta.apply()

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
        bootstrap = self.features.bootstrap_records()
        records.extend(bootstrap)
        if bootstrap:
            records.extend(self._bootstrap_records)
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
            await self._write("activate", lambda: (None, []), prepend=True)
            self._reschedule_maybe_fence_stale_brokers()
            self.replication_ops.reschedule_balance()
        except KafkaError as e:
            log.info("Controller activation did not complete: %s", e)
        except Exception:
            log.exception("Controller activation failed")

    # -- fencing of brokers whose session ran out -----------------------------------------------

    def _reschedule_maybe_fence_stale_brokers(self) -> None:
        """(Re)schedule the fencing check for when the next broker session runs out (Kafka's
        rescheduleMaybeFenceStaleBrokers): one tagged deferred event, the earliest deadline wins."""
        if not self.is_active:
            return
        when = self.cluster.next_fencing_check_ms()
        if when is None:
            self.queue.cancel_deferred(MAYBE_FENCE_REPLICAS)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_log_deferred_failure)
        event = FunctionEvent(MAYBE_FENCE_REPLICAS, self._maybe_fence_stale_brokers, future)
        self.queue.schedule_deferred(MAYBE_FENCE_REPLICAS, earliest_deadline(when), event)

    async def _maybe_fence_stale_brokers(self) -> None:
        def op() -> tuple[None, list[MetadataRecord]]:
            return None, self.cluster.maybe_fence_one_stale_broker(self.clock_ms())

        try:
            await self._run_write(op)
        finally:
            # At once again if another broker is stale too (one fencing per write).
            self._reschedule_maybe_fence_stale_brokers()

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

    def _write(
        self,
        name: str,
        op: Callable[[], tuple[T, list[MetadataRecord]]],
        timeout_ms: int | None = None,
        *,
        prepend: bool = False,
        on_appended: Callable[[T, int], None] | None = None,
    ) -> asyncio.Future[T]:
        """Queue the write ``op``; it fails with REQUEST_TIMED_OUT if still queued after
        ``timeout_ms`` (None or <= 0: no deadline). The queue moves on once its records are
        appended; the future is done once they are committed."""
        deadline = self.clock_ms() + timeout_ms if timeout_ms is not None and timeout_ms > 0 else None
        appended = self.queue.submit_async(
            name, lambda: self._append_write(op, on_appended), deadline, prepend=prepend
        )
        return asyncio.ensure_future(_after_commit(appended))

    async def _run_write(
        self,
        op: Callable[[], tuple[T, list[MetadataRecord]]],
        on_appended: Callable[[T, int], None] | None = None,
    ) -> T:
        """One write run from inside a queue event, done once committed (the event waits)."""
        result, committed = await self._append_write(op, on_appended)
        if committed is not None:
            await committed
        return result

    async def _append_write(
        self,
        op: Callable[[], tuple[T, list[MetadataRecord]]],
        on_appended: Callable[[T, int], None] | None = None,
    ) -> tuple[T, asyncio.Future[None] | None]:
        """One write event: refused unless active; activation records first; the operation's
        records proposed as one batch. Returns its result and the future of its commit (None:
        nothing to wait for)."""
        while len(self._deferred) >= MAX_UNCOMMITTED_WRITES:
            # Bounded speculation: wait for the oldest write's commit (or failure).
            await asyncio.wait([self._deferred[0][1]])
        leader = self.leader_and_epoch
        if not leader.is_leader(self.node_id):
            raise _not_controller(leader)
        if self._activation_pending:
            self._activation_pending = False
            activation = self._activation_records()
            if activation:
                self._append(leader.epoch, activation)
        result, records = op()
        if records:
            committed = self._append(
                leader.epoch, records, lambda last: on_appended(result, last) if on_appended else None
            )
            return result, committed
        if on_appended is not None:
            on_appended(result, self.raft_client.log_end_offset - 1)
        if self._speculative_end > self._committed_offset:
            # The result was computed on appended state: answer once that is committed.
            return result, self._defer(self._speculative_end)
        return result, None

    def _append(
        self, epoch: int, records: list[MetadataRecord], on_appended: Callable[[int], None] | None = None
    ) -> asyncio.Future[None]:
        """Propose ``records`` as one batch, apply them to the write image; returns the future
        of their commit."""
        image = self._speculative_image(records, self.raft_client.log_end_offset)
        try:
            last = self.raft_client.prepare_append(epoch, records)
        except NotLeaderError as e:
            error = _not_controller(self.raft_client.leader_and_epoch)
            self._fail_deferred(error)
            self._drop_speculative()
            raise error from e
        self._set_write_image(image)
        for i, (name, fields) in enumerate(records):
            self.cluster.replay_speculative(name, fields, last - len(records) + 1 + i)
        self._speculative_end = last
        if on_appended is not None:
            on_appended(last)
        done = self._defer(last)
        self.raft_client.schedule_prepared_append()
        return done

    def _defer(self, offset: int) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Its failure is retrieved even when the caller stopped waiting (no asyncio warning).
        done.add_done_callback(_retrieve)
        self._deferred.append((offset, done))
        return done

    # -- operations -----------------------------------------------------------------------------

    async def register_broker(self, request: dict[str, Any]) -> int:
        """BrokerRegistration (the ClusterControlManager's rules): the broker epoch, the offset
        its registration batch starts at, as Kafka's; fenced until a caught-up heartbeat."""

        def op() -> tuple[int, list[MetadataRecord]]:
            result = self.cluster.register_broker(request, self.raft_client.log_end_offset, self.clock_ms())
            self._reschedule_maybe_fence_stale_brokers()
            return result

        return await self._write("registerBroker", op)

    async def broker_heartbeat(self, request: dict[str, Any], timeout_ms: int | None = None) -> BrokerHeartbeatReply:
        """BrokerHeartbeat (the ClusterControlManager's rules). A heartbeat still queued after
        ``timeout_ms`` fails with REQUEST_TIMED_OUT but counts as contact from the broker."""

        def op() -> tuple[BrokerHeartbeatReply, list[MetadataRecord]]:
            result = self.cluster.process_broker_heartbeat(request, self.clock_ms())
            self._reschedule_maybe_fence_stale_brokers()
            return result

        def appended(reply: BrokerHeartbeatReply, last_offset: int) -> None:
            self.cluster.process_batch_end_offset(request["broker_id"], reply, last_offset)

        try:
            return await self._write("processBrokerHeartbeat", op, timeout_ms, on_appended=appended)
        except EventTimeoutError:
            if self.is_active:
                try:
                    self.cluster.process_expired_broker_heartbeat(request, self.clock_ms())
                except KafkaError:
                    pass
            raise

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> tuple[int, int]:
        """Hand a broker a block of producer ids (Kafka's AllocateProducerIds): (first, count)."""

        def op() -> tuple[tuple[int, int], list[MetadataRecord]]:
            block, records = self.producer_ids.generate_next_producer_id(broker_id, broker_epoch)
            return (block.first_producer_id, block.size), records

        return await self._write("allocateProducerIds", op)

    async def create_acls(self, acls: list[StandardAcl]) -> list[AclCreateResult]:
        """CreateAcls (Kafka's AclControlManager.createAcls); answered once committed."""
        return await self._write("createAcls", lambda: self.acls.create_acls(acls))

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[AclDeleteResult]:
        """DeleteAcls (Kafka's AclControlManager.deleteAcls); answered once committed."""
        return await self._write("deleteAcls", lambda: self.acls.delete_acls(filters))

    async def alter_partition(self, request: dict[str, Any], version: int) -> dict[str, Any]:
        """AlterPartition from a partition leader (Kafka's ReplicationControlManager
        .alterPartition): the sender's broker epoch, then each partition (see
        :mod:`odradek.controller.alter_partition`); answered once the ISR changes are committed."""

        def op() -> tuple[dict[str, Any], list[MetadataRecord]]:
            self.cluster.check_broker_epoch(request["broker_id"], request["broker_epoch"])
            return alter_partition(self.write_image, request, version)

        return await self._write("alterPartition", op)

    async def assign_replicas_to_dirs(self, request: dict[str, Any]) -> dict[str, Any]:
        """AssignReplicasToDirs from a broker (KIP-858; see
        :mod:`odradek.controller.assign_replicas_to_dirs`): its broker epoch, then each replica's
        directory; answered once the records are committed."""

        def op() -> tuple[dict[str, Any], list[MetadataRecord]]:
            self.cluster.check_broker_epoch(request["broker_id"], request["broker_epoch"])
            return assign_replicas_to_dirs(self.image, request, self.features.metadata_version())

        return await self._write("assignReplicasToDirs", op)

    async def create_topics(
        self, topics: list[dict[str, Any]], validate_only: bool, timeout_ms: int | None = None
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

        return await self._write("createTopics", op, timeout_ms)

    async def delete_topics(
        self, names: list[str | None], ids: list[uuid.UUID | None], timeout_ms: int | None = None
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
                    t = self.write_image.topics_by_name.get(name)
                    if t is None:
                        out.append((name, zero, Errors.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."))
                        continue
                elif tid is not None:
                    t = self.write_image.topics_by_id.get(tid)
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

        return await self._write("deleteTopics", op, timeout_ms)

    async def create_partitions(
        self, requests: list[dict[str, Any]], validate_only: bool, timeout_ms: int | None = None
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
                    t = self.write_image.topics_by_name.get(r["name"])
                    log.info(
                        "Increased the partitions of topic %s from %d to %d",
                        r["name"], len(t.partitions) if t else -1, r["count"],
                    )
            return out, records

        return await self._write("createPartitions", op, timeout_ms)

    async def alter_user_scram_credentials(self, request: dict[str, Any]) -> dict[str, Any]:
        def op() -> tuple[dict[str, Any], list[MetadataRecord]]:
            response, records = self.scram.alter_credentials(request)
            for name, r in records:
                log.info("%s for user %s (mechanism %d)", name, r["name"], r["mechanism"])
            return response, records

        return await self._write("alterUserScramCredentials", op)

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

        return await self._write("incrementalAlterConfigs" if incremental else "legacyAlterConfigs", op)

    async def alter_client_quotas(
        self, entries: list[dict[str, Any]], validate_only: bool
    ) -> list[tuple[Errors, str | None]]:
        def op() -> tuple[list[tuple[Errors, str | None]], list[MetadataRecord]]:
            outcomes, records = self.client_quotas.alter_client_quotas(entries)
            if validate_only:
                return outcomes, []
            for _name, r in records:
                log.info(
                    "Client quota %s of %s %s", r["key"],
                    ", ".join(f"{e['entity_type']}={e['entity_name'] or '<default>'}" for e in r["entity"]),
                    "removed" if r["remove"] else f"set to {r['value']}",
                )
            return outcomes, records

        return await self._write("alterClientQuotas", op)


def _config_changes(records: list[MetadataRecord]) -> str:
    """``key=value`` for each set key, ``key`` reset to its default for each removed one."""
    parts = []
    for _name, rec in records:
        value = rec.get("value")
        parts.append(f"{rec['name']} reset to default" if value is None else f"{rec['name']}={value}")
    return ", ".join(parts)


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


async def _after_commit(appended: asyncio.Future[tuple[T, asyncio.Future[None] | None]]) -> T:
    """The result of a write once its records are committed."""
    result, committed = await appended
    if committed is not None:
        await committed
    return result


def _log_deferred_failure(future: asyncio.Future[None]) -> None:
    """A deferred controller event ended: only an unexpected failure is worth a log line."""
    if future.cancelled():
        return
    error = future.exception()
    if error is None or isinstance(error, KafkaError):
        return  # NOT_CONTROLLER after a failover, or the queue shutting down
    log.error("Unexpected exception in a deferred controller event", exc_info=error)
