"""Topic and broker configs of a ZooKeeper-mode broker (Kafka's TopicConfigHandler and
BrokerConfigHandler behind ZkConfigManager).

A topic's overrides live in ``/config/topics/<t>``: read the first time the broker needs them (a
new topic's config znode is written before its assignment, without a change notification, as
Kafka's AdminZkClient does), then kept current by ``/config/changes`` notifications, which also
re-configure the topic's open logs on the event loop. :class:`ZkBrokerMetadataCache` answers
``topic_config`` from them (DescribeConfigs, log configs).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping

from odradek.metadata.zk_metadata_cache import ZkMetadataCache
from odradek.zk.kafka_zk_client import KafkaZkClient

log = logging.getLogger(__name__)


class ZkBrokerMetadataCache(ZkMetadataCache):
    """ZkMetadataCache whose topic configs come from ZooKeeper (``/config/topics``)."""

    def __init__(self, broker_id: int) -> None:
        super().__init__(broker_id)
        self.zk: KafkaZkClient | None = None
        self._topic_configs: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def topic_config(self, topic: str) -> Mapping[str, str]:
        with self._lock:
            got = self._topic_configs.get(topic)
        if got is not None:
            return got
        if self.zk is None:
            return {}
        try:
            configs = self.zk.get_entity_configs("topics", topic)
        except Exception as e:  # ZooKeeper unreachable: the defaults, read again next time
            log.warning("Cannot read the configs of topic %s from ZooKeeper: %s", topic, e)
            return {}
        with self._lock:
            self._topic_configs.setdefault(topic, dict(configs))
        return configs

    def set_topic_config(self, topic: str, configs: dict[str, str]) -> None:
        with self._lock:
            self._topic_configs[topic] = dict(configs)


class TopicConfigHandler:
    """``/config/topics/<t>`` changes: the cache takes them, ``apply(topic)`` runs on the loop."""

    def __init__(self, cache: ZkBrokerMetadataCache, loop: asyncio.AbstractEventLoop,
                 apply: Callable[[str], None]) -> None:
        self.cache = cache
        self.loop = loop
        self.apply = apply

    def process_config_changes(self, entity_name: str, configs: dict[str, str]) -> None:
        self.cache.set_topic_config(entity_name, configs)
        log.info("Processing override for entityPath: topics/%s with config: %s", entity_name, configs)
        self.loop.call_soon_threadsafe(self.apply, entity_name)
