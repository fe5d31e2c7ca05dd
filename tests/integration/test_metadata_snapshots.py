"""Odradek's metadata snapshots, read by Apache Kafka's own tools.

A real ``odradek server`` with a tiny ``metadata.log.max.record.bytes.between.snapshots`` writes a
snapshot after every commit; with ``metadata.max.retention.bytes=0`` and segments rolled every
millisecond, Kafka's retention deletes the metadata segments below the newest snapshot and the
older snapshots. Then:

* Kafka's MetadataShell (``kafka-metadata-shell.sh --snapshot``) lists and shows our topics and
  configs from our snapshot, and DumpLogSegments decodes it with the cluster-metadata decoder;
* Odradek restarted on the directory, whose log no longer starts at 0, loads the snapshot, replays
  the rest and serves the same topics and configs.

Skipped without Java and the fetched Kafka (``scripts/kafka_reference.sh``), except under CI.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE
from odradek.raft.snapshot import SnapshotError, list_snapshots, read_snapshot

from .kafka_reference import KafkaTools, find_kafka_tools
from .support import ServerProcess, wait_until

TOPICS = {"snap-alpha": 3, "snap-beta": 1, "snap-later": 2}


@pytest.fixture(scope="module")
def kafka() -> KafkaTools:
    return find_kafka_tools("4")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    d = tmp_path_factory.mktemp("odradek-snapshots") / "data"
    srv = ServerProcess(d, {
        "metadata.log.max.record.bytes.between.snapshots": "1",
        "metadata.log.segment.ms": "1",
        "metadata.max.retention.bytes": "0",
    }).start()
    try:
        admin = AdminClient({"bootstrap.servers": srv.bootstrap_servers})
        futs = admin.create_topics([
            NewTopic("snap-alpha", TOPICS["snap-alpha"], 1),
            NewTopic("snap-beta", TOPICS["snap-beta"], 1, config={"retention.ms": "4242000"}),
        ])
        for f in futs.values():
            f.result(timeout=30)
        meta = d / "__cluster_metadata-0"

        def snapshot_has(topics: set[str]) -> bool:
            snaps = list_snapshots(str(meta))
            if not snaps:
                return False
            try:
                records = list(read_snapshot(str(meta / snaps[-1].filename), METADATA_RECORD_SERDE))
            except (SnapshotError, OSError):
                return False
            return topics <= {f["name"] for n, f in records if n == "TopicRecord"}

        wait_until(lambda: snapshot_has({"snap-alpha", "snap-beta"}), 60)
        # A second snapshot: Kafka's retention never deletes the only one, nor the log below it.
        admin.create_topics([NewTopic("snap-later", TOPICS["snap-later"], 1)])["snap-later"].result(timeout=30)
        wait_until(lambda: snapshot_has(set(TOPICS)) and not (meta / f"{0:020d}.log").exists(), 60)
        yield srv
    finally:
        srv.terminate()


def _latest_snapshot(srv: ServerProcess) -> Path:
    meta = srv.data_dir / "__cluster_metadata-0"
    return meta / list_snapshots(str(meta))[-1].filename


def _copy_of_latest_snapshot(srv: ServerProcess, tmp_path: Path) -> Path:
    """The newest snapshot copied out of the data directory: Kafka's metadata shell, like Kafka,
    refuses a directory whose ``.lock`` a running node holds (and Odradek holds it)."""
    src = _latest_snapshot(srv)
    dst = tmp_path / "copy" / "__cluster_metadata-0" / src.name
    dst.parent.mkdir(parents=True)
    shutil.copyfile(src, dst)
    return dst


def _shell(kafka: KafkaTools, snap: Path, *command: str) -> str:
    """One non-interactive MetadataShell command. Kafka's shell runs it once its loader's last
    applied offset is above 0, which can be before its publisher has the image (a race in the
    tool: the answer is then "No such file or directory"); a few tries give its real answer."""
    out = ""
    for _ in range(8):
        out = kafka.run("kafka-metadata-shell", "--snapshot", str(snap), *command).stdout
        # The tool says "No such file or directory" or "...: no such file or directory.".
        if out.strip() and "no such file or directory" not in out.lower():
            return out
    return out


def test_only_the_newest_snapshot_and_the_log_above_it_remain(server: ServerProcess) -> None:
    meta = server.data_dir / "__cluster_metadata-0"
    snaps = list_snapshots(str(meta))
    # metadata.max.retention.bytes=0: only the newest snapshot stays (two for the moment between
    # writing one and cleaning after it).
    assert 1 <= len(snaps) <= 2, snaps
    segments = sorted(int(p.stem) for p in meta.glob("*.log"))
    # The log no longer starts at 0, and what is left reaches back to the newest snapshot.
    assert segments and 0 < segments[0] <= snaps[-1].end_offset, (segments, snaps)


def test_kafka_metadata_shell_reads_our_snapshot(server: ServerProcess, kafka: KafkaTools, tmp_path: Path) -> None:
    snap = _copy_of_latest_snapshot(server, tmp_path)
    # The data directory itself is locked by the running server, as Kafka's would be.
    locked = kafka.run("kafka-metadata-shell", "--snapshot", str(_latest_snapshot(server)), "ls", "/", check=False)
    assert locked.returncode != 0 and "Unable to lock" in locked.stderr, locked.stderr[-2000:]
    out = _shell(kafka, snap, "ls", "/image/topics/byName")
    assert set(TOPICS) <= set(out.split()), out
    out = _shell(kafka, snap, "ls", "/image/topics/byName/snap-alpha")
    assert {"0", "1", "2"} <= set(out.split()), out
    out = _shell(kafka, snap, "cat", "/image/topics/byName/snap-alpha/0")
    assert "PartitionRegistration(replicas=[1]," in out and "leader=1," in out, out
    out = _shell(kafka, snap, "cat", "/image/configs/TOPIC:snap-beta/retention.ms")
    assert "4242000" in out, out
    out = _shell(kafka, snap, "cat", "/image/features/metadataVersion")
    assert re.search(r"Optional\[\d+\.\d+-IV\d+\]", out), out


def test_kafka_dump_log_decodes_our_snapshot(server: ServerProcess, kafka: KafkaTools) -> None:
    snap = _latest_snapshot(server)
    out = kafka.run("kafka-dump-log", "--cluster-metadata-decoder", "--files", str(snap)).stdout
    assert "SnapshotHeader" in out and "SnapshotFooter" in out, out[-3000:]
    names = set(re.findall(r'"type":"TOPIC_RECORD","version":\d+,"data":\{"name":"([^"]+)"', out))
    assert set(TOPICS) <= names, out[-3000:]
    assert '"name":"retention.ms","value":"4242000"' in out
    assert "Exception" not in out and "isvalid: false" not in out


def test_restart_after_deletion_serves_the_same_topics(server: ServerProcess) -> None:
    before = _latest_snapshot(server)
    meta = before.parent
    first_segment = min(int(p.stem) for p in meta.glob("*.log"))
    assert first_segment > 0  # the log below the snapshot is gone
    server.restart()
    # It started from the newest snapshot (the log alone no longer holds the topics).
    assert re.search(r"Read snapshot \S+-\d{10}\.checkpoint: \d+ records", server.log_tail(20000)), server.log_tail()
    admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
    md = admin.list_topics(timeout=30)
    for name, parts in TOPICS.items():
        assert name in md.topics, sorted(md.topics)
        assert len(md.topics[name].partitions) == parts
    res = ConfigResource(ConfigResource.Type.TOPIC, "snap-beta")
    configs = admin.describe_configs([res])[res].result(timeout=30)
    assert configs["retention.ms"].value == "4242000"
    # And it keeps taking metadata writes on top of the snapshot.
    admin.create_topics([NewTopic("snap-gamma", 2, 1)])["snap-gamma"].result(timeout=30)
    wait_until(lambda: "snap-gamma" in admin.list_topics(timeout=10).topics, 30)
