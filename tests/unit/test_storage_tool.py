"""``odradek storage`` (random-uuid, format, info) as kafka-storage.sh, and the server honouring a
formatted directory's cluster id."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from typing import Any

import pytest

from odradek.cli.main import main
from odradek.java_order import java_hash_map_order
from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE
from odradek.raft import control_records as cr
from odradek.raft.snapshot import read_snapshot
from odradek.records.batch import iter_batches
from odradek.records.records import decode_batch
from odradek.server.formatter import is_valid_uuid, read_bootstrap_metadata_version
from odradek.server.kafka_config import ConfigError
from odradek.server.meta_properties import ensure_formatted, read_meta_properties

CLUSTER = "6TFrG0UuQGu0yEEG-nDsHA"


def write_config(tmp_path: Path, extra: str = "", **dirs: str) -> str:
    path = tmp_path / "server.properties"
    log_dirs = dirs.get("log_dirs", f"{tmp_path / 'a'},{tmp_path / 'b'}")
    text = (
        "process.roles=broker,controller\n"
        "node.id=3\n"
        "controller.quorum.voters=3@127.0.0.1:19093\n"
        "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093\n"
        "controller.listener.names=CONTROLLER\n"
        f"log.dirs={log_dirs}\n"
    ) + extra
    path.write_text(text)
    return str(path)


def meta(d: Path) -> dict[str, str]:
    return read_meta_properties(str(d / "meta.properties"))


def test_random_uuid_prints_kafka_uuids(capsys: pytest.CaptureFixture[str]) -> None:
    seen = set()
    for _ in range(20):
        assert main(["storage", "random-uuid"]) == 0
        text = capsys.readouterr().out.strip()
        assert len(text) == 22 and is_valid_uuid(text) and not text.startswith("-")
        assert len(base64.urlsafe_b64decode(text + "==")) == 16
        seen.add(text)
    assert len(seen) == 20


def test_format_writes_every_log_dir_and_the_metadata_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, f"metadata.log.dir={tmp_path / 'meta'}\n")
    assert main(["storage", "format", "--cluster-id", CLUSTER, "--config", config]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Bootstrap metadata: BootstrapMetadata(records=[")
    kinds = {
        str(tmp_path / "a"): "data",
        str(tmp_path / "b"): "data",
        str(tmp_path / "meta"): "metadata",
    }
    # in Kafka's order: the iteration order of a java.util.HashMap of the directories
    assert out[1:] == [
        f"Formatting {kinds[d]} directory {d} with metadata.version 3.9-IV0."
        for d in java_hash_map_order(sorted(kinds))
    ]
    props = [meta(tmp_path / d) for d in ("a", "b", "meta")]
    for p in props:
        assert p["cluster.id"] == CLUSTER and p["node.id"] == "3" and p["version"] == "1"
        assert is_valid_uuid(p["directory.id"])
    assert len({p["directory.id"] for p in props}) == 3
    # bootstrap.checkpoint: header, metadata.version, footer, readable by the snapshot reader
    for d in ("a", "b", "meta"):
        records = list(read_snapshot(str(tmp_path / d / "bootstrap.checkpoint"), METADATA_RECORD_SERDE))
        assert records == [("FeatureLevelRecord", {"name": "metadata.version", "feature_level": 21})]
        assert read_bootstrap_metadata_version(str(tmp_path / d)) == 21
    # the server takes these directories as they are: same cluster id, nothing rewritten
    before = [(tmp_path / d / "meta.properties").read_bytes() for d in ("a", "b", "meta")]
    assert (
        ensure_formatted(
            [str(tmp_path / "a"), str(tmp_path / "b")], 3, metadata_log_dir=str(tmp_path / "meta")
        )
        == CLUSTER
    )
    assert [(tmp_path / d / "meta.properties").read_bytes() for d in ("a", "b", "meta")] == before


def test_format_refuses_formatted_dirs_unless_ignore_formatted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    assert main(["storage", "format", "-t", CLUSTER, "-c", config]) == 0
    capsys.readouterr()
    first = meta(tmp_path / "a")
    assert main(["storage", "format", "-t", CLUSTER, "-c", config]) == 1
    err = capsys.readouterr().err
    named = java_hash_map_order([str(tmp_path / "a"), str(tmp_path / "b")])[0]
    assert err.strip() == (
        f"Log directory {named} is already formatted. Use --ignore-formatted to ignore "
        "this directory and format the others."
    )
    assert main(["storage", "format", "-t", CLUSTER, "-c", config, "--ignore-formatted"]) == 0
    assert capsys.readouterr().out.strip() == "All of the log directories are already formatted."
    assert meta(tmp_path / "a") == first
    # a new directory is formatted, the others are left alone
    config = write_config(tmp_path, log_dirs=f"{tmp_path / 'a'},{tmp_path / 'b'},{tmp_path / 'c'}")
    assert main(["storage", "format", "-t", CLUSTER, "-c", config, "-g"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        f"Formatting data directory {tmp_path / 'c'} with metadata.version 3.9-IV0."
    ]
    assert meta(tmp_path / "c")["cluster.id"] == CLUSTER
    assert meta(tmp_path / "a") == first


def test_format_refuses_another_cluster_id_and_an_empty_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    assert main(["storage", "format", "-t", CLUSTER, "-c", config]) == 0
    capsys.readouterr()
    other = "7TFrG0UuQGu0yEEG-nDsHA"
    assert main(["storage", "format", "-t", other, "-c", config, "-g"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"Invalid cluster.id in: {tmp_path / 'a' / 'meta.properties'}. Expected {other}, but read {CLUSTER}"
    )
    # As Kafka 3.9 and 4.x: any non-empty string is a cluster id, an empty one is refused.
    x = tmp_path / "x"
    assert main(["storage", "format", "-t", "", "-c", write_config(tmp_path, log_dirs=str(x))]) == 1
    assert "non-empty cluster ID" in capsys.readouterr().err
    assert not (x / "meta.properties").exists()
    assert main(["storage", "format", "-t", "my-cluster", "-c", write_config(tmp_path, log_dirs=str(x))]) == 0
    assert meta(x)["cluster.id"] == "my-cluster"


def test_format_refuses_node_id_mismatch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path)
    assert main(["storage", "format", "-t", CLUSTER, "-c", config]) == 0
    capsys.readouterr()
    other = write_config(tmp_path)
    Path(other).write_text(
        Path(other).read_text().replace("node.id=3", "node.id=4").replace("3@", "4@")
    )
    assert main(["storage", "format", "-t", CLUSTER, "-c", other, "-g"]) == 1
    assert "Stored node id 3 doesn't match previous node id 4" in capsys.readouterr().err


def test_format_validates_the_config_as_the_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # node.id not among the voters of a controller: the server's own KafkaConfig check
    config = write_config(tmp_path)
    Path(config).write_text(Path(config).read_text().replace("3@127", "5@127"))
    assert main(["storage", "format", "-t", CLUSTER, "-c", config]) == 1
    err = capsys.readouterr().err
    assert "invalid configuration" in err and "must be one of the voters" in err
    assert not (tmp_path / "a").exists()
    # ZooKeeper mode
    Path(config).write_text("process.roles=\nzookeeper.connect=localhost:2181\n")
    assert main(["storage", "format", "-t", CLUSTER, "-c", config]) == 1
    assert "ZooKeeper mode" in capsys.readouterr().err
    assert (
        main(["storage", "format", "-t", CLUSTER, "-c", str(tmp_path / "missing.properties")]) == 1
    )
    assert "cannot read configuration file" in capsys.readouterr().err


def test_format_release_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, log_dirs=str(tmp_path / "a"))
    assert main(["storage", "format", "-t", CLUSTER, "-c", config, "--release-version", "3.7"]) == 0
    assert "with metadata.version 3.7-IV4." in capsys.readouterr().out
    assert read_bootstrap_metadata_version(str(tmp_path / "a")) == 19
    config = write_config(tmp_path, "inter.broker.protocol.version=3.6\n", log_dirs=str(tmp_path / "ibp"))
    assert main(["storage", "format", "-t", CLUSTER, "-c", config]) == 0
    assert "with metadata.version 3.6-IV2." in capsys.readouterr().out
    assert read_bootstrap_metadata_version(str(tmp_path / "ibp")) == 14
    for bad, message in (
        ("4.0-IV3", "newer than Odradek runs"),
        ("3.2", "too old"),
        ("x.y", "Unknown release version"),
    ):
        config = write_config(tmp_path, log_dirs=str(tmp_path / bad))
        assert main(["storage", "format", "-t", CLUSTER, "-c", config, "-r", bad]) == 1
        assert message in capsys.readouterr().err
        assert not (tmp_path / bad).exists()


def test_format_standalone_writes_the_kip853_bootstrap_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, log_dirs=str(tmp_path / "a"))
    dynamic = (
        Path(config)
        .read_text()
        .replace(
            "controller.quorum.voters=3@127.0.0.1:19093",
            "controller.quorum.bootstrap.servers=127.0.0.1:19093",
        )
    )
    Path(config).write_text(dynamic)
    # a controller without static voters must say how its quorum starts
    assert main(["storage", "format", "-t", CLUSTER, "-c", config]) == 1
    assert (
        "--standalone, --initial-controllers, or --no-initial-controllers"
        in capsys.readouterr().err
    )
    assert main(["storage", "format", "-t", CLUSTER, "-c", config, "--standalone"]) == 0
    assert (
        f"Formatting dynamic metadata voter directory {tmp_path / 'a'}" in capsys.readouterr().out
    )
    snapshot = (
        tmp_path / "a" / "__cluster_metadata-0" / "00000000000000000000-0000000000.checkpoint"
    )
    data = snapshot.read_bytes()
    controls = []
    for h in iter_batches(data):
        assert h.is_control
        for r in decode_batch(data[h.position : h.position + h.size]):
            kind = cr.parse_control_type(r.key)
            controls.append((kind, cr.decode_control_value(kind, r.value or b"")))
    assert [k for k, _ in controls] == [
        cr.SNAPSHOT_HEADER,
        cr.KRAFT_VERSION,
        cr.KRAFT_VOTERS,
        cr.SNAPSHOT_FOOTER,
    ]
    assert controls[1][1]["k_raft_version"] == 1
    (voter,) = controls[2][1]["voters"]
    directory_id = base64.urlsafe_b64encode(voter["voter_directory_id"].bytes).decode().rstrip("=")
    assert voter["voter_id"] == 3 and directory_id == meta(tmp_path / "a")["directory.id"]
    assert voter["endpoints"] == [{"name": "CONTROLLER", "host": "127.0.0.1", "port": 19093}]
    # --standalone with static voters is refused, as Kafka does
    static = write_config(tmp_path, log_dirs=str(tmp_path / "s"))
    assert main(["storage", "format", "-t", CLUSTER, "-c", static, "--standalone"]) == 1
    assert "You cannot specify controller.quorum.voters" in capsys.readouterr().err


def test_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path)
    assert main(["storage", "info", "-c", config]) == 1
    assert capsys.readouterr().out == (
        f"Found problems:\n  {tmp_path / 'a'} does not exist\n  {tmp_path / 'b'} does not exist\n\n"
    )
    assert main(["storage", "format", "-t", CLUSTER, "-c", config]) == 0
    capsys.readouterr()
    assert main(["storage", "info", "-c", config]) == 0
    directory_id = meta(tmp_path / "a")["directory.id"]
    assert capsys.readouterr().out == (
        f"Found log directories:\n  {tmp_path / 'a'}\n  {tmp_path / 'b'}\n\n"
        f"Found metadata: {{cluster.id={CLUSTER}, directory.id={directory_id}, node.id=3, version=1}}\n\n"
    )
    os.remove(tmp_path / "b" / "meta.properties")
    assert main(["storage", "info", "-c", config]) == 1
    assert f"Found problem:\n  {tmp_path / 'b'} is not formatted.\n" in capsys.readouterr().out


def test_storage_help(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["storage", "--help"], ["storage", "format", "--help"], ["dump-log", "--help"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 0
        assert "usage:" in capsys.readouterr().out


def test_server_refuses_a_log_dir_of_another_cluster(tmp_path: Path) -> None:
    meta_dir, data_dir = str(tmp_path / "meta"), str(tmp_path / "data")
    ensure_formatted([meta_dir], 1, cluster_id=CLUSTER)
    ensure_formatted([data_dir], 1, cluster_id="7TFrG0UuQGu0yEEG-nDsHA")
    with pytest.raises(
        ConfigError,
        match=r"Invalid cluster\.id in: .*data/meta\.properties\. "
        r"Expected 6TFrG0UuQGu0yEEG-nDsHA, but read 7TFrG0UuQGu0yEEG-nDsHA",
    ):
        ensure_formatted([data_dir], 1, metadata_log_dir=meta_dir)


def test_server_formats_a_new_log_dir_with_the_metadata_dirs_cluster_id(tmp_path: Path) -> None:
    meta_dir, data_dir = tmp_path / "meta", tmp_path / "data"
    ensure_formatted([str(meta_dir)], 1, cluster_id=CLUSTER)
    assert ensure_formatted([str(data_dir)], 1, metadata_log_dir=str(meta_dir)) == CLUSTER
    assert meta(data_dir)["cluster.id"] == CLUSTER
    # a separate metadata.log.dir that is not formatted yet is formatted with the others
    other = tmp_path / "other-meta"
    assert ensure_formatted([str(data_dir)], 1, metadata_log_dir=str(other)) == CLUSTER
    assert meta(other)["cluster.id"] == CLUSTER


def test_server_bootstraps_the_formatted_release_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A directory formatted with --release-version starts a new metadata log at that
    metadata.version (bootstrap.checkpoint), as Kafka's controller does; unformatted, at ours."""
    from odradek.controller.feature_control_manager import METADATA_VERSION
    from odradek.embedded import EmbeddedBroker

    def finalized(log_dir: Path) -> int:
        broker = EmbeddedBroker(log_dir=str(log_dir)).start()
        try:
            return int(broker.server.broker.metadata_cache.image.features.levels["metadata.version"])
        finally:
            broker.stop()

    formatted = tmp_path / "formatted"
    config = tmp_path / "formatted.properties"
    config.write_text(f"node.id=1\nlog.dirs={formatted}\n")
    assert main(["storage", "format", "-t", CLUSTER, "-c", str(config), "--release-version", "3.7"]) == 0
    capsys.readouterr()
    assert finalized(formatted) == 19
    assert finalized(formatted) == 19  # a restart keeps it
    assert finalized(tmp_path / "fresh") == METADATA_VERSION


