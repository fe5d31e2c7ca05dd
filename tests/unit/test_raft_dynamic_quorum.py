"""Dynamic quorum (KIP-853) in the sans-I/O Raft core: the voter set comes from the log's
VotersRecord, AddRaftVoter / RemoveRaftVoter one change at a time, the catch-up rule, a leader
that removes itself resigns, a voter set that follows truncation, UpdateRaftVoter, and Kafka's
errors. Messages are delivered by hand on a perfect network; time is a number."""

from __future__ import annotations

import random
import uuid
from typing import Any

from odradek.protocol.errors import Errors
from odradek.raft import control_records as cr
from odradek.raft import raft_messages as msgs
from odradek.raft.dynamic_quorum import (
    ADD_RAFT_VOTER,
    REMOVE_RAFT_VOTER,
    DynamicQuorum,
)
from odradek.raft.epoch_state import FollowerState, LeaderState, ResignedState
from odradek.raft.kraft_control_record_state_machine import KRaftControlRecordStateMachine
from odradek.raft.quorum import QuorumConfig
from odradek.raft.raft_core import RaftCore, Ready
from odradek.raft.raft_log import LogBatch, OffsetAndEpoch
from odradek.raft.raft_messages import RaftMessage
from odradek.raft.record_batches import BatchCodec
from odradek.raft.voter_set import VoterNode, VoterSet

CLUSTER = "test-cluster"
LISTENER = "CONTROLLER"


def dir_id(node_id: int) -> uuid.UUID:
    return uuid.UUID(int=1000 + node_id)


def node(node_id: int, port: int | None = None) -> VoterNode:
    port = 9000 + node_id if port is None else port
    return VoterNode(node_id, dir_id(node_id), ((LISTENER, "127.0.0.1", port),), 0, 1)


def dynamic_core(
    node_id: int,
    bootstrap: VoterSet | None,
    kraft_version: int = 1,
    bootstrap_ids: tuple[int, ...] = (),
    local: VoterNode | None = None,
) -> RaftCore:
    """A controller formatted with --standalone / --initial-controllers (``bootstrap``) or with
    --no-initial-controllers (None: it learns the voters from the leader's log)."""
    sm = KRaftControlRecordStateMachine(None, kraft_version if bootstrap else 0, bootstrap)
    dq = DynamicQuorum(node_id, sm, local or node(node_id), LISTENER)
    return RaftCore(
        node_id,
        frozenset(),
        CLUSTER,
        QuorumConfig(),
        random.Random(node_id),
        0,
        dynamic=dq,
        bootstrap_ids=bootstrap_ids,
    )


class Cluster:
    """Cores on a perfect network (each append fsynced at once); ``down`` nodes get nothing."""

    def __init__(self, cores: dict[int, RaftCore]) -> None:
        self.cores = cores
        self.now = 0
        self.down: set[int] = set()
        self.responses: dict[int, dict[str, Any]] = {}  # correlation id -> voter change answer
        self.committed: dict[int, list[Any]] = {i: [] for i in cores}

    def drain(self, node_id: int) -> list[RaftMessage]:
        c = self.cores[node_id]
        ready: Ready = c.ready()
        if ready.log_ops:
            c.durable(c.log.end_offset, self.now)
            extra = c.ready()
            ready.committed += extra.committed
            ready.messages += extra.messages
        for batch in ready.committed:
            if not batch.control:
                self.committed[node_id].extend(batch.records)
        out = []
        for m in ready.messages:
            if m.is_response and m.api_key in (ADD_RAFT_VOTER, REMOVE_RAFT_VOTER):
                self.responses[m.correlation_id] = m.data
            else:
                out.append(m)
        return out

    def run(self, ms: int, step: int = 10) -> None:
        end = self.now + ms
        while self.now < end:
            self.now += step
            queue: list[RaftMessage] = []
            for node_id, c in self.cores.items():
                if node_id not in self.down:
                    c.tick(self.now)
                    queue += self.drain(node_id)
            self.deliver(queue)

    def deliver(self, queue: list[RaftMessage]) -> None:
        for _ in range(5000):
            if not queue:
                break
            m = queue.pop(0)
            if m.destination not in self.cores or m.destination in self.down or m.source in self.down:
                continue
            self.cores[m.destination].handle(m, self.now)
            queue += self.drain(m.destination)

    def leaders(self) -> list[RaftCore]:
        return [c for i, c in self.cores.items() if c.is_leader() and i not in self.down]

    def leader(self) -> RaftCore:
        (leader,) = self.leaders()
        return leader

    def call(
        self, api: int, data: dict[str, Any], correlation: int, to: int | None = None, deliver: bool = True
    ) -> list[RaftMessage]:
        """A voter change request to the leader (or ``to``); the messages it caused are
        delivered unless ``deliver`` is False (then they are returned)."""
        target = self.leader() if to is None else self.cores[to]
        target.handle(RaftMessage(-1, target.node_id, api, correlation, data), self.now)
        out = self.drain(target.node_id)
        if deliver:
            self.deliver(out)
            return []
        return out


