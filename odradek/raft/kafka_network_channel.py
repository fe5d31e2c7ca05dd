"""KafkaNetworkChannel: the Raft core's requests to the other voters over the network (Kafka's
``KafkaNetworkChannel``), and the conversion of Raft messages to and from the wire.

One :class:`~odradek.network.client.NetworkClient` per voter of ``controller.quorum.voters``
(id@host:port), which reconnects by itself and matches responses by correlation id. A request
that cannot be sent (connection refused or lost, or the peer's reconnect backoff has not
passed since the last failure) comes back to the core at once as a response with
``BROKER_NOT_AVAILABLE``, one not answered in ``request.timeout.ms`` with
``REQUEST_TIMED_OUT`` (Kafka's ``KafkaNetworkChannel``); the core backs off and retries. Fetch
responses carry RecordBatches: the core's batches are encoded by the leader and decoded here.

Versions are negotiated per peer, as Kafka's NetworkClient does: on each new connection the peer
is asked ApiVersions, and each request goes out at the highest version both sides have
(:func:`negotiate_version`). KIP-853's fields are ignorable — a v0 peer just does not get them —
but a pre-vote (KIP-996) cannot be said below Vote v2: it comes back to the core as
``UNSUPPORTED_VERSION`` (as does an API the peer does not serve), and a prospective node then
stands as a candidate at once.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import uuid
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from odradek import __version__
from odradek.network.client import ConnectionClosed, NetworkClient
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.protocol.schema import Api
from odradek.raft import raft_messages as msgs
from odradek.raft.raft_messages import RaftMessage
from odradek.raft.record_batches import BatchCodec, UndecodableBatch

T = TypeVar("T")
UNSUPPORTED_VERSION = int(Errors.UNSUPPORTED_VERSION)

log = logging.getLogger(__name__)

RAFT_APIS: dict[int, Api] = {
    msgs.VOTE: g.VOTE,
    msgs.BEGIN_QUORUM_EPOCH: g.BEGIN_QUORUM_EPOCH,
    msgs.END_QUORUM_EPOCH: g.END_QUORUM_EPOCH,
    msgs.FETCH: g.FETCH,
    msgs.DESCRIBE_QUORUM: g.DESCRIBE_QUORUM,
    msgs.FETCH_SNAPSHOT: g.FETCH_SNAPSHOT,
    g.ADD_RAFT_VOTER.api_key: g.ADD_RAFT_VOTER,  # KIP-853
    g.REMOVE_RAFT_VOTER.api_key: g.REMOVE_RAFT_VOTER,
    g.UPDATE_RAFT_VOTER.api_key: g.UPDATE_RAFT_VOTER,
}

_ZERO_UUID = uuid.UUID(int=0)
_API_VERSIONS_VERSION = 3  # what Kafka's clients ask with (client software name and version)


def negotiate_version(api_key: int, data: dict[str, Any], theirs: dict[int, tuple[int, int]]) -> int | None:
    """The version to send a Raft request at: the highest both this node and the peer (its
    ApiVersions ``theirs``: api key -> (min, max)) have; None when there is none, or when the
    request says what that version cannot (a pre-vote below Vote v2)."""
    api = RAFT_APIS[api_key]
    if api_key not in theirs:
        return None
    lo, hi = theirs[api_key]
    version = min(api.max_version, hi)
    if version < max(api.min_version, lo):
        return None
    if api_key == msgs.VOTE and version < 2:
        partition = msgs.single_partition(data)
        if partition is not None and partition.get("pre_vote"):
            return None
    return version


def error_response(api_key: int, error: int) -> dict[str, Any]:
    """A response carrying only a top-level error (the core backs off on it)."""
    if api_key == msgs.FETCH:
        return {"throttle_time_ms": 0, "error_code": error, "session_id": 0, "responses": []}
    return {"error_code": error, "topics": []}


def encode_fetch_records(data: dict[str, Any], codec: BatchCodec[Any]) -> dict[str, Any]:
    """The core's Fetch response with its LogBatch records as RecordBatch bytes."""
    for topic in data.get("responses") or []:
        for partition in topic.get("partitions") or []:
            batches = partition.get("records") or []
            partition["records"] = codec.encode_all(batches) if batches else b""
    return data


