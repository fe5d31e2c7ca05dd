"""The Raft core's batches as Kafka RecordBatches, the format of ``__cluster_metadata`` on disk
and of a Fetch response's ``records`` on the wire (Kafka's ``RecordsIterator`` / ``BatchBuilder``).

A data batch's records are the state machine's records; each is written as a record whose
value is the serde's bytes. A control batch holds control records: the LeaderChangeMessage the
core writes (a dict) is encoded as Kafka's LEADER_CHANGE record; control records read from a
log or a peer (KRaftVersion, Voters, ... written by Apache Kafka) stay :class:`RawControlRecord`
and are written back byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from odradek.raft import control_records
from odradek.raft.raft_log import LogBatch
from odradek.raft.serde import RecordSerde, RecordSerdeError
from odradek.records.batch import iter_batches
from odradek.records.builder import build_batch
from odradek.records.records import decode_batch

T = TypeVar("T")


@dataclass(frozen=True)
class RawControlRecord:
    """A control record as it was read: its key and value bytes."""

    key: bytes
    value: bytes


class UndecodableBatch(ValueError):
    """Record batches that do not decode (corrupt, a record without a value, a serde error)."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


Values = list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]


class BatchCodec(Generic[T]):
    def __init__(self, serde: RecordSerde[T]) -> None:
        self.serde = serde

    def encode(self, batch: LogBatch) -> bytes:
        """One RecordBatch at the batch's base offset, its epoch as partition leader epoch."""
        ts = batch.append_timestamp
        values: Values = []
        if batch.control:
            for rec in batch.records:
                if isinstance(rec, RawControlRecord):
                    values.append((rec.key, rec.value, [], ts))
                elif isinstance(rec, control_records.ControlRecord):
                    value = control_records.encode_control_value(rec.control_type, rec.data)
                    values.append((control_records.control_key(rec.control_type), value, [], ts))
                else:
                    value = control_records.encode_control_value(control_records.LEADER_CHANGE, rec)
                    values.append((control_records.control_key(control_records.LEADER_CHANGE), value, [], ts))
        else:
            values = [(None, self.serde.write(rec), [], ts) for rec in batch.records]
        return build_batch(
            values,
            base_offset=batch.base_offset,
            partition_leader_epoch=batch.epoch,
            is_control=batch.control,
        )

    def encode_all(self, batches: Sequence[LogBatch]) -> bytes:
        return b"".join(self.encode(b) for b in batches)

    def decode(self, data: bytes | bytearray | memoryview) -> Iterator[LogBatch]:
        """The complete batches in ``data`` (a trailing partial batch is ignored, as Kafka's
        fetch allows). Raises :class:`UndecodableBatch`."""
        view = memoryview(data)
        try:
            headers = list(iter_batches(view))
        except Exception as e:  # CorruptRecordError, UnsupportedMagicError
            raise UndecodableBatch(-1, str(e)) from e
        for header in headers:
            raw = view[header.position : header.position + header.size]
            try:
                decoded = decode_batch(raw)
            except Exception as e:
                raise UndecodableBatch(header.base_offset, f"corrupt record batch: {e}") from e
            records: list[Any] = []
            base = -1
            timestamp = -1
            for rec in decoded:
                if base < 0:
                    base = rec.offset
                elif rec.offset != base + len(records):
                    raise UndecodableBatch(rec.offset, "a gap inside a batch")
                if rec.value is None:
                    raise UndecodableBatch(rec.offset, "a record without a value")
                if header.is_control:
                    records.append(RawControlRecord(bytes(rec.key or b""), bytes(rec.value)))
                else:
                    try:
                        records.append(self.serde.read(rec.value))
                    except RecordSerdeError as e:
                        raise UndecodableBatch(rec.offset, str(e)) from e
                timestamp = max(timestamp, rec.timestamp)
            if records:
                yield LogBatch(
                    base, header.partition_leader_epoch, tuple(records), timestamp, header.is_control
                )