def add_voter(n: VoterNode, timeout_ms: int = 30_000) -> dict[str, Any]:
    return {
        "cluster_id": CLUSTER,
        "timeout_ms": timeout_ms,
        "voter_id": n.voter_id,
        "voter_directory_id": n.directory_id,
        "listeners": [{"name": a, "host": h, "port": p} for a, h, p in n.endpoints],
    }


def remove_voter(voter_id: int, directory: uuid.UUID | None = None) -> dict[str, Any]:
    return {
        "cluster_id": CLUSTER,
        "voter_id": voter_id,
        "voter_directory_id": directory or dir_id(voter_id),
    }


def standalone_cluster(joiners: tuple[int, ...] = (2, 3)) -> Cluster:
    """Node 1 formatted with --standalone; the others with --no-initial-controllers, knowing
    only node 1 as their bootstrap server."""
    cores = {1: dynamic_core(1, VoterSet.of([node(1)]))}
    for j in joiners:
        cores[j] = dynamic_core(j, None, bootstrap_ids=(1,))
    return Cluster(cores)


def test_standalone_leader_writes_the_voter_set_into_its_log() -> None:
    cluster = standalone_cluster(())
    cluster.run(100)
    leader = cluster.leader()
    first = leader.log.batches[0]
    assert first.control
    kinds = [r.control_type for r in first.records[1:]]
    assert kinds == [cr.KRAFT_VERSION, cr.KRAFT_VOTERS]
    voters = VoterSet.from_voters_record(first.records[2].data)
    assert voters.ids == {1} and voters.get(1) == node(1)
    # The records survive the wire format (what followers and the disk see).
    codec: BatchCodec[Any] = BatchCodec(_NoSerde())
    (decoded,) = list(codec.decode(codec.encode(first)))
    sm = KRaftControlRecordStateMachine(None)
    sm.update([decoded])
    assert sm.last_kraft_version() == 1 and sm.last_voter_set().ids == {1}


class _NoSerde:
    def write(self, record: Any) -> bytes:
        raise AssertionError("no data records here")

    def read(self, data: Any) -> Any:
        raise AssertionError("no data records here")


def test_add_voters_one_at_a_time_then_the_quorum_survives_the_first() -> None:
    cluster = standalone_cluster()
    cluster.run(3000)
    leader = cluster.leader()
    assert leader.node_id == 1 and leader.voters == {1}
    # The joiners found the leader through the bootstrap server and follow it as observers.
    for j in (2, 3):
        assert cluster.cores[j].quorum.is_observer and cluster.cores[j].leader_id == 1
    held = cluster.call(ADD_RAFT_VOTER, add_voter(node(2)), 11, deliver=False)
    # In effect on the leader at once, answered only once committed.
    assert leader.voters == {1, 2} and 11 not in cluster.responses
    # A second change while the first is pending: REQUEST_TIMED_OUT.
    cluster.call(ADD_RAFT_VOTER, add_voter(node(3)), 12, deliver=False)
    assert cluster.responses[12]["error_code"] == Errors.REQUEST_TIMED_OUT
    cluster.deliver(held)
    cluster.run(1000)
    assert cluster.responses[11]["error_code"] == Errors.NONE
    cluster.call(ADD_RAFT_VOTER, add_voter(node(3)), 13)
    cluster.run(1000)
    assert cluster.responses[13]["error_code"] == Errors.NONE
    for c in cluster.cores.values():
        assert c.voters == {1, 2, 3} and c.quorum.is_voter, c.node_id
    leader.propose(leader.epoch, ["before"], cluster.now)
    cluster.run(500)
    # Kill the first controller: 2 and 3 elect a leader and commit without it.
    cluster.down.add(1)
    cluster.run(6000)
    new = cluster.leader()
    assert new.node_id in (2, 3) and new.epoch > leader.epoch
    new.propose(new.epoch, ["after"], cluster.now)
    cluster.run(1000)
    for j in (2, 3):
        assert cluster.committed[j][-2:] == ["before", "after"]


