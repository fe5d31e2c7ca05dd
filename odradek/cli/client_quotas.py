"""Client quotas in the tools: the ``users`` / ``clients`` / ``ips`` forms of ``odradek configs``
(as Kafka 4's ConfigCommand, over DescribeClientQuotas and AlterClientQuotas), and
``odradek client-quotas``, the same code under its own name::

    odradek configs --bootstrap-server H:P --alter --add-config 'producer_byte_rate=1048576' \\
        --entity-type users --entity-name alice [--entity-type clients --entity-default]
    odradek configs --bootstrap-server H:P --describe --entity-type users
    odradek client-quotas --bootstrap-server H:P --alter --add-config ... --entity-type clients ...

Describe prints Kafka's ``Quota configs for user-principal 'alice', the default client-id are
producer_byte_rate=1048576.0`` (one line per matching entity; values as Java prints a double);
alter prints ``Completed updating config for user alice.`` (``Completed updating default config
for clients in the cluster.`` for a default). SCRAM credentials are also set on ``users``
(``SCRAM-SHA-256=[password=...]``): they are split from the quota keys here and handed to
:data:`SCRAM_HOOK` when one is installed (the SASL side's), otherwise refused.
"""

from __future__ import annotations

import argparse
import decimal
from collections.abc import Awaitable, Callable
from typing import Any

from odradek.cli.admin import AdminClient, kafka_exception
from odradek.java_order import java_hash_map_order, java_hash_order, java_string_hash
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g

USERS, CLIENTS, IPS = "users", "clients", "ips"
ENTITY_TYPE_NAMES = {USERS: "user", CLIENTS: "client-id", IPS: "ip"}
# Kafka's QuotaConfig.isClientOrUserQuotaConfig and QuotaConfig.ipConfigs.
USER_CLIENT_QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
IP_QUOTA_KEYS = ("connection_creation_rate",)
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_EXEC = "java.util.concurrent.ExecutionException: "
_MATCH_EXACT, _MATCH_DEFAULT, _MATCH_SPECIFIED = 0, 1, 2


class QuotaUsageError(Exception):
    """An argument error (Kafka's IllegalArgumentException / InvalidConfigurationException)."""


class QuotaClusterError(Exception):
    """A failure the cluster reported (Kafka's ExecutionException)."""


# SCRAM credentials of ``users`` (the SASL side plugs in here):
#   describe(admin, user names, out) prints Kafka's "SCRAM credential configs for ..." lines;
#   alter(admin, user, {mechanism: value}, [mechanisms to delete], out).
class ScramHook:
    describe: Callable[[AdminClient, list[str], list[str]], Awaitable[None]]
    alter: Callable[[AdminClient, str, dict[str, str], list[str], list[str]], Awaitable[None]]


def _scram_hook() -> ScramHook:
    """The SCRAM credentials of ``users`` through :mod:`odradek.cli.scram_configs`
    (AlterUserScramCredentials / DescribeUserScramCredentials)."""
    from odradek.cli import scram_configs

    async def describe_scram(admin: AdminClient, names: list[str], out: list[str]) -> None:
        out.extend(await scram_configs.describe_credentials(admin, names))

    async def alter_scram(admin: AdminClient, user: str, add: dict[str, str], delete: list[str], out: list[str]) -> None:
        # parse_add_config dropped the brackets of each [iterations=N,password=P] value
        spec = ",".join(f"{mech}=[{value}]" for mech, value in add.items())
        try:
            await scram_configs.alter_credentials(admin, user, spec, ",".join(delete))
        except scram_configs.ScramConfigError as e:
            raise QuotaClusterError(_EXEC + str(e)) from e

    hook = ScramHook()
    hook.describe = describe_scram
    hook.alter = alter_scram
    return hook


SCRAM_HOOK: ScramHook | None = _scram_hook()


def java_double(v: float) -> str:
    """Java's Double.toString (shortest digits; scientific below 1e-3 and from 1e7)."""
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0:
        return "-0.0" if str(v).startswith("-") else "0.0"
    if 1e-3 <= abs(v) < 1e7:
        s = repr(v)
        if "e" in s or "E" in s:
            s = format(decimal.Decimal(s), "f")
        return s if "." in s else s + ".0"
    sign, digits, exp = decimal.Decimal(repr(v)).as_tuple()
    ds = "".join(map(str, digits)).rstrip("0") or "0"
    assert isinstance(exp, int)
    e10 = exp + len(digits) - 1
    return f"{'-' if sign else ''}{ds[0]}.{ds[1:] or '0'}E{e10}"


