"""``odradek configs``: describe and alter dynamic configs, as ``kafka-configs.sh`` (Kafka 4.x's
ConfigCommand) does it, against any Kafka-protocol cluster.

``odradek configs --bootstrap-server HOST:PORT (--describe [--all] | --alter (--add-config
k=v,k2=[a,b] | --add-config-file F) [--delete-config k,k2]) --entity-type
topics|brokers|broker-loggers|groups|users|clients (--entity-name N | --entity-default)`` (or ``--topic T``,
``--broker B``, ``--broker-defaults``, ``--broker-logger B``, ``--group G``).

Describe prints Kafka's lines: ``Dynamic configs for topic t are:`` (``All configs`` with
``--all``, ``Default configs for brokers in the cluster are:`` for the cluster-wide broker
default), then ``  k=v sensitive=false synonyms={SOURCE:k=v, ...}`` per config, by name. Alter
sends one IncrementalAlterConfigs (deletes, then sets) and prints ``Completed updating config for
topic t.`` / ``Completed updating default config for brokers in the cluster.``. A BROKER or
BROKER_LOGGER resource naming a broker goes to that broker, as Kafka's Admin sends it.

Client quotas (``users``, ``clients``, ``ips``; DescribeClientQuotas / AlterClientQuotas) are
handled by :mod:`odradek.cli.client_quotas`; ``client-metrics`` is refused with a message saying
so. Errors go to stderr with exit code 1: argument errors as Kafka's one-line messages, failures
from the cluster as ``Error while executing config command with args '...'`` followed by
``java.util.concurrent.ExecutionException: org.apache.kafka.common.errors.XxxException: message``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Sequence
from typing import Any

from odradek.cli import client_quotas
from odradek.cli.admin import AdminClient, AdminError, kafka_exception
from odradek.cli.tool_common import client_settings
from odradek.java_order import java_hash_map_order
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.security.client_security import ClientSecurityError, client_security
from odradek.server.kafka_config import parse_properties

TOPICS, BROKERS, BROKER_LOGGERS, GROUPS = "topics", "brokers", "broker-loggers", "groups"
USERS, CLIENTS, IPS, CLIENT_METRICS = "users", "clients", "ips", "client-metrics"
# Kafka 4's BrokerSupportedConfigTypes, in its order.
ENTITY_TYPES = (TOPICS, CLIENTS, USERS, BROKERS, IPS, CLIENT_METRICS, GROUPS, BROKER_LOGGERS)
RESOURCE_TYPES = {TOPICS: 2, BROKERS: 4, BROKER_LOGGERS: 8, GROUPS: 32}
# DescribeConfigs ConfigSource code -> the Java Admin's ConfigEntry.ConfigSource name.
SOURCE_NAMES = {
    0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "DYNAMIC_CLIENT_METRICS_CONFIG", 8: "DYNAMIC_GROUP_CONFIG",
}
_EXEC = "java.util.concurrent.ExecutionException: "
_NOT_LIST = r"(?=[^\]]*(?:\[|$))"  # Kafka's "not inside [...]" lookahead
_ADD_FORMAT = ('requirement failed: Invalid entity config: all configs to be added must be in the format "key=val" or  '
               '"key=[val1,val2]" to group values which contain commas.')
_DEFAULT_FLAGS = {"client_defaults": CLIENTS, "user_defaults": USERS, "broker_defaults": BROKERS, "ip_defaults": IPS}
_NAME_FLAGS = {"topic": TOPICS, "client": CLIENTS, "user": USERS, "broker": BROKERS, "broker_logger": BROKER_LOGGERS,
               "ip": IPS, "client_metrics": CLIENT_METRICS, "group": GROUPS}


class UsageError(Exception):
    """An argument error: the message alone goes to stderr (Kafka's IllegalArgumentException)."""


class ClusterError(Exception):
    """A failure reported by the cluster (Kafka's ExecutionException)."""


def _java_bool(b: bool) -> str:
    return "true" if b else "false"


def _java_str(v: str | None) -> str:
    return "null" if v is None else v


def parse_add_config(text: str) -> dict[str, str]:
    """``--add-config``: ``k=v`` pairs split at commas outside ``[...]``; brackets dropped."""
    out: dict[str, str] = {}
    items = re.split("," + _NOT_LIST, text)
    while items and items[-1] == "":  # Java's String.split drops trailing empty strings
        items.pop()
    for item in items:
        pair = re.split(r"\s*=\s*" + _NOT_LIST, item)
        if len(pair) != 2:
            raise UsageError(_ADD_FORMAT)
        out[pair[0].strip()] = re.sub(r"\[?\]?", "", pair[1]).strip()
    return out


def _validate_keys(keys: Sequence[str]) -> None:
    for k in keys:
        if not re.fullmatch(r"[$a-zA-Z0-9._-]*", k):
            raise UsageError(f"Invalid character found for config key: {k}")


def validate_topic_name(name: str) -> None:
    """Kafka's Topic.validate."""
    if name == "":
        raise UsageError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise UsageError("Topic name cannot be \".\" or \"..\"")
    if len(name) > 249:
        raise UsageError(f"Topic name is illegal, it can't be longer than 249 characters, topic name: {name}")
    if not re.fullmatch(r"[a-zA-Z0-9._-]+", name):
        raise UsageError(f"Topic name is invalid: '{name}' contains one or more characters other than "
                         "ASCII alphanumerics, '.', '_' and '-'")


def config_line(entry: dict[str, Any]) -> str:
    """``  name=value sensitive=false synonyms={SOURCE:name=value, ...}`` as Kafka prints it."""
    synonyms = ", ".join(
        f"{SOURCE_NAMES.get(s['source'], 'UNKNOWN')}:{s['name']}={_java_str(s['value'])}" for s in entry["synonyms"]
    )
    return f"  {entry['name']}={_java_str(entry['value'])} sensitive={_java_bool(entry['is_sensitive'])} synonyms={{{synonyms}}}"


def dynamic_source(entity_type: str, name: str) -> int:
    """The source ``--describe`` without ``--all`` keeps (Kafka's describeConfigContext)."""
    if entity_type == TOPICS:
        return 1
    if entity_type == BROKERS:
        return 3 if name == "" else 2
    return 6 if entity_type == BROKER_LOGGERS else 8


def entities_of(opts: argparse.Namespace) -> tuple[list[str], list[str]]:
    """Kafka's ``entityTypes`` and ``entityNames``: ``--entity-type`` values then the specific
    flags; ``--entity-name`` / ``--entity-default`` in command-line order ("" = default)."""
    types = list(opts.entity_type or [])
    names = list(opts.entity_names)
    for attr, etype in _NAME_FLAGS.items():
        if getattr(opts, attr) is not None:
            types.append(etype)
            names.append(getattr(opts, attr))
    for attr, etype in _DEFAULT_FLAGS.items():
        if getattr(opts, attr):
            types.append(etype)
            names.append("")
    return types, names


def check_args(opts: argparse.Namespace) -> tuple[list[str], list[str]]:
    """Kafka's ConfigCommandOptions.checkArgs (for --bootstrap-server)."""
    if int(opts.alter) + int(opts.describe) != 1:
        raise UsageError("Command must include exactly one action: --describe, --alter")
    if opts.describe and (opts.add_config is not None or opts.delete_config):
        raise UsageError("Option \"[describe]\" can't be used with option \"[add-config]\"" if opts.add_config
                         is not None else "Option \"[describe]\" can't be used with option \"[delete-config]\"")
    types, names = entities_of(opts)
    dups = sorted({t for t in types if types.count(t) > 1})
    if dups:
        raise UsageError(f"Duplicate entity type(s) specified: {','.join(dups)}")
    for t in types:
        if t not in ENTITY_TYPES:
            raise UsageError(f"Invalid entity type {t}, the entity type must be one of {', '.join(ENTITY_TYPES)} "
                             "with a --bootstrap-server or --bootstrap-controller argument")
    if not types:
        raise UsageError("At least one entity type must be specified")
    if len(types) > 1 and set(types) != {USERS, CLIENTS}:
        raise UsageError(f"Only '{USERS}' and '{CLIENTS}' entity types may be specified together")
    generic = opts.entity_type or opts.entity_names
    specific = any(getattr(opts, a) is not None for a in _NAME_FLAGS) or any(getattr(opts, a) for a in _DEFAULT_FLAGS)
    if generic and specific:
        raise UsageError("--entity-{type,name,default} should not be used in conjunction with specific entity flags")
    if opts.bootstrap_server is None:
        raise UsageError("Either --bootstrap-server or --bootstrap-controller must be specified.")
    has_name = any(n != "" for n in names)
    has_default = any(n == "" for n in names)
    if has_name and (BROKERS in types or BROKER_LOGGERS in types):
        for n in names:
            if n != "" and not re.fullmatch(r"[+-]?\d+", n):
                raise UsageError(f"The entity name for {types[0]} must be a valid integer broker id, but it is: {n}")
    if opts.describe:
        if not ({USERS, CLIENTS, BROKERS, IPS} & set(types)) and has_default:
            raise UsageError(f"--entity-default must not be specified with --describe of {','.join(types)}")
        if BROKER_LOGGERS in types and not has_name:
            raise UsageError(f"An entity name must be specified with --describe of {','.join(types)}")
    if opts.alter:
        if {USERS, CLIENTS, BROKERS, IPS} & set(types):
            if not has_name and not has_default:
                raise UsageError("An entity-name or default entity must be specified with --alter of users, clients, brokers or ips")
        elif not has_name:
            raise UsageError(f"An entity name must be specified with --alter of {','.join(types)}")
        if opts.add_config is not None and opts.add_config_file is not None:
            raise UsageError("Only one of --add-config or --add-config-file must be specified")
        if opts.add_config is None and opts.add_config_file is None and not opts.delete_config:
            raise UsageError("At least one of --add-config, --add-config-file, or --delete-config must be specified with --alter")
        if len(types) != len(names):
            raise UsageError("An entity name must be specified for every entity type")
    return types, names


class ConfigsTool:
    def __init__(self, admin: AdminClient, out: list[str]) -> None:
        self.admin = admin
        self.out = out

    def _raise(self, code: int, message: str | None) -> None:
        raise ClusterError(_EXEC + kafka_exception(code, message))

    async def _brokers(self) -> list[tuple[int, str, int]]:
        md = await self.admin.metadata([])
        return [(b["node_id"], b["host"], b["port"]) for b in md["brokers"]]

    async def _send_to(self, api: Any, body: dict[str, Any], broker: int | None) -> dict[str, Any]:
        """To any broker, or (a BROKER / BROKER_LOGGER resource naming one) to that broker."""
        if broker is None:
            return await self.admin.send(api, body, top_error=None)
        nodes = {n: (h, p) for n, h, p in await self._brokers()}
        if broker not in nodes:
            raise ClusterError(_EXEC + "org.apache.kafka.common.errors.TimeoutException: "
                               f"Timed out waiting for a node assignment. Call: {api.name}")
        host, port = nodes[broker]
        async with AdminClient(f"{host}:{port}", self.admin.timeout_ms, self.admin.client_id,
                               self.admin.request_timeout_ms, self.admin.security) as direct:
            return await direct.send(api, body, top_error=None)

    @staticmethod
    def _target(entity_type: str, name: str) -> int | None:
        return int(name) if entity_type in (BROKERS, BROKER_LOGGERS) and name != "" else None

    async def describe_configs(self, entity_type: str, name: str) -> list[dict[str, Any]]:
        body = {"resources": [{"resource_type": RESOURCE_TYPES[entity_type], "resource_name": name,
                               "configuration_keys": None}],
                "include_synonyms": True, "include_documentation": False}
        resp = await self._send_to(m.DESCRIBE_CONFIGS, body, self._target(entity_type, name))
        r = resp["results"][0]
        if r["error_code"] != Errors.NONE:
            self._raise(r["error_code"], r.get("error_message"))
        return list(r["configs"])

    async def describe(self, entity_type: str, name: str | None, describe_all: bool) -> None:
        if name is not None and not describe_all:
            missing = False
            if entity_type == TOPICS:
                validate_topic_name(name)
                md = await self.admin.metadata(None)
                missing = name not in {t["name"] for t in md["topics"]}
            elif entity_type in (BROKERS, BROKER_LOGGERS):
                missing = name != "" and name not in {str(n) for n, _, _ in await self._brokers()}
            if missing:
                self.out.append(f"The {entity_type[:-1]} '{name}' doesn't exist and doesn't have dynamic config.")
                return
        if name is not None:
            entities = [name]
        elif entity_type == TOPICS:
            md = await self.admin.metadata(None)
            entities = java_hash_map_order([t["name"] for t in md["topics"]])
        elif entity_type == BROKERS:
            entities = [str(n) for n, _, _ in await self._brokers()] + [""]
        else:  # groups
            resp = await self.admin.send(m.LIST_GROUPS, {"states_filter": [], "types_filter": []})
            if resp["error_code"] != Errors.NONE:
                self._raise(resp["error_code"], None)
            entities = [g["group_id"] for g in resp["groups"]]
        for entity in entities:
            if entity == "":
                self.out.append(f"Default configs for {entity_type} in the cluster are:")
            else:
                self.out.append(f"{'All' if describe_all else 'Dynamic'} configs for {entity_type[:-1]} {entity} are:")
            source = dynamic_source(entity_type, entity)
            entries = await self.describe_configs(entity_type, entity)
            for e in sorted(entries, key=lambda e: e["name"]):
                if describe_all or e["config_source"] == source:
                    self.out.append(config_line(e))

    async def alter(self, entity_type: str, name: str, to_add: dict[str, str], to_delete: list[str]) -> None:
        if entity_type == BROKER_LOGGERS:
            valid = {e["name"] for e in await self.describe_configs(entity_type, name)
                     if e["config_source"] == dynamic_source(entity_type, name)}
            invalid = [k for k in to_delete if k not in valid] + [k for k in to_add if k not in valid]
            if invalid:
                raise UsageError(f"Invalid broker logger(s): {','.join(invalid)}")
        ops = [{"name": k, "config_operation": 1, "value": None} for k in to_delete]
        ops += [{"name": k, "config_operation": 0, "value": v} for k, v in to_add.items()]
        body = {"resources": [{"resource_type": RESOURCE_TYPES[entity_type], "resource_name": name, "configs": ops}],
                "validate_only": False}
        resp = await self._send_to(m.INCREMENTAL_ALTER_CONFIGS, body, self._target(entity_type, name))
        r = resp["responses"][0]
        if r["error_code"] != Errors.NONE:
            self._raise(r["error_code"], r.get("error_message"))
        if name:
            self.out.append(f"Completed updating config for {entity_type[:-1]} {name}.")
        else:
            self.out.append(f"Completed updating default config for {entity_type} in the cluster.")


async def _main(opts: argparse.Namespace, types: list[str], names: list[str], out: list[str]) -> None:
    to_add: dict[str, str] = {}
    to_delete: list[str] = []
    if opts.alter:
        if opts.add_config_file is not None:
            try:
                with open(opts.add_config_file, encoding="utf-8") as f:
                    to_add.update(parse_properties(f.read()))
            except OSError as e:
                raise UsageError(f"{opts.add_config_file} ({e.strerror})") from None
        if opts.add_config is not None:
            to_add.update(parse_add_config(opts.add_config))
        _validate_keys(list(to_add))
        to_delete = [k.strip() for item in opts.delete_config or [] for k in item.split(",") if k.strip()]
    timeout_ms, request_ms, client_id, security = client_settings(opts, "odradek-configs")
    async with AdminClient(opts.bootstrap_server, timeout_ms, client_id, request_ms, security) as admin:
        etype = types[0]
        if etype in (USERS, CLIENTS, IPS):
            if opts.alter:
                await client_quotas.alter(admin, types, names, to_add, to_delete, out)
            else:
                await client_quotas.describe(admin, types, names, out)
            return
        if etype == CLIENT_METRICS:
            raise ClusterError("odradek configs does not manage client-metrics resources; use kafka-configs.sh")
        tool = ConfigsTool(admin, out)
        if opts.alter:
            await tool.alter(etype, names[0], to_add, to_delete)
        else:
            await tool.describe(etype, names[0] if names else None, opts.all)


def run(opts: argparse.Namespace, only: tuple[str, ...] | None = None) -> int:
    """``only``: the entity types this command accepts (``odradek client-quotas``)."""
    out: list[str] = []
    try:
        types, names = check_args(opts)
        if only is not None and any(t not in only for t in types):
            raise UsageError(f"Invalid entity type {','.join(types)}, the entity type must be one of {', '.join(only)}")
        opts.command_props = {}
        if opts.command_config is not None:
            try:
                with open(opts.command_config, encoding="utf-8") as f:
                    opts.command_props = parse_properties(f.read())
            except OSError as e:
                raise UsageError(f"{opts.command_config} ({e.strerror})") from None
        try:
            opts.security = client_security(opts.command_props)
        except ClientSecurityError as e:
            raise UsageError(f"Invalid client configuration: {e}") from None
        asyncio.run(_main(opts, types, names, out))
    except (UsageError, client_quotas.QuotaUsageError) as e:
        _flush(out)
        print(e, file=sys.stderr)
        return 1
    except (ClusterError, client_quotas.QuotaClusterError, AdminError, ConnectionError) as e:
        _flush(out)
        msg = str(e)
        if msg.startswith(_EXEC) or isinstance(e, (AdminError, ConnectionError)):
            print(f"Error while executing config command with args '{' '.join(opts.argv)}'", file=sys.stderr)
        print(msg, file=sys.stderr)
        return 1
    _flush(out)
    return 0


def _flush(lines: list[str]) -> None:
    for line in lines:
        print(line)
    sys.stdout.flush()


class _EntityName(argparse.Action):
    """--entity-name N / --entity-default, kept in command-line order ("" = the default)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        namespace.entity_names = [*getattr(namespace, "entity_names", []), values if isinstance(values, str) else ""]


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "configs", help="describe and alter topic, broker, group configs and client quotas (kafka-configs.sh)",
        description="This tool helps to manipulate and describe entity config for a topic, broker, broker "
        "logger, group, user or client (kafka-configs.sh's flags).",
    )
    add_arguments(p)
    p.set_defaults(func=_run_with_argv)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-server", help="The Kafka servers to connect to.")
    p.add_argument("--command-config", help="Property file containing configs to be passed to Admin Client "
                   "(default.api.timeout.ms, security.protocol, ssl.*, sasl.mechanism, sasl.jaas.config).")
    p.add_argument("--alter", action="store_true", help="Alter the configuration for the entity.")
    p.add_argument("--describe", action="store_true", help="List configs for the given entity.")
    p.add_argument("--all", action="store_true", help="List all configs for the given entity, including static configs.")
    p.add_argument("--entity-type", action="append",
                   help="Type of entity (topics/clients/users/brokers/broker-loggers/ips/client-metrics/groups)")
    p.add_argument("--entity-name", action=_EntityName, dest="entity_names", default=[],
                   help="Name of entity (topic name/client id/user principal name/broker id/group id)")
    p.add_argument("--entity-default", action=_EntityName, nargs=0, dest="entity_names",
                   help="Default entity name for clients/users/brokers/ips (applies to corresponding entity type)")
    p.add_argument("--add-config", help="Key Value pairs of configs to add. Square brackets can be used to group "
                   "values which contain commas: 'k1=v1,k2=[v1,v2,v2],k3=v3'.")
    p.add_argument("--add-config-file", help="Path to a properties file with configs to add.")
    p.add_argument("--delete-config", action="append", help="config keys to remove 'k1,k2'")
    for flag in ("topic", "client", "user", "broker", "broker-logger", "ip", "client-metrics", "group"):
        p.add_argument(f"--{flag}", help=f"The {flag.replace('-', ' ')} entity (as --entity-type/--entity-name).")
    for flag in ("client-defaults", "user-defaults", "broker-defaults", "ip-defaults"):
        p.add_argument(f"--{flag}", action="store_true", help=f"The config defaults for all {flag.split('-')[0]}s.")


def _run_with_argv(opts: argparse.Namespace) -> int:
    return run_command(opts, "configs")


def run_command(opts: argparse.Namespace, command: str, only: tuple[str, ...] | None = None) -> int:
    argv = sys.argv[1:]
    opts.argv = argv[1:] if argv and argv[0] == command else argv
    return run(opts, only)
