"""StandardAuthorizer, its ACL index, filters, the AclControlManager and the per-API checks."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

from odradek.controller.acl_control_manager import AclControlManager
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import EMPTY_IMAGE
from odradek.metadata.image_writer import write_image
from odradek.network.request_channel import CloseConnection, ConnectionInfo
from odradek.protocol.errors import Errors
from odradek.protocol.header import RequestHeader
from odradek.security import api_authorization as checks
from odradek.security.acl import (
    AclBindingFilter,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from odradek.security.auth_helper import AuthHelper, Narrowed, client_host
from odradek.security.kafka_principal import KafkaPrincipal
from odradek.security.standard_authorizer import StandardAuthorizer, parse_super_users
from odradek.server.acl_operations import AclOperation as Op
from odradek.server.acl_operations import to_bitfield
from odradek.server.api_dispatcher import RequestContext
from odradek.server.kafka_config import ConfigError, KafkaConfig

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
HOST = "10.0.0.1"


def acl(rtype: ResourceType, name: str, principal: str, op: Op, perm: AclPermissionType = ALLOW,
        pattern: PatternType = LIT, host: str = "*") -> StandardAcl:
    return StandardAcl(rtype, name, pattern, principal, host, op, perm)


def authorizer(*acls: StandardAcl, super_users: str = "", allow_everyone: bool = False) -> StandardAuthorizer:
    a = StandardAuthorizer(parse_super_users(super_users), allow_everyone)
    for x in acls:
        a.cache.add(uuid.uuid4(), x)
    return a


def ok(a: StandardAuthorizer, principal: str, op: Op, rtype: ResourceType, name: str, host: str = HOST) -> bool:
    return a.authorize(principal, host, op, rtype, name)


# -- matching rules -------------------------------------------------------------------------------


def test_literal_acl_matches_only_its_name() -> None:
    a = authorizer(acl(T, "orders", "User:alice", Op.READ))
    assert ok(a, "User:alice", Op.READ, T, "orders")
    assert not ok(a, "User:alice", Op.READ, T, "orders2")
    assert not ok(a, "User:alice", Op.READ, T, "order")
    assert not ok(a, "User:bob", Op.READ, T, "orders")
    assert not ok(a, "User:alice", Op.WRITE, T, "orders")
    assert not ok(a, "User:alice", Op.READ, G, "orders")  # another resource type


def test_prefixed_acl_matches_names_starting_with_it() -> None:
    a = authorizer(acl(T, "pay", "User:alice", Op.WRITE, pattern=PRE))
    assert ok(a, "User:alice", Op.WRITE, T, "pay")
    assert ok(a, "User:alice", Op.WRITE, T, "payments")
    assert not ok(a, "User:alice", Op.WRITE, T, "pa")
    assert not ok(a, "User:alice", Op.WRITE, T, "xpayments")


def test_wildcard_resource_and_wildcard_principal() -> None:
    a = authorizer(acl(T, "*", "User:alice", Op.READ), acl(G, "g1", "User:*", Op.READ))
    assert ok(a, "User:alice", Op.READ, T, "anything")
    assert not ok(a, "User:bob", Op.READ, T, "anything")
    assert ok(a, "User:bob", Op.READ, G, "g1") and ok(a, "User:ANONYMOUS", Op.READ, G, "g1")
    assert not ok(a, "User:bob", Op.READ, G, "g2")


@pytest.mark.parametrize(
    "deny",
    [
        acl(T, "orders", "User:alice", Op.READ, DENY),
        acl(T, "*", "User:alice", Op.READ, DENY),
        acl(T, "ord", "User:alice", Op.READ, DENY, PRE),
        acl(T, "orders", "User:*", Op.READ, DENY),
        acl(T, "orders", "User:alice", Op.ALL, DENY),
        acl(T, "orders", "User:alice", Op.READ, DENY, host=HOST),
    ],
)
def test_deny_overrides_allow(deny: StandardAcl) -> None:
    a = authorizer(acl(T, "orders", "User:alice", Op.READ), acl(T, "*", "User:alice", Op.ALL), deny)
    assert not ok(a, "User:alice", Op.READ, T, "orders")
    # the deny is about READ on orders only
    assert ok(a, "User:alice", Op.WRITE, T, "orders") or deny.operation == Op.ALL


def test_hosts() -> None:
    a = authorizer(acl(T, "orders", "User:alice", Op.READ, host="10.0.0.1"),
                   acl(T, "orders", "User:alice", Op.WRITE, DENY, host="10.0.0.2"),
                   acl(T, "orders", "User:alice", Op.WRITE))
    assert ok(a, "User:alice", Op.READ, T, "orders", host="10.0.0.1")
    assert not ok(a, "User:alice", Op.READ, T, "orders", host="10.0.0.2")
    assert ok(a, "User:alice", Op.WRITE, T, "orders", host="10.0.0.1")
    assert not ok(a, "User:alice", Op.WRITE, T, "orders", host="10.0.0.2")
    assert client_host("127.0.0.1:5555") == "127.0.0.1" and client_host("[::1]:5555") == "::1"


def test_super_users_may_do_everything_even_when_denied() -> None:
    assert parse_super_users("User:admin; User:broker;") == {"User:admin", "User:broker"}
    a = authorizer(acl(T, "*", "User:admin", Op.ALL, DENY), super_users="User:admin;User:broker")
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.CLUSTER_ACTION):
        assert ok(a, "User:admin", op, T, "orders") and ok(a, "User:broker", op, C, "kafka-cluster")
    assert not ok(a, "User:alice", Op.READ, T, "orders")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_describe_is_implied_by_read_write_delete_alter(granted: Op) -> None:
    a = authorizer(acl(T, "t", "User:alice", granted))
    assert ok(a, "User:alice", Op.DESCRIBE, T, "t")


def test_implications() -> None:
    a = authorizer(acl(T, "t", "User:alice", Op.ALTER_CONFIGS), acl(T, "u", "User:alice", Op.CREATE))
    assert ok(a, "User:alice", Op.DESCRIBE_CONFIGS, T, "t")
    assert not ok(a, "User:alice", Op.DESCRIBE, T, "t")  # ALTER_CONFIGS does not imply DESCRIBE
    assert not ok(a, "User:alice", Op.DESCRIBE, T, "u")  # nor does CREATE
    # ALL allows every operation; a DENY of READ does not deny the DESCRIBE READ would imply
    b = authorizer(acl(T, "t", "User:alice", Op.ALL), acl(T, "t", "User:alice", Op.READ, DENY))
    assert ok(b, "User:alice", Op.DESCRIBE, T, "t") and ok(b, "User:alice", Op.ALTER_CONFIGS, T, "t")
    assert not ok(b, "User:alice", Op.READ, T, "t")
    c = authorizer(acl(T, "t", "User:alice", Op.ALL), acl(T, "t", "User:alice", Op.DESCRIBE, DENY))
    assert not ok(c, "User:alice", Op.DESCRIBE, T, "t") and ok(c, "User:alice", Op.READ, T, "t")


def test_allow_everyone_if_no_acl_found() -> None:
    default = authorizer(acl(T, "t", "User:alice", Op.READ))
    everyone = authorizer(acl(T, "t", "User:alice", Op.READ), allow_everyone=True)
    assert not ok(default, "User:bob", Op.READ, T, "other")
    assert ok(everyone, "User:bob", Op.READ, T, "other")  # no ACL on "other"
    assert not ok(everyone, "User:bob", Op.READ, T, "t")  # "t" has ACLs, none for bob
    assert not ok(default, "User:bob", Op.READ, T, "t")


def test_authorized_operations_bitfield() -> None:
    a = authorizer(acl(T, "t", "User:alice", Op.READ), acl(T, "t", "User:alice", Op.ALTER_CONFIGS))
    ops = [Op.READ, Op.WRITE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS]
    assert a.authorized_operations("User:alice", HOST, T, "t", ops) == to_bitfield(
        [Op.READ, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS])


def test_authorize_by_resource_type() -> None:
    a = authorizer(acl(T, "pay", "User:alice", Op.WRITE, pattern=PRE))
    assert a.authorize_by_resource_type("User:alice", HOST, Op.WRITE, T)
    assert not a.authorize_by_resource_type("User:bob", HOST, Op.WRITE, T)
    b = authorizer(acl(T, "pay", "User:alice", Op.WRITE, pattern=PRE), acl(T, "p", "User:alice", Op.WRITE, DENY, PRE))
    assert not b.authorize_by_resource_type("User:alice", HOST, Op.WRITE, T)


def test_index_add_remove() -> None:
    a = StandardAuthorizer()
    i1, i2 = uuid.uuid4(), uuid.uuid4()
    a.cache.add(i1, acl(T, "pay", "User:alice", Op.READ, pattern=PRE))
    a.cache.add(i2, acl(T, "payments", "User:alice", Op.READ, DENY))
    assert not ok(a, "User:alice", Op.READ, T, "payments")
    a.cache.remove(i2)
    assert ok(a, "User:alice", Op.READ, T, "payments")
    a.cache.remove(i1)
    assert not ok(a, "User:alice", Op.READ, T, "payments") and len(a.cache) == 0


# -- filters --------------------------------------------------------------------------------------


def flt(rtype: ResourceType = ResourceType.ANY, name: str | None = None, pattern: PatternType = PatternType.ANY,
        principal: str | None = None, op: Op = Op.ANY, perm: AclPermissionType = AclPermissionType.ANY) -> AclBindingFilter:
    return AclBindingFilter(rtype, name, pattern, principal, None, op, perm)


def test_filters() -> None:
    lit, star, pre = acl(T, "orders", "User:a", Op.READ), acl(T, "*", "User:a", Op.READ), acl(T, "ord", "User:b", Op.WRITE, pattern=PRE)
    every = [lit, star, pre]
    assert [x for x in every if flt().matches(x)] == every
    assert [x for x in every if flt(T, "orders", PatternType.MATCH).matches(x)] == every
    assert [x for x in every if flt(T, "orders", PatternType.ANY).matches(x)] == [lit]
    assert [x for x in every if flt(T, "orders", LIT).matches(x)] == [lit]
    assert [x for x in every if flt(T, None, PRE).matches(x)] == [pre]
    assert [x for x in every if flt(principal="User:b").matches(x)] == [pre]
    assert [x for x in every if flt(op=Op.READ).matches(x)] == [lit, star]
    assert [x for x in every if flt(G).matches(x)] == []
    assert flt(ResourceType.UNKNOWN).unknown_error() == "Unknown patternFilter."
    assert flt(op=Op.UNKNOWN).unknown_error() == "Unknown entryFilter."


# -- the controller's AclControlManager and the image ---------------------------------------------


def test_acl_control_manager_create_validate_delete() -> None:
    mgr = AclControlManager(EMPTY_IMAGE)
    good = acl(T, "t", "User:alice", Op.READ)
    results, records = mgr.create_acls([
        good, good,
        acl(ResourceType.ANY, "t", "User:a", Op.READ),
        StandardAcl(T, "t", PatternType.MATCH, "User:a", "*", Op.READ, ALLOW),
        acl(T, "t", "User:a", Op.ANY),
        acl(T, "t", "User:a", Op.READ, AclPermissionType.ANY),
        acl(T, "", "User:a", Op.READ),
        acl(C, "my-cluster", "User:a", Op.ALTER),
        acl(T, "t", "alice", Op.READ),
    ])
    assert [r.error for r in results] == [Errors.NONE, Errors.NONE] + [Errors.INVALID_REQUEST] * 7
    assert [r.message for r in results[2:]] == [
        "Invalid resourceType ANY", "Invalid patternType MATCH", "Invalid operation ANY",
        "Invalid permissionType ANY", "Resource name should not be empty",
        "The only valid name for the CLUSTER resource is kafka-cluster",
        "Could not parse principal from `alice` (no colon is present separating the principal type "
        "from the principal name)",
    ]
    assert [n for n, _ in records] == ["AccessControlEntryRecord"]  # the duplicate writes nothing
    delta = MetadataDelta(EMPTY_IMAGE)
    for i, (name, rec) in enumerate(records):
        delta.replay(name, rec, i)
    image = delta.apply()
    mgr.image = image
    assert mgr.create_acls([good])[1] == []  # exists already
    results2, removals = mgr.delete_acls([flt(T, "t", PatternType.MATCH), flt(ResourceType.UNKNOWN)])
    assert results2[0].deleted == (good,) and results2[1].error == Errors.INVALID_REQUEST
    assert [n for n, _ in removals] == ["RemoveAccessControlEntryRecord"]
    # the image writes its ACLs back (snapshots), and an authorizer follows deltas
    rebuilt = MetadataDelta(EMPTY_IMAGE)
    for i, (name, rec) in enumerate(write_image(image)):
        rebuilt.replay(name, rec, i)
    assert dict(rebuilt.apply().acls.acls) == dict(image.acls.acls)
    a = StandardAuthorizer()
    a.publish(delta, image)
    assert ok(a, "User:alice", Op.READ, T, "t")
    d2 = MetadataDelta(image)
    d2.replay(*removals[0], 5)
    a.publish(d2, d2.apply())
    assert not ok(a, "User:alice", Op.READ, T, "t")


# -- configuration --------------------------------------------------------------------------------


def test_standard_authorizer_configuration() -> None:
    cfg = KafkaConfig({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                       "super.users": "User:admin;User:broker", "allow.everyone.if.no.acl.found": "true"})
    a = StandardAuthorizer.from_config(cfg)
    assert a is not None and a.super_users == {"User:admin", "User:broker"} and a.allow_everyone_if_no_acl_found
    assert StandardAuthorizer.from_config(KafkaConfig({})) is None
    with pytest.raises(ConfigError, match="the only authorizer supported"):
        KafkaConfig({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    with pytest.raises(ConfigError, match="not supported in ZooKeeper mode"):
        KafkaConfig({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                     "zookeeper.connect": "localhost:2181", "process.roles": ""})


# -- per-API checks, with requests from chosen principals -----------------------------------------


def ctx(principal: str, version: int = 9, api_key: int = 0) -> RequestContext:
    conn = ConnectionInfo("c", "10.0.0.1:4000", "PLAINTEXT", principal=KafkaPrincipal.parse(principal))
    return RequestContext(RequestHeader(api_key, version, 1, "client"), conn)


HELPER = AuthHelper(authorizer(
    acl(T, "orders", "User:alice", Op.WRITE),
    acl(T, "orders", "User:alice", Op.READ),
    acl(G, "g", "User:alice", Op.READ),
    acl(X, "tx", "User:alice", Op.WRITE),
    acl(T, "orders", "User:eve", Op.WRITE, DENY),
    acl(T, "*", "User:eve", Op.ALL),
    super_users="User:admin",
), topic_exists=lambda name: name != "new")


def _produce(*topics: str, tid: str | None = None, acks: int = -1) -> dict[str, Any]:
    return {"transactional_id": tid, "acks": acks, "timeout_ms": 1000,
            "topic_data": [{"name": t, "partition_data": [{"index": 0, "records": b""}]} for t in topics]}


def _statuses(resp: dict[str, Any]) -> dict[str, int]:
    return {t["name"]: p["error_code"] for t in resp["responses"] for p in t["partition_responses"]}


def test_produce_check() -> None:
    assert checks.check_produce(HELPER, ctx("User:alice"), _produce("orders")) is None
    assert checks.check_produce(HELPER, ctx("User:admin"), _produce("orders", "other")) is None
    v = checks.check_produce(HELPER, ctx("User:alice"), _produce("orders", "other"))
    assert isinstance(v, Narrowed) and [t["name"] for t in v.request["topic_data"]] == ["orders"]
    handled = {"responses": [{"name": "orders", "partition_responses": [{"index": 0, "error_code": 0}]}]}
    assert _statuses(v.merge(handled)) == {"orders": 0, "other": Errors.TOPIC_AUTHORIZATION_FAILED}
    # DENY overrides the wildcard ALL
    v = checks.check_produce(HELPER, ctx("User:eve"), _produce("orders", "other"))
    assert isinstance(v, Narrowed) and [t["name"] for t in v.request["topic_data"]] == ["other"]
    # a transactional id the principal may not write: every partition
    v = checks.check_produce(HELPER, ctx("User:alice"), _produce("orders", tid="nope"))
    assert isinstance(v, Narrowed) and v.request["topic_data"] == []
    assert _statuses(v.merge({"responses": []})) == {"orders": Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    with pytest.raises(CloseConnection):
        checks.check_produce(HELPER, ctx("User:bob"), _produce("orders", acks=0))


def test_group_and_cluster_checks() -> None:
    join = {"group_id": "g", "member_id": ""}
    assert checks.check_join_group(HELPER, ctx("User:alice"), join) is None
    refused = checks.check_join_group(HELPER, ctx("User:bob"), join)
    assert isinstance(refused, dict) and refused["error_code"] == Errors.GROUP_AUTHORIZATION_FAILED
    commit = {"group_id": "g", "topics": [{"name": "orders", "partitions": [{"partition_index": 0}]},
                                          {"name": "other", "partitions": [{"partition_index": 1}]}]}
    v = checks.check_offset_commit(HELPER, ctx("User:alice"), commit)
    assert isinstance(v, Narrowed)
    out = v.merge({"topics": []})
    assert out["topics"] == [{"name": "other", "partitions": [
        {"partition_index": 1, "error_code": Errors.TOPIC_AUTHORIZATION_FAILED}]}]
    elect = checks.BROKER_CHECKS[43](HELPER, ctx("User:alice"), {"topic_partitions": None})
    assert isinstance(elect, dict) and elect["error_code"] == Errors.CLUSTER_AUTHORIZATION_FAILED
    assert checks.BROKER_CHECKS[43](HELPER, ctx("User:admin"), {"topic_partitions": None}) is None
    ipid = checks.check_init_producer_id(HELPER, ctx("User:bob"), {"transactional_id": None})
    assert isinstance(ipid, dict) and ipid["error_code"] == Errors.CLUSTER_AUTHORIZATION_FAILED
    # idempotence: WRITE on some topic is enough (KIP-679)
    assert checks.check_init_producer_id(HELPER, ctx("User:alice"), {"transactional_id": None}) is None
    assert checks.check_init_producer_id(HELPER, ctx("User:alice"), {"transactional_id": "tx"}) is None


def test_metadata_hides_undescribable_topics_and_computes_operations() -> None:
    all_topics = {"topics": None, "allow_auto_topic_creation": True, "include_topic_authorized_operations": True}
    v = checks.check_metadata(HELPER, ctx("User:alice", 12), all_topics)
    assert isinstance(v, Narrowed)
    resp = {"topics": [{"name": "orders", "error_code": 0, "topic_authorized_operations": 0},
                       {"name": "secret", "error_code": 0, "topic_authorized_operations": 0}],
            "cluster_authorized_operations": -(2**31)}
    out = v.merge(resp)
    assert [t["name"] for t in out["topics"]] == ["orders"]
    assert out["topics"][0]["topic_authorized_operations"] == to_bitfield([Op.READ, Op.WRITE, Op.DESCRIBE])
    named = {"topics": [{"name": "orders", "topic_id": None}, {"name": "secret", "topic_id": None},
                        {"name": "new", "topic_id": None}], "allow_auto_topic_creation": True}
    v = checks.check_metadata(HELPER, ctx("User:alice", 12), named)
    assert isinstance(v, Narrowed) and [t["name"] for t in v.request["topics"]] == ["orders"]
    out = v.merge({"topics": [{"name": "orders", "error_code": 0}]})
    assert {t["name"]: t["error_code"] for t in out["topics"]} == {
        "orders": 0, "secret": Errors.TOPIC_AUTHORIZATION_FAILED, "new": Errors.TOPIC_AUTHORIZATION_FAILED}


def test_every_served_api_has_a_check() -> None:
    from odradek.protocol import messages as m

    missing = {api.name for api in m.ALL_APIS if api.api_key not in checks.BROKER_CHECKS} - {"ApiVersions"}
    assert not missing


# -- requests forwarded by Kafka brokers in an Envelope -------------------------------------------


def _principal_bytes(kind: str, name: str) -> bytes:
    """Kafka's DefaultKafkaPrincipalBuilder.serialize: version 0, then DefaultPrincipalData v0."""
    out = b"\x00\x00"
    for text in (kind, name):
        raw = text.encode()
        out += bytes([len(raw) + 1]) + raw
    return out + b"\x00" + b"\x00"  # tokenAuthenticated=false, no tagged fields


