"""Replica placement: Kafka's ``AdminUtils.assignReplicasToBrokers``, pure and deterministic
given its random source.

Rack-unaware: the first replica of each partition goes round-robin over the broker list from a
start index; the others follow with a shift that grows by one each time the partitions wrap the
broker list. Rack-aware (every broker has a rack): the same round-robin over a rack-alternated
broker list, a follower skipped while its rack (or the broker) already holds a replica and some
rack (or broker) holds none. Errors are Kafka's exceptions with Kafka's messages.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from odradek.protocol.errors import Errors


@dataclass(frozen=True)
class BrokerMetadata:
    """A broker as placement sees it (Kafka's ``BrokerMetadata``: id and optional rack)."""

    id: int
    rack: str | None = None


class PlacementError(Exception):
    """A placement Kafka refuses: ``error`` is the Kafka error code to answer with."""

    def __init__(self, error: int, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def assign_replicas_to_brokers(
    brokers: Sequence[BrokerMetadata],
    n_partitions: int,
    replication_factor: int,
    fixed_start_index: int = -1,
    start_partition_id: int = -1,
    rng: random.Random | None = None,
) -> dict[int, list[int]]:
    """Partition id → replica ids. ``fixed_start_index`` < 0 draws the start index and the first
    follower shift from ``rng``; ``start_partition_id`` < 0 numbers partitions from 0."""
    if n_partitions <= 0:
        raise PlacementError(Errors.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise PlacementError(Errors.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise PlacementError(
            Errors.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.",
        )
    r = rng if rng is not None else random.Random()
    if all(b.rack is None for b in brokers):
        return _assign_rack_unaware(
            n_partitions, replication_factor, [b.id for b in brokers], fixed_start_index, start_partition_id, r
        )
    rack_of: dict[int, str] = {}
    for b in brokers:
        if b.rack is None:
            # Kafka's AdminOperationException; the admin path answers INVALID_REPLICA_ASSIGNMENT.
            raise PlacementError(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                "Not all brokers have rack information for replica rack aware assignment.",
            )
        rack_of[b.id] = b.rack
    return _assign_rack_aware(n_partitions, replication_factor, rack_of, fixed_start_index, start_partition_id, r)


def replica_index(first_replica_index: int, second_replica_shift: int, replica: int, n_brokers: int) -> int:
    """Index of follower ``replica`` (0-based) in the broker list: never the leader's index."""
    shift = 1 + (second_replica_shift + replica) % (n_brokers - 1)
    return (first_replica_index + shift) % n_brokers


def _partition_starts(
    n: int, n_partitions: int, fixed_start_index: int, start_partition_id: int, rng: random.Random
) -> Iterator[tuple[int, int, int]]:
    """(partition id, index of its leader in the broker list, follower shift) for each new
    partition: a random (or fixed) start index, and a shift that grows by one each time the
    partition ids wrap around the broker list, as AdminUtils walks them."""
    if fixed_start_index >= 0:
        start_index, next_shift = fixed_start_index, fixed_start_index
    else:
        start_index, next_shift = rng.randrange(n), rng.randrange(n)
    pid = max(0, start_partition_id)
    for _ in range(n_partitions):
        if pid > 0 and pid % n == 0:
            next_shift += 1
        yield pid, (pid + start_index) % n, next_shift
        pid += 1


def _assign_rack_unaware(
    n_partitions: int,
    rf: int,
    broker_list: list[int],
    fixed_start_index: int,
    start_partition_id: int,
    rng: random.Random,
) -> dict[int, list[int]]:
    n = len(broker_list)
    out: dict[int, list[int]] = {}
    for pid, first, shift in _partition_starts(n, n_partitions, fixed_start_index, start_partition_id, rng):
        replicas = [broker_list[first]]
        replicas.extend(broker_list[replica_index(first, shift, j, n)] for j in range(rf - 1))
        out[pid] = replicas
    return out


def rack_alternated_broker_list(rack_of: Mapping[int, str]) -> list[int]:
    """Brokers taken one per rack in turn, racks sorted, each rack's brokers sorted by id."""
    by_rack: dict[str, list[int]] = {}
    for b, rack in rack_of.items():
        by_rack.setdefault(rack, []).append(b)
    queues = [sorted(by_rack[rack]) for rack in sorted(by_rack)]
    out: list[int] = []
    depth = 0
    while len(out) < len(rack_of):
        for q in queues:
            if depth < len(q):
                out.append(q[depth])
        depth += 1
    return out


def _assign_rack_aware(
    n_partitions: int,
    rf: int,
    rack_of: Mapping[int, str],
    fixed_start_index: int,
    start_partition_id: int,
    rng: random.Random,
) -> dict[int, list[int]]:
    num_racks = len(set(rack_of.values()))
    arranged = rack_alternated_broker_list(rack_of)
    n = len(arranged)
    out: dict[int, list[int]] = {}
    for pid, first, next_shift in _partition_starts(n, n_partitions, fixed_start_index, start_partition_id, rng):
        leader = arranged[first]
        replicas = [leader]
        racks_with = {rack_of[leader]}
        brokers_with = {leader}
        k = 0
        for _j in range(rf - 1):
            # Terminates: rf <= n, and within n-1 steps of k every other broker is visited.
            while True:
                broker = arranged[replica_index(first, next_shift * num_racks, k, n)]
                rack = rack_of[broker]
                k += 1
                if (rack not in racks_with or len(racks_with) == num_racks) and (
                    broker not in brokers_with or len(brokers_with) == n
                ):
                    replicas.append(broker)
                    racks_with.add(rack)
                    brokers_with.add(broker)
                    break
        out[pid] = replicas
    return out
