"""UpdateRaftVoter on the leader (KIP-853; Kafka's ``UpdateVoterHandler``): a voter tells the
leader its current endpoints and supported ``kraft.version`` range after it starts.

The one-change-at-a-time checks as AddRaftVoter; no endpoint on the controller listener or a
range that excludes the finalized ``kraft.version`` is INVALID_REQUEST; an unknown voter (id and
directory id) VOTER_NOT_FOUND. The leader appends the updated VotersRecord and answers at once,
as Kafka does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.raft.dynamic_quorum import (
    INVALID_REQUEST,
    NONE,
    UPDATE_RAFT_VOTER,
    VOTER_NOT_FOUND,
    DynamicQuorum,
    voter_change_response,
)
from odradek.raft.epoch_state import LeaderState
from odradek.raft.raft_messages import RaftMessage
from odradek.raft.voter_set import VoterNode

if TYPE_CHECKING:
    from odradek.raft.raft_core import RaftCore


def handle_update_voter_request(
    dq: DynamicQuorum, core: RaftCore, state: LeaderState, request: RaftMessage, now_ms: int
) -> dict[str, Any] | None:
    data = request.data

    def answer(error: int) -> dict[str, Any]:
        out = voter_change_response(UPDATE_RAFT_VOTER, error)
        out["current_leader"] = dq.current_leader(core)
        return out

    feature = data.get("k_raft_version_feature") or {}
    try:
        node = VoterNode.from_listeners(
            int(data["voter_id"]),
            data.get("voter_directory_id"),
            data["listeners"],
            int(feature.get("min_supported_version", 0)),
            int(feature.get("max_supported_version", 0)),
        )
    except (KeyError, TypeError, ValueError):
        return answer(INVALID_REQUEST)
    if node.voter_id < 0 or node.directory_id is None:
        return answer(INVALID_REQUEST)
    if int(data.get("current_leader_epoch", state.epoch)) != state.epoch:
        return answer(INVALID_REQUEST)
    error = dq.check_preconditions(core, state, UPDATE_RAFT_VOTER, now_ms)
    if error is not None:
        return answer(int(error["error_code"]))
    if dq.controller_listener is not None and node.endpoint(dq.controller_listener) is None:
        return answer(INVALID_REQUEST)
    if not node.min_kraft_version <= dq.kraft_version <= node.max_kraft_version:
        return answer(INVALID_REQUEST)
    new_voters = dq.voters.update_voter(node)
    if new_voters is None:
        return answer(VOTER_NOT_FOUND)
    if new_voters != dq.voters:
        dq.append_voters(core, new_voters, now_ms)
    return answer(NONE)
