"""Where an append to a partition log comes from (Kafka's AppendOrigin): it decides what the
log validates."""

from __future__ import annotations

import enum


class AppendOrigin(enum.Enum):
    """``CLIENT``: a produce request (sequences checked, duplicates answered, control batches
    refused). ``COORDINATOR``: the group or transaction coordinator (the only origin that may
    append COMMIT/ABORT markers; producer and coordinator epochs checked, no sequences).
    ``REPLICATION``: a follower taking the leader's batches (nothing refused).
    ``RAFT_LEADER``: the KRaft metadata log (its own control batches)."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"
    RAFT_LEADER = "raft_leader"
