"""The pieces of the transaction simulation (tests/sim/txn_sim.py): a virtual-time asyncio loop,
a seeded faulty network, partition leaders on real :class:`~odradek.log.log.Log` s, and the
``__transaction_state`` partitions a coordinator generation writes to and a new one reloads.

The transaction coordinator is asyncio code (``TransactionCoordinator``,
``TransactionStateManager``, ``TransactionMarkerChannelManager``): rather than rewrite it, it runs
unchanged on :class:`SimLoop`, an event loop whose clock is virtual and whose selector never
blocks (waiting for I/O advances the virtual time to the next timer). Nothing else runs on that
loop, no real socket is read, and the loop's ready queue and timer heap are FIFO/ordered, so a
seed determines everything.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from odradek.log.append_origin import AppendOrigin
from odradek.log.errors import LogError
from odradek.log.log import Log
from odradek.log.log_config import LogConfig
from odradek.protocol.errors import Errors
from odradek.server.delayed_produce import ProducePartitionStatus

TopicPartition = tuple[str, int]


class Violation(AssertionError):
    """An invariant of the transaction simulation does not hold."""


# -- the virtual-time loop -------------------------------------------------------------------------


class _VirtualSelector(selectors.BaseSelector):
    """Registers what the loop asks (its self-pipe) and never waits: ``select(timeout)`` moves
    the virtual clock by ``timeout`` instead."""

    def __init__(self) -> None:
        self._keys: dict[int, selectors.SelectorKey] = {}
        self.loop: SimLoop | None = None

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._keys[fd] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._keys.pop(fd)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        self.unregister(fileobj)
        return self.register(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        assert self.loop is not None
        if timeout is None:
            raise RuntimeError("the simulation is idle: nothing scheduled and nothing ready")
        if timeout > 0:
            self.loop.virtual_time += timeout
        return []

    def get_map(self) -> Any:
        return self._keys

    def close(self) -> None:
        self._keys.clear()


class SimLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time; ``after_step`` runs after every loop iteration."""

    def __init__(self) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        selector.loop = self
        self.virtual_time = 0.0
        self.after_step: Callable[[], None] = lambda: None

    def time(self) -> float:
        return self.virtual_time

    def _run_once(self) -> None:  # the loop's step (CPython's BaseEventLoop._run_once)
        super()._run_once()  # type: ignore[misc]
        self.after_step()


# -- the network -------------------------------------------------------------------------------


@dataclass
class NetFaults:
    loss: float = 0.0  # a request or an answer dropped
    duplicate: float = 0.0  # a request handled twice (before it is answered)
    max_delay_ms: int = 150  # every message takes 1..max_delay_ms: messages overtake each other


class Network:
    """Requests to a handler and their answers, each delayed, maybe lost or duplicated.

    As over TCP with request timeouts longer than ``max_delay_ms``, no copy of a request is
    handled after its sender got the answer or gave up on it: a duplicate is handled right after
    the original, and an unanswered request is lost, not late.
    """

    def __init__(self, world: Any) -> None:
        self.world = world
        self.faults = NetFaults()

    def _delay(self) -> float:
        return self.world.rng.randint(1, self.faults.max_delay_ms) / 1000.0

    def request(
        self, name: str, handler: Callable[[], Awaitable[Any] | Any], alive: Callable[[], bool] = lambda: True
    ) -> asyncio.Future[Any]:
        """Send a request; the future gets the answer (never, when lost: the sender times out)."""
        loop = self.world.loop
        fut: asyncio.Future[Any] = loop.create_future()
        rng = self.world.rng
        if rng.random() < self.faults.loss:
            self.world.trace(f"lost {name}")
            return fut
        if self.world.trace_all:
            self.world.trace(f"send {name}")
        copies = 2 if rng.random() < self.faults.duplicate else 1
        lose_answer = rng.random() < self.faults.loss
        answer_delay = self._delay()

        def deliver() -> None:
            if not alive():
                return
            results = []
            try:
                for _ in range(copies):
                    results.append(handler())
            except Exception as e:
                self.world.crashed.append(e)
                return
            if copies > 1:
                self.world.trace(f"duplicated {name}")
            first = results[0]
            for extra in results[1:]:
                if asyncio.iscoroutine(extra):
                    self.world.spawn(extra)
            if asyncio.iscoroutine(first) or isinstance(first, asyncio.Future):
                task = asyncio.ensure_future(first)
                task.add_done_callback(lambda t: answer(t.result() if not t.cancelled() and t.exception() is None else t))
            else:
                answer(first)

        def answer(result: Any) -> None:
            if isinstance(result, asyncio.Future):  # the handler failed: no answer
                if not result.cancelled() and result.exception() is not None:
                    self.world.crashed.append(result.exception())
                return
            if lose_answer or not alive():
                return
            def resolve() -> None:
                if not fut.done():
                    fut.set_result(result)

            loop.call_later(answer_delay, resolve)

        loop.call_later(self._delay(), deliver)
        return fut


