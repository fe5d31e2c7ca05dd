"""AddRaftVoter on the leader (KIP-853; Kafka's ``AddVoterHandler``).

One voter change at a time: a request while another is pending, before the leader committed an
offset of its epoch, or while the last VotersRecord is not committed yet fails with
REQUEST_TIMED_OUT; ``kraft.version`` 0 with UNSUPPORTED_VERSION; a voter id already in the set
with DUPLICATE_VOTER. The new voter must be caught up: an observer whose fetches reached the
leader's log end within ``controller.quorum.fetch.timeout.ms`` (else REQUEST_TIMED_OUT). Then
the leader appends a VotersRecord with the new voter, which counts toward the high watermark at
once, and answers once that record is committed (or REQUEST_TIMED_OUT after the request's
``timeout_ms``).

Kafka also sends the new voter an ApiVersions request first to learn the ``kraft.version``
range it supports; Odradek's controllers all support 0-1, so the leader records that range.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from odradek.raft.dynamic_quorum import (
    ADD_RAFT_VOTER,
    DUPLICATE_VOTER,
    INVALID_REQUEST,
    REQUEST_TIMED_OUT,
    DynamicQuorum,
    PendingVoterChange,
    voter_change_response,
)
from odradek.raft.epoch_state import LeaderState
from odradek.raft.raft_messages import RaftMessage
from odradek.raft.voter_set import VoterNode

if TYPE_CHECKING:
    from odradek.raft.raft_core import RaftCore


def is_replica_caught_up(state: LeaderState, replica_id: int, now_ms: int, window_ms: int) -> bool:
    """An observer that fetches and whose fetches reached the leader's end offset (as it was
    at its previous fetch) within ``window_ms``; Kafka's ``isReplicaCaughtUp`` with a window of
    ``controller.quorum.fetch.timeout.ms`` rather than an hour."""
    replica = state.observer_states.get(replica_id)
    return (
        replica is not None
        and replica.last_fetch_ms >= 0
        and replica.last_caught_up_ms >= 0
        and now_ms - replica.last_fetch_ms <= window_ms
        and now_ms - replica.last_caught_up_ms <= window_ms
    )


def handle_add_voter_request(
    dq: DynamicQuorum, core: RaftCore, state: LeaderState, request: RaftMessage, now_ms: int
) -> dict[str, Any] | None:
    data = request.data
    voter_id = int(data["voter_id"])
    try:
        node = VoterNode.from_listeners(voter_id, data.get("voter_directory_id"), data["listeners"])
    except (KeyError, TypeError, ValueError) as e:
        return voter_change_response(ADD_RAFT_VOTER, INVALID_REQUEST, f"Invalid AddRaftVoter: {e}")
    if voter_id < 0 or node.directory_id is None:
        return voter_change_response(
            ADD_RAFT_VOTER,
            INVALID_REQUEST,
            f"Add voter request didn't include a valid voter id and directory id ({voter_id}, "
            f"{data.get('voter_directory_id')})",
        )
    if dq.controller_listener is not None and node.endpoint(dq.controller_listener) is None:
        return voter_change_response(
            ADD_RAFT_VOTER,
            INVALID_REQUEST,
            f"Add voter request didn't include the endpoint ({dq.controller_listener}) for "
            f"voter {voter_id}",
        )
    error = dq.check_preconditions(core, state, ADD_RAFT_VOTER, now_ms)
    if error is not None:
        return error
    voters = dq.voters
    if voter_id in voters.ids:
        return voter_change_response(
            ADD_RAFT_VOTER,
            DUPLICATE_VOTER,
            f"The voter id for ReplicaKey(id={voter_id}, directoryId={node.directory_id}) is "
            f"already part of the set of voters {sorted(voters.ids)}.",
        )
    if not is_replica_caught_up(state, voter_id, now_ms, core.config.fetch_timeout_ms):
        return voter_change_response(
            ADD_RAFT_VOTER,
            REQUEST_TIMED_OUT,
            f"Aborted add voter operation for ReplicaKey(id={voter_id}, "
            f"directoryId={node.directory_id}) since it is lagging behind",
        )
    new_voters = voters.add_voter(node)
    assert new_voters is not None
    offset = dq.append_voters(core, new_voters, now_ms)
    timeout = int(data.get("timeout_ms") or core.config.request_timeout_ms)
    dq.pending = PendingVoterChange(request, state.epoch, offset, now_ms + max(timeout, 1))
    return None
