"""FetchSnapshot in the sans-I/O Raft core (odradek/raft/snapshot_fetch.py, fetch_paths.py): the
leader answers a Fetch below its log start with its snapshot id and serves the snapshot in
slices with Kafka's errors; a follower fetches it in chunks, installs it (its log starts at the
snapshot's end offset) and goes on fetching records from there. Messages are delivered by hand,
the "driver" here keeps snapshot files as bytes."""

from __future__ import annotations

import random
from typing import Any

from odradek.protocol.errors import Errors
from odradek.raft import raft_messages as msgs
from odradek.raft.epoch_state import Election, FollowerState
from odradek.raft.quorum import QuorumConfig
from odradek.raft.raft_core import RaftCore
from odradek.raft.raft_log import LogBatch, OffsetAndEpoch
from odradek.raft.raft_messages import RaftMessage
from odradek.raft.raft_ready import (
    Append,
    SnapshotAbort,
    SnapshotChunk,
    SnapshotInstall,
    Truncate,
)
from odradek.raft.snapshot_fetch import SnapshotSlice, fetch_snapshot_request

CLUSTER = "test-cluster"
VOTERS = frozenset({1, 2, 3})


def core(node_id: int, voters: frozenset[int] = VOTERS, **kwargs: Any) -> RaftCore:
    return RaftCore(node_id, voters, CLUSTER, QuorumConfig(), random.Random(node_id), 0, **kwargs)


class Node:
    """A core and what its driver keeps: the log's records by offset, snapshot files (bytes),
    the one being fetched."""

    def __init__(self, c: RaftCore) -> None:
        self.core = c
        self.files: dict[OffsetAndEpoch, bytes] = {}
        self.part = bytearray()
        self.committed: list[Any] = []
        self.installed: list[OffsetAndEpoch] = []
        self.ops: list[Any] = []


class Cluster:
    """Cores on a perfect network; node ids in ``down`` neither send nor receive."""

    def __init__(self, voters: frozenset[int] = VOTERS) -> None:
        self.nodes = {i: Node(core(i, voters)) for i in sorted(voters)}
        self.now = 0
        self.down: set[int] = set()
        self.sent: list[RaftMessage] = []

    def drain(self, node_id: int) -> list[RaftMessage]:
        node = self.nodes[node_id]
        c = node.core
        out: list[RaftMessage] = []
        for _ in range(10):
            ready = c.ready()
            if ready.is_empty():
                break
            for op in ready.log_ops:
                node.ops.append(op)
                if isinstance(op, SnapshotChunk):
                    if op.position == 0:
                        node.part = bytearray()
                    assert op.position == len(node.part)
                    node.part += op.data
                elif isinstance(op, SnapshotInstall):
                    if op.snapshot_id not in node.files:
                        assert len(node.part) == op.size
                        node.files = {op.snapshot_id: bytes(node.part)}
                    node.installed.append(op.snapshot_id)
                    # The listener loads the snapshot: the records it stands for.
                    node.committed = list(decode(node.files[op.snapshot_id]))
                elif isinstance(op, SnapshotAbort):
                    node.part = bytearray()
            if ready.log_ops:
                c.durable(c.log.end_offset, self.now)
            for batch in ready.committed:
                if not batch.control:
                    assert batch.base_offset >= len(node.committed) - len(batch.records)
                    node.committed.extend(batch.records)
            for m in ready.messages:
                out.append(self.serve(node, m))
        self.sent += out
        return out

    def serve(self, node: Node, m: RaftMessage) -> RaftMessage:
        """The leader's driver fills a FetchSnapshot answer with the bytes of its file."""
        if m.is_response and m.api_key == msgs.FETCH_SNAPSHOT and m.data["topics"]:
            p = m.data["topics"][0]["partitions"][0]
            piece = p["unaligned_records"]
            if isinstance(piece, SnapshotSlice):
                data = node.files[piece.snapshot_id]
                p["unaligned_records"] = data[piece.position : piece.position + piece.length]
        return m

    def run(self, ms: int, step: int = 10) -> None:
        end = self.now + ms
        while self.now < end:
            self.now += step
            queue: list[RaftMessage] = []
            for node_id, node in self.nodes.items():
                if node_id not in self.down:
                    node.core.tick(self.now)
                    queue += self.drain(node_id)
            for _ in range(2000):
                if not queue:
                    break
                message = queue.pop(0)
                if message.destination in self.down or message.source in self.down:
                    continue
                self.nodes[message.destination].core.handle(message, self.now)
                queue += self.drain(message.destination)

    def leader(self) -> Node:
        (leader,) = [n for i, n in self.nodes.items() if i not in self.down and n.core.is_leader()]
        return leader

    def snapshot(self, node: Node) -> OffsetAndEpoch:
        """What the node's snapshot generator and cleaner do: a snapshot of everything
        committed, then the log below it deleted."""
        c = node.core
        hw = c.high_watermark
        assert hw is not None
        (last,) = c.log.batches_between(hw - 1, hw)
        sid = OffsetAndEpoch(hw, last.epoch)
        node.files[sid] = encode(node.committed)
        c.update_snapshots({s: len(b) for s, b in node.files.items()}, sid, self.now)
        return sid


