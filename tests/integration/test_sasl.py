"""SASL on SASL_PLAINTEXT listeners through real clients: PLAIN (users in the listener's JAAS
config), SCRAM-SHA-256/512 (credentials in the metadata log, created with
AlterUserScramCredentials) and OAUTHBEARER (unsecured tokens); refused logins, hostile SASL
frames, re-authentication (KIP-368). The 3-node cluster on SASL is in test_sasl_cluster.py."""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from odradek.embedded import EmbeddedBroker
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.security.sasl_client_authenticator import ScramSaslClient
from odradek.security.scram_credential import ScramMechanism as Mech

from .kafka_reference import find_kafka_tools
from .support import RawConnection, unique_name, wait_until

PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
    'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)
MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
BAD_LOGIN = "Authentication failed: Invalid username or password"


def sasl_overrides(**extra: str) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "sasl.enabled.mechanisms": MECHANISMS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        **extra,
    }


def add_scram(bootstrap: str, user: str, password: str, mechanism: ScramMechanism, iterations: int = 4096) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations), password.encode())]
    )
    for f in futures.values():
        f.result(timeout=30)


@pytest.fixture(scope="module")
def sasl_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(overrides=sasl_overrides()) as b:
        add_scram(b.bootstrap_servers, "bob", "bob-secret", ScramMechanism.SCRAM_SHA_256)
        add_scram(b.bootstrap_servers, "carol", "carol-secret", ScramMechanism.SCRAM_SHA_512, 8192)
        yield b


def sasl_port(b: EmbeddedBroker) -> int:
    return b.bound_ports["SASL_PLAINTEXT"]


def sasl_bootstrap(b: EmbeddedBroker) -> str:
    return f"127.0.0.1:{sasl_port(b)}"


LOGINS = [
    ("PLAIN", "alice", "alice-secret"),
    ("SCRAM-SHA-256", "bob", "bob-secret"),
    ("SCRAM-SHA-512", "carol", "carol-secret"),
]


def librdkafka_conf(b: EmbeddedBroker, mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": sasl_bootstrap(b), "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
    }


