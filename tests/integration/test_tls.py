"""TLS listeners with real clients: an ``odradek server`` process with a PLAINTEXT, an SSL
(server authentication) and an MTLS listener (``MTLS:SSL`` in listener.security.protocol.map,
``listener.name.mtls.ssl.client.auth=required``, a PEM key store and principal mapping rules of
its own); certificates made at test time. confluent-kafka, kcat, kafka-python, aiokafka and the
Java console tools and kafkajs produce and consume over both; untrusted, expired and missing client
certificates are refused; a TLS handshake on the plaintext port and plaintext Kafka on a TLS
port are closed with a log line naming the mistake, and the server stays up."""

from __future__ import annotations

import asyncio
import itertools
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.embedded import EmbeddedBroker
from odradek.network.client import ConnectionClosed, NetworkClient
from odradek.network.request_channel import CloseConnection, ConnectionInfo
from odradek.network.socket_server import SocketServer
from odradek.protocol.messages import generated as g
from odradek.security.ssl_factory import (
    ListenerTls,
    client_context,
    principal_mapper,
    server_context,
)
from tests.unit.tls_certs import PASSWORD, TlsFiles, make_ca, make_tls_files, write_pem

from .kafka_reference import find_kafka_tools
from .support import _READY_RE, REQUIRES_KCAT, ServerProcess, unique_name, wait_until
from .test_sasl import BAD_LOGIN, PLAIN_JAAS, _auth_errors, roundtrip_confluent
from .txn_support import skip_unless

MAPPING_RULES = "RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L,DEFAULT"


class _DebugConnections(ServerProcess):
    """A server that logs each accepted connection with its principal (a DEBUG line)."""

    def _command(self) -> list[str]:
        return [*super()._command(), "--log-level", "odradek.network.socket_server=DEBUG"]


class TlsBroker:
    def __init__(self, files: TlsFiles, server: ServerProcess, ports: dict[str, int]) -> None:
        self.files = files
        self.server = server
        self.ports = ports

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def log(self) -> str:
        return self.server.log_path.read_text("utf-8", "replace")


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls-certs"))


@pytest.fixture(scope="module")
def tls_broker(tls_files: TlsFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    base = tmp_path_factory.mktemp("tls-broker")
    # The MTLS listener's key store: one PEM file with the (encrypted) key and the chain.
    pem_store = write_pem(tls_files.dir / "server-store.pem", tls_files.server.key_pem(PASSWORD)
                          + tls_files.server.cert_pem + tls_files.ca.cert_pem)
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,CONTROLLER:PLAINTEXT",
        **tls_files.server_props(),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.keystore.type": "PEM",
        "listener.name.mtls.ssl.keystore.location": str(pem_store),
        "listener.name.mtls.ssl.keystore.password": "",
        "listener.name.mtls.ssl.key.password": PASSWORD,
        "listener.name.mtls.ssl.truststore.type": "PEM",
        "listener.name.mtls.ssl.truststore.location": str(tls_files.ca_pem),
        "listener.name.mtls.ssl.truststore.password": "",  # PEM stores take no store password
        "listener.name.mtls.ssl.principal.mapping.rules": MAPPING_RULES,
    }
    server = _DebugConnections(base / "data", overrides).start()
    ready = _READY_RE.findall(server.log_path.read_text())[-1]
    ports = {name: int(addr.rsplit(":", 1)[1]) for name, addr in (e.split("://", 1) for e in ready.split(", "))}
    try:
        yield TlsBroker(tls_files, server, ports)
    finally:
        server.terminate()


def _rdkafka_ssl(files: TlsFiles, cert: tuple[Path, Path, Path] | None = None) -> dict[str, str]:
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(files.ca_pem)}
    if cert is not None:
        conf["ssl.certificate.location"] = str(cert[0])
        conf["ssl.key.location"] = str(cert[1])
    return conf


def _create_topic(broker: TlsBroker, partitions: int = 1) -> str:
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap("SSL"), **_rdkafka_ssl(broker.files)})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    return topic


def _consume_all(conf: dict[str, str], topic: str, n: int) -> list[bytes]:
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < n and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(msg.value())
    finally:
        c.close()
    return out


@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
def test_confluent_kafka_produce_consume(tls_broker: TlsBroker, listener: str) -> None:
    files = tls_broker.files
    cert = files.client("carol", ou="Apps") if listener == "MTLS" else None
    conf = {"bootstrap.servers": tls_broker.bootstrap(listener), **_rdkafka_ssl(files, cert)}
    topic = _create_topic(tls_broker)
    p = Producer({**conf, "linger.ms": 5})
    values = [f"v{i}".encode() * 100 for i in range(200)]
    for v in values:
        p.produce(topic, v)
    assert p.flush(30) == 0
    assert _consume_all(conf, topic, len(values)) == values


