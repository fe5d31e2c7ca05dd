"""GroupCoordinator: the asyncio shell around the sans-I/O groups and the offsets.

It owns the groups of the ``__consumer_offsets`` partitions this node leads (through
:class:`GroupMetadataManager`), turns JoinGroup/SyncGroup into futures that the classic group
answers (a join completes when every known member rejoined or the rebalance timeout passed; sync
followers wait for the leader's assignment), keeps one timer per group at the group's next
deadline (heartbeat expiry, join/sync timeouts, the initial rebalance delay), writes group records
when a generation's assignment is set, and creates ``__consumer_offsets`` on the first lookup
(an :class:`~odradek.coordinator.internal_topic.InternalTopic`).
Time comes from the injected clock and timers go through the injected
:class:`~odradek.coordinator.group.coordinator_timer.CoordinatorTimer` only. OffsetCommit,
OffsetFetch and OffsetDelete go to the
:class:`~odradek.coordinator.group.offset_metadata_manager.OffsetMetadataManager` once the
coordinator has checked that it serves the group.

KIP-848 consumer groups (``group.protocol=consumer``) live in the same manager as
:class:`~odradek.coordinator.group.consumer_group.ConsumerGroup` objects. A ConsumerGroupHeartbeat
runs :func:`~odradek.coordinator.group.consumer_group_heartbeat.consumer_group_heartbeat` under a
per-group lock (one change at a time: the next request sees only state whose records were
written), writes the records it returns to the group's ``__consumer_offsets`` partition and
answers only once they are appended; if the append fails the group is restored from a snapshot
taken before. One timer per group fires at the group's next session/rebalance deadline and fences
the members whose time has passed. The topic metadata the groups assign from is a mapping rebuilt
whenever the metadata image changes (:meth:`on_metadata_update` is a metadata loader publisher),
so new topics and partitions reach every group at its members' next heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from odradek.coordinator.group.assignors import TopicMetadata
from odradek.coordinator.group.classic_group import ClassicGroup, ClassicGroupState, Effects
from odradek.coordinator.group.classic_group_member import JoinResult, SyncResult
from odradek.coordinator.group.consumer_group import ConsumerGroup, TopicFilter, describe_error
from odradek.coordinator.group.consumer_group_heartbeat import (
    consumer_group_heartbeat,
    error_response,
    expire_due,
)
from odradek.coordinator.group.coordinator_timer import CoordinatorTimer, EventLoopTimer
from odradek.coordinator.group.group_coordinator_config import (
    classic_group_config,
    consumer_group_config,
)
from odradek.coordinator.group.group_events import Membership, log_changes, membership
from odradek.coordinator.group.group_metadata_manager import (
    OFFSETS_TOPIC,
    GroupMetadataManager,
    TopicPartition,
)
from odradek.coordinator.group.offset_metadata_manager import CommitRequest, OffsetMetadataManager
from odradek.coordinator.group.records import OffsetAndMetadata, group_metadata_key
from odradek.coordinator.internal_topic import InternalTopic
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import MetadataImage
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.protocol.errors import Errors
from odradek.server.controller_channel import ControllerChannel
from odradek.server.kafka_config import KafkaConfig
from odradek.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupCoordinator:
    def __init__(
        self,
        *,
        node_id: int,
        config: KafkaConfig,
        replica_manager: ReplicaManager,
        metadata_cache: KRaftMetadataCache,
        controller_channel: ControllerChannel | None,
        clock_ms: Callable[[], int] = _now_ms,
        timer: CoordinatorTimer | None = None,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.replica_manager = replica_manager
        self.metadata_cache = metadata_cache
        self.controller_channel = controller_channel
        self.clock_ms = clock_ms
        self.timer: CoordinatorTimer = timer if timer is not None else EventLoopTimer()
        self.group_config = classic_group_config(config)
        self.consumer_group_config = consumer_group_config(config)
        protocols = config.get("group.coordinator.rebalance.protocols") or []
        self.consumer_protocol_enabled = "consumer" in [str(p).strip() for p in protocols]
        self.metadata_manager = GroupMetadataManager(
            replica_manager=replica_manager,
            num_partitions=config.offsets_topic_num_partitions,
            group_config=self.group_config,
            offsets_retention_ms=config.offsets_retention_minutes * 60_000,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            clock_ms=clock_ms,
            consumer_group_config=self.consumer_group_config,
        )
        self.offset_manager = OffsetMetadataManager(
            groups=self.metadata_manager,
            partition_exists=lambda topic, p: self.metadata_cache.contains_partition(topic, p),
            clock_ms=clock_ms,
            on_member_heartbeat=self._schedule,
        )
        self.metadata_manager.on_group_loaded = self._schedule
        self.metadata_manager.group_overrides = lambda group_id: self.metadata_cache.group_config(group_id)
        self.metadata_manager.on_group_unloaded = self._on_unloaded
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # group id -> (lock, users)
        self._topics_metadata: dict[str, TopicMetadata] | None = None
        self.offsets_topic = InternalTopic(
            name=OFFSETS_TOPIC, config_prefix="offsets.topic", keys="groups",
            num_partitions=config.offsets_topic_num_partitions,
            replication_factor=config.offsets_topic_replication_factor,
            topic_configs=lambda rf: {
                "cleanup.policy": "compact",
                "segment.bytes": str(config.offsets_topic_segment_bytes),
                "compression.type": "producer",
            },
            state=self.metadata_manager, node_id=node_id, config=config, metadata_cache=metadata_cache,
            replica_manager=replica_manager, controller_channel=controller_channel,
        )
        self._tasks: set[asyncio.Task[Any]] = set()
        self._expiry_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------------ lifecycle

    def startup(self) -> None:
        """Listen for leadership of ``__consumer_offsets`` partitions (and take up the ones this
        node already leads), and start the offset expiry task."""
        self.offsets_topic.exists()  # takes up the partition count of an existing topic
        rm = self.replica_manager
        rm.leadership_listeners.append(self.metadata_manager.on_leadership_change)
        rm.txn_marker_listeners.append(self.metadata_manager.on_txn_marker)
        for (topic, p), part in list(rm.partitions.items()):
            if topic == OFFSETS_TOPIC and part.is_leader:
                self.metadata_manager.schedule_load(p, part.leader_epoch)
        interval = self.config.offsets_retention_check_interval_ms
        if 0 < interval < 2**62:
            self._expiry_task = asyncio.get_running_loop().create_task(
                self._expiry_loop(interval), name="group-metadata-expiry"
            )

    async def _expiry_loop(self, interval_ms: int) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000.0)
            try:
                await self.metadata_manager.cleanup_group_metadata()
            except Exception:
                log.exception("Offset expiry failed")

    async def shutdown(self) -> None:
        if self._expiry_task is not None:
            self._expiry_task.cancel()
        self.timer.cancel_all()
        self.metadata_manager.shutdown()
        for t in list(self._tasks):
            t.cancel()
        rm, mm = self.replica_manager, self.metadata_manager
        with contextlib.suppress(ValueError):
            rm.leadership_listeners.remove(mm.on_leadership_change)
        with contextlib.suppress(ValueError):
            rm.txn_marker_listeners.remove(mm.on_txn_marker)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------------ topic & lookup

    def partition_for(self, group_id: str) -> int:
        return self.metadata_manager.partition_for(group_id)

    def coordinator_for(self, group_id: str, listener: str) -> tuple[Errors, int, str, int]:
        """FindCoordinator: (error, node id, host, port); creates ``__consumer_offsets`` first."""
        return self.offsets_topic.coordinator_for(group_id, listener)

    def check_group(self, group_id: str | None) -> Errors:
        """INVALID_GROUP_ID / COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR / LOAD_IN_PROGRESS / NONE."""
        if not group_id:
            return Errors.INVALID_GROUP_ID
        if not self.offsets_topic.exists():
            return Errors.COORDINATOR_NOT_AVAILABLE
        return self.metadata_manager.partition_error(group_id)

    def _classic(self, group_id: str, create: bool) -> ClassicGroup | None | Errors:
        g = self.metadata_manager.get_group(group_id)
        if g is None:
            return self.metadata_manager.get_or_create_classic_group(group_id) if create else None
        if not isinstance(g, ClassicGroup):
            return Errors.INCONSISTENT_GROUP_PROTOCOL  # a KIP-848 group of the same id
        return g

    # ------------------------------------------------------------------------ effects & timers

    def _apply(
        self, group: ClassicGroup, fx: Effects, before: Membership | None = None, **how: bool
    ) -> None:
        """Deliver ``fx``; with ``before`` (taken before the call), log what changed."""
        if before is not None:
            log_changes(group, before, self.clock_ms(), **how)
        for waiter, result in fx.responses:
            if isinstance(waiter, asyncio.Future) and not waiter.done():
                waiter.set_result(result)
        if fx.store_generation is not None:
            self._spawn(self._store(group, fx.store_generation))
        self._schedule(group)

    async def _store(self, group: ClassicGroup, generation: int) -> None:
        err = await self.metadata_manager.store_group(group, group.to_record())
        if err != Errors.NONE:
            log.warning("Storing group %s generation %d failed: %s", group.group_id, generation, err.name)
        if self.metadata_manager.get_group(group.group_id) is group:
            before = membership(group)
            self._apply(group, group.on_group_stored(generation, err, self.clock_ms()), before)

    def _schedule(self, group: Any) -> None:
        """(Re-)arm the one timer of ``group`` at its next deadline."""
        fire: Callable[[Any], None]
        if isinstance(group, ClassicGroup):
            fire = self._fire
        elif isinstance(group, ConsumerGroup):
            fire = self._fire_consumer
        else:
            return
        self._cancel_timer(group.group_id)
        deadline = group.next_deadline()
        if deadline is None or (isinstance(group, ClassicGroup) and group.state == ClassicGroupState.DEAD):
            return
        delay_ms = max(0, deadline - self.clock_ms())
        self.timer.schedule(group.group_id, delay_ms, lambda: fire(group))

    def _cancel_timer(self, group_id: str) -> None:
        self.timer.cancel(group_id)

    def _fire(self, group: ClassicGroup) -> None:
        if self.metadata_manager.get_group(group.group_id) is not group:
            return
        before = membership(group)
        self._apply(group, group.poll(self.clock_ms()), before, timers=True)

    def _on_unloaded(self, group: Any) -> None:
        self._cancel_timer(group.group_id)
        if isinstance(group, ClassicGroup):
            self._apply(group, group.make_dead(Errors.NOT_COORDINATOR, self.clock_ms()))

    @contextlib.asynccontextmanager
    async def _lock(self, group_id: str) -> AsyncIterator[None]:
        """Serializes the changes of one group whose records must be written before the next.
        The lock lives only while someone holds or awaits it (group ids are client input)."""
        lock, users = self._locks.get(group_id) or (asyncio.Lock(), 0)
        self._locks[group_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[group_id]
            if users == 1:
                del self._locks[group_id]
            else:
                self._locks[group_id] = (lock, users - 1)

    # ------------------------------------------------------------------------ KIP-848 groups

    def topics_metadata(self) -> Mapping[str, TopicMetadata]:
        """Every topic of the metadata image as the consumer groups see it. The same mapping
        object is returned until the metadata changes (the groups cache regex matches per
        mapping)."""
        md = self._topics_metadata
        if md is None:
            md = {
                name: TopicMetadata(t.topic_id, name, len(t.partitions))
                for name, t in self.metadata_cache.image.topics.by_name.items()
            }
            self._topics_metadata = md
        return md

    def on_metadata_update(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Metadata loader publisher: topics created, deleted or grown are seen by the consumer
        groups at their next heartbeat (which bumps the group epoch and reassigns)."""
        # (ACL changes too: regexes are resolved again, with the authorizer's new answers.)
        if delta.created_topics or delta.deleted_topics or delta.changed_partitions or delta.acl_changes:
            self._topics_metadata = None

    async def consumer_group_heartbeat(
        self, request: dict[str, Any], *, client_id: str, client_host: str,
        topic_filter: TopicFilter | None = None,
    ) -> dict[str, Any]:
        """ConsumerGroupHeartbeat: join, heartbeat, reconcile, leave (KIP-848)."""
        if not self.consumer_protocol_enabled:
            return error_response(
                Errors.UNSUPPORTED_VERSION,
                "The new consumer group protocol is disabled on this broker "
                "(group.coordinator.rebalance.protocols does not include consumer).",
            )
        group_id = request.get("group_id") or ""
        if not group_id:
            return error_response(Errors.INVALID_REQUEST, "GroupId can't be empty.")
        err = self.check_group(group_id)
        if err != Errors.NONE:
            return error_response(err)
        async with self._lock(group_id):
            err = self.check_group(group_id)  # leadership may have moved while waiting
            if err != Errors.NONE:
                return error_response(err)
            return await self._consumer_group_heartbeat(request, group_id, client_id, client_host, topic_filter)

    async def _consumer_group_heartbeat(
        self, request: dict[str, Any], group_id: str, client_id: str, client_host: str,
        topic_filter: TopicFilter | None,
    ) -> dict[str, Any]:
        mgr = self.metadata_manager
        existing = mgr.get_group(group_id)
        joining = int(request.get("member_epoch", 0)) == 0
        before: list[tuple[bytes, bytes | None]] = []
        replaced: ClassicGroup | None = None
        if isinstance(existing, ConsumerGroup):
            group = existing
        elif existing is None:
            if not joining:
                return error_response(
                    Errors.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found."
                )
            group = mgr.new_consumer_group(group_id)
        elif isinstance(existing, ClassicGroup) and joining and existing.is_empty():
            # Kafka's maybeDeleteEmptyClassicGroup: an empty classic group (e.g. one that only
            # holds committed offsets) gives its id to the new consumer group; the offsets stay.
            replaced = existing
            group = mgr.new_consumer_group(group_id)
            group.offsets = existing.offsets
            group.pending_offset_commits = existing.pending_offset_commits
            before.append((group_metadata_key(group_id), None))
        else:
            message = (
                f"Cannot upgrade classic group {group_id} to consumer group: it has members "
                f"(online upgrade of a classic group is not supported)."
                if joining
                else f"Group {group_id} is not a consumer group."
            )
            log.info("ConsumerGroupHeartbeat for group %s refused: %s", group_id, message)
            return error_response(Errors.GROUP_ID_NOT_FOUND, message)

        snapshot = group.snapshot()
        epoch_before, members_before = group.group_epoch, set(group.members)
        response, records = consumer_group_heartbeat(
            group,
            request,
            self.clock_ms(),
            self.topics_metadata(),
            client_id=client_id,
            client_host=client_host,
            topic_filter=topic_filter,
        )
        if response["error_code"] != Errors.NONE:
            log.info(
                "ConsumerGroupHeartbeat of member %s of group %s failed: %s (%s)",
                request.get("member_id"), group_id, Errors(response["error_code"]).name,
                response["error_message"],
            )
            return response
        if records or before:
            created = existing is not group
            if created:
                mgr.groups[group_id] = group  # visible while its first records are written
            err = await mgr.write_records(group_id, records, before=before)
            if err != Errors.NONE:
                log.warning(
                    "Writing %d record(s) of consumer group %s failed: %s; the change is undone",
                    len(records), group_id, err.name,
                )
                group.restore(snapshot)
                if created and mgr.get_group(group_id) is group:
                    if replaced is not None:
                        mgr.groups[group_id] = replaced
                    else:
                        mgr.remove_group(group_id)
                return error_response(err)
            if replaced is not None:
                log.info("Empty classic group %s became a consumer group", group_id)
                self._cancel_timer(group_id)
                self._apply(replaced, replaced.make_dead(Errors.COORDINATOR_NOT_AVAILABLE, self.clock_ms()))
            if group.group_epoch != epoch_before:
                joined = set(group.members) - members_before
                left = members_before - set(group.members)
                log.info(
                    "Consumer group %s: epoch %d, %d member(s)%s%s",
                    group_id, group.group_epoch, len(group.members),
                    f", joined: {', '.join(sorted(joined))}" if joined else "",
                    f", left: {', '.join(sorted(left))}" if left else "",
                )
        if mgr.get_group(group_id) is group:
            self._schedule(group)
        return response

    def _fire_consumer(self, group: ConsumerGroup) -> None:
        if self.metadata_manager.get_group(group.group_id) is group:
            self._spawn(self._expire_consumer(group))

    async def _expire_consumer(self, group: ConsumerGroup) -> None:
        gid = group.group_id
        async with self._lock(gid):
            if self.metadata_manager.get_group(gid) is not group:
                return
            snapshot = group.snapshot()
            members_before = set(group.members)
            records = expire_due(group, self.clock_ms())
            if records:
                err = await self.metadata_manager.write_records(gid, records)
                if err != Errors.NONE:
                    group.restore(snapshot)
                    log.warning(
                        "Writing the expiry of members of consumer group %s failed: %s; retrying",
                        gid, err.name,
                    )
                    if self.metadata_manager.get_group(gid) is group:
                        self.timer.schedule(gid, 1000, lambda: self._fire_consumer(group))
                    return
                gone = sorted(members_before - set(group.members))
                log.info(
                    "Consumer group %s: member(s) %s fenced (session or rebalance timeout); "
                    "epoch %d, %d member(s) left",
                    gid, ", ".join(gone), group.group_epoch, len(group.members),
                )
            if self.metadata_manager.get_group(gid) is group:
                self._schedule(group)

    def consumer_group_describe(self, group_ids: list[str]) -> list[dict[str, Any]]:
        """ConsumerGroupDescribe: one entry per group id."""
        out: list[dict[str, Any]] = []
        for gid in group_ids:
            err = self.check_group(gid)
            g = self.metadata_manager.get_group(gid) if err == Errors.NONE else None
            if err != Errors.NONE:
                out.append(describe_error(gid, err))
            elif g is None:
                out.append(describe_error(gid, Errors.GROUP_ID_NOT_FOUND, f"Group {gid} not found."))
            elif not isinstance(g, ConsumerGroup):
                out.append(
                    describe_error(
                        gid, Errors.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group."
                    )
                )
            else:
                out.append(g.describe(self.topics_metadata()))
        return out

    async def _replace_empty_consumer_group(self, group: ConsumerGroup) -> Errors:
        """A classic JoinGroup for an empty consumer group: the group is deleted (its records
        tombstoned, its offsets kept) and a classic group takes the id, as Kafka does."""
        gid = group.group_id
        mgr = self.metadata_manager
        async with self._lock(gid):
            if mgr.get_group(gid) is not group or not group.is_empty():
                return Errors.NONE
            self._cancel_timer(gid)
            classic = ClassicGroup(gid, self.group_config, self.clock_ms())
            classic.offsets = group.offsets
            classic.pending_offset_commits = group.pending_offset_commits
            mgr.groups[gid] = classic
            err = await mgr.write_records(gid, group.tombstones())
            if err != Errors.NONE:
                if mgr.get_group(gid) is classic and classic.is_empty():
                    mgr.groups[gid] = group
                return err
            log.info("Empty consumer group %s became a classic group", gid)
            return Errors.NONE

    # ------------------------------------------------------------------------ JoinGroup/SyncGroup

    async def join_group(
        self,
        group_id: str,
        *,
        member_id: str,
        group_instance_id: str | None,
        require_known_member_id: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> JoinResult:
        err = self.check_group(group_id)
        if err != Errors.NONE:
            return JoinResult(err, member_id)
        current = self.metadata_manager.get_group(group_id)
        if isinstance(current, ConsumerGroup) and member_id == "" and current.is_empty():
            err = await self._replace_empty_consumer_group(current)
            if err != Errors.NONE:
                return JoinResult(err, member_id)
        g = self._classic(group_id, create=member_id == "")
        if g is None:
            return JoinResult(Errors.UNKNOWN_MEMBER_ID, member_id)
        if isinstance(g, Errors):
            return JoinResult(g, member_id)
        fut: asyncio.Future[JoinResult | SyncResult] = asyncio.get_running_loop().create_future()
        before = membership(g)
        fx = g.join(
            fut,
            member_id=member_id,
            group_instance_id=group_instance_id,
            require_known_member_id=require_known_member_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            now_ms=self.clock_ms(),
        )
        self._apply(g, fx, before)
        result = await fut
        assert isinstance(result, JoinResult)
        return result

    async def sync_group(
        self,
        group_id: str,
        *,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        err = self.check_group(group_id)
        if err != Errors.NONE:
            return SyncResult(err)
        g = self._classic(group_id, create=False)
        if g is None:
            return SyncResult(Errors.UNKNOWN_MEMBER_ID)
        if isinstance(g, Errors):
            return SyncResult(g)
        fut: asyncio.Future[JoinResult | SyncResult] = asyncio.get_running_loop().create_future()
        fx = g.sync(
            fut,
            member_id=member_id,
            generation_id=generation_id,
            group_instance_id=group_instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=assignments,
            now_ms=self.clock_ms(),
        )
        self._apply(g, fx)
        result = await fut
        assert isinstance(result, SyncResult)
        return result

    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> Errors:
        err = self.check_group(group_id)
        if err != Errors.NONE:
            return err
        g = self._classic(group_id, create=False)
        if g is None:
            return Errors.UNKNOWN_MEMBER_ID
        if isinstance(g, Errors):
            return g
        err = g.heartbeat(
            member_id=member_id,
            group_instance_id=group_instance_id,
            generation_id=generation_id,
            now_ms=self.clock_ms(),
        )
        self._schedule(g)
        return err

    def leave_group(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[Errors, list[Errors]]:
        err = self.check_group(group_id)
        if err != Errors.NONE:
            return err, []
        g = self._classic(group_id, create=False)
        if g is None:
            return Errors.NONE, [Errors.UNKNOWN_MEMBER_ID] * len(members)
        if isinstance(g, Errors):
            return g, []
        before = membership(g)
        top, errors, fx = g.leave(members, self.clock_ms())
        self._apply(g, fx, before, leaving=True)
        return top, errors

    # ------------------------------------------------------------------------ offsets

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, CommitRequest],
        api_version: int = 8,
    ) -> dict[TopicPartition, Errors]:
        err = self.check_group(group_id)
        if err != Errors.NONE:
            return {tp: err for tp in offsets}
        return await self.offset_manager.commit_offsets(
            group_id, member_id, generation_id, group_instance_id, offsets, api_version
        )

    async def commit_txn_offsets(
        self,
        group_id: str,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, CommitRequest],
    ) -> dict[TopicPartition, Errors]:
        err = self.check_group(group_id)
        if err != Errors.NONE:
            return {tp: err for tp in offsets}
        return await self.offset_manager.commit_txn_offsets(
            group_id, transactional_id, producer_id, producer_epoch, member_id, generation_id,
            group_instance_id, offsets,
        )

    def fetch_offsets(
        self,
        group_id: str,
        tps: list[TopicPartition] | None,
        require_stable: bool,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[Errors, list[tuple[TopicPartition, OffsetAndMetadata | None, Errors]]]:
        err = self.check_group(group_id)
        if err != Errors.NONE:
            return err, []
        return self.offset_manager.fetch_offsets(group_id, tps, require_stable, member_id, member_epoch)

    async def delete_offsets(
        self, group_id: str, tps: list[TopicPartition]
    ) -> tuple[Errors, dict[TopicPartition, Errors]]:
        err = self.check_group(group_id)
        if err != Errors.NONE:
            return err, {}
        return await self.offset_manager.delete_offsets(group_id, tps)

    # ------------------------------------------------------------------------ admin

    def describe_group(self, group_id: str) -> tuple[Errors, Any | None]:
        err = self.check_group(group_id)
        if err != Errors.NONE:
            return err, None
        return Errors.NONE, self.metadata_manager.get_group(group_id)

    def list_groups(
        self, states: list[str] | None = None, types: list[str] | None = None
    ) -> tuple[Errors, list[Any]]:
        err = Errors.COORDINATOR_LOAD_IN_PROGRESS if self.metadata_manager.is_loading() else Errors.NONE
        wanted_states = {s.lower() for s in states} if states else None
        wanted_types = {t.lower() for t in types} if types else None
        out = []
        for g in self.metadata_manager.owned_groups():
            if g.state_name == ClassicGroupState.DEAD.value:
                continue
            if wanted_states is not None and g.state_name.lower() not in wanted_states:
                continue
            if wanted_types is not None and g.group_type.lower() not in wanted_types:
                continue
            out.append(g)
        return err, out

    async def delete_groups(self, group_ids: list[str]) -> dict[str, Errors]:
        results: dict[str, Errors] = {}
        for gid in group_ids:
            err = self.check_group(gid)
            if err != Errors.NONE:
                results[gid] = err
                continue
            async with self._lock(gid):
                results[gid] = await self._delete_group(gid)
        return results

    async def _delete_group(self, gid: str) -> Errors:
        g = self.metadata_manager.get_group(gid)
        if g is None or g.state_name == ClassicGroupState.DEAD.value:
            return Errors.GROUP_ID_NOT_FOUND
        if not g.is_empty():
            return Errors.NON_EMPTY_GROUP
        tps = list(g.offsets)
        # As Kafka: pending transactional offsets do not keep a group from being deleted;
        # they are dropped, with tombstones for the partitions that had no committed offset.
        tps += sorted(self.metadata_manager.take_pending_txn_partitions(gid) - set(tps))
        self._cancel_timer(gid)
        if isinstance(g, ClassicGroup):
            self._apply(g, g.make_dead(Errors.COORDINATOR_NOT_AVAILABLE, self.clock_ms()))
        self.metadata_manager.remove_group(gid)
        err = await self.metadata_manager.delete_group_records(g, tps)
        log.info("Deleted %s group %s (%d committed offset(s))", g.group_type, gid, len(tps))
        return err