# -- partition leaders ---------------------------------------------------------------------------


class PartitionLeader:
    """One data partition (a single replica): a real Log; its high watermark follows the log end
    after a seeded replication delay, and acks=-1 appends are answered once it has passed."""

    def __init__(self, world: Any, directory: str, tp: TopicPartition) -> None:
        self.world = world
        self.tp = tp
        self.directory = directory
        self.log = Log.load(directory, LogConfig(), now_ms=world.clock_ms())
        self.waiting: list[tuple[int, asyncio.Future[None]]] = []
        self.leader_epoch = 0
        self.leader_id = world.broker_of(tp)

    def append(self, buf: bytearray, origin: AppendOrigin) -> tuple[Errors, int]:
        """(error, offset to wait for: the HW must pass it)."""
        try:
            info = self.log.append_as_leader(buf, self.leader_epoch, self.world.clock_ms(), origin)
        except LogError as e:
            return Errors(e.error_code), -1
        self.world.dirty = True
        if info.num_batches:
            self.world.loop.call_later(
                self.world.rng.randint(0, 60) / 1000.0, self.advance_hw
            )
        return Errors.NONE, info.last_offset + 1

    def advance_hw(self) -> None:
        leo = self.log.log_end_offset
        if self.log.high_watermark < leo:
            self.log.high_watermark = leo
            self.world.dirty = True
        still = []
        for offset, fut in self.waiting:
            if self.log.high_watermark >= offset:
                if not fut.done():
                    fut.set_result(None)
            else:
                still.append((offset, fut))
        self.waiting = still

    async def replicated(self, offset: int) -> None:
        if self.log.high_watermark >= offset:
            return
        fut: asyncio.Future[None] = self.world.loop.create_future()
        self.waiting.append((offset, fut))
        await fut

    def restart(self) -> None:
        """The leader process restarts: the log is reopened (producer state and transaction
        index recovered from the files) after an unclean shutdown."""
        hw = self.log.high_watermark
        self.log.close()
        self.log = Log.load(self.directory, LogConfig(), now_ms=self.world.clock_ms(),
                            clean_shutdown=False, high_watermark=hw)
        for _, fut in self.waiting:
            fut.cancel()
        self.waiting = []
        self.leader_epoch += 1
        apis = self.world.marker_apis[self.leader_id]
        for listener in apis.replica_manager.leadership_listeners:  # the verifier forgets
            listener(self.tp[0], self.tp[1], True, self.leader_epoch)
        self.world.dirty = True


class MarkerReplicaManager:
    """What ``TxnPartitionApis.handle_write_txn_markers`` needs of a ReplicaManager, over the
    simulated partition leaders of one broker."""

    def __init__(self, world: Any, broker: int) -> None:
        self.world = world
        self.broker = broker
        self.node_id = broker
        self.txn_marker_listeners: list[Callable[[str, int, int, bool], None]] = []
        self.leadership_listeners: list[Any] = []

    @property
    def partitions(self) -> dict[TopicPartition, Any]:
        return {tp: p for tp, p in self.world.leaders.items() if self.world.broker_of(tp) == self.broker}

    def clock_ms(self) -> int:
        return int(self.world.clock_ms())

    def append_records(
        self, timeout_ms: int, acks: int, entries: dict[TopicPartition, bytearray | None],
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> Awaitable[dict[TopicPartition, ProducePartitionStatus]]:
        results: dict[TopicPartition, tuple[Errors, int]] = {}
        for tp, buf in entries.items():
            assert buf is not None
            results[tp] = self.world.leaders[tp].append(buf, origin)
            if results[tp][0] == Errors.TRANSACTION_COORDINATOR_FENCED:
                self.world.result.fenced_markers += 1
                self.world.trace(f"{tp[0]}-{tp[1]}: a marker from an old coordinator epoch is fenced")

        async def acked() -> dict[TopicPartition, ProducePartitionStatus]:
            out = {}
            for tp, (err, offset) in results.items():
                if err == Errors.NONE:
                    await self.world.leaders[tp].replicated(offset)
                out[tp] = ProducePartitionStatus(err)
            return out

        return self.world.loop.create_task(acked())