def decode_fetch_records(data: dict[str, Any], codec: BatchCodec[Any]) -> dict[str, Any]:
    """A Fetch response from the wire with its records as LogBatch objects (UndecodableBatch)."""
    for topic in data.get("responses") or []:
        for partition in topic.get("partitions") or []:
            raw = partition.get("records")
            partition["records"] = list(codec.decode(raw)) if raw else []
    return data


def fill_uuids(value: Any) -> Any:
    """Null directory ids (the core's "none") as Kafka's zero Uuid, which the wire carries."""
    if isinstance(value, dict):
        return {
            k: (_ZERO_UUID if v is None and k.endswith("directory_id") else fill_uuids(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [fill_uuids(v) for v in value]
    return value


def _blacked_out(client: NetworkClient) -> bool:
    """Not connected, and the last attempt failed less than the reconnect backoff ago."""
    if client.connected or client.backoff.failed_attempts == 0:
        return False
    now_ms = asyncio.get_running_loop().time() * 1000
    return client.backoff.delay_ms(now_ms) > 0


class KafkaNetworkChannel(Generic[T]):
    def __init__(
        self,
        node_id: int,
        endpoints: dict[int, tuple[str, int]],
        codec: BatchCodec[T],
        *,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        request_timeout_ms: int = 2000,
        resolve: Callable[[int], tuple[str, int] | None] | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """``resolve``: the endpoint of a node not in ``endpoints`` (a voter of the dynamic
        voter set); leaders' endpoints in Fetch responses (``node_endpoints``) are learnt too.
        ``ssl_context``: TLS to the voters' (SSL) controller listener."""
        self._ssl_context = ssl_context
        self.node_id = node_id
        # A Fetch may be parked by the leader for its max wait: that on top of the timeout.
        self.timeout_s = (request_timeout_ms + msgs.FETCH_MAX_WAIT_MS) / 1000
        self.endpoints = dict(endpoints)
        self._resolve = resolve
        self._learnt: dict[int, tuple[str, int]] = {}
        self._client_endpoints: dict[int, tuple[str, int]] = {}
        self.codec = codec
        self._clients: dict[int, NetworkClient] = {}
        self._on_response: Callable[[RaftMessage], None] = lambda _m: None
        self._tasks: set[asyncio.Task[None]] = set()
        self._backoff = (reconnect_backoff_ms, reconnect_backoff_max_ms)
        self._closed = False
        # node -> (the client's connection count when asked, its ApiVersions)
        self._versions: dict[int, tuple[int, dict[int, tuple[int, int]]]] = {}
        self._negotiating: dict[int, asyncio.Lock] = {}

    def start(self, on_response: Callable[[RaftMessage], None]) -> None:
        self._on_response = on_response

    def _endpoint(self, node: int) -> tuple[str, int] | None:
        endpoint = self.endpoints.get(node)
        if endpoint is None and self._resolve is not None:
            endpoint = self._resolve(node)
        if endpoint is None:
            endpoint = self._learnt.get(node)
        return endpoint

    def _client(self, node: int) -> NetworkClient | None:
        endpoint = self._endpoint(node)
        client = self._clients.get(node)
        if client is not None and endpoint is not None and self._client_endpoints.get(node) != endpoint:
            # The voter moved (UpdateRaftVoter, KIP-853): connect to where it is now.
            stale = self._clients.pop(node)
            task = asyncio.get_running_loop().create_task(stale.close())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            client = None
        if client is None:
            if endpoint is None:
                return None
            self._client_endpoints[node] = endpoint
            client = NetworkClient(
                endpoint[0],
                endpoint[1],
                f"raft-client-{self.node_id}",
                reconnect_backoff_ms=self._backoff[0],
                reconnect_backoff_max_ms=self._backoff[1],
                sasl_role="controller",
                ssl_context=self._ssl_context,
            )
            self._clients[node] = client
            self._versions.pop(node, None)
        return client

    async def _api_versions(self, node: int, client: NetworkClient) -> dict[int, tuple[int, int]]:
        """The peer's ApiVersions, asked once per connection (Kafka's NetworkClient asks on each
        new one); concurrent requests to a node wait for the one asking."""
        lock = self._negotiating.setdefault(node, asyncio.Lock())
        async with lock:
            known = self._versions.get(node)
            if known is not None and client.connected and known[0] == client.connections:
                return known[1]
            body = {"client_software_name": "odradek", "client_software_version": __version__}
            version = _API_VERSIONS_VERSION
            resp = await client.send(g.API_VERSIONS, version, body)
            if resp["error_code"] == UNSUPPORTED_VERSION:
                # An older peer answers at v0 with the ApiVersions versions it has: ask again.
                theirs = {a["api_key"]: a["max_version"] for a in resp["api_keys"]}
                version = min(version, theirs.get(g.API_VERSIONS.api_key, 0))
                resp = await client.send(g.API_VERSIONS, version, body)
            if resp["error_code"] != 0:
                raise ConnectionClosed(f"ApiVersions answered error {resp['error_code']}")
            versions = {
                int(a["api_key"]): (int(a["min_version"]), int(a["max_version"])) for a in resp["api_keys"]
            }
            self._versions[node] = (client.connections, versions)
            return versions

    def send(self, request: RaftMessage) -> None:
        if self._closed:
            return
        task = asyncio.get_running_loop().create_task(self._send(request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, request: RaftMessage) -> None:
        api = RAFT_APIS[request.api_key]
        client = self._client(request.destination)
        data: dict[str, Any]
        if client is None:
            log.warning("Raft: no endpoint for node %d (not in controller.quorum.voters)", request.destination)
            data = error_response(request.api_key, msgs.BROKER_NOT_AVAILABLE)
        elif _blacked_out(client):
            # Kafka's NetworkClient is not ready for a node in reconnect backoff: fail now,
            # so the core learns the peer is down (and asks another) instead of waiting.
            data = error_response(request.api_key, msgs.BROKER_NOT_AVAILABLE)
        else:
            try:
                data = await asyncio.wait_for(self._negotiate_and_send(api, client, request), self.timeout_s)
                if request.api_key == msgs.FETCH:
                    data = decode_fetch_records(data, self.codec)
                    for ep in data.get("node_endpoints") or []:
                        self._learnt[int(ep["node_id"])] = (str(ep["host"]), int(ep["port"]))
            except UndecodableBatch as e:
                log.warning("Raft: undecodable records from node %d: %s", request.destination, e)
                data = error_response(request.api_key, msgs.BROKER_NOT_AVAILABLE)
            except TimeoutError as e:
                log.debug("Raft: %r to node %d timed out: %s", request, request.destination, e)
                data = error_response(request.api_key, msgs.REQUEST_TIMED_OUT)
            except OSError as e:  # ConnectionClosed is an OSError
                log.debug("Raft: %r to node %d failed: %s", request, request.destination, e)
                data = error_response(request.api_key, msgs.BROKER_NOT_AVAILABLE)
            except Exception as e:  # an encoding or decoding error: a bug or a hostile peer
                log.warning("Raft: %r to node %d failed: %s", request, request.destination, e)
                data = error_response(request.api_key, msgs.BROKER_NOT_AVAILABLE)
        if self._closed:
            return
        self._on_response(
            RaftMessage(
                request.destination,
                self.node_id,
                request.api_key,
                request.correlation_id,
                data,
                is_response=True,
            )
        )

    async def _negotiate_and_send(self, api: Api, client: NetworkClient, request: RaftMessage) -> dict[str, Any]:
        theirs = await self._api_versions(request.destination, client)
        version = negotiate_version(request.api_key, request.data, theirs)
        if version is None:
            log.info(
                "Raft: node %d cannot take %r (it serves %s v%s)", request.destination, request,
                api.name, "-".join(map(str, theirs.get(api.api_key, ()))) or " none",
            )
            return error_response(request.api_key, UNSUPPORTED_VERSION)
        return await client.send(api, version, request.data)

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
