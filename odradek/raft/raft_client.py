"""The RaftClient interface and its Listener, as Kafka's ``org.apache.kafka.raft.RaftClient``.

A state machine (the active controller, the broker's metadata loader) registers a
:class:`Listener`; Raft calls it with every committed batch in log order, with a snapshot to load
first when the log no longer starts at offset 0, and with every change of leader and epoch. The
leader proposes records with :meth:`RaftClient.prepare_append` at the epoch Raft announced, then
:meth:`RaftClient.schedule_prepared_append`; they reach listeners only once committed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


class NotLeaderError(Exception):
    """An append at an epoch that is not the current leader epoch of this node (Kafka's
    ``NotLeaderException``): the caller must wait for its next leader change."""


@dataclass(frozen=True)
class LeaderAndEpoch:
    """The leader of an epoch (``leader_id`` None: not known yet, or none)."""

    leader_id: int | None
    epoch: int

    def is_leader(self, node_id: int) -> bool:
        return self.leader_id == node_id


UNKNOWN_LEADER = LeaderAndEpoch(None, 0)


@dataclass(frozen=True)
class Batch(Generic[T]):
    """Committed records of one log batch; record ``i`` is at offset ``base_offset + i``."""

    base_offset: int
    epoch: int
    append_timestamp: int
    records: Sequence[T]

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1


@dataclass(frozen=True)
class SnapshotReader(Generic[T]):
    """A snapshot's records: the state of every record below ``end_offset``."""

    end_offset: int
    epoch: int
    records: Sequence[T]

    @property
    def last_contained_log_offset(self) -> int:
        return self.end_offset - 1


class Listener(ABC, Generic[T]):
    """Kafka's ``RaftClient.Listener``."""

    @abstractmethod
    def handle_commit(self, batches: Sequence[Batch[T]]) -> None:
        """Committed batches, in log order, each delivered once."""

    @abstractmethod
    def handle_load_snapshot(self, reader: SnapshotReader[T]) -> None:
        """Replace whatever was loaded so far with the snapshot's state."""

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:  # noqa: B027 - optional
        """A new leader or epoch. When this node is the leader, called only once the listener
        has been given everything committed before."""

    def begin_shutdown(self) -> None:  # noqa: B027 - optional
        """Raft is shutting down: no more commits will come."""


class RaftClient(ABC, Generic[T]):
    @abstractmethod
    def register(self, listener: Listener[T]) -> None:
        """Deliver snapshot, commits and leader changes to ``listener`` from now on."""

    @abstractmethod
    def unregister(self, listener: Listener[T]) -> None: ...

    @property
    @abstractmethod
    def leader_and_epoch(self) -> LeaderAndEpoch: ...

    @property
    @abstractmethod
    def high_watermark(self) -> int:
        """The offset after the last committed record."""

    @property
    @abstractmethod
    def log_end_offset(self) -> int:
        """The offset the next appended record will get."""

    @abstractmethod
    def prepare_append(self, epoch: int, records: Sequence[T]) -> int:
        """Stage ``records`` as one batch (all of them commit or none); returns the offset its
        last record will have. Raises :class:`NotLeaderError` unless this node leads ``epoch``."""

    @abstractmethod
    def schedule_prepared_append(self) -> None:
        """Have the staged batches written and committed."""

    def schedule_append(self, epoch: int, records: Sequence[T]) -> int:
        """:meth:`prepare_append` and :meth:`schedule_prepared_append` in one call."""
        offset = self.prepare_append(epoch, records)
        self.schedule_prepared_append()
        return offset

    @abstractmethod
    def begin_shutdown(self) -> None:
        """Stop leading and tell every listener (its ``begin_shutdown``)."""
