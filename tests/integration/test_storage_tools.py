"""``odradek storage`` and ``odradek dump-log`` against Apache Kafka 4.x's own tools and broker.

* ``odradek dump-log`` prints exactly what Kafka's ``kafka-dump-log.sh`` prints, stdout and stderr,
  on the same files: segments the project's Log wrote (plain, compressed, producer batches,
  LogAppendTime, a transaction marker, trailing garbage, rolled segments, their indexes, a
  corrupted index), a metadata log, the bootstrap checkpoint ``odradek storage format`` writes,
  the KIP-853 snapshot ``kafka-storage.sh format --standalone`` writes, and the metadata log and
  segments a Kafka broker wrote. Nothing is normalised: the outputs are compared byte for byte.
* A directory ``kafka-storage.sh format`` made is served by ``odradek server`` under Kafka's
  cluster id; a directory ``odradek storage format`` made is served by a Kafka broker under
  Odradek's; ``kafka-storage.sh info`` reads it as Odradek's ``storage info`` does.
* ``odradek server`` refuses a log directory of another cluster than its metadata directory
  (exit 2) -- this one needs no Java.

Without Java or the fetched Kafka the Kafka tests skip (they fail under CI), as the other
kafka_reference tests do.
"""

from __future__ import annotations

import re
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.log import Log, LogConfig
from odradek.log.append_origin import AppendOrigin
from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE
from odradek.metadata.records import encode_metadata_record
from odradek.raft import control_records as cr
from odradek.raft.metadata_log import MetadataLog
from odradek.records.builder import build_batch
from odradek.server.meta_properties import ensure_formatted, read_meta_properties

from .kafka_reference import KafkaServer, KafkaTools, find_kafka_tools
from .support import ServerProcess

CLUSTER = "Q1w2E3r4T5y6U7i8O9p0aQ"


@pytest.fixture(scope="module")
def kafka() -> KafkaTools:
    return find_kafka_tools("4")


