"""The states of one epoch of the KRaft quorum, as Kafka's ``EpochState`` implementations.

Kafka's names: :class:`UnattachedState` (no leader known; with ``voted_id`` it is Kafka 4's
"unattached voted" state), :class:`ProspectiveState` (KIP-996 pre-vote: the epoch is not bumped
until a majority says it would vote), :class:`CandidateState`, :class:`LeaderState`,
:class:`FollowerState` and :class:`ResignedState`. Timers are deadlines in milliseconds; time is
always passed in, never read. Each state says what must be persisted in the ``quorum-state`` file
(:meth:`EpochState.election`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

NO_ID = -1


@dataclass(frozen=True)
class Election:
    """What the ``quorum-state`` file holds (Kafka's ``ElectionState``): the epoch, its leader
    and the candidate this node voted for in it (``NO_ID`` when none)."""

    epoch: int
    leader_id: int = NO_ID
    voted_id: int = NO_ID

    def has_leader(self) -> bool:
        return self.leader_id != NO_ID

    def has_voted(self) -> bool:
        return self.voted_id != NO_ID


@dataclass
class ReplicaState:
    """The leader's view of one replica (Kafka's ``LeaderState.ReplicaState``)."""

    replica_id: int
    end_offset: int | None = None
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    last_fetch_leader_end: int = -1  # the leader's end offset at the replica's previous fetch


class EpochState:
    """One state of the quorum in one epoch."""

    name = "?"

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def election(self) -> Election:
        return Election(self.epoch)

    @property
    def leader_id(self) -> int | None:
        return None

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool, pre_vote: bool) -> bool:
        return False

    def __repr__(self) -> str:
        return f"{self.name}(epoch={self.epoch}, election={self.election()})"


class _TimedState(EpochState):
    def __init__(self, epoch: int, now_ms: int, timeout_ms: int) -> None:
        super().__init__(epoch)
        self.deadline_ms = now_ms + timeout_ms

    def has_election_timeout_expired(self, now_ms: int) -> bool:
        return now_ms >= self.deadline_ms

    def remaining_ms(self, now_ms: int) -> int:
        return max(0, self.deadline_ms - now_ms)


class UnattachedState(_TimedState):
    """An epoch whose leader is not known. With ``voted_id`` this node granted its vote for the
    epoch (Kafka 4 keeps the voted key in the unattached state)."""

    name = "Unattached"

    def __init__(
        self, epoch: int, now_ms: int, election_timeout_ms: int, voted_id: int = NO_ID
    ) -> None:
        super().__init__(epoch, now_ms, election_timeout_ms)
        self.voted_id = voted_id

    def election(self) -> Election:
        return Election(self.epoch, voted_id=self.voted_id)

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool, pre_vote: bool) -> bool:
        if pre_vote:
            return log_up_to_date
        if self.voted_id != NO_ID:
            return self.voted_id == candidate_id
        return log_up_to_date


class _Nominee(_TimedState):
    """Shared by prospective and candidate: who granted and who rejected (Kafka's
    ``EpochElection``)."""

    def __init__(
        self, epoch: int, local_id: int, voters: frozenset[int], now_ms: int, timeout_ms: int
    ) -> None:
        super().__init__(epoch, now_ms, timeout_ms)
        self.local_id = local_id
        self.voters = voters
        self.granted: set[int] = {local_id}
        self.rejected: set[int] = set()
        self.backoff_until_ms: int | None = None

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def record_granted(self, voter_id: int) -> None:
        if voter_id in self.voters and voter_id not in self.rejected:
            self.granted.add(voter_id)

    def record_rejected(self, voter_id: int) -> None:
        if voter_id in self.voters and voter_id not in self.granted:
            self.rejected.add(voter_id)

    def is_vote_granted(self) -> bool:
        return len(self.granted) >= self.majority

    def is_vote_rejected(self) -> bool:
        """No majority is possible any more."""
        return len(self.voters) - len(self.rejected) < self.majority

    def unrecorded_voters(self) -> list[int]:
        return sorted(self.voters - self.granted - self.rejected)

    def start_backing_off(self, now_ms: int, backoff_ms: int) -> None:
        self.backoff_until_ms = now_ms + backoff_ms

    @property
    def is_backing_off(self) -> bool:
        return self.backoff_until_ms is not None

    def is_backoff_complete(self, now_ms: int) -> bool:
        return self.backoff_until_ms is not None and now_ms >= self.backoff_until_ms


class ProspectiveState(_Nominee):
    """KIP-996: the election timeout expired, this node asks with a pre-vote whether a majority
    would vote for it, without bumping the epoch (so a partitioned node cannot disturb the
    quorum when it comes back). Keeps the epoch's leader and vote."""

    name = "Prospective"

    def __init__(
        self,
        epoch: int,
        local_id: int,
        voters: frozenset[int],
        now_ms: int,
        election_timeout_ms: int,
        leader_id: int = NO_ID,
        voted_id: int = NO_ID,
        retries: int = 1,
    ) -> None:
        super().__init__(epoch, local_id, voters, now_ms, election_timeout_ms)
        self.known_leader_id = leader_id
        self.voted_id = voted_id
        self.retries = retries

    @property
    def leader_id(self) -> int | None:
        return None if self.known_leader_id == NO_ID else self.known_leader_id

    def election(self) -> Election:
        if self.voted_id != NO_ID:
            return Election(self.epoch, voted_id=self.voted_id)
        return Election(self.epoch, leader_id=self.known_leader_id)

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool, pre_vote: bool) -> bool:
        if pre_vote:
            return log_up_to_date
        if self.voted_id != NO_ID:
            return self.voted_id == candidate_id
        if self.known_leader_id != NO_ID:
            # The epoch has a leader (this node may have voted for it before the vote was
            # replaced in the quorum-state file by the leader): no other leader in this epoch.
            return False
        return log_up_to_date


