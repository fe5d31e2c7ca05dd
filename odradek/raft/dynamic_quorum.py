"""Dynamic quorum (KIP-853) beside the Raft core: the voter set the log says, one voter change at
a time on the leader, and what each node does when the set changes. Sans-I/O.

:class:`DynamicQuorum` owns the :class:`KRaftControlRecordStateMachine`, the leader's pending
voter change (AddRaftVoter / RemoveRaftVoter waiting for their VotersRecord to commit; Kafka's
``LeaderState.addVoterHandlerState`` / ``removeVoterHandlerState``) and the voter's own
UpdateRaftVoter. The core calls it through a few hooks: every append and truncation
(:meth:`DynamicQuorum.on_append` / :meth:`~DynamicQuorum.on_truncate`), a high watermark move
on the leader, a lost leadership, and the voter-change requests and responses.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.protocol.errors import Errors
from odradek.raft import control_records as cr
from odradek.raft.epoch_state import (
    NO_ID,
    CandidateState,
    FollowerState,
    LeaderState,
    ProspectiveState,
    ReplicaState,
    UnattachedState,
)
from odradek.raft.kraft_control_record_state_machine import KRaftControlRecordStateMachine
from odradek.raft.raft_log import LogBatch
from odradek.raft.raft_messages import RaftMessage
from odradek.raft.snapshot import SnapshotError, list_snapshots, read_snapshot_header
from odradek.raft.voter_set import VoterNode, VoterSet

if TYPE_CHECKING:
    from odradek.raft.raft_core import RaftCore

log = logging.getLogger(__name__)

ADD_RAFT_VOTER = 80
REMOVE_RAFT_VOTER = 81
UPDATE_RAFT_VOTER = 82
VOTER_CHANGE_APIS = (ADD_RAFT_VOTER, REMOVE_RAFT_VOTER, UPDATE_RAFT_VOTER)

NONE = int(Errors.NONE)
NOT_LEADER_OR_FOLLOWER = int(Errors.NOT_LEADER_OR_FOLLOWER)
REQUEST_TIMED_OUT = int(Errors.REQUEST_TIMED_OUT)
UNSUPPORTED_VERSION = int(Errors.UNSUPPORTED_VERSION)
INVALID_REQUEST = int(Errors.INVALID_REQUEST)
DUPLICATE_VOTER = int(Errors.DUPLICATE_VOTER)
VOTER_NOT_FOUND = int(Errors.VOTER_NOT_FOUND)
INCONSISTENT_CLUSTER_ID = int(Errors.INCONSISTENT_CLUSTER_ID)
UNKNOWN_SERVER_ERROR = int(Errors.UNKNOWN_SERVER_ERROR)

KRAFT_VERSION_1 = 1  # the kraft.version that supports reconfiguration
_CHANGE_VERB = {ADD_RAFT_VOTER: "adding voter", REMOVE_RAFT_VOTER: "removing voter"}  # Kafka's words


def voter_change_response(api_key: int, error: int, message: str | None = None) -> dict[str, Any]:
    if api_key == UPDATE_RAFT_VOTER:
        return {"throttle_time_ms": 0, "error_code": error}
    return {"throttle_time_ms": 0, "error_code": error, "error_message": message}


@dataclass
class PendingVoterChange:
    """A voter change the leader appended and answers once it is committed."""

    request: RaftMessage
    epoch: int
    last_offset: int
    deadline_ms: int
    removes_leader: bool = False


class DynamicQuorum:
    def __init__(
        self,
        node_id: int,
        state_machine: KRaftControlRecordStateMachine,
        local_node: VoterNode | None = None,
        controller_listener: str | None = None,
    ) -> None:
        """``local_node``: this controller's key, endpoints and supported kraft.version (None:
        a broker, which never joins the voters)."""
        self.node_id = node_id
        self.state_machine = state_machine
        self.local_node = local_node
        self.controller_listener = controller_listener
        self.pending: PendingVoterChange | None = None
        self._update_sent_epoch = -1

    @classmethod
    def static(cls, node_id: int, voters: frozenset[int] | set[int]) -> DynamicQuorum:
        """``controller.quorum.voters`` only (kraft.version 0, unless the log says more)."""
        static = VoterSet.of(VoterNode(v, None, (), 0, 0) for v in sorted(voters))
        return cls(node_id, KRaftControlRecordStateMachine(static))

    # -- queries --------------------------------------------------------------------------------

    @property
    def voters(self) -> VoterSet:
        return self.state_machine.last_voter_set()

    @property
    def kraft_version(self) -> int:
        return self.state_machine.last_kraft_version()

    @property
    def is_dynamic(self) -> bool:
        """kraft.version 1, or no ``controller.quorum.voters`` (a node that joins a dynamic
        quorum learns the set from the leader)."""
        return self.kraft_version > 0 or self.state_machine.static_voters is None

    def endpoint(self, node_id: int) -> tuple[str, int] | None:
        return self.voters.endpoint(node_id, self.controller_listener)

    # -- the log --------------------------------------------------------------------------------

    def load(self, batches: Sequence[LogBatch]) -> None:
        self.state_machine.update(batches)

    def on_append(self, batch: LogBatch) -> None:
        """A batch appended to the log: the core's states follow at the next
        :meth:`apply_voter_set`."""
        if batch.control:
            self.state_machine.update([batch])

    def on_truncate(self, offset: int) -> None:
        self.state_machine.truncate_new_entries(offset)

    def snapshot_control_records(self, end_offset: int) -> list[tuple[int, dict[str, object]]]:
        """The KRaftVersion and Voters records a snapshot ending at ``end_offset`` holds, as
        Kafka's snapshot writer adds them (kraft.version 1)."""
        sm = self.state_machine
        version = sm.kraft_version_at(end_offset)
        out: list[tuple[int, dict[str, object]]] = [(cr.KRAFT_VERSION, {"version": 0, "k_raft_version": version})]
        voters = sm.voter_set_at(end_offset)
        if voters.voters:
            out.append((cr.KRAFT_VOTERS, voters.to_voters_record()))
        return out

    def start_of_epoch_records(self) -> tuple[Any, ...]:
        """Kafka's ``appendStartOfEpochControlRecords``: with kraft.version 1, a new leader
        writes the KRaftVersion and Voters records into the log when the set comes only from
        the snapshot / bootstrap checkpoint (so it is replicated) or its own endpoints changed."""
        sm = self.state_machine
        if sm.last_kraft_version() < KRAFT_VERSION_1:
            return ()
        voters = sm.last_voter_set()
        offset = sm.last_voter_set_offset()
        updated = voters
        local = self.local_node
        if local is not None and voters.is_voter(local.voter_id, local.directory_id):
            current = voters.get(local.voter_id)
            if current is not None and local.endpoints and current != local:
                updated = voters.update_voter(local) or voters
        if offset is None:
            return ()  # kraft.version 1 without any voter set: nothing to write
        if offset >= 0 and updated is voters:
            return ()
        return (
            cr.ControlRecord(cr.KRAFT_VERSION, {"version": 0, "k_raft_version": sm.last_kraft_version()}),
            cr.ControlRecord(cr.KRAFT_VOTERS, updated.to_voters_record()),
        )

    def election_voters(self, core: RaftCore) -> frozenset[int]:
        """The voters elections count. Normally the set in effect; but a replica that the last,
        not yet committed VotersRecord removed still campaigns with the set before it (Raft
        thesis, 4.2.2: a leader that removed itself and restarted may hold the only complete
        log, and the others wait for its vote). The two sets differ by one voter, so their
        majorities overlap."""
        ids = self.voters.ids
        if self.node_id in ids:
            return ids
        entries = self.state_machine.voter_history()
        if len(entries) < 2:
            return ids
        offset, _ = entries[-1]
        previous = entries[-2][1].ids
        hw = core.high_watermark
        if self.node_id in previous and (hw is None or hw <= offset):
            return previous
        return ids

    def apply_voter_set(self, core: RaftCore, now_ms: int) -> None:
        """Put the voter set in effect in the core's states (after the log or the high
        watermark changed)."""
        ids = self.voters.ids
        electing = self.election_voters(core)
        state = core.quorum.state
        if isinstance(state, LeaderState) and state.voters != ids:
            _leader_set_voters(state, ids)
            # The check-quorum timer counts fetches of the new set from now (a quorum of one
            # never ran it).
            state.fetched_voters.clear()
            state.check_quorum_deadline_ms = now_ms + state.check_quorum_timeout_ms
            if state.local_id in ids and state.update_local_state(core.log.durable_end_offset):
                core.on_leader_high_watermark(state, now_ms)
            elif state._maybe_update_high_watermark():  # noqa: SLF001 - a voter left the count
                core.on_leader_high_watermark(state, now_ms)
        if ids == core.voters and electing == core.quorum.voters:
            return
        if ids != core.voters:
            log.info("node %d: voters %s -> %s", self.node_id, sorted(core.voters), sorted(ids))
        core.voters = ids
        core.quorum.voters = electing
        if isinstance(state, (ProspectiveState, CandidateState)):
            state.voters = electing
            state.granted &= electing | {state.local_id}
            state.rejected &= electing
        elif isinstance(state, UnattachedState) and core.quorum.is_voter:
            if state.deadline_ms - now_ms > 10 * core.config.election_timeout_ms + 1000:
                state.deadline_ms = now_ms + core.quorum.random_election_timeout_ms()

    # -- the leader -----------------------------------------------------------------------------

    def handle_request(self, core: RaftCore, request: RaftMessage, now_ms: int) -> None:
        data = request.data
        api = request.api_key
        cluster_id = data.get("cluster_id")
        if cluster_id is not None and cluster_id != core.cluster_id:
            core.respond(request, voter_change_response(api, INCONSISTENT_CLUSTER_ID))
            return
        state = core.quorum.state
        if not isinstance(state, LeaderState) or core.shutting_down:
            core.respond(request, self._not_leader(core, api))
            return
        from odradek.raft import add_voter_handler, remove_voter_handler, update_voter_handler

        handler = {
            ADD_RAFT_VOTER: add_voter_handler.handle_add_voter_request,
            REMOVE_RAFT_VOTER: remove_voter_handler.handle_remove_voter_request,
            UPDATE_RAFT_VOTER: update_voter_handler.handle_update_voter_request,
        }[api]
        answer = handler(self, core, state, request, now_ms)
        if answer is not None:
            core.respond(request, answer)

    def _not_leader(self, core: RaftCore, api: int) -> dict[str, Any]:
        data = voter_change_response(api, NOT_LEADER_OR_FOLLOWER, "This node is not the leader")
        if api == UPDATE_RAFT_VOTER:
            data["current_leader"] = self.current_leader(core)
        return data

    def current_leader(self, core: RaftCore) -> dict[str, Any]:
        leader = core.quorum.leader_id
        host, port = ("", -1)
        if leader is not None:
            host, port = self.endpoint(leader) or ("", -1)
        return {
            "leader_id": NO_ID if leader is None else leader,
            "leader_epoch": core.epoch,
            "host": host,
            "port": port,
        }

    def check_preconditions(
        self, core: RaftCore, state: LeaderState, api: int, now_ms: int
    ) -> dict[str, Any] | None:
        """The checks every voter change makes first, in Kafka's order; None when they pass."""
        if self.pending is not None:
            return voter_change_response(
                api,
                REQUEST_TIMED_OUT,
                "Request timed out waiting for leader to handle previous voter change request",
            )
        hw = state.high_watermark
        if hw is None:
            return voter_change_response(
                api,
                REQUEST_TIMED_OUT,
                "Request timed out waiting for leader to establish HWM and fence previous voter "
                "changes",
            )
        if self.kraft_version < KRAFT_VERSION_1:
            return voter_change_response(
                api,
                UNSUPPORTED_VERSION,
                f"Cluster doesn't support {_CHANGE_VERB.get(api, 'changing voters')} because the "
                f"kraft.version feature is {self.kraft_version}",
            )
        offset = self.state_machine.last_voter_set_offset()
        if offset is None or offset >= hw:
            return voter_change_response(
                api,
                REQUEST_TIMED_OUT,
                f"Request timed out waiting for voters to commit the latest voter change at "
                f"{offset} with HWM {hw}",
            )
        return None

    def append_voters(self, core: RaftCore, voters: VoterSet, now_ms: int) -> int:
        """Append a VotersRecord on the leader; the set is in effect at once."""
        record = cr.ControlRecord(cr.KRAFT_VOTERS, voters.to_voters_record())
        offset = core.append_control((record,), now_ms)
        self.apply_voter_set(core, now_ms)
        return offset

    def on_high_watermark(self, core: RaftCore, state: LeaderState) -> None:
        pending = self.pending
        hw = state.high_watermark
        if hw is None:
            return
        if pending is not None and hw > pending.last_offset:
            self.pending = None
            core.respond(pending.request, voter_change_response(pending.request.api_key, NONE))
        offset = self.state_machine.last_voter_set_offset()
        committed = offset is None or hw > offset
        if committed and not state.resign_requested and not self.voters.is_voter(self.node_id):
            log.info(
                "node %d: not in the committed voter set %s: resigning epoch %d",
                self.node_id,
                sorted(self.voters.ids),
                state.epoch,
            )
            state.resign_requested = True

    def poll_leader(self, core: RaftCore, now_ms: int) -> None:
        pending = self.pending
        if pending is not None and now_ms >= pending.deadline_ms:
            self.pending = None
            core.respond(
                pending.request,
                voter_change_response(
                    pending.request.api_key,
                    REQUEST_TIMED_OUT,
                    "Request timed out waiting for the voter change to commit",
                ),
            )

    def on_leadership_lost(self, core: RaftCore) -> None:
        pending, self.pending = self.pending, None
        if pending is not None:
            core.respond(pending.request, self._not_leader(core, pending.request.api_key))

    # -- a voter updating its own endpoints ------------------------------------------------------

    def update_voter_request(self, core: RaftCore) -> dict[str, Any] | None:
        """UpdateRaftVoter for the leader, when this voter's endpoints or supported versions
        differ from what the voter set says (once per epoch; Kafka's
        ``maybeSendUpdateVoterRequest``)."""
        state = core.quorum.state
        local = self.local_node
        if (
            local is None
            or not local.endpoints
            or not isinstance(state, FollowerState)
            or not state.has_fetched_from_leader
            or self._update_sent_epoch == state.epoch
            or self.kraft_version < KRAFT_VERSION_1
        ):
            return None
        current = self.voters.get(local.voter_id)
        if current is None or not current.is_key(local.voter_id, local.directory_id):
            return None
        if current.endpoints == local.endpoints and (
            current.min_kraft_version,
            current.max_kraft_version,
        ) == (local.min_kraft_version, local.max_kraft_version):
            return None
        self._update_sent_epoch = state.epoch
        return {
            "cluster_id": core.cluster_id,
            "current_leader_epoch": state.epoch,
            "voter_id": local.voter_id,
            "voter_directory_id": local.directory_id or uuid.UUID(int=0),
            "listeners": [{"name": n, "host": h, "port": p} for n, h, p in local.endpoints],
            "k_raft_version_feature": {
                "min_supported_version": local.min_kraft_version,
                "max_supported_version": local.max_kraft_version,
            },
        }

    def handle_update_voter_response(self, source: int, data: dict[str, Any]) -> bool:
        error = int(data.get("error_code", NONE))
        if error != NONE:
            log.warning("node %d: UpdateRaftVoter to %d failed with error %d", self.node_id, source, error)
            self._update_sent_epoch = -1  # try again in this epoch
        return error == NONE


