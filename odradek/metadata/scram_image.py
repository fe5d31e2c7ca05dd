"""ScramImage: the SCRAM credentials of the metadata image (Kafka's ScramImage), replayed from
UserScramCredentialRecord / RemoveUserScramCredentialRecord.

Keyed by (mechanism, user name); the SASL authenticators of brokers and controllers look
credentials up here, so a credential written through the controller works on every node as soon
as that node has replayed the record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from odradek.security.scram_credential import ScramCredential, ScramMechanism


def _empty() -> Mapping[Any, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ScramImage:
    credentials: Mapping[tuple[ScramMechanism, str], ScramCredential] = field(default_factory=_empty)

    def get(self, mechanism: ScramMechanism, user: str) -> ScramCredential | None:
        return self.credentials.get((mechanism, user))

    def users(self) -> dict[str, dict[ScramMechanism, ScramCredential]]:
        out: dict[str, dict[ScramMechanism, ScramCredential]] = {}
        for (mech, user), cred in self.credentials.items():
            out.setdefault(user, {})[mech] = cred
        return out


class ScramDelta:
    """The SCRAM changes of one MetadataDelta."""

    def __init__(self) -> None:
        self.changes: dict[tuple[ScramMechanism, str], ScramCredential | None] = {}

    def replay(self, name: str, r: dict[str, Any]) -> str | None:
        """Apply one record; an error message if it does not fit."""
        mech = ScramMechanism.by_type(r["mechanism"])
        if mech is None:
            return f"unknown SCRAM mechanism {r['mechanism']}"
        key = (mech, r["name"])
        if name == "UserScramCredentialRecord":
            self.changes[key] = ScramCredential(
                bytes(r["salt"]), bytes(r["stored_key"]), bytes(r["server_key"]), r["iterations"]
            )
        else:
            self.changes[key] = None
        return None

    def apply(self, old: ScramImage) -> ScramImage:
        if not self.changes:
            return old
        creds = dict(old.credentials)
        for key, cred in self.changes.items():
            if cred is None:
                creds.pop(key, None)
            else:
                creds[key] = cred
        return ScramImage(MappingProxyType(creds))


def scram_records(image: ScramImage) -> list[tuple[str, dict[str, Any]]]:
    """One UserScramCredentialRecord per credential (for snapshots)."""
    return [
        (
            "UserScramCredentialRecord",
            {"name": user, "mechanism": mech.type_id, "salt": c.salt, "stored_key": c.stored_key,
             "server_key": c.server_key, "iterations": c.iterations},
        )
        for (mech, user), c in sorted(image.credentials.items(), key=lambda kv: (kv[0][1], kv[0][0].type_id))
    ]
