"""KafkaRaftClient: the RaftClient over the sans-I/O :class:`~odradek.raft.raft_core.RaftCore`,
and KafkaRaftClientDriver, the asyncio shell that runs it (Kafka's ``KafkaRaftClient`` and
``KafkaRaftClientDriver``).

The client owns the core and does its I/O in three steps for each :class:`Ready` it drains:

1. :meth:`KafkaRaftClient.persist` (blocking, off the event loop): the election state to the
   ``quorum-state`` file (fsync) first, then the truncations and appends to the
   ``__cluster_metadata`` log, then an fsync of the log;
2. :meth:`KafkaRaftClient.complete` (on the loop): tell the core how far the log is durable,
   send the messages (through the :class:`RaftChannel`), answer the requests that came in;
3. hand committed batches to the listeners (control batches, the LeaderChangeMessage the core
   writes on election, are skipped), then the leader change, to a listener only once it has
   everything committed before the new leader's epoch began.

A quorum of one (this node the only voter) elects itself at start-up and commits once its
append is fsynced; :meth:`KafkaRaftClient.step` runs the three steps in one thread for start-up
and tests. A failed fsync stops the node taking part in Raft (Kafka halts the process): what was
not fsynced is never counted as durable, so it is never committed by this node's vote.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from odradek.log.errors import KafkaStorageError
from odradek.protocol.errors import Errors
from odradek.raft.dynamic_quorum import DynamicQuorum, snapshot_control
from odradek.raft.epoch_state import Election, LeaderState, ResignedState
from odradek.raft.metadata_log import MetadataLog, UnreadableMetadataRecord
from odradek.raft.quorum import QuorumConfig
from odradek.raft.quorum_state import ElectionState, FileQuorumStateStore
from odradek.raft.raft_client import (
    Batch,
    LeaderAndEpoch,
    Listener,
    NotLeaderError,
    RaftClient,
    SnapshotReader,
)
from odradek.raft.raft_core import RaftCore
from odradek.raft.raft_log import LogBatch, OffsetAndEpoch
from odradek.raft.raft_messages import RaftMessage
from odradek.raft.raft_ready import (
    Append,
    NotLeader,
    Ready,
    SnapshotAbort,
    SnapshotChunk,
    SnapshotInstall,
    Truncate,
)
from odradek.raft.snapshot import SnapshotDownload, SnapshotError, SnapshotId
from odradek.raft.snapshot_fetch import SnapshotSlice

T = TypeVar("T")

log = logging.getLogger(__name__)

TICK_MS = 50  # how often the driver lets time pass in the core
SHUTDOWN_TIMEOUT_MS = 5000  # graceful resignation (EndQuorumEpoch) before the process stops


class RaftChannel(Protocol):
    """Kafka's ``NetworkChannel``: sends the core's requests to other nodes and hands their
    responses back through the callback given to :meth:`start`."""

    def start(self, on_response: Callable[[RaftMessage], None]) -> None: ...

    def send(self, request: RaftMessage) -> None: ...

    async def close(self) -> None: ...


@dataclass
class _ListenerContext(Generic[T]):
    listener: Listener[T]
    next_offset: int = 0
    last_leader: LeaderAndEpoch = LeaderAndEpoch(None, 0)  # nothing to tell before an election


class KafkaRaftClient(RaftClient[T]):
    def __init__(
        self,
        node_id: int,
        metadata_log: MetadataLog[T],
        quorum_state: FileQuorumStateStore,
        clock_ms: Callable[[], int],
        *,
        voters: frozenset[int] | None = None,
        cluster_id: str = "",
        config: QuorumConfig | None = None,
        rng: random.Random | None = None,
        pre_vote: bool = True,
        dynamic: DynamicQuorum | None = None,
        bootstrap_ids: Sequence[int] = (),
    ) -> None:
        """``voters`` None: this node alone. ``pre_vote``: KIP-996, on the wire as Vote v2
        (every voter must speak it; False: candidates at once, as Kafka 3.9)."""
        self.node_id = node_id
        self.voters = frozenset(voters) if voters is not None else frozenset({node_id})
        self.cluster_id = cluster_id
        self.config = config or QuorumConfig()
        self._rng = rng or random.Random()
        self._pre_vote = pre_vote
        self._dynamic = dynamic  # KIP-853: the voter set from the log (None: static voters)
        self._bootstrap_ids = tuple(bootstrap_ids)
        self._log = metadata_log
        self._store = quorum_state
        self._clock_ms = clock_ms
        self._core: RaftCore | None = None
        self._snapshot: SnapshotReader[T] | None = None
        self._listeners: list[_ListenerContext[T]] = []
        self._leader = LeaderAndEpoch(None, 0)
        self._failed = False
        self.channel: RaftChannel | None = None
        self._inbound: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._download: SnapshotDownload | None = None  # a snapshot fetched from the leader
        self._next_inbound = 0
        self.wakeup: Callable[[], None] = lambda: None  # set by the driver

    # -- start-up (blocking: before serving, or in an executor) -------------------------------

    def initialize(self) -> None:
        """Read the snapshot, the stored election state and the whole log, and start the core
        on them; writes nothing (what the core decides at once is persisted by the first
        :meth:`persist`). Raises UnreadableMetadataRecord, QuorumStateError."""
        self._snapshot = self._log.latest_snapshot()
        stored = self._store.read_election_state()
        election = None
        if stored is not None:
            election = Election(stored.epoch, stored.leader_id, stored.voted_id)
        start = None
        if self._snapshot is not None:
            start = OffsetAndEpoch(self._snapshot.end_offset, self._snapshot.epoch)
        batches = self._log.read_log_batches()
        if start is not None:
            # Segments not wholly below the snapshot stay on disk (only whole segments are
            # deleted): the core's log begins at the snapshot's end offset.
            batches = _from_offset(batches, start.offset)
        self._core = RaftCore(
            self.node_id,
            self.voters,
            self.cluster_id,
            self.config,
            self._rng,
            self._clock_ms(),
            election=election,
            batches=batches,
            pre_vote=self._pre_vote,
            log_start=start,
            dynamic=self._dynamic,
            bootstrap_ids=self._bootstrap_ids,
        )
        self._report_snapshots(self._core)
        self.voters = self._core.voters

    def _report_snapshots(self, core: RaftCore) -> None:
        """Tell the core which snapshots it can serve and where the log starts. Reads the
        directory listing (cheap)."""
        sizes = {_offset_and_epoch(s): size for s, size in self._log.snapshot_sizes().items()}
        start = self._log.log_start_snapshot()
        core.update_snapshots(
            sizes, _offset_and_epoch(start) if start is not None else None, self._clock_ms()
        )

    def refresh_snapshots(self) -> None:
        """On the loop, after a snapshot was written or old ones cleaned (the log start may
        have moved): the core learns of it."""
        if self._core is not None and not self._failed:
            self._report_snapshots(self._core)
            self.wakeup()

    def read_snapshot_slice(self, data: dict[str, Any]) -> dict[str, Any]:
        """A FetchSnapshot response of the core with the bytes of its :class:`SnapshotSlice`
        read from the snapshot file; SNAPSHOT_NOT_FOUND if the file went meanwhile (cleaned).
        Blocking (a read of at most the request's max bytes)."""
        for topic in data.get("topics") or []:
            for p in topic.get("partitions") or []:
                piece = p.get("unaligned_records")
                if not isinstance(piece, SnapshotSlice):
                    continue
                sid = SnapshotId(piece.snapshot_id.offset, piece.snapshot_id.epoch)
                try:
                    got = self._log.snapshot_slice(sid, piece.position, piece.length)
                except (ValueError, OSError) as e:
                    log.warning("Raft: cannot read snapshot %s for FetchSnapshot: %s", sid, e)
                    got = None
                if got is None:
                    p.update(
                        error_code=int(Errors.SNAPSHOT_NOT_FOUND),
                        snapshot_id={"end_offset": -1, "epoch": -1},
                        size=-1,
                        position=-1,
                        unaligned_records=b"",
                    )
                else:
                    p["unaligned_records"] = got[1]
        return data

    @property
    def core(self) -> RaftCore:
        assert self._core is not None, "initialize() first"
        return self._core

    # -- RaftClient -----------------------------------------------------------------------------

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        core = self._core
        if core is None:
            return self._leader
        return LeaderAndEpoch(core.leader_id, core.epoch)

    @property
    def high_watermark(self) -> int:
        core = self._core
        hw = core.high_watermark if core is not None else None
        if hw is not None:
            return hw
        return self._snapshot.end_offset if self._snapshot is not None else 0

    @property
    def log_end_offset(self) -> int:
        return self.core.log_end_offset

    def register(self, listener: Listener[T]) -> None:
        """Register ``listener`` and bring it up to the high watermark (and the leader, once
        caught up) before returning."""
        if any(c.listener is listener for c in self._listeners):
            return
        core = self._core
        known = self._snapshot.end_offset if self._snapshot is not None else 0
        if core is not None and core.log.start.offset > known:
            # The log start moved past the snapshot read at start-up: load the newer one.
            self._snapshot = self._log.latest_snapshot()
        ctx: _ListenerContext[T] = _ListenerContext(listener)
        self._listeners.append(ctx)
        try:
            self._catch_up(ctx)
        except BaseException:
            self._listeners.remove(ctx)
            raise

    def unregister(self, listener: Listener[T]) -> None:
        self._listeners = [c for c in self._listeners if c.listener is not listener]

    @property
    def known_high_watermark(self) -> int | None:
        """The high watermark this node has learnt (as leader, or from the leader's Fetch
        answers); None until then: an observer or follower that has just started does not know
        how much of its local log is committed."""
        core = self._core
        return core.high_watermark if core is not None else None

    def listener_offset(self, listener: Listener[T]) -> int:
        """The offset below which ``listener`` has been handed every committed record (-1: not
        registered)."""
        ctx = next((c for c in self._listeners if c.listener is listener), None)
        return -1 if ctx is None else ctx.next_offset

    def prepare_append(self, epoch: int, records: Sequence[T]) -> int:
        if self._failed:
            raise NotLeaderError(f"node {self.node_id} stopped taking part in Raft")
        try:
            return self.core.propose(epoch, list(records), self._clock_ms())
        except NotLeader as e:
            raise NotLeaderError(str(e)) from e

    def schedule_prepared_append(self) -> None:
        self.wakeup()

    def begin_shutdown(self) -> None:
        """Resign (if leading) and tell every listener; the driver sends what follows."""
        if self._core is not None:
            self._core.begin_shutdown(self._clock_ms(), SHUTDOWN_TIMEOUT_MS)
        for ctx in list(self._listeners):
            ctx.listener.begin_shutdown()
        self.wakeup()

    # -- requests from other nodes (the RaftApis handler) ---------------------------------------

    def handle_request(
        self, source: int, api_key: int, data: dict[str, Any]
    ) -> asyncio.Future[dict[str, Any]]:
        """Feed a request to the core; the future gets the core's response (Fetch records as
        LogBatch objects: the handler encodes them)."""
        self._next_inbound += 1
        correlation = self._next_inbound
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        if self._failed:
            future.cancel()  # nobody would answer: the handler closes the connection
            return future
        self._inbound[correlation] = future
        message = RaftMessage(source, self.node_id, api_key, correlation, data)
        self.core.handle(message, self._clock_ms())
        self.wakeup()
        return future

    def handle_response(self, response: RaftMessage) -> None:
        if self._core is not None and not self._failed:
            self._core.handle(response, self._clock_ms())
            self.wakeup()

    def tick(self) -> None:
        if self._core is not None and not self._failed:
            self._core.tick(self._clock_ms())

    # -- the three steps of a Ready ---------------------------------------------------------

    def take_ready(self) -> Ready:
        return self.core.ready()

    @staticmethod
    def needs_disk(ready: Ready) -> bool:
        return ready.election is not None or bool(ready.log_ops)

    def persist(self, ready: Ready) -> int:
        """Step 1 (blocking): the election, then the log operations, fsynced. Returns the
        end offset of the durable log. Raises QuorumStateError, KafkaStorageError,
        SnapshotError (a fetched snapshot that is not whole)."""
        if ready.election is not None:
            e = ready.election
            self._store.write_election_state(
                ElectionState(e.epoch, e.leader_id, e.voted_id, self.core.voters)
            )
        if ready.log_ops:
            for op in ready.log_ops:
                if isinstance(op, Truncate):
                    self._log.truncate_to(op.offset)
                elif isinstance(op, Append):
                    self._log.append_batch(op.batch, self._clock_ms())
                else:
                    self._persist_snapshot_op(op)
            self._log.flush()
        return self._log.end_offset

    def _persist_snapshot_op(self, op: SnapshotChunk | SnapshotInstall | SnapshotAbort) -> None:
        """FetchSnapshot on disk: chunks into ``<id>.checkpoint.part``, then freeze it, empty
        the log to start at it and load it for the listeners (Kafka's
        ``handleFetchSnapshotResponse``)."""
        sid = SnapshotId(op.snapshot_id.offset, op.snapshot_id.epoch)
        download = self._download
        if isinstance(op, SnapshotChunk):
            if op.position == 0 or download is None or download.snapshot_id != sid:
                if download is not None:
                    download.abort()
                self._download = download = self._log.create_snapshot_download(sid)
            download.append(op.position, op.data)
        elif isinstance(op, SnapshotAbort):
            if download is not None:
                download.abort()
                self._download = None
        else:
            if download is not None and download.snapshot_id == sid:
                self._download = None
                path = download.freeze(op.size)
                log.info("Raft: node %d fetched snapshot %s from the leader", self.node_id, path)
            self._snapshot = self._log.install_snapshot(sid)

    def complete(self, ready: Ready, durable_end: int | None) -> None:
        """Step 2 (on the loop): durability to the core, messages out, answers to requests."""
        core = self.core
        now = self._clock_ms()
        if durable_end is not None and ready.log_ops:
            cut = core.lowest_pending_truncation()
            core.durable(durable_end if cut is None else min(durable_end, cut), now)
        if any(isinstance(op, SnapshotInstall) for op in ready.log_ops):
            self._reset_voters_to_snapshot(now)
        for message in ready.messages:
            if message.is_response:
                future = self._inbound.pop(message.correlation_id, None)
                if future is not None and not future.done():
                    future.set_result(message.data)
            elif self.channel is not None:
                self.channel.send(message)
        self._deliver(ready)

    def _reset_voters_to_snapshot(self, now_ms: int) -> None:
        """A snapshot fetched from the leader replaced the log: the voter set (KIP-853) is the
        one the snapshot holds, as at start-up."""
        version, voters = snapshot_control(self._log.dir)
        core = self.core
        core.dynamic.state_machine.reset_to_snapshot(version, voters)
        core.dynamic.apply_voter_set(core, now_ms)

    def fail(self, error: Exception) -> None:
        """A write to the quorum-state file or the log failed: stop taking part (Kafka halts)."""
        log.critical(
            "Raft: node %d cannot write its metadata log or quorum-state (%s); it stops taking "
            "part in the quorum: restart it once the disk is fixed",
            self.node_id,
            error,
        )
        self._failed = True
        self.fail_inbound()
        for ctx in list(self._listeners):
            if ctx.last_leader != LeaderAndEpoch(None, self._leader.epoch):
                ctx.last_leader = LeaderAndEpoch(None, self._leader.epoch)
                ctx.listener.handle_leader_change(ctx.last_leader)

    @property
    def failed(self) -> bool:
        return self._failed

    def fail_inbound(self) -> None:
        for future in self._inbound.values():
            if not future.done():
                future.cancel()
        self._inbound.clear()

    def step(self) -> None:
        """All steps in this thread until the core has nothing more to do (start-up, tests)."""
        for _ in range(64):
            ready = self.take_ready()
            if ready.is_empty():
                return
            durable = self.persist(ready) if self.needs_disk(ready) else None
            self.complete(ready, durable)

    # -- delivery ---------------------------------------------------------------------------

    def _deliver(self, ready: Ready) -> None:
        if ready.leader_changes:
            last = ready.leader_changes[-1]
            self._leader = LeaderAndEpoch(last.leader_id, last.epoch)
            self._log.log.high_watermark = min(self.high_watermark, self._log.end_offset)
        for ctx in list(self._listeners):
            self._catch_up(ctx, ready.committed)
        if ready.committed:
            self._log.log.high_watermark = min(self.high_watermark, self._log.end_offset)

    def _catch_up(self, ctx: _ListenerContext[T], committed: Sequence[LogBatch] = ()) -> None:
        snap = self._snapshot
        if snap is not None and ctx.next_offset < snap.end_offset:
            ctx.listener.handle_load_snapshot(snap)
            ctx.next_offset = snap.end_offset
        hw = self.high_watermark
        if ctx.next_offset < hw:
            if committed and committed[0].base_offset <= ctx.next_offset:
                source: Sequence[LogBatch] = committed
            else:
                source = self.core.log.batches_between(ctx.next_offset, hw)
            batches: list[Batch[T]] = []
            for b in source:
                if b.end_offset <= ctx.next_offset or b.base_offset >= hw:
                    continue
                if not b.control:
                    skip = max(0, ctx.next_offset - b.base_offset)
                    keep = min(b.end_offset, hw) - b.base_offset
                    records = list(b.records[skip:keep])
                    if records:
                        # The records' serialized size: what the snapshot generator counts
                        # (Kafka's metadata.log.max.record.bytes.between.snapshots).
                        size = sum(len(self._log.serde.write(r)) for r in records)
                        batches.append(
                            Batch(b.base_offset + skip, b.epoch, b.append_timestamp, records, size)
                        )
                ctx.next_offset = min(b.end_offset, hw)
            if batches:
                ctx.listener.handle_commit(batches)
        self._maybe_fire_leader_change(ctx)

    def _maybe_fire_leader_change(self, ctx: _ListenerContext[T]) -> None:
        leader = self._leader
        if leader == ctx.last_leader or self._failed:
            return
        if leader.leader_id == self.node_id:
            state = self.core.state
            if not isinstance(state, LeaderState) or state.epoch != leader.epoch:
                return
            if ctx.next_offset < state.epoch_start_offset + 1:
                return  # not caught up with what the earlier epochs committed
        ctx.last_leader = leader
        ctx.listener.handle_leader_change(leader)


class KafkaRaftClientDriver:
    """Runs a KafkaRaftClient on the event loop (Kafka's ``KafkaRaftClientDriver`` thread):
    ticks the core every :data:`TICK_MS`, wakes on every append and message, does the disk
    work on one thread of its own and delivers what committed."""

    def __init__(self, client: KafkaRaftClient[Any], channel: RaftChannel | None = None) -> None:
        self.client = client
        self.channel = channel
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="raft-io")
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        wake = self._wake

        def wakeup() -> None:
            loop.call_soon_threadsafe(wake.set)

        self.client.wakeup = wakeup
        if self.channel is not None:
            self.client.channel = self.channel
            self.channel.start(self.client.handle_response)
        self._task = loop.create_task(self._run(), name="raft-driver")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            # A timer rather than wait_for, which may swallow a cancellation on Python 3.11.
            timer = loop.call_later(TICK_MS / 1000, self._wake.set)
            try:
                await self._wake.wait()
            finally:
                timer.cancel()
            self._wake.clear()
            if self.client.failed:
                continue
            try:
                self.client.tick()
                await self.process()
            except (KafkaStorageError, OSError, UnreadableMetadataRecord, SnapshotError) as e:
                self.client.fail(e)
            except Exception:
                log.exception("Raft: driving the core failed")

    async def process(self) -> None:
        """Drain every Ready the core has (bounded per wake-up)."""
        loop = asyncio.get_running_loop()
        client = self.client
        for _ in range(64):
            ready = client.take_ready()
            if ready.is_empty():
                return
            durable = None
            if client.needs_disk(ready):
                try:
                    durable = await loop.run_in_executor(self._executor, client.persist, ready)
                except Exception as e:  # QuorumStateError, KafkaStorageError
                    client.fail(e)
                    return
            client.complete(ready, durable)

    async def shutdown(self) -> None:
        """Resign gracefully (EndQuorumEpoch to the other voters, bounded), then stop."""
        client = self.client
        if self._task is not None:
            client.begin_shutdown()
            core = client.core
            loop = asyncio.get_running_loop()
            deadline = loop.time() + SHUTDOWN_TIMEOUT_MS / 1000
            while not client.failed and loop.time() < deadline:
                # Only a leader has something to finish: its resignation (EndQuorumEpoch).
                resigning = isinstance(core.state, (LeaderState, ResignedState))
                if not resigning or core.is_shutdown_complete(client._clock_ms()):
                    break
                self._wake.set()
                await asyncio.sleep(0.02)
            self._stopping = True
            self._wake.set()
            await self._task
            self._task = None
        else:
            client.begin_shutdown()
        client.fail_inbound()
        if self.channel is not None:
            await self.channel.close()
        self._executor.shutdown(wait=True)


def _offset_and_epoch(sid: SnapshotId) -> OffsetAndEpoch:
    return OffsetAndEpoch(sid.end_offset, sid.epoch)


def _from_offset(batches: Sequence[LogBatch], offset: int) -> list[LogBatch]:
    """The batches at and after ``offset``; a batch that straddles it keeps its records from
    ``offset`` on."""
    out: list[LogBatch] = []
    for b in batches:
        if b.end_offset <= offset:
            continue
        if b.base_offset < offset:
            b = dataclasses.replace(b, base_offset=offset, records=b.records[offset - b.base_offset:])
        out.append(b)
    return out
