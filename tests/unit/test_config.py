"""KafkaConfig, topic configs, properties parsing and meta.properties."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from odradek.server.config_defs import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigSource,
    build_log_config,
    describe_topic_config,
    validate_topic_config,
)
from odradek.server.dynamic_broker_config import describe_broker_config
from odradek.server.kafka_config import (
    ConfigError,
    KafkaConfig,
    Listener,
    QuorumVoter,
    parse_properties,
)
from odradek.server.meta_properties import ensure_formatted, read_meta_properties

KAFKA4_SERVER_PROPERTIES = r"""
############################# Server Basics #############################
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
#log.flush.interval.messages=10000
#log.flush.interval.ms=1000
log.retention.hours=168
#log.retention.bytes=1073741824
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""

KAFKA3_SERVER_PROPERTIES = r"""
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def test_defaults() -> None:
    c = KafkaConfig({})
    assert c.node_id == 1
    assert c.process_roles == ["broker", "controller"]
    assert c.listeners == [
        Listener("PLAINTEXT", "localhost", 9092),
        Listener("CONTROLLER", "localhost", 9093),
    ]
    assert c.advertised_listeners == [Listener("PLAINTEXT", "localhost", 9092)]
    assert c.controller_listener_names == ["CONTROLLER"]
    assert c.inter_broker_listener_name == "PLAINTEXT"
    assert c.controller_quorum_voters == [QuorumVoter(1, "localhost", 9093)]
    assert c.controller_quorum_bootstrap_servers == ["localhost:9093"]
    assert c.log_dirs == ["./odradek-data"]
    assert c.metadata_log_dir == "./odradek-data"
    assert c.num_partitions == 1
    assert c.default_replication_factor == 1
    assert c.auto_create_topics_enable is True
    assert c.delete_topic_enable is True
    assert c.socket_request_max_bytes == 104857600
    assert c.message_max_bytes == 1048588
    assert c.log_retention_check_interval_ms == 300000
    assert c.log_flush_scheduler_interval_ms == 2**63 - 1
    assert c.log_flush_offset_checkpoint_interval_ms == 60000
    assert c.replica_high_watermark_checkpoint_interval_ms == 5000
    assert c.offsets_topic_num_partitions == 50
    assert c.offsets_topic_replication_factor == 3
    assert c.group_initial_rebalance_delay_ms == 3000
    assert c.group_min_session_timeout_ms == 6000
    assert c.group_max_session_timeout_ms == 1800000
    assert c.offsets_retention_minutes == 10080
    assert c.offset_metadata_max_bytes == 4096
    assert c.broker_rack is None
    assert c.log_retention_ms == 168 * 3600 * 1000
    assert c.log_roll_ms == 168 * 3600 * 1000
    assert c.get("log.cleanup.policy") == ["delete"]
    assert c.get("log.preallocate") is False
    assert c.get("log.cleaner.min.cleanable.ratio") == 0.5
    assert c.unknown_keys == []


def test_typed_get_and_raw() -> None:
    c = KafkaConfig({"num.partitions": " 3 ", "log.dirs": "/a, /b", "broker.rack": "r1"})
    assert c.get("num.partitions") == 3
    assert c.raw("num.partitions") == " 3 "
    assert c.raw("message.max.bytes") == "1048588"
    assert c.log_dirs == ["/a", "/b"]
    assert c.metadata_log_dir == "/a"
    assert c.broker_rack == "r1"
    assert c.originals == {"num.partitions": " 3 ", "log.dirs": "/a, /b", "broker.rack": "r1"}
    assert c.is_set("log.dirs") and not c.is_set("log.dir")


def test_log_dir_fallback() -> None:
    assert KafkaConfig({"log.dir": "/x"}).log_dirs == ["/x"]
    assert KafkaConfig({"log.dir": "/x", "log.dirs": "/y"}).log_dirs == ["/y"]


def test_retention_precedence() -> None:
    assert KafkaConfig({"log.retention.hours": "1"}).log_retention_ms == 3_600_000
    c = KafkaConfig({"log.retention.hours": "1", "log.retention.minutes": "2"})
    assert c.log_retention_ms == 120_000
    c = KafkaConfig(
        {"log.retention.hours": "1", "log.retention.minutes": "2", "log.retention.ms": "5"}
    )
    assert c.log_retention_ms == 5
    assert KafkaConfig({"log.retention.hours": "-1"}).log_retention_ms == -1


def test_unknown_key_warning_and_informational_keys() -> None:
    # ssl.* at Kafka's default is informational (a set keystore is refused: see below)
    c = KafkaConfig({"no.such.key": "1", "ssl.keystore.type": "JKS", "num.io.threads": "4"})
    assert c.unknown_keys == ["no.such.key"]
    assert c.get("no.such.key") == "1"


@pytest.mark.parametrize("text", [KAFKA4_SERVER_PROPERTIES, KAFKA3_SERVER_PROPERTIES])
def test_real_kafka_server_properties_load_without_warnings(text: str, tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(text)
    c = KafkaConfig.from_file(str(path))
    assert c.unknown_keys == []
    assert c.log_dirs == ["/tmp/kraft-combined-logs"]
    assert [lst.port for lst in c.listeners] == [9092, 9093]
    assert c.listeners[0].host == ""
    assert c.advertised_listeners == [Listener("PLAINTEXT", "localhost", 9092)]
    assert c.offsets_topic_replication_factor == 1


def test_from_file_overrides_win(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("num.partitions=3\nlog.dirs=/from/file\n")
    c = KafkaConfig.from_file(str(path), {"num.partitions": "7"})
    assert c.num_partitions == 7
    assert c.log_dirs == ["/from/file"]


def test_from_file_missing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read configuration file"):
        KafkaConfig.from_file(str(tmp_path / "nope.properties"))


def test_parse_properties_syntax() -> None:
    text = (
        "# comment\n"
        "! another comment\n"
        "   \n"
        "a=1\n"
        "b: 2\n"
        "c 3\n"
        "  d  =  spaced value  \n"
        "e=first,\\\n"
        "    second,\\\n"
        "    third\n"
        "f=tab\\there\\nnewline\n"
        "g\\=key=with equals\n"
        "h=\\u0041BC\n"
        "i=ends with backslash\\\\\n"
        "j=\n"
        "a=override\n"
    )
    props = parse_properties(text)
    assert props == {
        "a": "override",
        "b": "2",
        "c": "3",
        "d": "spaced value  ",
        "e": "first,second,third",
        "f": "tab\there\nnewline",
        "g=key": "with equals",
        "h": "ABC",
        "i": "ends with backslash\\",
        "j": "",
    }


@pytest.mark.parametrize(
    ("props", "needle"),
    [
        ({"node.id": "-1"}, "Invalid value -1 for configuration node.id: Value must be at least 0"),
        ({"node.id": "one"}, "Invalid value one for configuration node.id"),
        ({"num.partitions": "0"}, "configuration num.partitions: Value must be at least 1"),
        ({"message.max.bytes": "99999999999"}, "configuration message.max.bytes"),
        ({"auto.create.topics.enable": "yes"}, "either true or false"),
        ({"log.cleaner.min.cleanable.ratio": "1.5"}, "Value must be in [0, 1]"),
        ({"log.cleanup.policy": "delete,shred"}, "configuration log.cleanup.policy"),
        ({"log.message.timestamp.type": "Now"}, "configuration log.message.timestamp.type"),
        ({"compression.type": "brotli"}, "configuration compression.type"),
        ({"process.roles": "broker,gardener"}, "configuration process.roles"),
        ({"process.roles": "broker,broker"}, "configuration process.roles"),
        ({"listeners": "PLAINTEXT:/localhost:9092"}, "configuration listeners"),
        ({"listeners": "PLAINTEXT://localhost:99999,CONTROLLER://localhost:9093"}, "port"),
        (
            {"listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9092"},
            "different port",
        ),
        (
            {"listeners": "PLAINTEXT://localhost:9092,PLAINTEXT://localhost:9093"},
            "different name",
        ),
        ({"listeners": "PLAINTEXT://localhost:9092"}, "controller.listener.names"),
        (
            {"listeners": "FOO://localhost:9092,CONTROLLER://localhost:9093"},
            "listener.security.protocol.map",
        ),
        (
            {"process.roles": "broker", "listeners": "PLAINTEXT://localhost:9092"},
            "controller.quorum.bootstrap.servers",
        ),
        ({"controller.quorum.voters": "2@localhost:9093"}, "node.id=1 must be one of the voters"),
        ({"controller.quorum.voters": "localhost:9093"}, "id@host:port"),
        ({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"}, "nonroutable"),
        ({"inter.broker.listener.name": "INTERNAL"}, "inter.broker.listener.name=INTERNAL"),
        ({"node.id": "1", "broker.id": "2"}, "broker.id=2 and node.id=1 differ"),
        ({"process.roles": ""}, "process.roles is empty and zookeeper.connect is not set"),
        (
            {"group.min.session.timeout.ms": "10", "group.max.session.timeout.ms": "5"},
            "group.min.session.timeout.ms=10",
        ),
        ({"log.segment.bytes": "10"}, "configuration log.segment.bytes: Value must be at least 14"),
        (
            {"max.connections.per.ip": "0"},
            "If max.connections.per.ip is zero, max.connections.per.ip.overrides must be set",
        ),
        (
            {"max.connections.per.ip.overrides": "127.0.0.1"},
            "Invalid value 127.0.0.1 for configuration max.connections.per.ip.overrides",
        ),
        ({"max.connections.per.ip.overrides": "127.0.0.1:many"}, "is not an integer"),
        ({"max.connections.per.ip.overrides": "10.0.0.1:-3"}, "between 0 and 2147483647"),
        ({"max.connections": "-1"}, "configuration max.connections: Value must be at least 0"),
    ],
)
def test_invalid_values_refused(props: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        KafkaConfig(props)
    assert needle in str(info.value)


def test_broker_only() -> None:
    c = KafkaConfig({"process.roles": "broker", "node.id": "2",
                     "listeners": "PLAINTEXT://localhost:9094",
                     "controller.quorum.bootstrap.servers": "localhost:9093"})
    assert c.controller_quorum_bootstrap_servers == ["localhost:9093"]
    assert c.controller_quorum_voters == []


def test_ipv6_and_wildcard_listeners() -> None:
    c = KafkaConfig({"listeners": "PLAINTEXT://[::1]:0,CONTROLLER://:0"})
    assert c.listeners[0] == Listener("PLAINTEXT", "::1", 0)
    assert str(c.listeners[0]) == "PLAINTEXT://[::1]:0"
    assert c.controller_quorum_voters == [QuorumVoter(1, "localhost", 0)]


def test_topic_config_validation() -> None:
    assert validate_topic_config("retention.ms", "1000") is None
    assert validate_topic_config("retention.ms", "-1") is None
    assert validate_topic_config("cleanup.policy", "compact,delete") is None
    assert validate_topic_config("segment.bytes", "1024") is None
    err = validate_topic_config("no.such", "1")
    assert err is not None and "no.such" in err
    err = validate_topic_config("retention.ms", "-5")
    assert err is not None and "retention.ms" in err and "-5" in err
    err = validate_topic_config("min.cleanable.dirty.ratio", "2")
    assert err is not None and "min.cleanable.dirty.ratio" in err
    err = validate_topic_config("cleanup.policy", "forever")
    assert err is not None and "cleanup.policy" in err
    err = validate_topic_config("segment.bytes", "13")
    assert err is not None
    err = validate_topic_config("message.timestamp.type", "Whenever")
    assert err is not None
    err = validate_topic_config("preallocate", "maybe")
    assert err is not None
    for key, defn in TOPIC_CONFIGS.items():
        if defn.default is not None:
            assert validate_topic_config(key, defn.default) is None, key
        if defn.broker_key is not None:
            assert defn.broker_key in BROKER_CONFIGS, key


def test_build_log_config_defaults() -> None:
    lc = build_log_config(KafkaConfig({}), {})
    assert lc.segment_bytes == 1073741824
    assert lc.retention_ms == 604800000
    assert lc.segment_ms == 604800000
    assert lc.cleanup_policy == ("delete",)
    assert lc.max_message_bytes == 1048588
    assert lc.flush_ms == 2**63 - 1
    assert lc.raw["retention.ms"] == "604800000"
    assert lc.raw["cleanup.policy"] == "delete"
    assert set(lc.raw) == set(TOPIC_CONFIGS)


def test_build_log_config_broker_and_topic_precedence() -> None:
    broker = KafkaConfig(
        {
            "log.retention.hours": "1",
            "log.segment.bytes": "2048",
            "message.max.bytes": "5000",
            "log.cleanup.policy": "compact",
            "log.roll.hours": "2",
            "log.flush.interval.ms": "1000",
            "log.message.timestamp.type": "LogAppendTime",
            "log.preallocate": "true",
        }
    )
    lc = build_log_config(broker, {})
    assert lc.retention_ms == 3_600_000
    assert lc.segment_bytes == 2048
    assert lc.max_message_bytes == 5000
    assert lc.cleanup_policy == ("compact",)
    assert lc.compact and not lc.delete
    assert lc.segment_ms == 7_200_000
    assert lc.flush_ms == 1000
    assert lc.log_append_time
    assert lc.preallocate is True
    lc = build_log_config(
        broker, {"retention.ms": "1000", "cleanup.policy": "compact,delete", "segment.bytes": "1024"}
    )
    assert lc.retention_ms == 1000
    assert lc.cleanup_policy == ("compact", "delete")
    assert lc.segment_bytes == 1024
    assert lc.raw["retention.ms"] == "1000"


def test_describe_topic_config_sources_and_synonyms() -> None:
    broker = KafkaConfig({"log.retention.hours": "1"})
    entries = {e.name: e for e in describe_topic_config(broker, {"segment.bytes": "1024"})}
    seg = entries["segment.bytes"]
    assert seg.value == "1024"
    assert seg.source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert [(s.name, s.source) for s in seg.synonyms] == [
        ("segment.bytes", 1),
        ("log.segment.bytes", 5),
    ]
    ret = entries["retention.ms"]
    assert ret.value == "3600000"
    # Kafka 4.3.1 (observed with kafka-configs --describe --all): the broker synonyms start at
    # the first broker key, log.retention.ms; set nowhere, it lists none and says DEFAULT_CONFIG.
    assert ret.source == ConfigSource.DEFAULT_CONFIG
    assert ret.synonyms == []
    broker = KafkaConfig({"log.retention.ms": "60000", "log.retention.hours": "1"})
    ret = {e.name: e for e in describe_topic_config(broker, {})}["retention.ms"]
    assert (ret.value, ret.source) == ("60000", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in ret.synonyms] == [
        ("log.retention.ms", "60000", 4),
        ("log.retention.hours", "1", 4),
        ("log.retention.hours", "168", 5),
    ]
    mmb = entries["max.message.bytes"]
    assert (mmb.value, mmb.source, mmb.read_only, mmb.is_sensitive) == ("1048588", 5, False, False)
    name, value, read_only, source, sensitive, synonyms = mmb
    assert name == "max.message.bytes"


def test_describe_broker_config() -> None:
    entries = {e.name: e for e in describe_broker_config(KafkaConfig({"num.partitions": "4"}))}
    assert entries["num.partitions"].value == "4"
    assert entries["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG
    assert entries["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG
    assert entries["message.max.bytes"].value == "1048588"


def test_meta_properties_round_trip(tmp_path: Path) -> None:
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    cluster_id = ensure_formatted(dirs, 1)
    assert len(cluster_id) == 22
    props = [read_meta_properties(os.path.join(d, "meta.properties")) for d in dirs]
    for p in props:
        assert p["cluster.id"] == cluster_id
        assert p["node.id"] == "1"
        assert p["version"] == "1"
        assert len(p["directory.id"]) == 22
    assert props[0]["directory.id"] != props[1]["directory.id"]
    text = (tmp_path / "a" / "meta.properties").read_text()
    assert text.startswith("#")
    assert ensure_formatted(dirs, 1) == cluster_id
    # A new, empty directory joins the same cluster.
    dirs.append(str(tmp_path / "c"))
    assert ensure_formatted(dirs, 1) == cluster_id
    assert read_meta_properties(os.path.join(dirs[2], "meta.properties"))["cluster.id"] == cluster_id
    assert not any(name.endswith(".tmp") for name in os.listdir(dirs[0]))


def test_meta_properties_node_id_mismatch(tmp_path: Path) -> None:
    ensure_formatted([str(tmp_path)], 1)
    with pytest.raises(ConfigError, match="node.id"):
        ensure_formatted([str(tmp_path)], 2)


def test_meta_properties_cluster_id_mismatch(tmp_path: Path) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    ensure_formatted([a], 1)
    ensure_formatted([b], 1)
    with pytest.raises(ConfigError, match="different clusters"):
        ensure_formatted([a, b], 1)


# ---- ZooKeeper mode; protocols not implemented are refused --------------------------------------

ZK_SERVER_PROPERTIES = """
broker.id=0
listeners=PLAINTEXT://:9092
log.dirs=/tmp/kafka-logs
zookeeper.connect=localhost:2181
zookeeper.connection.timeout.ms=18000
"""


@pytest.mark.parametrize(
    "props",
    [
        {"process.roles": "", "zookeeper.connect": "localhost:2181", "listeners": "PLAINTEXT://localhost:9092"},
        {"zookeeper.connect": "localhost:2181", "listeners": "PLAINTEXT://localhost:9092"},
    ],
)
def test_zookeeper_mode_is_accepted(props: dict[str, str]) -> None:
    """zookeeper.connect without process.roles (or with it empty) is ZooKeeper mode (Kafka's
    KafkaServer): no KRaft role, no controller listener needed."""
    cfg = KafkaConfig(props)
    assert cfg.is_zk_mode and cfg.process_roles == [] and not cfg.is_kraft


_ZK_PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                  'password="admin-secret" user_admin="admin-secret";')


@pytest.mark.parametrize(
    "props",
    [
        {"listeners": "SSL://localhost:9092", "inter.broker.listener.name": "SSL"},
        {"listeners": "SASL_SSL://localhost:9092,CLIENT://localhost:9093", "inter.broker.listener.name": "SASL_SSL",
         "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CLIENT:SASL_PLAINTEXT",
         "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
         "sasl.jaas.config": _ZK_PLAIN_JAAS},
        {"listeners": "SASL_PLAINTEXT://localhost:9092", "inter.broker.listener.name": "SASL_PLAINTEXT",
         "sasl.enabled.mechanisms": "SCRAM-SHA-512", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
         "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                             'username="admin" password="admin-secret";'},
    ],
)
def test_zookeeper_mode_secured_listeners_accepted(props: dict[str, str]) -> None:
    """TLS and SASL (PLAIN, SCRAM) listeners, inter-broker ones included, in ZooKeeper mode; the broker
    logs in to the other brokers (and to the controller, a broker) with the inter-broker login."""
    from odradek.security.sasl_config import client_logins

    cfg = KafkaConfig({"zookeeper.connect": "localhost:2181", "broker.id": "0", **props})
    logins = client_logins(cfg)
    if cfg.listener_security_protocol(cfg.inter_broker_listener_name).startswith("SASL"):
        assert logins["broker"].username == logins["controller"].username == "admin"
    else:
        assert logins == {}


@pytest.mark.parametrize(
    ("props", "needle"),
    [
        ({"zookeeper.connect": "localhost:2181", "process.roles": "broker,controller"},
         "cannot be combined with process.roles"),
        ({"process.roles": ""}, "process.roles is empty and zookeeper.connect is not set"),
    ],
)
def test_zookeeper_and_kraft_mixed_or_neither_refused(props: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        KafkaConfig(props)


def test_zookeeper_server_properties_accepted(tmp_path: Path) -> None:
    """Kafka's own ZooKeeper-mode server.properties loads as a ZooKeeper-mode configuration."""
    path = tmp_path / "server.properties"
    path.write_text(ZK_SERVER_PROPERTIES)
    cfg = KafkaConfig.from_file(str(path))
    assert cfg.is_zk_mode and cfg.node_id == 0
    assert cfg.get("zookeeper.connection.timeout.ms") == 18000


