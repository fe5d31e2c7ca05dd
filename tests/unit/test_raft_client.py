"""The RaftClient seam: the quorum-of-one KafkaRaftClient (commits after fsync, delivered to
every listener in order; leader and epoch from quorum-state and the log), and its listeners
(the broker's MetadataLoader). Sans asyncio: the test drives flush() and poll() itself."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from odradek.log.errors import KafkaStorageError
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE, MetadataRecord
from odradek.raft.kafka_raft_client import KafkaRaftClient
from odradek.raft.metadata_log import MetadataLog
from odradek.raft.quorum_state import ElectionState, FileQuorumStateStore, QuorumStateError
from odradek.raft.raft_client import Batch, LeaderAndEpoch, Listener, NotLeaderError, SnapshotReader

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


def _client(d: Path, node_id: int = 1) -> KafkaRaftClient[MetadataRecord]:
    client = KafkaRaftClient(node_id, _open(d), FileQuorumStateStore(str(d / "quorum-state")), lambda: 1000)
    client.initialize()
    return client


def _feature(level: int) -> MetadataRecord:
    return ("FeatureLevelRecord", {"name": "metadata.version", "feature_level": level})


def test_commits_reach_every_listener_in_order_and_only_after_fsync(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    client = _client(d)
    client.elect()
    events: list[tuple[str, str, object]] = []
    client.register(Recorder("a", events))
    client.register(Recorder("b", events))
    assert events == [("a", "leader", (1, 1)), ("b", "leader", (1, 1))]
    events.clear()
    epoch = client.leader_and_epoch.epoch
    assert client.prepare_append(epoch, [_feature(7)]) == 0
    assert client.prepare_append(epoch, [_feature(8), ("NoOpRecord", {})]) == 2
    client.poll()
    assert events == [] and client.high_watermark == 0  # appended, not fsynced: not committed
    assert client.needs_flush
    client.flush()
    assert client.high_watermark == 3
    client.poll()
    client.poll()  # nothing twice
    assert events == [
        ("a", "commit", (0, ["FeatureLevelRecord"])), ("a", "commit", (1, ["FeatureLevelRecord", "NoOpRecord"])),
        ("b", "commit", (0, ["FeatureLevelRecord"])), ("b", "commit", (1, ["FeatureLevelRecord", "NoOpRecord"])),
    ]
    # A listener registered later is brought up to the high watermark, then told the leader.
    late: list[tuple[str, str, object]] = []
    client.register(Recorder("c", late))
    assert late == [("c", "commit", (0, ["FeatureLevelRecord"])),
                    ("c", "commit", (1, ["FeatureLevelRecord", "NoOpRecord"])), ("c", "leader", (1, 1))]
    client.begin_shutdown()
    assert [e for e in events + late if e[1] == "shutdown"] == [("a", "shutdown", None), ("b", "shutdown", None),
                                                               ("c", "shutdown", None)]
    with pytest.raises(NotLeaderError):
        client.prepare_append(epoch, [_feature(9)])


def test_epoch_comes_from_quorum_state_and_log_and_is_written_as_kafka_does(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    client = _client(d)
    assert client.leader_and_epoch == LeaderAndEpoch(None, 0)
    with pytest.raises(NotLeaderError):  # not elected yet
        client.prepare_append(0, [_feature(7)])
    client.elect()
    assert client.leader_and_epoch == LeaderAndEpoch(1, 1)
    state = json.loads((d / "quorum-state").read_text())
    assert state == {"clusterId": "", "leaderId": 1, "leaderEpoch": 1, "votedId": -1, "appliedOffset": 0,
                     "currentVoters": [{"voterId": 1}], "data_version": 0}
    with pytest.raises(NotLeaderError):
        client.prepare_append(2, [_feature(7)])
    client.prepare_append(1, [_feature(7)])
    client.flush()
    # A restart elects again, above the stored epoch.
    again = _client(d)
    again.elect()
    assert again.leader_and_epoch == LeaderAndEpoch(1, 2)
    # A log written at a higher epoch (Apache Kafka's quorum) than quorum-state: above the log's.
    again.prepare_append(2, [_feature(8)])
    again.flush()
    FileQuorumStateStore(str(d / "quorum-state")).write_election_state(ElectionState(1, leader_id=1))
    third = _client(d)
    third.elect()
    assert third.leader_and_epoch.epoch == 3
    # Kafka 4's version 1 file is read too.
    (d / "quorum-state").write_text('{"leaderId":-1,"leaderEpoch":9,"votedId":1,'
                                    '"votedDirectoryId":"J8aAPcfLQt2bqs1JT_rMgQ","data_version":1}')
    fourth = _client(d)
    fourth.elect()
    assert fourth.leader_and_epoch.epoch == 10
    (d / "quorum-state").write_text('{"leaderEpoch":9,"data_version":2}')
    with pytest.raises(QuorumStateError, match=r"data_version \(2\) is not within"):
        _client(d)


def test_failed_fsync_commits_nothing_and_changes_the_epoch(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    client = _client(d)
    client.elect()
    events: list[tuple[str, str, object]] = []
    client.register(Recorder("a", events))
    client.prepare_append(1, [_feature(7)])
    client.flush()
    client.poll()
    events.clear()
    log = client._log.log

    def failing_flush() -> None:
        raise KafkaStorageError("disk full")

    real_flush = log.flush
    log.flush = failing_flush  # type: ignore[method-assign]
    client.prepare_append(1, [_feature(8)])
    client.flush()
    client.poll()
    # The uncommitted batch is gone; its appender learns through the leader change.
    assert client.log_end_offset == 1 and client.high_watermark == 1
    assert events == [("a", "leader", (1, 2))]
    log.flush = real_flush  # type: ignore[method-assign]
    with pytest.raises(NotLeaderError):
        client.prepare_append(1, [_feature(9)])
    assert client.prepare_append(2, [_feature(9)]) == 1
    client.flush()
    client.poll()
    assert events[-1] == ("a", "commit", (1, ["FeatureLevelRecord"]))


def test_loader_image_follows_raft_commits_and_transactions(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    client = _client(d)
    client.elect()
    cache = KRaftMetadataCache()
    loader = MetadataLoader(cache)
    published: list[set[str]] = []
    loader.publishers.append(lambda delta, _img: published.append(set(delta.created_topics)))
    client.register(loader)
    assert loader.leader_and_epoch == LeaderAndEpoch(1, 1)
    client.prepare_append(1, [("TopicRecord", {"name": "t", "topic_id": TOPIC_ID})])
    client.poll()
    assert "t" not in cache.image.topics_by_name  # proposed, not committed
    client.flush()
    client.poll()
    assert "t" in cache.image.topics_by_name and cache.image.offset == 0 and published == [{"t"}]
    # A transaction is held until its end commits, across batches.
    other = uuid.UUID(int=43)
    client.prepare_append(1, [("BeginTransactionRecord", {"name": "x"}),
                              ("TopicRecord", {"name": "u", "topic_id": other})])
    client.flush()
    client.poll()
    assert "u" not in cache.image.topics_by_name and loader.transactions.open_transaction == 1
    client.prepare_append(1, [("EndTransactionRecord", {})])
    client.flush()
    client.poll()
    assert "u" in cache.image.topics_by_name and cache.image.offset == 3 and published[-1] == {"u"}