def test_forwarded_requests_are_checked_for_the_envelope_principal() -> None:
    from odradek.controller import envelope
    from odradek.protocol import messages as m
    from odradek.security.auth_helper import deserialize_principal, forwarded_check

    assert deserialize_principal(_principal_bytes("User", "alice")) == KafkaPrincipal("User", "alice")
    with pytest.raises(ValueError):
        deserialize_principal(b"\x00\x01")
    check = forwarded_check(HELPER, checks.CONTROLLER_CHECKS)
    body = {"topics": [{"name": "orders", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                        "configs": []}], "timeout_ms": 1000, "validate_only": False}
    inner = envelope.EmbeddedRequest(m.CREATE_TOPICS, 7, 5, "c", body, "10.0.0.1")
    outer = ctx("User:broker")
    refused = check(inner, _principal_bytes("User", "alice"), outer)
    assert isinstance(refused, Narrowed) and refused.request["topics"] == []
    assert refused.merge({"topics": []})["topics"][0]["error_code"] == Errors.TOPIC_AUTHORIZATION_FAILED
    assert check(inner, _principal_bytes("User", "admin"), outer).request["topics"] == body["topics"]
    bad = check(inner, b"\x00\x00\x04User", outer)
    assert bad["error_code"] == Errors.PRINCIPAL_DESERIALIZATION_FAILURE


