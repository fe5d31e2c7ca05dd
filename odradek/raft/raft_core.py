"""The KRaft protocol as a sans-I/O core (Kafka's ``KafkaRaftClient`` without threads, sockets,
clocks or files), in the Step/Ready shape of etcd-raft.

Inputs: :meth:`RaftCore.handle` (a request or response from another node), :meth:`~RaftCore.tick`
(time passes), :meth:`~RaftCore.propose` (the state machine appends on the leader),
:meth:`~RaftCore.durable` (the caller made the log durable up to an offset),
:meth:`~RaftCore.begin_shutdown`. Every input takes ``now_ms``.

Output: :meth:`~RaftCore.ready` drains a :class:`Ready`. The caller must act on it in order:

1. persist ``election`` in the ``quorum-state`` file (fsync) — before anything else leaves;
2. apply ``log_ops`` (truncations and appends) to the ``__cluster_metadata`` log, fsync when it
   likes, then call :meth:`~RaftCore.durable` with the end offset it made durable;
3. send ``messages`` (responses carry their request's correlation id);
4. hand ``committed`` batches and ``leader_changes`` to the listeners.

Followers pull: a voter fetches only once what it has is durable, so the fetch offset a leader
sees is durable on that voter; the leader counts its own end offset only as far as it is
durable. The high watermark is what a majority of voters has (see
:class:`~odradek.raft.epoch_state.LeaderState`).

The Fetch paths (both ends) are in :mod:`odradek.raft.fetch_paths`, a mixin of :class:`RaftCore`.
"""

from __future__ import annotations

import logging
import random as _random
from collections.abc import Sequence
from typing import Any

from odradek.raft import raft_messages as msgs
from odradek.raft.dynamic_quorum import (
    UPDATE_RAFT_VOTER,
    VOTER_CHANGE_APIS,
    DynamicQuorum,
    voter_change_response,
)
from odradek.raft.epoch_state import (
    NO_ID,
    CandidateState,
    Election,
    FollowerState,
    LeaderState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
)
from odradek.raft.fetch_paths import FetchPaths
from odradek.raft.quorum import QuorumConfig, QuorumState
from odradek.raft.raft_log import LogBatch, OffsetAndEpoch, RaftLog
from odradek.raft.raft_messages import (
    BROKER_NOT_AVAILABLE,
    FENCED_LEADER_EPOCH,
    INCONSISTENT_CLUSTER_ID,
    INCONSISTENT_VOTER_SET,
    INVALID_REQUEST,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    UNKNOWN_LEADER_EPOCH,
    UNKNOWN_TOPIC_OR_PARTITION,
    RaftMessage,
)
from odradek.raft.raft_ready import (
    Append,
    LeaderChange,
    NotLeader,
    Ready,
    SnapshotInstall,
    Truncate,
)
from odradek.raft.request_manager import FetchPurgatory, PeerFailureLog, RequestManager
from odradek.raft.snapshot_fetch import (
    FETCH_SNAPSHOT_MAX_BYTES,
    SnapshotCatalog,
    SnapshotFetch,
    fetch_snapshot_response,
)

log = logging.getLogger(__name__)

MAX_FETCH_BATCHES = 64


