"""`partition.metadata` (Kafka's PartitionMetadataFile): the topic id of a partition directory,
as ``version: 0`` / ``topic_id: <url-safe base64 without padding>``."""

from __future__ import annotations

import base64
import os

from odradek.log.checkpoint import atomic_write

PARTITION_METADATA_FILENAME = "partition.metadata"


def topic_id_to_string(topic_id: bytes) -> str:
    return base64.urlsafe_b64encode(topic_id).rstrip(b"=").decode("ascii")


def topic_id_from_string(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def write_partition_metadata(directory: str, topic_id: bytes) -> None:
    """Write the file atomically (raises OSError, e.g. on a full disk)."""
    text = f"version: 0\ntopic_id: {topic_id_to_string(topic_id)}\n"
    atomic_write(os.path.join(directory, PARTITION_METADATA_FILENAME), text.encode("ascii"))


def read_partition_metadata(directory: str) -> bytes | None:
    """The topic id stored in ``directory``; None if there is no (readable) one."""
    try:
        with open(os.path.join(directory, PARTITION_METADATA_FILENAME), encoding="ascii") as f:
            text = f.read()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id" and value.strip():
            try:
                return topic_id_from_string(value.strip())
            except ValueError:
                return None
    return None