def test_incremental_fetch_rechecks_session_topics() -> None:
    """A session's partitions the request does not name are checked again (an ACL removed while
    a Java consumer's fetch session lives stops its data)."""
    req = {"replica_id": -1, "session_id": 9, "session_epoch": 3, "topics": [], "max_bytes": 1}
    v = checks.check_fetch(HELPER, ctx("User:bob", 12), req)
    assert isinstance(v, Narrowed)
    resp = {"responses": [{"topic": "orders", "topic_id": uuid.UUID(int=0), "partitions": [
        {"partition_index": 0, "error_code": 0, "records": b"secret"}]}]}
    (part,) = v.merge(resp)["responses"][0]["partitions"]
    assert part["error_code"] == Errors.TOPIC_AUTHORIZATION_FAILED and part["records"] == b""
    v = checks.check_fetch(HELPER, ctx("User:alice", 12), req)
    assert isinstance(v, Narrowed)
    assert v.merge(resp)["responses"][0]["partitions"][0]["records"] == b"secret"
    # a full fetch names every partition it gets: nothing to re-check
    assert checks.check_fetch(HELPER, ctx("User:alice", 12), {**req, "session_epoch": 0}) is None


def test_an_api_without_a_rule_needs_cluster_alter(caplog: pytest.LogCaptureFixture) -> None:
    from odradek.protocol import messages as m
    from odradek.security.auth_helper import install

    class Dispatcher:
        apis = {m.API_VERSIONS.api_key: m.API_VERSIONS, m.HEARTBEAT.api_key: m.HEARTBEAT, 999: m.DESCRIBE_QUORUM}
        handlers: dict[int, Any] = {k: (lambda c, r: {"served": True}) for k in apis}

    d = Dispatcher()
    install(d, HELPER, {m.HEARTBEAT.api_key: checks.BROKER_CHECKS[m.HEARTBEAT.api_key]})  # type: ignore[arg-type]
    assert "No authorization rule for DescribeQuorum" in caplog.text
    assert d.handlers[999](ctx("User:alice"), {})["error_code"] == Errors.CLUSTER_AUTHORIZATION_FAILED
    assert d.handlers[999](ctx("User:admin"), {}) == {"served": True}
    assert d.handlers[m.API_VERSIONS.api_key](ctx("User:nobody"), {}) == {"served": True}
    assert d.handlers[m.HEARTBEAT.api_key](ctx("User:alice"), {"group_id": "g"}) == {"served": True}
    assert d.handlers[m.HEARTBEAT.api_key](ctx("User:bob"), {"group_id": "g"})["error_code"] == (
        Errors.GROUP_AUTHORIZATION_FAILED)


