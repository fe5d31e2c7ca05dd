"""``odradek dump-log`` on logs written by the project's own Log: Kafka's DumpLogSegments lines.

The expected lines are Kafka 4.3.1's output for the same bytes (checked against Kafka itself in
tests/integration/test_storage_tools_vs_kafka.py).
"""

from __future__ import annotations

import io
import struct
import uuid
from pathlib import Path

import pytest

from odradek.cli.dump_log import LogDumper
from odradek.cli.main import main
from odradek.java_order import java_hash_map_order, java_string_hash
from odradek.log import Log, LogConfig
from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE
from odradek.raft import control_records as cr
from odradek.raft.metadata_log import MetadataLog
from odradek.records.builder import build_batch
from odradek.server.formatter import snapshot_file_bytes

SEG = "00000000000000000000"


def dump(files: list[Path], **opts: bool) -> tuple[list[str], list[str], int]:
    out, err = io.StringIO(), io.StringIO()
    code = LogDumper(out, err, **opts).dump([str(f) for f in files])
    return out.getvalue().splitlines(), err.getvalue().splitlines(), code


def partition_log(tmp_path: Path) -> Path:
    log = Log.load(str(tmp_path / "t-0"), LogConfig(index_interval_bytes=1), now_ms=0)
    log.append_as_leader(
        bytearray(
            build_batch(
                [(b"k1", b"v1", [("h1", b"x"), ("h2", None)], 1000), (None, b"v2", [], 1001)]
            )
        ),
        leader_epoch=0,
        now_ms=1,
    )
    log.append_as_leader(
        bytearray(build_batch([(b"k\xff", None, [], 1002)], compression=3)),
        leader_epoch=1,
        now_ms=2,
    )
    log.append_as_leader(
        bytearray(
            build_batch(
                [(b"a", b"b" * 5, [], 900 + i) for i in range(3)],
                producer_id=7,
                producer_epoch=0,
                base_sequence=0,
                compression=4,
            )
        ),
        leader_epoch=1,
        now_ms=3,
    )
    log.append_as_leader(
        bytearray(build_batch([(None, "é€".encode(), [], 2000)], timestamp_type=1)),
        leader_epoch=2,
        now_ms=4,
    )
    log.close()
    return tmp_path / "t-0"


BATCHES = [
    "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
    "partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
    "position: 0 CreateTime: 1001 size: 90 magic: 2 compresscodec: none crc: 3401599474 isvalid: true",
    "baseOffset: 2 lastOffset: 2 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
    "partitionLeaderEpoch: 1 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
    "position: 90 CreateTime: 1002 size: 85 magic: 2 compresscodec: lz4 crc: 4108228121 isvalid: true",
]


def test_shallow_dump_prints_kafkas_batch_lines(tmp_path: Path) -> None:
    d = partition_log(tmp_path)
    out, err, code = dump([d / f"{SEG}.log"])
    assert code == 0 and err == []
    assert out[:4] == [f"Dumping {d / SEG}.log", "Log starting offset: 0", *BATCHES]
    assert len(out) == 6
    assert "baseSequence: 0 lastSequence: 2 producerId: 7 producerEpoch: 0" in out[4]
    assert "compresscodec: zstd" in out[4]
    assert " LogAppendTime: 2000 " in out[5]


def test_print_data_log_prints_records_with_keys_and_payloads(tmp_path: Path) -> None:
    d = partition_log(tmp_path)
    out, _, code = dump([d / f"{SEG}.log"], print_data_log=True)
    assert code == 0
    assert out[2:7] == [
        BATCHES[0],
        "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 2 sequence: -1 headerKeys: [h1,h2] key: k1 payload: v1",
        "| offset: 1 CreateTime: 1001 keySize: -1 valueSize: 2 sequence: -1 headerKeys: [] payload: v2",
        BATCHES[1],
        "| offset: 2 CreateTime: 1002 keySize: 2 valueSize: -1 sequence: -1 headerKeys: [] key: k\ufffd",
    ]
    assert (
        out[8]
        == "| offset: 3 CreateTime: 900 keySize: 1 valueSize: 5 sequence: 0 headerKeys: [] key: a payload: bbbbb"
    )
    assert (
        out[10]
        == "| offset: 5 CreateTime: 902 keySize: 1 valueSize: 5 sequence: 2 headerKeys: [] key: a payload: bbbbb"
    )
    assert (
        out[12]
        == "| offset: 6 LogAppendTime: 2000 keySize: -1 valueSize: 5 sequence: -1 headerKeys: [] payload: é€"
    )
    # --deep-iteration alone: the record lines without key and payload
    deep, _, _ = dump([d / f"{SEG}.log"], deep_iteration=True)
    assert (
        deep[3]
        == "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 2 sequence: -1 headerKeys: [h1,h2]"
    )


