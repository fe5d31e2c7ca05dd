"""The SCRAM credential part of ``odradek configs --entity-type users`` (kafka-configs.sh):

    odradek configs --bootstrap-server HOST:PORT --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
    odradek configs ... --alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-512
    odradek configs ... --describe --entity-type users [--entity-name alice]

:func:`alter_user_scram` and :func:`describe_user_scram` take the parsed arguments
(``bootstrap_server``, ``entity_name``, ``add_config``, ``delete_config``, optionally
``command_config``: a client properties file with ``security.protocol``, ``ssl.*``,
``sasl.mechanism`` and ``sasl.jaas.config``) and print what Kafka's ConfigCommand prints. The salt and the salted password
are computed here, as Kafka's admin client does; the broker forwards the credential to the
controller (AlterUserScramCredentials).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from odradek.cli.admin import AdminClient, kafka_exception
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.security.client_security import (
    PLAINTEXT,
    ClientSecurity,
    ClientSecurityError,
    client_security,
)
from odradek.security.scram_credential import MIN_ITERATIONS, ScramMechanism
from odradek.security.scram_parser import ScramParseError, parse_add_config
from odradek.server.kafka_config import parse_properties


class ScramConfigError(Exception):
    pass


def command_config_login(path: str | None) -> ClientSecurity:
    """The connection security (TLS, SASL login) of a client properties file (PLAINTEXT without one)."""
    if not path:
        return PLAINTEXT
    try:
        with open(path, encoding="utf-8") as f:
            props = parse_properties(f.read())
    except OSError as e:
        raise ScramConfigError(f"cannot read {path}: {e.strerror}") from e
    try:
        return client_security(props)
    except ClientSecurityError as e:
        raise ScramConfigError(f"Invalid client configuration in {path}: {e}") from e


def _names(args: argparse.Namespace) -> list[str]:
    name = getattr(args, "entity_name", None)
    if name is None:
        return []
    return list(name) if isinstance(name, list) else [name]


def _upsertions(user: str, add_config: str) -> list[dict[str, Any]]:
    out = []
    try:
        for spec in parse_add_config(add_config):
            out.append({"name": user, "mechanism": spec.mechanism.type_id, "iterations": spec.iterations,
                        "salt": spec.salt, "salted_password": spec.salted_password})
    except ScramParseError as e:
        raise ScramConfigError(str(e)) from e
    return out


def _deletions(user: str, delete_config: str) -> list[dict[str, Any]]:
    out = []
    for name in (x.strip() for x in delete_config.split(",") if x.strip()):
        mech = ScramMechanism.by_name(name)
        if mech is None:
            raise ScramConfigError(
                f"Only quota and SCRAM credential configs can be deleted for 'users' using "
                f"--bootstrap-server. Unexpected config names: {name}"
            )
        out.append({"name": user, "mechanism": mech.type_id})
    return out


async def alter_credentials(admin: AdminClient, user: str, add_config: str, delete_config: str) -> None:
    """AlterUserScramCredentials of ``user`` from kafka-configs' ``--add-config`` text
    (``SCRAM-SHA-256=[iterations=N,password=P],...``) and ``--delete-config`` mechanism names.
    Kafka's error as a ScramConfigError."""
    request = {"deletions": _deletions(user, delete_config), "upsertions": _upsertions(user, add_config)}
    if not request["deletions"] and not request["upsertions"]:
        raise ScramConfigError("nothing to alter: give --add-config or --delete-config")
    resp = await admin.send(m.ALTER_USER_SCRAM_CREDENTIALS, request, top_error=None)
    for r in resp["results"]:
        if r["error_code"] != Errors.NONE:
            raise ScramConfigError(kafka_exception(r["error_code"], r["error_message"]))


async def describe_credentials(admin: AdminClient, names: list[str]) -> list[str]:
    """Kafka's "SCRAM credential configs for user-principal 'u' are ..." lines (all users with
    credentials when ``names`` is empty)."""
    wanted = [n for n in names if n]
    resp = await admin.send(
        m.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": [{"name": n} for n in wanted] or None}
    )
    lines = []
    for r in resp["results"]:
        if r["error_code"] != Errors.NONE:
            continue  # Kafka's admin client lists only the users that have credentials
        text = ", ".join(
            f"{ScramMechanism.by_type(i['mechanism']).mechanism_name}=iterations={i['iterations']}"  # type: ignore[union-attr]
            for i in r["credential_infos"] if ScramMechanism.by_type(i["mechanism"]) is not None
        )
        lines.append(f"SCRAM credential configs for user-principal '{r['user']}' are {text}")
    return lines


async def _alter(args: argparse.Namespace) -> str:
    names = _names(args)
    if len(names) != 1 or not names[0]:
        raise ScramConfigError("an --entity-name is required to alter the SCRAM credentials of a user")
    user = names[0]
    async with AdminClient(args.bootstrap_server, security=command_config_login(getattr(args, "command_config", None))) as admin:
        await alter_credentials(
            admin, user, getattr(args, "add_config", None) or "", getattr(args, "delete_config", None) or ""
        )
    return f"Completed updating config for user {user}."


async def _describe(args: argparse.Namespace) -> list[str]:
    async with AdminClient(args.bootstrap_server, security=command_config_login(getattr(args, "command_config", None))) as admin:
        return await describe_credentials(admin, _names(args))


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def alter_user_scram(args: argparse.Namespace) -> int:
    """``--alter --entity-type users`` with SCRAM configs; exit code as kafka-configs."""
    try:
        print(_run(_alter(args)))
    except (ScramConfigError, ConnectionError, OSError) as e:
        print(f"Error while executing config command with args '{_argv()}'\n{e}", file=sys.stderr)
        return 1
    return 0


def describe_user_scram(args: argparse.Namespace) -> int:
    """``--describe --entity-type users``: the SCRAM credential lines."""
    try:
        for line in _run(_describe(args)):
            print(line)
    except (ScramConfigError, ConnectionError, OSError) as e:
        print(f"Error while executing config command with args '{_argv()}'\n{e}", file=sys.stderr)
        return 1
    return 0


def _argv() -> str:
    return " ".join(sys.argv[1:])


__all__ = ["MIN_ITERATIONS", "alter_user_scram", "command_config_login", "describe_user_scram"]
