"""Formatting a node's directories, as Kafka's ``Formatter`` (behind ``kafka-storage.sh format``).

Each log directory and the metadata log directory gets, if it has no ``meta.properties`` yet:

* ``bootstrap.checkpoint``: the bootstrap metadata (a ``FeatureLevelRecord`` for
  ``metadata.version`` and one per other feature above level 0) between a SnapshotHeader and a
  SnapshotFooter control batch, as Kafka's ``BootstrapDirectory.writeBinaryFile`` writes it;
* for the metadata directory of a dynamic quorum (``--standalone``, ``--initial-controllers``),
  ``__cluster_metadata-0/00000000000000000000-0000000000.checkpoint``: the KRaftVersion and Voters
  control records (KIP-853's bootstrap snapshot);
* ``meta.properties`` (version 1, cluster.id, node.id, directory.id), written last.

Directories already formatted are checked (same cluster id, same node id, distinct directory
ids) and otherwise refused unless ``ignore_formatted``. Errors are :class:`FormatterError` with
Kafka's messages.
"""

from __future__ import annotations

import base64
import binascii
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from odradek.java_order import java_hash_map_order
from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE
from odradek.raft import control_records as cr
from odradek.raft.snapshot import snapshot_bytes
from odradek.server.meta_properties import (
    META_PROPERTIES,
    random_uuid_base64,
    read_meta_properties,
    write_meta_properties,
)

BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
CLUSTER_METADATA_DIR = "__cluster_metadata-0"
BOOTSTRAP_SNAPSHOT = "00000000000000000000-0000000000.checkpoint"
RESERVED_DIRECTORY_IDS = (
    "AAAAAAAAAAAAAAAAAAAAAA",
    "AAAAAAAAAAAAAAAAAAAAAQ",
    "AAAAAAAAAAAAAAAAAAAAAg",
)

# Kafka's MetadataVersion names of the feature levels Odradek runs (3.3-IV3 .. 3.9-IV0).
METADATA_VERSIONS: dict[str, int] = {
    "3.3-IV3": 7,
    "3.4-IV0": 8,
    "3.5-IV0": 9,
    "3.5-IV1": 10,
    "3.5-IV2": 11,
    "3.6-IV0": 12,
    "3.6-IV1": 13,
    "3.6-IV2": 14,
    "3.7-IV0": 15,
    "3.7-IV1": 16,
    "3.7-IV2": 17,
    "3.7-IV3": 18,
    "3.7-IV4": 19,
    "3.8-IV0": 20,
    "3.9-IV0": 21,
}
_VERSION_NAMES = {level: name for name, level in METADATA_VERSIONS.items()}
MINIMUM_RELEASE_VERSION = "3.3-IV3"


class FormatterError(Exception):
    """Formatting refused (Kafka's FormatterException / TerseFailure): one line for stderr."""


def metadata_version_name(level: int) -> str:
    return _VERSION_NAMES.get(level, f"level {level}")


def parse_release_version(text: str, latest: int) -> int:
    """``3.9``, ``3.9-IV0`` or ``3.9.1`` → its metadata.version feature level (Kafka's
    ``MetadataVersion.fromVersionString``); refuses what Odradek cannot run."""
    name = text.strip()
    parts = name.split("-", 1)
    release = ".".join(parts[0].split(".")[:2])
    if len(parts) == 2:
        level = METADATA_VERSIONS.get(f"{release}-{parts[1]}")
    else:
        candidates = [lvl for n, lvl in METADATA_VERSIONS.items() if n.split("-")[0] == release]
        level = max(candidates) if candidates else None
    if level is None:
        try:
            major, minor = (int(x) for x in release.split("."))
        except ValueError:
            raise FormatterError(
                f"Unknown release version '{text}'. Supported versions are: "
                f"{MINIMUM_RELEASE_VERSION} to {metadata_version_name(latest)}"
            ) from None
        if (major, minor) < (3, 3):
            raise FormatterError(f"metadata.version {name} is too old to be supported.")
        raise FormatterError(
            f"metadata.version {name} is newer than Odradek runs; supported versions are: "
            f"{MINIMUM_RELEASE_VERSION} to {metadata_version_name(latest)}"
        )
    if level > latest:
        raise FormatterError(f"metadata.version {metadata_version_name(level)} is not yet stable.")
    return level


def is_valid_uuid(text: str) -> bool:
    """A Kafka ``Uuid`` string: URL-safe base64 of exactly 16 bytes (22 characters)."""
    if len(text) != 22:
        return False
    try:
        return len(base64.urlsafe_b64decode(text + "==")) == 16 and text.isascii()
    except (binascii.Error, ValueError):
        return False