def test_add_voter_that_is_not_caught_up_times_out() -> None:
    cluster = standalone_cluster((2, 3))
    cluster.down.add(3)  # 3 never fetched
    cluster.run(3000)
    leader = cluster.leader()
    cluster.call(ADD_RAFT_VOTER, add_voter(node(3)), 21)
    answer = cluster.responses[21]
    assert answer["error_code"] == Errors.REQUEST_TIMED_OUT
    assert "lagging" in answer["error_message"]
    assert leader.voters == {1}
    # An observer that fetched long ago is not caught up either.
    cluster.down.discard(3)
    cluster.run(1000)
    cluster.down.add(3)
    cluster.run(QuorumConfig().fetch_timeout_ms + 500)
    cluster.call(ADD_RAFT_VOTER, add_voter(node(3)), 22)
    assert cluster.responses[22]["error_code"] == Errors.REQUEST_TIMED_OUT
    cluster.down.discard(3)
    cluster.run(1000)
    cluster.call(ADD_RAFT_VOTER, add_voter(node(3)), 23)
    cluster.run(500)
    assert cluster.responses[23]["error_code"] == Errors.NONE


def test_voter_change_errors_are_kafkas() -> None:
    cluster = standalone_cluster((2,))
    cluster.run(3000)
    cluster.call(ADD_RAFT_VOTER, add_voter(node(1)), 31)
    assert cluster.responses[31]["error_code"] == Errors.DUPLICATE_VOTER
    cluster.call(REMOVE_RAFT_VOTER, remove_voter(7), 32)
    assert cluster.responses[32]["error_code"] == Errors.VOTER_NOT_FOUND
    cluster.call(REMOVE_RAFT_VOTER, remove_voter(1, uuid.UUID(int=5)), 33)  # wrong directory
    assert cluster.responses[33]["error_code"] == Errors.VOTER_NOT_FOUND
    cluster.call(REMOVE_RAFT_VOTER, remove_voter(1), 34)  # the last voter
    assert cluster.responses[34]["error_code"] == Errors.VOTER_NOT_FOUND
    bad = add_voter(node(2))
    bad["voter_directory_id"] = uuid.UUID(int=0)
    cluster.call(ADD_RAFT_VOTER, bad, 35)
    assert cluster.responses[35]["error_code"] == Errors.INVALID_REQUEST
    no_listener = add_voter(node(2))
    no_listener["listeners"] = [{"name": "OTHER", "host": "h", "port": 1}]
    cluster.call(ADD_RAFT_VOTER, no_listener, 36)
    assert cluster.responses[36]["error_code"] == Errors.INVALID_REQUEST
    cluster.call(ADD_RAFT_VOTER, add_voter(node(3)), 37, to=2)  # an observer, not the leader
    assert cluster.responses[37]["error_code"] == Errors.NOT_LEADER_OR_FOLLOWER
    other = dict(add_voter(node(2)), cluster_id="another")
    cluster.call(ADD_RAFT_VOTER, other, 38)
    assert cluster.responses[38]["error_code"] == Errors.INCONSISTENT_CLUSTER_ID
    garbage = {"cluster_id": CLUSTER, "voter_id": "x", "listeners": None}  # not decodable
    cluster.call(ADD_RAFT_VOTER, garbage, 39)
    assert cluster.responses[39]["error_code"] == Errors.INVALID_REQUEST
    cluster.call(REMOVE_RAFT_VOTER, {"cluster_id": CLUSTER}, 40)
    assert cluster.responses[40]["error_code"] == Errors.INVALID_REQUEST
    assert cluster.leader().voters == {1}


def test_kraft_version_0_does_not_support_voter_changes() -> None:
    static = RaftCore(1, frozenset({1}), CLUSTER, QuorumConfig(), random.Random(1), 0)
    static.tick(2000)
    static.durable(static.log.end_offset, 2000)
    assert static.is_leader()
    static.ready()
    static.handle(RaftMessage(-1, 1, ADD_RAFT_VOTER, 5, add_voter(node(2))), 2001)
    (answer,) = [m.data for m in static.ready().messages if m.correlation_id == 5]
    assert answer["error_code"] == Errors.UNSUPPORTED_VERSION


