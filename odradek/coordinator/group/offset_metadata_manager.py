"""OffsetCommit, OffsetFetch and OffsetDelete against the groups this node serves (Kafka's
``OffsetMetadataManager``).

A commit is validated by its group (a classic group by generation, a consumer group by member
epoch; a negative generation is a standalone commit, allowed while the group is empty), each
partition by the metadata size limit and the partition's existence, and is then written through
the :class:`~odradek.coordinator.group.group_metadata_manager.GroupMetadataManager`: committed
offsets become visible only once appended. The coordinator has already checked that it serves the
group (its ``check_group``); offset expiry stays with the group metadata manager, which also
decides when an empty group dies.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from odradek.coordinator.group.classic_group import ClassicGroup, ClassicGroupState
from odradek.coordinator.group.consumer_group import ConsumerGroup
from odradek.coordinator.group.group_metadata_manager import (
    OFFSETS_TOPIC,
    GroupMetadataManager,
    TopicPartition,
    append_error,
)
from odradek.coordinator.group.records import OffsetAndMetadata
from odradek.protocol.errors import Errors

# (transactional id, producer id, producer epoch, partitions) -> the partitions that failed
# verification, with their error (KIP-890: the transaction coordinator confirms that the
# partition was added to the producer's ongoing transaction).
TxnVerifier = Callable[
    [str, int, int, list[TopicPartition]], Awaitable[dict[TopicPartition, tuple[Errors, str | None]]]
]


@dataclass
class CommitRequest:
    offset: int
    leader_epoch: int
    metadata: str | None


class OffsetMetadataManager:
    """``partition_exists(topic, partition)``: whether the metadata knows the partition (a
    commit for an unknown one gets UNKNOWN_TOPIC_OR_PARTITION). ``on_member_heartbeat(group)``:
    a classic group's member committed with its generation, which counts as a heartbeat (the
    coordinator re-arms the group's timer)."""

    def __init__(
        self,
        *,
        groups: GroupMetadataManager,
        partition_exists: Callable[[str, int], bool],
        clock_ms: Callable[[], int],
        on_member_heartbeat: Callable[[ClassicGroup], None],
    ) -> None:
        self.groups = groups
        self.partition_exists = partition_exists
        self.clock_ms = clock_ms
        self.on_member_heartbeat = on_member_heartbeat
        # Set by the broker when transaction.partition.verification is available; None: the
        # offsets partition of a TxnOffsetCommit is not verified.
        self.txn_verifier: TxnVerifier | None = None

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, CommitRequest],
        api_version: int = 8,
    ) -> dict[TopicPartition, Errors]:
        def all_with(e: Errors) -> dict[TopicPartition, Errors]:
            return {tp: e for tp in offsets}

        now = self.clock_ms()
        g = self.groups.get_group(group_id)
        if g is None:
            if generation_id >= 0:
                # Not a standalone commit, yet the group is unknown: a stale member (v9+, which
                # KIP-848 members use, says so with GROUP_ID_NOT_FOUND).
                return all_with(
                    Errors.GROUP_ID_NOT_FOUND if api_version >= 9 else Errors.ILLEGAL_GENERATION
                )
            g = self.groups.get_or_create_classic_group(group_id)
        if isinstance(g, ConsumerGroup):
            err = g.validate_offset_commit(
                member_id, generation_id, group_instance_id, now, api_version=api_version
            )
        else:
            err = g.validate_offset_commit(member_id, generation_id, group_instance_id, now)
        if isinstance(g, ClassicGroup):
            self.on_member_heartbeat(g)
        if err != Errors.NONE:
            return all_with(err)
        results: dict[TopicPartition, Errors] = {}
        to_store: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, c in offsets.items():
            if not self.groups.validate_offset_metadata(c.metadata):
                results[tp] = Errors.OFFSET_METADATA_TOO_LARGE
            elif not self.partition_exists(*tp):
                results[tp] = Errors.UNKNOWN_TOPIC_OR_PARTITION
            else:
                to_store[tp] = OffsetAndMetadata(c.offset, c.leader_epoch, c.metadata or "", now)
        if to_store:
            err = await self.groups.store_offsets(g, to_store)
            for tp in to_store:
                results[tp] = err
        return results

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
        """TxnOffsetCommit (Kafka's ``commitTransactionalOffset``): validated as an offset
        commit whose member fields count only if given, written as the producer's transactional
        batch and pending (not fetched) until the transaction's marker. Unknown partitions get
        UNKNOWN_TOPIC_OR_PARTITION whatever the group's answer (Kafka checks them first)."""
        unknown = {tp for tp in offsets if not self.partition_exists(*tp)}

        def all_with(e: Errors) -> dict[TopicPartition, Errors]:
            return {tp: Errors.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else e for tp in offsets}

        if self.txn_verifier is not None:
            # As Kafka, before the group is looked at: the offsets partition must be in the
            # producer's transaction (AddOffsetsToTxn).
            offsets_tp = (OFFSETS_TOPIC, self.groups.partition_for(group_id))
            failed = await self.txn_verifier(transactional_id, producer_id, producer_epoch, [offsets_tp])
            if offsets_tp in failed:
                return all_with(append_error(failed[offsets_tp][0], True))
        now = self.clock_ms()
        g = self.groups.get_group(group_id)
        if g is None:
            if generation_id >= 0:
                return all_with(Errors.ILLEGAL_GENERATION)
            g = self.groups.get_or_create_classic_group(group_id)
        err = g.validate_txn_offset_commit(member_id, generation_id, group_instance_id)
        if err != Errors.NONE:
            return all_with(err)
        results: dict[TopicPartition, Errors] = {}
        to_store: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, c in offsets.items():
            if tp in unknown:
                results[tp] = Errors.UNKNOWN_TOPIC_OR_PARTITION
            elif not self.groups.validate_offset_metadata(c.metadata):
                results[tp] = Errors.OFFSET_METADATA_TOO_LARGE
            else:
                to_store[tp] = OffsetAndMetadata(c.offset, c.leader_epoch, c.metadata or "", now)
        if to_store:
            err = await self.groups.store_offsets(g, to_store, producer_id, producer_epoch)
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
        g: Any = self.groups.get_group(group_id)
        if g is None:
            return Errors.NONE, [(tp, None, Errors.NONE) for tp in tps or []]
        err = g.validate_offset_fetch(member_id, member_epoch)
        if err != Errors.NONE:
            return err, []
        if tps is None:
            tps = sorted(g.offsets)
        out: list[tuple[TopicPartition, OffsetAndMetadata | None, Errors]] = []
        for tp in tps:
            if require_stable and (
                tp in g.pending_offset_commits or self.groups.has_pending_txn_offset(group_id, tp)
            ):
                out.append((tp, None, Errors.UNSTABLE_OFFSET_COMMIT))
            else:
                out.append((tp, g.offsets.get(tp), Errors.NONE))
        return Errors.NONE, out

    async def delete_offsets(
        self, group_id: str, tps: list[TopicPartition]
    ) -> tuple[Errors, dict[TopicPartition, Errors]]:
        g: Any = self.groups.get_group(group_id)
        if g is None or g.state_name == ClassicGroupState.DEAD.value:
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
            err = await self.groups.write_tombstones(group_id, deletable)
            if err != Errors.NONE:
                for tp in deletable:
                    results[tp] = err
        return Errors.NONE, results
