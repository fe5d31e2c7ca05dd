"""Deterministic simulation of transactions: transactional producers, a transaction coordinator
(its generations fail over and reload ``__transaction_state``), and partition leaders.

The real cores run: ``TransactionCoordinator`` / ``TransactionStateManager`` /
``TransactionMarkerChannelManager`` (asyncio code, on the virtual-time :class:`SimLoop`), the
``__transaction_state`` serde and state machine, ``TxnPartitionApis.handle_write_txn_markers``,
and :class:`~odradek.log.log.Log` with its producer state, last stable offset and transaction
index (files in a temporary directory). Simulated: the network (loss, duplication, delay and so
reordering), the ``__transaction_state`` replication (acks arrive late, fail, time out with the
record written; a failover keeps any suffix of the unacknowledged records), the clock (jumps that
time transactions out), and the clients, which follow the client protocol (InitProducerId,
AddPartitionsToTxn / AddOffsetsToTxn, idempotent transactional produce with one request in flight
per partition, EndTxn; retries; crashes; zombies that wake up after a newer producer took their
transactional id; an epoch bump after a refused batch). In most schedules the partition leaders
verify transactional produce with the coordinator (KIP-890 part 1, the real ``TransactionVerifier``
and ``TxnPartitionApis.check_produce``). Transactional ids expire when the clock jumps.

Invariants, checked after every loop step that changed a log (:class:`Violation`):

* markers follow decisions: every COMMIT/ABORT marker matches a PrepareCommit/PrepareAbort
  record of ``__transaction_state`` for that producer id, epoch and partition;
* atomicity: every partition of a transaction gets the same marker (its records are tagged with
  the transaction, so a marker closing the wrong records shows too); a transaction whose client
  never asked to commit is never committed; one whose commit was acknowledged is never aborted,
  one whose abort was acknowledged never committed;
* a read_committed reader (fetching up to the LSO, filtering with the aborted-transactions list
  exactly as the Java client does) sees only committed records, each once;
* the LSO never decreases, never passes the high watermark nor the first offset of a transaction
  still open in the log (found by scanning the log, not from the producer state);

and once the faults stop (liveness): every transaction completes, the coordinator has nothing
pending, every LSO reaches the log end, and the reader has seen every committed record.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from odradek.coordinator.transaction.transaction_coordinator import (
    TransactionConfig,
    TransactionCoordinator,
)
from odradek.coordinator.transaction.transaction_log import TRANSACTION_STATE_TOPIC
from odradek.coordinator.transaction.transaction_marker_channel_manager import (
    TransactionMarkerChannelManager,
)
from odradek.coordinator.transaction.transaction_metadata import COMPLETED_STATES
from odradek.coordinator.transaction.transaction_state_manager import TransactionStateManager
from odradek.log.append_origin import AppendOrigin
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.protocol.errors import Errors
from odradek.records.builder import build_batch
from odradek.server.add_partitions_to_txn_manager import TransactionVerifier
from odradek.server.delayed_produce import ProducePartitionStatus
from odradek.server.txn_partition_apis import TxnPartitionApis

from .txn_world import (
    MarkerReplicaManager,
    Network,
    PartitionLeader,
    SimLoop,
    TopicPartition,
    Violation,
)

__all__ = ["Result", "Violation", "run_schedule"]

DATA_TPS: list[TopicPartition] = [("t", p) for p in range(4)]
OFFSETS_TP: TopicPartition = ("__consumer_offsets", 0)
ALL_TPS = DATA_TPS + [OFFSETS_TP]
BROKERS = 3
TXN_LOG_PARTITIONS = 2
TXN_TIMEOUT_MS = 4000
REQUEST_TIMEOUT_S = 1.0  # > the network's largest delay: an unanswered request is lost
FAULT_PHASE_S = 25.0
SETTLE_LIMIT_S = 120.0
RETRIABLE = frozenset({
    Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR, Errors.COORDINATOR_LOAD_IN_PROGRESS,
    Errors.CONCURRENT_TRANSACTIONS, Errors.REQUEST_TIMED_OUT, Errors.NOT_LEADER_OR_FOLLOWER,
    Errors.NOT_ENOUGH_REPLICAS,  # a verification that could not reach the coordinator
})
ABORTABLE = frozenset({Errors.TRANSACTION_ABORTABLE, Errors.INVALID_TXN_STATE})
FENCED = frozenset({Errors.PRODUCER_FENCED, Errors.INVALID_PRODUCER_EPOCH,
                    Errors.INVALID_PRODUCER_ID_MAPPING, Errors.TRANSACTION_COORDINATOR_FENCED})
TXN_CONFIG = TransactionConfig(
    num_partitions=TXN_LOG_PARTITIONS, abort_timed_out_interval_ms=500, remove_expired_interval_ms=700,
    transactional_id_expiration_ms=3 * TXN_TIMEOUT_MS // 2,  # clock jumps expire idle ids
    request_timeout_ms=int(REQUEST_TIMEOUT_S * 1000), retry_backoff_ms=50,
)


@dataclass
class Result:
    seed: int
    steps: int = 0
    committed: int = 0  # transactions committed
    aborted: int = 0
    coordinator_failovers: int = 0
    fenced_producers: int = 0
    fenced_markers: int = 0  # markers of a zombie coordinator refused (TRANSACTION_COORDINATOR_FENCED)
    timeouts: int = 0  # clock jumps
    visible_records: int = 0
    trace: list[str] = field(default_factory=list)


class ProducerIds:
    def __init__(self) -> None:
        self.next = 1000

    async def generate_producer_id(self) -> int:
        self.next += 1
        return self.next


# -- the coordinator, one generation per failover --------------------------------------------------


class TxnStateReplicaManager:
    """``__transaction_state`` as one coordinator generation sees it: appends are written at
    once and acknowledged (acks=-1) after a replication delay, or fail, or time out."""

    def __init__(self, world: World, gen: CoordinatorGen) -> None:
        self.world, self.gen = world, gen

    @property
    def partitions(self) -> dict[TopicPartition, Any]:
        return {(TRANSACTION_STATE_TOPIC, p): SimpleNamespace(log=lg) for p, lg in enumerate(self.world.txn_logs)}

    def append_records(self, timeout_ms: int, acks: int, entries: dict[TopicPartition, bytearray]) -> Any:
        world, gen, rng = self.world, self.gen, self.world.rng
        written: dict[TopicPartition, tuple[Errors, int]] = {}
        for tp, buf in entries.items():
            if not (gen.alive and gen.leader):
                written[tp] = (Errors.NOT_LEADER_OR_FOLLOWER, -1)
            elif world.faulty and rng.random() < 0.03:
                written[tp] = (Errors.NOT_ENOUGH_REPLICAS, -1)
            else:
                info = world.txn_logs[tp[1]].append_as_leader(buf, gen.epoch, world.clock_ms())
                written[tp] = (Errors.NONE, info.last_offset + 1)

        async def acked() -> dict[TopicPartition, ProducePartitionStatus]:
            await asyncio.sleep(rng.randint(1, 40) / 1000.0)
            out = {}
            for tp, (err, end) in written.items():
                if err == Errors.NONE:
                    if not gen.leader:
                        err = Errors.NOT_LEADER_OR_FOLLOWER
                    elif world.faulty and rng.random() < 0.03:
                        err = Errors.REQUEST_TIMED_OUT  # written, not (yet) durable
                    else:
                        world.txn_acked[tp[1]] = max(world.txn_acked[tp[1]], end)
                out[tp] = ProducePartitionStatus(err)
            await gen.thawed()  # a frozen coordinator handles the acknowledgement when it wakes up
            return out

        return acked()


class MarkerClient:
    """The marker sender's NetworkClient to one broker, over the simulated network."""

    def __init__(self, world: World, gen: CoordinatorGen, broker: int) -> None:
        self.world, self.gen, self.broker = world, gen, broker
        self.host, self.port = "sim", broker

    async def send(self, api: Any, version: int, body: dict[str, Any]) -> dict[str, Any]:
        world = self.world
        if world.faulty and world.current is self.gen and world.zombies_gen() is None and world.rng.random() < 0.03:
            world.failover_now(freeze=True)  # the worst moment: the markers are about to go out
        await self.gen.thawed()
        apis = self.world.marker_apis[self.broker]
        m = body["markers"][0]
        name = (f"WriteTxnMarkers({'COMMIT' if m['transaction_result'] else 'ABORT'} pid {m['producer_id']} "
                f"epoch {m['producer_epoch']} coord {m['coordinator_epoch']} -> broker {self.broker})")
        self.world.trace(name)
        result: dict[str, Any] = await self.world.net.request(name, lambda: apis.handle_write_txn_markers(None, body))  # type: ignore[arg-type]
        await self.gen.thawed()
        return result

    async def close(self) -> None:
        pass


