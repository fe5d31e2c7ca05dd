"""KafkaRaftServer: one Odradek process in KRaft mode, starting the parts ``process.roles`` names
(Kafka's ``KafkaRaftServer``)::

    KafkaRaftServer
     ├─ SharedServer      dir locks, __cluster_metadata, the Raft client and its driver
     ├─ ControllerServer  QuorumController (a Raft listener), ControllerApis, RaftApis
     │                    (Vote, Fetch, ...), the controller listener                  [controller]
     └─ BrokerServer      MetadataLoader (a Raft listener), MetadataCache, logs,
                          ReplicaManager, coordinators, KafkaApis on the broker
                          listeners, the controller channel                            [broker]

Start-up order: lock the directories, bind every listener of every role (a taken port fails the
start before anything is written), format/verify ``meta.properties``, open the metadata log,
replay it into the controller, elect this node, start the broker (which replays the log into its
own image and registers with the controller through its controller channel). Shutdown runs the
other way round.

Controller-only processes form a quorum of any number of voters (``controller.quorum.voters``).
A broker-only process (``process.roles=broker``) follows the metadata log as a Raft observer
and reaches the active controller over the network (NodeToControllerChannel); so does the
broker of a combined process in a quorum with other voters (its controller may or may not be
the active one). With only controller.quorum.bootstrap.servers (KIP-853), the voters and their endpoints come
from the metadata log.
"""

from __future__ import annotations

import asyncio
import logging

from odradek.security.sasl_client_authenticator import register_client_logins
from odradek.security.sasl_config import client_logins
from odradek.server.broker_server import BrokerServer
from odradek.server.controller_channel import ControllerRequestHandler
from odradek.server.controller_server import ControllerServer
from odradek.server.kafka_config import KafkaConfig
from odradek.server.meta_properties import ensure_formatted
from odradek.server.node_to_controller_channel import broker_controller_channels
from odradek.server.shared_server import SharedServer

log = logging.getLogger(__name__)


class KafkaRaftServer:
    def __init__(self, config: KafkaConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = ""
        self.shared = SharedServer(config)
        roles = config.process_roles
        self.controller = ControllerServer(config, self.shared) if "controller" in roles else None
        self.broker = BrokerServer(config, self.shared) if "broker" in roles else None

    @property
    def bound_ports(self) -> dict[str, int]:
        ports: dict[str, int] = {}
        for role in (self.controller, self.broker):
            if role is not None:
                ports.update(role.bound_ports)
        return ports

    async def startup(self) -> None:
        cfg = self.config
        # The SASL logins this node's connections to other nodes use (none on plaintext).
        register_client_logins(asyncio.get_running_loop(), client_logins(cfg))
        self.shared.lock_dirs()
        try:
            if self.controller is not None:
                await self.controller.bind_listeners()
            if self.broker is not None:
                await self.broker.bind_listeners()
            if self.shared.metrics is not None:
                await self.shared.metrics.start()
        except BaseException:
            if self.shared.metrics is not None:
                await self.shared.metrics.stop()
            await self._close_roles()
            self.shared.release_locks()
            raise
        self.cluster_id = ensure_formatted(cfg.log_dirs, self.node_id, metadata_log_dir=cfg.metadata_log_dir)
        await self.shared.open_metadata_log(self.cluster_id)
        if self.controller is not None:
            await self.controller.startup(self.cluster_id)
        # A broker-only node is not among the voters: its Raft client is an observer that
        # fetches the metadata log from the leader over the network.
        raft_client = await self.shared.start_raft()
        if self.broker is not None:
            # The single place the broker is wired to the controller: a controller channel to
            # whichever node Raft says leads (in memory to this process's ControllerApis when
            # the quorum is this node alone, over the network otherwise).
            local: dict[int, ControllerRequestHandler] = {}
            if self.controller is not None and self.controller.controller_apis is not None:
                local[self.node_id] = self.controller.controller_apis
            # KIP-853: with only controller.quorum.bootstrap.servers, the controllers'
            # endpoints are the voter set's (from the metadata log).
            dynamic = self.shared.dynamic_quorum if not cfg.controller_quorum_voters else None
            channel, heartbeat = broker_controller_channels(
                cfg, lambda: raft_client.leader_and_epoch.leader_id, local,
                endpoints=dynamic.endpoint if dynamic is not None else None,
            )
            await self.broker.startup(self.cluster_id, channel, heartbeat)
        else:
            addresses = ", ".join(f"{n}:{p}" for n, p in self.bound_ports.items())
            log.info(
                "Odradek controller ready: node id %d, cluster id %s, listening on %s, metadata in %s",
                self.node_id, self.cluster_id, addresses, cfg.metadata_log_dir,
            )
        self.shared.start_snapshots(self.broker.loader if self.broker is not None else None)

    async def _close_roles(self) -> None:
        if self.broker is not None:
            await self.broker.shutdown()
        if self.controller is not None:
            await self.controller.shutdown()

    async def shutdown(self) -> None:
        """Broker first (it answers what it has taken), then the controller, then Raft and the
        metadata log."""
        await self._close_roles()
        if self.shared.metrics is not None:
            await self.shared.metrics.stop()
        await self.shared.shutdown()
