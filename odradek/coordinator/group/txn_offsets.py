"""Transactional offset commits waiting for their transaction's end (Kafka's
``pendingTransactionalOffsets`` of the ``OffsetMetadataManager``), for one ``__consumer_offsets``
partition.

A TxnOffsetCommit is written to the log in a transactional batch of the producer and kept here,
invisible to OffsetFetch, until the producer's COMMIT or ABORT marker follows on the partition:
a COMMIT moves the producer's pending offsets into the groups' committed offsets, each one only if
it is newer in the log than the offset committed for the partition already (a plain OffsetCommit
written after the transactional one wins); an ABORT drops them. The same rules apply when a
partition is loaded from its log and at run time. Sans-I/O.
"""

from __future__ import annotations

from odradek.coordinator.group.records import OffsetAndMetadata

TopicPartition = tuple[str, int]
GroupOffsets = dict[str, dict[TopicPartition, OffsetAndMetadata]]


def materialise(committed: dict[TopicPartition, OffsetAndMetadata], pending: dict[TopicPartition, OffsetAndMetadata]) -> int:
    """Apply committed transactional offsets ``pending`` to ``committed``: each replaces the
    current one only if it was written later in the log. Returns how many were taken."""
    taken = 0
    for tp, o in pending.items():
        current = committed.get(tp)
        if current is None or o.record_offset > current.record_offset:
            committed[tp] = o
            taken += 1
    return taken


class PendingTxnOffsets:
    """The pending transactional offsets of one partition: producer id -> group id -> offsets."""

    def __init__(self) -> None:
        self.by_producer: dict[int, GroupOffsets] = {}
        self._producers_of_group: dict[str, set[int]] = {}

    def __len__(self) -> int:
        return sum(len(tps) for groups in self.by_producer.values() for tps in groups.values())

    def add(self, producer_id: int, group_id: str, tp: TopicPartition, offset: OffsetAndMetadata) -> None:
        self.by_producer.setdefault(producer_id, {}).setdefault(group_id, {})[tp] = offset
        self._producers_of_group.setdefault(group_id, set()).add(producer_id)

    def has_group(self, group_id: str) -> bool:
        return group_id in self._producers_of_group

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        for pid in self._producers_of_group.get(group_id, ()):
            if tp in self.by_producer[pid][group_id]:
                return True
        return False

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        out: set[TopicPartition] = set()
        for pid in self._producers_of_group.get(group_id, ()):
            out.update(self.by_producer[pid][group_id])
        return out

    def complete(self, producer_id: int) -> GroupOffsets:
        """The producer's transaction ended: its pending offsets, by group, leave this store
        (the caller materialises them on COMMIT and forgets them on ABORT)."""
        groups = self.by_producer.pop(producer_id, {})
        for gid in groups:
            pids = self._producers_of_group.get(gid)
            if pids is not None:
                pids.discard(producer_id)
                if not pids:
                    del self._producers_of_group[gid]
        return groups

    def remove(self, group_id: str, tp: TopicPartition) -> None:
        """A tombstone for the group's offset of ``tp``: pending commits of it go too (Kafka's
        replay of an offset tombstone)."""
        for pid in list(self._producers_of_group.get(group_id, ())):
            offsets = self.by_producer[pid][group_id]
            offsets.pop(tp, None)
            if not offsets:
                self._drop(pid, group_id)

    def remove_group(self, group_id: str) -> None:
        for pid in list(self._producers_of_group.get(group_id, ())):
            self._drop(pid, group_id)

    def _drop(self, producer_id: int, group_id: str) -> None:
        groups = self.by_producer[producer_id]
        del groups[group_id]
        if not groups:
            del self.by_producer[producer_id]
        pids = self._producers_of_group[group_id]
        pids.discard(producer_id)
        if not pids:
            del self._producers_of_group[group_id]
