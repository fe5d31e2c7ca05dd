"""The sans-I/O KRaft core (odradek/raft/raft_core.py): elections, pull replication, commits,
Kafka's errors for bad input, DescribeQuorum and graceful resignation. Messages are delivered
by hand; time is a number."""

from __future__ import annotations

import random
from typing import Any

import pytest

from odradek.protocol.errors import Errors
from odradek.raft import raft_messages as msgs
from odradek.raft.epoch_state import Election, FollowerState, LeaderState, ProspectiveState
from odradek.raft.quorum import QuorumConfig
from odradek.raft.raft_core import Append, NotLeader, RaftCore, Ready, Truncate
from odradek.raft.raft_log import LogBatch, OffsetAndEpoch
from odradek.raft.raft_messages import RaftMessage

CLUSTER = "test-cluster"
VOTERS = frozenset({1, 2, 3})
EMPTY = OffsetAndEpoch(0, 0)


def core(node_id: int, voters: frozenset[int] = VOTERS, **kwargs: Any) -> RaftCore:
    return RaftCore(node_id, voters, CLUSTER, QuorumConfig(), random.Random(node_id), 0, **kwargs)


class Cluster:
    """Cores on a perfect network: every message delivered, every append fsynced at once."""

    def __init__(self, voters: frozenset[int] = VOTERS, observers: tuple[int, ...] = ()) -> None:
        self.cores = {i: core(i, voters) for i in sorted(voters | set(observers))}
        self.now = 0
        self.committed: dict[int, list[Any]] = {i: [] for i in self.cores}
        self.elections: dict[int, Election] = {}
        self.sent: list[RaftMessage] = []

    def drain(self, node_id: int) -> list[RaftMessage]:
        c = self.cores[node_id]
        ready: Ready = c.ready()
        if ready.election is not None:
            self.elections[node_id] = ready.election
        if ready.log_ops:
            c.durable(c.log.end_offset, self.now)
            extra = c.ready()
            ready.committed += extra.committed
            ready.messages += extra.messages
        for batch in ready.committed:
            self.committed[node_id].extend(batch.records)
        self.sent += ready.messages
        return ready.messages

    def run(self, ms: int, step: int = 10) -> None:
        end = self.now + ms
        while self.now < end:
            self.now += step
            queue: list[RaftMessage] = []
            for node_id, c in self.cores.items():
                c.tick(self.now)
                queue += self.drain(node_id)
            self.deliver(queue)

    def deliver(self, queue: list[RaftMessage]) -> None:
        for _ in range(1000):
            if not queue:
                break
            message = queue.pop(0)
            if message.destination not in self.cores:
                continue  # a node that is gone
            self.cores[message.destination].handle(message, self.now)
            queue += self.drain(message.destination)

    def leader(self) -> RaftCore:
        leaders = [c for c in self.cores.values() if c.is_leader()]
        assert len(leaders) == 1, [repr(c.state) for c in self.cores.values()]
        return leaders[0]


def request(
    api_key: int, data: dict[str, Any], source: int = 2, destination: int = 1
) -> RaftMessage:
    return RaftMessage(source, destination, api_key, 7, data)


def only_response(c: RaftCore, correlation_id: int = 7) -> dict[str, Any]:
    ready = c.ready()
    responses = [m for m in ready.messages if m.is_response and m.correlation_id == correlation_id]
    assert len(responses) == 1, ready.messages
    return responses[0].data


def partition_of(data: dict[str, Any], key: str = "topics") -> dict[str, Any]:
    part = msgs.single_partition(data, key)
    assert part is not None, data
    return part


def test_single_voter_elects_itself_and_commits_after_fsync() -> None:
    c = core(1, frozenset({1}))
    c.tick(2000)  # the first election timeout is at most 2 x election.timeout.ms
    assert c.is_leader() and c.epoch == 1
    ready = c.ready()
    assert ready.election == Election(1, leader_id=1)
    (append,) = ready.log_ops
    assert isinstance(append, Append) and append.batch.control
    assert append.batch.records[0]["leader_id"] == 1
    assert not ready.committed  # nothing is durable yet
    offset = c.propose(1, ["a", "b"], 2001)
    assert offset == 2
    assert not c.ready().committed
    c.durable(3, 2002)
    committed = c.ready().committed
    assert [r for b in committed for r in b.records][1:] == ["a", "b"]
    assert c.high_watermark == 3
    with pytest.raises(NotLeader):
        c.propose(2, ["x"], 2003)  # not the epoch it leads


