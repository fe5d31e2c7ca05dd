"""Control batches that end a transaction: the COMMIT / ABORT markers (Kafka's
EndTransactionMarker and ControlRecordType).

A marker is a control, transactional batch of one record carrying the producer's id and epoch:

* key: version int16 (0) + type int16 (0 ABORT, 1 COMMIT; 2.. are KRaft's control types)
* value: version int16 (0) + coordinator_epoch int32

Parsing follows Kafka: a key shorter than 4 bytes, a negative key or value version, a value
shorter than 6 bytes raise :class:`InvalidRecordError` (INVALID_RECORD); a newer version is read
as version 0. A control type other than ABORT/COMMIT is not an end-of-transaction marker.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from odradek.records.batch import (
    RECORD_BATCH_OVERHEAD,
    RecordBatchHeader,
    parse_header,
)
from odradek.records.builder import build_batch
from odradek.records.errors import CorruptRecordError, InvalidRecordError
from odradek.records.records import iter_batch_records

CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1
CONTROL_KEY_SIZE = 4
END_TXN_MARKER_VALUE_SIZE = 6
# A marker batch is tiny (61-byte header + one ~20-byte record); anything decompressing to more
# than this is not one.
_MARKER_DECOMPRESS_LIMIT = 64 * 1024

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class EndTxnMarker(NamedTuple):
    """A parsed COMMIT/ABORT marker (the batch header gives producer id and epoch)."""

    commit: bool
    coordinator_epoch: int
    timestamp: int  # the marker record's timestamp


def build_end_txn_marker(
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    timestamp_ms: int,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytearray:
    """One control batch holding the COMMIT (``commit``) or ABORT marker of ``producer_id``'s
    transaction, ready for ``Log.append_as_leader(..., origin=AppendOrigin.COORDINATOR)``."""
    key = _KEY.pack(0, CONTROL_TYPE_COMMIT if commit else CONTROL_TYPE_ABORT)
    value = _VALUE.pack(0, coordinator_epoch)
    return bytearray(
        build_batch(
            [(key, value, [], timestamp_ms)],
            base_offset=base_offset,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=-1,
            partition_leader_epoch=partition_leader_epoch,
            is_control=True,
            is_transactional=True,
        )
    )


def control_record_type(key: bytes | None) -> int:
    """The control type of a control record's key (Kafka's ControlRecordType.parseTypeId)."""
    if key is None or len(key) < CONTROL_KEY_SIZE:
        raise InvalidRecordError(
            "Invalid value size found for end control record key. Must have at least "
            f"{CONTROL_KEY_SIZE} bytes, but found only {0 if key is None else len(key)}"
        )
    version, type_id = _KEY.unpack_from(key, 0)
    if version < 0:
        raise InvalidRecordError(
            f"Invalid version found for control record: {version}. May indicate data corruption"
        )
    return int(type_id)


def parse_end_txn_marker(
    batch: bytes | bytearray | memoryview, header: RecordBatchHeader | None = None
) -> EndTxnMarker | None:
    """The marker in a control batch (``batch`` starts at the batch). None for a control batch
    of another type (KRaft's) and for an empty one (a marker the cleaner removed). Raises
    :class:`InvalidRecordError` for a malformed key or value, :class:`CorruptRecordError` for
    an unreadable batch."""
    mv = memoryview(batch)
    h = header if header is not None else parse_header(mv, 0)
    if not h.is_control:
        raise InvalidRecordError("not a control batch")
    if h.size > len(mv) or h.size < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError("control batch is truncated")
    if h.records_count <= 0:
        return None
    try:
        record = next(iter_batch_records(mv[: h.size], _MARKER_DECOMPRESS_LIMIT), None)
    except CorruptRecordError:
        raise
    except Exception as e:  # decompression errors of a hostile batch
        raise CorruptRecordError(f"unreadable control batch: {e}") from e
    if record is None:
        return None
    type_id = control_record_type(record.key)
    if type_id not in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT):
        return None
    value = record.value
    if value is None or len(value) < END_TXN_MARKER_VALUE_SIZE:
        raise InvalidRecordError(
            "Invalid value size found for end transaction marker. Must have at least "
            f"{END_TXN_MARKER_VALUE_SIZE} bytes, but found only {0 if value is None else len(value)}"
        )
    version, coordinator_epoch = _VALUE.unpack_from(value, 0)
    if version < 0:
        raise InvalidRecordError(
            f"Invalid version found for end transaction marker: {version}. "
            "May indicate data corruption"
        )
    return EndTxnMarker(type_id == CONTROL_TYPE_COMMIT, coordinator_epoch, record.timestamp)
