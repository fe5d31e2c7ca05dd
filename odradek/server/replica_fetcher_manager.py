"""ReplicaFetcherManager: the follower fetchers of a broker (Kafka's ``ReplicaFetcherManager`` /
``AbstractFetcherManager``).

``num.replica.fetchers`` fetchers per source broker: a partition goes to fetcher
``abs(31 * topic.hashCode() + partition) % num.replica.fetchers`` of its leader (Kafka's
``getFetcherId``, with Java's String.hashCode), so one slow partition does not hold back all the
others of that leader. A fetcher whose leader now listens elsewhere (a restarted broker on another
port) is replaced. The leader's address comes from its registration in the metadata image, on
``inter.broker.listener.name`` (or its first listener).
"""

from __future__ import annotations

import logging

from odradek.java_order import java_string_hash
from odradek.metadata.image import MetadataImage
from odradek.server.replica_fetcher_thread import (
    ClientFactory,
    FetcherConfig,
    FetcherTarget,
    PartitionFetchState,
    ReplicaFetcherThread,
    SourceBroker,
    TopicPartition,
    _default_client,
)
from odradek.server.replication_quota_manager import ReplicationQuotaManager

log = logging.getLogger(__name__)


def fetcher_id(topic: str, partition: int, num_fetchers: int) -> int:
    """Kafka's AbstractFetcherManager.getFetcherId."""
    h = (31 * java_string_hash(topic) + partition) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return (abs(h) if h != -(1 << 31) else 0) % max(1, num_fetchers)


def source_broker(image: MetadataImage, broker_id: int, listener: str) -> SourceBroker | None:
    """The address of ``broker_id`` on ``listener`` (or its first listener) from its registration."""
    reg = image.brokers.get(broker_id)
    if reg is None or not reg.endpoints:
        return None
    ep = reg.endpoints.get(listener) or next(iter(reg.endpoints.values()))
    return SourceBroker(broker_id, ep.host, ep.port)


class ReplicaFetcherManager:
    def __init__(
        self,
        target: FetcherTarget,
        config: FetcherConfig,
        num_fetchers: int = 1,
        client_factory: ClientFactory = _default_client,
        quota: ReplicationQuotaManager | None = None,
    ) -> None:
        self.target = target
        self.quota = quota  # the follower replication throttle, shared by all fetchers
        self.config = config
        self.num_fetchers = max(1, num_fetchers)
        self.client_factory = client_factory
        self.fetchers: dict[tuple[int, int], ReplicaFetcherThread] = {}
        self._partition_fetcher: dict[TopicPartition, tuple[int, int]] = {}
        self._retired: list[ReplicaFetcherThread] = []

    def add_fetcher_for_partitions(
        self, partitions: dict[TopicPartition, tuple[SourceBroker, PartitionFetchState]]
    ) -> None:
        """Fetch these partitions from their leaders (removing them from any other fetcher)."""
        for tp, (source, state) in partitions.items():
            key = (source.broker_id, fetcher_id(tp[0], tp[1], self.num_fetchers))
            old_key = self._partition_fetcher.get(tp)
            if old_key is not None and old_key != key:
                self.remove_fetcher_for_partitions([tp])
            fetcher = self.fetchers.get(key)
            if fetcher is not None and fetcher.source != source:
                # The leader listens elsewhere now: a new fetcher, with its partitions.
                log.info("Replacing fetcher %s: broker %d moved to %s:%d", fetcher.name, source.broker_id,
                         source.host, source.port)
                moved = dict(fetcher.partitions)
                self._retire(key)
                fetcher = None
            else:
                moved = {}
            if fetcher is None:
                fetcher = ReplicaFetcherThread(
                    key[1], source, self.target, self.config, self.client_factory, self.quota
                )
                self.fetchers[key] = fetcher
                fetcher.add_partitions(moved)
                for moved_tp in moved:
                    self._partition_fetcher[moved_tp] = key
                fetcher.start()
            fetcher.add_partitions({tp: state})
            self._partition_fetcher[tp] = key
            log.debug("Fetching %s-%d from broker %d at offset %d, leader epoch %d", tp[0], tp[1],
                      source.broker_id, state.fetch_offset, state.current_leader_epoch)

    def remove_fetcher_for_partitions(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            key = self._partition_fetcher.pop(tp, None)
            if key is None:
                continue
            fetcher = self.fetchers.get(key)
            if fetcher is not None:
                fetcher.remove_partitions([tp])

    def resize_thread_pool(self, new_size: int) -> None:
        """``num.replica.fetchers`` changed (Kafka's AbstractFetcherManager.resizeThreadPool):
        every partition goes, with its fetch state, to the fetcher its hash picks under the new
        count; fetchers left without partitions are stopped by ``shutdown_idle_fetchers``."""
        new_size = max(1, new_size)
        if new_size == self.num_fetchers:
            return
        log.info("Resizing fetcher thread pool size from %d to %d", self.num_fetchers, new_size)
        current = {tp: (f.source, st) for f in self.fetchers.values() for tp, st in f.partitions.items()}
        self.num_fetchers = new_size
        self.add_fetcher_for_partitions(current)

    def fetch_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        key = self._partition_fetcher.get(tp)
        fetcher = self.fetchers.get(key) if key is not None else None
        return fetcher.partitions.get(tp) if fetcher is not None else None

    def _retire(self, key: tuple[int, int]) -> None:
        fetcher = self.fetchers.pop(key)
        self._retired.append(fetcher)
        for tp in list(fetcher.partitions):
            self._partition_fetcher.pop(tp, None)

    async def shutdown_idle_fetchers(self) -> None:
        """Stop the fetchers with no partitions left (and the replaced ones)."""
        for key in [k for k, f in self.fetchers.items() if not f.partitions]:
            self._retire(key)
        retired, self._retired = self._retired, []
        for f in retired:
            await f.shutdown()

    async def shutdown(self) -> None:
        for key in list(self.fetchers):
            self._retire(key)
        retired, self._retired = self._retired, []
        for f in retired:
            await f.shutdown()
        self._partition_fetcher.clear()
