"""The KRaft epoch states (odradek/raft/epoch_state.py) and QuorumState transitions
(odradek/raft/quorum.py), without a network."""

from __future__ import annotations

import random

import pytest

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
from odradek.raft.quorum import QuorumConfig, QuorumState

VOTERS = frozenset({1, 2, 3})


def leader(voters: frozenset[int] = VOTERS, epoch_start: int = 5) -> LeaderState:
    return LeaderState(3, 1, voters, epoch_start, {1, 2}, now_ms=0, check_quorum_timeout_ms=3000)


def test_high_watermark_is_what_a_majority_of_voters_has() -> None:
    state = leader()
    assert not state.update_local_state(8)  # the leader alone is no majority
    assert state.high_watermark is None
    assert state.update_replica_state(2, 10, 7)
    assert state.high_watermark == 7
    assert state.update_replica_state(3, 20, 8)
    assert state.high_watermark == 8


def test_high_watermark_waits_for_a_record_of_the_leaders_epoch() -> None:
    state = leader(epoch_start=5)
    state.update_local_state(6)
    assert not state.update_replica_state(2, 10, 5)  # the majority has only older epochs
    assert state.high_watermark is None
    assert state.update_replica_state(2, 20, 6)
    assert state.high_watermark == 6


def test_observers_are_tracked_but_never_counted() -> None:
    state = leader(epoch_start=0)
    state.update_local_state(10)
    assert not state.update_replica_state(9, 10, 10)  # observer 9
    assert state.high_watermark is None
    assert state.observer_states[9].end_offset == 10
    assert state.update_replica_state(2, 10, 4)
    assert state.high_watermark == 4


def test_high_watermark_never_goes_back() -> None:
    state = leader(epoch_start=0)
    state.update_local_state(10)
    state.update_replica_state(2, 10, 9)
    assert state.high_watermark == 9
    assert not state.update_replica_state(2, 20, 3)  # after a truncation, or a stale fetch
    assert state.high_watermark == 9


def test_five_voters_need_three() -> None:
    voters = frozenset({1, 2, 3, 4, 5})
    state = leader(voters, epoch_start=0)
    state.update_local_state(10)
    state.update_replica_state(2, 0, 10)
    assert state.high_watermark is None
    state.update_replica_state(3, 0, 6)
    assert state.high_watermark == 6


def test_check_quorum_expires_without_fetches_from_a_majority() -> None:
    state = leader()
    assert not state.has_check_quorum_expired(2999)
    state.update_replica_state(2, 2000, 0)  # a majority (with the leader) fetched: timer reset
    assert not state.has_check_quorum_expired(4999)
    assert state.has_check_quorum_expired(5000)
    alone = LeaderState(1, 1, frozenset({1}), 0, {1}, 0, 3000)
    assert not alone.has_check_quorum_expired(10**9)


def test_candidate_counts_votes_of_voters_only() -> None:
    state = CandidateState(4, 1, frozenset({1, 2, 3, 4, 5}), 0, 1000)
    state.record_granted(9)  # not a voter
    state.record_granted(2)
    assert not state.is_vote_granted()
    state.record_rejected(3)
    state.record_rejected(4)
    assert not state.is_vote_rejected()
    state.record_granted(5)
    assert state.is_vote_granted()
    assert state.election() == Election(4, voted_id=1)


def test_candidate_gives_up_when_no_majority_is_left() -> None:
    state = CandidateState(4, 1, VOTERS, 0, 1000)
    state.record_rejected(2)
    assert not state.is_vote_rejected()
    state.record_rejected(3)
    assert state.is_vote_rejected()
    assert state.unrecorded_voters() == []


def test_unattached_votes_once_per_epoch() -> None:
    free = UnattachedState(2, 0, 1000)
    assert free.can_grant_vote(2, True, False)
    assert not free.can_grant_vote(2, False, False)
    voted = UnattachedState(2, 0, 1000, voted_id=2)
    assert voted.can_grant_vote(2, True, False)
    assert not voted.can_grant_vote(3, True, False)
    assert voted.can_grant_vote(3, True, True)  # a pre-vote binds nothing


def test_follower_refuses_pre_votes_while_it_hears_from_its_leader() -> None:
    state = FollowerState(2, 1, 0, 2000)
    assert state.can_grant_vote(3, True, True)
    state.has_fetched_from_leader = True
    assert not state.can_grant_vote(3, True, True)
    assert not state.can_grant_vote(3, True, False)


def test_prospective_that_knows_the_leader_refuses_standard_votes_in_its_epoch() -> None:
    """Simulator seed 917: a voter's vote for the leader is replaced by the leader in the
    quorum-state file; it must not vote for another candidate of that epoch after a restart."""
    state = ProspectiveState(3, 2, VOTERS, 0, 1000, leader_id=3)
    assert not state.can_grant_vote(1, True, False)
    assert state.can_grant_vote(1, True, True)
    assert state.election() == Election(3, leader_id=3)


