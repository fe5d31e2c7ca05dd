"""KIP-996 pre-vote in the sans-I/O KRaft core, and Odradek's fast failover on top of it.

* a prospective node asks with a pre-vote at its own epoch (no bump) and stands as a candidate
  only once a majority would vote for it; a follower that hears from its leader refuses;
* a voter whose leader refuses or drops the connection (the network channel's
  ``BROKER_NOT_AVAILABLE``, what a dead process on loopback gives) becomes prospective after a
  short turn by node id instead of ``controller.quorum.fetch.timeout.ms``; a timeout does not
  count, and a fetch that succeeds meanwhile calls it off;
* an observer (a broker) asks another voter while its leader backs off, and so learns of the
  new leader without waiting for its fetch timeout (Kafka's ``maybeSendFetchToBestNode``);
* a voter cut off from the others and let back in does not disturb a stable leader.
"""

from __future__ import annotations

from typing import Any

from test_raft_core import CLUSTER, VOTERS, Cluster, core, only_response, partition_of, request

from odradek.protocol.errors import Errors
from odradek.raft import raft_messages as msgs
from odradek.raft.epoch_state import (
    CandidateState,
    Election,
    FollowerState,
    LeaderState,
    ProspectiveState,
)
from odradek.raft.kafka_network_channel import error_response
from odradek.raft.raft_core import RaftCore
from odradek.raft.raft_log import OffsetAndEpoch
from odradek.raft.raft_messages import RaftMessage


def sent(c: RaftCore, api_key: int) -> list[RaftMessage]:
    return [m for m in c.ready().messages if m.api_key == api_key and not m.is_response]


def answer(req: RaftMessage, data: dict[str, Any]) -> RaftMessage:
    return RaftMessage(req.destination, req.source, req.api_key, req.correlation_id, data, True)


def vote_answer(req: RaftMessage, epoch: int, leader: int, granted: bool) -> RaftMessage:
    return answer(req, msgs.vote_response(msgs.NONE, epoch, leader, granted))


def following(node_id: int, leader: int, epoch: int = 3) -> RaftCore:
    """A voter that follows ``leader`` in ``epoch`` and has fetched from it once."""
    c = core(node_id, election=Election(epoch, leader_id=leader))
    (fetch,) = sent(c, msgs.FETCH)
    c.handle(answer(fetch, msgs.fetch_response(msgs.NONE, epoch, leader, 0)), 10)
    assert isinstance(c.state, FollowerState) and c.state.has_fetched_from_leader
    return c  # its next Fetch to the leader is in flight, not drained


def test_prospective_becomes_candidate_on_a_majority_of_pre_votes_without_bumping_first() -> None:
    c = core(1, election=Election(3, leader_id=2))
    c.ready()
    c.tick(2000)  # the fetch timeout
    assert isinstance(c.state, ProspectiveState) and c.epoch == 3
    ready = c.ready()
    assert ready.election is None  # nothing new for the quorum-state file: no epoch bump
    votes = {m.destination: m for m in ready.messages if m.api_key == msgs.VOTE}
    assert all(partition_of(m.data)["pre_vote"] for m in votes.values())
    c.handle(vote_answer(votes[3], 3, 2, False), 2001)
    assert isinstance(c.state, ProspectiveState) and c.epoch == 3  # one "no" is not the end
    c.handle(vote_answer(votes[2], 3, -1, True), 2002)
    assert isinstance(c.state, CandidateState) and c.epoch == 4
    real = sent(c, msgs.VOTE)
    assert {m.destination for m in real} == {2, 3}
    assert all(not partition_of(m.data)["pre_vote"] for m in real)
    assert all(partition_of(m.data)["candidate_epoch"] == 4 for m in real)


def test_pre_vote_is_refused_by_a_follower_that_hears_from_its_leader_and_binds_nothing() -> None:
    c = following(1, leader=2)
    fetch = sent_fetch(c, 15, 2)
    pre = msgs.vote_request(CLUSTER, 3, 3, OffsetAndEpoch(5, 3), 1, pre_vote=True)
    c.handle(request(msgs.VOTE, pre, source=3), 20)
    part = partition_of(only_response(c))
    assert not part["vote_granted"] and part["leader_id"] == 2
    assert c.epoch == 3 and isinstance(c.state, FollowerState) and c.ready().election is None
    # A node whose leader is unreachable grants it; a pre-vote still binds nothing.
    c.handle(answer(fetch, error_response(msgs.FETCH, msgs.BROKER_NOT_AVAILABLE)), 31)
    c.handle(request(msgs.VOTE, pre, source=3), 40)
    assert partition_of(only_response(c))["vote_granted"]
    assert c.epoch == 3 and c.ready().election is None


def sent_fetch(c: RaftCore, now: int, to: int | None = None) -> RaftMessage:
    """The latest Fetch the core sent (to ``to``) up to ``now``."""
    c.tick(now)
    fetches = [m for m in sent(c, msgs.FETCH) if to is None or m.destination == to]
    assert fetches
    return fetches[-1]