class CandidateState(_Nominee):
    """This node bumped the epoch and voted for itself."""

    name = "Candidate"

    def __init__(
        self,
        epoch: int,
        local_id: int,
        voters: frozenset[int],
        now_ms: int,
        election_timeout_ms: int,
        retries: int = 1,
    ) -> None:
        super().__init__(epoch, local_id, voters, now_ms, election_timeout_ms)
        self.retries = retries

    def election(self) -> Election:
        return Election(self.epoch, voted_id=self.local_id)

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool, pre_vote: bool) -> bool:
        # A candidate voted for itself; a pre-vote for a later epoch may still be granted.
        return pre_vote and log_up_to_date


class FollowerState(EpochState):
    """The leader of the epoch is known; this node fetches from it."""

    name = "Follower"

    def __init__(self, epoch: int, leader_id: int, now_ms: int, fetch_timeout_ms: int) -> None:
        super().__init__(epoch)
        self._leader_id = leader_id
        self.fetch_deadline_ms = now_ms + fetch_timeout_ms
        self.high_watermark: int | None = None
        self.has_fetched_from_leader = False
        # The leader's connection was refused or lost (a dead process): the fetch timeout is
        # cut short and pre-votes are granted, until a fetch succeeds again.
        self.leader_unreachable = False

    @property
    def leader_id(self) -> int | None:
        return self._leader_id

    def election(self) -> Election:
        return Election(self.epoch, leader_id=self._leader_id)

    def reset_fetch_timeout(self, now_ms: int, fetch_timeout_ms: int) -> None:
        """A fetch from the leader succeeded."""
        self.fetch_deadline_ms = now_ms + fetch_timeout_ms
        self.leader_unreachable = False

    def override_fetch_timeout(self, now_ms: int, timeout_ms: int) -> None:
        self.fetch_deadline_ms = now_ms + timeout_ms

    def has_fetch_timeout_expired(self, now_ms: int) -> bool:
        return now_ms >= self.fetch_deadline_ms

    def remaining_fetch_ms(self, now_ms: int) -> int:
        return max(0, self.fetch_deadline_ms - now_ms)

    def mark_leader_unreachable(self, now_ms: int, timeout_ms: int) -> bool:
        """The leader refused or dropped the connection: become prospective within
        ``timeout_ms`` (never later than the fetch timeout) unless a fetch succeeds first, and
        grant pre-votes meanwhile. False when already marked (the first failure sets the
        deadline; later ones do not push it back)."""
        if self.leader_unreachable:
            return False
        self.leader_unreachable = True
        self.has_fetched_from_leader = False
        self.fetch_deadline_ms = min(self.fetch_deadline_ms, now_ms + timeout_ms)
        return True

    def update_high_watermark(self, high_watermark: int | None) -> bool:
        if high_watermark is None or (
            self.high_watermark is not None and high_watermark <= self.high_watermark
        ):
            return False
        self.high_watermark = high_watermark
        return True

    def can_grant_vote(self, candidate_id: int, log_up_to_date: bool, pre_vote: bool) -> bool:
        # KIP-996: a follower still hearing from its leader refuses pre-votes.
        return pre_vote and log_up_to_date and not self.has_fetched_from_leader


