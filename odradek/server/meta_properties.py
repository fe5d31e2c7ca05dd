"""meta.properties in every log directory (Kafka's KRaft v1 format).

```
#
#Thu Jan 01 00:00:00 UTC 2025
cluster.id=<22-char base64url UUID>
directory.id=<22-char base64url UUID, one per directory>
node.id=1
version=1
```

A fresh directory is formatted on first start with a new cluster id (or the one already used by
the node's other directories); later starts read it back and refuse a node.id or cluster.id
mismatch.
"""

from __future__ import annotations

import base64
import logging
import os
import time
import uuid

from odradek.server.kafka_config import ConfigError, parse_properties

META_PROPERTIES = "meta.properties"

log = logging.getLogger(__name__)


def random_uuid_base64() -> str:
    """A random UUID as Kafka prints it: URL-safe base64 without padding (22 characters).

    Like Kafka's ``Uuid.randomUuid()``, avoids ids starting with '-' (awkward on command lines)
    and the reserved all-zero / metadata-topic ids.
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-") and text not in ("AAAAAAAAAAAAAAAAAAAAAA",
                                                      "AAAAAAAAAAAAAAAAAAAAAQ"):
            return text


def read_meta_properties(path: str) -> dict[str, str]:
    with open(path, encoding="latin-1") as f:
        return parse_properties(f.read())


def write_meta_properties(log_dir: str, props: dict[str, str]) -> None:
    """Write ``meta.properties`` atomically: temp file, fsync, rename, fsync the directory."""
    path = os.path.join(log_dir, META_PROPERTIES)
    tmp = path + ".tmp"
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    lines = ["#", f"#{stamp}"] + [f"{k}={props[k]}" for k in sorted(props)]
    data = ("\n".join(lines) + "\n").encode("latin-1")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(log_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def ensure_formatted(
    log_dirs: list[str],
    node_id: int,
    cluster_id: str | None = None,
    metadata_log_dir: str | None = None,
) -> str:
    """Create missing log dirs, format unformatted ones, check the others; return the cluster id.

    A directory formatted by ``odradek storage format`` or ``kafka-storage.sh format`` keeps
    its cluster id, and every other directory must have the same: the metadata log directory's
    (``metadata_log_dir``, checked first) is the node's cluster id, and a directory of another
    cluster is refused with Kafka's "Invalid cluster.id in: ..." (a ConfigError: the server
    exits 2). ``cluster_id`` forces the id used when nothing is formatted yet; it must match
    existing directories otherwise. Raises ConfigError on a node.id or cluster.id mismatch or
    an unreadable meta.properties.
    """
    dirs: list[str] = []
    seen: set[str] = set()
    for d in ([metadata_log_dir] if metadata_log_dir is not None else []) + list(log_dirs):
        key = os.path.abspath(d)
        if key not in seen:
            seen.add(key)
            dirs.append(d)
    existing: dict[str, dict[str, str]] = {}
    for d in dirs:
        try:
            os.makedirs(d, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"cannot create log directory {d}: {e.strerror}") from e
        path = os.path.join(d, META_PROPERTIES)
        if os.path.exists(path):
            try:
                props = read_meta_properties(path)
            except OSError as e:
                raise ConfigError(f"cannot read {path}: {e.strerror}") from e
            if props.get("version") != "1" or "cluster.id" not in props or "node.id" not in props:
                raise ConfigError(
                    f"{path} is not a KRaft v1 meta.properties "
                    f"(version={props.get('version')}); was the directory formatted for "
                    "ZooKeeper mode?"
                )
            if props["node.id"] != str(node_id):
                raise ConfigError(
                    f"stored node.id {props['node.id']} in {path} doesn't match configured "
                    f"node.id={node_id}; use the right node.id or a different log.dirs"
                )
            existing[d] = props
    if existing:
        first_dir, first = next(iter(existing.items()))
        found = first["cluster.id"]
        for d, props in existing.items():
            if props["cluster.id"] != found:
                raise ConfigError(
                    f"Invalid cluster.id in: {os.path.join(d, META_PROPERTIES)}. Expected {found}, "
                    f"but read {props['cluster.id']}: the log directories belong to different "
                    f"clusters ({found} is the cluster of {first_dir})"
                )
        if cluster_id is not None and cluster_id != found:
            raise ConfigError(
                f"cluster id {cluster_id} doesn't match the stored cluster.id {found}"
            )
        cluster_id = found
    elif cluster_id is None:
        cluster_id = random_uuid_base64()
    for d in dirs:
        if d not in existing:
            directory_id = random_uuid_base64()
            write_meta_properties(
                d,
                {
                    "cluster.id": cluster_id,
                    "directory.id": directory_id,
                    "node.id": str(node_id),
                    "version": "1",
                },
            )
            log.info(
                "Formatted new log directory %s: cluster id %s, node id %d, directory id %s",
                os.path.abspath(d), cluster_id, node_id, directory_id,
            )
    return cluster_id


def directory_ids(log_dirs: list[str]) -> list[uuid.UUID]:
    """The ``directory.id`` of each formatted log directory (Kafka's
    ``LogManager.directoryIdsSet``), in ``log.dirs`` order: what a broker registers (KIP-858).
    A directory without one (formatted before directory ids) is left out."""
    out: list[uuid.UUID] = []
    for d in log_dirs:
        path = os.path.join(d, META_PROPERTIES)
        try:
            text = read_meta_properties(path).get("directory.id")
        except OSError:
            continue
        if not text:
            continue
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (ValueError, TypeError):
            continue
        if len(raw) == 16 and uuid.UUID(bytes=raw) not in out:
            out.append(uuid.UUID(bytes=raw))
    return out
