"""A small admin client for the ``odradek`` tools (topics, leader-election, reassign), and the
Java exception names every tool prints (metadata-quorum too).

What the tools need of Kafka's Admin client, over :class:`~odradek.network.client.NetworkClient`:
the first reachable bootstrap broker answers most requests; the controller-bound ones
(ElectLeaders, Alter/ListPartitionReassignments, CreateTopics, DeleteTopics: Kafka's Admin sends
them through its ControllerNodeProvider) go to the broker Metadata names as the controller — in
KRaft mode any broker forwards them, in ZooKeeper mode only the controller's broker serves them
(NOT_CONTROLLER elsewhere). Requests that fail with a retriable error (NOT_CONTROLLER,
REQUEST_TIMED_OUT, a lost connection) are retried until the API timeout, the controller looked up
again. Connections are secured as ``security`` says (:mod:`odradek.security.client_security`:
TLS and/or SASL from a tool's ``--command-config``); a login or TLS handshake the broker refuses
fails at once with Kafka's SaslAuthenticationException / SslAuthenticationException line.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors, error_name
from odradek.protocol.schema import Api
from odradek.security.client_security import PLAINTEXT, ClientSecurity, connect_failure

DEFAULT_API_TIMEOUT_MS = 60_000
RETRY_BACKOFF_S = 0.1
_ERRORS_PKG = "org.apache.kafka.common.errors."
_EXCEPTION_NAMES = {
    Errors.UNKNOWN_TOPIC_OR_PARTITION: "UnknownTopicOrPartitionException",
    Errors.ELECTION_NOT_NEEDED: "ElectionNotNeededException",
    Errors.PREFERRED_LEADER_NOT_AVAILABLE: "PreferredLeaderNotAvailableException",
    Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE: "EligibleLeadersNotAvailableException",
    Errors.NO_REASSIGNMENT_IN_PROGRESS: "NoReassignmentInProgressException",
    Errors.INVALID_REPLICA_ASSIGNMENT: "InvalidReplicaAssignmentException",
    Errors.UNKNOWN_SERVER_ERROR: "UnknownServerException",
    Errors.CLUSTER_AUTHORIZATION_FAILED: "ClusterAuthorizationException",
    Errors.UNSUPPORTED_VERSION: "UnsupportedVersionException",
    Errors.KAFKA_STORAGE_ERROR: "KafkaStorageException",
    Errors.OFFSET_OUT_OF_RANGE: "OffsetOutOfRangeException",
    Errors.INVALID_CONFIG: "InvalidConfigurationException",
}


class AdminError(Exception):
    """A failure the tool reports (its message is the line printed)."""


def kafka_exception(code: int, message: str | None) -> str:
    """``org.apache.kafka.common.errors.XxxException: message``, as Java's Throwable.toString."""
    try:
        err = Errors(code)
    except ValueError:
        return f"{_ERRORS_PKG}UnknownServerException: The server experienced an unexpected error code {code}"
    name = _EXCEPTION_NAMES.get(err) or "".join(w.capitalize() for w in err.name.split("_"))
    if not name.endswith("Exception"):
        name += "Exception"
    return f"{_ERRORS_PKG}{name}: {message if message is not None else error_name(code)}"


def parse_bootstrap(value: str) -> list[tuple[str, int]]:
    out = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise AdminError(f"Invalid url in bootstrap.servers: {item}")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise AdminError("No resolvable bootstrap urls given in bootstrap.servers")
    return out


_RETRIABLE = frozenset({
    Errors.NOT_CONTROLLER, Errors.REQUEST_TIMED_OUT, Errors.LEADER_NOT_AVAILABLE, Errors.NETWORK_EXCEPTION,
})


