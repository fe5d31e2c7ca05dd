"""Kafka's files, both directions.

* Apache Kafka's own DumpLogSegments (4.x, unchanged) reads what Odradek writes: partition
  segments (plain, compressed, compacted, rolled into several segments), their offset and time
  indexes (with Kafka's index verification), and Odradek's ``__cluster_metadata`` log with the
  cluster-metadata decoder.
* The drop-in migration: an Apache Kafka 4.x broker is given topics, records and committed group
  offsets, stopped cleanly, and Odradek started on its ``log.dirs`` with the same node.id serves
  all of it as it was; a consumer of the group resumes where it left off.

Odradek's own metadata snapshots, opened by Kafka's metadata shell, are tested in
test_metadata_snapshots.py.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from .kafka_reference import KafkaServer, KafkaTools, find_kafka_tools
from .support import ServerProcess, wait_until

Record = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]


@pytest.fixture(scope="module")
def kafka() -> KafkaTools:
    return find_kafka_tools("4")


# ------------------------------------------------------------------ helpers


def _consume_all(bootstrap: str, tps: list[TopicPartition], ends: dict[tuple[str, int], int],
                 timeout: float = 60.0) -> dict[tuple[str, int], list[Record]]:
    """Every record of ``tps`` from their start up to ``ends`` (exclusive)."""
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })
    out: dict[tuple[str, int], list[Record]] = {(tp.topic, tp.partition): [] for tp in tps}
    try:
        c.assign([TopicPartition(tp.topic, tp.partition, -2) for tp in tps])
        deadline = time.monotonic() + timeout

        def done() -> bool:
            return all(
                (recs[-1][0] + 1 if recs else 0) >= ends[key] or ends[key] == 0
                for key, recs in out.items()
            )

        while not done() and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            key = (msg.topic(), msg.partition())
            if msg.offset() < ends[key]:
                out[key].append((
                    msg.offset(), msg.timestamp()[1], msg.key(), msg.value(),
                    list(msg.headers() or []),
                ))
    finally:
        c.close()
    return out


def _watermarks(bootstrap: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return {tp: c.get_watermark_offsets(TopicPartition(*tp), timeout=20) for tp in tps}
    finally:
        c.close()


def _committed(bootstrap: str, group: str, tps: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, str | None]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(*tp) for tp in tps], timeout=30)
        return {(tp.topic, tp.partition): (tp.offset, tp.metadata) for tp in got}
    finally:
        c.close()


def _cluster_id(bootstrap: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return str(admin.describe_cluster().result(30).cluster_id)


def _topic_ids(bootstrap: str, topics: list[str]) -> dict[str, tuple[str, int]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.describe_topics(TopicCollection(topics))
    out = {}
    for name, f in futs.items():
        d = f.result(timeout=30)
        out[name] = (str(d.topic_id), len(d.partitions))
    return out


def _topic_configs(bootstrap: str, topics: list[str]) -> dict[str, dict[str, str]]:
    """The topic-level (non-default) configs of each topic."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futs = admin.describe_configs([ConfigResource("topic", t) for t in topics])
    out: dict[str, dict[str, str]] = {}
    for res, f in futs.items():
        entries = f.result(timeout=30)
        out[res.name] = {
            k: e.value for k, e in entries.items()
            if e.source == 1  # DYNAMIC_TOPIC_CONFIG
        }
    return out


