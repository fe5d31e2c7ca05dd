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
import socket
import time
from collections.abc import Callable
from typing import Any

from odradek.controller.controller_apis import ControllerApis
from odradek.controller.quorum_controller import (
    METADATA_VERSION,
    SUPPORTED_FEATURES,
    QuorumController,
)
from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.log.errors import KafkaStorageError
from odradek.log.log import Log
from odradek.log.log_cleaner import CleanerConfig
from odradek.log.log_config import LogConfig
from odradek.log.log_manager import LogManager
from odradek.metadata.delta import MetadataDelta, MetadataReplayError
from odradek.metadata.image import MetadataImage
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.network.limits import ConnectionQuotas, RequestMemoryPool
from odradek.network.request_channel import CloseConnection, ConnectionInfo
from odradek.network.socket_server import SocketServer
from odradek.protocol import messages as m
from odradek.raft.metadata_log import TOPIC as METADATA_TOPIC
from odradek.raft.metadata_log import MetadataLog, UnreadableMetadataRecord
from odradek.server import config_defs
from odradek.server.broker_lifecycle_manager import BrokerLifecycleManager
from odradek.server.controller_channel import InMemoryControllerChannel
from odradek.server.dir_lock import DirLock, StartupError, lock_dirs
from odradek.server.dynamic_broker_config import DynamicBrokerConfigPolicy
from odradek.server.group_apis import GroupApis
from odradek.server.kafka_apis import KafkaApis
from odradek.server.kafka_config import KafkaConfig
from odradek.server.meta_properties import ensure_formatted
from odradek.server.producer_id_manager import ProducerIdManager
from odradek.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


def _network_limits(cfg: KafkaConfig) -> tuple[RequestMemoryPool | None, ConnectionQuotas]:
    """queued.max.request.bytes (<= 0: no pool, as in Kafka) and the connection quotas."""
    pool_bytes = cfg.queued_max_request_bytes
    quotas = ConnectionQuotas(
        cfg.max_connections, cfg.max_connections_per_ip, cfg.max_connections_per_ip_overrides
    )
    return (RequestMemoryPool(pool_bytes) if pool_bytes > 0 else None), quotas


def _now_ms() -> int:
    return int(time.time() * 1000)


async def run_periodically(name: str, interval_ms: int | Callable[[], int], fn: Callable[[], Any]) -> None:
    """Run ``fn`` in a worker thread every ``interval_ms`` (a callable is read before each wait,
    so a dynamic config change takes effect) until cancelled. A failure is logged
    once (a disk-full or I/O error as one line, anything else with its traceback), then quietly
    until a run succeeds again, which is logged once too: a checkpoint that cannot be written
    on a full disk does not log a traceback every few seconds."""
    loop = asyncio.get_running_loop()
    failing = 0  # consecutive failed runs
    interval = interval_ms if callable(interval_ms) else (lambda: interval_ms)
    while True:
        await asyncio.sleep(min(max(interval(), 1), 2**31) / 1000.0)
        try:
            await loop.run_in_executor(None, fn)
        except Exception as e:
            failing += 1
            if failing > 1:
                log.debug("Background task %s failed again: %s", name, e)
            elif isinstance(e, (OSError, KafkaStorageError)):
                log.error(
                    "Background task %s failed: %s; retrying every %d ms (logged again when it "
                    "succeeds)", name, e, interval_ms,
                )
            else:
                log.exception("Background task %s failed (logged once until it succeeds)", name)
            continue
        if failing:
            log.info("Background task %s succeeds again after %d failed runs", name, failing)
            failing = 0


class _NotServing:
    """The handler of a listener bound before the broker can answer (never called: a bound
    listener accepts nothing until it is given its real handler and started)."""

    def handle(self, conn: ConnectionInfo, frame: bytearray) -> None:
        raise CloseConnection("the broker is not serving yet")


