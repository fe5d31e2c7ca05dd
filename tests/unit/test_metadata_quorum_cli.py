"""``odradek metadata-quorum``: Kafka's formatting from a canned DescribeQuorum response, and its
answers to bad input (the integration test compares with Kafka's own tool on a real Kafka)."""

from __future__ import annotations

import argparse
import asyncio
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest

from odradek.cli import metadata_quorum as mq
from odradek.cli.main import main
from odradek.metadata.metadata_cache import FinalizedFeatures
from odradek.network.socket_server import SocketServer
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages.generated import DESCRIBE_QUORUM
from odradek.server.api_dispatcher import ApiDispatcher, RequestContext

DIR_1 = uuid.UUID("5c3e1e6a-5b0e-4a8f-9d1c-0a1b2c3d4e5f")
NOW = 1_700_000_010_000


def _replica(rid: int, leo: int, fetch: int, caught_up: int, directory: uuid.UUID | None = None) -> dict[str, Any]:
    return {
        "replica_id": rid,
        "replica_directory_id": directory or uuid.UUID(int=0),
        "log_end_offset": leo,
        "last_fetch_timestamp": fetch,
        "last_caught_up_timestamp": caught_up,
    }


def canned(**partition: Any) -> dict[str, Any]:
    """A DescribeQuorum v2 response of a 3-voter quorum (leader 2) with one observer, sent
    through the codec so that the tool sees what the wire gives it."""
    part = {
        "partition_index": 0,
        "error_code": 0,
        "error_message": None,
        "leader_id": 2,
        "leader_epoch": 7,
        "high_watermark": 1200,
        "current_voters": [
            _replica(1, 1190, NOW - 500, NOW - 1500, DIR_1),
            _replica(2, 1234, NOW - 100, NOW - 100),
            _replica(3, 1234, NOW - 300, NOW - 300),
        ],
        "observers": [_replica(4, 1000, NOW - 250, -1)],
        **partition,
    }
    body = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "topics": [{"topic_name": "__cluster_metadata", "partitions": [part]}],
        "nodes": [
            {"node_id": 1, "listeners": [{"name": "CONTROLLER", "host": "127.0.0.1", "port": 9093}]},
            {"node_id": 2, "listeners": [
                {"name": "CONTROLLER", "host": "::1", "port": 9094},
                {"name": "SSL", "host": "c2", "port": 9194},
            ]},
        ],
    }
    wire = b"".join(bytes(p) for p in DESCRIBE_QUORUM.encode_response(2, body))
    decoded, _ = DESCRIBE_QUORUM.decode_response(2, wire)
    return decoded


def test_status_formatting() -> None:
    out = mq.format_status("MkU3OEVBNTcwNTJENDM2Qg", mq.quorum_info(canned()))
    assert out == (
        "ClusterId:              MkU3OEVBNTcwNTJENDM2Qg\n"
        "LeaderId:               2\n"
        "LeaderEpoch:            7\n"
        "HighWatermark:          1200\n"
        "MaxFollowerLag:         44\n"
        "MaxFollowerLagTimeMs:   1400\n"
        'CurrentVoters:          [{"id": 1, "directoryId": "XD4ealsOSo-dHAobLD1OXw", '
        '"endpoints": ["CONTROLLER://127.0.0.1:9093"]}, '
        '{"id": 2, "endpoints": ["CONTROLLER://[::1]:9094", "SSL://c2:9194"]}, {"id": 3}]\n'
        'CurrentObservers:       [{"id": 4}]\n'
    )


def test_status_lag_time_unknown_and_leader_is_the_furthest_behind() -> None:
    # The furthest-behind voter never caught up: -1.
    info = mq.quorum_info(canned(current_voters=[_replica(1, 5, NOW, -1), _replica(2, 9, NOW, NOW)]))
    assert "MaxFollowerLag:         4\nMaxFollowerLagTimeMs:   -1\n" in mq.format_status("c", info)
    # The leader is the first voter with the smallest end offset: 0 and 0.
    info = mq.quorum_info(canned(current_voters=[_replica(2, 9, NOW, NOW), _replica(1, 9, NOW, NOW - 7)]))
    assert "MaxFollowerLag:         0\nMaxFollowerLagTimeMs:   0\n" in mq.format_status("c", info)


