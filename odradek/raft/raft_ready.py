"""What the Raft core hands its driver (:class:`Ready`), and the error a proposal on a node that
does not lead gets (:class:`NotLeader`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from odradek.raft.epoch_state import Election
from odradek.raft.raft_log import LogBatch, OffsetAndEpoch
from odradek.raft.raft_messages import RaftMessage


class NotLeader(Exception):
    """A proposal at an epoch this node does not lead (the driver raises the RaftClient's
    ``NotLeaderError``)."""


@dataclass(frozen=True)
class LeaderChange:
    leader_id: int | None
    epoch: int


@dataclass(frozen=True)
class Append:
    batch: LogBatch


@dataclass(frozen=True)
class Truncate:
    """Remove every record at and after ``offset``."""

    offset: int


@dataclass(frozen=True)
class SnapshotChunk:
    """FetchSnapshot: write ``data`` at ``position`` of the snapshot being fetched from the
    leader (position 0 starts a new ``.checkpoint.part`` file)."""

    snapshot_id: OffsetAndEpoch
    position: int
    data: bytes


@dataclass(frozen=True)
class SnapshotInstall:
    """The snapshot is whole (``size`` bytes fetched, or already held): freeze it as
    ``<offset>-<epoch>.checkpoint``, empty the log to start at its end offset (Kafka's
    ``truncateToLatestSnapshot``) and hand it to the listeners (``handle_load_snapshot``)."""

    snapshot_id: OffsetAndEpoch
    size: int


@dataclass(frozen=True)
class SnapshotAbort:
    """The fetch of this snapshot was given up: delete its ``.checkpoint.part`` file."""

    snapshot_id: OffsetAndEpoch


LogOp = Append | Truncate | SnapshotChunk | SnapshotInstall | SnapshotAbort


@dataclass
class Ready:
    election: Election | None = None
    log_ops: list[LogOp] = field(default_factory=list)
    messages: list[RaftMessage] = field(default_factory=list)
    committed: list[LogBatch] = field(default_factory=list)
    leader_changes: list[LeaderChange] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not (
            self.election or self.log_ops or self.messages or self.committed or self.leader_changes
        )