def test_leader_and_resigned_never_vote() -> None:
    assert not leader().can_grant_vote(2, True, False)
    assert not leader().can_grant_vote(2, True, True)
    resigned = ResignedState(3, 1, VOTERS, 0, 1000, [2, 3])
    assert not resigned.can_grant_vote(2, True, False)
    assert resigned.unacked_voters == {2, 3}
    assert resigned.election() == Election(3, leader_id=1)


def quorum(local: int | None = 1) -> QuorumState:
    q = QuorumState(local, VOTERS, QuorumConfig(), random.Random(1))
    return q


@pytest.mark.parametrize(
    ("stored", "log_epoch", "expected", "epoch"),
    [
        (None, 0, UnattachedState, 0),
        (Election(4, leader_id=1), 4, ResignedState, 4),
        (Election(4, voted_id=1), 3, CandidateState, 4),
        (Election(4, voted_id=2), 3, UnattachedState, 4),
        (Election(4, leader_id=2), 4, FollowerState, 4),
        (Election(2, leader_id=2), 5, UnattachedState, 5),
    ],
)
def test_initialize_resumes_the_stored_state(
    stored: Election | None, log_epoch: int, expected: type, epoch: int
) -> None:
    q = quorum()
    q.initialize(stored, log_epoch, 0)
    assert type(q.state) is expected
    assert q.epoch == epoch
    if stored is not None and stored.voted_id == 2:
        assert q.state.election().voted_id == 2


def test_durable_transitions_ask_to_persist_before_acting() -> None:
    q = quorum()
    q.initialize(None, 0, 0)
    assert q.take_pending_election() == Election(0)
    q.transition_to_prospective(10)
    assert q.epoch == 0  # a pre-vote does not bump the epoch
    assert q.take_pending_election() is None  # nothing new to persist
    q.transition_to_candidate(20)
    assert q.take_pending_election() == Election(1, voted_id=1)
    assert isinstance(q.state, CandidateState)
    q.state.record_granted(2)
    q.transition_to_leader(0, 30)
    assert q.take_pending_election() == Election(1, leader_id=1)
    q.transition_to_resigned([2, 3], 40)
    assert isinstance(q.state, ResignedState)
    assert q.take_pending_election() is None  # a soft state, as Kafka's
    q.transition_to_unattached(2, 50)
    assert q.take_pending_election() == Election(2)
    q.transition_to_unattached_voted(2, 3, 60)
    assert q.take_pending_election() == Election(2, voted_id=3)
    with pytest.raises(RuntimeError):
        q.transition_to_unattached_voted(2, 2, 70)  # one vote per epoch
    q.transition_to_follower(2, 3, 80)
    assert q.take_pending_election() == Election(2, leader_id=3)


def test_invalid_transitions_are_refused() -> None:
    q = quorum()
    q.initialize(Election(3), 0, 0)
    with pytest.raises(RuntimeError):
        q.transition_to_unattached(3, 0)  # not a higher epoch
    with pytest.raises(RuntimeError):
        q.transition_to_leader(0, 0)  # not a candidate
    with pytest.raises(RuntimeError):
        q.transition_to_follower(3, 1, 0)  # the local node
    q.transition_to_candidate(0)
    with pytest.raises(RuntimeError):
        q.transition_to_leader(0, 0)  # no majority yet


def test_observer_never_runs_for_election() -> None:
    q = quorum(local=9)
    q.initialize(None, 0, 0)
    assert q.is_observer
    assert isinstance(q.state, UnattachedState) and q.state.voted_id == NO_ID
    assert not q.state.has_election_timeout_expired(10**12)
    with pytest.raises(RuntimeError):
        q.transition_to_candidate(0)
    with pytest.raises(RuntimeError):
        q.transition_to_prospective(0)


def test_election_timeout_has_jitter_from_the_injected_random() -> None:
    q = quorum()
    timeouts = {q.random_election_timeout_ms() for _ in range(50)}
    assert all(1000 <= t < 2000 for t in timeouts)
    assert len(timeouts) > 10


def test_quorum_config_uses_kafkas_names_and_defaults() -> None:
    default = QuorumConfig()
    assert (default.election_timeout_ms, default.fetch_timeout_ms) == (1000, 2000)
    assert (default.election_backoff_max_ms, default.request_timeout_ms) == (1000, 2000)
    assert default.retry_backoff_ms == 20
    config = QuorumConfig.from_props(
        {"controller.quorum.election.timeout.ms": "500", "controller.quorum.fetch.timeout.ms": 900}
    )
    assert (config.election_timeout_ms, config.fetch_timeout_ms) == (500, 900)
    with pytest.raises(ValueError, match="controller.quorum.election.timeout.ms"):
        QuorumConfig.from_props({"controller.quorum.election.timeout.ms": "soon"})


def test_a_leader_outside_a_voter_set_of_one_needs_that_voters_fetches() -> None:
    """A leader that removed itself, leaving one other voter: its check-quorum expires when that
    voter does not fetch from it (or it would lead forever beside the voter's own epoch)."""
    removed = LeaderState(1, 1, frozenset({4}), 0, {1, 4}, 0, 3000)
    assert not removed.has_check_quorum_expired(2999)
    assert removed.has_check_quorum_expired(3000)
    removed.update_replica_state(4, 2500, 0)
    assert not removed.has_check_quorum_expired(5499)
