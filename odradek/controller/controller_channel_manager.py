"""Kafka's ``ControllerChannelManager``: the ZooKeeper-mode controller's connections to the brokers.

One queue and one sender task per live (or shutting-down) broker, on the event loop. A request
(LeaderAndIsr / UpdateMetadata / StopReplica, built by the ControllerBrokerRequestBatch with the
controller epoch in it) waits in its broker's queue; the sender sends them one at a time, in order,
over a :class:`~odradek.network.client.NetworkClient` to the broker's inter-broker endpoint, and
retries a request (a new connection after ``retry_backoff_ms``) until the broker answers or is
removed (Kafka's ``RequestSendThread``: a request is never dropped while its broker is live, so a
broker that was unreachable for a while still gets every state change, in order). The answer goes
to the request's callback, which the controller turns into a ControllerEvent.

``send_request``, ``add_broker`` and ``remove_broker`` may be called from any thread (the controller
processes its events on a worker thread, so kazoo's blocking calls stay off the loop); they are
carried to the loop in call order. A request for a broker that is not (or no longer) known is
dropped with a warning, as Kafka does.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from odradek.controller.controller_context import Broker
from odradek.protocol.messages import generated as g
from odradek.protocol.schema import Api

log = logging.getLogger(__name__)

# controller.socket.timeout.ms (Kafka's default 30000); Kafka's RequestSendThread backs off 100 ms
DEFAULT_REQUEST_TIMEOUT_MS = 30000
DEFAULT_RETRY_BACKOFF_MS = 100
MAX_QUEUED_REQUESTS = 100_000  # per broker; beyond this the oldest are dropped (bounded memory)

API_BY_KEY: dict[int, Api] = {
    g.LEADER_AND_ISR.api_key: g.LEADER_AND_ISR,
    g.STOP_REPLICA.api_key: g.STOP_REPLICA,
    g.UPDATE_METADATA.api_key: g.UPDATE_METADATA,
}

ResponseCallback = Callable[[dict[str, Any]], None]


class BrokerConnection(Protocol):
    """One connection to a broker (a NetworkClient in production, a fake in tests)."""

    async def send(self, api: Api, version: int, body: dict[str, Any]) -> dict[str, Any]: ...

    async def close(self) -> None: ...


ConnectionFactory = Callable[[Broker], BrokerConnection]


@dataclass
class QueuedRequest:
    api_key: int
    api_version: int
    body: dict[str, Any]
    callback: ResponseCallback | None


def network_connection_factory(
    listener_name: str, client_id: str, ssl_context: ssl.SSLContext | None = None
) -> ConnectionFactory:
    """Connections over NetworkClient to each broker's endpoint on ``listener_name``: with TLS
    when ``ssl_context`` is given, with this node's broker login if that listener is SASL."""
    from odradek.network.client import NetworkClient

    def make(broker: Broker) -> BrokerConnection:
        ep = broker.endpoint(listener_name)
        if ep is None:
            raise ValueError(f"broker {broker.id} has no endpoint for listener {listener_name}")
        return NetworkClient(ep.host, ep.port, client_id, max_in_flight=1, sasl_role="broker", ssl_context=ssl_context)

    return make