def test_a_prospective_rejected_by_a_majority_goes_back_to_its_leader_at_the_same_epoch() -> None:
    c = core(1, election=Election(3, leader_id=2))
    c.ready()
    c.tick(2000)
    votes = [m for m in c.ready().messages if m.api_key == msgs.VOTE]
    for m in votes:
        c.handle(vote_answer(m, 3, 2, False), 2001)
    assert isinstance(c.state, FollowerState) and c.leader_id == 2 and c.epoch == 3


def test_leader_disconnect_makes_a_follower_prospective_before_the_fetch_timeout() -> None:
    c = following(2, leader=1)
    c.handle(answer(sent_fetch(c, 100, 1), error_response(msgs.FETCH, msgs.BROKER_NOT_AVAILABLE)), 101)
    state = c.state
    assert isinstance(state, FollowerState) and state.leader_unreachable
    # Node 2 is first among the voters left (2, 3): its turn is within a quarter of the
    # election timeout (1000 ms), far before the 2000 ms fetch timeout.
    assert state.fetch_deadline_ms < 101 + 250
    c.tick(101 + 250)
    assert isinstance(c.state, ProspectiveState) and c.epoch == 3
    votes = sent(c, msgs.VOTE)
    assert votes and all(partition_of(m.data)["pre_vote"] for m in votes)


def test_voters_take_turns_by_node_id_after_a_disconnect() -> None:
    second = following(3, leader=1)
    second.handle(
        answer(sent_fetch(second, 100, 1), error_response(msgs.FETCH, msgs.BROKER_NOT_AVAILABLE)), 101
    )
    assert isinstance(second.state, FollowerState)
    assert 101 + 250 <= second.state.fetch_deadline_ms < 101 + 500
    second.tick(101 + 249)
    assert isinstance(second.state, FollowerState)


def test_a_timeout_is_not_a_disconnect_and_a_fetch_that_succeeds_calls_it_off() -> None:
    c = following(3, leader=1)  # second in turn: at least 250 ms before its pre-vote
    c.handle(answer(sent_fetch(c, 100, 1), error_response(msgs.FETCH, msgs.REQUEST_TIMED_OUT)), 101)
    assert isinstance(c.state, FollowerState) and not c.state.leader_unreachable
    c.tick(600)
    assert isinstance(c.state, FollowerState)  # the fetch timeout (2000 ms) has not passed
    c.handle(answer(sent_fetch(c, 700, 1), error_response(msgs.FETCH, msgs.BROKER_NOT_AVAILABLE)), 701)
    assert isinstance(c.state, FollowerState) and c.state.leader_unreachable
    fetch = sent_fetch(c, 730, 1)  # the retry backoff passed: the leader is asked again
    assert fetch.destination == 1
    c.handle(answer(fetch, msgs.fetch_response(msgs.NONE, 3, 1, 0)), 731)
    assert not c.state.leader_unreachable
    c.tick(731 + 1999)
    assert isinstance(c.state, FollowerState)


def test_without_pre_vote_a_disconnect_changes_nothing() -> None:
    c = core(2, election=Election(3, leader_id=1), pre_vote=False)
    (fetch,) = sent(c, msgs.FETCH)
    c.handle(answer(fetch, error_response(msgs.FETCH, msgs.BROKER_NOT_AVAILABLE)), 5)
    assert isinstance(c.state, FollowerState) and not c.state.leader_unreachable


def test_observer_asks_another_voter_while_its_leader_backs_off_and_follows_the_new_leader() -> None:
    c = core(9, election=Election(3, leader_id=1))
    (fetch,) = sent(c, msgs.FETCH)
    assert fetch.destination == 1
    c.handle(answer(fetch, error_response(msgs.FETCH, msgs.BROKER_NOT_AVAILABLE)), 5)
    # The leader backs off (retry.backoff.ms): the next fetch goes to another voter at once.
    other = sent_fetch(c, 6)
    assert other.destination in (2, 3)
    c.handle(answer(other, msgs.fetch_response(Errors.FENCED_LEADER_EPOCH, 4, 2, -1)), 8)
    assert isinstance(c.state, FollowerState) and c.leader_id == 2 and c.epoch == 4
    assert sent_fetch(c, 9).destination == 2


def test_observer_backs_off_a_voter_that_knows_no_better() -> None:
    c = core(9, election=Election(3, leader_id=1))
    (fetch,) = sent(c, msgs.FETCH)
    c.handle(answer(fetch, error_response(msgs.FETCH, msgs.BROKER_NOT_AVAILABLE)), 5)
    other = sent_fetch(c, 6)
    c.handle(answer(other, msgs.fetch_response(Errors.NOT_LEADER_OR_FOLLOWER, 3, 1, -1)), 7)
    # Not asked again before its own retry backoff: no busy loop while the leader is down.
    c.tick(8)
    assert all(m.destination != other.destination for m in sent(c, msgs.FETCH))


