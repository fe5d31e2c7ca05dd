"""ZkBrokerServer: one Odradek process in ZooKeeper mode (Kafka 3.9's ``KafkaServer``).

Chosen by ``zookeeper.connect`` without ``process.roles``. Start-up, in Kafka's order: lock the
data directories, connect to ZooKeeper (``zookeeper.connect`` with its chroot,
``zookeeper.session.timeout.ms``, ``zookeeper.connection.timeout.ms``), create the top-level
paths, get or create ``/cluster/id`` and check it against every log dir's ``meta.properties``
(version 0: ``broker.id`` and ``cluster.id``, written when missing: no ``odradek storage format``
in ZooKeeper mode, as in Kafka), bind the listeners, load the logs, start replication,
coordinators and KafkaApis (with the :class:`ZkMetadataCache` the controller's UpdateMetadata
fills and :class:`ZkControllerApis` for LeaderAndIsr / UpdateMetadata / StopReplica), register
``/brokers/ids/<id>`` (the broker epoch is its czxid) and start the ZooKeeper controller
(:class:`ZkControllerRuntime`): every broker races for ``/controller``. After a session expiry the
controller's RegisterBrokerAndReelect event registers the broker again (new epoch).

The controller-bound requests (AlterPartition, ControlledShutdown, AllocateProducerIds) are served
on the broker listeners: handed to this process's controller when it is the active one,
NOT_CONTROLLER otherwise. The broker's own AlterPartition, producer-id and controlled-shutdown
requests go to the controller named by the last UpdateMetadata.

Security as in KRaft mode: SSL / SASL_* listeners (the SASL authenticator in front of KafkaApis;
SCRAM with the credentials of ``/config/users/<user>``, see
:mod:`odradek.security.zk_credential_provider`), and every connection to another broker
(fetchers, the controller's channel, the channels to the controller, markers) with the TLS
context and SASL login of the inter-broker listener.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

from odradek.controller.controller_channel_manager import network_connection_factory
from odradek.controller.kafka_controller import KafkaControllerConfig
from odradek.controller.kafka_controller_driver import ZkControllerRuntime
from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.log.log_config import LogConfig
from odradek.log.log_manager import LogManager
from odradek.metrics.collectors import BrokerCollector, ZkControllerCollector
from odradek.metrics.prometheus import observe_requests, prometheus_endpoint
from odradek.network.client import NetworkClient
from odradek.network.socket_server import SocketServer
from odradek.security.sasl_apis import SaslApis
from odradek.security.sasl_channel_builder import listener_handler
from odradek.security.sasl_client_authenticator import register_client_logins
from odradek.security.sasl_config import client_logins
from odradek.security.ssl_factory import SslConfigError, inter_node_ssl_context
from odradek.security.zk_credential_provider import ZkCredentialProvider
from odradek.server import config_defs
from odradek.server.add_partitions_to_txn_manager import (
    AddPartitionsToTxnManager,
)
from odradek.server.broker_components import (
    bind_broker_listeners,
    build_broker_apis,
    cancel_tasks,
    fetcher_config,
    load_log_manager,
    schedule_log_tasks,
    stop_request_side,
    wire_replication,
)
from odradek.server.dir_lock import DirLock, StartupError, lock_dirs
from odradek.server.dynamic_broker_config import DynamicBrokerConfigPolicy
from odradek.server.kafka_config import KafkaConfig
from odradek.server.meta_properties import (
    META_PROPERTIES,
    random_uuid_base64,
    read_meta_properties,
    write_meta_properties,
)
from odradek.server.node_to_controller_channel import NodeToControllerChannel
from odradek.server.producer_id_manager import ProducerIdManager
from odradek.server.replica_fetcher_manager import ReplicaFetcherManager
from odradek.server.replica_manager import ReplicaManager
from odradek.server.replica_selector import UnknownReplicaSelector, replica_selector
from odradek.server.replication_quota_manager import ReplicationQuotas
from odradek.server.shared_server import now_ms
from odradek.server.txn_apis import TxnApis
from odradek.server.zk_admin_channel import ZkAdminChannel
from odradek.server.zk_admin_manager import ZkAdminManager, ZkAutoTopicCreationManager
from odradek.server.zk_broker_channels import (
    controlled_shutdown_from_config,
    zk_alter_partition_manager,
    zk_controller_channel,
)
from odradek.server.zk_broker_configs import TopicConfigHandler, ZkBrokerMetadataCache
from odradek.server.zk_controller_apis import ZkControllerApis
from odradek.server.zk_controller_bound_apis import ZkControllerBoundApis
from odradek.zk import zk_data as z
from odradek.zk.kafka_zk_client import KafkaZkClient, ZkConfig, ZooKeeperClientTimeoutError
from odradek.zk.zk_config_manager import BrokerConfigHandler, ZkConfigManager

log = logging.getLogger(__name__)


def zk_config(cfg: KafkaConfig) -> ZkConfig:
    session = int(cfg.get("zookeeper.session.timeout.ms") or 18000)
    conn = cfg.get("zookeeper.connection.timeout.ms")
    return ZkConfig(str(cfg.get("zookeeper.connect")), session, int(conn) if conn else None)


def check_meta_properties(log_dirs: list[str], broker_id: int, cluster_id: str) -> None:
    """Kafka's ZooKeeper-mode meta.properties (version 0): every log dir's must name this broker
    and cluster; missing ones are written. A KRaft-formatted dir (version 1) is refused."""
    for d in log_dirs:
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, META_PROPERTIES)
        if not os.path.exists(path):
            write_meta_properties(d, {"version": "0", "broker.id": str(broker_id), "cluster.id": cluster_id})
            continue
        props = read_meta_properties(path)
        if props.get("version", "0") != "0":
            raise StartupError(
                f"{path} has version {props.get('version')} (KRaft): this directory was formatted for KRaft "
                "mode and cannot be used by a ZooKeeper-mode broker")
        if props.get("cluster.id") not in (None, cluster_id):
            raise StartupError(
                f"The Cluster ID {cluster_id} doesn't match stored clusterId {props.get('cluster.id')} in "
                f"{path}. The broker is trying to join the wrong cluster. Configured zookeeper.connect may be "
                "wrong.")
        if props.get("broker.id") not in (None, str(broker_id)):
            raise StartupError(
                f"Configured broker.id {broker_id} doesn't match stored broker.id {props.get('broker.id')} "
                f"in {path}. If you moved your data, make sure your configured broker.id matches.")


class ZkBrokerServer:
    def __init__(self, config: KafkaConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = ""
        self.bound_ports: dict[str, int] = {}
        self.broker_epoch = -1
        self.metadata_cache = ZkBrokerMetadataCache(self.node_id)
        self.credentials = ZkCredentialProvider()  # SCRAM, from /config/users/<user>
        self.config_manager: ZkConfigManager | None = None
        self.zk_client: KafkaZkClient | None = None
        self.controller: ZkControllerRuntime | None = None
        self.log_manager: LogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.replica_fetcher_manager: ReplicaFetcherManager | None = None
        self.replication_quotas: ReplicationQuotas | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.txn_apis: TxnApis | None = None
        self._channels: list[NodeToControllerChannel] = []
        self.add_partitions_to_txn_manager: AddPartitionsToTxnManager | None = None
        self._servers: list[SocketServer] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._locks: list[DirLock] = []
        self.metrics = prometheus_endpoint(config)  # metrics.prometheus.listener
        self._started = False

    def log_config_for(self, topic: str) -> LogConfig:
        return config_defs.build_log_config(self.config, self.metadata_cache.topic_config(topic))

    def _broker_info(self) -> z.BrokerInfo:
        cfg = self.config
        endpoints = []
        for adv in cfg.advertised_listeners:
            port = adv.port or self.bound_ports.get(adv.name, adv.port)
            endpoints.append((adv.name, adv.security_protocol, adv.host, port))
        return z.BrokerInfo.create(self.node_id, endpoints, timestamp_ms=now_ms(), rack=cfg.broker_rack)

    def register_broker(self) -> int:
        """Create /brokers/ids/<id> (blocking: the controller's event thread calls it again after a
        session expiry); the broker epoch becomes the znode's czxid."""
        assert self.zk_client is not None
        self.broker_epoch = self.zk_client.register_broker(self._broker_info())
        return self.broker_epoch

    async def startup(self) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        try:  # replica.selector.class (KIP-392), checked before anything is started
            selector = replica_selector(cfg.get("replica.selector.class"))
        except UnknownReplicaSelector as e:
            raise StartupError(str(e)) from e
        # Connections to other brokers (fetchers, the controller's channel, the channels to the
        # controller, transaction markers): TLS and the SASL login of the inter-broker listener.
        register_client_logins(loop, client_logins(cfg))
        try:
            ibl_tls = inter_node_ssl_context(cfg, cfg.inter_broker_listener_name)
        except SslConfigError as e:
            raise StartupError(f"inter-broker listener {cfg.inter_broker_listener_name} (client side): {e}") from e
        self._locks = lock_dirs(list(cfg.log_dirs))
        # 1. ZooKeeper: the session, the top-level paths, the cluster id.
        zk = self.zk_client = KafkaZkClient(zk_config(cfg))
        log.info("Connecting to zookeeper on %s", cfg.get("zookeeper.connect"))
        try:
            await loop.run_in_executor(None, zk.start)
        except ZooKeeperClientTimeoutError as e:  # one line and exit 2, as a port already taken
            raise StartupError(str(e)) from e
        await loop.run_in_executor(None, zk.create_top_level_paths)
        proposed = None
        for d in cfg.log_dirs:
            path = os.path.join(d, META_PROPERTIES)
            if os.path.exists(path):
                proposed = read_meta_properties(path).get("cluster.id") or proposed
        self.cluster_id = await loop.run_in_executor(None, zk.create_or_get_cluster_id,
                                                     proposed or random_uuid_base64())
        check_meta_properties(list(cfg.log_dirs), self.node_id, self.cluster_id)
        self.metadata_cache.zk = zk

        # 2. Listeners bound (port 0 resolved before registration), logs loaded.
        await bind_broker_listeners(cfg, self._servers, self.bound_ports)
        lm = self.log_manager = await load_log_manager(cfg, self.log_config_for)
        if self.metrics is not None:
            await self.metrics.start()

        # 3. Replication: the replica manager follows LeaderAndIsr; ISR changes and producer id
        # blocks go to the controller of the last UpdateMetadata.
        rm = self.replica_manager = ReplicaManager(self.node_id, lm, self.metadata_cache, self.log_config_for)
        rm.replica_selector = selector
        # Replication throttles (KIP-73): the rates from the broker configs (static, then
        # /config/brokers), the throttled replicas from the topic configs as they change.
        quotas = self.replication_quotas = ReplicationQuotas(
            self.node_id, cfg._int("replication.quota.window.num"), cfg._int("replication.quota.window.size.seconds"))

        def update_throttle_rates() -> None:
            quotas.update_rates(cfg._int("leader.replication.throttled.rate"),
                                cfg._int("follower.replication.throttled.rate"))

        update_throttle_rates()
        rm.leader_quota = quotas.leader
        self.replica_fetcher_manager = ReplicaFetcherManager(rm, fetcher_config(cfg, self.node_id),
                                                             cfg._int("num.replica.fetchers"), quota=quotas.follower,
                                                             client_factory=lambda source, client_id: NetworkClient(
                                                                 source.host, source.port, client_id, max_in_flight=1,
                                                                 sasl_role="broker", ssl_context=ibl_tls))
        alter_channel = zk_controller_channel(cfg, self.metadata_cache, "alter-partition")
        forward_channel = zk_controller_channel(cfg, self.metadata_cache, "forwarding")
        # producer id blocks on their own channel (Kafka's "producerId" channel manager): never
        # queued behind a forwarded request
        pid_channel = zk_controller_channel(cfg, self.metadata_cache, "producer-id")
        self._channels = [alter_channel, forward_channel, pid_channel]
        wire_replication(rm, cfg, self.replica_fetcher_manager,
                         zk_alter_partition_manager(cfg, self.metadata_cache, lambda: self.broker_epoch, alter_channel),
                         lambda: self.broker_epoch)

        # 4. Coordinators and the APIs. Admin requests (and the coordinators' internal topics)
        # are written to ZooKeeper by this broker (ZkAdminManager); the rest goes to the controller.
        cache = self.metadata_cache

        def topic_ready(topic: str, n: int) -> bool:
            parts = cache.get_topic_partitions(topic)
            return len(parts) >= n and all(p.leader >= 0 for p in parts.values())

        admin = ZkAdminManager(
            zk, topic_ready=topic_ready, topic_known=lambda t: cache.get_topic_id(t) is not None,
            default_num_partitions=cfg._int("num.partitions"),
            default_replication_factor=cfg._int("default.replication.factor"),
            delete_topic_enable=cfg._bool("delete.topic.enable"), node_id=self.node_id,
            broker_configs=DynamicBrokerConfigPolicy(cfg),
        )
        admin_channel = ZkAdminChannel(admin, forward_channel, cache.get_topic_name)
        self.group_coordinator = GroupCoordinator(
            node_id=self.node_id, config=cfg, replica_manager=rm, metadata_cache=self.metadata_cache,
            controller_channel=admin_channel,
        )
        self.group_coordinator.startup()
        producer_ids = ProducerIdManager(self.node_id, lambda: self.broker_epoch, pid_channel)
        zk_apis = ZkControllerApis(self.node_id, self.metadata_cache, rm, lambda: self.broker_epoch)
        controller = self.controller = ZkControllerRuntime(
            KafkaControllerConfig.from_kafka_config(cfg), zk, loop, register_broker=self.register_broker,
            connection_factory=network_connection_factory(cfg.inter_broker_listener_name,
                                                          f"controller-{self.node_id}", ibl_tls))
        bound = ZkControllerBoundApis(
            lambda: controller.controller.is_active, controller.events.put,
            lambda: [(t, p) for t in cache.get_all_topics() for p in cache.get_topic_partitions(t)])
        # the transaction coordinator, the group APIs, KafkaApis (KIP-890 verification of
        # transactional produce as in KRaft mode: Kafka 3.9's ZooKeeper broker verifies too)
        built = build_broker_apis(
            node_id=self.node_id, cluster_id=self.cluster_id, cfg=cfg, metadata_cache=self.metadata_cache, rm=rm,
            lm=lm, group_coordinator=self.group_coordinator, controller_channel=admin_channel,
            producer_ids=producer_ids, extensions=[SaslApis(), zk_apis, bound],
        )
        self.txn_apis = built.txn_apis
        self.add_partitions_to_txn_manager = built.add_partitions_to_txn_manager
        apis = built.apis
        bound.restrict(apis)
        apis.admin_apis.serves_group_configs = False  # as Kafka 3.9: group configs are KRaft's
        apis.auto_topic_creation = ZkAutoTopicCreationManager(admin)  # type: ignore[assignment]  # same create_topics
        observe_requests(apis, self._servers, cfg, self.metrics)
        if self.metrics is not None:
            self.metrics.add(BrokerCollector(rm, lambda: self.group_coordinator))
            self.metrics.add(ZkControllerCollector(controller.controller))
        for server in self._servers:
            # SASL listeners authenticate first (SCRAM: the /config/users credentials)
            server.handler = listener_handler(cfg, server.listener_name, apis, self.credentials.lookup)
            await server.start()

        # 4b. Topic and broker config overrides from /config (and its change notifications).
        def apply_topic(topic: str) -> None:
            quotas.update_topic(topic, self.metadata_cache.topic_config(topic))
            log_config = self.log_config_for(topic)
            for (t, _p), part in rm.partitions.items():
                if t == topic and part.log is not None:
                    part.log.update_config(log_config)

        def apply_broker(default: dict[str, str], per_broker: dict[str, str]) -> None:
            def run() -> None:
                ignored = cfg.update_dynamic(default, per_broker)
                if ignored:
                    log.error("Dynamic broker configs with invalid values ignored: %s", ", ".join(sorted(ignored)))
                # every log's config may default from a changed broker key (Kafka's DynamicLogConfig)
                lm.default_config = config_defs.build_log_config(cfg, {})
                update_throttle_rates()
                for topic in {t for t, _p in rm.partitions}:
                    apply_topic(topic)
                if self.replica_fetcher_manager is not None:
                    self.replica_fetcher_manager.resize_thread_pool(int(cfg.get("num.replica.fetchers")))
                    rm._shutdown_idle_fetchers()
                log.info("Dynamic broker configs now in effect: cluster default %s, broker %d %s",
                         default, self.node_id, per_broker)
            loop.call_soon_threadsafe(run)

        self.config_manager = ZkConfigManager(zk, {
            "topics": TopicConfigHandler(self.metadata_cache, loop, apply_topic),
            "brokers": BrokerConfigHandler(self.node_id, apply_broker),
            "users": self.credentials,
        })
        await loop.run_in_executor(None, self.config_manager.startup)

        # 5. Register (the broker epoch) and race for /controller.
        await loop.run_in_executor(None, self.register_broker)
        controller.start()

        # 6. Background work: compaction, retention, flushing, checkpoints, expirations.
        schedule_log_tasks(self._tasks, cfg, lm, rm)
        self._started = True
        addresses = ", ".join(f"{a.name}://{a.host}:{a.port or self.bound_ports.get(a.name, 0)}"
                              for a in cfg.advertised_listeners)
        log.info("Odradek broker ready: node id %d (ZooKeeper mode), cluster id %s, listening on %s, data in %s, "
                 "broker epoch %d", self.node_id, self.cluster_id, addresses, ",".join(cfg.log_dirs),
                 self.broker_epoch)

    async def shutdown(self) -> None:
        loop = asyncio.get_running_loop()
        if self._started:
            log.info("Odradek broker %d (ZooKeeper mode) shutting down", self.node_id)
            started = time.monotonic()
            result = await controlled_shutdown_from_config(self.config, self.metadata_cache, lambda: self.broker_epoch)
            if result is not None:
                log.info("Controlled shutdown %s after %d attempt(s) in %.1f s",
                         "succeeded" if result.succeeded else "failed", result.attempts, time.monotonic() - started)
        for server in self._servers:
            server.begin_shutdown()
        if self.config_manager is not None:
            self.config_manager.shutdown()
        if self.controller is not None:
            await self.controller.close()
        rm = self.replica_manager
        await stop_request_side(self.txn_apis, self.group_coordinator, self.add_partitions_to_txn_manager,
                                self.replica_fetcher_manager, rm.alter_partition_manager if rm is not None else None, rm)
        for server in self._servers:
            await server.stop()
        self._servers.clear()
        if self.metrics is not None:
            await self.metrics.stop()
        for ch in self._channels:
            await ch.close()
        await cancel_tasks(self._tasks)
        if self.zk_client is not None:
            await loop.run_in_executor(None, self.zk_client.close)  # ends the session: /controller and /brokers/ids go
        if self.log_manager is not None:
            await loop.run_in_executor(None, self.log_manager.shutdown)
        for lock in self._locks:
            lock.release()
        self._locks = []
        if self._started:
            log.info("Odradek broker %d shut down cleanly", self.node_id)
        self._started = False
