"""SCRAM credentials of a ZooKeeper-mode broker (Kafka 3.9's ``CredentialProvider`` fed by the
``UserConfigHandler``): the ``/config/users/<user>`` znodes, as ``kafka-configs --zookeeper
--entity-type users --add-config 'SCRAM-SHA-256=[password=...]'`` wrote them, followed through
``/config/changes``.

A user's config maps a mechanism name to Kafka's ``ScramCredentialUtils`` text:
``salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>``. Other keys of the same
znode (client quotas) are not credentials and are left alone; so are ``<user>/clients/<id>``
entities. A value that does not parse is logged and the user has no credential for it.
"""

from __future__ import annotations

import base64
import binascii
import logging
import threading
import urllib.parse

from odradek.security.scram_credential import SCRAM_MECHANISM_NAMES, ScramCredential, ScramMechanism

log = logging.getLogger(__name__)


class CredentialFormatError(ValueError):
    pass


def credential_to_string(cred: ScramCredential) -> str:
    """Kafka's ScramCredentialUtils.credentialToString."""
    b64 = base64.b64encode
    return (f"salt={b64(cred.salt).decode()},stored_key={b64(cred.stored_key).decode()},"
            f"server_key={b64(cred.server_key).decode()},iterations={cred.iterations}")


def credential_from_string(text: str) -> ScramCredential:
    """Kafka's ScramCredentialUtils.credentialFromString."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")  # base64 ends with '=': split at the first only
        if not sep:
            raise CredentialFormatError(f"not key=value: {part!r}")
        fields[key.strip()] = value.strip()
    if set(fields) != {"salt", "stored_key", "server_key", "iterations"}:
        raise CredentialFormatError(f"expected salt, stored_key, server_key and iterations, got {sorted(fields)}")
    try:
        return ScramCredential(
            salt=base64.b64decode(fields["salt"], validate=True),
            stored_key=base64.b64decode(fields["stored_key"], validate=True),
            server_key=base64.b64decode(fields["server_key"], validate=True),
            iterations=int(fields["iterations"]),
        )
    except (binascii.Error, ValueError) as e:
        raise CredentialFormatError(str(e)) from e


class ZkCredentialProvider:
    """A ``users`` handler of the ZkConfigManager (its thread) and the SASL listeners' SCRAM
    lookup (the event loop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._credentials: dict[tuple[str, str], ScramCredential] = {}  # (mechanism, user)

    def process_config_changes(self, entity_name: str, configs: dict[str, str]) -> None:
        if "/" in entity_name:  # <user>/clients/<client id>: a quota entity
            return
        user = urllib.parse.unquote(entity_name)  # Kafka's Sanitizer: URL-encoded names
        found: dict[tuple[str, str], ScramCredential] = {}
        for mechanism in SCRAM_MECHANISM_NAMES:
            text = configs.get(mechanism)
            if text is None:
                continue
            try:
                found[(mechanism, user)] = credential_from_string(text)
            except CredentialFormatError as e:
                log.error("Ignoring the %s credential of user %s in /config/users: %s", mechanism, user, e)
        with self._lock:
            for mechanism in SCRAM_MECHANISM_NAMES:
                self._credentials.pop((mechanism, user), None)
            self._credentials.update(found)
        log.info("SCRAM credentials of user %s: %s", user, ", ".join(m for m, _ in sorted(found)) or "none")

    def lookup(self, mechanism: ScramMechanism, user: str) -> ScramCredential | None:
        with self._lock:
            return self._credentials.get((mechanism.mechanism_name, user))