class VerifyManager:
    """The partition leader's AddPartitionsToTxn (verify_only) to the coordinator, as
    ``AddPartitionsToTxnManager.verify`` answers: the partitions that failed."""

    def __init__(self, world: World, broker: int) -> None:
        self.world, self.broker = world, broker

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[TopicPartition],
        add: bool = False,
    ) -> dict[TopicPartition, Errors]:
        gen = self.world.find_coordinator(None)  # this broker's metadata: maybe a zombie
        if gen is None or not gen.alive:
            return dict.fromkeys(partitions, Errors.COORDINATOR_NOT_AVAILABLE)
        g = gen

        async def add_them() -> dict[TopicPartition, Errors]:  # AddPartitionsToTxn v5, not verify_only
            err = await g.coord.handle_add_partitions(transactional_id, producer_id, producer_epoch, set(partitions), 2)
            return dict.fromkeys(partitions, err)

        fut = self.world.net.request(
            f"AddPartitionsToTxn({'add' if add else 'verify'} {transactional_id} pid {producer_id} epoch "
            f"{producer_epoch} {sorted(partitions)}) -> coordinator {g.epoch}",
            (lambda: g.spawn(add_them())) if add else (
                lambda: g.coord.handle_verify_partitions(transactional_id, producer_id, producer_epoch, partitions, True)
            ),
            alive=lambda: g.alive,
        )
        try:
            answer: dict[TopicPartition, Errors] = await asyncio.wait_for(fut, REQUEST_TIMEOUT_S)
        except TimeoutError:
            return dict.fromkeys(partitions, Errors.NETWORK_EXCEPTION)
        return {tp: e for tp, e in answer.items() if e != Errors.NONE}


