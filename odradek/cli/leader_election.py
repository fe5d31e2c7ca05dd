"""``odradek leader-election``: elect partition leaders, as ``kafka-leader-election.sh``.

``odradek leader-election --bootstrap-server HOST:PORT [--command-config FILE] [--timeout MS]
--election-type PREFERRED|UNCLEAN (--topic T --partition P | --all-topic-partitions |
--path-to-json-file F)`` (``--admin.config`` is Kafka's name for ``--command-config`` here)

Sends ElectLeaders (all partitions when ``--all-topic-partitions``: ``topic_partitions`` null) and
prints Kafka's LeaderElectionCommand lines: ``Successfully completed leader election (TYPE) for
partitions t-0, t-1``, ``Valid replica already elected for partitions ...`` and, for each
failure, ``Error completing leader election (TYPE) for partition: t-0: <exception>`` with exit
code 1 and ``N replica(s) could not be elected`` on stderr. Kafka lists the partitions of a line
in Java HashSet order; here they are sorted. The JSON file is Kafka's:
``{"partitions": [{"topic": "foo", "partition": 1}]}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from odradek.cli.admin import AdminError, kafka_exception
from odradek.cli.tool_common import TIMEOUT_MESSAGE, add_connection_args, admin_client, usage_error
from odradek.protocol.errors import Errors

ELECTION_TYPES = {"PREFERRED": 0, "UNCLEAN": 1}


def parse_election_json(text: str) -> list[tuple[str, int]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise AdminError(f"Replica election data is not valid JSON: {e}") from e
    if not data:
        raise AdminError("Replica election data is empty")
    if not isinstance(data, dict) or "partitions" not in data:
        raise AdminError('Replica election data is missing "partitions" field')
    out: list[tuple[str, int]] = []
    for p in data["partitions"]:
        out.append((str(p["topic"]), int(p["partition"])))
    dups = sorted({tp for tp in out if out.count(tp) > 1})
    if dups:
        shown = ", ".join(f"{t}-{p}" for t, p in dups)
        raise AdminError(f"Replica election data contains duplicate partitions: [{shown}]")
    return sorted(set(out))


def format_results(election: str, response: dict[str, Any]) -> tuple[list[str], int]:
    """The lines Kafka prints, and the number of failed partitions."""
    ok: list[tuple[str, int]] = []
    noop: list[tuple[str, int]] = []
    failed: list[tuple[str, int, int, str | None]] = []
    top = response.get("error_code", 0)
    for t in response["replica_election_results"]:
        for r in t["partition_result"]:
            code = r["error_code"] or top
            tp = (t["topic"], r["partition_id"])
            if code == Errors.NONE:
                ok.append(tp)
            elif code == Errors.ELECTION_NOT_NEEDED:
                noop.append(tp)
            else:
                failed.append((*tp, code, r["error_message"]))
    lines = []
    if ok:
        lines.append(
            f"Successfully completed leader election ({election}) for partitions "
            + ", ".join(f"{t}-{p}" for t, p in sorted(ok))
        )
    if noop:
        lines.append("Valid replica already elected for partitions " + ", ".join(f"{t}-{p}" for t, p in sorted(noop)))
    for t, p, code, msg in sorted(failed):
        lines.append(f"Error completing leader election ({election}) for partition: {t}-{p}: {kafka_exception(code, msg)}")
    return lines, len(failed)


async def _run(args: argparse.Namespace, partitions: list[tuple[str, int]] | None) -> int:
    election = args.election_type.upper()
    async with admin_client(args, "odradek-leader-election") as admin:
        tps: list[dict[str, Any]] | None = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in partitions:
                by_topic.setdefault(t, []).append(p)
            tps = [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]
        response = await admin.elect_leaders(ELECTION_TYPES[election], tps)
    if response.get("error_code") and not response["replica_election_results"]:
        print(kafka_exception(response["error_code"], None), file=sys.stderr)
        return 1
    lines, failures = format_results(election, response)
    for line in lines:
        print(line)
    if failures:
        print(f"{failures} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    if args.bootstrap_server is None:
        return usage_error(parser, "Missing required option(s) [bootstrap-server]")
    if args.election_type is None or args.election_type.upper() not in ELECTION_TYPES:
        return usage_error(parser, "Missing required option(s) [election-type]" if args.election_type is None
                           else f"Invalid election type: {args.election_type}")
    chosen = [x for x in (args.topic is not None, args.all_topic_partitions, args.path_to_json_file is not None) if x]
    if len(chosen) != 1:
        return usage_error(parser, "One and only one of the following options is required: "
                           "[all-topic-partitions, path-to-json-file, topic]" if not chosen else
                           "Only one of the following options may be given: "
                           "[all-topic-partitions, path-to-json-file, topic]")
    partitions: list[tuple[str, int]] | None = None
    if args.topic is not None:
        if args.partition is None:
            return usage_error(parser, "Missing required option(s) [partition]")
        partitions = [(args.topic, args.partition)]
    try:
        if args.path_to_json_file is not None:
            with open(args.path_to_json_file) as f:
                partitions = parse_election_json(f.read())
        return asyncio.run(_run(args, partitions))
    except (TimeoutError, ConnectionError):
        print(TIMEOUT_MESSAGE, file=sys.stderr)
        return 1
    except (AdminError, OSError) as e:
        print(str(e), file=sys.stderr)
        return 1


def add_parser(sub: Any) -> None:
    p = sub.add_parser("leader-election", help="elect partition leaders (kafka-leader-election.sh)")
    add_connection_args(p)
    p.add_argument("--election-type", help="PREFERRED or UNCLEAN")
    p.add_argument("--topic")
    p.add_argument("--partition", type=int)
    p.add_argument("--all-topic-partitions", action="store_true")
    p.add_argument("--path-to-json-file")
    p.add_argument("--admin.config", dest="command_config", metavar="FILE",
                   help="Kafka's name for --command-config in this tool")
    p.set_defaults(func=run, parser=p)
