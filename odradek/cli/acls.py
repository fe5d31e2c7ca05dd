"""``odradek acls``: add, remove and list ACLs, as Kafka's ``kafka-acls.sh`` (AclCommand).

``odradek acls --bootstrap-server HOST:PORT [--command-config FILE] (--add | --remove | --list)``
with Kafka's resource options (``--topic``, ``--group``, ``--cluster``, ``--transactional-id``,
``--delegation-token``, ``--user-principal``; ``--resource-pattern-type``
literal|prefixed|any|match), entries (``--allow-principal``/``--deny-principal``,
``--allow-host``/``--deny-host``, ``--operation``, repeatable), the ``--producer`` and
``--consumer`` conveniences (with ``--idempotent``), ``--principal`` to list one principal's ACLs,
and ``--force``. Output as Kafka's tool prints it. ``--command-config`` takes Kafka's
client security keys (``security.protocol``, ``ssl.*``, ``sasl.mechanism``, ``sasl.jaas.config``;
read by :func:`odradek.cli.scram_configs.command_config_login`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterable
from typing import Any, TextIO

from odradek.cli.admin import AdminClient, AdminError, kafka_exception
from odradek.cli.scram_configs import ScramConfigError, command_config_login
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.security.acl import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from odradek.security.kafka_principal import KafkaPrincipal
from odradek.server.acl_operations import (
    CLUSTER_OPERATIONS,
    GROUP_OPERATIONS,
    TOPIC_OPERATIONS,
    AclOperation,
)
from odradek.server.kafka_config import parse_properties

NL = "\n"
Op = AclOperation
# Kafka's AclEntry.supportedOperations (ALL is accepted everywhere).
_SUPPORTED: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: TOPIC_OPERATIONS,
    ResourceType.GROUP: GROUP_OPERATIONS,
    ResourceType.CLUSTER: CLUSTER_OPERATIONS,
    ResourceType.TRANSACTIONAL_ID: frozenset({Op.DESCRIBE, Op.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({Op.DESCRIBE}),
    ResourceType.USER: frozenset({Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS}),
}

Pattern = tuple[ResourceType, str, PatternType]
Entry = tuple[str, str, AclOperation, AclPermissionType]


class UsageError(Exception):
    pass


def pattern_str(p: Pattern, kind: str = "ResourcePattern") -> str:
    return f"{kind}(resourceType={p[0].name}, name={p[1]}, patternType={p[2].name})"


def entry_str(e: Entry) -> str:
    return f"(principal={e[0]}, host={e[1]}, operation={e[2].name}, permissionType={e[3].name})"


def _operation(name: str) -> AclOperation:
    key = name.strip().upper().replace("-", "_")
    key = {"DESCRIBECONFIGS": "DESCRIBE_CONFIGS", "ALTERCONFIGS": "ALTER_CONFIGS", "CLUSTERACTION": "CLUSTER_ACTION",
           "IDEMPOTENTWRITE": "IDEMPOTENT_WRITE", "CREATETOKENS": "CREATE_TOKENS",
           "DESCRIBETOKENS": "DESCRIBE_TOKENS"}.get(key, key)
    try:
        op = AclOperation[key]
    except KeyError:
        raise UsageError(f"Unknown operation: {name}") from None
    if op in (Op.ANY, Op.UNKNOWN):
        raise UsageError(f"Unknown operation: {name}")
    return op


def _pattern_type(name: str) -> PatternType:
    try:
        pt = PatternType[name.strip().upper()]
    except KeyError:
        raise argparse.ArgumentTypeError(f"'{name}' is not a valid resource pattern type") from None
    if pt == PatternType.UNKNOWN:
        raise argparse.ArgumentTypeError(f"'{name}' is not a valid resource pattern type")
    return pt


def _principals(values: list[str] | None) -> list[str]:
    out = []
    for v in values or []:
        try:
            out.append(str(KafkaPrincipal.parse(v.strip())))
        except ValueError:
            raise UsageError(f"Invalid principal: {v}") from None
    return list(dict.fromkeys(out))


def _entries(ns: argparse.Namespace, operations: Iterable[AclOperation]) -> list[Entry]:
    ops = list(dict.fromkeys(operations))
    out: list[Entry] = []
    for perm, principals, hosts in (
        (AclPermissionType.ALLOW, _principals(ns.allow_principal), ns.allow_host),
        (AclPermissionType.DENY, _principals(ns.deny_principal), ns.deny_host),
    ):
        if not principals:
            continue
        hs = list(dict.fromkeys(h.strip() for h in hosts)) if hosts else [WILDCARD_HOST]
        out += [(p, h, op, perm) for p in principals for op in ops for h in hs]
    return out


def _resources(ns: argparse.Namespace, required: bool = True) -> list[Pattern]:
    pt: PatternType = ns.resource_pattern_type
    out: list[Pattern] = [(ResourceType.TOPIC, t.strip(), pt) for t in ns.topic or []]
    if pt == PatternType.LITERAL and (ns.cluster or ns.idempotent):
        out.append((ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    out += [(ResourceType.GROUP, x.strip(), pt) for x in ns.group or []]
    out += [(ResourceType.TRANSACTIONAL_ID, x, pt) for x in ns.transactional_id or []]
    out += [(ResourceType.DELEGATION_TOKEN, x.strip(), pt) for x in ns.delegation_token or []]
    out += [(ResourceType.USER, x.strip(), pt) for x in ns.user_principal or []]
    out = list(dict.fromkeys(out))
    if not out and required:
        raise UsageError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> "
                         "or --delegation-token <Delegation Token ID>")
    return out


def resource_to_acls(ns: argparse.Namespace) -> dict[Pattern, list[Entry]]:
    """Kafka's getResourceFilterToAcls."""
    out: dict[Pattern, list[Entry]] = {}
    if not ns.producer and not ns.consumer:
        ops = [_operation(o) for o in ns.operation or ["All"]]
        entries = _entries(ns, ops)
        out.update({r: list(entries) for r in _resources(ns)})
    if ns.producer:
        for r in _resources(ns):
            if r[0] == ResourceType.TOPIC:
                out[r] = _entries(ns, [Op.WRITE, Op.DESCRIBE, Op.CREATE])
            elif r[0] == ResourceType.TRANSACTIONAL_ID:
                out[r] = _entries(ns, [Op.WRITE, Op.DESCRIBE])
        if ns.idempotent:
            out[(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)] = _entries(ns, [Op.IDEMPOTENT_WRITE])
    if ns.consumer:
        for r in _resources(ns):
            if r[0] == ResourceType.TOPIC:
                out[r] = list(dict.fromkeys(_entries(ns, [Op.READ, Op.DESCRIBE]) + out.get(r, [])))
            elif r[0] == ResourceType.GROUP:
                out[r] = list(dict.fromkeys(_entries(ns, [Op.READ]) + out.get(r, [])))
    for r, entries in out.items():
        valid = _SUPPORTED.get(r[0], frozenset()) | {Op.ALL}
        if any(e[2] not in valid for e in entries):
            names = ", ".join(sorted(_op_name(o) for o in valid))
            raise UsageError(f"ResourceType {r[0].name} only supports operations {names}")
    return out


