"""SslFactory: TLS contexts from Kafka's ``ssl.*`` settings, for listeners and outgoing connections.

The settings of a listener are the ``ssl.*`` keys with ``listener.name.<listener>.ssl.*``
overriding them (:func:`listener_ssl_settings`), as Kafka resolves them; the broker's own
connections to another node's listener (replica fetchers, the controller channel, Raft) use the
settings of that listener name on the client side: the truststore, the keystore (mutual TLS) and
``ssl.endpoint.identification.algorithm`` (``https``: the server certificate must name the host
connected to; empty: the chain is still verified, the name is not).

Supported: keystores and truststores as PKCS12 or PEM (a file, or inline
``ssl.keystore.certificate.chain`` + ``ssl.keystore.key`` / ``ssl.truststore.certificates``; an
encrypted PEM key with ``ssl.key.password``); ``ssl.keystore.type=JKS`` (Kafka's default) reads a
PKCS12 file as Java does, and refuses a real JKS file naming the keytool command that converts it;
``ssl.client.auth`` none/requested/required; ``ssl.enabled.protocols`` (a contiguous range of
TLSv1..TLSv1.3) and ``ssl.protocol`` (caps the client's version); ``ssl.cipher.suites`` with Java
names (:mod:`odradek.security.ssl_cipher_suites`; OpenSSL enables TLS 1.3 suites only as a set, so
a list names all three or none of them, the latter turning TLS 1.3 off). Anything that does not
load raises :class:`SslConfigError` naming the key, at start-up.
"""

from __future__ import annotations

import os
import secrets
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from odradek.security.ssl_cipher_suites import TLS12_SUITES, TLS13_SUITES
from odradek.security.ssl_principal_mapper import SslPrincipalMapper

if TYPE_CHECKING:
    from odradek.server.kafka_config import KafkaConfig

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_ORDER = list(_VERSIONS)
_JKS_MAGIC = (b"\xfe\xed\xfe\xed", b"\xce\xce\xce\xce")  # JKS, JCEKS
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}

# The ssl.* settings this module reads (with their Kafka defaults where they have one).
DEFAULTS: dict[str, str] = {
    "ssl.protocol": "TLSv1.3",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.keystore.type": "JKS",
    "ssl.truststore.type": "JKS",
    "ssl.endpoint.identification.algorithm": "https",
    "ssl.client.auth": "none",
    "ssl.principal.mapping.rules": "DEFAULT",
    "ssl.cipher.suites": "",
}
SUPPORTED_KEYS = frozenset({
    *DEFAULTS,
    "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
})


class SslConfigError(ValueError):
    """A TLS setting that cannot be used; the message names the key."""


def uses_tls(security_protocol: str) -> bool:
    return security_protocol.upper() in TLS_PROTOCOLS


def listener_ssl_settings(originals: Mapping[str, str], listener_name: str) -> dict[str, str]:
    """The ``ssl.*`` settings of ``listener_name``: ``listener.name.<listener>.ssl.*`` over
    ``ssl.*`` (the listener's name in any case, Kafka writes it in lower case)."""
    out = {k.lower(): v for k, v in originals.items() if k.lower().startswith("ssl.")}
    prefix = f"listener.name.{listener_name.lower()}."
    for key, value in originals.items():
        lowered = key.lower()
        if lowered.startswith(prefix) and lowered[len(prefix):].startswith("ssl."):
            out[lowered[len(prefix):]] = value
    return out


def _get(settings: Mapping[str, str], key: str) -> str:
    value = settings.get(key)
    return (value if value is not None else DEFAULTS.get(key, "")).strip()


def _list(settings: Mapping[str, str], key: str) -> list[str]:
    return [p.strip() for p in _get(settings, key).split(",") if p.strip()]


