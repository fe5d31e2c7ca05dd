"""Kafka 3.9's znodes (``kafka.zk.ZkData``): their paths and JSON payloads, byte for byte.

Every ``encode_*`` writes exactly the bytes Kafka 3.9 writes (compact JSON, keys in the order the
JVM map Kafka hands to Jackson iterates: see :mod:`odradek.zk.jvm_order`); every ``decode_*``
takes bytes read from ZooKeeper and returns a value or raises :class:`ZkDataError` (a clear
message naming the znode, never another exception), so a bad znode cannot crash its reader.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .jvm_order import (
    java_concurrent_hashmap_order,
    java_hashmap_order,
    java_map_entry_hash,
    java_string_hash,
    scala_immutable_map_keys,
    scala_immutable_order,
    scala_mutable_hash_order,
    scala_mutable_map_extended,
    scala_mutable_map_from,
)

# --- paths --------------------------------------------------------------------------------

CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
BROKERS_PATH = "/brokers"
BROKER_IDS_PATH = "/brokers/ids"
TOPICS_PATH = "/brokers/topics"
BROKER_SEQUENCE_ID_PATH = "/brokers/seqid"
CONFIG_PATH = "/config"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ADMIN_PATH = "/admin"
DELETE_TOPICS_PATH = "/admin/delete_topics"
REASSIGN_PARTITIONS_PATH = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION_PATH = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION_PATH = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION_PATH = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
CLUSTER_PATH = "/cluster"
CLUSTER_ID_PATH = "/cluster/id"
FEATURE_PATH = "/feature"
CONSUMERS_PATH = "/consumers"
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"

CONFIG_TYPES = ("topics", "clients", "users", "brokers", "ips")

# ZkData.PersistentZkPaths: created (if absent) when a Kafka broker starts.
PERSISTENT_PATHS: tuple[str, ...] = (
    CONSUMERS_PATH, BROKER_IDS_PATH, TOPICS_PATH, CONFIG_CHANGES_PATH, DELETE_TOPICS_PATH,
    BROKER_SEQUENCE_ID_PATH, ISR_CHANGE_NOTIFICATION_PATH, PRODUCER_ID_BLOCK_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH, *(f"{CONFIG_PATH}/{t}" for t in CONFIG_TYPES),
)

MATCH_ANY_VERSION = -1  # ZkVersion.MatchAnyVersion
UNKNOWN_VERSION = -2  # ZkVersion.UnknownVersion


def broker_id_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def topic_partitions_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions"


def topic_partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}/state"


def config_entity_type_path(entity_type: str) -> str:
    return f"{CONFIG_PATH}/{entity_type}"


def config_entity_path(entity_type: str, entity_name: str) -> str:
    return f"{CONFIG_PATH}/{entity_type}/{entity_name}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{topic}"


def sequence_number(node_name: str, prefix: str) -> str:
    """The sequence number of a sequential znode's name (``isr_change_0000000003`` -> ``0000000003``)."""
    return node_name[node_name.rfind(prefix) + len(prefix):]


# --- JSON as Jackson writes it ---------------------------------------------------------------

class ZkDataError(ValueError):
    """A znode's bytes are not what Kafka writes there."""


_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
                  "\r": "\\r"}