class SimMetadata:
    def __init__(self, world: World) -> None:
        self.world = world

    def contains_topic(self, topic: str) -> bool:
        return topic in {t for t, _ in ALL_TPS}

    def get_partition_info(self, topic: str, partition: int) -> Any:
        tp = (topic, partition)
        return SimpleNamespace(leader=self.world.broker_of(tp)) if tp in self.world.leaders else None

    def get_alive_broker_node(self, broker_id: int, listener: str) -> Any:
        return SimpleNamespace(id=broker_id, host="sim", port=broker_id)


class CoordinatorGen:
    """One incarnation of the coordinator of every ``__transaction_state`` partition; its
    coordinator epoch is its generation number."""

    def __init__(self, world: World, epoch: int) -> None:
        self.world, self.epoch = world, epoch
        self.alive = True
        self.leader = True
        self.paused_until = -1.0  # a frozen zombie (a long GC pause, a stopped VM)
        self.tasks: set[asyncio.Task[Any]] = set()
        self.state = TransactionStateManager(
            replica_manager=TxnStateReplicaManager(world, self),  # type: ignore[arg-type]
            num_partitions=TXN_LOG_PARTITIONS, clock_ms=world.clock_ms,
            append_timeout_ms=int(REQUEST_TIMEOUT_S * 1000), transaction_version=lambda: world.finalized_tv,
        )
        self.markers: TransactionMarkerChannelManager | None = None

        def markers(on_complete: Any) -> TransactionMarkerChannelManager:
            self.markers = TransactionMarkerChannelManager(
                metadata_cache=SimMetadata(world), listener_name=lambda: "SIM", on_complete=on_complete,
                client_factory=lambda host, port: MarkerClient(world, self, port),  # type: ignore[arg-type,return-value]
                retry_backoff_ms=50, request_timeout_ms=int(REQUEST_TIMEOUT_S * 1000),
            )
            return self.markers

        self.coord = TransactionCoordinator(
            config=TXN_CONFIG, state_manager=self.state, producer_ids=world.pids, markers=markers,
            clock_ms=world.clock_ms,
        )

    async def thawed(self) -> None:
        """Returns once the generation is not frozen."""
        pause = self.paused_until - self.world.loop.time()
        if pause > 0:
            await asyncio.sleep(pause)

    def start(self) -> None:
        for p in range(TXN_LOG_PARTITIONS):
            self.state.schedule_load(p, self.epoch)
        self.coord.startup()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = self.world.loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def crash(self) -> None:
        """The process dies: nothing it was doing goes on (what it sent is still delivered)."""
        self.alive = self.leader = False
        doomed = list(self.tasks) + list(self.coord._tasks) + list(self.state._load_tasks.values())
        if self.markers is not None:
            doomed += [t for t, _ in self.markers._tasks.values()]
            self.markers._closed = True
        for t in doomed:
            t.cancel()

    def resign(self) -> None:
        """The zombie hears that it lost the leadership of its partitions."""
        for p in range(TXN_LOG_PARTITIONS):
            self.state.on_leadership_change(TRANSACTION_STATE_TOPIC, p, False, self.epoch)
        self.crash()


