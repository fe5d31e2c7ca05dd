"""ClientQuotaControlManager: validates AlterClientQuotas entries and turns them into
ClientQuotaRecords (Kafka's ``ClientQuotaControlManager``); DescribeClientQuotas filtering over
the image (Kafka's ``ClientQuotasImage.describe``).

Entities are Kafka's: ``user``, ``client-id`` (alone or together) and ``ip``; an entity name of
None is ``<default>``. Odradek enforces ``producer_byte_rate``, ``consumer_byte_rate`` and
``request_percentage``; ``controller_mutation_rate`` and ``ip`` entities
(``connection_creation_rate``) are Kafka keys Odradek does not enforce, so they are refused with
INVALID_REQUEST and a message saying so rather than stored and ignored.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from odradek.java_order import java_hash_map_order
from odradek.metadata.image import MetadataImage
from odradek.protocol.errors import Errors, KafkaError
from odradek.security.client_quota_manager import (
    CLIENT_ID,
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    IP,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    QuotaEntity,
)

MetadataRecord = tuple[str, dict[str, Any]]

# Kafka's QuotaConfig.userAndClientQuotaConfigs: key -> type.
USER_AND_CLIENT_QUOTA_KEYS: dict[str, str] = {
    PRODUCER_BYTE_RATE: "LONG",
    CONSUMER_BYTE_RATE: "LONG",
    REQUEST_PERCENTAGE: "DOUBLE",
    CONTROLLER_MUTATION_RATE: "DOUBLE",
}
# Known to Kafka, not enforced by Odradek: refused with this explanation.
NOT_ENFORCED: dict[str, str] = {
    CONTROLLER_MUTATION_RATE: "controller_mutation_rate quotas are not supported by Odradek",
}
_LONG_MAX = float((1 << 63) - 1)

MATCH_TYPE_EXACT, MATCH_TYPE_DEFAULT, MATCH_TYPE_SPECIFIED = 0, 1, 2


def _invalid(message: str) -> tuple[Errors, str]:
    return Errors.INVALID_REQUEST, message


def validate_entity(entries: list[dict[str, Any]]) -> tuple[QuotaEntity | None, tuple[Errors, str] | None]:
    """Kafka's validateEntity; (entity, None) or (None, (error, message))."""
    if not entries:
        return None, _invalid("Invalid empty client quota entity")
    seen: dict[str, str | None] = {}
    for e in entries:
        etype, name = e["entity_type"], e["entity_name"]
        if etype in seen:
            return None, _invalid(f"Invalid empty client quota entity, duplicate entity entry {etype}")
        if etype == IP:
            if name is not None:
                try:
                    ipaddress.ip_address(name)
                except ValueError:
                    return None, _invalid(f"Invalid IP address: {name}")
        elif etype not in (USER, CLIENT_ID):
            return None, _invalid(f"Unhandled client quota entity type: {etype}")
        seen[etype] = name
        if name is not None and name == "":
            return None, _invalid(f"Empty {etype} not supported")
    if IP in seen and (USER in seen or CLIENT_ID in seen):
        return None, _invalid("Invalid quota entity combination, IP entity should not be combined with User or ClientId")
    if IP in seen:
        return None, _invalid(
            f"Client quotas on ip entities ({CONNECTION_CREATION_RATE}) are not supported by Odradek"
        )
    return tuple(sorted(seen.items())), None


def _entity_str(entries: list[dict[str, Any]]) -> str:
    """Java's ``ClientQuotaEntity.toString``: ``ClientQuotaEntity(entries={user=alice})``."""
    names = {e["entity_type"]: e["entity_name"] for e in entries}
    order = java_hash_map_order(list(names), len(names))
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={names[t]}" if names[t] is not None else f"{t}=null"
                                                     for t in order) + "})"


def validate_quota(key: str, value: float) -> tuple[Errors, str] | None:
    """Kafka's validateQuotaKeyValue for user and client-id entities."""
    ctype = USER_AND_CLIENT_QUOTA_KEYS.get(key)
    if ctype is None:
        return _invalid(f"Invalid configuration key {key}")
    if value <= 0.0:
        return _invalid(f"Quota {key} must be greater than 0")
    if ctype == "LONG" and value > _LONG_MAX:
        return _invalid(f"Proposed value for {key} is too large for a LONG.")
    if key in NOT_ENFORCED:
        return _invalid(NOT_ENFORCED[key])
    return None


