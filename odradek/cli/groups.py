"""``odradek groups``: kafka-consumer-groups.sh, with its flags and Kafka 4's output.

    odradek groups --bootstrap-server B --list [--state [S,..]] [--type [classic|consumer]]
    odradek groups --bootstrap-server B --describe (--group G.. | --all-groups) [--offsets|--members|--state] [--verbose]
    odradek groups --bootstrap-server B --reset-offsets (--group G.. | --all-groups)
        (--topic T[:P,P].. | --all-topics | --from-file CSV)
        (--to-earliest | --to-latest | --to-current | --to-offset N | --shift-by N | --to-datetime D
         | --by-duration PnDTnHnMnS) [--dry-run | --execute] [--export]
    odradek groups --bootstrap-server B --delete (--group G.. | --all-groups)
    odradek groups --bootstrap-server B --delete-offsets --group G --topic T[:P,P]..

stdout is what Kafka's tool prints for the same cluster. Where Kafka prints an error on stdout and
exits 0 (a group that does not exist, a group that is not inactive for a reset, a failed delete),
odradek prints the same text on stderr and exits 1; usage errors exit 2 (see tool_common).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import re
import sys
from collections.abc import Callable
from typing import Any

from odradek.cli.admin import AdminClient, AdminError
from odradek.cli.groups_admin import (
    EARLIEST,
    LATEST,
    GroupAdmin,
    GroupDescription,
    GroupError,
    TopicPartition,
)
from odradek.cli.tool_common import add_connection_args, require_bootstrap, run_admin
from odradek.java_order import java_hash_order, java_string_hash, java_topic_partition_hash
from odradek.protocol.errors import Errors

MISSING = "-"
STATES = ["PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty", "Assigning", "Reconciling"]
TYPES = ["consumer", "classic"]
ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
SCENARIOS = ("to_datetime", "by_duration", "to_earliest", "to_latest", "shift_by", "from_file", "to_current", "to_offset")
DRY_RUN_WARNING = (
    "WARN: No action will be performed as the --execute option is missing. In version 5.0, this command will "
    "require either --dry-run or --execute to be specified. You should add the --dry-run option explicitly if "
    "you are scripting this command and want to keep the current default behavior without prompting."
)


class Output:
    """What a command prints: stdout text (Kafka's, byte for byte), stderr lines, and whether it failed."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.err: list[str] = []
        self.failed = False

    def write(self, text: str) -> None:
        self.out.append(text)

    def error(self, text: str) -> None:
        """Kafka's ``printError``: ``\\nError: msg`` (on stdout in Kafka; on stderr here, exit 1)."""
        self.err.append(f"\nError: {text}")
        self.failed = True


def _pad(value: object, width: int) -> str:
    return str(value).ljust(width)


def _opt(value: int | None) -> str:
    return MISSING if value is None else str(value)


# -- --list ------------------------------------------------------------------------------------


async def cmd_list(ga: GroupAdmin, opts: argparse.Namespace, out: Output) -> None:
    with_type, with_state = opts.type is not None, opts.state is not None
    groups = await ga.list_groups(opts.state or [], opts.type or [])
    if not (with_type or with_state):
        for gid, _, _ in groups:
            out.write(f"{gid}\n")
        return
    width = max((max(15, len(g)) for g, _, _ in groups), default=15) + 10
    header, rows = ["GROUP"], [[g] for g, _, _ in groups]
    if with_type:
        header.append("TYPE")
        for row, (_, t, _) in zip(rows, groups, strict=True):
            row.append(t)
    if with_state:
        header.append("STATE")
        for row, (_, _, s) in zip(rows, groups, strict=True):
            row.append(s)
    for row in [header, *rows]:
        out.write(_pad(row[0], width) + "".join(" " + _pad(c, 20) for c in row[1:]) + "\n")


# -- --describe --------------------------------------------------------------------------------


def _should_print(out: Output, group: str, state: str, rows: int) -> bool:
    if state == "Dead":
        out.error(f"Consumer group '{group}' does not exist.")
    elif state == "Empty":
        out.err.append(f"\nConsumer group '{group}' has no active members.")
    elif state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
        out.err.append(f"\nWarning: Consumer group '{group}' is rebalancing.")
    return state != "Dead" and rows > 0


async def _describe_all(ga: GroupAdmin, groups: list[str]) -> dict[str, GroupDescription]:
    return {g: await ga.describe(g) for g in sorted(set(groups))}


async def describe_offsets(ga: GroupAdmin, out: Output, groups: list[str], verbose: bool) -> None:
    for gid, d in (await _describe_all(ga, groups)).items():
        committed = await ga.committed(gid)
        rows: list[list[str]] = []
        assigned: set[TopicPartition] = set()
        members = sorted((x for x in d.members if x.assignment), key=lambda x: -len(set(x.assignment)))
        owners = [(sorted(set(x.assignment)), x.consumer_id, x.host, x.client_id) for x in members]
        for tps, *_ in owners:
            assigned.update(tps)
        unassigned = sorted(tp for tp in committed if tp not in assigned)
        if unassigned:
            owners.append((unassigned, MISSING, MISSING, MISSING))
        ends = await ga.list_offsets(sorted({tp for tps, *_ in owners for tp in tps}), LATEST)
        for tps, cid, host, client in owners:
            for tp in tps:
                off, epoch = committed.get(tp, (None, -1))
                end = ends.get(tp)
                lag = str(end - off) if off is not None and end is not None else MISSING
                row = [gid, tp[0], str(tp[1])]
                if verbose:
                    row.append(str(epoch) if off is not None and epoch >= 0 else MISSING)
                row += [MISSING if off is None else str(off), MISSING if end is None else str(end), lag, cid, host, client]
                rows.append(row)
        if not _should_print(out, gid, d.state, len(rows)):
            continue
        g_w = max([15] + [len(r[0]) for r in rows])
        t_w = max([15] + [len(r[1]) for r in rows])
        c_w = max([15] + [len(r[-3]) for r in rows])
        h_w = max([15] + [len(r[-2]) for r in rows])
        widths = [g_w, t_w, 10] + [15] * (4 if verbose else 3) + [c_w, h_w, 0]
        header = ["GROUP", "TOPIC", "PARTITION", *(["LEADER-EPOCH"] if verbose else []), "CURRENT-OFFSET",
                  "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        for row in [header, *rows]:
            out.write("\n" + " ".join(_pad(c, w) for c, w in zip(row, widths, strict=True)))
        out.write("\n")


def assignment_text(tps: list[TopicPartition]) -> str:
    """Kafka's ``topic:0,1;other:2`` (topics sorted as text, partitions as numbers), or ``-``."""
    if not tps:
        return MISSING
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    return ";".join(sorted(f"{t}:{','.join(str(p) for p in sorted(ps))}" for t, ps in by_topic.items()))


async def describe_members(ga: GroupAdmin, out: Output, groups: list[str], verbose: bool) -> None:
    for gid, d in (await _describe_all(ga, groups)).items():
        w = {"g": 15, "c": 15, "i": 17, "h": 15, "cl": 15, "cur": 20, "tgt": 20}
        with_instance = False
        rows = [(x, assignment_text(x.assignment), assignment_text(x.target or [])) for x in d.members]
        printable = _should_print(out, gid, d.state, len(d.members))
        if printable:
            for x, cur, tgt in rows:
                w["g"], w["c"] = max(w["g"], len(gid)), max(w["c"], len(x.consumer_id))
                w["i"], w["h"] = max(w["i"], len(x.instance_id or "")), max(w["h"], len(x.host))
                w["cl"], w["cur"], w["tgt"] = max(w["cl"], len(x.client_id)), max(w["cur"], len(cur)), max(w["tgt"], len(tgt))
                with_instance = with_instance or bool(x.instance_id)
        cols = ["g", "c", "i", "h", "cl"] if with_instance else ["g", "c", "h", "cl"]
        names = {"g": "GROUP", "c": "CONSUMER-ID", "i": "GROUP-INSTANCE-ID", "h": "HOST", "cl": "CLIENT-ID"}
        line = "".join(_pad(names[c], w[c]) + " " for c in cols) + _pad("#PARTITIONS", 15) + " "
        if verbose:
            line += " ".join([_pad("CURRENT-EPOCH", 15), _pad("CURRENT-ASSIGNMENT", w["cur"]),
                              _pad("TARGET-EPOCH", 15), _pad("TARGET-ASSIGNMENT", w["tgt"])])
        out.write("\n" + line + "\n")  # Kafka prints the header even when there is nothing under it
        if not printable:
            continue
        for x, cur, tgt in rows:
            values = {"g": gid, "c": x.consumer_id, "i": x.instance_id or "", "h": x.host, "cl": x.client_id}
            line = "".join(_pad(values[c], w[c]) + " " for c in cols) + _pad(len(set(x.assignment)), 15) + " "
            if verbose:
                target_epoch = d.target_assignment_epoch if x.member_epoch is not None else None
                line += " ".join([_pad(_opt(x.member_epoch), 15), _pad(cur, w["cur"]),
                                  _pad(_opt(target_epoch), 15), _pad(tgt, w["tgt"])])
            out.write(line + "\n")


async def describe_state(ga: GroupAdmin, out: Output, groups: list[str], verbose: bool) -> None:
    for gid, d in (await _describe_all(ga, groups)).items():
        if not _should_print(out, gid, d.state, 1):
            continue
        c = d.coordinator
        coord = f"{c.host}:{c.port}  ({c.node_id})"
        g_w, c_w = max(15, len(gid)), max(25, len(coord))
        header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
        row = [gid, coord, d.assignor or MISSING, d.state]
        widths = [g_w, c_w, 20, 20]
        if verbose:
            header += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
            row += [MISSING if d.group_epoch is None else str(d.group_epoch),
                    MISSING if d.target_assignment_epoch is None else str(d.target_assignment_epoch)]
            widths += [15, 25]
        for r, last in ((header, "#MEMBERS"), (row, str(len(d.members)))):
            out.write("\n" + "".join(_pad(v, w) + " " for v, w in zip(r, widths, strict=True)) + last)
        out.write("\n")


async def _group_ids(ga: GroupAdmin, opts: argparse.Namespace) -> list[str]:
    if opts.all_groups:
        return [g for g, _, _ in await ga.list_groups([], [])]
    return list(opts.group)


async def cmd_describe(ga: GroupAdmin, opts: argparse.Namespace, out: Output) -> None:
    groups = await _group_ids(ga, opts)
    if opts.offsets or not (opts.members or opts.state is not None):
        await describe_offsets(ga, out, groups, opts.verbose)
    elif opts.members:
        await describe_members(ga, out, groups, opts.verbose)
    else:
        await describe_state(ga, out, groups, opts.verbose)


# -- --reset-offsets -----------------------------------------------------------------------------


_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.I)


def parse_duration_ms(text: str) -> int:
    """Java's ``Duration.parse`` (``PnDTnHnMn.nS``), in milliseconds."""
    mt = _DURATION.fullmatch(text)
    if mt is None or text.upper().endswith("T") or not any(mt.group(i) for i in range(2, 6)):
        raise ValueError(f"Text cannot be parsed to a Duration: {text}")
    days, hours, minutes, secs = (int(mt.group(i) or 0) for i in range(2, 6))
    frac = (mt.group(6) or "").ljust(3, "0")[:3]
    ms = (((days * 24 + hours) * 60 + minutes) * 60 + secs) * 1000
    ms += (-1 if mt.group(5) and mt.group(5).startswith("-") else 1) * int(frac or 0)
    return -ms if mt.group(1) == "-" else ms


def parse_datetime_ms(text: str) -> int:
    """Kafka's ``Utils.getDateTime``: ``yyyy-MM-ddTHH:mm:ss.SSS`` with an optional zone (``Z``,
    ``+01:00``); without one, the local time zone."""
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError as e:
        if "T" not in text:
            raise ValueError("Error parsing timestamp. It does not contain a 'T' according to ISO8601 format") from e
        raise ValueError(f"Error parsing timestamp with format yyyy-MM-dd'T'HH:mm:ss.SSS: {text}") from e
    return int(when.timestamp() * 1000)


def parse_topic_arg(arg: str) -> tuple[str, list[int] | None]:
    if ":" not in arg:
        return arg, None
    parts = arg.split(":")
    if len(parts) != 2:
        raise ValueError(f"Invalid topic arg '{arg}', expected topic name and partitions")
    out = []
    for p in parts[1].split(","):
        if not p.strip().lstrip("-").isdigit():
            raise ValueError(f"Invalid partition '{p}' specified in topic arg '{arg}''")
        out.append(int(p))
    return parts[0], out


async def _partitions_to_reset(ga: GroupAdmin, opts: argparse.Namespace, group: str) -> list[TopicPartition]:
    if opts.all_topics:
        return sorted(await ga.committed(group))
    tps: list[TopicPartition] = []
    whole: list[str] = []
    for arg in opts.topic or []:
        name, parts = parse_topic_arg(arg)
        if parts is None:
            whole.append(name)
        else:
            tps.extend((name, p) for p in parts)
    if tps:  # the partitions given must exist
        known = await ga.partitions(sorted({t for t, _ in tps}))
        existing = {(t, p) for t, ps in known.items() if isinstance(ps, list) for p in ps}
        missing = [tp for tp in tps if tp not in existing]
        if missing:
            raise AdminError("org.apache.kafka.common.errors.UnknownTopicOrPartitionException: The partitions "
                             f'"{",".join(f"{t}-{p}" for t, p in missing)}" do not exist')
    if whole:  # Kafka's order: the partitions given, then the topics' as its HashMap holds them
        described = await ga.partitions(whole)
        for name in java_hash_order(whole, java_string_hash):
            parts_or_err = described.get(name, Errors.UNKNOWN_TOPIC_OR_PARTITION)
            if isinstance(parts_or_err, int):
                raise GroupError(parts_or_err)
            tps.extend((name, p) for p in parts_or_err)
    return tps


async def _check_range(ga: GroupAdmin, out: Output, wanted: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    starts = await ga.list_offsets(list(wanted), EARLIEST)
    ends = await ga.list_offsets(list(wanted), LATEST)
    res = {}
    for tp, off in wanted.items():
        if tp not in ends:
            raise AdminError(f"java.lang.IllegalStateException: Unexpected non-existing offset value for topic partition {tp[0]}-{tp[1]}")
        if off > ends[tp]:
            out.err.append(f"New offset ({off}) is higher than latest offset for topic partition {tp[0]}-{tp[1]}. "
                           f"Value will be set to {ends[tp]}")
            off = ends[tp]
        elif tp in starts and off < starts[tp]:
            out.err.append(f"New offset ({off}) is lower than earliest offset for topic partition {tp[0]}-{tp[1]}. "
                           f"Value will be set to {starts[tp]}")
            off = starts[tp]
        res[tp] = off
    return res


async def _at_time(ga: GroupAdmin, out: Output, tps: list[TopicPartition], ts: int) -> dict[TopicPartition, int]:
    found = await ga.list_offsets(tps, ts)
    empty = java_hash_order((tp for tp in tps if found.get(tp, 0) < 0), java_topic_partition_hash)
    for t, p in empty:
        out.write(f"\nWarn: Partition {p} from topic {t} is empty. Falling back to latest known offset.\n")
    found.update(await ga.list_offsets(empty, LATEST))
    return found


def csv_text(value: str) -> str:
    """A CSV string field as Kafka's writer (Jackson's CsvMapper) prints it: quoted when longer than
    24 characters or holding a character up to ',' (quotes doubled), else bare."""
    if len(value) > 24 or any(ord(c) <= ord(",") for c in value):
        return '"' + value.replace('"', '""') + '"'
    return value


def _need_all(got: dict[TopicPartition, int], tps: list[TopicPartition], what: str) -> dict[TopicPartition, int]:
    for tp in tps:
        if tp not in got:
            raise UsageError(f"Error getting {what} of topic partition: {tp[0]}-{tp[1]}")
    return {tp: got[tp] for tp in tps}


class UsageError(Exception):
    """A usage error found while running (Kafka's printUsageAndExit): exit 2."""


def read_plan(path: str, groups: list[str]) -> dict[str, dict[TopicPartition, int]]:
    """A --from-file CSV: ``topic,partition,offset`` for one --group, else ``group,topic,partition,offset``."""
    try:
        with open(path, newline="") as f:
            lines = [row for row in csv.reader(f) if row]
    except OSError as e:
        raise AdminError(f"java.nio.file.NoSuchFileException: {path}" if isinstance(e, FileNotFoundError)
                         else f"java.io.IOException: {e.strerror}: {path}") from e
    plan: dict[str, dict[TopicPartition, int]] = {}
    single = len(groups) == 1 and bool(lines) and len(lines[0]) == 3
    for row in lines:
        if single and len(row) == 3:
            g, (t, p, o) = groups[0], row
        elif len(row) == 4:
            g, t, p, o = row
        else:
            raise AdminError(f"Invalid reset plan line: {','.join(row)}")
        plan.setdefault(g, {})[(t, int(p))] = int(o)
    return plan


async def _prepare(ga: GroupAdmin, opts: argparse.Namespace, out: Output, group: str,
                   tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    if opts.to_offset is not None:
        return await _check_range(ga, out, {tp: opts.to_offset for tp in tps})
    if opts.to_earliest:
        return _need_all(await ga.list_offsets(tps, EARLIEST), tps, "starting offset")
    if opts.to_latest:
        return _need_all(await ga.list_offsets(tps, LATEST), tps, "ending offset")
    if opts.shift_by is not None:
        committed = await ga.committed(group)
        for tp in tps:
            if tp not in committed:
                raise UsageError(f"Cannot shift offset for partition {tp[0]}-{tp[1]} since there is no current committed offset")
        return await _check_range(ga, out, {tp: committed[tp][0] + opts.shift_by for tp in tps})
    if opts.to_datetime is not None or opts.by_duration is not None:
        if opts.to_datetime is not None:
            ts = parse_datetime_ms(opts.to_datetime)
        else:
            ts = int(dt.datetime.now(dt.UTC).timestamp() * 1000) - parse_duration_ms(opts.by_duration)
        return _need_all(await _at_time(ga, out, tps, ts), tps, "offset by timestamp")
    if opts.from_file is not None:
        plan = read_plan(opts.from_file, list(opts.group)).get(group)
        if plan is None:
            out.error(f"No reset plan for group {group} found")
            return {}
        return await _check_range(ga, out, plan)
    committed = await ga.committed(group)  # --to-current
    have = {tp: committed[tp][0] for tp in tps if tp in committed}
    missing = [tp for tp in tps if tp not in committed]
    have.update(_need_all(await ga.list_offsets(missing, LATEST), missing, "ending offset"))
    return have


async def cmd_reset(ga: GroupAdmin, opts: argparse.Namespace, out: Output) -> None:
    result: dict[str, dict[TopicPartition, int]] = {}
    for gid in java_hash_order(await _group_ids(ga, opts), java_string_hash):
        d = await ga.describe(gid)
        if d.state not in ("Empty", "Dead"):
            out.error(f"Assignments can only be reset if the group '{gid}' is inactive, but the current state is {d.state}.")
            result[gid] = {}
            continue
        tps = [] if opts.from_file is not None and not (opts.topic or opts.all_topics) else await _partitions_to_reset(ga, opts, gid)
        offsets = await _prepare(ga, opts, out, gid, tps)
        if opts.execute and offsets:
            await ga.commit(gid, offsets)
        result[gid] = offsets
    if opts.export:
        lines = []
        for gid, offsets in result.items():
            for t, p in java_hash_order(offsets, java_topic_partition_hash):
                cols = [csv_text(t), str(p), str(offsets[(t, p)])]
                lines.append(",".join(cols if len(opts.group) == 1 else [csv_text(gid), *cols]) + "\n")
        out.write("".join(lines) + "\n")
        return
    rows = [[gid, t, str(p), str(offsets[(t, p)])]
            for gid, offsets in result.items() for t, p in java_hash_order(offsets, java_topic_partition_hash)]
    if result:
        g_w = max([15] + [len(r[0]) for r in rows])
        t_w = max([15] + [len(r[1]) for r in rows])
        for r in [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], *rows]:
            out.write(f"\n{_pad(r[0], g_w)} {_pad(r[1], t_w)} {_pad(r[2], 10)} {r[3]}")
    out.write("\n")


# -- --delete, --delete-offsets ------------------------------------------------------------------


async def cmd_delete(ga: GroupAdmin, opts: argparse.Namespace, out: Output) -> None:
    ok: list[str] = []
    failed: dict[str, int] = {}
    for gid in java_hash_order(await _group_ids(ga, opts), java_string_hash):
        code = await ga.delete_group(gid)
        if code == Errors.NONE:
            ok.append(gid)
        else:
            failed[gid] = code
    if not failed:
        out.write(f"Deletion of requested consumer groups ({', '.join(repr_q(g) for g in ok)}) was successful.\n")
        return
    out.error("Deletion of some consumer groups failed:")
    for gid, code in failed.items():
        out.err.append(f"* Group '{gid}' could not be deleted due to: {GroupError(code)}")
    if ok:
        out.err.append(f"\nThese consumer groups were deleted successfully: {', '.join(repr_q(g) for g in ok)}")


def repr_q(group: str) -> str:
    return f"'{group}'"


_DELETE_OFFSETS_TOP: dict[int, str] = {
    Errors.INVALID_GROUP_ID: "'{g}' is not valid.",
    Errors.GROUP_ID_NOT_FOUND: "'{g}' does not exist.",
    Errors.GROUP_AUTHORIZATION_FAILED: "Access to '{g}' is not authorized.",
    Errors.NON_EMPTY_GROUP: "Deleting offsets of a consumer group '{g}' is forbidden if the group is not empty.",
}


async def cmd_delete_offsets(ga: GroupAdmin, opts: argparse.Namespace, out: Output) -> None:
    gid = opts.group[0]
    status: dict[tuple[str, int], str] = {}
    tps: list[TopicPartition] = []
    whole: list[str] = []
    for arg in opts.topic:
        name, parts = parse_topic_arg(arg)
        if parts is None:
            whole.append(name)
        else:
            tps.extend((name, p) for p in parts)
    if whole:
        for name, parts_or_err in (await ga.partitions(whole)).items():
            if isinstance(parts_or_err, int):
                status[(name, -1)] = f"Error: {GroupError(parts_or_err)}"
            else:
                tps.extend((name, p) for p in parts_or_err)
    top, per = await ga.delete_offsets(gid, sorted(set(tps))) if tps else (Errors.NONE, {})
    for tp in set(tps):
        code = per.get(tp, top if top else Errors.UNKNOWN_TOPIC_OR_PARTITION)
        status[tp] = "Successful" if code == Errors.NONE else f"Error: {GroupError(code)}"
    if top == Errors.NONE:
        out.write(f"Request succeeded for deleting offsets from group {gid}.\n")
    elif top in _DELETE_OFFSETS_TOP:
        out.error(_DELETE_OFFSETS_TOP[top].format(g=gid))
    elif top in (Errors.GROUP_SUBSCRIBED_TO_TOPIC, Errors.TOPIC_AUTHORIZATION_FAILED, Errors.UNKNOWN_TOPIC_OR_PARTITION):
        out.error("Encountered some partition-level error, see the follow-up details.")
    else:
        out.error(f"Encountered some unknown error: {Errors(top).name}")
    if top not in (Errors.NONE, Errors.GROUP_SUBSCRIBED_TO_TOPIC, Errors.TOPIC_AUTHORIZATION_FAILED,
                   Errors.UNKNOWN_TOPIC_OR_PARTITION):
        status = {}  # a group-level failure: Kafka lists no partitions
    if any(s != "Successful" for s in status.values()):
        out.failed = True
    t_w = max([15] + [len(t) for t, _ in status])
    out.write("\n" + f"{_pad('TOPIC', t_w)} {_pad('PARTITION', 10)} {_pad('STATUS', 15)}")
    for (t, p), s in sorted(status.items(), key=lambda kv: kv[0][0] + str(kv[0][1])):
        out.write("\n" + f"{_pad(t, t_w)} {_pad(p if p >= 0 else MISSING, 10)} {_pad(s, 15)}")
    out.write("\n")


COMMANDS: dict[str, Callable[[GroupAdmin, argparse.Namespace, Output], Any]] = {
    "list": cmd_list, "describe": cmd_describe, "delete": cmd_delete,
    "reset_offsets": cmd_reset, "delete_offsets": cmd_delete_offsets,
}


# -- the command line ----------------------------------------------------------------------------


def _states(text: str) -> list[str]:
    by_lower = {s.lower(): s for s in STATES}
    chosen = [by_lower.get(s.strip().lower(), "") for s in text.split(",") if s.strip()]
    if "" in chosen:
        raise argparse.ArgumentTypeError(f"Invalid state list '{text}'. Valid states are: {', '.join(STATES)}")
    return chosen


def _types(text: str) -> list[str]:
    chosen = [s.strip().lower() for s in text.split(",") if s.strip()]
    if any(t not in TYPES for t in chosen):
        raise argparse.ArgumentTypeError(f"Invalid types list '{text}'. Valid types are: Consumer, Classic")
    return chosen


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "groups", help="list, describe, delete consumer groups and reset their offsets (kafka-consumer-groups.sh)",
        description="kafka-consumer-groups.sh: list, describe, delete consumer groups, reset and delete their "
        "offsets. Exit codes: 0 done, 1 failed (Kafka's message on stderr), 2 usage error.",
    )
    add_connection_args(p)
    a = p.add_argument_group("actions (exactly one)")
    a.add_argument("--list", action="store_true", help="list all consumer groups")
    a.add_argument("--describe", action="store_true", help="describe groups: offsets and lag (default), --members or --state")
    a.add_argument("--delete", action="store_true", help="delete groups (they must have no members)")
    a.add_argument("--reset-offsets", action="store_true", help="reset the offsets of inactive groups")
    a.add_argument("--delete-offsets", action="store_true", help="delete the offsets of a group for topics")
    p.add_argument("--group", action="append", default=[], help="a consumer group (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="every consumer group")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P]", help="a topic, or some partitions of it")
    p.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    p.add_argument("--offsets", action="store_true", help="describe: offsets and lag per partition (the default)")
    p.add_argument("--members", action="store_true", help="describe: the members")
    p.add_argument("--state", nargs="?", const=[], type=_states, metavar="S,S",
                   help="describe: the group's state; list: show states, or only groups in these states")
    p.add_argument("--type", nargs="?", const=[], type=_types, metavar="classic|consumer",
                   help="list: show types, or only groups of these types")
    p.add_argument("--verbose", action="store_true", help="describe: more columns (epochs, assignments)")
    r = p.add_argument_group("reset scenarios (exactly one with --reset-offsets)")
    r.add_argument("--to-earliest", action="store_true")
    r.add_argument("--to-latest", action="store_true")
    r.add_argument("--to-current", action="store_true")
    r.add_argument("--to-offset", type=int, metavar="N")
    r.add_argument("--shift-by", type=int, metavar="N", help="positive or negative")
    r.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss", help="with an optional zone, e.g. Z or +01:00")
    r.add_argument("--by-duration", metavar="PnDTnHnMnS", help="this long ago")
    r.add_argument("--from-file", metavar="CSV", help="topic,partition,offset (or group,topic,partition,offset) lines")
    p.add_argument("--dry-run", action="store_true", help="reset: only show the new offsets (the default)")
    p.add_argument("--execute", action="store_true", help="reset: commit the new offsets")
    p.add_argument("--export", action="store_true", help="reset: print the new offsets as CSV")
    p.set_defaults(func=lambda opts: run(p, opts))


def _validate(p: argparse.ArgumentParser, opts: argparse.Namespace) -> str:
    actions = [x for x in ACTIONS if getattr(opts, x)]
    if len(actions) != 1:
        p.error("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, --delete-offsets")
    action = actions[0]
    require_bootstrap(p, opts)
    if action in ("describe", "delete", "reset_offsets") and not (opts.group or opts.all_groups):
        p.error(f"Option [{action.replace('_', '-')}] takes one of these options: [all-groups], [group]")
    if action == "describe" and sum(bool(x) for x in (opts.members, opts.offsets, opts.state is not None)) > 1:
        p.error("Option [describe] takes at most one of these options: [members], [offsets], [state]")
    if opts.group and opts.all_groups:
        p.error("Option [all-groups] can't be used with option [group]")
    if action == "delete_offsets" and (len(opts.group) != 1 or not opts.topic):
        p.error("Option [delete-offsets] takes the following options: [topic], [group]")
    if action == "reset_offsets":
        chosen = [s for s in SCENARIOS if getattr(opts, s) not in (None, False)]
        if len(chosen) != 1:
            p.error("Option [reset-offsets] takes exactly one of these options: " +
                    ", ".join(f"[{s.replace('_', '-')}]" for s in SCENARIOS))
        if not (opts.topic or opts.all_topics or opts.from_file):
            p.error("One of the reset scopes should be defined: --all-topics, --topic.")
        if opts.dry_run and opts.execute:
            p.error("Option [dry-run] can't be used with option [execute]")
        try:
            if opts.by_duration is not None:
                parse_duration_ms(opts.by_duration)
            if opts.to_datetime is not None:
                parse_datetime_ms(opts.to_datetime)
        except ValueError as e:
            p.error(str(e))
    elif opts.dry_run or opts.execute or opts.export:
        p.error(f"Option [{'dry-run' if opts.dry_run else 'execute' if opts.execute else 'export'}] takes one of these "
                "options: [reset-offsets]")
    return action


def run(p: argparse.ArgumentParser, opts: argparse.Namespace) -> int:
    action = _validate(p, opts)
    if action == "reset_offsets" and not (opts.dry_run or opts.execute):
        print(DRY_RUN_WARNING, file=sys.stderr)
    out = Output()

    async def work(admin: AdminClient) -> list[str]:
        ga = GroupAdmin(admin)
        try:
            await COMMANDS[action](ga, opts, out)
        except AdminError as e:  # as Kafka's tool reports any failure: the message, then the exception
            text = str(e)
            message = text.split(": ", 1)[1] if text.startswith(("org.", "java.")) and ": " in text else text
            raise AdminError(f"\nError: Executing consumer group command failed due to {message}\n{text}") from e
        finally:
            await ga.close()
        return []

    try:
        code = run_admin(opts, work, error_prefix="", client_id="adminclient-consumer-groups")
    except (UsageError, ValueError) as e:
        p.print_usage(sys.stderr)
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write("".join(out.out))
    sys.stdout.flush()
    for line in out.err:
        print(line, file=sys.stderr)
    return code or (1 if out.failed else 0)