# -- the clients ---------------------------------------------------------------------------------


@dataclass
class Instance:
    tid: str
    number: int
    task: asyncio.Task[None] | None = None
    paused_until: float = -1.0  # a zombie: sleeps, then goes on with its old epoch
    done: bool = False


class World:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.trace_all = bool(os.environ.get("ODRADEK_SIM_TRACE_ALL"))  # every message in the trace
        self.rng = random.Random(seed)
        self.result = Result(seed)
        self.loop = SimLoop()
        self.loop.after_step = self.after_step
        self.dir = tempfile.mkdtemp(prefix="odradek-txnsim-")
        self.jump_ms = 0
        self.faulty = True
        self.dirty = False
        self.crashed: list[BaseException] = []
        self.net = Network(self)
        self.pids = ProducerIds()
        self.leaders: dict[TopicPartition, PartitionLeader] = {
            tp: PartitionLeader(self, f"{self.dir}/{tp[0]}-{tp[1]}", tp) for tp in ALL_TPS
        }
        # KIP-890 part 1 (transaction.partition.verification.enable, Kafka's default) in most
        # schedules: the partition leaders verify a transactional producer's first append.
        self.verification = self.rng.random() < 0.7
        # Transactions version 2 (KIP-890 part 2) producers in some schedules: no AddPartitionsToTxn
        # (the partition leader has the coordinator add the partition), an epoch bump at each EndTxn.
        self.tv2_share = self.rng.choice([0.0, 0.5, 1.0])
        # The finalized transaction.version (2 wherever version-2 producers run: the level they
        # need; it makes the coordinator write the flexible __transaction_state value that keeps
        # the client's transaction version across a reload).
        self.finalized_tv = 2 if self.tv2_share > 0 else self.rng.choice([0, 1, 2])
        self.marker_apis = {
            b: TxnPartitionApis(
                MarkerReplicaManager(self, b), lambda: 1000,  # type: ignore[arg-type]
                TransactionVerifier(VerifyManager(self, b), lambda: self.verification),  # type: ignore[arg-type]
            )
            for b in range(BROKERS)
        }
        self.txn_logs = [
            Log.load(f"{self.dir}/{TRANSACTION_STATE_TOPIC}-{p}", LogConfig(), now_ms=self.clock_ms())
            for p in range(TXN_LOG_PARTITIONS)
        ]
        self.txn_acked = [0] * TXN_LOG_PARTITIONS
        self.gens: list[CoordinatorGen] = []
        self.current: CoordinatorGen | None = None
        self.tids = [f"txn-{i}" for i in range(self.rng.randint(2, 4))]
        self.txns_per_tid = self.rng.randint(3, 6)
        self.attempts: dict[str, int] = dict.fromkeys(self.tids, 0)
        self.instances: dict[str, Instance] = {}
        self.zombies: list[Instance] = []
        self.oracle = Oracle(self)

    # -- helpers ------------------------------------------------------------------------------

    def clock_ms(self) -> int:
        return 1_000_000 + int(self.loop.time() * 1000) + self.jump_ms

    def broker_of(self, tp: TopicPartition) -> int:
        return ALL_TPS.index(tp) % BROKERS

    def trace(self, text: str) -> None:
        trace = self.result.trace
        trace.append(f"{self.loop.time():9.3f} {text}")
        if len(trace) > 4000:
            del trace[:2000]

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        return self.loop.create_task(coro)

    def after_step(self) -> None:
        self.result.steps += 1
        if self.crashed:
            if isinstance(self.crashed[0], Violation):
                raise self.crashed[0]
            raise Violation(f"a handler crashed: {self.crashed[0]!r}") from self.crashed[0]
        if self.dirty:
            self.dirty = False
            self.oracle.check()

    # -- the coordinator ------------------------------------------------------------------------

    def start_generation(self) -> None:
        for p, lg in enumerate(self.txn_logs):  # the new leader has any suffix of the unacked records
            keep = self.rng.randint(self.txn_acked[p], lg.log_end_offset)
            if keep < lg.log_end_offset:
                self.trace(f"__transaction_state-{p}: unacknowledged records from {keep} lost in the failover")
                lg.truncate_to(keep)
                self.oracle.txn_log_truncated(p, keep)
            lg.high_watermark = lg.log_end_offset
            self.txn_acked[p] = lg.log_end_offset
        gen = CoordinatorGen(self, len(self.gens) + 1)
        self.gens.append(gen)
        self.current = gen
        self.trace(f"coordinator generation {gen.epoch} loads __transaction_state")
        gen.start()

    def failover_now(self, freeze: bool) -> None:
        """The current generation loses leadership but still runs (a zombie: it sends markers)
        until it hears of it; frozen meanwhile, maybe (a long GC pause), so that what it was
        doing goes out late."""
        old = self.current
        assert old is not None
        self.result.coordinator_failovers += 1
        old.leader = False
        pause = self.rng.uniform(0.5, 4.0) if freeze else 0.0
        old.paused_until = self.loop.time() + pause
        self.trace(f"coordinator generation {old.epoch} loses leadership (zombie for a while"
                   + (f", frozen for {pause:.3f} s)" if pause else ")"))
        self.loop.call_later(pause + self.rng.uniform(0.1, 3.0), old.resign)
        self.start_generation()

    async def failover(self, zombie: bool) -> None:
        old = self.current
        assert old is not None
        if zombie:
            self.failover_now(freeze=self.rng.random() < 0.5)
            return
        self.result.coordinator_failovers += 1
        self.trace(f"coordinator generation {old.epoch} crashes")
        old.crash()
        self.current = None
        await asyncio.sleep(self.rng.uniform(0.05, 1.5))
        self.start_generation()

    def find_coordinator(self, known: CoordinatorGen | None) -> CoordinatorGen | None:
        """FindCoordinator: the current generation, or (a broker with stale metadata answers)
        the zombie one; never older than the one the client already knows (clients do not go
        back: a transactions-version-1 client that did could be told by a zombie that an
        EndTxn it retried is done, as with Kafka)."""
        gen = self.current
        zombie = self.zombies_gen()
        if zombie is not None and self.rng.random() < 0.3:
            gen = zombie
        if gen is not None and known is not None and gen.epoch < known.epoch:
            gen = known
        return gen

    async def call_coordinator(self, client: Any, name: str, method: str, *args: Any) -> Any:
        """A request to the client's coordinator; a connection error or NOT_COORDINATOR makes
        it look the coordinator up again."""
        gen = client.coordinator
        if gen is None or not gen.alive:
            client.coordinator = gen = self.find_coordinator(gen)
        if gen is None or not gen.alive:
            await asyncio.sleep(0.05)
            return Errors.COORDINATOR_NOT_AVAILABLE
        g = gen
        fut = self.net.request(f"{name} -> coordinator {g.epoch}", lambda: g.spawn(getattr(g.coord, method)(*args)),
                               alive=lambda: g.alive)
        try:
            r = await asyncio.wait_for(fut, REQUEST_TIMEOUT_S)
        except TimeoutError:
            r = Errors.REQUEST_TIMED_OUT
        err = r if isinstance(r, Errors) else r.error
        client.answered_by_zombie = not g.leader
        if err in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE, Errors.REQUEST_TIMED_OUT):
            client.coordinator = self.find_coordinator(g)
        return r

    def zombies_gen(self) -> CoordinatorGen | None:
        for g in self.gens:
            if g.alive and not g.leader:
                return g
        return None

    # -- producers ----------------------------------------------------------------------------

    def start_instance(self, tid: str) -> None:
        inst = Instance(tid, self.oracle.instances.get(tid, 0))
        self.oracle.instances[tid] = inst.number + 1
        self.instances[tid] = inst
        inst.task = self.spawn(Producer(self, inst).run())

    async def produce(
        self, tid: str, tp: TopicPartition, pid: int, epoch: int, seq: int, values: list[str], tv2: bool
    ) -> Errors:
        now = self.clock_ms()
        buf = build_batch([(None, v.encode(), [], now) for v in values], producer_id=pid,
                          producer_epoch=epoch, base_sequence=seq, is_transactional=True)

        async def handle(data: bytearray) -> Errors:
            check = self.marker_apis[self.broker_of(tp)].check_produce(tid, {tp: data}, tv2, 12 if tv2 else 11)
            if isinstance(check, Errors):
                return check
            if check is not None:
                refused = await check
                if tp in refused:
                    return refused[tp][0]
            err, offset = self.leaders[tp].append(data, AppendOrigin.CLIENT)
            if err == Errors.NONE:
                await self.leaders[tp].replicated(offset)
            return err

        fut = self.net.request(f"Produce {tp[0]}-{tp[1]} pid {pid} epoch {epoch} seq {seq}",
                               lambda: self.spawn(handle(bytearray(buf))))
        try:
            result: Errors = await asyncio.wait_for(fut, REQUEST_TIMEOUT_S)
            return result
        except TimeoutError:
            return Errors.REQUEST_TIMED_OUT

    # -- the schedule -------------------------------------------------------------------------

    async def main(self) -> None:
        rng = self.rng
        self.net.faults.loss = rng.choice([0.0, 0.02, 0.08])
        self.net.faults.duplicate = rng.choice([0.0, 0.05, 0.15])
        self.start_generation()
        for tid in self.tids:
            self.start_instance(tid)
        while self.loop.time() < FAULT_PHASE_S:
            await asyncio.sleep(rng.uniform(0.02, 0.4))
            self.restart_finished_instances()
            fault = rng.random()
            if fault < 0.012 and self.current is not None and self.zombies_gen() is None:
                await self.failover(zombie=rng.random() < 0.5)
            elif fault < 0.03:
                self.kill_producer(zombie=rng.random() < 0.4)
            elif fault < 0.036:
                self.result.timeouts += 1
                self.jump_ms += TXN_TIMEOUT_MS + rng.randint(0, 2000)
                self.trace(f"clock jumps to {self.clock_ms()}")
            elif fault < 0.04:
                tp = rng.choice(ALL_TPS)
                self.trace(f"leader of {tp[0]}-{tp[1]} restarts")
                self.leaders[tp].restart()
        # Heal: the faults stop; every transaction must complete.
        self.faulty = False
        self.net.faults.loss = self.net.faults.duplicate = 0.0
        self.trace("faults stop")
        if self.current is None:
            self.start_generation()
        while self.loop.time() < FAULT_PHASE_S + SETTLE_LIMIT_S:
            await asyncio.sleep(0.5)
            self.restart_finished_instances()
            if all(i.done and self.attempts[t] >= self.txns_per_tid for t, i in self.instances.items()) \
                    and not self.zombies and self.settled():
                break
        await asyncio.sleep((TXN_TIMEOUT_MS + 2000) / 1000.0)
        for _ in range(100):  # a transition under way (an expiring id's tombstone) ends first
            gen = self.current
            if gen is None or not any(m.pending_state is not None for m in gen.state.txns.values()):
                break
            await asyncio.sleep(0.1)
        self.oracle.check_liveness()

    def settled(self) -> bool:
        gen = self.current
        if gen is None or gen.state.loading or (gen.markers is not None and gen.markers._tasks):
            return False
        return all(m.state in COMPLETED_STATES and m.pending_state is None for m in gen.state.txns.values())

    def restart_finished_instances(self) -> None:
        for tid, inst in self.instances.items():
            if inst.done and self.attempts[tid] < self.txns_per_tid:
                self.start_instance(tid)

    def kill_producer(self, zombie: bool) -> None:
        live = [i for i in self.instances.values() if not i.done]
        if not live:
            return
        inst = self.rng.choice(live)
        if zombie:
            self.trace(f"producer {inst.tid}#{inst.number} pauses (a zombie); a new one takes its id")
            inst.paused_until = self.loop.time() + self.rng.uniform(1.0, 8.0)
            self.zombies.append(inst)
        else:
            self.trace(f"producer {inst.tid}#{inst.number} crashes")
            assert inst.task is not None
            inst.task.cancel()
            inst.done = True
        self.start_instance(inst.tid)


