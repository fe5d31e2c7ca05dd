"""MetadataRecordSerde: the record type Raft carries in ``__cluster_metadata`` (Kafka's
``MetadataRecordSerde``). A record is ``(type name, fields)``; its bytes are the framed metadata
record of :mod:`odradek.metadata.records`, written at the newest version Odradek knows."""

from __future__ import annotations

from typing import Any

from odradek.metadata.records import decode_metadata_record, encode_metadata_record
from odradek.protocol.schema import SchemaError
from odradek.raft.serde import RecordSerdeError

MetadataRecord = tuple[str, dict[str, Any]]


class MetadataRecordSerde:
    def write(self, record: MetadataRecord) -> bytes:
        name, fields = record
        return encode_metadata_record(name, fields)

    def read(self, data: bytes | memoryview) -> MetadataRecord:
        try:
            name, _version, fields = decode_metadata_record(data)
        except SchemaError as e:
            raise RecordSerdeError(str(e)) from e
        return name, fields


METADATA_RECORD_SERDE = MetadataRecordSerde()