def _read(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise SslConfigError(f"{key}={path}: cannot read the file ({e.strerror or e})") from e


def _refuse_jks(data: bytes, key: str, path: str) -> None:
    if data[:4] in _JKS_MAGIC:
        raise SslConfigError(
            f"{key}={path}: JKS key stores are not supported; convert it to PKCS12 with "
            f"`keytool -importkeystore -srckeystore {path} -destkeystore {path}.p12 "
            "-deststoretype PKCS12` and set the store type to PKCS12"
        )


def _store_type(settings: Mapping[str, str], key: str) -> str:
    kind = _get(settings, key).upper()
    if kind not in ("JKS", "PKCS12", "PEM"):
        raise SslConfigError(f"{key}={kind}: supported key store types are PKCS12, PEM (and JKS files in PKCS12 format)")
    return kind


def _load_pkcs12(data: bytes, passwords: list[str | None], key: str, path: str) -> pkcs12.PKCS12KeyAndCertificates:
    last: Exception | None = None
    for password in passwords:
        try:
            return pkcs12.load_pkcs12(data, password.encode() if password is not None else None)
        except (ValueError, TypeError) as e:
            last = e
    raise SslConfigError(f"{key}={path}: not a PKCS12 store, or the password is wrong ({last})")


def _load_keystore(ctx: ssl.SSLContext, settings: Mapping[str, str]) -> bool:
    """Load the key and certificate chain into ``ctx``; False if no keystore is configured."""
    kind = _store_type(settings, "ssl.keystore.type")
    location = _get(settings, "ssl.keystore.location")
    chain = _get(settings, "ssl.keystore.certificate.chain")
    inline_key = _get(settings, "ssl.keystore.key")
    key_password = settings.get("ssl.key.password") or None
    if kind == "PEM" and settings.get("ssl.keystore.password"):
        raise SslConfigError(
            "ssl.keystore.password cannot be set with ssl.keystore.type=PEM (only ssl.key.password, "
            "for an encrypted key), as in Kafka"
        )
    if chain or inline_key:
        if kind != "PEM":
            raise SslConfigError("ssl.keystore.certificate.chain and ssl.keystore.key require ssl.keystore.type=PEM")
        if location:
            raise SslConfigError("ssl.keystore.location must not be set with ssl.keystore.key (PEM given inline)")
        if not (chain and inline_key):
            raise SslConfigError("ssl.keystore.certificate.chain and ssl.keystore.key must be set together")
        _load_pem_chain(ctx, (inline_key.strip() + "\n" + chain.strip() + "\n").encode(), key_password, "ssl.keystore.key")
        return True
    if not location:
        return False
    data = _read(location, "ssl.keystore.location")
    if kind == "PEM":
        _load_pem_chain(ctx, data, key_password, "ssl.keystore.location")
        return True
    _refuse_jks(data, "ssl.keystore.location", location)
    store_password = settings.get("ssl.keystore.password")
    passwords: list[str | None] = [store_password] if store_password else [None, key_password]
    store = _load_pkcs12(data, passwords, "ssl.keystore.location", location)
    if store.key is None or store.cert is None:
        raise SslConfigError(f"ssl.keystore.location={location}: the store holds no private key with its certificate")
    # Hand the key to OpenSSL encrypted under a one-time password; the file lives only while loading.
    once = secrets.token_hex(16)
    pem = store.key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(once.encode()),
    )
    pem += store.cert.certificate.public_bytes(serialization.Encoding.PEM)
    for extra in store.additional_certs:
        pem += extra.certificate.public_bytes(serialization.Encoding.PEM)
    _load_pem_chain(ctx, pem, once, "ssl.keystore.location")
    return True