def _json_string(text: str) -> str:
    out = ['"']
    for ch in text:
        esc = _SHORT_ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _json(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _json_string(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{_json_string(k)}:{_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_json(v) for v in value) + "]"
    raise TypeError(f"cannot encode {type(value).__name__} as znode JSON")


def to_json_bytes(value: Any) -> bytes:
    """Compact JSON in the given key order, escaped as Jackson escapes (UTF-8, ``\\u00XX``)."""
    return _json(value).encode("utf-8", "surrogatepass")


def _ordered(mapping: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    return {k: mapping[k] for k in keys}


def _parse(what: str, data: bytes | None) -> Any:
    if data is None:
        raise ZkDataError(f"{what}: the znode has no data")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ZkDataError(f"{what}: not JSON ({e}): {_show(data)}") from None


def _show(data: bytes) -> str:
    text = data[:200].decode("utf-8", "replace")
    return text + ("..." if len(data) > 200 else "")


def _obj(what: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ZkDataError(f"{what}: expected a JSON object, got {json.dumps(value)[:200]}")
    return value


def _int(what: str, obj: Mapping[str, Any], key: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ZkDataError(f"{what}: {key!r} must be an integer, got {json.dumps(value)[:100]}")
    return value


def _str(what: str, obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise ZkDataError(f"{what}: {key!r} must be a string, got {json.dumps(value)[:100]}")
    return value


def _int_list(what: str, value: Any, key: str) -> list[int]:
    if not isinstance(value, list) or any(
        isinstance(v, bool) or not isinstance(v, int) for v in value
    ):
        raise ZkDataError(f"{what}: {key!r} must be a list of integers, got {json.dumps(value)[:100]}")
    return list(value)


# --- /controller, /controller_epoch, /cluster/id -------------------------------------------

@dataclass(frozen=True)
class ControllerRegistration:
    broker_id: int
    timestamp: str
    kraft_controller_epoch: int | None  # None when the znode has no "kraftControllerEpoch"
    version: int = 2


def encode_controller(broker_id: int, timestamp_ms: int, kraft_controller_epoch: int = -1) -> bytes:
    """ControllerZNode.encode: ``{"version":2,"brokerid":..,"timestamp":"..","kraftControllerEpoch":-1}``."""
    return to_json_bytes({"version": 2, "brokerid": broker_id, "timestamp": str(timestamp_ms),
                          "kraftControllerEpoch": kraft_controller_epoch})


def decode_controller(data: bytes | None) -> ControllerRegistration:
    what = "/controller"
    obj = _obj(what, _parse(what, data))
    kraft = obj.get("kraftControllerEpoch")
    if kraft is not None and (isinstance(kraft, bool) or not isinstance(kraft, int)):
        raise ZkDataError(f"{what}: 'kraftControllerEpoch' must be an integer")
    ts = obj.get("timestamp")
    return ControllerRegistration(
        _int(what, obj, "brokerid"), ts if isinstance(ts, str) else str(ts), kraft,
        obj["version"] if isinstance(obj.get("version"), int) else 1)


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes | None) -> int:
    if data is None:
        raise ZkDataError("/controller_epoch: the znode has no data")
    try:
        return int(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        raise ZkDataError(f"/controller_epoch: not an integer: {_show(data)}") from None


def encode_cluster_id(cluster_id: str) -> bytes:
    return to_json_bytes({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes | None) -> str:
    what = "/cluster/id"
    return _str(what, _obj(what, _parse(what, data)), "id")


# --- /brokers/ids/<id> --------------------------------------------------------------------

@dataclass(frozen=True)
class BrokerInfo:
    """A broker's registration (BrokerIdZNode, version 5 by default)."""

    broker_id: int
    endpoints: tuple[str, ...]  # "LISTENER://host:port", as advertised
    listener_security_protocol_map: dict[str, str]
    host: str | None = None
    port: int = -1
    rack: str | None = None
    jmx_port: int = -1
    timestamp: str = "0"
    features: dict[str, dict[str, int]] = field(default_factory=dict)
    version: int = 5

    @classmethod
    def create(
        cls, broker_id: int, endpoints: Sequence[tuple[str, str, str, int]], *, timestamp_ms: int,
        rack: str | None = None, jmx_port: int = -1,
        features: Mapping[str, tuple[int, int]] | None = None, version: int = 5,
    ) -> BrokerInfo:
        """From ``(listener, security_protocol, host, port)`` tuples; the top-level host/port are
        the first PLAINTEXT endpoint's (null/-1 without one), as Kafka writes them."""
        plaintext = next((e for e in endpoints if e[1] == "PLAINTEXT"), None)
        conn = tuple(f"{name}://{_host_for_url(host)}:{port}" for name, _, host, port in endpoints)
        lsp: dict[str, str] = {}
        for name, proto, _, _ in endpoints:
            lsp[name] = proto
        feats = {n: {"min_version": lo, "max_version": hi} for n, (lo, hi) in (features or {}).items()}
        return cls(broker_id, conn, lsp, plaintext[2] if plaintext else None,
                   plaintext[3] if plaintext else -1, rack, jmx_port, str(timestamp_ms), feats, version)

    def endpoint_tuples(self) -> list[tuple[str, str, str, int]]:
        """``(listener, security_protocol, host, port)`` per endpoint."""
        out = []
        for ep in self.endpoints:
            name, _, rest = ep.partition("://")
            host, _, port = rest.rpartition(":")
            if host.startswith("[") and host.endswith("]"):
                host = host[1:-1]
            proto = self.listener_security_protocol_map.get(name, name)
            out.append((name, proto, host, int(port)))
        return out


def _host_for_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def encode_broker(info: BrokerInfo) -> bytes:
    """BrokerIdZNode.encode: a ``mutable.Map`` of version/host/port/endpoints/jmx_port/timestamp,
    plus rack (v3+), listener_security_protocol_map (v4+) and features (v5+)."""
    values: dict[str, Any] = {
        "version": info.version, "host": info.host, "port": info.port,
        "endpoints": list(info.endpoints), "jmx_port": info.jmx_port, "timestamp": info.timestamp,
    }
    added: list[str] = []
    if info.rack is not None and info.version >= 3:
        values["rack"] = info.rack
        added.append("rack")
    if info.version >= 4:
        lsp = info.listener_security_protocol_map
        values["listener_security_protocol_map"] = _ordered(lsp, scala_immutable_map_keys(list(lsp)))
        added.append("listener_security_protocol_map")
    if info.version >= 5:
        feats = info.features
        values["features"] = {name: dict(feats[name]) for name in java_hashmap_order(list(feats))}
        added.append("features")
    initial = ["version", "host", "port", "endpoints", "jmx_port", "timestamp"]
    return to_json_bytes(_ordered(values, scala_mutable_map_extended(initial, added)))


def decode_broker(broker_id: int, data: bytes | None) -> BrokerInfo:
    what = f"/brokers/ids/{broker_id}"
    obj = _obj(what, _parse(what, data))
    version = _int(what, obj, "version")
    jmx_port = _int(what, obj, "jmx_port")
    if version < 1:
        raise ZkDataError(f"{what}: unsupported version of broker registration: {version}")
    host = obj.get("host")
    if host is not None and not isinstance(host, str):
        raise ZkDataError(f"{what}: 'host' must be a string")
    port = obj.get("port", -1)
    if isinstance(port, bool) or not isinstance(port, int):
        raise ZkDataError(f"{what}: 'port' must be an integer")
    if version == 1:
        if host is None:
            raise ZkDataError(f"{what}: version 1 needs 'host'")
        endpoints: tuple[str, ...] = (f"PLAINTEXT://{_host_for_url(host)}:{port}",)
        lsp = {"PLAINTEXT": "PLAINTEXT"}
    else:
        eps = obj.get("endpoints")
        if not isinstance(eps, list) or not all(isinstance(e, str) for e in eps):
            raise ZkDataError(f"{what}: 'endpoints' must be a list of strings")
        endpoints = tuple(eps)
        raw = obj.get("listener_security_protocol_map")
        if raw is None:  # SocketServerConfigs.DEFAULT_NAME_TO_SECURITY_PROTO
            lsp = {p: p for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
        elif isinstance(raw, dict) and all(isinstance(v, str) for v in raw.values()):
            lsp = dict(raw)
        else:
            raise ZkDataError(f"{what}: 'listener_security_protocol_map' must map names to strings")
        for ep in endpoints:
            name, sep, rest = ep.partition("://")
            _, colon, port_text = rest.rpartition(":")
            if not sep or not colon or not port_text.lstrip("-").isdigit():
                raise ZkDataError(f"{what}: malformed endpoint {ep!r}")
            if name not in lsp:
                raise ZkDataError(f"{what}: endpoint {ep!r} has no security protocol")
    rack = obj.get("rack")
    if rack is not None and not isinstance(rack, str):
        raise ZkDataError(f"{what}: 'rack' must be a string")
    features: dict[str, dict[str, int]] = {}
    raw_features = obj.get("features")
    if raw_features is not None:
        if not isinstance(raw_features, dict):
            raise ZkDataError(f"{what}: 'features' must be an object")
        for name, rng in raw_features.items():
            if not isinstance(rng, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in rng.values()
            ):
                raise ZkDataError(f"{what}: feature {name!r} must map labels to integers")
            features[name] = dict(rng)
    ts = obj.get("timestamp", "0")
    return BrokerInfo(broker_id, endpoints, lsp, host, port, rack, jmx_port,
                      ts if isinstance(ts, str) else str(ts), features, version)


# --- /brokers/topics/<t> and partition state ------------------------------------------------

@dataclass(frozen=True)
class ReplicaAssignment:
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class TopicAssignment:
    topic: str
    topic_id: str | None  # the Uuid's base64 string, as Kafka writes it
    partitions: dict[int, ReplicaAssignment]


def _partition_key_order(partitions: Iterable[int]) -> list[str]:
    return scala_mutable_hash_order([str(p) for p in partitions], java_string_hash)


def encode_topic(topic_id: str | None, assignment: Mapping[int, ReplicaAssignment]) -> bytes:
    """TopicZNode.encode (version 3): partitions, adding_replicas, removing_replicas, topic_id."""
    def section(attr: str) -> dict[str, list[int]]:
        chosen = {str(p): list(getattr(a, attr)) for p, a in assignment.items() if getattr(a, attr)}
        return {k: chosen[k] for k in _partition_key_order(int(k) for k in chosen)}

    values: dict[str, Any] = {"version": 3, "partitions": section("replicas"),
                              "adding_replicas": section("adding_replicas"),
                              "removing_replicas": section("removing_replicas")}
    added: list[str] = []
    if topic_id is not None:
        values["topic_id"] = topic_id
        added.append("topic_id")
    initial = ["version", "partitions", "adding_replicas", "removing_replicas"]
    return to_json_bytes(_ordered(values, scala_mutable_map_extended(initial, added)))


def decode_topic(topic: str, data: bytes | None) -> TopicAssignment:
    what = f"/brokers/topics/{topic}"
    obj = _obj(what, _parse(what, data))
    topic_id = obj.get("topic_id")
    if topic_id is not None and not isinstance(topic_id, str):
        raise ZkDataError(f"{what}: 'topic_id' must be a string")

    def section(key: str) -> dict[str, Any]:
        raw = obj.get(key)
        if raw is None:
            return {}
        return _obj(f"{what} {key}", raw)

    parts, adding, removing = section("partitions"), section("adding_replicas"), section("removing_replicas")
    out: dict[int, ReplicaAssignment] = {}
    for key, replicas in parts.items():
        if not key.isdigit():
            raise ZkDataError(f"{what}: partition {key!r} is not a number")
        out[int(key)] = ReplicaAssignment(
            tuple(_int_list(what, replicas, key)),
            tuple(_int_list(what, adding.get(key, []), key)),
            tuple(_int_list(what, removing.get(key, []), key)))
    return TopicAssignment(topic, topic_id, out)


@dataclass(frozen=True)
class PartitionState:
    """LeaderIsrAndControllerEpoch with the znode's version (``LeaderAndIsr.partitionEpoch``)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_recovery_state: int = 0  # 0 RECOVERED, 1 RECOVERING
    zk_version: int = UNKNOWN_VERSION


def encode_partition_state(state: PartitionState) -> bytes:
    """TopicPartitionStateZNode.encode: an immutable ``Map`` of five keys (six with
    leader_recovery_state when not RECOVERED)."""
    values: dict[str, Any] = {"version": 1, "leader": state.leader, "leader_epoch": state.leader_epoch,
                              "controller_epoch": state.controller_epoch, "isr": list(state.isr)}
    if state.leader_recovery_state != 0:
        values["leader_recovery_state"] = state.leader_recovery_state
    return to_json_bytes(_ordered(values, scala_immutable_map_keys(list(values))))


def decode_partition_state(data: bytes | None, zk_version: int = UNKNOWN_VERSION,
                           what: str = "partition state") -> PartitionState:
    obj = _obj(what, _parse(what, data))
    recovery = obj.get("leader_recovery_state", 0)
    if recovery not in (0, 1) or isinstance(recovery, bool):
        raise ZkDataError(f"{what}: unknown leader_recovery_state {json.dumps(recovery)[:50]}")
    return PartitionState(
        _int(what, obj, "leader"), _int(what, obj, "leader_epoch"),
        tuple(_int_list(what, obj.get("isr"), "isr")), _int(what, obj, "controller_epoch"),
        recovery, zk_version)


# --- /config -----------------------------------------------------------------------------

def encode_config_entity(config: Mapping[str, str]) -> bytes:
    """ConfigEntityZNode.encode: ``{"version":1,"config":{...}}`` (a ``Properties``' order)."""
    ordered = {k: config[k] for k in java_concurrent_hashmap_order(list(config))}
    return to_json_bytes({"version": 1, "config": ordered})


def decode_config_entity(data: bytes | None, what: str = "config") -> dict[str, str]:
    if data is None:
        return {}
    parsed = _parse(what, data)
    if not isinstance(parsed, dict) or not isinstance(parsed.get("config"), dict):
        return {}
    out: dict[str, str] = {}
    for key, value in parsed["config"].items():
        if not isinstance(value, str):
            raise ZkDataError(f"{what}: config {key!r} must be a string")
        out[key] = value
    return out


def encode_config_change_notification(entity_path: str) -> bytes:
    """ConfigEntityChangeNotificationSequenceZNode: ``{"version":2,"entity_path":"topics/t"}``."""
    return to_json_bytes({"version": 2, "entity_path": entity_path})


def decode_config_change_notification(data: bytes | None) -> str:
    what = "config change notification"
    obj = _obj(what, _parse(what, data))
    if obj.get("version") == 1:  # version 1: entity_type + entity_name
        return f"{_str(what, obj, 'entity_type')}/{_str(what, obj, 'entity_name')}"
    return _str(what, obj, "entity_path")


# --- /admin -----------------------------------------------------------------------------

def _partition_objects(partitions: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p} for t, p in partitions]


def _tp_hash(tp: tuple[str, int]) -> int:
    return java_map_entry_hash([("topic", tp[0]), ("partition", tp[1])])


def _decode_partition_list(what: str, data: bytes | None) -> list[tuple[str, int]]:
    obj = _obj(what, _parse(what, data))
    raw = obj.get("partitions")
    if not isinstance(raw, list):
        raise ZkDataError(f"{what}: 'partitions' must be a list")
    out = []
    for item in raw:
        entry = _obj(what, item)
        out.append((_str(what, entry, "topic"), _int(what, entry, "partition")))
    return out


def encode_reassign_partitions(reassignment: Iterable[tuple[str, int, Sequence[int]]]) -> bytes:
    """ReassignPartitionsZNode (the legacy znode): ``{"version":1,"partitions":[{"topic","partition",
    "replicas"}]}`` in the given order."""
    parts = [{"topic": t, "partition": p, "replicas": list(r)} for t, p, r in reassignment]
    return to_json_bytes({"version": 1, "partitions": parts})


def decode_reassign_partitions(data: bytes | None) -> dict[tuple[str, int], list[int]]:
    what = REASSIGN_PARTITIONS_PATH
    obj = _obj(what, _parse(what, data))
    raw = obj.get("partitions")
    if not isinstance(raw, list):
        raise ZkDataError(f"{what}: 'partitions' must be a list")
    out: dict[tuple[str, int], list[int]] = {}
    for item in raw:
        entry = _obj(what, item)
        out[(_str(what, entry, "topic"), _int(what, entry, "partition"))] = _int_list(
            what, entry.get("replicas"), "replicas")
    return out


def encode_preferred_replica_election(partitions: Iterable[tuple[str, int]]) -> bytes:
    """PreferredReplicaElectionZNode: partitions in an immutable ``Set``'s order."""
    ordered = scala_immutable_order(list(partitions), _tp_hash)
    return to_json_bytes({"version": 1, "partitions": _partition_objects(ordered)})


def decode_preferred_replica_election(data: bytes | None) -> set[tuple[str, int]]:
    return set(_decode_partition_list(PREFERRED_REPLICA_ELECTION_PATH, data))


# --- notifications ------------------------------------------------------------------------

def encode_isr_change_notification(partitions: Iterable[tuple[str, int]]) -> bytes:
    """IsrChangeNotificationSequenceZNode: version 1, the partitions in the order of the
    ``mutable.HashSet`` Kafka maps them into."""
    ordered = scala_mutable_hash_order(list(dict.fromkeys(partitions)), _tp_hash)
    return to_json_bytes({"version": 1, "partitions": _partition_objects(ordered)})


def decode_isr_change_notification(data: bytes | None) -> set[tuple[str, int]]:
    return set(_decode_partition_list("isr change notification", data))


def encode_log_dir_event_notification(broker_id: int) -> bytes:
    """LogDirEventNotificationSequenceZNode: ``{"version":1,"broker":id,"event":1}`` (a failure)."""
    return to_json_bytes({"version": 1, "broker": broker_id, "event": 1})


def decode_log_dir_event_notification(data: bytes | None) -> int:
    what = "log dir event notification"
    return _int(what, _obj(what, _parse(what, data)), "broker")


# --- /feature -----------------------------------------------------------------------------

@dataclass(frozen=True)
class FeatureZNodeData:
    version: int  # 1 (min and max levels) or 2 (max only)
    enabled: bool  # status 1 Enabled, 0 Disabled
    features: dict[str, int]


def encode_feature(node: FeatureZNodeData) -> bytes:
    names = scala_immutable_map_keys(list(node.features))
    feats: dict[str, Any] = {}
    for name in names:
        level = node.features[name]
        feats[name] = ({"max_version_level": level, "min_version_level": level} if node.version == 1
                       else {"max_version_level": level})
    values = {"version": node.version, "status": 1 if node.enabled else 0, "features": feats}
    return to_json_bytes(_ordered(values, scala_mutable_map_from(["version", "status", "features"])))


def decode_feature(data: bytes | None) -> FeatureZNodeData:
    what = FEATURE_PATH
    obj = _obj(what, _parse(what, data))
    version = _int(what, obj, "version")
    if version not in (1, 2):
        raise ZkDataError(f"{what}: unsupported version {version}")
    status = _int(what, obj, "status")
    if status not in (0, 1):
        raise ZkDataError(f"{what}: malformed status {status}")
    raw = _obj(what, obj.get("features"))
    features: dict[str, int] = {}
    for name, levels in raw.items():
        levels = _obj(what, levels)
        top = _int(what, levels, "max_version_level")
        if version == 1:
            low = _int(what, levels, "min_version_level")
            if low < 1 or top < low:
                raise ZkDataError(f"{what}: feature {name!r}: bad range {low}..{top}")
        if top < 1:
            raise ZkDataError(f"{what}: feature {name!r}: max_version_level {top} < 1")
        features[name] = top
    return FeatureZNodeData(version, status == 1, features)