class ClientQuotaControlManager:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image

    def alter_client_quotas(
        self, entries: list[dict[str, Any]]
    ) -> tuple[list[tuple[Errors, str | None]], list[MetadataRecord]]:
        """One outcome per entry and the records of the valid ones (an entry is all or nothing)."""
        outcomes: list[tuple[Errors, str | None]] = []
        records: list[MetadataRecord] = []
        seen_entities: set[tuple[tuple[str, str | None], ...]] = set()
        for entry in entries:
            # Kafka answers a repeated entity, or a repeated key (which Kafka's result map then
            # reports the same way), with "Ignoring duplicate entity".
            raw = tuple(sorted((e["entity_type"], e["entity_name"]) for e in entry["entity"]))
            keys = [op["key"] for op in entry["ops"]]
            if raw in seen_entities or len(set(keys)) != len(keys):
                outcomes.append(_invalid(f"Ignoring duplicate entity {_entity_str(entry['entity'])}"))
                continue
            seen_entities.add(raw)
            ent, error = validate_entity(entry["entity"])
            if error is not None or ent is None:
                outcomes.append(error or (Errors.INVALID_REQUEST, None))
                continue
            current = self.image.client_quotas.entities.get(ent, {})
            out: list[MetadataRecord] = []
            failed: tuple[Errors, str] | None = None
            for op in entry["ops"]:
                key = op["key"]
                entity_data = [{"entity_type": t, "entity_name": n} for t, n in ent]
                if op["remove"]:
                    if key in current:
                        out.append(("ClientQuotaRecord", {"entity": entity_data, "key": key, "value": 0.0, "remove": True}))
                    continue
                failed = validate_quota(key, op["value"])
                if failed is not None:
                    break
                out.append(("ClientQuotaRecord", {"entity": entity_data, "key": key, "value": float(op["value"]), "remove": False}))
            if failed is not None:
                outcomes.append(failed)
                continue
            outcomes.append((Errors.NONE, None))
            records.extend(out)
        return outcomes, records


def describe_client_quotas(
    entities: Mapping[QuotaEntity, Mapping[str, float]], components: list[dict[str, Any]], strict: bool
) -> list[tuple[QuotaEntity, Mapping[str, float]]]:
    """The entities a DescribeClientQuotas filter matches (Kafka's ClientQuotasImage.describe);
    raises KafkaError for a bad filter."""
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for c in components:
        etype, match_type, match = c["entity_type"], c["match_type"], c["match"]
        if not etype:
            raise KafkaError(Errors.INVALID_REQUEST, "Invalid empty entity type.")
        if etype in exact or etype in typed:
            raise KafkaError(Errors.INVALID_REQUEST, f"Entity type {etype} cannot appear more than once in the filter.")
        if etype not in (IP, USER, CLIENT_ID):
            raise KafkaError(Errors.UNSUPPORTED_VERSION, f"Unsupported entity type {etype}")
        if match_type == MATCH_TYPE_EXACT:
            if match is None:
                raise KafkaError(Errors.INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[etype] = match
        elif match_type == MATCH_TYPE_DEFAULT:
            if match is not None:
                raise KafkaError(Errors.INVALID_REQUEST, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[etype] = None
        elif match_type == MATCH_TYPE_SPECIFIED:
            if match is not None:
                raise KafkaError(Errors.INVALID_REQUEST, "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            typed.add(etype)
        else:
            raise KafkaError(Errors.UNSUPPORTED_VERSION, f"Unknown match type {match_type}")
    if (IP in exact or IP in typed) and ({USER, CLIENT_ID} & (set(exact) | typed)):
        raise KafkaError(
            Errors.INVALID_REQUEST,
            "Invalid entity filter component combination. IP filter component should not be used with "
            "user or clientId filter component.",
        )
    out = []
    for ent, quotas in entities.items():
        parts = dict(ent)
        if strict and len(parts) != len(exact) + len(typed):
            continue
        if any(t not in parts or parts[t] != name for t, name in exact.items()):
            continue
        if any(t not in parts for t in typed):
            continue
        out.append((ent, quotas))
    return out
