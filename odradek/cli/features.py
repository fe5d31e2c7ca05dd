"""``odradek features describe``: the cluster's feature flags, as ``kafka-features.sh describe``.

``odradek features --bootstrap-server HOST:PORT describe``

One line per feature the broker supports, sorted by name, in Kafka 4's layout::

    Feature: metadata.version                          SupportedMinVersion: 3.3-IV3          ...

(``SupportedMaxVersion``, ``FinalizedVersionLevel``, ``Epoch`` likewise), read from the
ApiVersions response as Kafka's Admin.describeFeatures does; metadata.version levels are shown by
their release names. ``upgrade``/``downgrade`` are not offered: Odradek does not serve
UpdateFeatures.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from odradek.cli.admin import AdminClient
from odradek.cli.tool_common import add_connection_args, require_bootstrap, run_admin

# Kafka's MetadataVersion names by feature level (MetadataVersion.version()).
_RELEASES = [
    (1, "3.0", 1), (2, "3.1", 0), (3, "3.2", 0), (4, "3.3", 0), (5, "3.3", 1), (6, "3.3", 2), (7, "3.3", 3),
    (8, "3.4", 0), (9, "3.5", 0), (10, "3.5", 1), (11, "3.5", 2), (12, "3.6", 0), (13, "3.6", 1), (14, "3.6", 2),
    (15, "3.7", 0), (16, "3.7", 1), (17, "3.7", 2), (18, "3.7", 3), (19, "3.7", 4), (20, "3.8", 0), (21, "3.9", 0),
    (22, "4.0", 0), (23, "4.0", 1), (24, "4.0", 2), (25, "4.0", 3), (26, "4.1", 0), (27, "4.1", 1), (28, "4.2", 0),
    (29, "4.2", 1), (30, "4.3", 0), (31, "4.4", 0),
]
METADATA_VERSION_NAMES = {level: f"{release}-IV{iv}" for level, release, iv in _RELEASES}


def level_to_string(feature: str, level: int) -> str:
    if feature == "metadata.version":
        return METADATA_VERSION_NAMES.get(level, f"UNKNOWN {level}")
    return str(level)


def describe_lines(api_versions: dict[str, Any]) -> list[str]:
    finalized = {f["name"]: f["max_version_level"] for f in api_versions.get("finalized_features") or []}
    epoch = api_versions.get("finalized_features_epoch", -1)
    lines = []
    for f in sorted(api_versions.get("supported_features") or [], key=lambda f: str(f["name"])):
        name = f["name"]
        lines.append(
            f"Feature: {name:<40}  SupportedMinVersion: {level_to_string(name, f['min_version']):<15}  "
            f"SupportedMaxVersion: {level_to_string(name, f['max_version']):<15}  "
            f"FinalizedVersionLevel: {level_to_string(name, finalized.get(name, 0)):<15}  "
            f"Epoch: {epoch if epoch >= 0 else '-'}"
        )
    return lines


async def _describe(admin: AdminClient) -> list[str]:
    return describe_lines(await admin.connect())


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "features", help="describe the cluster's feature flags (kafka-features.sh)",
        description="Describe the feature flags the brokers support and the finalized levels, as "
        "kafka-features.sh describe. Exit codes: 0 done, 1 failed (message on stderr), 2 usage error.",
    )
    add_connection_args(p)
    commands = p.add_subparsers(dest="features_command", metavar="{describe}")
    d = commands.add_parser("describe", help="describe the feature flags",
                            description="Describe the supported and finalized feature flags.")
    add_connection_args(d, nested=True)
    d.set_defaults(func=lambda opts: run(d, opts))
    p.set_defaults(func=lambda _opts: _usage(p))


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_usage(sys.stderr)
    p.exit(2, f"{p.prog}: error: a command is required: describe\n")


def run(parser: argparse.ArgumentParser, opts: argparse.Namespace) -> int:
    require_bootstrap(parser, opts)
    return run_admin(opts, _describe, client_id="adminclient-features")
