"""ACLs through real clients: a broker with the StandardAuthorizer and a SASL_PLAINTEXT (PLAIN)
listener, where each client logs in as a user and does what its ACLs allow.

The principals: ``User:admin`` (a super user), ``User:alice``, ``User:bob``, ``User:eve``;
``User:ANONYMOUS`` (the PLAINTEXT inter-broker listener) is a super user as brokers must be.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from odradek.embedded import EmbeddedBroker
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g

from .kafka_reference import find_kafka_tools
from .support import RawConnection, unique_name, wait_until

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
USERS = ("admin", "alice", "bob", "eve")
JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
    f'user_{u}="{u}-secret"' for u in USERS) + ";"


def secured_props(super_users: str = "User:ANONYMOUS;User:admin") -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": STANDARD,
        "super.users": super_users,
    }


class Secured:
    def __init__(self, broker: EmbeddedBroker) -> None:
        self.broker = broker
        self.bootstrap = f"127.0.0.1:{broker.bound_ports['SASL_PLAINTEXT']}"
        self._admins: dict[str, AdminClient] = {}

    def conf(self, user: str) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-secret"}

    def admin(self, user: str = "admin") -> AdminClient:
        """One admin client per user, kept (a dropped client fails its pending futures)."""
        if user not in self._admins:
            self._admins[user] = AdminClient(self.conf(user))
        return self._admins[user]

    def grant(self, *bindings: AclBinding) -> None:
        """Create ACLs as the super user; returns once the broker enforces them."""
        admin = self.admin()
        for f in admin.create_acls(list(bindings)).values():
            f.result(timeout=30)
        want = set(map(str, bindings))
        wait_until(lambda: want <= {str(b) for b in self.acls()}, timeout=30, what="ACLs to reach the broker")

    def acls(self) -> list[AclBinding]:
        any_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                      AclOperation.ANY, AclPermissionType.ANY)
        return list(self.admin().describe_acls(any_filter).result(timeout=30))

    def topic(self, name: str, partitions: int = 1) -> str:
        for f in self.admin().create_topics([NewTopic(name, partitions, 1)]).values():
            f.result(timeout=30)
        return name


def allow(rtype: ResourceType, name: str, user: str, op: AclOperation,
          pattern: ResourcePatternType = ResourcePatternType.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, f"User:{user}", host, op, AclPermissionType.ALLOW)


def deny(rtype: ResourceType, name: str, user: str, op: AclOperation,
         pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, f"User:{user}", "*", op, AclPermissionType.DENY)


@pytest.fixture(scope="module")
def secured() -> Iterator[Secured]:
    with EmbeddedBroker(secured_props()) as broker:
        yield Secured(broker)


def produce_error(s: Secured, user: str, topic: str, **extra: Any) -> KafkaError | None:
    p = Producer({**s.conf(user), "message.timeout.ms": 10000, **extra})
    errors: list[KafkaError | None] = []
    p.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err))
    p.flush(20)
    assert len(errors) == 1
    return errors[0]


def consume(s: Secured, user: str, topic: str, group: str, timeout: float = 20) -> tuple[list[bytes], KafkaError | None]:
    c = Consumer({**s.conf(user), "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    got: list[bytes] = []
    error: KafkaError | None = None
    try:
        c.subscribe([topic])
        end = time.monotonic() + timeout
        while time.monotonic() < end and not got and error is None:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    error = msg.error()
                continue
            got.append(msg.value())
    finally:
        c.close()
    return got, error


# -- the matrix: principal x operation x resource pattern ----------------------------------------


def test_produce_and_consume_matrix(secured: Secured) -> None:
    base = unique_name("orders")
    topic = secured.topic(base)
    group = unique_name("g")
    secured.grant(
        allow(ResourceType.TOPIC, topic, "alice", AclOperation.WRITE),
        allow(ResourceType.TOPIC, topic, "alice", AclOperation.READ),
        allow(ResourceType.GROUP, group, "alice", AclOperation.READ),
        # eve: everything on topics with the prefix (PREFIXED), but READ of this one denied
        allow(ResourceType.TOPIC, base[:5], "eve", AclOperation.ALL, ResourcePatternType.PREFIXED),
        allow(ResourceType.GROUP, "*", "eve", AclOperation.ALL),
        deny(ResourceType.TOPIC, topic, "eve", AclOperation.READ),
    )
    # WRITE: alice (literal ALLOW) and eve (prefixed ALL) may; bob has no ACL
    assert produce_error(secured, "alice", topic) is None
    assert produce_error(secured, "eve", topic) is None
    err = produce_error(secured, "bob", topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # READ: alice may; eve's DENY overrides her ALLOW; bob may not
    got, err = consume(secured, "alice", topic, group)
    assert err is None and got == [b"v"]
    got, err = consume(secured, "eve", topic, unique_name("eg"))
    assert not got and err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    got, err = consume(secured, "bob", topic, group)
    assert not got and err is not None and err.code() in (
        KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED)
    # kafka-python: the same answers
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    def kp(user: str) -> KafkaProducer:
        return KafkaProducer(bootstrap_servers=secured.bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username=user,
                             sasl_plain_password=f"{user}-secret", max_block_ms=10000)

    alice = kp("alice")
    try:
        assert alice.send(topic, b"kp").get(timeout=20).offset >= 0
    finally:
        alice.close()
    bob = kp("bob")
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            bob.send(topic, b"kp").get(timeout=20)
    finally:
        bob.close()


def test_consumer_group_needs_group_read(secured: Secured) -> None:
    topic = secured.topic(unique_name("grp"))
    secured.grant(allow(ResourceType.TOPIC, topic, "bob", AclOperation.WRITE),
                  allow(ResourceType.TOPIC, topic, "bob", AclOperation.READ))
    assert produce_error(secured, "bob", topic) is None
    got, err = consume(secured, "bob", topic, "bobs-group")
    assert not got and err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    secured.grant(allow(ResourceType.GROUP, "bobs-", "bob", AclOperation.READ, ResourcePatternType.PREFIXED))
    got, err = consume(secured, "bob", topic, "bobs-group")
    assert err is None and got == [b"v"]
    # the group's offsets and description: DESCRIBE (implied by READ), not for others
    admin = secured.admin("bob")
    desc = admin.describe_consumer_groups(["bobs-group"], include_authorized_operations=True)["bobs-group"].result(30)
    assert set(desc.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}
    with pytest.raises(KafkaException) as info:
        secured.admin("alice").describe_consumer_groups(["bobs-group"])["bobs-group"].result(30)
    assert info.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    listed = {g.group_id for g in secured.admin("bob").list_consumer_groups().result(30).valid}
    assert "bobs-group" in listed
    assert "bobs-group" not in {g.group_id for g in secured.admin("alice").list_consumer_groups().result(30).valid}


def test_metadata_hides_undescribable_topics(secured: Secured) -> None:
    visible = secured.topic(unique_name("vis"))
    hidden = secured.topic(unique_name("hid"))
    secured.grant(allow(ResourceType.TOPIC, visible, "alice", AclOperation.DESCRIBE))
    topics = set(secured.admin("alice").list_topics(timeout=10).topics)
    assert visible in topics and hidden not in topics
    assert {visible, hidden} <= set(secured.admin("admin").list_topics(timeout=10).topics)
    # kafka-python sees the same
    from kafka import KafkaConsumer

    kc = KafkaConsumer(bootstrap_servers=secured.bootstrap, security_protocol="SASL_PLAINTEXT",
                       sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="alice-secret")
    try:
        names = kc.topics()
    finally:
        kc.close()
    assert visible in names and hidden not in names


def test_authorized_operations(secured: Secured) -> None:
    topic = secured.topic(unique_name("ops"))
    secured.grant(allow(ResourceType.TOPIC, topic, "eve", AclOperation.READ),
                  allow(ResourceType.TOPIC, topic, "eve", AclOperation.ALTER_CONFIGS))
    admin = secured.admin("eve")
    desc = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(30)
    assert set(desc.authorized_operations) == {
        AclOperation.READ, AclOperation.DESCRIBE, AclOperation.ALTER_CONFIGS, AclOperation.DESCRIBE_CONFIGS}
    cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert not cluster.authorized_operations
    cluster = secured.admin("admin").describe_cluster(include_authorized_operations=True).result(30)
    assert AclOperation.ALTER in set(cluster.authorized_operations)


def test_admin_operations(secured: Secured) -> None:
    name = unique_name("adm")
    bob = secured.admin("bob")
    with pytest.raises(KafkaException) as info:
        bob.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    secured.grant(allow(ResourceType.TOPIC, "adm", "bob", AclOperation.CREATE, ResourcePatternType.PREFIXED))
    bob.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    for call in (
        lambda: bob.create_partitions([NewPartitions(name, 2)])[name].result(30),
        lambda: bob.delete_topics([name])[name].result(30),
        lambda: bob.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, name)])[
            ConfigResource(ConfigResource.Type.TOPIC, name)].result(30),
    ):
        with pytest.raises(KafkaException) as info:
            call()
        assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    broker = ConfigResource(ConfigResource.Type.BROKER, "1")
    with pytest.raises(KafkaException) as info:
        bob.describe_configs([broker])[broker].result(30)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # the ACL APIs themselves need the cluster: DESCRIBE / ALTER
    with pytest.raises(KafkaException) as info:
        bob.create_acls([allow(ResourceType.TOPIC, name, "bob", AclOperation.ALL)])[
            allow(ResourceType.TOPIC, name, "bob", AclOperation.ALL)].result(30)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    secured.grant(allow(ResourceType.TOPIC, name, "bob", AclOperation.DELETE))
    bob.delete_topics([name])[name].result(30)


def test_transactional_id_acls(secured: Secured) -> None:
    topic = secured.topic(unique_name("txn"))
    tid = unique_name("tx")
    secured.grant(allow(ResourceType.TOPIC, topic, "alice", AclOperation.WRITE))
    p = Producer({**secured.conf("alice"), "transactional.id": tid, "transaction.timeout.ms": 10000})
    with pytest.raises(KafkaException) as info:
        p.init_transactions(20)
    assert info.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    secured.grant(allow(ResourceType.TRANSACTIONAL_ID, tid, "alice", AclOperation.WRITE))
    p = Producer({**secured.conf("alice"), "transactional.id": tid, "transaction.timeout.ms": 10000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"in-txn")
    p.commit_transaction(30)


def test_super_user_does_everything(secured: Secured) -> None:
    topic = secured.topic(unique_name("su"))
    assert produce_error(secured, "admin", topic) is None
    got, err = consume(secured, "admin", topic, unique_name("sug"))
    assert err is None and got == [b"v"]
    # even a DENY for the super user is overridden
    secured.grant(deny(ResourceType.TOPIC, topic, "admin", AclOperation.ALL))
    assert produce_error(secured, "admin", topic) is None
    admin = secured.admin("admin")
    admin.delete_topics([topic])[topic].result(30)


def test_delete_acls_and_describe_filters(secured: Secured) -> None:
    name = unique_name("flt")
    secured.grant(allow(ResourceType.TOPIC, name, "bob", AclOperation.READ),
                  allow(ResourceType.TOPIC, name[:4], "bob", AclOperation.WRITE, ResourcePatternType.PREFIXED))
    admin = secured.admin()
    match = AclBindingFilter(ResourceType.TOPIC, name, ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    found = {(b.name, b.operation) for b in admin.describe_acls(match).result(30)}
    assert {(name, AclOperation.READ), (name[:4], AclOperation.WRITE)} <= found
    deleted = admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, "User:bob",
                                                  None, AclOperation.ANY, AclPermissionType.ANY)])
    removed = next(iter(deleted.values())).result(30)
    assert [(b.name, b.operation) for b in removed] == [(name, AclOperation.READ)]


# -- persistence, no authorizer, kafka-acls.sh ----------------------------------------------------


def test_acls_survive_restart(tmp_path: Path) -> None:
    with EmbeddedBroker(secured_props(), log_dir=str(tmp_path / "data")) as broker:
        s = Secured(broker)
        topic = s.topic("kept")
        s.grant(allow(ResourceType.TOPIC, topic, "alice", AclOperation.WRITE),
                deny(ResourceType.TOPIC, topic, "bob", AclOperation.WRITE))
        broker.restart()
        s = Secured(broker)
        wait_until(lambda: len(s.acls()) == 2, timeout=30, what="the ACLs after restart")
        assert produce_error(s, "alice", topic) is None
        err = produce_error(s, "bob", topic)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_no_authorizer_means_security_disabled() -> None:
    with EmbeddedBroker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        binding = allow(ResourceType.TOPIC, "t", "alice", AclOperation.READ)
        with pytest.raises(KafkaException) as info:
            admin.create_acls([binding])[binding].result(30)
        assert info.value.args[0].code() == KafkaError.SECURITY_DISABLED


def _kafka_acl_lines(stdout: str) -> set[str]:
    return {ln.strip() for ln in stdout.splitlines() if ln.strip()}


def test_kafka_acls_sh_and_odradek_acls_agree(secured: Secured, tmp_path: Path) -> None:
    tools = find_kafka_tools()
    cfg = tmp_path / "admin.properties"
    cfg.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret";\n'
    )
    topic = unique_name("cli")
    common = ["--bootstrap-server", secured.bootstrap, "--command-config", str(cfg)]

    def ours(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "odradek.cli.main", "acls", *common, *args],
                              capture_output=True, text=True, timeout=120)

    add = ["--add", "--allow-principal", "User:carol", "--operation", "Read", "--operation", "Describe",
           "--topic", topic]
    kafka_add = tools.run("kafka-acls", *common, *add)
    mine = ours(*add)  # the same ACLs again: nothing new, the same lines
    assert mine.returncode == 0, mine.stderr
    assert _kafka_acl_lines(mine.stdout) == _kafka_acl_lines(kafka_add.stdout)
    assert f"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)`:" in mine.stdout
    ours_add = ours("--add", "--deny-principal", "User:carol", "--deny-host", "10.1.2.3", "--group", topic,
                    "--resource-pattern-type", "prefixed")
    assert ours_add.returncode == 0, ours_add.stderr
    listing = ["--list", "--topic", topic, "--group", topic, "--resource-pattern-type", "any"]
    theirs, mine = tools.run("kafka-acls", *common, *listing), ours(*listing)
    assert mine.returncode == 0, mine.stderr
    assert _kafka_acl_lines(mine.stdout) == _kafka_acl_lines(theirs.stdout)
    assert "\t(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)" in mine.stdout
    assert "\t(principal=User:carol, host=10.1.2.3, operation=ALL, permissionType=DENY)" in mine.stdout
    # --producer / --consumer conveniences as Kafka expands them
    conv = ["--add", "--allow-principal", "User:dan", "--consumer", "--topic", topic, "--group", "dg"]
    assert ours(*conv).returncode == 0
    by_principal = ["--list", "--principal", "User:dan"]
    theirs, mine = tools.run("kafka-acls", *common, *by_principal), ours(*by_principal)
    assert _kafka_acl_lines(mine.stdout) == _kafka_acl_lines(theirs.stdout)
    assert "operation=READ" in mine.stdout and "operation=DESCRIBE" in mine.stdout
    # Kafka's tool removes what ours added, and the reverse
    tools.run("kafka-acls", *common, "--remove", "--force", "--group", topic, "--resource-pattern-type", "prefixed")
    assert ours("--remove", "--force", "--topic", topic).returncode == 0
    assert ours("--remove", "--force", "--consumer", "--allow-principal", "User:dan", "--topic", topic,
                "--group", "dg").returncode == 0
    after = ours("--list", "--topic", topic, "--group", topic, "--group", "dg", "--resource-pattern-type", "any")
    assert after.returncode == 0 and after.stdout.strip() == ""
    bad = ours("--add", "--allow-principal", "User:x", "--operation", "Read", "--cluster")
    assert bad.returncode == 1 and "ResourceType CLUSTER only supports operations" in bad.stderr


# -- brokers and controllers hold CLUSTER_ACTION -------------------------------------------------


def test_inter_broker_apis_refused_without_cluster_action() -> None:
    """ANONYMOUS is not a super user here: a follower Fetch (TOPIC_AUTHORIZATION_FAILED),
    WriteTxnMarkers (CLUSTER_AUTHORIZATION_FAILED) on the broker listener and a BrokerHeartbeat
    on the controller listener (CLUSTER_AUTHORIZATION_FAILED) are refused to it; the combined
    node itself, whose roles talk in-process, still works."""
    with EmbeddedBroker(secured_props(super_users="User:admin")) as broker:
        s = Secured(broker)
        s.topic("works")
        assert produce_error(s, "admin", "works") is None
        with RawConnection("127.0.0.1", broker.bound_ports["PLAINTEXT"]) as conn:
            follower = {"replica_id": 5, "replica_state": {"replica_id": 5, "replica_epoch": 1}}
            body = {**_fetch_body("works"), **follower}
            (part,) = conn.request(m.FETCH, 12, body)["responses"][0]["partitions"]
            assert part["error_code"] == Errors.TOPIC_AUTHORIZATION_FAILED
            markers = conn.request(g.WRITE_TXN_MARKERS, 1, {"markers": [
                {"producer_id": 1, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": 0,
                 "topics": [{"name": "works", "partition_indexes": [0]}]}]})
            (result,) = markers["markers"][0]["topics"][0]["partitions"]
            assert result["error_code"] == Errors.CLUSTER_AUTHORIZATION_FAILED
            # an ordinary consumer's Fetch from ANONYMOUS: no READ ACL
            (part,) = conn.request(m.FETCH, 12, _fetch_body("works"))["responses"][0]["partitions"]
            assert part["error_code"] == Errors.TOPIC_AUTHORIZATION_FAILED
        port = broker.controller_port
        assert port is not None
        with RawConnection("127.0.0.1", port) as conn:
            resp = conn.request(g.BROKER_HEARTBEAT, 0, {
                "broker_id": 7, "broker_epoch": 1, "current_metadata_offset": 0, "want_fence": False,
                "want_shut_down": False,
            })
            assert resp["error_code"] == Errors.CLUSTER_AUTHORIZATION_FAILED


def _fetch_body(topic: str) -> dict[str, Any]:
    return {
        "cluster_id": None, "replica_id": -1, "replica_state": {"replica_id": -1, "replica_epoch": -1},
        "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
        "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "topic_id": uuid.UUID(int=0), "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20, "replica_directory_id": uuid.UUID(int=0)}]}],
    }


def test_three_node_cluster_replicates_with_authorizer(tmp_path: Path) -> None:
    from .kraft_support import KraftCluster

    acl_props = {"authorizer.class.name": STANDARD, "super.users": "User:ANONYMOUS"}
    cluster = KraftCluster(tmp_path, controllers=3, brokers=3, controller_overrides=acl_props,
                           broker_overrides={**acl_props, "default.replication.factor": "3",
                                             "offsets.topic.replication.factor": "3"})
    try:
        cluster.format()
        cluster.start()
        cluster.wait_ready(120)
        bootstrap = ",".join(b.bootstrap for b in cluster.brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        name = f"replicated-{uuid.uuid4().hex[:6]}"
        admin.create_topics([NewTopic(name, 1, 3)])[name].result(60)
        p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(10):
            p.produce(name, str(i).encode())
        assert p.flush(60) == 0

        def in_sync() -> bool:
            md = admin.list_topics(name, timeout=10).topics[name]
            return len(md.partitions[0].isrs) == 3

        wait_until(in_sync, timeout=60, what="all three replicas in sync")
        # ACLs reach every broker through the metadata log
        binding = allow(ResourceType.TOPIC, name, "alice", AclOperation.READ)
        for f in admin.create_acls([binding]).values():
            f.result(60)
        for b in cluster.brokers:
            single = AdminClient({"bootstrap.servers": b.bootstrap})
            flt = AclBindingFilter(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, None, None,
                                   AclOperation.ANY, AclPermissionType.ANY)
            wait_until(lambda a=single, f=flt: len(a.describe_acls(f).result(30)) == 1, timeout=30,
                       what=f"the ACL on broker {b.node_id}")
    finally:
        cluster.close()
