"""The ``odradek`` command. Subcommands live in their own modules and register themselves here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from odradek import __version__

# Each subcommand module exposes ``add_parser(subparsers)`` which sets ``func`` on its parser.
SUBCOMMANDS: tuple[str, ...] = (
    "odradek.cli.server",
    "odradek.cli.groups",
    "odradek.cli.pipeline",
    "odradek.cli.storage",
    "odradek.cli.dump_log",
    "odradek.cli.metadata_quorum",
    "odradek.cli.cluster",
    "odradek.cli.topics",
    "odradek.cli.configs",
    "odradek.cli.client_quotas",
    "odradek.cli.leader_election",
    "odradek.cli.reassign",
    "odradek.cli.transactions",
    "odradek.cli.console",
    "odradek.cli.get_offsets",
    "odradek.cli.delete_records",
    "odradek.cli.log_dirs",
    "odradek.cli.features",
    "odradek.cli.completion",
    "odradek.cli.console_producer",
    "odradek.cli.console_consumer",
    "odradek.cli.perf",
    "odradek.cli.broker_api_versions",
    "odradek.cli.acls",
)


def _version(args: argparse.Namespace) -> int:
    print(f"odradek {__version__}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(
        prog="odradek", description="Odradek: a Kafka-compatible broker written in Python."
    )
    parser.add_argument("--version", action="version", version=f"odradek {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS:
        importlib.import_module(module_name).add_parser(sub)
    version = sub.add_parser("version", help="print the version and exit")
    version.set_defaults(func=_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
