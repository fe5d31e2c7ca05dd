"""``odradek --help`` lists every tool: each ``odradek/cli`` module that defines ``add_parser`` is
registered in ``SUBCOMMANDS``, and the help names the subcommand it adds."""

from __future__ import annotations

import argparse
import importlib
import pkgutil

import odradek.cli
from odradek.cli.main import SUBCOMMANDS, build_parser


def test_every_cli_module_with_a_parser_is_a_subcommand() -> None:
    modules = {
        f"odradek.cli.{info.name}" for info in pkgutil.iter_modules(odradek.cli.__path__)
        if hasattr(importlib.import_module(f"odradek.cli.{info.name}"), "add_parser")
    }
    assert modules == set(SUBCOMMANDS)


def test_help_lists_every_subcommand() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = parser.format_help()
    names = list(sub.choices)
    assert len(names) >= len(SUBCOMMANDS)
    for name in ("server", "topics", "configs", "produce", "consume", "groups", "console", "perf",
                 "get-offsets", "delete-records", "log-dirs", "cluster", "features", "completion"):
        assert name in names
    missing = [n for n in names if f"    {n} " not in text and f"    {n}\n" not in text]
    assert not missing, text
