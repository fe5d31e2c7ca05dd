"""KIP-868 metadata transactions, as the replaying side sees them (the part of Kafka's
``MetadataBatchLoader`` and ``OffsetControlManager`` that handles them).

The records between a BeginTransactionRecord and its EndTransactionRecord are applied together
when the End is committed; those before an AbortTransactionRecord never are (only the markers
are applied). A transaction still open is held back. Sans-I/O: fed committed records in order.
"""

from __future__ import annotations

from odradek.metadata.metadata_record_serde import MetadataRecord
from odradek.raft.metadata_log import TOPIC, UnreadableMetadataRecord

OffsetRecord = tuple[int, MetadataRecord]


class MetadataTransactions:
    def __init__(self) -> None:
        self._pending: list[OffsetRecord] | None = None

    @property
    def open_transaction(self) -> int | None:
        """The offset of the BeginTransactionRecord of a transaction not yet ended."""
        return None if self._pending is None else self._pending[0][0]

    def reset(self) -> None:
        """Forget a held transaction (a snapshot replaces all state)."""
        self._pending = None

    def feed(self, offset: int, record: MetadataRecord) -> list[OffsetRecord]:
        """The records to apply now that ``record`` is committed at ``offset``."""
        name = record[0]
        if name == "BeginTransactionRecord":
            if self._pending is not None:
                raise UnreadableMetadataRecord(TOPIC, offset, "a transaction begins inside another one")
            self._pending = [(offset, record)]
            return []
        if self._pending is None:
            return [(offset, record)]
        if name == "EndTransactionRecord":
            out = [*self._pending, (offset, record)]
            self._pending = None
            return out
        if name == "AbortTransactionRecord":
            self._pending = None
            return [(offset, record)]
        self._pending.append((offset, record))
        return []
