"""Kafka's configuration keys: types, defaults, validation, and the topic ↔ broker key mapping.

Two tables: :data:`BROKER_CONFIGS` (``server.properties``) and :data:`TOPIC_CONFIGS` (per-topic
overrides). Every topic config names the broker key that supplies its default (``retention.ms`` ←
``log.retention.ms`` ← ``log.retention.minutes`` ← ``log.retention.hours``).

Deviation from Kafka 4.0: ``segment.bytes`` / ``log.segment.bytes`` accept anything from 14 bytes
(Kafka 3.x's minimum) instead of 4.0's 1 MiB, so that tests can roll tiny segments.
"""

from __future__ import annotations

import enum
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from odradek.metrics.listener import parse_http_listener
from odradek.records.compression import (
    GZIP_LEVEL_DEFAULT,
    GZIP_LEVEL_MAX,
    GZIP_LEVEL_MIN,
    LZ4_LEVEL_DEFAULT,
    LZ4_LEVEL_MAX,
    LZ4_LEVEL_MIN,
    ZSTD_LEVEL_DEFAULT,
    ZSTD_LEVEL_MAX,
    ZSTD_LEVEL_MIN,
)

if TYPE_CHECKING:
    from odradek.log.log_config import LogConfig
    from odradek.server.kafka_config import KafkaConfig

ConfigType = Literal["int", "short", "long", "double", "boolean", "string", "list", "password", "class"]

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
SHORT_MAX = 2**15 - 1
SHORT_MIN = -(2**15)
DOUBLE_MAX = 1.7976931348623157e308


class ConfigSource(enum.IntEnum):
    """DescribeConfigs ConfigSource codes."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


# DescribeConfigs (v3+) ConfigType codes.
CONFIG_TYPE_CODES: dict[str, int] = {
    "boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6,
    "list": 7, "class": 8, "password": 9,
}


class Validator(ABC):
    """Checks a parsed value; ``check`` returns the violated rule, or None."""

    @abstractmethod
    def check(self, value: Any) -> str | None:
        """The rule ``value`` breaks, or None."""


@dataclass(frozen=True)
class Range(Validator):
    min: float | None = None
    max: float | None = None

    def check(self, value: Any) -> str | None:
        if value is None:
            return None
        if self.min is not None and value < self.min:
            if self.max is not None:
                return f"Value must be in [{_num(self.min)}, {_num(self.max)}]"
            return f"Value must be at least {_num(self.min)}"
        if self.max is not None and value > self.max:
            if self.min is not None:
                return f"Value must be in [{_num(self.min)}, {_num(self.max)}]"
            return f"Value must be no more than {_num(self.max)}"
        return None


@dataclass(frozen=True)
class RangeOrValue(Validator):
    """A closed range plus one value outside it (``compression.gzip.level``: 1..9 or -1)."""

    min: int
    max: int
    value: int

    def check(self, value: Any) -> str | None:
        if value is None or value == self.value or self.min <= value <= self.max:
            return None
        return f"Value must be between {self.min} and {self.max} or equal to {self.value}"


@dataclass(frozen=True)
class ThrottledReplicaList(Validator):
    """Kafka's ThrottledReplicaListValidator: ``*`` or ``partitionId:brokerId`` pairs."""

    key: str

    def check(self, value: Any) -> str | None:
        items = value if isinstance(value, list) else [value]
        if "".join(items) == "*" or all(re.fullmatch(r"([0-9]+:[0-9]+)?", str(i).strip()) for i in items):
            return None
        return (
            f"{self.key} must be the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
        )


@dataclass(frozen=True)
class HttpListener(Validator):
    """Empty (off) or ``http://HOST:PORT`` (``metrics.prometheus.listener``)."""

    def check(self, value: Any) -> str | None:
        if not value:
            return None
        try:
            parse_http_listener(str(value))
        except ValueError as e:
            return str(e)
        return None


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclass(frozen=True)
class OneOf(Validator):
    values: tuple[str, ...]
    case_sensitive: bool = True

    def check(self, value: Any) -> str | None:
        if value is None:
            return None
        items = value if isinstance(value, list) else [value]
        allowed = self.values if self.case_sensitive else tuple(v.lower() for v in self.values)
        for item in items:
            probe = item if self.case_sensitive else item.lower()
            if probe not in allowed:
                return f"String must be one of: {', '.join(self.values)}"
        return None


@dataclass(frozen=True)
class NonEmptyList(Validator):
    values: tuple[str, ...] | None = None
    allow_empty: bool = False

    def check(self, value: Any) -> str | None:
        if value is None:
            return None
        if not value and not self.allow_empty:
            return "List must not be empty"
        if self.values is not None:
            for item in value:
                if item not in self.values:
                    return f"Every entry must be one of: {', '.join(self.values)}"
        if len(set(value)) != len(value):
            return "List must not contain duplicates"
        return None


def at_least(n: float) -> Range:
    return Range(min=n)


def between(a: float, b: float) -> Range:
    return Range(min=a, max=b)


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: str | None
    validator: Validator | None = None
    doc: str = ""
    # Topic configs: the broker keys supplying the default, highest precedence first.
    broker_key: str | None = None
    sensitive: bool = False

    @property
    def broker_keys(self) -> tuple[str, ...]:
        return _BROKER_KEY_CHAINS.get(self.name, (self.broker_key,) if self.broker_key else ())


