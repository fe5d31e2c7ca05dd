"""The quorum state machine (Kafka's ``QuorumState``) and the ``controller.quorum.*`` settings
(Kafka's ``QuorumConfig``).

Every transition that changes what the ``quorum-state`` file must hold records the new
:class:`~odradek.raft.epoch_state.Election` in :attr:`QuorumState.pending_election`; the caller
persists it before anything that follows the transition (a vote granted, a request sent) leaves
the node, as Kafka's ``durableTransitionTo`` writes the store first. Sans-I/O: time comes in as
``now_ms``, randomness from an injected ``random.Random``.

Transitions (KIP-996 adds Prospective before Candidate)::

    Unattached/Follower/Resigned --timeout--> Prospective --majority pre-vote--> Candidate
    Candidate --majority vote--> Leader --shutdown/lost quorum--> Resigned
    any --higher epoch--> Unattached (leader unknown) or Follower (leader known)
    Unattached --vote granted--> Unattached(voted)
"""

from __future__ import annotations

import logging
import random as _random
from dataclasses import dataclass

from odradek.raft.epoch_state import (
    NO_ID,
    CandidateState,
    Election,
    EpochState,
    FollowerState,
    LeaderState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
)

log = logging.getLogger(__name__)

CHECK_QUORUM_TIMEOUT_FACTOR = 1.5  # Kafka's LeaderState.CHECK_QUORUM_TIMEOUT_FACTOR
NEVER = 1 << 62  # an observer's election timer
RETRY_BACKOFF_BASE_MS = 50  # Kafka's KafkaRaftClient.RETRY_BACKOFF_BASE_MS


@dataclass(frozen=True)
class QuorumConfig:
    """Kafka's ``QuorumConfig``: ``controller.quorum.<name>`` with Kafka's defaults."""

    election_timeout_ms: int = 1000  # controller.quorum.election.timeout.ms
    fetch_timeout_ms: int = 2000  # controller.quorum.fetch.timeout.ms
    election_backoff_max_ms: int = 1000  # controller.quorum.election.backoff.max.ms
    request_timeout_ms: int = 2000  # controller.quorum.request.timeout.ms
    retry_backoff_ms: int = 20  # controller.quorum.retry.backoff.ms
    append_linger_ms: int = 25  # controller.quorum.append.linger.ms (the driver batches)

    CONFIG_NAMES = {
        "controller.quorum.election.timeout.ms": "election_timeout_ms",
        "controller.quorum.fetch.timeout.ms": "fetch_timeout_ms",
        "controller.quorum.election.backoff.max.ms": "election_backoff_max_ms",
        "controller.quorum.request.timeout.ms": "request_timeout_ms",
        "controller.quorum.retry.backoff.ms": "retry_backoff_ms",
        "controller.quorum.append.linger.ms": "append_linger_ms",
    }

    @classmethod
    def from_props(cls, props: dict[str, object]) -> QuorumConfig:
        """From Kafka's property names (unknown names are ignored; values must be ints)."""
        kwargs: dict[str, int] = {}
        for name, attr in cls.CONFIG_NAMES.items():
            if name in props:
                value = props[name]
                if not isinstance(value, int) and not (isinstance(value, str) and value.isdigit()):
                    raise ValueError(f"Invalid value {value!r} for configuration {name}")
                kwargs[attr] = int(value)
        return cls(**kwargs)