def roundtrip_confluent(conf: dict[str, Any], topic: str) -> None:
    p = Producer(conf)
    for i in range(5):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(30) == 0
    c = Consumer({**conf, "group.id": unique_name("g"), "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    c.close()
    assert got == [f"v{i}".encode() for i in range(5)]


@pytest.mark.parametrize("mechanism,user,password", LOGINS)
def test_confluent_kafka_produces_and_consumes(
    sasl_broker: EmbeddedBroker, mechanism: str, user: str, password: str
) -> None:
    roundtrip_confluent(librdkafka_conf(sasl_broker, mechanism, user, password), unique_name(mechanism))


def _auth_errors(conf: dict[str, Any]) -> list[KafkaError]:
    errors: list[KafkaError] = []
    p = Producer({**conf, "error_cb": errors.append, "socket.timeout.ms": 5000})
    p.produce("never", b"x")
    deadline = time.monotonic() + 15
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        p.poll(0.2)
    p.purge()
    return [e for e in errors if e.code() == KafkaError._AUTHENTICATION]


@pytest.mark.parametrize("mechanism,user,password", [
    ("PLAIN", "alice", "wrong"), ("PLAIN", "mallory", "alice-secret"),
    ("SCRAM-SHA-256", "bob", "wrong"), ("SCRAM-SHA-256", "mallory", "bob-secret"),
    ("SCRAM-SHA-512", "bob", "bob-secret"),  # bob has no SCRAM-SHA-512 credential
])
def test_wrong_credentials_refused_alike(sasl_broker: EmbeddedBroker, mechanism: str, user: str, password: str) -> None:
    errors = _auth_errors(librdkafka_conf(sasl_broker, mechanism, user, password))
    assert errors, "the login was not refused"
    text = errors[0].str()
    if mechanism == "PLAIN":
        assert BAD_LOGIN in text
    else:  # unknown user and wrong password alike: Kafka's generic message
        assert (
            f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
            in text
        )


def test_raw_exchange_sets_principal_and_failure_is_delayed_then_closed(sasl_broker: EmbeddedBroker) -> None:
    """SASL_AUTHENTICATION_FAILED with Kafka's message after the failure delay (100 ms), then
    the connection closes; a good login then serves requests."""
    with RawConnection("127.0.0.1", sasl_port(sasl_broker)) as conn:
        hs = conn.request(m.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert hs["error_code"] == 0 and "SCRAM-SHA-512" in hs["mechanisms"]
        start = time.monotonic()
        r = conn.request(m.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x00alice\x00nope"})
        assert time.monotonic() - start >= 0.09
        assert r["error_code"] == Errors.SASL_AUTHENTICATION_FAILED
        assert r["error_message"] == BAD_LOGIN
        assert conn.is_closed_by_peer()
    with RawConnection("127.0.0.1", sasl_port(sasl_broker)) as conn:
        conn.request(m.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
        client = ScramSaslClient(Mech.SCRAM_SHA_256, "bob", "bob-secret")
        first = conn.request(m.SASL_AUTHENTICATE, 1, {"auth_bytes": client.first_message()})
        final = conn.request(m.SASL_AUTHENTICATE, 1, {"auth_bytes": client.final_message(first["auth_bytes"])})
        assert final["error_code"] == 0 and final["session_lifetime_ms"] == 0
        client.verify_server_final(final["auth_bytes"])
        md = conn.request(m.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": False})
        assert md["brokers"]


def test_kafka_python(sasl_broker: EmbeddedBroker) -> None:
    kafka = pytest.importorskip("kafka")
    for mechanism, user, password in LOGINS:
        topic = unique_name("kp")
        conf = {"bootstrap_servers": sasl_bootstrap(sasl_broker), "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password}
        producer = kafka.KafkaProducer(**conf)
        producer.send(topic, b"hello-" + mechanism.encode()).get(timeout=30)
        producer.close()
        consumer = kafka.KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=15000, **conf)
        values = [msg.value for msg in itertools.islice(consumer, 1)]  # the timeout bounds a shortfall
        consumer.close()
        assert values == [b"hello-" + mechanism.encode()]


def test_aiokafka(sasl_broker: EmbeddedBroker) -> None:
    aiokafka = pytest.importorskip("aiokafka")

    async def run() -> None:
        for mechanism, user, password in LOGINS:
            topic = unique_name("aio")
            conf = {"bootstrap_servers": sasl_bootstrap(sasl_broker), "security_protocol": "SASL_PLAINTEXT",
                    "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password}
            producer = aiokafka.AIOKafkaProducer(**conf)
            await producer.start()
            try:
                await producer.send_and_wait(topic, b"aio-" + mechanism.encode())
            finally:
                await producer.stop()
            consumer = aiokafka.AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
            await consumer.start()
            try:
                msg = await asyncio.wait_for(consumer.getone(), 30)
            finally:
                await consumer.stop()
            assert msg.value == b"aio-" + mechanism.encode()

    asyncio.run(run())


def test_kcat(sasl_broker: EmbeddedBroker) -> None:
    topic = unique_name("kcat")
    args = ["kcat", "-b", sasl_bootstrap(sasl_broker), "-X", "security.protocol=SASL_PLAINTEXT",
            "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=carol", "-X", "sasl.password=carol-secret"]
    subprocess.run([*args, "-P", "-t", topic], input=b"one\ntwo\n", check=True, timeout=60)
    out = subprocess.run([*args, "-C", "-t", topic, "-o", "beginning", "-c", "2", "-e"],
                         capture_output=True, check=True, timeout=60)
    assert out.stdout.split() == [b"one", b"two"]
    bad = subprocess.run([*args[:-2], "-X", "sasl.password=nope", "-L", "-m", "5"], capture_output=True, timeout=60)
    assert bad.returncode != 0
    assert b"invalid credentials" in bad.stderr + bad.stdout


def test_librdkafka_unsecured_oauthbearer(sasl_broker: EmbeddedBroker) -> None:
    conf = {"bootstrap.servers": sasl_bootstrap(sasl_broker), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.config": "principal=alice",
            "enable.sasl.oauthbearer.unsecure.jwt": True}
    roundtrip_confluent(conf, unique_name("oauth"))


def test_user_scram_credentials_admin_api(sasl_broker: EmbeddedBroker) -> None:
    admin = AdminClient({"bootstrap.servers": sasl_broker.bootstrap_servers})
    user = unique_name("dave")
    add_scram(sasl_broker.bootstrap_servers, user, "dave-secret", ScramMechanism.SCRAM_SHA_512, 10000)
    desc = admin.describe_user_scram_credentials([user])
    infos = desc[user].result(timeout=30).scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_512, 10000)]
    # works at once
    roundtrip_confluent(librdkafka_conf(sasl_broker, "SCRAM-SHA-512", user, "dave-secret"), unique_name("dave"))
    # too many iterations; deleting a credential that does not exist
    bad = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user + "x", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 20000), b"p")]
    )
    with pytest.raises(Exception, match="Too many iterations"):
        bad[user + "x"].result(timeout=30)
    missing = admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)])
    with pytest.raises(Exception, match="does not exist"):
        missing[user].result(timeout=30)
    gone = admin.alter_user_scram_credentials([UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)])
    gone[user].result(timeout=30)
    assert _auth_errors(librdkafka_conf(sasl_broker, "SCRAM-SHA-512", user, "dave-secret"))


