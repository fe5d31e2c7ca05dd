"""ControllerServer: the controller role of a process (Kafka's ``ControllerServer``).

It runs the QuorumController as a Raft listener on the shared metadata log, and its
:class:`~odradek.controller.controller_apis.ControllerApis`: brokers reach them through their
controller channel, clients through the controller listener(s) named by
``controller.listener.names``, which serve ApiVersions (with the controller's finalized features)
and the ControllerApis the protocol definitions declare, and the quorum's RaftApis (Vote,
BeginQuorumEpoch, EndQuorumEpoch, Fetch, DescribeQuorum).
"""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Iterable

from odradek.controller.controller_apis import ControllerApis
from odradek.controller.feature_control_manager import METADATA_VERSION
from odradek.controller.quorum_controller import QuorumController
from odradek.coordinator.group.dynamic_group_config import GroupConfigPolicy
from odradek.metadata.metadata_cache import FinalizedFeatures
from odradek.metadata.metadata_record_serde import METADATA_RECORD_SERDE
from odradek.metrics.collectors import QuorumControllerCollector
from odradek.metrics.prometheus import observe_requests
from odradek.network.socket_server import SocketServer
from odradek.protocol import messages as m
from odradek.raft.record_batches import BatchCodec
from odradek.security.api_authorization import CONTROLLER_CHECKS
from odradek.security.auth_helper import AuthHelper, forwarded_check
from odradek.security.auth_helper import install as install_authorization
from odradek.security.sasl_apis import SaslApis
from odradek.security.sasl_channel_builder import listener_handler
from odradek.security.standard_authorizer import StandardAuthorizer
from odradek.server import config_defs
from odradek.server.api_dispatcher import ApiDispatcher, ApiExtension
from odradek.server.dynamic_broker_config import DynamicBrokerConfigPolicy
from odradek.server.formatter import (
    read_bootstrap_features,
    read_bootstrap_metadata_version,
    read_bootstrap_scram_records,
)
from odradek.server.kafka_config import KafkaConfig
from odradek.server.raft_apis import RaftApis
from odradek.server.shared_server import SharedServer, bind_listener, network_limits

log = logging.getLogger(__name__)


class ControllerListenerApis(ApiDispatcher):
    """The controller listener's request handlers: ApiVersions, plus ``extensions``."""

    def __init__(self, controller: QuorumController, extensions: Iterable[ApiExtension] = ()) -> None:
        self.controller = controller
        self.apis = {m.API_VERSIONS.api_key: m.API_VERSIONS}
        self.handlers = {m.API_VERSIONS.api_key: self.handle_api_versions}
        self.add_extensions(extensions)

    def finalized_features(self) -> FinalizedFeatures:
        image = self.controller.image
        kraft_version = self.controller.features.kraft_version()
        if kraft_version <= 0:
            return FinalizedFeatures.of(image)
        # kraft.version lives in Raft's control records, not the image (KIP-853).
        levels = {**image.features.levels, "kraft.version": kraft_version}
        return FinalizedFeatures(levels, image.offset)