def _components(types: list[str], names: list[str]) -> list[dict[str, Any]]:
    """Kafka's ConfigCommand.getAllClientQuotasConfigs filter: one component per entity type
    (named: exact; "": the default; none given: any)."""
    out = []
    for i, etype in enumerate(types):
        name = names[i] if i < len(names) else None
        if name is None:
            out.append({"entity_type": ENTITY_TYPE_NAMES[etype], "match_type": _MATCH_SPECIFIED, "match": None})
        elif name == "":
            out.append({"entity_type": ENTITY_TYPE_NAMES[etype], "match_type": _MATCH_DEFAULT, "match": None})
        else:
            out.append({"entity_type": ENTITY_TYPE_NAMES[etype], "match_type": _MATCH_EXACT, "match": name})
    if len(names) > len(types):
        raise QuotaUsageError("More entity names specified than entity types")
    return out


async def _describe_entries(admin: AdminClient, types: list[str], names: list[str]) -> list[dict[str, Any]]:
    resp = await admin.send(g.DESCRIBE_CLIENT_QUOTAS, {"components": _components(types, names), "strict": True},
                            top_error=None)
    if resp["error_code"] != Errors.NONE:
        raise QuotaClusterError(_EXEC + kafka_exception(resp["error_code"], resp.get("error_message")))
    return list(resp["entries"] or [])


def _entity_text(entity: list[dict[str, Any]]) -> str:
    parts = {e["entity_type"]: e["entity_name"] for e in entity}
    out = []
    for etype, label in (("user", "user-principal"), ("client-id", "client-id"), ("ip", "ip")):
        if etype in parts:
            name = parts[etype]
            out.append(f"{label} '{name}'" if name is not None else f"the default {label}")
    return ", ".join(out)


def _entity_hash(entry: dict[str, Any]) -> int:
    """``ClientQuotaEntity.hashCode``: ``Objects.hash(entries)``, 31 + the entity map's
    ``AbstractMap.hashCode`` (a null name hashes to 0)."""
    total = 31
    for e in entry["entity"]:
        name = e["entity_name"]
        total += java_string_hash(e["entity_type"]) ^ (java_string_hash(name) if name is not None else 0)
    total &= 0xFFFFFFFF
    return total - (1 << 32) if total & 0x80000000 else total


async def describe(admin: AdminClient, types: list[str], names: list[str], out: list[str]) -> None:
    """``--describe`` of users / clients / ips."""
    if not await _serves(admin, g.DESCRIBE_CLIENT_QUOTAS.api_key):
        raise QuotaClusterError(_EXEC + "org.apache.kafka.common.errors.UnsupportedVersionException: "
                                "The node does not support DESCRIBE_CLIENT_QUOTAS")
    entries = await _describe_entries(admin, types, names)
    # The Java Admin returns them in a HashMap sized to their number.
    for i in java_hash_order(list(range(len(entries))), lambda i: _entity_hash(entries[i]), len(entries)):
        entry = entries[i]
        values = {v["key"]: v["value"] for v in entry["values"]}
        # (values too:) the Java Admin collects them in a HashMap sized to their number.
        text = ", ".join(f"{k}={java_double(values[k])}" for k in java_hash_map_order(list(values), len(values)))
        out.append(f"Quota configs for {_entity_text(entry['entity'])} are {text}")
    if SCRAM_HOOK is not None and CLIENTS not in types and IPS not in types and "" not in names:
        await SCRAM_HOOK.describe(admin, names, out)


async def _serves(admin: AdminClient, api_key: int) -> bool:
    await admin.connect()
    return api_key in admin._versions


def _scala_set(keys: list[str]) -> str:
    return f"Set({', '.join(keys)})"