# -- topics hidden inside group and transaction answers (Kafka 4, KAFKA-18813) --------------------


def _regex_join(member: str = "") -> dict[str, Any]:
    return {"group_id": "g", "member_id": member, "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": 30000, "subscribed_topic_names": None, "subscribed_topic_regex": "t-.*",
            "server_assignor": None, "topic_partitions": []}


def test_regex_subscription_resolves_to_describable_topics_only() -> None:
    from odradek.coordinator.group.assignors import TopicMetadata
    from odradek.coordinator.group.consumer_group import ConsumerGroup
    from odradek.coordinator.group.consumer_group_heartbeat import consumer_group_heartbeat
    from odradek.security.auth_helper import describable_topics

    helper = AuthHelper(authorizer(acl(T, "t-", "User:alice", Op.READ, pattern=PRE),
                                   acl(T, "t-hidden", "User:alice", Op.DESCRIBE, DENY)))
    names = ["t-a", "t-b", "t-hidden", "other"]
    topics = {n: TopicMetadata(uuid.uuid5(uuid.NAMESPACE_OID, n), n, 1) for n in names}
    filt = describable_topics(helper)
    alice = ctx("User:alice", 0, 68)
    group = ConsumerGroup("g", member_id_factory=lambda: "m1")
    resp, _ = consumer_group_heartbeat(group, _regex_join(), 0, topics,
                                       topic_filter=lambda found: filt(alice, found))
    assert resp["error_code"] == Errors.NONE
    assert set(group.subscription_metadata) == {"t-a", "t-b"}
    assigned = {tp["topic_id"] for tp in resp["assignment"]["topic_partitions"]}
    assert assigned == {topics["t-a"].topic_id, topics["t-b"].topic_id}
    # without an authorizer the regex matches every t- topic
    plain = ConsumerGroup("g", member_id_factory=lambda: "m1")
    consumer_group_heartbeat(plain, _regex_join(), 0, topics)
    assert set(plain.subscription_metadata) == {"t-a", "t-b", "t-hidden"}
    # a later resolution (here: of the group's own subscription metadata, as when a member is
    # fenced) keeps the filter of the member that resolved the regex
    assert group.member_subscribed_topics(group.members["m1"], dict(topics)) == frozenset({"t-a", "t-b"})
    # so does the heartbeat of a member of another principal (bob may see t-a only), which
    # must not re-resolve alice's regex with bob's ACLs
    helper.authorizer.cache.add(uuid.uuid4(), acl(T, "t-a", "User:bob", Op.READ))
    bob = ctx("User:bob", 0, 68)
    group.new_member_id = lambda: "m2"
    names_join = {**_regex_join(), "subscribed_topic_regex": None, "subscribed_topic_names": ["t-a"]}
    resp, _ = consumer_group_heartbeat(group, names_join, 1, dict(topics),
                                       topic_filter=lambda found: filt(bob, found))
    assert resp["error_code"] == Errors.NONE
    assert group.member_subscribed_topics(group.members["m1"], dict(topics)) == frozenset({"t-a", "t-b"})
    assert set(group.subscription_metadata) == {"t-a", "t-b"}


