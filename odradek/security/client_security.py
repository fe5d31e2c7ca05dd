"""ClientSecurity: how an ``odradek`` tool secures its connections, from Kafka's client keys (the
``--command-config`` / ``--producer.config`` / ``--consumer.config`` file of every tool).

Keys, with Kafka's names and defaults:

- ``security.protocol``: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL.
- over SSL / SASL_SSL, the ``ssl.*`` client keys of :mod:`odradek.security.ssl_factory`:
  ``ssl.truststore.location`` / ``.type`` (PKCS12, PEM; JKS reads a PKCS12 file) / ``.password``,
  ``ssl.truststore.certificates`` (inline PEM), ``ssl.keystore.location`` / ``.type`` /
  ``.password``, ``ssl.key.password``, ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key``
  (inline PEM), ``ssl.endpoint.identification.algorithm`` (``https``, the default: the server
  certificate must name the host connected to; empty: only the chain is checked),
  ``ssl.protocol``, ``ssl.enabled.protocols``, ``ssl.cipher.suites``.
- over SASL_PLAINTEXT / SASL_SSL: ``sasl.mechanism`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512,
  OAUTHBEARER with Kafka's unsecured tokens; Kafka's default GSSAPI is refused) and
  ``sasl.jaas.config`` (one login module entry: ``username``/``password`` options, or
  ``unsecuredLoginStringClaim_sub`` for OAUTHBEARER).

Anything that cannot work (an unknown protocol, an unsupported mechanism, a store that does not
load, a client key such as ``sasl.login.callback.handler.class`` these clients do not implement) raises
:class:`ClientSecurityError` with a message naming the key; the tools print it and exit 1.
:func:`connect_failure` turns a failed connection into Kafka's exception line
(SaslAuthenticationException, SslAuthenticationException).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from odradek.security.jaas_config import JaasConfigError, single_entry
from odradek.security.sasl_client_authenticator import SaslClientError
from odradek.security.sasl_config import SUPPORTED_MECHANISMS, SaslClientConfig
from odradek.security.ssl_factory import SUPPORTED_KEYS as SSL_KEYS
from odradek.security.ssl_factory import SslConfigError, client_context

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Server-side ssl.* keys a client properties file may carry (Kafka's clients ignore them).
_SERVER_ONLY_SSL = frozenset({"ssl.client.auth", "ssl.principal.mapping.rules"})
# Kafka client keys that change how the login or the handshake is done, which these clients do
# not implement: refused rather than ignored. (Other ssl.*/sasl.* keys, e.g. a server's
# sasl.enabled.mechanisms in a controller's properties, are not client settings and are ignored.)
UNSUPPORTED_KEYS = frozenset({
    "sasl.client.callback.handler.class", "sasl.login.callback.handler.class", "sasl.login.class",
    "sasl.kerberos.service.name", "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.jwks.endpoint.url",
    "ssl.engine.factory.class", "ssl.provider", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation",
})
_ERRORS = "org.apache.kafka.common.errors."


class ClientSecurityError(ValueError):
    """Client security settings that cannot be used (the message names the key)."""


@dataclass(frozen=True)
class ClientSecurity:
    """What a NetworkClient needs to connect as the properties say."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslClientConfig | None = None

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :class:`~odradek.network.client.NetworkClient`."""
        return {"ssl_context": self.ssl_context, "sasl": self.sasl}


PLAINTEXT = ClientSecurity()


def is_security_key(key: str) -> bool:
    """Keys this module owns (the clients' own config checks leave them alone)."""
    return key == "security.protocol" or key.startswith(("ssl.", "sasl."))


def _sasl_login(props: Mapping[str, str]) -> SaslClientConfig:
    mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper() or "GSSAPI"
    if mechanism not in SUPPORTED_MECHANISMS:
        what = " (Kerberos)" if mechanism == "GSSAPI" else ""
        raise ClientSecurityError(
            f"sasl.mechanism={mechanism}{what} is not supported by odradek's tools; "
            f"use one of {', '.join(SUPPORTED_MECHANISMS)}"
        )
    raw = props.get("sasl.jaas.config", "").strip()
    if not raw:
        raise ClientSecurityError(
            f"sasl.jaas.config is required for sasl.mechanism={mechanism} (for example "
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="alice" password="...";)'
        )
    try:
        entry = single_entry(raw)
    except JaasConfigError as e:
        raise ClientSecurityError(f"Value not specified for key 'sasl.jaas.config': {e}") from e
    options = dict(entry.options)
    if mechanism == "OAUTHBEARER":
        if not options.get("unsecuredLoginStringClaim_sub"):
            raise ClientSecurityError(
                "sasl.jaas.config: OAUTHBEARER needs the option unsecuredLoginStringClaim_sub "
                "(odradek's tools log in with Kafka's unsecured tokens only)"
            )
        lifetime = options.get("unsecuredLoginLifetimeSeconds", "3600")
        if not lifetime.isdigit():
            raise ClientSecurityError(f"sasl.jaas.config: unsecuredLoginLifetimeSeconds={lifetime} is not a number")
    else:
        for option in ("username", "password"):
            if option not in options:
                raise ClientSecurityError(f"sasl.jaas.config: the {mechanism} login needs the option {option}")
    return SaslClientConfig(mechanism, options.get("username", ""), options.get("password", ""), options)


def client_security(props: Mapping[str, str]) -> ClientSecurity:
    """The security of connections made with client properties ``props``."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper() or "PLAINTEXT"
    if protocol not in PROTOCOLS:
        raise ClientSecurityError(
            f"Invalid value {props.get('security.protocol')} for configuration security.protocol: "
            f"String must be one of: {', '.join(PROTOCOLS)}"
        )
    for key in sorted(props):
        if key in UNSUPPORTED_KEYS:
            raise ClientSecurityError(f"{key} is not supported by odradek's tools")
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        settings = {k: v for k, v in props.items() if k in SSL_KEYS and k not in _SERVER_ONLY_SSL}
        try:
            context = client_context(settings)
        except SslConfigError as e:
            raise ClientSecurityError(str(e)) from e
        except (OSError, ValueError) as e:  # a store that OpenSSL cannot load
            raise ClientSecurityError(f"the SSL key or trust store cannot be loaded: {e}") from e
    login = _sasl_login(props) if protocol.startswith("SASL_") else None
    return ClientSecurity(protocol, context, login)


def connect_failure(error: BaseException) -> str | None:
    """Kafka's exception line for a connection refused by the security layer (None: another
    failure, e.g. nothing listening)."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, SaslClientError):
            return f"{_ERRORS}SaslAuthenticationException: {e}"
        if isinstance(e, ssl.SSLCertVerificationError):
            return f"{_ERRORS}SslAuthenticationException: SSL handshake failed: {e.verify_message or e}"
        if isinstance(e, ssl.SSLError):
            return f"{_ERRORS}SslAuthenticationException: SSL handshake failed: {e.reason or e}"
        e = e.__cause__ or e.__context__
    return None


__all__ = [
    "PLAINTEXT", "PROTOCOLS", "ClientSecurity", "ClientSecurityError", "client_security",
    "connect_failure", "is_security_key",
]