def _leader_set_voters(state: LeaderState, ids: frozenset[int]) -> None:
    """The leader's replica states follow the voter set: a new voter keeps what it had as an
    observer, a removed one is tracked as an observer."""
    old = state.voters
    for removed in old - ids:
        replica = state.voter_states.pop(removed, None)
        if replica is not None and removed != state.local_id:
            state.observer_states[removed] = replica
        state.acknowledged.discard(removed)
        state.fetched_voters.discard(removed)
    for added in ids - old:
        replica = state.observer_states.pop(added, None) or ReplicaState(added)
        state.voter_states[added] = replica
    state.voters = ids


def snapshot_control(log_dir: str) -> tuple[int, VoterSet | None]:
    """kraft.version and voter set of the newest snapshot (the bootstrap checkpoint included)."""
    for sid in reversed(list_snapshots(log_dir)):
        try:
            header = read_snapshot_header(os.path.join(log_dir, sid.filename))
        except (SnapshotError, OSError) as e:
            log.warning("Cannot read the control records of snapshot %s: %s", sid, e)
            continue
        version, voters = 0, None
        for kind, fields in header.control:
            if kind == cr.KRAFT_VERSION:
                version = int(fields["k_raft_version"])
            elif kind == cr.KRAFT_VOTERS:
                try:
                    voters = VoterSet.from_voters_record(fields)
                except (KeyError, TypeError, ValueError) as e:
                    log.warning("Invalid VotersRecord in snapshot %s: %s", sid, e)
        return version, voters
    return 0, None
