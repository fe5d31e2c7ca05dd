"""Reading what Apache Kafka writes: its metadata log (control batches, record types Odradek does
not write), its metadata snapshots, its consumer-group records, its leaderless partitions after a
controlled shutdown, and refusing what cannot be taken over."""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from odradek.controller.broker_partition_changes import handle_broker_unfenced
from odradek.controller.quorum_controller import QuorumController
from odradek.coordinator.group.consumer_group_records import decode_record
from odradek.embedded import EmbeddedBroker
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE, MetadataRecord
from odradek.metadata.records import (
    UnsupportedMetadataRecord,
    decode_metadata_record,
    encode_metadata_record,
)
from odradek.metadata.transactions import MetadataTransactions
from odradek.protocol.schema import write_uvarint
from odradek.raft.kafka_raft_client import KafkaRaftClient
from odradek.raft.metadata_log import MetadataLog, UnreadableMetadataRecord
from odradek.raft.quorum_state import FileQuorumStateStore
from odradek.raft.raft_client import Batch, Listener, SnapshotReader
from odradek.raft.snapshot import SnapshotError, SnapshotId, list_snapshots, read_snapshot
from odradek.records.builder import build_batch

TOPIC_ID = uuid.UUID("29cd0256-e3d2-45f1-aaaf-ad979583170e")


def _control(kind: int, offset: int = 0) -> bytes:
    key = struct.pack(">hh", 0, kind)
    return build_batch([(key, b"\x00\x00\x00", [], 1)], base_offset=offset, is_control=True,
                       partition_leader_epoch=1)


def _data(records: list[tuple[str, dict[str, Any]]], offset: int, version: dict[str, int] | None = None) -> bytes:
    values: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]] = [
        (None, encode_metadata_record(n, r, (version or {}).get(n)), [], 1) for n, r in records
    ]
    return build_batch(values, base_offset=offset, partition_leader_epoch=1)


def _raw_frame(api_key: int, version: int, body: bytes) -> bytes:
    out = bytearray()
    for v in (1, api_key, version):
        write_uvarint(out, v)
    return bytes(out) + body


TOPIC = [("TopicRecord", {"name": "orders", "topic_id": TOPIC_ID})]
PARTITION = [("PartitionRecord", {
    "partition_id": 0, "topic_id": TOPIC_ID, "replicas": [1], "isr": [1], "removing_replicas": [],
    "adding_replicas": [], "leader": 1, "leader_epoch": 0, "partition_epoch": 0, "directories": [],
})]


def _segment(directory: Path, base: int, *batches: bytes) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{base:020d}.log").write_bytes(b"".join(batches))


def _open(directory: Path) -> MetadataLog[MetadataRecord]:
    cfg = LogConfig(segment_bytes=8 * 1024 * 1024, retention_ms=-1, retention_bytes=-1)
    return MetadataLog(Log.load(str(directory), cfg, now_ms=0, clean_shutdown=False), METADATA_RECORD_SERDE)


class _Replayed(Listener[MetadataRecord]):
    """What a metadata listener applies: the snapshot's records (at its last offset), then the
    committed records, KIP-868 transactions honoured."""

    def __init__(self) -> None:
        self.records: list[tuple[int, str, dict[str, Any]]] = []
        self.transactions = MetadataTransactions()

    def handle_load_snapshot(self, reader: SnapshotReader[MetadataRecord]) -> None:
        self.records += [(reader.last_contained_log_offset, n, f) for n, f in reader.records]

    def handle_commit(self, batches: Sequence[Batch[MetadataRecord]]) -> None:
        for b in batches:
            for i, rec in enumerate(b.records):
                self.records += [(o, n, f) for o, (n, f) in self.transactions.feed(b.base_offset + i, rec)]


def _replay(ml: MetadataLog[MetadataRecord]) -> _Replayed:
    client = KafkaRaftClient(1, ml, FileQuorumStateStore(os.path.join(ml.dir, "quorum-state")), lambda: 0)
    client.initialize()
    replayed = _Replayed()
    client.register(replayed)
    client.step()  # the only voter elects itself and commits the log it holds
    return replayed


