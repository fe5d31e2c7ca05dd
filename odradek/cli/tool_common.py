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

``--command-config FILE`` is read by :func:`command_config` for every tool that talks to a cluster:
``client.id``, ``default.api.timeout.ms`` (``--timeout`` overrides it) and ``request.timeout.ms``
(each request's bound) are used, and the security keys (``security.protocol``, ``ssl.*``,
``sasl.*``) are checked by :func:`security_of`: settings that cannot work are refused with one
line and exit 1.

Where an existing test compares a tool byte for byte with Kafka's, Kafka's behaviour is kept and
differs from the contract above (tests/unit/test_tool_conventions.py checks this table):

=================== ========================================================================
tool                kept from Kafka's tool
=================== ========================================================================
transactions        usage errors exit 1 (argparse4j), usage and reason on stderr; failures
                    ``Failed to ...: <cause>. Enable debug logging ...`` (test_transactions_tool)
metadata-quorum     usage errors exit 1 (argparse4j); ``Failed to create new KafkaAdminClient``
                    is followed by its cause on a second stderr line (test_metadata_quorum_tool)
reassign            failures print ``Error: <message>`` (or Kafka's terse message) on stdout,
                    exit 1 (test_reassignment); an unreachable cluster is the contract's stderr line
leader-election     a failed partition prints ``Error completing leader election ...`` on stdout
                    and ``N replica(s) could not be elected`` on stderr, exit 1 (test_elections)
configs             a cluster failure prints ``Error while executing config command with args
                    '...'`` then the exception: two stderr lines, exit 1; Kafka's argument
                    errors exit 1 with the message alone (test_configs_cli, test_kafka_tools)
groups              a failure prints a blank line, ``Error: Executing consumer group command
                    failed due to ...`` and the exception: three stderr lines, exit 1
dump-log            index mismatches, out-of-order or missing time index entries and
                    non-consecutive offsets are reported on stderr after the dump, exit 0; a
                    failed --index-sanity-check stops at that file, exit 1, with Kafka's
                    ``...CorruptIndexException: ...`` line (not its stack trace) (test_storage_tools)
=================== ========================================================================
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NamedTuple

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


def command_config(path: str | None) -> dict[str, str]:
    """The ``--command-config`` file's properties ({} without one); :class:`AdminError` for a
    file that cannot be read. Its security keys are checked by :func:`security_of`."""
    return load_properties(path) if path else {}


def _int_prop(props: dict[str, str], key: str) -> int | None:
    if key not in props:
        return None
    try:
        return int(props[key])
    except ValueError:
        raise AdminError(f"Invalid value {props[key]} for configuration {key}: Not a number of type INT") from None


class ClientSettings(NamedTuple):
    timeout_ms: int  # the API timeout: all tries of one call
    request_timeout_ms: int | None  # one request's bound (None: the API timeout)
    client_id: str
    security: ClientSecurity  # TLS / SASL of every connection


def client_settings(opts: argparse.Namespace, client_id: str = "odradek-admin") -> ClientSettings:
    """(API timeout ms, request timeout ms or None, client id, security) from ``--timeout`` and
    ``--command-config``, as Kafka's Admin client reads them: ``default.api.timeout.ms`` smaller
    than ``request.timeout.ms`` is refused when set, else raised to it; the security keys are
    checked by :func:`security_of`."""
    props = command_config(getattr(opts, "command_config", None))
    request = _int_prop(props, "request.timeout.ms")
    timeout: int | None = getattr(opts, "timeout", None)
    if timeout is None:
        timeout = _int_prop(props, "default.api.timeout.ms")
        if timeout is not None and request is not None and timeout < request:
            raise AdminError("The specified value of default.api.timeout.ms must be no smaller than the value "
                             "of request.timeout.ms.")
        if timeout is None:
            timeout = max(DEFAULT_API_TIMEOUT_MS, request or 0)
    return ClientSettings(timeout, request, props.get("client.id", client_id), security_of(props))


def admin_client(opts: argparse.Namespace, client_id: str = "odradek-admin") -> AdminClient:
    timeout, request, cid, security = client_settings(opts, client_id)
    return AdminClient(opts.bootstrap_server, timeout_ms=timeout, client_id=cid, request_timeout_ms=request,
                       security=security)


def usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    """argparse's usage error (usage and reason on stderr) as a return value: exit code 2."""
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    return 2


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