def _op_name(op: AclOperation) -> str:
    return "".join(w.capitalize() for w in op.name.split("_"))


def _check_args(ns: argparse.Namespace) -> None:
    if not ns.bootstrap_server and not ns.bootstrap_controller:
        raise UsageError("One of --bootstrap-server or --bootstrap-controller must be specified")
    if ns.bootstrap_server and ns.bootstrap_controller:
        raise UsageError("Only one of --bootstrap-server or --bootstrap-controller must be specified")
    if sum(bool(x) for x in (ns.add, ns.remove, ns.list)) != 1:
        raise UsageError("Command must include exactly one action: --list, --add, --remove. ")
    if ns.principal and not ns.list:
        raise UsageError("The --principal option is only available if --list is set")
    if ns.producer and not ns.topic:
        raise UsageError("With --producer you must specify a --topic")
    if ns.idempotent and not ns.producer:
        raise UsageError("The --idempotent option is only available if --producer is set")
    if ns.consumer and (not ns.topic or not ns.group or ns.cluster or ns.transactional_id):
        raise UsageError("With --consumer you must specify a --topic and a --group and no --cluster or "
                         "--transactional-id option should be specified.")


def _failed(code: int, message: str | None) -> AdminError:
    return AdminError(kafka_exception(code, message))