def test_kafka_metadata_log_control_batches_and_kafka_only_records(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    _segment(
        d, 0,
        _control(2, 0),  # LeaderChange
        _data([("BeginTransactionRecord", {"name": "Bootstrap records"}),
               ("FeatureLevelRecord", {"name": "metadata.version", "feature_level": 30}),
               ("EndTransactionRecord", {})], 1),
        _data([("RegisterControllerRecord", {"controller_id": 1, "incarnation_id": uuid.uuid4(),
                                             "zk_migration_ready": False, "end_points": [], "features": []}),
               ("NoOpRecord", {}),
               ("ZkMigrationStateRecord", {"zk_migration_state": 0}),
               ("ClearElrRecord", {"topic_name": ""})], 4),
        _data([("RegisterBrokerRecord", {"broker_id": 1, "incarnation_id": uuid.uuid4(), "broker_epoch": 8,
                                         "end_points": [], "features": [], "rack": None,
                                         "cordoned_log_dirs": [uuid.uuid4()]})], 8, {"RegisterBrokerRecord": 4}),
        _data(TOPIC + PARTITION, 9),
    )
    ml = _open(d)
    got = [(off, name) for off, name, _r in _replay(ml).records]
    assert got == [
        (1, "BeginTransactionRecord"), (2, "FeatureLevelRecord"), (3, "EndTransactionRecord"),
        (4, "RegisterControllerRecord"), (5, "NoOpRecord"), (6, "ZkMigrationStateRecord"),
        (7, "ClearElrRecord"), (8, "RegisterBrokerRecord"), (9, "TopicRecord"), (10, "PartitionRecord"),
    ]
    ml.log.close()


def test_register_broker_record_v4_as_kafka_4_writes_it() -> None:
    dirs = [uuid.uuid4()]
    data = encode_metadata_record("RegisterBrokerRecord", {"broker_id": 3, "cordoned_log_dirs": dirs}, 4)
    name, version, fields = decode_metadata_record(data)
    assert (name, version, fields["cordoned_log_dirs"]) == ("RegisterBrokerRecord", 4, dirs)
    # Odradek itself keeps writing v3, which Kafka 3.9's tools read too.
    assert decode_metadata_record(encode_metadata_record("RegisterBrokerRecord", {}))[1] == 3


@pytest.mark.parametrize(("api_key", "name"), [(10, "DelegationTokenRecord")])
def test_unsupported_kafka_records_stop_the_replay(tmp_path: Path, api_key: int, name: str) -> None:
    with pytest.raises(UnsupportedMetadataRecord, match=name):
        decode_metadata_record(_raw_frame(api_key, 0, b"\x00"))
    d = tmp_path / "__cluster_metadata-0"
    record = build_batch([(None, _raw_frame(api_key, 0, b"\x00"), [], 1)], base_offset=2)
    _segment(d, 0, _data(TOPIC + PARTITION, 0), record)
    ml = _open(d)
    with pytest.raises(UnreadableMetadataRecord, match=rf"offset 2: metadata record type {name} is not supported"):
        _replay(ml)
    ml.log.close()


def _broker_dir_with_appended_metadata(
    tmp_path: Path, batch: Callable[[int], bytes]
) -> tuple[Path, int]:
    """A data directory an embedded broker formatted and stopped, with ``batch(end)`` appended to
    its metadata log as if Kafka had written it; returns the directory and ``end``, the offset the
    appended batch starts at."""
    d = tmp_path / "data"
    with EmbeddedBroker(log_dir=str(d)):
        pass
    meta = d / "__cluster_metadata-0"
    ml = _open(meta)
    end = ml.end_offset
    ml.log.close()
    with open(sorted(meta.glob("*.log"))[-1], "ab") as f:
        f.write(batch(end))
    return d, end


def test_broker_refuses_to_start_on_a_log_with_delegation_tokens(tmp_path: Path) -> None:
    # (AccessControlEntryRecords were refused here too until the StandardAuthorizer applied them.)
    d, end = _broker_dir_with_appended_metadata(
        tmp_path,
        lambda end: build_batch([(None, _raw_frame(10, 0, b"\x00"), [], 1)], base_offset=end,
                                partition_leader_epoch=1),
    )
    with pytest.raises(Exception, match=r"cannot take over the metadata log .*DelegationTokenRecord"):
        EmbeddedBroker(log_dir=str(d)).start()


def test_broker_refuses_kafka_share_group_state(tmp_path: Path) -> None:
    # (__transaction_state was refused too until the transaction coordinator loaded it.)
    d = tmp_path / "data"
    with EmbeddedBroker(log_dir=str(d)):
        pass
    txn = d / "__share_group_state-0"
    _segment(txn, 0, build_batch([(b"key", b"value", [], 1)]))
    with pytest.raises(Exception, match=r"__share_group_state-0 holds records: .*share groups"):
        EmbeddedBroker(log_dir=str(d)).start()
    assert (txn / f"{0:020d}.log").exists()  # nothing deleted


def _snapshot(path: Path, *batches: bytes) -> None:
    path.write_bytes(b"".join(batches))


def test_snapshot_stands_in_for_deleted_log_segments(tmp_path: Path) -> None:
    """Kafka deletes the metadata segments a snapshot covers: the log starts at 5, the snapshot
    5-1 holds the state below it."""
    d = tmp_path / "__cluster_metadata-0"
    change = [("PartitionChangeRecord", {"partition_id": 0, "topic_id": TOPIC_ID, "leader": -1, "isr": []})]
    _segment(d, 5, _data(change, 5))
    _snapshot(d / SnapshotId(5, 1).filename, _control(3), _data(TOPIC + PARTITION, 0), _control(4, 2))
    # An unfinished snapshot (no footer) of an older point is ignored; a partial file too.
    _snapshot(d / SnapshotId(3, 1).filename, _control(3), _data(TOPIC, 0))
    (d / "00000000000000000007-0000000001.checkpoint.part").write_bytes(b"junk")
    assert list_snapshots(str(d)) == [SnapshotId(3, 1), SnapshotId(5, 1)]
    with pytest.raises(SnapshotError, match="no SnapshotFooter"):
        list(read_snapshot(str(d / SnapshotId(3, 1).filename), METADATA_RECORD_SERDE))
    ml = _open(d)
    assert ml.log.log_start_offset == 5
    snap = ml.latest_snapshot()
    assert snap is not None and (snap.end_offset, snap.epoch) == (5, 1)
    assert [(o, n) for o, n, _r in _replay(ml).records] == [(4, "TopicRecord"), (4, "PartitionRecord"),
                                                          (5, "PartitionChangeRecord")]
    assert [(b.base_offset, [n for n, _r in b.records]) for b in ml.read_batches(5)] == [
        (5, ["PartitionChangeRecord"])]
    ml.log.close()


def test_missing_snapshot_for_a_truncated_log_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "__cluster_metadata-0"
    _segment(d, 5, _data(TOPIC, 5))
    ml = _open(d)
    with pytest.raises(UnreadableMetadataRecord, match="starts at offset 5 and no snapshot covers"):
        ml.latest_snapshot()
    ml.log.close()


def test_snapshot_must_start_with_its_header(tmp_path: Path) -> None:
    p = tmp_path / SnapshotId(2, 1).filename
    _snapshot(p, _data(TOPIC, 0), _control(4, 1))
    with pytest.raises(SnapshotError, match="SnapshotHeader"):
        read_snapshot(str(p), METADATA_RECORD_SERDE)
    _snapshot(p, _control(3), _data(TOPIC, 1), _control(4, 2), b"\x00\x00")
    with pytest.raises(SnapshotError, match="partial batch"):
        read_snapshot(str(p), METADATA_RECORD_SERDE)
    assert not os.path.exists(str(p) + ".deleted")


def test_kafka_4_consumer_group_member_record_with_null_classic_metadata() -> None:
    """Bytes Apache Kafka 4.3 wrote for a KIP-848 member: its ClassicMemberMetadata is a tagged
    nullable struct written as varint 0 (null)."""
    key = bytes.fromhex("0005000267320016462f522b79386c6b524a325738714d693958394b7241")
    value = bytes.fromhex("000000000872646b61666b610b2f3132372e302e302e3102076f726465727301000493e00001000100")
    rec = decode_record(key, value)
    assert rec.name == "ConsumerGroupMemberMetadata"
    assert rec.key == {"group_id": "g2", "member_id": "F/R+y8lkRJ2W8qMi9X9KrA"}
    assert rec.value is not None
    assert rec.value["classic_member_metadata"] is None
    assert rec.value["subscribed_topic_names"] == ["orders"]
    assert rec.value["rebalance_timeout_ms"] == 300000


def _controller_with(partitions: dict[int, dict[str, list[int] | int]]) -> QuorumController:
    c = QuorumController.__new__(QuorumController)
    from odradek.metadata.image import EMPTY_IMAGE

    c.node_id = 1
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay("TopicRecord", {"name": "t", "topic_id": TOPIC_ID})
    for pid, p in partitions.items():
        delta.replay("PartitionRecord", {
            "partition_id": pid, "topic_id": TOPIC_ID, "replicas": p["replicas"], "isr": p["isr"],
            "leader": p["leader"], "leader_epoch": 3, "partition_epoch": 5,
            "eligible_leader_replicas": p.get("elr"), "last_known_elr": None,
        })
    c.image = delta.apply()
    return c


def test_leaderless_partitions_after_kafka_controlled_shutdown_get_this_node() -> None:
    c = _controller_with({
        0: {"replicas": [1], "isr": [], "leader": -1, "elr": [1]},   # Kafka's shutdown, KIP-966
        1: {"replicas": [1], "isr": [1], "leader": -1},              # without ELR
        2: {"replicas": [1], "isr": [1], "leader": 1},               # has a leader
        3: {"replicas": [1, 2], "isr": [2], "leader": -1, "elr": []},  # would be unclean
        4: {"replicas": [2], "isr": [2], "leader": -1},              # not a replica here
    })
    records = handle_broker_unfenced(c.image, 1)
    assert [(n, r["partition_id"], r["leader"], r["isr"]) for n, r in records] == [
        ("PartitionChangeRecord", 0, 1, [1]), ("PartitionChangeRecord", 1, 1, [1]),
    ]
    assert records[0][1]["eligible_leader_replicas"] == []
    delta = MetadataDelta(c.image)
    for name, r in records:
        delta.replay(name, r)
    p0 = delta.apply().partition("t", 0)
    assert p0 is not None and (p0.leader, p0.isr, p0.elr, p0.leader_epoch) == (1, (1,), (), 4)


def test_broker_serves_partitions_replicated_on_other_brokers(tmp_path: Path) -> None:
    """Directories of one broker of a multi-broker Kafka cluster: no longer refused (issue 12:
    partitions replicate, so a replica on another broker is followed, not a reason to stop);
    this node leads the partition the metadata gives it."""
    spread = [("PartitionRecord", dict(PARTITION[0][1], replicas=[1, 2], isr=[1, 2]))]
    d, end = _broker_dir_with_appended_metadata(tmp_path, lambda end: _data(TOPIC + spread, end))
    with EmbeddedBroker(log_dir=str(d)) as broker:
        server = broker.server
        rm = server.broker.replica_manager if server is not None and server.broker is not None else None
        assert rm is not None and rm.partitions[("orders", 0)].leader_id == 1


def test_kafka_4_consumer_offsets_records_load(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """__consumer_offsets as Apache Kafka 4.3 writes it: an offset commit value v4 (flexible, with
    the topic id tagged), a KIP-848 member record with a null tagged ClassicMemberMetadata, and a
    streams-group record Odradek does not know (ignored, said once; the offsets still load)."""
    import asyncio
    import logging

    from test_group_coordinator import FakeReplicaManager, load, manager

    from odradek.coordinator.group.records import OffsetKey, parse_key, parse_offset_value

    # Bytes from Kafka 4.3.1's log: group g1, orders-0 at 50.
    commit_key = bytes.fromhex("00010002673100066f726465727300000000")
    commit_value = bytes.fromhex(
        "000400000000000000320000000001000001a2051102a901001029cd0256e3d245f1aaafad979583170e"
    )
    assert parse_key(commit_key) == OffsetKey("g1", "orders", 0)
    got = parse_offset_value(commit_value)
    assert (got.offset, got.leader_epoch, got.metadata) == (50, 0, "")
    member_key = bytes.fromhex("0005000267320016462f522b79386c6b524a325738714d693958394b7241")
    member_value = bytes.fromhex("000000000872646b61666b610b2f3132372e302e302e3102076f726465727301000493e00001000100")
    streams_key = struct.pack(">h", 17) + b"\x00\x02g3"
    rm = FakeReplicaManager(tmp_path, 1)
    lg = rm.partitions[("__consumer_offsets", 0)].log
    lg.append_as_leader(bytearray(build_batch([
        (commit_key, commit_value, [], 1), (member_key, member_value, [], 1), (streams_key, b"\x00\x00\x00", [], 1),
    ])), 0, 0)
    lg.high_watermark = lg.log_end_offset

    async def run() -> None:
        mgr = manager(rm, [1000])
        await load(mgr)
        g1 = mgr.get_group("g1")
        assert g1 is not None and g1.offsets[("orders", 0)].offset == 50
        assert mgr.get_group("g2") is not None

    with caplog.at_level(logging.WARNING):
        asyncio.run(run())
    assert "ignored 1 record(s) of group types Odradek does not support (key versions [17])" in caplog.text
    assert "unreadable" not in caplog.text.lower()


def test_kafka_metadata_transactions(tmp_path: Path) -> None:
    """KIP-868 transactions in Kafka's metadata log: an ended one applies, an aborted one never,
    an open one at the end is held back."""
    d = tmp_path / "__cluster_metadata-0"
    other = uuid.UUID(int=7)
    _segment(
        d, 0,
        _data([("BeginTransactionRecord", {"name": "t1"}), ("TopicRecord", {"name": "aborted", "topic_id": other}),
               ("AbortTransactionRecord", {"reason": None})], 0),
        _data([("BeginTransactionRecord", {"name": "t2"})] + TOPIC + [("EndTransactionRecord", {})], 3),
        _data([("BeginTransactionRecord", {"name": "t3"}), ("TopicRecord", {"name": "open", "topic_id": other})], 6),
    )
    ml = _open(d)
    replayed = _replay(ml)
    got = [(o, n, r.get("name")) for o, n, r in replayed.records]
    assert got == [(2, "AbortTransactionRecord", None), (3, "BeginTransactionRecord", "t2"),
                   (4, "TopicRecord", "orders"), (5, "EndTransactionRecord", None)]
    assert replayed.transactions.open_transaction == 6
    ml.log.close()


def test_broker_aborts_a_metadata_transaction_kafka_left_open(tmp_path: Path) -> None:
    d, end = _broker_dir_with_appended_metadata(
        tmp_path,
        lambda end: _data([("BeginTransactionRecord", {"name": None}),
                           ("TopicRecord", {"name": "half-made", "topic_id": TOPIC_ID})], end),
    )
    meta = d / "__cluster_metadata-0"
    for _ in range(2):  # and again after the abort was written
        with EmbeddedBroker(log_dir=str(d)) as b:
            assert not b.server.broker.metadata_cache.contains_topic("half-made")
    ml = _open(meta)
    replayed = _replay(ml)
    names = [n for o, n, _r in replayed.records if o >= end]
    # The aborted records (and their Begin marker) never come out; one abort, written once.
    assert names[0] == "AbortTransactionRecord" and names.count("AbortTransactionRecord") == 1
    assert "TopicRecord" not in names
    assert replayed.transactions.open_transaction is None
    ml.log.close()


KAFKA_META_PROPERTIES = """#
#Sun Nov 22 21:02:00 UTC 2026
node.id=1
directory.id=QMjA6TmPTp4SXChSL3MFTQ
version=1
cluster.id=Odradek-Reference-Q1
"""


def test_kafka_meta_properties_taken_over_unchanged(tmp_path: Path) -> None:
    from odradek.server.kafka_config import ConfigError
    from odradek.server.meta_properties import ensure_formatted

    (tmp_path / "meta.properties").write_text(KAFKA_META_PROPERTIES)
    assert ensure_formatted([str(tmp_path)], 1) == "Odradek-Reference-Q1"
    assert (tmp_path / "meta.properties").read_text() == KAFKA_META_PROPERTIES  # directory.id kept
    with pytest.raises(ConfigError, match=r"stored node.id 1 .* doesn't match configured node.id=3"):
        ensure_formatted([str(tmp_path)], 3)
    other = tmp_path / "other"
    other.mkdir()
    (other / "meta.properties").write_text(KAFKA_META_PROPERTIES.replace("Odradek-Reference-Q1", "AnotherCluster0000000w"))
    with pytest.raises(ConfigError, match="different clusters"):
        ensure_formatted([str(tmp_path), str(other)], 1)