def test_consumer_group_heartbeat_with_undescribable_topic_names() -> None:
    hb = {**_regex_join(), "subscribed_topic_regex": None, "subscribed_topic_names": ["orders", "secret"]}
    v = checks.check_consumer_group_heartbeat(HELPER, ctx("User:alice", 0, 68), hb)
    assert isinstance(v, dict) and v["error_code"] == Errors.TOPIC_AUTHORIZATION_FAILED
    assert checks.check_consumer_group_heartbeat(
        HELPER, ctx("User:alice", 0, 68), {**hb, "subscribed_topic_names": ["orders"]}) is None


def _described(gid: str, *assigned: str, target: tuple[str, ...] = ()) -> dict[str, Any]:
    def assignment(names: tuple[str, ...]) -> dict[str, Any]:
        return {"topic_partitions": [{"topic_id": uuid.uuid4(), "topic_name": n, "partitions": [0]} for n in names]}

    return {"error_code": 0, "error_message": None, "group_id": gid, "group_state": "Stable", "group_epoch": 3,
            "assignment_epoch": 3, "assignor_name": "uniform", "authorized_operations": -(2**31),
            "members": [{"member_id": "m", "assignment": assignment(assigned), "target_assignment": assignment(target)}]}


def test_consumer_group_describe_refuses_groups_with_undescribable_topics() -> None:
    helper = AuthHelper(authorizer(acl(G, "*", "User:alice", Op.DESCRIBE), acl(T, "orders", "User:alice", Op.READ)))
    v = checks.check_consumer_group_describe(helper, ctx("User:alice", 0, 69),
                                             {"group_ids": ["a", "b", "c"], "include_authorized_operations": False})
    assert isinstance(v, Narrowed)
    out = v.merge({"groups": [_described("a", "orders"), _described("b", "orders", "secret"),
                              _described("c", "orders", target=("secret",))]})
    by_id = {grp["group_id"]: grp for grp in out["groups"]}
    assert by_id["a"]["error_code"] == Errors.NONE and by_id["a"]["members"]
    for gid in ("b", "c"):  # the assignment or the target assignment names "secret"
        assert by_id[gid]["error_code"] == Errors.TOPIC_AUTHORIZATION_FAILED
        assert by_id[gid]["error_message"] == (
            "The group has described topic(s) that the client is not authorized to describe.")
        assert by_id[gid]["members"] == []
    # a super user sees everything
    helper.authorizer.super_users = frozenset({"User:admin"})
    v = checks.check_consumer_group_describe(helper, ctx("User:admin", 0, 69),
                                             {"group_ids": ["b"], "include_authorized_operations": False})
    assert isinstance(v, Narrowed)
    assert v.merge({"groups": [_described("b", "secret")]})["groups"][0]["error_code"] == Errors.NONE


