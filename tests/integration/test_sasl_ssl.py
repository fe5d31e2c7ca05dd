"""SASL_SSL with SCRAM-SHA-512 through every real client: one broker with a SASL_SSL listener
(TLS with a PKCS12 key store, then SASL); the user is created with AlterUserScramCredentials.
kcat, confluent-kafka, kafka-python, aiokafka, kafkajs and the Java client (Kafka 4.x console
tools) each produce and consume; a wrong password is refused with SASL_AUTHENTICATION_FAILED's
message, and a client that does not trust the server's certificate never gets to SASL. (Mutual
TLS for the same clients is in test_tls.py.)"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic, ScramMechanism

from odradek.embedded import EmbeddedBroker
from tests.unit.tls_certs import TlsFiles, make_ca, make_tls_files, write_pem

from .kafka_reference import find_kafka_tools
from .support import REQUIRES_KCAT, unique_name
from .test_sasl import _auth_errors, add_scram, roundtrip_confluent
from .txn_support import skip_unless

USER, PASSWORD = "sally", "sally-secret-512"
BAD_LOGIN = "invalid credentials with SASL mechanism SCRAM-SHA-512"  # Kafka's SCRAM failure message


class SaslSslBroker:
    def __init__(self, broker: EmbeddedBroker, files: TlsFiles, rogue_ca: Path) -> None:
        self.broker = broker
        self.files = files
        self.rogue_ca = rogue_ca  # a CA that did not sign the server's certificate
        self.bootstrap = f"127.0.0.1:{broker.bound_ports['SASL_SSL']}"

    def rdkafka(self, password: str = PASSWORD, ca: Path | None = None) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(ca or self.files.ca_pem),
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": password,
        }

    def topic(self) -> str:
        name = unique_name("sasl-ssl")
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap_servers})
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
        return name


@pytest.fixture(scope="module")
def sasl_ssl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslSslBroker]:
    files = make_tls_files(tmp_path_factory.mktemp("sasl-ssl-certs"))
    rogue = write_pem(files.dir / "rogue-ca.pem", make_ca("Rogue CA").cert_pem)
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        **files.server_props(),
    }
    with EmbeddedBroker(overrides=overrides) as b:
        add_scram(b.bootstrap_servers, USER, PASSWORD, ScramMechanism.SCRAM_SHA_512, 8192)
        yield SaslSslBroker(b, files, rogue)


def _tls_errors(conf: dict[str, Any]) -> list[KafkaError]:
    """librdkafka's errors while it tries to reach the broker (bounded)."""
    errors: list[KafkaError] = []
    p = Producer({**conf, "error_cb": errors.append, "socket.timeout.ms": 5000})
    p.produce("never", b"x")
    deadline = time.monotonic() + 15
    while not any(e.code() == KafkaError._SSL for e in errors) and time.monotonic() < deadline:
        p.poll(0.2)
    p.purge()
    return errors


def test_confluent_kafka(sasl_ssl: SaslSslBroker) -> None:
    roundtrip_confluent(sasl_ssl.rdkafka(), sasl_ssl.topic())


def test_wrong_password_refused(sasl_ssl: SaslSslBroker) -> None:
    errors = _auth_errors(sasl_ssl.rdkafka(password="not-the-password"))
    assert errors and BAD_LOGIN in errors[0].str()


def test_untrusted_server_certificate_refused(sasl_ssl: SaslSslBroker) -> None:
    """The client trusts only another CA: the TLS handshake fails on the client's side, so no
    SASL exchange (and no password) ever reaches the broker."""
    errors = _tls_errors(sasl_ssl.rdkafka(ca=sasl_ssl.rogue_ca))
    ssl_errors = [e for e in errors if e.code() == KafkaError._SSL]
    assert ssl_errors and "certificate verify failed" in ssl_errors[0].str(), [e.str() for e in errors]
    assert not [e for e in errors if e.code() == KafkaError._AUTHENTICATION]


@REQUIRES_KCAT
def test_kcat(sasl_ssl: SaslSslBroker) -> None:
    topic = sasl_ssl.topic()
    args = ["-b", sasl_ssl.bootstrap]
    for k, v in sasl_ssl.rdkafka().items():
        if k != "bootstrap.servers":
            args += ["-X", f"{k}={v}"]
    subprocess.run(["kcat", *args, "-P", "-t", topic], input="a\nb\nc\n", text=True, check=True,
                   timeout=60, capture_output=True)
    out = subprocess.run(["kcat", *args, "-C", "-t", topic, "-o", "beginning", "-c", "3", "-e"],
                         text=True, check=True, timeout=60, capture_output=True).stdout
    assert out.split() == ["a", "b", "c"]
    bad = [a.replace(f"sasl.password={PASSWORD}", "sasl.password=nope") for a in args]
    r = subprocess.run(["kcat", *bad, "-L", "-m", "5"], text=True, timeout=60, capture_output=True)
    assert r.returncode != 0 and BAD_LOGIN in r.stderr, r.stderr[-2000:]


