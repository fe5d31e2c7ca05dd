"""``odradek metadata-quorum``: describe the KRaft metadata quorum, as ``kafka-metadata-quorum.sh``.

``odradek metadata-quorum (--bootstrap-server HOST:PORT | --bootstrap-controller HOST:PORT)
[--command-config FILE] describe (--status | --replication [--human-readable])``

What Kafka's ``MetadataQuorumCommand`` does through its Admin client, done here with
:class:`~odradek.network.client.NetworkClient`:

* the cluster id comes from DescribeCluster (``endpoint_type`` 1, a broker, for
  ``--bootstrap-server``; 2, the controllers, for ``--bootstrap-controller``);
* DescribeQuorum for ``__cluster_metadata``-0 goes, with ``--bootstrap-server``, to the broker
  (which forwards it to the active controller, as Kafka's ``KafkaApis`` does), and with
  ``--bootstrap-controller`` straight to the active controller that DescribeCluster names
  (a standby controller would answer NOT_LEADER_OR_FOLLOWER).

The output is Kafka 4.x's byte for byte (checked against Kafka 4.3.1's own tool in
tests/integration/test_metadata_quorum_tool.py); so are the messages and the exit code (1) of a
bad command line, a missing ``--command-config`` file, and a server that cannot be reached
within ``default.api.timeout.ms`` (60 s by default; set it in ``--command-config``). Only the
first line of Kafka's report of a failure is printed (there is no Java stack trace to add).
``add-controller`` and ``remove-controller`` (KIP-853) are in
:mod:`odradek.cli.metadata_quorum_voters`. ``--command-config`` may secure the connections
(TLS, SASL: :mod:`odradek.security.client_security`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from odradek.cli.admin import _ERRORS_PKG, kafka_exception
from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.message_json import uuid_to_kafka
from odradek.protocol.messages.generated import DESCRIBE_QUORUM
from odradek.security.client_security import ClientSecurityError, client_security, connect_failure
from odradek.server.kafka_config import parse_properties

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
ENDPOINT_TYPE_BROKER = 1
ENDPOINT_TYPE_CONTROLLER = 2
DEFAULT_API_TIMEOUT_MS = 60_000
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
RETRY_BACKOFF_MS = 100
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
# Errors the Admin client retries until its deadline.
_RETRIABLE = frozenset({
    Errors.NOT_LEADER_OR_FOLLOWER, Errors.LEADER_NOT_AVAILABLE, Errors.REQUEST_TIMED_OUT,
    Errors.NOT_CONTROLLER, Errors.NETWORK_EXCEPTION, Errors.BROKER_NOT_AVAILABLE,
})

class TerseError(Exception):
    """A failure reported as one line on stderr with exit code 1 (Kafka's TerseException)."""


# ---- the quorum, as Kafka's Admin returns it (QuorumInfo) ------------------------------------


@dataclass(frozen=True)
class ReplicaState:
    replica_id: int
    directory_id: str  # Kafka's Uuid.toString; ZERO_UUID when the response has none
    log_end_offset: int
    last_fetch_timestamp: int | None
    last_caught_up_timestamp: int | None


@dataclass(frozen=True)
class QuorumInfo:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: list[ReplicaState]
    observers: list[ReplicaState]
    nodes: dict[int, list[str]] = field(default_factory=dict)  # node id -> "NAME://host:port"


def _replica(data: dict[str, Any]) -> ReplicaState:
    directory = data.get("replica_directory_id")
    return ReplicaState(
        data["replica_id"],
        ZERO_UUID if directory is None else uuid_to_kafka(directory),
        data["log_end_offset"],
        None if data.get("last_fetch_timestamp", -1) == -1 else data["last_fetch_timestamp"],
        None if data.get("last_caught_up_timestamp", -1) == -1 else data["last_caught_up_timestamp"],
    )


def _endpoint(name: str, host: str, port: int) -> str:
    return f"{name}://{'[' + host + ']' if ':' in host else host}:{port}"  # RaftVoterEndpoint


class _Retriable(Exception):
    pass


def quorum_info(response: dict[str, Any]) -> QuorumInfo:
    """Check a DescribeQuorum response as Kafka's Admin does and turn it into a QuorumInfo.
    Raises TerseError with Kafka's message, or _Retriable for an error the Admin retries."""
    _check_error(response["error_code"], response.get("error_message"))
    topics = response["topics"]
    unknown = _ERRORS_PKG + "UnknownServerException: "
    if len(topics) != 1:
        raise TerseError(f"{unknown}DescribeMetadataQuorum received {len(topics)} topics when 1 was expected")
    topic = topics[0]
    if topic["topic_name"] != METADATA_TOPIC:
        raise TerseError(
            f"{unknown}DescribeMetadataQuorum received a topic with name {topic['topic_name']} "
            f"when {METADATA_TOPIC} was expected"
        )
    if len(topic["partitions"]) != 1:
        raise TerseError(
            f"{unknown}DescribeMetadataQuorum received a topic {topic['topic_name']} with "
            f"{len(topic['partitions'])} partitions when 1 was expected"
        )
    partition = topic["partitions"][0]
    if partition["partition_index"] != METADATA_PARTITION:
        raise TerseError(
            f"{unknown}DescribeMetadataQuorum received a single partition with index "
            f"{partition['partition_index']} when {METADATA_PARTITION} was expected"
        )
    _check_error(partition["error_code"], partition.get("error_message"))
    nodes = {
        n["node_id"]: [_endpoint(lst["name"], lst["host"], lst["port"]) for lst in n["listeners"]]
        for n in response.get("nodes") or []
    }
    return QuorumInfo(
        partition["leader_id"],
        partition["leader_epoch"],
        partition["high_watermark"],
        [_replica(r) for r in partition["current_voters"]],
        [_replica(r) for r in partition["observers"]],
        nodes,
    )


def _check_error(code: int, message: str | None) -> None:
    if code == Errors.NONE:
        return
    if code in _RETRIABLE:
        raise _Retriable(kafka_exception(code, message))
    raise TerseError(kafka_exception(code, message))


# ---- output (MetadataQuorumCommand's formatting) ------------------------------------------------


def _leader(info: QuorumInfo) -> ReplicaState:
    for voter in info.voters:
        if voter.replica_id == info.leader_id:
            return voter
    raise TerseError("No value present")  # Java's Optional.get() on an empty stream


def _node_string(replica: ReplicaState, endpoints: list[str]) -> str:
    out = f'{{"id": {replica.replica_id}'
    if replica.directory_id != ZERO_UUID:
        out += f', "directoryId": "{replica.directory_id}"'
    if endpoints:
        out += ', "endpoints": [' + ", ".join(f'"{e}"' for e in endpoints) + "]"
    return out + "}"


def _replicas_string(info: QuorumInfo, replicas: list[ReplicaState]) -> str:
    return "[" + ", ".join(_node_string(r, info.nodes.get(r.replica_id, [])) for r in replicas) + "]"


def format_status(cluster_id: str, info: QuorumInfo) -> str:
    leader = _leader(info)
    max_lag_follower = min(info.voters, key=lambda r: r.log_end_offset)
    max_follower_lag = leader.log_end_offset - max_lag_follower.log_end_offset
    if max_lag_follower is leader:
        lag_time_ms = 0
    elif leader.last_caught_up_timestamp is not None and max_lag_follower.last_caught_up_timestamp is not None:
        lag_time_ms = leader.last_caught_up_timestamp - max_lag_follower.last_caught_up_timestamp
    else:
        lag_time_ms = -1
    return (
        f"ClusterId:              {cluster_id}\n"
        f"LeaderId:               {info.leader_id}\n"
        f"LeaderEpoch:            {info.leader_epoch}\n"
        f"HighWatermark:          {info.high_watermark}\n"
        f"MaxFollowerLag:         {max_follower_lag}\n"
        f"MaxFollowerLagTimeMs:   {lag_time_ms}\n"
        f"CurrentVoters:          {_replicas_string(info, info.voters)}\n"
        f"CurrentObservers:       {_replicas_string(info, info.observers)}\n"
    )


def relative_time_ms(timestamp_ms: int, desc: str, now_ms: int) -> int:
    if not 0 < timestamp_ms <= now_ms:
        raise TerseError(
            "org.apache.kafka.common.KafkaException: Error while computing relative time, possible "
            f"drift in system clock.\nCurrent timestamp is {now_ms}, {desc} timestamp is {timestamp_ms}"
        )
    return now_ms - timestamp_ms


def format_replication(info: QuorumInfo, human_readable: bool, now_ms: int) -> str:
    leader = _leader(info)

    def timestamp(value: int | None, desc: str) -> str:
        if value is None:
            return "-1"
        return f"{relative_time_ms(value, desc, now_ms)} ms ago" if human_readable else str(value)

    groups = (
        ([leader], "Leader"),
        ([v for v in info.voters if v.replica_id != info.leader_id], "Follower"),
        (info.observers, "Observer"),
    )
    rows = [
        [
            str(r.replica_id), r.directory_id, str(r.log_end_offset),
            str(leader.log_end_offset - r.log_end_offset),
            timestamp(r.last_fetch_timestamp, "last fetch"),
            timestamp(r.last_caught_up_timestamp, "last caught up"),
            status,
        ]
        for replicas, status in groups
        for r in replicas
    ]
    headers = ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
               "LastCaughtUpTimestamp", "Status"]
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(headers)]
    # ToolsUtils.prettyPrintTable: every cell padded to its column's width, then a tab.
    return "".join(
        "".join(cell.ljust(widths[i]) + "\t" for i, cell in enumerate(row)) + "\n"
        for row in [headers, *rows]
    )


