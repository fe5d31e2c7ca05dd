"""The invariants of the transaction simulation (tests/sim/txn_sim.py), checked from outside the
cores: partition logs are scanned batch by batch (which records each marker closes), and a
read_committed reader fetches as the Java consumer does."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from odradek.coordinator.transaction.transaction_log import read_value
from odradek.coordinator.transaction.transaction_metadata import COMPLETED_STATES, TransactionState
from odradek.records.batch import RecordBatchHeader, iter_batches
from odradek.records.control_batch import parse_end_txn_marker
from odradek.records.records import iter_batch_records

from .txn_world import TopicPartition, Violation

if TYPE_CHECKING:
    from .txn_sim import World

READ_BYTES = 1 << 22


def _tag(value: str) -> str:
    return value.split("/", 1)[0]


@dataclass
class PartitionView:
    tp: TopicPartition
    pos: int = 0  # the scan's position in the log
    open: dict[int, tuple[int, list[str]]] = field(default_factory=dict)  # pid -> (first offset, values)
    outcome: dict[str, bool] = field(default_factory=dict)  # value -> committed
    lso: int = 0
    closed: list[tuple[int, int]] = field(default_factory=list)  # (first offset, marker offset)
    reader_pos: int = 0
    seen: set[str] = field(default_factory=set)


def _batches(log: Any, start: int, end: int, isolation: int | None = None) -> list[tuple[RecordBatchHeader, bytes]]:
    out: list[tuple[RecordBatchHeader, bytes]] = []
    pos = start
    while pos < end:
        data = log.read(pos, READ_BYTES, isolation_max_offset=isolation).to_bytes()
        progressed = False
        for h in iter_batches(data):
            if h.base_offset >= end:
                return out
            out.append((h, data[h.position : h.position + h.size]))
            pos = h.next_offset
            progressed = True
        if not progressed:
            break
    return out


def _values(batch: bytes) -> list[str]:
    return [bytes(r.value).decode() for r in iter_batch_records(batch) if r.value is not None]


def read_committed(log: Any, start: int, lso: int) -> tuple[list[str], int]:
    """One fetch up to the LSO, filtered as the Java consumer's CompletedFetch does: the
    aborted transactions (sorted by first offset) mark their producer aborted from the first
    batch that reaches their first offset; its transactional batches are skipped until its
    ABORT marker; control batches are never returned."""
    aborted = sorted(log.collect_aborted_transactions(start, lso), key=lambda a: a.first_offset)
    aborted_pids: set[int] = set()
    visible: list[str] = []
    end = start
    for h, batch in _batches(log, start, lso, isolation=lso):
        while aborted and aborted[0].first_offset <= h.last_offset:
            aborted_pids.add(aborted.pop(0).producer_id)
        end = h.next_offset
        if h.is_control:
            marker = parse_end_txn_marker(batch, h._replace(position=0))
            if marker is not None and not marker.commit:
                aborted_pids.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in aborted_pids:
            continue
        visible.extend(_values(batch))
    return visible, end


class Oracle:
    def __init__(self, world: World) -> None:
        self.world = world
        self.views = {tp: PartitionView(tp) for tp in world.leaders}
        self.instances: dict[str, int] = {}  # transactional id -> instances started
        self.acked: dict[str, list[str]] = {}  # tag -> values whose produce was acknowledged
        self.end_sent: dict[str, set[bool]] = {}  # tag -> the outcomes the client asked for
        self.end_acked: dict[str, bool] = {}  # tag -> the outcome EndTxn acknowledged
        self.tag_outcomes: dict[str, dict[TopicPartition, set[bool]]] = {}
        # What the coordinator decided, from the __transaction_state records: (producer id,
        # producer epoch, partition, commit) of every PrepareCommit/PrepareAbort.
        self.decisions: set[tuple[int, int, TopicPartition, bool]] = set()
        self.txn_log_pos = [0] * len(world.txn_logs)

    def txn_log_truncated(self, partition: int, offset: int) -> None:
        self.txn_log_pos[partition] = min(self.txn_log_pos[partition], offset)

    def _scan_decisions(self) -> None:
        for p, lg in enumerate(self.world.txn_logs):
            for h, batch in _batches(lg, self.txn_log_pos[p], lg.log_end_offset):
                self.txn_log_pos[p] = h.next_offset
                for rec in iter_batch_records(batch):
                    if rec.value is None:
                        continue
                    m = read_value(bytes(rec.value)).metadata
                    if m.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
                        commit = m.state == TransactionState.PREPARE_COMMIT
                        for tp in m.topic_partitions:
                            self.decisions.add((m.producer_id, m.producer_epoch, tp, commit))

    def check(self) -> None:
        self._scan_decisions()
        for tp, leader in self.world.leaders.items():
            self._scan(self.views[tp], leader.log)
        self._check_atomicity()
        for tp, leader in self.world.leaders.items():
            self._check_lso(self.views[tp], leader.log)
            self._read(self.views[tp], leader.log)

    def _scan(self, v: PartitionView, log: Any) -> None:
        for h, batch in _batches(log, v.pos, log.log_end_offset):
            v.pos = h.next_offset
            if h.producer_id < 0:
                continue
            if h.is_control:
                marker = parse_end_txn_marker(batch, h._replace(position=0))
                if marker is None:
                    continue
                if (h.producer_id, h.producer_epoch, v.tp, marker.commit) not in self.decisions:
                    raise Violation(
                        f"{v.tp[0]}-{v.tp[1]}: {'COMMIT' if marker.commit else 'ABORT'} marker at {h.base_offset} "
                        f"(producer id {h.producer_id}, epoch {h.producer_epoch}) that no PrepareCommit/"
                        f"PrepareAbort record of __transaction_state decided"
                    )
                first, values = v.open.pop(h.producer_id, (-1, []))
                if first >= 0:
                    v.closed.append((first, h.base_offset))
                for value in values:
                    v.outcome[value] = marker.commit
                    self.tag_outcomes.setdefault(_tag(value), {}).setdefault(v.tp, set()).add(marker.commit)
                if values:
                    self.world.trace(f"{v.tp[0]}-{v.tp[1]}: {'COMMIT' if marker.commit else 'ABORT'} marker at "
                                     f"{h.base_offset} closes {sorted({_tag(x) for x in values})} "
                                     f"(coordinator epoch {marker.coordinator_epoch})")
            elif h.is_transactional:
                v.open.setdefault(h.producer_id, (h.base_offset, []))[1].extend(_values(batch))

    def _check_atomicity(self) -> None:
        for tag, by_tp in self.tag_outcomes.items():
            outcomes = set().union(*by_tp.values())
            if len(outcomes) > 1:
                raise Violation(f"torn transaction {tag}: " + ", ".join(
                    f"{t}-{p}: {sorted('COMMIT' if c else 'ABORT' for c in cs)}" for (t, p), cs in sorted(by_tp.items())))
            (commit,) = outcomes
            if commit and True not in self.end_sent.get(tag, set()):
                raise Violation(f"transaction {tag} committed but its producer never asked to commit it")
            acked = self.end_acked.get(tag)
            if acked is not None and acked != commit:
                raise Violation(f"transaction {tag}: EndTxn({'commit' if acked else 'abort'}) was acknowledged "
                                f"but its partitions got {'COMMIT' if commit else 'ABORT'}")

    def _check_lso(self, v: PartitionView, log: Any) -> None:
        lso, hw = log.last_stable_offset, log.high_watermark
        name = f"{v.tp[0]}-{v.tp[1]}"
        if lso < v.lso:
            raise Violation(f"{name}: the LSO went back from {v.lso} to {lso}")
        if lso > hw:
            raise Violation(f"{name}: the LSO {lso} is past the high watermark {hw}")
        if v.open:
            first = min(f for f, _ in v.open.values())
            if lso > first:
                raise Violation(f"{name}: the LSO {lso} passed the open transaction starting at {first}")
        # A transaction is decided once its marker is below the high watermark (replicated).
        v.closed = [(f, m) for f, m in v.closed if m >= hw]
        for first, marker in v.closed:
            if lso > first:
                raise Violation(f"{name}: the LSO {lso} passed the transaction starting at {first} whose "
                                f"marker at {marker} is not below the high watermark {hw}")
        v.lso = lso

    def _read(self, v: PartitionView, log: Any) -> None:
        if v.lso <= v.reader_pos:
            return
        visible, end = read_committed(log, v.reader_pos, v.lso)
        name = f"{v.tp[0]}-{v.tp[1]}"
        for value in visible:
            if value in v.seen:
                raise Violation(f"{name}: the read_committed reader saw {value} twice")
            if v.outcome.get(value) is not True:
                state = {None: "not decided", False: "aborted"}[v.outcome.get(value)]
                raise Violation(f"{name}: the read_committed reader saw {value}, which is {state}")
            v.seen.add(value)
        self.world.result.visible_records += len(visible)
        v.reader_pos = max(v.reader_pos, end)

    # -- once the faults stopped ---------------------------------------------------------------

    def check_liveness(self) -> None:
        w = self.world
        gen = w.current
        if gen is None or gen.state.loading:
            raise Violation("no coordinator serves the transactional ids at the end")
        stuck = [f"{m.transactional_id}: {m.state.state_name} (pending {m.pending_state})"
                 for m in gen.state.txns.values() if m.state not in COMPLETED_STATES or m.pending_state is not None]
        if stuck:
            raise Violation(f"transactions not completed after the faults stopped: {stuck}")
        if gen.markers is not None and gen.markers._tasks:
            raise Violation(f"markers still being sent at the end: {sorted(gen.markers._tasks)}")
        for leader in w.leaders.values():
            leader.advance_hw()
        self.check()
        for tp, leader in w.leaders.items():
            v, log = self.views[tp], leader.log
            name = f"{tp[0]}-{tp[1]}"
            if v.open:
                raise Violation(f"{name}: transactions still open at the end (pid: first offset): "
                                f"{ {p: f for p, (f, _) in v.open.items()} }")
            if log.last_stable_offset != log.log_end_offset:
                raise Violation(f"{name}: the LSO is stuck at {log.last_stable_offset}, the log ends at {log.log_end_offset}")
            committed = {value for value, c in v.outcome.items() if c}
            if v.seen != committed:
                raise Violation(f"{name}: the reader missed committed records {sorted(committed - v.seen)[:5]}")
            fresh, _ = read_committed(log, log.log_start_offset, log.last_stable_offset)
            if len(fresh) != len(set(fresh)) or set(fresh) != committed:
                raise Violation(f"{name}: a read_committed read from the start differs from the committed records")
        for tag, commit in self.end_acked.items():
            for value in self.acked.get(tag, []):
                tp_name = value.split("/")[1]
                topic, _, p = tp_name.rpartition("-")
                if self.views[(topic, int(p))].outcome.get(value) is not commit:
                    raise Violation(f"{tag} was acknowledged {'committed' if commit else 'aborted'} but {value} is not")
        outcomes = [next(iter(set().union(*by_tp.values()))) for by_tp in self.tag_outcomes.values()]
        w.result.committed = sum(1 for c in outcomes if c)
        w.result.aborted = sum(1 for c in outcomes if not c)
