"""The console's connection to a cluster: one :class:`NetworkClient` per node, opened on demand.

Every request has a deadline (``request.timeout.ms``); a node that cannot be reached or does not
answer in time fails the request with :class:`ConsoleError` (the page shows it) and its
connection is dropped, so the next page load connects again — the console outlives the cluster
it watches. Requests go at the newest version both sides know, capped where the console builds
bodies for older versions only. Responses are bounded (``max_response_bytes``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from odradek.cli.admin import parse_bootstrap
from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors, error_name
from odradek.protocol.schema import Api
from odradek.security.client_security import PLAINTEXT, ClientSecurity, connect_failure

log = logging.getLogger(__name__)

Address = tuple[str, int]
EARLIEST, LATEST = -2, -1
DEFAULT_REQUEST_TIMEOUT_MS = 10_000
# A Fetch of the message browser asks for at most 1 MiB, but a broker returns a first batch
# whole whatever its size (KIP-74); responses beyond this close the connection instead.
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class ConsoleError(Exception):
    """A request the console could not complete; the message is shown on the page."""


@dataclass
class Broker:
    node_id: int
    host: str
    port: int
    rack: str | None

    @property
    def address(self) -> Address:
        return (self.host, self.port)


@dataclass
class NodeInfo:
    """What a node said in ApiVersions."""

    versions: dict[int, int]
    supported_features: list[tuple[str, int, int]] = field(default_factory=list)
    finalized_features: list[tuple[str, int]] = field(default_factory=list)
    finalized_epoch: int = -1


class ConsoleClient:
    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "odradek-console",
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap: list[Address] = parse_bootstrap(bootstrap)
        self.security = security or PLAINTEXT  # TLS / SASL of every connection
        self.client_id = client_id
        self.timeout_s = request_timeout_ms / 1000
        self.max_response_bytes = max_response_bytes
        self._clients: dict[Address, NetworkClient] = {}
        self._info: dict[Address, NodeInfo] = {}
        self._locks: dict[Address, asyncio.Lock] = {}
        self.brokers: dict[int, Broker] = {}  # from the last Metadata

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for c in clients.values():
            await c.close()

    async def _drop(self, addr: Address) -> None:
        c = self._clients.pop(addr, None)
        self._info.pop(addr, None)
        if c is not None:
            await c.close()

    async def node(self, addr: Address) -> tuple[NetworkClient, NodeInfo]:
        """A connected client to ``addr`` and what it said in ApiVersions."""
        lock = self._locks.setdefault(addr, asyncio.Lock())
        async with lock:
            c = self._clients.get(addr)
            if c is not None and c.connected and addr in self._info:
                return c, self._info[addr]
            await self._drop(addr)
            c = NetworkClient(addr[0], addr[1], client_id=self.client_id,
                              max_response_bytes=self.max_response_bytes, **self.security.client_kwargs())
            try:
                await asyncio.wait_for(c.connect(), self.timeout_s)
                r = await asyncio.wait_for(c.send(m.API_VERSIONS, 3, {
                    "client_software_name": "odradek-console", "client_software_version": "1",
                }), self.timeout_s)
                if r["error_code"] != Errors.NONE:  # an older broker: v0 is always served
                    r = await asyncio.wait_for(c.send(m.API_VERSIONS, 0, {}), self.timeout_s)
            except (OSError, TimeoutError, ConnectionError) as e:
                await c.close()
                why = connect_failure(e) or e or type(e).__name__
                raise ConsoleError(f"cannot connect to {addr[0]}:{addr[1]}: {why}") from e
            info = NodeInfo(
                {a["api_key"]: a["max_version"] for a in r["api_keys"]},
                [(f["name"], f["min_version"], f["max_version"]) for f in r.get("supported_features") or []],
                [(f["name"], f["max_version_level"]) for f in r.get("finalized_features") or []],
                r.get("finalized_features_epoch", -1),
            )
            self._clients[addr] = c
            self._info[addr] = info
            return c, info

    async def version(self, addr: Address, api: Api, cap: int) -> int:
        """The version to use with ``addr`` (-1: it does not serve ``api`` at a version we speak)."""
        _, info = await self.node(addr)
        v = min(cap, api.max_version, info.versions.get(api.api_key, -1))
        return v if v >= api.min_version else -1

    async def send(self, addr: Address, api: Api, cap: int, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Send ``body`` to ``addr``; the version used and the response."""
        c, _ = await self.node(addr)
        v = await self.version(addr, api, cap)
        if v < 0:
            raise ConsoleError(f"the broker at {addr[0]}:{addr[1]} does not support {api.name}")
        try:
            return v, await asyncio.wait_for(c.send(api, v, body), self.timeout_s)
        except (OSError, TimeoutError, ConnectionError) as e:
            await self._drop(addr)
            what = "timed out" if isinstance(e, TimeoutError) else str(e)
            raise ConsoleError(f"{api.name} to {addr[0]}:{addr[1]} failed: {what}") from e

    async def any_node(self) -> Address:
        """The first reachable bootstrap server (then the brokers the cluster named)."""
        errors: list[str] = []
        candidates = list(self.bootstrap) + [b.address for b in self.brokers.values() if b.address not in self.bootstrap]
        for addr in candidates:
            try:
                await self.node(addr)
                return addr
            except ConsoleError as e:
                errors.append(str(e))
        raise ConsoleError("no broker reachable: " + "; ".join(errors))

    async def node_info(self, addr: Address) -> NodeInfo:
        return (await self.node(addr))[1]

    # ---- calls several pages make -----------------------------------------------------------

    async def metadata(self, topics: list[str] | None) -> dict[str, Any]:
        addr = await self.any_node()
        _, r = await self.send(addr, m.METADATA, 12, {
            "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        })
        self.brokers = {
            b["node_id"]: Broker(b["node_id"], b["host"], b["port"], b.get("rack")) for b in r["brokers"]
        }
        return r

    def broker_address(self, node_id: int) -> Address:
        b = self.brokers.get(node_id)
        if b is None:
            raise ConsoleError(f"broker {node_id} is not in the cluster's metadata (leader unavailable)")
        return b.address

    async def leaders(self, topics: list[str]) -> dict[tuple[str, int], int]:
        md = await self.metadata(topics)
        return {
            (t["name"], p["partition_index"]): p["leader_id"]
            for t in md["topics"] if t["error_code"] == Errors.NONE
            for p in t["partitions"]
        }

    async def list_offsets(
        self, tps: list[tuple[str, int]], timestamp: int, leaders: dict[tuple[str, int], int] | None = None
    ) -> dict[tuple[str, int], int | str]:
        """ListOffsets to each partition's leader: the offset, or an error name (a string)."""
        if leaders is None:
            leaders = await self.leaders(sorted({t for t, _ in tps}))
        by_leader: dict[int, list[tuple[str, int]]] = {}
        out: dict[tuple[str, int], int | str] = {}
        for tp in tps:
            leader = leaders.get(tp, -1)
            if leader < 0 or leader not in self.brokers:
                out[tp] = "LEADER_NOT_AVAILABLE"
            else:
                by_leader.setdefault(leader, []).append(tp)

        async def one(leader: int, group: list[tuple[str, int]]) -> None:
            topics: dict[str, list[dict[str, Any]]] = {}
            for t, p in group:
                topics.setdefault(t, []).append(
                    {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp})
            try:
                _, r = await self.send(self.broker_address(leader), m.LIST_OFFSETS, 10, {
                    "replica_id": -1, "isolation_level": 0, "timeout_ms": int(self.timeout_s * 1000),
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                })
            except ConsoleError:
                for tp in group:
                    out[tp] = "BROKER_NOT_AVAILABLE"
                return
            for t in r["topics"]:
                for p in t["partitions"]:
                    tp = (t["name"], p["partition_index"])
                    out[tp] = p["offset"] if p["error_code"] == Errors.NONE else error_name(p["error_code"])

        await asyncio.gather(*(one(leader, group) for leader, group in by_leader.items()))
        return out
