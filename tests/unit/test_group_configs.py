"""Group configs (resource type GROUP, KIP-848): controller validation and records, describe, and
the consumer group taking its own session timeout and heartbeat interval."""

from __future__ import annotations

from typing import Any

from odradek.controller.configuration_control import (
    GROUP_RESOURCE,
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    ConfigurationControlManager,
)
from odradek.coordinator.group.consumer_group import ConsumerGroup
from odradek.coordinator.group.dynamic_group_config import GroupConfigPolicy, describe_group_config
from odradek.coordinator.group.group_coordinator_config import ConsumerGroupConfig
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import EMPTY_IMAGE
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.protocol.errors import Errors
from odradek.server.config_defs import validate_topic_config
from odradek.server.kafka_config import KafkaConfig


def _cfg(**extra: str) -> KafkaConfig:
    return KafkaConfig({"node.id": "1", **extra})


def _manager(cfg: KafkaConfig, groups: bool = True) -> ConfigurationControlManager:
    return ConfigurationControlManager(
        EMPTY_IMAGE, validate_topic_config, None, GroupConfigPolicy(cfg) if groups else None
    )


def _set(key: str, value: str | None, op: int = OP_SET) -> list[dict[str, Any]]:
    return [{"name": key, "config_operation": op, "value": value}]


def test_group_config_records_and_describe() -> None:
    cfg = _cfg()
    mgr = _manager(cfg)
    code, msg, recs = mgr.incremental_alter_configs(GROUP_RESOURCE, "g", _set("consumer.session.timeout.ms", "50000"))
    assert (code, msg) == (Errors.NONE, None)
    assert recs == [("ConfigRecord", {"resource_type": GROUP_RESOURCE, "resource_name": "g",
                                      "name": "consumer.session.timeout.ms", "value": "50000"})]
    delta = MetadataDelta(mgr.image)
    for name, rec in recs:
        delta.replay(name, rec)
    image = delta.apply()
    cache = KRaftMetadataCache(image)
    assert cache.group_config("g") == {"consumer.session.timeout.ms": "50000"}
    entries = {e.name: e for e in describe_group_config(cfg, cache.group_config("g"))}
    s, h = entries["consumer.session.timeout.ms"], entries["consumer.heartbeat.interval.ms"]
    assert (s.value, s.source, [(x.name, x.value, x.source) for x in s.synonyms]) == (
        "50000", 8, [("consumer.session.timeout.ms", "50000", 8)])
    assert (h.value, h.source, h.read_only, h.is_sensitive) == ("5000", 5, False, False)
    # the broker's value is the default of a group without its own
    assert describe_group_config(_cfg(**{"group.consumer.heartbeat.interval.ms": "6000"}), {})[0].value == "6000"

    mgr.image = image
    code, _, recs = mgr.incremental_alter_configs(GROUP_RESOURCE, "g", _set("consumer.session.timeout.ms", None, OP_DELETE))
    assert code == Errors.NONE and recs[0][1]["value"] is None


def test_group_config_refusals_as_kafka() -> None:
    mgr = _manager(_cfg())
    cases = [
        ("consumer.session.timeout.ms", "70000", Errors.INVALID_CONFIG,
         "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms"),
        ("consumer.session.timeout.ms", "1000", Errors.INVALID_CONFIG,
         "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
        ("consumer.heartbeat.interval.ms", "16000", Errors.INVALID_CONFIG,
         "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
        ("consumer.heartbeat.interval.ms", "soon", Errors.INVALID_CONFIG,
         "Invalid value soon for configuration consumer.heartbeat.interval.ms: Not a number of type INT"),
        ("share.session.timeout.ms", "45000", Errors.INVALID_CONFIG, "Unknown group config name: share.session.timeout.ms"),
        ("streams.session.timeout.ms", "45000", Errors.INVALID_CONFIG,
         "Unknown group config name: streams.session.timeout.ms"),
    ]
    for key, value, code, message in cases:
        got = mgr.incremental_alter_configs(GROUP_RESOURCE, "g", _set(key, value))
        assert got == (code, message, []), key
    got = mgr.incremental_alter_configs(GROUP_RESOURCE, "", _set("consumer.session.timeout.ms", "50000"))
    assert got == (Errors.INVALID_REQUEST, "Default group resources are not allowed.", [])
    got = mgr.incremental_alter_configs(GROUP_RESOURCE, "g", _set("consumer.session.timeout.ms", "1", OP_APPEND))
    assert got[:2] == (Errors.INVALID_CONFIG, "Config value append is not allowed for config key: consumer.session.timeout.ms")
    # session must stay above the heartbeat interval (bounds widened so only that rule fails)
    wide = _manager(_cfg(**{"group.consumer.min.session.timeout.ms": "1000", "group.consumer.max.heartbeat.interval.ms": "50000"}))
    got = wide.incremental_alter_configs(GROUP_RESOURCE, "g", _set("consumer.session.timeout.ms", "5000"))
    assert got == (Errors.INVALID_CONFIG, "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms", [])
    # legacy AlterConfigs: the whole set, validated the same way
    got = mgr.alter_configs(GROUP_RESOURCE, "g", [{"name": "consumer.heartbeat.interval.ms", "value": "6000"}])
    assert got[0] == Errors.NONE and got[2][0][1]["value"] == "6000"
    # ZooKeeper mode (no group policy): not served
    got = _manager(_cfg(), groups=False).incremental_alter_configs(GROUP_RESOURCE, "g", _set("consumer.session.timeout.ms", "50000"))
    assert got == (Errors.INVALID_REQUEST, "Unsupported resource type 32", [])


def test_consumer_group_uses_its_own_configs() -> None:
    overrides: dict[str, str] = {}
    group = ConsumerGroup("g", ConsumerGroupConfig(session_timeout_ms=45000, heartbeat_interval_ms=5000))
    group.config_overrides = lambda: overrides
    assert (group.config.session_timeout_ms, group.config.heartbeat_interval_ms) == (45000, 5000)
    overrides.update({"consumer.session.timeout.ms": "50000", "consumer.heartbeat.interval.ms": "7000"})
    assert (group.config.session_timeout_ms, group.config.heartbeat_interval_ms) == (50000, 7000)
    assert group.config.assignors == group.base_config.assignors
