"""The leaders' high watermarks of the partitions the coordinator's groups committed offsets for
but this broker has no replica of, for ``kafka_consumergroup_lag`` (kafka_exporter computes lag
from the leader's latest offset; a group's coordinator need not host its partitions).

:class:`LeaderOffsets` refreshes them in the background every ``REFRESH_INTERVAL_S`` (kept off
the scrape path: a scrape only reads the cache) with ListOffsets (latest, READ_UNCOMMITTED: the
high watermark) sent to each partition's leader over the inter-broker listener, one request per
leader, all leaders at once. The cache holds at most one offset per committed, non-local
partition: entries are dropped when the partition is no longer committed, becomes local, has no
live leader or its leader does not answer (a missing sample rather than a stale one). It runs
only while the Prometheus endpoint is served.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.network.client import ConnectionClosed, NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.server.replica_fetcher_manager import SourceBroker, source_broker

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
REFRESH_INTERVAL_S = 10.0
LIST_OFFSETS_VERSION = 4  # current_leader_epoch and isolation_level; Odradek brokers serve 1-10
LATEST_TIMESTAMP = -1

ClientFactory = Callable[[SourceBroker], NetworkClient]


def _default_client(source: SourceBroker) -> NetworkClient:
    return NetworkClient(source.host, source.port, "odradek-consumer-lag", sasl_role="broker")


class LeaderOffsets:
    def __init__(
        self,
        metadata_cache: KRaftMetadataCache,
        node_id: int,
        listener: str,
        request_timeout_ms: int,
        committed: Callable[[], set[TopicPartition]],
        is_local: Callable[[TopicPartition], bool],
        client_factory: ClientFactory = _default_client,
        interval_s: float = REFRESH_INTERVAL_S,
    ) -> None:
        self.metadata_cache = metadata_cache
        self.node_id = node_id
        self.listener = listener
        self.request_timeout_s = request_timeout_ms / 1000
        self.committed = committed  # the partitions the coordinator's groups committed offsets for
        self.is_local = is_local  # whether this broker has the partition's log
        self.client_factory = client_factory
        self.interval_s = interval_s
        self.high_watermarks: dict[TopicPartition, int] = {}
        self._clients: dict[SourceBroker, NetworkClient] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="consumer-lag-leader-offsets")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
        self.high_watermarks.clear()

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:  # the next round tries again; the broker is unaffected
                log.exception("Refreshing the leaders' high watermarks for the consumer lag failed")
            await asyncio.sleep(self.interval_s)

    async def refresh(self) -> None:
        """One round: ask every leader of a committed, non-local partition for its high watermark."""
        wanted = {tp for tp in self.committed() if not self.is_local(tp)}
        cache = self.metadata_cache
        alive = cache.get_alive_broker_ids()
        by_leader: dict[SourceBroker, list[TopicPartition]] = {}
        for tp in wanted:
            reg = cache.get_topic_partitions(tp[0]).get(tp[1])
            source = None
            if reg is not None and reg.leader >= 0 and reg.leader != self.node_id and reg.leader in alive:
                source = source_broker(cache.image, reg.leader, self.listener)
            if source is None:
                wanted.discard(tp)
            else:
                by_leader.setdefault(source, []).append(tp)
        for tp in [tp for tp in self.high_watermarks if tp not in wanted]:
            del self.high_watermarks[tp]
        for source in [s for s in self._clients if s not in by_leader]:  # connections to leaders only
            await self._clients.pop(source).close()
        await asyncio.gather(*(self._ask(source, tps) for source, tps in by_leader.items()))

    async def _ask(self, source: SourceBroker, tps: list[TopicPartition]) -> None:
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(tps):
            topics.setdefault(topic, []).append(partition)
        body = {
            "replica_id": -1, "isolation_level": 0,  # as a consumer: up to the high watermark
            "topics": [
                {"name": t, "partitions": [
                    {"partition_index": p, "current_leader_epoch": -1, "timestamp": LATEST_TIMESTAMP} for p in ps
                ]}
                for t, ps in topics.items()
            ],
        }
        client = self._clients.get(source)
        if client is None:
            client = self._clients[source] = self.client_factory(source)
        try:
            resp = await asyncio.wait_for(client.send(m.LIST_OFFSETS, LIST_OFFSETS_VERSION, body), self.request_timeout_s)
        except (TimeoutError, ConnectionClosed, OSError) as e:
            log.debug("ListOffsets to broker %d for the consumer lag failed: %s", source.broker_id, e)
            for tp in tps:
                self.high_watermarks.pop(tp, None)
            return
        answered: set[TopicPartition] = set()
        for t in resp.get("topics") or []:
            for p in t["partitions"]:
                tp = (t["name"], p["partition_index"])
                if tp[1] in topics.get(tp[0], ()) and p["error_code"] == Errors.NONE and p["offset"] >= 0:
                    self.high_watermarks[tp] = p["offset"]
                    answered.add(tp)
        for tp in tps:
            if tp not in answered:
                self.high_watermarks.pop(tp, None)