@dataclass(frozen=True)
class InitialVoter:
    node_id: int
    host: str
    port: int
    directory_id: str


def parse_initial_controllers(text: str) -> list[InitialVoter]:
    """``id@host:port:directoryId,...`` (Kafka's ``DynamicVoters.parse``)."""
    voters: list[InitialVoter] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        node, at, rest = item.partition("@")
        host_port, sep, directory_id = rest.rpartition(":")
        host, sep2, port = host_port.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        try:
            node_id, port_no = int(node), int(port)
        except ValueError:
            node_id, port_no = -1, -1
        if not (at and sep and sep2 and host) or node_id < 0 or not 0 <= port_no <= 65535:
            raise FormatterError(
                f"Unable to parse dynamic voter: {item} (expected id@host:port:directoryId)"
            )
        if not is_valid_uuid(directory_id):
            raise FormatterError(
                f"Unable to parse dynamic voter: {item}: {directory_id} is not a directory id"
            )
        if any(v.node_id == node_id for v in voters):
            raise FormatterError(f"Node {node_id} was specified more than once.")
        voters.append(InitialVoter(node_id, host, port_no, directory_id))
    if not voters:
        raise FormatterError("No voters given.")
    return voters


def snapshot_file_bytes(
    now_ms: int,
    records: Sequence[tuple[str, dict[str, Any]]] = (),
    control: Sequence[tuple[int, dict[str, Any]]] = (),
    last_contained_log_timestamp: int = 0,
) -> bytes:
    """A file of batches as Kafka's snapshot writers lay it out (the one snapshot writer,
    :func:`odradek.raft.snapshot.snapshot_bytes`): SnapshotHeader (and the ``control`` records)
    in a control batch from offset 0, the metadata ``records``, the SnapshotFooter in a last
    control batch; every batch at partition leader epoch 0."""
    return snapshot_bytes(
        records,
        METADATA_RECORD_SERDE,
        now_ms=now_ms,
        last_contained_log_timestamp=last_contained_log_timestamp,
        control=control,
    )