class Producer:
    """A transactional producer as the clients implement it (transactions version 1)."""

    def __init__(self, world: World, inst: Instance) -> None:
        self.world, self.inst = world, inst
        self.rng = world.rng
        self.pid = -1
        self.epoch = -1
        self.seq: dict[TopicPartition, int] = {}
        self.name = f"{inst.tid}#{inst.number}"
        self.coordinator: CoordinatorGen | None = None
        self.tv2 = self.rng.random() < world.tv2_share
        self.answered_by_zombie = False  # the last coordinator answer came from a deposed one

    async def run(self) -> None:
        try:
            await self._run()
        except Violation as e:
            self.world.crashed.append(e)
        finally:
            self.inst.done = True
            if self.inst in self.world.zombies:
                self.world.zombies.remove(self.inst)

    async def checkpoint(self) -> None:
        """Where a zombie sleeps."""
        if self.inst.paused_until > self.world.loop.time():
            await asyncio.sleep(self.inst.paused_until - self.world.loop.time())
            self.world.trace(f"zombie producer {self.name} wakes up (pid {self.pid} epoch {self.epoch})")

    async def _retry(self, name: str, method: str, *args: Any) -> Errors:
        for _ in range(400):
            await self.checkpoint()
            r = await self.world.call_coordinator(self, f"{name} {self.name}", method, *args)
            if self.world.trace_all:
                self.world.trace(f"{name} {self.name} {args[1:]} -> {r}")
            err = r if isinstance(r, Errors) else r.error  # InitResult, EndTxnResult
            if err not in RETRIABLE:
                if not isinstance(r, Errors) and err == Errors.NONE and r.producer_id >= 0:
                    if (r.producer_id, r.producer_epoch) != (self.pid, self.epoch):
                        self.seq.clear()  # a new epoch: sequences start again
                    self.pid, self.epoch = r.producer_id, r.producer_epoch
                return Errors(err)
            await asyncio.sleep(0.05)
        raise Violation(f"{name} of {self.name} still retried after 400 attempts")

    async def _run(self) -> None:
        w, tid = self.world, self.inst.tid
        err = await self._retry("InitProducerId", "handle_init_producer_id", tid, TXN_TIMEOUT_MS)
        if err != Errors.NONE:
            w.trace(f"producer {self.name}: InitProducerId {err.name}")
            return
        w.trace(f"producer {self.name}: pid {self.pid} epoch {self.epoch}")
        while w.attempts[tid] < w.txns_per_tid:
            if self.inst.paused_until < 0 and w.instances.get(tid) is not self.inst:
                return
            w.attempts[tid] += 1
            tag = f"{self.name}.{w.attempts[tid]}"
            if not await self.transaction(tag):
                return

    async def transaction(self, tag: str) -> bool:
        w, rng, tid = self.world, self.rng, self.inst.tid
        oracle = w.oracle
        parts = sorted(rng.sample(DATA_TPS, rng.randint(1, 3)))
        offsets = rng.random() < 0.3
        if not self.tv2:  # with transactions version 2 the partition leaders add the partitions
            err = await self._retry("AddPartitionsToTxn", "handle_add_partitions", tid, self.pid, self.epoch, set(parts))
            if err != Errors.NONE:
                return self._fatal(tag, "AddPartitionsToTxn", err)
            if offsets:  # AddOffsetsToTxn: the group's __consumer_offsets partition joins
                err = await self._retry("AddOffsetsToTxn", "handle_add_partitions", tid, self.pid, self.epoch,
                                        {OFFSETS_TP})
                if err != Errors.NONE:
                    return self._fatal(tag, "AddOffsetsToTxn", err)
        if offsets:
            parts.append(OFFSETS_TP)
        abortable = False
        for tp in parts:
            for b in range(rng.randint(1, 2)):
                values = [f"{tag}/{tp[0]}-{tp[1]}/{b}/{i}" for i in range(rng.randint(1, 3))]
                err = await self.produce(tp, values)
                if err in ABORTABLE:  # the verification refused it: the transaction must abort
                    w.trace(f"producer {self.name}: Produce to {tp[0]}-{tp[1]} {err.name}: aborting {tag}")
                    abortable = True
                    break
                if err != Errors.NONE:
                    return self._fatal(tag, f"Produce to {tp[0]}-{tp[1]}", err)
                oracle.acked.setdefault(tag, []).extend(values)
                await self.checkpoint()
            if abortable:
                break
        commit = not abortable and rng.random() < 0.7
        oracle.end_sent.setdefault(tag, set()).add(commit)
        pid, epoch = self.pid, self.epoch  # a retry repeats the request (the epoch before a bump)
        for copy in range(2 if rng.random() < 0.2 else 1):  # a duplicated EndTxn (a retry)
            err = await self._retry("EndTxn", "handle_end_txn", tid, pid, epoch, commit, 2 if self.tv2 else 0)
            if err != Errors.NONE:
                return self._fatal(tag, "EndTxn", err)
            oracle.end_acked[tag] = commit
            w.trace(f"producer {self.name}: {tag} {'committed' if commit else 'aborted'}" + (" again" if copy else ""))
        if abortable and not self.tv2:  # (version 2: EndTxn bumped the epoch already)
            # A refused batch may or may not be in the log: the sequences are reset with an
            # epoch bump (KIP-360: InitProducerId with the current producer id and epoch).
            err = await self._retry("InitProducerId", "handle_init_producer_id", tid, TXN_TIMEOUT_MS,
                                    self.pid, self.epoch)
            if err != Errors.NONE:
                return self._fatal(tag, "InitProducerId (epoch bump)", err)
            self.seq.clear()
            w.trace(f"producer {self.name}: epoch bumped to {self.epoch}")
        return True

    async def produce(self, tp: TopicPartition, values: list[str]) -> Errors:
        seq = self.seq.get(tp, 0)
        for _ in range(400):
            await self.checkpoint()
            err = await self.world.produce(self.inst.tid, tp, self.pid, self.epoch, seq, values, self.tv2)
            if err == Errors.NONE:
                self.seq[tp] = seq + len(values)
                return err
            if err not in RETRIABLE:
                return err
            await asyncio.sleep(0.05)
        raise Violation(f"Produce of {self.name} still retried after 400 attempts")

    def _fatal(self, tag: str, what: str, err: Errors) -> bool:
        # A deposed coordinator that has not heard of it yet answers from what it knew: a
        # transactions-version-2 producer (whose partitions were added through the new one) is
        # told INVALID_TXN_STATE, fatal for the client, safe for the data (as with Kafka).
        stale = err == Errors.INVALID_TXN_STATE and self.answered_by_zombie
        if err not in FENCED and not stale:
            raise Violation(f"producer {self.name} ({tag}): {what} answered {err.name}")
        self.world.result.fenced_producers += 1
        self.world.trace(f"producer {self.name}: {what} {err.name}: fenced")
        return False


from .txn_oracle import Oracle  # noqa: E402  (it imports this module's constants)


def run_schedule(seed: int) -> Result:
    world = World(seed)
    try:
        world.loop.run_until_complete(world.main())
    except Violation as e:
        raise Violation(f"{e}\ntrace (last events):\n" + "\n".join(world.result.trace[-60:])) from None
    finally:
        tasks = asyncio.all_tasks(world.loop)
        for task in tasks:
            task.cancel()
        world.loop.after_step = lambda: None
        world.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        world.loop.close()
        for p in world.leaders.values():
            p.log.close()
        for lg in world.txn_logs:
            lg.close()
        shutil.rmtree(world.dir, ignore_errors=True)
    return world.result