def test_large_fetch_over_tls_is_copied_in_pieces(tls_broker: TlsBroker) -> None:
    """A fetch response larger than the copy chunk (the sendfile fallback reads and writes it
    a piece at a time) arrives whole."""
    conf = {"bootstrap.servers": tls_broker.bootstrap("SSL"), **_rdkafka_ssl(tls_broker.files)}
    topic = _create_topic(tls_broker)
    p = Producer({**conf, "linger.ms": 20, "batch.size": 1_000_000})
    values = [bytes([i % 251]) * 50_000 for i in range(60)]  # 3 MB
    for v in values:
        p.produce(topic, v)
    assert p.flush(30) == 0
    got = _consume_all({**conf, "fetch.max.bytes": "52428800", "max.partition.fetch.bytes": "10485760"},
                       topic, len(values))
    assert got == values


def test_principal_mapped_from_the_client_certificate(tls_broker: TlsBroker) -> None:
    """The MTLS listener names a connection by its certificate through its mapping rules; the
    connection's principal appears in the broker's connection log line."""
    cert = tls_broker.files.client("Dave", ou="Payments")
    conf = {"bootstrap.servers": tls_broker.bootstrap("MTLS"), **_rdkafka_ssl(tls_broker.files, cert)}
    admin = AdminClient(conf)
    admin.list_topics(timeout=20)
    wait_until(lambda: "principal User:dave@payments" in tls_broker.log(), 10, what="the principal in the log")


@REQUIRES_KCAT
def test_kcat_over_mutual_tls(tls_broker: TlsBroker) -> None:
    files = tls_broker.files
    cert, key, _ = files.client("kcat-user")
    topic = _create_topic(tls_broker)
    ssl_args = ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={files.ca_pem}",
                "-X", f"ssl.certificate.location={cert}", "-X", f"ssl.key.location={key}"]
    bs = ["-b", tls_broker.bootstrap("MTLS")]
    subprocess.run(["kcat", *bs, *ssl_args, "-P", "-t", topic], input="a\nb\nc\n", text=True,
                   check=True, timeout=60, capture_output=True)
    out = subprocess.run(["kcat", *bs, *ssl_args, "-C", "-t", topic, "-o", "beginning", "-c", "3", "-e"],
                         text=True, check=True, timeout=60, capture_output=True).stdout
    assert out.split() == ["a", "b", "c"]


def test_kafka_python_over_mutual_tls(tls_broker: TlsBroker) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    files = tls_broker.files
    cert, key, _ = files.client("kp-user")
    conf = dict(bootstrap_servers=tls_broker.bootstrap("MTLS"), security_protocol="SSL",
                ssl_cafile=str(files.ca_pem), ssl_certfile=str(cert), ssl_keyfile=str(key))
    topic = _create_topic(tls_broker)
    producer = KafkaProducer(**conf)
    for i in range(10):
        producer.send(topic, f"m{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **conf)
    got = [m.value for m in itertools.islice(consumer, 10)]  # the timeout bounds a shortfall
    consumer.close()
    assert got == [f"m{i}".encode() for i in range(10)]


def test_aiokafka_over_tls(tls_broker: TlsBroker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    files = tls_broker.files
    cert, key, _ = files.client("aio-user")
    topic = _create_topic(tls_broker)

    async def go() -> list[bytes]:
        ctx = create_ssl_context(cafile=str(files.ca_pem), certfile=str(cert), keyfile=str(key))
        kw = dict(bootstrap_servers=tls_broker.bootstrap("MTLS"), security_protocol="SSL", ssl_context=ctx)
        producer = AIOKafkaProducer(**kw)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **kw)
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

    assert asyncio.run(go()) == [f"a{i}".encode() for i in range(10)]


def test_java_console_tools_over_mutual_tls(tls_broker: TlsBroker, tmp_path: Path) -> None:
    """The Java client with a PEM trust store and a PKCS12 key store."""
    kafka = find_kafka_tools("4")
    files = tls_broker.files
    _, _, p12 = files.client("java-user", ou="Jvm")
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SSL\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={files.ca_pem}\n"
        "ssl.keystore.type=PKCS12\n"
        f"ssl.keystore.location={p12}\n"
        f"ssl.keystore.password={PASSWORD}\n"
        f"ssl.key.password={PASSWORD}\n"
    )
    topic = _create_topic(tls_broker)
    bs = ["--bootstrap-server", tls_broker.bootstrap("MTLS")]
    kafka.run("kafka-console-producer", *bs, "--topic", topic, "--command-config", str(config),
              stdin="j1\nj2\nj3\n")
    out = kafka.run("kafka-console-consumer", *bs, "--topic", topic, "--from-beginning",
                    "--max-messages", "3", "--command-config", str(config)).stdout.split()
    assert out == ["j1", "j2", "j3"]
    wait_until(lambda: "principal User:java-user@jvm" in tls_broker.log(), 10, what="the Java client's principal")