# ---- talking to the cluster ---------------------------------------------------------------------


def _admin_config_error(message: str) -> TerseError:
    """How Kafka's tool reports a configuration its Admin client refuses (first line, cause)."""
    return TerseError(
        "Failed to create new KafkaAdminClient\n"
        f"Caused by: org.apache.kafka.common.config.ConfigException: {message}"
    )


def parse_bootstrap(value: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` as Kafka's ClientUtils reads it (empty entries skipped)."""
    out: list[tuple[str, int]] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise _admin_config_error(f"Invalid url in bootstrap.servers: {item}")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise _admin_config_error("You must set either bootstrap.servers or bootstrap.controllers")
    return out


class _Admin:
    """Just enough of Kafka's Admin client for this tool: one deadline per call, a connection
    per node, ApiVersions first, retries on connection failures and retriable errors."""

    def __init__(self, bootstrap: list[tuple[str, int]], controllers: bool, props: dict[str, str]) -> None:
        self.bootstrap = bootstrap
        self.controllers = controllers
        api_timeout_ms = int(props.get("default.api.timeout.ms", DEFAULT_API_TIMEOUT_MS))
        request_timeout_ms = int(props.get("request.timeout.ms", DEFAULT_REQUEST_TIMEOUT_MS))
        if api_timeout_ms < request_timeout_ms:  # KafkaAdminClient refuses to start
            raise _admin_config_error(
                "The specified value of default.api.timeout.ms must be no smaller than the value "
                "of request.timeout.ms."
            )
        self.api_timeout_s = api_timeout_ms / 1000
        self.request_timeout_s = request_timeout_ms / 1000
        self.client_id = props.get("client.id", "odradek-metadata-quorum")
        self.security = client_security(props)  # TLS / SASL
        self.clients: dict[tuple[str, int], NetworkClient] = {}
        self.versions: dict[tuple[str, int], dict[int, int]] = {}
        self.active_controller: tuple[str, int] | None = None

    async def close(self) -> None:
        for client in self.clients.values():
            await client.close()

    async def _client(self, addr: tuple[str, int]) -> NetworkClient:
        client = self.clients.get(addr)
        if client is None:
            try:
                client = await NetworkClient(
                    addr[0], addr[1], client_id=self.client_id, **self.security.client_kwargs()).connect()
            except (OSError, TimeoutError) as e:
                refused = connect_failure(e)
                if refused is not None:
                    raise TerseError(refused) from e
                raise
            self.clients[addr] = client
            r = await client.send(m.API_VERSIONS, 3, {
                "client_software_name": "odradek-metadata-quorum", "client_software_version": "1",
            })
            if r["error_code"] != Errors.NONE:
                r = await client.send(m.API_VERSIONS, 0, {})
            self.versions[addr] = {a["api_key"]: a["max_version"] for a in r["api_keys"]}
        return client

    async def _call(self, call_name: str, api: Any, max_version: int, body: dict[str, Any],
                    target: Any) -> dict[str, Any]:
        """Send to the node ``target()`` names until an answer or the deadline."""
        deadline = time.monotonic() + self.api_timeout_s
        last: Exception | None = None
        attempts = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            addr: tuple[str, int] | None = None
            try:
                node: tuple[str, int] = await asyncio.wait_for(target(), remaining)
                addr = node
                client = await asyncio.wait_for(self._client(node), remaining)
                server_max = self.versions[node].get(api.api_key, -1)
                if server_max < 0:
                    raise TerseError(
                        f"{_ERRORS_PKG}UnsupportedVersionException: The node does not support "
                        f"{_api_const(api.name)}"
                    )
                attempts += 1
                return await asyncio.wait_for(
                    client.send(api, min(max_version, server_max), body),
                    min(remaining, self.request_timeout_s),
                )
            except (OSError, TimeoutError, _Retriable) as e:
                last = e
                if addr is not None and not isinstance(e, _Retriable):
                    failed = self.clients.pop(addr, None)
                    if failed is not None:
                        await failed.close()
                await asyncio.sleep(min(RETRY_BACKOFF_MS / 1000, max(0.0, deadline - time.monotonic())))
        if attempts == 0 or not isinstance(last, _Retriable):
            raise TerseError(
                f"{_ERRORS_PKG}TimeoutException: Timed out waiting for a node assignment. Call: {call_name}"
            )
        raise TerseError(
            f"{_ERRORS_PKG}TimeoutException: Call(callName={call_name}) timed out after "
            f"{attempts} attempt(s) (last error: {last})"
        )

    async def _any_bootstrap(self) -> tuple[str, int]:
        """The first bootstrap address that accepts a connection (OSError when none does)."""
        error: OSError | None = None
        for addr in self.bootstrap:
            try:
                await self._client(addr)
                return addr
            except OSError as e:
                error = e
        assert error is not None
        raise error

    async def describe_cluster(self) -> dict[str, Any]:
        body = {
            "include_cluster_authorized_operations": False,
            "endpoint_type": ENDPOINT_TYPE_CONTROLLER if self.controllers else ENDPOINT_TYPE_BROKER,
        }
        r = await self._call("listNodes", m.DESCRIBE_CLUSTER, 1, body, self._any_bootstrap)
        if r["error_code"] != Errors.NONE:
            raise TerseError(kafka_exception(r["error_code"], r.get("error_message")))
        brokers = {b["broker_id"]: (b["host"], b["port"]) for b in r["brokers"]}
        if self.controllers and r["controller_id"] in brokers:
            self.active_controller = brokers[r["controller_id"]]
        return r

    async def _quorum_target(self) -> tuple[str, int]:
        if not self.controllers:
            return await self._any_bootstrap()
        # LeastLoadedBrokerOrActiveKController: the active controller DescribeCluster names.
        if self.active_controller is None:
            await self.describe_cluster()
        if self.active_controller is None:
            raise _Retriable("no active controller")
        return self.active_controller

    async def describe_quorum(self) -> QuorumInfo:
        body = {"topics": [{"topic_name": METADATA_TOPIC,
                            "partitions": [{"partition_index": METADATA_PARTITION}]}]}
        deadline = time.monotonic() + self.api_timeout_s
        while True:
            r = await self._call("describeMetadataQuorum", DESCRIBE_QUORUM, 2, body, self._quorum_target)
            try:
                return quorum_info(r)
            except _Retriable as e:
                if time.monotonic() >= deadline:
                    raise TerseError(f"{_ERRORS_PKG}TimeoutException: {e}") from None
                self.active_controller = None  # a new leader: ask again who it is
                await asyncio.sleep(RETRY_BACKOFF_MS / 1000)


def _api_const(name: str) -> str:
    """``DescribeQuorum`` → ``DESCRIBE_QUORUM`` (Kafka's ApiKeys name)."""
    return "".join("_" + c if c.isupper() and i else c for i, c in enumerate(name)).upper()


async def _describe(args: argparse.Namespace, props: dict[str, str]) -> str:
    controllers = args.bootstrap_controller is not None
    admin = _Admin(parse_bootstrap(args.bootstrap_controller or args.bootstrap_server), controllers, props)
    try:
        if args.replication:
            info = await admin.describe_quorum()
            return format_replication(info, args.human_readable, int(time.time() * 1000))
        cluster = await admin.describe_cluster()
        info = await admin.describe_quorum()
        return format_status(cluster["cluster_id"], info)
    finally:
        await admin.close()


async def _change_voters(args: argparse.Namespace, props: dict[str, str]) -> str:
    from odradek.cli import metadata_quorum_voters as mqv

    if args.quorum_command == "add-controller" and args.command_config is None:
        raise TerseError(
            "You must supply the configuration file of the controller you are adding when using "
            "add-controller."
        )
    controllers = args.bootstrap_controller is not None
    admin = _Admin(parse_bootstrap(args.bootstrap_controller or args.bootstrap_server), controllers, props)
    try:
        if args.quorum_command == "add-controller":
            return await mqv.add_controller(admin, props, args.dry_run)
        return await mqv.remove_controller(
            admin, args.controller_id, args.controller_directory_id, args.dry_run
        )
    finally:
        await admin.close()


def _usage_error(args: argparse.Namespace, message: str) -> int:
    parser: argparse.ArgumentParser = args.metadata_quorum_parser
    print(f"{parser.format_usage()}{parser.prog}: error: {message}", file=sys.stderr)
    return 1


def run(args: argparse.Namespace) -> int:
    if args.bootstrap_server is not None and args.bootstrap_controller is not None:
        return _usage_error(args, "argument --bootstrap-controller: not allowed with argument --bootstrap-server")
    if args.bootstrap_server is None and args.bootstrap_controller is None:
        return _usage_error(args, "one of the arguments --bootstrap-server --bootstrap-controller is required")
    if args.quorum_command is None:
        return _usage_error(args, "too few arguments")
    try:
        props: dict[str, str] = {}
        if args.command_config is not None:
            if not os.path.exists(args.command_config):
                raise TerseError(f"Properties file {args.command_config} does not exists!")
            with open(args.command_config, encoding="utf-8") as f:
                props = parse_properties(f.read())
        try:
            client_security(props)  # checked before anything is sent
        except ClientSecurityError as e:
            raise TerseError(f"Invalid client configuration: {e}") from None
        if args.quorum_command in ("add-controller", "remove-controller"):
            out = asyncio.run(_change_voters(args, props))
            sys.stdout.write(out)
            sys.stdout.flush()
            return 0
        if args.status and args.replication:
            raise TerseError("Only one of --status or --replication should be specified with describe sub-command")
        if not args.status and not args.replication:
            raise TerseError("One of --status or --replication must be specified with describe sub-command")
        if args.status and args.human_readable:
            raise TerseError("The option --human-readable is only supported along with --replication")
        out = asyncio.run(_describe(args, props))
    except (TerseError, ValueError) as e:
        print(e, file=sys.stderr)
        return 1
    sys.stdout.write(out)
    sys.stdout.flush()
    return 0


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "metadata-quorum",
        help="describe the KRaft metadata quorum (kafka-metadata-quorum.sh)",
        description="This tool describes kraft metadata quorum status (as Apache Kafka's "
        "kafka-metadata-quorum.sh).",
    )
    p.add_argument(
        "--bootstrap-server",
        help="A comma-separated list of host:port pairs to use for establishing the connection "
        "to the Kafka cluster.",
    )
    p.add_argument(
        "--bootstrap-controller",
        help="A comma-separated list of host:port pairs to use for establishing the connection "
        "to the Kafka controllers.",
    )
    p.add_argument("--command-config", help="Property file containing configs to be passed to Admin Client.")
    commands = p.add_subparsers(
        dest="quorum_command", metavar="{describe,add-controller,remove-controller}"
    )
    describe = commands.add_parser("describe", help="Describe the metadata quorum info")
    status = describe.add_argument_group("Status")
    status.add_argument(
        "--status",
        action="store_true",
        help="A short summary of the quorum status and the other provides detailed information "
        "about the status of replication.",
    )
    replication = describe.add_argument_group("Replication")
    replication.add_argument(
        "--replication", action="store_true", help="Detailed information about the status of replication"
    )
    replication.add_argument("--human-readable", action="store_true", help="Human-readable output")
    add = commands.add_parser("add-controller", help="Add a controller to the KRaft controller cluster")
    add.add_argument("--dry-run", action="store_true", help="True if we should print what would be done, but not do it.")
    remove = commands.add_parser("remove-controller", help="Remove a controller from the KRaft controller cluster")
    remove.add_argument("--controller-id", "-i", type=int, required=True, help="The id of the controller to remove.")
    remove.add_argument(
        "--controller-directory-id", "-d", required=True, help="The directory ID of the controller to remove."
    )
    remove.add_argument("--dry-run", action="store_true", help="True if we should print what would be done, but not do it.")
    p.set_defaults(func=run, metadata_quorum_parser=p, status=False, replication=False, human_readable=False)

