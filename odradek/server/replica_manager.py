"""ReplicaManager: the partitions this broker hosts, how they change role, and the data path.

Leadership arrives only as metadata: :meth:`apply_delta` is called with what a batch of committed
metadata records changed, and runs Kafka's ``becomeLeaderOrFollower`` (``make_leaders`` /
``make_followers``) and ``stopReplicas`` for deleted topics. Produce and fetch go through here;
requests that must wait (acks=-1 until the HW covers them, fetch until ``min_bytes`` arrive) wait
in the delayed-produce / delayed-fetch purgatories and are woken by appends and HW moves.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.log.errors import KafkaStorageError, LogError
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.log.log_manager import LogManager
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import MetadataImage
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.protocol.errors import Errors, KafkaError
from odradek.records.errors import RecordError, RecordValidationError
from odradek.server.partition import LogReadResult, Partition
from odradek.server.purgatory import DelayedOperation, DelayedOperationPurgatory

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

_BATCH_LENGTH = struct.Struct(">i")


@dataclass
class ProducePartitionStatus:
    error: Errors = Errors.NONE
    message: str | None = None
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    required_offset: int = -1  # acks=-1 waits until the HW reaches this
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)


@dataclass
class FetchPartitionRequest:
    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1


@dataclass
class FetchPartitionResult:
    request: FetchPartitionRequest
    result: LogReadResult


class DelayedProduce(DelayedOperation):
    def __init__(
        self,
        delay_ms: int,
        statuses: dict[TopicPartition, ProducePartitionStatus],
        replica_manager: ReplicaManager,
    ) -> None:
        super().__init__(delay_ms)
        self.statuses = statuses
        self.rm = replica_manager
        self.pending = {tp for tp, s in statuses.items() if s.error == Errors.NONE}

    def try_complete(self) -> bool:
        for tp in list(self.pending):
            p = self.rm.partitions.get(tp)
            if p is None:
                done, err = True, Errors.NOT_LEADER_OR_FOLLOWER
            else:
                done, err = p.check_enough_replicas_reach_offset(self.statuses[tp].required_offset)
            if done:
                self.pending.discard(tp)
                if err != Errors.NONE:
                    self.statuses[tp].error = err
        if not self.pending:
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        for tp in self.pending:
            self.statuses[tp].error = Errors.REQUEST_TIMED_OUT

    def on_complete(self) -> dict[TopicPartition, ProducePartitionStatus]:
        return self.statuses


class DelayedFetch(DelayedOperation):
    def __init__(
        self,
        delay_ms: int,
        min_bytes: int,
        read: Callable[[], tuple[int, list[FetchPartitionResult]]],
        first: list[FetchPartitionResult],
    ) -> None:
        super().__init__(delay_ms)
        self.min_bytes = min_bytes
        self.read = read
        self.results = first

    def try_complete(self) -> bool:
        total, results = self.read()
        if total >= self.min_bytes or any(r.result.error != Errors.NONE for r in results):
            self.results = results
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        _, self.results = self.read()

    def on_complete(self) -> list[FetchPartitionResult]:
        return self.results


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        log_manager: LogManager,
        metadata_cache: KRaftMetadataCache,
        log_config_for: Callable[[str], LogConfig],
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
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
        self._produce_purgatory: DelayedOperationPurgatory | None = None
        self._fetch_purgatory: DelayedOperationPurgatory | None = None

    @property
    def produce_purgatory(self) -> DelayedOperationPurgatory:
        if self._produce_purgatory is None:
            self._produce_purgatory = DelayedOperationPurgatory("Produce")
        return self._produce_purgatory

    @property
    def fetch_purgatory(self) -> DelayedOperationPurgatory:
        if self._fetch_purgatory is None:
            self._fetch_purgatory = DelayedOperationPurgatory("Fetch")
        return self._fetch_purgatory

    # -- metadata → roles -----------------------------------------------------------------------

    def apply_delta(self, delta: MetadataDelta, image: MetadataImage) -> None:
        for name, deleted in delta.deleted_topics.items():
            self.stop_replicas([(name, p) for p in deleted.partitions], delete=True)
        leaders: list[TopicPartition] = []
        followers: list[TopicPartition] = []
        for tp in sorted(delta.changed_partitions):
            reg = image.partition(*tp)
            if reg is None:
                continue
            if reg.leader == self.node_id:
                leaders.append(tp)
            elif self.node_id in reg.replicas:
                followers.append(tp)
            elif tp in self.partitions:
                self.stop_replicas([tp], delete=True)
        if leaders:
            self.make_leaders(leaders, image)
        if followers:
            self.make_followers(followers, image)
        for topic in delta.changed_topic_configs:
            if topic in image.topics.by_name:
                cfg = self.log_config_for(topic)
                for (t, _p), part in self.partitions.items():
                    if t == topic and part.log is not None:
                        part.log.update_config(cfg)

    def _get_or_create_partition(self, tp: TopicPartition, image: MetadataImage) -> Partition:
        topic = image.topics.by_name[tp[0]]
        p = self.partitions.get(tp)
        if p is None or p.topic_id != topic.topic_id:
            p = Partition(tp[0], tp[1], topic.topic_id, self.node_id)
            self.partitions[tp] = p
        return p

    def _log_for(self, tp: TopicPartition, image: MetadataImage) -> Any:
        topic = image.topics.by_name[tp[0]]
        return self.log_manager.get_or_create_log(
            tp[0], tp[1], self.log_config_for(tp[0]), topic.topic_id.bytes
        )

    def make_leaders(self, tps: list[TopicPartition], image: MetadataImage) -> None:
        for tp in tps:
            reg = image.partition(*tp)
            assert reg is not None
            p = self._get_or_create_partition(tp, image)
            if p.make_leader(reg, self._log_for(tp, image)):
                self._notify_leadership(tp, True, reg.leader_epoch)
            self._complete_delayed(tp)

    def make_followers(self, tps: list[TopicPartition], image: MetadataImage) -> None:
        for tp in tps:
            reg = image.partition(*tp)
            assert reg is not None
            p = self._get_or_create_partition(tp, image)
            log_ = self._log_for(tp, image)
            was_leader = p.is_leader
            if p.make_follower(reg, log_):
                if was_leader:
                    self._notify_leadership(tp, False, reg.leader_epoch)
                # Without a replica fetcher yet, a follower keeps its log up to the HW (Kafka
                # truncates to the HW before fetching from the new leader).
                log_.truncate_to(log_.high_watermark)
                log.debug("%s: became follower of broker %d at epoch %d", p, reg.leader, reg.leader_epoch)
            self._complete_delayed(tp)

    def stop_replicas(self, tps: list[TopicPartition], delete: bool) -> None:
        for tp in tps:
            p = self.partitions.pop(tp, None)
            if delete:
                self.log_manager.delete_log(tp[0], tp[1])
            if p is not None:
                was_leader = p.is_leader
                p.leader_id = -1
                if was_leader:
                    self._notify_leadership(tp, False, p.leader_epoch)
                self._complete_delayed(tp)

    def _notify_leadership(self, tp: TopicPartition, is_leader: bool, epoch: int) -> None:
        for listener in self.leadership_listeners:
            try:
                listener(tp[0], tp[1], is_leader, epoch)
            except Exception:
                log.exception("Leadership listener failed for %s-%d", *tp)

    def _complete_delayed(self, tp: TopicPartition) -> None:
        if self._produce_purgatory is not None:
            self._produce_purgatory.check_and_complete(tp)
        if self._fetch_purgatory is not None:
            self._fetch_purgatory.check_and_complete(tp)

    # -- produce --------------------------------------------------------------------------------

    def append_records(
        self,
        timeout_ms: int,
        required_acks: int,
        entries: dict[TopicPartition, bytearray | None],
    ) -> dict[TopicPartition, ProducePartitionStatus] | Awaitable[dict[TopicPartition, ProducePartitionStatus]]:
        """Append to the leaders. Returns the statuses, or an awaitable of them when the answer
        must wait: for fsync (``flush.messages`` reached) and/or for the HW (acks=-1)."""
        now = self.clock_ms()
        to_flush: list[Log] = []
        statuses: dict[TopicPartition, ProducePartitionStatus] = {}
        for tp, buf in entries.items():
            st = ProducePartitionStatus()
            statuses[tp] = st
            p = self.partitions.get(tp)
            if p is None:
                st.error = (
                    Errors.UNKNOWN_TOPIC_OR_PARTITION
                    if not self.metadata_cache.contains_partition(*tp)
                    else Errors.NOT_LEADER_OR_FOLLOWER
                )
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
                info = p.append_records_to_leader(buf, required_acks, now)
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
        op = DelayedProduce(timeout_ms, statuses, self)
        self.produce_purgatory.try_complete_else_watch(op, list(statuses))
        result: dict[TopicPartition, ProducePartitionStatus] = await op.future
        return result

    # -- fetch ----------------------------------------------------------------------------------

    def read_from_local_log(
        self,
        requests: list[FetchPartitionRequest],
        max_bytes: int,
        isolation_level: int,
        hard_max_bytes_limit: bool = False,
    ) -> tuple[int, list[FetchPartitionResult]]:
        remaining = max_bytes
        total = 0
        out: list[FetchPartitionResult] = []
        min_one = not hard_max_bytes_limit
        for req in requests:
            tp = (req.topic, req.partition)
            p = self.partitions.get(tp)
            if p is None:
                err = (
                    Errors.UNKNOWN_TOPIC_OR_PARTITION
                    if not self.metadata_cache.contains_partition(*tp)
                    else Errors.NOT_LEADER_OR_FOLLOWER
                )
                out.append(FetchPartitionResult(req, LogReadResult(err, None, -1, -1, -1, -1)))
                continue
            try:
                res = p.read_records(
                    req.fetch_offset,
                    min(req.partition_max_bytes, remaining) if remaining > 0 else 0,
                    isolation_level,
                    min_one,
                    req.current_leader_epoch,
                )
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
    ) -> list[FetchPartitionResult] | DelayedFetch:
        def read() -> tuple[int, list[FetchPartitionResult]]:
            return self.read_from_local_log(requests, max_bytes, isolation_level)

        total, results = read()
        errors = any(r.result.error != Errors.NONE for r in results)
        if max_wait_ms <= 0 or not requests or total >= min_bytes or errors:
            return results
        op = DelayedFetch(max_wait_ms, min_bytes, read, results)
        self.fetch_purgatory.try_complete_else_watch(op, [(r.topic, r.partition) for r in requests])
        return op

    # -- misc -----------------------------------------------------------------------------------

    def get_partition_or_error(self, tp: TopicPartition) -> Partition:
        p = self.partitions.get(tp)
        if p is None:
            if not self.metadata_cache.contains_partition(*tp):
                raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION)
            raise KafkaError(Errors.NOT_LEADER_OR_FOLLOWER)
        return p

    def shutdown(self) -> None:
        if self._produce_purgatory is not None:
            self._produce_purgatory.shutdown()
        if self._fetch_purgatory is not None:
            self._fetch_purgatory.shutdown()
