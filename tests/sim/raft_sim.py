"""A seeded, deterministic simulator for the KRaft core (:class:`odradek.raft.raft_core.RaftCore`).

N voters and some observers run in one process against a simulated world:

* a network that drops, delays, duplicates and (through random delays) reorders messages, and
  partitions the nodes into two sides; a message to a node that restarted since it was sent is
  lost, as a TCP connection to a dead process is; with ``Faults.refuse`` a request that reaches
  a crashed (or since restarted) node is answered by the sender's network channel with
  ``BROKER_NOT_AVAILABLE`` (connection refused or reset, what loopback does), else it is lost
  (a black hole, what a dead host behind a switch does);
* disks: the quorum-state file is written before anything leaves the node (what the driver
  does); log appends and truncations reach the disk only at an fsync, some time later; a crash
  loses what was not fsynced (a random prefix of it may have reached the disk anyway);
* clocks that run at different rates per node (each core sees only its own clock).

Every event is followed by the invariant checks (:class:`Violation` on failure): election
safety, log matching, leader completeness, state-machine safety (no two nodes apply different
records at one offset; every committed record is durable on a majority of voters, also after
every crash), and, once the faults heal, liveness (a leader, and a record proposed after the
heal applied by every node within a bounded simulated time).
"""

from __future__ import annotations

import functools
import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.raft import raft_messages as msgs
from odradek.raft.epoch_state import Election, LeaderState
from odradek.raft.kafka_network_channel import error_response
from odradek.raft.quorum import QuorumConfig
from odradek.raft.raft_core import Append, RaftCore, Ready, Truncate
from odradek.raft.raft_log import LogBatch
from odradek.raft.raft_messages import RaftMessage

CLUSTER_ID = "sim-cluster-0000000000"
TICK_MS = 50
LIVENESS_BOUND_MS = 10_000  # heal -> a leader commits a probe: timeouts and backoffs, twice over
CATCH_UP_BOUND_MS = 30_000  # heal -> every node applied it (far-behind followers fetch in pieces)


class Violation(AssertionError):
    """An invariant does not hold."""


@dataclass
class Faults:
    drop: float = 0.05
    duplicate: float = 0.03
    max_delay_ms: int = 40
    crash_every_ms: int = 1200
    partition_every_ms: int = 1500
    fault_phase_ms: int = 10_000
    refuse: bool = False  # a request to a dead node is refused (the sender hears at once)


@dataclass(frozen=True)
class Entry:
    epoch: int
    record: Any
    control: bool
    timestamp: int


@dataclass
class Disk:
    entries: list[Entry] = field(default_factory=list)
    election: Election | None = None

    def apply(self, op: Append | Truncate) -> None:
        if isinstance(op, Truncate):
            del self.entries[op.offset :]
        else:
            b = op.batch
            del self.entries[b.base_offset :]
            self.entries.extend(Entry(b.epoch, r, b.control, b.append_timestamp) for r in b.records)

    def batches(self) -> list[LogBatch]:
        """The entries read back as batches (a run of one epoch, control records apart)."""
        out: list[LogBatch] = []
        for offset, e in enumerate(self.entries):
            last = out[-1] if out else None
            if (
                last is not None
                and (last.epoch, last.control) == (e.epoch, e.control)
                and not e.control
            ):
                out[-1] = LogBatch(
                    last.base_offset, e.epoch, (*last.records, e.record), last.append_timestamp
                )
            else:
                out.append(LogBatch(offset, e.epoch, (e.record,), e.timestamp, e.control))
        return out


@dataclass
class Node:
    node_id: int
    voter: bool
    rate: float
    clock_offset: int
    disk: Disk = field(default_factory=Disk)
    core: RaftCore | None = None
    incarnation: int = 0
    pending_ops: list[Append | Truncate] = field(default_factory=list)
    fsync_scheduled: bool = False
    applied: list[tuple[int, Any]] = field(default_factory=list)  # (epoch, record) by offset
    paused_until: int = 0

    def local_ms(self, now: int) -> int:
        return self.clock_offset + int(now * self.rate)