def test_indexes_and_their_verification(tmp_path: Path) -> None:
    d = partition_log(tmp_path)
    out, err, code = dump([d / f"{SEG}.index", d / f"{SEG}.timeindex"])
    assert code == 0 and err == []
    assert out == [
        f"Dumping {d / SEG}.index",
        "offset: 2 position: 90",
        "offset: 5 position: 175",
        "offset: 6 position: 270",
        f"Dumping {d / SEG}.timeindex",
        "timestamp: 1002 offset: 2",
        "timestamp: 2000 offset: 6",
    ]
    # An index entry that points at the wrong batch, and a time index entry with the wrong time.
    with open(d / f"{SEG}.index", "r+b") as f:
        f.seek(8)
        f.write(struct.pack(">ii", 3, 90))
    with open(d / f"{SEG}.timeindex", "r+b") as f:
        f.seek(12)
        f.write(struct.pack(">qi", 1500, 2))
    out, err, code = dump([d / f"{SEG}.index", d / f"{SEG}.timeindex"], verify_index_only=True)
    assert out == [f"Dumping {d / SEG}.index", f"Dumping {d / SEG}.timeindex"]
    assert err == [
        f"Mismatches in :{d / SEG}.index",
        "  Index offset: 3, log offset: 2",
        f"Found timestamp mismatch in :{d / SEG}.timeindex",
        "  Index timestamp: 1500, log timestamp: 1002",
    ]


def test_trailing_bytes_gaps_control_records_and_unknown_files(tmp_path: Path) -> None:
    seg = tmp_path / "00000000000000000010.log"
    commit = build_batch(
        [(cr.control_key(cr.COMMIT), struct.pack(">hi", 0, 7), [], 200)],
        base_offset=12,
        producer_id=5,
        producer_epoch=1,
        is_control=True,
        is_transactional=True,
    )
    data = build_batch(
        [(b"a", b"1", [], 100), (b"b", b"2", [], 105)],
        base_offset=10,
        producer_id=5,
        producer_epoch=1,
        base_sequence=0x7FFFFFFF,
        is_transactional=True,
    )
    data += commit + build_batch([(b"c", b"3", [], 300)], base_offset=15) + b"\0" * 7
    seg.write_bytes(data)
    (tmp_path / "notes.txt").write_text("x")
    out, err, code = dump([seg, tmp_path / "notes.txt"], print_data_log=True)
    assert code == 0
    assert "baseSequence: 2147483647 lastSequence: 0 " in out[2]  # sequences wrap at INT32_MAX
    assert (
        out[4]
        == "| offset: 11 CreateTime: 105 keySize: 1 valueSize: 1 sequence: 0 headerKeys: [] key: b payload: 2"
    )
    assert out[6] == (
        "| offset: 12 CreateTime: 200 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 7"
    )
    assert out[-2:] == [
        "Found 7 invalid bytes at the end of 00000000000000000010.log",
        f"Dumping {tmp_path / 'notes.txt'}",
    ]
    assert err == [
        f"Ignoring unknown file {tmp_path / 'notes.txt'}",
        f"Non-consecutive offsets in {seg}",
        "  -1 is followed by 10",  # as Kafka 4.x: a segment not starting at offset 0 counts
        "  12 is followed by 15",
    ]


