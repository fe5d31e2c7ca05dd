"""The RaftClient seam: KafkaRaftClient over the Raft core, on a real metadata log in a temporary
directory. A quorum of one (driven step by step, sans asyncio: commits only after fsync, delivered
to every listener in order, the leader's LeaderChangeMessage skipped; epochs from quorum-state and
the log) and a quorum of three driven by KafkaRaftClientDriver over a fake network that encodes
every request and response with the wire definitions and serves them through RaftApis (no
sockets): election, commits on a majority, failover when the leader is cut off, and the old
leader stepping down and catching up when it is back."""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from odradek.log.errors import KafkaStorageError
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE, MetadataRecord
from odradek.network.request_channel import ConnectionInfo
from odradek.protocol.header import RequestHeader
from odradek.raft import raft_messages as msgs
from odradek.raft.kafka_network_channel import RAFT_APIS, decode_fetch_records, error_response
from odradek.raft.kafka_raft_client import KafkaRaftClient, KafkaRaftClientDriver
from odradek.raft.metadata_log import MetadataLog
from odradek.raft.quorum import QuorumConfig
from odradek.raft.quorum_state import ElectionState, FileQuorumStateStore, QuorumStateError
from odradek.raft.raft_client import Batch, LeaderAndEpoch, Listener, NotLeaderError, SnapshotReader
from odradek.raft.raft_log import LogBatch
from odradek.raft.raft_messages import RaftMessage
from odradek.raft.record_batches import BatchCodec, RawControlRecord
from odradek.server.api_dispatcher import RequestContext
from odradek.server.raft_apis import RaftApis

TOPIC_ID = uuid.UUID(int=42)


class Recorder(Listener[MetadataRecord]):
    def __init__(self, name: str, events: list[tuple[str, str, object]]) -> None:
        self.name = name
        self.events = events

    def handle_commit(self, batches: Sequence[Batch[MetadataRecord]]) -> None:
        for b in batches:
            self.events.append((self.name, "commit", (b.base_offset, [n for n, _ in b.records])))

    def handle_load_snapshot(self, reader: SnapshotReader[MetadataRecord]) -> None:
        self.events.append((self.name, "snapshot", reader.end_offset))

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.events.append((self.name, "leader", (leader.leader_id, leader.epoch)))

    def begin_shutdown(self) -> None:
        self.events.append((self.name, "shutdown", None))


def _open(d: Path) -> MetadataLog[MetadataRecord]:
    cfg = LogConfig(segment_bytes=1024 * 1024, retention_ms=-1, retention_bytes=-1)
    return MetadataLog(Log.load(str(d), cfg, now_ms=0, clean_shutdown=False), METADATA_RECORD_SERDE)


def _client(d: Path, node_id: int = 1, **kwargs: Any) -> KafkaRaftClient[MetadataRecord]:
    client = KafkaRaftClient(
        node_id, _open(d), FileQuorumStateStore(str(d / "quorum-state")), lambda: int(time.time() * 1000), **kwargs
    )
    client.initialize()
    return client


def _feature(level: int) -> MetadataRecord:
    return ("FeatureLevelRecord", {"name": "metadata.version", "feature_level": level})


