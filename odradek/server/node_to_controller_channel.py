"""The controller channel over the network (Kafka's ``NodeToControllerChannelManager``).

A broker whose controller runs in another process sends each :class:`ControllerRequest` to the
**active** controller's controller-listener endpoint with the Kafka protocol:

- the active controller is the Raft leader, as the ``leader_id`` callable says (the broker's Raft
  observer; Kafka's ``RaftControllerNodeProvider``); its endpoint comes from ``endpoints`` (the
  voters' ``id@host:port`` of ``controller.quorum.voters``, see :func:`controller_endpoints`);
- on a new connection it first asks ApiVersions, as Kafka's NetworkClient does, and encodes each
  request with the generated definition at the highest version both sides support (a request
  forwarded for a client goes at the client's own version, so that its response can go back to
  the client as it is);
- one request in flight, in the order they were sent (Kafka's ``NodeToControllerRequestThread``
  with ``max.in.flight`` 1);
- a disconnect, a refused connection or a request that is not answered in ``request.timeout.ms``
  drops the connection and sends the request again, first in line, after
  ``retry_backoff_ms`` (sooner when the Raft observer learns of a new active controller), to
  whichever node is the active controller by then, until the request's
  retry timeout; then the sender gets :class:`ControllerRequestTimeout` (which the
  ForwardingManager answers with ``REQUEST_TIMED_OUT``);
- ``NOT_CONTROLLER`` in the answer to a request the broker sends on its own behalf
  (BrokerRegistration, BrokerHeartbeat, AllocateProducerIds, auto-created topics) is retried the
  same way; in the answer to a forwarded client request it goes back to the client (which
  refreshes its metadata and retries), as the in-memory channel does.

Forwarded client requests are sent as themselves, not wrapped in an Envelope (KIP-590): Odradek
has no authentication yet, so there is no principal to carry; the controller sees the broker's
connection as the client (its client id and host), which only shows in error messages.

The transport is an injected :data:`ConnectionFactory`; the default one
(:class:`NetworkControllerConnection`) is :class:`~odradek.network.client.NetworkClient` with
its reconnect backoff (``reconnect.backoff.ms`` / ``reconnect.backoff.max.ms``).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from odradek import __version__
from odradek.network.client import ConnectionClosed, NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.protocol.schema import Api
from odradek.server.controller_channel import (
    DEFAULT_RETRY_BACKOFF_MS,
    DEFAULT_RETRY_TIMEOUT_MS,
    ControllerChannel,
    ControllerRequest,
    ControllerRequestHandler,
    ControllerRequestTimeout,
    InMemoryControllerChannel,
    PendingRequest,
    QueuedControllerChannel,
    RetryRequest,
    error_response,
)
from odradek.server.kafka_config import KafkaConfig

log = logging.getLogger(__name__)

# Kafka's request.timeout.ms default (each attempt; the retry timeout bounds them all).
DEFAULT_REQUEST_TIMEOUT_MS = 30_000


class ControllerConnection(Protocol):
    """One connection to one controller node."""

    async def send(self, api: Api, version: int, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        """The decoded response; ConnectionClosed/OSError when the connection failed,
        TimeoutError when no answer came in ``timeout`` seconds (the connection is then dropped)."""
        ...

    async def close(self) -> None: ...


# (node id, host, port) -> a connection to that controller (made lazily, on the first send).
ConnectionFactory = Callable[[int, str, int], ControllerConnection]


# How often a request waiting out its retry backoff looks for a new active controller.
LEADER_POLL_S = 0.01

# Kafka's channel managers' NetworkClient: reconnect.backoff 50 ms, not growing.
CHANNEL_RECONNECT_BACKOFF_MS = 50


class NetworkControllerConnection:
    """A :class:`ControllerConnection` over NetworkClient. A request that times out drops the
    connection (as Kafka's NetworkClient does), so a late answer can never be taken for the
    next request's; the reconnect backoff carries over."""

    def __init__(
        self, host: str, port: int, client_id: str, *, reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000, ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._args = (host, port, client_id, reconnect_backoff_ms, reconnect_backoff_max_ms)
        self._ssl_context = ssl_context
        self._client = self._new_client()

    def _new_client(self) -> NetworkClient:
        host, port, client_id, lo, hi = self._args
        return NetworkClient(
            host, port, client_id, max_in_flight=1, reconnect_backoff_ms=lo, reconnect_backoff_max_ms=hi,
            sasl_role="controller",
            ssl_context=self._ssl_context,
        )

    async def send(self, api: Api, version: int, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        fut = self._client.send_nowait(api, version, body)
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            old = self._client
            self._client = self._new_client()
            self._client.backoff = old.backoff
            await old.close()
            raise

    async def close(self) -> None:
        await self._client.close()


def controller_endpoints(config: KafkaConfig) -> dict[int, tuple[str, int]]:
    """The controllers' endpoints by node id, from ``controller.quorum.voters``.
    (``controller.quorum.bootstrap.servers`` names no ids: with it alone, the endpoints come
    from the voter set the Raft observer learns, passed as ``endpoints``.)"""
    return {v.node_id: (v.host, v.port) for v in config.controller_quorum_voters}


class NodeToControllerChannel(QueuedControllerChannel):
    def __init__(
        self,
        leader_id: Callable[[], int | None],
        endpoints: Mapping[int, tuple[str, int]] | Callable[[int], tuple[str, int] | None],
        *,
        connect: ConnectionFactory | None = None,
        client_id: str = "odradek-controller-channel",
        retry_timeout_ms: int = DEFAULT_RETRY_TIMEOUT_MS,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        name: str = "forwarding",
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._leader_id = leader_id
        if callable(endpoints):
            self._endpoint: Callable[[int], tuple[str, int] | None] = endpoints
        else:
            table = dict(endpoints)
            self._endpoint = table.get

        def network(node: int, host: str, port: int) -> ControllerConnection:
            return NetworkControllerConnection(
                host, port, client_id, reconnect_backoff_ms=reconnect_backoff_ms,
                reconnect_backoff_max_ms=reconnect_backoff_max_ms, ssl_context=ssl_context,
            )

        super().__init__(retry_timeout_ms, retry_backoff_ms, name)
        self._connect: ConnectionFactory = connect if connect is not None else network
        self._request_timeout = request_timeout_ms / 1000.0
        self._current: PendingRequest | None = None
        self._connections: dict[tuple[int, str, int], ControllerConnection] = {}
        # ApiVersions of each connected controller: api key -> (min, max)
        self._versions: dict[tuple[int, str, int], dict[int, tuple[int, int]]] = {}
        self._recorded: tuple[int, str, int] | None = None  # the controller last logged
        self._unreachable_logged = False
        self._no_controller_logged = False

    @classmethod
    def from_config(
        cls,
        config: KafkaConfig,
        leader_id: Callable[[], int | None],
        *,
        endpoints: Mapping[int, tuple[str, int]] | Callable[[int], tuple[str, int] | None] | None = None,
        name: str = "forwarding",
        retry_timeout_ms: int = DEFAULT_RETRY_TIMEOUT_MS,
        listener_name: str | None = None,
    ) -> NodeToControllerChannel:
        """A broker's channel as Kafka's BrokerServer builds one: client id the node id, each
        attempt bounded by ``controller.socket.timeout.ms`` (and the retry timeout), reconnect
        backoff 50 ms; the endpoints from ``controller.quorum.voters`` unless given. TLS if the
        controllers' listener (``listener_name``, by default the first of
        ``controller.listener.names``) is an SSL one."""
        from odradek.security.ssl_factory import SslConfigError, inter_node_ssl_context
        from odradek.server.dir_lock import StartupError

        socket_timeout = int(config.get("controller.socket.timeout.ms"))
        if listener_name is None:
            names = config.controller_listener_names
            listener_name = names[0] if names else None
        try:
            ssl_context = inter_node_ssl_context(config, listener_name) if listener_name else None
        except SslConfigError as e:
            raise StartupError(f"controller listener {listener_name} (client side): {e}") from e
        return cls(
            leader_id,
            controller_endpoints(config) if endpoints is None else endpoints,
            client_id=str(config.node_id),
            retry_timeout_ms=retry_timeout_ms,
            request_timeout_ms=min(socket_timeout, retry_timeout_ms),
            reconnect_backoff_ms=CHANNEL_RECONNECT_BACKOFF_MS,
            reconnect_backoff_max_ms=CHANNEL_RECONNECT_BACKOFF_MS,
            name=f"to-controller-{name}-channel-manager",
            ssl_context=ssl_context,
        )

    # -- ControllerChannel ------------------------------------------------------------------

    def active_controller_id(self) -> int | None:
        return self._leader_id()

    async def close(self) -> None:
        """Stop: what is queued or in flight fails with ControllerRequestTimeout; the
        connections close."""
        self._closed = True
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.cancel()
            try:
                await worker
            except asyncio.CancelledError:
                pass
        items = list(self._queue)
        self._queue.clear()
        if self._current is not None:
            items.append(self._current)
            self._current = None
        for item in items:
            if not item.future.done():
                item.future.set_exception(ControllerRequestTimeout("the broker is shutting down"))
        connections = list(self._connections.values())
        self._connections.clear()
        for conn in connections:
            await conn.close()

    # -- the request thread -----------------------------------------------------------------

    async def _retry_backoff(self) -> None:
        """The retry backoff, cut short once the Raft observer names another active
        controller (a failover: the new one is tried at once, not a backoff later)."""
        before = self._leader_id()
        loop = asyncio.get_running_loop()
        end = loop.time() + self._backoff
        while (left := end - loop.time()) > 0:
            await asyncio.sleep(min(LEADER_POLL_S, left))
            if self._leader_id() != before:
                return

    async def _deliver(self, item: PendingRequest, remaining: float) -> tuple[int, dict[str, Any]]:
        node = self._controller_node()
        if node is None:
            raise RetryRequest("no active controller known")
        self._current = item  # close() fails it if the attempt is cancelled
        try:
            response = await self._attempt_while_active(node, item, remaining)
        except RetryRequest:
            self._current = None
            raise
        self._current = None
        if self._unreachable_logged:
            log.info("The controller %s is reachable again", _describe(node))
            self._unreachable_logged = False
        return node[0], response

    def _controller_node(self) -> tuple[int, str, int] | None:
        """The active controller (id, host, port), logging when it changes or is unknown."""
        leader = self._leader_id()
        endpoint = self._endpoint(leader) if leader is not None else None
        if leader is None or endpoint is None:
            if not self._no_controller_logged:
                self._no_controller_logged = True
                why = "no active controller is known" if leader is None else (
                    f"the active controller {leader} has no known endpoint")
                log.info(
                    "%s channel: %s; requests wait for one (up to %d ms each)",
                    self._name, why, int(self._retry_timeout * 1000),
                )
            return None
        self._no_controller_logged = False
        node = (leader, endpoint[0], endpoint[1])
        if node != self._recorded:
            log.info(
                "%s channel: recorded new KRaft controller, from now on will use node %s",
                self._name, _describe(node),
            )
            self._recorded = node
            self._unreachable_logged = False
        return node

    async def _attempt_while_active(
        self, node: tuple[int, str, int], item: PendingRequest, remaining: float
    ) -> dict[str, Any]:
        """One attempt, given up (the connection dropped, the request sent again to the new
        controller) as soon as the Raft observer names another active controller: a hung
        controller that nobody follows any more (SIGSTOP, a dead host) is not waited on for
        the whole request timeout. The old one can no longer commit anything: it is fenced."""
        attempt = asyncio.ensure_future(self._attempt(node, item, remaining))
        moved = asyncio.ensure_future(self._leader_moved_from(node[0]))
        try:
            done, _ = await asyncio.wait({attempt, moved}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            attempt.cancel()
            moved.cancel()
            raise
        if attempt in done:
            moved.cancel()
            return attempt.result()
        attempt.cancel()
        try:
            await attempt
        except (asyncio.CancelledError, Exception):  # noqa: BLE001 - abandoned on purpose
            pass
        conn = self._connections.pop(node, None)
        self._versions.pop(node, None)
        if conn is not None:
            await conn.close()  # a late answer must never be taken for the next request's
        log.info(
            "%s channel: the active controller moved from %s to %s; sending the request there",
            self._name, _describe(node), self._leader_id(),
        )
        raise RetryRequest(f"node {node[0]} is no longer the active controller")

    async def _leader_moved_from(self, node_id: int) -> None:
        while self._leader_id() in (node_id, None):
            await asyncio.sleep(LEADER_POLL_S)

    async def _attempt(self, node: tuple[int, str, int], item: PendingRequest, remaining: float) -> dict[str, Any]:
        conn = self._connections.get(node)
        if conn is None:
            conn = self._connections[node] = self._connect(*node)
        request = item.request
        timeout = min(self._request_timeout, remaining)
        try:
            versions = self._versions.get(node)
            if versions is None:
                versions = await self._api_versions(conn, timeout)
                self._versions[node] = versions
            api, version = self._choose_version(request, versions)
            if api is None:
                return error_response(
                    request, Errors.UNSUPPORTED_VERSION,
                    f"The controller {_describe(node)} does not support API {request.api_key} "
                    f"v{request.api_version}",
                )
            return await conn.send(api, version, request.data, timeout)
        except (ConnectionClosed, OSError) as e:
            self._versions.pop(node, None)
            self._unreachable(node, f"{e}")
            raise RetryRequest(f"node {node[0]}: {e}") from e
        except TimeoutError as e:
            self._versions.pop(node, None)
            msg = f"no answer within {int(timeout * 1000)} ms"
            self._unreachable(node, msg)
            raise RetryRequest(f"node {node[0]}: {msg}") from e

    def _unreachable(self, node: tuple[int, str, int], reason: str) -> None:
        if not self._unreachable_logged:
            self._unreachable_logged = True
            log.warning(
                "%s channel: the controller %s is unreachable (%s); retrying every %d ms "
                "with it or the next active controller",
                self._name, _describe(node), reason, int(self._backoff * 1000),
            )

    async def _api_versions(self, conn: ControllerConnection, timeout: float) -> dict[int, tuple[int, int]]:
        """Ask the controller which APIs and versions it serves (Kafka's NetworkClient does so
        on every new connection)."""
        version = g.API_VERSIONS.max_version
        body = {"client_software_name": "odradek", "client_software_version": __version__}
        resp = await conn.send(g.API_VERSIONS, version, body, timeout)
        if resp["error_code"] == Errors.UNSUPPORTED_VERSION:
            # The controller answers with the ApiVersions versions it has: ask again at its newest.
            theirs = {a["api_key"]: a["max_version"] for a in resp["api_keys"]}
            version = min(version, theirs.get(g.API_VERSIONS.api_key, 0))
            resp = await conn.send(g.API_VERSIONS, version, body, timeout)
        if resp["error_code"] != Errors.NONE:
            raise ConnectionClosed(f"ApiVersions answered {Errors(resp['error_code']).name}")
        return {a["api_key"]: (a["min_version"], a["max_version"]) for a in resp["api_keys"]}

    @staticmethod
    def _choose_version(request: ControllerRequest, versions: dict[int, tuple[int, int]]) -> tuple[Api | None, int]:
        """The definition and version to send ``request`` with: a client's request at its own
        version; the broker's at the highest version both sides support."""
        api = m.APIS.get(request.api_key) or g.DEFINITIONS.get(request.api_key)
        theirs = versions.get(request.api_key)
        if api is None or theirs is None:
            return None, -1
        lo, hi = max(api.min_version, theirs[0]), min(api.max_version, theirs[1])
        if request.client is not None:
            v = request.api_version
            return (api, v) if lo <= v <= hi else (None, -1)
        return (api, hi) if lo <= hi else (None, -1)


def broker_controller_channels(
    config: KafkaConfig,
    leader_id: Callable[[], int | None],
    local: Mapping[int, ControllerRequestHandler],
    endpoints: Callable[[int], tuple[str, int] | None] | None = None,
) -> tuple[ControllerChannel, ControllerChannel]:
    """The controller channels KafkaRaftServer gives its broker, as Kafka's BrokerServer does:
    "forwarding" (client requests, AllocateProducerIds, auto-created topics; 60 s retry
    timeout) and "heartbeat" (registration and heartbeats, retried for half of
    ``broker.session.timeout.ms``, KAFKA-14392). In memory to the ControllerApis of this
    process when the controller quorum is this node alone (a combined process), over the
    network to whichever voter leads otherwise (a broker-only process, or a quorum with other
    voters). ``local``: this process's ControllerApis by node id (empty without the role).
    ``endpoints``: a dynamic quorum's (KIP-853) voter endpoints; always over the network then,
    since the voters may change."""
    heartbeat_timeout_ms = max(1, int(config.get("broker.session.timeout.ms")) // 2)
    voters = {v.node_id for v in config.controller_quorum_voters}
    if endpoints is None and voters and voters <= set(local):
        return (
            InMemoryControllerChannel(local, leader_id),
            InMemoryControllerChannel(local, leader_id, retry_timeout_ms=heartbeat_timeout_ms, name="heartbeat"),
        )
    return (
        NodeToControllerChannel.from_config(config, leader_id, endpoints=endpoints),
        NodeToControllerChannel.from_config(
            config, leader_id, endpoints=endpoints, name="heartbeat", retry_timeout_ms=heartbeat_timeout_ms
        ),
    )


def _describe(node: tuple[int, str, int]) -> str:
    return f"{node[1]}:{node[2]} (id: {node[0]})"