def test_describe_transactions_leaves_out_undescribable_topics() -> None:
    helper = AuthHelper(authorizer(acl(X, "tx", "User:alice", Op.DESCRIBE), acl(T, "orders", "User:alice", Op.WRITE)))
    v = checks.BROKER_CHECKS[65](helper, ctx("User:alice", 0, 65), {"transactional_ids": ["tx", "other"]})
    assert isinstance(v, Narrowed) and v.request["transactional_ids"] == ["tx"]
    state = {"error_code": 0, "transactional_id": "tx", "transaction_state": "Ongoing", "transaction_timeout_ms": 60000,
             "transaction_start_time_ms": 1, "producer_id": 7, "producer_epoch": 0,
             "topics": [{"topic": "orders", "partitions": [0]}, {"topic": "secret", "partitions": [0, 1]}]}
    out = v.merge({"throttle_time_ms": 0, "transaction_states": [state]})
    states = {s["transactional_id"]: s for s in out["transaction_states"]}
    assert states["tx"]["topics"] == [{"topic": "orders", "partitions": [0]}]
    assert states["other"]["error_code"] == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_offset_fetch_of_all_topics_leaves_out_undescribable_ones() -> None:
    v = checks.check_offset_fetch(HELPER, ctx("User:alice", 9, 9),
                                  {"groups": [{"group_id": "g", "topics": None}], "require_stable": False})
    assert isinstance(v, Narrowed)
    committed = [{"name": n, "partitions": [{"partition_index": 0, "committed_offset": 5, "error_code": 0}]}
                 for n in ("orders", "secret")]
    out = v.merge({"groups": [{"group_id": "g", "topics": committed, "error_code": 0}]})
    assert [t["name"] for t in out["groups"][0]["topics"]] == ["orders"]