def _consume_group(bootstrap: str, group: str, topic: str, n: int, protocol: str = "classic",
                   timeout: float = 60.0) -> list[tuple[int, int]]:
    """Consume ``n`` records as a member of ``group``, commit, leave; (partition, offset) seen."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "group.protocol": protocol,
    }
    if protocol == "classic":
        conf["session.timeout.ms"] = 10000
    c = Consumer(conf)
    seen: list[tuple[int, int]] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(seen) < n and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            seen.append((msg.partition(), msg.offset()))
        assert len(seen) >= n, f"consumed only {len(seen)} of {n} records of {topic} in {group}"
        c.commit(asynchronous=False)
    finally:
        c.close()
    return seen


# ------------------------------------------------------------------ (a) Odradek -> Kafka's tools

CODECS = ("gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module")
def odradek_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An Odradek data directory with plain, compressed, rolled and compacted logs, written by
    a broker that then stopped cleanly."""
    from odradek.embedded import EmbeddedBroker

    d = tmp_path_factory.mktemp("odradek-files") / "data"
    with EmbeddedBroker({"log.cleaner.backoff.ms": "100"}, log_dir=str(d)) as b:
        bs = b.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        futs = admin.create_topics([
            NewTopic("plain", 1, 1),
            NewTopic("zipped", 1, 1),
            NewTopic("rolled", 1, 1, config={"segment.bytes": "4096", "index.interval.bytes": "128"}),
            NewTopic("compact", 1, 1, config={
                "cleanup.policy": "compact", "segment.bytes": "4096",
                "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0",
            }),
        ])
        for f in futs.values():
            f.result(timeout=30)
        p = Producer({"bootstrap.servers": bs, "linger.ms": 5, "batch.size": 1500})
        for i in range(200):
            p.produce("plain", key=f"k{i}".encode(), value=f"v{i}".encode(), headers=[("h", b"x")])
        for i in range(500):
            p.produce("rolled", key=f"k{i}".encode(), value=f"value-{i}".encode() * 5)
        for i in range(600):
            p.produce("compact", key=f"k{i % 20}".encode(), value=f"v{i}".encode())
        assert p.flush(30) == 0
        for codec in CODECS:
            p = Producer({"bootstrap.servers": bs, "linger.ms": 5, "compression.type": codec})
            for i in range(50):
                p.produce("zipped", key=f"{codec}{i}".encode(), value=f"{codec}-value-{i}".encode())
            assert p.flush(30) == 0

        def cleaned() -> bool:
            try:
                text = (d / "cleaner-offset-checkpoint").read_text()
            except OSError:
                return False
            return bool(re.search(r"^compact 0 [1-9]\d*$", text, re.M))

        wait_until(cleaned, 60)
    assert (d / ".kafka_cleanshutdown").exists()
    return d


def _dump(kafka: KafkaTools, files: list[Path], *opts: str) -> str:
    out = kafka.run("kafka-dump-log", *opts, "--files", ",".join(str(f) for f in files)).stdout
    for bad in ("Mismatches", "mismatch", "corrupt", "invalid bytes", "Exception", "isvalid: false"):
        assert bad not in out, f"{bad!r} in DumpLogSegments output:\n{out[-3000:]}"
    return out


_RECORD_RE = re.compile(r"^\| offset: (\d+) .*?headerKeys: \[(.*?)\](?: key: (\S*))?(?: payload: (.*))?$", re.M)


def _records(out: str) -> list[tuple[int, str, str | None, str | None]]:
    return [(int(m.group(1)), m.group(2), m.group(3), m.group(4)) for m in _RECORD_RE.finditer(out)]


def _segments(d: Path, suffix: str) -> list[Path]:
    return sorted(d.glob(f"*{suffix}"))


def test_dump_log_reads_plain_segment(kafka: KafkaTools, odradek_dir: Path) -> None:
    out = _dump(kafka, _segments(odradek_dir / "plain-0", ".log"), "--print-data-log")
    recs = _records(out)
    assert [r[0] for r in recs] == list(range(200))
    assert all(r[1] == "h" for r in recs)
    assert [(r[2], r[3]) for r in recs] == [(f"k{i}", f"v{i}") for i in range(200)]
    assert out.count("isvalid: true") == len(re.findall(r"^baseOffset:", out, re.M)) > 0


def test_dump_log_reads_compressed_batches(kafka: KafkaTools, odradek_dir: Path) -> None:
    out = _dump(kafka, _segments(odradek_dir / "zipped-0", ".log"), "--print-data-log")
    codecs = set(re.findall(r"compresscodec: (\w+)", out))
    # librdkafka sends a batch uncompressed when compressing would not make it smaller (a batch
    # of one small record, when linger.ms cuts it short): "none" may appear beside the four.
    assert set(CODECS) <= codecs <= {*CODECS, "none"}, codecs
    recs = _records(out)
    assert [r[0] for r in recs] == list(range(200))
    expected = [(f"{c}{i}", f"{c}-value-{i}") for c in CODECS for i in range(50)]
    assert [(r[2], r[3]) for r in recs] == expected