def parse_value(defn: ConfigDef, raw: str | None) -> Any:
    """Parse a raw string per the definition's type; raise ValueError(reason) if invalid."""
    if raw is None:
        return None
    s = raw.strip()
    t = defn.type
    if t in ("int", "long", "short"):
        try:
            v = int(s)
        except ValueError:
            raise ValueError(f"Expected value to be a {_INT_NAMES[t]} number") from None
        lo, hi = _INT_BOUNDS[t]
        if not lo <= v <= hi:
            raise ValueError(f"Expected value to be a {_INT_NAMES[t]} number in [{lo}, {hi}]")
        return v
    if t == "double":
        try:
            d = float(s)
        except ValueError:
            raise ValueError("Expected value to be a double") from None
        if math.isnan(d):
            raise ValueError("Expected value to be a double")
        return d
    if t == "boolean":
        if s.lower() == "true":
            return True
        if s.lower() == "false":
            return False
        raise ValueError("Expected value to be either true or false")
    if t == "list":
        return [item.strip() for item in s.split(",") if item.strip()]
    if t in ("string", "class"):
        return s
    return raw  # password: keep exactly as given


_INT_NAMES = {"int": "32-bit integer", "long": "64-bit integer", "short": "16-bit integer"}
_INT_BOUNDS = {"int": (INT_MIN, INT_MAX), "long": (LONG_MIN, LONG_MAX), "short": (SHORT_MIN, SHORT_MAX)}


def check_value(defn: ConfigDef, raw: str | None) -> tuple[Any, str | None]:
    """Parse and validate; returns (value, error message naming key, value and rule)."""
    try:
        value = parse_value(defn, raw)
    except ValueError as e:
        return None, f"Invalid value {raw} for configuration {defn.name}: {e}"
    if defn.validator is not None:
        rule = defn.validator.check(value)
        if rule is not None:
            return None, f"Invalid value {raw} for configuration {defn.name}: {rule}"
    return value, None


_S = str(LONG_MAX)
_WEEK_MS = str(7 * 24 * 3600 * 1000)
CLEANUP_POLICIES = ("compact", "delete")
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
BROKER_COMPRESSION_TYPES = COMPRESSION_TYPES
GZIP_LEVEL = RangeOrValue(GZIP_LEVEL_MIN, GZIP_LEVEL_MAX, GZIP_LEVEL_DEFAULT)
LZ4_LEVEL = between(LZ4_LEVEL_MIN, LZ4_LEVEL_MAX)
ZSTD_LEVEL = between(ZSTD_LEVEL_MIN, ZSTD_LEVEL_MAX)
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
SEGMENT_BYTES_MIN = 14
_ROLES = ("broker", "controller")
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _defs(*defs: ConfigDef) -> dict[str, ConfigDef]:
    return {d.name: d for d in defs}


C = ConfigDef

