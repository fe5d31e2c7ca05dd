"""Dynamic broker configs (KIP-226): layering, validation, controller records and describe."""

from __future__ import annotations

from typing import Any

from odradek.controller.configuration_control import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    ConfigurationControlManager,
)
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import BROKER_RESOURCE, EMPTY_IMAGE
from odradek.protocol.errors import Errors
from odradek.server.config_defs import (
    ConfigSource,
    build_log_config,
    describe_topic_config,
    validate_topic_config,
)
from odradek.server.dynamic_broker_config import (
    DYNAMIC_CONFIGS,
    DynamicBrokerConfigPolicy,
    describe_broker_config,
    validate_dynamic_configs,
)
from odradek.server.kafka_config import KafkaConfig

HOUR_MS = 3_600_000


def _static(**extra: str) -> KafkaConfig:
    return KafkaConfig({"node.id": "1", "log.retention.hours": "1", **extra})


def _syn(entry: Any) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def test_layering_precedence_and_revert() -> None:
    cfg = _static()
    assert build_log_config(cfg, {}).retention_ms == HOUR_MS

    cfg.update_dynamic({"log.retention.ms": "5000"}, {})
    assert build_log_config(cfg, {}).retention_ms == 5000
    # a topic's own value still wins over any broker layer
    assert build_log_config(cfg, {"retention.ms": "9"}).retention_ms == 9
    ret = {e.name: e for e in describe_topic_config(cfg, {})}["retention.ms"]
    assert (ret.value, ret.source) == ("5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert _syn(ret) == [
        ("log.retention.ms", "5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", "1", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]

    cfg.update_dynamic({"log.retention.ms": "5000"}, {"log.retention.ms": "7000"})
    assert build_log_config(cfg, {}).retention_ms == 7000
    ret = {e.name: e for e in describe_topic_config(cfg, {})}["retention.ms"]
    assert ret.source == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert [s[2] for s in _syn(ret)][:2] == [
        ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    ]

    cfg.update_dynamic({}, {})
    assert build_log_config(cfg, {}).retention_ms == HOUR_MS
    assert cfg.static_originals["log.retention.hours"] == "1"
    # as Kafka: log.retention.ms set nowhere, so no broker synonym and DEFAULT_CONFIG
    ret = {e.name: e for e in describe_topic_config(cfg, {})}["retention.ms"]
    assert (ret.value, ret.source, ret.synonyms) == ("3600000", ConfigSource.DEFAULT_CONFIG, [])


def test_dynamic_key_hides_static_synonym() -> None:
    # log.flush.interval.ms falls back to log.flush.scheduler.interval.ms; a dynamic value of the
    # first removes the static second (Kafka's overrideProps), other keys stay.
    cfg = _static(**{"log.flush.scheduler.interval.ms": "3000", "num.partitions": "3"})
    cfg.update_dynamic({"log.flush.interval.ms": "100"}, {})
    assert not cfg.is_set("log.flush.scheduler.interval.ms")
    assert cfg.get("num.partitions") == 3
    assert build_log_config(cfg, {}).flush_ms == 100


def test_invalid_stored_value_is_ignored() -> None:
    cfg = _static()
    ignored = cfg.update_dynamic({"log.retention.ms": "soon", "log.segment.bytes": "2048"}, {})
    assert ignored == ["log.retention.ms"]
    assert build_log_config(cfg, {}).retention_ms == HOUR_MS
    assert build_log_config(cfg, {}).segment_bytes == 2048


def test_validation_messages() -> None:
    cfg = _static()
    assert validate_dynamic_configs(cfg, "", {"log.retention.ms": "1000", "log.cleaner.backoff.ms": "5"}) is None
    assert validate_dynamic_configs(cfg, "1", {"log.dirs": "/x", "num.io.threads": "4"}) == (
        "Cannot update these configs dynamically: [log.dirs, num.io.threads]"
    )
    # not dynamic in Kafka either: only the first synonym of a topic default is
    assert validate_dynamic_configs(cfg, "", {"log.retention.hours": "2"}) == (
        "Cannot update these configs dynamically: [log.retention.hours]"
    )
    err = validate_dynamic_configs(cfg, "", {"log.retention.ms": "abc"})
    assert err is not None and err.startswith("Invalid value abc for configuration log.retention.ms")
    err = validate_dynamic_configs(cfg, "", {"log.cleanup.policy": "shred"})
    assert err is not None and "log.cleanup.policy" in err
    # each accepted key is one Kafka can change dynamically, and none Odradek would ignore
    # (unclean.leader.election.enable is one now: the controller applies the cluster default)
    assert "log.cleaner.threads" not in DYNAMIC_CONFIGS and "unclean.leader.election.enable" in DYNAMIC_CONFIGS
    assert {"log.retention.ms", "log.segment.bytes", "message.max.bytes", "compression.type"} <= DYNAMIC_CONFIGS


def _manager(cfg: KafkaConfig) -> ConfigurationControlManager:
    return ConfigurationControlManager(EMPTY_IMAGE, validate_topic_config, DynamicBrokerConfigPolicy(cfg))


def _apply(mgr: ConfigurationControlManager, recs: list[Any]) -> MetadataDelta:
    """Replay ``recs`` over the manager's image and give it the next image."""
    delta = MetadataDelta(mgr.image)
    for name, rec in recs:
        delta.replay(name, rec)
    mgr.image = delta.apply()
    return delta


def test_controller_records_for_broker_resources() -> None:
    cfg = _static()
    mgr = _manager(cfg)
    code, msg, recs = mgr.incremental_alter_configs(
        BROKER_RESOURCE, "", [{"name": "log.retention.ms", "config_operation": OP_SET, "value": "1000"}]
    )
    assert (code, msg) == (Errors.NONE, None)
    assert recs == [
        ("ConfigRecord", {"resource_type": BROKER_RESOURCE, "resource_name": "", "name": "log.retention.ms", "value": "1000"})
    ]
    delta = _apply(mgr, recs)
    assert delta.changed_broker_configs == {""} and mgr.image.broker_config("") == {"log.retention.ms": "1000"}

    code, _, recs = mgr.incremental_alter_configs(
        BROKER_RESOURCE, "1", [{"name": "log.cleanup.policy", "config_operation": OP_APPEND, "value": "compact"}]
    )
    assert code == Errors.NONE and recs[0][1]["value"] == "delete,compact"
    code, msg, _ = mgr.incremental_alter_configs(
        BROKER_RESOURCE, "1", [{"name": "log.segment.bytes", "config_operation": OP_APPEND, "value": "1"}]
    )
    assert (code, msg) == (Errors.INVALID_CONFIG, "Config value append is not allowed for config key: log.segment.bytes")

    code, _, recs = mgr.incremental_alter_configs(
        BROKER_RESOURCE, "", [{"name": "log.retention.ms", "config_operation": OP_DELETE, "value": None}]
    )
    assert code == Errors.NONE and recs[0][1]["value"] is None
    _apply(mgr, recs)
    assert mgr.image.broker_config("") == {}


def test_controller_refusals_for_broker_resources() -> None:
    mgr = _manager(_static())
    # Another broker's id is not refused here: the broker the client sent it to checked that it
    # was its own (AdminApis, as Kafka's ConfigAdminManager) and forwarded it (this test used to
    # expect the controller to refuse "2", which blocked per-broker configs of broker-only nodes).
    code, _, recs = mgr.incremental_alter_configs(
        BROKER_RESOURCE, "2", [{"name": "log.retention.ms", "config_operation": OP_SET, "value": "1"}]
    )
    assert code == Errors.NONE and recs[0][1]["resource_name"] == "2"
    cases = [
        ("one", "log.retention.ms", "1", "Node id must be an integer, but it is: one"),
        ("", "log.cleaner.threads", "2", "Cannot update these configs dynamically: [log.cleaner.threads]"),
    ]
    for name, key, value, message in cases:
        for fn in (mgr.incremental_alter_configs, mgr.alter_configs):
            c = {"name": key, "config_operation": OP_SET, "value": value}
            code, msg, recs = fn(BROKER_RESOURCE, name, [c])
            assert (code, msg, recs) == (Errors.INVALID_REQUEST, message, [])
    code, msg, _ = mgr.alter_configs(BROKER_RESOURCE, "", [{"name": "log.retention.ms", "value": None}])
    assert (code, msg) == (Errors.INVALID_REQUEST, "Null value not supported for : log.retention.ms")
    code, _, recs = mgr.alter_configs(BROKER_RESOURCE, "1", [{"name": "compression.type", "value": "zstd"}])
    assert code == Errors.NONE and recs[0][1]["resource_name"] == "1"


def test_describe_broker_resources() -> None:
    cfg = _static()
    cfg.update_dynamic({"log.retention.ms": "5000", "log.segment.bytes": "4096"}, {"log.segment.bytes": "8192"})

    defaults = {e.name: e for e in describe_broker_config(cfg, "")}
    assert set(defaults) == {"log.retention.ms", "log.segment.bytes"}
    seg = defaults["log.segment.bytes"]
    assert (seg.value, seg.source, seg.read_only) == ("4096", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, False)
    assert _syn(seg) == [("log.segment.bytes", "4096", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]

    mine = {e.name: e for e in describe_broker_config(cfg, "1")}
    seg = mine["log.segment.bytes"]
    assert (seg.value, seg.source) == ("8192", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert _syn(seg) == [
        ("log.segment.bytes", "8192", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.segment.bytes", "4096", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG),
    ]
    ret = mine["log.retention.ms"]
    assert (ret.value, ret.source) == ("5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert _syn(ret) == [
        ("log.retention.ms", "5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", "1", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    # the hours synonym: only itself and below
    hours = mine["log.retention.hours"]
    assert _syn(hours) == [
        ("log.retention.hours", "1", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    assert hours.read_only and mine["num.partitions"].read_only
    assert mine["num.partitions"].source == ConfigSource.DEFAULT_CONFIG


def test_stored_foreign_key_does_not_block_other_changes() -> None:
    # e.g. Apache Kafka's metadata log with log.cleaner.threads set dynamically
    cfg = _static()
    cfg.update_dynamic({"log.cleaner.threads": "2"}, {})
    mgr = _manager(cfg)
    _apply(mgr, [("ConfigRecord", {
        "resource_type": BROKER_RESOURCE, "resource_name": "", "name": "log.cleaner.threads", "value": "2",
    })])
    code, msg, recs = mgr.incremental_alter_configs(
        BROKER_RESOURCE, "", [{"name": "log.retention.ms", "config_operation": OP_SET, "value": "1000"}]
    )
    assert (code, msg) == (Errors.NONE, None) and [r[1]["name"] for r in recs] == ["log.retention.ms"]
    code, msg, _ = mgr.incremental_alter_configs(
        BROKER_RESOURCE, "", [{"name": "log.cleaner.threads", "config_operation": OP_SET, "value": "3"}]
    )
    assert (code, msg) == (Errors.INVALID_REQUEST, "Cannot update these configs dynamically: [log.cleaner.threads]")


def test_num_replica_fetchers_is_dynamic_within_kafkas_bounds() -> None:
    cfg = _static(**{"num.replica.fetchers": "2"})
    assert validate_dynamic_configs(cfg, "1", {"num.replica.fetchers": "4"}) is None
    assert validate_dynamic_configs(cfg, "", {"num.replica.fetchers": "5"}) == (
        "Dynamic thread count update validation failed for num.replica.fetchers=5, "
        "value should not be greater than double the current value 2"
    )
    cfg = _static(**{"num.replica.fetchers": "6"})
    assert validate_dynamic_configs(cfg, "1", {"num.replica.fetchers": "2"}) == (
        "Dynamic thread count update validation failed for num.replica.fetchers=2, "
        "value should be at least half the current value 6"
    )
    for key in ("num.io.threads", "num.network.threads", "background.threads"):
        assert validate_dynamic_configs(cfg, "1", {key: "4"}) == f"Cannot update these configs dynamically: [{key}]"


def test_unknown_and_password_broker_keys_are_described_as_sensitive() -> None:
    cfg = _static(**{"my.plugin.secret": "hunter2"})
    e = {x.name: x for x in describe_broker_config(cfg, "1")}["my.plugin.secret"]
    assert (e.value, e.is_sensitive, _syn(e)) == (None, True, [("my.plugin.secret", None, ConfigSource.STATIC_BROKER_CONFIG)])
    e = {x.name: x for x in describe_broker_config(cfg, "1")}["log.retention.hours"]
    assert (e.value, e.is_sensitive) == ("1", False)