def test_cluster_metadata_log_and_snapshots_as_json(tmp_path: Path) -> None:
    raw = Log.load(str(tmp_path / "__cluster_metadata-0"), LogConfig(), now_ms=0)
    topic_id = uuid.UUID(int=12345)
    MetadataLog(raw, METADATA_RECORD_SERDE).append(
        [
            ("TopicRecord", {"name": "foo", "topic_id": topic_id}),
            (
                "PartitionRecord",
                {
                    "partition_id": 0,
                    "topic_id": topic_id,
                    "replicas": [1],
                    "isr": [1],
                    "removing_replicas": [],
                    "adding_replicas": [],
                    "leader": 1,
                    "leader_epoch": 0,
                    "partition_epoch": 0,
                    "directories": [uuid.UUID(int=0)],
                },
            ),
        ],
        epoch=1,
        now_ms=5000,
    )
    raw.close()
    out, err, code = dump(
        [tmp_path / "__cluster_metadata-0" / f"{SEG}.log"],
        cluster_metadata=True,
        print_data_log=True,
    )
    assert code == 0 and err == []
    assert out[3] == (
        "| offset: 0 CreateTime: 5000 keySize: -1 valueSize: 24 sequence: -1 headerKeys: [] payload: "
        '{"type":"TOPIC_RECORD","version":0,"data":{"name":"foo","topicId":"AAAAAAAAAAAAAAAAAAAwOQ"}}'
    )
    assert out[4].endswith(
        'payload: {"type":"PARTITION_RECORD","version":2,"data":{"partitionId":0,"topicId":"AAAAAAAAAAAAAAAAAAAwOQ",'
        '"replicas":[1],"isr":[1],"removingReplicas":[],"addingReplicas":[],"leader":1,"leaderEpoch":0,'
        '"partitionEpoch":0,"directories":["AAAAAAAAAAAAAAAAAAAAAA"]}}'
    )
    snap = tmp_path / "00000000000000000042-0000000003.checkpoint"
    snap.write_bytes(
        snapshot_file_bytes(
            77,
            [("FeatureLevelRecord", {"name": "metadata.version", "feature_level": 21})],
            control=[(cr.KRAFT_VERSION, {"version": 0, "k_raft_version": 1})],
            last_contained_log_timestamp=66,
        )
        + b"\x00\x01"
    )
    garbage = tmp_path / "00000000000000000000.log"
    garbage.write_bytes(build_batch([(None, b"\x01\x63\x00\x00", [], 1)]))  # unknown record type 99
    out, err, code = dump([snap, garbage], cluster_metadata=True)
    assert out[:5] == [
        f"Dumping {snap}",
        "Snapshot end offset: 42, epoch: 3",
        "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
        "partitionLeaderEpoch: 0 isTransactional: false isControl: true deleteHorizonMs: OptionalLong.empty "
        f"position: 0 CreateTime: 77 size: {out[2].split('size: ')[1].split()[0]} magic: 2 compresscodec: none "
        f"crc: {out[2].split('crc: ')[1].split()[0]} isvalid: true",
        "| offset: 0 CreateTime: 77 keySize: 4 valueSize: 11 sequence: -1 headerKeys: [] "
        'SnapshotHeader {"version":0,"lastContainedLogTimestamp":66}',
        '| offset: 1 CreateTime: 77 keySize: 4 valueSize: 5 sequence: -1 headerKeys: [] KRaftVersion {"version":0,"kRaftVersion":1}',
    ]
    assert out[6].endswith(
        'payload: {"type":"FEATURE_LEVEL_RECORD","version":0,"data":{"name":"metadata.version","featureLevel":21}}'
    )
    assert out[8].endswith('SnapshotFooter {"version":0}')
    assert out[9] == f"Found 2 invalid bytes at the end of {snap.name}"
    assert out[-1].endswith(
        "payload: Error at 0, skipping. org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id 99"
    )
    assert code == 0


def test_missing_and_corrupt_files_are_reported_and_the_rest_dumped(tmp_path: Path) -> None:
    d = partition_log(tmp_path)
    bad = tmp_path / "00000000000000000005.log"
    bad.write_bytes(
        b"\x00" * 8 + struct.pack(">iib", 3, 0, 2) + b"\x00" * 60
    )  # impossible batch length
    out, err, code = dump([tmp_path / "nope.log", bad, d / f"{SEG}.log"])
    assert code == 1
    assert out[0] == f"Dumping {tmp_path / 'nope.log'}"
    assert out[-6:-4] == [f"Dumping {d / SEG}.log", "Log starting offset: 0"]
    assert err[0].startswith(f"odradek dump-log: {tmp_path / 'nope.log'}: ")
    assert err[1].startswith(f"odradek dump-log: {bad}: invalid batch length 3")


