"""``odradek cluster info`` and ``odradek cluster id``: what a cluster is made of, over the Kafka
protocol (any Kafka-protocol cluster).

``cluster id`` prints ``Cluster ID: <id>`` as ``kafka-cluster.sh cluster-id``. ``cluster info``
prints the cluster id, the controller (as DescribeCluster reports it: in KRaft a broker's view,
-1 when none) and one line per broker::

    Cluster ID: 4L6g3nShT-eMCtK--X86sw
    Controller: 1
    Broker: 1	Endpoint: 127.0.0.1:9092	Rack: null	ApiKeys: 41	Produce: 0-12	Fetch: 4-17	metadata.version: 3.9-IV0

The broker list comes from DescribeCluster (Metadata where a broker does not serve it); the
API counts, Produce/Fetch ranges and finalized metadata.version come from each broker's own
ApiVersions (``unreachable: <reason>`` when it does not answer).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from odradek.cli.admin import AdminClient, AdminError, kafka_exception
from odradek.cli.features import level_to_string
from odradek.cli.tool_common import add_connection_args, require_bootstrap, run_admin
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors


async def describe_cluster(admin: AdminClient) -> dict[str, Any]:
    """cluster_id, controller_id and brokers (node_id, host, port, rack)."""
    versions = await admin.connect()
    if any(a["api_key"] == m.DESCRIBE_CLUSTER.api_key for a in versions["api_keys"]):
        resp = await admin.send(m.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": False, "endpoint_type": 1},
                                top_error=None)
        if resp["error_code"] != Errors.NONE:
            raise AdminError(kafka_exception(resp["error_code"], resp.get("error_message")))
        brokers = [{"node_id": b["broker_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
                   for b in resp["brokers"]]
        return {"cluster_id": resp["cluster_id"], "controller_id": resp["controller_id"], "brokers": brokers}
    md = await admin.metadata([])
    return {"cluster_id": md.get("cluster_id"), "controller_id": md.get("controller_id", -1), "brokers": md["brokers"]}


def _versions_summary(resp: dict[str, Any]) -> str:
    ranges = {a["api_key"]: (a["min_version"], a["max_version"]) for a in resp["api_keys"]}
    parts = [f"ApiKeys: {len(ranges)}"]
    for api in (m.PRODUCE, m.FETCH):
        lo, hi = ranges.get(api.api_key, (None, None))
        parts.append(f"{api.name}: {lo}-{hi}" if lo is not None else f"{api.name}: none")
    finalized = {f["name"]: f["max_version_level"] for f in resp.get("finalized_features") or []}
    if "metadata.version" in finalized:
        parts.append(f"metadata.version: {level_to_string('metadata.version', finalized['metadata.version'])}")
    return "\t".join(parts)


async def _broker_versions(admin: AdminClient, host: str, port: int) -> str:
    probe = AdminClient(f"{host}:{port}", timeout_ms=min(admin.timeout_ms, 5000), client_id=admin.client_id,
                         security=admin.security)
    try:
        return _versions_summary(await probe.connect())
    except AdminError:
        return "unreachable: no answer to ApiVersions"
    finally:
        await probe.close()


async def info(admin: AdminClient) -> list[str]:
    desc = await describe_cluster(admin)
    brokers = sorted(desc["brokers"], key=lambda b: b["node_id"])
    summaries = await asyncio.gather(*(_broker_versions(admin, b["host"], b["port"]) for b in brokers))
    lines = [f"Cluster ID: {desc['cluster_id']}", f"Controller: {desc['controller_id']}"]
    for b, summary in zip(brokers, summaries, strict=True):
        lines.append(f"Broker: {b['node_id']}\tEndpoint: {b['host']}:{b['port']}\tRack: {b['rack'] if b['rack'] is not None else 'null'}\t{summary}")
    return lines


async def cluster_id(admin: AdminClient) -> list[str]:
    cid = (await describe_cluster(admin))["cluster_id"]
    return [f"Cluster ID: {cid}" if cid else "No cluster ID found. The Kafka version is probably too old."]


def add_commands(commands: Any) -> None:
    """Register ``info`` and ``id`` (alias ``cluster-id``) under ``odradek cluster``."""
    i = commands.add_parser("info", help="cluster id, controller, brokers with racks and API versions",
                            description="Describe a running cluster (any Kafka-protocol cluster): id, "
                            "controller, brokers with endpoints, racks and ApiVersions summaries.")
    add_connection_args(i)
    i.set_defaults(func=lambda opts: run(i, opts, info))
    c = commands.add_parser("id", aliases=["cluster-id"], help="print the cluster id (kafka-cluster.sh cluster-id)",
                            description="Print the cluster id, as kafka-cluster.sh cluster-id.")
    add_connection_args(c)
    c.set_defaults(func=lambda opts: run(c, opts, cluster_id))


def run(parser: argparse.ArgumentParser, opts: argparse.Namespace, work: Any) -> int:
    require_bootstrap(parser, opts)
    return run_admin(opts, work, client_id="adminclient-cluster")