class AdminClient:
    def __init__(
        self, bootstrap: str, timeout_ms: int = DEFAULT_API_TIMEOUT_MS, client_id: str = "odradek-admin",
        request_timeout_ms: int | None = None, security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.security = security or PLAINTEXT  # TLS / SASL (--command-config)
        self.timeout_ms = timeout_ms
        # request.timeout.ms: how long one request waits for its response (the API timeout bounds all tries)
        self.request_timeout_ms = min(timeout_ms, request_timeout_ms or timeout_ms)
        self.client_id = client_id
        self._client: NetworkClient | None = None
        self._versions: dict[int, int] = {}
        self.api_versions: dict[str, Any] = {}  # the bootstrap broker's ApiVersions response
        self._controller: NetworkClient | None = None  # the broker Metadata names as the controller

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._forget_controller()
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def _forget_controller(self) -> None:
        if self._controller is not None:
            await self._controller.close()
            self._controller = None

    async def _connect_controller(self) -> NetworkClient:
        """A connection to the broker the last Metadata names as the controller (the bootstrap
        connection when it names none that is listed)."""
        if self._controller is not None and self._controller.connected:
            return self._controller
        await self._forget_controller()
        md = await self.metadata([])
        brokers = {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}
        if md.get("controller_id", -1) not in brokers:
            return await self._connect()
        host, port = brokers[md["controller_id"]]
        self._controller = await asyncio.wait_for(NetworkClient(
            host, port, client_id=self.client_id, **self.security.client_kwargs()).connect(),
            self.request_timeout_ms / 1000)
        return self._controller

    async def _connect(self) -> NetworkClient:
        if self._client is not None and self._client.connected:
            return self._client
        if self._client is not None:
            await self._client.close()
            self._client = None
        last: Exception | None = None
        for host, port in self.bootstrap:
            try:
                client = await asyncio.wait_for(NetworkClient(
                    host, port, client_id=self.client_id, **self.security.client_kwargs()).connect(),
                    self.request_timeout_ms / 1000)
                try:  # a listener that never answers (not a Kafka broker) must not hang the tool
                    resp = await asyncio.wait_for(client.send(
                        m.API_VERSIONS, 3, {"client_software_name": "odradek-admin", "client_software_version": "1"}
                    ), self.request_timeout_ms / 1000)
                except BaseException:
                    await client.close()
                    raise
                self._versions = {a["api_key"]: a["max_version"] for a in resp["api_keys"]}
                self.api_versions = resp
                self._client = client
                return client
            except (TimeoutError, OSError, ConnectionError) as e:
                refused = connect_failure(e)
                if refused is not None:
                    raise AdminError(refused) from e
                last = e
        raise ConnectionError(f"no bootstrap server reachable: {last}")

    def version(self, api: Api) -> int:
        v = min(api.max_version, self._versions.get(api.api_key, -1))
        if v < api.min_version:
            raise AdminError(
                f"{_ERRORS_PKG}UnsupportedVersionException: The broker does not support {api.name}"
            )
        return v

    async def send(self, api: Api, body: dict[str, Any], top_error: str | None = "error_code",
                   controller: bool = False,
                   retry_if: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
        """Send ``body`` at the highest common version (to the controller with ``controller``);
        retries connection losses, retriable top-level errors (``top_error``: the response field
        holding one) and responses ``retry_if`` says are to be retried until the timeout."""
        deadline = time.monotonic() + self.timeout_ms / 1000
        while True:
            try:
                client = await (self._connect_controller() if controller else self._connect())
                resp = await asyncio.wait_for(client.send(api, self.version(api), body), self.request_timeout_ms / 1000)
            except (TimeoutError, OSError, ConnectionError) as e:
                if time.monotonic() >= deadline:
                    raise AdminError(f"{_ERRORS_PKG}TimeoutException: Timed out waiting for a node assignment. Call: {api.name}") from e
                await self.close()
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            code = resp.get(top_error, 0) if top_error else 0
            if (code in _RETRIABLE or (retry_if is not None and retry_if(resp))) and time.monotonic() < deadline:
                if controller:
                    await self._forget_controller()  # it may have moved: ask Metadata again
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            return resp

    async def connect(self) -> dict[str, Any]:
        """Connect (retrying until the timeout, as :meth:`send`) and return ApiVersions."""
        deadline = time.monotonic() + self.timeout_ms / 1000
        while True:
            try:
                await self._connect()
                return self.api_versions
            except (TimeoutError, OSError, ConnectionError) as e:
                if time.monotonic() >= deadline:
                    raise AdminError(f"{_ERRORS_PKG}TimeoutException: Timed out waiting for a node assignment. Call: apiVersions") from e
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def send_to_nodes(
        self, api: Api, bodies: dict[int, dict[str, Any]], brokers: dict[int, tuple[str, int]]
    ) -> dict[int, dict[str, Any]]:
        """Send each body to its broker (a node id of ``brokers``), concurrently, as Kafka's Admin
        does for leader-bound and broker-bound requests."""

        async def one(node: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            if node not in brokers:
                raise AdminError(f"{_ERRORS_PKG}TimeoutException: Timed out waiting for a node assignment. Call: {api.name}")
            host, port = brokers[node]
            async with AdminClient(f"{host}:{port}", self.timeout_ms, self.client_id,
                                   self.request_timeout_ms, self.security) as direct:
                return node, await direct.send(api, body, top_error=None)

        return dict(await asyncio.gather(*(one(n, b) for n, b in bodies.items())))

    # -- the calls the tools make ---------------------------------------------------------------

    async def metadata(self, topics: list[str] | None) -> dict[str, Any]:
        body = {
            "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        return await self.send(m.METADATA, body, top_error=None)

    async def describe_topic_configs(self, names: list[str]) -> dict[str, list[dict[str, Any]]]:
        if not names:
            return {}
        resp = await self.send(m.DESCRIBE_CONFIGS, {
            "resources": [{"resource_type": 2, "resource_name": n, "configuration_keys": None} for n in names],
            "include_synonyms": False, "include_documentation": False,
        }, top_error=None)
        return {r["resource_name"]: r["configs"] for r in resp["results"]}

    async def list_reassignments(self, topics: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return await self.send(m.LIST_PARTITION_REASSIGNMENTS, {"timeout_ms": self.timeout_ms, "topics": topics},
                               controller=True)

    async def alter_reassignments(self, topics: list[dict[str, Any]]) -> dict[str, Any]:
        return await self.send(m.ALTER_PARTITION_REASSIGNMENTS, {"timeout_ms": self.timeout_ms, "topics": topics},
                               controller=True)

    async def elect_leaders(self, election_type: int, topic_partitions: list[dict[str, Any]] | None) -> dict[str, Any]:
        def not_controller(resp: dict[str, Any]) -> bool:
            """ZooKeeper mode answers NOT_CONTROLLER per partition (Kafka 3.9's KafkaController)."""
            results = [p for t in resp.get("replica_election_results") or [] for p in t["partition_result"]]
            return bool(results) and all(p["error_code"] == Errors.NOT_CONTROLLER for p in results)

        return await self.send(m.ELECT_LEADERS, {
            "election_type": election_type, "topic_partitions": topic_partitions, "timeout_ms": self.timeout_ms,
        }, controller=True, retry_if=not_controller)

    async def incremental_alter_configs(self, resources: list[dict[str, Any]]) -> dict[str, Any]:
        """As Kafka's Admin: a BROKER resource naming a broker goes to that broker, the others to
        any broker. The responses come back in the order of ``resources``."""
        routed: dict[int | None, list[int]] = {}
        for i, r in enumerate(resources):
            node = int(r["resource_name"]) if r["resource_type"] == 4 and r["resource_name"].isdigit() else None
            routed.setdefault(node, []).append(i)
        out: list[dict[str, Any] | None] = [None] * len(resources)
        brokers: dict[int, tuple[str, int]] = {}
        if any(node is not None for node in routed):
            md = await self.metadata([])
            brokers = {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}
        for node, idx in routed.items():
            body = {"resources": [resources[i] for i in idx], "validate_only": False}
            if node is None:
                resp = await self.send(m.INCREMENTAL_ALTER_CONFIGS, body, top_error=None)
            elif node not in brokers:
                raise AdminError(f"{_ERRORS_PKG}TimeoutException: Timed out waiting for a node assignment. Call: incrementalAlterConfigs")
            else:
                async with AdminClient(f"{brokers[node][0]}:{brokers[node][1]}", self.timeout_ms,
                                       self.client_id, self.request_timeout_ms, self.security) as direct:
                    resp = await direct.send(m.INCREMENTAL_ALTER_CONFIGS, body, top_error=None)
            for i, r in zip(idx, resp["responses"], strict=True):
                out[i] = r
        return {"throttle_time_ms": 0, "responses": out}
