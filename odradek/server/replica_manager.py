"""ReplicaManager: the partitions this broker hosts, how they change role, and the data path.

Leadership arrives as partition states (:class:`~odradek.cluster.partition.PartitionState`):
:meth:`ReplicaManager.make_leaders` / :meth:`ReplicaManager.make_followers` /
:meth:`ReplicaManager.stop_replicas` are Kafka's ``becomeLeaderOrFollower`` and ``stopReplicas``,
driven today by :meth:`ReplicaManager.apply_delta` (a batch of committed KRaft metadata records)
and later by ZooKeeper mode's LeaderAndIsr / StopReplica requests.

The state change is applied at once; the file work it needs (creating a log, truncating a new
follower's, deleting a stopped replica's) runs off the event loop on a :class:`LogWorker`, one
job at a time in order. Until a partition's log work is done it serves nothing (its log is not
attached), and requests for it wait for that work (:meth:`ReplicaManager.wait_for_log_work`;
produce and fetch here, the others in KafkaApis), as Kafka's wait on a partition's lock while
its leadership changes.

Produce and fetch go through here; requests that must wait (acks=-1 until the HW covers them,
fetch until ``min_bytes`` arrive) wait in the delayed-produce / delayed-fetch purgatories
(:mod:`odradek.server.delayed_produce`, :mod:`odradek.server.delayed_fetch`) and are woken by
appends, HW moves and leadership changes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

from odradek.cluster.partition import LogReadResult, Partition, PartitionState
from odradek.log.append_origin import AppendOrigin
from odradek.log.errors import KafkaStorageError, LogError
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.log.log_manager import LogManager
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import MetadataImage
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.protocol.errors import Errors, KafkaError
from odradek.records.errors import RecordError, RecordValidationError
from odradek.server.alter_partition_manager import AlterPartitionItem
from odradek.server.broker_topic_stats import BrokerTopicStats
from odradek.server.delayed_fetch import (
    DelayedFetch,
    FetchPartitionRequest,
    FetchPartitionResult,
    fetch_can_complete,
)
from odradek.server.delayed_produce import DelayedProduce, ProducePartitionStatus
from odradek.server.purgatory import DelayedOperationPurgatory, Timer
from odradek.server.replica_fetcher_manager import source_broker
from odradek.server.replica_fetcher_thread import PartitionFetchState
from odradek.server.replica_selector import ReplicaSelector, ReplicaView
from odradek.server.replication_quota_manager import (
    ReplicationQuotaManager,
    record_leader_throttled,
    should_leader_throttle,
)
from odradek.server.system_timer import AsyncioTimer, completion_future

if TYPE_CHECKING:
    from odradek.server.alter_partition_manager import AlterPartitionManager
    from odradek.server.replica_fetcher_manager import ReplicaFetcherManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

_BATCH_LENGTH = struct.Struct(">i")


class LogWorker(Protocol):
    """Runs file work off the event loop, one job at a time in submission order, and calls
    ``done(error)`` back on the event loop, in the same order."""

    def submit(self, job: Callable[[], object], done: Callable[[BaseException | None], None]) -> None: ...

    def shutdown(self) -> None: ...


class ExecutorLogWorker:
    """A :class:`LogWorker` on one worker thread of the running event loop."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="odradek-replica-logs")

    def submit(self, job: Callable[[], object], done: Callable[[BaseException | None], None]) -> None:
        fut = asyncio.get_running_loop().run_in_executor(self._executor, job)

        def finished(f: asyncio.Future[object]) -> None:
            done(f.exception() if not f.cancelled() else asyncio.CancelledError())

        fut.add_done_callback(finished)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        log_manager: LogManager,
        metadata_cache: KRaftMetadataCache,
        log_config_for: Callable[[str], LogConfig],
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        *,
        timer: Timer | None = None,
        log_worker: LogWorker | None = None,
    ) -> None:
        self.node_id = node_id
        self.log_manager = log_manager
        self.metadata_cache = metadata_cache
        self.log_config_for = log_config_for
        self.clock_ms = clock_ms
        self.partitions: dict[TopicPartition, Partition] = {}
        # Called as (topic, partition, is_leader, leader_epoch) when this node starts or stops
        # leading a partition: the group coordinator loads and unloads __consumer_offsets
        # partitions through this hook (Kafka's onLeadershipChange).
        self.leadership_listeners: list[Callable[[str, int, bool, int], None]] = []
        # Called as (topic, partition, producer_id, commit) once a transaction marker appended
        # to a partition is acknowledged (the HW past it): the group coordinator completes the
        # transactional offset commits of __consumer_offsets partitions through this hook.
        self.txn_marker_listeners: list[Callable[[str, int, int, bool], None]] = []
        timer = timer if timer is not None else AsyncioTimer()
        self.produce_purgatory = DelayedOperationPurgatory("Produce", timer)
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch", timer)
        self.log_worker: LogWorker = log_worker if log_worker is not None else ExecutorLogWorker()
        self._pending_log_work: dict[TopicPartition, int] = {}  # jobs queued per partition
        self._ready_waiters: dict[TopicPartition, list[asyncio.Future[None]]] = {}
        # The last produce waiting to append to each partition (done once it has appended).
        self._queued_appends: dict[TopicPartition, asyncio.Future[None]] = {}
        self._shut_down = False
        self._announced_leader: dict[TopicPartition, int] = {}  # leader epoch told to listeners
        # Replication (set by the broker server; None: no follower fetching, no ISR changes).
        self.replica_fetcher_manager: ReplicaFetcherManager | None = None
        self.alter_partition_manager: AlterPartitionManager | None = None
        self.inter_broker_listener = "PLAINTEXT"
        self.broker_epoch: Callable[[], int] = lambda: -1
        self.replica_lag_time_max_ms = 30000
        # KIP-392 (replica.selector.class): None keeps every consumer on the leader.
        self.replica_selector: ReplicaSelector | None = None
        # The leader replication throttle (None: followers are never throttled).
        self.leader_quota: ReplicationQuotaManager | None = None
        self._background: set[asyncio.Task[None]] = set()
        # Metrics (read at scrape time): bytes/messages in and out, ISR changes committed.
        self.topic_stats = BrokerTopicStats()
        self.isr_shrinks = 0
        self.isr_expands = 0

    # -- metadata → partition states -------------------------------------------------------------

    def apply_delta(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """One batch of committed KRaft metadata records (Kafka's ReplicaManager.applyDelta):
        deleted topics and partitions moved off this broker stop; the others' states become
        leaders and followers. The only place that reads a metadata delta (the image is read
        elsewhere only to tell an unknown partition from one this broker does not host)."""
        for name, deleted in delta.deleted_topics.items():
            self.stop_replicas([(name, p) for p in deleted.partitions], delete=True)
        leaders: list[PartitionState] = []
        followers: list[PartitionState] = []
        removed: list[TopicPartition] = []
        for tp in sorted(delta.changed_partitions):
            reg = image.partition(*tp)
            if reg is None:
                continue
            state = PartitionState(
                topic=tp[0],
                partition=tp[1],
                topic_id=image.topics_by_name[tp[0]].topic_id,
                leader=reg.leader,
                leader_epoch=reg.leader_epoch,
                isr=tuple(reg.isr),
                replicas=tuple(reg.replicas),
                partition_epoch=reg.partition_epoch,
                adding_replicas=tuple(reg.adding_replicas),
                removing_replicas=tuple(reg.removing_replicas),
            )
            if reg.leader == self.node_id:
                leaders.append(state)
            elif self.node_id in reg.replicas:
                followers.append(state)
            elif tp in self.partitions:
                removed.append(tp)
        if removed:
            self.stop_replicas(removed, delete=True)
        if leaders:
            self.make_leaders(leaders)
        if followers:
            self.make_followers(followers)
        if leaders or followers or removed or delta.deleted_topics:
            self._shutdown_idle_fetchers()
        for topic in delta.changed_topic_configs:
            if topic in image.topics.by_name:
                cfg = self.log_config_for(topic)
                for (t, _p), part in self.partitions.items():
                    if t == topic and part.log is not None:
                        part.log.update_config(cfg)

    # -- leadership changes (Kafka's becomeLeaderOrFollower / stopReplicas) ----------------------

    def make_leaders(self, states: list[PartitionState]) -> dict[TopicPartition, Errors]:
        """Lead these partitions. Per partition: NONE, or STALE_CONTROLLER_EPOCH for a state
        older than the one applied (refused, as Kafka answers a stale LeaderAndIsr)."""
        out: dict[TopicPartition, Errors] = {}
        for st in states:
            tp = (st.topic, st.partition)
            p = self._get_or_create_partition(st)
            if p.is_stale(st):
                p.make_leader(st, None)  # logs the refusal
                out[tp] = Errors.STALE_CONTROLLER_EPOCH
                continue
            if self.replica_fetcher_manager is not None:
                self.replica_fetcher_manager.remove_fetcher_for_partitions([tp])
            lg = self._ready_log(st)
            p.make_leader(st, lg, self.clock_ms())
            if lg is None:
                self._submit_log_work(tp, self._create_log_job(st))
            self._after_change(tp, p)
            out[tp] = Errors.NONE
        return out

    def make_followers(self, states: list[PartitionState]) -> dict[TopicPartition, Errors]:
        """Follow ``state.leader`` for these partitions: produce and fetch answer
        NOT_LEADER_OR_FOLLOWER, the log is kept (created if missing) and a replica fetcher
        fetches from the leader. The log is not truncated here (not to the HW either): the
        fetcher's last fetched epoch tells the leader where the logs agree, and the diverging
        epoch it answers says where to truncate (KIP-320), as Kafka's fetch-based truncation.
        Per partition: NONE or STALE_CONTROLLER_EPOCH (refused)."""
        out: dict[TopicPartition, Errors] = {}
        for st in states:
            tp = (st.topic, st.partition)
            p = self._get_or_create_partition(st)
            if p.is_stale(st):
                p.make_follower(st, None)  # logs the refusal
                out[tp] = Errors.STALE_CONTROLLER_EPOCH
                continue
            lg = self._ready_log(st)
            # A follower serves nothing, so its log stays attached while the worker works on
            # it; a later leadership waits for that work (_ready_log).
            if p.make_follower(st, lg) and self.replica_fetcher_manager is not None:
                # Another leader or leader epoch: the fetcher starts again (in _after_change).
                self.replica_fetcher_manager.remove_fetcher_for_partitions([tp])
            if lg is None:
                self._submit_log_work(tp, self._create_log_job(st))
            self._after_change(tp, p)
            out[tp] = Errors.NONE
        return out

    def shutdown_idle_fetchers(self) -> None:
        """Stop the fetchers left without partitions (after ZooKeeper mode's LeaderAndIsr / StopReplica)."""
        self._shutdown_idle_fetchers()

    def retry_fetchers(self) -> None:
        """Start the fetchers of followers whose leader had no known endpoint when they became
        followers (ZooKeeper mode: after an UpdateMetadata brings it)."""
        for tp, p in list(self.partitions.items()):
            if p.log is not None and 0 <= p.leader_id != self.node_id:
                self._maybe_add_fetcher(tp, p)

    def _shutdown_idle_fetchers(self) -> None:
        """Stop the fetchers left without partitions (Kafka's shutdownIdleFetcherThreads)."""
        fm = self.replica_fetcher_manager
        if fm is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no event loop (a unit test driving the replica manager by hand)
        task = loop.create_task(fm.shutdown_idle_fetchers())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _maybe_add_fetcher(self, tp: TopicPartition, p: Partition) -> None:
        """A follower with its log ready fetches from its leader (from its log end offset and
        latest epoch), unless a fetcher already does at this leader epoch."""
        fm = self.replica_fetcher_manager
        if fm is None or p.log is None or p.leader_id < 0 or p.leader_id == self.node_id:
            return
        if tp in self._pending_log_work:
            return
        current = fm.fetch_state(tp)
        if current is not None and current.current_leader_epoch == p.leader_epoch:
            return
        source = source_broker(self.metadata_cache.image, p.leader_id, self.inter_broker_listener)
        if source is None:
            log.warning("%s: leader %d has no registered endpoint yet; not fetching", p, p.leader_id)
            return
        lg = p.log
        state = PartitionFetchState(p.topic_id, lg.log_end_offset, p.leader_epoch, lg.latest_epoch)
        fm.add_fetcher_for_partitions({tp: (source, state)})

    def stop_replicas(self, tps: list[TopicPartition], delete: bool) -> None:
        """Stop hosting these replicas (Kafka's StopReplica); with ``delete`` their logs go."""
        for tp in tps:
            p = self.partitions.pop(tp, None)
            if p is not None:
                p.stop()
            if self.replica_fetcher_manager is not None:
                self.replica_fetcher_manager.remove_fetcher_for_partitions([tp])
            self._after_change(tp, p)
            if delete and (tp in self._pending_log_work or self.log_manager.get_log(*tp) is not None):
                self._submit_log_work(tp, functools.partial(self.log_manager.delete_log, tp[0], tp[1]))
        if delete:
            hosted = {t for t, _ in self.partitions}
            for topic in {t for t, _ in tps} - hosted:
                self.topic_stats.remove_topic(topic)

    def _get_or_create_partition(self, st: PartitionState) -> Partition:
        tp = (st.topic, st.partition)
        p = self.partitions.get(tp)
        if p is not None and p.topic_id != st.topic_id:  # a topic of the same name, recreated
            p.stop()
            self._after_change(tp, None)
            p = None
        if p is None:
            p = Partition(st.topic, st.partition, st.topic_id, self.node_id)
            self.partitions[tp] = p
        return p

    def _ready_log(self, st: PartitionState) -> Log | None:
        """The partition's log when it needs no file work first (exists, topic id recorded,
        nothing queued for it)."""
        tp = (st.topic, st.partition)
        if tp in self._pending_log_work:
            return None
        lg = self.log_manager.get_log(*tp)
        if lg is None or lg.topic_id != st.topic_id.bytes:
            return None
        return lg

    def _create_log_job(self, st: PartitionState) -> Callable[[], Log]:
        config = self.log_config_for(st.topic)  # read on the event loop, used by the worker
        lm = self.log_manager
        topic_id = st.topic_id.bytes

        def job() -> Log:
            old = lm.get_log(st.topic, st.partition)
            if old is not None and old.topic_id is not None and old.topic_id != topic_id:
                # A topic of the same name deleted and recreated while this broker was away:
                # the log on disk is the old topic's (Kafka's stray log), not this one's.
                log.info("Deleting the log of %s-%d: it belongs to an earlier topic of that name",
                         st.topic, st.partition)
                lm.delete_log(st.topic, st.partition)
            return lm.get_or_create_log(st.topic, st.partition, config, topic_id)

        return job

    def _submit_log_work(self, tp: TopicPartition, job: Callable[[], object]) -> None:
        if self._shut_down:  # the broker is stopping: its logs are closed, not changed
            log.info("Log work for %s-%d not started: shutting down", tp[0], tp[1])
            return
        self._pending_log_work[tp] = self._pending_log_work.get(tp, 0) + 1

        def done(error: BaseException | None) -> None:
            if error is not None:
                log.error("Log work for %s-%d failed: %s", tp[0], tp[1], error, exc_info=error)
            left = self._pending_log_work[tp] - 1
            if left:
                self._pending_log_work[tp] = left
            else:
                del self._pending_log_work[tp]
                self._on_log_ready(tp)

        self.log_worker.submit(job, done)

    def _on_log_ready(self, tp: TopicPartition) -> None:
        p = self.partitions.get(tp)
        lg = self.log_manager.get_log(*tp)
        if p is not None and p.log is None and lg is not None:
            lg.update_config(self.log_config_for(tp[0]))
            p.attach_log(lg, self.clock_ms())
        self._after_change(tp, p)
        for fut in self._ready_waiters.pop(tp, []):
            if not fut.done():
                fut.set_result(None)

    def is_loading(self, tp: TopicPartition) -> bool:
        """Is file work (log creation, truncation, deletion) queued for ``tp``?"""
        return tp in self._pending_log_work

    async def wait_for_log_work(self, tps: list[TopicPartition]) -> None:
        """Until no file work is queued for any of ``tps`` (or the replica manager shut down)."""
        if self._shut_down:
            return
        loop = asyncio.get_running_loop()
        futs: list[asyncio.Future[None]] = []
        for tp in tps:
            if tp in self._pending_log_work:
                fut: asyncio.Future[None] = loop.create_future()
                self._ready_waiters.setdefault(tp, []).append(fut)
                futs.append(fut)
        if futs:
            await asyncio.gather(*futs)

    def _after_change(self, tp: TopicPartition, p: Partition | None) -> None:
        """Tell the leadership listeners what changed, and retry what waits on ``tp``."""
        announced = self._announced_leader.get(tp)
        if p is not None and p.log is not None and 0 <= p.leader_id != self.node_id:
            self._maybe_add_fetcher(tp, p)
        elif p is not None and p.leader_id < 0 and self.replica_fetcher_manager is not None:
            self.replica_fetcher_manager.remove_fetcher_for_partitions([tp])  # no leader to follow
        if p is not None and p.is_leader:  # leads, with its log ready
            if announced != p.leader_epoch:
                self._announced_leader[tp] = p.leader_epoch
                self._notify_leadership(tp, True, p.leader_epoch)
        elif announced is not None and (p is None or p.leader_id != self.node_id):
            del self._announced_leader[tp]
            self._notify_leadership(tp, False, p.leader_epoch if p is not None else announced)
        self._complete_delayed(tp)

    def _notify_leadership(self, tp: TopicPartition, is_leader: bool, epoch: int) -> None:
        for listener in self.leadership_listeners:
            try:
                listener(tp[0], tp[1], is_leader, epoch)
            except Exception:
                log.exception("Leadership listener failed for %s-%d", *tp)

    def _complete_delayed(self, tp: TopicPartition) -> None:
        self.produce_purgatory.check_and_complete(tp)
        self.fetch_purgatory.check_and_complete(tp)

    def _unknown_or_not_leader(self, tp: TopicPartition) -> Errors:
        """The error for a partition this broker does not host."""
        if not self.metadata_cache.contains_partition(*tp):
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        return Errors.NOT_LEADER_OR_FOLLOWER

    # -- produce --------------------------------------------------------------------------------

    def append_records(
        self,
        timeout_ms: int,
        required_acks: int,
        entries: dict[TopicPartition, bytearray | None],
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> dict[TopicPartition, ProducePartitionStatus] | Awaitable[dict[TopicPartition, ProducePartitionStatus]]:
        """Append to the leaders. Returns the statuses, or an awaitable of them when the answer
        must wait: for log work on a partition (see the module doc), for fsync
        (``flush.messages`` reached) and/or for the HW (acks=-1)."""
        if any(tp in self._pending_log_work or tp in self._queued_appends for tp in entries):
            return self._queue_append(timeout_ms, required_acks, entries, origin)
        return self._append_to_leaders(timeout_ms, required_acks, entries, origin)

    def _append_to_leaders(
        self,
        timeout_ms: int,
        required_acks: int,
        entries: dict[TopicPartition, bytearray | None],
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> dict[TopicPartition, ProducePartitionStatus] | Awaitable[dict[TopicPartition, ProducePartitionStatus]]:
        now = self.clock_ms()
        to_flush: list[Log] = []
        statuses: dict[TopicPartition, ProducePartitionStatus] = {}
        for tp, buf in entries.items():
            st = ProducePartitionStatus()
            statuses[tp] = st
            p = self.partitions.get(tp)
            if p is None:
                st.error = self._unknown_or_not_leader(tp)
                continue
            if buf is None or len(buf) == 0:
                st.error, st.message = Errors.INVALID_RECORD, "Produce requests must have at least one record batch per partition"
                continue
            if len(buf) >= 12:
                (batch_length,) = _BATCH_LENGTH.unpack_from(buf, 8)
                if 0 <= batch_length and 12 + batch_length < len(buf):
                    st.error = Errors.INVALID_RECORD
                    st.message = "Produce requests are only allowed to contain exactly one record batch per partition"
                    log.warning("Rejected produce to %s: %s", p, st.message)
                    continue
            try:
                info = p.append_records_to_leader(buf, required_acks, now, origin)
            except KafkaError as e:
                st.error, st.message = e.code, e.message
                continue
            except KafkaStorageError as e:  # logged once per episode by the log layer
                st.error, st.message = Errors.KAFKA_STORAGE_ERROR, str(e)
                continue
            except (RecordError, LogError) as e:
                st.error, st.message = Errors(e.error_code), str(e)
                if isinstance(e, RecordValidationError):
                    st.record_errors = e.record_errors
                log.warning("Rejected produce to %s: %s", p, e)
                continue
            self.topic_stats.record_append(tp[0], len(buf), info.num_records)
            st.base_offset = info.first_offset
            st.log_append_time = info.log_append_time_ms
            assert p.log is not None
            st.log_start_offset = p.log.log_start_offset
            st.required_offset = info.last_offset + 1
            if p.log.needs_flush:
                to_flush.append(p.log)
            self._complete_delayed(tp)
        if not to_flush and required_acks != -1:
            return statuses
        return self._complete_produce(timeout_ms, required_acks, statuses, to_flush)

    def _queue_append(
        self,
        timeout_ms: int,
        required_acks: int,
        entries: dict[TopicPartition, bytearray | None],
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> Awaitable[dict[TopicPartition, ProducePartitionStatus]]:
        """Append once the partitions' log work is done, after the appends queued before on
        them: records reach a partition in the order their requests arrived."""
        before = {id(f): f for tp in entries if (f := self._queued_appends.get(tp)) is not None}
        loop = asyncio.get_running_loop()
        mine: asyncio.Future[None] = loop.create_future()
        for tp in entries:
            self._queued_appends[tp] = mine

        async def append_in_turn() -> dict[TopicPartition, ProducePartitionStatus]:
            try:
                for f in before.values():
                    await f
                tps = list(entries)
                while not self._shut_down and any(tp in self._pending_log_work for tp in tps):
                    await self.wait_for_log_work(tps)
                result = self._append_to_leaders(timeout_ms, required_acks, entries, origin)
            finally:
                mine.set_result(None)
                for tp in entries:
                    if self._queued_appends.get(tp) is mine:
                        del self._queued_appends[tp]
            return result if isinstance(result, dict) else await result

        # A task, so the queue moves on even if nobody awaits this produce's answer.
        return loop.create_task(append_in_turn())

    async def _complete_produce(
        self,
        timeout_ms: int,
        required_acks: int,
        statuses: dict[TopicPartition, ProducePartitionStatus],
        to_flush: list[Log],
    ) -> dict[TopicPartition, ProducePartitionStatus]:
        if to_flush:
            loop = asyncio.get_running_loop()
            results = await asyncio.gather(
                *(loop.run_in_executor(None, lg.flush) for lg in to_flush), return_exceptions=True
            )
            for lg, res in zip(to_flush, results, strict=True):
                st = statuses.get((lg.topic, lg.partition))
                if isinstance(res, KafkaStorageError) and st is not None:
                    # The records are written but could not be made durable (flush.messages):
                    # not acknowledged, as Kafka does when the fsync fails.
                    st.error, st.message = Errors.KAFKA_STORAGE_ERROR, str(res)
                elif isinstance(res, BaseException):
                    raise res
        if required_acks != -1:
            return statuses
        op = DelayedProduce(timeout_ms, statuses, self.partitions.get)
        self.produce_purgatory.try_complete_else_watch(op, list(statuses))
        result: dict[TopicPartition, ProducePartitionStatus] = await completion_future(op)
        return result

    # -- fetch ----------------------------------------------------------------------------------

    def read_from_local_log(
        self,
        requests: list[FetchPartitionRequest],
        max_bytes: int,
        isolation_level: int,
        hard_max_bytes_limit: bool = False,
        for_follower: bool = False,
        client_rack: str | None = None,
        replica_id: int = -1,
    ) -> tuple[int, list[FetchPartitionResult]]:
        """``client_rack``: None for a fetch only a leader may serve (a follower's, or a
        consumer's before Fetch v11); a string (maybe empty) for a consumer's Fetch v11+, which
        a follower may serve and which the leader may send to another replica (KIP-392)."""
        remaining = max_bytes
        now = self.clock_ms()
        total = 0
        out: list[FetchPartitionResult] = []
        min_one = not hard_max_bytes_limit
        for req in requests:
            tp = (req.topic, req.partition)
            p = self.partitions.get(tp)
            if p is None:
                err = self._unknown_or_not_leader(tp)
                out.append(FetchPartitionResult(req, LogReadResult(err, None, -1, -1, -1, -1)))
                continue
            try:
                preferred = -1
                if client_rack is not None and p.is_leader:
                    preferred = self._preferred_read_replica(p, req.fetch_offset, client_rack, now)
                if preferred >= 0:
                    # Sent to another replica: no read here (Kafka's LogReadResult without data).
                    lg = p._leader_log(req.current_leader_epoch)
                    hw = lg.high_watermark
                    res = LogReadResult(Errors.NONE, b"", hw, lg.last_stable_offset, lg.log_start_offset,
                                        lg.log_end_offset,
                                        preferred_read_replica=preferred)
                else:
                    res = p.read_records(
                        req.fetch_offset,
                        min(req.partition_max_bytes, remaining) if remaining > 0 else 0,
                        isolation_level,
                        min_one,
                        req.current_leader_epoch,
                        req.last_fetched_epoch,
                        for_follower,
                        fetch_only_from_leader=client_rack is None,
                    )
                    if for_follower and res.records and should_leader_throttle(
                        self.leader_quota, tp, replica_id in p.isr, now
                    ):
                        # Over the leader quota: this follower gets no records of tp this time.
                        assert self.leader_quota is not None
                        self.leader_quota.note_throttled(tp, now)
                        res.records = b""
            except KafkaError as e:
                out.append(FetchPartitionResult(req, LogReadResult(e.code, None, -1, -1, -1, -1)))
                continue
            n = len(res.records) if res.records is not None else 0
            if n:
                min_one = False  # only the first partition with data may exceed the limits
            total += n
            remaining -= n
            out.append(FetchPartitionResult(req, res))
        return total, out

    def fetch_messages(
        self,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation_level: int,
        requests: list[FetchPartitionRequest],
        replica_id: int = -1,
        replica_epoch: int = -1,
        client_rack: str | None = None,
    ) -> list[FetchPartitionResult] | Awaitable[list[FetchPartitionResult]]:
        """The results, or an awaitable of them when the fetch waits in the purgatory.
        ``replica_id`` >= 0: a follower's fetch, read up to the log end offset (not the HW, no
        isolation level), which tells the leader the follower's log end offset.
        ``client_rack``: see :meth:`read_from_local_log` (ignored for a follower's fetch)."""

        loading = [(r.topic, r.partition) for r in requests if (r.topic, r.partition) in self._pending_log_work]
        if loading:
            return self._fetch_when_ready(
                loading, max_wait_ms, min_bytes, max_bytes, isolation_level, requests, replica_id, replica_epoch,
                client_rack,
            )
        follower = replica_id >= 0
        rack = None if follower else client_rack

        def read() -> tuple[int, list[FetchPartitionResult]]:
            return self.read_from_local_log(
                requests, max_bytes, 0 if follower else isolation_level, for_follower=follower, client_rack=rack,
                replica_id=replica_id,
            )

        total, results = read()
        if follower:
            self._update_follower_fetch_state(replica_id, replica_epoch, results)
        if max_wait_ms <= 0 or not requests or fetch_can_complete(total, min_bytes, results):
            return self._record_throttled(results) if follower else results
        op = DelayedFetch(max_wait_ms, min_bytes, read, results)
        if self.fetch_purgatory.try_complete_else_watch(op, [(r.topic, r.partition) for r in requests]):
            done: list[FetchPartitionResult] = op.result
            return self._record_throttled(done) if follower else done
        fut = completion_future(op)
        if follower and self.leader_quota is not None:
            fut.add_done_callback(lambda f: None if f.cancelled() or f.exception() else self._record_throttled(f.result()))
        return fut

    def _record_throttled(self, results: list[FetchPartitionResult]) -> list[FetchPartitionResult]:
        if self.leader_quota is not None:
            record_leader_throttled(self.leader_quota, results, self.clock_ms())
        return results

    def _update_follower_fetch_state(
        self, replica_id: int, replica_epoch: int, results: list[FetchPartitionResult]
    ) -> None:
        """The leader's view of a follower after its fetch (Kafka's updateFollowerFetchState):
        its LEO (the fetch offset, unless its log diverges), maybe a higher HW (what waits on it
        completes), maybe a proposal to add it to the ISR."""
        now = self.clock_ms()
        for r in results:
            res = r.result
            if res.error != Errors.NONE or res.diverging_epoch is not None:
                continue
            tp = (r.request.topic, r.request.partition)
            p = self.partitions.get(tp)
            if p is None or not p.is_leader:
                continue
            try:
                moved = p.update_follower_fetch_state(
                    replica_id, r.request.fetch_offset, r.request.log_start_offset, now, replica_epoch
                )
            except KafkaError as e:
                res.error = e.code
                res.records = None
                log.info("%s: %s", p, e.message)
                continue
            if moved:
                self._complete_delayed(tp)
                # The follower learns the HW its own fetch moved now, not a fetch later.
                assert p.log is not None
                res.high_watermark = p.log.high_watermark
                res.last_stable_offset = p.log.last_stable_offset
            if replica_id not in p.isr and self._is_eligible(replica_id, replica_epoch):
                proposed = p.maybe_expand_isr(replica_id)
                if proposed is not None:
                    self._propose_isr(p, proposed)

    def _is_eligible(self, broker_id: int, broker_epoch: int) -> bool:
        """May ``broker_id`` join an ISR: registered, unfenced, not shutting down, and (when the
        follower says) at its registered broker epoch (KIP-903)."""
        reg = self.metadata_cache.image.brokers.get(broker_id)
        if reg is None or reg.fenced or reg.in_controlled_shutdown:
            return False
        # A registration without an epoch (ZooKeeper mode's UpdateMetadata carries none): alive
        # is enough, as Kafka checks in ZooKeeper mode.
        return broker_epoch < 0 or reg.epoch < 0 or reg.epoch == broker_epoch

    def _propose_isr(self, p: Partition, proposed: tuple[int, ...]) -> None:
        """Send the ISR ``proposed`` (marked pending on ``p``) to the controller."""
        apm = self.alter_partition_manager
        if apm is None:
            p.alter_isr_done(proposed, Errors.OPERATION_NOT_ATTEMPTED)
            return
        tp = (p.topic, p.partition)
        leader_epoch = p.leader_epoch
        brokers = self.metadata_cache.image.brokers

        def done(error: Errors, l_epoch: int, p_epoch: int, isr: tuple[int, ...]) -> None:
            if self.partitions.get(tp) is not p or p.leader_epoch != leader_epoch:
                return
            before = len(p.isr)
            moved = p.alter_isr_done(proposed, error, l_epoch, p_epoch, isr)
            if len(p.isr) < before:
                self.isr_shrinks += 1
            elif len(p.isr) > before:
                self.isr_expands += 1
            if moved:
                self._complete_delayed(tp)

        epochs = tuple(
            self.broker_epoch() if b == self.node_id else (brokers[b].epoch if b in brokers else -1)
            for b in proposed
        )
        item = AlterPartitionItem(tp, p.topic_id, leader_epoch, p.partition_epoch, proposed, epochs, done)
        if not apm.submit(item):
            p.alter_isr_done(proposed, Errors.OPERATION_NOT_ATTEMPTED)

    def maybe_shrink_isrs(self) -> int:
        """Propose an ISR without the followers that fell behind for more than
        ``replica.lag.time.max.ms``, for every partition led here (Kafka's isr-expiration task).
        Returns the number of proposals."""
        now = self.clock_ms()
        n = 0
        for p in list(self.partitions.values()):
            if not p.is_leader or len(p.isr) <= 1:
                continue
            proposed = p.maybe_shrink_isr(now, self.replica_lag_time_max_ms)
            if proposed is not None:
                self._propose_isr(p, proposed)
                n += 1
        return n

    def _preferred_read_replica(self, p: Partition, fetch_offset: int, client_rack: str, now_ms: int) -> int:
        """KIP-392 (Kafka's findPreferredReadReplica): the replica ``replica.selector.class``
        picks for a consumer in ``client_rack`` among the leader and the in-sync followers that
        hold ``fetch_offset``; -1 for the leader itself or no selector."""
        selector = self.replica_selector
        if selector is None or p.log is None:
            return -1
        brokers = self.metadata_cache.image.brokers

        def rack(b: int) -> str | None:
            reg = brokers.get(b)
            return reg.rack if reg is not None else None

        leader = ReplicaView(self.node_id, rack(self.node_id), p.log.log_end_offset, 0)
        candidates = [
            ReplicaView(r, rack(r), rep.log_end_offset, now_ms - rep.last_caught_up_time_ms)
            for r, rep in p.remote_replicas.items()
            if r in p.isr and rep.log_start_offset <= fetch_offset <= rep.log_end_offset
            and (reg := brokers.get(r)) is not None and not reg.fenced
        ]
        chosen = selector.select(client_rack, leader, candidates)
        if chosen is None or chosen.broker_id == self.node_id:
            return -1
        log.debug("%s: replica %d preferred for a consumer in rack %s at offset %d", p, chosen.broker_id,
                  client_rack, fetch_offset)
        return chosen.broker_id

    # -- the follower side (for the replica fetchers) -------------------------------------------

    def follower_appended(self, tp: TopicPartition) -> None:
        """A follower appended or took a new HW: consumer fetches waiting on it may complete."""
        self.fetch_purgatory.check_and_complete(tp)

    def follower_partition(self, tp: TopicPartition) -> Partition | None:
        p = self.partitions.get(tp)
        if p is None or p.log is None or p.leader_id < 0 or p.leader_id == self.node_id:
            return None
        if tp in self._pending_log_work:
            return None
        return p

    async def _fetch_when_ready(
        self,
        loading: list[TopicPartition],
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation_level: int,
        requests: list[FetchPartitionRequest],
        replica_id: int = -1,
        replica_epoch: int = -1,
        client_rack: str | None = None,
    ) -> list[FetchPartitionResult]:
        await self.wait_for_log_work(loading)
        result = self.fetch_messages(
            max_wait_ms, min_bytes, max_bytes, isolation_level, requests, replica_id, replica_epoch, client_rack
        )
        return result if isinstance(result, list) else await result

    # -- misc -----------------------------------------------------------------------------------

    def get_partition_or_error(self, tp: TopicPartition) -> Partition:
        p = self.partitions.get(tp)
        if p is None:
            raise KafkaError(self._unknown_or_not_leader(tp))
        return p

    def shutdown(self) -> None:
        """Answer what waits, and finish the queued log work (its callbacks no longer run)."""
        self._shut_down = True
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
        self.log_worker.shutdown()
        for waiters in self._ready_waiters.values():
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        self._ready_waiters.clear()