def encode(records: list[Any]) -> bytes:
    return "\n".join(records).encode()


def decode(data: bytes) -> list[str]:
    return data.decode().split("\n") if data else []


def leader_with_snapshot(records: int = 30) -> tuple[RaftCore, OffsetAndEpoch]:
    """A single voter that committed ``records`` records and snapshotted them."""
    c = core(1, frozenset({1}))
    c.tick(3000)
    for i in range(records):
        c.propose(c.epoch, [f"r{i}"], 3000)
    c.durable(c.log.end_offset, 3000)
    c.ready()
    assert c.high_watermark == records + 1
    sid = OffsetAndEpoch(records + 1, c.epoch)
    c.update_snapshots({sid: 100}, sid, 3000)
    c.ready()
    return c, sid


def fetch_partition(data: dict[str, Any]) -> dict[str, Any]:
    p = msgs.single_partition(data, "responses")
    assert p is not None, data
    return p


def answer(c: RaftCore, api_key: int, data: dict[str, Any], now: int = 3001) -> dict[str, Any]:
    c.handle(RaftMessage(2, 1, api_key, 7, data), now)
    (response,) = [m for m in c.ready().messages if m.is_response and m.correlation_id == 7]
    return response.data


def test_leader_answers_a_fetch_below_its_log_start_with_its_snapshot_id() -> None:
    c, sid = leader_with_snapshot()
    assert c.log.start == sid and c.log.batches == []  # the records below left memory too
    for offset, epoch in ((0, 0), (5, 1), (sid.offset, 0)):
        fetch = msgs.fetch_request(CLUSTER, 2, c.epoch, offset, epoch)
        p = fetch_partition(answer(c, msgs.FETCH, fetch))
        assert p["error_code"] == 0
        assert p["snapshot_id"] == {"end_offset": sid.offset, "epoch": sid.epoch}, (offset, epoch)
        assert p["records"] == []  # answered at once, not parked
    # At the log start with the snapshot's epoch: the log serves it (parked: nothing new).
    c.propose(c.epoch, ["after"], 3001)
    fetch = msgs.fetch_request(CLUSTER, 2, c.epoch, sid.offset, sid.epoch)
    p = fetch_partition(answer(c, msgs.FETCH, fetch))
    assert p["snapshot_id"] == {"end_offset": -1, "epoch": -1}
    assert [r for b in p["records"] for r in b.records] == ["after"]


