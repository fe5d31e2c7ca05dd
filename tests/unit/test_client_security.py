"""odradek.security.client_security: Kafka's client security keys (every tool's --command-config)
turned into a TLS context and a SASL login, and the settings that cannot work refused by name."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from odradek.security.client_security import (
    ClientSecurityError,
    client_security,
    connect_failure,
)
from odradek.security.sasl_client_authenticator import SaslClientError
from tests.unit.tls_certs import PASSWORD, make_tls_files

SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="s3cret";'


def test_plaintext_by_default() -> None:
    sec = client_security({})
    assert (sec.protocol, sec.ssl_context, sec.sasl) == ("PLAINTEXT", None, None)
    assert client_security({"security.protocol": "plaintext"}).protocol == "PLAINTEXT"


def test_unknown_protocol_refused_with_kafkas_message() -> None:
    with pytest.raises(ClientSecurityError, match="Invalid value TLS for configuration security.protocol: "
                       "String must be one of: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"):
        client_security({"security.protocol": "TLS"})


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_sasl_plaintext_login(mechanism: str) -> None:
    sec = client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                           "sasl.jaas.config": SCRAM_JAAS})
    assert sec.ssl_context is None and sec.sasl is not None
    assert (sec.sasl.mechanism, sec.sasl.username, sec.sasl.password) == (mechanism, "alice", "s3cret")


def test_oauthbearer_unsecured_login() -> None:
    sec = client_security({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "sasl.jaas.config": 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                            'unsecuredLoginStringClaim_sub="alice";'})
    assert sec.sasl is not None and sec.sasl.options["unsecuredLoginStringClaim_sub"] == "alice"
    with pytest.raises(ClientSecurityError, match="unsecuredLoginStringClaim_sub"):
        client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                         "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"})


@pytest.mark.parametrize(("props", "message"), [
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": SCRAM_JAAS}, r"sasl.mechanism=GSSAPI \(Kerberos\) is not supported"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism=GSSAPI"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "DIGEST-MD5"}, "sasl.mechanism=DIGEST-MD5 is not supported"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config is required"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": "not jaas"}, "sasl.jaas.config"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="a";'}, "needs the option password"),
    ({"sasl.login.callback.handler.class": "x.Y"}, "sasl.login.callback.handler.class is not supported"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent/ca.pem", "ssl.truststore.type": "PEM"}, "ssl.truststore.location"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"}, "ssl.endpoint.identification.algorithm=ldap"),
])
def test_unusable_settings_refused(props: dict[str, str], message: str) -> None:
    with pytest.raises(ClientSecurityError, match=message):
        client_security(props)


def test_ssl_context_from_stores(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path)
    cert, key, p12 = files.client("alice")
    pem = client_security({"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                           "ssl.truststore.location": str(files.ca_pem)})
    assert pem.ssl_context is not None and pem.ssl_context.check_hostname
    assert pem.ssl_context.verify_mode == ssl.CERT_REQUIRED and pem.sasl is None
    inline = client_security({
        "security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": files.ca.cert_pem, "ssl.endpoint.identification.algorithm": "",
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": cert.read_text(),
        "ssl.keystore.key": key.read_text(),
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": SCRAM_JAAS})
    assert inline.ssl_context is not None and not inline.ssl_context.check_hostname
    assert inline.sasl is not None and inline.sasl.mechanism == "SCRAM-SHA-512"
    pkcs12 = client_security({
        "security.protocol": "SSL", "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(files.truststore_p12), "ssl.truststore.password": PASSWORD,
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(p12), "ssl.keystore.password": PASSWORD,
        "ssl.client.auth": "required"})  # a server-side key in the file: ignored, as Kafka's clients do
    assert pkcs12.ssl_context is not None
    with pytest.raises(ClientSecurityError, match="ssl.keystore"):
        client_security({"security.protocol": "SSL", "ssl.keystore.type": "PKCS12",
                         "ssl.keystore.location": str(p12), "ssl.keystore.password": "wrong"})


def test_connect_failure_names_kafkas_exceptions() -> None:
    try:
        try:
            raise SaslClientError("Authentication failed during authentication due to invalid credentials "
                                  "with SASL mechanism SCRAM-SHA-512")
        except SaslClientError as inner:
            raise ConnectionError("SASL failed") from inner
    except ConnectionError as e:
        assert connect_failure(e) == (
            "org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed during "
            "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512")
    bad = ssl.SSLCertVerificationError(1, "certificate verify failed")
    bad.verify_message = "unable to get local issuer certificate"
    assert connect_failure(bad) == ("org.apache.kafka.common.errors.SslAuthenticationException: "
                                    "SSL handshake failed: unable to get local issuer certificate")
    assert connect_failure(ConnectionRefusedError(111, "refused")) is None