def test_dump_log_reads_rolled_segments_and_verifies_indexes(kafka: KafkaTools, odradek_dir: Path) -> None:
    part = odradek_dir / "rolled-0"
    logs = _segments(part, ".log")
    assert len(logs) >= 5, logs
    out = _dump(kafka, logs, "--print-data-log")
    assert [r[0] for r in _records(out)] == list(range(500))
    # Every file's first batch starts at the offset its name says.
    for f in logs:
        section = out.split(f"Dumping {f}", 1)[1]
        assert re.search(rf"^baseOffset: {int(f.stem)} ", section, re.M), f
    indexes = _segments(part, ".index") + _segments(part, ".timeindex")
    entries = _dump(kafka, _segments(part, ".index"))
    assert re.search(r"^offset: \d+ position: [1-9]\d*$", entries, re.M), entries[:2000]
    _dump(kafka, indexes, "--verify-index-only")
    sanity = _dump(kafka, indexes, "--index-sanity-check")
    nonempty = [f for f in indexes if f.stat().st_size > 0]
    assert nonempty
    for f in nonempty:
        assert f"{f} passed sanity check." in sanity, sanity


def test_dump_log_reads_compacted_log_after_cleaning(kafka: KafkaTools, odradek_dir: Path) -> None:
    part = odradek_dir / "compact-0"
    logs = _segments(part, ".log")
    out = _dump(kafka, logs, "--print-data-log")
    recs = _records(out)
    assert len(recs) < 600  # the cleaner removed superseded values
    offsets = [r[0] for r in recs]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    latest: dict[str, str | None] = {}
    for _o, _h, key, value in recs:
        assert key is not None
        latest[key] = value
    assert latest == {f"k{k}": f"v{580 + k}" for k in range(20)}
    cleaned_to = int(re.search(r"^compact 0 (\d+)$", (odradek_dir / "cleaner-offset-checkpoint").read_text(), re.M).group(1))
    below = [r[2] for r in recs if r[0] < cleaned_to]
    assert len(below) == len(set(below)), "a key appears twice in the cleaned part"
    _dump(kafka, _segments(part, ".index") + _segments(part, ".timeindex"), "--verify-index-only")


def test_dump_log_decodes_cluster_metadata(kafka: KafkaTools, odradek_dir: Path) -> None:
    logs = _segments(odradek_dir / "__cluster_metadata-0", ".log")
    out = _dump(kafka, logs, "--cluster-metadata-decoder")
    names = set(re.findall(r'"type":"TOPIC_RECORD","version":\d+,"data":\{"name":"([^"]+)"', out))
    assert {"plain", "zipped", "rolled", "compact"} <= names, names
    # Unfencing is a BrokerRegistrationChangeRecord, as Kafka writes it from metadata.version 3.3-IV2.
    for kind in ("FEATURE_LEVEL_RECORD", "REGISTER_BROKER_RECORD", "PARTITION_RECORD", "CONFIG_RECORD",
                 "BROKER_REGISTRATION_CHANGE_RECORD"):
        assert f'"type":"{kind}"' in out, kind
    assert '"name":"cleanup.policy","value":"compact"' in out
    assert "Error" not in out and "Failed" not in out
    assert out.count("isvalid: true") == len(re.findall(r"^baseOffset:", out, re.M)) > 0


# ------------------------------------------------------------------ (b) Kafka -> Odradek


@dataclass
class KafkaState:
    """What an Apache Kafka broker served just before it was stopped."""

    data_dir: Path
    topics: list[str]
    tps: list[tuple[str, int]]
    topic_ids: dict[str, tuple[str, int]] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    watermarks: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    records: dict[tuple[str, int], list[Record]] = field(default_factory=dict)
    committed: dict[str, dict[tuple[str, int], tuple[int, str | None]]] = field(default_factory=dict)
    cluster_id: str = ""


TOPICS = {"orders": 3, "compacted": 1, "big": 1}
TOPIC_CONFIGS = {
    "orders": {"retention.ms": "86400000", "max.message.bytes": "200000", "compression.type": "producer"},
    "compacted": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"},
    "big": {"segment.bytes": "1048576", "message.timestamp.type": "CreateTime"},
}


