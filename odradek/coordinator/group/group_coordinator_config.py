"""The group coordinator's settings (Kafka's ``GroupCoordinatorConfig``): the broker's
``group.*`` keys for classic groups and ``group.consumer.*`` for KIP-848 consumer groups, checked
as Kafka checks them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from odradek.coordinator.group.assignors import ASSIGNORS, DEFAULT_ASSIGNORS
from odradek.server.kafka_config import ConfigError, KafkaConfig

_ASSIGNOR_CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
    "org.apache.kafka.coordinator.group.api.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.api.assignor.RangeAssignor": "range",
}

_CONSUMER_KEYS = (
    "group.consumer.session.timeout.ms",
    "group.consumer.heartbeat.interval.ms",
    "group.consumer.max.size",
    "group.consumer.assignors",
)


@dataclass
class GroupConfig:
    """The broker's ``group.*`` settings that classic groups need."""

    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size


@dataclass(frozen=True)
class ConsumerGroupConfig:
    """The broker's ``group.consumer.*`` settings that consumer groups need."""

    session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size
    assignors: tuple[str, ...] = DEFAULT_ASSIGNORS  # group.consumer.assignors; first = default

    def __post_init__(self) -> None:
        if not self.assignors:
            raise ValueError("group.consumer.assignors must name at least one assignor")
        for name in self.assignors:
            if name not in ASSIGNORS:
                raise ValueError(f"unknown assignor {name!r} in group.consumer.assignors")

    @property
    def default_assignor(self) -> str:
        return self.assignors[0]

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> ConsumerGroupConfig:
        """Read Kafka's keys; assignors may be names or Kafka's class names, comma separated."""
        kw: dict[str, Any] = {}
        if "group.consumer.session.timeout.ms" in props:
            kw["session_timeout_ms"] = int(props["group.consumer.session.timeout.ms"])
        if "group.consumer.heartbeat.interval.ms" in props:
            kw["heartbeat_interval_ms"] = int(props["group.consumer.heartbeat.interval.ms"])
        if "group.consumer.max.size" in props:
            kw["max_size"] = int(props["group.consumer.max.size"])
        raw = props.get("group.consumer.assignors")
        if raw is not None:
            items = raw.split(",") if isinstance(raw, str) else list(raw)
            names = [_ASSIGNOR_CLASS_NAMES.get(s.strip(), s.strip()) for s in items if s.strip()]
            kw["assignors"] = tuple(names)
        return cls(**kw)


def classic_group_config(config: KafkaConfig) -> GroupConfig:
    """``group.*`` of classic groups from the broker's configuration."""
    return GroupConfig(
        min_session_timeout_ms=config.group_min_session_timeout_ms,
        max_session_timeout_ms=config.group_max_session_timeout_ms,
        initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
        max_size=config.group_max_size,
    )


def consumer_group_config(config: KafkaConfig) -> ConsumerGroupConfig:
    """``group.consumer.*`` from the broker's configuration, checked as Kafka checks them."""
    session = int(config.get("group.consumer.session.timeout.ms"))
    heartbeat = int(config.get("group.consumer.heartbeat.interval.ms"))
    for key, value in (("session.timeout.ms", session), ("heartbeat.interval.ms", heartbeat)):
        lo = int(config.get(f"group.consumer.min.{key}"))
        hi = int(config.get(f"group.consumer.max.{key}"))
        if not lo <= value <= hi:
            raise ConfigError(
                f"group.consumer.{key}={value} must be between group.consumer.min.{key}={lo} "
                f"and group.consumer.max.{key}={hi}"
            )
    if heartbeat >= session:
        raise ConfigError(
            f"group.consumer.heartbeat.interval.ms={heartbeat} must be less than "
            f"group.consumer.session.timeout.ms={session}"
        )
    try:
        return ConsumerGroupConfig.from_properties({k: config.get(k) for k in _CONSUMER_KEYS})
    except ValueError as e:
        raise ConfigError(str(e)) from None