def test_replication_table() -> None:
    info = mq.quorum_info(canned())
    assert mq.format_replication(info, False, NOW) == (
        "NodeId\tDirectoryId           \tLogEndOffset\tLag\tLastFetchTimestamp\tLastCaughtUpTimestamp\tStatus  \t\n"
        "2     \tAAAAAAAAAAAAAAAAAAAAAA\t1234        \t0  \t1700000009900     \t1700000009900        \tLeader  \t\n"
        "1     \tXD4ealsOSo-dHAobLD1OXw\t1190        \t44 \t1700000009500     \t1700000008500        \tFollower\t\n"
        "3     \tAAAAAAAAAAAAAAAAAAAAAA\t1234        \t0  \t1700000009700     \t1700000009700        \tFollower\t\n"
        "4     \tAAAAAAAAAAAAAAAAAAAAAA\t1000        \t234\t1700000009750     \t-1                   \tObserver\t\n"
    )
    human = mq.format_replication(info, True, NOW).splitlines()
    assert human[1] == "2     \tAAAAAAAAAAAAAAAAAAAAAA\t1234        \t0  \t100 ms ago        \t100 ms ago           \tLeader  \t"
    assert human[2].split("\t")[4:6] == ["500 ms ago        ", "1500 ms ago          "]
    assert human[4].split("\t")[5] == "-1                   "


def test_human_readable_refuses_a_timestamp_from_the_future() -> None:
    info = mq.quorum_info(canned())
    with pytest.raises(mq.TerseError, match="possible drift in system clock"):
        mq.format_replication(info, True, NOW - 1000)


def test_leader_not_among_the_voters() -> None:
    info = mq.quorum_info(canned(leader_id=9))
    with pytest.raises(mq.TerseError, match="^No value present$"):
        mq.format_status("c", info)


def test_error_responses() -> None:
    with pytest.raises(mq.TerseError, match=r"^org\.apache\.kafka\.common\.errors\.ClusterAuthorizationException: no"):
        mq.quorum_info({**canned(), "error_code": Errors.CLUSTER_AUTHORIZATION_FAILED, "error_message": "no"})
    with pytest.raises(mq.TerseError, match="UnknownTopicOrPartitionException"):
        mq.quorum_info(canned(error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION))
    with pytest.raises(mq._Retriable, match="NotLeaderOrFollowerException"):
        mq.quorum_info(canned(error_code=Errors.NOT_LEADER_OR_FOLLOWER))
    with pytest.raises(mq.TerseError, match="received 0 topics when 1 was expected"):
        mq.quorum_info({**canned(), "topics": []})
    with pytest.raises(mq.TerseError, match="received a single partition with index 3 when 0"):
        mq.quorum_info(canned(partition_index=3))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_no_bootstrap_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["metadata-quorum", "describe", "--status"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("usage: odradek metadata-quorum")
    assert err.endswith("error: one of the arguments --bootstrap-server --bootstrap-controller is required\n")


def test_both_bootstrap_flags(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["metadata-quorum", "--bootstrap-server", "127.0.0.1:1", "--bootstrap-controller", "127.0.0.1:2",
               "describe", "--status"])
    assert rc == 1
    assert capsys.readouterr().err.endswith(
        "error: argument --bootstrap-controller: not allowed with argument --bootstrap-server\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["describe"], "One of --status or --replication must be specified with describe sub-command"),
        (["describe", "--status", "--replication"],
         "Only one of --status or --replication should be specified with describe sub-command"),
        (["describe", "--status", "--human-readable"],
         "The option --human-readable is only supported along with --replication"),
        (["--command-config", "/nonexistent/x.properties", "describe", "--status"],
         "Properties file /nonexistent/x.properties does not exists!"),
    ],
)
def test_bad_describe_arguments(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    # Checked before any connection: nothing listens on this port.
    assert main(["metadata-quorum", "--bootstrap-server", f"127.0.0.1:{_free_port()}", *args]) == 1
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", message + "\n")


@pytest.mark.parametrize("command", ["--status", "--replication"])
@pytest.mark.parametrize("flag", ["--bootstrap-server", "--bootstrap-controller"])
def test_unreachable_server(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str, flag: str
) -> None:
    config = tmp_path / "admin.properties"
    config.write_text("default.api.timeout.ms=600\nrequest.timeout.ms=300\n")
    rc = main(["metadata-quorum", flag, f"127.0.0.1:{_free_port()}", "--command-config", str(config),
               "describe", command])
    assert rc == 1
    call = "listNodes" if command == "--status" else "describeMetadataQuorum"
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node assignment. "
        f"Call: {call}\n"
    )


