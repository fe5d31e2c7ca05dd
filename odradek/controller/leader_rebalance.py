"""Automatic preferred-leader balancing (``auto.leader.rebalance.enable``), sans-I/O.

Kafka's KRaft controller keeps the set of *imbalanced* partitions (led by another broker than
their preferred replica, the first of the assignment) and, every
``leader.imbalance.check.interval.seconds`` while the set is not empty, elects the preferred
replica of those where it is active and in the ISR (``maybeBalancePartitionLeaders``, at most
``MAX_ELECTIONS_PER_IMBALANCE`` per run). Odradek also applies the ZooKeeper controller's
``leader.imbalance.per.broker.percentage`` (which Kafka's KRaft controller accepts but ignores):
only the partitions of a preferred broker whose imbalance ratio (the partitions it should lead
but does not, over the partitions it should lead) is above the percentage are moved.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from odradek.controller.broker_partition_changes import active_brokers
from odradek.controller.partition_change_builder import NO_LEADER, Election, PartitionChangeBuilder
from odradek.metadata.image import MetadataImage, PartitionRegistration

log = logging.getLogger(__name__)

MetadataRecord = tuple[str, dict[str, Any]]

MAX_ELECTIONS_PER_IMBALANCE = 1_000


def is_imbalanced(p: PartitionRegistration) -> bool:
    """Led, or leaderless, by another broker than its preferred replica."""
    return bool(p.replicas) and p.leader != p.replicas[0]


def imbalanced_partitions(image: MetadataImage) -> list[tuple[str, int]]:
    return [
        (name, pid)
        for name in sorted(image.topics_by_name)
        for pid, p in sorted(image.topics_by_name[name].partitions.items())
        if is_imbalanced(p)
    ]


def imbalance_ratios(image: MetadataImage) -> dict[int, float]:
    """Per preferred broker: the share of the partitions it should lead that it does not."""
    total: dict[int, int] = defaultdict(int)
    off: dict[int, int] = defaultdict(int)
    for t in image.topics_by_name.values():
        for p in t.partitions.values():
            if not p.replicas:
                continue
            total[p.replicas[0]] += 1
            if p.leader != p.replicas[0]:
                off[p.replicas[0]] += 1
    return {b: off[b] / n for b, n in total.items()}


def maybe_balance_partition_leaders(
    image: MetadataImage, imbalance_percentage: int = 10, max_elections: int = MAX_ELECTIONS_PER_IMBALANCE
) -> list[MetadataRecord]:
    """The preferred elections of one balancing run (empty: nothing can move now)."""
    live = active_brokers(image)
    ratios = imbalance_ratios(image)
    records: list[MetadataRecord] = []
    for name, pid in imbalanced_partitions(image):
        if len(records) >= max_elections:
            break
        t = image.topics_by_name[name]
        p = t.partitions[pid]
        preferred = p.replicas[0]
        if ratios.get(preferred, 0.0) * 100 <= imbalance_percentage:
            continue
        if preferred not in live or preferred not in p.isr:
            continue
        builder = PartitionChangeBuilder(p, t.topic_id, pid, live.__contains__).set_election(Election.PREFERRED)
        record = builder.build()
        if record is None or record.get("leader") != preferred:
            continue
        log.info(
            "Auto leader balancing: broker %d (preferred) leads %s-%d again (was %s)",
            preferred, name, pid, p.leader if p.leader != NO_LEADER else "none",
        )
        records.append(("PartitionChangeRecord", record))
    return records
