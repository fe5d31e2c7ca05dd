"""KafkaRaftServer starts exactly the parts process.roles names: a controller-only process serves
its controller listener and no broker; a broker-only process (a Raft observer) and a combined
process in a quorum with other voters are accepted, and so is a broker with bootstrap servers only; KafkaConfig refuses the role/listener combinations Kafka refuses."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from odradek.controller.feature_control_manager import METADATA_VERSION
from odradek.network.client import ConnectionClosed, NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.server.kafka_config import ConfigError, KafkaConfig
from odradek.server.kafka_raft_server import KafkaRaftServer


def test_controller_only_process_serves_its_listener_and_no_broker(tmp_path: Path) -> None:
    config = KafkaConfig({"process.roles": "controller", "listeners": "CONTROLLER://127.0.0.1:0",
                          "log.dirs": str(tmp_path)})

    async def run() -> None:
        server = KafkaRaftServer(config)
        assert server.broker is None and server.controller is not None
        await server.startup()
        try:
            assert set(server.bound_ports) == {"CONTROLLER"}
            controller = server.controller.controller
            assert controller is not None and controller.is_active
            client = NetworkClient("127.0.0.1", server.bound_ports["CONTROLLER"])
            await client.connect()
            try:
                resp = await client.send(m.API_VERSIONS, 3, {"client_software_name": "t",
                                                             "client_software_version": "1"})
                assert resp["error_code"] == Errors.NONE
                # ApiVersions, the ControllerApis a client may send to a controller, and the
                # broker → controller APIs of brokers in other processes, and the quorum's RaftApis
                # (Fetch here is __cluster_metadata's).
                assert [a["api_key"] for a in resp["api_keys"]] == sorted([
                    m.API_VERSIONS.api_key, m.CREATE_TOPICS.api_key, m.DELETE_TOPICS.api_key,
                    m.CREATE_PARTITIONS.api_key, m.ALTER_CONFIGS.api_key, m.INCREMENTAL_ALTER_CONFIGS.api_key,
                    m.DESCRIBE_CLUSTER.api_key, g.BROKER_REGISTRATION.api_key, g.BROKER_HEARTBEAT.api_key,
                    g.ALLOCATE_PRODUCER_IDS.api_key, m.FETCH.api_key, g.VOTE.api_key, g.BEGIN_QUORUM_EPOCH.api_key,
                    g.END_QUORUM_EPOCH.api_key, g.DESCRIBE_QUORUM.api_key, g.FETCH_SNAPSHOT.api_key,
                    g.ALTER_PARTITION.api_key,  # partition leaders' ISR changes (issue 12)
                    m.ELECT_LEADERS.api_key, m.ALTER_PARTITION_REASSIGNMENTS.api_key,
                    m.LIST_PARTITION_REASSIGNMENTS.api_key,
                    g.ADD_RAFT_VOTER.api_key, g.REMOVE_RAFT_VOTER.api_key, g.UPDATE_RAFT_VOTER.api_key,
                    g.ENVELOPE.api_key,  # admin requests a Kafka broker forwards (KIP-590)
                    g.ASSIGN_REPLICAS_TO_DIRS.api_key,  # replica directories (KIP-858)
                    m.SASL_HANDSHAKE.api_key, m.SASL_AUTHENTICATE.api_key,  # SASL (issue 16)
                    m.ALTER_USER_SCRAM_CREDENTIALS.api_key,
                    *(a.api_key for a in m.ACL_APIS),  # the ACLs (issue 16)
                    g.ALTER_CLIENT_QUOTAS.api_key,  # client quotas (issue 16)
                ])
                quorum = await client.send(g.DESCRIBE_QUORUM, 2, {"topics": [
                    {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]})
                part = quorum["topics"][0]["partitions"][0]
                assert (part["error_code"], part["leader_id"], part["leader_epoch"]) == (0, 1, 1)
                assert [v["replica_id"] for v in part["current_voters"]] == [1]
                # The active controller bootstrapped metadata.version on its own (no broker).
                for _ in range(100):
                    if controller.image.features.levels:
                        break
                    await asyncio.sleep(0.05)
                resp = await client.send(m.API_VERSIONS, 3, {"client_software_name": "t",
                                                             "client_software_version": "1"})
                assert [(f["name"], f["max_version_level"]) for f in resp["finalized_features"]] == [
                    ("metadata.version", METADATA_VERSION)]
                # No broker APIs here: a Metadata request closes the connection.
                with pytest.raises(ConnectionClosed):
                    await client.send(m.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                       "include_topic_authorized_operations": False})
            finally:
                await client.close()
        finally:
            await server.shutdown()
        # Raft ran: this node led a new epoch, written where Kafka writes it; no partition
        # logs' checkpoint files (the broker role never started).
        state = json.loads((tmp_path / "__cluster_metadata-0" / "quorum-state").read_text())
        assert state["leaderId"] == 1 and state["leaderEpoch"] == 1 and state["data_version"] == 0
        assert not (tmp_path / "recovery-point-offset-checkpoint").exists()

    asyncio.run(run())


def test_combined_process_starts_both_roles(tmp_path: Path) -> None:
    config = KafkaConfig({"listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0", "log.dirs": str(tmp_path)})

    async def run() -> None:
        server = KafkaRaftServer(config)
        await server.startup()
        try:
            assert server.broker is not None and server.controller is not None
            assert set(server.bound_ports) == {"PLAINTEXT", "CONTROLLER"}
            # The broker's image came from Raft: its own registration committed.
            assert not server.broker.metadata_cache.image.brokers[1].fenced
            # ... reached only through its controller channel, sent to the Raft leader.
            assert server.broker.controller_channel is not None
            assert server.broker.controller_channel.active_controller_id() == 1
            # Registration and heartbeats have a channel of their own (Kafka's "heartbeat").
            assert server.broker.lifecycle_manager is not None and server.broker.heartbeat_channel is not None
            assert server.broker.lifecycle_manager.channel is server.broker.heartbeat_channel
            assert server.broker.heartbeat_channel is not server.broker.controller_channel
            assert server.broker.loader is not None and server.broker.loader.leader_and_epoch.leader_id == 1
        finally:
            await server.shutdown()

    asyncio.run(run())


def test_broker_only_and_combined_with_other_voters_are_accepted() -> None:
    # A broker-only node follows the quorum as a Raft observer and reaches the controller over
    # the network (it used to be refused).
    broker_only = KafkaRaftServer(KafkaConfig({
        "process.roles": "broker", "node.id": "2", "listeners": "PLAINTEXT://127.0.0.1:0",
        "controller.quorum.voters": "1@127.0.0.1:9093"}))
    assert broker_only.controller is None and broker_only.broker is not None
    # ... and so does one with bootstrap servers alone (KIP-853; it used to be refused): the
    # voters come from the metadata log.
    bootstrap_only = KafkaRaftServer(KafkaConfig({
        "process.roles": "broker", "node.id": "2", "listeners": "PLAINTEXT://127.0.0.1:0",
        "controller.quorum.bootstrap.servers": "127.0.0.1:9093"}))
    assert bootstrap_only.controller is None and bootstrap_only.broker is not None
    # A combined node in a quorum with other voters (it used to be refused): its broker reaches
    # whichever voter leads over the network.
    three = KafkaRaftServer(KafkaConfig({
        "controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095",
        "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"}))
    assert three.controller is not None and three.broker is not None
    # Controller-only voters of a larger quorum are accepted.
    KafkaRaftServer(KafkaConfig({"process.roles": "controller", "listeners": "CONTROLLER://127.0.0.1:9093",
                                 "controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"}))


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"process.roles": "controller", "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093"},
         "The listeners config must only contain KRaft controller listeners from controller.listener.names "
         "when process.roles=controller"),
        ({"process.roles": "broker", "listeners": "PLAINTEXT://:9092", "controller.quorum.voters": "1@h:9093"},
         "If process.roles contains just the 'broker' role, the node id 1 must not be included in the set "
         "of voters"),
        ({"process.roles": "broker", "listeners": "PLAINTEXT://:9092", "controller.listener.names": "",
          "controller.quorum.voters": "2@h:9093"},
         "controller.listener.names must contain at least one value when running KRaft with just the "
         "broker role"),
    ],
)
def test_kafka_role_validation(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        KafkaConfig(props)