@pytest.fixture(scope="module")
def kafka_state(kafka: KafkaTools, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaState]:
    """Run Apache Kafka 4.x, fill it, stop it with SIGTERM; what it served is the reference."""
    root = tmp_path_factory.mktemp("kafka-migrate")
    # Small snapshot interval: Kafka writes metadata snapshots (*.checkpoint) beside its log.
    server = KafkaServer(kafka, root / "kafka", {
        "log.segment.bytes": "1048576", "metadata.log.max.record.bytes.between.snapshots": "4096",
    })
    server.start()
    try:
        bs = server.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        futs = admin.create_topics([
            NewTopic(t, n, 1, config=TOPIC_CONFIGS[t]) for t, n in TOPICS.items()
        ])
        for f in futs.values():
            f.result(timeout=60)
        tps = [(t, p) for t, n in TOPICS.items() for p in range(n)]
        base_ts = int(time.time() * 1000) - 3_600_000
        for codec in ("lz4", "zstd", "none"):
            p = Producer({"bootstrap.servers": bs, "compression.type": codec, "linger.ms": 20,
                          "enable.idempotence": codec != "none"})
            for i in range(120):
                p.produce("orders", key=f"{codec}-k{i}".encode(), value=f"{codec}-v{i}".encode() * 3,
                          headers=[("codec", codec.encode()), ("i", str(i).encode())],
                          partition=i % 3, timestamp=base_ts + i)
                p.produce("compacted", key=f"k{i % 10}".encode(), value=f"{codec}-{i}".encode(),
                          timestamp=base_ts + i)
            assert p.flush(60) == 0
            if codec == "lz4":
                # A restart: a new KRaft epoch and new partition leader epochs, as in a
                # cluster that has lived a while.
                server.stop()
                server.start()
        # A tombstone and a null-key record.
        p = Producer({"bootstrap.servers": bs})
        p.produce("compacted", key=b"k0", value=None)
        p.produce("orders", key=None, value=b"no-key", partition=0)
        # About 2.5 MB in one partition: three segments of 1 MB (segment.bytes=1048576).
        payload = bytes(range(256)) * 4
        for i in range(2500):
            p.produce("big", key=str(i).encode(), value=payload, timestamp=base_ts + i)
            if i % 500 == 0:
                p.poll(0)
        assert p.flush(60) == 0
        # A log start offset above zero (DeleteRecords).
        res = admin.delete_records([TopicPartition("orders", 1, 10)])
        for f in res.values():
            f.result(timeout=30)
        # Committed offsets: a classic group (with commit metadata) and a KIP-848 consumer group.
        _consume_group(bs, "classic-group", "orders", 150)
        c = Consumer({"bootstrap.servers": bs, "group.id": "meta-group", "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition("big", 0, 1234, metadata="checkpoint-7")], asynchronous=False)
        c.close()
        _consume_group(bs, "new-group", "orders", 100, protocol="consumer")

        state = KafkaState(root / "kafka" / "logs", list(TOPICS), tps)
        state.cluster_id = _cluster_id(bs)
        state.topic_ids = _topic_ids(bs, list(TOPICS))
        state.configs = _topic_configs(bs, list(TOPICS))
        state.watermarks = _watermarks(bs, tps)
        state.records = _consume_all(bs, [TopicPartition(*tp) for tp in tps],
                                     {tp: wm[1] for tp, wm in state.watermarks.items()})
        for g in ("classic-group", "meta-group", "new-group"):
            state.committed[g] = _committed(bs, g, tps)
    finally:
        server.stop()
    assert (root / "kafka" / "logs" / ".kafka_cleanshutdown").exists(), server.log_tail()
    yield state


@pytest.fixture(scope="module")
def migrated(kafka_state: KafkaState) -> Iterator[ServerProcess]:
    """Odradek on Apache Kafka's log.dirs, same node.id."""
    server = ServerProcess(kafka_state.data_dir, {"node.id": "1"})
    server.start()
    try:
        yield server
    finally:
        server.terminate()


def test_migrated_cluster_and_topics(kafka_state: KafkaState, migrated: ServerProcess) -> None:
    bs = migrated.bootstrap_servers
    cluster_id = _cluster_id(bs)
    assert cluster_id == kafka_state.cluster_id == "Odradek-Reference-Q1"
    assert _topic_ids(bs, kafka_state.topics) == kafka_state.topic_ids
    configs = _topic_configs(bs, kafka_state.topics)
    for t in kafka_state.topics:
        for k, v in TOPIC_CONFIGS[t].items():
            assert configs[t].get(k) == v, (t, k, configs[t])
    assert configs == kafka_state.configs


def test_migrated_records_and_offsets(kafka_state: KafkaState, migrated: ServerProcess) -> None:
    bs = migrated.bootstrap_servers
    wms = _watermarks(bs, kafka_state.tps)
    assert wms == kafka_state.watermarks
    assert wms[("orders", 1)][0] == 10  # the log start offset set by DeleteRecords
    assert wms[("big", 0)][1] == 2500
    records = _consume_all(bs, [TopicPartition(*tp) for tp in kafka_state.tps],
                           {tp: wm[1] for tp, wm in wms.items()})
    for tp in kafka_state.tps:
        assert records[tp] == kafka_state.records[tp], tp
    # Headers, keys, timestamps and compression codecs survived.
    first = kafka_state.records[("orders", 0)][0]
    assert first[2] is not None and first[4] and first[4][0][0] == "codec"
    assert sum(len(v) for v in records.values()) > 2500


def test_migrated_committed_offsets(kafka_state: KafkaState, migrated: ServerProcess, kafka: KafkaTools) -> None:
    bs = migrated.bootstrap_servers
    for g, expected in kafka_state.committed.items():
        assert _committed(bs, g, kafka_state.tps) == expected, g
    assert kafka_state.committed["meta-group"][("big", 0)] == (1234, "checkpoint-7")
    assert sum(o for o, _ in kafka_state.committed["classic-group"].values() if o >= 0) >= 150
    # Kafka's own tool sees them too, with the lag computed against the migrated logs.
    for group in ("classic-group", "new-group"):
        out = kafka.run("kafka-consumer-groups", "--bootstrap-server", bs, "--describe",
                        "--group", group).stdout
        rows = 0
        for (t, p), (off, _) in kafka_state.committed[group].items():
            if t == "orders" and off >= 0:
                end = kafka_state.watermarks[(t, p)][1]
                assert re.search(rf"{group}\s+orders\s+{p}\s+{off}\s+{end}\s+{end - off}\b", out), out
                rows += 1
        assert rows > 0, (group, kafka_state.committed[group])


@pytest.mark.parametrize("group,protocol", [("classic-group", "classic"), ("new-group", "consumer")])
def test_migrated_group_resumes(kafka_state: KafkaState, migrated: ServerProcess, group: str, protocol: str) -> None:
    """A consumer of the group starts at the offsets it committed on Apache Kafka."""
    committed = {tp: off for tp, (off, _) in kafka_state.committed[group].items() if tp[0] == "orders"}
    seen = _consume_group(migrated.bootstrap_servers, group, "orders", 30, protocol=protocol)
    first: dict[int, int] = {}
    for part, off in seen:
        first.setdefault(part, off)
    assert first, seen
    for part, off in first.items():
        start = committed[("orders", part)]
        expected = start if start >= 0 else kafka_state.watermarks[("orders", part)][0]
        assert off == expected, (group, part, off, committed)


def test_migrated_broker_takes_new_writes(kafka_state: KafkaState, migrated: ServerProcess) -> None:
    bs = migrated.bootstrap_servers
    end = kafka_state.watermarks[("big", 0)][1]
    p = Producer({"bootstrap.servers": bs})
    delivered: list[int] = []
    p.produce("big", key=b"after", value=b"migration", partition=0,
              on_delivery=lambda err, msg: delivered.append(-1 if err else msg.offset()))
    assert p.flush(30) == 0
    assert delivered == [end]
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic("made-on-odradek", 2, 1)]).values():
        f.result(timeout=30)
    wait_until(lambda: "made-on-odradek" in admin.list_topics(timeout=10).topics, 20)


