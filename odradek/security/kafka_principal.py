"""KafkaPrincipal: the authenticated identity a request is checked against.

Kafka names a principal ``<type>:<name>``; brokers create ``User`` principals (the SASL user
name, or the name a certificate maps to through ``ssl.principal.mapping.rules``), and a
connection that authenticated nothing (PLAINTEXT, or SSL without a client certificate) is
``User:ANONYMOUS``. ACLs and quotas name principals in this form.
"""

from __future__ import annotations

from dataclasses import dataclass

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` → KafkaPrincipal("User", "alice"); the name may contain ``:``."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"expected a principal in the form <type>:<name>, got {text!r}")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
