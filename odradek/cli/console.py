"""``odradek console``: the web console, a separate process that works against any Kafka-protocol
cluster (see :mod:`odradek.console`).

``odradek console --bootstrap-server HOST:PORT --port P [--host 127.0.0.1] [--command-config FILE]
[--lag-sample-interval-ms MS]``. ``--command-config`` (a client properties file) may set
``client.id``, ``request.timeout.ms`` and Kafka's client security keys (``security.protocol``,
``ssl.*``, ``sasl.mechanism``, ``sasl.jaas.config``: :mod:`odradek.security.client_security`);
settings that cannot work are refused at start. A port already in use is refused with a clear message (exit 1); a
cluster that is away is shown as an error page until it is back.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import signal
import sys
from typing import Any

from odradek.cli.admin import AdminError, parse_bootstrap
from odradek.security.client_security import ClientSecurity, ClientSecurityError, client_security

PROG = "odradek console"
DEFAULT_LAG_INTERVAL_MS = 10_000


class ConsoleStartError(Exception):
    pass


def load_props(path: str | None) -> dict[str, str]:
    if path is None:
        return {}
    from odradek.server.kafka_config import parse_properties

    try:
        with open(path, encoding="utf-8") as f:
            props = parse_properties(f.read())
    except OSError as e:
        raise ConsoleStartError(f"cannot read --command-config {path}: {e.strerror or e}") from e
    if "security.providers" in props:
        raise ConsoleStartError(f"{PROG}: security.providers is not supported")
    _security(props)  # refused now rather than on the first page
    if "request.timeout.ms" in props:
        text = props["request.timeout.ms"].strip()
        if not text.isdigit() or int(text) <= 0:
            raise ConsoleStartError(f"Invalid value {text} for configuration request.timeout.ms")
    return props


def _security(props: dict[str, str]) -> ClientSecurity:
    try:
        return client_security(props)
    except ClientSecurityError as e:
        raise ConsoleStartError(f"Invalid client configuration: {e}") from e


async def serve(args: argparse.Namespace, props: dict[str, str]) -> None:
    from aiohttp import web

    from odradek.console.client import DEFAULT_REQUEST_TIMEOUT_MS, ConsoleClient
    from odradek.console.lag_history import LagHistory
    from odradek.console.web import build_app

    client = ConsoleClient(
        args.bootstrap_server, client_id=props.get("client.id", "odradek-console"),
        request_timeout_ms=int(props.get("request.timeout.ms", DEFAULT_REQUEST_TIMEOUT_MS)),
        security=_security(props),
    )
    app = build_app(client, LagHistory(), args.lag_sample_interval_ms / 1000)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, args.host, args.port, reuse_address=False)
        try:
            await site.start()
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ConsoleStartError(f"port {args.port} on {args.host} is already in use") from e
            raise ConsoleStartError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from e
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(f"{PROG}: serving http://{host}:{args.port}/ for the cluster at {args.bootstrap_server}",
              flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)")
    logging.getLogger("odradek.network.client").setLevel(logging.WARNING)
    try:
        parse_bootstrap(args.bootstrap_server)
        if not 0 < args.port < 65536:
            raise ConsoleStartError(f"--port must be between 1 and 65535, not {args.port}")
        if args.lag_sample_interval_ms <= 0:
            raise ConsoleStartError("--lag-sample-interval-ms must be positive")
        asyncio.run(serve(args, load_props(args.command_config)))
    except (ConsoleStartError, AdminError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "console", help="a web console for any Kafka-protocol cluster",
        description="Serve a web console (brokers, quorum, topics, messages, consumer groups and their "
        "lag) for the cluster at --bootstrap-server.",
    )
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                   help="the cluster's brokers (comma-separated host:port)")
    p.add_argument("--port", type=int, required=True, help="the HTTP port to serve on")
    p.add_argument("--host", default="127.0.0.1", help="the address to serve on (default: 127.0.0.1)")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties: client.id, request.timeout.ms, security.protocol, ssl.*, "
                   "sasl.mechanism, sasl.jaas.config")
    p.add_argument("--lag-sample-interval-ms", type=int, default=DEFAULT_LAG_INTERVAL_MS, metavar="MS",
                   help=f"how often the console samples consumer lag for the charts (default: {DEFAULT_LAG_INTERVAL_MS})")
    p.set_defaults(func=run)
