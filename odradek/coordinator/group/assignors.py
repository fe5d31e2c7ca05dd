"""Server-side partition assignors for the consumer rebalance protocol (KIP-848).

With ``group.protocol=consumer`` the group coordinator, not a consumer, computes the *target
assignment* of a group each time its epoch is bumped. The assignor is chosen by name: the most
requested ``server_assignor`` among the members, else the first of ``group.consumer.assignors``.

Two assignors, with Kafka's names:

``uniform``
    Balanced and sticky. Every member keeps the partitions of its previous target assignment as
    long as it stays subscribed to their topic and the balance allows it; only the partitions
    needed to rebalance move. With identical subscriptions the numbers of partitions differ by at
    most one, and adding a member moves exactly the partitions that member receives. With
    different subscriptions, partitions go to the least loaded eligible member and are then moved
    from a member to an eligible member with at least two partitions fewer, until no such move
    exists (so members with the same subscriptions still differ by at most one).

``range``
    Per topic, the partitions are cut into contiguous ranges handed to the subscribed members
    sorted by member id, the first ``partitions % members`` getting one more. Topics with the same
    subscribers and partition count are therefore co-partitioned: partition ``p`` of each goes to
    the same member. Not sticky (the ranges are a pure function of the membership).

Assignors are pure functions: ``assign(members, topics)`` with no clock and no randomness; the
result only depends on the inputs (ties broken by member id, topic name and partition).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

# topic id -> partitions
Assignment = dict[uuid.UUID, list[int]]


class TopicMetadata(NamedTuple):
    """What an assignor (and the group) knows of a topic."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True)
class MemberSubscription:
    """One member as an assignor sees it.

    ``subscribed_topics`` are topic names (regular expressions already resolved by the group);
    ``assignment`` is the member's previous target assignment, used for stickiness.
    """

    subscribed_topics: frozenset[str]
    assignment: Mapping[uuid.UUID, Set[int]] = field(default_factory=dict)
    rack_id: str | None = None
    instance_id: str | None = None


class PartitionAssignor(Protocol):
    name: str

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        topics: Mapping[str, TopicMetadata],
    ) -> dict[str, Assignment]:
        """Member id -> {topic id: sorted partitions}; every member appears, maybe empty."""
        ...


TP = tuple[str, int]  # (topic name, partition): names sort deterministically, ids do not mean much


def _subscribed_existing(
    members: Mapping[str, MemberSubscription], topics: Mapping[str, TopicMetadata]
) -> dict[str, frozenset[str]]:
    return {m: frozenset(t for t in s.subscribed_topics if t in topics) for m, s in members.items()}


def _to_result(
    members: Iterable[str], owned: Mapping[str, Iterable[TP]], topics: Mapping[str, TopicMetadata]
) -> dict[str, Assignment]:
    out: dict[str, Assignment] = {}
    for m in members:
        per: dict[uuid.UUID, list[int]] = {}
        for name, p in owned.get(m, ()):
            per.setdefault(topics[name].topic_id, []).append(p)
        out[m] = {tid: sorted(ps) for tid, ps in sorted(per.items(), key=lambda kv: str(kv[0]))}
    return out


# ---------------------------------------------------------------------------------------------
# uniform


