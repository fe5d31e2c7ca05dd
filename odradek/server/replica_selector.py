"""Fetch from the closest replica (KIP-392), sans-I/O.

``replica.selector.class`` names the selector the leader asks which replica a consumer should
read from: unset (Kafka's default), the consumer reads from the leader;
``org.apache.kafka.common.replica.RackAwareReplicaSelector``, a consumer whose Fetch (v11+) names
a ``rack_id`` (librdkafka's and the Java client's ``client.rack``) is sent to a replica in its rack
— the leader itself if it is there, else the most caught-up in-sync follower there (by log end
offset, then by how recently it was caught up) — through the response's
``preferred_read_replica``. Only in-sync followers that hold the fetch offset are candidates, as
in Kafka's ReplicaManager.findPreferredReadReplica. ``LeaderSelector`` is Kafka's explicit
"always the leader"; any other class name is refused at start-up (Kafka cannot load it either).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER = "org.apache.kafka.common.replica.LeaderSelector"


@dataclass(frozen=True)
class ReplicaView:
    """One replica as the selector sees it (Kafka's ReplicaView)."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int


class ReplicaSelector(Protocol):
    def select(self, client_rack: str, leader: ReplicaView, replicas: Iterable[ReplicaView]) -> ReplicaView | None:
        """The replica to read from (the leader included), or None for no preference."""
        ...


class LeaderSelector:
    def select(self, client_rack: str, leader: ReplicaView, replicas: Iterable[ReplicaView]) -> ReplicaView | None:
        return leader


class RackAwareReplicaSelector:
    def select(self, client_rack: str, leader: ReplicaView, replicas: Iterable[ReplicaView]) -> ReplicaView | None:
        if not client_rack:
            return leader
        same_rack = [r for r in (leader, *replicas) if r.rack == client_rack]
        if not same_rack or leader in same_rack:
            return leader
        return max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_last_caught_up_ms))


class UnknownReplicaSelector(ValueError):
    pass


def replica_selector(class_name: str | None) -> ReplicaSelector | None:
    """The selector ``replica.selector.class`` names; None when unset (reads stay on the leader)."""
    if not class_name:
        return None
    if class_name == RACK_AWARE:
        return RackAwareReplicaSelector()
    if class_name == LEADER:
        return LeaderSelector()
    raise UnknownReplicaSelector(
        f"replica.selector.class={class_name} is not supported: Odradek has {RACK_AWARE} and {LEADER}"
    )