class Simulation:
    def __init__(
        self,
        seed: int,
        voters: int = 3,
        observers: int = 1,
        faults: Faults | None = None,
        config: QuorumConfig | None = None,
        max_fetch_batches: int = 64,
        pre_vote: bool = True,
    ) -> None:
        self.seed = seed
        self.pre_vote = pre_vote  # False: as the network runs it (Vote v0-v1, Kafka 3.9)
        self.rng = random.Random(seed)
        self.faults = faults or Faults()
        self.config = config or QuorumConfig()
        self.max_fetch_batches = max_fetch_batches  # small: followers catch up in pieces
        self.voter_ids = frozenset(range(1, voters + 1))
        self.nodes: dict[int, Node] = {}
        for node_id in range(1, voters + observers + 1):
            self.nodes[node_id] = Node(
                node_id,
                node_id in self.voter_ids,
                rate=self.rng.uniform(0.9, 1.1),
                clock_offset=self.rng.randrange(0, 10_000),
            )
        self.now = 0
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.partition: tuple[frozenset[int], frozenset[int]] | None = None
        self.healed = False
        self.leaders: dict[int, int] = {}  # epoch -> leader
        self._leader_checked: dict[int, int] = {}  # epoch -> committed offsets checked
        self.committed_records: set[str | bytes] = set()
        self.commit_epochs: list[int] = []  # by offset: the epoch in which it was committed
        self.committed: dict[int, tuple[int, Any]] = {}  # offset -> (epoch, record)
        self.entries_seen: dict[
            tuple[int, int], tuple[Any, int]
        ] = {}  # (offset, epoch) -> (record, prev epoch)
        self._response_incarnation: dict[tuple[int, int, int], int] = {}
        self._proposal_counter = 0
        self.steps = 0
        self.trace: list[str] = []

    # -- scheduling ---------------------------------------------------------------------------

    def at(self, time_ms: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (time_ms, self._seq, action))

    def log(self, text: str) -> None:
        self.trace.append(f"{self.now:>7} {text}")
        if len(self.trace) > 400:
            del self.trace[:200]

    # -- nodes --------------------------------------------------------------------------------

    def start(self, node: Node) -> None:
        node.incarnation += 1
        node.applied = []
        node.pending_ops = []
        node.fsync_scheduled = False
        node.core = RaftCore(
            node.node_id,
            self.voter_ids,
            CLUSTER_ID,
            self.config,
            random.Random(self.rng.random()),
            node.local_ms(self.now),
            election=node.disk.election,
            batches=node.disk.batches(),
            max_fetch_batches=self.max_fetch_batches,
            pre_vote=self.pre_vote,
        )
        self.log(f"start node {node.node_id} #{node.incarnation} as {node.core.state!r}")
        self.on_start(node)
        self.drain(node)
        incarnation = node.incarnation
        self.at(self.now + self.rng.randrange(1, TICK_MS), lambda: self.tick(node, incarnation))

    def crash(self, node: Node) -> None:
        if node.core is None:
            return
        # What was not fsynced is lost, except a random prefix that happened to reach the disk.
        for op in node.pending_ops[: self.rng.randrange(len(node.pending_ops) + 1)]:
            node.disk.apply(op)
        node.core = None
        node.pending_ops = []
        self.log(f"crash node {node.node_id}")
        self.check_committed_durable()

    def tick(self, node: Node, incarnation: int) -> None:
        if node.core is None or node.incarnation != incarnation:
            return
        if node.paused_until > self.now:
            self.at(node.paused_until, lambda: self.tick(node, incarnation))
            return
        node.core.tick(node.local_ms(self.now))
        self.drain(node)
        self.at(self.now + TICK_MS, lambda: self.tick(node, incarnation))

    def fsync(self, node: Node, incarnation: int) -> None:
        if node.core is not None and node.paused_until > self.now:
            self.at(node.paused_until, lambda: self.fsync(node, incarnation))
            return
        node.fsync_scheduled = False
        if node.core is None or node.incarnation != incarnation:
            return
        for op in node.pending_ops:
            node.disk.apply(op)
        node.pending_ops = []
        node.core.durable(len(node.disk.entries), node.local_ms(self.now))
        self.drain(node)

    def propose(self) -> None:
        for node in self.nodes.values():
            core = node.core
            if core is not None and core.is_leader():
                self._proposal_counter += 1
                record = f"r{self._proposal_counter}-n{node.node_id}"
                core.propose(core.epoch, [record], node.local_ms(self.now))
                self.log(f"node {node.node_id} proposes {record} at epoch {core.epoch}")
                self.drain(node)

    def drain(self, node: Node) -> None:
        core = node.core
        assert core is not None
        ready: Ready = core.ready()
        if ready.election is not None:
            node.disk.election = ready.election  # written and fsynced before anything leaves
        for op in ready.log_ops:
            assert isinstance(op, (Append, Truncate)), op  # no snapshots here: snapshot_sim.py
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
            self.send(node, message)

    # -- hooks for a state machine on top (controller_sim.py) ---------------------------------

    def on_start(self, node: Node) -> None:
        """``node`` (re)started: what it held in memory is gone."""

    def on_new_commit(self, offset: int, entry: tuple[int, Any], control: bool) -> None:
        """The first time any node commits ``offset`` (offsets come in order)."""

    def on_applied(self, node: Node, batch: LogBatch) -> None:
        """``node`` applied the committed ``batch``."""

    # -- network ------------------------------------------------------------------------------

    def send(self, node: Node, message: RaftMessage) -> None:
        dest = self.nodes.get(message.destination)
        if dest is None:
            return
        if message.is_response:
            key = (node.node_id, message.destination, message.correlation_id)
            dest_incarnation = self._response_incarnation.pop(key, -1)
        else:
            dest_incarnation = dest.incarnation
        copies = 1
        if not self.healed:
            if self.rng.random() < self.faults.drop or self._partitioned(
                node.node_id, dest.node_id
            ):
                return
            if self.rng.random() < self.faults.duplicate:
                copies = 2
        sender_incarnation = node.incarnation
        for _ in range(copies):
            delay = self.rng.randrange(1, self.faults.max_delay_ms + 1)
            self.at(
                self.now + delay,
                lambda: self.deliver(dest, message, dest_incarnation, sender_incarnation),
            )

    def _partitioned(self, a: int, b: int) -> bool:
        return self.partition is not None and (a in self.partition[0]) != (b in self.partition[0])

    def deliver(
        self, dest: Node, message: RaftMessage, incarnation: int, sender_incarnation: int
    ) -> None:
        if dest.core is None or dest.incarnation != incarnation:
            if self.faults.refuse and not message.is_response:
                self._refuse(dest, message, sender_incarnation)
            return
        if dest.paused_until > self.now:
            resume = dest.paused_until + self.rng.randrange(1, 5)
            self.at(resume, lambda: self.deliver(dest, message, incarnation, sender_incarnation))
            return
        if not message.is_response:
            key = (dest.node_id, message.source, message.correlation_id)
            self._response_incarnation[key] = sender_incarnation
        dest.core.handle(message, dest.local_ms(self.now))
        self.drain(dest)

    def _refuse(self, dest: Node, request: RaftMessage, sender_incarnation: int) -> None:
        """The connection to ``dest`` was refused or reset: the sender's channel answers the
        request itself, a moment later."""
        sender = self.nodes[request.source]
        answer = RaftMessage(
            dest.node_id,
            request.source,
            request.api_key,
            request.correlation_id,
            error_response(request.api_key, msgs.BROKER_NOT_AVAILABLE),
            is_response=True,
        )
        delay = self.rng.randrange(1, 5)
        self.at(
            self.now + delay,
            lambda: self.deliver(sender, answer, sender_incarnation, dest.incarnation),
        )

    # -- invariants ---------------------------------------------------------------------------

    def check_log_op(self, node: Node, op: Append | Truncate) -> None:
        """Log matching, incrementally: an entry is identified by (offset, epoch); two entries
        with the same identity must hold the same record and follow an entry of the same epoch."""
        core = node.core
        assert core is not None
        if isinstance(op, Truncate):
            if op.offset < len(node.applied):
                raise Violation(
                    f"node {node.node_id} truncates to {op.offset} below what it applied "
                    f"({len(node.applied)})"
                )
            return
        batch = op.batch
        prev_epoch = self._epoch_at(core, batch.base_offset - 1)
        for i, record in enumerate(batch.records):
            key = (batch.base_offset + i, batch.epoch)
            seen = self.entries_seen.get(key)
            if seen is None:
                self.entries_seen[key] = (record, prev_epoch)
            elif seen != (record, prev_epoch):
                raise Violation(
                    f"log matching: node {node.node_id} has {record!r} (after epoch {prev_epoch}) at "
                    f"offset {key[0]} epoch {key[1]}, another node had {seen[0]!r} (after epoch {seen[1]})"
                )
            prev_epoch = batch.epoch

    @staticmethod
    def _epoch_at(core: RaftCore, offset: int) -> int:
        if offset < 0:
            return 0
        for batch in core.log.batches:
            if batch.base_offset <= offset < batch.end_offset:
                return batch.epoch
        return -1

    def apply_committed(self, node: Node, batch: LogBatch) -> None:
        for i, record in enumerate(batch.records):
            offset = batch.base_offset + i
            if offset != len(node.applied):
                raise Violation(
                    f"node {node.node_id} applies offset {offset}, expected {len(node.applied)}"
                )
            entry = (batch.epoch, record)
            known = self.committed.get(offset)
            if known is None:
                self.committed[offset] = entry
                if isinstance(record, (str, bytes)):
                    self.committed_records.add(record)
                assert node.core is not None
                self.commit_epochs.append(node.core.epoch)
                self.check_durable_on_majority(offset, entry)
                self.on_new_commit(offset, entry, batch.control)
            elif known != entry:
                raise Violation(
                    f"state-machine safety: node {node.node_id} commits {entry} at offset {offset}, "
                    f"already committed {known}"
                )
            node.applied.append(entry)

    def check_durable_on_majority(self, offset: int, entry: tuple[int, Any]) -> None:
        holders = [
            n.node_id
            for n in self.nodes.values()
            if n.voter
            and offset < len(n.disk.entries)
            and (n.disk.entries[offset].epoch, n.disk.entries[offset].record) == entry
        ]
        if len(holders) < len(self.voter_ids) // 2 + 1:
            raise Violation(
                f"committed offset {offset} {entry} is durable only on {holders} of voters "
                f"{sorted(self.voter_ids)}"
            )

    def check_committed_durable(self) -> None:
        for offset, entry in self.committed.items():
            self.check_durable_on_majority(offset, entry)

    def check_step(self) -> None:
        """Election safety and leader completeness, after every event."""
        for node in self.nodes.values():
            core = node.core
            if core is None or not isinstance(core.state, LeaderState):
                continue
            epoch = core.epoch
            leader = self.leaders.setdefault(epoch, node.node_id)
            if leader != node.node_id:
                raise Violation(
                    f"election safety: nodes {leader} and {node.node_id} both lead epoch {epoch}"
                )
            if not node.voter:
                raise Violation(f"observer {node.node_id} leads epoch {epoch}")
            self.check_leader_complete(node, core)

    def check_leader_complete(self, node: Node, core: RaftCore) -> None:
        """Every record committed in an earlier epoch is in the log of this epoch's leader
        (each offset checked once per epoch; commit epochs grow with the offset)."""
        start = checked = self._leader_checked.get(core.epoch, 0)
        while checked < len(self.commit_epochs) and self.commit_epochs[checked] < core.epoch:
            checked += 1
        if checked == start:
            return
        self._leader_checked[core.epoch] = checked
        if core.log.end_offset < checked:
            raise Violation(
                f"leader completeness: leader {node.node_id} of epoch {core.epoch} ends at "
                f"{core.log.end_offset}, {checked} records were committed before its epoch"
            )
        for batch in core.log.batches_between(start, checked):
            for i, record in enumerate(batch.records):
                offset = batch.base_offset + i
                if self.committed[offset] != (batch.epoch, record):
                    raise Violation(
                        f"leader completeness: leader {node.node_id} of epoch {core.epoch} has "
                        f"{(batch.epoch, record)} at {offset}, committed {self.committed[offset]}"
                    )

    # -- the schedule -------------------------------------------------------------------------

    def schedule_faults(self) -> None:
        f = self.faults
        t = 0
        while True:
            t += self.rng.randrange(f.crash_every_ms // 2, f.crash_every_ms * 3 // 2)
            if t >= f.fault_phase_ms:
                break
            self.at(t, self._crash_someone)
        t = 0
        while True:
            t += self.rng.randrange(f.partition_every_ms // 2, f.partition_every_ms * 3 // 2)
            if t >= f.fault_phase_ms:
                break
            self.at(t, self._partition_someone)
            self.at(t + self.rng.randrange(200, 2500), lambda: self._set_partition(None, None))
        t = 0
        while True:
            t += self.rng.randrange(f.crash_every_ms, f.crash_every_ms * 3)
            if t >= f.fault_phase_ms:
                break
            self.at(t, self._pause_someone)
        for t in range(0, f.fault_phase_ms, 37):
            self.at(t + self.rng.randrange(37), self.propose)
        # A graceful shutdown of whoever leads at some point: it resigns with EndQuorumEpoch.
        self.at(self.rng.randrange(f.fault_phase_ms), self._graceful_resign)

    def _current_leader(self) -> int | None:
        leaders = [
            n.node_id for n in self.nodes.values() if n.core is not None and n.core.is_leader()
        ]
        return max(leaders, key=lambda i: self.nodes[i].core.epoch) if leaders else None  # type: ignore[union-attr]

    def _crash_someone(self) -> None:
        """Crash the leader half of the time, else anyone; restart it a little later."""
        leader = self._current_leader()
        if leader is not None and self.rng.random() < 0.5:
            victim = self.nodes[leader]
        else:
            victim = self.nodes[self.rng.choice(sorted(self.nodes))]
        self.crash(victim)
        down = self.rng.randrange(50, 3000)
        self.at(min(self.now + down, self.faults.fault_phase_ms), lambda: self._restart(victim))

    def _pause_someone(self) -> None:
        """SIGSTOP the leader (or anyone) past the election timeout, then SIGCONT it."""
        leader = self._current_leader()
        victim = (
            leader
            if leader is not None and self.rng.random() < 0.7
            else self.rng.choice(sorted(self.nodes))
        )
        node = self.nodes[victim]
        node.paused_until = min(
            self.now + self.rng.randrange(500, 4000), self.faults.fault_phase_ms
        )
        self.log(f"pause node {victim} until {node.paused_until}")

    def _partition_someone(self) -> None:
        """Cut the nodes in two; half of the time the leader ends up in a minority."""
        ids = sorted(self.nodes)
        leader = self._current_leader()
        if leader is not None and self.rng.random() < 0.5:
            others = [i for i in ids if i != leader]
            side = frozenset(
                [leader, *self.rng.sample(others, self.rng.randrange(0, len(self.voter_ids) // 2))]
            )
        else:
            side = frozenset(self.rng.sample(ids, self.rng.randrange(1, len(ids))))
        self._set_partition(side, frozenset(ids) - side)

    def _restart(self, node: Node) -> None:
        if node.core is None:
            self.start(node)

    def _set_partition(self, a: frozenset[int] | None, b: frozenset[int] | None) -> None:
        if self.healed:
            return
        self.partition = None if a is None or b is None else (a, b)
        self.log(f"partition {sorted(a) if a else None} | {sorted(b) if b else None}")

    def _graceful_resign(self) -> None:
        for node in self.nodes.values():
            if node.core is not None and node.core.is_leader():
                node.core.begin_shutdown(node.local_ms(self.now), 5000)
                self.log(f"node {node.node_id} shuts down gracefully")
                self.drain(node)
                incarnation = node.incarnation
                self.at(self.now + 300, functools.partial(self._finish_shutdown, node, incarnation))

    def _finish_shutdown(self, node: Node, incarnation: int) -> None:
        if node.core is not None and node.incarnation == incarnation:
            self.crash(node)
            self.at(self.now + self.rng.randrange(100, 1000), lambda: self._restart(node))

    def heal(self) -> None:
        self.healed = True
        self.partition = None
        self.log("heal")
        for node in self.nodes.values():
            if node.core is None:
                self.start(node)

    def run(self) -> None:
        """The whole schedule; raises :class:`Violation`."""
        for node in self.nodes.values():
            self.start(node)
        self.schedule_faults()
        heal_at = self.faults.fault_phase_ms
        self.at(heal_at, self.heal)
        deadline = heal_at + CATCH_UP_BOUND_MS
        probes: list[Any] = []
        committed = False
        probe_at = next_probe_at = heal_at + 1
        while self._queue:
            time_ms, _, action = heapq.heappop(self._queue)
            if time_ms > deadline:
                break
            self.now = time_ms
            action()
            self.steps += 1
            self.check_step()
            if not self.healed or self.now < probe_at:
                continue
            probe_at = self.now + 100
            committed = committed or any(p in self.committed_records for p in probes)
            if committed:
                if any(self._applied_everywhere(p) for p in probes):
                    return
            elif self.now > heal_at + LIVENESS_BOUND_MS:
                raise Violation(
                    f"liveness: no leader committed a record proposed after the faults healed "
                    f"(probes {probes}) within {LIVENESS_BOUND_MS} ms; states {self._states()}"
                )
            elif self.now >= next_probe_at:
                # A probe a leader proposed may be lost with its epoch: propose another.
                probe = self._propose_probe(len(probes))
                if probe is not None:
                    probes.append(probe)
                    next_probe_at = self.now + 3000
        raise Violation(
            f"liveness: the probe committed after the faults healed (of {probes}) was not applied "
            f"by every node within {CATCH_UP_BOUND_MS} ms; states {self._states()}"
        )

    def _states(self) -> dict[int, str]:
        return {n.node_id: repr(n.core.state) if n.core else "down" for n in self.nodes.values()}

    def _propose_probe(self, n: int) -> Any:
        for node in self.nodes.values():
            core = node.core
            if core is not None and core.is_leader() and core.high_watermark is not None:
                record = f"probe-{self.seed}-{n}"
                core.propose(core.epoch, [record], node.local_ms(self.now))
                self.log(f"probe {record} proposed on node {node.node_id} epoch {core.epoch}")
                self.drain(node)
                return record
        return None

    def _applied_everywhere(self, record: Any) -> bool:
        return all(any(r == record for _, r in node.applied) for node in self.nodes.values())


def run_schedule(seed: int, pre_vote: bool = True) -> Simulation:
    """One schedule, its shape drawn from the seed: 3 or 5 voters, 0-2 observers; ``pre_vote``
    False runs the cores as KafkaRaftClient runs them on the network."""
    shape = random.Random(seed ^ 0x5EED)
    sim = Simulation(
        seed,
        voters=shape.choice((3, 3, 5)),
        observers=shape.randrange(0, 3),
        faults=Faults(
            drop=shape.choice((0.0, 0.02, 0.1)),
            duplicate=shape.choice((0.0, 0.05)),
            max_delay_ms=shape.choice((5, 40, 150)),
            refuse=shape.random() < 0.5,
        ),
        max_fetch_batches=shape.choice((8, 64)),
        pre_vote=pre_vote,
    )
    sim.run()
    return sim
