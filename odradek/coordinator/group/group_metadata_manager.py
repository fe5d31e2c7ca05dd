"""GroupMetadataManager: the groups and offsets of the ``__consumer_offsets`` partitions this node
leads, and their life on the log.

* Writes: offset commits, group records and tombstones become one record batch per call, appended
  with acks=-1 through the replica manager; callers learn the outcome only after the append.
* Immigration: when this node becomes leader of a partition, the partition is read from its start
  to the high watermark and replayed (last record per key wins, tombstones delete). Meanwhile
  requests for its groups get COORDINATOR_LOAD_IN_PROGRESS.
* Emigration: when leadership is lost its groups are dropped (waiters get NOT_COORDINATOR).
* Expiry: offsets older than ``offsets.retention.minutes`` (of empty groups, or of topics a stable
  consumer group no longer subscribes to) are tombstoned, and empty groups without offsets die.

The manager stores any group object that follows :class:`Group`: the classic
:class:`~odradek.coordinator.group.classic_group.ClassicGroup` and the KIP-848
:class:`~odradek.coordinator.group.consumer_group.ConsumerGroup` (records with key versions 3-8,
replayed into the group on load and deleted with its own tombstones) share the offsets machinery.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any, Protocol

from odradek.coordinator.group.classic_group import ClassicGroup, ClassicGroupState
from odradek.coordinator.group.consumer_group import ConsumerGroup
from odradek.coordinator.group.consumer_group_records import (
    GROUP_METADATA as CONSUMER_GROUP_METADATA,
)
from odradek.coordinator.group.consumer_group_records import (
    CoordinatorRecord,
    decode_record,
    encode_record,
    is_consumer_group_key,
)
from odradek.coordinator.group.group_coordinator_config import ConsumerGroupConfig, GroupConfig
from odradek.coordinator.group.records import (
    GroupKey,
    GroupRecord,
    OffsetAndMetadata,
    OffsetKey,
    group_metadata_key,
    group_metadata_value,
    offset_commit_key,
    offset_commit_value,
    parse_group_value,
    parse_key,
    parse_offset_value,
)
from odradek.coordinator.group.txn_offsets import PendingTxnOffsets, materialise
from odradek.coordinator.internal_topic import TOO_LARGE, CoordinatorPartitions, read_to_log_end
from odradek.coordinator.internal_topic import append_error as coordinator_append_error
from odradek.java_order import java_abs, java_string_hash
from odradek.log.append_origin import AppendOrigin
from odradek.protocol.errors import Errors
from odradek.protocol.schema import SchemaError
from odradek.records.batch import (
    CONTROL_FLAG_MASK,
    TRANSACTIONAL_FLAG_MASK,
    RecordBatchHeader,
)
from odradek.records.builder import RecordTuple, build_batch
from odradek.records.control_batch import parse_end_txn_marker
from odradek.records.errors import RecordError
from odradek.records.records import Record, iter_batch_records

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
TopicPartition = tuple[str, int]


class Group(Protocol):
    """What the manager and the offset APIs need from a group, whatever its protocol."""

    group_id: str
    group_type: str  # "classic" or "consumer" (KIP-848)
    offsets: dict[TopicPartition, OffsetAndMetadata]
    pending_offset_commits: dict[TopicPartition, int]
    current_state_timestamp: int
    protocol_type: str | None

    @property
    def state_name(self) -> str: ...

    def is_empty(self) -> bool: ...

    def subscribed_topics(self) -> set[str] | None: ...

    def validate_offset_commit(
        self, member_id: str, generation_id: int, group_instance_id: str | None, now_ms: int
    ) -> Errors: ...

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> Errors: ...


class ReplicaManagerLike(Protocol):
    partitions: dict[TopicPartition, Any]
    leadership_listeners: list[Callable[[str, int, bool, int], None]]

    def append_records(
        self,
        timeout_ms: int,
        required_acks: int,
        entries: dict[TopicPartition, bytearray | None],
        origin: AppendOrigin = ...,
    ) -> Any: ...


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % numPartitions``."""
    return java_abs(java_string_hash(group_id)) % num_partitions


def append_error(code: Errors, for_offsets: bool) -> Errors:
    """Map a failed append to what a group client understands (as Kafka does)."""
    too_large = Errors.INVALID_COMMIT_OFFSET_SIZE if for_offsets else Errors.UNKNOWN_SERVER_ERROR
    return coordinator_append_error(code, too_large, (*TOO_LARGE, Errors.INVALID_FETCH_SIZE))