@pytest.mark.parametrize("case", ["untrusted", "expired", "none"])
def test_bad_client_certificates_refused(tls_broker: TlsBroker, case: str) -> None:
    files = tls_broker.files
    cert = {"untrusted": lambda: files.client("mallory", ca=make_ca("Rogue CA")),
            "expired": lambda: files.client("old-user", expired=True),
            "none": lambda: None}[case]()
    admin = AdminClient({"bootstrap.servers": tls_broker.bootstrap("MTLS"), **_rdkafka_ssl(files, cert),
                         "retries": 0, "reconnect.backoff.max.ms": 1000})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
    needle = {"untrusted": "certificate verify failed", "expired": "certificate verify failed",
              "none": "peer did not return a certificate"}[case]
    wait_until(lambda: re.search(r"TLS handshake with 127\.0\.0\.1:\d+ on listener MTLS failed.*" + needle,
                                 tls_broker.log()) is not None, 10, what=f"a handshake failure log line ({needle})")


def test_tls_handshake_on_the_plaintext_port_and_plaintext_on_tls(tls_broker: TlsBroker) -> None:
    # A TLS client on the PLAINTEXT listener: its ClientHello reads as a huge request size.
    ctx = client_context({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls_broker.files.ca_pem)})
    with socket.create_connection(("127.0.0.1", tls_broker.ports["PLAINTEXT"]), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, OSError)):
            ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    wait_until(lambda: "looks like a TLS handshake: a client configured for SSL connected to a PLAINTEXT listener"
               in tls_broker.log(), 10, what="the TLS-on-plaintext log line")

    # A plaintext Kafka client (ApiVersions) on the SSL listener.
    async def plaintext_on_tls() -> None:
        client = NetworkClient("127.0.0.1", tls_broker.ports["SSL"])
        try:
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(client.send(g.API_VERSIONS, 3, {"client_software_name": "x",
                                                                      "client_software_version": "1"}), 10)
        finally:
            await client.close()

    asyncio.run(plaintext_on_tls())
    wait_until(lambda: re.search(r"TLS handshake with \S+ on listener SSL failed.*not a TLS client",
                                 tls_broker.log()) is not None, 10, what="the plaintext-on-TLS log line")
    # Still serving, on every listener.
    conf = {"bootstrap.servers": tls_broker.bootstrap("SSL"), **_rdkafka_ssl(tls_broker.files)}
    assert AdminClient(conf).list_topics(timeout=20).brokers
    assert AdminClient({"bootstrap.servers": tls_broker.bootstrap("PLAINTEXT")}).list_topics(timeout=20).brokers


def test_connection_principal_reaches_the_request_handler(tls_files: TlsFiles) -> None:
    """In process: the handler sees ConnectionInfo.principal mapped from the client certificate
    by ssl.principal.mapping.rules, User:ANONYMOUS without one, and security_protocol SSL."""
    settings = {**tls_files.server_props(client_auth="requested"), "ssl.principal.mapping.rules": MAPPING_RULES}
    seen: list[ConnectionInfo] = []

    class Recorder:
        def handle(self, conn: ConnectionInfo, frame: bytearray) -> None:
            seen.append(conn)
            raise CloseConnection("recorded")

    async def go() -> None:
        server = SocketServer("127.0.0.1", 0, Recorder(), listener_name="SSL", security_protocol="SSL",
                              tls=ListenerTls(server_context(settings), principal_mapper(settings)))
        await server.start()
        try:
            for cert in (tls_files.client("Erin", ou="Ops"), None):
                client_settings = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls_files.ca_pem)}
                if cert is not None:
                    client_settings.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(cert[1])})
                    # a PEM key store file holds the key and the chain
                    both = tls_files.dir / "erin-store.pem"
                    both.write_text(cert[1].read_text() + cert[0].read_text())
                    client_settings["ssl.keystore.location"] = str(both)
                client = NetworkClient("127.0.0.1", server.port, ssl_context=client_context(client_settings))
                try:
                    with pytest.raises(ConnectionClosed):
                        await asyncio.wait_for(client.send(g.API_VERSIONS, 3, {
                            "client_software_name": "t", "client_software_version": "1"}), 10)
                finally:
                    await client.close()
        finally:
            await server.stop()

    asyncio.run(go())
    assert [str(c.principal) for c in seen] == ["User:erin@ops", "User:ANONYMOUS"]
    assert {c.security_protocol for c in seen} == {"SSL"}