# -- hostile SASL frames -------------------------------------------------------------------------


def _still_serves(b: EmbeddedBroker) -> None:
    with RawConnection("127.0.0.1", sasl_port(b)) as conn:
        r = conn.request(m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert r["error_code"] == 0
        keys = {k["api_key"] for k in r["api_keys"]}
        assert {m.SASL_HANDSHAKE.api_key, m.SASL_AUTHENTICATE.api_key} <= keys


def test_sasl_token_before_handshake_closes(sasl_broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    with RawConnection("127.0.0.1", sasl_port(sasl_broker)) as conn:
        conn.send_frame(b"\x00alice\x00alice-secret")
        assert conn.is_closed_by_peer()
    with RawConnection("127.0.0.1", sasl_port(sasl_broker)) as conn:  # a Kafka request too
        conn.send_frame(conn.encode_request(m.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                             "include_topic_authorized_operations": False})[1])
        assert conn.is_closed_by_peer()
    wait_until(lambda: "Unexpected Kafka request of type Metadata during SASL handshake" in caplog.text, 10)
    _still_serves(sasl_broker)


def test_oversized_sasl_token_closes(sasl_broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    with RawConnection("127.0.0.1", sasl_port(sasl_broker)) as conn:
        conn.request(m.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        conn.send_raw(struct.pack(">i", 524288 + 1000) + b"\x00" * 1024)  # the size alone refuses it
        assert conn.is_closed_by_peer()
    wait_until(lambda: "sasl.server.max.receive.size=524288" in caplog.text, 10)
    _still_serves(sasl_broker)


def test_unknown_mechanism_and_second_handshake(sasl_broker: EmbeddedBroker) -> None:
    with RawConnection("127.0.0.1", sasl_port(sasl_broker)) as conn:
        r = conn.request(m.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert r["error_code"] == Errors.UNSUPPORTED_SASL_MECHANISM
        assert r["mechanisms"] == MECHANISMS.split(",")
        assert conn.is_closed_by_peer()
    with RawConnection("127.0.0.1", sasl_port(sasl_broker)) as conn:
        conn.request(m.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        r = conn.request(m.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert r["error_code"] == Errors.ILLEGAL_SASL_STATE
        assert conn.is_closed_by_peer()
    _still_serves(sasl_broker)


def test_sasl_handshake_v0_raw_tokens(sasl_broker: EmbeddedBroker) -> None:
    """After a v0 handshake the tokens are bare size-prefixed frames (Kafka still serves it)."""
    with RawConnection("127.0.0.1", sasl_port(sasl_broker)) as conn:
        assert conn.request(m.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
        conn.send_frame(b"\x00alice\x00alice-secret")
        assert conn.recv_frame() == b""
        r = conn.request(m.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert r["error_code"] == 0
    with RawConnection("127.0.0.1", sasl_port(sasl_broker)) as conn:  # a token shorter than a header
        assert conn.request(m.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
        conn.send_frame(b"\x00a\x00b")
        assert conn.is_closed_by_peer()  # (no such user)
    for short in (b"abc", b""):  # frames shorter than a header before the handshake
        with RawConnection("127.0.0.1", sasl_port(sasl_broker)) as conn:
            conn.send_frame(short)
            assert conn.is_closed_by_peer()
    _still_serves(sasl_broker)


def test_plaintext_listener_answers_sasl_requests_illegal_state(sasl_broker: EmbeddedBroker) -> None:
    with RawConnection("127.0.0.1", sasl_broker.port) as conn:
        assert conn.request(m.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == Errors.ILLEGAL_SASL_STATE


# -- re-authentication ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reauth_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(overrides=sasl_overrides(**{"connections.max.reauth.ms": "1500"})) as b:
        add_scram(b.bootstrap_servers, "bob", "bob-secret", ScramMechanism.SCRAM_SHA_256)
        yield b


def test_connection_not_reauthenticating_is_closed(reauth_broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    with RawConnection("127.0.0.1", sasl_port(reauth_broker)) as conn:
        conn.request(m.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        r = conn.request(m.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x00alice\x00alice-secret"})
        assert r["error_code"] == 0 and 0 < r["session_lifetime_ms"] <= 1500
        api_versions = {"client_software_name": "t", "client_software_version": "1"}
        assert conn.request(m.API_VERSIONS, 3, api_versions)["error_code"] == 0
        time.sleep(1.7)
        cid, payload = conn.encode_request(m.API_VERSIONS, 3, api_versions)
        conn.send_frame(payload)
        assert conn.is_closed_by_peer()
    wait_until(lambda: "did not re-authenticate" in caplog.text, 10)


def test_raw_reauthentication_keeps_the_connection(reauth_broker: EmbeddedBroker) -> None:
    with RawConnection("127.0.0.1", sasl_port(reauth_broker)) as conn:
        api_versions = {"client_software_name": "t", "client_software_version": "1"}
        for _ in range(3):
            conn.request(m.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
            client = ScramSaslClient(Mech.SCRAM_SHA_256, "bob", "bob-secret")
            first = conn.request(m.SASL_AUTHENTICATE, 1, {"auth_bytes": client.first_message()})
            final = conn.request(m.SASL_AUTHENTICATE, 1, {"auth_bytes": client.final_message(first["auth_bytes"])})
            assert final["error_code"] == 0 and final["session_lifetime_ms"] > 0
            time.sleep(1.0)
            assert conn.request(m.API_VERSIONS, 3, api_versions)["error_code"] == 0


# -- the Java client and Kafka's tools -----------------------------------------------------------


def _java_props(tmp_path: Path, name: str, lines: list[str]) -> str:
    path = tmp_path / f"{name}.properties"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


JAVA_LOGINS = {
    "PLAIN": ["sasl.mechanism=PLAIN",
              'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="alice" password="alice-secret";'],
    "SCRAM-SHA-512": ["sasl.mechanism=SCRAM-SHA-512",
                      'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                      'username="carol" password="carol-secret";'],
    "OAUTHBEARER": ["sasl.mechanism=OAUTHBEARER",
                    "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                    'required unsecuredLoginStringClaim_sub="alice";'],
}


def test_java_client_console_tools(sasl_broker: EmbeddedBroker, tmp_path: Path) -> None:
    kafka = find_kafka_tools("4")
    bs = ["--bootstrap-server", sasl_bootstrap(sasl_broker)]
    for mechanism, login in JAVA_LOGINS.items():
        props = _java_props(tmp_path, mechanism, ["security.protocol=SASL_PLAINTEXT", *login])
        topic = unique_name("java")
        kafka.run("kafka-console-producer", *bs, "--topic", topic, "--command-config", props,
                  stdin="a\nb\n")
        out = kafka.run("kafka-console-consumer", *bs, "--topic", topic, "--from-beginning",
                        "--max-messages", "2", "--command-config", props).stdout.split()
        assert out == ["a", "b"], mechanism
    wrong = _java_props(tmp_path, "wrong", [
        "security.protocol=SASL_PLAINTEXT", "sasl.mechanism=SCRAM-SHA-512",
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="carol" password="nope";'])
    bad = kafka.run("kafka-topics", *bs, "--list", "--command-config", wrong, check=False, timeout=120)
    assert bad.returncode != 0
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in bad.stdout + bad.stderr


def test_kafka_configs_users_scram(sasl_broker: EmbeddedBroker, tmp_path: Path) -> None:
    kafka = find_kafka_tools("4")
    user = unique_name("erin")
    bs = ["--bootstrap-server", sasl_broker.bootstrap_servers]
    kafka.run("kafka-configs", *bs, "--alter", "--add-config",
              "SCRAM-SHA-256=[iterations=8192,password=erin-secret]", "--entity-type", "users",
              "--entity-name", user)
    # (kafka-configs --describe --entity-type users also asks DescribeClientQuotas, the quotas
    # part of issue 16: the credential is checked through the admin API here.)
    admin = AdminClient({"bootstrap.servers": sasl_broker.bootstrap_servers})
    infos = admin.describe_user_scram_credentials([user])[user].result(timeout=30).scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in infos] == [(ScramMechanism.SCRAM_SHA_256, 8192)]
    roundtrip_confluent(librdkafka_conf(sasl_broker, "SCRAM-SHA-256", user, "erin-secret"), unique_name("erin"))


def test_java_client_reauthenticates(reauth_broker: EmbeddedBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A producer running past several sessions of connections.max.reauth.ms=1500 re-authenticates
    and is never cut off."""
    caplog.set_level(logging.INFO, logger="odradek.security")
    kafka = find_kafka_tools("4")
    props = _java_props(tmp_path, "reauth", ["security.protocol=SASL_PLAINTEXT", *JAVA_LOGINS["PLAIN"]])
    topic = unique_name("reauth")
    out = kafka.run(
        "kafka-producer-perf-test", "--topic", topic, "--num-records", "60", "--record-size", "100",
        "--throughput", "12", "--producer.config", props,
        "--producer-props", f"bootstrap.servers={sasl_bootstrap(reauth_broker)}", timeout=120,
    ).stdout
    assert "60 records sent" in out
    assert "re-authenticated" in caplog.text


def test_odradek_configs_users_scram(sasl_broker: EmbeddedBroker, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The users/SCRAM part of ``odradek configs`` (odradek.cli.scram_configs), over SASL with a
    --command-config as kafka-configs."""
    from argparse import Namespace

    from odradek.cli.scram_configs import alter_user_scram, describe_user_scram

    props = _java_props(tmp_path, "admin", ["security.protocol=SASL_PLAINTEXT", *JAVA_LOGINS["SCRAM-SHA-512"]])
    user = unique_name("gina")
    common = {"bootstrap_server": sasl_bootstrap(sasl_broker), "entity_name": user, "command_config": props}
    # Two mechanisms of one user in one request: DUPLICATE_RESOURCE, as Kafka's ScramControlManager
    assert alter_user_scram(Namespace(**common, add_config="SCRAM-SHA-256=[iterations=8192,password=gina-secret],"
                                      "SCRAM-SHA-512=[password=gina-secret]", delete_config=None)) == 1
    assert "DuplicateResourceException" in capsys.readouterr().err
    for config in ("SCRAM-SHA-256=[iterations=8192,password=gina-secret]", "SCRAM-SHA-512=[password=gina-secret]"):
        assert alter_user_scram(Namespace(**common, add_config=config, delete_config=None)) == 0
        assert capsys.readouterr().out == f"Completed updating config for user {user}.\n"
    assert describe_user_scram(Namespace(**common)) == 0
    assert capsys.readouterr().out == (
        f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-256=iterations=8192, "
        "SCRAM-SHA-512=iterations=4096\n"
    )
    roundtrip_confluent(librdkafka_conf(sasl_broker, "SCRAM-SHA-256", user, "gina-secret"), unique_name("gina"))
    assert alter_user_scram(Namespace(**common, add_config=None, delete_config="SCRAM-SHA-256")) == 0
    capsys.readouterr()
    assert alter_user_scram(Namespace(**common, add_config=None, delete_config="SCRAM-SHA-256")) == 1
    assert "ResourceNotFoundException" in capsys.readouterr().err
    assert alter_user_scram(Namespace(**common, add_config="SCRAM-SHA-256=[iterations=20000,password=x]",
                                      delete_config=None)) == 1
    assert "Too many iterations" in capsys.readouterr().err


def test_odradek_configs_users_scram_and_quotas_in_one_tool(sasl_broker: EmbeddedBroker,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """``odradek configs --entity-type users`` alters and describes SCRAM credentials and quotas
    together, as kafka-configs does, and the credential logs in at once."""
    from odradek.cli.main import main

    user = unique_name("hank")
    base = ["configs", "--bootstrap-server", sasl_broker.bootstrap_servers]
    users = ["--entity-type", "users", "--entity-name", user]
    assert main([*base, "--alter", *users, "--add-config", "SCRAM-SHA-256=[iterations=8192,password=hank-secret]"]) == 0
    assert capsys.readouterr().out == f"Completed updating config for user {user}.\n"
    assert main([*base, "--alter", *users, "--add-config", "producer_byte_rate=1048576"]) == 0
    assert capsys.readouterr().out == f"Completed updating config for user {user}.\n"
    assert main([*base, "--describe", *users]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"Quota configs for user-principal '{user}' are producer_byte_rate=1048576.0",
        f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-256=iterations=8192",
    ]
    roundtrip_confluent(librdkafka_conf(sasl_broker, "SCRAM-SHA-256", user, "hank-secret"), unique_name("hank"))
    # Kafka refuses quota and SCRAM changes in one command, and too many iterations with its error.
    assert main([*base, "--alter", *users, "--add-config",
                 "producer_byte_rate=1,SCRAM-SHA-512=[password=x]"]) != 0
    assert "Cannot alter both quota and SCRAM credential configs" in capsys.readouterr().err
    assert main([*base, "--alter", *users, "--add-config", "SCRAM-SHA-512=[iterations=20000,password=x]"]) == 1
    assert "UnacceptableCredentialException" in capsys.readouterr().err
