"""What the KRaft control records in the log say (Kafka's ``KRaftControlRecordStateMachine``):
the ``kraft.version`` (KRaftVersionRecord) and the voter set (VotersRecord) at each offset.

The voter set in effect is the one of the last VotersRecord in the log, committed or not (KIP-853:
a voter change takes effect as soon as it is appended); a truncation drops what it cut, so a
replica whose uncommitted VotersRecord is truncated goes back to the set before it. Before any
VotersRecord, the set comes from the snapshot (or the ``bootstrap.checkpoint`` that
``storage format --standalone/--initial-controllers`` writes), else from the static
``controller.quorum.voters`` (kraft.version 0). Sans-I/O: batches in, sets out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from odradek.raft import control_records as cr
from odradek.raft.raft_log import LogBatch
from odradek.raft.voter_set import VoterSet

log = logging.getLogger(__name__)

SNAPSHOT_OFFSET = -1  # the history entry of the snapshot / bootstrap checkpoint


def control_record(record: Any) -> tuple[int, dict[str, Any]] | None:
    """(type, fields) of a KRaftVersion or Voters control record, whichever form it has (the
    core's :class:`~odradek.raft.control_records.ControlRecord`, or the raw bytes read from a
    log or a peer); None for any other record."""
    if isinstance(record, cr.ControlRecord):
        if record.control_type in (cr.KRAFT_VERSION, cr.KRAFT_VOTERS):
            return record.control_type, record.data
        return None
    key = getattr(record, "key", None)
    value = getattr(record, "value", None)
    if not isinstance(key, (bytes, bytearray)) or not isinstance(value, (bytes, bytearray)):
        return None
    kind = cr.parse_control_type(key)
    if kind not in (cr.KRAFT_VERSION, cr.KRAFT_VOTERS):
        return None
    return kind, cr.decode_control_value(kind, value)


class KRaftControlRecordStateMachine:
    def __init__(
        self,
        static_voters: VoterSet | None,
        snapshot_kraft_version: int = 0,
        snapshot_voters: VoterSet | None = None,
    ) -> None:
        """``static_voters``: ``controller.quorum.voters`` (None when only bootstrap servers are
        configured); ``snapshot_*``: what the latest snapshot or the bootstrap checkpoint says."""
        self.static_voters = static_voters
        self._voters: list[tuple[int, VoterSet]] = []
        self._versions: list[tuple[int, int]] = []
        self.reset_to_snapshot(snapshot_kraft_version, snapshot_voters)

    def reset_to_snapshot(self, kraft_version: int, voters: VoterSet | None) -> None:
        """A snapshot replaced the log (start-up, or one fetched from the leader)."""
        self._versions = [(SNAPSHOT_OFFSET, kraft_version)]
        self._voters = [(SNAPSHOT_OFFSET, voters)] if voters is not None else []

    # -- queries --------------------------------------------------------------------------------

    def last_voter_set(self) -> VoterSet:
        if self._voters:
            return self._voters[-1][1]
        return self.static_voters if self.static_voters is not None else VoterSet()

    def last_voter_set_offset(self) -> int | None:
        """The offset of the VotersRecord in effect; ``SNAPSHOT_OFFSET`` when it comes from the
        snapshot; None when none (the static voters)."""
        return self._voters[-1][0] if self._voters else None

    def voter_history(self) -> Sequence[tuple[int, VoterSet]]:
        """(offset, voter set) of each VotersRecord still in the log, the snapshot's first
        (read only)."""
        return self._voters

    def voter_set_at(self, offset: int) -> VoterSet:
        """The voter set in effect at ``offset`` (a snapshot ending there includes it)."""
        found: VoterSet | None = None
        for at, voters in self._voters:
            if at < offset:
                found = voters
        if found is not None:
            return found
        return self.static_voters if self.static_voters is not None else VoterSet()

    def last_kraft_version(self) -> int:
        return self._versions[-1][1]

    def kraft_version_at(self, offset: int) -> int:
        found = 0
        for at, version in self._versions:
            if at < offset:
                found = version
        return found

    # -- the log --------------------------------------------------------------------------------

    def update(self, batches: Iterable[LogBatch]) -> bool:
        """Read the control records of ``batches`` (appended to the log in order); True when
        the voter set in effect changed."""
        changed = False
        for batch in batches:
            if not batch.control:
                continue
            for i, record in enumerate(batch.records):
                try:
                    found = control_record(record)
                except Exception as e:  # noqa: BLE001 - a peer's bad record is logged, skipped
                    log.warning("Raft: unreadable control record at %d: %s", batch.base_offset + i, e)
                    continue
                if found is None:
                    continue
                kind, fields = found
                offset = batch.base_offset + i
                if kind == cr.KRAFT_VERSION:
                    self._versions.append((offset, int(fields["k_raft_version"])))
                else:
                    try:
                        voters = VoterSet.from_voters_record(fields)
                    except (KeyError, TypeError, ValueError) as e:
                        log.warning("Raft: invalid VotersRecord at %d: %s", offset, e)
                        continue
                    changed = changed or voters.ids != self.last_voter_set().ids
                    self._voters.append((offset, voters))
        return changed

    def truncate_new_entries(self, end_offset: int) -> bool:
        """The log was truncated to ``end_offset``; True when the voter set in effect changed."""
        before = self.last_voter_set().ids
        self._voters = [(o, v) for o, v in self._voters if o < end_offset]
        self._versions = [(o, v) for o, v in self._versions if o < end_offset]
        return self.last_voter_set().ids != before

    def pending_voter_change(self, high_watermark: int | None) -> bool:
        """A VotersRecord not yet committed (Kafka allows one voter change at a time)."""
        offset = self.last_voter_set_offset()
        return offset is not None and offset >= 0 and (high_watermark is None or offset >= high_watermark)
