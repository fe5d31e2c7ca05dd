"""TLS settings → contexts (odradek.security.ssl_factory): Kafka's ssl.* keys with listener
overrides, PKCS12 and PEM stores (files and inline), JKS refused, protocols and cipher suites,
and handshakes between the contexts built (in memory, no sockets)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from odradek.security.ssl_factory import (
    SslConfigError,
    client_context,
    listener_ssl_settings,
    server_context,
)
from odradek.security.ssl_principal_mapper import distinguished_name
from tests.unit.tls_certs import PASSWORD, TlsFiles, make_ca, make_tls_files


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, host: str = "127.0.0.1") -> ssl.SSLObject:
    """Run a handshake in memory; the server's SSLObject (raises the first side's error)."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    cli = client.wrap_bio(c_in, c_out, server_hostname=host)
    done = {"s": False, "c": False}
    for _ in range(20):
        for name, obj in (("c", cli), ("s", srv)):
            if not done[name]:
                try:
                    obj.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        if c_out.pending:
            s_in.write(c_out.read())
        if s_out.pending:
            c_in.write(s_out.read())
        if all(done.values()) and not c_out.pending and not s_out.pending:
            break
    assert all(done.values())
    return srv


def _client(tls: TlsFiles, cert: tuple[Path, Path, Path] | None = None, **extra: str) -> dict[str, str]:
    props = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls.ca_pem)}
    if cert is not None:
        props.update({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(cert[2]),
                      "ssl.keystore.password": PASSWORD})
    props.update(extra)
    return props


def test_listener_prefix_overrides_the_plain_key() -> None:
    settings = listener_ssl_settings(
        {"ssl.client.auth": "none", "listener.name.internal.ssl.client.auth": "required",
         "listener.name.other.ssl.keystore.location": "/x", "ssl.protocol": "TLSv1.2"},
        "INTERNAL",
    )
    assert settings == {"ssl.client.auth": "required", "ssl.protocol": "TLSv1.2"}


@pytest.mark.parametrize("pem", [False, True])
def test_mutual_tls_gives_the_client_subject(tls: TlsFiles, pem: bool) -> None:
    server = server_context(tls.server_props(client_auth="required", pem=pem))
    alice = tls.client("alice", ou="Eng")
    obj = _handshake(server, client_context(_client(tls, alice)))
    der = obj.getpeercert(binary_form=True)
    assert der is not None and distinguished_name(der) == "CN=alice,OU=Eng,O=Odradek Tests"


def test_requested_client_auth_allows_no_certificate(tls: TlsFiles) -> None:
    server = server_context(tls.server_props(client_auth="requested"))
    obj = _handshake(server, client_context(_client(tls)))
    assert obj.getpeercert(binary_form=True) is None


@pytest.mark.parametrize("case", ["untrusted", "expired", "none"])
def test_required_client_auth_refuses(tls: TlsFiles, case: str) -> None:
    server = server_context(tls.server_props(client_auth="required"))
    cert = {"untrusted": lambda: tls.client("mallory", ca=make_ca("Other CA")),
            "expired": lambda: tls.client("old", expired=True), "none": lambda: None}[case]()
    with pytest.raises(ssl.SSLError):
        _handshake(server, client_context(_client(tls, cert)))


def test_client_checks_the_host_name_unless_disabled(tls: TlsFiles) -> None:
    server = server_context(tls.server_props())
    with pytest.raises(ssl.SSLCertVerificationError, match="match|mismatch"):
        _handshake(server, client_context(_client(tls)), host="broker.example.com")
    _handshake(server, client_context(_client(tls, **{"ssl.endpoint.identification.algorithm": ""})),
               host="broker.example.com")


def test_client_refuses_an_untrusted_server(tls: TlsFiles, tmp_path: Path) -> None:
    other = tmp_path / "other.pem"
    other.write_text(make_ca("Other CA").cert_pem)
    server = server_context(tls.server_props())
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(server, client_context({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(other)}))