TOPIC_CONFIGS: dict[str, ConfigDef] = _defs(
    C("cleanup.policy", "list", "delete", NonEmptyList(CLEANUP_POLICIES),
      "delete (retention) and/or compact (keep the latest value per key)", "log.cleanup.policy"),
    C("compression.type", "string", "producer", OneOf(COMPRESSION_TYPES),
      "Final compression of the topic's data; 'producer' keeps the producer's codec",
      "compression.type"),
    C("compression.gzip.level", "int", str(GZIP_LEVEL_DEFAULT), GZIP_LEVEL,
      "gzip level when compression.type is gzip (-1: the codec's default)",
      "compression.gzip.level"),
    C("compression.lz4.level", "int", str(LZ4_LEVEL_DEFAULT), LZ4_LEVEL,
      "lz4 level when compression.type is lz4", "compression.lz4.level"),
    C("compression.zstd.level", "int", str(ZSTD_LEVEL_DEFAULT), ZSTD_LEVEL,
      "zstd level when compression.type is zstd", "compression.zstd.level"),
    C("delete.retention.ms", "long", "86400000", at_least(0),
      "How long delete tombstones are kept on compacted topics", "log.cleaner.delete.retention.ms"),
    C("file.delete.delay.ms", "long", "60000", at_least(0),
      "Delay before deleting a file from the filesystem", "log.segment.delete.delay.ms"),
    C("flush.messages", "long", _S, at_least(1), "Force fsync after this many messages",
      "log.flush.interval.messages"),
    C("flush.ms", "long", _S, at_least(0), "Force fsync after this much time", "log.flush.interval.ms"),
    C("follower.replication.throttled.replicas", "list", "", ThrottledReplicaList("follower.replication.throttled.replicas"),
      "Replicas throttled on the follower side", None),
    C("leader.replication.throttled.replicas", "list", "", ThrottledReplicaList("leader.replication.throttled.replicas"),
      "Replicas throttled on the leader side", None),
    C("index.interval.bytes", "int", "4096", at_least(0),
      "Bytes between offset index entries", "log.index.interval.bytes"),
    C("max.compaction.lag.ms", "long", _S, at_least(1),
      "Maximum time a message stays ineligible for compaction", "log.cleaner.max.compaction.lag.ms"),
    C("max.message.bytes", "int", "1048588", at_least(0),
      "Largest record batch size allowed", "message.max.bytes"),
    C("message.timestamp.type", "string", "CreateTime", OneOf(TIMESTAMP_TYPES),
      "CreateTime or LogAppendTime", "log.message.timestamp.type"),
    C("message.timestamp.before.max.ms", "long", _S, at_least(0),
      "Max allowed timestamp lag behind the broker clock", "log.message.timestamp.before.max.ms"),
    C("message.timestamp.after.max.ms", "long", "3600000", at_least(0),
      "Max allowed timestamp lead ahead of the broker clock", "log.message.timestamp.after.max.ms"),
    C("min.cleanable.dirty.ratio", "double", "0.5", between(0, 1),
      "Dirty ratio that makes a log eligible for cleaning", "log.cleaner.min.cleanable.ratio"),
    C("min.compaction.lag.ms", "long", "0", at_least(0),
      "Minimum time a message stays uncompacted", "log.cleaner.min.compaction.lag.ms"),
    C("min.insync.replicas", "int", "1", at_least(1),
      "Minimum ISR size for acks=all writes", "min.insync.replicas"),
    C("preallocate", "boolean", "false", None, "Preallocate segment files", "log.preallocate"),
    C("retention.bytes", "long", "-1", None, "Maximum partition size before deleting old segments",
      "log.retention.bytes"),
    C("retention.ms", "long", _WEEK_MS, at_least(-1),
      "Maximum age of a segment before deletion (-1: unlimited)", "log.retention.ms"),
    C("segment.bytes", "int", "1073741824", at_least(SEGMENT_BYTES_MIN),
      "Segment file size (Odradek accepts >= 14 bytes; Kafka 4.0 requires 1 MiB)",
      "log.segment.bytes"),
    C("segment.index.bytes", "int", "10485760", at_least(4),
      "Offset index file size", "log.index.size.max.bytes"),
    C("segment.jitter.ms", "long", "0", at_least(0), "Random jitter subtracted from segment.ms",
      "log.roll.jitter.ms"),
    C("segment.ms", "long", _WEEK_MS, at_least(1), "Roll a new segment after this long",
      "log.roll.ms"),
    C("unclean.leader.election.enable", "boolean", "false", None,
      "Allow out-of-sync replicas to become leader", "unclean.leader.election.enable"),
)

# Broker keys feeding a topic config, highest precedence first (the last one carries the default).
_BROKER_KEY_CHAINS: dict[str, tuple[str, ...]] = {
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
}
# Multiplier turning each chained broker key's unit into milliseconds.
_UNIT_MS = {
    "log.retention.minutes": 60_000, "log.retention.hours": 3_600_000,
    "log.roll.hours": 3_600_000, "log.roll.jitter.hours": 3_600_000,
}