def test_three_voters_elect_one_leader_and_replicate_by_pulling() -> None:
    cluster = Cluster(observers=(9,))
    cluster.run(3000)
    leader = cluster.leader()
    followers = [c for c in cluster.cores.values() if c is not leader]
    assert all(
        isinstance(c.state, FollowerState) and c.leader_id == leader.node_id for c in followers
    )
    fetches = [m for m in cluster.sent if m.api_key == msgs.FETCH and not m.is_response]
    assert {m.source for m in fetches} >= {9} | (VOTERS - {leader.node_id})
    sample = partition_of(fetches[-1].data)
    assert fetches[-1].data["replica_id"] == fetches[-1].source
    assert sample["last_fetched_epoch"] == leader.epoch
    leader.propose(leader.epoch, ["x", "y"], cluster.now)
    cluster.run(1000)
    for node_id in cluster.cores:
        assert cluster.committed[node_id][-2:] == ["x", "y"], node_id
    describe = request(
        msgs.DESCRIBE_QUORUM,
        {"topics": [{"topic_name": msgs.METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]},
        9,
        leader.node_id,
    )
    leader.handle(describe, cluster.now)
    part = partition_of(only_response(leader))
    assert part["leader_id"] == leader.node_id and part["high_watermark"] == leader.log_end_offset
    assert [v["replica_id"] for v in part["current_voters"]] == [1, 2, 3]
    assert [o["replica_id"] for o in part["observers"]] == [9]


def test_observer_fetches_do_not_count_toward_the_high_watermark() -> None:
    cluster = Cluster(observers=(9,))
    cluster.run(3000)
    leader = cluster.leader()
    state = leader.state
    assert isinstance(state, LeaderState)
    hw = state.high_watermark
    for other in VOTERS - {leader.node_id}:  # the voters stop fetching
        del cluster.cores[other]
    leader.propose(leader.epoch, ["z"], cluster.now)
    cluster.run(400)
    assert state.observer_states[9].end_offset == leader.log_end_offset
    assert state.high_watermark == hw
    assert "z" not in cluster.committed[leader.node_id]


def test_graceful_shutdown_resigns_to_the_most_caught_up_voter() -> None:
    cluster = Cluster()
    cluster.run(3000)
    old = cluster.leader()
    old_epoch = old.epoch
    old.begin_shutdown(cluster.now, 5000)
    ready = old.ready()
    ends = [m for m in ready.messages if m.api_key == msgs.END_QUORUM_EPOCH]
    assert {m.destination for m in ends} == VOTERS - {old.node_id}
    successors = partition_of(ends[0].data)["preferred_successors"]
    assert sorted(successors) == sorted(VOTERS - {old.node_id})
    cluster.deliver(ready.messages)
    cluster.run(200)  # the first preferred successor runs at once (election.backoff.max.ms)
    new = [c for c in cluster.cores.values() if c.is_leader()]
    assert len(new) == 1 and new[0] is not old and new[0].epoch == old_epoch + 1
    assert old.is_shutdown_complete(cluster.now)


def vote(candidate: int, epoch: int, last: OffsetAndEpoch = EMPTY, **over: Any) -> dict[str, Any]:
    data = msgs.vote_request(CLUSTER, candidate, epoch, last, 1, pre_vote=False)
    data.update(over)
    return data


def test_vote_from_a_non_voter_is_inconsistent_voter_set() -> None:
    c = core(1)
    c.handle(request(msgs.VOTE, vote(7, 1), source=7), 0)
    part = partition_of(only_response(c))
    assert part["error_code"] == Errors.INCONSISTENT_VOTER_SET
    assert not part["vote_granted"] and c.epoch == 0


def test_observer_never_votes() -> None:
    observer = core(9)
    observer.handle(request(msgs.VOTE, vote(2, 1), source=2, destination=9), 0)
    part = partition_of(only_response(observer))
    assert part["error_code"] == Errors.INCONSISTENT_VOTER_SET
    assert not part["vote_granted"]
    observer.tick(10**6)
    assert not [m for m in observer.ready().messages if m.api_key == msgs.VOTE]


def test_vote_from_another_cluster_is_inconsistent_cluster_id() -> None:
    c = core(1)
    c.handle(request(msgs.VOTE, vote(2, 1, cluster_id="other")), 0)
    assert only_response(c)["error_code"] == Errors.INCONSISTENT_CLUSTER_ID
    assert c.epoch == 0


def test_stale_epoch_is_fenced_and_future_epoch_is_followed() -> None:
    c = core(1, election=Election(5))
    c.handle(request(msgs.VOTE, vote(2, 4)), 0)
    assert partition_of(only_response(c))["error_code"] == Errors.FENCED_LEADER_EPOCH
    c.handle(request(msgs.VOTE, vote(2, 8)), 0)
    ready = c.ready()
    assert ready.election == Election(8, voted_id=2)  # persisted before the grant leaves
    (response,) = [m for m in ready.messages if m.is_response]
    part = partition_of(response.data)
    assert part["vote_granted"] and part["leader_epoch"] == 8
    c.handle(request(msgs.VOTE, vote(3, 8), source=3), 0)
    assert not partition_of(only_response(c))["vote_granted"]  # one vote per epoch


def test_vote_for_a_candidate_with_a_shorter_log_is_rejected() -> None:
    c = core(1, election=Election(2, leader_id=2), batches=[LogBatch(0, 2, ("a", "b"))])
    c.handle(request(msgs.VOTE, vote(3, 3, OffsetAndEpoch(1, 2)), source=3), 0)
    assert not partition_of(only_response(c))["vote_granted"]
    c.handle(request(msgs.VOTE, vote(3, 4, OffsetAndEpoch(2, 2)), source=3), 0)
    assert partition_of(only_response(c))["vote_granted"]


def test_begin_quorum_epoch_from_a_non_voter_and_from_the_leader() -> None:
    c = core(1)
    bad = msgs.begin_quorum_epoch_request(CLUSTER, 7, 3, 1)
    c.handle(request(msgs.BEGIN_QUORUM_EPOCH, bad, source=7), 0)
    assert partition_of(only_response(c))["error_code"] == Errors.INCONSISTENT_VOTER_SET
    good = msgs.begin_quorum_epoch_request(CLUSTER, 2, 3, 1)
    c.handle(request(msgs.BEGIN_QUORUM_EPOCH, good), 10)
    ready = c.ready()
    assert ready.election == Election(3, leader_id=2)
    assert isinstance(c.state, FollowerState) and c.leader_id == 2
    (fetch,) = [m for m in ready.messages if m.api_key == msgs.FETCH]
    assert fetch.destination == 2
    part = partition_of(fetch.data)
    assert (part["fetch_offset"], part["last_fetched_epoch"], part["current_leader_epoch"]) == (
        0,
        0,
        3,
    )


def test_fetch_with_a_diverging_epoch_makes_the_follower_truncate() -> None:
    leader = core(
        1, voters=frozenset({1}), batches=[LogBatch(0, 1, ("a", "b")), LogBatch(2, 3, ("c",))]
    )
    leader.tick(3000)
    assert leader.is_leader() and leader.epoch == 4
    leader.ready()
    # A voter that has offsets 0-3 of epoch 1 and 2: it diverges after offset 2 (end of epoch 1).
    fetch = msgs.fetch_request(CLUSTER, 2, 4, 4, 2)
    leader.handle(request(msgs.FETCH, fetch, 2, 1), 3001)
    part = partition_of(only_response(leader), "responses")
    assert part["diverging_epoch"] == {"epoch": 1, "end_offset": 2}
    assert part["records"] == []
    # The follower's side: it truncates to the end of epoch 1.
    follower = core(
        2,
        frozenset({1, 2, 3}),
        election=Election(4, leader_id=1),
        batches=[LogBatch(0, 1, ("a", "b")), LogBatch(2, 2, ("x", "y"))],
    )
    (sent,) = [m for m in follower.ready().messages if m.api_key == msgs.FETCH]
    response = msgs.fetch_response(0, 4, 1, -1, diverging=OffsetAndEpoch(2, 1))
    follower.handle(RaftMessage(1, 2, msgs.FETCH, sent.correlation_id, response, True), 10)
    ops = follower.ready().log_ops
    assert ops == [Truncate(2)]
    assert follower.log_end_offset == 2


def test_fetch_errors_follow_kafka() -> None:
    c = core(1, frozenset({1}))
    c.tick(3000)
    c.ready()
    cases = [
        (msgs.fetch_request(CLUSTER, 2, 0, 0, 0), Errors.FENCED_LEADER_EPOCH),
        (msgs.fetch_request(CLUSTER, 2, 9, 0, 0), Errors.UNKNOWN_LEADER_EPOCH),
        (msgs.fetch_request(CLUSTER, 2, 1, 0, 5), Errors.INVALID_REQUEST),  # last epoch > epoch
    ]
    for data, error in cases:
        c.handle(request(msgs.FETCH, data, 2, 1), 3001)
        assert partition_of(only_response(c), "responses")["error_code"] == error
    other = msgs.fetch_request("another-cluster", 2, 1, 0, 0)
    c.handle(request(msgs.FETCH, other, 2, 1), 3001)
    assert only_response(c)["error_code"] == Errors.INCONSISTENT_CLUSTER_ID
    follower = core(2, election=Election(1, leader_id=1))
    follower.ready()
    follower.handle(request(msgs.FETCH, msgs.fetch_request(CLUSTER, 3, 1, 0, 0), 3, 2), 0)
    assert (
        partition_of(only_response(follower), "responses")["error_code"]
        == Errors.NOT_LEADER_OR_FOLLOWER
    )


def test_malformed_request_is_answered_not_raised() -> None:
    c = core(1)
    c.handle(request(msgs.VOTE, {"cluster_id": CLUSTER, "topics": "nonsense"}), 0)
    assert only_response(c)["error_code"] == Errors.INVALID_REQUEST
    broken = vote(2, 1)
    del broken["topics"][0]["partitions"][0]["candidate_epoch"]
    c.handle(request(msgs.VOTE, broken), 0)
    assert only_response(c)["error_code"] == Errors.INVALID_REQUEST
    assert c.epoch == 0


def test_follower_times_out_into_a_pre_vote_not_a_new_epoch() -> None:
    c = core(1, election=Election(3, leader_id=2))
    c.ready()
    c.tick(2000)  # controller.quorum.fetch.timeout.ms without a successful fetch
    assert isinstance(c.state, ProspectiveState) and c.epoch == 3
    ready = c.ready()
    votes = [m for m in ready.messages if m.api_key == msgs.VOTE]
    assert {m.destination for m in votes} == {2, 3}
    part = partition_of(votes[0].data)
    assert part["pre_vote"] and part["candidate_epoch"] == 3


def _hostile(data: Any, rng: random.Random) -> Any:
    """``data`` with some values replaced by odd ones of the same or another type."""
    if isinstance(data, dict):
        return {k: _hostile(v, rng) for k, v in data.items() if rng.random() > 0.05}
    if isinstance(data, list):
        return [_hostile(v, rng) for v in data]
    if isinstance(data, bool) or not isinstance(data, int) or rng.random() > 0.3:
        return data
    return rng.choice([-1, 0, 1, 2, 3, 7, 99, -(2**31), 2**31 - 1, None, "x"])


def test_hostile_requests_and_responses_never_raise() -> None:
    rng = random.Random(5)
    cluster = Cluster(observers=(9,))
    cluster.run(3000)
    samples = [m for m in cluster.sent if m.api_key != msgs.DESCRIBE_QUORUM][-60:]
    assert {m.api_key for m in samples} >= {msgs.FETCH}
    templates = samples + [
        request(msgs.VOTE, vote(2, 5)),
        request(msgs.BEGIN_QUORUM_EPOCH, msgs.begin_quorum_epoch_request(CLUSTER, 2, 5, 1)),
        request(msgs.END_QUORUM_EPOCH, msgs.end_quorum_epoch_request(CLUSTER, 2, 5, [1, 3])),
    ]
    for _ in range(600):
        template = rng.choice(templates)
        target = rng.choice(sorted(cluster.cores))
        message = RaftMessage(
            template.source,
            target,
            template.api_key,
            template.correlation_id,
            _hostile(template.data, rng),
            template.is_response,
        )
        cluster.cores[target].handle(message, cluster.now)
        cluster.drain(target)
    cluster.run(6000)  # and the quorum still works afterwards
    leader = cluster.leader()
    leader.propose(leader.epoch, ["after"], cluster.now)
    cluster.run(1000)
    assert all(c[-1:] == ["after"] for c in cluster.committed.values())


def test_a_fetch_is_answered_at_once_when_the_high_watermark_moved_since_the_last_answer() -> None:
    """An observer got records before they were committed (old HW); the commit lands before its
    next fetch. That fetch, with nothing new to read, is answered at once with the new HW rather
    than parked for max_wait_ms; a fetch with nothing new at all is parked as before."""
    c = core(1, frozenset({1}))
    c.tick(2000)
    c.durable(c.log.end_offset, 2000)
    c.ready()
    hw = c.high_watermark
    assert hw == c.log.end_offset

    def observer_fetch(offset: int, correlation: int, now: int) -> None:
        data = msgs.fetch_request(CLUSTER, 9, c.epoch, offset, c.epoch)
        c.handle(RaftMessage(9, 1, msgs.FETCH, correlation, data), now)

    def answer(correlation: int) -> dict[str, Any] | None:
        found = [m.data for m in c.ready().messages if m.is_response and m.correlation_id == correlation]
        return partition_of(found[0], "responses") if found else None

    observer_fetch(hw, 1, 2001)  # caught up: parked (its first answer tells it the HW at once)
    first = answer(1)
    assert first is not None and first["high_watermark"] == hw
    observer_fetch(hw, 2, 2002)
    assert answer(2) is None  # nothing new: parked
    c.propose(c.epoch, ["a"], 2003)  # the parked fetch gets the record, not yet committed
    got = answer(2)
    assert got is not None and got["high_watermark"] == hw and got["records"]
    c.durable(c.log.end_offset, 2004)  # committed: HW moves, nobody is parked
    c.ready()
    assert c.high_watermark == hw + 1
    observer_fetch(hw + 1, 3, 2005)
    now_answer = answer(3)
    assert now_answer is not None and now_answer["high_watermark"] == hw + 1 and not now_answer["records"]
    observer_fetch(hw + 1, 4, 2006)
    assert answer(4) is None  # the HW it has: parked until something new
