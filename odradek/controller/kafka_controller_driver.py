"""The asyncio shell of the ZooKeeper-mode controller (Kafka's ``ControllerEventThread``).

Events are processed one at a time, in order, on a single worker thread, so that kazoo's blocking
calls (every state machine step reads or writes ZooKeeper) stay off the event loop. ``put`` may be
called from any thread (the loop's channel-manager callbacks, kazoo's watch dispatcher); the queue
is locked only to add and take events, never while one is processed. Timers (the auto-rebalance
task) are ``loop.call_later`` handles that put an event.

A ZooKeeper session that expires: ``on_session_expiring`` clears the queue (pending events are
preempted: their callbacks answer NOT_CONTROLLER) and puts Expire (the controller resigns);
``on_session_established`` puts RegisterBrokerAndReelect (Kafka's ControllerHandler).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from odradek.controller import controller_event_manager as ev
from odradek.controller.controller_channel_manager import (
    ConnectionFactory,
    ControllerChannelManager,
    network_connection_factory,
)
from odradek.controller.controller_event_manager import ControllerEventQueue, QueuedEvent
from odradek.controller.kafka_controller import KafkaController, KafkaControllerConfig
from odradek.controller.kafka_zk_adapter import ControllerSessionHandler, KafkaControllerZkAdapter
from odradek.zk.kafka_zk_client import KafkaZkClient

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class _LockedQueue(ControllerEventQueue):
    def __init__(self, controller_id: int, processor: ev.ControllerEventProcessor, lock: threading.Lock) -> None:
        super().__init__(controller_id, processor)
        self._lock = lock

    def put(self, event: ev.ControllerEvent, now_ms: int) -> QueuedEvent:
        with self._lock:
            return super().put(event, now_ms)

    def poll(self) -> QueuedEvent | None:
        with self._lock:
            return super().poll()

    def clear_and_put(self, event: ev.ControllerEvent, now_ms: int) -> QueuedEvent:
        with self._lock:
            drained = list(self._queue)
            self._queue.clear()
        for q in drained:
            try:
                q.preempt(self.processor)
            except Exception as e:
                log.error("Error preempting event %r: %r", q.event, e)
        return self.put(event, now_ms)


class LoopScheduler:
    """ControllerScheduler on an event loop: ``schedule`` from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, put: Callable[[ev.ControllerEvent], None]) -> None:
        self.loop = loop
        self.put = put
        self._handles: set[asyncio.TimerHandle] = set()

    def schedule(self, delay_s: float, event: ev.ControllerEvent) -> None:
        def arm() -> None:
            handle: asyncio.TimerHandle

            def fire() -> None:
                self._handles.discard(handle)
                self.put(event)

            handle = self.loop.call_later(delay_s, fire)
            self._handles.add(handle)

        self.loop.call_soon_threadsafe(arm)

    def cancel_all(self) -> None:
        def cancel() -> None:
            for h in self._handles:
                h.cancel()
            self._handles.clear()

        self.loop.call_soon_threadsafe(cancel)


class ControllerEventManager:
    """Runs a processor's events on a worker thread, driven by an asyncio task."""

    def __init__(self, controller_id: int, processor: ev.ControllerEventProcessor,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self.queue = _LockedQueue(controller_id, processor, self._lock)
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"controller-event-thread-{controller_id}")
        self._task: asyncio.Task[None] | None = None

    def _wake(self) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self._wakeup.set()
        else:
            self.loop.call_soon_threadsafe(self._wakeup.set)

    def put(self, event: ev.ControllerEvent) -> None:
        self.queue.put(event, _now_ms())
        self._wake()

    def clear_and_put(self, event: ev.ControllerEvent) -> None:
        self.queue.clear_and_put(event, _now_ms())
        self._wake()

    def start(self) -> None:
        self._task = self.loop.create_task(self._run(), name="controller-event-manager")

    async def _run(self) -> None:
        while True:
            if self.queue.is_empty():
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            event = await self.loop.run_in_executor(self._executor, self._process_one)
            if isinstance(event, ev.ShutdownEventThread):
                return

    def _process_one(self) -> ev.ControllerEvent | None:
        return self.queue.process_next(_now_ms(), _now_ms)

    async def close(self) -> None:
        """Put ShutdownEventThread (after the queued events) and wait for the worker to stop."""
        if self._task is not None:
            self.clear_and_put(ev.ShutdownEventThread())
            await self._task
            self._task = None
        self._executor.shutdown(wait=True)

    # ZooKeeper session (Kafka's ControllerHandler / the broker's state change handler)
    def on_session_expiring(self) -> None:
        self.clear_and_put(ev.Expire())

    def on_session_established(self) -> None:
        self.put(ev.RegisterBrokerAndReelect())


class ZkControllerRuntime:
    """A KafkaController wired to its I/O: the ZooKeeper adapter over a started KafkaZkClient,
    a ControllerChannelManager (NetworkClient to each broker's inter-broker listener unless a
    ``connection_factory`` is given), the event manager, the scheduler and the session handler.
    ``start`` queues Startup (the election); ``close`` stops the event thread and the senders (the
    caller closes the zk client, which ends the session and so releases ``/controller``)."""

    def __init__(self, config: KafkaControllerConfig, zk_client: KafkaZkClient, loop: asyncio.AbstractEventLoop,
                 connection_factory: ConnectionFactory | None = None,
                 register_broker: Callable[[], int] | None = None) -> None:
        self.zk_client = zk_client
        self.adapter = KafkaControllerZkAdapter(zk_client, config.unclean_leader_election_enable)
        self.channel = ControllerChannelManager(
            config.broker_id,
            connection_factory or network_connection_factory(config.inter_broker_listener_name,
                                                             f"controller-{config.broker_id}"),
            loop,
            request_timeout_ms=config.controller_socket_timeout_ms,
        )
        self.scheduler = LoopScheduler(loop, self._put)
        self.controller = KafkaController(config, self.adapter, self.channel, self.scheduler, self._put,
                                          register_broker)
        self.events = ControllerEventManager(config.broker_id, self.controller, loop)
        self._session = ControllerSessionHandler(self.events.on_session_expiring, self.events.on_session_established)

    def _put(self, event: ev.ControllerEvent) -> None:
        self.events.put(event)

    def start(self) -> None:
        self.zk_client.register_state_change_handler(self._session)
        self.events.start()
        self.events.put(ev.Startup())

    async def close(self) -> None:
        self.zk_client.unregister_state_change_handler(self._session.name)
        self.scheduler.cancel_all()
        await self.events.close()
        self.channel.shutdown()
        await asyncio.sleep(0)
        await self.channel.wait_stopped()