# What a replay of an offsets partition gives: committed offsets, classic group records,
# consumer groups, pending transactional offsets and the number of records read.
Replayed = tuple[
    dict[str, dict[TopicPartition, OffsetAndMetadata]],
    dict[str, GroupRecord | None],
    dict[str, ConsumerGroup],
    PendingTxnOffsets,
    int,
]


class GroupMetadataManager(CoordinatorPartitions[Replayed]):
    def __init__(
        self,
        *,
        replica_manager: ReplicaManagerLike,
        num_partitions: int,
        group_config: GroupConfig,
        offsets_retention_ms: int,
        offset_metadata_max_bytes: int,
        clock_ms: Callable[[], int],
        append_timeout_ms: int = 5000,
        consumer_group_config: ConsumerGroupConfig | None = None,
    ) -> None:
        super().__init__(OFFSETS_TOPIC, "groups", clock_ms)
        self.replica_manager = replica_manager
        self.num_partitions = num_partitions
        self.group_config = group_config
        self.consumer_group_config = consumer_group_config or ConsumerGroupConfig()
        # A group's own configs (resource type GROUP): set by the coordinator to the metadata cache.
        self.group_overrides: Callable[[str], Mapping[str, str]] = lambda group_id: {}
        self.offsets_retention_ms = offsets_retention_ms
        self.offset_metadata_max_bytes = offset_metadata_max_bytes
        self.append_timeout_ms = append_timeout_ms
        self.groups: dict[str, Any] = {}
        # Per loaded partition: transactional offset commits waiting for their marker.
        self.pending_txn: dict[int, PendingTxnOffsets] = {}
        # (partition, producer id) -> one [result] cell per transactional commit being
        # appended: a marker acknowledged meanwhile is noted there (True COMMIT, False ABORT).
        self._txn_appends: dict[tuple[int, int], list[list[bool | None]]] = {}
        # Set by the coordinator: a group was loaded (schedule its timers) / unloaded.
        self.on_group_loaded: Callable[[Any], None] = lambda g: None
        self.on_group_unloaded: Callable[[Any], None] = lambda g: None

    # ------------------------------------------------------------------------ ownership

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def partition_error(self, group_id: str) -> Errors:
        """NONE if this node serves the group now, else the error to answer with."""
        p = self.partition_for(group_id)
        if p in self.loading:
            return Errors.COORDINATOR_LOAD_IN_PROGRESS
        if p not in self.owned:
            return Errors.NOT_COORDINATOR
        return Errors.NONE

    def is_loading(self) -> bool:
        return bool(self.loading)

    def owned_groups(self) -> list[Any]:
        return [g for gid, g in self.groups.items() if self.partition_for(gid) in self.owned]

    # ------------------------------------------------------------------------ groups

    def get_group(self, group_id: str) -> Any | None:
        return self.groups.get(group_id)

    def add_group(self, group: Any) -> Any:
        """Register a group (returns the one already registered under its id, if any)."""
        return self.groups.setdefault(group.group_id, group)

    def get_or_create_classic_group(self, group_id: str) -> ClassicGroup:
        g = self.groups.get(group_id)
        if g is None:
            g = ClassicGroup(group_id, self.group_config, self.clock_ms())
            self.groups[group_id] = g
        return g  # type: ignore[no-any-return]

    def new_consumer_group(self, group_id: str) -> ConsumerGroup:
        """A new (unregistered) KIP-848 consumer group with the broker's settings."""
        group = ConsumerGroup(group_id, self.consumer_group_config)
        group.config_overrides = lambda: self.group_overrides(group_id)
        return group

    def remove_group(self, group_id: str) -> None:
        self.groups.pop(group_id, None)

    # ------------------------------------------------------------------------ writes

    async def _append(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> Errors:
        err, _ = await self._append_at(partition, records, producer_id, producer_epoch)
        return err

    async def _append_at(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> tuple[Errors, int]:
        """Append ``records`` as one batch; (error, offset of the first record). With a
        producer id the batch is the producer's transactional batch, written with sequence 0 and
        as the coordinator (no sequence check), as Kafka's group coordinator writes it."""
        epoch = self.owned.get(partition)
        if epoch is None:
            return Errors.NOT_COORDINATOR, -1
        now = self.clock_ms()
        entries: list[RecordTuple] = [(k, v, [], now) for k, v in records]
        if producer_id >= 0:
            batch = bytearray(build_batch(
                entries, producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=0,
                is_transactional=True,
            ))
            result = self.replica_manager.append_records(
                self.append_timeout_ms, -1, {(OFFSETS_TOPIC, partition): batch}, AppendOrigin.COORDINATOR
            )
        else:
            batch = bytearray(build_batch(entries))
            result = self.replica_manager.append_records(
                self.append_timeout_ms, -1, {(OFFSETS_TOPIC, partition): batch}
            )
        if not isinstance(result, dict):
            result = await result
        status = result[(OFFSETS_TOPIC, partition)]
        if status.error != Errors.NONE:
            log.warning(
                "Appending %d coordinator record(s) to %s-%d failed: %s %s",
                len(records), OFFSETS_TOPIC, partition, status.error.name, status.message or "",
            )
            return Errors(status.error), -1
        if self.owned.get(partition) != epoch:
            return Errors.NOT_COORDINATOR, -1
        return Errors.NONE, status.base_offset

    async def write_records(
        self,
        group_id: str,
        records: list[CoordinatorRecord],
        *,
        before: Iterable[tuple[bytes, bytes | None]] = (),
    ) -> Errors:
        """Append KIP-848 consumer group records to the group's partition as one batch, after
        the already encoded records ``before`` (e.g. the tombstone of a classic group)."""
        encoded = list(before) + [encode_record(r.name, r.key, r.value) for r in records]
        if not encoded:
            return Errors.NONE
        err = await self._append(self.partition_for(group_id), encoded)
        return append_error(err, False) if err != Errors.NONE else err

    async def delete_group_records(self, group: Any, tps: Iterable[TopicPartition]) -> Errors:
        """Tombstones for ``tps``' offsets and for the group itself (whatever its type), as
        one batch. The caller has already dropped the group from :attr:`groups`."""
        gid = group.group_id
        records: list[tuple[bytes, bytes | None]] = [
            (offset_commit_key(gid, t, p), None) for t, p in tps
        ]
        if isinstance(group, ConsumerGroup):
            records += [encode_record(r.name, r.key, r.value) for r in group.tombstones()]
        else:
            records.append((group_metadata_key(gid), None))
        err = await self._append(self.partition_for(gid), records)
        return append_error(err, False) if err != Errors.NONE else err

    async def store_group(self, group: Any, record: GroupRecord) -> Errors:
        p = self.partition_for(group.group_id)
        err = await self._append(p, [(group_metadata_key(group.group_id), group_metadata_value(record))])
        return append_error(err, False) if err != Errors.NONE else err

    def validate_offset_metadata(self, metadata: str | None) -> bool:
        return metadata is None or len(metadata.encode("utf-8")) <= self.offset_metadata_max_bytes

    async def store_offsets(
        self,
        group: Any,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> Errors:
        """Write ``offsets`` for ``group`` as one batch; update the cache once it is appended.

        With a producer id (TxnOffsetCommit) the batch is the producer's transactional batch and
        the offsets stay pending until the transaction's marker (:meth:`on_txn_marker`)."""
        if not offsets:
            return Errors.NONE
        gid = group.group_id
        partition = self.partition_for(gid)
        records: list[tuple[bytes, bytes | None]] = [
            (offset_commit_key(gid, t, p), offset_commit_value(o)) for (t, p), o in offsets.items()
        ]
        pending = group.pending_offset_commits
        for tp in offsets:
            pending[tp] = pending.get(tp, 0) + 1
        cell: list[bool | None] = [None]
        if producer_id >= 0:
            self._txn_appends.setdefault((partition, producer_id), []).append(cell)
        try:
            err, base = await self._append_at(partition, records, producer_id, producer_epoch)
        finally:
            for tp in offsets:
                n = pending.get(tp, 0) - 1
                if n <= 0:
                    pending.pop(tp, None)
                else:
                    pending[tp] = n
            if producer_id >= 0:
                cells = self._txn_appends[(partition, producer_id)]
                cells.remove(cell)
                if not cells:
                    del self._txn_appends[(partition, producer_id)]
        if err != Errors.NONE:
            return append_error(err, True)
        written = {tp: replace(o, record_offset=base + i) for i, (tp, o) in enumerate(offsets.items())}
        if producer_id >= 0:
            # Pending by group id, as a reload would find them in the log (even if the group
            # object changed meanwhile).
            if cell[0] is None:
                store = self.pending_txn.setdefault(partition, PendingTxnOffsets())
                for tp, o in written.items():
                    store.add(producer_id, gid, tp, o)
            elif cell[0]:
                # The marker was acknowledged while this append was: its transaction is over.
                self._commit_txn_offsets({gid: written})
            return Errors.NONE
        current: Any = self.groups.get(gid)
        if current is group and current.state_name != ClassicGroupState.DEAD.value:
            current.offsets.update(written)
        return Errors.NONE

    # ------------------------------------------------------------------------ transactions

    def has_pending_txn_offset(self, group_id: str, tp: TopicPartition) -> bool:
        store = self.pending_txn.get(self.partition_for(group_id))
        return store is not None and store.has_pending(group_id, tp)

    def has_open_txn(self, group_id: str) -> bool:
        store = self.pending_txn.get(self.partition_for(group_id))
        return store is not None and store.has_group(group_id)

    def take_pending_txn_partitions(self, group_id: str) -> set[TopicPartition]:
        """The partitions of the group's pending transactional offsets, which are dropped (the
        group is being deleted; its tombstones cover them)."""
        store = self.pending_txn.get(self.partition_for(group_id))
        if store is None:
            return set()
        tps = store.pending_partitions(group_id)
        store.remove_group(group_id)
        return tps

    def _commit_txn_offsets(self, done: dict[str, dict[TopicPartition, OffsetAndMetadata]]) -> None:
        for gid, offsets in done.items():
            g: Any = self.groups.get(gid)
            if g is None:  # as Kafka's replay: the offsets make a (simple) group
                g = self.get_or_create_classic_group(gid)
            materialise(g.offsets, offsets)

    def on_txn_marker(self, topic: str, partition: int, producer_id: int, commit: bool) -> None:
        """ReplicaManager transaction marker listener (called on the event loop once the marker
        is acknowledged): the producer's pending offsets on the partition are committed or
        dropped. A partition still loading replays the marker from its log instead."""
        if topic != OFFSETS_TOPIC:
            return
        for cell in self._txn_appends.get((partition, producer_id), ()):
            cell[0] = commit
        store = self.pending_txn.get(partition)
        if store is None or partition not in self.owned:
            return
        done = store.complete(producer_id)
        if not done:
            return
        n = sum(len(o) for o in done.values())
        if not commit:
            log.info(
                "Dropped %d transactional offset(s) of producer %d (transaction aborted) in group(s) %s",
                n, producer_id, ", ".join(sorted(done)),
            )
            return
        self._commit_txn_offsets(done)
        log.debug(
            "Committed %d transactional offset(s) of producer %d in group(s) %s",
            n, producer_id, ", ".join(sorted(done)),
        )

    async def write_tombstones(self, group_id: str, tps: Iterable[TopicPartition]) -> Errors:
        """Tombstones for offsets of the group; pending transactional commits of these
        partitions go with them (as Kafka's replay of an offset tombstone)."""
        tps = list(tps)
        store = self.pending_txn.get(self.partition_for(group_id))
        if store is not None:
            for tp in tps:
                store.remove(group_id, tp)
        records: list[tuple[bytes, bytes | None]] = [
            (offset_commit_key(group_id, t, p), None) for t, p in tps
        ]
        if not records:
            return Errors.NONE
        err = await self._append(self.partition_for(group_id), records)
        return append_error(err, False) if err != Errors.NONE else err

    # ------------------------------------------------------------------------ immigration/emigration

    def _install(self, partition: int, epoch: int, replayed: Replayed, started_ms: int) -> None:
        offsets, groups, consumer_groups, pending, n = replayed
        now = self.clock_ms()
        loaded: list[Any] = []
        for gid, cg in consumer_groups.items():
            cg.offsets = offsets.get(gid, {})
            cg.on_loaded(now)  # fresh sessions for its members, as Kafka does on load
            self.groups[gid] = cg
            loaded.append(cg)
        open_txn = {gid for gs in pending.by_producer.values() for gid in gs}
        for gid in (set(offsets) | open_txn | {g for g, r in groups.items() if r is not None}) - set(
            consumer_groups
        ):
            rec = groups.get(gid)
            g = (
                ClassicGroup.from_record(gid, rec, self.group_config, now)
                if rec is not None
                else ClassicGroup(gid, self.group_config, now)
            )
            g.offsets = offsets.get(gid, {})
            if rec is None and not g.offsets and gid not in open_txn:
                continue
            self.groups[gid] = g
            loaded.append(g)
        del self.loading[partition]
        self.owned[partition] = epoch
        self.pending_txn[partition] = pending
        for g in loaded:
            self.on_group_loaded(g)
        # An operator wants to hear about restored groups, not about 50 empty partitions.
        log.log(
            logging.INFO if loaded else logging.DEBUG,
            "Loaded %s-%d (leader epoch %d): %d record(s), %d group(s)%s in %d ms",
            OFFSETS_TOPIC, partition, epoch, n, len(loaded),
            f", {len(pending)} offset(s) of {len(pending.by_producer)} open transaction(s)"
            if pending.by_producer else "",
            self.clock_ms() - started_ms,
        )

    async def _replay(self, partition: int) -> Replayed:
        """Replay the partition's log: offset commits of a transactional batch are pending until
        their producer's COMMIT (then the newer in the log of them and the committed offsets
        win) or ABORT marker follows; those still open at the log end stay pending."""
        part = self.replica_manager.partitions.get((OFFSETS_TOPIC, partition))
        pending = PendingTxnOffsets()
        offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        groups: dict[str, GroupRecord | None] = {}
        consumer_groups: dict[str, ConsumerGroup] = {}
        count = 0
        unknown: Counter[int] = Counter()  # key version -> records of group types we lack
        if part is None or part.log is None:
            return offsets, groups, consumer_groups, pending, count
        async for data, h in read_to_log_end(part.log, 4 * 1024 * 1024):
            if h.attributes & CONTROL_FLAG_MASK:
                self._replay_control(data, h, partition, pending, offsets)
                continue
            txn_pid = h.producer_id if h.attributes & TRANSACTIONAL_FLAG_MASK else -1
            for rec in _readable_records(data, h.position, h.size, partition):
                count += 1
                if rec.key is None:
                    continue
                try:
                    if is_consumer_group_key(rec.key):
                        self._replay_consumer_record(
                            consumer_groups, groups, decode_record(rec.key, rec.value)
                        )
                        continue
                    key = parse_key(rec.key)
                    if isinstance(key, OffsetKey):
                        tp = (key.topic, key.partition)
                        if rec.value is None:
                            offsets.get(key.group, {}).pop(tp, None)
                            pending.remove(key.group, tp)
                        else:
                            o = parse_offset_value(rec.value)
                            o.record_offset = rec.offset
                            if txn_pid >= 0:
                                pending.add(txn_pid, key.group, tp, o)
                            else:
                                offsets.setdefault(key.group, {})[tp] = o
                    elif key is None:
                        unknown[int.from_bytes(rec.key[:2], "big", signed=True)] += 1
                    elif isinstance(key, GroupKey):
                        groups[key.group] = (
                            None if rec.value is None else parse_group_value(rec.value)
                        )
                        if rec.value is not None:
                            # A classic group took the id over (after its consumer
                            # group was deleted).
                            consumer_groups.pop(key.group, None)
                except (ValueError, SchemaError) as e:
                    log.warning(
                        "Skipping unreadable record at offset %d of %s-%d: %s",
                        rec.offset, OFFSETS_TOPIC, partition, e,
                    )
        if unknown:
            # Apache Kafka's share groups (key versions 10-15), regex subscriptions (16) and
            # streams groups (17-23): their committed offsets are ordinary offset commits and
            # were loaded; the rest of their state is rebuilt when their members return.
            log.warning(
                "%s-%d: ignored %d record(s) of group types Odradek does not support (key versions %s)",
                OFFSETS_TOPIC, partition, sum(unknown.values()), sorted(unknown),
            )
        return offsets, groups, consumer_groups, pending, count

    @staticmethod
    def _replay_control(
        data: bytes | bytearray,
        h: RecordBatchHeader,
        partition: int,
        pending: PendingTxnOffsets,
        offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]],
    ) -> None:
        """A control batch of the partition being loaded: a transaction marker ends its
        producer's pending offset commits."""
        try:
            marker = parse_end_txn_marker(memoryview(data)[h.position : h.position + h.size], h)
        except RecordError as e:
            log.warning(
                "Skipping unreadable control batch at offset %d of %s-%d: %s",
                h.base_offset, OFFSETS_TOPIC, partition, e,
            )
            return
        if marker is None:
            return  # another control type, or a marker the cleaner emptied
        done = pending.complete(h.producer_id)
        if marker.commit:
            for gid, committed in done.items():
                materialise(offsets.setdefault(gid, {}), committed)

    def _replay_consumer_record(
        self,
        consumer_groups: dict[str, ConsumerGroup],
        classic: dict[str, GroupRecord | None],
        rec: CoordinatorRecord,
    ) -> None:
        """One KIP-848 record (key versions 3-8) of a partition being loaded."""
        gid = rec.key["group_id"]
        g = consumer_groups.get(gid)
        if g is None:
            if rec.value is None:
                return  # a tombstone of a group already gone
            g = consumer_groups[gid] = self.new_consumer_group(gid)
            classic[gid] = None  # the id now names a consumer group
        if rec.name == CONSUMER_GROUP_METADATA and rec.value is None:
            del consumer_groups[gid]  # the group's last tombstone: it was deleted
            return
        g.replay(rec.name, rec.key, rec.value)

    def unload_partition(self, partition: int) -> None:
        self._stop_loading(partition)
        self.pending_txn.pop(partition, None)
        was_owned = self.owned.pop(partition, None) is not None
        gids = [g for g in self.groups if self.partition_for(g) == partition]
        for gid in gids:
            g = self.groups.pop(gid)
            self.on_group_unloaded(g)
        if was_owned:
            log.log(
                logging.INFO if gids else logging.DEBUG,
                "Unloaded %d group(s) of %s-%d: this node no longer leads it",
                len(gids), OFFSETS_TOPIC, partition,
            )

    # ------------------------------------------------------------------------ expiry

    def expired_offsets(self, group: Any, now_ms: int) -> list[TopicPartition]:
        retention = self.offsets_retention_ms
        out: list[TopicPartition] = []
        store = self.pending_txn.get(self.partition_for(group.group_id))
        if group.is_empty():
            for tp, o in group.offsets.items():
                if tp in group.pending_offset_commits or (
                    store is not None and store.has_pending(group.group_id, tp)
                ):
                    continue
                base = o.commit_timestamp
                if group.protocol_type is not None:
                    base = max(base, group.current_state_timestamp)
                if o.expire_timestamp >= 0:
                    if o.expire_timestamp <= now_ms:
                        out.append(tp)
                elif base + retention <= now_ms:
                    out.append(tp)
            return out
        subscribed = group.subscribed_topics()
        if subscribed is None or group.state_name != ClassicGroupState.STABLE.value:
            return out
        for tp, o in group.offsets.items():
            if tp[0] not in subscribed and tp not in group.pending_offset_commits:
                if store is not None and store.has_pending(group.group_id, tp):
                    continue
                if o.commit_timestamp + retention <= now_ms:
                    out.append(tp)
        return out

    async def cleanup_group_metadata(self) -> int:
        """Expire old offsets and dead empty groups. Returns the number of offsets removed."""
        now = self.clock_ms()
        removed = 0
        for group in self.owned_groups():
            expired = self.expired_offsets(group, now)
            for tp in expired:
                group.offsets.pop(tp, None)
            removed += len(expired)
            drop_group = (
                group.is_empty()
                and not group.offsets
                and not group.pending_offset_commits
                and not self.has_open_txn(group.group_id)  # as Kafka: not during a transaction
            )
            if drop_group:
                if isinstance(group, ClassicGroup):
                    group.make_dead(Errors.COORDINATOR_NOT_AVAILABLE, now)
                self.groups.pop(group.group_id, None)
                log.info("Group %s is empty and has no offsets: removed", group.group_id)
            if expired or drop_group:
                if expired:
                    log.info(
                        "Expired %d offset(s) of group %s (retention %d ms)",
                        len(expired), group.group_id, self.offsets_retention_ms,
                    )
                if drop_group:
                    err = await self.delete_group_records(group, expired)
                else:
                    err = await self.write_tombstones(group.group_id, expired)
                if err != Errors.NONE:
                    log.warning("Writing tombstones for group %s failed: %s", group.group_id, err.name)
        return removed


def _readable_records(data: bytes | bytearray, position: int, size: int, partition: int) -> Iterator[Record]:
    """The records of one batch of the offsets topic, one at a time; a batch that cannot be
    read (corrupt, or decompressing beyond the bound) is skipped with a warning rather than
    stopping the load."""
    try:
        yield from iter_batch_records(memoryview(data)[position : position + size])
    except RecordError as e:
        log.warning(
            "Skipping unreadable batch at position %d of %s-%d: %s", position, OFFSETS_TOPIC, partition, e
        )
