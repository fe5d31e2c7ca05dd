"""``odradek broker-api-versions``: the API versions every broker serves, as
``kafka-broker-api-versions.sh``.

``odradek broker-api-versions --bootstrap-server HOST:PORT [--command-config FILE]``

For each broker of the cluster (from Metadata), an ApiVersions request to that broker and Kafka 4's
text for it::

    127.0.0.1:9092 (id: 1 rack: null isFenced: false) -> (
    \tProduce(0): 0 to 12 [usable: 12],
    ...
    \tDeleteShareGroupOffsets(92): UNSUPPORTED
    )

"usable" is the newest version both the broker and the tool's client speak. As Kafka's tool
reports against its own client (kafka-clients), the client side is Kafka 4.3's table below (the
``validVersions`` of the request schemas whose ``listeners`` include ``broker``), so the output is
the one kafka-broker-api-versions.sh 4.3 prints for the same cluster.
"""

from __future__ import annotations

import argparse
from typing import Any

from odradek.cli.admin import AdminClient, AdminError
from odradek.cli.tool_common import add_connection_args, require_bootstrap, run_admin

# (api key, name, oldest, latest) of Kafka 4.3's client (ApiKeys.clientApis()).
KAFKA_CLIENT_APIS: tuple[tuple[int, str, int, int], ...] = (
    (0, "Produce", 3, 13), (1, "Fetch", 4, 18), (2, "ListOffsets", 1, 11), (3, "Metadata", 0, 13),
    (8, "OffsetCommit", 2, 10), (9, "OffsetFetch", 1, 10), (10, "FindCoordinator", 0, 6), (11, "JoinGroup", 0, 9),
    (12, "Heartbeat", 0, 4), (13, "LeaveGroup", 0, 5), (14, "SyncGroup", 0, 5), (15, "DescribeGroups", 0, 6),
    (16, "ListGroups", 0, 5), (17, "SaslHandshake", 0, 1), (18, "ApiVersions", 0, 4), (19, "CreateTopics", 2, 7),
    (20, "DeleteTopics", 1, 6), (21, "DeleteRecords", 0, 2), (22, "InitProducerId", 0, 6),
    (23, "OffsetForLeaderEpoch", 2, 4), (24, "AddPartitionsToTxn", 0, 5), (25, "AddOffsetsToTxn", 0, 4),
    (26, "EndTxn", 0, 5), (27, "WriteTxnMarkers", 1, 2), (28, "TxnOffsetCommit", 0, 5), (29, "DescribeAcls", 1, 3),
    (30, "CreateAcls", 1, 3), (31, "DeleteAcls", 1, 3), (32, "DescribeConfigs", 1, 4), (33, "AlterConfigs", 0, 2),
    (34, "AlterReplicaLogDirs", 1, 2), (35, "DescribeLogDirs", 1, 5), (36, "SaslAuthenticate", 0, 2),
    (37, "CreatePartitions", 0, 3), (38, "CreateDelegationToken", 1, 3), (39, "RenewDelegationToken", 1, 2),
    (40, "ExpireDelegationToken", 1, 2), (41, "DescribeDelegationToken", 1, 3), (42, "DeleteGroups", 0, 2),
    (43, "ElectLeaders", 0, 2), (44, "IncrementalAlterConfigs", 0, 1), (45, "AlterPartitionReassignments", 0, 1),
    (46, "ListPartitionReassignments", 0, 0), (47, "OffsetDelete", 0, 0), (48, "DescribeClientQuotas", 0, 1),
    (49, "AlterClientQuotas", 0, 1), (50, "DescribeUserScramCredentials", 0, 0),
    (51, "AlterUserScramCredentials", 0, 0), (55, "DescribeQuorum", 0, 2), (57, "UpdateFeatures", 0, 2),
    (60, "DescribeCluster", 0, 2), (61, "DescribeProducers", 0, 0), (64, "UnregisterBroker", 0, 0),
    (65, "DescribeTransactions", 0, 0), (66, "ListTransactions", 0, 2), (68, "ConsumerGroupHeartbeat", 0, 1),
    (69, "ConsumerGroupDescribe", 0, 1), (71, "GetTelemetrySubscriptions", 0, 0), (72, "PushTelemetry", 0, 0),
    (74, "ListConfigResources", 0, 1), (75, "DescribeTopicPartitions", 0, 0), (76, "ShareGroupHeartbeat", 1, 1),
    (77, "ShareGroupDescribe", 1, 1), (78, "ShareFetch", 1, 2), (79, "ShareAcknowledge", 1, 2),
    (80, "AddRaftVoter", 0, 1), (81, "RemoveRaftVoter", 0, 0), (83, "InitializeShareGroupState", 0, 0),
    (84, "ReadShareGroupState", 0, 0), (85, "WriteShareGroupState", 0, 1), (86, "DeleteShareGroupState", 0, 0),
    (87, "ReadShareGroupStateSummary", 0, 1), (88, "StreamsGroupHeartbeat", 0, 0),
    (89, "StreamsGroupDescribe", 0, 0), (90, "DescribeShareGroupOffsets", 0, 1),
    (91, "AlterShareGroupOffsets", 0, 0), (92, "DeleteShareGroupOffsets", 0, 0),
)
_CLIENT = {key: (name, oldest, latest) for key, name, oldest, latest in KAFKA_CLIENT_APIS}


