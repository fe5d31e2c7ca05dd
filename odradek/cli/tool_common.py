"""What every admin tool of ``odradek`` shares: the connection flags and the exit-code contract.

Flags as Kafka's tools: ``--bootstrap-server HOST:PORT[,...]`` and ``--command-config FILE`` (a
Java properties file for the Admin client; ``default.api.timeout.ms``, ``client.id`` and Kafka's
client security keys — ``security.protocol``, ``ssl.*``, ``sasl.mechanism``, ``sasl.jaas.config``,
see :mod:`odradek.security.client_security` — are used), plus ``--timeout MS`` (default
``default.api.timeout.ms`` or 60000): how long a tool waits for the cluster before giving up.

The contract a script can rely on, for every tool built on :func:`run_admin`:

- exit 0: done; the result is on stdout.
- exit 1: the command failed; one line on stderr, Kafka's message for the failure (for example
  ``Error while executing topic command : Topic 't' already exists.``), never a traceback. An
  unreachable bootstrap server ends within the timeout with ``...TimeoutException: Timed out
  waiting for a node assignment...``.
- exit 2: a usage error (argparse's ``usage:`` text and the reason on stderr), including Kafka's
  option-combination errors (``Option "[if-exists]" can't be used with option "[list]"``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from odradek.cli.admin import DEFAULT_API_TIMEOUT_MS, AdminClient, AdminError
from odradek.security.client_security import ClientSecurity, ClientSecurityError, client_security
from odradek.server.kafka_config import parse_properties

TIMEOUT_MESSAGE = "org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node assignment."


def add_connection_args(p: argparse.ArgumentParser, *, nested: bool = False) -> None:
    """``nested``: the flags of a sub-subcommand that its parent also takes (``features
    --bootstrap-server B describe`` as Kafka's, or ``features describe --bootstrap-server B``):
    they default to nothing so as not to overwrite the parent's."""
    extra: dict[str, Any] = {"default": argparse.SUPPRESS} if nested else {}
    names = ["--bootstrap-server", "-b"] if nested else ["--bootstrap-server"]
    p.add_argument(*names, metavar="HOST:PORT",
                   help="REQUIRED: the server(s) to connect to, HOST1:PORT1,HOST2:PORT2", **extra)
    p.add_argument("--command-config", metavar="FILE",
                   help="a properties file for the Admin client (default.api.timeout.ms, client.id, "
                   "security.protocol, ssl.*, sasl.mechanism, sasl.jaas.config)",
                   **extra)
    p.add_argument("--timeout", type=int, metavar="MS",
                   help="how long to wait for the cluster, in ms (default: default.api.timeout.ms or 60000)", **extra)


def load_properties(path: str) -> dict[str, str]:
    """A Java properties file (``#``/``!`` comments, ``=``/``:`` separators, ``\\`` line
    continuations and escapes such as ``\\n``, as an inline PEM value needs)."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise AdminError(f"{e.strerror}: {path}") from e
    return {k: v.strip() for k, v in parse_properties(text).items()}


def security_of(props: dict[str, str]) -> ClientSecurity:
    """The connection security ``props`` ask for; AdminError (exit 1) if it cannot work."""
    try:
        return client_security(props)
    except ClientSecurityError as e:
        raise AdminError(f"Invalid client configuration: {e}") from e


def command_config_security(path: str | None) -> ClientSecurity:
    """The connection security of a ``--command-config`` file (PLAINTEXT without one)."""
    return security_of(load_properties(path) if path else {})


def admin_client(opts: argparse.Namespace, client_id: str = "odradek-admin") -> AdminClient:
    props = load_properties(opts.command_config) if getattr(opts, "command_config", None) else {}
    security = security_of(props)
    timeout = getattr(opts, "timeout", None)
    if timeout is None:
        timeout = int(props.get("default.api.timeout.ms", DEFAULT_API_TIMEOUT_MS))
    return AdminClient(opts.bootstrap_server, timeout_ms=timeout, client_id=props.get("client.id", client_id),
                       security=security)


def require_bootstrap(parser: argparse.ArgumentParser, opts: argparse.Namespace) -> None:
    if not opts.bootstrap_server:
        parser.error("Missing required argument \"[bootstrap-server]\"")


def run_admin(
    opts: argparse.Namespace,
    work: Callable[[AdminClient], Awaitable[list[str]]],
    error_prefix: str = "",
    client_id: str = "odradek-admin",
) -> int:
    """Run ``work`` with an Admin client, print its lines; map failures to exit 1 with one line
    on stderr (``error_prefix`` + the message)."""

    async def go() -> list[str]:
        async with admin_client(opts, client_id) as admin:
            # A hard bound over everything (connecting included): the API timeout plus a margin.
            return await asyncio.wait_for(work(admin), admin.timeout_ms / 1000 + 5)

    try:
        lines = asyncio.run(go())
    except AdminError as e:
        msg = str(e)
        print(msg if msg.startswith(error_prefix) else f"{error_prefix}{msg}", file=sys.stderr)
        return 1
    except (TimeoutError, ConnectionError, OSError):
        print(f"{error_prefix}{TIMEOUT_MESSAGE}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    for line in lines:
        print(line)
    return 0
