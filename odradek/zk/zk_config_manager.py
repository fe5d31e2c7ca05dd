"""ZkConfigManager: dynamic config changes of a ZooKeeper-mode cluster (Kafka 3.9's
``ZkConfigManager`` over ``ZkNodeChangeNotificationListener``).

At start every stored entity config is handed to its handler; then every
``/config/changes/config_change_<n>`` newer than the last processed one names an entity
(``topics/<t>``, ``brokers/<id>`` or ``brokers/<default>``) whose whole config is read and handed
over. Notifications older than ``change_expiration_ms`` are purged, as Kafka does.

Handlers run on the ZooKeeper client's dispatcher thread (startup: the caller's thread); one that
touches event-loop state hands the work over (``loop.call_soon_threadsafe``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from odradek.zk import zk_data as z
from odradek.zk.admin_zk_client import DEFAULT_ENTITY
from odradek.zk.kafka_zk_client import KafkaZkClient, StateChangeHandler, ZNodeChildChangeHandler

log = logging.getLogger(__name__)

CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka's ZkNodeChangeNotificationListener default


class ConfigHandler(Protocol):
    def process_config_changes(self, entity_name: str, configs: dict[str, str]) -> None:
        """``configs`` is the entity's whole current config (empty: every override removed);
        ``entity_name`` is the znode's (a broker id or ``<default>`` for brokers)."""


class ZkConfigManager:
    def __init__(self, zk: KafkaZkClient, handlers: Mapping[str, ConfigHandler],
                 change_expiration_ms: int = CHANGE_EXPIRATION_MS) -> None:
        self.zk = zk
        self.handlers = dict(handlers)  # entity type ("topics", "brokers", ...) → handler
        self.change_expiration_ms = change_expiration_ms
        self.last_executed_change = -1
        self._lock = threading.Lock()
        self._closed = False
        manager = self

        class _Children(ZNodeChildChangeHandler):
            path = z.CONFIG_CHANGES_PATH

            def handle_child_change(self) -> None:
                manager.process_notifications()

        class _Session(StateChangeHandler):
            name = "config-change-listener"

            def after_initializing_session(self) -> None:
                manager.process_notifications()

        self._children = _Children()
        self._session = _Session()

    def startup(self) -> None:
        """Blocking: register the watch, hand every stored config over, then the notifications."""
        self.zk.make_sure_persistent_path_exists(z.CONFIG_CHANGES_PATH)
        self.zk.register_znode_child_change_handler(self._children)
        self.zk.register_state_change_handler(self._session)
        for entity_type, handler in self.handlers.items():
            for name in self.zk.get_children(z.config_entity_type_path(entity_type)):
                self._apply(handler, entity_type, name)
        self.process_notifications()

    def shutdown(self) -> None:
        self._closed = True
        self.zk.unregister_znode_child_change_handler(z.CONFIG_CHANGES_PATH)
        self.zk.unregister_state_change_handler(self._session.name)

    def _apply(self, handler: ConfigHandler, entity_type: str, name: str) -> None:
        configs = self.zk.get_entity_configs(entity_type, name)
        try:
            handler.process_config_changes(name, configs)
        except Exception:
            log.exception("Applying the config of %s/%s failed", entity_type, name)

    def process_notifications(self) -> None:
        """Read the children (re-arming the watch) and apply every new notification in order."""
        with self._lock:
            if self._closed:
                return
            children = self.zk.get_children(z.CONFIG_CHANGES_PATH)
            now_ms = int(time.time() * 1000)
            numbered = [(int(z.sequence_number(n, z.CONFIG_CHANGE_PREFIX)), n) for n in children
                        if n.startswith(z.CONFIG_CHANGE_PREFIX)
                        and z.sequence_number(n, z.CONFIG_CHANGE_PREFIX).isdigit()]
            for seq, node in sorted(numbered):
                path = f"{z.CONFIG_CHANGES_PATH}/{node}"
                got = self.zk.get_data(path)
                if got is None:
                    continue
                data, stat = got
                if seq > self.last_executed_change:
                    self._process_one(node, data)
                    self.last_executed_change = seq
                if now_ms - int(stat.ctime) > self.change_expiration_ms:
                    self._purge(path)

    def _process_one(self, node: str, data: bytes) -> None:
        try:
            entity_path = z.decode_config_change_notification(data)
        except z.ZkDataError as e:
            log.error("Ignoring config change notification %s: %s", node, e)
            return
        entity_type, _, name = entity_path.partition("/")
        handler = self.handlers.get(entity_type)
        if handler is None or not name:
            log.debug("No handler for config change %s (%s)", node, entity_path)
            return
        log.info("Processing config change notification %s for %s", node, entity_path)
        self._apply(handler, entity_type, name)

    def _purge(self, path: str) -> None:
        try:
            self.zk.delete_path(path)
        except Exception:
            log.debug("Purging %s failed", path, exc_info=True)


class BrokerConfigHandler:
    """Kafka's BrokerConfigHandler: of ``/config/brokers/*`` only ``<default>`` and this broker's
    id matter; each change hands both layers to ``apply(default, per_broker)`` (for instance
    ``KafkaConfig.update_dynamic``, moved onto the event loop by the caller)."""

    def __init__(self, broker_id: int, apply: Callable[[dict[str, str], dict[str, str]], object]) -> None:
        self.broker_id = broker_id
        self.apply = apply
        self.default: dict[str, str] = {}
        self.per_broker: dict[str, str] = {}

    def process_config_changes(self, entity_name: str, configs: dict[str, str]) -> None:
        if entity_name == DEFAULT_ENTITY:
            self.default = dict(configs)
        elif entity_name == str(self.broker_id):
            self.per_broker = dict(configs)
        else:
            return
        self.apply(dict(self.default), dict(self.per_broker))
