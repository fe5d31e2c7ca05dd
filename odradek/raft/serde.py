"""RecordSerde: how Raft turns its record type into the value bytes of a log record and back
(Kafka's ``org.apache.kafka.server.common.serialization.RecordSerde``)."""

from __future__ import annotations

from typing import Protocol, TypeVar

T = TypeVar("T")


class RecordSerdeError(ValueError):
    """Bytes the serde cannot turn into a record (malformed, or a type it does not know)."""


class RecordSerde(Protocol[T]):
    def write(self, record: T) -> bytes:
        """The value bytes of ``record``."""
        ...

    def read(self, data: bytes | memoryview) -> T:
        """The record in ``data``; raises :class:`RecordSerdeError` when it cannot."""
        ...
