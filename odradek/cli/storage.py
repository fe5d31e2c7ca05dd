"""``odradek storage``: format and inspect a node's directories, as ``kafka-storage.sh``.

* ``random-uuid``: print a new cluster id (22 characters of URL-safe base64);
* ``format --cluster-id ID --config FILE [--ignore-formatted] [--release-version V]
  [--standalone | --no-initial-controllers | --initial-controllers LIST]``: write
  ``meta.properties`` (and ``bootstrap.checkpoint``) in every ``log.dirs`` directory and the
  ``metadata.log.dir`` (see :mod:`odradek.server.formatter`);
* ``info --config FILE``: what the directories hold and what is wrong with them.

The configuration file is read and checked exactly as ``odradek server`` reads it (Odradek's
defaults apply to what it leaves out). Output, messages and exit codes are Kafka's: 0 on
success, 1 on a refused format or a problem found; usage errors exit 2 as every ``odradek``
command does (Kafka's tool exits 1).

``--feature name=level`` (repeatable) finalizes another feature at bootstrap; Odradek runs
``transaction.version`` (0-2, default 0 as Kafka's at 3.9-IV0) and ``kraft.version`` (set by
the quorum options). SCRAM credentials (``--add-scram``) are not supported.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from odradek.controller.feature_control_manager import (
    KRAFT_VERSION_FEATURE,
    METADATA_VERSION,
    SUPPORTED_FEATURES,
)
from odradek.server.formatter import (
    Formatter,
    FormatterError,
    InitialVoter,
    metadata_version_name,
    parse_feature_flags,
    parse_initial_controllers,
    parse_release_version,
)
from odradek.server.kafka_config import ConfigError, KafkaConfig, parse_listener
from odradek.server.meta_properties import META_PROPERTIES, random_uuid_base64, read_meta_properties


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "storage",
        help="format or inspect the data directories (kafka-storage.sh)",
        description="The storage tool: format the directories of a node before its first start "
        "and inspect them, as Apache Kafka's kafka-storage.sh.",
    )
    commands = p.add_subparsers(dest="storage_command", metavar="{info,format,random-uuid}")

    info = commands.add_parser(
        "info", help="Get information about the log directories on this node."
    )
    _add_config(info)
    info.set_defaults(func=run_info)

    fmt = commands.add_parser("format", help="Format the log directories on this node.")
    _add_config(fmt)
    fmt.add_argument("--cluster-id", "-t", required=True, help="The cluster ID to use.")
    fmt.add_argument(
        "--ignore-formatted",
        "-g",
        action="store_true",
        help="When this option is passed, the format command will skip over already "
        "formatted directories rather than failing.",
    )
    fmt.add_argument(
        "--release-version",
        "-r",
        help="The release version to use for the initial feature settings. The minimum "
        f"is 3.3-IV3; the default is {metadata_version_name(METADATA_VERSION)}",
    )
    fmt.add_argument(
        "--feature",
        "-f",
        action="append",
        default=[],
        help="The setting to use for a specific feature, in feature=level format. For "
        "example: `transaction.version=2`.",
    )
    fmt.add_argument(
        "--add-scram",
        "-S",
        action="append",
        default=[],
        help="A SCRAM_CREDENTIAL to add to the __cluster_metadata log e.g. "
        "'SCRAM-SHA-256=[name=alice,password=alice-secret]' "
        "'SCRAM-SHA-512=[name=alice,iterations=8192,salt=\"N3E=\",saltedpassword=\"YCE=\"]'",
    )
    quorum = fmt.add_mutually_exclusive_group()
    quorum.add_argument(
        "--standalone",
        "-s",
        action="store_true",
        help="Used to initialize a controller as a single-node dynamic quorum. When "
        "setting this flag, the controller.quorum.voters config must not be set, and "
        "controller.quorum.bootstrap.servers is set instead.",
    )
    quorum.add_argument(
        "--no-initial-controllers",
        "-N",
        action="store_true",
        help="Used to initialize a server without specifying a dynamic quorum.",
    )
    quorum.add_argument(
        "--initial-controllers",
        "-I",
        help="Used to initialize a server with the specified dynamic quorum: a "
        "comma-separated list of id@hostname:port:directory. The same values must be "
        "used to format all nodes.",
    )
    fmt.set_defaults(func=run_format)

    uuid_parser = commands.add_parser("random-uuid", help="Print a random UUID.")
    uuid_parser.set_defaults(func=run_random_uuid)

    p.set_defaults(func=lambda _args: _usage(p))


def _add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", required=True, help="The configuration file to use.")


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return 2


def run_random_uuid(args: argparse.Namespace) -> int:
    print(random_uuid_base64())
    return 0


def _load_config(path: str) -> KafkaConfig:
    config = KafkaConfig.from_file(path)
    if config.is_zk_mode:  # Kafka's StorageTool: ZooKeeper mode is never formatted
        raise ConfigError(
            "The kafka configuration file appears to be for a legacy cluster (ZooKeeper mode). "
            "Formatting is only supported for clusters in KRaft mode; a ZooKeeper-mode broker "
            "writes its meta.properties itself."
        )
    return config


def directories_of(config: KafkaConfig) -> list[str]:
    """``log.dirs`` and ``metadata.log.dir``, sorted, each once (Kafka's configToLogDirectories)."""
    return sorted({os.path.normpath(d) for d in [*config.log_dirs, config.metadata_log_dir]})


def standalone_voter(config: KafkaConfig, directory_id: str) -> InitialVoter:
    """This controller as the only voter, on its first advertised controller listener."""
    if "controller" not in config.process_roles:
        raise FormatterError("You can only use --standalone on a controller.")
    names = config.controller_listener_names
    advertised = [
        parse_listener(item, "advertised.listeners")
        for item in config.get("advertised.listeners") or []
    ]
    listeners = [lst for lst in advertised if lst.name in names] or config.controller_listeners
    if not listeners:
        raise FormatterError("No controller listeners found.")
    host = listeners[0].host or "localhost"
    if host in ("0.0.0.0", "::"):
        host = "localhost"
    return InitialVoter(config.node_id, host, listeners[0].port, directory_id)


def run_format(args: argparse.Namespace) -> int:
    try:
        config = _load_config(args.config)
        # As Kafka: --release-version, else inter.broker.protocol.version, else the newest.
        version = args.release_version or config.get("inter.broker.protocol.version")
        release = parse_release_version(str(version), METADATA_VERSION) if version else METADATA_VERSION
        features = parse_feature_flags(args.feature, SUPPORTED_FEATURES)
        if KRAFT_VERSION_FEATURE in features:
            raise FormatterError(
                "Odradek sets kraft.version from --standalone / --initial-controllers: "
                "remove --feature kraft.version"
            )
        initial: list[InitialVoter] | None = None
        if args.initial_controllers:
            initial = parse_initial_controllers(args.initial_controllers)
        if args.standalone:
            initial = [standalone_voter(config, random_uuid_base64())]
        if initial is not None and config.get("controller.quorum.voters"):
            raise FormatterError(
                "You cannot specify controller.quorum.voters and format the node with "
                "--initial-controllers or --standalone. If you want to use dynamic quorum, please "
                "remove controller.quorum.voters and specify controller.quorum.bootstrap.servers "
                "instead."
            )
        if (
            initial is None
            and not args.no_initial_controllers
            and "controller" in config.process_roles
            and not config.get("controller.quorum.voters")
            and config.get("controller.quorum.bootstrap.servers")
        ):
            raise FormatterError(
                "Because controller.quorum.voters is not set on this controller, you must specify "
                "one of the following: --standalone, --initial-controllers, or "
                "--no-initial-controllers."
            )
        scram = _scram_records(args.add_scram)
        names = config.controller_listener_names
        Formatter(
            node_id=config.node_id,
            cluster_id=args.cluster_id,
            directories=directories_of(config),
            metadata_log_dir=config.metadata_log_dir,
            release_version=release,
            controller_listener_name=names[0] if names else "CONTROLLER",
            ignore_formatted=args.ignore_formatted,
            initial_controllers=initial,
            features=features,
            scram_records=scram,
        ).run()
    except ConfigError as e:
        print(f"odradek: invalid configuration: {e}", file=sys.stderr)
        return 1
    except FormatterError as e:
        sys.stdout.flush()
        print(e, file=sys.stderr)
        return 1
    return 0


def _scram_records(flags: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """``--add-scram`` flags → UserScramCredentialRecords (FormatterError on a bad one)."""
    from odradek.security.scram_credential import credential_from_salted
    from odradek.security.scram_parser import ScramParseError, parse_add_scram

    out: list[tuple[str, dict[str, Any]]] = []
    for flag in flags:
        try:
            spec = parse_add_scram(flag)
        except ScramParseError as e:
            raise FormatterError(str(e)) from e
        cred = credential_from_salted(spec.mechanism, spec.salt, spec.salted_password, spec.iterations)
        out.append(
            (
                "UserScramCredentialRecord",
                {"name": spec.name, "mechanism": spec.mechanism.type_id, "salt": cred.salt,
                 "stored_key": cred.stored_key, "server_key": cred.server_key,
                 "iterations": cred.iterations},
            )
        )
    return out


def run_info(args: argparse.Namespace) -> int:
    try:
        config = _load_config(args.config)
    except ConfigError as e:
        print(f"odradek: invalid configuration: {e}", file=sys.stderr)
        return 1
    lines, code = info_lines(directories_of(config))
    for line in lines:
        print(line)
    return code


def info_lines(directories: list[str]) -> tuple[list[str], int]:
    """Kafka's ``StorageTool.infoCommand`` output for a KRaft node, and its exit code."""
    problems: list[str] = []
    found: list[str] = []
    first: dict[str, str] | None = None
    for d in sorted(directories):
        if not os.path.isdir(d):
            problems.append(
                f"{d} {'is not a directory' if os.path.exists(d) else 'does not exist'}"
            )
            continue
        found.append(d)
        path = os.path.join(d, META_PROPERTIES)
        if not os.path.exists(path):
            problems.append(f"{d} is not formatted.")
            continue
        try:
            props = read_meta_properties(path)
        except OSError as e:
            problems.append(f"Error loading {path}: {e.strerror}")
            continue
        if first is None:
            first = props
        elif first.get("cluster.id") != props.get("cluster.id"):
            problems.append("Mismatched cluster IDs between storage directories.")
        elif first.get("node.id") != props.get("node.id"):
            problems.append("Mismatched node IDs between storage directories.")
    if first is not None and first.get("version", "0") == "0":
        problems.append(
            "The kafka configuration file appears to be for a cluster in KRaft mode, but "
            "the directories are formatted for legacy mode."
        )
    lines: list[str] = []
    if not directories:
        return ["No directories specified."], 0
    if found:
        lines.append("Found log directory:" if len(found) == 1 else "Found log directories:")
        lines.extend(f"  {d}" for d in found)
        lines.append("")
    if first is not None:
        known = ("cluster.id", "directory.id", "node.id", "version")
        shown = ", ".join(f"{k}={first[k]}" for k in sorted(first) if k in known)
        lines.append(f"Found metadata: {{{shown}}}")
        lines.append("")
    if problems:
        lines.append("Found problem:" if len(problems) == 1 else "Found problems:")
        lines.extend(f"  {p}" for p in problems)
        lines.append("")
        return lines, 1
    return lines, 0