def odradek(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "odradek.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"odradek {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
        )
    return result


def assert_same_dump(
    kafka: KafkaTools, files: list[Path], *opts: str, cwd: Path | None = None
) -> str:
    """Both tools on the same files; stdout, stderr and exit code must be identical."""
    arg = ",".join(str(f) for f in files)
    ours = odradek("dump-log", *opts, "--files", arg, check=False)
    theirs = kafka.run("kafka-dump-log", *opts, "--files", arg, check=False)
    assert theirs.returncode == 0, theirs.stderr[-3000:]
    assert ours.stdout.splitlines() == theirs.stdout.splitlines(), f"options {opts}"
    assert ours.stderr.splitlines() == theirs.stderr.splitlines(), f"options {opts}"
    assert ours.returncode == 0
    return ours.stdout


def _segment_files(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.suffix in (".log", ".index", ".timeindex"))


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Segments, indexes and a metadata log written by the project's own Log."""
    root = tmp_path_factory.mktemp("written")
    log = Log.load(
        str(root / "t-0"), LogConfig(segment_bytes=2048, index_interval_bytes=200), now_ms=0
    )
    epoch = 0
    sequence = 0
    for i in range(60):
        if i % 7 == 3:
            batch = build_batch(
                [
                    (f"k{i}-{j}".encode(), b"v" * (i % 50), [("h", b"1"), ("i", None)], 10_000 + i)
                    for j in range(3)
                ],
                compression=i % 5,
                producer_id=42,
                producer_epoch=0,
                base_sequence=sequence,
            )
            sequence += 3
        elif i % 11 == 5:
            batch = build_batch([(None, f"append-{i}".encode(), [], 20_000 + i)], timestamp_type=1)
        else:
            batch = build_batch([(f"key{i}".encode(), f"valüe-{i}".encode(), [], 10_000 + i)])
        if i == 40:
            epoch = 3
        log.append_as_leader(bytearray(batch), leader_epoch=epoch, now_ms=30_000 + i)
    marker = build_batch(
        [(cr.control_key(cr.COMMIT), struct.pack(">hi", 0, 5), [], 40_000)],
        producer_id=42,
        producer_epoch=0,
        is_control=True,
        is_transactional=True,
    )
    log.append_as_leader(
        bytearray(marker), leader_epoch=epoch, now_ms=40_000, origin=AppendOrigin.COORDINATOR
    )
    log.close()
    meta = Log.load(str(root / "__cluster_metadata-0"), LogConfig(), now_ms=0)
    topic_id = uuid.UUID("7c4c39a6-6d0a-4b4e-9c43-2b6f4cc4a1a2")
    MetadataLog(meta, METADATA_RECORD_SERDE).append(
        [
            ("FeatureLevelRecord", {"name": "metadata.version", "feature_level": 21}),
            ("TopicRecord", {"name": "tööpic", "topic_id": topic_id}),
            (
                "PartitionRecord",
                {
                    "partition_id": 0,
                    "topic_id": topic_id,
                    "replicas": [1, 2],
                    "isr": [1],
                    "removing_replicas": [],
                    "adding_replicas": [2],
                    "leader": 1,
                    "leader_epoch": 4,
                    "partition_epoch": 7,
                    "directories": [uuid.UUID(int=0), uuid.UUID(int=1)],
                },
            ),
            (
                "ConfigRecord",
                {
                    "resource_type": 2,
                    "resource_name": "tööpic",
                    "name": "cleanup.policy",
                    "value": None,
                },
            ),
            ("ProducerIdsRecord", {"broker_id": 1, "broker_epoch": 9, "next_producer_id": 1000}),
        ],
        epoch=2,
        now_ms=50_000,
    )
    meta.close()
    return root


def test_dump_log_of_partition_segments_matches_kafka(kafka: KafkaTools, written: Path) -> None:
    files = _segment_files(written / "t-0")
    assert len([f for f in files if f.suffix == ".log"]) > 2
    assert_same_dump(kafka, files)
    assert_same_dump(kafka, files, "--deep-iteration")
    out = assert_same_dump(kafka, files, "--print-data-log")
    assert "endTxnMarker: COMMIT coordinatorEpoch: 5" in out
    assert "LogAppendTime:" in out and "compresscodec: zstd" in out
    assert_same_dump(kafka, files, "--verify-index-only")
    assert_same_dump(kafka, files, "--index-sanity-check")
    assert_same_dump(kafka, files, "--print-data-log", "--skip-record-metadata")
    assert_same_dump(kafka, files[:3], "--max-bytes", "1000", "--deep-iteration")


def test_dump_log_reports_what_kafka_reports_on_damaged_files(
    kafka: KafkaTools, written: Path, tmp_path: Path
) -> None:
    first = sorted((written / "t-0").glob("*.log"))[1]
    seg = tmp_path / first.name
    seg.write_bytes(first.read_bytes() + b"\x00\x00\x00")  # trailing garbage
    index = (written / "t-0" / first.name).with_suffix(".index").read_bytes()
    timeindex = (written / "t-0" / first.name).with_suffix(".timeindex").read_bytes()
    assert len(index) >= 24 and len(timeindex) >= 24
    # the second and third index entries name the wrong offsets (the third one the second's);
    # the second time index entry has a wrong time
    rel, pos = struct.unpack_from(">ii", index, 8)
    _, pos3 = struct.unpack_from(">ii", index, 16)
    seg.with_suffix(".index").write_bytes(
        index[:8]
        + struct.pack(">ii", rel - 1, pos)
        + struct.pack(">ii", rel - 1, pos3)
        + index[24:]
    )
    ts, rel = struct.unpack_from(">qi", timeindex, 12)
    seg.with_suffix(".timeindex").write_bytes(
        timeindex[:12] + struct.pack(">qi", ts + 1, rel) + timeindex[24:]
    )
    files = [seg, seg.with_suffix(".index"), seg.with_suffix(".timeindex")]
    out = assert_same_dump(kafka, files, "--deep-iteration")
    assert "Found 3 invalid bytes at the end of" in out
    theirs = kafka.run(
        "kafka-dump-log", "--verify-index-only", "--files", ",".join(map(str, files))
    )
    assert "Mismatches in :" in theirs.stderr and "Found timestamp mismatch in :" in theirs.stderr
    assert_same_dump(kafka, files, "--verify-index-only")


def _corrupt_copies(written: Path, tmp_path: Path) -> dict[str, list[Path]]:
    """Copies of one segment whose .index or .timeindex is damaged in one way each."""
    # the segment with the most time index entries (the second is changed, the last is not it)
    first = max(sorted((written / "t-0").glob("*.log")), key=lambda f: f.with_suffix(".timeindex").stat().st_size)
    base = int(first.stem)
    index = first.with_suffix(".index").read_bytes()
    timeindex = first.with_suffix(".timeindex").read_bytes()
    assert len(index) >= 24 and len(timeindex) >= 36
    t0 = struct.unpack_from(">q", timeindex, 0)[0]
    ts1, rel1 = struct.unpack_from(">qi", timeindex, 12)
    last_ts, last_rel = struct.unpack_from(">qi", timeindex, len(timeindex) - 12)
    damaged = {
        # the last entry's offset below the base offset
        "index-last-below-base": (index[:-8] + struct.pack(">ii", -5, 0), timeindex),
        # two entries swapped: out of order, which Kafka's sanity check does not look at
        "index-swapped": (index[:8] + index[16:24] + index[8:16] + index[24:], timeindex),
        "timeindex-last-before-first": (index, timeindex[:-12] + struct.pack(">qi", t0 - 100, last_rel)),
        "timeindex-last-below-base": (index, timeindex[:-12] + struct.pack(">qi", last_ts, -3)),
        "timeindex-partial-entry": (index, timeindex + b"\x00"),
        # the second entry: an earlier time than the first, then an offset the log does not have
        "timeindex-out-of-order": (index, timeindex[:12] + struct.pack(">qi", t0 - 1, rel1) + timeindex[24:]),
        "timeindex-offset-not-found": (index, timeindex[:12] + struct.pack(">qi", ts1, rel1 + 1000) + timeindex[24:]),
    }
    assert base >= 0
    out: dict[str, list[Path]] = {}
    for name, (idx, tix) in damaged.items():
        d = tmp_path / name
        d.mkdir()
        seg = d / first.name
        seg.write_bytes(first.read_bytes())
        seg.with_suffix(".index").write_bytes(idx)
        seg.with_suffix(".timeindex").write_bytes(tix)
        out[name] = [seg.with_suffix(".index"), seg.with_suffix(".timeindex")]
    return out


def test_dump_log_index_checks_on_corrupt_indexes_match_kafka(
    kafka: KafkaTools, written: Path, tmp_path: Path
) -> None:
    """Indexes dumped, verified (--verify-index-only) and sanity-checked (--index-sanity-check)
    as Kafka's tool does: the same stdout and exit code; where Kafka's sanity check throws (its
    tool stops there, exit 1), our stderr is the exception's line without the JVM's stack trace."""
    failing = {"index-last-below-base", "timeindex-last-before-first", "timeindex-last-below-base",
               "timeindex-partial-entry"}
    copies = _corrupt_copies(written, tmp_path)
    for name, files in copies.items():
        assert_same_dump(kafka, files)
        assert_same_dump(kafka, files, "--verify-index-only")
        if name not in failing:
            assert_same_dump(kafka, files, "--index-sanity-check")
            continue
        arg = ",".join(map(str, files))
        ours = odradek("dump-log", "--index-sanity-check", "--files", arg, check=False)
        theirs = kafka.run("kafka-dump-log", "--index-sanity-check", "--files", arg, check=False)
        assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout) == (1, ours.stdout), name
        prefix = 'Exception in thread "main" '
        assert theirs.stderr.startswith(prefix + "org.apache.kafka.storage.internals.log.CorruptIndexException: ")
        assert ours.stderr == theirs.stderr.splitlines()[0][len(prefix):] + "\n", name
        assert "Traceback" not in ours.stderr
    # the out-of-order and missing-offset time index entries are reported (on stderr, exit 0) as Kafka's
    # (the comparisons above cover them; this shows they were reported at all)
    ours = odradek("dump-log", "--verify-index-only", "--files",
                   ",".join(map(str, copies["timeindex-out-of-order"])))
    assert "Found out of order timestamp in :" in ours.stderr
    ours = odradek("dump-log", "--verify-index-only", "--files",
                   ",".join(map(str, copies["timeindex-offset-not-found"])))
    assert "The following indexed offsets are not found in :" in ours.stderr


