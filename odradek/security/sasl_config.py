"""A listener's SASL settings, resolved from Kafka's keys as Kafka's ChannelBuilders and
JaasContext resolve them.

- ``listener.name.<listener>.sasl.enabled.mechanisms`` overrides ``sasl.enabled.mechanisms``.
- A mechanism's server login module: ``listener.name.<listener>.<mechanism>.sasl.jaas.config``
  (listener and mechanism in lower case, as Kafka builds the prefix), else
  ``listener.name.<listener>.sasl.jaas.config``, else ``sasl.jaas.config``. PLAIN needs one (its
  ``user_<name>`` options are the users); SCRAM's credentials live in the metadata log and
  OAUTHBEARER's validator options are optional.
- ``connections.max.reauth.ms``, ``sasl.server.max.receive.size`` and
  ``connection.failed.authentication.delay.ms``, each also under the listener's prefix (and
  ``<mechanism>.`` for the reauth time).
- The client side of inter-node connections: ``sasl.mechanism.inter.broker.protocol`` /
  ``sasl.mechanism.controller.protocol`` and the ``username`` / ``password`` options of that
  mechanism's JAAS entry on the listener connected to (as a Kafka broker reads them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.security.jaas_config import JaasConfigError, JaasEntry, single_entry

if TYPE_CHECKING:
    from odradek.server.kafka_config import KafkaConfig

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_MAX_RECEIVE_SIZE = 524288
DEFAULT_FAILED_AUTHENTICATION_DELAY_MS = 100


class SaslConfigError(ValueError):
    pass


def _prefixed(cfg: KafkaConfig, listener: str, key: str, mechanism: str | None = None) -> str | None:
    originals = cfg.originals
    base = f"listener.name.{listener.lower()}."
    candidates = []
    if mechanism is not None:
        candidates.append(f"{base}{mechanism.lower()}.{key}")
    candidates += [base + key, key]
    for k in candidates:
        v = originals.get(k)
        if v is not None and v.strip():
            return v.strip()
    return None


def enabled_mechanisms(cfg: KafkaConfig, listener: str) -> tuple[str, ...]:
    raw = _prefixed(cfg, listener, "sasl.enabled.mechanisms")
    if raw is None:
        return ("GSSAPI",)  # Kafka's default
    return tuple(m.strip().upper() for m in raw.split(",") if m.strip())


def jaas_entry(cfg: KafkaConfig, listener: str, mechanism: str) -> JaasEntry | None:
    raw = _prefixed(cfg, listener, "sasl.jaas.config", mechanism)
    if raw is None:
        return None
    try:
        return single_entry(raw)
    except JaasConfigError as e:
        raise SaslConfigError(
            f"the sasl.jaas.config of listener {listener} for {mechanism} is invalid: {e}"
        ) from e


def _int(cfg: KafkaConfig, listener: str, key: str, default: int, mechanism: str | None = None) -> int:
    raw = _prefixed(cfg, listener, key, mechanism)
    if raw is None:
        value = cfg.get(key)
        return default if value is None else int(value)
    try:
        return int(raw)
    except ValueError as e:
        raise SaslConfigError(f"{key} of listener {listener} must be a number, got {raw!r}") from e


@dataclass(frozen=True)
class SaslListenerConfig:
    listener_name: str
    security_protocol: str
    enabled_mechanisms: tuple[str, ...]
    jaas: dict[str, JaasEntry] = field(default_factory=dict)
    max_receive_size: int = DEFAULT_MAX_RECEIVE_SIZE
    failed_authentication_delay_ms: int = DEFAULT_FAILED_AUTHENTICATION_DELAY_MS
    reauth_ms: dict[str, int] = field(default_factory=dict)  # per mechanism (0: none)
    max_request_bytes: int = 104857600


def listener_config(cfg: KafkaConfig, listener: str, security_protocol: str) -> SaslListenerConfig:
    """The SASL settings of ``listener``; SaslConfigError if they cannot work."""
    mechanisms = enabled_mechanisms(cfg, listener)
    unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if unsupported:
        raise SaslConfigError(
            f"listener {listener}: SASL mechanism(s) {', '.join(unsupported)} are not supported "
            f"(supported: {', '.join(SUPPORTED_MECHANISMS)}); set sasl.enabled.mechanisms"
        )
    jaas: dict[str, JaasEntry] = {}
    for mech in mechanisms:
        entry = jaas_entry(cfg, listener, mech)
        if entry is not None:
            jaas[mech] = entry
        elif mech == "PLAIN":
            raise SaslConfigError(
                f"listener {listener}: PLAIN needs its users in "
                f"listener.name.{listener.lower()}.plain.sasl.jaas.config"
            )
    return SaslListenerConfig(
        listener_name=listener,
        security_protocol=security_protocol,
        enabled_mechanisms=mechanisms,
        jaas=jaas,
        max_receive_size=_int(cfg, listener, "sasl.server.max.receive.size", DEFAULT_MAX_RECEIVE_SIZE),
        failed_authentication_delay_ms=_int(
            cfg, listener, "connection.failed.authentication.delay.ms", DEFAULT_FAILED_AUTHENTICATION_DELAY_MS
        ),
        reauth_ms={m: _int(cfg, listener, "connections.max.reauth.ms", 0, m) for m in mechanisms},
        max_request_bytes=int(cfg.get("socket.request.max.bytes") or 104857600),
    )


@dataclass(frozen=True)
class SaslClientConfig:
    """How this node logs in to another node's SASL listener."""

    mechanism: str
    username: str
    password: str
    options: dict[str, str] = field(default_factory=dict)