def test_migrated_broker_restarts(kafka_state: KafkaState, migrated: ServerProcess, kafka: KafkaTools) -> None:
    """Odradek restarted on the migrated directories (its records now follow Kafka's in the
    metadata log) serves the same; Kafka's decoder reads the mixed metadata log."""
    assert migrated.terminate() == 0
    migrated.start()
    bs = migrated.bootstrap_servers
    assert _topic_ids(bs, kafka_state.topics) == kafka_state.topic_ids
    wms = _watermarks(bs, kafka_state.tps)
    for tp, (low, high) in kafka_state.watermarks.items():
        assert wms[tp][0] == low
        assert wms[tp][1] == high + (1 if tp == ("big", 0) else 0)  # the write after migration
    assert _committed(bs, "meta-group", [("big", 0)]) == {("big", 0): (1234, "checkpoint-7")}
    meta = sorted((kafka_state.data_dir / "__cluster_metadata-0").glob("*.log"))
    out = kafka.run("kafka-dump-log", "--cluster-metadata-decoder", "--files", ",".join(map(str, meta))).stdout
    assert '"type":"LeaderChange"' in out or "LeaderChange:" in out  # Kafka's control record
    assert '"name":"made-on-odradek"' in out  # Odradek's TopicRecord
    assert "isvalid: false" not in out and "Exception" not in out


