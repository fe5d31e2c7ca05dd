"""``odradek delete-records``: delete records up to an offset, as ``kafka-delete-records.sh``.

``odradek delete-records --bootstrap-server HOST:PORT --offset-json-file FILE [--command-config F]``

The file is Kafka's: ``{"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}``
(``offset`` -1: up to the high watermark). Prints ``Executing records delete operation``,
``Records delete operation completed:`` and per partition ``partition: T-P\\tlow_watermark: N``
or ``partition: T-P\\terror: <message>`` (in the order of the Java Admin's result map). Each
DeleteRecords goes to the partition's leader.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from odradek.cli.admin import AdminClient, AdminError, kafka_exception
from odradek.cli.tool_common import add_connection_args, require_bootstrap, run_admin
from odradek.cli.txn_admin import default_message
from odradek.java_order import java_hash_order, java_string_hash
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors

TopicPartition = tuple[str, int]
_PKG = "org.apache.kafka.common.errors."
# Kafka's default messages of the errors DeleteRecords answers with (besides txn_admin's).
_MESSAGES = {
    Errors.OFFSET_OUT_OF_RANGE: "The requested offset is not within the range of offsets maintained by the server.",
    Errors.NOT_LEADER_OR_FOLLOWER: "For requests intended only for the leader, this error indicates that the broker "
    "is not the current leader. For requests intended for any replica, this error indicates that the broker is not "
    "a replica of the topic partition.",
    Errors.POLICY_VIOLATION: "Request parameters do not satisfy the configured policy.",
}


def topic_partition_hash(tp: TopicPartition) -> int:
    """Java's ``TopicPartition.hashCode``."""
    h = 31 * (31 + tp[1]) + java_string_hash(tp[0])
    return ((h + 2**31) % 2**32) - 2**31


def parse_offset_json(text: str) -> dict[TopicPartition, int]:
    """DeleteRecordsCommand's parsing, with its messages."""
    try:
        doc = json.loads(text)
    except ValueError:
        raise AdminError("The input string is not a valid JSON") from None
    if not isinstance(doc, dict):
        raise AdminError("The input string is not a valid JSON")
    version = doc.get("version", 1)
    if version != 1:
        raise AdminError(f"Not supported version field value {version}")
    if "partitions" not in doc:
        raise AdminError("Missing partitions field")
    seen: dict[TopicPartition, int] = {}
    duplicates: list[TopicPartition] = []
    for entry in doc["partitions"]:
        try:
            tp = (str(entry["topic"]), int(entry["partition"]))
            offset = int(entry["offset"])
        except (KeyError, TypeError, ValueError) as e:
            raise AdminError(f"Invalid partition entry {json.dumps(entry)}: {e}") from None
        if tp in seen:
            duplicates.append(tp)
        else:
            seen[tp] = offset
    if duplicates:
        names = ",".join(f"{t}-{p}" for t, p in java_hash_order(duplicates, topic_partition_hash))
        raise AdminError(f"Offset json file contains duplicate topic partitions: {names}")
    return seen


async def delete_records(admin: AdminClient, offsets: dict[TopicPartition, int]) -> list[str]:
    md = await admin.metadata(sorted({t for t, _ in offsets}))
    leaders = {(t["name"], p["partition_index"]): p["leader_id"] for t in md["topics"] for p in t["partitions"]}
    brokers = {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}
    results: dict[TopicPartition, str] = {}
    by_leader: dict[int, dict[str, list[dict[str, int]]]] = {}
    for (t, p), off in offsets.items():
        leader = leaders.get((t, p))
        if leader is None:
            results[(t, p)] = f"error: {_PKG}UnknownTopicOrPartitionException: {default_message(Errors.UNKNOWN_TOPIC_OR_PARTITION)}"
        elif leader < 0:
            results[(t, p)] = f"error: {_PKG}LeaderNotAvailableException: {default_message(Errors.LEADER_NOT_AVAILABLE)}"
        else:
            by_leader.setdefault(leader, {}).setdefault(t, []).append({"partition_index": p, "offset": off})
    bodies = {n: {"topics": [{"name": t, "partitions": ps} for t, ps in topics.items()], "timeout_ms": admin.timeout_ms}
              for n, topics in by_leader.items()}
    for resp in (await admin.send_to_nodes(m.DELETE_RECORDS, bodies, brokers)).values():
        for t in resp["topics"]:
            for p in t["partitions"]:
                code = p["error_code"]
                if code == Errors.NONE:
                    results[(t["name"], p["partition_index"])] = f"low_watermark: {p['low_watermark']}"
                else:
                    message = _MESSAGES.get(code) or default_message(code)
                    results[(t["name"], p["partition_index"])] = f"error: {kafka_exception(code, message)}"
    lines = ["Executing records delete operation", "Records delete operation completed:"]
    for tp in offsets:
        lines.append(f"partition: {tp[0]}-{tp[1]}\t{results[tp]}")
    return lines


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "delete-records", help="delete records up to given offsets (kafka-delete-records.sh)",
        description="Delete records of partitions up to the offsets in a JSON file, as kafka-delete-records.sh. "
        'File: {"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}. '
        "Exit codes: 0 done, 1 failed (message on stderr), 2 usage error.",
    )
    add_connection_args(p)
    p.add_argument("--offset-json-file", metavar="FILE", help="REQUIRED: the JSON file with the offset per partition")
    p.set_defaults(func=lambda opts: run(p, opts))


def run(parser: argparse.ArgumentParser, opts: argparse.Namespace) -> int:
    require_bootstrap(parser, opts)
    if not opts.offset_json_file:
        parser.error('Missing required argument "[offset-json-file]"')

    async def work(admin: AdminClient) -> list[str]:
        try:
            with open(opts.offset_json_file) as f:
                text = f.read()
        except OSError as e:
            raise AdminError(f"{opts.offset_json_file} ({e.strerror})") from None
        return await delete_records(admin, parse_offset_json(text))

    return run_admin(opts, work, client_id="adminclient-delete-records")
