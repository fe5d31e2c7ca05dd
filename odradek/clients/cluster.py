"""The cluster as the tools' clients see it: bootstrap, a connection per broker (ApiVersions
negotiated on each), and the metadata they route by (brokers, partitions, leaders)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors, error_name
from odradek.protocol.schema import Api
from odradek.security.client_security import PLAINTEXT, ClientSecurity, connect_failure

TopicPartition = tuple[str, int]

# Newest version of each API these clients speak (they use topic names, not topic ids).
VERSION_CAPS: dict[int, int] = {
    m.PRODUCE.api_key: 9,
    m.FETCH.api_key: 12,
    m.LIST_OFFSETS.api_key: 7,
    m.METADATA.api_key: 12,
    m.FIND_COORDINATOR.api_key: 4,
    m.JOIN_GROUP.api_key: 7,
    m.SYNC_GROUP.api_key: 5,
    m.HEARTBEAT.api_key: 4,
    m.LEAVE_GROUP.api_key: 4,
    m.OFFSET_COMMIT.api_key: 8,
    m.OFFSET_FETCH.api_key: 7,
}


class ClusterError(Exception):
    """A failure a tool reports and exits on (the message is the line printed)."""


class UnknownTopicError(ClusterError):
    pass


@dataclass
class TopicInfo:
    name: str
    leaders: dict[int, int] = field(default_factory=dict)  # partition -> leader id (-1: none)

    @property
    def partitions(self) -> list[int]:
        return sorted(self.leaders)


class Cluster:
    def __init__(self, bootstrap: str, client_id: str, request_timeout_ms: int = 30_000,
                 security: ClientSecurity | None = None) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.security = security or PLAINTEXT  # TLS / SASL of every connection
        self.client_id = client_id
        self.request_timeout_s = request_timeout_ms / 1000
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, TopicInfo] = {}
        self._conns: dict[tuple[str, int], NetworkClient] = {}
        self._versions: dict[tuple[str, int], dict[int, tuple[int, int]]] = {}
        self._any: tuple[str, int] | None = None

    async def start(self) -> None:
        """Connect to the first reachable bootstrap server (a :class:`ClusterError` naming them
        when none is)."""
        for addr in self.bootstrap:
            try:
                await self.connection(addr)
                self._any = addr
                return
            except (OSError, ConnectionError, TimeoutError) as e:
                refused = connect_failure(e)
                if refused is not None:  # a login or certificate refused: Kafka's clients stop
                    raise ClusterError(refused) from e
                continue
        names = ", ".join(f"{h}:{p}" for h, p in self.bootstrap)
        raise ClusterError(
            f"Connection to node -1 ({names}) could not be established. Broker may not be available."
        )

    async def close(self) -> None:
        conns = list(self._conns.values())
        self._conns.clear()
        for c in conns:
            await c.close()

    async def connection(self, addr: tuple[str, int]) -> NetworkClient:
        conn = self._conns.get(addr)
        if conn is not None:
            return conn
        conn = NetworkClient(addr[0], addr[1], client_id=self.client_id, **self.security.client_kwargs())
        await asyncio.wait_for(conn.connect(), self.request_timeout_s)
        try:
            resp = await asyncio.wait_for(conn.send(m.API_VERSIONS, 3, {
                "client_software_name": "odradek", "client_software_version": "1",
            }), self.request_timeout_s)
        except BaseException:
            await conn.close()
            raise
        self._versions[addr] = {a["api_key"]: (a["min_version"], a["max_version"]) for a in resp["api_keys"]}
        self._conns[addr] = conn
        return conn

    def version(self, addr: tuple[str, int], api: Api) -> int:
        lo, hi = self._versions.get(addr, {}).get(api.api_key, (0, -1))
        v = min(hi, api.max_version, VERSION_CAPS.get(api.api_key, api.max_version))
        if v < max(lo, api.min_version):
            raise ClusterError(
                f"org.apache.kafka.common.errors.UnsupportedVersionException: the broker at "
                f"{addr[0]}:{addr[1]} does not support a version of {api.name} this client speaks"
            )
        return v

    def address(self, node_id: int) -> tuple[str, int]:
        addr = self.brokers.get(node_id)
        if addr is None:
            raise ConnectionError(f"broker {node_id} is not in the cluster's metadata")
        return addr

    async def send(self, addr: tuple[str, int] | None, api: Api, body: dict[str, Any]) -> dict[str, Any]:
        """One request to ``addr`` (None: any broker) at the newest common version. A lost
        connection is dropped so that the next request reconnects."""
        if addr is None:
            addr = self._any or self.bootstrap[0]
        try:
            conn = await self.connection(addr)
            fut = conn.send_nowait(api, self.version(addr, api), body)
            return await asyncio.wait_for(fut, self.request_timeout_s)
        except (OSError, ConnectionError, TimeoutError):
            stale = self._conns.pop(addr, None)
            if stale is not None:
                await stale.close()
            raise

    def send_nowait(self, addr: tuple[str, int], api: Api, body: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        """As :meth:`send` on an open connection, without waiting (Produce with acks=0)."""
        conn = self._conns[addr]
        return conn.send_nowait(api, self.version(addr, api), body)

    async def metadata(self, topics: list[str] | None, allow_auto_create: bool = False) -> dict[str, Any]:
        """Refresh brokers and the given topics (None: all); returns the raw response."""
        body = {
            "topics": None if topics is None else [{"name": t, "topic_id": None} for t in topics],
            "allow_auto_topic_creation": allow_auto_create,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }
        last: Exception | None = None
        for addr in [a for a in (self._any, *self.brokers.values(), *self.bootstrap) if a is not None]:
            try:
                resp = await self.send(addr, m.METADATA, body)
                self._any = addr
                break
            except (OSError, ConnectionError, TimeoutError) as e:
                last = e
        else:
            raise ClusterError(f"no broker reachable for metadata: {last}")
        self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in resp["brokers"]}
        for t in resp["topics"]:
            if t["error_code"] == Errors.NONE:
                self.topics[t["name"]] = TopicInfo(
                    t["name"], {p["partition_index"]: p["leader_id"] for p in t["partitions"]}
                )
            else:
                self.topics.pop(t["name"], None)
        return resp

    async def wait_for_topics(self, topics: list[str], timeout_ms: int, allow_auto_create: bool,
                              backoff_ms: int = 100) -> None:
        """Metadata for ``topics`` with a leader for every partition, retried until the timeout
        (Kafka's producer waits max.block.ms for it)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            resp = await self.metadata(topics, allow_auto_create)
            errors = {t["name"]: t["error_code"] for t in resp["topics"]}
            ready = all(
                errors.get(t) == Errors.NONE and t in self.topics
                and all(lead >= 0 for lead in self.topics[t].leaders.values())
                for t in topics
            )
            if ready:
                return
            bad = [t for t in topics if errors.get(t) not in (None, Errors.NONE, Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                                              Errors.LEADER_NOT_AVAILABLE)]
            if bad:
                raise ClusterError(f"Cannot get metadata for topic {bad[0]}: {error_name(errors[bad[0]])}")
            if loop.time() >= deadline:
                missing = next(t for t in topics if t not in self.topics) if any(t not in self.topics for t in topics) else topics[0]
                raise UnknownTopicError(
                    f"org.apache.kafka.common.errors.TimeoutException: Topic {missing} not present in metadata after {timeout_ms} ms."
                )
            await asyncio.sleep(backoff_ms / 1000)

    async def list_offsets(self, tps: list[TopicPartition], timestamp: int | dict[TopicPartition, int],
                           isolation_level: int = 0) -> dict[TopicPartition, int]:
        """Offsets by timestamp (-2 earliest, -1 latest) from each partition's leader; -1 where
        no record has a timestamp at or after the one asked."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            by_leader.setdefault(self.topics[tp[0]].leaders.get(tp[1], -1), []).append(tp)
        out: dict[TopicPartition, int] = {}
        for leader, group in by_leader.items():
            topics: dict[str, list[dict[str, Any]]] = {}
            for t, p in group:
                ts = timestamp[(t, p)] if isinstance(timestamp, dict) else timestamp
                topics.setdefault(t, []).append({"partition_index": p, "current_leader_epoch": -1, "timestamp": ts})
            resp = await self.send(self.address(leader), m.LIST_OFFSETS, {
                "replica_id": -1, "isolation_level": isolation_level, "timeout_ms": 30000,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            })
            for t in resp["topics"]:
                for p in t["partitions"]:
                    if p["error_code"] != Errors.NONE:
                        raise ConnectionError(
                            f"ListOffsets for {t['name']}-{p['partition_index']}: {error_name(p['error_code'])}")
                    out[(t["name"], p["partition_index"])] = p["offset"]
        return out


def parse_bootstrap(value: str) -> list[tuple[str, int]]:
    out = []
    for item in value.split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        if not item:
            continue
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ClusterError(f"Invalid url in bootstrap.servers: {item}")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ClusterError("No resolvable bootstrap urls given in bootstrap.servers")
    return out