def test_commits_reach_every_listener_in_order_and_only_after_fsync(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    client = _client(d)
    events: list[tuple[str, str, object]] = []
    client.register(Recorder("a", events))
    client.register(Recorder("b", events))
    assert events == []  # nothing committed, no leader known to the listeners yet
    client.step()  # the only voter led epoch 1; its LeaderChangeMessage (offset 0) committed
    assert events == [("a", "leader", (1, 1)), ("b", "leader", (1, 1))]
    assert client.high_watermark == 1
    events.clear()
    epoch = client.leader_and_epoch.epoch
    assert client.prepare_append(epoch, [_feature(7)]) == 1
    assert client.prepare_append(epoch, [_feature(8), ("NoOpRecord", {})]) == 3
    ready = client.take_ready()
    assert [type(op).__name__ for op in ready.log_ops] == ["Append", "Append"]
    assert events == [] and client.high_watermark == 1  # appended, not fsynced: not committed
    durable = client.persist(ready)
    assert durable == 4 and client.high_watermark == 1
    client.complete(ready, durable)  # durable now: the only voter's majority
    assert client.high_watermark == 4
    client.step()
    client.step()  # nothing twice
    assert events == [
        ("a", "commit", (1, ["FeatureLevelRecord"])), ("a", "commit", (2, ["FeatureLevelRecord", "NoOpRecord"])),
        ("b", "commit", (1, ["FeatureLevelRecord"])), ("b", "commit", (2, ["FeatureLevelRecord", "NoOpRecord"])),
    ]
    # A listener registered later is brought up to the high watermark, then told the leader.
    late: list[tuple[str, str, object]] = []
    client.register(Recorder("c", late))
    assert late == [("c", "commit", (1, ["FeatureLevelRecord"])),
                    ("c", "commit", (2, ["FeatureLevelRecord", "NoOpRecord"])), ("c", "leader", (1, 1))]
    client.begin_shutdown()
    client.step()
    assert [e for e in events + late if e[1] == "shutdown"] == [("a", "shutdown", None), ("b", "shutdown", None),
                                                               ("c", "shutdown", None)]
    with pytest.raises(NotLeaderError):
        client.prepare_append(epoch, [_feature(9)])


def test_epoch_comes_from_quorum_state_and_log_and_is_written_as_kafka_does(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    client = _client(d)
    with pytest.raises(NotLeaderError):  # a wrong epoch
        client.prepare_append(0, [_feature(7)])
    client.step()
    assert client.leader_and_epoch == LeaderAndEpoch(1, 1)
    state = json.loads((d / "quorum-state").read_text())
    assert state == {"clusterId": "", "leaderId": 1, "leaderEpoch": 1, "votedId": -1, "appliedOffset": 0,
                     "currentVoters": [{"voterId": 1}], "data_version": 0}
    with pytest.raises(NotLeaderError):
        client.prepare_append(2, [_feature(7)])
    client.prepare_append(1, [_feature(7)])
    client.step()
    client._log.log.close()
    # A restart elects again, above the stored epoch, and keeps the log.
    again = _client(d)
    again.step()
    assert again.leader_and_epoch == LeaderAndEpoch(1, 2)
    assert again.high_watermark == again.log_end_offset == 3  # LeaderChange, feature, LeaderChange
    again.prepare_append(2, [_feature(8)])
    again.step()
    again._log.log.close()
    # A log written at a higher epoch than quorum-state (Apache Kafka's quorum): above the log's.
    FileQuorumStateStore(str(d / "quorum-state")).write_election_state(ElectionState(1, leader_id=1))
    third = _client(d)
    third.step()
    assert third.leader_and_epoch.epoch == 3
    third._log.log.close()
    # Kafka 4's version 1 file is read too: this node voted for itself in epoch 9 and never
    # led it, so as a candidate of 9 it wins 9 (its own vote is the majority of one).
    (d / "quorum-state").write_text('{"leaderId":-1,"leaderEpoch":9,"votedId":1,'
                                    '"votedDirectoryId":"J8aAPcfLQt2bqs1JT_rMgQ","data_version":1}')
    fourth = _client(d)
    fourth.step()
    assert fourth.leader_and_epoch == LeaderAndEpoch(1, 9)
    fourth._log.log.close()
    (d / "quorum-state").write_text('{"leaderEpoch":9,"data_version":2}')
    with pytest.raises(QuorumStateError, match=r"data_version \(2\) is not within"):
        _client(d)


def test_failed_fsync_commits_nothing_and_the_node_stops_taking_part(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    client = _client(d)
    events: list[tuple[str, str, object]] = []
    client.register(Recorder("a", events))
    client.step()
    client.prepare_append(1, [_feature(7)])
    client.step()
    events.clear()
    log = client._log.log

    def failing_flush(*_args: object, **_kwargs: object) -> None:
        raise KafkaStorageError("disk full")

    log.flush = failing_flush  # type: ignore[method-assign]
    client.prepare_append(1, [_feature(8)])
    ready = client.take_ready()
    with pytest.raises(KafkaStorageError):
        client.persist(ready)
    client.fail(KafkaStorageError("disk full"))
    # Never durable, never committed; the listeners learn there is no leader they can use.
    assert client.high_watermark == 2
    assert events == [("a", "leader", (None, 1))]
    with pytest.raises(NotLeaderError, match="stopped taking part"):
        client.prepare_append(1, [_feature(9)])


def test_loader_image_follows_raft_commits_and_transactions(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    client = _client(d)
    client.step()
    cache = KRaftMetadataCache()
    loader = MetadataLoader(cache)
    published: list[set[str]] = []
    loader.publishers.append(lambda delta, _img: published.append(set(delta.created_topics)))
    client.register(loader)
    assert loader.leader_and_epoch == LeaderAndEpoch(1, 1)
    client.prepare_append(1, [("TopicRecord", {"name": "t", "topic_id": TOPIC_ID})])
    assert "t" not in cache.image.topics_by_name  # proposed, not committed
    client.step()
    assert "t" in cache.image.topics_by_name and cache.image.offset == 1 and published == [{"t"}]
    # A transaction is held until its end commits, across batches.
    other = uuid.UUID(int=43)
    client.prepare_append(1, [("BeginTransactionRecord", {"name": "x"}),
                              ("TopicRecord", {"name": "u", "topic_id": other})])
    client.step()
    assert "u" not in cache.image.topics_by_name and loader.transactions.open_transaction == 2
    client.prepare_append(1, [("EndTransactionRecord", {})])
    client.step()
    assert "u" in cache.image.topics_by_name and cache.image.offset == 4 and published[-1] == {"u"}


def test_batches_round_trip_as_record_batches() -> None:
    codec = BatchCodec(METADATA_RECORD_SERDE)
    leader_change = msgs.leader_change_message(1, frozenset({1, 2, 3}), frozenset({1, 3}))
    batches = [
        LogBatch(0, 1, (leader_change,), 5, control=True),
        LogBatch(1, 1, (_feature(7), ("NoOpRecord", {})), 6),
        LogBatch(3, 2, (RawControlRecord(b"\x00\x00\x00\x05", b"\x00\x00\x00\x01"),), 7, control=True),
    ]
    data = codec.encode_all(batches)
    back = list(codec.decode(data))
    assert [(b.base_offset, b.epoch, b.control, b.append_timestamp) for b in back] == [
        (0, 1, True, 5), (1, 1, False, 6), (3, 2, True, 7)]
    assert back[1].records == batches[1].records
    assert back[2].records == batches[2].records
    # The LeaderChangeMessage is Kafka's control record (type 2), readable back.
    assert isinstance(back[0].records[0], RawControlRecord) and back[0].records[0].key == b"\x00\x00\x00\x02"
    assert codec.encode(back[0]) == codec.encode(batches[0])


# -- three voters over a fake network ------------------------------------------------------------


class FakeNetwork:
    """Delivers each request through the wire encoding and the destination's RaftApis; a node
    in ``down`` neither sends nor receives (its peers see BROKER_NOT_AVAILABLE, as for a
    refused connection)."""

    def __init__(self) -> None:
        self.apis: dict[int, RaftApis] = {}
        self.down: set[int] = set()
        self.requests = 0


class FakeChannel:
    def __init__(self, node_id: int, network: FakeNetwork) -> None:
        self.node_id = node_id
        self.network = network
        self.codec = BatchCodec(METADATA_RECORD_SERDE)
        self._on_response: Any = None
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, on_response: Any) -> None:
        self._on_response = on_response

    def send(self, request: RaftMessage) -> None:
        task = asyncio.get_running_loop().create_task(self._deliver(request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, request: RaftMessage) -> None:
        api = RAFT_APIS[request.api_key]
        net = self.network
        net.requests += 1
        target = net.apis.get(request.destination)
        if target is None or {self.node_id, request.destination} & net.down:
            await asyncio.sleep(0.01)
            data = error_response(request.api_key, msgs.BROKER_NOT_AVAILABLE)
        else:
            version = api.max_version
            wire = b"".join(bytes(p) for p in api.encode_request(version, request.data))
            decoded, _ = api.decode_request(version, wire)
            ctx = RequestContext(RequestHeader(api.api_key, version, 1, "raft"), ConnectionInfo("c", "peer", "CONTROLLER"))
            handler = next(h for a, h in target.handlers().items() if a.api_key == api.api_key)
            body = await handler(ctx, decoded)
            if {self.node_id, request.destination} & net.down:  # cut off while waiting
                data = error_response(request.api_key, msgs.BROKER_NOT_AVAILABLE)
            else:
                resp = b"".join(bytes(p) for p in api.encode_response(version, body))
                data, _ = api.decode_response(version, resp)
                if request.api_key == msgs.FETCH:
                    data = decode_fetch_records(data, self.codec)
        self._on_response(RaftMessage(request.destination, self.node_id, request.api_key,
                                      request.correlation_id, data, is_response=True))

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


# Kafka's ratios, shorter: a parked Fetch (500 ms) answers well within the fetch timeout.
FAST = QuorumConfig(election_timeout_ms=300, fetch_timeout_ms=1000, election_backoff_max_ms=300,
                    request_timeout_ms=1500, retry_backoff_ms=20)


async def _until(predicate: Any, seconds: float, what: str) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_three_voters_elect_commit_fail_over_and_catch_up(tmp_path: Path) -> None:
    async def run() -> None:
        net = FakeNetwork()
        clients: dict[int, KafkaRaftClient[MetadataRecord]] = {}
        drivers: dict[int, KafkaRaftClientDriver] = {}
        events: dict[int, list[tuple[str, str, object]]] = {}
        for n in (1, 2, 3, 4):  # 4: an observer (a broker): it fetches, never votes
            c = _client(tmp_path / f"n{n}", n, voters=frozenset({1, 2, 3}), cluster_id="c1", config=FAST,
                        rng=random.Random(n))
            clients[n] = c
            events[n] = []
            c.register(Recorder(str(n), events[n]))
            net.apis[n] = RaftApis(c, BatchCodec(METADATA_RECORD_SERDE))
            drivers[n] = KafkaRaftClientDriver(c, FakeChannel(n, net))
        for d in drivers.values():
            d.start()
        try:
            def leaders() -> list[int]:
                return [n for n, c in clients.items() if c.core.is_leader() and n not in net.down]

            await _until(lambda: len(leaders()) == 1, 10, "a leader")
            leader = leaders()[0]
            epoch = clients[leader].leader_and_epoch.epoch
            await _until(lambda: any(e[1] == "leader" for e in events[leader]), 5, "the leader's listener")
            last = clients[leader].prepare_append(epoch, [_feature(7)])
            clients[leader].schedule_prepared_append()
            # Committed once a majority has it durably; every voter's listener gets it.
            await _until(lambda: all((str(n), "commit", (last, ["FeatureLevelRecord"])) in events[n]
                                     for n in (1, 2, 3, 4)), 5, "commit everywhere")
            assert clients[4].leader_and_epoch == LeaderAndEpoch(leader, epoch)
            assert not clients[4].core.is_leader()
            assert all(c.high_watermark > last for c in clients.values())
            # quorum-state on a follower names the leader.
            follower = next(n for n in (1, 2, 3) if n != leader)
            state = json.loads((tmp_path / f"n{follower}" / "quorum-state").read_text())
            assert (state["leaderId"], state["leaderEpoch"]) == (leader, epoch)
            # The leader is cut off: the others elect a new one at a higher epoch and commit.
            net.down.add(leader)
            await _until(lambda: len(leaders()) == 1, 10, "a new leader")
            second = leaders()[0]
            assert second != leader and clients[second].leader_and_epoch.epoch > epoch
            # The old leader's append in its old epoch never commits anywhere.
            if clients[leader].core.is_leader():
                clients[leader].prepare_append(epoch, [("TopicRecord", {"name": "lost", "topic_id": TOPIC_ID})])
                clients[leader].schedule_prepared_append()
            new_epoch = clients[second].leader_and_epoch.epoch
            await _until(lambda: any(e == (str(second), "leader", (second, new_epoch)) for e in events[second]),
                         5, "the new leader's listener")
            kept = clients[second].prepare_append(new_epoch, [_feature(8)])
            clients[second].schedule_prepared_append()
            await _until(lambda: clients[second].high_watermark > kept, 5, "a commit without the old leader")
            # Back: the old leader learns the new epoch, truncates what it alone had, catches up.
            net.down.clear()
            await _until(lambda: (str(leader), "commit", (kept, ["FeatureLevelRecord"])) in events[leader],
                         10, "the old leader catching up")
            assert clients[leader].leader_and_epoch == LeaderAndEpoch(second, new_epoch)
            # Every node committed the same records at the same offsets, and never the lost one.
            await _until(lambda: (str(4), "commit", (kept, ["FeatureLevelRecord"])) in events[4],
                         10, "the observer following the new leader")
            committed = {n: [e[2] for e in events[n] if e[1] == "commit"] for n in (1, 2, 3, 4)}
            assert committed[1] == committed[2] == committed[3] == committed[4]
            assert all("TopicRecord" not in names for _off, names in committed[1])  # type: ignore[operator]
        finally:
            for d in drivers.values():
                await d.shutdown()
            for c in clients.values():
                c._log.log.close()

    asyncio.run(asyncio.wait_for(run(), 60))


def test_raft_apis_answer_bad_requests_with_kafka_errors(tmp_path: Path) -> None:
    async def run() -> None:
        net = FakeNetwork()
        client = _client(tmp_path / "n1", 1, voters=frozenset({1, 2, 3}), cluster_id="c1", config=FAST)
        apis = RaftApis(client, BatchCodec(METADATA_RECORD_SERDE))
        driver = KafkaRaftClientDriver(client, FakeChannel(1, net))
        driver.start()
        handlers = {a.api_key: h for a, h in apis.handlers().items()}
        ctx = RequestContext(RequestHeader(52, 1, 1, "x"), ConnectionInfo("c", "peer", "CONTROLLER"))
        try:
            last = client.core.log.end_offset_and_epoch()
            # A Vote from a node that is not a voter.
            resp = await handlers[msgs.VOTE](ctx, msgs.vote_request("c1", 7, 5, last, 1, False))
            part = resp["topics"][0]["partitions"][0]
            assert (part["error_code"], part["vote_granted"]) == (msgs.INCONSISTENT_VOTER_SET, False)
            # A node of another cluster.
            resp = await handlers[msgs.FETCH](ctx, msgs.fetch_request("other", 2, 0, 0, 0))
            assert resp["error_code"] == msgs.INCONSISTENT_CLUSTER_ID
            # A request that is not about __cluster_metadata's one partition.
            resp = await handlers[msgs.BEGIN_QUORUM_EPOCH](ctx, {"cluster_id": "c1", "topics": []})
            assert resp["error_code"] == msgs.INVALID_REQUEST
            # DescribeQuorum on a node that does not lead.
            resp = await handlers[msgs.DESCRIBE_QUORUM](ctx, {"topics": [
                {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]})
            assert resp["topics"][0]["partitions"][0]["error_code"] == msgs.NOT_LEADER_OR_FOLLOWER
            # Still a working voter: a valid Vote of a higher epoch is granted (and persisted).
            resp = await handlers[msgs.VOTE](ctx, msgs.vote_request("c1", 2, 7, last, 1, False))
            assert resp["topics"][0]["partitions"][0]["vote_granted"] is True
            state = json.loads((tmp_path / "n1" / "quorum-state").read_text())
            assert (state["leaderEpoch"], state["votedId"]) == (7, 2)
        finally:
            await driver.shutdown()
            client._log.log.close()

    asyncio.run(asyncio.wait_for(run(), 30))


def test_a_restarted_observer_knows_no_high_watermark_before_it_hears_from_the_leader(tmp_path: Path) -> None:
    """What a broker's start-up waits on: its local metadata log holds records, but until the
    leader tells it the high watermark none of them counts as committed, and its listeners get
    nothing (``known_high_watermark`` None, ``listener_offset`` 0)."""
    d = tmp_path / "__cluster_metadata-0"
    alone = _client(d)
    alone.step()
    last = alone.prepare_append(alone.leader_and_epoch.epoch, [_feature(7)])
    ready = alone.take_ready()
    alone.complete(ready, alone.persist(ready))
    alone.step()
    events: list[tuple[str, str, object]] = []
    listener = Recorder("a", events)
    alone.register(listener)
    assert alone.known_high_watermark == last + 1 and alone.listener_offset(listener) == last + 1
    alone._log.log.close()

    observer = _client(d, 4, voters=frozenset({1, 2, 3}), cluster_id="c1")
    assert observer.log_end_offset == last + 1
    late: list[tuple[str, str, object]] = []
    listener = Recorder("b", late)
    observer.register(listener)
    assert observer.known_high_watermark is None
    assert observer.listener_offset(listener) == 0 and late == []
    assert observer.listener_offset(Recorder("unregistered", late)) == -1
    observer._log.log.close()