def _api_text(key: int, lo: int, hi: int) -> str:
    """One API as NodeApiVersions.apiVersionToText: the broker's range and what is usable."""
    known = _CLIENT.get(key)
    text = f"{known[0] if known else 'UNKNOWN'}({key}): {lo if lo == hi else f'{lo} to {hi}'}"
    if known is None:
        return text
    _, oldest, latest = known
    if latest < lo:
        return f"{text} [unusable: node too new]"
    if hi < oldest:
        return f"{text} [unusable: node too old]"
    return f"{text} [usable: {min(latest, hi)}]"


def api_versions_text(api_keys: list[dict[str, Any]]) -> str:
    """``(`` then one tab-indented line per API, by key, ``,``-separated, then ``)``."""
    lines = {a["api_key"]: _api_text(a["api_key"], a["min_version"], a["max_version"]) for a in api_keys}
    for key, (name, _, _) in _CLIENT.items():
        lines.setdefault(key, f"{name}({key}): UNSUPPORTED")
    return "(\n\t" + ",\n\t".join(lines[k] for k in sorted(lines)) + "\n)"


def node_text(node_id: int, host: str, port: int, rack: str | None) -> str:
    return f"{host}:{port} (id: {node_id} rack: {rack if rack is not None else 'null'} isFenced: false)"


async def _versions(admin: AdminClient) -> list[str]:
    md = await admin.metadata([])
    out: list[str] = []
    for b in sorted(md["brokers"], key=lambda b: b["node_id"]):
        head = node_text(b["node_id"], b["host"], b["port"], b.get("rack"))
        try:
            async with AdminClient(f"{b['host']}:{b['port']}", admin.timeout_ms, admin.client_id,
                                   admin.request_timeout_ms, admin.security) as direct:
                resp = await direct.connect()
            out.append(f"{head} -> {api_versions_text(resp['api_keys'])}")
        except AdminError as e:
            out.append(f"{head} -> ERROR: {e}")
    return out


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "broker-api-versions", help="the API versions each broker serves (kafka-broker-api-versions.sh)",
        description="Print the API versions every broker of the cluster serves and the version this tool "
        "(as Kafka 4.3's client) would use, as kafka-broker-api-versions.sh. Exit codes: 0 done, "
        "1 failed (message on stderr), 2 usage error.",
    )
    add_connection_args(p)
    p.set_defaults(func=lambda opts: run(p, opts))


def run(parser: argparse.ArgumentParser, opts: argparse.Namespace) -> int:
    require_bootstrap(parser, opts)
    return run_admin(opts, _versions, client_id="broker-api-versions")
