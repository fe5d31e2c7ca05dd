"""The messages the Raft core exchanges, as the plain dicts the generated protocol definitions
(``odradek/protocol/messages/generated/{vote,begin_quorum_epoch,end_quorum_epoch,fetch,
describe_quorum}.py``) encode, so the driver hands ``data`` straight to the codec.

Two fields go beyond the generated versions: Vote's ``pre_vote`` (KIP-996, Vote v2; the
generated Vote stops at v1, whose encoder ignores the extra key) and Fetch's ``records``, which
the core fills with :class:`~odradek.raft.raft_log.LogBatch` objects for the driver to encode
as record batches (and decodes back into ``LogBatch`` on the way in).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from odradek.protocol.errors import Errors
from odradek.raft.epoch_state import LeaderState, ReplicaState
from odradek.raft.raft_log import LogBatch, OffsetAndEpoch

FETCH = 1
VOTE = 52
BEGIN_QUORUM_EPOCH = 53
END_QUORUM_EPOCH = 54
DESCRIBE_QUORUM = 55
FETCH_SNAPSHOT = 59

API_NAMES = {
    FETCH: "Fetch",
    VOTE: "Vote",
    BEGIN_QUORUM_EPOCH: "BeginQuorumEpoch",
    END_QUORUM_EPOCH: "EndQuorumEpoch",
    DESCRIBE_QUORUM: "DescribeQuorum",
    FETCH_SNAPSHOT: "FetchSnapshot",
}

METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's Uuid.METADATA_TOPIC_ID (AAAAAAAAAAAAAAAAAAAAAQ)
METADATA_PARTITION = 0
FETCH_MAX_WAIT_MS = 500  # Kafka's KafkaRaftClient.FETCH_MAX_WAIT_MS
FETCH_MAX_BYTES = 8 * 1024 * 1024
NO_ID = -1

NONE = int(Errors.NONE)
FENCED_LEADER_EPOCH = int(Errors.FENCED_LEADER_EPOCH)
UNKNOWN_LEADER_EPOCH = int(Errors.UNKNOWN_LEADER_EPOCH)
NOT_LEADER_OR_FOLLOWER = int(Errors.NOT_LEADER_OR_FOLLOWER)
BROKER_NOT_AVAILABLE = int(Errors.BROKER_NOT_AVAILABLE)
UNSUPPORTED_VERSION = int(Errors.UNSUPPORTED_VERSION)
REQUEST_TIMED_OUT = int(Errors.REQUEST_TIMED_OUT)
INVALID_REQUEST = int(Errors.INVALID_REQUEST)
INCONSISTENT_VOTER_SET = int(Errors.INCONSISTENT_VOTER_SET)
INCONSISTENT_CLUSTER_ID = int(Errors.INCONSISTENT_CLUSTER_ID)
UNKNOWN_TOPIC_OR_PARTITION = int(Errors.UNKNOWN_TOPIC_OR_PARTITION)
SNAPSHOT_NOT_FOUND = int(Errors.SNAPSHOT_NOT_FOUND)
POSITION_OUT_OF_RANGE = int(Errors.POSITION_OUT_OF_RANGE)

Data = dict[str, Any]


@dataclass(frozen=True)
class RaftMessage:
    """A request or a response between two nodes. A response carries the correlation id of its
    request; the driver matches them on the wire."""

    source: int
    destination: int
    api_key: int
    correlation_id: int
    data: Data
    is_response: bool = False

    def __repr__(self) -> str:
        kind = "response" if self.is_response else "request"
        return (
            f"{API_NAMES.get(self.api_key, self.api_key)} {kind} {self.source}->{self.destination} "
            f"#{self.correlation_id}"
        )


def single_partition(data: Data, topics_key: str = "topics") -> Data | None:
    """The one partition of a request or response on ``__cluster_metadata``, else None."""
    topics = data.get(topics_key)
    if not isinstance(topics, list) or len(topics) != 1 or not isinstance(topics[0], dict):
        return None
    topic = topics[0]
    name = topic.get("topic_name", topic.get("topic", topic.get("name")))
    if name != METADATA_TOPIC and topic.get("topic_id") != METADATA_TOPIC_ID:
        return None
    partitions = topic.get("partitions")
    if not isinstance(partitions, list) or len(partitions) != 1:
        return None
    partition = partitions[0]
    if not isinstance(partition, dict):
        return None
    index = partition.get("partition_index", partition.get("partition", partition.get("index")))
    return partition if index == METADATA_PARTITION else None


def _topics(partition: Data) -> list[Data]:
    return [{"topic_name": METADATA_TOPIC, "partitions": [partition]}]


# -- Vote -------------------------------------------------------------------------------------


def vote_request(
    cluster_id: str,
    candidate_id: int,
    epoch: int,
    last: OffsetAndEpoch,
    voter_id: int,
    pre_vote: bool,
) -> Data:
    partition = {
        "partition_index": METADATA_PARTITION,
        "candidate_epoch": epoch,
        "candidate_id": candidate_id,
        "candidate_directory_id": uuid.UUID(int=0),
        "voter_directory_id": uuid.UUID(int=0),
        "last_offset_epoch": last.epoch,
        "last_offset": last.offset,
        "pre_vote": pre_vote,
    }
    return {"cluster_id": cluster_id, "voter_id": voter_id, "topics": _topics(partition)}


def vote_response(
    error: int, epoch: int, leader_id: int, granted: bool, top_error: int = 0
) -> Data:
    if top_error:
        return {"error_code": top_error, "topics": [], "node_endpoints": []}
    partition = {
        "partition_index": METADATA_PARTITION,
        "error_code": error,
        "leader_id": leader_id,
        "leader_epoch": epoch,
        "vote_granted": granted,
    }
    return {"error_code": 0, "topics": _topics(partition), "node_endpoints": []}


# -- BeginQuorumEpoch / EndQuorumEpoch ---------------------------------------------------------


def begin_quorum_epoch_request(cluster_id: str, leader_id: int, epoch: int, voter_id: int) -> Data:
    partition = {
        "partition_index": METADATA_PARTITION,
        "voter_directory_id": uuid.UUID(int=0),
        "leader_id": leader_id,
        "leader_epoch": epoch,
    }
    return {
        "cluster_id": cluster_id,
        "voter_id": voter_id,
        "topics": _topics(partition),
        "leader_endpoints": [],
    }


def end_quorum_epoch_request(
    cluster_id: str, leader_id: int, epoch: int, preferred_successors: list[int]
) -> Data:
    partition = {
        "partition_index": METADATA_PARTITION,
        "leader_id": leader_id,
        "leader_epoch": epoch,
        "preferred_successors": list(preferred_successors),
        "preferred_candidates": [
            {"candidate_id": s, "candidate_directory_id": uuid.UUID(int=0)}
            for s in preferred_successors
        ],
    }
    return {"cluster_id": cluster_id, "topics": _topics(partition), "leader_endpoints": []}


def quorum_epoch_response(error: int, epoch: int, leader_id: int, top_error: int = 0) -> Data:
    """BeginQuorumEpoch and EndQuorumEpoch responses have the same shape."""
    if top_error:
        return {"error_code": top_error, "topics": [], "node_endpoints": []}
    partition = {
        "partition_index": METADATA_PARTITION,
        "error_code": error,
        "leader_id": leader_id,
        "leader_epoch": epoch,
    }
    return {"error_code": 0, "topics": _topics(partition), "node_endpoints": []}


def preferred_successors(partition: Data) -> list[int]:
    candidates = partition.get("preferred_candidates")
    if isinstance(candidates, list) and candidates:
        return [
            int(c["candidate_id"])
            for c in candidates
            if isinstance(c, dict) and "candidate_id" in c
        ]
    successors = partition.get("preferred_successors")
    return [int(s) for s in successors] if isinstance(successors, list) else []


# -- Fetch ------------------------------------------------------------------------------------


def fetch_request(
    cluster_id: str, replica_id: int, epoch: int, fetch_offset: int, last_fetched_epoch: int
) -> Data:
    partition = {
        "partition": METADATA_PARTITION,
        "current_leader_epoch": epoch,
        "fetch_offset": fetch_offset,
        "last_fetched_epoch": last_fetched_epoch,
        "log_start_offset": 0,
        "partition_max_bytes": FETCH_MAX_BYTES,
    }
    return {
        "cluster_id": cluster_id,
        "replica_id": replica_id,
        "replica_state": {"replica_id": replica_id, "replica_epoch": -1},
        "max_wait_ms": FETCH_MAX_WAIT_MS,
        "min_bytes": 0,
        "max_bytes": FETCH_MAX_BYTES,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {"topic": METADATA_TOPIC, "topic_id": METADATA_TOPIC_ID, "partitions": [partition]}
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def fetch_replica_id(data: Data) -> int:
    state = data.get("replica_state")
    if (
        isinstance(state, dict)
        and isinstance(state.get("replica_id"), int)
        and state["replica_id"] >= 0
    ):
        return int(state["replica_id"])
    replica = data.get("replica_id", NO_ID)
    return int(replica) if isinstance(replica, int) else NO_ID


def fetch_response(
    error: int,
    epoch: int,
    leader_id: int,
    high_watermark: int,
    records: list[LogBatch] | None = None,
    diverging: OffsetAndEpoch | None = None,
    top_error: int = 0,
    snapshot_id: OffsetAndEpoch | None = None,
) -> Data:
    """``snapshot_id``: the follower must fetch this snapshot (FetchSnapshot) first."""
    if top_error:
        return {
            "throttle_time_ms": 0,
            "error_code": top_error,
            "session_id": 0,
            "responses": [],
            "node_endpoints": [],
        }
    partition = {
        "partition_index": METADATA_PARTITION,
        "error_code": error,
        "high_watermark": high_watermark,
        "last_stable_offset": high_watermark,
        "log_start_offset": 0,
        "diverging_epoch": {
            "epoch": diverging.epoch if diverging else -1,
            "end_offset": diverging.offset if diverging else -1,
        },
        "current_leader": {"leader_id": leader_id, "leader_epoch": epoch},
        "snapshot_id": {
            "end_offset": snapshot_id.offset if snapshot_id else -1,
            "epoch": snapshot_id.epoch if snapshot_id else -1,
        },
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": records or [],
    }
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [
            {"topic": METADATA_TOPIC, "topic_id": METADATA_TOPIC_ID, "partitions": [partition]}
        ],
        "node_endpoints": [],
    }


# -- DescribeQuorum ---------------------------------------------------------------------------


def describe_quorum_response(
    error: int,
    leader_id: int = NO_ID,
    epoch: int = -1,
    high_watermark: int = -1,
    voters: list[Data] | None = None,
    observers: list[Data] | None = None,
) -> Data:
    partition = {
        "partition_index": METADATA_PARTITION,
        "error_code": error,
        "error_message": None,
        "leader_id": leader_id,
        "leader_epoch": epoch,
        "high_watermark": high_watermark,
        "current_voters": voters or [],
        "observers": observers or [],
    }
    return {"error_code": 0, "error_message": None, "topics": _topics(partition), "nodes": []}


def describe_quorum_from_leader(state: LeaderState, log_end_offset: int, now_ms: int) -> Data:
    """The leader's DescribeQuorum answer: every voter's and observer's end offset and times."""

    def replica(s: ReplicaState, is_local: bool) -> Data:
        end = log_end_offset if is_local else s.end_offset
        return {
            "replica_id": s.replica_id,
            "replica_directory_id": None,
            "log_end_offset": -1 if end is None else end,
            "last_fetch_timestamp": now_ms if is_local else s.last_fetch_ms,
            "last_caught_up_timestamp": now_ms if is_local else s.last_caught_up_ms,
        }

    return describe_quorum_response(
        0,
        state.local_id,
        state.epoch,
        -1 if state.high_watermark is None else state.high_watermark,
        [replica(s, s.replica_id == state.local_id) for _, s in sorted(state.voter_states.items())],
        [replica(s, False) for _, s in sorted(state.observer_states.items())],
    )


def leader_change_message(leader_id: int, voters: frozenset[int], granting: frozenset[int]) -> Data:
    """Kafka's LeaderChangeMessage control record (raft-records/LeaderChangeMessage.json)."""
    return {
        "version": 0,
        "leader_id": leader_id,
        "voters": [{"voter_id": v} for v in sorted(voters)],
        "granting_voters": [{"voter_id": v} for v in sorted(granting)],
    }
