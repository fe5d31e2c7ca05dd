"""KafkaConfig: the broker's configuration, with Kafka's keys, defaults and validation.

Built from a mapping of raw strings (``server.properties`` plus ``--override``s). Every known key
is type-checked and range-checked up front; unknown keys are kept and reported in
``unknown_keys``; impossible combinations raise :class:`ConfigError` naming what is wrong.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from odradek.network.limits import OverridesError, parse_ip_overrides
from odradek.server.config_defs import (
    BROKER_CONFIGS,
    ConfigSource,
    check_value,
    is_informational,
    parse_value,
)
from odradek.server.unsupported_config import unsupported_settings


class ConfigError(Exception):
    """Invalid configuration; the message names the key, the value and the rule broken."""


def _typed_values(props: Mapping[str, str]) -> dict[str, Any]:
    """Typed value of every known key: as given in ``props`` or the default. Raises ConfigError
    naming the first invalid value."""
    values: dict[str, Any] = {}
    for key, raw in props.items():
        defn = BROKER_CONFIGS.get(key)
        if defn is None:
            continue
        value, err = check_value(defn, raw)
        if err is not None:
            raise ConfigError(err)
        values[key] = value
    for key, defn in BROKER_CONFIGS.items():
        if key not in values:
            values[key] = parse_value(defn, defn.default)
    return values


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclass(frozen=True)
class QuorumVoter:
    node_id: int
    host: str
    port: int


_LISTENER_RE = re.compile(r"^([A-Za-z0-9_.\-]+)://(\[[0-9A-Fa-f:.%a-zA-Z]*\]|[^:\[\]/]*):(-?\d+)$")
_HOSTPORT_RE = re.compile(r"^(\[[^\]]*\]|[^:\[\]]+):(\d+)$")


def parse_listener(text: str, key: str = "listeners") -> Listener:
    m = _LISTENER_RE.match(text.strip())
    if not m:
        raise ConfigError(
            f"Invalid value {text} for configuration {key}: "
            "listeners must be of the form NAME://host:port (e.g. PLAINTEXT://localhost:9092)"
        )
    name, host, port_s = m.group(1).upper(), m.group(2), m.group(3)
    if host.startswith("["):
        host = host[1:-1]
    port = int(port_s)
    if not 0 <= port <= 65535:
        raise ConfigError(
            f"Invalid value {text} for configuration {key}: port must be in [0, 65535]"
        )
    return Listener(name, host, port)


def _parse_voter(text: str) -> QuorumVoter:
    m = re.match(r"^(\d+)@(\[[^\]]*\]|[^:\[\]]+):(\d+)$", text.strip())
    if not m:
        raise ConfigError(
            f"Invalid value {text} for configuration controller.quorum.voters: "
            "entries must be of the form id@host:port (e.g. 1@localhost:9093)"
        )
    host = m.group(2)
    if host.startswith("["):
        host = host[1:-1]
    return QuorumVoter(int(m.group(1)), host, int(m.group(3)))


# ---------------------------------------------------------------------------------------------
# Java .properties


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    out: list[str] = []
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if c == "\\" and i + 1 < n:
            nxt = s[i + 1]
            if nxt == "u" and i + 6 <= n:
                try:
                    out.append(chr(int(s[i + 2 : i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    current: str | None = None
    for physical in text.splitlines():
        line = physical.lstrip(" \t\f")
        if current is None:
            if not line or line[0] in "#!":
                continue
        trailing = len(line) - len(line.rstrip("\\"))
        continues = trailing % 2 == 1
        if continues:
            line = line[:-1]
        current = line if current is None else current + line
        if not continues:
            lines.append(current)
            current = None
    if current is not None:
        lines.append(current)
    return lines


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text (comments, ``=``/``:``/space separators, continuations,
    escapes). Later keys win."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        i = 0
        n = len(line)
        while i < n:
            c = line[i]
            if c == "\\":
                i += 2
                continue
            if c in "=: \t\f":
                break
            i += 1
        key = line[:i]
        j = i
        while j < n and line[j] in " \t\f":
            j += 1
        if j < n and line[j] in "=:":
            j += 1
            while j < n and line[j] in " \t\f":
                j += 1
        props[_unescape(key)] = _unescape(line[j:])
    return props


# ---------------------------------------------------------------------------------------------


class KafkaConfig:
    """Typed, validated broker configuration."""

    def __init__(self, props: Mapping[str, str]) -> None:
        self._originals: dict[str, str] = {str(k): str(v) for k, v in props.items()}
        # server.properties (+ overrides) as given; _originals is this with the dynamic broker
        # configs (KIP-226) laid over it, see update_dynamic.
        self._static: dict[str, str] = dict(self._originals)
        self._dynamic_default: dict[str, str] = {}
        self._dynamic_broker: dict[str, str] = {}
        self.unknown_keys: list[str] = [
            k for k in self._originals if k not in BROKER_CONFIGS and not is_informational(k)
        ]
        self._values: dict[str, Any] = _typed_values(self._originals)
        self._validate()

    # ---- dynamic broker configs (KIP-226) ----------------------------------------------

    @property
    def static_originals(self) -> dict[str, str]:
        """The static configuration (server.properties and --override), without dynamic configs."""
        return dict(self._static)

    @property
    def dynamic_default_configs(self) -> dict[str, str]:
        """Dynamic cluster-wide defaults (BROKER resource ``""``) in effect."""
        return dict(self._dynamic_default)

    @property
    def dynamic_broker_configs(self) -> dict[str, str]:
        """Dynamic configs of this broker (BROKER resource ``"<node.id>"``) in effect."""
        return dict(self._dynamic_broker)

    def update_dynamic(self, default: Mapping[str, str], per_broker: Mapping[str, str]) -> list[str]:
        """Lay the dynamic configs over the static ones (static < cluster default < per broker,
        a dynamic key hiding its static synonyms). Values that do not parse are ignored, as Kafka
        does; returns the keys ignored. Called on the event loop, where the configuration is read.
        """
        from odradek.server.dynamic_broker_config import layered_props

        ignored: list[str] = []

        def valid(layer: Mapping[str, str]) -> dict[str, str]:
            out: dict[str, str] = {}
            for k, v in layer.items():
                defn = BROKER_CONFIGS.get(k)
                if defn is not None and check_value(defn, v)[1] is not None:
                    ignored.append(k)
                    continue
                out[k] = v
            return out

        dyn_default, dyn_broker = valid(default), valid(per_broker)
        merged = layered_props(self._static, dyn_default, dyn_broker)
        values = _typed_values(merged)
        self._originals, self._values = merged, values
        self._dynamic_default, self._dynamic_broker = dyn_default, dyn_broker
        return ignored

    @classmethod
    def from_file(
        cls, path: str | None, overrides: Mapping[str, str] | None = None
    ) -> KafkaConfig:
        props: dict[str, str] = {}
        if path is not None:
            try:
                with open(path, encoding="latin-1") as f:
                    props = parse_properties(f.read())
            except OSError as e:
                raise ConfigError(f"cannot read configuration file {path}: {e.strerror}") from e
        props.update(overrides or {})
        return cls(props)

    # ---- generic access ----------------------------------------------------------------

    @property
    def originals(self) -> dict[str, str]:
        return dict(self._originals)

    def is_set(self, key: str) -> bool:
        return key in self._originals

    def source_of(self, key: str) -> ConfigSource:
        """Where the value of ``key`` (set in some layer) comes from."""
        if key in self._dynamic_broker:
            return ConfigSource.DYNAMIC_BROKER_CONFIG
        if key in self._dynamic_default:
            return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        if key in self._static:
            return ConfigSource.STATIC_BROKER_CONFIG
        return ConfigSource.DEFAULT_CONFIG

    def raw(self, key: str) -> str | None:
        """The string as given, or the default's string form."""
        if key in self._originals:
            return self._originals[key]
        defn = BROKER_CONFIGS.get(key)
        return defn.default if defn is not None else None

    def get(self, key: str) -> Any:
        """Typed value (int/float/bool/str/list[str]/None) with the default applied."""
        if key in self._values:
            return self._values[key]
        return self._originals.get(key)

    def __getitem__(self, key: str) -> Any:
        return self.get(key)

    def __repr__(self) -> str:
        return f"KafkaConfig({self._originals!r})"

    # ---- cross-key validation ----------------------------------------------------------

    def _validate(self) -> None:
        if self.is_set("broker.id") and self.is_set("node.id"):
            if self.get("broker.id") != self.get("node.id"):
                raise ConfigError(
                    f"broker.id={self.get('broker.id')} and node.id={self.get('node.id')} differ; "
                    "set only node.id"
                )
        roles = self.process_roles
        if self.get("zookeeper.connect"):
            if not self.is_zk_mode:
                raise ConfigError(
                    "zookeeper.connect cannot be combined with process.roles (KRaft mode): "
                    "migration from ZooKeeper to KRaft is not supported; remove "
                    "zookeeper.connect (KRaft) or process.roles (ZooKeeper mode)"
                )
        elif not roles:
            raise ConfigError(
                "process.roles is empty and zookeeper.connect is not set: set "
                "process.roles=broker,controller (KRaft) or zookeeper.connect (ZooKeeper mode)"
            )
        dirs = self.log_dirs
        if not dirs:
            raise ConfigError("log.dirs must name at least one directory")
        listeners = self.listeners  # parses, raises on bad syntax
        names = [lst.name for lst in listeners]
        dup_names = {n for n in names if names.count(n) > 1}
        if dup_names:
            raise ConfigError(
                f"Invalid value {self.raw('listeners')} for configuration listeners: "
                f"each listener must have a different name (duplicate: {sorted(dup_names)[0]})"
            )
        ports = [lst.port for lst in listeners if lst.port != 0]
        dup_ports = {p for p in ports if ports.count(p) > 1}
        if dup_ports:
            raise ConfigError(
                f"Invalid value {self.raw('listeners')} for configuration listeners: "
                f"each listener must have a different port (duplicate: {sorted(dup_ports)[0]})"
            )
        unsupported = unsupported_settings(self)  # before the checks SSL/SASL listeners would fail
        if unsupported:
            raise ConfigError("not supported: " + "; ".join(unsupported))
        ctrl = self.controller_listener_names
        if "controller" in roles:
            if not ctrl or ctrl[0] not in names:
                raise ConfigError(
                    "controller.listener.names must name a listener that appears in listeners "
                    f"when process.roles includes controller (controller.listener.names="
                    f"{','.join(ctrl)}, listeners={self.raw('listeners')})"
                )
            voters = self.controller_quorum_voters
            if self.is_set("controller.quorum.voters") and self.node_id not in {
                v.node_id for v in voters
            }:
                raise ConfigError(
                    f"node.id={self.node_id} must be one of the voters in "
                    f"controller.quorum.voters={self.raw('controller.quorum.voters')} "
                    "when process.roles includes controller"
                )
            if "broker" not in roles and any(n not in ctrl for n in names):
                raise ConfigError(
                    "The listeners config must only contain KRaft controller listeners from "
                    "controller.listener.names when process.roles=controller"
                )
        elif roles:
            if not ctrl:
                raise ConfigError(
                    "controller.listener.names must contain at least one value when running KRaft "
                    "with just the broker role"
                )
            if self.is_set("controller.quorum.voters") and self.node_id in {
                v.node_id for v in self.controller_quorum_voters
            }:
                raise ConfigError(
                    "If process.roles contains just the 'broker' role, the node id "
                    f"{self.node_id} must not be included in the set of voters "
                    f"controller.quorum.voters={self.raw('controller.quorum.voters')}"
                )
            clash = [n for n in ctrl if n in names]
            if clash:
                raise ConfigError(
                    f"controller.listener.names must not contain a listener from listeners "
                    f"({clash[0]}) when process.roles is broker only"
                )
            if not self.get("controller.quorum.voters") and not self.get(
                "controller.quorum.bootstrap.servers"
            ):
                raise ConfigError(
                    "controller.quorum.bootstrap.servers (or controller.quorum.voters) must be "
                    "set when process.roles is broker only"
                )
        for hp in self.controller_quorum_bootstrap_servers:
            if not _HOSTPORT_RE.match(hp):
                raise ConfigError(
                    f"Invalid value {hp} for configuration controller.quorum.bootstrap.servers: "
                    "entries must be host:port"
                )
        if "broker" in roles or not roles:
            ibl = self.inter_broker_listener_name
            if ibl not in names:
                raise ConfigError(
                    f"inter.broker.listener.name={ibl} must be one of the listeners "
                    f"({self.raw('listeners')})"
                )
            if ibl in ctrl:
                raise ConfigError(
                    f"inter.broker.listener.name={ibl} must not be a controller listener"
                )
        for lst in self.advertised_listeners:
            if lst.host in ("0.0.0.0", "::"):
                raise ConfigError(
                    f"Invalid value {self.raw('advertised.listeners')} for configuration "
                    "advertised.listeners: cannot use the nonroutable meta-address "
                    f"{lst.host}; use a routable host name or IP address"
                )
        lo = self.get("group.min.session.timeout.ms")
        hi = self.get("group.max.session.timeout.ms")
        if lo > hi:
            raise ConfigError(
                f"group.min.session.timeout.ms={lo} must not exceed "
                f"group.max.session.timeout.ms={hi}"
            )
        ip_overrides = self.max_connections_per_ip_overrides  # parses, raises on bad syntax
        if self.max_connections_per_ip == 0 and not ip_overrides:
            raise ConfigError(
                "If max.connections.per.ip is zero, max.connections.per.ip.overrides must be set"
            )

    # ---- typed properties --------------------------------------------------------------

    @property
    def node_id(self) -> int:
        if not self.is_set("node.id") and self.is_set("broker.id"):
            return int(self.get("broker.id"))
        return int(self.get("node.id"))

    broker_id = node_id

    @property
    def process_roles(self) -> list[str]:
        if self.is_zk_mode:
            return []
        return list(self.get("process.roles") or [])

    @property
    def is_zk_mode(self) -> bool:
        """ZooKeeper mode: ``zookeeper.connect`` set and ``process.roles`` not (Kafka's KafkaServer)."""
        return bool(self.get("zookeeper.connect")) and not (
            self.is_set("process.roles") and self.get("process.roles"))

    @property
    def is_kraft(self) -> bool:
        return bool(self.process_roles)

    @property
    def zookeeper_connect(self) -> str | None:
        value = self.get("zookeeper.connect")
        return str(value) if value else None

    def _security_protocol_map(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for item in self.get("listener.security.protocol.map") or []:
            name, _, proto = item.partition(":")
            if not proto:
                raise ConfigError(
                    f"Invalid value {self.raw('listener.security.protocol.map')} for "
                    "configuration listener.security.protocol.map: entries must be NAME:PROTOCOL"
                )
            out[name.strip().upper()] = proto.strip().upper()
        return out

    def listener_security_protocol(self, name: str) -> str:
        """The security protocol of listener ``name`` (controller listeners not in the map are
        PLAINTEXT, as in Kafka)."""
        return self._security_protocol_map().get(name.upper(), "PLAINTEXT")

    def _with_protocol(self, lst: Listener, key: str) -> Listener:
        protocols = self._security_protocol_map()
        proto = protocols.get(lst.name)
        if proto is None:
            if lst.name in self.controller_listener_names:
                proto = "PLAINTEXT"
            else:
                raise ConfigError(
                    f"Invalid value {self.raw(key)} for configuration {key}: listener {lst.name} "
                    "has no entry in listener.security.protocol.map"
                )
        return Listener(lst.name, lst.host, lst.port, proto)

    @property
    def listeners(self) -> list[Listener]:
        return [
            self._with_protocol(parse_listener(item), "listeners")
            for item in self.get("listeners") or []
        ]

    def listener(self, name: str) -> Listener | None:
        for lst in self.listeners:
            if lst.name == name.upper():
                return lst
        return None

    @property
    def advertised_listeners(self) -> list[Listener]:
        """Listeners published to clients (never the controller ones). Without
        ``advertised.listeners``, the broker listeners with wildcard hosts replaced by this host's
        name. Port 0 means "the port actually bound", which the server fills in."""
        ctrl = set(self.controller_listener_names)
        if self.get("advertised.listeners"):
            parsed = [
                self._with_protocol(parse_listener(item, "advertised.listeners"),
                                    "advertised.listeners")
                for item in self.get("advertised.listeners")
            ]
            return [lst for lst in parsed if lst.name not in ctrl]
        out = []
        for lst in self.listeners:
            if lst.name in ctrl:
                continue
            host = lst.host
            if host in ("", "0.0.0.0", "::"):
                host = socket.gethostname()
            out.append(Listener(lst.name, host, lst.port, lst.security_protocol))
        return out

    @property
    def controller_listener_names(self) -> list[str]:
        return [n.upper() for n in self.get("controller.listener.names") or []]

    @property
    def controller_listeners(self) -> list[Listener]:
        ctrl = self.controller_listener_names
        return [lst for lst in self.listeners if lst.name in ctrl]

    @property
    def inter_broker_listener_name(self) -> str:
        name = self.get("inter.broker.listener.name")
        if name:
            return str(name).upper()
        return str(self.get("security.inter.broker.protocol")).upper()

    @property
    def controller_quorum_voters(self) -> list[QuorumVoter]:
        """Configured voters; for a combined node with neither voters nor bootstrap servers
        configured, the node itself on its controller listener (``1@localhost:9093``)."""
        items = self.get("controller.quorum.voters") or []
        if items:
            return [_parse_voter(v) for v in items]
        if "controller" in self.process_roles and not self.get(
            "controller.quorum.bootstrap.servers"
        ):
            ctrl = self.controller_listeners
            if ctrl:
                host = ctrl[0].host or "localhost"
                if host in ("0.0.0.0", "::"):
                    host = "localhost"
                return [QuorumVoter(self.node_id, host, ctrl[0].port)]
        return []

    @property
    def controller_quorum_bootstrap_servers(self) -> list[str]:
        items = self.get("controller.quorum.bootstrap.servers") or []
        if items:
            return list(items)
        return [f"{v.host}:{v.port}" for v in self.controller_quorum_voters]

    @property
    def log_dirs(self) -> list[str]:
        dirs = self.get("log.dirs")
        if dirs:
            return list(dirs)
        return [str(self.get("log.dir"))]

    @property
    def metadata_log_dir(self) -> str:
        return str(self.get("metadata.log.dir") or self.log_dirs[0])

    @property
    def broker_rack(self) -> str | None:
        value = self.get("broker.rack")
        return str(value) if value else None

    # Retention / roll with Kafka's precedence between ms / minutes / hours.
    @property
    def log_retention_ms(self) -> int:
        if self.is_set("log.retention.ms"):
            ms = int(self.get("log.retention.ms"))
        elif self.is_set("log.retention.minutes"):
            ms = int(self.get("log.retention.minutes")) * 60_000
        else:
            ms = int(self.get("log.retention.hours")) * 3_600_000
        return -1 if ms < 0 else ms

    @property
    def log_roll_ms(self) -> int:
        if self.is_set("log.roll.ms"):
            return int(self.get("log.roll.ms"))
        return int(self.get("log.roll.hours")) * 3_600_000

    @property
    def log_roll_jitter_ms(self) -> int:
        if self.is_set("log.roll.jitter.ms"):
            return int(self.get("log.roll.jitter.ms"))
        return int(self.get("log.roll.jitter.hours")) * 3_600_000

    @property
    def log_flush_interval_ms(self) -> int:
        value = self.get("log.flush.interval.ms")
        if value is None:
            return int(self.get("log.flush.scheduler.interval.ms"))
        return int(value)

    def _int(self, key: str) -> int:
        return int(self.get(key))

    def _bool(self, key: str) -> bool:
        return bool(self.get(key))

    num_partitions = property(lambda self: self._int("num.partitions"))
    default_replication_factor = property(lambda self: self._int("default.replication.factor"))
    auto_create_topics_enable = property(lambda self: self._bool("auto.create.topics.enable"))
    delete_topic_enable = property(lambda self: self._bool("delete.topic.enable"))
    socket_request_max_bytes = property(lambda self: self._int("socket.request.max.bytes"))
    message_max_bytes = property(lambda self: self._int("message.max.bytes"))
    min_insync_replicas = property(lambda self: self._int("min.insync.replicas"))
    unclean_leader_election_enable = property(
        lambda self: self._bool("unclean.leader.election.enable")
    )
    log_segment_bytes = property(lambda self: self._int("log.segment.bytes"))
    log_retention_bytes = property(lambda self: self._int("log.retention.bytes"))
    log_retention_check_interval_ms = property(
        lambda self: self._int("log.retention.check.interval.ms")
    )
    log_flush_scheduler_interval_ms = property(
        lambda self: self._int("log.flush.scheduler.interval.ms")
    )
    log_flush_offset_checkpoint_interval_ms = property(
        lambda self: self._int("log.flush.offset.checkpoint.interval.ms")
    )
    log_flush_start_offset_checkpoint_interval_ms = property(
        lambda self: self._int("log.flush.start.offset.checkpoint.interval.ms")
    )
    replica_high_watermark_checkpoint_interval_ms = property(
        lambda self: self._int("replica.high.watermark.checkpoint.interval.ms")
    )
    log_cleaner_enable = property(lambda self: self._bool("log.cleaner.enable"))
    log_cleaner_backoff_ms = property(lambda self: self._int("log.cleaner.backoff.ms"))
    offsets_topic_num_partitions = property(lambda self: self._int("offsets.topic.num.partitions"))
    offsets_topic_replication_factor = property(
        lambda self: self._int("offsets.topic.replication.factor")
    )
    offsets_topic_segment_bytes = property(lambda self: self._int("offsets.topic.segment.bytes"))
    offsets_retention_minutes = property(lambda self: self._int("offsets.retention.minutes"))
    offsets_retention_check_interval_ms = property(
        lambda self: self._int("offsets.retention.check.interval.ms")
    )
    offset_metadata_max_bytes = property(lambda self: self._int("offset.metadata.max.bytes"))
    group_initial_rebalance_delay_ms = property(
        lambda self: self._int("group.initial.rebalance.delay.ms")
    )
    group_min_session_timeout_ms = property(lambda self: self._int("group.min.session.timeout.ms"))
    group_max_session_timeout_ms = property(lambda self: self._int("group.max.session.timeout.ms"))
    group_max_size = property(lambda self: self._int("group.max.size"))
    transaction_state_log_replication_factor = property(
        lambda self: self._int("transaction.state.log.replication.factor")
    )
    transaction_state_log_min_isr = property(
        lambda self: self._int("transaction.state.log.min.isr")
    )
    num_io_threads = property(lambda self: self._int("num.io.threads"))
    num_network_threads = property(lambda self: self._int("num.network.threads"))
    replica_lag_time_max_ms = property(lambda self: self._int("replica.lag.time.max.ms"))
    replica_fetch_max_bytes = property(lambda self: self._int("replica.fetch.max.bytes"))
    replica_fetch_wait_max_ms = property(lambda self: self._int("replica.fetch.wait.max.ms"))
    fetch_max_bytes = property(lambda self: self._int("fetch.max.bytes"))
    # Socket server limits (odradek.network.limits).
    queued_max_request_bytes = property(lambda self: self._int("queued.max.request.bytes"))
    max_connections = property(lambda self: self._int("max.connections"))
    max_connections_per_ip = property(lambda self: self._int("max.connections.per.ip"))
    connections_max_idle_ms = property(lambda self: self._int("connections.max.idle.ms"))

    @property
    def max_connections_per_ip_overrides(self) -> dict[str, int]:
        """{ip: limit}; host names are resolved (every address they have)."""
        text = self.get("max.connections.per.ip.overrides") or ""
        try:
            return parse_ip_overrides(text)
        except OverridesError as e:
            raise ConfigError(
                f"Invalid value {text} for configuration max.connections.per.ip.overrides: {e}"
            ) from None
    max_incremental_fetch_session_cache_slots = property(
        lambda self: self._int("max.incremental.fetch.session.cache.slots")
    )
    request_timeout_ms = property(lambda self: self._int("request.timeout.ms"))
    broker_heartbeat_interval_ms = property(lambda self: self._int("broker.heartbeat.interval.ms"))
    broker_session_timeout_ms = property(lambda self: self._int("broker.session.timeout.ms"))
    controlled_shutdown_enable = property(lambda self: self._bool("controlled.shutdown.enable"))
