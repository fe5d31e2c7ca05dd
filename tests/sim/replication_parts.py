"""The pieces of the replication simulator (tests/sim/replication_sim.py): the in-memory log
that stands in for :class:`odradek.log.log.Log` under the real :class:`Partition`, the state of
a simulated broker, and the controller as one reliable state machine over the real
``ClusterControlManager`` and a ``MetadataImage`` built with ``MetadataDelta``."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.cluster.partition import Partition
from odradek.controller.cluster_control_manager import ClusterControlManager
from odradek.controller.feature_control_manager import FeatureControlManager
from odradek.log.errors import OffsetOutOfRangeError
from odradek.log.leader_epoch import LeaderEpochFileCache
from odradek.log.log_config import LogConfig
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import EMPTY_IMAGE, MetadataImage

CLUSTER_ID = "sim-replication-000000"
SESSION_TIMEOUT_MS = 1500  # broker.session.timeout.ms, short so that fencing happens often
MIN_ISR = 2

Entry = tuple[int, str]  # (leader epoch, value) at an offset


class Violation(AssertionError):
    """An invariant does not hold."""


@dataclass
class Faults:
    drop: float = 0.05
    max_delay_ms: int = 40
    crash_every_ms: int = 1500
    partition_every_ms: int = 1500
    pause_every_ms: int = 2500
    power_every_ms: int = 3000
    shutdown_every_ms: int = 4000
    fault_phase_ms: int = 8000


@dataclass
class AppendResult:
    first_offset: int
    last_offset: int
    valid_bytes: int = 1


@dataclass
class FetchData:
    regions: list[tuple[int, int, str]]  # (offset, epoch, value)


class SimLog:
    """What :class:`Partition` uses of :class:`odradek.log.log.Log`, in memory: records are
    (epoch, value) by offset; ``flushed`` is the prefix on disk (what a power failure keeps)."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.leader_epoch_cache = LeaderEpochFileCache(None)
        self.config = LogConfig(min_insync_replicas=MIN_ISR)
        self.log_start_offset = 0
        self._hw = 0
        self.flushed = 0
        self.hw_checkpoint = 0
        self.on_truncate: Callable[[int], None] = lambda offset: None

    @property
    def log_end_offset(self) -> int:
        return len(self.entries)

    @property
    def high_watermark(self) -> int:
        return self._hw

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        self._hw = min(max(value, 0), self.log_end_offset)

    @property
    def last_stable_offset(self) -> int:
        return self._hw  # no transactions here (tests/sim/test_transaction_sim.py has them)

    @property
    def latest_epoch(self) -> int:
        return self.leader_epoch_cache.latest_epoch

    def _append(self, epoch: int, value: str) -> None:
        if epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(epoch, len(self.entries))
        self.entries.append((epoch, value))

    def append_as_leader(self, buf: Any, leader_epoch: int, now_ms: int, origin: Any = None) -> AppendResult:
        first = len(self.entries)
        for value in buf:
            self._append(leader_epoch, value)
        return AppendResult(first, len(self.entries) - 1)

    def append_as_follower(self, records: Any, now_ms: int) -> AppendResult:
        first = len(self.entries)
        for offset, epoch, value in records:
            if offset != len(self.entries):
                raise Violation(f"follower append at {offset}, log end {len(self.entries)}")
            self._append(epoch, value)
        return AppendResult(first, len(self.entries) - 1)

    def read(self, fetch_offset: int, max_bytes: int, max_offset: int, min_one_message: bool) -> FetchData:
        if fetch_offset < 0 or fetch_offset > self.log_end_offset:
            raise OffsetOutOfRangeError(f"offset {fetch_offset} not in [0, {self.log_end_offset}]")
        end = min(max_offset, fetch_offset + max_bytes)
        return FetchData([(o, *self.entries[o]) for o in range(fetch_offset, end)])

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.leader_epoch_cache.end_offset_for_epoch(epoch, self.log_end_offset)

    def truncate_to(self, offset: int) -> bool:
        if offset >= self.log_end_offset:
            # As Log.truncate_to: an epoch this replica led without appending goes.
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return False
        self.on_truncate(offset)
        del self.entries[offset:]
        self.leader_epoch_cache.truncate_from_end(offset)
        self._hw = min(self._hw, offset)
        self.flushed = min(self.flushed, offset)
        return True

    def maybe_increment_log_start_offset(self, offset: int, now_ms: int) -> bool:
        return False

    def flush(self) -> None:
        self.flushed = len(self.entries)
        self.hw_checkpoint = self._hw

    def power_failure(self, rng: random.Random) -> None:
        """Lose what was not flushed (a random part of it reached the disk anyway)."""
        keep = rng.randrange(self.flushed, len(self.entries) + 1)
        del self.entries[keep:]
        self.leader_epoch_cache.truncate_from_end(keep)
        self.hw_checkpoint = min(self.hw_checkpoint, keep)
        self.flushed = keep

    def restart(self) -> None:
        """The process starts again: the HW from its checkpoint."""
        self._hw = min(self.hw_checkpoint, self.log_end_offset)


@dataclass
class FollowerFetch:
    leader: int
    leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    sent_ms: int = -1  # global time of the request in flight; -1: none
    request_id: int = 0
    not_before: int = 0


@dataclass
class PendingProduce:
    value: str
    offset: int
    epoch: int
    deadline: int


@dataclass
class Broker:
    broker_id: int
    rate: float
    clock_offset: int
    log: SimLog = field(default_factory=SimLog)
    up: bool = False
    incarnation: int = 0
    incarnation_id: uuid.UUID = uuid.UUID(int=0)
    paused_until: int = 0
    broker_epoch: int = -1
    shutting_down: bool = False
    registering_since: int = -1
    image: MetadataImage = EMPTY_IMAGE
    metadata_offset: int = 0  # records applied
    metadata_sent: int = -1
    partition: Partition | None = None
    applied_reg: Any = None
    fetch: FollowerFetch | None = None
    purgatory: list[PendingProduce] = field(default_factory=list)
    alter_sent: dict[tuple[int, ...], int] = field(default_factory=dict)  # proposal -> sent at
    next_flush: int = 0
    verified: int = 0  # the prefix of this log known equal to the committed prefix

    def local_ms(self, now: int) -> int:
        return self.clock_offset + int(now * self.rate)


@dataclass
class Result:
    seed: int
    unclean: bool
    steps: int = 0
    acked: int = 0
    lost_acked: int = 0
    lost_consumed: int = 0
    leader_epochs: int = 0
    truncations: int = 0
    trace: list[str] = field(default_factory=list)


class Controller:
    """The active controller as one reliable state machine: the record log and its image."""

    def __init__(self, seed: int) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []
        self.image = EMPTY_IMAGE
        self.features = FeatureControlManager(self.image)
        self.cluster = ClusterControlManager(
            CLUSTER_ID, self.image, self.features, session_timeout_ms=SESSION_TIMEOUT_MS
        )
        self.cluster.activate(0)
        self.topic_id = uuid.UUID(int=random.Random(seed).getrandbits(120) + 1)

    def write(self, records: list[tuple[str, dict[str, Any]]]) -> None:
        if not records:
            return
        delta = MetadataDelta(self.image)
        for name, r in records:
            offset = len(self.records)
            delta.replay(name, r, offset)
            self.cluster.replay(name, r, offset)
            self.records.append((name, r))
        self.image = delta.apply()
        self.features.image = self.cluster.image = self.image

    def partition(self) -> Any:
        return self.image.topics.by_id[self.topic_id].partitions[0]