def _load_pem_chain(ctx: ssl.SSLContext, pem: bytes, password: str | None, key: str) -> None:
    fd, path = tempfile.mkstemp(prefix="odradek-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        ctx.load_cert_chain(path, password=password if password else None)
    except ssl.SSLError as e:
        raise SslConfigError(
            f"{key}: cannot load the private key and certificate chain ({e.reason or e}; "
            "is ssl.key.password right?)"
        ) from e
    finally:
        os.unlink(path)


def _load_truststore(ctx: ssl.SSLContext, settings: Mapping[str, str]) -> bool:
    """Load the trusted certificates into ``ctx``; False if no truststore is configured."""
    kind = _store_type(settings, "ssl.truststore.type")
    location = _get(settings, "ssl.truststore.location")
    inline = _get(settings, "ssl.truststore.certificates")
    if kind == "PEM" and settings.get("ssl.truststore.password"):
        raise SslConfigError("ssl.truststore.password cannot be set with ssl.truststore.type=PEM, as in Kafka")
    if inline:
        if kind != "PEM":
            raise SslConfigError("ssl.truststore.certificates requires ssl.truststore.type=PEM")
        if location:
            raise SslConfigError("ssl.truststore.location must not be set with ssl.truststore.certificates")
        _load_cadata(ctx, inline, "ssl.truststore.certificates")
        return True
    if not location:
        return False
    data = _read(location, "ssl.truststore.location")
    if kind == "PEM":
        _load_cadata(ctx, data.decode("ascii", "replace"), "ssl.truststore.location")
        return True
    _refuse_jks(data, "ssl.truststore.location", location)
    password = settings.get("ssl.truststore.password")
    store = _load_pkcs12(data, [password, None, ""], "ssl.truststore.location", location)
    certs: list[x509.Certificate] = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.append(store.cert.certificate)
    if not certs:
        raise SslConfigError(f"ssl.truststore.location={location}: the store holds no certificates")
    _load_cadata(ctx, "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs), "ssl.truststore.location")
    return True


def _load_cadata(ctx: ssl.SSLContext, pem: str, key: str) -> None:
    try:
        ctx.load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as e:
        raise SslConfigError(f"{key}: no usable PEM certificates ({e})") from e


def _versions(settings: Mapping[str, str], client: bool) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    names = _list(settings, "ssl.enabled.protocols")
    unknown = [n for n in names if n not in _VERSIONS]
    if unknown or not names:
        raise SslConfigError(
            f"ssl.enabled.protocols={','.join(names)}: supported protocols are {', '.join(_ORDER)}"
        )
    idx = sorted(_ORDER.index(n) for n in set(names))
    if idx != list(range(idx[0], idx[-1] + 1)):
        raise SslConfigError(f"ssl.enabled.protocols={','.join(names)}: the protocols must be a contiguous range")
    low, high = _ORDER[idx[0]], _ORDER[idx[-1]]
    protocol = _get(settings, "ssl.protocol")
    if protocol not in ("TLS", *_VERSIONS):
        raise SslConfigError(f"ssl.protocol={protocol}: supported values are TLS, {', '.join(_ORDER)}")
    if client and protocol in _VERSIONS and _ORDER.index(protocol) < idx[-1]:
        high = protocol  # Kafka: a client with ssl.protocol=TLSv1.2 never uses TLSv1.3
        if _ORDER.index(high) < idx[0]:
            raise SslConfigError(f"ssl.protocol={protocol} is not in ssl.enabled.protocols={','.join(names)}")
    return _VERSIONS[low], _VERSIONS[high]


def _apply_protocols(ctx: ssl.SSLContext, settings: Mapping[str, str], client: bool) -> None:
    low, high = _versions(settings, client)
    suites = _list(settings, "ssl.cipher.suites")
    if suites:
        unknown = [s for s in suites if s not in TLS13_SUITES and s not in TLS12_SUITES]
        if unknown:
            raise SslConfigError(
                f"ssl.cipher.suites: unknown or unsupported cipher suite(s) {', '.join(unknown)} "
                "(use Java/IANA names such as TLS_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384)"
            )
        tls13 = {s for s in suites if s in TLS13_SUITES}
        tls12 = [TLS12_SUITES[s] for s in suites if s in TLS12_SUITES]
        if tls13 and tls13 != TLS13_SUITES:
            raise SslConfigError(
                "ssl.cipher.suites: TLS 1.3 suites cannot be chosen one by one here; list all of "
                f"{', '.join(sorted(TLS13_SUITES))} or none of them (which turns TLS 1.3 off)"
            )
        if not tls13 and high == ssl.TLSVersion.TLSv1_3:
            high = ssl.TLSVersion.TLSv1_2
        if not tls12 and low < ssl.TLSVersion.TLSv1_3:
            low = ssl.TLSVersion.TLSv1_3
        if low > high:
            raise SslConfigError("ssl.cipher.suites: no listed suite works with ssl.enabled.protocols")
        if tls12:
            try:
                ctx.set_ciphers(":".join(tls12))
            except ssl.SSLError as e:
                raise SslConfigError(f"ssl.cipher.suites: OpenSSL refuses {', '.join(tls12)} ({e})") from e
    try:
        ctx.minimum_version = low
        ctx.maximum_version = high
    except (ValueError, ssl.SSLError) as e:
        raise SslConfigError(f"ssl.enabled.protocols: {e}") from e


def server_context(settings: Mapping[str, str], listener_name: str = "") -> ssl.SSLContext:
    """The context of a TLS listener (a keystore is required)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_protocols(ctx, settings, client=False)
    if not _load_keystore(ctx, settings):
        where = f"listener {listener_name}" if listener_name else "a TLS listener"
        raise SslConfigError(
            f"{where} needs a key store: set ssl.keystore.location (PKCS12 or PEM) or "
            "ssl.keystore.type=PEM with ssl.keystore.certificate.chain and ssl.keystore.key"
        )
    auth = _get(settings, "ssl.client.auth").lower()
    if auth not in _CLIENT_AUTH:
        raise SslConfigError(f"ssl.client.auth={auth}: must be one of none, requested, required")
    ctx.verify_mode = _CLIENT_AUTH[auth]
    if auth != "none" and not _load_truststore(ctx, settings):
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    principal_mapper(settings)  # rules that do not parse fail the start
    return ctx


def client_context(settings: Mapping[str, str]) -> ssl.SSLContext:
    """The context of a connection to a TLS listener (a keystore, if any, for mutual TLS)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _apply_protocols(ctx, settings, client=True)
    algorithm = _get(settings, "ssl.endpoint.identification.algorithm")
    if algorithm.lower() not in ("https", ""):
        raise SslConfigError(
            f"ssl.endpoint.identification.algorithm={algorithm}: must be https or empty (no host name check)"
        )
    ctx.check_hostname = algorithm.lower() == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    if not _load_truststore(ctx, settings):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    _load_keystore(ctx, settings)
    return ctx


def principal_mapper(settings: Mapping[str, str]) -> SslPrincipalMapper:
    rules = _get(settings, "ssl.principal.mapping.rules")
    try:
        return SslPrincipalMapper(rules)
    except ValueError as e:
        raise SslConfigError(f"ssl.principal.mapping.rules={rules}: {e}") from e


@dataclass(frozen=True)
class ListenerTls:
    """What a TLS listener needs: its context and how it names client certificates."""

    context: ssl.SSLContext
    mapper: SslPrincipalMapper


_client_contexts: dict[tuple[tuple[str, str], ...], ssl.SSLContext] = {}


def cached_client_context(settings: Mapping[str, str]) -> ssl.SSLContext:
    """:func:`client_context`, built once per distinct set of settings."""
    key = tuple(sorted(settings.items()))
    ctx = _client_contexts.get(key)
    if ctx is None:
        ctx = _client_contexts[key] = client_context(settings)
    return ctx


def listener_tls(cfg: KafkaConfig, listener_name: str, security_protocol: str) -> ListenerTls | None:
    """The TLS a listener serves (None for PLAINTEXT and SASL_PLAINTEXT); SslConfigError if its
    settings cannot be used."""
    if not uses_tls(security_protocol):
        return None
    settings = listener_ssl_settings(cfg.originals, listener_name)
    return ListenerTls(server_context(settings, listener_name), principal_mapper(settings))


def inter_node_ssl_context(cfg: KafkaConfig, listener_name: str) -> ssl.SSLContext | None:
    """The context of this node's connections to other nodes' ``listener_name`` (the
    inter-broker or a controller listener), or None if that listener is not TLS."""
    if not uses_tls(cfg.listener_security_protocol(listener_name)):
        return None
    return cached_client_context(listener_ssl_settings(cfg.originals, listener_name))