class AclTool:
    def __init__(self, admin: AdminClient, out: TextIO) -> None:
        self.admin = admin
        self.out = out

    def print(self, text: str) -> None:
        print(text, file=self.out)

    async def describe(self, patterns: list[Pattern] | None) -> dict[Pattern, list[Entry]]:
        filters: list[tuple[int, str | None, int]] = (
            [(ResourceType.ANY, None, PatternType.ANY)] if not patterns else [(r, n, p) for r, n, p in patterns]
        )
        out: dict[Pattern, list[Entry]] = {}
        for rtype, name, pt in filters:
            resp = await self.admin.send(g.DESCRIBE_ACLS, {
                "resource_type_filter": rtype, "resource_name_filter": name, "pattern_type_filter": pt,
                "principal_filter": None, "host_filter": None, "operation": Op.ANY,
                "permission_type": AclPermissionType.ANY,
            })
            if resp["error_code"] != Errors.NONE:
                raise _failed(resp["error_code"], resp.get("error_message"))
            for res in resp["resources"]:
                acl = StandardAcl.of(res["resource_type"], res["resource_name"], res["pattern_type"], "", "", 0, 0)
                key = (acl.resource_type, acl.resource_name, acl.pattern_type)
                bucket = out.setdefault(key, [])
                for a in res["acls"]:
                    e = StandardAcl.of(0, "", 0, a["principal"], a["host"], a["operation"], a["permission_type"])
                    entry = (e.principal, e.host, e.operation, e.permission_type)
                    if entry not in bucket:
                        bucket.append(entry)
        return out

    def print_resource_acls(self, acls: dict[Pattern, list[Entry]]) -> None:
        for pattern, entries in acls.items():
            body = NL.join("\t" + entry_str(e) for e in entries)
            self.print(f"Current ACLs for resource `{pattern_str(pattern)}`:{NL}{body}{NL}")

    async def add(self, resource_acls: dict[Pattern, list[Entry]]) -> None:
        for pattern, entries in resource_acls.items():
            if pattern[2] not in (PatternType.LITERAL, PatternType.PREFIXED):
                raise UsageError(f"A '--resource-pattern-type' value of '{pattern[2].name}' is not valid when adding acls.")
            if not entries:
                raise UsageError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
        for pattern, entries in resource_acls.items():
            body = NL.join("\t" + entry_str(e) for e in entries)
            self.print(f"Adding ACLs for resource `{pattern_str(pattern)}`: {NL} {body}{NL}")
            resp = await self.admin.send(g.CREATE_ACLS, {"creations": [
                {"resource_type": pattern[0], "resource_name": pattern[1], "resource_pattern_type": pattern[2],
                 "principal": e[0], "host": e[1], "operation": e[2], "permission_type": e[3]}
                for e in entries
            ]}, top_error=None)
            for r in resp["results"]:
                if r["error_code"] != Errors.NONE:
                    raise _failed(r["error_code"], r.get("error_message"))

    async def remove(self, resource_acls: dict[Pattern, list[Entry]], force: bool, stdin: TextIO) -> None:
        for pattern, entries in resource_acls.items():
            flt = pattern_str(pattern)
            if not entries:
                question = f"Are you sure you want to delete all ACLs for resource filter `{flt}`? (y/n)"
            else:
                body = NL.join("\t" + entry_str(e) for e in entries)
                question = f"Are you sure you want to remove ACLs: {NL} {body}{NL} from resource filter `{flt}`? (y/n)"
            if not force:
                self.print(question)
                if stdin.readline().strip().lower() != "y":
                    continue
            filters = [
                {"principal_filter": e[0], "host_filter": e[1], "operation": e[2], "permission_type": e[3]}
                for e in entries
            ] or [{"principal_filter": None, "host_filter": None, "operation": Op.ANY,
                   "permission_type": AclPermissionType.ANY}]
            resp = await self.admin.send(g.DELETE_ACLS, {"filters": [
                {"resource_type_filter": pattern[0], "resource_name_filter": pattern[1],
                 "pattern_type_filter": pattern[2], **f} for f in filters
            ]}, top_error=None)
            for r in resp["filter_results"]:
                if r["error_code"] != Errors.NONE:
                    raise _failed(r["error_code"], r.get("error_message"))

    async def list(self, patterns: list[Pattern], principals: list[str]) -> None:
        acls = await self.describe(patterns)
        if not principals:
            self.print_resource_acls(acls)
            return
        for principal in principals:
            self.print(f"ACLs for principal `{principal}`")
            self.print_resource_acls({
                p: [e for e in entries if e[0] == principal] for p, entries in acls.items()
                if any(e[0] == principal for e in entries)
            })


