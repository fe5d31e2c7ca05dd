"""What the Overview and Topics pages show, read from a cluster over the Kafka protocol.

* Overview: DescribeCluster (Metadata where it is not served) for the cluster id, the brokers
  and the controller; ApiVersions of the node asked for the feature levels; DescribeQuorum (when
  that node serves it: a KRaft cluster) for the controller quorum — leader, voters, observers and
  each one's lag behind the high watermark.
* Topics: Metadata for partitions, leaders, replicas, ISR and offline replicas; DescribeConfigs
  for a topic's configs (with where each value comes from); ListOffsets for each partition's
  first and next offsets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from odradek.console.client import EARLIEST, LATEST, Broker, ConsoleClient, ConsoleError
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors, error_name

# A topic page lists at most this many partitions (and asks offsets for them).
MAX_PARTITION_ROWS = 1000
METADATA_TOPIC = "__cluster_metadata"
# Kafka's DescribeConfigsResponse.ConfigSource ids.
CONFIG_SOURCES = {
    0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG",
}
DEFAULT_CONFIG = 5


@dataclass
class QuorumReplica:
    replica_id: int
    log_end_offset: int
    lag: int
    last_fetch_timestamp: int | None
    last_caught_up_timestamp: int | None
    endpoints: list[str]


@dataclass
class Quorum:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: list[QuorumReplica]
    observers: list[QuorumReplica]


@dataclass
class Overview:
    cluster_id: str | None
    controller_id: int
    brokers: list[Broker]
    finalized_features: list[tuple[str, int]]
    supported_features: list[tuple[str, int, int]]
    quorum: Quorum | None
    quorum_note: str  # why there is no quorum to show


@dataclass
class PartitionInfo:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]
    error: str | None = None
    first_offset: int | str | None = None
    next_offset: int | str | None = None

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def is_offline(self) -> bool:
        return self.leader < 0

    @property
    def messages(self) -> int | None:
        if isinstance(self.first_offset, int) and isinstance(self.next_offset, int):
            return self.next_offset - self.first_offset
        return None


@dataclass
class TopicInfo:
    name: str
    internal: bool
    partitions: list[PartitionInfo]
    error: str | None = None

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def under_replicated(self) -> int:
        return sum(1 for p in self.partitions if p.under_replicated)

    @property
    def offline(self) -> int:
        return sum(1 for p in self.partitions if p.is_offline)


@dataclass
class ConfigEntry:
    name: str
    value: str | None
    source: str
    is_default: bool
    read_only: bool
    sensitive: bool


@dataclass
class TopicDetail:
    topic: TopicInfo
    configs: list[ConfigEntry] = field(default_factory=list)
    configs_error: str | None = None
    truncated: int = 0  # partitions not shown


def _replica(r: dict[str, Any], hw: int, endpoints: dict[int, list[str]]) -> QuorumReplica:
    def ts(name: str) -> int | None:
        v = r.get(name, -1)
        return None if v is None or v < 0 else v

    return QuorumReplica(r["replica_id"], r["log_end_offset"], max(0, hw - r["log_end_offset"]),
                         ts("last_fetch_timestamp"), ts("last_caught_up_timestamp"), endpoints.get(r["replica_id"], []))


async def describe_quorum(client: ConsoleClient, addr: tuple[str, int]) -> tuple[Quorum | None, str]:
    if await client.version(addr, m.DESCRIBE_QUORUM, 2) < 0:
        return None, "this cluster does not serve DescribeQuorum (not KRaft, or too old)"
    try:
        _, r = await client.send(addr, m.DESCRIBE_QUORUM, 2, {"topics": [
            {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]})
    except ConsoleError as e:
        return None, str(e)
    if r["error_code"] != Errors.NONE:
        return None, f"DescribeQuorum: {error_name(r['error_code'])} {r.get('error_message') or ''}".strip()
    try:
        p = r["topics"][0]["partitions"][0]
    except (IndexError, KeyError):
        return None, "DescribeQuorum: an answer without the metadata partition"
    if p["error_code"] != Errors.NONE:
        return None, f"DescribeQuorum: {error_name(p['error_code'])} {p.get('error_message') or ''}".strip()
    endpoints = {
        n["node_id"]: [f"{lst['name']}://{lst['host']}:{lst['port']}" for lst in n["listeners"]]
        for n in r.get("nodes") or []
    }
    hw = p["high_watermark"]
    return Quorum(
        p["leader_id"], p["leader_epoch"], hw,
        [_replica(v, hw, endpoints) for v in p["current_voters"]],
        [_replica(o, hw, endpoints) for o in p["observers"]],
    ), ""


async def overview(client: ConsoleClient) -> Overview:
    addr = await client.any_node()
    if await client.version(addr, m.DESCRIBE_CLUSTER, 1) >= 0:
        _, r = await client.send(addr, m.DESCRIBE_CLUSTER, 1, {
            "include_cluster_authorized_operations": False, "endpoint_type": 1,
        })
        if r["error_code"] != Errors.NONE:
            raise ConsoleError(f"DescribeCluster: {error_name(r['error_code'])} {r.get('error_message') or ''}")
        cluster_id, controller = r["cluster_id"], r["controller_id"]
        brokers = [Broker(b["broker_id"], b["host"], b["port"], b.get("rack")) for b in r["brokers"]]
        client.brokers = {b.node_id: b for b in brokers}
    else:
        md = await client.metadata([])
        cluster_id, controller = md.get("cluster_id"), md.get("controller_id", -1)
        brokers = list(client.brokers.values())
    info = await client.node_info(addr)
    quorum, note = await describe_quorum(client, addr)
    return Overview(
        cluster_id, controller, sorted(brokers, key=lambda b: b.node_id),
        sorted(info.finalized_features), sorted(info.supported_features), quorum, note,
    )


def _topic(t: dict[str, Any]) -> TopicInfo:
    parts = [
        PartitionInfo(
            p["partition_index"], p["leader_id"], list(p["replica_nodes"]), list(p["isr_nodes"]),
            list(p.get("offline_replicas") or []),
            None if p["error_code"] in (Errors.NONE, Errors.LEADER_NOT_AVAILABLE) else error_name(p["error_code"]),
        )
        for p in t["partitions"]
    ]
    return TopicInfo(
        t["name"], bool(t.get("is_internal")), sorted(parts, key=lambda p: p.partition),
        None if t["error_code"] == Errors.NONE else error_name(t["error_code"]),
    )


async def list_topics(client: ConsoleClient) -> list[TopicInfo]:
    md = await client.metadata(None)
    return sorted((_topic(t) for t in md["topics"] if t.get("name") is not None), key=lambda t: t.name)


async def topic_configs(client: ConsoleClient, name: str) -> list[ConfigEntry]:
    addr = await client.any_node()
    v, r = await client.send(addr, m.DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": 2, "resource_name": name, "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False,
    })
    res = r["results"][0]
    if res["error_code"] != Errors.NONE:
        raise ConsoleError(f"DescribeConfigs: {error_name(res['error_code'])} {res.get('error_message') or ''}".strip())
    out = []
    for c in res["configs"]:
        if v == 0:
            is_default = bool(c.get("is_default"))
            source = "DEFAULT_CONFIG" if is_default else "UNKNOWN"
        else:
            src = c.get("config_source", -1)
            source = CONFIG_SOURCES.get(src, str(src))
            is_default = src == DEFAULT_CONFIG
        out.append(ConfigEntry(c["name"], c["value"], source, is_default, bool(c["read_only"]), bool(c["is_sensitive"])))
    return sorted(out, key=lambda c: c.name)


async def topic_detail(client: ConsoleClient, name: str) -> TopicDetail:
    md = await client.metadata([name])
    topics = [t for t in md["topics"] if t.get("name") == name]
    if not topics:
        raise ConsoleError(f"no topic {name!r} in the cluster's metadata")
    topic = _topic(topics[0])
    if topic.error == "UNKNOWN_TOPIC_OR_PARTITION":
        raise ConsoleError(f"the cluster has no topic named {name!r}")
    shown = topic.partitions[:MAX_PARTITION_ROWS]
    detail = TopicDetail(topic, truncated=len(topic.partitions) - len(shown))
    topic.partitions = shown
    leaders = {(name, p.partition): p.leader for p in shown}
    tps = list(leaders)
    if tps:
        first = await client.list_offsets(tps, EARLIEST, leaders)
        nxt = await client.list_offsets(tps, LATEST, leaders)
        for p in shown:
            p.first_offset = first.get((name, p.partition))
            p.next_offset = nxt.get((name, p.partition))
    try:
        detail.configs = await topic_configs(client, name)
    except ConsoleError as e:
        detail.configs_error = str(e)
    return detail
