"""Settings for modes and protocols Odradek does not implement yet, refused at start-up.

Accepting them would look as if they worked: a ``SASL_*`` listener would serve with no login, an authorizer would allow everything, a CreateTopicPolicy would never
run. :func:`unsupported_settings` names each such setting; :class:`KafkaConfig` refuses the
configuration with all of them (the CLI exits with code 2). ZooKeeper mode (``zookeeper.connect``
without ``process.roles``) is served by :mod:`odradek.server.zk_broker_server`; combined with
``process.roles`` (a migration) it is refused in :class:`KafkaConfig` itself.

``SSL`` listeners are served (:mod:`odradek.security.ssl_factory`, which reads the ``ssl.*`` keys
in :data:`~odradek.security.ssl_factory.SUPPORTED_KEYS`), and so are ``SASL_PLAINTEXT`` and
``SASL_SSL`` (SASL over that TLS) listeners with their SASL settings (:data:`SASL_KEYS_SERVED`,
mechanisms PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER with the unsecured validator; GSSAPI is
refused). Other ``ssl.*`` keys (engine factories, providers, key manager algorithms...) and
``sasl.*`` keys (also per listener,
``listener.name.<name>.ssl.*`` and ``listener.name.<name>.<mechanism>.sasl.*``) are refused when
set to anything but empty or Kafka's default: a server.properties written for a plaintext Kafka
may carry defaults, but key stores, JAAS configurations or mechanisms mean security was expected.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from odradek.security.ssl_factory import SUPPORTED_KEYS as SUPPORTED_SSL_KEYS
from odradek.security.standard_authorizer import STANDARD_AUTHORIZER_CLASS

if TYPE_CHECKING:
    from odradek.server.kafka_config import KafkaConfig

SECURITY_PROTOCOLS_SERVED = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

# SASL settings served (odradek.security.sasl_config), also under a listener's prefix.
SASL_KEYS_SERVED = frozenset({
    "sasl.enabled.mechanisms", "sasl.mechanism.inter.broker.protocol",
    "sasl.mechanism.controller.protocol", "sasl.jaas.config", "sasl.server.max.receive.size",
})
_LOGIN_MODULES_SERVED = (
    "org.apache.kafka.common.security.plain.PlainLoginModule",
    "org.apache.kafka.common.security.scram.ScramLoginModule",
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
)

# Kafka's defaults of the ssl.*/sasl.* broker settings that have one (SslConfigs, SaslConfigs,
# BrokerSecurityConfigs); setting one of these to its default configures nothing.
KAFKA_SECURITY_DEFAULTS: dict[str, str] = {
    "ssl.protocol": "TLSv1.3",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.keystore.type": "JKS",
    "ssl.truststore.type": "JKS",
    "ssl.keymanager.algorithm": "SunX509",
    "ssl.trustmanager.algorithm": "PKIX",
    "ssl.endpoint.identification.algorithm": "https",
    "ssl.client.auth": "none",
    "ssl.principal.mapping.rules": "DEFAULT",
    "ssl.allow.dn.changes": "false",
    "ssl.allow.san.changes": "false",
    "sasl.enabled.mechanisms": "GSSAPI",
    "sasl.mechanism.inter.broker.protocol": "GSSAPI",
    "sasl.mechanism.controller.protocol": "GSSAPI",
    "sasl.kerberos.principal.to.local.rules": "DEFAULT",
    "sasl.kerberos.kinit.cmd": "/usr/bin/kinit",
    "sasl.kerberos.min.time.before.relogin": "60000",
    "sasl.kerberos.ticket.renew.jitter": "0.05",
    "sasl.kerberos.ticket.renew.window.factor": "0.8",
    "sasl.login.refresh.window.factor": "0.8",
    "sasl.login.refresh.window.jitter": "0.05",
    "sasl.login.refresh.min.period.seconds": "60",
    "sasl.login.refresh.buffer.seconds": "300",
    "sasl.server.max.receive.size": "524288",
}

# listener.name.<listener>.ssl.* / .sasl.* and listener.name.<listener>.<mechanism>.sasl.*
_PER_LISTENER = re.compile(r"^listener\.name\.[^.]+\.(?:[^.]+\.)?((?:ssl|sasl)\..+)$", re.IGNORECASE)

# Plug-ins and features configured by setting a key at all.
_REFUSED_IF_SET: dict[str, str] = {
    "authorizer.class.name": (
        f"the only authorizer supported is {STANDARD_AUTHORIZER_CLASS} (KRaft mode)"
    ),
    "principal.builder.class": "authentication is not supported yet (there are no principals)",
    "delegation.token.secret.key": "delegation tokens are not supported yet",
    "delegation.token.master.key": "delegation tokens are not supported yet",
    "create.topic.policy.class.name": "topic policies are not supported yet (it would never run)",
    "alter.config.policy.class.name": "config policies are not supported yet (it would never run)",
    "client.quota.callback.class": "custom client quota callbacks are not supported (the default quotas are)",
    "control.plane.listener.name": "a control plane listener is ZooKeeper mode only (Kafka refuses it in KRaft mode)",
}


def _shown(key: str, value: str) -> str:
    """``value`` for a message, unless it is (or may contain) a secret."""
    lowered = key.lower()
    secret = ("password", "jaas", "certificate", "secret", "master.key")
    return "(hidden)" if any(s in lowered for s in secret) or lowered.endswith(".key") else value


def _normalize(value: str) -> str:
    return ",".join(p.strip() for p in value.split(",")).lower()


def _security_key(key: str) -> str | None:
    """The ssl.*/sasl.* setting ``key`` configures, or None."""
    lowered = key.lower()
    if lowered.startswith(("ssl.", "sasl.")):
        return lowered
    m = _PER_LISTENER.match(key)
    return m.group(1).lower() if m else None


def unsupported_settings(config: KafkaConfig) -> list[str]:
    """One sentence per setting of ``config`` that asks for what is not implemented."""
    out: list[str] = []
    seen: set[str] = set()
    for key, listeners in (("listeners", config.listeners), ("advertised.listeners", config.advertised_listeners)):
        for lst in listeners:
            if lst.security_protocol not in SECURITY_PROTOCOLS_SERVED and str(lst) not in seen:
                seen.add(str(lst))
                out.append(
                    f"{key}: listener {lst} uses security protocol {lst.security_protocol}; use "
                    "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL listeners"
                )
    if config.is_set("security.inter.broker.protocol"):
        proto = str(config.get("security.inter.broker.protocol")).upper()
        if proto not in SECURITY_PROTOCOLS_SERVED:
            out.append(f"security.inter.broker.protocol={proto}: not a supported security protocol")
    originals = config.originals
    for key in sorted(originals):
        value = originals[key].strip()
        if key == "authorizer.class.name" and value == STANDARD_AUTHORIZER_CLASS:
            if config.is_zk_mode:
                out.append(f"{key}={value}: the StandardAuthorizer keeps its ACLs in the KRaft metadata "
                           "log; it is not supported in ZooKeeper mode")
            continue
        reason = _REFUSED_IF_SET.get(key)
        if reason is not None and value:
            out.append(f"{key}={_shown(key, value)}: {reason}")
            continue
        if key == "remote.log.storage.system.enable" and value.lower() == "true":
            out.append(f"{key}=true: tiered storage is not supported yet")
            continue
        setting = _security_key(key)
        if setting is None or not value or setting in SUPPORTED_SSL_KEYS:
            continue
        default = KAFKA_SECURITY_DEFAULTS.get(setting)
        if default is not None and _normalize(value) == _normalize(default):
            continue
        if setting in SASL_KEYS_SERVED:
            problem = _sasl_value_problem(setting, value)
            if problem is not None:
                out.append(f"{key}={_shown(key, value)}: {problem}")
            continue
        what = "SASL is" if setting.startswith("sasl.") else "this TLS setting is"
        out.append(f"{key}={_shown(key, value)}: {what} not supported yet")
    out.extend(_sasl_listener_problems(config))
    return out


def _sasl_value_problem(setting: str, value: str) -> str | None:
    from odradek.security.sasl_config import SUPPORTED_MECHANISMS

    if setting in ("sasl.enabled.mechanisms", "sasl.mechanism.inter.broker.protocol",
                   "sasl.mechanism.controller.protocol"):
        bad = [x.strip() for x in value.split(",") if x.strip().upper() not in SUPPORTED_MECHANISMS]
        if bad:
            return (f"SASL mechanism {', '.join(bad)} is not supported (supported: "
                    f"{', '.join(SUPPORTED_MECHANISMS)})")
    if setting == "sasl.jaas.config":
        if not value.strip().startswith(_LOGIN_MODULES_SERVED):
            return "only the PLAIN, SCRAM and OAUTHBEARER login modules of Kafka are supported"
    return None


def _sasl_listener_problems(config: KafkaConfig) -> list[str]:
    """SASL listeners whose settings cannot work (a PLAIN listener without users, GSSAPI,
    a broken JAAS text), and inter-node logins that are missing."""
    from odradek.security.sasl_config import (
        SASL_PROTOCOLS,
        SaslConfigError,
        client_logins,
        listener_config,
    )

    out: list[str] = []
    sasl_listeners = [x for x in config.listeners if x.security_protocol in SASL_PROTOCOLS]
    for lst in sasl_listeners:
        try:
            listener_config(config, lst.name, lst.security_protocol)
        except SaslConfigError as e:
            out.append(str(e))
    try:
        client_logins(config)
    except SaslConfigError as e:
        out.append(str(e))
    return out