def run(ns: argparse.Namespace, out: TextIO | None = None, stdin: TextIO | None = None) -> int:
    stdout = out or sys.stdout
    try:
        _check_args(ns)
        props: dict[str, str] = {}
        if ns.command_config:
            with open(ns.command_config, encoding="utf-8") as f:
                props = parse_properties(f.read())
        login = command_config_login(ns.command_config)
        resource_acls = resource_to_acls(ns) if (ns.add or ns.remove) else {}
        patterns = _resources(ns, required=False) if ns.list else []
        principals = _principals(ns.principal) if ns.list else []
    except (UsageError, ScramConfigError, OSError) as e:
        print(str(e), file=sys.stderr)
        return 1

    async def main() -> None:
        admin = AdminClient(ns.bootstrap_server or ns.bootstrap_controller,
                            int(props.get("default.api.timeout.ms", "60000")), security=login)
        tool = AclTool(admin, stdout)
        try:
            if ns.add:
                await tool.add(resource_acls)
            elif ns.remove:
                await tool.remove(resource_acls, ns.force, stdin or sys.stdin)
            else:
                await tool.list(patterns, principals)
        finally:
            await admin.close()

    try:
        asyncio.run(main())
    except UsageError as e:
        print(str(e), file=sys.stderr)
        return 1
    except (AdminError, ConnectionError) as e:
        print(f"Error while executing ACL command: {e}", file=stdout)
        return 1
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("acls", help="add, remove and list ACLs (kafka-acls.sh)",
                       description="This tool helps to manage acls on kafka.")
    p.add_argument("--bootstrap-server", metavar="server to connect to")
    p.add_argument("--bootstrap-controller", metavar="controller to connect to")
    p.add_argument("--command-config", metavar="command-config",
                   help="A property file containing configs to be passed to Admin Client.")
    action = p.add_argument_group("actions")
    action.add_argument("--add", action="store_true", help="Indicates you are trying to add ACLs.")
    action.add_argument("--remove", action="store_true", help="Indicates you are trying to remove ACLs.")
    action.add_argument("--list", action="store_true", help="List ACLs for the specified resource.")
    p.add_argument("--topic", action="append", help="topic to which ACLs should be added or removed")
    p.add_argument("--group", action="append", help="Consumer Group to which the ACLs should be added or removed")
    p.add_argument("--cluster", action="store_true", help="Add/Remove cluster ACLs.")
    p.add_argument("--transactional-id", action="append", help="The transactionalId to which ACLs apply")
    p.add_argument("--delegation-token", action="append", help="Delegation token to which ACLs apply")
    p.add_argument("--user-principal", action="append", help="A user principal as a resource")
    p.add_argument("--resource-pattern-type", type=_pattern_type, default=PatternType.LITERAL,
                   help="LITERAL, PREFIXED, ANY or MATCH (default LITERAL)")
    p.add_argument("--operation", action="append", help="Operation that is being allowed or denied (default All)")
    p.add_argument("--allow-principal", action="append", help="principal in principalType:name format")
    p.add_argument("--deny-principal", action="append", help="principal in principalType:name format")
    p.add_argument("--principal", action="append", help="List ACLs for the specified principal")
    p.add_argument("--allow-host", action="append", help="Host from which --allow-principal have access")
    p.add_argument("--deny-host", action="append", help="Host from which --deny-principal are denied")
    p.add_argument("--producer", action="store_true", help="Convenience option for the producer role")
    p.add_argument("--consumer", action="store_true", help="Convenience option for the consumer role")
    p.add_argument("--idempotent", action="store_true", help="Enable idempotence for the producer")
    p.add_argument("--force", action="store_true", help="Assume Yes to all queries and do not prompt.")
    p.set_defaults(func=run)