def test_fetch_snapshot_request_gets_kafkas_errors() -> None:
    c, sid = leader_with_snapshot()
    epoch = c.epoch

    def part(data: dict[str, Any]) -> dict[str, Any]:
        p = msgs.single_partition(data)
        assert p is not None, data
        return p

    ok = fetch_snapshot_request(CLUSTER, 2, epoch, sid, 40, 50)
    p = part(answer(c, msgs.FETCH_SNAPSHOT, ok))
    assert p["error_code"] == 0 and p["size"] == 100 and p["position"] == 40
    assert p["unaligned_records"] == SnapshotSlice(sid, 40, 50)
    assert p["current_leader"] == {"leader_id": 1, "leader_epoch": epoch}
    tail = part(answer(c, msgs.FETCH_SNAPSHOT, fetch_snapshot_request(CLUSTER, 2, epoch, sid, 90, 50)))
    assert tail["unaligned_records"] == SnapshotSlice(sid, 90, 10)  # up to the end
    cases = [
        (fetch_snapshot_request(CLUSTER, 2, epoch - 1, sid, 0, 50), Errors.FENCED_LEADER_EPOCH),
        (fetch_snapshot_request(CLUSTER, 2, epoch + 1, sid, 0, 50), Errors.UNKNOWN_LEADER_EPOCH),
        (
            fetch_snapshot_request(CLUSTER, 2, epoch, OffsetAndEpoch(5, epoch), 0, 50),
            Errors.SNAPSHOT_NOT_FOUND,
        ),
        (fetch_snapshot_request(CLUSTER, 2, epoch, sid, 100, 50), Errors.POSITION_OUT_OF_RANGE),
        (fetch_snapshot_request(CLUSTER, 2, epoch, sid, -1, 50), Errors.POSITION_OUT_OF_RANGE),
    ]
    for data, error in cases:
        p = part(answer(c, msgs.FETCH_SNAPSHOT, data))
        assert p["error_code"] == error, (data, error)
        assert p["current_leader"] == {"leader_id": 1, "leader_epoch": epoch}
        assert p["unaligned_records"] == b""
    other = answer(c, msgs.FETCH_SNAPSHOT, fetch_snapshot_request("other", 2, epoch, sid, 0, 50))
    assert other["error_code"] == Errors.INCONSISTENT_CLUSTER_ID
    wrong_topic = fetch_snapshot_request(CLUSTER, 2, epoch, sid, 0, 50)
    wrong_topic["topics"][0]["name"] = "other-topic"
    p = answer(c, msgs.FETCH_SNAPSHOT, wrong_topic)["topics"][0]["partitions"][0]
    assert p["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION
    two = fetch_snapshot_request(CLUSTER, 2, epoch, sid, 0, 50)
    two["topics"] *= 2
    assert answer(c, msgs.FETCH_SNAPSHOT, two)["error_code"] == Errors.INVALID_REQUEST
    # Not the leader.
    follower = core(2, election=Election(epoch, leader_id=1))
    follower.ready()
    follower.handle(RaftMessage(3, 2, msgs.FETCH_SNAPSHOT, 7, ok), 10)
    (response,) = [m for m in follower.ready().messages if m.is_response]
    assert part(response.data)["error_code"] == Errors.NOT_LEADER_OR_FOLLOWER


def test_a_voter_down_past_the_log_start_catches_up_through_fetch_snapshot() -> None:
    cluster = Cluster()
    cluster.run(3000)
    leader = cluster.leader()
    lagging = next(i for i in cluster.nodes if i != leader.core.node_id)
    cluster.down.add(lagging)
    for i in range(40):
        leader.core.propose(leader.core.epoch, [f"r{i}"], cluster.now)
        cluster.run(20)
    cluster.run(500)
    sid = cluster.snapshot(leader)
    assert leader.core.log.start == sid
    node = cluster.nodes[lagging]
    node.core.snapshot_fetch_max_bytes = 16  # many chunks
    cluster.down.clear()
    cluster.run(3000)
    assert node.installed == [sid]
    chunks = [op for op in node.ops if isinstance(op, SnapshotChunk)]
    assert len(chunks) == -(-len(leader.files[sid]) // 16) and chunks[0].position == 0
    assert node.files[sid] == leader.files[sid]
    assert node.core.log.start == sid  # the log starts at the snapshot
    requests = [m for m in cluster.sent if m.api_key == msgs.FETCH_SNAPSHOT and not m.is_response]
    assert {m.source for m in requests} == {lagging}
    # It goes on fetching records after the snapshot and commits them.
    leader.core.propose(leader.core.epoch, ["later"], cluster.now)
    cluster.run(1000)
    assert node.committed == leader.committed and node.committed[-1] == "later"
    assert node.core.high_watermark == leader.core.high_watermark
    assert any(isinstance(op, Append) and op.batch.base_offset >= sid.offset for op in node.ops)
    assert not any(isinstance(op, Truncate) for op in node.ops)


def follower_fetching(max_bytes: int = 10) -> tuple[RaftCore, int, OffsetAndEpoch]:
    """A voter following leader 1 whose Fetch was answered with a snapshot id; returns it and
    the correlation id of its first FetchSnapshot."""
    sid = OffsetAndEpoch(50, 3)
    f = core(2, election=Election(4, leader_id=1))
    f.snapshot_fetch_max_bytes = max_bytes
    (fetch,) = [m for m in f.ready().messages if m.api_key == msgs.FETCH]
    response = msgs.fetch_response(0, 4, 1, 50, snapshot_id=sid)
    f.handle(RaftMessage(1, 2, msgs.FETCH, fetch.correlation_id, response, True), 10)
    f.tick(20)
    (request,) = [m for m in f.ready().messages if not m.is_response]
    assert request.api_key == msgs.FETCH_SNAPSHOT
    p = msgs.single_partition(request.data)
    assert p is not None
    assert p["snapshot_id"] == {"end_offset": 50, "epoch": 3} and p["position"] == 0
    assert request.data["max_bytes"] == max_bytes and p["current_leader_epoch"] == 4
    return f, request.correlation_id, sid


def snapshot_answer(error: int, sid: OffsetAndEpoch, size: int, position: int, data: bytes) -> Any:
    from odradek.raft.snapshot_fetch import fetch_snapshot_response

    return fetch_snapshot_response(error, 4, 1, sid, size, position, data)


def next_request(f: RaftCore, now: int) -> RaftMessage:
    f.tick(now)
    (request,) = [m for m in f.ready().messages if not m.is_response]
    return request


def give(f: RaftCore, correlation: int, data: Any, now: int) -> tuple[list[Any], RaftMessage | None]:
    """Hand ``f`` a FetchSnapshot response: the log ops and the request it sends next."""
    f.handle(RaftMessage(1, 2, msgs.FETCH_SNAPSHOT, correlation, data, True), now)
    ready = f.ready()
    requests = [m for m in ready.messages if not m.is_response]
    return ready.log_ops, (requests[0] if requests else None)


def test_follower_writes_chunks_then_installs_and_truncates() -> None:
    f, correlation, sid = follower_fetching()
    ops, request = give(f, correlation, snapshot_answer(0, sid, 25, 0, b"a" * 10), 30)
    assert ops == [SnapshotChunk(sid, 0, b"a" * 10)]
    assert request is not None and request.api_key == msgs.FETCH_SNAPSHOT
    assert msgs.single_partition(request.data)["position"] == 10  # type: ignore[index]
    ops, request = give(f, request.correlation_id, snapshot_answer(0, sid, 25, 10, b"b" * 10), 50)
    assert ops == [SnapshotChunk(sid, 10, b"b" * 10)] and request is not None
    assert msgs.single_partition(request.data)["position"] == 20  # type: ignore[index]
    f.handle(
        RaftMessage(1, 2, msgs.FETCH_SNAPSHOT, request.correlation_id, snapshot_answer(0, sid, 25, 20, b"c" * 5), True),
        70,
    )
    assert f.lowest_pending_truncation() == 50  # the driver must not report the old log durable
    ready = f.ready()
    assert ready.log_ops == [SnapshotChunk(sid, 20, b"c" * 5), SnapshotInstall(sid, 25)]
    assert f.log.start == sid and f.log_end_offset == 50 and f.high_watermark == 50
    # The next request is a Fetch from the snapshot's end offset and epoch.
    (request,) = [m for m in ready.messages if not m.is_response]
    assert request.api_key == msgs.FETCH
    p = msgs.single_partition(request.data)
    assert p is not None and (p["fetch_offset"], p["last_fetched_epoch"]) == (50, 3)


def test_snapshot_not_found_goes_back_to_fetch_and_a_bad_position_starts_over() -> None:
    f, correlation, sid = follower_fetching()
    _, request = give(f, correlation, snapshot_answer(0, sid, 25, 0, b"a" * 10), 30)
    assert request is not None
    # A chunk that does not continue where the file ends: dropped, the fetch starts over.
    ops, again = give(f, request.correlation_id, snapshot_answer(0, sid, 25, 12, b"x" * 10), 50)
    assert ops == [SnapshotAbort(sid)]
    # The leader backs off first; meanwhile another voter may be asked (maybeSendFetchToBestNode).
    assert again is None or (again.api_key == msgs.FETCH and again.destination != 1)
    assert isinstance(f.state, FollowerState)
    assert next_request(f, 50 + 1000).api_key == msgs.FETCH  # after the retry backoff
    # The leader no longer has it (it made a newer one): back to Fetch.
    f, correlation, sid = follower_fetching()
    gone = snapshot_answer(Errors.SNAPSHOT_NOT_FOUND, sid, -1, -1, b"")
    gone["topics"][0]["partitions"][0]["snapshot_id"] = {"end_offset": -1, "epoch": -1}
    ops, request = give(f, correlation, gone, 30)
    assert ops == []  # nothing was written yet: nothing to delete
    assert request is not None and request.api_key == msgs.FETCH  # at once
    # POSITION_OUT_OF_RANGE: starts over too.
    f, correlation, sid = follower_fetching()
    oor = snapshot_answer(Errors.POSITION_OUT_OF_RANGE, sid, -1, -1, b"")
    _, request = give(f, correlation, oor, 30)
    assert request is None or (request.api_key == msgs.FETCH and request.destination != 1)
    assert next_request(f, 30 + 1000).api_key == msgs.FETCH


def test_a_new_leader_abandons_the_snapshot_fetch() -> None:
    f, correlation, sid = follower_fetching()
    give(f, correlation, snapshot_answer(0, sid, 25, 0, b"a" * 10), 30)
    begin = msgs.begin_quorum_epoch_request(CLUSTER, 3, 5, 2)
    f.handle(RaftMessage(3, 2, msgs.BEGIN_QUORUM_EPOCH, 8, begin), 40)
    assert f.leader_id == 3
    ready = f.ready()
    (request,) = [m for m in ready.messages if not m.is_response]
    assert request.api_key == msgs.FETCH and request.destination == 3
    assert ready.log_ops == [SnapshotAbort(sid)]  # the partial file is deleted


class CountingList(list):  # type: ignore[type-arg]
    """A list that counts the elements its readers look at."""

    looked = 0

    def __iter__(self) -> Any:
        for item in super().__iter__():
            CountingList.looked += 1
            yield item

    def __getitem__(self, index: Any) -> Any:
        item = super().__getitem__(index)
        CountingList.looked += len(item) if isinstance(index, slice) else 1
        return item


def test_commits_and_reads_do_not_scan_the_whole_log() -> None:
    """Committing a new batch, reading for a Fetch and checking a fetch position look at a few
    batches, not at every batch of the log."""
    c = core(1, frozenset({1}))
    c.tick(3000)
    for i in range(5000):
        c.propose(c.epoch, [f"r{i}"], 3000)
    c.durable(c.log.end_offset, 3000)
    assert len(c.ready().committed) == 5001
    c.log.batches = CountingList(c.log.batches)
    CountingList.looked = 0
    c.propose(c.epoch, ["new"], 3001)
    c.durable(c.log.end_offset, 3001)
    committed = c.ready().committed
    assert [b.records for b in committed] == [("new",)]
    fetch = msgs.fetch_request(CLUSTER, 2, c.epoch, 4990, c.epoch)
    p = fetch_partition(answer(c, msgs.FETCH, fetch, 3002))
    assert len(p["records"]) == 12
    assert CountingList.looked < 100, CountingList.looked


def test_log_reads_match_a_plain_scan() -> None:
    from odradek.raft.raft_log import RaftLog

    rng = random.Random(7)
    for _ in range(50):
        log = RaftLog(start=OffsetAndEpoch(rng.choice((0, 5)), rng.choice((0, 1))))
        epoch = log.start.epoch
        for _ in range(rng.randrange(0, 30)):
            epoch += rng.choice((0, 0, 1, 2))
            log.append(LogBatch(log.end_offset, epoch, tuple(range(rng.randrange(1, 4)))))
        batches = list(log.batches)
        for _ in range(20):
            a = rng.randrange(0, log.end_offset + 3)
            b = rng.randrange(a, log.end_offset + 4)
            plain = [x for bt in batches for x in range(bt.base_offset, bt.end_offset) if a <= x < b]
            got = [x for bt in log.batches_between(a, b) for x in range(bt.base_offset, bt.end_offset)]
            assert got == plain
            read = log.read(a, 1000)
            assert [x for bt in read for x in range(bt.base_offset, bt.end_offset)] == [
                x for bt in batches for x in range(bt.base_offset, bt.end_offset) if x >= a
            ]
            e = rng.randrange(0, epoch + 2)
            ends = [bt for bt in batches if bt.epoch <= e]
            if ends:
                want = OffsetAndEpoch(ends[-1].end_offset, ends[-1].epoch)
            elif log.start.offset > 0 and log.start.epoch <= e:
                want = log.start
            else:
                want = OffsetAndEpoch(0, 0)
            assert log.end_offset_for_epoch(e) == want


def test_requests_to_a_dead_peer_warn_once_until_it_answers(caplog: Any) -> None:
    """A follower whose leader is down retries about once per retry backoff: one warning, then
    debug lines, an info line when the peer answers again, and a warning on the next outage."""
    import logging

    from odradek.raft.kafka_network_channel import error_response

    # An observer of a one-voter quorum: nobody else to ask, no election to run (a voter would
    # ask other voters and run a pre-vote once its leader refuses connections).
    f = core(1, frozenset({2}), election=Election(4, leader_id=2))
    now = 0
    sent = [m for m in f.ready().messages if m.api_key == msgs.FETCH]

    def fetch_answered(data: dict[str, Any]) -> None:
        nonlocal now, sent
        for _ in range(100):
            if sent:
                f.handle(RaftMessage(2, 1, msgs.FETCH, sent[0].correlation_id, data, True), now)
                sent = [m for m in f.ready().messages if m.api_key == msgs.FETCH]
                return
            now += 10
            f.tick(now)
            sent = [m for m in f.ready().messages if m.api_key == msgs.FETCH]
        raise AssertionError("no Fetch sent")

    down = error_response(msgs.FETCH, msgs.BROKER_NOT_AVAILABLE)
    with caplog.at_level(logging.DEBUG, logger="odradek.raft.raft_core"):
        for _ in range(8):
            fetch_answered(down)
        fetch_answered(msgs.fetch_response(0, 4, 2, -1))
        fetch_answered(down)
        fetch_answered(down)
    about_failures = [r for r in caplog.records if "failed with error" in r.getMessage()]
    assert [r.levelno for r in about_failures] == (
        [logging.WARNING] + [logging.DEBUG] * 7 + [logging.WARNING, logging.DEBUG]
    )
    recovered = [r for r in caplog.records if "answers again" in r.getMessage()]
    assert len(recovered) == 1 and recovered[0].levelno == logging.INFO
    assert "node 2 answers again after 8 failed requests" in recovered[0].getMessage()


def test_a_snapshot_already_held_is_installed_without_fetching_it() -> None:
    sid = OffsetAndEpoch(50, 3)
    f = core(2, election=Election(4, leader_id=1))
    f.update_snapshots({sid: 25}, None, 0)  # its own, written by its snapshot generator
    (fetch,) = [m for m in f.ready().messages if m.api_key == msgs.FETCH]
    response = msgs.fetch_response(0, 4, 1, 50, snapshot_id=sid)
    f.handle(RaftMessage(1, 2, msgs.FETCH, fetch.correlation_id, response, True), 10)
    ready = f.ready()
    assert ready.log_ops == [SnapshotInstall(sid, 25)]
    (request,) = [m for m in ready.messages if not m.is_response]
    assert request.api_key == msgs.FETCH  # from the snapshot's end, no FetchSnapshot
    p = msgs.single_partition(request.data)
    assert p is not None and (p["fetch_offset"], p["last_fetched_epoch"]) == (50, 3)


def test_a_snapshot_id_below_the_high_watermark_is_refused() -> None:
    f = core(2, election=Election(4, leader_id=1))
    (fetch,) = [m for m in f.ready().messages if m.api_key == msgs.FETCH]
    batches = [LogBatch(0, 1, tuple(range(10)))]
    response = msgs.fetch_response(0, 4, 1, 10, records=batches)
    f.handle(RaftMessage(1, 2, msgs.FETCH, fetch.correlation_id, response, True), 10)
    f.durable(10, 10)
    assert f.high_watermark == 10
    (fetch,) = [m for m in f.ready().messages if m.api_key == msgs.FETCH]
    bad = msgs.fetch_response(0, 4, 1, 10, snapshot_id=OffsetAndEpoch(5, 1))
    f.handle(RaftMessage(1, 2, msgs.FETCH, fetch.correlation_id, bad, True), 20)
    ready = f.ready()
    assert ready.log_ops == [] and f.log.end_offset == 10 and f._snapshot_fetch is None