# -- the audit log (kafka.authorizer.logger) ------------------------------------------------------


def test_audit_log_in_kafkas_words(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="kafka.authorizer.logger")
    a = authorizer(acl(T, "t", "User:alice", Op.READ), acl(X, "tx", "User:eve", Op.WRITE, DENY),
                   acl(T, "t", "User:eve", Op.READ), super_users="User:admin")
    helper = AuthHelper(a)
    helper.api_names[1] = "Fetch"
    helper.api_names[22] = "InitProducerId"
    assert not helper.authorize(ctx("User:bob", 13, 1), Op.READ, T, "t")
    assert helper.authorize(ctx("User:alice", 13, 1), Op.READ, T, "t")
    assert not helper.authorize(ctx("User:eve", 4, 22), Op.WRITE, X, "tx")
    assert helper.authorize(ctx("User:admin", 13, 1), Op.READ, T, "t")
    assert not helper.authorize(ctx("User:bob", 13, 1), Op.READ, T, "quiet", log_if_denied=False)
    assert helper.allowed(ctx("User:bob", 13, 1), Op.READ, T, ["u", "u"]) == set()
    lines = [(r.levelname, r.name, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("INFO", "kafka.authorizer.logger", "Principal = User:bob is Denied operation = READ from host = 10.0.0.1 "
         "on resource = Topic:LITERAL:t for request = Fetch with resourceRefCount = 1 based on rule DefaultDeny"),
        ("DEBUG", "kafka.authorizer.logger", "Principal = User:alice is Allowed operation = READ from host = 10.0.0.1 "
         "on resource = Topic:LITERAL:t for request = Fetch with resourceRefCount = 1 based on rule "
         "MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=t, patternType=LITERAL, principal=User:alice, "
         "host=*, operation=READ, permissionType=ALLOW))"),
        ("INFO", "kafka.authorizer.logger", "Principal = User:eve is Denied operation = WRITE from host = 10.0.0.1 "
         "on resource = TransactionalId:LITERAL:tx for request = InitProducerId with resourceRefCount = 1 based on "
         "rule MatchingAcl(acl=StandardAcl(resourceType=TRANSACTIONAL_ID, resourceName=tx, patternType=LITERAL, "
         "principal=User:eve, host=*, operation=WRITE, permissionType=DENY))"),
        ("DEBUG", "kafka.authorizer.logger", "Principal = User:admin is Allowed operation = READ from host = 10.0.0.1 "
         "on resource = Topic:LITERAL:t for request = Fetch with resourceRefCount = 1 based on rule SuperUser"),
        ("INFO", "kafka.authorizer.logger", "Principal = User:bob is Denied operation = READ from host = 10.0.0.1 "
         "on resource = Topic:LITERAL:u for request = Fetch with resourceRefCount = 2 based on rule DefaultDeny"),
    ]