BROKER_CONFIGS: dict[str, ConfigDef] = _defs(
    # --- node, roles, listeners, KRaft ---
    C("node.id", "int", "1", at_least(0), "This node's id (KRaft)"),
    C("broker.id", "int", None, at_least(0), "Legacy alias of node.id"),
    C("process.roles", "list", "broker,controller", NonEmptyList(_ROLES, allow_empty=True),
      "broker, controller or both (empty, ZooKeeper mode, is refused)"),
    C("listeners", "list", "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093", None,
      "NAME://host:port listeners to bind"),
    C("advertised.listeners", "list", None, None, "Listeners published to clients"),
    C("listener.security.protocol.map", "list",
      "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", None,
      "Listener name → security protocol"),
    C("controller.listener.names", "list", "CONTROLLER", None, "Listeners used by the controller"),
    C("inter.broker.listener.name", "string", None, None, "Listener for broker-to-broker traffic"),
    C("security.inter.broker.protocol", "string", "PLAINTEXT", OneOf(_PROTOCOLS),
      "Security protocol between brokers"),
    C("control.plane.listener.name", "string", None, None, "ZooKeeper-mode control plane listener"),
    C("early.start.listeners", "list", None, None, "Listeners started before authorizer load"),
    C("controller.quorum.voters", "list", "", None, "id@host:port of each KRaft voter"),
    C("controller.quorum.bootstrap.servers", "list", "", None, "host:port of KRaft controllers"),
    C("controller.quorum.election.timeout.ms", "int", "1000", at_least(0), "Raft election timeout"),
    C("controller.quorum.election.backoff.max.ms", "int", "1000", at_least(0), "Raft backoff"),
    C("controller.quorum.fetch.timeout.ms", "int", "2000", at_least(0), "Raft fetch timeout"),
    C("controller.quorum.append.linger.ms", "int", "25", at_least(0), "Raft append linger"),
    C("controller.quorum.request.timeout.ms", "int", "2000", at_least(0), "Raft request timeout"),
    C("controller.quorum.retry.backoff.ms", "int", "20", at_least(0), "Raft retry backoff"),
    C("controller.socket.timeout.ms", "int", "30000", at_least(0), "Controller socket timeout"),
    C("metadata.log.dir", "string", None, None, "Directory of __cluster_metadata"),
    C("metadata.log.segment.bytes", "int", "1073741824", at_least(SEGMENT_BYTES_MIN),
      "Metadata log segment size"),
    C("metadata.log.segment.ms", "long", _WEEK_MS, at_least(1), "Metadata log roll time"),
    C("metadata.max.retention.bytes", "long", "104857600", None, "Metadata log retention bytes"),
    C("metadata.max.retention.ms", "long", _WEEK_MS, None, "Metadata log retention time"),
    C("metadata.max.idle.interval.ms", "int", "500", at_least(0), "No-op record interval"),
    C("metadata.log.max.record.bytes.between.snapshots", "long", "20971520", at_least(1),
      "Snapshot after this many bytes"),
    C("metadata.log.max.snapshot.interval.ms", "long", "3600000", at_least(0),
      "Snapshot at least this often"),
    C("broker.heartbeat.interval.ms", "int", "2000", at_least(1), "Broker heartbeat interval"),
    C("broker.session.timeout.ms", "int", "9000", at_least(1), "Broker fencing timeout"),
    C("initial.broker.registration.timeout.ms", "int", "60000", at_least(1),
      "Initial registration timeout"),
    C("broker.rack", "string", None, None, "Rack of this broker"),
    C("eligible.leader.replicas.enable", "boolean", "false", None, "KIP-966 ELR"),
    C("unstable.api.versions.enable", "boolean", "false", None, "Advertise unstable APIs"),
    C("unstable.feature.versions.enable", "boolean", "false", None, "Allow unstable features"),
    # --- ZooKeeper mode ---
    C("zookeeper.connect", "string", None, None, "ZooKeeper connection string (ZooKeeper mode)"),
    C("zookeeper.session.timeout.ms", "int", "18000", at_least(1), "ZooKeeper session timeout"),
    C("zookeeper.connection.timeout.ms", "int", None, at_least(1), "ZooKeeper connect timeout"),
    C("zookeeper.set.acl", "boolean", "false", None, "Secure ACLs on znodes"),
    C("zookeeper.max.in.flight.requests", "int", "10", at_least(1), "ZooKeeper pipelining"),
    C("broker.id.generation.enable", "boolean", "true", None, "Generate broker ids (ZK mode)"),
    C("reserved.broker.max.id", "int", "1000", at_least(0), "Max user broker id (ZK mode)"),
    C("controlled.shutdown.enable", "boolean", "true", None, "Controlled shutdown"),
    C("controlled.shutdown.max.retries", "int", "3", at_least(0), "Controlled shutdown retries"),
    C("controlled.shutdown.retry.backoff.ms", "long", "5000", at_least(0), "Retry backoff"),
    C("auto.leader.rebalance.enable", "boolean", "true", None, "Preferred leader balancing"),
    # Replication throttles (Kafka's QuotaConfig), set by kafka-reassign-partitions --throttle.
    C("leader.replication.throttled.rate", "long", _S, at_least(0), "Leader replication throttle (B/s)"),
    C("follower.replication.throttled.rate", "long", _S, at_least(0), "Follower replication throttle (B/s)"),
    C("replica.alter.log.dirs.io.max.bytes.per.second", "long", _S, at_least(0), "Log dir move throttle (B/s)"),
    C("leader.imbalance.check.interval.seconds", "long", "300", at_least(1), "Imbalance check"),
    C("leader.imbalance.per.broker.percentage", "int", "10", at_least(0), "Imbalance ratio"),
    # --- topics ---
    C("auto.create.topics.enable", "boolean", "true", None, "Create topics on metadata requests"),
    C("delete.topic.enable", "boolean", "true", None, "Allow topic deletion"),
    C("num.partitions", "int", "1", at_least(1), "Default partitions of new topics"),
    C("default.replication.factor", "int", "1", at_least(1), "Default replication factor"),
    C("min.insync.replicas", "int", "1", at_least(1), "Minimum ISR for acks=all"),
    C("unclean.leader.election.enable", "boolean", "false", None, "Allow unclean election"),
    C("message.max.bytes", "int", "1048588", at_least(0), "Largest record batch"),
    C("compression.type", "string", "producer", OneOf(BROKER_COMPRESSION_TYPES), "Compression"),
    C("compression.gzip.level", "int", str(GZIP_LEVEL_DEFAULT), GZIP_LEVEL, "gzip level"),
    C("compression.lz4.level", "int", str(LZ4_LEVEL_DEFAULT), LZ4_LEVEL, "lz4 level"),
    C("compression.zstd.level", "int", str(ZSTD_LEVEL_DEFAULT), ZSTD_LEVEL, "zstd level"),
    C("create.topic.policy.class.name", "class", None, None, "CreateTopicPolicy"),
    C("alter.config.policy.class.name", "class", None, None, "AlterConfigPolicy"),
    # --- network ---
    C("socket.request.max.bytes", "int", "104857600", at_least(1), "Largest request accepted"),
    C("socket.send.buffer.bytes", "int", "102400", None, "SO_SNDBUF (-1: OS default)"),
    C("socket.receive.buffer.bytes", "int", "102400", None, "SO_RCVBUF (-1: OS default)"),
    C("socket.listen.backlog.size", "int", "50", at_least(1), "Listen backlog"),
    C("socket.connection.setup.timeout.ms", "long", "10000", at_least(0), "Connect timeout"),
    C("socket.connection.setup.timeout.max.ms", "long", "30000", at_least(0), "Connect timeout"),
    C("connections.max.idle.ms", "long", "600000", None, "Idle connection timeout (< 0: none)"),
    C("connections.max.reauth.ms", "long", "0", None, "SASL reauthentication"),
    C("connection.failed.authentication.delay.ms", "int", "100", at_least(0),
      "Delay before a failed authentication's response and close"),
    C("max.connections", "int", str(INT_MAX), at_least(0), "Max connections"),
    C("max.connections.per.ip", "int", str(INT_MAX), at_least(0), "Max connections per IP"),
    C("max.connections.per.ip.overrides", "string", "", None, "Per-IP limits: host:count,..."),
    C("max.connection.creation.rate", "int", str(INT_MAX), at_least(0), "Connection rate"),
    C("num.network.threads", "int", "3", at_least(1), "Informational (asyncio is one thread)"),
    C("num.io.threads", "int", "8", at_least(1), "Informational"),
    C("background.threads", "int", "10", at_least(1), "Informational"),
    C("queued.max.requests", "int", "500", at_least(1), "Informational"),
    C("queued.max.request.bytes", "long", "-1", None, "Request memory pool (<= 0: unbounded)"),
    C("num.recovery.threads.per.data.dir", "int", "2", at_least(1), "Informational"),
    C("num.replica.alter.log.dirs.threads", "int", None, None, "Informational"),
    C("request.timeout.ms", "int", "30000", at_least(0), "Inter-broker request timeout"),
    C("fetch.max.bytes", "int", "57671680", at_least(1024), "Max bytes per fetch response"),
    C("max.incremental.fetch.session.cache.slots", "int", "1000", at_least(0),
      "Incremental fetch sessions (KIP-227) the broker keeps"),
    C("fetch.purgatory.purge.interval.requests", "int", "1000", None, "Purgatory purge"),
    C("producer.purgatory.purge.interval.requests", "int", "1000", None, "Purgatory purge"),
    C("delete.records.purgatory.purge.interval.requests", "int", "1", None, "Purgatory purge"),
    # --- log ---
    C("log.dir", "string", "./odradek-data", None, "Data directory (if log.dirs is unset)"),
    C("log.dirs", "list", None, NonEmptyList(), "Data directories"),
    C("log.segment.bytes", "int", "1073741824", at_least(SEGMENT_BYTES_MIN),
      "Segment size (>= 14 bytes accepted; Kafka 4.0 requires 1 MiB)"),
    C("log.roll.ms", "long", None, at_least(1), "Segment roll time"),
    C("log.roll.hours", "int", "168", at_least(1), "Segment roll time (hours)"),
    C("log.roll.jitter.ms", "long", None, at_least(0), "Segment roll jitter"),
    C("log.roll.jitter.hours", "int", "0", at_least(0), "Segment roll jitter (hours)"),
    C("log.retention.ms", "long", None, at_least(-1), "Retention time (-1: unlimited)"),
    C("log.retention.minutes", "int", None, at_least(-1), "Retention time (minutes)"),
    C("log.retention.hours", "int", "168", at_least(-1), "Retention time (hours)"),
    C("log.retention.bytes", "long", "-1", None, "Retention size per partition"),
    C("log.retention.check.interval.ms", "long", "300000", at_least(1), "Retention check period"),
    C("log.cleanup.policy", "list", "delete", NonEmptyList(CLEANUP_POLICIES), "Cleanup policy"),
    C("log.cleaner.enable", "boolean", "true", None, "Run the log cleaner"),
    C("log.cleaner.threads", "int", "1", at_least(0), "Cleaner threads"),
    C("log.cleaner.io.max.bytes.per.second", "double", str(DOUBLE_MAX), None, "Cleaner I/O cap"),
    C("log.cleaner.dedupe.buffer.size", "long", "134217728", None, "Cleaner dedupe buffer"),
    C("log.cleaner.io.buffer.size", "int", "524288", at_least(0), "Cleaner I/O buffer"),
    C("log.cleaner.io.buffer.load.factor", "double", "0.9", None, "Dedupe load factor"),
    C("log.cleaner.backoff.ms", "long", "15000", at_least(0), "Cleaner idle backoff"),
    C("log.cleaner.min.cleanable.ratio", "double", "0.5", between(0, 1), "Min dirty ratio"),
    C("log.cleaner.delete.retention.ms", "long", "86400000", at_least(0), "Tombstone retention"),
    C("log.cleaner.min.compaction.lag.ms", "long", "0", at_least(0), "Min compaction lag"),
    C("log.cleaner.max.compaction.lag.ms", "long", _S, at_least(1), "Max compaction lag"),
    C("log.index.size.max.bytes", "int", "10485760", at_least(4), "Offset index size"),
    C("log.index.interval.bytes", "int", "4096", at_least(0), "Index interval"),
    C("log.flush.interval.messages", "long", _S, at_least(1), "fsync every N messages"),
    C("log.flush.interval.ms", "long", None, None, "fsync interval"),
    C("log.flush.scheduler.interval.ms", "long", _S, None, "Flush check interval"),
    C("log.flush.offset.checkpoint.interval.ms", "int", "60000", at_least(0), "Recovery point"),
    C("log.flush.start.offset.checkpoint.interval.ms", "int", "60000", at_least(0),
      "Log start offset checkpoint interval"),
    C("log.segment.delete.delay.ms", "long", "60000", at_least(0), "File delete delay"),
    C("log.preallocate", "boolean", "false", None, "Preallocate segments"),
    C("log.message.timestamp.type", "string", "CreateTime", OneOf(TIMESTAMP_TYPES), "Timestamps"),
    C("log.message.timestamp.before.max.ms", "long", _S, at_least(0), "Timestamp lag bound"),
    # Kafka 4.0 (KIP-1030): one hour ahead of the broker clock at most (3.x: unbounded).
    C("log.message.timestamp.after.max.ms", "long", "3600000", at_least(0), "Timestamp lead bound"),
    C("log.message.downconversion.enable", "boolean", "true", None, "Kafka 3.x only"),
    C("log.message.format.version", "string", None, None, "Kafka 3.x only (ignored)"),
    C("inter.broker.protocol.version", "string", None, None, "ZooKeeper mode (ignored)"),
    C("log.initial.task.delay.ms", "long", "30000", at_least(0), "Log manager start delay"),
    C("log.dir.failure.timeout.ms", "long", "30000", at_least(1), "Log dir failure timeout"),
    # --- replication ---
    C("replica.lag.time.max.ms", "long", "30000", None, "ISR lag bound"),
    C("replica.fetch.max.bytes", "int", "1048576", at_least(0), "Replica fetch partition max"),
    C("replica.fetch.response.max.bytes", "int", "10485760", at_least(0), "Replica fetch max"),
    C("replica.fetch.wait.max.ms", "int", "500", None, "Replica fetch wait"),
    C("replica.fetch.min.bytes", "int", "1", None, "Replica fetch min bytes"),
    C("replica.fetch.backoff.ms", "int", "1000", at_least(0), "Replica fetch backoff"),
    C("num.replica.fetchers", "int", "1", None, "Replica fetchers per source broker"),
    C("replica.high.watermark.checkpoint.interval.ms", "long", "5000", None, "HW checkpoint"),
    C("replica.socket.timeout.ms", "int", "30000", None, "Replica socket timeout"),
    C("replica.socket.receive.buffer.bytes", "int", "65536", None, "Replica SO_RCVBUF"),
    C("replica.selector.class", "class", None, None, "Follower fetching (KIP-392)"),
    # --- groups and offsets ---
    C("group.initial.rebalance.delay.ms", "int", "3000", None, "First rebalance delay"),
    C("group.min.session.timeout.ms", "int", "6000", None, "Min session timeout"),
    C("group.max.session.timeout.ms", "int", "1800000", None, "Max session timeout"),
    C("group.max.size", "int", str(INT_MAX), at_least(1), "Max members per group"),
    C("group.coordinator.rebalance.protocols", "list", "classic,consumer", None, "Protocols"),
    # KIP-848 consumer groups (group.protocol=consumer)
    C("group.consumer.session.timeout.ms", "int", "45000", at_least(1), "Consumer group session timeout"),
    C("group.consumer.min.session.timeout.ms", "int", "45000", at_least(1), "Min consumer session timeout"),
    C("group.consumer.max.session.timeout.ms", "int", "60000", at_least(1), "Max consumer session timeout"),
    C("group.consumer.heartbeat.interval.ms", "int", "5000", at_least(1), "Consumer heartbeat interval"),
    C("group.consumer.min.heartbeat.interval.ms", "int", "5000", at_least(1), "Min consumer heartbeat interval"),
    C("group.consumer.max.heartbeat.interval.ms", "int", "15000", at_least(1), "Max consumer heartbeat interval"),
    C("group.consumer.max.size", "int", str(INT_MAX), at_least(1), "Max members per consumer group"),
    C("group.consumer.assignors", "list", "uniform,range", None, "Server assignors; the first is the default"),
    C("offsets.topic.num.partitions", "int", "50", at_least(1), "__consumer_offsets partitions"),
    C("offsets.topic.replication.factor", "short", "3", at_least(1), "__consumer_offsets RF"),
    C("offsets.topic.segment.bytes", "int", "104857600", at_least(1), "__consumer_offsets segments"),
    C("offsets.topic.compression.codec", "int", "0", None, "__consumer_offsets compression"),
    C("offsets.load.buffer.size", "int", "5242880", at_least(1), "Offsets load buffer"),
    C("offsets.retention.minutes", "int", "10080", at_least(1), "Committed offsets retention"),
    C("offsets.retention.check.interval.ms", "long", "600000", at_least(1), "Offsets expiry"),
    C("offsets.commit.timeout.ms", "int", "5000", at_least(1), "Offset commit timeout"),
    C("offset.metadata.max.bytes", "int", "4096", None, "Max commit metadata size"),
    # --- transactions ---
    C("transaction.state.log.replication.factor", "short", "3", at_least(1), "__transaction_state RF"),
    C("transaction.state.log.min.isr", "int", "2", at_least(1), "__transaction_state min ISR"),
    C("transaction.state.log.num.partitions", "int", "50", at_least(1), "Partitions"),
    C("transaction.state.log.segment.bytes", "int", "104857600", at_least(1), "Segment bytes"),
    C("transaction.state.log.load.buffer.size", "int", "5242880", at_least(1), "Load buffer"),
    C("transactional.id.expiration.ms", "int", "604800000", at_least(1), "Transactional id expiry"),
    C("transaction.max.timeout.ms", "int", "900000", at_least(1), "Max transaction timeout"),
    C("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", "10000", at_least(1),
      "Abort check interval"),
    C("transaction.remove.expired.transaction.cleanup.interval.ms", "int", "3600000", at_least(1),
      "Expiry check interval"),
    C("transaction.partition.verification.enable", "boolean", "true", None, "KIP-890"),
    C("producer.id.expiration.ms", "int", "86400000", at_least(1), "Idle producer id expiry"),
    C("producer.id.expiration.check.interval.ms", "int", "600000", at_least(1), "Expiry check"),
    # --- security (refused unless empty or Kafka's default: see unsupported_config) ---
    C("authorizer.class.name", "string", "", None, "Authorizer"),
    C("super.users", "string", None, None, "Super users"),
    C("allow.everyone.if.no.acl.found", "boolean", "false", None, "ACL default"),
    C("principal.builder.class", "class", None, None, "Principal builder"),
    C("sasl.enabled.mechanisms", "list", "GSSAPI", None, "SASL mechanisms"),
    C("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI", None, "Inter-broker SASL"),
    C("sasl.mechanism.controller.protocol", "string", "GSSAPI", None, "Controller SASL"),
    C("metric.reporters", "list", "", None, "Metric reporters"),
    # Odradek's own: the Prometheus /metrics endpoint (odradek.metrics) and the slow-request
    # warning of kafka.request.logger (odradek.network.request_metrics).
    C("metrics.prometheus.listener", "string", "", HttpListener(),
      "http://HOST:PORT serving Prometheus metrics on /metrics (empty: off)"),
    C("request.slow.threshold.ms", "long", "5000", at_least(0),
      "Requests slower than this are logged at WARN on kafka.request.logger (0: never)"),
    C("auto.include.jmx.reporter", "boolean", "true", None, "JMX reporter"),
    C("quota.window.num", "int", "11", at_least(1), "Quota samples"),
    C("quota.window.size.seconds", "int", "1", at_least(1), "Quota sample window"),
    C("replication.quota.window.num", "int", "11", at_least(1), "Replication quota samples"),
    C("replication.quota.window.size.seconds", "int", "1", at_least(1), "Replication quota sample window"),
)

