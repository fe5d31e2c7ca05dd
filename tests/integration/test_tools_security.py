"""Every ``odradek`` tool over TLS and SASL with ``--command-config`` (Kafka's client security
keys): one broker with SASL_PLAINTEXT and SASL_SSL (SCRAM-SHA-512) and mutual TLS listeners and
the StandardAuthorizer; the tools run as subprocesses, as a user would run them. A wrong password ends
with Kafka's SASL_AUTHENTICATION_FAILED message, an untrusted server certificate with a TLS one."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from odradek.embedded import EmbeddedBroker
from tests.unit.tls_certs import PASSWORD, TlsFiles, make_ca, make_tls_files, write_pem

from .support import unique_name, wait_until

SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              'username="carol" password="{password}";')
ROOT = Path(__file__).resolve().parents[2]


class Setup:
    def __init__(self, broker: EmbeddedBroker, files: TlsFiles, configs: dict[str, Path], bad: dict[str, Path],
                 broker_dir: Path) -> None:
        self.broker = broker
        self.broker_dir = broker_dir
        self.files = files
        self.configs = configs  # listener -> a --command-config that works
        self.bad = bad

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.broker.bound_ports[listener]}"


def _props(path: Path, props: dict[str, str]) -> Path:
    # Java properties: a backslash at the end of a line continues it, so inline PEM is one line
    # with \n escapes; the files here keep values on one line.
    path.write_text("".join(f"{k}={v.replace(chr(10), chr(92) + 'n')}\n" for k, v in props.items()))
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    d = tmp_path_factory.mktemp("tools-security")
    files = make_tls_files(d / "certs")
    cert, key, p12 = files.client("tool", ou="Tools")
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,MTLS://127.0.0.1:0,"
                     "SASL_SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,MTLS:SSL,"
                                          "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        **files.server_props(),
        "listener.name.mtls.ssl.client.auth": "required",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
    }
    with EmbeddedBroker(overrides=overrides) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"carol-secret")]).values():
            f.result(timeout=30)
        scram = {"sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": SCRAM_JAAS.format(password="carol-secret")}
        configs = {
            "SASL_PLAINTEXT": _props(d / "sasl.properties", {"security.protocol": "SASL_PLAINTEXT", **scram}),
            # SCRAM over TLS, the server certificate's name checked (Kafka's default "https")
            "SASL_SSL": _props(d / "sasl-ssl.properties", {
                "security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(files.ca_pem), **scram}),
            "MTLS": _props(d / "mtls.properties", {
                "security.protocol": "SSL", "ssl.truststore.type": "PKCS12",
                "ssl.truststore.location": str(files.truststore_p12), "ssl.truststore.password": PASSWORD,
                "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(p12),
                "ssl.keystore.password": PASSWORD}),
            "MTLS_PEM": _props(d / "mtls-pem.properties", {
                "security.protocol": "SSL", "ssl.truststore.type": "PEM",
                "ssl.truststore.certificates": files.ca.cert_pem, "ssl.keystore.type": "PEM",
                "ssl.keystore.certificate.chain": cert.read_text(), "ssl.keystore.key": key.read_text()}),
        }
        other_ca = write_pem(d / "other-ca.pem", make_ca("Some Other CA").cert_pem)
        bad = {
            "password": _props(d / "bad-password.properties", {
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": SCRAM_JAAS.format(password="wrong")}),
            "untrusted": _props(d / "untrusted.properties", {
                "security.protocol": "SSL", "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(other_ca), "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": str(p12), "ssl.keystore.password": PASSWORD}),
            "ssl-password": _props(d / "bad-ssl-password.properties", {
                "security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(files.ca_pem), "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": SCRAM_JAAS.format(password="wrong")}),
            "gssapi": _props(d / "gssapi.properties", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"}),
        }
        yield Setup(b, files, configs, bad, d)


def odradek(*args: str, stdin: str | None = None, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "odradek.cli.main", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


LISTENERS = ["SASL_PLAINTEXT", "MTLS", "SASL_SSL"]


@pytest.mark.parametrize("listener", LISTENERS)
def test_admin_tools(setup: Setup, listener: str) -> None:
    b, cfg = setup.bootstrap(listener), str(setup.configs[listener])
    topic = unique_name("sec")
    r = odradek("topics", "--bootstrap-server", b, "--command-config", cfg, "--create", "--topic", topic,
                "--partitions", "2")
    assert r.returncode == 0, r.stderr
    assert f"Created topic {topic}." in r.stdout
    offsets = setup.broker_dir / f"offsets-{listener}.json"
    offsets.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 0}], "version": 1}))
    conn = ["--bootstrap-server", b, "--command-config", cfg]
    table = [
        (["topics", "--list", *conn], topic),
        (["configs", "--describe", "--entity-type", "topics", "--entity-name", topic, *conn],
         f"Dynamic configs for topic {topic}"),
        (["groups", "--list", *conn], ""),
        (["acls", "--list", *conn], ""),
        (["get-offsets", "--topic", topic, *conn], f"{topic}:0:0"),
        (["features", *conn, "describe"], "metadata.version"),
        (["broker-api-versions", *conn], "ApiVersions(18)"),
        (["cluster", "info", *conn], "Cluster ID"),
        (["log-dirs", "--describe", *conn], '"brokers"'),
        (["delete-records", "--offset-json-file", str(offsets), *conn], "low_watermark: 0"),
        (["metadata-quorum", *conn, "describe", "--status"], "LeaderId"),
        (["reassign", "--list", *conn], "No partition reassignments found."),
        (["leader-election", "--bootstrap-server", b, "--admin.config", cfg, "--election-type", "PREFERRED",
          "--topic", topic, "--partition", "0"], ""),
        (["transactions", *conn, "list"], "TransactionalId"),
        (["client-quotas", "--alter", "--add-config", "producer_byte_rate=1048576", "--entity-type", "clients",
          "--entity-name", f"c-{topic}", *conn], f"Completed updating config for client c-{topic}."),
        (["client-quotas", "--describe", "--entity-type", "clients", "--entity-name", f"c-{topic}", *conn],
         "producer_byte_rate=1048576.0"),
        (["configs", "--describe", "--entity-type", "users", "--entity-name", "carol", *conn],
         "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-512=iterations=4096"),
    ]
    for args, expected in table:
        r = odradek(*args)
        assert r.returncode == 0, (args, r.stdout, r.stderr)
        assert expected in r.stdout, (args, r.stdout)


def test_inline_pem_stores(setup: Setup) -> None:
    """Trust and key material inline in the properties file (one line, ``\\n`` escapes)."""
    r = odradek("topics", "--bootstrap-server", setup.bootstrap("MTLS"), "--command-config",
                str(setup.configs["MTLS_PEM"]), "--list")
    assert r.returncode == 0, r.stderr
    r = odradek("produce", "--bootstrap-server", setup.bootstrap("MTLS"), "--topic", unique_name("pem"),
                "--producer.config", str(setup.configs["MTLS_PEM"]), stdin="x\n")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("listener", LISTENERS)
def test_produce_consume_perf(setup: Setup, listener: str) -> None:
    b, cfg = setup.bootstrap(listener), str(setup.configs[listener])
    topic = unique_name("rt")
    r = odradek("produce", "--bootstrap-server", b, "--topic", topic, "--producer.config", cfg,
                stdin="one\ntwo\nthree\n")
    assert r.returncode == 0, r.stderr
    r = odradek("consume", "--bootstrap-server", b, "--topic", topic, "--consumer.config", cfg,
                "--from-beginning", "--max-messages", "3", "--timeout-ms", "30000")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["one", "two", "three"]
    r = odradek("perf", "produce", "--topic", topic, "--num-records", "50", "--record-size", "100",
                "--throughput", "-1", "--producer-props", f"bootstrap.servers={b}", "--producer.config", cfg)
    assert r.returncode == 0, r.stderr
    assert "50 records sent" in r.stdout


def test_console_pages_over_mutual_tls(setup: Setup) -> None:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek.cli.main", "console", "--bootstrap-server", setup.bootstrap("MTLS"),
         "--port", str(port), "--command-config", str(setup.configs["MTLS"])],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def page() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
                    return resp.read().decode()
            except OSError:
                return None
        html = wait_until(page, timeout=60, what="the console's first page")
        assert "cannot connect" not in html
        assert "broker" in html.lower()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("args", [
    ["topics", "--list"], ["groups", "--list"], ["transactions", "list"], ["acls", "--list"],
])
def test_wrong_password_fails_with_sasl_authentication_failed(setup: Setup, args: list[str], listener: str) -> None:
    start = time.monotonic()
    r = odradek(*args[:1], "--bootstrap-server", setup.bootstrap(listener),
                "--command-config", str(setup.bad["password" if listener == "SASL_PLAINTEXT" else "ssl-password"]),
                *args[1:])
    assert r.returncode == 1
    out = r.stdout + r.stderr
    assert "SaslAuthenticationException: Authentication failed during authentication due to invalid " \
           "credentials with SASL mechanism SCRAM-SHA-512" in out, out
    assert "Traceback" not in out
    assert time.monotonic() - start < 60  # refused at once, not after the API timeout


def test_wrong_password_fails_produce(setup: Setup) -> None:
    r = odradek("produce", "--bootstrap-server", setup.bootstrap("SASL_PLAINTEXT"), "--topic", "t",
                "--producer.config", str(setup.bad["password"]), stdin="x\n")
    assert r.returncode == 1
    assert "SaslAuthenticationException" in r.stderr, r.stderr


@pytest.mark.parametrize("args", [["topics", "--list"], ["groups", "--list"]])
def test_untrusted_server_certificate_refused(setup: Setup, args: list[str]) -> None:
    r = odradek(*args[:1], "--bootstrap-server", setup.bootstrap("MTLS"),
                "--command-config", str(setup.bad["untrusted"]), *args[1:])
    assert r.returncode == 1
    out = r.stdout + r.stderr
    assert "SslAuthenticationException: SSL handshake failed" in out, out
    assert "certificate" in out


def test_gssapi_and_unknown_protocol_refused(setup: Setup, tmp_path: Path) -> None:
    r = odradek("topics", "--bootstrap-server", setup.bootstrap("SASL_PLAINTEXT"),
                "--command-config", str(setup.bad["gssapi"]), "--list")
    assert r.returncode == 1
    assert "sasl.mechanism=GSSAPI (Kerberos) is not supported" in r.stderr
    weird = _props(tmp_path / "weird.properties", {"security.protocol": "TLS"})
    r = odradek("produce", "--bootstrap-server", setup.bootstrap("PLAINTEXT"), "--topic", "t",
                "--producer.config", str(weird), stdin="x\n")
    assert r.returncode == 1
    assert "Invalid value TLS for configuration security.protocol" in r.stderr




def test_sasl_ssl_against_apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> None:
    """SASL_SSL (PLAIN over TLS, the server's name checked) against Apache Kafka too: the tools'
    side checked with Kafka's own server (Odradek's SASL_SSL listener is covered above)."""
    from .kafka_reference import KafkaServer, _free_port, find_kafka_tools

    tools = find_kafka_tools("4")
    d = tmp_path_factory.mktemp("kafka-sasl-ssl")
    files = make_tls_files(d / "certs")
    port = _free_port()
    server = KafkaServer(tools, d / "data")
    server.overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{server.port},SASL_SSL://127.0.0.1:{port},"
                     f"CONTROLLER://127.0.0.1:{server.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{server.port},SASL_SSL://127.0.0.1:{port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";',
        **files.server_props(),
    }
    base = {"security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(files.ca_pem), "sasl.mechanism": "PLAIN"}
    good = _props(d / "good.properties", {**base, "sasl.jaas.config":
                  'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="alice-secret";'})
    wrong = _props(d / "wrong.properties", {**base, "sasl.jaas.config":
                   'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="nope";'})
    server.start()
    try:
        b, topic = f"127.0.0.1:{port}", unique_name("kss")
        r = odradek("topics", "--bootstrap-server", b, "--command-config", str(good), "--create", "--topic", topic)
        assert r.returncode == 0, r.stderr
        r = odradek("produce", "--bootstrap-server", b, "--topic", topic, "--producer.config", str(good), stdin="a\nb\n")
        assert r.returncode == 0, r.stderr
        r = odradek("consume", "--bootstrap-server", b, "--topic", topic, "--consumer.config", str(good),
                    "--from-beginning", "--max-messages", "2", "--timeout-ms", "30000")
        assert (r.returncode, r.stdout.split()) == (0, ["a", "b"]), r.stderr
        r = odradek("topics", "--bootstrap-server", b, "--command-config", str(wrong), "--list")
        assert r.returncode == 1
        assert "SaslAuthenticationException: Authentication failed: Invalid username or password" in r.stderr, r.stderr
    finally:
        server.stop()