def test_a_newer_formatted_metadata_version_starts_at_odradeks_newest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory Kafka 4.x formatted with its own default release (a metadata.version level
    above Odradek's) is served: the new log starts at Odradek's newest level, with a warning."""
    from odradek.controller.quorum_controller import METADATA_VERSION
    from odradek.server.controller_server import _bootstrap_metadata_version
    from odradek.server.formatter import snapshot_file_bytes

    (tmp_path / "bootstrap.checkpoint").write_bytes(snapshot_file_bytes(
        0, [("FeatureLevelRecord", {"name": "metadata.version", "feature_level": METADATA_VERSION + 6})]
    ))
    assert read_bootstrap_metadata_version(str(tmp_path)) == METADATA_VERSION + 6
    assert _bootstrap_metadata_version(str(tmp_path)) == METADATA_VERSION
    assert "newer than Odradek's" in caplog.text
    assert _bootstrap_metadata_version(str(tmp_path / "none")) == METADATA_VERSION


def test_format_feature_transaction_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--feature transaction.version=2`` (Kafka's flag) goes into bootstrap.checkpoint as a
    FeatureLevelRecord; unknown features and levels are refused with Kafka's messages."""
    from odradek.server.formatter import read_bootstrap_features

    config = write_config(tmp_path, log_dirs=str(tmp_path / "a"))
    assert main(["storage", "format", "-t", CLUSTER, "-c", config, "--feature", "transaction.version=2"]) == 0
    out = capsys.readouterr().out
    assert "FeatureLevelRecord(name='transaction.version', featureLevel=2)" in out
    assert read_bootstrap_features(str(tmp_path / "a")) == {"transaction.version": 2}
    assert read_bootstrap_metadata_version(str(tmp_path / "a")) == 21
    # Level 0 (Kafka's default at 3.9-IV0) is not written.
    config = write_config(tmp_path, log_dirs=str(tmp_path / "zero"))
    assert main(["storage", "format", "-t", CLUSTER, "-c", config, "-f", "transaction.version=0"]) == 0
    capsys.readouterr()
    assert read_bootstrap_features(str(tmp_path / "zero")) == {}
    for bad, message in (
        ("transaction.version=3", "No feature:transaction.version with feature level 3"),
        ("group.versionx=1", "Unsupported feature: group.versionx. Supported features are:"),
        ("transaction.version", "Can't parse feature=transaction.version"),
        ("metadata.version=21", "Use --release-version instead"),
    ):
        d = tmp_path / bad.replace("=", "_")
        config = write_config(tmp_path, log_dirs=str(d))
        assert main(["storage", "format", "-t", CLUSTER, "-c", config, "--feature", bad]) == 1
        assert message in capsys.readouterr().err
        assert not d.exists()


def test_server_bootstraps_the_formatted_transaction_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory formatted with --feature transaction.version=2 finalizes it in the new
    metadata log: ApiVersions reports it, the broker registered with its supported range."""
    from odradek.embedded import EmbeddedBroker

    formatted = tmp_path / "tv2"
    config = tmp_path / "tv2.properties"
    config.write_text(f"node.id=1\nlog.dirs={formatted}\n")
    assert main(["storage", "format", "-t", CLUSTER, "-c", str(config), "-f", "transaction.version=2"]) == 0
    capsys.readouterr()
    for log_dir, level in ((formatted, 2), (tmp_path / "fresh", None)):
        broker = EmbeddedBroker(log_dir=str(log_dir)).start()
        try:
            server = broker.server
            assert server.broker.metadata_cache.features().levels.get("transaction.version") == level
            reg = server.controller.controller.image.cluster.brokers[1]
            assert reg.supported_features["transaction.version"] == (0, 2)
            versions = asyncio.run(_api_versions(broker.port))
            finalized = {f["name"]: f["max_version_level"] for f in versions["finalized_features"]}
            supported = {f["name"]: (f["min_version"], f["max_version"]) for f in versions["supported_features"]}
            assert finalized.get("transaction.version") == level
            assert supported["transaction.version"] == (0, 2)
        finally:
            broker.stop()


async def _api_versions(port: int) -> dict[str, Any]:
    from odradek.network.client import NetworkClient
    from odradek.protocol import messages as m

    client = NetworkClient("127.0.0.1", port, "t")
    try:
        resp: dict[str, Any] = await client.send(
            m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
        )
        return resp
    finally:
        await client.close()


def test_format_add_scram_bootstraps_credentials(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--add-scram (Kafka 3.5+): UserScramCredentialRecords in bootstrap.checkpoint, which the
    first active controller writes to the new log after the features."""
    from odradek.security.scram_credential import ScramMechanism, salted_password, server_key
    from odradek.server.formatter import read_bootstrap_scram_records

    config = write_config(tmp_path)
    assert main(["storage", "format", "-t", CLUSTER, "-c", config,
                 "--add-scram", "SCRAM-SHA-256=[name=alice,password=alice-secret]",
                 "--add-scram", "SCRAM-SHA-512=[name=bob,iterations=8192,password=bob-secret]"]) == 0
    assert "UserScramCredentialRecord(name='alice', mechanism=1" in capsys.readouterr().out
    records = read_bootstrap_scram_records(str(tmp_path / "a"))
    assert [(r["name"], r["mechanism"], r["iterations"]) for _, r in records] == [("alice", 1, 4096), ("bob", 2, 8192)]
    alice = records[0][1]
    mech = ScramMechanism.SCRAM_SHA_256
    assert alice["server_key"] == server_key(mech, salted_password(mech, b"alice-secret", alice["salt"], 4096))
    assert main(["storage", "format", "-t", CLUSTER, "-c", write_config(tmp_path, "", log_dirs=str(tmp_path / "c")),
                 "--add-scram", "SCRAM-SHA-256=[name=alice,password=p,iterations=100]"]) == 1