# Key prefixes accepted without validation and without an "unknown key" warning: families of
# settings Odradek reads as plain strings (or not yet at all).
INFORMATIONAL_PREFIXES: tuple[str, ...] = (
    "ssl.", "sasl.", "listener.name.", "share.", "group.share.", "group.consumer.",
    "group.coordinator.", "group.streams.", "remote.log.", "log.local.", "metrics.",
    "kafka.metrics.", "client.quota.", "replication.quota.", "alter.log.dirs.",
    "password.encoder.", "delegation.token.", "config.providers", "security.providers",
    "telemetry.", "client.telemetry.", "confluent.",
)


def is_informational(key: str) -> bool:
    return key not in BROKER_CONFIGS and key.startswith(INFORMATIONAL_PREFIXES)


# ---------------------------------------------------------------------------------------------
# Topic configs


def validate_topic_config(key: str, value: str | None) -> str | None:
    """Error message for a topic config override, or None if it is acceptable."""
    defn = TOPIC_CONFIGS.get(key)
    if defn is None:
        return f"Unknown topic config name: {key}"
    if value is None:
        return None  # None deletes an override
    _, err = check_value(defn, value)
    return err


def validate_topic_configs(overrides: Mapping[str, str | None]) -> str | None:
    """First error over a set of topic overrides, including cross-key rules."""
    for key, value in overrides.items():
        err = validate_topic_config(key, value)
        if err is not None:
            return err
    return None