_NOT_SERVING = _NotServing()


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
        self.controller_channel: InMemoryControllerChannel | None = None
        self.lifecycle_manager: BrokerLifecycleManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.broker_apis: KafkaApis | None = None
        self.metadata_cache = KRaftMetadataCache()
        self._started = False
        self._dir_locks: list[DirLock] = []

    # -- configuration helpers ------------------------------------------------------------------

    def log_config_for(self, topic: str) -> LogConfig:
        return config_defs.build_log_config(self.config, self.metadata_cache.topic_config(topic))

    def _apply_dynamic_configs(self) -> None:
        """Lay the dynamic broker configs of the metadata image over the static configuration."""
        ignored = self.config.update_dynamic(
            self.metadata_cache.broker_config(""), self.metadata_cache.broker_config(str(self.node_id))
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
        delta.changed_topic_configs.update(image.topics.by_name)

    def _on_metadata_commit(self, _offset: int) -> None:
        self.loader.catch_up()

    # -- lifecycle ------------------------------------------------------------------------------

    async def startup(self) -> None:
        loop = asyncio.get_running_loop()
        cfg = self.config
        # 0. Lock every data directory, then bind every listener, before anything in the
        # directories is read or written. Locks first: a second process on the same directories
        # (usually with the same ports too) is told which directory is in use, and the lock file
        # is all it creates. Binding next: a port that is taken fails the start while
        # meta.properties, the clean-shutdown marker and the logs are still untouched.
        # Nothing is accepted until step 4, when the request handlers exist.
        self._dir_locks = lock_dirs([*cfg.log_dirs, cfg.metadata_log_dir])
        try:
            await self._bind_listeners()
        except BaseException:
            await self._close_listeners()
            self._release_locks()
            raise
        self.cluster_id = ensure_formatted(cfg.log_dirs, self.node_id, metadata_log_dir=cfg.metadata_log_dir)

        # 1. The metadata log, replayed by both roles.
        meta_dir = os.path.join(os.path.abspath(cfg.metadata_log_dir), f"{METADATA_TOPIC}-0")
        meta_config = LogConfig(segment_bytes=8 * 1024 * 1024, retention_ms=-1, retention_bytes=-1)
        self._metadata_raw_log = await loop.run_in_executor(
            None,
            lambda: Log.load(meta_dir, meta_config, now_ms=_now_ms(), clean_shutdown=False),
        )
        metadata_log = MetadataLog(self._metadata_raw_log)
        self.loader = MetadataLoader(metadata_log, self.metadata_cache)
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
        try:
            metadata_log.load_snapshot()
            self.controller.replay_log()
            self.loader.catch_up()
            # A log Apache Kafka wrote is at its quorum's epoch (one more per election): go on
            # at that epoch, never below it (the leader epoch cache only moves forward).
            self.controller.epoch = max(self.controller.epoch, self._metadata_raw_log.leader_epoch_cache.latest_epoch)
            level = self.metadata_cache.metadata_version()
            if level > METADATA_VERSION:
                log.warning(
                    "The metadata log was written by Apache Kafka at metadata.version level %d, newer "
                    "than Odradek's %d: Odradek applies the records it knows (topics, partitions, "
                    "configs, brokers, features) and keeps reporting level %d as finalized",
                    level, METADATA_VERSION, level,
                )
        except (UnreadableMetadataRecord, MetadataReplayError) as e:
            raise StartupError(
                f"cannot take over the metadata log {e.source}: the record at offset {e.offset} "
                f"cannot be applied ({e.reason}); nothing was changed, start Apache Kafka on "
                "these directories again or remove what Odradek does not support first"
            ) from e
        self._apply_dynamic_configs()

        # 2. Partition logs, recovered where the last stop was unclean.
        default_log_config = config_defs.build_log_config(cfg, {})
        cleaner_config = CleanerConfig(
            enable=cfg.log_cleaner_enable,
            backoff_ms=cfg.log_cleaner_backoff_ms,
            dedupe_buffer_size=int(cfg.get("log.cleaner.dedupe.buffer.size")),
        )
        lm = LogManager(cfg.log_dirs, default_log_config, _now_ms, cleaner_config=cleaner_config)
        try:
            await loop.run_in_executor(None, lambda: lm.load_logs(self.log_config_for))
        except BaseException:
            # Close what was loaded, but write no clean-shutdown marker: the logs not yet
            # loaded must still be recovered next time.
            for lg in lm.all_logs().values():
                lg.close()
            raise
        self.log_manager = lm
        try:
            self._refuse_unsupported_state()
        except StartupError:
            for lg in lm.all_logs().values():
                lg.close()
            raise
        self._delete_stray_logs()

        # 3. Take up the partitions the metadata assigns to this node.
        self.replica_manager = ReplicaManager(self.node_id, lm, self.metadata_cache, self.log_config_for)
        image = self.metadata_cache.image
        initial = MetadataDelta(image)
        for t in image.topics.by_name.values():
            for p in t.partitions:
                initial.changed_partitions.add((t.name, p))
        self.replica_manager.apply_delta(initial, image)
        # Dynamic broker configs first: a change reaches every log through the replica manager.
        self.loader.publishers.append(self._on_broker_configs)
        self.loader.publishers.append(self.replica_manager.apply_delta)

        # 3a. The controller's request handlers, and the broker's channel to them. A quorum of
        # one: this node is the Raft leader, so the active controller.
        def raft_leader() -> int | None:
            return self.node_id

        controller_apis = ControllerApis(
            node_id=self.node_id, cluster_id=self.cluster_id, config=cfg, controller=self.controller,
            leader_id=raft_leader,
        )
        channel = InMemoryControllerChannel({self.node_id: controller_apis}, raft_leader)
        self.controller_channel = channel

        # 3b. Group coordinator: loads the __consumer_offsets partitions this node leads (now
        # and on every later leadership change) and serves the group APIs.
        self.group_coordinator = GroupCoordinator(
            node_id=self.node_id,
            config=cfg,
            replica_manager=self.replica_manager,
            metadata_cache=self.metadata_cache,
            controller_channel=channel,
        )
        self.group_coordinator.startup()
        # Consumer groups (KIP-848) assign from the topic metadata: new topics and partitions
        # reach them at their members' next heartbeat.
        self.loader.publishers.append(self.group_coordinator.on_metadata_update)

        # 4. Listeners. Ports are bound before registration so that port 0 can be used.
        lifecycle = BrokerLifecycleManager(
            node_id=self.node_id,
            cluster_id=self.cluster_id,
            channel=channel,
            heartbeat_interval_ms=lambda: cfg.broker_heartbeat_interval_ms,
            metadata_offset=lambda: self.metadata_cache.image.offset,
        )
        self.lifecycle_manager = lifecycle
        broker_apis = KafkaApis(
            producer_id_manager=ProducerIdManager(self.node_id, lambda: lifecycle.broker_epoch, channel),
            node_id=self.node_id,
            cluster_id=self.cluster_id,
            config=cfg,
            metadata_cache=self.metadata_cache,
            replica_manager=self.replica_manager,
            controller_channel=channel,
            log_manager=lm,
            extensions=[GroupApis(self.group_coordinator)],
        )
        self.broker_apis = broker_apis  # its fetch_manager holds the fetch session cache
        controller_listener_apis = KafkaApis(
            node_id=self.node_id,
            cluster_id=self.cluster_id,
            config=cfg,
            metadata_cache=self.metadata_cache,
            replica_manager=self.replica_manager,
            controller_channel=channel,
            log_manager=lm,
            enabled_apis=[m.API_VERSIONS],
            extensions=[controller_apis],
        )
        controller_names = set(cfg.controller_listener_names)
        for lst in cfg.listeners:  # advertised by DescribeCluster to the controllers' clients
            if lst.name in controller_names and lst.name in self.bound_ports:
                host = socket.gethostname() if lst.host in ("", "0.0.0.0", "::") else lst.host
                controller_apis.listener_endpoints[lst.name] = (host, self.bound_ports[lst.name])
        for server in self._servers:
            is_controller = server.listener_name in controller_names
            server.handler = controller_listener_apis if is_controller else broker_apis
            await server.start()

        # 5. Register with the controller and heartbeat; the controller unfences the broker
        # once it has caught up with the metadata.
        endpoints = []
        for adv in cfg.advertised_listeners:
            port = adv.port or self.bound_ports.get(adv.name, adv.port)
            endpoints.append((adv.name, adv.host, port))
        lifecycle.start(endpoints, SUPPORTED_FEATURES, cfg.broker_rack)
        await lifecycle.wait_for_unfence()
        broker_epoch = lifecycle.broker_epoch

        # 6. Background work: retention, flushing, checkpoints.
        # Compaction runs in a worker thread, one pass at a time, off the request path.
        if cleaner_config.enable:
            self._schedule("log-cleaner", lambda: lm.cleaner_backoff_ms, lm.clean_logs)
        self._schedule("log-retention", cfg.log_retention_check_interval_ms, lm.cleanup_logs)
        self._schedule("log-flusher", min(cfg.log_flush_scheduler_interval_ms, 1000), lm.flush_dirty_logs)
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

    async def _bind_listeners(self) -> None:
        """Bind (not yet serve) every listener this node's roles use; a port that cannot be
        bound raises StartupError("cannot listen on host:port: reason")."""
        cfg = self.config
        controller_names = set(cfg.controller_listener_names)
        # Request memory and connection limits, shared by the broker's listeners (the controller
        # listener has its own, as Kafka's controller has its own socket server).
        limits = {role: _network_limits(cfg) for role in ("broker", "controller")}
        for lst in cfg.listeners:
            is_controller = lst.name in controller_names
            if is_controller and "controller" not in cfg.process_roles:
                continue
            if not is_controller and "broker" not in cfg.process_roles:
                continue
            pool, quotas = limits["controller" if is_controller else "broker"]
            server = SocketServer(
                lst.host,
                lst.port,
                _NOT_SERVING,
                listener_name=lst.name,
                max_request_bytes=cfg.socket_request_max_bytes,
                memory_pool=pool,
                quotas=quotas,
                connections_max_idle_ms=cfg.connections_max_idle_ms,
            )
            try:
                await server.bind()
            except OSError as e:
                reason = os.strerror(e.errno) if e.errno else str(e)
                raise StartupError(
                    f"cannot listen on {lst.host or '0.0.0.0'}:{lst.port} "
                    f"(listener {lst.name}): {reason[:1].lower()}{reason[1:]}"
                ) from e
            self._servers.append(server)
            self.bound_ports[lst.name] = server.port

    async def _close_listeners(self) -> None:
        for server in self._servers:
            await server.stop()
        self._servers.clear()

    def _release_locks(self) -> None:
        for lock in self._dir_locks:
            lock.release()
        self._dir_locks = []

    # Internal topics of Apache Kafka features Odradek does not have: records in them (a data
    # directory Kafka used) mean state Odradek would silently drop or misread.
    UNSUPPORTED_INTERNAL_TOPICS = {
        "__transaction_state": "transactions (read_committed consumers would see aborted records)",
        "__share_group_state": "share groups (KIP-932)",
    }

    def _refuse_unsupported_state(self) -> None:
        """Refuse data directories whose state this node cannot serve (typically Apache Kafka's,
        before a migration): partitions replicated on other brokers, and records of features
        Odradek does not have."""
        assert self.log_manager is not None
        elsewhere = sorted(
            (t.name, pid, list(p.replicas))
            for t in self.metadata_cache.image.topics.by_name.values()
            for pid, p in t.partitions.items()
            if any(r != self.node_id for r in p.replicas)
        )
        if elsewhere:
            name, pid, replicas = elsewhere[0]
            raise StartupError(
                f"{len(elsewhere)} partition(s) have replicas on other brokers (e.g. {name}-{pid} "
                f"on {replicas}); Odradek runs a single node: move every replica to broker "
                f"{self.node_id} on Apache Kafka first (kafka-reassign-partitions), then stop it "
                "and start Odradek on its log.dirs"
            )
        for (topic, part), lg in self.log_manager.all_logs().items():
            what = self.UNSUPPORTED_INTERNAL_TOPICS.get(topic)
            if what is not None and lg.log_end_offset > lg.log_start_offset:
                raise StartupError(
                    f"{topic}-{part} holds records: these directories used {what}, which Odradek "
                    "does not support; refusing to start rather than lose that state. Copy the "
                    "topics over with a replicating tool (e.g. MirrorMaker 2) instead"
                )

    def _delete_stray_logs(self) -> None:
        assert self.log_manager is not None
        for (topic, part), lg in self.log_manager.all_logs().items():
            t = self.metadata_cache.image.topics.by_name.get(topic)
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
        self._tasks.append(
            asyncio.get_running_loop().create_task(run_periodically(name, interval, fn), name=name)
        )

    async def shutdown(self) -> None:
        if self._started:
            log.info("Odradek broker %d shutting down", self.node_id)
        # Stop taking requests, answer the ones already taken (waiting produces and fetches
        # are completed now), and only then close the connections.
        for server in self._servers:
            server.begin_shutdown()
        if self.lifecycle_manager is not None:
            await self.lifecycle_manager.close()
        if self.group_coordinator is not None:
            await self.group_coordinator.shutdown()
        if self.replica_manager is not None:
            self.replica_manager.shutdown()
        for server in self._servers:
            await server.stop()
        self._servers.clear()
        if self.controller_channel is not None:
            await self.controller_channel.close()
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
            await loop.run_in_executor(None, lm.shutdown)
        if self._metadata_raw_log is not None:
            raw = self._metadata_raw_log
            await loop.run_in_executor(None, raw.flush)
            raw.close()
            self._metadata_raw_log = None
        self._release_locks()
        if self._started:
            log.info("Odradek broker %d shut down cleanly", self.node_id)
        self._started = False