class _BrokerSender:
    """Kafka's ``RequestSendThread`` for one broker: an asyncio task draining the queue."""

    def __init__(self, manager: ControllerChannelManager, broker: Broker) -> None:
        self.manager = manager
        self.broker = broker
        self.queue: collections.deque[QueuedRequest] = collections.deque()
        self.wakeup = asyncio.Event()
        self.connection: BrokerConnection | None = None
        self.stopped = False
        self.task: asyncio.Task[None] = asyncio.get_running_loop().create_task(
            self._run(), name=f"controller-{manager.controller_id}-to-broker-{broker.id}-send-thread"
        )

    def enqueue(self, request: QueuedRequest) -> None:
        if len(self.queue) >= MAX_QUEUED_REQUESTS:
            dropped = self.queue.popleft()
            log.error("[Controller id=%d] More than %d requests queued for broker %d; dropping the oldest (api key %d)",
                      self.manager.controller_id, MAX_QUEUED_REQUESTS, self.broker.id, dropped.api_key)
        self.queue.append(request)
        self.wakeup.set()

    async def _run(self) -> None:
        m = self.manager
        while not self.stopped:
            if not self.queue:
                self.wakeup.clear()
                await self.wakeup.wait()
                continue
            request = self.queue[0]
            response = await self._send_until_answered(request)
            if self.stopped or response is None:
                return
            self.queue.popleft()
            if request.callback is not None:
                try:
                    request.callback(response)
                except Exception as e:
                    log.error("[Controller id=%d] Callback for the answer of broker %d to api key %d failed: %r",
                              m.controller_id, self.broker.id, request.api_key, e, exc_info=True)

    async def _send_until_answered(self, request: QueuedRequest) -> dict[str, Any] | None:
        m = self.manager
        api = API_BY_KEY[request.api_key]
        attempt = 0
        while not self.stopped:
            attempt += 1
            try:
                if self.connection is None:
                    self.connection = m.connection_factory(self.broker)
                return await asyncio.wait_for(
                    self.connection.send(api, request.api_version, request.body), m.request_timeout_ms / 1000
                )
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if attempt == 1 or attempt % 50 == 0:
                    log.warning(
                        "[Controller id=%d, targetBrokerId=%d] Controller %d epoch %s fails to send request "
                        "(api key %d) to broker %d. Reconnecting to broker. (%r)",
                        m.controller_id, self.broker.id, m.controller_id, request.body.get("controller_epoch"),
                        request.api_key, self.broker.id, e,
                    )
                await self._close_connection()
                await asyncio.sleep(m.retry_backoff_ms / 1000)
        return None

    async def _close_connection(self) -> None:
        conn, self.connection = self.connection, None
        if conn is not None:
            try:
                await conn.close()
            except Exception as e:
                log.debug("closing the connection to broker %d: %r", self.broker.id, e)

    async def stop(self) -> None:
        self.stopped = True
        self.queue.clear()
        self.task.cancel()
        try:
            await self.task
        except (asyncio.CancelledError, Exception):
            pass
        await self._close_connection()


class ControllerChannelManager:
    def __init__(
        self,
        controller_id: int,
        connection_factory: ConnectionFactory,
        loop: asyncio.AbstractEventLoop,
        *,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
    ) -> None:
        self.controller_id = controller_id
        self.connection_factory = connection_factory
        self.loop = loop
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._senders: dict[int, _BrokerSender] = {}
        self._stopping: set[asyncio.Task[None]] = set()

    # --- thread-safe entry points ---------------------------------------------------------------

    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        if self._loop_thread_is_current():
            fn(*args)
        else:
            self.loop.call_soon_threadsafe(fn, *args)

    def _loop_thread_is_current(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    def startup(self, brokers: Iterable[Broker]) -> None:
        for b in brokers:
            self.add_broker(b)

    def add_broker(self, broker: Broker) -> None:
        self._on_loop(self._add_broker, broker)

    def remove_broker(self, broker_id: int) -> None:
        self._on_loop(self._remove_broker, broker_id)

    def send_request(
        self, broker_id: int, api_key: int, api_version: int, body: dict[str, Any], callback: ResponseCallback | None
    ) -> None:
        self._on_loop(self._send_request, broker_id, QueuedRequest(api_key, api_version, body, callback))

    def shutdown(self) -> None:
        """Remove every broker (their queued requests are dropped)."""
        self._on_loop(self._shutdown)

    # --- on the loop ------------------------------------------------------------------------------

    @property
    def broker_ids(self) -> set[int]:
        return set(self._senders)

    def queued(self, broker_id: int) -> int:
        s = self._senders.get(broker_id)
        return len(s.queue) if s is not None else 0

    def _add_broker(self, broker: Broker) -> None:
        if broker.id in self._senders:  # Kafka: addBroker is a no-op for a known broker
            return
        log.info("[Controller id=%d] Added broker %d to the channel manager", self.controller_id, broker.id)
        self._senders[broker.id] = _BrokerSender(self, broker)

    def _remove_broker(self, broker_id: int) -> None:
        sender = self._senders.pop(broker_id, None)
        if sender is None:
            return
        log.info("[Controller id=%d] Removed broker %d from the channel manager (%d requests dropped)",
                 self.controller_id, broker_id, len(sender.queue))
        task = self.loop.create_task(sender.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    def _send_request(self, broker_id: int, request: QueuedRequest) -> None:
        sender = self._senders.get(broker_id)
        if sender is None:
            log.warning("[Controller id=%d] Not sending request (api key %d) to broker %d, since it is offline.",
                        self.controller_id, request.api_key, broker_id)
            return
        sender.enqueue(request)

    def _shutdown(self) -> None:
        for broker_id in list(self._senders):
            self._remove_broker(broker_id)

    async def wait_stopped(self) -> None:
        """Wait until every removed broker's sender has stopped (on the loop)."""
        while self._stopping:
            await asyncio.gather(*list(self._stopping), return_exceptions=True)