def _format(defn: ConfigDef, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


class _Resolved(NamedTuple):
    value: Any
    raw: str | None
    source: ConfigSource
    source_key: str


def _broker_default_for(broker: KafkaConfig, defn: ConfigDef) -> _Resolved:
    """Value a topic config takes from the broker (static setting or default)."""
    for bkey in defn.broker_keys:
        if broker.is_set(bkey):
            value = broker.get(bkey)
            mult = _UNIT_MS.get(bkey)
            if mult is not None and value is not None and value >= 0:
                value = value * mult
            if defn.name == "retention.ms" and value is not None and value < 0:
                value = -1
            return _Resolved(value, _format(defn, value), broker.source_of(bkey), bkey)
    if defn.broker_keys:
        last = defn.broker_keys[-1]
        bdef = BROKER_CONFIGS.get(last)
        if bdef is not None and bdef.default is not None:
            value = parse_value(bdef, bdef.default)
            mult = _UNIT_MS.get(last)
            if mult is not None and value is not None and value >= 0:
                value = value * mult
            return _Resolved(value, _format(defn, value), ConfigSource.DEFAULT_CONFIG, last)
    value = parse_value(defn, defn.default)
    return _Resolved(value, defn.default, ConfigSource.DEFAULT_CONFIG, defn.name)


def effective_topic_configs(
    broker: KafkaConfig, overrides: Mapping[str, str]
) -> dict[str, tuple[Any, str | None, ConfigSource]]:
    """Typed effective value, its string form and its source for every topic config."""
    out: dict[str, tuple[Any, str | None, ConfigSource]] = {}
    for name, defn in TOPIC_CONFIGS.items():
        raw = overrides.get(name)
        if raw is not None:
            value, err = check_value(defn, raw)
            if err is None:
                out[name] = (value, _format(defn, value), ConfigSource.DYNAMIC_TOPIC_CONFIG)
                continue
        r = _broker_default_for(broker, defn)
        out[name] = (r.value, r.raw, r.source)
    return out


def build_log_config(broker: KafkaConfig, overrides: Mapping[str, str]) -> LogConfig:
    """The typed LogConfig of a topic: broker defaults overlaid with the topic's overrides.

    Invalid overrides are ignored (they are refused when set; see validate_topic_config).
    """
    from odradek.log.log_config import LogConfig

    eff = effective_topic_configs(broker, overrides)

    def v(key: str) -> Any:
        return eff[key][0]

    return LogConfig(
        segment_bytes=v("segment.bytes"),
        segment_ms=v("segment.ms"),
        segment_index_bytes=v("segment.index.bytes"),
        index_interval_bytes=v("index.interval.bytes"),
        retention_ms=v("retention.ms"),
        retention_bytes=v("retention.bytes"),
        flush_messages=v("flush.messages"),
        flush_ms=v("flush.ms"),
        max_message_bytes=v("max.message.bytes"),
        message_timestamp_type=v("message.timestamp.type"),
        message_timestamp_before_max_ms=v("message.timestamp.before.max.ms"),
        message_timestamp_after_max_ms=v("message.timestamp.after.max.ms"),
        cleanup_policy=tuple(v("cleanup.policy")),
        compression_type=v("compression.type"),
        compression_gzip_level=v("compression.gzip.level"),
        compression_lz4_level=v("compression.lz4.level"),
        compression_zstd_level=v("compression.zstd.level"),
        delete_retention_ms=v("delete.retention.ms"),
        min_cleanable_dirty_ratio=v("min.cleanable.dirty.ratio"),
        min_compaction_lag_ms=v("min.compaction.lag.ms"),
        max_compaction_lag_ms=v("max.compaction.lag.ms"),
        file_delete_delay_ms=v("file.delete.delay.ms"),
        min_insync_replicas=v("min.insync.replicas"),
        preallocate=v("preallocate"),
        unclean_leader_election_enable=v("unclean.leader.election.enable"),
        producer_id_expiration_ms=broker._int("producer.id.expiration.ms"),
        raw={k: (s if s is not None else "") for k, (_, s, _src) in eff.items()},
    )


class ConfigSynonym(NamedTuple):
    name: str
    value: str | None
    source: int


class ConfigEntry(NamedTuple):
    name: str
    value: str | None
    read_only: bool
    source: int
    is_sensitive: bool
    synonyms: list[ConfigSynonym]


def describe_topic_config(
    broker: KafkaConfig, overrides: Mapping[str, str], keys: Sequence[str] | None = None
) -> list[ConfigEntry]:
    """DescribeConfigs entries for a topic resource (all keys, or just ``keys``).

    Synonyms as Kafka (ConfigHelper.createTopicConfigEntry) lists them: the topic's own value,
    then the broker synonyms of the topic config's first broker key, layer by layer; when that
    first key is set in no layer (``log.retention.ms`` with only ``log.retention.hours``), Kafka
    lists no broker synonym and reports DEFAULT_CONFIG, and so does this.
    """
    from odradek.server.dynamic_broker_config import broker_synonyms

    eff = effective_topic_configs(broker, overrides)
    entries: list[ConfigEntry] = []
    for name, defn in TOPIC_CONFIGS.items():
        if keys is not None and name not in keys:
            continue
        _, raw, _source = eff[name]
        synonyms: list[ConfigSynonym] = []
        if name in overrides:
            synonyms.append(
                ConfigSynonym(name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG)
            )
        if defn.broker_keys:
            synonyms += broker_synonyms(broker, defn.broker_keys[0], defn.sensitive)
        source = synonyms[0].source if synonyms else int(ConfigSource.DEFAULT_CONFIG)
        entries.append(ConfigEntry(name, raw, False, int(source), defn.sensitive, synonyms))
    return entries


def config_type_code(name: str, *, topic: bool = True) -> int:
    """DescribeConfigs v3+ ConfigType code of a key (0 = unknown)."""
    table = TOPIC_CONFIGS if topic else BROKER_CONFIGS
    defn = table.get(name)
    return CONFIG_TYPE_CODES.get(defn.type, 0) if defn is not None else 0


def config_doc(name: str, *, topic: bool = True) -> str | None:
    table = TOPIC_CONFIGS if topic else BROKER_CONFIGS
    defn = table.get(name)
    return defn.doc if defn is not None else None


TopicConfigValidator = Callable[[str, "str | None"], "str | None"]