def test_wrong_node_id_is_refused(kafka_state: KafkaState, migrated: ServerProcess, tmp_path: Path) -> None:
    """Kafka's meta.properties names node 1; starting as node 2 is refused before anything is
    touched (on a copy: the migrated broker holds the directory lock)."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(kafka_state.data_dir / "__cluster_metadata-0", copy / "__cluster_metadata-0",
                    ignore=shutil.ignore_patterns("*.lock"))
    shutil.copy(kafka_state.data_dir / "meta.properties", copy / "meta.properties")
    before = (copy / "meta.properties").read_bytes()
    server = ServerProcess(copy, {"node.id": "2"})
    with pytest.raises(RuntimeError, match=r"stored node.id 1 .* doesn't match configured node.id=2"):
        server.start(timeout=30)
    assert (copy / "meta.properties").read_bytes() == before


def test_kafka_metadata_snapshot_matches_its_log(kafka_state: KafkaState, migrated: ServerProcess) -> None:
    """Odradek's reader of Kafka's metadata snapshots: the newest snapshot Kafka wrote gives the
    same topics, partitions, configs and features as replaying Kafka's log up to its end offset."""
    from odradek.metadata.delta import MetadataDelta
    from odradek.metadata.image import EMPTY_IMAGE, MetadataImage
    from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE
    from odradek.metadata.records import decode_metadata_record
    from odradek.raft.snapshot import list_snapshots, read_snapshot
    from odradek.records.batch import iter_batches
    from odradek.records.records import decode_batch

    meta_dir = kafka_state.data_dir / "__cluster_metadata-0"
    snaps = list_snapshots(str(meta_dir))
    assert snaps, sorted(p.name for p in meta_dir.iterdir())
    snap = snaps[-1]
    snapshot_delta = MetadataDelta(EMPTY_IMAGE)
    for name, rec in read_snapshot(str(meta_dir / snap.filename), METADATA_RECORD_SERDE):
        snapshot_delta.replay(name, rec)
    from_snapshot = snapshot_delta.apply()
    log_delta = MetadataDelta(EMPTY_IMAGE)
    data = (meta_dir / "00000000000000000000.log").read_bytes()
    for h in iter_batches(data):
        if h.is_control:
            continue
        for r in decode_batch(memoryview(data)[h.position : h.position + h.size]):
            if r.offset < snap.end_offset and r.value is not None:
                name, _v, rec = decode_metadata_record(r.value)
                log_delta.replay(name, rec, r.offset)
    from_log = log_delta.apply()

    def view(img: MetadataImage) -> dict[str, Any]:
        return {
            "topics": {n: (t.topic_id, {p: (r.replicas, r.isr, r.leader, r.elr)
                                        for p, r in t.partitions.items()})
                       for n, t in img.topics_by_name.items()},
            "configs": img.configs.resources,
            "features": img.features.levels,
            "brokers": sorted(img.brokers),
        }

    assert view(from_snapshot) == view(from_log)
    assert set(TOPICS) <= set(from_snapshot.topics_by_name)