class LeaderState(EpochState):
    """This node leads the epoch. The high watermark is the largest offset that a majority of
    voters has (the leader counts its own durable end offset); it moves only once that offset
    is past ``epoch_start_offset``, so that a record of the leader's own epoch is committed
    before anything of an earlier epoch is exposed. Observers are tracked, never counted."""

    name = "Leader"

    def __init__(
        self,
        epoch: int,
        local_id: int,
        voters: frozenset[int],
        epoch_start_offset: int,
        granting_voters: Iterable[int],
        now_ms: int,
        check_quorum_timeout_ms: int,
    ) -> None:
        super().__init__(epoch)
        self.local_id = local_id
        self.voters = voters
        self.epoch_start_offset = epoch_start_offset
        self.granting_voters = frozenset(granting_voters)
        self.voter_states: dict[int, ReplicaState] = {v: ReplicaState(v) for v in voters}
        self.observer_states: dict[int, ReplicaState] = {}
        self.high_watermark: int | None = None
        self.acknowledged: set[int] = {local_id}
        self.check_quorum_timeout_ms = check_quorum_timeout_ms
        self.check_quorum_deadline_ms = now_ms + check_quorum_timeout_ms
        self.fetched_voters: set[int] = set()
        self.resign_requested = False

    @property
    def leader_id(self) -> int | None:
        return self.local_id

    def election(self) -> Election:
        return Election(self.epoch, leader_id=self.local_id)

    def non_acknowledging_voters(self) -> list[int]:
        return sorted(self.voters - self.acknowledged)

    def add_acknowledgement_from(self, voter_id: int) -> None:
        if voter_id in self.voters:
            self.acknowledged.add(voter_id)

    def update_local_state(self, durable_end_offset: int) -> bool:
        """The leader's own durable end offset; True when the high watermark moved."""
        state = self.voter_states.get(self.local_id)
        if state is None:
            return False
        state.end_offset = durable_end_offset
        return self._maybe_update_high_watermark()

    def update_replica_state(self, replica_id: int, now_ms: int, fetch_offset: int) -> bool:
        """A Fetch from ``replica_id`` at ``fetch_offset``; True when the high watermark moved."""
        if replica_id in self.voters:
            state = self.voter_states[replica_id]
            self.acknowledged.add(replica_id)
            self._update_check_quorum(replica_id, now_ms)
        else:
            state = self.observer_states.setdefault(replica_id, ReplicaState(replica_id))
        local = self.voter_states.get(self.local_id)  # absent: the leader removed itself
        leader_end = local.end_offset if local is not None else self.high_watermark
        # Kafka's ReplicaState.updateFollowerState: caught up now, or at the previous fetch if
        # this one reaches what the leader had then.
        if leader_end is not None and fetch_offset >= leader_end:
            state.last_caught_up_ms = now_ms
        elif state.last_fetch_leader_end >= 0 and fetch_offset >= state.last_fetch_leader_end:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.end_offset = fetch_offset
        state.last_fetch_ms = now_ms
        state.last_fetch_leader_end = -1 if leader_end is None else leader_end
        return replica_id in self.voters and self._maybe_update_high_watermark()

    def update_check_quorum_for_following_voter(self, voter_id: int, now_ms: int) -> None:
        """A voter fetching a snapshot (FetchSnapshot) follows this leader too."""
        if voter_id in self.voters:
            self._update_check_quorum(voter_id, now_ms)

    def _update_check_quorum(self, voter_id: int, now_ms: int) -> None:
        self.fetched_voters.add(voter_id)
        needed = len(self.voters) // 2 + 1 - 1  # the leader counts itself
        if len(self.fetched_voters - {self.local_id}) >= needed:
            self.fetched_voters.clear()
            self.check_quorum_deadline_ms = now_ms + self.check_quorum_timeout_ms

    def has_check_quorum_expired(self, now_ms: int) -> bool:
        """No majority of voters fetched within the check-quorum timeout (never when this leader
        is the only voter; a leader that removed itself from a voter set of one still needs
        that voter's fetches, or it would lead forever beside the voter's own epoch)."""
        alone = len(self.voters) == 1 and self.local_id in self.voters
        return not alone and now_ms >= self.check_quorum_deadline_ms

    def _maybe_update_high_watermark(self) -> bool:
        offsets = sorted(
            (s.end_offset if s.end_offset is not None else -1 for s in self.voter_states.values()),
            reverse=True,
        )
        candidate = offsets[len(self.voter_states) // 2]
        if candidate <= self.epoch_start_offset:
            return False
        if self.high_watermark is not None and candidate <= self.high_watermark:
            return False
        self.high_watermark = candidate
        return True

    def voters_by_descending_end_offset(self) -> list[int]:
        others = [s for s in self.voter_states.values() if s.replica_id != self.local_id]
        others.sort(
            key=lambda s: (-(s.end_offset if s.end_offset is not None else -1), s.replica_id)
        )
        return [s.replica_id for s in others]


class ResignedState(_TimedState):
    """A leader that gave up its epoch (shutdown, lost quorum, or restarted as the leader of
    its last epoch): it sends EndQuorumEpoch to the voters and never writes in the epoch again."""

    name = "Resigned"

    def __init__(
        self,
        epoch: int,
        local_id: int,
        voters: frozenset[int],
        now_ms: int,
        election_timeout_ms: int,
        preferred_successors: list[int],
    ) -> None:
        super().__init__(epoch, now_ms, election_timeout_ms)
        self.local_id = local_id
        self.preferred_successors = list(preferred_successors)
        self.unacked_voters = set(voters) - {local_id}

    @property
    def leader_id(self) -> int | None:
        # The file still names this node (a restart must resign again), but nobody leads the
        # epoch any more: answers say "no leader", so that nobody follows a resigned leader.
        return None

    def election(self) -> Election:
        return Election(self.epoch, leader_id=self.local_id)

    def acknowledge_resignation(self, voter_id: int) -> None:
        self.unacked_voters.discard(voter_id)

    def __repr__(self) -> str:
        return f"Resigned(epoch={self.epoch}, successors={self.preferred_successors})"
