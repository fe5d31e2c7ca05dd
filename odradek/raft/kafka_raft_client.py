"""KafkaRaftClient for a quorum of one voter (this node), and the asyncio driver that runs it.

The client is sans-asyncio: :meth:`KafkaRaftClient.prepare_append` writes a batch to the log
(not yet committed), :meth:`~KafkaRaftClient.flush` fsyncs it and moves the high watermark (the
only blocking call besides start-up; the driver runs it in an executor), and
:meth:`~KafkaRaftClient.poll` hands every listener what it has not seen: the snapshot, the
committed batches, the current leader. With one voter the node elects itself at start-up, at an
epoch above every epoch it knows of (the ``quorum-state`` file, the log, the snapshot), and
writes that to ``quorum-state`` as Kafka does. A failed fsync removes the uncommitted batches and
makes the node resign and lead again at the next epoch, so that whoever waits for them learns
they will never commit.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Generic, TypeVar

from odradek.log.errors import KafkaStorageError
from odradek.raft.metadata_log import MetadataLog
from odradek.raft.quorum_state import ElectionState, FileQuorumStateStore, QuorumStateError
from odradek.raft.raft_client import (
    UNKNOWN_LEADER,
    Batch,
    LeaderAndEpoch,
    Listener,
    NotLeaderError,
    RaftClient,
    SnapshotReader,
)

T = TypeVar("T")

log = logging.getLogger(__name__)


@dataclass
class _ListenerContext(Generic[T]):
    listener: Listener[T]
    next_offset: int = 0
    last_leader: LeaderAndEpoch | None = None


class KafkaRaftClient(RaftClient[T]):
    def __init__(
        self,
        node_id: int,
        metadata_log: MetadataLog[T],
        quorum_state: FileQuorumStateStore,
        clock_ms: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self._log = metadata_log
        self._store = quorum_state
        self._clock_ms = clock_ms
        self._lock = threading.Lock()  # leader state and appends vs. a failing flush
        self._leader = UNKNOWN_LEADER
        self._known_epoch = 0  # the highest epoch seen: the next election is above it
        self._snapshot: SnapshotReader[T] | None = None
        self._listeners: list[_ListenerContext[T]] = []
        self._unflushed = False
        self._shutting_down = False
        self.wakeup: Callable[[], None] = lambda: None  # set by the driver

    # -- start-up (blocking: run before serving, or in an executor) ---------------------------

    def initialize(self) -> None:
        """Read the snapshot the log needs and the stored election state; writes nothing."""
        self._snapshot = self._log.latest_snapshot()
        state = self._store.read_election_state()
        epochs = [0, self._log.last_epoch]
        if state is not None:
            epochs.append(state.epoch)
        if self._snapshot is not None:
            epochs.append(self._snapshot.epoch)
        self._known_epoch = max(epochs)

    def elect(self) -> None:
        """Become leader at the next epoch (the only voter votes for itself) and persist it."""
        with self._lock:
            epoch = self._known_epoch + 1
        self._store.write_election_state(
            ElectionState(epoch, leader_id=self.node_id, voters=frozenset({self.node_id}))
        )
        with self._lock:
            self._known_epoch = epoch
            self._leader = LeaderAndEpoch(self.node_id, epoch)
        log.info("Raft: node %d is the leader of epoch %d (a quorum of one voter)", self.node_id, epoch)

    # -- RaftClient -----------------------------------------------------------------------------

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return self._leader

    @property
    def high_watermark(self) -> int:
        return self._log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self._log.end_offset

    def register(self, listener: Listener[T]) -> None:
        """Register ``listener`` and bring it up to the high watermark (and the current leader)
        before returning; errors reading the log (UnreadableMetadataRecord) are raised here."""
        if any(c.listener is listener for c in self._listeners):
            return
        ctx: _ListenerContext[T] = _ListenerContext(listener)
        self._listeners.append(ctx)
        try:
            self._deliver(ctx, self._read_committed(ctx.next_offset))
        except BaseException:
            self._listeners.remove(ctx)
            raise

    def unregister(self, listener: Listener[T]) -> None:
        self._listeners = [c for c in self._listeners if c.listener is not listener]

    def prepare_append(self, epoch: int, records: Sequence[T]) -> int:
        with self._lock:
            if self._shutting_down or not self._leader.is_leader(self.node_id) or epoch != self._leader.epoch:
                raise NotLeaderError(
                    f"node {self.node_id} is not the leader of epoch {epoch} (now {self._leader})"
                )
            _first, last = self._log.append(records, epoch, self._clock_ms())
            self._unflushed = True
        return last

    def schedule_prepared_append(self) -> None:
        self.wakeup()

    def begin_shutdown(self) -> None:
        with self._lock:
            self._shutting_down = True
            self._leader = LeaderAndEpoch(None, self._leader.epoch)
        for ctx in list(self._listeners):
            ctx.listener.begin_shutdown()

    # -- the work the driver does -------------------------------------------------------------

    @property
    def needs_flush(self) -> bool:
        return self._unflushed

    def flush(self) -> None:
        """Fsync the appended batches and commit them. Blocking. On a failed fsync the
        uncommitted batches are removed, and this node resigns and leads again at the next
        epoch: their appenders see the leader change at the next :meth:`poll`."""
        with self._lock:
            target = self._log.end_offset
            self._unflushed = False
        try:
            self._log.flush_and_commit(target)
        except KafkaStorageError as e:
            log.error("Raft: cannot commit the metadata log up to offset %d: %s", target, e)
            with self._lock:
                resigned = self._leader
                self._leader = LeaderAndEpoch(None, resigned.epoch)
            if resigned.is_leader(self.node_id) and not self._shutting_down:
                try:
                    self.elect()
                except QuorumStateError as qe:
                    # One voter: no other node can lead; the epoch stays above all it wrote.
                    log.error("Raft: %s; leading epoch %d without it", qe, resigned.epoch + 1)
                    with self._lock:
                        self._known_epoch = resigned.epoch + 1
                        self._leader = LeaderAndEpoch(self.node_id, self._known_epoch)

    def poll(self) -> None:
        """Hand every listener the batches committed since it last heard, then the current
        leader if that changed. On the event loop."""
        if not self._listeners:
            return
        start = min(c.next_offset for c in self._listeners)
        batches = self._read_committed(start)
        for ctx in list(self._listeners):
            self._deliver(ctx, batches)

    def _read_committed(self, start: int) -> list[Batch[T]]:
        if self._snapshot is not None and start < self._snapshot.end_offset:
            start = self._snapshot.end_offset
        return list(self._log.read_batches(start))

    def _deliver(self, ctx: _ListenerContext[T], batches: list[Batch[T]]) -> None:
        if self._snapshot is not None and ctx.next_offset < self._snapshot.end_offset:
            ctx.listener.handle_load_snapshot(self._snapshot)
            ctx.next_offset = self._snapshot.end_offset
        mine = [_from(b, ctx.next_offset) for b in batches if b.last_offset >= ctx.next_offset]
        if mine:
            ctx.listener.handle_commit(mine)
            ctx.next_offset = mine[-1].last_offset + 1
        leader = self._leader
        if leader != ctx.last_leader:
            ctx.last_leader = leader
            ctx.listener.handle_leader_change(leader)


def _from(batch: Batch[T], offset: int) -> Batch[T]:
    """``batch`` without its records below ``offset``."""
    if batch.base_offset >= offset:
        return batch
    skip = offset - batch.base_offset
    return Batch(offset, batch.epoch, batch.append_timestamp, batch.records[skip:])


class KafkaRaftClientDriver:
    """Runs a KafkaRaftClient on the event loop (Kafka's ``KafkaRaftClientDriver`` thread):
    wakes on every scheduled append, fsyncs in ``executor`` (None: the loop's default one) and
    delivers what committed."""

    def __init__(self, client: KafkaRaftClient[T], executor: Executor | None = None) -> None:
        self.client = client
        self._executor = executor
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()

        def wakeup() -> None:
            loop.call_soon_threadsafe(self._wake.set)

        self.client.wakeup = wakeup
        self._task = loop.create_task(self._run(), name="raft-driver")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            await self._wake.wait()
            self._wake.clear()
            try:
                if self.client.needs_flush:
                    await loop.run_in_executor(self._executor, self.client.flush)
                self.client.poll()
            except Exception:
                log.exception("Raft: committing or delivering metadata failed")

    async def shutdown(self) -> None:
        """Commit and deliver what was appended, then stop and tell the listeners."""
        if self._task is not None:
            self._stopping = True
            self._wake.set()
            await self._task
            self._task = None
        self.client.begin_shutdown()