def _write_atomically(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_bootstrap_features(directory: str) -> dict[str, int]:
    """The levels of the features other than metadata.version in ``<directory>/bootstrap.checkpoint``
    (``--feature`` at format time); {} without one."""
    from odradek.raft.snapshot import SnapshotError, read_snapshot

    path = os.path.join(directory, BOOTSTRAP_CHECKPOINT)
    out: dict[str, int] = {}
    if not os.path.exists(path):
        return out
    try:
        for name, fields in read_snapshot(path, METADATA_RECORD_SERDE):
            if name == "FeatureLevelRecord" and fields.get("name") != "metadata.version":
                out[str(fields["name"])] = int(fields["feature_level"])
    except SnapshotError:
        return {}
    return out


def parse_feature_flags(flags: Sequence[str], supported: dict[str, tuple[int, int]]) -> dict[str, int]:
    """``--feature name=level`` flags (Kafka's ``StorageTool.featureNamesAndLevels`` and
    ``Formatter.calculateEffectiveFeatureLevels`` checks) → {name: level}."""
    out: dict[str, int] = {}
    for flag in flags:
        name, eq, text = flag.partition("=")
        name = name.strip()
        try:
            level = int(text.strip())
        except ValueError:
            level = -1
        if not eq or not name or not -32768 <= level <= 32767:
            raise FormatterError(f"Can't parse feature={flag}. The format is <name>=<level>.")
        if name == "metadata.version":
            raise FormatterError(
                "Use --release-version instead of --feature metadata.version=X to set the "
                "metadata.version."
            )
        if name not in supported:
            known = ", ".join(sorted(n for n in supported if n != "metadata.version"))
            raise FormatterError(f"Unsupported feature: {name}. Supported features are: {known}")
        lowest, highest = supported[name]
        if not lowest <= level <= highest:
            raise FormatterError(f"No feature:{name} with feature level {level}")
        out[name] = level
    return out


def read_bootstrap_scram_records(directory: str) -> list[tuple[str, dict[str, Any]]]:
    """The UserScramCredentialRecords of ``<directory>/bootstrap.checkpoint`` (--add-scram)."""
    from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE
    from odradek.raft.snapshot import SnapshotError, read_snapshot

    path = os.path.join(directory, BOOTSTRAP_CHECKPOINT)
    if not os.path.exists(path):
        return []
    try:
        return [
            (name, dict(fields))
            for name, fields in read_snapshot(path, METADATA_RECORD_SERDE)
            if name == "UserScramCredentialRecord"
        ]
    except SnapshotError:
        return []


def read_bootstrap_metadata_version(directory: str) -> int | None:
    """The metadata.version level in ``<directory>/bootstrap.checkpoint``, if there is one."""
    from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE
    from odradek.raft.snapshot import SnapshotError, read_snapshot

    path = os.path.join(directory, BOOTSTRAP_CHECKPOINT)
    if not os.path.exists(path):
        return None
    try:
        for name, fields in read_snapshot(path, METADATA_RECORD_SERDE):
            if name == "FeatureLevelRecord" and fields.get("name") == "metadata.version":
                return int(fields["feature_level"])
    except SnapshotError:
        return None
    return None


@dataclass
class Formatter:
    node_id: int
    cluster_id: str
    directories: Sequence[str]
    metadata_log_dir: str
    release_version: int
    controller_listener_name: str = "CONTROLLER"
    ignore_formatted: bool = False
    initial_controllers: list[InitialVoter] | None = None
    # Other features finalized at bootstrap (--feature name=level); levels 0 are not written.
    features: dict[str, int] = field(default_factory=dict)
    # UserScramCredentialRecords to bootstrap (--add-scram), written after the features.
    scram_records: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    print_line: Callable[[str], None] = print
    clock_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))

    def run(self) -> None:
        if self.node_id < 0:
            raise FormatterError("You must specify a valid non-negative node ID.")
        # Kafka 3.9 and 4.x take any cluster id string (random-uuid prints the usual kind);
        # only an empty one is refused.
        if not self.cluster_id:
            raise FormatterError("You must specify a non-empty cluster ID.")
        dirs = sorted({os.path.normpath(d) for d in self.directories})
        meta_dir = os.path.normpath(self.metadata_log_dir)
        if not dirs:
            raise FormatterError("You must specify at least one directory to format")
        if meta_dir not in dirs:
            raise FormatterError(
                f"The specified metadata log directory, {meta_dir} was not one of "
                f"the given directories: [{', '.join(dirs)}]"
            )
        formatted, empty, errors = self._load(dirs)
        self._verify(formatted)
        if formatted and not self.ignore_formatted:
            first = java_hash_map_order(list(formatted))[0]  # the one Kafka names
            raise FormatterError(
                f"Log directory {first} is already formatted. Use --ignore-formatted "
                "to ignore this directory and format the others."
            )
        for d in errors:
            self.print_line(f"I/O error trying to read log directory {d}. Ignoring...")
        if errors and not empty and not formatted:
            raise FormatterError("No available log directories to format.")
        if not empty:
            self.print_line("All of the log directories are already formatted.")
            return
        level = self.release_version
        bootstrap: list[tuple[str, dict[str, Any]]] = [
            ("FeatureLevelRecord", {"name": "metadata.version", "feature_level": level})
        ] + [
            ("FeatureLevelRecord", {"name": name, "feature_level": lvl})
            for name, lvl in sorted(self.features.items())
            if lvl > 0 and name not in ("metadata.version", "kraft.version")
        ]
        shown = ", ".join(
            [
                f"ApiMessageAndVersion(FeatureLevelRecord(name='{r['name']}', "
                f"featureLevel={r['feature_level']}) at version 0)"
                for _, r in bootstrap
            ]
            + [
                f"ApiMessageAndVersion(UserScramCredentialRecord(name='{r['name']}', "
                f"mechanism={r['mechanism']}, salt=(redacted), storedKey=(redacted), "
                f"serverKey=(redacted), iterations={r['iterations']}) at version 0)"
                for _, r in self.scram_records
            ]
        )
        bootstrap = bootstrap + list(self.scram_records)
        self.print_line(
            f"Bootstrap metadata: BootstrapMetadata(records=[{shown}], "
            f"metadataVersionLevel={level}, source=format command)"
        )
        used_ids = {p.get("directory.id") for p in formatted.values()}
        now = self.clock_ms()
        for d in java_hash_map_order(empty):  # Kafka's order (a HashMap of directories)
            kind, directory_id = self._directory_type(d, meta_dir, used_ids)
            used_ids.add(directory_id)
            self.print_line(
                f"Formatting {kind} {d} with metadata.version {metadata_version_name(level)}."
            )
            try:
                os.makedirs(d, exist_ok=True)
                _write_atomically(
                    os.path.join(d, BOOTSTRAP_CHECKPOINT),
                    snapshot_file_bytes(now, bootstrap),
                )
                if kind.startswith("dynamic"):
                    self._write_dynamic_quorum_snapshot(d, now)
                write_meta_properties(
                    d,
                    {
                        "cluster.id": self.cluster_id,
                        "directory.id": directory_id,
                        "node.id": str(self.node_id),
                        "version": "1",
                    },
                )
            except OSError as e:
                raise FormatterError(f"Error while writing meta.properties file {d}: {e}") from e

    def _load(self, dirs: list[str]) -> tuple[dict[str, dict[str, str]], list[str], list[str]]:
        formatted: dict[str, dict[str, str]] = {}
        empty: list[str] = []
        errors: list[str] = []
        for d in dirs:
            path = os.path.join(d, META_PROPERTIES)
            if not os.path.exists(path):
                empty.append(d)
                continue
            try:
                formatted[d] = read_meta_properties(path)
            except OSError:
                errors.append(d)
        return formatted, empty, errors

    def _verify(self, formatted: dict[str, dict[str, str]]) -> None:
        """Kafka's ``MetaPropertiesEnsemble.verify`` against this cluster id and node id."""
        seen: dict[str, str] = {}
        for d, props in formatted.items():
            path = os.path.join(d, META_PROPERTIES)
            cluster_id = props.get("cluster.id")
            if cluster_id is None:
                if props.get("version") == "1":
                    raise FormatterError(f"cluster.id was not specified in the v1 file: {path}")
            elif cluster_id != self.cluster_id:
                raise FormatterError(
                    f"Invalid cluster.id in: {path}. Expected {self.cluster_id}, but read {cluster_id}"
                )
            node_id = props.get("node.id", props.get("broker.id"))
            if node_id is None:
                if props.get("version") == "1":
                    raise FormatterError(f"node.id was not specified in {path}")
            elif node_id != str(self.node_id):
                raise FormatterError(
                    f"Stored node id {node_id} doesn't match previous node id {self.node_id} in {path}. "
                    "If you moved your data, make sure your configured node id matches. If you intend "
                    "to create a new node, you should remove all data in your data directories."
                )
            directory_id = props.get("directory.id")
            if directory_id is not None:
                if directory_id in RESERVED_DIRECTORY_IDS:
                    raise FormatterError(
                        f"Invalid resrved directory ID {directory_id} found in {d}"
                    )
                if directory_id in seen:
                    raise FormatterError(
                        f"Duplicate directory ID {directory_id} found. It was the ID of "
                        f"{seen[directory_id]}, but also of {d}"
                    )
                seen[directory_id] = d

    def _directory_type(self, d: str, meta_dir: str, used: set[str | None]) -> tuple[str, str]:
        if d != meta_dir:
            return "data directory", self._new_directory_id(used)
        if self.initial_controllers is None:
            return "metadata directory", self._new_directory_id(used)
        for v in self.initial_controllers:
            if v.node_id == self.node_id:
                return "dynamic metadata voter directory", v.directory_id
        return "dynamic metadata directory", self._new_directory_id(used)

    @staticmethod
    def _new_directory_id(used: set[str | None]) -> str:
        while True:
            candidate = random_uuid_base64()
            if candidate not in used and candidate not in RESERVED_DIRECTORY_IDS:
                return candidate

    def _write_dynamic_quorum_snapshot(self, d: str, now: int) -> None:
        assert self.initial_controllers is not None
        voters = [
            {
                "voter_id": v.node_id,
                "voter_directory_id": uuid.UUID(
                    bytes=base64.urlsafe_b64decode(v.directory_id + "==")
                ),
                "endpoints": [
                    {"name": self.controller_listener_name, "host": v.host, "port": v.port}
                ],
                "k_raft_version_feature": {"min_supported_version": 0, "max_supported_version": 1},
            }
            for v in self.initial_controllers
        ]
        control: list[tuple[int, dict[str, object]]] = [
            (cr.KRAFT_VERSION, {"version": 0, "k_raft_version": 1}),
            (cr.KRAFT_VOTERS, {"version": 0, "voters": voters}),
        ]
        snapshot_dir = os.path.join(d, CLUSTER_METADATA_DIR)
        os.makedirs(snapshot_dir, exist_ok=True)
        _write_atomically(
            os.path.join(snapshot_dir, BOOTSTRAP_SNAPSHOT),
            snapshot_file_bytes(now, control=control, last_contained_log_timestamp=now),
        )
