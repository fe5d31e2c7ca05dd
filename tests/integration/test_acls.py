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


# -- topics hidden inside group and transaction answers (Kafka 4) ---------------------------------


def _sasl_login(conn: RawConnection, user: str) -> None:
    """SaslHandshake + SaslAuthenticate (PLAIN) on a raw connection to the SASL listener."""
    assert conn.request(g.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == Errors.NONE
    token = f"\0{user}\0{user}-secret".encode()
    assert conn.request(g.SASL_AUTHENTICATE, 2, {"auth_bytes": token})["error_code"] == Errors.NONE


def test_regex_subscription_sees_only_describable_topics(secured: Secured) -> None:
    """A KIP-848 consumer (group.protocol=consumer) subscribing with a regex is assigned only the
    topics its principal may DESCRIBE: the coordinator resolves the regex with its ACLs."""
    base = unique_name("t")
    readable = [secured.topic(f"{base}-ok-{i}") for i in range(2)]
    secret = secured.topic(f"{base}-secret")
    for t in [*readable, secret]:
        assert produce_error(secured, "admin", t) is None
    group = unique_name("rx")
    secured.grant(allow(ResourceType.TOPIC, f"{base}-ok-", "alice", AclOperation.READ, ResourcePatternType.PREFIXED),
                  allow(ResourceType.GROUP, group, "alice", AclOperation.READ))
    c = Consumer({**secured.conf("alice"), "group.id": group, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "topic.metadata.refresh.interval.ms": 1000})
    seen: set[str] = set()
    errors: list[KafkaError] = []
    try:
        c.subscribe([f"^{base}-.*"])
        end = time.monotonic() + 40
        while time.monotonic() < end and seen != set(readable):
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    errors.append(msg.error())
                continue
            seen.add(msg.topic())
        assert seen == set(readable), errors
        assert {tp.topic for tp in c.assignment()} == set(readable)
        # the group as the coordinator holds it (described by the super user, who may see every
        # topic): the member's assignment names only the describable topics
        (described,) = secured.admin().describe_consumer_groups([group]).values()
        (member,) = described.result(timeout=30).members
        assert {tp.topic for tp in member.assignment.topic_partitions} == set(readable)
    finally:
        c.close()


def test_consumer_group_describe_hides_groups_assigned_undescribable_topics(secured: Secured) -> None:
    """ConsumerGroupDescribe: a group whose assignment names a topic the caller may not DESCRIBE
    is answered with TOPIC_AUTHORIZATION_FAILED (Kafka 4), even with DESCRIBE on the group."""
    secret = secured.topic(unique_name("cgd-secret"))
    assert produce_error(secured, "admin", secret) is None
    group = unique_name("cgd")
    secured.grant(allow(ResourceType.GROUP, group, "bob", AclOperation.DESCRIBE))
    c = Consumer({**secured.conf("admin"), "group.id": group, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe([secret])

        def assigned() -> bool:
            c.poll(0.2)
            return bool(c.assignment())

        wait_until(assigned, timeout=30, what="an assignment")
        with RawConnection("127.0.0.1", secured.broker.bound_ports["SASL_PLAINTEXT"]) as conn:
            _sasl_login(conn, "bob")
            body = {"group_ids": [group], "include_authorized_operations": False}
            (grp,) = conn.request(g.CONSUMER_GROUP_DESCRIBE, 0, body)["groups"]
            assert grp["error_code"] == Errors.TOPIC_AUTHORIZATION_FAILED
            assert grp["error_message"] == "The group has described topic(s) that the client is not authorized to describe."
            assert grp["members"] == []
            secured.grant(allow(ResourceType.TOPIC, secret, "bob", AclOperation.DESCRIBE))
            (grp,) = conn.request(g.CONSUMER_GROUP_DESCRIBE, 0, body)["groups"]
            assert grp["error_code"] == Errors.NONE and grp["members"]
    finally:
        c.close()


def test_describe_transactions_omits_undescribable_topics(secured: Secured) -> None:
    shown = secured.topic(unique_name("dtx-shown"))
    hidden = secured.topic(unique_name("dtx-hidden"))
    tid = unique_name("dtx")
    secured.grant(allow(ResourceType.TRANSACTIONAL_ID, tid, "bob", AclOperation.DESCRIBE),
                  allow(ResourceType.TOPIC, shown, "bob", AclOperation.DESCRIBE))
    p = Producer({**secured.conf("admin"), "transactional.id": tid, "transaction.timeout.ms": 30000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(shown, b"a")
    p.produce(hidden, b"b")
    p.flush(20)
    try:
        with RawConnection("127.0.0.1", secured.broker.bound_ports["SASL_PLAINTEXT"]) as conn:
            _sasl_login(conn, "bob")
            (state,) = conn.request(g.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})["transaction_states"]
            assert state["error_code"] == Errors.NONE and state["transaction_state"] == "Ongoing"
            assert [t["topic"] for t in state["topics"]] == [shown]
            (state,) = conn.request(g.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [unique_name("other")]})[
                "transaction_states"]
            assert state["error_code"] == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        with RawConnection("127.0.0.1", secured.broker.bound_ports["SASL_PLAINTEXT"]) as conn:
            _sasl_login(conn, "admin")  # a super user sees both topics
            (state,) = conn.request(g.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})["transaction_states"]
            assert sorted(t["topic"] for t in state["topics"]) == sorted([shown, hidden])
    finally:
        p.abort_transaction(30)


def test_offset_fetch_of_all_topics_leaves_out_undescribable_ones(secured: Secured) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    shown = secured.topic(unique_name("of-shown"))
    hidden = secured.topic(unique_name("of-hidden"))
    group = unique_name("of")
    c = Consumer({**secured.conf("admin"), "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(shown, 0, 0), TopicPartition(hidden, 0, 0)], asynchronous=False)
    finally:
        c.close()
    secured.grant(allow(ResourceType.GROUP, group, "bob", AclOperation.DESCRIBE),
                  allow(ResourceType.TOPIC, shown, "bob", AclOperation.DESCRIBE))

    def committed(user: str) -> set[str]:
        (f,) = secured.admin(user).list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
        return {tp.topic for tp in f.result(timeout=30).topic_partitions}

    assert committed("bob") == {shown}
    assert committed("admin") == {shown, hidden}


def test_denials_in_the_authorizer_audit_log() -> None:
    """kafka.authorizer.logger at INFO: a denied Produce in Kafka's words (grants, at DEBUG, are
    not written at INFO)."""
    import logging

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    audit = logging.getLogger("kafka.authorizer.logger")
    handler = Keep(logging.DEBUG)
    audit.addHandler(handler)
    old_level = audit.level
    audit.setLevel(logging.DEBUG)
    try:
        with EmbeddedBroker(secured_props()) as broker:
            s = Secured(broker)
            topic = s.topic(unique_name("audit"))
            s.grant(allow(ResourceType.TOPIC, topic, "bob", AclOperation.DESCRIBE))  # sees it, may not write
            err = produce_error(s, "bob", topic, **{"message.timeout.ms": 5000})
            assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        audit.removeHandler(handler)
        audit.setLevel(old_level)
    lines = [r.getMessage() for r in records if r.levelno == logging.INFO]
    assert not any(" is Allowed " in line for line in lines)
    assert any(r.levelno == logging.DEBUG and r.getMessage().startswith("Principal = User:admin is Allowed operation = CREATE")
               for r in records)
    want = (f"Principal = User:bob is Denied operation = WRITE from host = 127.0.0.1 on resource = "
            f"Topic:LITERAL:{topic} for request = Produce with resourceRefCount = 1 based on rule DefaultDeny")
    assert want in lines, lines