async def alter(
    admin: AdminClient, types: list[str], names: list[str], to_add: dict[str, str], to_delete: list[str],
    out: list[str],
) -> None:
    """``--alter`` of users / clients / ips (Kafka 4's ConfigCommand.alterConfig)."""
    head = types[0]
    if head == IPS:
        unknown = [k for k in [*to_add, *to_delete] if k not in IP_QUOTA_KEYS]
        if unknown:
            raise QuotaUsageError(f"Only connection quota configs can be added for '{IPS}' using --bootstrap-server. "
                                  f"Unexpected config names: {','.join(unknown)}")
    else:
        quota_add = [k for k in to_add if k in USER_CLIENT_QUOTA_KEYS]
        scram_add = {k: v for k, v in to_add.items() if k in SCRAM_MECHANISMS}
        unknown_add = [k for k in to_add if k not in USER_CLIENT_QUOTA_KEYS and k not in SCRAM_MECHANISMS]
        quota_del = [k for k in to_delete if k in USER_CLIENT_QUOTA_KEYS]
        scram_del = [k for k in to_delete if k in SCRAM_MECHANISMS]
        unknown_del = [k for k in to_delete if k not in USER_CLIENT_QUOTA_KEYS and k not in SCRAM_MECHANISMS]
        if head == CLIENTS or len(types) == 2:
            if unknown_add or scram_add:
                raise QuotaUsageError(f"Only quota configs can be added for '{CLIENTS}' using --bootstrap-server. "
                                      f"Unexpected config names: {_scala_set(unknown_add + list(scram_add))}")
            if unknown_del or scram_del:
                raise QuotaUsageError(f"Only quota configs can be deleted for '{CLIENTS}' using --bootstrap-server. "
                                      f"Unexpected config names: {_scala_set(unknown_del + scram_del)}")
        else:
            if unknown_add:
                raise QuotaUsageError(f"Only quota and SCRAM credential configs can be added for '{USERS}' using "
                                      f"--bootstrap-server. Unexpected config names: {_scala_set(unknown_add)}")
            if unknown_del:
                raise QuotaUsageError(f"Only quota and SCRAM credential configs can be deleted for '{USERS}' using "
                                      f"--bootstrap-server. Unexpected config names: {_scala_set(unknown_del)}")
            if scram_add or scram_del:
                if "" in names:
                    raise QuotaUsageError("The use of --entity-default or --user-defaults is not allowed with User "
                                          "SCRAM Credentials using --bootstrap-server.")
                if quota_add or quota_del:
                    raise QuotaUsageError(f"Cannot alter both quota and SCRAM credential configs simultaneously "
                                          f"for '{USERS}' using --bootstrap-server.")
                if SCRAM_HOOK is None:
                    raise QuotaClusterError(_EXEC + "org.apache.kafka.common.errors.UnsupportedVersionException: "
                                            "The node does not support ALTER_USER_SCRAM_CREDENTIALS")
                await SCRAM_HOOK.alter(admin, names[0], scram_add, scram_del, out)
                _completed(head, names[0], out)
                return
    await _alter_quotas(admin, types, names, to_add, to_delete)
    _completed(head, names[0], out)


def _completed(head: str, name: str, out: list[str]) -> None:
    if name:
        out.append(f"Completed updating config for {head[:-1]} {name}.")
    else:
        out.append(f"Completed updating default config for {head} in the cluster.")


async def _alter_quotas(
    admin: AdminClient, types: list[str], names: list[str], to_add: dict[str, str], to_delete: list[str]
) -> None:
    if len(types) != len(names):
        raise QuotaUsageError("Exactly one entity name must be specified for every entity type")
    if not await _serves(admin, g.ALTER_CLIENT_QUOTAS.api_key):
        raise QuotaClusterError(_EXEC + "org.apache.kafka.common.errors.UnsupportedVersionException: "
                                "The node does not support DESCRIBE_CLIENT_QUOTAS")
    entries = await _describe_entries(admin, types, names)
    old = {v["key"] for v in entries[0]["values"]} if entries else set()
    invalid = [k for k in to_delete if k not in old]
    if invalid:
        raise QuotaUsageError(f"Invalid config(s): {','.join(invalid)}")
    ops = []
    for key, value in to_add.items():
        try:
            number = float(value)
        except ValueError:
            raise QuotaUsageError(f"Cannot parse quota configuration value for {key}: {value}") from None
        ops.append({"key": key, "value": number, "remove": False})
    ops += [{"key": k, "value": 0.0, "remove": True} for k in to_delete]
    entity = [{"entity_type": ENTITY_TYPE_NAMES[t], "entity_name": n or None} for t, n in zip(types, names, strict=True)]
    resp = await admin.send(g.ALTER_CLIENT_QUOTAS, {"entries": [{"entity": entity, "ops": ops}], "validate_only": False},
                            top_error=None)
    for e in resp["entries"]:
        if e["error_code"] != Errors.NONE:
            raise QuotaClusterError(_EXEC + kafka_exception(e["error_code"], e.get("error_message")))


def add_parser(sub: Any) -> None:
    """``odradek client-quotas``: ``odradek configs`` restricted to users / clients / ips."""
    from odradek.cli import configs

    p = sub.add_parser(
        "client-quotas", help="describe and alter client quotas (kafka-configs.sh --entity-type users/clients)",
        description="Describe and alter client quotas (producer_byte_rate, consumer_byte_rate, request_percentage) "
        "of users and client ids, with kafka-configs.sh's flags.",
    )
    configs.add_arguments(p)
    p.set_defaults(func=lambda opts: _run_quotas(opts))


def _run_quotas(opts: argparse.Namespace) -> int:
    from odradek.cli import configs

    return configs.run_command(opts, "client-quotas", only=(USERS, CLIENTS, IPS))
