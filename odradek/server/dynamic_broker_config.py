"""Dynamic broker configuration (Kafka's KIP-226, as a KRaft broker does it).

Broker configs set with IncrementalAlterConfigs / AlterConfigs on a BROKER resource are kept as
``ConfigRecord(resource_type=BROKER)`` in the metadata log: resource name ``""`` is the
cluster-wide default, ``"<node id>"`` one broker. The effective configuration of a broker is, by
precedence, DYNAMIC_BROKER_CONFIG > DYNAMIC_DEFAULT_BROKER_CONFIG > STATIC_BROKER_CONFIG >
DEFAULT_CONFIG; a dynamic key hides its static synonyms (a dynamic ``log.retention.ms`` wins over
a static ``log.retention.hours``), as Kafka's ``DynamicBrokerConfig.overrideProps`` does.

Which keys may change: the subset of Kafka's ``DynamicBrokerConfig.AllDynamicConfigs`` that Odradek
actually applies when it changes:

* the broker defaults of topic configs (Kafka's ``DynamicLogConfig.ReconfigurableConfigs``: the
  first broker synonym of each topic config), except those whose topic config Odradek accepts but
  does not act on (``log.preallocate``, ``log.roll.jitter.ms``); every log of a topic without its own value is reconfigured;
* ``log.cleaner.backoff.ms`` and ``log.cleaner.dedupe.buffer.size`` (Kafka's
  ``LogCleaner.ReconfigurableConfigs``; the others of that list (``log.cleaner.threads``, the I/O
  buffer and throttle settings) have no counterpart in Odradek's single cleaner thread);
* ``num.replica.fetchers`` (Kafka's ``DynamicThreadPool``: the partitions are spread over the new
  number of fetchers per source broker; a change may at most halve or double the count);
* the replication throttles (``leader/follower.replication.throttled.rate``,
  ``replica.alter.log.dirs.io.max.bytes.per.second``).

Everything else (including keys Kafka can change dynamically but Odradek does not apply, such as
``num.io.threads`` / ``num.network.threads`` / ``background.threads`` (an asyncio broker has no
such pools), the client quota and connection limits, listeners and SSL, and names Kafka does not know, which
Kafka keeps as custom configs) is refused with Kafka's
``Cannot update these configs dynamically: [...]`` (INVALID_REQUEST). None of the accepted keys
is per-broker-only in Kafka (those are the listener and SSL ones), so all are accepted both as
cluster default and per broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from odradek.server.config_defs import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    check_value,
)

if TYPE_CHECKING:
    from odradek.server.kafka_config import KafkaConfig

# Topic configs Odradek accepts but does not act on: their broker defaults are not dynamic here.
# (unclean.leader.election.enable is applied: the controller reads the cluster-wide default and
# elects the leaderless partitions when it is enabled.)
_UNAPPLIED_TOPIC_CONFIGS = frozenset({"preallocate", "segment.jitter.ms"})

DYNAMIC_LOG_CONFIGS: frozenset[str] = frozenset(
    d.broker_keys[0]
    for d in TOPIC_CONFIGS.values()
    if d.broker_keys and d.name not in _UNAPPLIED_TOPIC_CONFIGS
)
DYNAMIC_CLEANER_CONFIGS: frozenset[str] = frozenset(
    {"log.cleaner.backoff.ms", "log.cleaner.dedupe.buffer.size"}
)
# Kafka's replication quotas (QuotaConfig), set per broker by kafka-reassign-partitions
# --throttle and removed by --verify: accepted and validated; the follower fetching applies them.
DYNAMIC_QUOTA_CONFIGS: frozenset[str] = frozenset({
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
})
# Kafka's DynamicThreadPool.ReconfigurableConfigs that Odradek has a pool for: the replica
# fetchers (num.io.threads, background.threads and num.recovery.threads.per.data.dir name thread
# pools an asyncio broker does not have, so they are refused).
DYNAMIC_THREAD_CONFIGS: frozenset[str] = frozenset({"num.replica.fetchers"})
DYNAMIC_CONFIGS: frozenset[str] = (
    DYNAMIC_LOG_CONFIGS | DYNAMIC_CLEANER_CONFIGS | DYNAMIC_QUOTA_CONFIGS | DYNAMIC_THREAD_CONFIGS
)

# Kafka's DynamicBrokerConfig.brokerConfigSynonyms: names of one setting, highest precedence first.
_SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def broker_config_synonyms(name: str) -> list[str]:
    """The broker keys naming the same setting as ``name``, highest precedence first."""
    if name == "log.flush.scheduler.interval.ms":
        return [name]  # only log.flush.interval.ms falls back to it, not the other way round
    for group in _SYNONYM_GROUPS:
        if name in group:
            return list(group)
    return [name]


def layered_props(
    static: Mapping[str, str], default: Mapping[str, str], per_broker: Mapping[str, str]
) -> dict[str, str]:
    """Static props with the dynamic default and then the per-broker dynamic configs laid over;
    each dynamic key removes its synonyms from the layers below (Kafka's overrideProps)."""
    props = dict(static)
    for layer in (default, per_broker):
        for key, value in layer.items():
            for syn in broker_config_synonyms(key):
                props.pop(syn, None)
            props[key] = value
    return props


def _java_set(names: Iterable[str]) -> str:
    return "[" + ", ".join(names) + "]"


def check_broker_resource(name: str, node_id: int | None) -> str | None:
    """Kafka's ConfigAdminManager check of a BROKER resource name on an alter: empty (cluster
    default) or this node's id (the broker that receives it checks; the controller, which gets
    every broker's changes forwarded, checks only that it is an id: ``node_id`` None)."""
    if name == "":
        return None
    try:
        broker_id = int(name)
    except ValueError:
        return f"Node id must be an integer, but it is: {name}"
    if node_id is not None and broker_id != node_id:
        return f"Unexpected broker id, expected {node_id}, but received {name}"
    return None


def validate_dynamic_configs(
    config: KafkaConfig, resource_name: str, new_props: Mapping[str, str]
) -> str | None:
    """Why the dynamic configs ``new_props`` (the whole new set of the resource) cannot be
    applied, or None. Kafka answers these with INVALID_REQUEST."""
    from odradek.server.kafka_config import ConfigError, KafkaConfig

    # Only what this request changes is judged: a key already stored (say by an Apache Kafka
    # whose metadata log Odradek took over) does not block other changes.
    current = config.dynamic_default_configs if resource_name == "" else config.dynamic_broker_configs
    changed = {k: v for k, v in new_props.items() if current.get(k) != v}
    refused = [k for k in changed if k not in DYNAMIC_CONFIGS]
    if refused:
        return f"Cannot update these configs dynamically: {_java_set(refused)}"
    for key, value in changed.items():
        _, err = check_value(BROKER_CONFIGS[key], value)
        if err is not None:
            return err
        if key in DYNAMIC_THREAD_CONFIGS:
            err = _check_thread_count(key, value, int(config.get(key)))
            if err is not None:
                return err
    if resource_name == "":
        default, per_broker = dict(new_props), config.dynamic_broker_configs
    else:
        default, per_broker = config.dynamic_default_configs, dict(new_props)
    try:
        KafkaConfig(layered_props(config.static_originals, default, per_broker))
    except ConfigError as e:
        return str(e)
    return None


def _check_thread_count(key: str, value: str, old: int) -> str | None:
    """Kafka's DynamicThreadPool.validateReconfiguration: at least 1, at most a halving or a
    doubling of the current count at a time."""
    new = int(value.strip())
    if new == old:
        return None
    prefix = f"Dynamic thread count update validation failed for {key}={value}"
    if new <= 0:
        return f"{prefix}, value should be at least 1"
    if new < old // 2:
        return f"{prefix}, value should be at least half the current value {old}"
    if new > old * 2:
        return f"{prefix}, value should not be greater than double the current value {old}"
    return None


class DynamicBrokerConfigPolicy:
    """The controller's view of this node's dynamic broker configs (BrokerConfigPolicy)."""

    def __init__(self, config: KafkaConfig) -> None:
        self.config = config

    def check_resource(self, name: str) -> str | None:
        # Any broker's id: the broker a client sent the change to checked it was its own.
        return check_broker_resource(name, None)

    def validate(self, name: str, new_configs: dict[str, str]) -> str | None:
        return validate_dynamic_configs(self.config, name, new_configs)


def broker_synonyms(config: KafkaConfig, name: str, sensitive: bool = False) -> list[ConfigSynonym]:
    """Kafka's ConfigHelper.configSynonyms: every layer holding a synonym of ``name``, layer by
    layer (per broker, cluster default, static, default), dropping those before ``name``."""
    names = broker_config_synonyms(name)
    defaults = {
        k: d.default for k in names if (d := BROKER_CONFIGS.get(k)) is not None and d.default is not None
    }
    layers: tuple[tuple[Mapping[str, str], ConfigSource], ...] = (
        (config.dynamic_broker_configs, ConfigSource.DYNAMIC_BROKER_CONFIG),
        (config.dynamic_default_configs, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        (config.static_originals, ConfigSource.STATIC_BROKER_CONFIG),
        (defaults, ConfigSource.DEFAULT_CONFIG),
    )
    out: list[ConfigSynonym] = []
    for layer, source in layers:
        for n in names:
            if n in layer:
                out.append(ConfigSynonym(n, None if sensitive else layer[n], int(source)))
    while out and out[0].name != name:
        out.pop(0)
    return out


def describe_broker_config(
    config: KafkaConfig, resource_name: str = "1", keys: Sequence[str] | None = None
) -> list[ConfigEntry]:
    """DescribeConfigs entries of a BROKER resource: for ``""`` the dynamic cluster defaults only
    (with only their DYNAMIC_DEFAULT_BROKER_CONFIG synonyms), for this broker's id every config
    with its effective value. ``read_only`` is false exactly for the keys that can be altered."""
    per_broker = resource_name != ""
    if per_broker:
        names = list(BROKER_CONFIGS)
        names += [k for k in config.originals if k not in BROKER_CONFIGS]
    else:
        names = list(config.dynamic_default_configs)
    merged = config.originals
    defaults = config.dynamic_default_configs
    entries: list[ConfigEntry] = []
    for name in names:
        if keys and name not in keys:
            continue
        defn = BROKER_CONFIGS.get(name)
        # Kafka (KafkaConfig.maybeSensitive) hides a value whose type it cannot tell: a name it
        # does not know (a custom key in server.properties may be a secret), or a password.
        sensitive = defn is None or defn.sensitive or defn.type == "password"
        synonyms = broker_synonyms(config, name, sensitive)
        if per_broker:
            value = merged.get(name, defn.default if defn is not None else None)
        else:
            value = defaults[name]
            synonyms = [s for s in synonyms if s.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
        source = synonyms[0].source if synonyms else int(ConfigSource.DEFAULT_CONFIG)
        entries.append(
            ConfigEntry(
                name, None if sensitive else value, name not in DYNAMIC_CONFIGS, source, sensitive, synonyms
            )
        )
    return entries