class ControllerServer:
    def __init__(self, config: KafkaConfig, shared: SharedServer) -> None:
        self.config = config
        self.shared = shared
        self.node_id = config.node_id
        self.controller: QuorumController | None = None
        self.controller_apis: ControllerApis | None = None
        self.bound_ports: dict[str, int] = {}
        self._servers: list[SocketServer] = []

    async def bind_listeners(self) -> None:
        """Bind (not yet serve) the controller listeners."""
        cfg = self.config
        limits = network_limits(cfg)
        for lst in cfg.controller_listeners:
            server = await bind_listener(cfg, lst, limits)
            self._servers.append(server)
            self.bound_ports[lst.name] = server.port

    async def startup(self, cluster_id: str) -> None:
        """Replay the metadata log into the QuorumController (a Raft listener from now on) and
        serve the controller listeners. It becomes active when Raft makes this node leader."""
        cfg = self.config
        raft_client = self.shared.raft_client
        assert raft_client is not None, "the shared server opens the metadata log first"
        controller = QuorumController(
            self.node_id,
            raft_client,
            default_partitions=cfg.num_partitions,
            default_replication_factor=cfg.default_replication_factor,
            delete_topic_enable=cfg.delete_topic_enable,
            validate_config=config_defs.validate_topic_config,
            cluster_id=cluster_id,
            broker_configs=DynamicBrokerConfigPolicy(cfg),
            group_configs=GroupConfigPolicy(cfg),
            session_timeout_ms=cfg.broker_session_timeout_ms,
            bootstrap_metadata_version=_bootstrap_metadata_version(cfg.metadata_log_dir),
            bootstrap_features=read_bootstrap_features(cfg.metadata_log_dir),
            bootstrap_records=read_bootstrap_scram_records(cfg.metadata_log_dir),
            colocated_broker="broker" in cfg.process_roles,
            replication_options={
                "auto_leader_rebalance_enable": bool(cfg.get("auto.leader.rebalance.enable")),
                "leader_imbalance_check_interval_ms": int(cfg.get("leader.imbalance.check.interval.seconds")) * 1000,
                "leader_imbalance_per_broker_percentage": int(cfg.get("leader.imbalance.per.broker.percentage")),
                "unclean_leader_election_enable": cfg.unclean_leader_election_enable,
            },
        )
        self.shared.register(controller)
        self.controller = controller
        level = controller.image.features.levels.get("metadata.version", 0)
        if level > METADATA_VERSION:
            log.warning(
                "The metadata log was written by Apache Kafka at metadata.version level %d, newer "
                "than Odradek's %d: Odradek applies the records it knows (topics, partitions, "
                "configs, brokers, features) and keeps reporting level %d as finalized",
                level, METADATA_VERSION, level,
            )
        raft_apis = RaftApis(raft_client, BatchCodec(METADATA_RECORD_SERDE))
        controller_apis = ControllerApis(
            node_id=self.node_id,
            cluster_id=cluster_id,
            config=cfg,
            controller=controller,
            leader_id=lambda: raft_client.leader_and_epoch.leader_id,
            raft_apis=raft_apis,
        )
        for server in self._servers:  # advertised by DescribeCluster to the controllers' clients
            lst = server.listener_name
            host = next(x.host for x in cfg.controller_listeners if x.name == lst)
            controller_apis.listener_endpoints[lst] = (
                socket.gethostname() if host in ("", "0.0.0.0", "::") else host, server.port
            )
        dynamic = raft_client.core.dynamic
        controller.features.set_kraft_version_source(lambda: dynamic.kraft_version)
        controller_apis.voter_endpoints = lambda: {
            v: ep for v in raft_client.core.voters if (ep := dynamic.endpoint(v)) is not None
        }
        self.controller_apis = controller_apis
        handler = ControllerListenerApis(controller, [controller_apis, raft_apis, SaslApis()])
        authorizer = StandardAuthorizer.from_config(cfg)
        if authorizer is not None:
            # The controller's own authorizer, following its committed image's ACLs.
            authorizer.load(controller.image.acls)
            controller.replay_listeners.append(authorizer.publish)
            controller_apis.authorizer = authorizer

            def topic_name(tid: uuid.UUID) -> str | None:
                t = controller.image.topics_by_id.get(tid)
                return None if t is None else t.name

            helper = AuthHelper(authorizer, topic_name, lambda name: name in controller.image.topics_by_name)
            install_authorization(handler, helper, CONTROLLER_CHECKS)
            controller_apis.check_forwarded = forwarded_check(helper, CONTROLLER_CHECKS)
        metrics = self.shared.metrics
        observe_requests(handler, self._servers, cfg, metrics)
        if metrics is not None:
            metrics.add(QuorumControllerCollector(controller))
        for server in self._servers:
            server.handler = listener_handler(
                cfg, server.listener_name, handler, lambda mech, user: controller.image.scram.get(mech, user)
            )
            await server.start()

    async def shutdown(self) -> None:
        for server in self._servers:
            server.begin_shutdown()
        for server in self._servers:
            await server.stop()
        self._servers.clear()
        if self.controller is not None:
            await self.controller.close()
            if self.shared.raft_client is not None:
                self.shared.raft_client.unregister(self.controller)


def _bootstrap_metadata_version(metadata_log_dir: str) -> int:
    """The metadata.version a new metadata log starts at: the formatted one
    (``bootstrap.checkpoint``, kafka-storage / odradek storage format --release-version), or
    Odradek's. A level newer than Odradek runs (a directory Kafka 4.x formatted with its own
    default) starts at Odradek's newest, with a warning, as a migrated log's newer level is
    kept but not acted on."""
    level = read_bootstrap_metadata_version(metadata_log_dir)
    if level is None:
        return METADATA_VERSION
    if level > METADATA_VERSION:
        log.warning(
            "bootstrap.checkpoint in %s asks for metadata.version level %d, newer than Odradek's "
            "%d: starting the metadata log at %d",
            metadata_log_dir, level, METADATA_VERSION, METADATA_VERSION,
        )
        return METADATA_VERSION
    return level