class RaftCore(FetchPaths):
    def __init__(
        self,
        node_id: int,
        voters: frozenset[int] | set[int],
        cluster_id: str,
        config: QuorumConfig,
        rng: _random.Random,
        now_ms: int,
        election: Election | None = None,
        batches: Sequence[LogBatch] = (),
        max_fetch_batches: int = MAX_FETCH_BATCHES,
        pre_vote: bool = True,
        log_start: OffsetAndEpoch | None = None,
        dynamic: DynamicQuorum | None = None,
        bootstrap_ids: Sequence[int] = (),
    ) -> None:
        """``election`` is what the ``quorum-state`` file holds (None: no file yet),
        ``batches`` the durable log read at start-up, ``log_start`` where it begins when a
        snapshot stands for the records below. ``pre_vote`` False: an election timeout makes
        the node a candidate at once (Kafka 3.9; Vote v0-v1 cannot carry a pre-vote)."""
        self.node_id = node_id
        # KIP-853: the voter set is what the log says (``dynamic``), else the static ``voters``;
        # ``bootstrap_ids`` name controller.quorum.bootstrap.servers for an observer.
        self.dynamic = dynamic if dynamic is not None else DynamicQuorum.static(node_id, voters)
        self.dynamic.load(batches)
        self.voters = self.dynamic.voters.ids
        self.bootstrap_ids = tuple(bootstrap_ids)
        self.cluster_id = cluster_id
        self.config = config
        self.random = rng
        self.log = RaftLog(batches, log_start)
        self.pre_vote = pre_vote
        self.max_fetch_batches = max_fetch_batches  # batches per Fetch response
        self.quorum = QuorumState(node_id, self.voters, config, rng)
        self.requests = RequestManager(config)
        self._ready = Ready()
        self._next_correlation = rng.randrange(1 << 30)
        self.fetch_purgatory = FetchPurgatory()
        # The (epoch, high watermark) last sent to each fetching replica (see _high_watermark_news).
        self._high_watermark_sent: dict[int, tuple[int, int]] = {}
        self.peer_failures = PeerFailureLog(node_id)
        self._high_watermark: int | None = None
        self._next_commit_offset = self.log.start.offset
        self.snapshots = SnapshotCatalog()  # what update_snapshots reports
        self._snapshot_fetch: SnapshotFetch | None = None
        self.snapshot_fetch_max_bytes = FETCH_SNAPSHOT_MAX_BYTES
        self._last_leader_change: LeaderChange | None = None
        self._shutdown_deadline_ms: int | None = None
        self._observer_fetch_index = 0
        self._high_watermark_moved = False
        self.quorum.initialize(election, self.log.last_epoch, now_ms)
        self._fire_leader_change()
        if self.voters == {node_id}:
            # Kafka's initialize: the only voter needs nobody's vote, so it runs at once.
            if isinstance(self.quorum.state, CandidateState):
                self._maybe_transition_forward(now_ms)
            else:
                self._transition_to_candidate(now_ms)
        self._poll(now_ms)

    # -- queries ------------------------------------------------------------------------------

    @property
    def state(self) -> Any:
        return self.quorum.state

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def leader_id(self) -> int | None:
        return self.quorum.leader_id

    def is_leader(self) -> bool:
        return self.quorum.is_leader()

    @property
    def high_watermark(self) -> int | None:
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.end_offset

    def lowest_pending_truncation(self) -> int | None:
        """The lowest offset a truncation not yet drained by :meth:`ready` cuts the log to: a
        caller that made the disk durable for an earlier ``ready`` may report only below it."""
        cuts = [op.offset for op in self._ready.log_ops if isinstance(op, Truncate)]
        cuts += [op.snapshot_id.offset for op in self._ready.log_ops if isinstance(op, SnapshotInstall)]
        return min(cuts) if cuts else None

    # -- inputs -------------------------------------------------------------------------------

    def ready(self) -> Ready:
        ready, self._ready = self._ready, Ready()
        ready.election = self.quorum.take_pending_election()
        return ready

    def tick(self, now_ms: int) -> None:
        self._poll(now_ms)

    def handle(self, message: RaftMessage, now_ms: int) -> None:
        """A message from another node; bad input is answered with Kafka's error, never raised."""
        if message.destination != self.node_id:
            log.warning("node %d: dropping %r addressed to another node", self.node_id, message)
            return
        try:
            if message.is_response:
                self._handle_response(message, now_ms)
            else:
                self._handle_request(message, now_ms)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            log.warning("node %d: malformed %r: %s", self.node_id, message, e)
            if not message.is_response:
                self._respond(message, self._error_response(message.api_key, INVALID_REQUEST))
        self._poll(now_ms)

    def propose(self, epoch: int, records: Sequence[Any], now_ms: int) -> int:
        """Append ``records`` as one batch on the leader of ``epoch``; returns the offset of the
        last one. They are committed once a majority of voters has them durably."""
        state = self.quorum.state
        if not isinstance(state, LeaderState) or state.epoch != epoch or self._shutdown_deadline_ms:
            raise NotLeader(f"node {self.node_id} does not lead epoch {epoch} (epoch {self.epoch})")
        if not records:
            raise ValueError("no records to append")
        batch = LogBatch(self.log.end_offset, epoch, tuple(records), now_ms)
        self._append(batch)
        self._complete_parked_fetches(now_ms)
        return batch.last_offset

    def durable(self, up_to_offset: int, now_ms: int) -> None:
        """The caller fsynced the log up to ``up_to_offset`` (exclusive)."""
        self.log.mark_durable(up_to_offset)
        state = self.quorum.state
        if isinstance(state, LeaderState) and state.update_local_state(self.log.durable_end_offset):
            self._on_leader_high_watermark(state, now_ms)
        self._poll(now_ms)

    def begin_shutdown(self, now_ms: int, timeout_ms: int) -> None:
        """Graceful shutdown: a leader resigns (EndQuorumEpoch to the voters, most caught-up
        first); the node stops starting elections."""
        self._shutdown_deadline_ms = now_ms + timeout_ms
        self._poll(now_ms)

    def is_shutdown_complete(self, now_ms: int) -> bool:
        if self._shutdown_deadline_ms is None:
            return False
        if now_ms >= self._shutdown_deadline_ms:
            return True
        state = self.quorum.state
        if isinstance(state, ResignedState):
            return not state.unacked_voters
        return not isinstance(state, (LeaderState, CandidateState))

    # -- output helpers -----------------------------------------------------------------------

    def _append(self, batch: LogBatch) -> None:
        self.log.append(batch)
        self._ready.log_ops.append(Append(batch))
        self.dynamic.on_append(batch)

    def _truncate(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self._ready.log_ops.append(Truncate(offset))
        self.dynamic.on_truncate(offset)

    # -- for the dynamic quorum (KIP-853) ------------------------------------------------------

    @property
    def shutting_down(self) -> bool:
        return self._shutdown_deadline_ms is not None

    def respond(self, request: RaftMessage, data: dict[str, Any]) -> None:
        self._respond(request, data)

    def append_control(self, records: Sequence[Any], now_ms: int) -> int:
        """Append a control batch on the leader; the offset of its last record."""
        batch = LogBatch(self.log.end_offset, self.epoch, tuple(records), now_ms, control=True)
        self._append(batch)
        self._complete_parked_fetches(now_ms)
        return batch.last_offset

    def on_leader_high_watermark(self, state: LeaderState, now_ms: int) -> None:
        self._on_leader_high_watermark(state, now_ms)

    def _send(self, destination: int, api_key: int, data: dict[str, Any], now_ms: int) -> None:
        self._next_correlation += 1
        self.requests.on_send(destination, self._next_correlation, now_ms)
        self._ready.messages.append(
            RaftMessage(self.node_id, destination, api_key, self._next_correlation, data)
        )

    def _respond(self, request: RaftMessage, data: dict[str, Any]) -> None:
        self._ready.messages.append(
            RaftMessage(
                self.node_id, request.source, request.api_key, request.correlation_id, data, True
            )
        )

    def _fire_leader_change(self) -> None:
        change = LeaderChange(self.quorum.leader_id, self.epoch)
        if change != self._last_leader_change:
            self._last_leader_change = change
            self._ready.leader_changes.append(change)

    def _update_committed(self, high_watermark: int | None) -> None:
        if high_watermark is None:
            return
        if self._high_watermark is None or high_watermark > self._high_watermark:
            self._high_watermark = high_watermark
        end = min(self._high_watermark, self.log.end_offset)
        if isinstance(self.quorum.state, LeaderState):
            self.dynamic.on_high_watermark(self, self.quorum.state)
        if end > self._next_commit_offset:
            self._ready.committed.extend(self.log.batches_between(self._next_commit_offset, end))
            self._next_commit_offset = end

    def _reset_connections(self) -> None:
        self.requests.reset_all()

    def _error_response(self, api_key: int, error: int) -> dict[str, Any]:
        epoch, leader = self.epoch, self.quorum.leader_id_or_nil
        if api_key == msgs.VOTE:
            return msgs.vote_response(NONE, epoch, leader, False, top_error=error)
        if api_key == msgs.FETCH:
            return msgs.fetch_response(NONE, epoch, leader, -1, top_error=error)
        if api_key == msgs.DESCRIBE_QUORUM:
            return msgs.describe_quorum_response(error)
        if api_key == msgs.FETCH_SNAPSHOT:
            return fetch_snapshot_response(error, epoch, leader, top_error=error)
        if api_key in VOTER_CHANGE_APIS:
            return voter_change_response(api_key, error)
        return msgs.quorum_epoch_response(NONE, epoch, leader, top_error=error)

    # -- transitions --------------------------------------------------------------------------

    def _transition_to_unattached(self, epoch: int, now_ms: int) -> None:
        self._fail_parked_fetches()
        self.quorum.transition_to_unattached(epoch, now_ms)
        self._fire_leader_change()
        self._reset_connections()

    def _transition_to_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        self._fail_parked_fetches()
        self.quorum.transition_to_follower(epoch, leader_id, now_ms)
        self._fire_leader_change()
        self._reset_connections()

    def _transition_to_prospective(self, now_ms: int) -> None:
        if not self.pre_vote:
            self._transition_to_candidate(now_ms)
            return
        self.quorum.transition_to_prospective(now_ms)
        log.info("node %d: prospective in epoch %d (pre-vote)", self.node_id, self.epoch)
        self._fire_leader_change()
        self._reset_connections()
        self._maybe_transition_forward(now_ms)

    def _transition_to_candidate(self, now_ms: int) -> None:
        self.quorum.transition_to_candidate(now_ms)
        log.info("node %d: candidate in epoch %d", self.node_id, self.epoch)
        self._fire_leader_change()
        self._reset_connections()
        self._maybe_transition_forward(now_ms)

    def _maybe_transition_forward(self, now_ms: int) -> None:
        state = self.quorum.state
        if isinstance(state, ProspectiveState) and state.is_vote_granted():
            self._transition_to_candidate(now_ms)
        elif isinstance(state, CandidateState) and state.is_vote_granted():
            self._become_leader(now_ms)

    def _become_leader(self, now_ms: int) -> None:
        candidate = self.quorum.state
        assert isinstance(candidate, CandidateState)
        granting = frozenset(candidate.granted)
        state = self.quorum.transition_to_leader(self.log.end_offset, now_ms)
        self._reset_connections()
        self._fire_leader_change()
        log.info(
            "node %d: leader of epoch %d from offset %d",
            self.node_id,
            state.epoch,
            self.log.end_offset,
        )
        # The high watermark moves only once a record of this epoch is committed: write the
        # LeaderChangeMessage control record now so that nothing waits for the next append.
        record = msgs.leader_change_message(self.node_id, self.voters, granting)
        records = (record, *self.dynamic.start_of_epoch_records())
        self._append(LogBatch(self.log.end_offset, state.epoch, records, now_ms, control=True))
        self.dynamic.apply_voter_set(self, now_ms)
        state.update_local_state(self.log.durable_end_offset)

    def _resign(self, now_ms: int) -> None:
        state = self.quorum.state
        assert isinstance(state, LeaderState)
        successors = state.voters_by_descending_end_offset()
        self._fail_parked_fetches()
        self.quorum.transition_to_resigned(successors, now_ms)
        self._reset_connections()
        log.info("node %d: resigned epoch %d, successors %s", self.node_id, self.epoch, successors)

    def _on_leader_high_watermark(self, state: LeaderState, now_ms: int) -> None:
        self._update_committed(state.high_watermark)
        self._complete_parked_fetches(now_ms)

    # -- requests -----------------------------------------------------------------------------

    def _handle_request(self, request: RaftMessage, now_ms: int) -> None:
        data = request.data
        if request.api_key in VOTER_CHANGE_APIS:
            self.dynamic.handle_request(self, request, now_ms)
            return
        if request.api_key == msgs.DESCRIBE_QUORUM:
            self._respond(request, self._describe_quorum(data, now_ms))
            return
        if request.api_key == msgs.FETCH_SNAPSHOT:
            self._handle_fetch_snapshot_request(request, now_ms)
            return
        if request.api_key not in (
            msgs.VOTE,
            msgs.BEGIN_QUORUM_EPOCH,
            msgs.END_QUORUM_EPOCH,
            msgs.FETCH,
        ):
            log.warning("node %d: unexpected request %r", self.node_id, request)
            return
        cluster_id = data.get("cluster_id")
        if cluster_id is not None and cluster_id != self.cluster_id:
            log.warning(
                "node %d: %r from cluster %r, this is %r",
                self.node_id,
                request,
                cluster_id,
                self.cluster_id,
            )
            self._respond(request, self._error_response(request.api_key, INCONSISTENT_CLUSTER_ID))
            return
        partition = msgs.single_partition(data)
        if partition is None:
            self._respond(request, self._error_response(request.api_key, INVALID_REQUEST))
            return
        if request.api_key == msgs.VOTE:
            self._respond(request, self._handle_vote_request(partition, now_ms))
        elif request.api_key == msgs.BEGIN_QUORUM_EPOCH:
            self._respond(request, self._handle_begin_quorum_epoch_request(partition, now_ms))
        elif request.api_key == msgs.END_QUORUM_EPOCH:
            self._respond(request, self._handle_end_quorum_epoch_request(partition, now_ms))
        else:
            self._handle_fetch_request(request, partition, now_ms)

    def _validate_voter_only_request(self, remote_id: int, epoch: int) -> int | None:
        if epoch < self.epoch:
            return FENCED_LEADER_EPOCH
        if remote_id < 0:
            return INVALID_REQUEST
        if self.dynamic.is_dynamic:
            # KIP-853: voter sets differ while a change replicates (a new voter may not have its
            # VotersRecord yet): Kafka no longer checks the sender against the local set.
            return None
        if remote_id not in self.voters or self.quorum.is_observer:
            return INCONSISTENT_VOTER_SET
        return None

    def _handle_vote_request(self, p: dict[str, Any], now_ms: int) -> dict[str, Any]:
        candidate_id = int(p["candidate_id"])
        candidate_epoch = int(p["candidate_epoch"])
        last_epoch = int(p["last_offset_epoch"])
        last_offset = int(p["last_offset"])
        pre_vote = bool(p.get("pre_vote", False))
        illegal_epoch = last_epoch > candidate_epoch if pre_vote else last_epoch >= candidate_epoch
        if last_offset < 0 or last_epoch < 0 or illegal_epoch:
            return msgs.vote_response(
                INVALID_REQUEST, self.epoch, self.quorum.leader_id_or_nil, False
            )
        error = self._validate_voter_only_request(candidate_id, candidate_epoch)
        if error is not None:
            if error == INCONSISTENT_VOTER_SET:
                log.warning(
                    "node %d: Vote from %d, not a voter of %s",
                    self.node_id,
                    candidate_id,
                    sorted(self.voters),
                )
            return msgs.vote_response(error, self.epoch, self.quorum.leader_id_or_nil, False)
        if candidate_epoch > self.epoch:
            self._transition_to_unattached(candidate_epoch, now_ms)
        ours = self.log.end_offset_and_epoch()
        up_to_date = (last_epoch, last_offset) >= (ours.epoch, ours.offset)
        state = self.quorum.state
        granted = candidate_id != self.node_id and state.can_grant_vote(
            candidate_id, up_to_date, pre_vote
        )
        if (
            granted
            and not pre_vote
            and isinstance(state, (UnattachedState, ProspectiveState))
            and state.voted_id == NO_ID
        ):
            self.quorum.transition_to_unattached_voted(candidate_epoch, candidate_id, now_ms)
            self._reset_connections()
        log.debug(
            "node %d: %s %d epoch %d %s",
            self.node_id,
            "pre-vote for" if pre_vote else "vote for",
            candidate_id,
            candidate_epoch,
            "granted" if granted else "rejected",
        )
        return msgs.vote_response(NONE, self.epoch, self.quorum.leader_id_or_nil, granted)

    def _handle_begin_quorum_epoch_request(self, p: dict[str, Any], now_ms: int) -> dict[str, Any]:
        leader_id, epoch = int(p["leader_id"]), int(p["leader_epoch"])
        error = self._validate_voter_only_request(leader_id, epoch)
        if error is None and not self._maybe_transition(leader_id, epoch, now_ms):
            error = INVALID_REQUEST
        if error is not None:
            log.warning(
                "node %d: BeginQuorumEpoch from %d epoch %d: error %d",
                self.node_id,
                leader_id,
                epoch,
                error,
            )
            return msgs.quorum_epoch_response(error, self.epoch, self.quorum.leader_id_or_nil)
        return msgs.quorum_epoch_response(NONE, self.epoch, self.quorum.leader_id_or_nil)

    def _handle_end_quorum_epoch_request(self, p: dict[str, Any], now_ms: int) -> dict[str, Any]:
        leader_id, epoch = int(p["leader_id"]), int(p["leader_epoch"])
        error = self._validate_voter_only_request(leader_id, epoch)
        if error is None and not self._maybe_transition(leader_id, epoch, now_ms):
            error = INVALID_REQUEST
        if error is not None:
            return msgs.quorum_epoch_response(error, self.epoch, self.quorum.leader_id_or_nil)
        state = self.quorum.state
        if isinstance(state, FollowerState) and state.leader_id == leader_id:
            backoff = self.quorum.end_epoch_election_backoff_ms(
                self.node_id, msgs.preferred_successors(p)
            )
            state.override_fetch_timeout(now_ms, backoff)
            # The leader said it is gone: pre-votes of its successors may be granted now.
            state.has_fetched_from_leader = False
        return msgs.quorum_epoch_response(NONE, self.epoch, self.quorum.leader_id_or_nil)

    def _describe_quorum(self, data: dict[str, Any], now_ms: int) -> dict[str, Any]:
        if msgs.single_partition(data) is None:
            return msgs.describe_quorum_response(UNKNOWN_TOPIC_OR_PARTITION)
        state = self.quorum.state
        if not isinstance(state, LeaderState):
            return msgs.describe_quorum_response(NOT_LEADER_OR_FOLLOWER)
        return msgs.describe_quorum_from_leader(state, self.log.end_offset, now_ms)

    # -- responses ----------------------------------------------------------------------------

    def _handle_response(self, response: RaftMessage, now_ms: int) -> None:
        if not self.requests.is_expected(response.source, response.correlation_id):
            log.debug("node %d: ignoring unexpected %r", self.node_id, response)
            return
        data = response.data
        if response.api_key == UPDATE_RAFT_VOTER:
            ok = self.dynamic.handle_update_voter_response(response.source, data)
            self.requests.on_response(response.source, ok, now_ms)
            return
        top_error = int(data.get("error_code", NONE))
        if (
            response.api_key == msgs.VOTE
            and top_error == msgs.UNSUPPORTED_VERSION
            and isinstance(self.quorum.state, ProspectiveState)
        ):
            # As Kafka's: a voter that cannot take a pre-vote (Vote below v2) would never
            # grant one, so stand as a candidate now rather than wait out the election.
            log.info(
                "node %d: prospective in epoch %d got UNSUPPORTED_VERSION to a pre-vote from "
                "node %d; standing as a candidate since a voter does not support PreVote",
                self.node_id, self.epoch, response.source,
            )
            self.requests.on_response(response.source, True, now_ms)
            self._transition_to_candidate(now_ms)
            return
        if top_error != NONE:
            self.peer_failures.failed(response.source, response, top_error)
            self.requests.on_response(response.source, False, now_ms)
            if top_error == BROKER_NOT_AVAILABLE and response.api_key == msgs.FETCH:
                self._on_fetch_disconnected(response.source, now_ms)
            return
        self.peer_failures.answered(response.source)
        topics_key = "responses" if response.api_key == msgs.FETCH else "topics"
        partition = msgs.single_partition(data, topics_key)
        if partition is None:
            self.requests.on_response(response.source, False, now_ms)
            return
        if response.api_key == msgs.FETCH:
            before = self.quorum.state
            ok = self._handle_fetch_response(response.source, partition, now_ms)
            ok = ok and not self._asked_in_vain(before, response.source)
        elif response.api_key == msgs.FETCH_SNAPSHOT:
            ok = self._handle_fetch_snapshot_response(response.source, partition, now_ms)
        elif response.api_key == msgs.VOTE:
            ok = self._handle_vote_response(response.source, partition, now_ms)
        elif response.api_key == msgs.BEGIN_QUORUM_EPOCH:
            ok = self._handle_quorum_epoch_response(response.source, partition, now_ms, begin=True)
        elif response.api_key == msgs.END_QUORUM_EPOCH:
            ok = self._handle_quorum_epoch_response(response.source, partition, now_ms, begin=False)
        else:
            ok = False
        self.requests.on_response(response.source, ok, now_ms)

    def _has_consistent_leader(self, leader_id: int | None, epoch: int) -> bool:
        if leader_id is not None and leader_id == self.node_id:
            return (
                epoch != self.epoch
                or self.quorum.is_leader()
                or isinstance(self.quorum.state, ResignedState)
            )
        if isinstance(self.quorum.state, ResignedState) and epoch == self.epoch:
            return leader_id is None  # nobody but this node could have led its epoch
        known = self.quorum.leader_id
        return epoch != self.epoch or leader_id is None or known is None or known == leader_id

    def _maybe_transition(self, leader_id: int | None, epoch: int, now_ms: int) -> bool:
        """Learn of ``epoch`` and its leader; False when that contradicts what this node knows."""
        if not self._has_consistent_leader(leader_id, epoch):
            log.error(
                "node %d: leader %s of epoch %d is inconsistent with %s",
                self.node_id,
                leader_id,
                epoch,
                self.quorum.state,
            )
            return False
        if epoch > self.epoch:
            if leader_id is not None and leader_id != self.node_id:
                self._transition_to_follower(epoch, leader_id, now_ms)
            else:
                self._transition_to_unattached(epoch, now_ms)
        elif leader_id is not None and leader_id != self.node_id and self.quorum.leader_id is None:
            self._transition_to_follower(epoch, leader_id, now_ms)
        return True

    def _maybe_handle_common_response(
        self, error: int, leader_id: int | None, epoch: int, now_ms: int
    ) -> bool | None:
        """Kafka's ``maybeHandleCommonResponse``: None when the API's own handler goes on."""
        if epoch < self.epoch or error == UNKNOWN_LEADER_EPOCH:
            return True
        if epoch > self.epoch or error in (FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER):
            self._maybe_transition(leader_id, epoch, now_ms)
            return True
        if epoch == self.epoch and leader_id is not None and self.quorum.leader_id is None:
            if not self._maybe_transition(leader_id, epoch, now_ms):
                return False
            return None if error == NONE else True
        if error == BROKER_NOT_AVAILABLE:
            return False
        if error in (INCONSISTENT_VOTER_SET, INCONSISTENT_CLUSTER_ID, INVALID_REQUEST):
            log.error("node %d: peer answered error %d", self.node_id, error)
            return False
        return None

    @staticmethod
    def _leader_of(partition: dict[str, Any]) -> tuple[int | None, int]:
        leader = int(partition["leader_id"])
        return (leader if leader >= 0 else None), int(partition["leader_epoch"])

    def _handle_vote_response(self, source: int, p: dict[str, Any], now_ms: int) -> bool:
        error = int(p["error_code"])
        leader_id, epoch = self._leader_of(p)
        handled = self._maybe_handle_common_response(error, leader_id, epoch, now_ms)
        if handled is not None:
            return handled
        if error != NONE:
            return False
        state = self.quorum.state
        if not isinstance(state, (ProspectiveState, CandidateState)):
            return True
        if p.get("vote_granted"):
            state.record_granted(source)
            self._maybe_transition_forward(now_ms)
        else:
            state.record_rejected(source)
            if state.is_vote_rejected() and not state.is_backing_off:
                self._on_election_lost(state, now_ms)
        return True

    def _on_election_lost(self, state: ProspectiveState | CandidateState, now_ms: int) -> None:
        """KIP-996: a prospective that knows the epoch's leader goes back to following it (it
        times out again if the leader is really gone); otherwise back off and try again."""
        if isinstance(state, ProspectiveState) and state.leader_id is not None:
            self._transition_to_follower(state.epoch, state.leader_id, now_ms)
        else:
            state.start_backing_off(
                now_ms, self.quorum.binary_exponential_backoff_ms(state.retries)
            )

    def _handle_quorum_epoch_response(
        self, source: int, p: dict[str, Any], now_ms: int, begin: bool
    ) -> bool:
        error = int(p["error_code"])
        leader_id, epoch = self._leader_of(p)
        handled = self._maybe_handle_common_response(error, leader_id, epoch, now_ms)
        if handled is not None:
            return handled
        if error != NONE:
            return False
        state = self.quorum.state
        if begin and isinstance(state, LeaderState):
            state.add_acknowledgement_from(source)
        elif not begin and isinstance(state, ResignedState):
            state.acknowledge_resignation(source)
        return True

    # -- time ---------------------------------------------------------------------------------

    def _poll(self, now_ms: int) -> None:
        self.dynamic.apply_voter_set(self, now_ms)
        for _ in range(8):  # a transition may make the new state act at once
            state = self.quorum.state
            self._poll_once(now_ms)
            if self.quorum.state is state:
                return

    def _poll_once(self, now_ms: int) -> None:
        state = self.quorum.state
        shutting_down = self._shutdown_deadline_ms is not None
        if isinstance(state, LeaderState):
            moved, self._high_watermark_moved = self._high_watermark_moved, False
            self._complete_parked_fetches(now_ms, expired_only=not moved)
            self.dynamic.poll_leader(self, now_ms)
            if shutting_down or state.resign_requested or state.has_check_quorum_expired(now_ms):
                self._resign(now_ms)
                return
            for voter in state.non_acknowledging_voters():
                if self.requests.is_ready(voter, now_ms):
                    data = msgs.begin_quorum_epoch_request(
                        self.cluster_id, self.node_id, state.epoch, voter
                    )
                    self._send(voter, msgs.BEGIN_QUORUM_EPOCH, data, now_ms)
        elif isinstance(state, ResignedState):
            for voter in sorted(state.unacked_voters):
                if self.requests.is_ready(voter, now_ms):
                    data = msgs.end_quorum_epoch_request(
                        self.cluster_id, self.node_id, state.epoch, state.preferred_successors
                    )
                    self._send(voter, msgs.END_QUORUM_EPOCH, data, now_ms)
            if not shutting_down and state.has_election_timeout_expired(now_ms):
                if self.quorum.is_observer:  # removed from the voters: Kafka bumps the epoch
                    self._transition_to_unattached(self.epoch + 1, now_ms)
                    return
                # No leader can exist in the epoch this node resigned: no pre-vote needed.
                self._transition_to_candidate(now_ms)
        elif isinstance(state, (ProspectiveState, CandidateState)):
            self._poll_nominee(state, now_ms, shutting_down)
        elif isinstance(state, FollowerState):
            if (
                self.quorum.is_voter
                and not shutting_down
                and state.has_fetch_timeout_expired(now_ms)
            ):
                self._transition_to_prospective(now_ms)
            elif (
                self.quorum.is_observer
                and state.has_fetch_timeout_expired(now_ms)
                and not self._leader_failing(state, now_ms)
                and not self.requests.is_ready(state.leader_id or NO_ID, now_ms)
            ):
                # Kafka's pollFollowerAsObserver: another voter (or bootstrap server) only
                # while the leader backs off; the bootstrap servers may none of them lead.
                self._send_fetch_to_any_voter(now_ms)
            else:
                self._maybe_send_fetch_to_best_node(state, now_ms)
        elif isinstance(state, UnattachedState):
            if self.quorum.is_observer:
                self._send_fetch_to_any_voter(now_ms)
            elif not shutting_down and state.has_election_timeout_expired(now_ms):
                self._transition_to_prospective(now_ms)

    def _poll_nominee(
        self, state: ProspectiveState | CandidateState, now_ms: int, shutting_down: bool
    ) -> None:
        if self.quorum.is_observer:  # the voter set changed under the election (truncation)
            self._transition_to_unattached(self.epoch + 1, now_ms)
            return
        if state.is_backing_off:
            if state.is_backoff_complete(now_ms) and not shutting_down:
                # A candidate that lost asks again with a pre-vote (KIP-996) rather than
                # bumping the epoch again.
                self._transition_to_prospective(now_ms)
            return
        if state.has_election_timeout_expired(now_ms):
            self._on_election_lost(state, now_ms)
            return
        if state.is_vote_rejected():
            return
        pre_vote = isinstance(state, ProspectiveState)
        last = self.log.end_offset_and_epoch()
        for voter in state.unrecorded_voters():
            if self.requests.is_ready(voter, now_ms):
                data = msgs.vote_request(
                    self.cluster_id, self.node_id, state.epoch, last, voter, pre_vote
                )
                self._send(voter, msgs.VOTE, data, now_ms)