def test_timeouts_refused_as_kafka_admin_refuses_them(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "admin.properties"
    config.write_text("default.api.timeout.ms=2000\n")  # below request.timeout.ms' 30 s
    assert main(["metadata-quorum", "--bootstrap-server", "127.0.0.1:1", "--command-config", str(config),
                 "describe", "--status"]) == 1
    assert capsys.readouterr().err == (
        "Failed to create new KafkaAdminClient\nCaused by: org.apache.kafka.common.config.ConfigException: "
        "The specified value of default.api.timeout.ms must be no smaller than the value of request.timeout.ms.\n"
    )


@pytest.mark.parametrize(
    ("bootstrap", "cause"),
    [
        ("nohostport", "Invalid url in bootstrap.servers: nohostport"),
        ("127.0.0.1:abc", "Invalid url in bootstrap.servers: 127.0.0.1:abc"),
        (" , ", "You must set either bootstrap.servers or bootstrap.controllers"),
    ],
)
def test_bad_bootstrap_address(capsys: pytest.CaptureFixture[str], bootstrap: str, cause: str) -> None:
    assert main(["metadata-quorum", "--bootstrap-server", bootstrap, "describe", "--status"]) == 1
    assert capsys.readouterr().err == (
        f"Failed to create new KafkaAdminClient\nCaused by: org.apache.kafka.common.config.ConfigException: {cause}\n"
    )


# ---- against fake controllers: --bootstrap-controller goes to the active one ------------------


class _FakeController(ApiDispatcher):
    """A controller listener serving ApiVersions, DescribeCluster (endpoint type 2) and
    DescribeQuorum; a standby answers DescribeQuorum with NOT_LEADER_OR_FOLLOWER."""

    def __init__(self, node_id: int, active: bool, endpoints: dict[int, int]) -> None:
        self.node_id = node_id
        self.active = active
        self.endpoints = endpoints  # node id -> port
        self.quorum_requests = 0
        self.apis = {a.api_key: a for a in (m.API_VERSIONS, m.DESCRIBE_CLUSTER, DESCRIBE_QUORUM)}
        self.handlers = {
            m.API_VERSIONS.api_key: self.handle_api_versions,
            m.DESCRIBE_CLUSTER.api_key: self.describe_cluster,
            DESCRIBE_QUORUM.api_key: self.describe_quorum,
        }

    def finalized_features(self) -> FinalizedFeatures:
        return FinalizedFeatures({}, -1)

    def describe_cluster(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        assert req["endpoint_type"] == 2
        return {
            "throttle_time_ms": 0, "error_code": 0, "error_message": None, "endpoint_type": 2,
            "cluster_id": "fake-cluster", "controller_id": 2,
            "brokers": [{"broker_id": n, "host": "127.0.0.1", "port": p, "rack": None}
                        for n, p in sorted(self.endpoints.items())],
            "cluster_authorized_operations": -2147483648,
        }

    def describe_quorum(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        self.quorum_requests += 1
        assert req["topics"] == [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]
        if self.active:
            return canned()
        return canned(error_code=Errors.NOT_LEADER_OR_FOLLOWER, leader_id=-1)


def test_bootstrap_controller_asks_the_active_controller(capsys: pytest.CaptureFixture[str]) -> None:
    async def scenario() -> tuple[str, int, int]:
        ports: dict[int, int] = {}
        standby, active = _FakeController(1, False, ports), _FakeController(2, True, ports)
        servers = [SocketServer("127.0.0.1", 0, c, listener_name="CONTROLLER") for c in (standby, active)]
        for s in servers:
            await s.start()
        ports.update({1: servers[0].port, 2: servers[1].port})
        try:
            args = argparse.Namespace(
                bootstrap_server=None, bootstrap_controller=f"127.0.0.1:{ports[1]}",
                replication=False, status=True, human_readable=False,
            )
            out = await mq._describe(args, {"default.api.timeout.ms": "5000", "request.timeout.ms": "2000"})
        finally:
            for s in servers:
                s.begin_shutdown()
                await s.stop()
        return out, standby.quorum_requests, active.quorum_requests

    out, standby_asked, active_asked = asyncio.run(scenario())
    assert (standby_asked, active_asked) == (0, 1)
    assert out.startswith("ClusterId:              fake-cluster\nLeaderId:               2\n")
