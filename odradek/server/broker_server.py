"""BrokerServer: the broker role of a process (Kafka's ``BrokerServer``).

Start-up, once the shared server has opened ``__cluster_metadata``: the MetadataLoader registers
as a Raft listener (the broker's image replays the committed log), the partition logs are loaded
(and recovered where the last stop was unclean), the partitions the metadata says this node leads
are taken up, the broker listeners serve, and the broker registers with the controller. From then
on every topic change flows controller → Raft commit → MetadataLoader → MetadataCache → replica
manager. The broker reaches the controller only through its controller channel: registration and
heartbeats (BrokerLifecycleManager), forwarded admin requests, producer id blocks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from odradek.controller.feature_control_manager import registration_features
from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.log.log_config import LogConfig
from odradek.log.log_manager import LogManager
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import MetadataImage
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.metrics.collectors import BrokerCollector
from odradek.metrics.prometheus import observe_requests
from odradek.network.client import NetworkClient
from odradek.network.socket_server import SocketServer
from odradek.security.api_authorization import BROKER_CHECKS
from odradek.security.auth_helper import AuthHelper, describable_topics
from odradek.security.auth_helper import install as install_authorization
from odradek.security.sasl_apis import SaslApis
from odradek.security.sasl_channel_builder import listener_handler
from odradek.security.ssl_factory import SslConfigError, inter_node_ssl_context
from odradek.security.standard_authorizer import StandardAuthorizer
from odradek.server import config_defs
from odradek.server.acl_apis import AclApis
from odradek.server.add_partitions_to_txn_manager import (
    AddPartitionsToTxnManager,
)
from odradek.server.alter_partition_manager import AlterPartitionManager
from odradek.server.broker_components import (
    bind_broker_listeners,
    build_broker_apis,
    cancel_tasks,
    close_logs,
    fetcher_config,
    load_log_manager,
    run_periodically,
    schedule_log_tasks,
    stop_request_side,
    wire_replication,
)
from odradek.server.broker_lifecycle_manager import BrokerLifecycleManager
from odradek.server.client_quotas import install_client_quotas
from odradek.server.controller_channel import ControllerChannel, ForwardingManager
from odradek.server.dir_lock import StartupError
from odradek.server.kafka_apis import KafkaApis
from odradek.server.kafka_config import KafkaConfig
from odradek.server.meta_properties import directory_ids
from odradek.server.producer_id_manager import ProducerIdManager
from odradek.server.replica_fetcher_manager import ReplicaFetcherManager
from odradek.server.replica_manager import ReplicaManager
from odradek.server.replica_selector import UnknownReplicaSelector, replica_selector
from odradek.server.replication_quota_manager import ReplicationQuotas
from odradek.server.shared_server import SharedServer, now_ms
from odradek.server.txn_apis import TxnApis
from odradek.server.user_scram_apis import UserScramApis

log = logging.getLogger(__name__)

# Start-up waits for the metadata log to catch up: how often it looks, and logs that it waits.
_CATCH_UP_POLL_S = 0.02
_CATCH_UP_LOG_INTERVAL_S = 10.0

__all__ = ["BrokerServer", "run_periodically"]  # run_periodically: now in broker_components


class BrokerServer:
    def __init__(self, config: KafkaConfig, shared: SharedServer) -> None:
        self.config = config
        self.shared = shared
        self.node_id = config.node_id
        self.cluster_id = ""
        self.bound_ports: dict[str, int] = {}
        self._servers: list[SocketServer] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.loader: MetadataLoader | None = None
        self.log_manager: LogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.replica_fetcher_manager: ReplicaFetcherManager | None = None
        self.replication_quotas: ReplicationQuotas | None = None
        self.alter_partition_manager: AlterPartitionManager | None = None
        self.controller_channel: ControllerChannel | None = None
        self.heartbeat_channel: ControllerChannel | None = None
        self.lifecycle_manager: BrokerLifecycleManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.txn_apis: TxnApis | None = None
        self.broker_apis: KafkaApis | None = None
        self.authorizer: StandardAuthorizer | None = None
        self.add_partitions_to_txn_manager: AddPartitionsToTxnManager | None = None
        self.metadata_cache = KRaftMetadataCache()
        self._started = False

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
        if self.replica_fetcher_manager is not None and self.replica_manager is not None:
            self.replica_fetcher_manager.resize_thread_pool(int(self.config.get("num.replica.fetchers")))
            self.replica_manager._shutdown_idle_fetchers()  # those left without partitions

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

    # -- lifecycle ------------------------------------------------------------------------------

    async def startup(
        self, cluster_id: str, controller_channel: ControllerChannel,
        heartbeat_channel: ControllerChannel | None = None,
    ) -> None:
        """Start the broker role; ``controller_channel`` is how it reaches the active controller
        (the broker owns it from now on and closes it at shutdown). ``heartbeat_channel``, when
        given, carries registration and heartbeats on their own (Kafka's "heartbeat" channel), so
        that they never wait behind a forwarded request."""
        cfg = self.config
        self.cluster_id = cluster_id
        channel = self.controller_channel = controller_channel
        # 1. The broker's metadata cache follows what Raft commits, from the start of the log.
        loader = MetadataLoader(self.metadata_cache)
        self.shared.register(loader)
        self.loader = loader
        await self._catch_up_metadata(loader)
        self._apply_dynamic_configs()

        # 2. Partition logs, recovered where the last stop was unclean.
        lm = self.log_manager = await load_log_manager(cfg, self.log_config_for)
        try:
            self._refuse_unsupported_state()
        except StartupError:
            close_logs(lm)
            raise
        self._delete_stray_logs()

        # 3. Take up the partitions the metadata assigns to this node.
        self.replica_manager = ReplicaManager(self.node_id, lm, self.metadata_cache, self.log_config_for)
        try:
            self.replica_manager.replica_selector = replica_selector(cfg.get("replica.selector.class"))
        except UnknownReplicaSelector as e:
            close_logs(lm)
            raise StartupError(str(e)) from e
        self._start_replication(channel)
        image = self.metadata_cache.image
        initial = MetadataDelta(image)
        for t in image.topics.by_name.values():
            for p in t.partitions:
                initial.changed_partitions.add((t.name, p))
        self.replica_manager.apply_delta(initial, image)
        # Dynamic broker configs first: a change reaches every log through the replica manager.
        loader.publishers.append(self._on_broker_configs)
        loader.publishers.append(self.replica_manager.apply_delta)
        loader.publishers.append(self._on_replication_throttles)

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
        loader.publishers.append(self.group_coordinator.on_metadata_update)
        # 3c. The authorizer (authorizer.class.name), following the image's ACLs.
        authorizer = self.authorizer = StandardAuthorizer.from_config(cfg)
        if authorizer is not None:
            authorizer.load(self.metadata_cache.image.acls)
            loader.publishers.append(authorizer.publish)

        # 4. Listeners. Ports are bound before registration so that port 0 can be used.
        self.heartbeat_channel = heartbeat_channel
        lifecycle = self.lifecycle_manager = BrokerLifecycleManager(
            node_id=self.node_id,
            cluster_id=self.cluster_id,
            channel=heartbeat_channel or channel,
            heartbeat_interval_ms=lambda: cfg.broker_heartbeat_interval_ms,
            metadata_offset=lambda: self.metadata_cache.image.offset,
        )
        producer_ids = ProducerIdManager(self.node_id, lambda: lifecycle.broker_epoch, channel)
        # 4b. Transaction coordinator (loads the __transaction_state partitions this node leads),
        # group APIs, KafkaApis.
        built = build_broker_apis(
            node_id=self.node_id, cluster_id=self.cluster_id, cfg=cfg, metadata_cache=self.metadata_cache,
            rm=self.replica_manager, lm=lm, group_coordinator=self.group_coordinator, controller_channel=channel,
            producer_ids=producer_ids,
            extensions=[
                SaslApis(), UserScramApis(self.metadata_cache, ForwardingManager(channel)),
                AclApis(authorizer, ForwardingManager(channel)),
            ],
        )
        self.txn_apis = built.txn_apis
        self.add_partitions_to_txn_manager = built.add_partitions_to_txn_manager
        broker_apis = built.apis
        # (before the authorizer, which guards every handler there is)
        install_client_quotas(broker_apis, cfg, self.metadata_cache, loader, broker_apis.admin_apis.forwarding)
        if authorizer is not None:
            cache = self.metadata_cache
            helper = AuthHelper(authorizer, cache.get_topic_name, cache.contains_topic)
            install_authorization(broker_apis, helper, BROKER_CHECKS)
            built.group_apis.describable_topics = describable_topics(helper)
        self.broker_apis = broker_apis  # its fetch_manager holds the fetch session cache
        metrics = self.shared.metrics
        observe_requests(broker_apis, self._servers, cfg, metrics)
        if metrics is not None:
            metrics.add(BrokerCollector(self.replica_manager, lambda: self.group_coordinator))
        cache = self.metadata_cache
        for server in self._servers:
            server.handler = listener_handler(
                cfg, server.listener_name, broker_apis, lambda mech, user: cache.image.scram.get(mech, user)
            )
            await server.start()

        # 5. Register with the controller and heartbeat; the controller unfences the broker
        # once it has caught up with the metadata.
        endpoints = []
        for adv in cfg.advertised_listeners:
            port = adv.port or self.bound_ports.get(adv.name, adv.port)
            endpoints.append((adv.name, adv.host, port))
        features = registration_features(self.metadata_cache.image.features.levels)
        lifecycle.start(
            endpoints, features, cfg.broker_rack, directory_ids(list(cfg.log_dirs)),
            security_protocols={adv.name: adv.security_protocol for adv in cfg.advertised_listeners},
        )
        await lifecycle.wait_for_unfence()
        # Once more now that the controller has unfenced us (it does so once this broker has
        # replayed past its registration): records committed while we caught up may have deleted
        # topics whose logs the first pass still kept.
        self._delete_stray_logs()
        broker_epoch = lifecycle.broker_epoch

        # 6. Background work: compaction, retention, flushing, checkpoints, expirations.
        schedule_log_tasks(self._tasks, cfg, lm, self.replica_manager)
        self._started = True
        addresses = ", ".join(f"{n}://{h}:{p}" for n, h, p in endpoints)
        log.info(
            "Odradek broker ready: node id %d, cluster id %s, listening on %s, data in %s, broker epoch %d",
            self.node_id, self.cluster_id, addresses, ",".join(cfg.log_dirs), broker_epoch,
        )

    def _start_replication(self, channel: ControllerChannel) -> None:
        """Follower fetchers and ISR changes (AlterPartition through the controller channel)."""
        rm = self.replica_manager
        assert rm is not None
        cfg = self.config

        def broker_epoch() -> int:
            return self.lifecycle_manager.broker_epoch if self.lifecycle_manager is not None else -1

        quotas = self.replication_quotas = ReplicationQuotas(
            self.node_id, cfg._int("replication.quota.window.num"), cfg._int("replication.quota.window.size.seconds")
        )
        self._update_replication_throttles(set(self.metadata_cache.image.topics.by_name), rates=True)
        try:
            ibl_tls = inter_node_ssl_context(cfg, cfg.inter_broker_listener_name)
        except SslConfigError as e:
            raise StartupError(f"inter-broker listener {cfg.inter_broker_listener_name} (client side): {e}") from e
        self.replica_fetcher_manager = ReplicaFetcherManager(
            rm, fetcher_config(cfg, self.node_id), cfg._int("num.replica.fetchers"), quota=quotas.follower,
            client_factory=lambda source, client_id: NetworkClient(
                source.host, source.port, client_id, max_in_flight=1, sasl_role="broker", ssl_context=ibl_tls,
            ),
        )
        rm.leader_quota = quotas.leader
        self.alter_partition_manager = AlterPartitionManager(channel, self.node_id, broker_epoch)
        wire_replication(rm, cfg, self.replica_fetcher_manager, self.alter_partition_manager, broker_epoch)

    def _update_replication_throttles(self, topics: set[str], rates: bool) -> None:
        """Replication throttles from the configs: the rates (dynamic broker configs) and the
        throttled replicas of ``topics`` (topic configs; a topic no longer there is unthrottled)."""
        quotas = self.replication_quotas
        if quotas is None:
            return
        if rates:
            quotas.update_rates(
                self.config._int("leader.replication.throttled.rate"),
                self.config._int("follower.replication.throttled.rate"),
            )
        known = self.metadata_cache.image.topics.by_name
        for topic in topics:
            quotas.update_topic(topic, self.metadata_cache.topic_config(topic) if topic in known else None)

    def _on_replication_throttles(self, delta: MetadataDelta, image: MetadataImage) -> None:
        topics = set(delta.changed_topic_configs) | set(delta.deleted_topics)
        rates = bool(delta.changed_broker_configs & {"", str(self.node_id)})
        if topics or rates:
            self._update_replication_throttles(topics, rates)

    async def bind_listeners(self) -> None:
        """Bind (not yet serve) the broker listeners (every listener not a controller one)."""
        cfg = self.config
        await bind_broker_listeners(cfg, self._servers, self.bound_ports, skip=cfg.controller_listener_names)

    # Internal topics of Apache Kafka features Odradek does not have: records in them (a data
    # directory Kafka used) mean state Odradek would silently drop or misread.
    UNSUPPORTED_INTERNAL_TOPICS = {
        "__share_group_state": "share groups (KIP-932)",
    }

    def _refuse_unsupported_state(self) -> None:
        """Refuse data directories whose state this node cannot serve (typically Apache Kafka's,
        before a migration): records of features Odradek does not have. (Partitions with
        replicas on other brokers are served now: replication follows them.)"""
        assert self.log_manager is not None
        for (topic, part), lg in self.log_manager.all_logs().items():
            what = self.UNSUPPORTED_INTERNAL_TOPICS.get(topic)
            if what is not None and lg.log_end_offset > lg.log_start_offset:
                raise StartupError(
                    f"{topic}-{part} holds records: these directories used {what}, which Odradek "
                    "does not support; refusing to start rather than lose that state. Copy the "
                    "topics over with a replicating tool (e.g. MirrorMaker 2) instead"
                )

    async def _catch_up_metadata(self, loader: MetadataLoader) -> None:
        """Wait until the loader has every record committed when this node first learns the
        quorum's high watermark. Until an observer (or a follower) has heard from the leader it
        does not know how much of its local metadata log is committed, and the image is empty or
        old: deleting "stray" logs or taking up partitions from it would delete every partition
        of a broker restarted with the rest of the cluster. Kafka's broker likewise publishes no
        metadata (and starts its LogManager) only once its loader has reached the high
        watermark. Waits as long as it takes (Kafka's ``server.max.startup.time.ms`` is
        unbounded by default), logging every ``_CATCH_UP_LOG_INTERVAL_S``; SIGTERM cancels it."""
        client = self.shared.raft_client
        assert client is not None
        loop = asyncio.get_running_loop()
        started = loop.time()
        next_log = started + _CATCH_UP_LOG_INTERVAL_S
        target: int | None = None
        while True:
            hw = client.known_high_watermark
            if hw is not None and target is None:
                target = hw
            if target is not None and client.listener_offset(loader) >= target:
                if loop.time() - started > 1:
                    log.info("Metadata caught up with the quorum's high watermark %d after %.1f s",
                             target, loop.time() - started)
                return
            if loop.time() >= next_log:
                next_log += _CATCH_UP_LOG_INTERVAL_S
                log.info(
                    "Waiting for the metadata log to catch up before loading partitions: high "
                    "watermark %s, replayed below offset %d, leader %s",
                    "unknown" if target is None else target, client.listener_offset(loader),
                    client.leader_and_epoch.leader_id,
                )
            await asyncio.sleep(_CATCH_UP_POLL_S)

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

    async def shutdown(self) -> None:
        if self._started:
            log.info("Odradek broker %d shutting down", self.node_id)
        if self.lifecycle_manager is not None and self.config.controlled_shutdown_enable:
            # Kafka's controlled shutdown, first and while still serving (as Kafka's
            # BrokerServer.shutdown): the controller moves this broker's leaderships to the
            # other ISR members and takes it out of the ISRs, clients and followers follow the
            # metadata, and only then does this broker stop; its next incarnation may register
            # at once instead of waiting for this one's session to run out.
            started = now_ms()
            if await self.lifecycle_manager.controlled_shutdown(self.config.broker_session_timeout_ms):
                log.info("Broker %d: controlled shutdown done in %d ms (leaderships moved)", self.node_id,
                         now_ms() - started)
        # Stop taking requests, answer the ones already taken (waiting produces and fetches
        # are completed now), and only then close the connections.
        for server in self._servers:
            server.begin_shutdown()
        await stop_request_side(self.txn_apis, self.group_coordinator, self.add_partitions_to_txn_manager,
                                self.replica_fetcher_manager, self.alter_partition_manager, self.replica_manager)
        for server in self._servers:
            await server.stop()
        self._servers.clear()
        if self.loader is not None and self.shared.raft_client is not None:
            self.shared.raft_client.unregister(self.loader)
        if self.lifecycle_manager is not None:
            await self.lifecycle_manager.close()
        if self.heartbeat_channel is not None:
            await self.heartbeat_channel.close()
        if self.controller_channel is not None:
            await self.controller_channel.close()
        await cancel_tasks(self._tasks)
        loop = asyncio.get_running_loop()
        if self.log_manager is not None:
            lm = self.log_manager
            await loop.run_in_executor(None, lm.shutdown)
        if self._started:
            log.info("Odradek broker %d shut down cleanly", self.node_id)
        self._started = False
