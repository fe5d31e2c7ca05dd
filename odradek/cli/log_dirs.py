"""``odradek log-dirs``: the log directories of brokers and their partitions, as ``kafka-log-dirs.sh``.

``odradek log-dirs --bootstrap-server HOST:PORT --describe [--broker-list 1,2] [--topic-list t1,t2]``

Prints ``Querying brokers for log directories information``, ``Received log directory
information from brokers 1,2`` and one line of JSON as Kafka's tool writes it (its HashMaps'
key orders, no spaces)::

    {"brokers":[{"broker":1,"logDirs":[{"partitions":[{"partition":"t-0","size":0,"offsetLag":0,
    "isFuture":false}],"error":null,"logDir":"/data"}]}],"version":1}

A broker of ``--broker-list`` that is not in the cluster is an error (exit 1).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from odradek.cli.admin import AdminClient, AdminError, kafka_exception
from odradek.cli.delete_records import topic_partition_hash
from odradek.cli.tool_common import add_connection_args, require_bootstrap, run_admin
from odradek.java_order import java_hash_map_order, java_hash_order
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors


def _java_map(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` with its keys in the iteration order of a Java HashMap of them (what Jackson writes)."""
    return {k: d[k] for k in java_hash_map_order(list(d))}


def _int_order(ids: set[int] | list[int]) -> list[int]:
    return java_hash_order(sorted(ids), lambda n: n)


def _error_class(code: int) -> str | None:
    if code == Errors.NONE:
        return None
    return kafka_exception(code, None).split(":", 1)[0]


def log_dirs_json(by_broker: dict[int, dict[str, Any]], topics: set[str]) -> str:
    brokers = []
    for broker in _int_order(list(by_broker)):
        dirs = []
        results = {r["log_dir"]: r for r in by_broker[broker]["results"]}
        for log_dir in java_hash_map_order(list(results)):
            r = results[log_dir]
            sizes = {(t["name"], p["partition_index"]): p for t in r["topics"] for p in t["partitions"]
                     if not topics or t["name"] in topics}
            partitions = [_java_map({
                "partition": f"{tp[0]}-{tp[1]}", "size": p["partition_size"], "offsetLag": p["offset_lag"],
                "isFuture": p["is_future_key"],
            }) for tp, p in ((tp, sizes[tp]) for tp in java_hash_order(list(sizes), topic_partition_hash))]
            dirs.append(_java_map({"logDir": log_dir, "error": _error_class(r["error_code"]), "partitions": partitions}))
        brokers.append(_java_map({"broker": broker, "logDirs": dirs}))
    return json.dumps(_java_map({"version": 1, "brokers": brokers}), separators=(",", ":"), ensure_ascii=False)


async def describe(admin: AdminClient, broker_list: set[int], topics: set[str]) -> list[str]:
    md = await admin.metadata([])
    cluster = {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}
    missing = broker_list - set(cluster)
    if missing:
        raise AdminError(
            "ERROR: The given brokers do not exist from --broker-list: "
            f"{','.join(map(str, _int_order(missing)))}. Current existent brokers: {','.join(map(str, _int_order(set(cluster))))}"
        )
    wanted = broker_list or set(cluster)
    body = {"topics": None}
    responses = await admin.send_to_nodes(m.DESCRIBE_LOG_DIRS, dict.fromkeys(wanted, body), cluster)
    for resp in responses.values():
        if resp.get("error_code", 0) != Errors.NONE:
            raise AdminError(kafka_exception(resp["error_code"], None))
    return [
        "Querying brokers for log directories information",
        f"Received log directory information from brokers {','.join(map(str, _int_order(wanted)))}",
        log_dirs_json(responses, topics),
    ]


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "log-dirs", help="log directories and partition sizes of brokers (kafka-log-dirs.sh)",
        description="Query log directory usage on the given brokers, as kafka-log-dirs.sh (JSON output). "
        "Exit codes: 0 done, 1 failed (message on stderr), 2 usage error.",
    )
    add_connection_args(p)
    p.add_argument("--describe", action="store_true", help="describe the log directories on the brokers")
    p.add_argument("--broker-list", default="", metavar="0,1,2", help="the brokers to query; default all")
    p.add_argument("--topic-list", default="", metavar="t1,t2", help="the topics to report; default all")
    p.set_defaults(func=lambda opts: run(p, opts))


def run(parser: argparse.ArgumentParser, opts: argparse.Namespace) -> int:
    require_bootstrap(parser, opts)
    if not opts.describe:
        parser.error('Missing required argument "[describe]"')
    try:
        brokers = {int(b) for b in opts.broker_list.split(",") if b}
    except ValueError:
        parser.error(f"--broker-list expects broker ids, got {opts.broker_list}")
    topics = {t for t in opts.topic_list.split(",") if t}
    return run_admin(opts, lambda admin: describe(admin, brokers, topics), client_id="log-dirs-tool")
