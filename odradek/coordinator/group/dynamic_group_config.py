"""Group configs (KIP-848's resource type GROUP, Kafka's ``GroupConfig``): per-group overrides of
the broker's consumer-group session timeout and heartbeat interval.

They are set with IncrementalAlterConfigs / AlterConfigs on a GROUP resource (``kafka-configs
--alter --entity-type groups --entity-name G``), kept as ``ConfigRecord(resource_type=GROUP)`` in
the metadata log, described with DescribeConfigs (source GROUP_CONFIG where the group has its own
value, else DEFAULT_CONFIG with the broker's ``group.consumer.*`` value) and used by the group
coordinator for that group's next heartbeats: a member's session deadline and the heartbeat
interval the ConsumerGroupHeartbeat response gives it.

Only Kafka's ``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms`` exist here:
Kafka's ``share.*`` and ``streams.*`` group configs belong to share groups (KIP-932) and streams
groups (KIP-1071), which Odradek does not run, so they are refused like any unknown name
(``Unknown group config name: ...``, INVALID_CONFIG).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from odradek.protocol.errors import Errors
from odradek.server.config_defs import ConfigEntry, ConfigSynonym

if TYPE_CHECKING:
    from odradek.coordinator.group.group_coordinator_config import ConsumerGroupConfig
    from odradek.server.kafka_config import KafkaConfig

GROUP_RESOURCE = 32  # ConfigResource.Type.GROUP
GROUP_CONFIG_SOURCE = 8  # DescribeConfigs ConfigSource GROUP_CONFIG (Admin: DYNAMIC_GROUP_CONFIG)
DEFAULT_CONFIG_SOURCE = 5

SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
# group config -> the broker key that is its default (GroupCoordinatorConfig.extractGroupConfigMap)
GROUP_CONFIGS: dict[str, str] = {
    SESSION_TIMEOUT: "group.consumer.session.timeout.ms",
    HEARTBEAT_INTERVAL: "group.consumer.heartbeat.interval.ms",
}
_INT_MAX = 2**31 - 1


def group_config_defaults(config: KafkaConfig) -> dict[str, str]:
    """The broker's values behind every group config."""
    return {name: str(config.get(broker_key)) for name, broker_key in GROUP_CONFIGS.items()}


def _parse_int(name: str, value: str) -> int | str:
    try:
        n = int(value.strip())
    except ValueError:
        return f"Invalid value {value} for configuration {name}: Not a number of type INT"
    if not -(2**31) <= n <= _INT_MAX:
        return f"Invalid value {value} for configuration {name}: Not a number of type INT"
    if n < 1:
        return f"Invalid value {n} for configuration {name}: Value must be at least 1"
    return n


def validate_group_configs(config: KafkaConfig, name: str, new: Mapping[str, str | None]) -> tuple[Errors, str] | None:
    """Kafka's ControllerConfigurationValidator for a GROUP resource: ``new`` is the group's whole
    new set of overrides; the broker's values fill the rest, then GroupConfig.validateValues."""
    if name == "":
        return Errors.INVALID_REQUEST, "Default group resources are not allowed."
    nulls = [k for k, v in new.items() if v is None]
    if nulls:
        return Errors.INVALID_CONFIG, "Null value not supported for group configs: " + ",".join(nulls)
    for key in new:
        if key not in GROUP_CONFIGS:
            return Errors.INVALID_CONFIG, f"Unknown group config name: {key}"
    values: dict[str, int] = {}
    for key, raw in {**group_config_defaults(config), **{k: v for k, v in new.items() if v is not None}}.items():
        parsed = _parse_int(key, raw)
        if isinstance(parsed, str):
            return Errors.INVALID_CONFIG, parsed
        values[key] = parsed
    hb, session = values[HEARTBEAT_INTERVAL], values[SESSION_TIMEOUT]
    checks = (
        (hb < int(config.get("group.consumer.min.heartbeat.interval.ms")),
         f"{HEARTBEAT_INTERVAL} must be greater than or equal to group.consumer.min.heartbeat.interval.ms"),
        (hb > int(config.get("group.consumer.max.heartbeat.interval.ms")),
         f"{HEARTBEAT_INTERVAL} must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
        (session < int(config.get("group.consumer.min.session.timeout.ms")),
         f"{SESSION_TIMEOUT} must be greater than or equal to group.consumer.min.session.timeout.ms"),
        (session > int(config.get("group.consumer.max.session.timeout.ms")),
         f"{SESSION_TIMEOUT} must be less than or equal to group.consumer.max.session.timeout.ms"),
        (session <= hb, f"{SESSION_TIMEOUT} must be greater than {HEARTBEAT_INTERVAL}"),
    )
    for failed, message in checks:
        if failed:
            return Errors.INVALID_CONFIG, message
    return None


class GroupConfigPolicy:
    """What the controller needs to judge GROUP resources (the node's broker settings)."""

    def __init__(self, config: KafkaConfig) -> None:
        self.config = config

    def validate(self, name: str, new: Mapping[str, str | None]) -> tuple[Errors, str] | None:
        return validate_group_configs(self.config, name, new)


def describe_group_config(
    config: KafkaConfig, overrides: Mapping[str, str], keys: Sequence[str] | None = None
) -> list[ConfigEntry]:
    """DescribeConfigs entries of a GROUP resource (Kafka's ConfigHelper.createGroupConfigEntry):
    every group config, its own value (GROUP_CONFIG) or the broker's (DEFAULT_CONFIG)."""
    defaults = group_config_defaults(config)
    out: list[ConfigEntry] = []
    for name in sorted(GROUP_CONFIGS):
        if keys and name not in keys:
            continue
        own = name in overrides
        value = overrides[name] if own else defaults[name]
        source = GROUP_CONFIG_SOURCE if own else DEFAULT_CONFIG_SOURCE
        out.append(ConfigEntry(name, value, False, source, False, [ConfigSynonym(name, value, source)]))
    return out


def with_group_overrides(base: ConsumerGroupConfig, overrides: Mapping[str, str]) -> ConsumerGroupConfig:
    """``base`` (the broker's consumer-group settings) with the group's own session timeout and
    heartbeat interval; values that do not parse (never stored by Odradek) are ignored."""
    session, heartbeat = base.session_timeout_ms, base.heartbeat_interval_ms
    raw = overrides.get(SESSION_TIMEOUT)
    if raw is not None and isinstance(parsed := _parse_int(SESSION_TIMEOUT, raw), int):
        session = parsed
    raw = overrides.get(HEARTBEAT_INTERVAL)
    if raw is not None and isinstance(parsed := _parse_int(HEARTBEAT_INTERVAL, raw), int):
        heartbeat = parsed
    if (session, heartbeat) == (base.session_timeout_ms, base.heartbeat_interval_ms):
        return base
    return dataclasses.replace(base, session_timeout_ms=session, heartbeat_interval_ms=heartbeat)