def test_three_node_cluster_all_on_tls(tls_files: TlsFiles, tmp_path: Path) -> None:
    """Three combined KRaft nodes whose every listener is TLS with required client certificates:
    Raft between the controllers, broker registration and heartbeats, and the replica fetchers all
    connect with the nodes' own certificate (host names checked, ssl.endpoint.identification.
    algorithm=https), and a topic with three replicas keeps all of them in sync."""
    from .replication_cluster import Node
    from .test_raft_quorum import _free_ports

    ports = _free_ports(6)
    voters = ",".join(f"{i}@127.0.0.1:{ports[2 + i]}" for i in (1, 2, 3))
    ssl_props = "".join(f"{k}={v}\n" for k, v in tls_files.server_props(client_auth="required").items())
    nodes = [
        Node(i, ports[i - 1], voters, tmp_path, (
            f"process.roles=broker,controller\nnode.id={i}\n"
            f"listeners=INTERNAL://127.0.0.1:{ports[i - 1]},CONTROLLER://127.0.0.1:{ports[2 + i]}\n"
            "listener.security.protocol.map=INTERNAL:SSL,CONTROLLER:SSL\n"
            "inter.broker.listener.name=INTERNAL\ncontroller.listener.names=CONTROLLER\n"
            f"controller.quorum.voters={voters}\nlog.dirs={tmp_path / f'c{i}'}\n"
            "offsets.topic.replication.factor=3\n" + ssl_props
        ))
        for i in (1, 2, 3)
    ]
    cert = tls_files.client("admin")
    conf = {"bootstrap.servers": ",".join(n.bootstrap for n in nodes), **_rdkafka_ssl(tls_files, cert)}
    try:
        for n in nodes:
            n.format()
        for n in nodes:
            n.start()
        admin = AdminClient(conf)

        def registered() -> bool:
            try:
                return len(admin.list_topics(timeout=5).brokers) == 3
            except KafkaException:
                return False  # not serving yet

        wait_until(registered, 90, what="three brokers registered")
        topic = "replicated-over-tls"
        admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(60)
        p = Producer({**conf, "acks": "all", "linger.ms": 5})
        values = [f"r{i}".encode() for i in range(300)]
        for v in values:
            p.produce(topic, v)
        assert p.flush(60) == 0

        def in_sync() -> bool:
            parts = admin.list_topics(topic, timeout=5).topics[topic].partitions
            return len(parts) == 3 and all(sorted(pm.isrs) == [1, 2, 3] for pm in parts.values())

        wait_until(in_sync, 60, what="every partition with three in-sync replicas")
        assert sorted(_consume_all(conf, topic, len(values))) == sorted(values)

        def replicated() -> bool:
            """The followers fetched everything: each partition's log has the same size on all
            three nodes."""
            for part in range(3):
                sizes = {sum(f.stat().st_size for f in (tmp_path / f"c{i}" / f"{topic}-{part}").glob("*.log"))
                         for i in (1, 2, 3)}
                if len(sizes) != 1 or sizes == {0}:
                    return False
            return True

        wait_until(replicated, 60, what="each partition's log the same on the three nodes")
        logs = "".join(n.log_tail() for n in nodes)
        assert "TLS handshake with" not in logs, logs
    finally:
        for n in nodes:
            n.stop()


