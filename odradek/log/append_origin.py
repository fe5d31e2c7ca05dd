"""Where an append to a partition leader's log comes from (Kafka's ``AppendOrigin``).

Only a client's produce is checked against the idempotent producer's sequence numbers and
answered from the duplicate cache; a coordinator (the group coordinator writing a producer's
transactional offset commits, always with sequence 0, as Kafka's does) is checked for the producer
epoch only.
"""

from __future__ import annotations

import enum


class AppendOrigin(enum.Enum):
    REPLICATION = "replication"
    COORDINATOR = "coordinator"
    CLIENT = "client"
    RAFT_LEADER = "raft_leader"
