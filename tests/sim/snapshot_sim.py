"""The Raft simulator (raft_sim.py) with snapshots and FetchSnapshot.

Every node now and then snapshots what it has committed and durable and deletes its log below
(as the snapshot generator and ``MetadataLog.maybe_clean`` do), and tells its core
(``update_snapshots``). One node is kept down for a long while in the middle of the faults, so
that it comes back behind the leaders' log start and has to fetch a snapshot. The simulated
driver serves FetchSnapshot slices from the node's snapshot, writes the chunks a follower
fetches, and on ``SnapshotInstall`` makes the snapshot the node's durable log prefix and its
state machine's state (``handle_load_snapshot``).

On top of raft_sim's invariants: a snapshot holds exactly the committed records below its end
offset (state-machine safety), and installing one never moves a node's state machine back.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from odradek.raft.raft_core import RaftCore
from odradek.raft.raft_log import LogBatch, OffsetAndEpoch
from odradek.raft.raft_messages import FETCH_SNAPSHOT, SNAPSHOT_NOT_FOUND, RaftMessage
from odradek.raft.raft_ready import (
    Append,
    Ready,
    SnapshotAbort,
    SnapshotChunk,
    SnapshotInstall,
    Truncate,
)
from odradek.raft.snapshot_fetch import SnapshotSlice

from .raft_sim import CLUSTER_ID, TICK_MS, Disk, Entry, Faults, Node, Simulation, Violation

SNAPSHOT_EVERY_MS = 600
LONG_DOWN_MS = 4500
FETCH_SNAPSHOT_MAX_BYTES = 400  # several FetchSnapshot rounds for most snapshots


@dataclass(frozen=True)
class InstallWithData:
    """What the driver writes for a SnapshotInstall: the whole snapshot."""

    snapshot_id: OffsetAndEpoch
    data: bytes


def encode(entries: list[Entry]) -> bytes:
    return json.dumps([[e.epoch, e.record, e.control, e.timestamp] for e in entries]).encode()


def decode(data: bytes) -> list[Entry]:
    return [Entry(int(ep), rec, bool(ctl), int(ts)) for ep, rec, ctl, ts in json.loads(data)]


@dataclass
class SnapDisk(Disk):
    """``entries`` stays indexed by offset: below ``start`` they are what the snapshot holds
    (the log records there are deleted)."""

    start: int = 0
    snapshot: tuple[OffsetAndEpoch, bytes] | None = None

    def apply(self, op: Any) -> None:
        if isinstance(op, InstallWithData):
            self.entries = decode(op.data)
            self.start = op.snapshot_id.offset
            self.snapshot = (op.snapshot_id, op.data)
            return
        if isinstance(op, Truncate) and op.offset < self.start:
            raise Violation(f"truncation to {op.offset} below the log start {self.start}")
        if isinstance(op, Append) and op.batch.base_offset < self.start:
            raise Violation(f"append at {op.batch.base_offset} below the log start {self.start}")
        super().apply(op)

    def batches(self) -> list[LogBatch]:
        """The log from its start offset, read back as batches."""
        tail = Disk(self.entries[self.start :]).batches()
        return [
            LogBatch(b.base_offset + self.start, b.epoch, b.records, b.append_timestamp, b.control)
            for b in tail
        ]

    def log_start(self) -> OffsetAndEpoch | None:
        if self.start == 0 or self.snapshot is None:
            return None
        return self.snapshot[0]


@dataclass
class SnapNode(Node):
    disk: SnapDisk = field(default_factory=SnapDisk)
    download: bytearray = field(default_factory=bytearray)


class SnapshotSimulation(Simulation):
    def __init__(self, seed: int, **kwargs: Any) -> None:
        super().__init__(seed, **kwargs)
        self.nodes = {
            i: SnapNode(n.node_id, n.voter, n.rate, n.clock_offset) for i, n in self.nodes.items()
        }
        self.installs: list[tuple[int, OffsetAndEpoch]] = []
        self.snapshots_taken = 0

    # -- nodes --------------------------------------------------------------------------------

    def start(self, node: Node) -> None:
        assert isinstance(node, SnapNode)
        disk = node.disk
        node.incarnation += 1
        node.pending_ops = []
        node.fsync_scheduled = False
        node.download = bytearray()
        log_start = disk.log_start()
        # The listeners load the snapshot the log starts at, then the commits after it.
        node.applied = [(e.epoch, e.record) for e in disk.entries[: disk.start]] if log_start else []
        node.core = RaftCore(
            node.node_id,
            self.voter_ids,
            CLUSTER_ID,
            self.config,
            random.Random(self.rng.random()),
            node.local_ms(self.now),
            election=disk.election,
            batches=disk.batches(),
            max_fetch_batches=self.max_fetch_batches,
            pre_vote=self.pre_vote,
            log_start=log_start,
        )
        node.core.snapshot_fetch_max_bytes = FETCH_SNAPSHOT_MAX_BYTES
        if disk.snapshot is not None:
            sid, data = disk.snapshot
            node.core.update_snapshots({sid: len(data)}, log_start, node.local_ms(self.now))
        self.log(f"start node {node.node_id} #{node.incarnation} from {log_start}")
        self.on_start(node)
        self.drain(node)
        incarnation = node.incarnation
        self.at(self.now + self.rng.randrange(1, TICK_MS), lambda: self.tick(node, incarnation))

    def drain(self, node: Node) -> None:
        assert isinstance(node, SnapNode)
        core = node.core
        assert core is not None
        ready: Ready = core.ready()
        if ready.election is not None:
            node.disk.election = ready.election
        for op in ready.log_ops:
            if isinstance(op, SnapshotChunk):
                if op.position == 0:
                    node.download = bytearray()
                if op.position != len(node.download):
                    raise Violation(
                        f"node {node.node_id}: chunk at {op.position}, the file has "
                        f"{len(node.download)} bytes"
                    )
                node.download += op.data
            elif isinstance(op, SnapshotAbort):
                node.download = bytearray()
            elif isinstance(op, SnapshotInstall):
                self._install(node, op)
            else:
                self.check_log_op(node, op)
                node.pending_ops.append(op)
        if node.pending_ops and not node.fsync_scheduled:
            node.fsync_scheduled = True
            incarnation = node.incarnation
            self.at(self.now + self.rng.randrange(1, 30), lambda: self.fsync(node, incarnation))
        for batch in ready.committed:
            self.apply_committed(node, batch)
            self.on_applied(node, batch)
        for message in ready.messages:
            self.send(node, self._serve_snapshot(node, message))

    def _install(self, node: SnapNode, op: SnapshotInstall) -> None:
        sid = op.snapshot_id
        held = node.disk.snapshot
        if held is not None and held[0] == sid and not node.download:
            data = held[1]
        else:
            data = bytes(node.download)
            node.download = bytearray()
        if len(data) != op.size:
            raise Violation(f"node {node.node_id} installs {sid}: {len(data)} bytes of {op.size}")
        entries = decode(data)
        if len(entries) != sid.offset:
            raise Violation(f"snapshot {sid} holds {len(entries)} records")
        self.check_snapshot(node.node_id, sid, entries)
        if len(node.applied) > sid.offset:
            raise Violation(
                f"node {node.node_id} installs {sid} after applying {len(node.applied)} records"
            )
        node.applied = [(e.epoch, e.record) for e in entries]
        node.pending_ops.append(InstallWithData(sid, data))  # type: ignore[arg-type]
        self.installs.append((node.node_id, sid))
        self.log(f"node {node.node_id} installs snapshot {sid}")

    def check_snapshot(self, node_id: int, sid: OffsetAndEpoch, entries: list[Entry]) -> None:
        for offset, e in enumerate(entries):
            known = self.committed.get(offset)
            if known != (e.epoch, e.record):
                raise Violation(
                    f"snapshot {sid} of node {node_id} has {(e.epoch, e.record)} at {offset}, "
                    f"committed {known}"
                )
        if entries and entries[-1].epoch != sid.epoch:
            raise Violation(f"snapshot {sid} ends with a record of epoch {entries[-1].epoch}")

    def _serve_snapshot(self, node: SnapNode, message: RaftMessage) -> RaftMessage:
        """The leader's driver reads the slice of its snapshot file into the response."""
        if not (message.is_response and message.api_key == FETCH_SNAPSHOT):
            return message
        for topic in message.data.get("topics") or []:
            for p in topic["partitions"]:
                piece = p["unaligned_records"]
                if not isinstance(piece, SnapshotSlice):
                    continue
                held = node.disk.snapshot
                if held is None or held[0] != piece.snapshot_id:
                    p.update(error_code=SNAPSHOT_NOT_FOUND, unaligned_records=b"")
                    p["snapshot_id"] = {"end_offset": -1, "epoch": -1}
                else:
                    p["unaligned_records"] = held[1][piece.position : piece.position + piece.length]
        return message

    @staticmethod
    def _epoch_at(core: RaftCore, offset: int) -> int:
        if offset == core.log.start.offset - 1:
            return core.log.start.epoch
        return Simulation._epoch_at(core, offset)

    # -- snapshots ----------------------------------------------------------------------------

    def take_snapshot(self, node: SnapNode) -> None:
        """Snapshot what is committed and durable, delete the log below, tell the core."""
        core = node.core
        if core is None or node.paused_until > self.now:
            return
        if any(isinstance(op, InstallWithData) for op in node.pending_ops):
            return  # the snapshot it fetched is not on disk yet: it is the newest anyway
        offset = min(len(node.applied), len(node.disk.entries))
        if offset <= node.disk.start:
            return
        entries = node.disk.entries[:offset]
        if [(e.epoch, e.record) for e in entries] != node.applied[:offset]:
            raise Violation(f"node {node.node_id}: durable log differs from what it applied")
        sid = OffsetAndEpoch(offset, entries[-1].epoch)
        self.check_snapshot(node.node_id, sid, entries)
        data = encode(entries)
        node.disk.snapshot = (sid, data)
        node.disk.start = offset
        core.update_snapshots({sid: len(data)}, sid, node.local_ms(self.now))
        if core.log.start != sid:
            raise Violation(f"node {node.node_id}: core log starts at {core.log.start}, not {sid}")
        self.snapshots_taken += 1
        self.log(f"node {node.node_id} snapshots {sid}")
        self.drain(node)

    def _snapshot_someone(self) -> None:
        node = self.nodes[self.rng.choice(sorted(self.nodes))]
        assert isinstance(node, SnapNode)
        self.take_snapshot(node)
        leader = self._current_leader()
        if leader is not None:
            lead = self.nodes[leader]
            assert isinstance(lead, SnapNode)
            self.take_snapshot(lead)

    def _keep_one_down(self) -> None:
        """Crash a node that does not lead and keep it down long enough to fall behind the
        leader's log start."""
        leader = self._current_leader()
        others = sorted(i for i, n in self.nodes.items() if i != leader and n.core is not None)
        if not others:
            return
        victim = self.nodes[self.rng.choice(others)]
        self.crash(victim)
        self.log(f"node {victim.node_id} down for long")
        self.at(self.now + LONG_DOWN_MS, lambda: self._restart(victim))

    def schedule_faults(self) -> None:
        super().schedule_faults()
        f = self.faults
        for t in range(SNAPSHOT_EVERY_MS, f.fault_phase_ms + 3000, SNAPSHOT_EVERY_MS):
            self.at(t + self.rng.randrange(SNAPSHOT_EVERY_MS // 2), self._snapshot_someone)
        self.at(self.rng.randrange(f.fault_phase_ms // 4, f.fault_phase_ms // 2), self._keep_one_down)

    def _restart(self, node: Node) -> None:
        if node.core is None:
            self.start(node)


def run_snapshot_schedule(seed: int) -> SnapshotSimulation:
    """One schedule with snapshots, its shape drawn from the seed (as raft_sim.run_schedule)."""
    shape = random.Random(seed ^ 0x5A5A)
    sim = SnapshotSimulation(
        seed,
        voters=shape.choice((3, 3, 5)),
        observers=shape.randrange(0, 2),
        faults=Faults(
            drop=shape.choice((0.0, 0.02, 0.1)),
            duplicate=shape.choice((0.0, 0.05)),
            max_delay_ms=shape.choice((5, 40, 150)),
        ),
        max_fetch_batches=shape.choice((8, 64)),
        pre_vote=shape.random() < 0.5,
    )
    sim.run()
    return sim