_SASL_MAP = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,INTERNAL:SASL_PLAINTEXT"


@pytest.mark.parametrize(
    ("props", "needle"),
    [
        ({"listeners": "SASL_PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
          "inter.broker.listener.name": "SASL_PLAINTEXT"},
         "listener SASL_PLAINTEXT: SASL mechanism(s) GSSAPI are not supported"),
        ({"listeners": "SASL_SSL://localhost:9092,CONTROLLER://localhost:9093",
          "inter.broker.listener.name": "SASL_SSL"},
         "listener SASL_SSL: SASL mechanism(s) GSSAPI are not supported"),
        # a name mapped to SASL in listener.security.protocol.map
        ({"listeners": "PLAINTEXT://localhost:9092,INTERNAL://localhost:9094,CONTROLLER://localhost:9093",
          "listener.security.protocol.map": _SASL_MAP.replace("SASL_PLAINTEXT", "SASL_SSL")},
         "listener INTERNAL: SASL mechanism(s) GSSAPI are not supported"),
        # the controller listener too
        ({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL"},
         "listener CONTROLLER: SASL mechanism(s) GSSAPI are not supported"),
        # TLS settings Odradek does not implement (SSL listeners themselves are served)
        ({"ssl.engine.factory.class": "com.example.Engine"}, "ssl.engine.factory.class=com.example.Engine"),
        ({"ssl.keymanager.algorithm": "PKIX"}, "ssl.keymanager.algorithm=PKIX"),
        ({"listener.name.internal.ssl.provider": "BC"}, "listener.name.internal.ssl.provider=BC"),
        ({"sasl.enabled.mechanisms": "GSSAPI,PLAIN"}, "sasl.enabled.mechanisms=GSSAPI,PLAIN: SASL mechanism GSSAPI"),
        ({"sasl.kerberos.service.name": "kafka"}, "sasl.kerberos.service.name=kafka"),
        ({"listeners": "PLAINTEXT://localhost:9092,SASL_PLAINTEXT://localhost:9094,CONTROLLER://localhost:9093",
          "sasl.enabled.mechanisms": "PLAIN"},
         "PLAIN needs its users in listener.name.sasl_plaintext.plain.sasl.jaas.config"),
        ({"listeners": "SASL_PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
          "inter.broker.listener.name": "SASL_PLAINTEXT", "sasl.enabled.mechanisms": "SCRAM-SHA-256",
          "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"},
         "has no sasl.jaas.config for SCRAM-SHA-256"),
        ({"listener.name.plaintext.plain.sasl.jaas.config": "org.apache...PlainLoginModule required;"},
         "listener.name.plaintext.plain.sasl.jaas.config=(hidden)"),
        ({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"},
         "the only authorizer supported is org.apache.kafka.metadata.authorizer.StandardAuthorizer"),
        ({"principal.builder.class": "com.example.Builder"}, "principal.builder.class"),
        ({"delegation.token.secret.key": "s3cret"}, "delegation.token.secret.key=(hidden)"),
        ({"create.topic.policy.class.name": "com.example.Policy"}, "topic policies"),
        ({"alter.config.policy.class.name": "com.example.Policy"}, "config policies"),
        ({"remote.log.storage.system.enable": "true"}, "tiered storage"),
        ({"control.plane.listener.name": "CONTROLLER"}, "control.plane.listener.name"),
        ({"client.quota.callback.class": "com.example.Callback"}, "custom client quota callbacks"),
    ],
)
def test_security_and_unimplemented_modes_refused(props: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        KafkaConfig(props)
    message = str(info.value)
    assert message.startswith("not supported: ")
    assert needle in message
    assert "s3cret" not in message and "=secret" not in message


def test_all_unsupported_settings_named_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        KafkaConfig({"listeners": "SASL_SSL://localhost:9092,CONTROLLER://localhost:9093",
                     "inter.broker.listener.name": "SASL_SSL",
                     "authorizer.class.name": "x.Authorizer", "sasl.jaas.config": "x"})
    message = str(info.value)
    for needle in ("listener SASL_SSL: SASL mechanism(s) GSSAPI", "authorizer.class.name", "sasl.jaas.config=(hidden)"):
        assert needle in message


@pytest.mark.parametrize(
    "props",
    [
        # the defaults of Kafka's server.properties, set explicitly, configure nothing
        {"ssl.endpoint.identification.algorithm": "https", "ssl.client.auth": "none",
         "sasl.enabled.mechanisms": "GSSAPI", "ssl.enabled.protocols": "TLSv1.2, TLSv1.3",
         "sasl.mechanism.inter.broker.protocol": "GSSAPI", "ssl.keystore.location": "",
         "authorizer.class.name": "", "remote.log.storage.system.enable": "false",
         "security.inter.broker.protocol": "PLAINTEXT"},
        # a map naming SSL and SASL listeners that are not used (Kafka's default map)
        {"listener.security.protocol.map":
         "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"},
    ],
)
def test_security_defaults_accepted(props: dict[str, str]) -> None:
    KafkaConfig(props)