def client_config(cfg: KafkaConfig, listener: str, mechanism_key: str) -> SaslClientConfig:
    """The login for connections to ``listener`` (``mechanism_key``:
    sasl.mechanism.inter.broker.protocol or sasl.mechanism.controller.protocol)."""
    mechanism = str(cfg.originals.get(mechanism_key, "GSSAPI")).strip().upper() or "GSSAPI"
    if mechanism not in SUPPORTED_MECHANISMS:
        raise SaslConfigError(
            f"{mechanism_key}={mechanism}: not supported (supported: {', '.join(SUPPORTED_MECHANISMS)})"
        )
    entry = jaas_entry(cfg, listener, mechanism)
    if entry is None:
        raise SaslConfigError(
            f"{mechanism_key}={mechanism}: listener {listener} has no sasl.jaas.config for "
            f"{mechanism} (listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config) "
            "with the username and password this node logs in with"
        )
    opts = entry.options
    if mechanism != "OAUTHBEARER" and (not opts.get("username") or not opts.get("password")):
        raise SaslConfigError(
            f"listener {listener}: the {mechanism} sasl.jaas.config needs username and password "
            "options for the connections this node makes"
        )
    return SaslClientConfig(mechanism, opts.get("username", ""), opts.get("password", ""), dict(opts))


def listener_protocol(cfg: KafkaConfig, listener: str) -> str:
    """The security protocol of ``listener`` (listener.security.protocol.map, else the name)."""
    for lst in cfg.listeners:
        if lst.name == listener:
            return lst.security_protocol
    for item in cfg.get("listener.security.protocol.map") or []:
        name, _, proto = str(item).partition(":")
        if name.strip().upper() == listener.upper() and proto:
            return proto.strip().upper()
    return listener.upper()


def client_logins(cfg: KafkaConfig) -> dict[str, SaslClientConfig]:
    """This node's logins to brokers (the inter-broker listener) and to controllers (the first
    controller listener), for those that are SASL listeners."""
    out: dict[str, SaslClientConfig] = {}
    roles = cfg.process_roles
    if "broker" in roles or cfg.is_zk_mode:
        ibl = cfg.inter_broker_listener_name
        if listener_protocol(cfg, ibl) in SASL_PROTOCOLS:
            out["broker"] = client_config(cfg, ibl, "sasl.mechanism.inter.broker.protocol")
            if cfg.is_zk_mode:  # the ZooKeeper controller is a broker, reached on this listener
                out["controller"] = out["broker"]
                return out
    ctrl = cfg.controller_listener_names
    if ctrl and listener_protocol(cfg, ctrl[0]) in SASL_PROTOCOLS:
        out["controller"] = client_config(cfg, ctrl[0], "sasl.mechanism.controller.protocol")
    return out