class PartitionedCluster(Cluster):
    def __init__(self) -> None:
        super().__init__()
        self.isolated: set[int] = set()

    def deliver(self, queue: list[RaftMessage]) -> None:
        kept = [m for m in queue if not ({m.source, m.destination} & self.isolated)]
        super().deliver(kept)

    def drain(self, node_id: int) -> list[RaftMessage]:
        return [m for m in super().drain(node_id) if not ({m.source, m.destination} & self.isolated)]


def test_a_voter_cut_off_and_let_back_in_does_not_disturb_a_stable_leader() -> None:
    cluster = PartitionedCluster()
    cluster.run(3000)
    leader = cluster.leader()
    epoch = leader.epoch
    outsider = next(i for i in sorted(VOTERS) if i != leader.node_id)
    cluster.isolated = {outsider}
    cluster.run(10_000)  # many fetch and election timeouts: it keeps asking with pre-votes
    assert cluster.cores[outsider].epoch == epoch
    cluster.isolated = set()
    cluster.run(5000)
    assert cluster.leader() is leader and leader.epoch == epoch
    assert isinstance(leader.state, LeaderState)
    back = cluster.cores[outsider]
    assert isinstance(back.state, FollowerState) and back.leader_id == leader.node_id


def test_kill_of_the_leader_elects_the_next_voter_in_one_epoch_well_before_the_fetch_timeout() -> None:
    cluster = Cluster()
    cluster.run(3000)
    old = cluster.leader()
    epoch = old.epoch
    del cluster.cores[old.node_id]
    killed_at = cluster.now
    # Fetches parked at the dead leader come back as refused connections.
    for c in cluster.cores.values():
        for m in [m for m in cluster.sent if m.destination == old.node_id and m.source == c.node_id]:
            if c.requests.is_expected(old.node_id, m.correlation_id):
                c.handle(answer(m, error_response(m.api_key, msgs.BROKER_NOT_AVAILABLE)), cluster.now)
                cluster.drain(c.node_id)
    cluster.run(600)
    new = cluster.leader()
    assert new.epoch == epoch + 1 and new.node_id == min(VOTERS - {old.node_id})
    assert cluster.now - killed_at < 2000


def test_observer_stops_asking_a_hung_leader_once_a_fetch_to_it_timed_out() -> None:
    """SIGSTOP of the leader: nothing is refused, the observer's fetch times out
    (controller.quorum.request.timeout.ms). For the next request timeout it asks only the other
    voters, not the hung leader again (which would hold its one fetch for another 2 s), until
    one names the new leader."""
    c = core(9, election=Election(3, leader_id=2))
    (fetch,) = sent(c, msgs.FETCH)
    assert fetch.destination == 2  # never answered
    asked = []
    for now in range(2000, 3900, 50):  # the fetch timeout passed, then the request timeout
        c.tick(now)
        for m in sent(c, msgs.FETCH):
            asked.append(m.destination)
            if m.destination != 2:  # the others still follow the hung leader
                c.handle(answer(m, msgs.fetch_response(Errors.NOT_LEADER_OR_FOLLOWER, 3, 2, -1)), now)
    assert len(asked) > 10 and 2 not in asked, asked
    last = sent_fetch(c, 3900)
    assert last.destination != 2
    c.handle(answer(last, msgs.fetch_response(Errors.FENCED_LEADER_EPOCH, 4, 3, -1)), 3901)
    assert isinstance(c.state, FollowerState) and (c.leader_id, c.epoch) == (3, 4)


def test_prospective_stands_as_candidate_when_a_voter_cannot_take_a_pre_vote() -> None:
    """A voter that serves Vote only below v2 (Kafka before 4.0): the network channel answers
    the pre-vote with UNSUPPORTED_VERSION, and the prospective node stands as a candidate at
    once (Kafka's KafkaRaftClient), asking with real votes the peer can take."""
    c = core(1, election=Election(3, leader_id=2))
    c.ready()
    c.tick(2000)
    votes = {m.destination: m for m in sent(c, msgs.VOTE)}
    assert isinstance(c.state, ProspectiveState) and partition_of(votes[3].data)["pre_vote"]
    c.handle(answer(votes[3], error_response(msgs.VOTE, int(Errors.UNSUPPORTED_VERSION))), 2001)
    assert isinstance(c.state, CandidateState) and c.epoch == 4
    real = sent(c, msgs.VOTE)
    assert {m.destination for m in real} == {2, 3}
    assert not any(partition_of(m.data)["pre_vote"] for m in real)
    # Once a candidate, the error is an ordinary failed request: no new election.
    c.handle(answer(real[0], error_response(msgs.VOTE, int(Errors.UNSUPPORTED_VERSION))), 2002)
    assert isinstance(c.state, CandidateState) and c.epoch == 4
