"""A fake Kafka cluster for tool tests: one asyncio server per node id on 127.0.0.1, speaking the
protocol with Odradek's own codec, in a thread of its own (the tool under test runs its own
event loop). Every request is recorded as (node id, API name, version, body); the answers come
from handler functions the test sets per API name: ``handler(node_id, version, body) -> body``.
Metadata and ApiVersions have defaults built from ``topics`` and ``api_versions``."""

from __future__ import annotations

import asyncio
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol.header import (
    decode_request_header,
    encode_response_header,
    peek_request_header,
)
from odradek.protocol.messages import generated as g

Handler = Callable[[int, int, dict[str, Any]], dict[str, Any]]


@dataclass
class Partition:
    leader: int
    replicas: list[int]


@dataclass
class Recorded:
    node: int
    api: str
    version: int
    body: dict[str, Any]


@dataclass
class FakeCluster:
    node_ids: list[int]
    topics: dict[str, dict[int, Partition]] = field(default_factory=dict)
    handlers: dict[str, Handler] = field(default_factory=dict)
    # api name -> max version advertised (default: the definition's max); None: not advertised
    api_versions: dict[str, int | None] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    ports: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._servers: list[asyncio.Server] = []
        self._lock = threading.Lock()

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeCluster:
        self._thread.start()
        for node in self.node_ids:
            server = asyncio.run_coroutine_threadsafe(self._serve(node), self._loop).result(10)
            self._servers.append(server)
            self.ports[node] = server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def close() -> None:
            for s in self._servers:
                s.close()
            for s in self._servers:
                await s.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def bootstrap(self, node: int | None = None) -> str:
        return f"127.0.0.1:{self.ports[node if node is not None else self.node_ids[0]]}"

    def sent(self, api: str) -> list[Recorded]:
        """The recorded requests of one API (ApiVersions and Metadata are recorded too)."""
        with self._lock:
            return [r for r in self.requests if r.api == api]

    # ---- serving ---------------------------------------------------------------------------

    async def _serve(self, node: int) -> asyncio.Server:
        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    size = struct.unpack(">i", await reader.readexactly(4))[0]
                    frame = await reader.readexactly(size)
                    writer.write(self._answer(node, frame))
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        return await asyncio.start_server(on_client, "127.0.0.1", 0)

    def _answer(self, node: int, frame: bytes) -> bytes:
        api_key, version, _ = peek_request_header(frame)
        api = g.DEFINITIONS[api_key]
        header, pos = decode_request_header(frame, api.request_header_version(version))
        body, _ = api.decode_request(version, frame, pos)
        with self._lock:
            self.requests.append(Recorded(node, api.name, version, body))
        handler = self.handlers.get(api.name) or getattr(self, f"_default_{api.name}", None)
        if handler is None:
            raise AssertionError(f"the fake cluster has no answer to {api.name}")
        response = handler(node, version, body)
        payload = encode_response_header(header.correlation_id, api.response_header_version(version))
        payload += b"".join(bytes(p) for p in api.encode_response(version, response))
        return struct.pack(">i", len(payload)) + payload

    def _default_ApiVersions(self, node: int, version: int, body: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        keys = []
        for api in g.DEFINITIONS.values():
            top = self.api_versions.get(api.name, api.max_version)
            if top is not None:
                keys.append({"api_key": api.api_key, "min_version": api.min_version, "max_version": top})
        return {"error_code": 0, "api_keys": keys, "throttle_time_ms": 0}

    def _default_Metadata(self, node: int, version: int, body: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        wanted = None if body["topics"] is None else [t["name"] for t in body["topics"]]
        topics: list[dict[str, Any]] = []
        for name in (sorted(self.topics) if wanted is None else wanted):
            parts = self.topics.get(name)
            if parts is None:
                topics.append({"error_code": 3, "name": name, "topic_id": None, "is_internal": False,
                               "partitions": []})
                continue
            topics.append({"error_code": 0, "name": name, "is_internal": name.startswith("__"), "partitions": [
                {"error_code": 5 if p.leader < 0 else 0, "partition_index": i, "leader_id": p.leader,
                 "leader_epoch": 0, "replica_nodes": p.replicas, "isr_nodes": p.replicas, "offline_replicas": []}
                for i, p in sorted(parts.items())
            ]})
        return {
            "throttle_time_ms": 0,
            "brokers": [{"node_id": n, "host": "127.0.0.1", "port": self.ports[n], "rack": None} for n in self.node_ids],
            "cluster_id": "fake", "controller_id": self.node_ids[0], "topics": topics,
        }
