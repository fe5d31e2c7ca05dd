"""RemoveRaftVoter on the leader (KIP-853; Kafka's ``RemoveVoterHandler``).

The same one-change-at-a-time checks as AddRaftVoter; a voter not in the set (by id and
directory id) fails with VOTER_NOT_FOUND. The leader appends the VotersRecord without the voter
(in effect at once) and answers once it is committed, or REQUEST_TIMED_OUT after
``controller.quorum.request.timeout.ms``. A leader that removed itself resigns once the
record is committed (:meth:`DynamicQuorum.on_high_watermark`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.raft.dynamic_quorum import (
    INVALID_REQUEST,
    REMOVE_RAFT_VOTER,
    VOTER_NOT_FOUND,
    DynamicQuorum,
    PendingVoterChange,
    voter_change_response,
)
from odradek.raft.epoch_state import LeaderState
from odradek.raft.raft_messages import RaftMessage
from odradek.raft.voter_set import VoterNode

if TYPE_CHECKING:
    from odradek.raft.raft_core import RaftCore


def handle_remove_voter_request(
    dq: DynamicQuorum, core: RaftCore, state: LeaderState, request: RaftMessage, now_ms: int
) -> dict[str, Any] | None:
    data = request.data
    voter_id = int(data["voter_id"])
    try:
        directory_id = VoterNode.from_listeners(voter_id, data.get("voter_directory_id"), []).directory_id
    except ValueError as e:
        return voter_change_response(REMOVE_RAFT_VOTER, INVALID_REQUEST, str(e))
    if voter_id < 0 or directory_id is None:
        return voter_change_response(
            REMOVE_RAFT_VOTER,
            INVALID_REQUEST,
            f"Remove voter request didn't include a valid voter id and directory id "
            f"({voter_id}, {data.get('voter_directory_id')})",
        )
    error = dq.check_preconditions(core, state, REMOVE_RAFT_VOTER, now_ms)
    if error is not None:
        return error
    voters = dq.voters
    new_voters = voters.remove_voter(voter_id, directory_id)
    if new_voters is None:
        return voter_change_response(
            REMOVE_RAFT_VOTER,
            VOTER_NOT_FOUND,
            f"Cannot remove voter ReplicaKey(id={voter_id}, directoryId={directory_id}) from the "
            f"set of voters {sorted(voters.ids)}",
        )
    offset = dq.append_voters(core, new_voters, now_ms)
    deadline = now_ms + core.config.request_timeout_ms
    dq.pending = PendingVoterChange(request, state.epoch, offset, deadline, voter_id == dq.node_id)
    return None