class QuorumState:
    def __init__(
        self,
        local_id: int | None,
        voters: frozenset[int],
        config: QuorumConfig,
        rng: _random.Random,
    ) -> None:
        self.local_id = local_id
        self.voters = voters
        self.config = config
        self.random = rng
        self.state: EpochState = UnattachedState(0, 0, NEVER)
        self.pending_election: Election | None = None
        self._persisted: Election | None = None

    # -- queries ------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def is_voter(self) -> bool:
        return self.local_id is not None and self.local_id in self.voters

    @property
    def is_observer(self) -> bool:
        return not self.is_voter

    @property
    def leader_id(self) -> int | None:
        return self.state.leader_id

    @property
    def leader_id_or_nil(self) -> int:
        leader = self.state.leader_id
        return NO_ID if leader is None else leader

    def is_leader(self) -> bool:
        return isinstance(self.state, LeaderState)

    def random_election_timeout_ms(self) -> int:
        t = self.config.election_timeout_ms
        return 0 if t == 0 else t + self.random.randrange(t)

    def leader_unreachable_timeout_ms(self, leader_id: int) -> int:
        """How long a voter waits before it runs a pre-vote once its leader's connection is
        refused or lost. The other voters take turns by node id, a quarter of
        ``election.timeout.ms`` apart (with a random sixteenth on top): were they to become
        prospective at once, each would grant the other's pre-vote and both would stand as
        candidates in the same epoch, splitting the vote for a whole election timeout.
        Odradek's shortcut (Kafka waits for ``fetch.timeout.ms``); pre-vote makes it safe: a
        node that is wrong about its leader cannot bump the epoch."""
        slot = self.config.election_timeout_ms // 4
        others = sorted(v for v in self.voters if v != leader_id)
        position = others.index(self.local_id) if self.local_id in others else len(others)
        return position * slot + (self.random.randrange(slot // 4) if slot >= 4 else 0)

    def binary_exponential_backoff_ms(self, retries: int) -> int:
        """Kafka's backoff after a lost election: random, doubling with the retries."""
        bound = 2 << min(20, max(retries, 1) - 1)
        return min(
            RETRY_BACKOFF_BASE_MS * self.random.randrange(bound),
            self.config.election_backoff_max_ms,
        )

    def end_epoch_election_backoff_ms(self, local_id: int, successors: list[int]) -> int:
        """Kafka's strict exponential backoff after EndQuorumEpoch: the first preferred
        successor runs at once, the others later by position."""
        max_ms = self.config.election_backoff_max_ms
        if local_id not in successors:
            return max_ms
        position = successors.index(local_id)
        if position == 0:
            return 0
        base = max_ms >> (len(successors) - 1)
        return min(max_ms, base << (position - 1))

    @property
    def check_quorum_timeout_ms(self) -> int:
        return int(self.config.fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR)

    # -- start-up -----------------------------------------------------------------------------

    def initialize(self, stored: Election | None, log_last_epoch: int, now_ms: int) -> None:
        """Kafka's ``QuorumState.initialize``: resume in the state the store describes."""
        election = stored if stored is not None else Election(0)
        self._persisted = stored
        local = self.local_id
        state: EpochState
        if election.epoch < log_last_epoch:
            log.warning(
                "epoch in quorum-state (%d) is smaller than the last epoch in the log (%d)",
                election.epoch,
                log_last_epoch,
            )
            state = UnattachedState(log_last_epoch, now_ms, self._unattached_timeout())
        elif local is not None and election.leader_id == local:
            # A leader restarts resigned in its epoch: it must never write in it again (what it
            # wrote before the crash may be lost) nor vote for another leader in it.
            state = ResignedState(
                election.epoch, local, self.voters, now_ms, self.random_election_timeout_ms(), []
            )
        elif local is not None and election.voted_id == local and self.is_voter:
            state = CandidateState(
                election.epoch, local, self.voters, now_ms, self.random_election_timeout_ms()
            )
        elif election.has_voted():
            state = UnattachedState(
                election.epoch, now_ms, self._unattached_timeout(), voted_id=election.voted_id
            )
        elif election.has_leader():
            state = FollowerState(
                election.epoch, election.leader_id, now_ms, self.config.fetch_timeout_ms
            )
        else:
            state = UnattachedState(election.epoch, now_ms, self._unattached_timeout())
        self._durable_transition_to(state)

    def _unattached_timeout(self) -> int:
        return self.random_election_timeout_ms() if self.is_voter else NEVER

    # -- transitions --------------------------------------------------------------------------

    def _durable_transition_to(self, state: EpochState) -> None:
        election = state.election()
        if election != self._persisted:
            self.pending_election = election
            self._persisted = election
        self._memory_transition_to(state)

    def _memory_transition_to(self, state: EpochState) -> None:
        log.debug("node %s: %s -> %s", self.local_id, self.state, state)
        self.state = state

    def transition_to_unattached(self, epoch: int, now_ms: int) -> None:
        if epoch <= self.epoch:
            raise RuntimeError(
                f"cannot transition to Unattached with epoch {epoch} from {self.state}"
            )
        if self.is_observer:
            timeout = NEVER
        elif isinstance(self.state, (UnattachedState, CandidateState, ProspectiveState)):
            timeout = self.state.remaining_ms(now_ms)
        else:
            timeout = self.random_election_timeout_ms()
        self._durable_transition_to(UnattachedState(epoch, now_ms, timeout))

    def transition_to_unattached_voted(self, epoch: int, candidate_id: int, now_ms: int) -> None:
        if candidate_id == self.local_id:
            raise RuntimeError("cannot vote for the local node as a voter")
        not_voted = isinstance(self.state, (UnattachedState, ProspectiveState)) and (
            self.state.voted_id == NO_ID
        )
        if epoch < self.epoch or (epoch == self.epoch and not not_voted):
            raise RuntimeError(f"cannot vote for {candidate_id} in epoch {epoch} from {self.state}")
        self._durable_transition_to(
            UnattachedState(epoch, now_ms, self.random_election_timeout_ms(), voted_id=candidate_id)
        )

    def transition_to_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        if leader_id == self.local_id:
            raise RuntimeError(f"cannot follow the local node in epoch {epoch}")
        if epoch < self.epoch:
            raise RuntimeError(f"cannot follow {leader_id} in epoch {epoch} from {self.state}")
        if epoch == self.epoch and isinstance(self.state, (FollowerState, LeaderState)):
            raise RuntimeError(f"cannot follow {leader_id} in epoch {epoch} from {self.state}")
        self._durable_transition_to(
            FollowerState(epoch, leader_id, now_ms, self.config.fetch_timeout_ms)
        )

    def transition_to_prospective(self, now_ms: int) -> None:
        if self.is_observer or self.local_id is None:
            raise RuntimeError("an observer cannot become prospective")
        if isinstance(self.state, LeaderState):
            raise RuntimeError(f"cannot become prospective from {self.state}")
        leader = self.state.leader_id
        voted = self.state.election().voted_id
        retries = self.state.retries + 1 if isinstance(self.state, ProspectiveState) else 1
        if isinstance(self.state, ResignedState):
            leader = None  # a resigned leader no longer leads its epoch
        self._durable_transition_to(
            ProspectiveState(
                self.epoch,
                self.local_id,
                self.voters,
                now_ms,
                self.random_election_timeout_ms(),
                leader_id=NO_ID if leader is None else leader,
                voted_id=voted,
                retries=retries,
            )
        )

    def transition_to_candidate(self, now_ms: int) -> None:
        if self.is_observer or self.local_id is None:
            raise RuntimeError("an observer cannot become a candidate")
        if isinstance(self.state, LeaderState):
            raise RuntimeError("the leader cannot become a candidate")
        retries = self.state.retries + 1 if isinstance(self.state, CandidateState) else 1
        self._durable_transition_to(
            CandidateState(
                self.epoch + 1,
                self.local_id,
                self.voters,
                now_ms,
                self.random_election_timeout_ms(),
                retries=retries,
            )
        )

    def transition_to_leader(self, epoch_start_offset: int, now_ms: int) -> LeaderState:
        state = self.state
        if not isinstance(state, CandidateState) or self.local_id is None:
            raise RuntimeError(f"cannot become leader from {self.state}")
        if not state.is_vote_granted():
            raise RuntimeError("cannot become leader without a majority of votes")
        leader = LeaderState(
            state.epoch,
            self.local_id,
            self.voters,
            epoch_start_offset,
            state.granted,
            now_ms,
            self.check_quorum_timeout_ms,
        )
        self._durable_transition_to(leader)
        return leader

    def transition_to_resigned(self, preferred_successors: list[int], now_ms: int) -> None:
        if not isinstance(self.state, LeaderState) or self.local_id is None:
            raise RuntimeError(f"cannot resign from {self.state}")
        # Resigned is a soft state: the file already names this node as the epoch's leader.
        self._memory_transition_to(
            ResignedState(
                self.epoch,
                self.local_id,
                self.voters,
                now_ms,
                self.random_election_timeout_ms(),
                preferred_successors,
            )
        )

    def take_pending_election(self) -> Election | None:
        election, self.pending_election = self.pending_election, None
        return election