class UniformAssignor:
    """Balanced, sticky assignment (Kafka's ``uniform``, the default server assignor)."""

    name = "uniform"

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        topics: Mapping[str, TopicMetadata],
    ) -> dict[str, Assignment]:
        subs = _subscribed_existing(members, topics)
        ids_by_topic = {t.topic_id: name for name, t in topics.items()}
        member_ids = sorted(members)

        # Partitions each member may keep: still subscribed, still existing, not claimed twice.
        claimed: set[TP] = set()
        current: dict[str, list[TP]] = {}
        for m in member_ids:
            keep: list[TP] = []
            for tid, parts in members[m].assignment.items():
                name = ids_by_topic.get(tid)
                if name is None or name not in subs[m]:
                    continue
                n = topics[name].num_partitions
                for p in parts:
                    tp = (name, p)
                    if 0 <= p < n and tp not in claimed:
                        claimed.add(tp)
                        keep.append(tp)
            keep.sort()
            current[m] = keep

        if len({subs[m] for m in member_ids}) <= 1:
            owned = self._homogeneous(member_ids, subs, current, topics)
        else:
            owned = self._heterogeneous(member_ids, subs, current, topics)
        return _to_result(member_ids, owned, topics)

    @staticmethod
    def _homogeneous(
        member_ids: list[str],
        subs: Mapping[str, frozenset[str]],
        current: Mapping[str, list[TP]],
        topics: Mapping[str, TopicMetadata],
    ) -> dict[str, list[TP]]:
        if not member_ids:
            return {}
        subscribed = sorted(subs[member_ids[0]])
        all_tps = [(t, p) for t in subscribed for p in range(topics[t].num_partitions)]
        n = len(member_ids)
        min_quota, extra = divmod(len(all_tps), n)

        owned: dict[str, list[TP]] = {}
        # Members holding more than the minimum keep one more while extra slots remain; the
        # most loaded first so that the fewest partitions move.
        order = sorted(member_ids, key=lambda m: (-len(current[m]), m))
        for m in order:
            cur = current[m]
            quota = min_quota
            if len(cur) > min_quota and extra > 0:
                quota += 1
                extra -= 1
            owned[m] = cur[:quota]
        taken = {tp for tps in owned.values() for tp in tps}
        pool = [tp for tp in all_tps if tp not in taken]
        pool.reverse()  # pop() hands out partitions in order

        # Fill everyone up to the minimum, then hand out the remaining extra slots.
        for m in sorted(member_ids, key=lambda m: (len(owned[m]), m)):
            while len(owned[m]) < min_quota:
                owned[m].append(pool.pop())
        for m in sorted(member_ids, key=lambda m: (len(owned[m]), m)):
            if not pool:
                break
            if len(owned[m]) == min_quota and extra > 0:
                owned[m].append(pool.pop())
                extra -= 1
        assert not pool, "uniform assignor left partitions unassigned"
        return owned

    @staticmethod
    def _heterogeneous(
        member_ids: list[str],
        subs: Mapping[str, frozenset[str]],
        current: Mapping[str, list[TP]],
        topics: Mapping[str, TopicMetadata],
    ) -> dict[str, list[TP]]:
        subscribers: dict[str, list[str]] = {}
        for m in member_ids:
            for t in subs[m]:
                subscribers.setdefault(t, []).append(m)
        owner: dict[TP, str] = {}
        owned: dict[str, set[TP]] = {m: set(current[m]) for m in member_ids}
        for m in member_ids:
            for tp in owned[m]:
                owner[tp] = m

        # New partitions: the most constrained topics first, each to its least loaded subscriber.
        unassigned = [
            (t, p)
            for t in sorted(subscribers, key=lambda t: (len(subscribers[t]), t))
            for p in range(topics[t].num_partitions)
            if (t, p) not in owner
        ]
        for tp in unassigned:
            m = min(subscribers[tp[0]], key=lambda m: (len(owned[m]), m))
            owned[m].add(tp)
            owner[tp] = m

        # Local search: move a partition from a member to an eligible one holding at least two
        # fewer. Each move lowers the sum of squared counts, so this terminates; when it stops,
        # members with the same subscriptions differ by at most one.
        moved = True
        while moved:
            moved = False
            for m in sorted(member_ids, key=lambda m: (-len(owned[m]), m)):
                for tp in sorted(owned[m]):
                    target = min(subscribers[tp[0]], key=lambda x: (len(owned[x]), x))
                    if len(owned[m]) - len(owned[target]) >= 2:
                        owned[m].discard(tp)
                        owned[target].add(tp)
                        owner[tp] = target
                        moved = True
        return {m: sorted(tps) for m, tps in owned.items()}


# ---------------------------------------------------------------------------------------------
# range


class RangeAssignor:
    """Per-topic ranges over the subscribed members sorted by member id (Kafka's ``range``)."""

    name = "range"

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        topics: Mapping[str, TopicMetadata],
    ) -> dict[str, Assignment]:
        subs = _subscribed_existing(members, topics)
        member_ids = sorted(members)
        owned: dict[str, list[TP]] = {m: [] for m in member_ids}
        for t in sorted({t for s in subs.values() for t in s}):
            consumers = [m for m in member_ids if t in subs[m]]
            n = topics[t].num_partitions
            per, extra = divmod(n, len(consumers))
            start = 0
            for i, m in enumerate(consumers):
                size = per + (1 if i < extra else 0)
                owned[m].extend((t, p) for p in range(start, start + size))
                start += size
        return _to_result(member_ids, owned, topics)


ASSIGNORS: dict[str, PartitionAssignor] = {
    UniformAssignor.name: UniformAssignor(),
    RangeAssignor.name: RangeAssignor(),
}

DEFAULT_ASSIGNORS: tuple[str, ...] = ("uniform", "range")