def test_kafkajs_over_mutual_tls(tls_broker: TlsBroker) -> None:
    node_dir = Path(__file__).parent / "node"
    skip_unless(shutil.which("node") is not None and (node_dir / "node_modules" / "kafkajs").is_dir(),
                "node or kafkajs is missing (npm ci in tests/integration/node)")
    files = tls_broker.files
    cert, key, _ = files.client("js-user", ou="Node")
    topic = _create_topic(tls_broker)
    r = subprocess.run(["node", str(node_dir / "tls.js"), tls_broker.bootstrap("MTLS"), topic, str(files.ca_pem),
                        str(cert), str(key)], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0 and r.stdout.splitlines()[-1:] == ["DONE"], r.stdout[-2000:] + r.stderr[-2000:]
    assert [ln for ln in r.stdout.splitlines() if ln.startswith("READ ")] == [f"READ kafkajs-tls-{i}" for i in range(5)]
    wait_until(lambda: "principal User:js-user@node" in tls_broker.log(), 10, what="the kafkajs client's principal")


def test_unusable_tls_settings_stop_the_start(tls_files: TlsFiles, tmp_path: Path) -> None:
    """A wrong key store password: exit 2 with one line naming the listener and the key (and not
    the password)."""
    props = {**tls_files.server_props(), "ssl.keystore.password": "wrong"}
    args = [sys.executable, "-m", "odradek.cli.main", "server", "-o", f"log.dirs={tmp_path / 'data'}",
            "-o", "listeners=SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0", "-o", "inter.broker.listener.name=SSL"]
    for k, v in props.items():
        args += ["-o", f"{k}={v}"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 2
    assert ("odradek: listener SSL (SSL): ssl.keystore.location=" in r.stderr
            and "not a PKCS12 store, or the password is wrong" in r.stderr), r.stderr[-2000:]
    assert "wrong" not in r.stderr.replace("is wrong", "")


def test_certificate_no_rule_maps_is_closed(tls_files: TlsFiles, caplog: pytest.LogCaptureFixture) -> None:
    """A client certificate none of ssl.principal.mapping.rules matches (no DEFAULT): the
    connection is closed before any request is handled, with a log line naming the DN."""
    rules = "RULE:^CN=(.*?),OU=Services,.*$/$1/"
    settings = {**tls_files.server_props(client_auth="required"), "ssl.principal.mapping.rules": rules}
    handled: list[ConnectionInfo] = []

    class Recorder:
        def handle(self, conn: ConnectionInfo, frame: bytearray) -> None:
            handled.append(conn)
            raise CloseConnection("recorded")

    cert, key, _ = tls_files.client("frank", ou="People")
    store = tls_files.dir / "frank-store.pem"
    store.write_text(key.read_text() + cert.read_text())

    async def go() -> None:
        server = SocketServer("127.0.0.1", 0, Recorder(), listener_name="SSL", security_protocol="SSL",
                              tls=ListenerTls(server_context(settings), principal_mapper(settings)))
        await server.start()
        client = NetworkClient("127.0.0.1", server.port, ssl_context=client_context({
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls_files.ca_pem),
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(store)}))
        try:
            with pytest.raises((ConnectionClosed, OSError)):
                await asyncio.wait_for(client.send(g.API_VERSIONS, 3, {
                    "client_software_name": "t", "client_software_version": "1"}), 10)
        finally:
            await client.close()
            await server.stop()

    with caplog.at_level("WARNING", logger="odradek.network.socket_server"):
        asyncio.run(go())
    assert handled == []
    assert "no principal for the client certificate (No rules apply to CN=frank,OU=People,O=Odradek Tests" in caplog.text


def test_sasl_plain_over_tls(tls_files: TlsFiles) -> None:
    """A SASL_SSL listener: TLS as on an SSL listener, then SASL as on a SASL_PLAINTEXT one
    (confluent-kafka with security.protocol=SASL_SSL, PLAIN); a wrong password is refused."""
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        **tls_files.server_props(),
    }
    with EmbeddedBroker(overrides=overrides) as b:
        conf = {
            "bootstrap.servers": f"127.0.0.1:{b.bound_ports['SASL_SSL']}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(tls_files.ca_pem),
            "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret",
        }
        roundtrip_confluent(conf, unique_name("sasl-ssl"))
        errors = _auth_errors({**conf, "sasl.password": "wrong"})
        assert errors and BAD_LOGIN in errors[0].str()


def test_close_notify_is_answered(tls_broker: TlsBroker) -> None:
    """A client that ends its TLS session (close_notify) gets the broker's close_notify back and
    then the end of the TCP stream, as from Kafka. Clients that wait for the reply before closing
    (asyncio's SSL transport: aiokafka, Odradek's tools) must not sit out their shutdown timeout."""
    ctx = client_context({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls_broker.files.ca_pem)})
    raw = socket.create_connection(("127.0.0.1", tls_broker.ports["SSL"]), timeout=20)
    tls = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    try:
        # unwrap() sends ours and returns once the broker's close_notify is read (a socket
        # timeout, an OSError, if it never comes).
        plain = tls.unwrap()
        assert plain.recv(1) == b""  # then the broker closes the TCP connection
    finally:
        tls.close()
        raw.close()
    conf = {"bootstrap.servers": tls_broker.bootstrap("SSL"), **_rdkafka_ssl(tls_broker.files)}
    assert AdminClient(conf).list_topics(timeout=20).brokers
