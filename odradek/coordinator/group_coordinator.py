"""GroupCoordinator: the asyncio shell around the classic group state machine and the offsets.

It owns the groups of the ``__consumer_offsets`` partitions this node leads (through
:class:`GroupMetadataManager`), turns JoinGroup/SyncGroup into futures that the state machine
answers (a join completes when every known member rejoined or the rebalance timeout passed; sync
followers wait for the leader's assignment), keeps one timer per group at the group's next
deadline (heartbeat expiry, join/sync timeouts, the initial rebalance delay), writes group records
when a generation's assignment is set, and creates ``__consumer_offsets`` on the first lookup.

A KIP-848 ``ConsumerGroupHeartbeat`` handler plugs in through :attr:`metadata_manager`:
``coordinator.check_group(group_id)`` for NOT_COORDINATOR/LOAD_IN_PROGRESS,
``metadata_manager.get_group`` / ``add_group`` to look up or register its group object (anything
following :class:`~odradek.coordinator.group_metadata_manager.Group`), and the same OffsetCommit /
OffsetFetch paths, which dispatch validation to the group object.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from odradek.controller.quorum_controller import QuorumController
from odradek.coordinator.group_metadata import (
    Effects,
    GroupConfig,
    GroupMetadata,
    GroupState,
    JoinResult,
    SyncResult,
)
from odradek.coordinator.group_metadata_manager import (
    OFFSETS_TOPIC,
    GroupMetadataManager,
    TopicPartition,
)
from odradek.coordinator.records import OffsetAndMetadata
from odradek.metadata.image import MetadataImage
from odradek.protocol.errors import Errors
from odradek.server.kafka_config import KafkaConfig
from odradek.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class CommitRequest:
    offset: int
    leader_epoch: int
    metadata: str | None


class GroupCoordinator:
    def __init__(
        self,
        *,
        node_id: int,
        config: KafkaConfig,
        replica_manager: ReplicaManager,
        image: MetadataImage,
        controller: QuorumController | None,
        clock_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.replica_manager = replica_manager
        self.image = image
        self.controller = controller
        self.clock_ms = clock_ms
        self.group_config = GroupConfig(
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            max_size=config.group_max_size,
        )
        self.metadata_manager = GroupMetadataManager(
            replica_manager=replica_manager,
            num_partitions=config.offsets_topic_num_partitions,
            group_config=self.group_config,
            offsets_retention_ms=config.offsets_retention_minutes * 60_000,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            clock_ms=clock_ms,
        )
        self.metadata_manager.on_group_loaded = self._schedule
        self.metadata_manager.on_group_unloaded = self._on_unloaded
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._create_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._expiry_task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------------ lifecycle

    def startup(self) -> None:
        """Listen for leadership of ``__consumer_offsets`` partitions (and take up the ones this
        node already leads), and start the offset expiry task."""
        rm = self.replica_manager
        rm.leadership_listeners.append(self.metadata_manager.on_leadership_change)
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
        for h in self._timers.values():
            h.cancel()
        self._timers.clear()
        self.metadata_manager.shutdown()
        for t in list(self._tasks):
            t.cancel()
        try:
            self.replica_manager.leadership_listeners.remove(self.metadata_manager.on_leadership_change)
        except ValueError:
            pass

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------------ topic & lookup

    def partition_for(self, group_id: str) -> int:
        return self.metadata_manager.partition_for(group_id)

    def offsets_topic_exists(self) -> bool:
        return OFFSETS_TOPIC in self.image.topics_by_name

    def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` in the background if it does not exist yet."""
        if self.offsets_topic_exists() or self.controller is None:
            return
        if self._create_task is not None and not self._create_task.done():
            return
        self._create_task = asyncio.get_running_loop().create_task(self._create_offsets_topic())

    async def _create_offsets_topic(self) -> None:
        assert self.controller is not None
        cfg = self.config
        live = len(self.image.live_brokers())
        rf = max(1, min(cfg.offsets_topic_replication_factor, live))
        results = await self.controller.create_topics(
            [
                {
                    "name": OFFSETS_TOPIC,
                    "num_partitions": cfg.offsets_topic_num_partitions,
                    "replication_factor": rf,
                    "configs": [
                        {"name": "cleanup.policy", "value": "compact"},
                        {"name": "segment.bytes", "value": str(cfg.offsets_topic_segment_bytes)},
                        {"name": "compression.type", "value": "producer"},
                    ],
                }
            ],
            validate_only=False,
        )
        for r in results:
            if r.error not in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS):
                log.warning("Creating %s failed: %s %s", OFFSETS_TOPIC, r.error.name, r.message or "")
            elif r.error == Errors.NONE:
                log.info(
                    "Created %s with %d partitions, replication factor %d",
                    OFFSETS_TOPIC, cfg.offsets_topic_num_partitions, rf,
                )

    def coordinator_for(self, group_id: str, listener: str) -> tuple[Errors, int, str, int]:
        """FindCoordinator: (error, node id, host, port)."""
        if not self.offsets_topic_exists():
            self.ensure_offsets_topic()
            return Errors.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        reg = self.image.partition(OFFSETS_TOPIC, self.partition_for(group_id))
        if reg is None or reg.leader < 0:
            return Errors.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        for b in self.image.live_brokers():
            if b.broker_id == reg.leader:
                ep = b.endpoints.get(listener)
                if ep is None:
                    return Errors.COORDINATOR_NOT_AVAILABLE, -1, "", -1
                return Errors.NONE, b.broker_id, ep.host, ep.port
        return Errors.COORDINATOR_NOT_AVAILABLE, -1, "", -1

    def check_group(self, group_id: str | None) -> Errors:
        """INVALID_GROUP_ID / COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR / LOAD_IN_PROGRESS / NONE."""
        if not group_id:
            return Errors.INVALID_GROUP_ID
        if not self.offsets_topic_exists():
            return Errors.COORDINATOR_NOT_AVAILABLE
        return self.metadata_manager.partition_error(group_id)

    def _classic(self, group_id: str, create: bool) -> GroupMetadata | None | Errors:
        g = self.metadata_manager.get_group(group_id)
        if g is None:
            return self.metadata_manager.get_or_create_classic_group(group_id) if create else None
        if not isinstance(g, GroupMetadata):
            return Errors.INCONSISTENT_GROUP_PROTOCOL  # a KIP-848 group of the same id
        return g

    # ------------------------------------------------------------------------ effects & timers

    def _apply(self, group: GroupMetadata, fx: Effects) -> None:
        for waiter, result in fx.responses:
            if isinstance(waiter, asyncio.Future) and not waiter.done():
                waiter.set_result(result)
        if fx.store_generation is not None:
            self._spawn(self._store(group, fx.store_generation))
        self._schedule(group)

    async def _store(self, group: GroupMetadata, generation: int) -> None:
        err = await self.metadata_manager.store_group(group, group.to_record())
        if err != Errors.NONE:
            log.warning("Storing group %s generation %d failed: %s", group.group_id, generation, err.name)
        if self.metadata_manager.get_group(group.group_id) is group:
            self._apply(group, group.on_group_stored(generation, err, self.clock_ms()))

    def _schedule(self, group: Any) -> None:
        if not isinstance(group, GroupMetadata):
            return
        old = self._timers.pop(group.group_id, None)
        if old is not None:
            old.cancel()
        deadline = group.next_deadline()
        if deadline is None or group.state == GroupState.DEAD:
            return
        loop = asyncio.get_running_loop()
        delay = max(0.0, (deadline - self.clock_ms()) / 1000.0)
        self._timers[group.group_id] = loop.call_later(delay, self._fire, group)

    def _fire(self, group: GroupMetadata) -> None:
        self._timers.pop(group.group_id, None)
        if self.metadata_manager.get_group(group.group_id) is not group:
            return
        self._apply(group, group.poll(self.clock_ms()))

    def _on_unloaded(self, group: Any) -> None:
        h = self._timers.pop(group.group_id, None)
        if h is not None:
            h.cancel()
        if isinstance(group, GroupMetadata):
            self._apply(group, group.make_dead(Errors.NOT_COORDINATOR, self.clock_ms()))

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
        g = self._classic(group_id, create=member_id == "")
        if g is None:
            return JoinResult(Errors.UNKNOWN_MEMBER_ID, member_id)
        if isinstance(g, Errors):
            return JoinResult(g, member_id)
        fut: asyncio.Future[JoinResult | SyncResult] = asyncio.get_running_loop().create_future()
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
        self._apply(g, fx)
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
        top, errors, fx = g.leave(members, self.clock_ms())
        self._apply(g, fx)
        return top, errors

    # ------------------------------------------------------------------------ offsets

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, CommitRequest],
    ) -> dict[TopicPartition, Errors]:
        def all_with(e: Errors) -> dict[TopicPartition, Errors]:
            return {tp: e for tp in offsets}

        err = self.check_group(group_id)
        if err != Errors.NONE:
            return all_with(err)
        now = self.clock_ms()
        g = self.metadata_manager.get_group(group_id)
        if g is None:
            if generation_id >= 0:
                # Not a standalone commit, yet the group is unknown: a stale member.
                return all_with(Errors.ILLEGAL_GENERATION)
            g = self.metadata_manager.get_or_create_classic_group(group_id)
        err = g.validate_offset_commit(member_id, generation_id, group_instance_id, now)
        if isinstance(g, GroupMetadata):
            self._schedule(g)
        if err != Errors.NONE:
            return all_with(err)
        results: dict[TopicPartition, Errors] = {}
        to_store: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, c in offsets.items():
            if not self.metadata_manager.validate_offset_metadata(c.metadata):
                results[tp] = Errors.OFFSET_METADATA_TOO_LARGE
            elif self.image.partition(*tp) is None:
                results[tp] = Errors.UNKNOWN_TOPIC_OR_PARTITION
            else:
                to_store[tp] = OffsetAndMetadata(c.offset, c.leader_epoch, c.metadata or "", now)
        if to_store:
            err = await self.metadata_manager.store_offsets(g, to_store)
            for tp in to_store:
                results[tp] = err
        return results

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
        g = self.metadata_manager.get_group(group_id)
        if g is None:
            return Errors.NONE, [(tp, None, Errors.NONE) for tp in tps or []]
        err = g.validate_offset_fetch(member_id, member_epoch)
        if err != Errors.NONE:
            return err, []
        if tps is None:
            tps = sorted(g.offsets)
        out: list[tuple[TopicPartition, OffsetAndMetadata | None, Errors]] = []
        for tp in tps:
            if require_stable and tp in g.pending_offset_commits:
                out.append((tp, None, Errors.UNSTABLE_OFFSET_COMMIT))
            else:
                out.append((tp, g.offsets.get(tp), Errors.NONE))
        return Errors.NONE, out

    async def delete_offsets(
        self, group_id: str, tps: list[TopicPartition]
    ) -> tuple[Errors, dict[TopicPartition, Errors]]:
        err = self.check_group(group_id)
        if err != Errors.NONE:
            return err, {}
        g = self.metadata_manager.get_group(group_id)
        if g is None or g.state_name == GroupState.DEAD.value:
            return Errors.GROUP_ID_NOT_FOUND, {}
        results: dict[TopicPartition, Errors] = {}
        if not g.is_empty():
            subscribed = g.subscribed_topics()
            if subscribed is None:
                return Errors.NON_EMPTY_GROUP, {}
        else:
            subscribed = set()
        deletable: list[TopicPartition] = []
        for tp in tps:
            if tp[0] in subscribed:
                results[tp] = Errors.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                results[tp] = Errors.NONE
                if tp in g.offsets:
                    deletable.append(tp)
        if deletable:
            for tp in deletable:
                g.offsets.pop(tp, None)
            err = await self.metadata_manager.write_tombstones(group_id, deletable)
            if err != Errors.NONE:
                for tp in deletable:
                    results[tp] = err
        return Errors.NONE, results

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
            if g.state_name == GroupState.DEAD.value:
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
            g = self.metadata_manager.get_group(gid)
            if g is None or g.state_name == GroupState.DEAD.value:
                results[gid] = Errors.GROUP_ID_NOT_FOUND
                continue
            if not g.is_empty():
                results[gid] = Errors.NON_EMPTY_GROUP
                continue
            tps = list(g.offsets)
            if isinstance(g, GroupMetadata):
                self._apply(g, g.make_dead(Errors.COORDINATOR_NOT_AVAILABLE, self.clock_ms()))
            self.metadata_manager.remove_group(gid)
            results[gid] = await self.metadata_manager.write_tombstones(gid, tps, group_too=True)
            log.info("Deleted group %s (%d committed offset(s))", gid, len(tps))
        return results