def three_voter_cluster() -> Cluster:
    """Three controllers formatted with the same --initial-controllers."""
    voters = VoterSet.of([node(1), node(2), node(3)])
    return Cluster({i: dynamic_core(i, voters) for i in (1, 2, 3)})


def test_leader_that_removes_itself_resigns_after_the_commit() -> None:
    cluster = three_voter_cluster()
    cluster.run(3000)
    old = cluster.leader()
    old_epoch = old.epoch
    others = {1, 2, 3} - {old.node_id}
    held = cluster.call(REMOVE_RAFT_VOTER, remove_voter(old.node_id), 41, deliver=False)
    assert old.voters == others and isinstance(old.state, LeaderState)  # leads until committed
    cluster.deliver(held)
    cluster.run(200)
    assert cluster.responses[41]["error_code"] == Errors.NONE
    cluster.run(4000)
    assert not old.quorum.is_voter
    new = cluster.leader()
    assert new.node_id in others and new.epoch > old_epoch
    for c in cluster.cores.values():
        assert c.voters == others
    # The removed node follows as an observer; its votes are no longer asked for.
    assert isinstance(old.state, FollowerState) and old.leader_id == new.node_id
    new.propose(new.epoch, ["after removal"], cluster.now)
    cluster.run(1000)
    assert cluster.committed[old.node_id][-1] == "after removal"


def test_remove_a_follower_then_the_quorum_is_two() -> None:
    cluster = three_voter_cluster()
    cluster.run(3000)
    leader = cluster.leader()
    gone = max({1, 2, 3} - {leader.node_id})
    cluster.call(REMOVE_RAFT_VOTER, remove_voter(gone), 51)
    cluster.run(300)
    assert cluster.responses[51]["error_code"] == Errors.NONE
    assert cluster.cores[gone].quorum.is_observer
    cluster.down.add(gone)
    leader.propose(leader.epoch, ["two voters"], cluster.now)
    cluster.run(300)
    assert cluster.committed[leader.node_id][-1] == "two voters"


def _fetch_answer(c: RaftCore, now: int, **kw: Any) -> None:
    ready = c.ready()
    fetches = [m for m in ready.messages if m.api_key == msgs.FETCH and not m.is_response]
    assert fetches, ready.messages
    f = fetches[-1]
    c.handle(
        RaftMessage(f.destination, f.source, msgs.FETCH, f.correlation_id, msgs.fetch_response(msgs.NONE, 1, 1, **kw), True),
        now,
    )


def test_voter_set_follows_truncation_back_to_the_older_set() -> None:
    voters = VoterSet.of([node(1), node(2), node(3)])
    c = dynamic_core(2, voters)
    begin = msgs.begin_quorum_epoch_request(CLUSTER, 1, 1, 2)
    c.handle(RaftMessage(1, 2, msgs.BEGIN_QUORUM_EPOCH, 3, begin), 10)
    # The leader's uncommitted VotersRecord removing node 3 reaches this follower ...
    removed = VoterSet.of([node(1), node(2)])
    batch = LogBatch(0, 1, (cr.ControlRecord(cr.KRAFT_VOTERS, removed.to_voters_record()),), 20, True)
    _fetch_answer(c, 30, high_watermark=0, records=[batch])
    assert c.voters == {1, 2}
    c.durable(c.log.end_offset, 31)  # fsynced: the next Fetch goes out
    # ... then a new leader of epoch 1 never had it: the follower truncates and goes back.
    _fetch_answer(c, 40, high_watermark=0, diverging=OffsetAndEpoch(0, 1))
    assert c.log.end_offset == 0
    c.tick(41)
    assert c.voters == {1, 2, 3}
    assert isinstance(c.state, FollowerState)


def test_voter_updates_its_endpoints_after_start() -> None:
    voters = VoterSet.of([node(1), node(2), node(3)])
    cores = {i: dynamic_core(i, voters) for i in (1, 2, 3)}
    cluster = Cluster(cores)
    cluster.run(3000)
    leader = cluster.leader()
    moved = max({1, 2, 3} - {leader.node_id})
    # The voter restarts with a new port: it tells the leader with UpdateRaftVoter.
    restarted = dynamic_core(moved, voters, local=node(moved, port=7777))
    cluster.cores[moved] = restarted
    cluster.run(2000)
    for c in cluster.cores.values():
        assert c.dynamic.voters.endpoint(moved, LISTENER) == ("127.0.0.1", 7777), c.node_id
    assert cluster.leader() is leader and not isinstance(leader.state, ResignedState)