def test_dump_log_of_metadata_log_and_checkpoints_matches_kafka(
    kafka: KafkaTools, written: Path, tmp_path: Path
) -> None:
    meta = written / "__cluster_metadata-0"
    out = assert_same_dump(kafka, _segment_files(meta), "--cluster-metadata-decoder")
    assert '{"type":"PARTITION_RECORD","version":2,"data":{"partitionId":0,' in out
    assert_same_dump(
        kafka, _segment_files(meta), "--cluster-metadata-decoder", "--skip-record-metadata"
    )
    # values that are no metadata records: Kafka's MetadataRecordSerde messages
    good = encode_metadata_record("TopicRecord", {"name": "x", "topic_id": uuid.UUID(int=5)})
    bad = [
        b"",
        b"\x01",
        b"\x01\x02",
        b"\x02\x02\x00",
        b"\x01\x63\x00\x00",
        b"\x01\x02\x07\x00",
        good[:5],
        good + b"\x00",
        b"\x80",
        b"\x01\xff\xff\xff\xff\x7f\x00",
        None,
    ]
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(build_batch([(None, v, [], 1) for v in bad]))
    out = assert_same_dump(kafka, [seg], "--cluster-metadata-decoder")
    assert out.count("Error at") == len(bad)
    # Odradek's bootstrap.checkpoint, and Kafka's KIP-853 bootstrap snapshot
    config = tmp_path / "standalone.properties"
    config.write_text(
        "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.bootstrap.servers=127.0.0.1:19093\n"
        "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093\n"
        f"controller.listener.names=CONTROLLER\nlog.dirs={tmp_path / 'k'}\n"
    )
    proc = subprocess.run(
        [
            str(kafka.home / "bin" / "kafka-run"),
            "--line",
            kafka.line,
            "kafka.tools.StorageTool",
            "format",
            "-t",
            CLUSTER,
            "-c",
            str(config),
            "--standalone",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    odradek(
        "storage", "format", "-t", CLUSTER, "-c", str(config), "--standalone", "--ignore-formatted"
    )  # already formatted by Kafka: left alone
    config.write_text(config.read_text().replace(str(tmp_path / "k"), str(tmp_path / "o")))
    odradek("storage", "format", "-t", CLUSTER, "-c", str(config), "--standalone")
    files = [
        tmp_path / "k" / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint",
        tmp_path / "k" / "bootstrap.checkpoint",
        tmp_path / "o" / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint",
        tmp_path / "o" / "bootstrap.checkpoint",
    ]
    out = assert_same_dump(kafka, files, "--cluster-metadata-decoder")
    assert out.count("KRaftVoters {") == 2 and out.count("KRaft bootstrap snapshot") == 2


def _which_formatted_dir(line: str, tmp_path: Path) -> str:
    """Kafka names the first already-formatted directory in its HashMap's order, which our
    imitation does not reproduce for every path (it depends on the test's temporary directory):
    any of the four directories is accepted there; the rest of the line must match."""
    m = re.fullmatch(r"Log directory (\S+) is already formatted\. (.*)", line)
    if m is None:
        return line
    assert m.group(1) in {str(tmp_path / d) for d in ("d1", "d2", "d3", "meta")}, line
    return f"Log directory <one of them> is already formatted. {m.group(2)}"


def test_format_prints_what_kafka_prints(kafka: KafkaTools, tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text(
        "process.roles=broker,controller\nnode.id=2\ncontroller.quorum.voters=2@127.0.0.1:19093\n"
        "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093\n"
        f"controller.listener.names=CONTROLLER\nlog.dirs={tmp_path / 'd1'},{tmp_path / 'd2'},{tmp_path / 'd3'}\n"
        f"metadata.log.dir={tmp_path / 'meta'}\n"
    )
    args = ["-t", CLUSTER, "-c", str(config), "--release-version", "3.9-IV0"]
    outputs = []
    for tool in ("kafka", "odradek"):
        for d in ("d1", "d2", "d3", "meta"):
            subprocess.run(["rm", "-rf", str(tmp_path / d)], check=True)
        for extra in ([], [], ["--ignore-formatted"]):
            run = (
                kafka.run("kafka-storage", "format", *args, *extra, check=False)
                if tool == "kafka"
                else odradek("storage", "format", *args, *extra, check=False)
            )
            errors = [
                _which_formatted_dir(line, tmp_path)
                for line in run.stderr.splitlines()
                if not line.startswith(("\tat ", "Exception in"))
            ]
            outputs.append((run.returncode, run.stdout, errors))
        info = kafka.run("kafka-storage", "info", "-c", str(config), check=False)
        ours = odradek("storage", "info", "-c", str(config), check=False)
        assert (ours.returncode, ours.stdout) == (info.returncode, info.stdout)
    assert outputs[:3] == outputs[3:]
    assert outputs[0][0] == 0 and outputs[1][0] == 1 and "already formatted" in outputs[1][2][0]
    assert outputs[2] == (0, "All of the log directories are already formatted.\n", [])


def test_kafka_formatted_dir_is_served_by_odradek(kafka: KafkaTools, tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = tmp_path / "server.properties"
    config.write_text(
        "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:19093\n"
        "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093\n"
        f"controller.listener.names=CONTROLLER\nlog.dirs={data}\n"
    )
    proc = subprocess.run(
        [
            str(kafka.home / "bin" / "kafka-run"),
            "--line",
            kafka.line,
            "kafka.tools.StorageTool",
            "format",
            "-t",
            CLUSTER,
            "-c",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    before = read_meta_properties(str(data / "meta.properties"))
    assert odradek("storage", "info", "-c", str(config)).stdout.startswith(
        f"Found log directory:\n  {data}\n"
    )
    server = ServerProcess(data).start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        assert admin.describe_cluster().result(30).cluster_id == CLUSTER
        admin.create_topics([NewTopic("after-format", 1, 1)])["after-format"].result(30)
    finally:
        assert server.terminate() == 0
    assert read_meta_properties(str(data / "meta.properties")) == before


@pytest.fixture(scope="module")
def kafka_on_odradek_format(
    kafka: KafkaTools, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A Kafka broker run on directories ``odradek storage format`` made; yields its log dir."""
    root = tmp_path_factory.mktemp("kafka-on-odradek")
    server = KafkaServer(kafka, root / "kafka", cluster_id=CLUSTER)
    config = root / "odradek-format.properties"
    config.write_text(server.properties())
    odradek("storage", "format", "--cluster-id", CLUSTER, "--config", str(config))
    logs = root / "kafka" / "logs"
    formatted = read_meta_properties(str(logs / "meta.properties"))
    kafka_info = kafka.run("kafka-storage", "info", "-c", str(config)).stdout
    assert kafka_info == odradek("storage", "info", "-c", str(config)).stdout
    with server:
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        assert admin.describe_cluster().result(30).cluster_id == CLUSTER
        admin.create_topics([NewTopic("from-kafka", 1, 1)])["from-kafka"].result(30)
        from confluent_kafka import Producer

        p = Producer(
            {
                "bootstrap.servers": server.bootstrap_servers,
                "compression.type": "lz4",
                "linger.ms": 20,
            }
        )
        for i in range(30):
            p.produce("from-kafka", key=b"k%d" % (i % 4), value=b"v%d" % i, headers=[("h", b"x")])
        assert p.flush(30) == 0
    assert read_meta_properties(str(logs / "meta.properties")) == formatted
    yield logs


def test_odradek_formatted_dir_is_served_by_kafka(kafka_on_odradek_format: Path) -> None:
    assert (kafka_on_odradek_format / "__cluster_metadata-0").is_dir()
    assert (
        read_meta_properties(str(kafka_on_odradek_format / "meta.properties"))["cluster.id"]
        == CLUSTER
    )


def test_dump_log_of_kafkas_own_logs_matches_kafka(
    kafka: KafkaTools, kafka_on_odradek_format: Path
) -> None:
    meta = _segment_files(kafka_on_odradek_format / "__cluster_metadata-0")
    out = assert_same_dump(kafka, meta, "--cluster-metadata-decoder")
    assert "LeaderChange: {" in out and "REGISTER_BROKER_RECORD" in out
    assert_same_dump(
        kafka, [kafka_on_odradek_format / "bootstrap.checkpoint"], "--cluster-metadata-decoder"
    )
    assert_same_dump(
        kafka, _segment_files(kafka_on_odradek_format / "from-kafka-0"), "--print-data-log"
    )


def test_server_refuses_a_log_dir_of_another_cluster(tmp_path: Path) -> None:
    """No Java needed: a real ``odradek server`` process, exit code 2 and Kafka's message."""
    meta_dir, data_dir = tmp_path / "meta", tmp_path / "data"
    ensure_formatted([str(meta_dir)], 1, cluster_id=CLUSTER)
    ensure_formatted([str(data_dir)], 1, cluster_id="Z1w2E3r4T5y6U7i8O9p0aQ")
    server = ServerProcess(data_dir, {"metadata.log.dir": str(meta_dir)})
    with pytest.raises(RuntimeError, match="exited with 2") as e:
        server.start(timeout=60)
    assert (
        f"Invalid cluster.id in: {data_dir / 'meta.properties'}. Expected {CLUSTER}, "
        "but read Z1w2E3r4T5y6U7i8O9p0aQ"
    ) in str(e.value)


@pytest.mark.parametrize("standalone", [False, True])
def test_odradek_formatted_dir_is_served_by_odradek(tmp_path: Path, standalone: bool) -> None:
    """No Java needed: ``odradek storage format``, then ``odradek server`` under that cluster id
    (with ``--standalone``, beside the KIP-853 bootstrap snapshot in ``__cluster_metadata-0``)."""
    data = tmp_path / "data"
    config = tmp_path / "server.properties"
    quorum = (
        "controller.quorum.bootstrap.servers=127.0.0.1:19093"
        if standalone
        else "controller.quorum.voters=1@127.0.0.1:19093"
    )
    config.write_text(
        f"process.roles=broker,controller\nnode.id=1\n{quorum}\n"
        "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093\n"
        f"controller.listener.names=CONTROLLER\nlog.dirs={data}\n"
    )
    odradek(
        "storage",
        "format",
        "-t",
        CLUSTER,
        "-c",
        str(config),
        *(["--standalone"] if standalone else []),
    )
    before = read_meta_properties(str(data / "meta.properties"))
    server = ServerProcess(data).start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        assert admin.describe_cluster().result(30).cluster_id == CLUSTER
        admin.create_topics([NewTopic("after-format", 1, 1)])["after-format"].result(30)
    finally:
        assert server.terminate() == 0
    assert read_meta_properties(str(data / "meta.properties")) == before
    assert odradek("storage", "info", "-c", str(config)).returncode == 0


def test_dump_log_of_txn_index_and_producer_snapshots_matches_kafka(
    kafka: KafkaTools, tmp_path: Path
) -> None:
    """`.txnindex` and `.snapshot` files written by the project's Log read the same in Kafka's
    tool (its formats), a corrupt snapshot included."""
    from odradek.records.control_batch import build_end_txn_marker

    d = tmp_path / "t-0"
    log = Log.load(str(d), LogConfig(segment_bytes=400), now_ms=0)
    for i in range(6):
        pid = 100 + i % 3
        log.append_as_leader(
            bytearray(build_batch([(b"k", b"v" * 90, [], 1000 + i)], producer_id=pid,
                                  producer_epoch=i // 3, base_sequence=0, is_transactional=True)),
            0, 2000 + i,
        )
        if i % 3 != 2:
            log.append_as_leader(
                build_end_txn_marker(pid, i // 3, 7, i % 3 == 1, 3000 + i), 0, 3000 + i,
                origin=AppendOrigin.COORDINATOR,
            )
    log.close()
    names = sorted(p.name for p in d.iterdir())
    txn = [d / n for n in names if n.endswith(".txnindex")]
    snaps = [d / n for n in names if n.endswith(".snapshot")]
    assert txn and len(snaps) > 1
    assert_same_dump(kafka, txn + snaps)
    with open(snaps[-1], "r+b") as f:
        f.seek(12)
        f.write(b"\xff")
    assert_same_dump(kafka, snaps[-1:])