def test_kafka_python(sasl_ssl: SaslSslBroker) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError as KpError

    def conf(password: str) -> dict[str, Any]:
        return dict(bootstrap_servers=sasl_ssl.bootstrap, security_protocol="SASL_SSL",
                    ssl_cafile=str(sasl_ssl.files.ca_pem), sasl_mechanism="SCRAM-SHA-512",
                    sasl_plain_username=USER, sasl_plain_password=password)

    topic = sasl_ssl.topic()
    producer = KafkaProducer(**conf(PASSWORD))
    for i in range(10):
        producer.send(topic, f"k{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **conf(PASSWORD))
    got = [m.value for m in itertools.islice(consumer, 10)]  # the timeout bounds a shortfall
    consumer.close()
    assert got == [f"k{i}".encode() for i in range(10)]
    with pytest.raises(KpError):
        KafkaProducer(**conf("wrong"), max_block_ms=5000, reconnect_backoff_max_ms=500,
                      bootstrap_timeout_ms=5000)


def test_aiokafka(sasl_ssl: SaslSslBroker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.errors import KafkaError as AioError
    from aiokafka.helpers import create_ssl_context

    topic = sasl_ssl.topic()

    def kw(password: str) -> dict[str, Any]:
        return dict(bootstrap_servers=sasl_ssl.bootstrap, security_protocol="SASL_SSL",
                    ssl_context=create_ssl_context(cafile=str(sasl_ssl.files.ca_pem)),
                    sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=USER, sasl_plain_password=password)

    async def go() -> list[bytes]:
        producer = AIOKafkaProducer(**kw(PASSWORD))
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **kw(PASSWORD))
        await consumer.start()
        out: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for msg in consumer:
                    out.append(msg.value)
                    if len(out) == 10:
                        break
        finally:
            await consumer.stop()
        return out

    async def wrong() -> None:
        producer = AIOKafkaProducer(**kw("wrong"), request_timeout_ms=5000)
        try:
            async with asyncio.timeout(30):
                await producer.start()
        finally:
            await producer.stop()

    assert asyncio.run(go()) == [f"a{i}".encode() for i in range(10)]
    with pytest.raises(AioError):
        asyncio.run(wrong())


def _kafkajs(sasl_ssl: SaslSslBroker, topic: str, password: str, ca: Path) -> subprocess.CompletedProcess[str]:
    node_dir = Path(__file__).parent / "node"
    return subprocess.run(["node", str(node_dir / "sasl_ssl.js"), sasl_ssl.bootstrap, topic, str(ca), USER, password],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_kafkajs(sasl_ssl: SaslSslBroker) -> None:
    node_dir = Path(__file__).parent / "node"
    skip_unless(shutil.which("node") is not None and (node_dir / "node_modules" / "kafkajs").is_dir(),
                "node or kafkajs is missing (npm ci in tests/integration/node)")
    topic = sasl_ssl.topic()
    r = _kafkajs(sasl_ssl, topic, PASSWORD, sasl_ssl.files.ca_pem)
    assert r.returncode == 0 and r.stdout.splitlines()[-1:] == ["DONE"], r.stdout[-2000:] + r.stderr[-2000:]
    assert [ln for ln in r.stdout.splitlines() if ln.startswith("READ ")] == [
        f"READ kafkajs-sasl-ssl-{i}" for i in range(5)]
    bad = _kafkajs(sasl_ssl, topic, "wrong", sasl_ssl.files.ca_pem)
    assert bad.returncode == 1 and "SASL SCRAM SHA512 authentication failed" in bad.stderr, bad.stderr[-2000:]
    untrusted = _kafkajs(sasl_ssl, topic, PASSWORD, sasl_ssl.rogue_ca)
    assert untrusted.returncode == 1 and "certificate" in untrusted.stderr, untrusted.stderr[-2000:]


def test_java_console_tools(sasl_ssl: SaslSslBroker, tmp_path: Path) -> None:
    """The Java client: a PEM trust store, SCRAM-SHA-512 through the ScramLoginModule."""
    kafka = find_kafka_tools("4")

    def props(name: str, password: str, truststore: str) -> str:
        path = tmp_path / f"{name}.properties"
        path.write_text(
            "security.protocol=SASL_SSL\n"
            + truststore
            + "sasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{USER}" password="{password}";\n'
        )
        return str(path)

    files = sasl_ssl.files
    # (a PEM trust store: Java ignores certificates in a PKCS12 store made without its
    # trusted-key-usage attribute, as the cryptography library writes them)
    good_trust = f"ssl.truststore.type=PEM\nssl.truststore.location={files.ca_pem}\n"
    good = props("good", PASSWORD, good_trust)
    topic = sasl_ssl.topic()
    bs = ["--bootstrap-server", sasl_ssl.bootstrap]
    kafka.run("kafka-console-producer", *bs, "--topic", topic, "--command-config", good, stdin="j1\nj2\nj3\n")
    out = kafka.run("kafka-console-consumer", *bs, "--topic", topic, "--from-beginning", "--max-messages", "3",
                    "--command-config", good).stdout.split()
    assert out == ["j1", "j2", "j3"]
    wrong = props("wrong", "nope", good_trust)
    bad = kafka.run("kafka-topics", *bs, "--list", "--command-config", wrong, check=False, timeout=120)
    assert bad.returncode != 0
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in bad.stdout + bad.stderr
    rogue = props("rogue", PASSWORD, f"ssl.truststore.type=PEM\nssl.truststore.location={sasl_ssl.rogue_ca}\n")
    bad = kafka.run("kafka-topics", *bs, "--list", "--command-config", rogue, check=False, timeout=120)
    assert bad.returncode != 0
    assert "SSL handshake failed" in bad.stdout + bad.stderr, (bad.stdout + bad.stderr)[-3000:]