def test_inline_pem_truststore(tls: TlsFiles) -> None:
    client = client_context({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": tls.ca.cert_pem})
    _handshake(server_context(tls.server_props()), client)


def test_pkcs12_store_read_with_kafkas_default_type(tls: TlsFiles) -> None:
    """ssl.keystore.type defaults to JKS; Java reads a PKCS12 file under it, so do we."""
    server_context({"ssl.keystore.location": str(tls.server_p12), "ssl.keystore.password": PASSWORD})


def test_protocols_and_cipher_suites(tls: TlsFiles) -> None:
    server = server_context(tls.server_props())
    c12 = client_context(_client(tls, **{"ssl.enabled.protocols": "TLSv1.2",
                                         "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}))
    obj = _handshake(server, c12)
    assert obj.version() == "TLSv1.2"
    assert obj.cipher()[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
    assert _handshake(server, client_context(_client(tls))).version() == "TLSv1.3"
    # ssl.protocol=TLSv1.2 keeps a client off TLS 1.3 (Kafka's rule)
    assert _handshake(server, client_context(_client(tls, **{"ssl.protocol": "TLSv1.2"}))).version() == "TLSv1.2"
    # a server limited to TLS 1.3 refuses a TLS 1.2 client
    s13 = server_context({**tls.server_props(), "ssl.enabled.protocols": "TLSv1.3"})
    with pytest.raises(ssl.SSLError):
        _handshake(s13, c12)


@pytest.mark.parametrize(("props", "needle"), [
    ({"ssl.keystore.location": "/nonexistent.p12"}, "ssl.keystore.location=/nonexistent.p12: cannot read"),
    ({"ssl.keystore.password": "wrong"}, "not a PKCS12 store, or the password is wrong"),
    ({"ssl.client.auth": "always"}, "ssl.client.auth=always"),
    ({"ssl.enabled.protocols": "SSLv3"}, "supported protocols are TLSv1, TLSv1.1, TLSv1.2, TLSv1.3"),
    ({"ssl.enabled.protocols": "TLSv1.1,TLSv1.3"}, "contiguous"),
    ({"ssl.cipher.suites": "TLS_FOO_WITH_BAR"}, "unknown or unsupported cipher suite(s) TLS_FOO_WITH_BAR"),
    ({"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"}, "TLS 1.3 suites cannot be chosen one by one"),
    ({"ssl.keystore.type": "BKS"}, "ssl.keystore.type=BKS"),
    ({"ssl.principal.mapping.rules": "RULE:x"}, "ssl.principal.mapping.rules=RULE:x"),
    ({"ssl.keystore.location": "", "ssl.keystore.type": "PKCS12"}, "needs a key store"),
    ({"ssl.keystore.type": "PEM"}, "ssl.keystore.password cannot be set with ssl.keystore.type=PEM"),
])
def test_bad_settings_name_the_key(tls: TlsFiles, props: dict[str, str], needle: str) -> None:
    with pytest.raises(SslConfigError) as info:
        server_context({**tls.server_props(), **props})
    assert needle in str(info.value)
    assert PASSWORD not in str(info.value)


def test_jks_store_refused_with_the_conversion_command(tmp_path: Path) -> None:
    jks = tmp_path / "broker.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\x00" * 60)
    with pytest.raises(SslConfigError, match="JKS key stores are not supported.*keytool -importkeystore"):
        server_context({"ssl.keystore.location": str(jks), "ssl.keystore.password": "x"})


def test_endpoint_identification_algorithm_values(tls: TlsFiles) -> None:
    with pytest.raises(SslConfigError, match="ssl.endpoint.identification.algorithm=ldap"):
        client_context(_client(tls, **{"ssl.endpoint.identification.algorithm": "ldap"}))


def test_encrypted_pem_key_needs_its_password(tls: TlsFiles) -> None:
    props = tls.server_props(pem=True)
    props["ssl.key.password"] = "wrong"
    with pytest.raises(SslConfigError, match="ssl.keystore.key: cannot load"):
        server_context(props)