def test_cli_entry_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = partition_log(tmp_path)
    files = f"{d / SEG}.log,{d / SEG}.index"
    assert main(["dump-log", "--files", files, "--deep-iteration"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2] == BATCHES[0] and out[3].startswith("| offset: 0 CreateTime: 1000")
    assert f"Dumping {d / SEG}.index" in out
    assert main(["dump-log", "--cluster-metadata", "--files", f"{d / SEG}.log"]) == 0
    assert "payload: Error at 0, skipping." in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["dump-log"])
    assert e.value.code == 2


def test_reports_follow_kafkas_map_orders(tmp_path: Path) -> None:
    # Java's String.hashCode and HashMap iteration order (Kafka prints its per-file reports so)
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("é€") == (0xE9 * 31 + 0x20AC)
    assert java_hash_map_order(["c", "b", "a"]) == ["a", "b", "c"]  # buckets 3, 2, 1
    assert java_hash_map_order(["q", "a"]) == ["q", "a"]  # 113 and 97: one bucket, insertion order
    d = partition_log(tmp_path)
    # index entries (2, 90) (5, 175) (6, 270) become (2, 0) (2, 175) (6, 0): offset 2 mismatches twice
    with open(d / f"{SEG}.index", "r+b") as f:
        f.write(struct.pack(">ii", 2, 0) + struct.pack(">ii", 2, 175) + struct.pack(">ii", 6, 0))
    _, err, _ = dump([d / f"{SEG}.index"], verify_index_only=True)
    # keyed by index offset (the last mismatch of offset 2 wins), highest offset first
    assert err == [
        f"Mismatches in :{d / SEG}.index",
        "  Index offset: 6, log offset: 1",
        "  Index offset: 2, log offset: 5",
    ]


def test_undecodable_metadata_records_and_skip_record_metadata(tmp_path: Path) -> None:
    from odradek.metadata.records import encode_metadata_record

    good = encode_metadata_record("TopicRecord", {"name": "x", "topic_id": uuid.UUID(int=5)})
    values = [b"", b"\x01", b"\x01\x02", b"\x02\x02\x00", b"\x01\x02\x07\x00", good + b"\x00", good]
    seg = tmp_path / f"{SEG}.log"
    commit = build_batch(
        [(cr.control_key(cr.COMMIT), struct.pack(">hi", 0, 7), [], 2)],
        base_offset=len(values),
        is_control=True,
    )
    seg.write_bytes(
        build_batch([(b"k" if i == 6 else None, v, [], 1) for i, v in enumerate(values)]) + commit
    )
    out, _, _ = dump([seg], cluster_metadata=True, skip_record_metadata=True)
    # Kafka's MetadataRecordSerde messages, in Kafka's skip-record-metadata layout
    assert [line for line in out if not line.startswith("baseOffset")][2:] == [
        "| payload: Error at 0, skipping. Error while reading frame version",
        "| payload: Error at 1, skipping. Error while reading type",
        "| payload: Error at 2, skipping. Error while reading version",
        "| payload: Error at 3, skipping. Could not deserialize metadata record due to unknown frame version 2"
        "(only frame version 1 is supported)",
        "| payload: Error at 4, skipping. Failed to deserialize record with type 2",
        "| payload: Error at 5, skipping. Found 1 byte(s) of garbage after 2",
        '| payload: {"type":"TOPIC_RECORD","version":0,"data":{"name":"x","topicId":"AAAAAAAAAAAAAAAAAAAABQ"}}',
        "",  # the control record: skipped, its line left empty
    ]
    out, _, _ = dump([seg], print_data_log=True, skip_record_metadata=True)
    assert out[-3] == "| key: k payload: " + good.decode("utf-8", "replace")
    assert out[-4] == "| payload: " + (good + b"\x00").decode("utf-8", "replace")
