"""BrokerServer: one Odradek process, wiring the controller role and the broker role together.

Start-up follows KRaft's order for a combined node (``process.roles=broker,controller``):
format the data directories if new, open ``__cluster_metadata`` and replay it into the
controller's image and the broker's image, load (and if needed recover) the partition logs, take
up the partitions the metadata says this node leads, open the listeners, and register the
broker through the controller. From then on every topic change flows controller → metadata log
→ broker image → replica manager.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from odradek.controller.quorum_controller import QuorumController
from odradek.coordinator.group_coordinator import GroupCoordinator
from odradek.log.log import Log
from odradek.log.log_cleaner import CleanerConfig
from odradek.log.log_config import LogConfig
from odradek.log.log_manager import LogManager
from odradek.metadata.image import MetadataDelta, MetadataImage
from odradek.metadata.loader import MetadataLoader
from odradek.network.socket_server import SocketServer
from odradek.protocol import messages as m
from odradek.raft.metadata_log import TOPIC as METADATA_TOPIC
from odradek.raft.metadata_log import MetadataLog
from odradek.server import config_defs
from odradek.server.dynamic_broker_config import DynamicBrokerConfigPolicy
from odradek.server.group_apis import GroupApis
from odradek.server.kafka_apis import KafkaApis
from odradek.server.kafka_config import KafkaConfig
from odradek.server.meta_properties import ensure_formatted
from odradek.server.producer_id_manager import ProducerIdManager
from odradek.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)


class BrokerServer:
    def __init__(self, config: KafkaConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = ""
        self.bound_ports: dict[str, int] = {}
        self._servers: list[SocketServer] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._metadata_raw_log: Log | None = None
        self.log_manager: LogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.controller: QuorumController | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.image = MetadataImage()
        self._started = False

    # -- configuration helpers ------------------------------------------------------------------

    def log_config_for(self, topic: str) -> LogConfig:
        return config_defs.build_log_config(self.config, self.image.topic_config(topic))

    def _apply_dynamic_configs(self) -> None:
        """Lay the dynamic broker configs of the metadata image over the static configuration."""
        ignored = self.config.update_dynamic(
            self.image.broker_config(""), self.image.broker_config(str(self.node_id))
        )
        if ignored:
            log.error("Dynamic broker configs with invalid values ignored: %s", ", ".join(sorted(ignored)))
        if self.log_manager is not None:
            lm = self.log_manager
            lm.default_config = config_defs.build_log_config(self.config, {})
            lm.cleaner.config = dataclasses.replace(
                lm.cleaner.config,
                backoff_ms=self.config.log_cleaner_backoff_ms,
                dedupe_buffer_size=int(self.config.get("log.cleaner.dedupe.buffer.size")),
            )

    def _on_broker_configs(self, delta: MetadataDelta, image: MetadataImage) -> None:
        if not delta.changed_broker_configs & {"", str(self.node_id)}:
            return
        self._apply_dynamic_configs()
        log.info(
            "Dynamic broker configs now in effect: cluster default %s, broker %d %s",
            self.config.dynamic_default_configs, self.node_id, self.config.dynamic_broker_configs,
        )
        # Every topic's log config may default from a changed broker key (Kafka's
        # DynamicLogConfig.reconfigure updates all logs).
        delta.changed_topic_configs.update(image.topics_by_name)

    def _on_metadata_commit(self, _offset: int) -> None:
        self.loader.catch_up()

    # -- lifecycle ------------------------------------------------------------------------------

    async def startup(self) -> None:
        loop = asyncio.get_running_loop()
        cfg = self.config
        self.cluster_id = ensure_formatted(cfg.log_dirs, self.node_id)

        # 1. The metadata log, replayed by both roles.
        meta_dir = os.path.join(os.path.abspath(cfg.metadata_log_dir), f"{METADATA_TOPIC}-0")
        meta_config = LogConfig(segment_bytes=8 * 1024 * 1024, retention_ms=-1, retention_bytes=-1)
        self._metadata_raw_log = await loop.run_in_executor(
            None,
            lambda: Log.load(meta_dir, meta_config, now_ms=_now_ms(), clean_shutdown=False),
        )
        metadata_log = MetadataLog(self._metadata_raw_log)
        self.loader = MetadataLoader(metadata_log, self.image)
        self.controller = QuorumController(
            self.node_id,
            metadata_log,
            default_partitions=cfg.num_partitions,
            default_replication_factor=cfg.default_replication_factor,
            delete_topic_enable=cfg.delete_topic_enable,
            validate_config=config_defs.validate_topic_config,
            on_commit=self._on_metadata_commit,
            broker_configs=DynamicBrokerConfigPolicy(cfg),
        )
        self.controller.replay_log()
        self.loader.catch_up()
        self._apply_dynamic_configs()

        # 2. Partition logs, recovered where the last stop was unclean.
        default_log_config = config_defs.build_log_config(cfg, {})
        cleaner_config = CleanerConfig(
            enable=cfg.log_cleaner_enable,
            backoff_ms=cfg.log_cleaner_backoff_ms,
            dedupe_buffer_size=int(cfg.get("log.cleaner.dedupe.buffer.size")),
        )
        self.log_manager = LogManager(
            cfg.log_dirs, default_log_config, _now_ms(), cleaner_config=cleaner_config
        )
        lm = self.log_manager
        await loop.run_in_executor(None, lambda: lm.load_logs(self.log_config_for, _now_ms()))
        self._delete_stray_logs()

        # 3. Take up the partitions the metadata assigns to this node.
        self.replica_manager = ReplicaManager(self.node_id, lm, self.image, self.log_config_for)
        initial = MetadataDelta()
        for t in self.image.topics_by_name.values():
            for p in t.partitions:
                initial.changed_partitions.add((t.name, p))
        self.replica_manager.apply_delta(initial, self.image)
        # Dynamic broker configs first: a change reaches every log through the replica manager.
        self.loader.publishers.append(self._on_broker_configs)
        self.loader.publishers.append(self.replica_manager.apply_delta)

        # 3b. Group coordinator: loads the __consumer_offsets partitions this node leads (now
        # and on every later leadership change) and serves the group APIs.
        self.group_coordinator = GroupCoordinator(
            node_id=self.node_id,
            config=cfg,
            replica_manager=self.replica_manager,
            image=self.image,
            controller=self.controller,
        )
        self.group_coordinator.startup()
        # Consumer groups (KIP-848) assign from the topic metadata: new topics and partitions
        # reach them at their members' next heartbeat.
        self.loader.publishers.append(self.group_coordinator.on_metadata_update)

        # 4. Listeners. Ports are bound before registration so that port 0 can be used.
        controller = self.controller

        async def allocate_block() -> tuple[int, int]:
            return await controller.allocate_producer_ids(self.node_id, self.broker_epoch)

        self.broker_epoch = -1
        broker_apis = KafkaApis(
            producer_id_manager=ProducerIdManager(allocate_block),
            node_id=self.node_id,
            cluster_id=self.cluster_id,
            config=cfg,
            image=self.image,
            replica_manager=self.replica_manager,
            controller=self.controller,
            log_manager=lm,
            extensions=[GroupApis(self.group_coordinator)],
        )
        controller_apis = KafkaApis(
            node_id=self.node_id,
            cluster_id=self.cluster_id,
            config=cfg,
            image=self.image,
            replica_manager=self.replica_manager,
            controller=self.controller,
            log_manager=lm,
            enabled_apis=[m.API_VERSIONS],
        )
        controller_names = set(cfg.controller_listener_names)
        for lst in cfg.listeners:
            is_controller = lst.name in controller_names
            if is_controller and "controller" not in cfg.process_roles:
                continue
            if not is_controller and "broker" not in cfg.process_roles:
                continue
            server = SocketServer(
                lst.host,
                lst.port,
                controller_apis if is_controller else broker_apis,
                listener_name=lst.name,
                max_request_bytes=cfg.socket_request_max_bytes,
            )
            await server.start()
            self._servers.append(server)
            self.bound_ports[lst.name] = server.port

        # 5. Register with the controller; the broker is unfenced once the records commit.
        endpoints = []
        for adv in cfg.advertised_listeners:
            port = adv.port or self.bound_ports.get(adv.name, adv.port)
            endpoints.append((adv.name, adv.host, port))
        broker_epoch = await self.controller.bootstrap_and_register(uuid.uuid4(), endpoints, cfg.broker_rack)
        self.broker_epoch = broker_epoch

        # 6. Background work: retention, flushing, checkpoints.
        # Compaction runs in a worker thread, one pass at a time, off the request path.
        if cleaner_config.enable:
            self._schedule("log-cleaner", lambda: lm.cleaner_backoff_ms, lambda: lm.clean_logs(_now_ms()))
        self._schedule("log-retention", cfg.log_retention_check_interval_ms, lambda: lm.cleanup_logs(_now_ms()))
        self._schedule("log-flusher", min(cfg.log_flush_scheduler_interval_ms, 1000), lambda: lm.flush_dirty_logs(_now_ms()))
        self._schedule("recovery-point-checkpoint", cfg.log_flush_offset_checkpoint_interval_ms, lm.checkpoint_logs)
        self._schedule(
            "high-watermark-checkpoint", cfg.replica_high_watermark_checkpoint_interval_ms, lm.checkpoint_high_watermarks
        )
        self._started = True
        addresses = ", ".join(f"{n}://{h}:{p}" for n, h, p in endpoints)
        log.info(
            "Odradek broker ready: node id %d, cluster id %s, listening on %s, data in %s, broker epoch %d",
            self.node_id, self.cluster_id, addresses, ",".join(cfg.log_dirs), broker_epoch,
        )

    def _delete_stray_logs(self) -> None:
        assert self.log_manager is not None
        for (topic, part), lg in self.log_manager.all_logs().items():
            t = self.image.topics_by_name.get(topic)
            stray = t is None or part not in t.partitions
            if not stray and t is not None and lg.topic_id is not None and lg.topic_id != t.topic_id.bytes:
                stray = True  # a deleted-and-recreated topic: the old log is not this topic's
            if stray:
                log.info("Deleting stray log %s-%d: its topic no longer exists in the metadata", topic, part)
                self.log_manager.delete_log(topic, part)

    def _schedule(self, name: str, interval_ms: int | Callable[[], int], fn: Callable[[], Any]) -> None:
        """Run ``fn`` in a worker thread every ``interval_ms`` (a callable: read before each wait)."""
        interval = interval_ms if callable(interval_ms) else (lambda: interval_ms)
        if not 0 < interval() < 2**62:
            return

        async def loop_task() -> None:
            loop = asyncio.get_running_loop()
            while True:
                await asyncio.sleep(min(max(interval(), 1), 2**31) / 1000.0)
                try:
                    await loop.run_in_executor(None, fn)
                except Exception:
                    log.exception("Background task %s failed", name)

        self._tasks.append(asyncio.get_running_loop().create_task(loop_task(), name=name))

    async def shutdown(self) -> None:
        log.info("Odradek broker %d shutting down", self.node_id)
        # Stop taking requests, answer the ones already taken (waiting produces and fetches
        # are completed now), and only then close the connections.
        for server in self._servers:
            server.begin_shutdown()
        if self.group_coordinator is not None:
            await self.group_coordinator.shutdown()
        if self.replica_manager is not None:
            self.replica_manager.shutdown()
        for server in self._servers:
            await server.stop()
        self._servers.clear()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()
        loop = asyncio.get_running_loop()
        if self.log_manager is not None:
            lm = self.log_manager
            await loop.run_in_executor(None, lambda: lm.shutdown(_now_ms()))
        if self._metadata_raw_log is not None:
            raw = self._metadata_raw_log
            await loop.run_in_executor(None, raw.flush)
            raw.close()
        log.info("Odradek broker %d shut down cleanly", self.node_id)
