"""``odradek dump-log``: print log segments, their indexes and KRaft snapshots, as ``kafka-dump-log.sh``.

Apache Kafka's ``DumpLogSegments`` line for line: for each file of ``--files``

* ``.log`` segments and ``.checkpoint`` snapshots (``bootstrap.checkpoint`` too): one line per
  batch (``baseOffset: ... isvalid: true``), with ``--deep-iteration`` or ``--print-data-log``
  one ``| offset: ...`` line per record, with ``--print-data-log`` its key and payload (as UTF-8),
  with ``--cluster-metadata-decoder`` the payload decoded as a metadata record in Kafka's JSON
  (``{"type":"TOPIC_RECORD","version":0,"data":{...}}``); control records (transaction markers,
  LeaderChange, snapshot header and footer, KRaftVersion, Voters) are decoded as Kafka prints them;
* ``.index`` / ``.timeindex``: the entries (``offset: N position: P`` / ``timestamp: T offset: N``),
  checked against the segment; ``--verify-index-only`` prints only what does not match,
  ``--index-sanity-check`` Kafka's ``sanityCheck`` (the last entry's offset and, for a time index,
  its timestamp and the file's length; entries out of order pass, as in Kafka). A failed check
  ends the run there with exit code 1, as Kafka's tool does, and Kafka's
  ``...CorruptIndexException: ...`` line on stderr (without the JVM's stack trace).

Mismatches, non-consecutive offsets and unknown files go to stderr, as Kafka's tool prints them.
Where Kafka's tool would die with a Java exception (a missing file, a corrupt batch), this prints
one line to stderr, goes on with the next file, and exits 1. Segments of 64 MiB or more get a
progress bar on stderr when it is a terminal and stdout is not (``--no-progress``: never).

The files are read with the project's own readers: batches with :mod:`odradek.records`, index
entries with :mod:`odradek.log.index`, metadata records with :mod:`odradek.metadata.records`,
control records with :mod:`odradek.raft.control_records`.
"""

from __future__ import annotations

import argparse
import mmap
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from odradek.cli.client_tools import Progress, add_progress_flag, stdout_is_data_sink
from odradek.java_order import java_hash_map_order
from odradek.log.errors import CorruptIndexError
from odradek.log.index import read_offset_index_file, read_time_index_file
from odradek.log.log_transactions import MAX_SNAPSHOT_BYTES
from odradek.log.producer_state import last_sequence
from odradek.log.producer_state_snapshot import CorruptSnapshotError, read_snapshot
from odradek.log.transaction_index import TransactionIndex
from odradek.metadata.records import (
    RECORD_NAMES,
    RECORD_TYPES,
    UNSUPPORTED_RECORD_TYPES,
    UnsupportedMetadataRecord,
    decode_metadata_record,
)
from odradek.protocol.message_json import dumps, to_json
from odradek.protocol.schema import SchemaError, read_uvarint
from odradek.raft import control_records as cr
from odradek.records.batch import (
    DELETE_HORIZON_FLAG_MASK,
    NO_SEQUENCE,
    RecordBatchHeader,
    is_batch_crc_valid,
    iter_batches,
)
from odradek.records.errors import RecordError
from odradek.records.records import Record, iter_batch_records

RECORD_INDENT = "|"
INT32_MAX = 0x7FFFFFFF
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
# Room for a compressed batch's records when decoding (Kafka's tool has no limit at all).
DECOMPRESS_LIMIT = 1 << 30
# A segment at least this large gets a progress bar (bytes read / file size) when stderr is a terminal.
PROGRESS_MIN_BYTES = 64 * 1024 * 1024

COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}
_SNAPSHOT_NAME = re.compile(r"^(\d+)-(\d+)\.checkpoint$")
_CONTROL_JSON_LABELS = {
    cr.LEADER_CHANGE: "LeaderChange:",
    cr.SNAPSHOT_HEADER: "SnapshotHeader",
    cr.SNAPSHOT_FOOTER: "SnapshotFooter",
    cr.KRAFT_VERSION: "KRaftVersion",
    cr.KRAFT_VOTERS: "KRaftVoters",
}

Parser = Callable[[Record], tuple[str | None, str | None]]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "dump-log",
        help="print log segments, indexes and metadata snapshots (kafka-dump-log.sh)",
        description="This tool helps to parse a log file and dump its contents to the console, "
        "useful for debugging a seemingly corrupt log segment. Output as Apache Kafka's "
        "kafka-dump-log.sh.",
        allow_abbrev=False,
    )
    p.add_argument(
        "--files",
        required=True,
        metavar="file1,file2,...",
        help="REQUIRED: The comma separated list of data and index log files to be dumped.",
    )
    p.add_argument(
        "--print-data-log",
        action="store_true",
        help="If set, printing the messages content when dumping data logs. "
        "Automatically set if any decoder option is specified.",
    )
    p.add_argument(
        "--deep-iteration",
        action="store_true",
        help="If set, uses deep instead of shallow iteration. Automatically set if "
        "print-data-log is enabled.",
    )
    p.add_argument(
        "--verify-index-only",
        action="store_true",
        help="If set, just verify the index log without printing its content.",
    )
    p.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="If set, just checks the index sanity without printing its content. This "
        "is the same check that is executed on broker startup to determine if an index "
        "needs rebuilding or not.",
    )
    p.add_argument(
        "--cluster-metadata-decoder",
        "--cluster-metadata",
        dest="cluster_metadata",
        action="store_true",
        help="If set, log data will be parsed as cluster metadata records.",
    )
    p.add_argument(
        "--max-message-size",
        type=int,
        default=DEFAULT_MAX_MESSAGE_SIZE,
        metavar="size",
        help="Size of largest message. (default: 5242880)",
    )
    p.add_argument(
        "--max-bytes",
        type=int,
        default=INT32_MAX,
        metavar="size",
        help="Limit the amount of total batches read in bytes avoiding reading the "
        "whole .log file(s). (default: 2147483647)",
    )
    p.add_argument(
        "--skip-record-metadata",
        action="store_true",
        help="Skip metadata when printing records. This flag also skips control records.",
    )
    add_progress_flag(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    files = [f for f in args.files.split(",") if f]
    dumper = LogDumper(
        sys.stdout,
        sys.stderr,
        print_data_log=args.print_data_log,
        deep_iteration=args.deep_iteration,
        cluster_metadata=args.cluster_metadata,
        verify_index_only=args.verify_index_only,
        index_sanity_check=args.index_sanity_check,
        max_message_size=args.max_message_size,
        max_bytes=args.max_bytes,
        skip_record_metadata=args.skip_record_metadata,
        progress=not args.no_progress and not stdout_is_data_sink(),  # a bar amid lines on a terminal garbles them
    )
    try:
        return dumper.dump(files)
    except BrokenPipeError:  # `odradek dump-log ... | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


# --------------------------------------------------------------------------- record parsers


def _utf8(data: bytes) -> str:
    """Kafka's StringDecoder: ``new String(bytes, UTF_8)`` (malformed input replaced)."""
    return data.decode("utf-8", "replace")


def string_parser(record: Record) -> tuple[str | None, str | None]:
    key = None if record.key is None else _utf8(record.key)
    value = None if record.value is None else _utf8(record.value)
    return key, value


def metadata_record_json(value: bytes) -> str:
    """A framed metadata record as Kafka's ``ClusterMetadataLogMessageParser`` prints it."""
    name, version, fields = decode_metadata_record(value)
    schema = RECORD_TYPES[name][1]
    node = {
        "type": _enum_name(name),
        "version": version,
        "data": to_json(schema.fields, version, fields),
    }
    return dumps(node)


def _kafka_serde_error(value: bytes, error: SchemaError) -> str:
    """Kafka's ``MetadataRecordSerde`` message for a value that does not decode (the framing is
    read again here only to say which part failed, in Kafka's words)."""
    if isinstance(error, UnsupportedMetadataRecord):
        return str(error)  # Kafka knows these (ACLs, quotas, SCRAM, tokens); Odradek does not
    view = memoryview(value)
    pos = 0
    fields: list[int] = []
    for what in ("frame version", "type", "version"):
        try:
            v, pos = read_uvarint(view, pos)
        except (SchemaError, ValueError, IndexError):
            return f"Error while reading {what}"
        fields.append(v)
        if what == "frame version" and v != 1:
            return (
                f"Could not deserialize metadata record due to unknown frame version {v}"
                "(only frame version 1 is supported)"
            )
    api_key = (fields[1] & 0xFFFF) - (0x10000 if fields[1] & 0x8000 else 0)  # Java's (short)
    if api_key not in RECORD_NAMES and api_key not in UNSUPPORTED_RECORD_TYPES:
        return f"org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id {api_key}"
    trailing = re.match(r"(\d+) trailing bytes after ", str(error))
    if trailing:
        return f"Found {trailing.group(1)} byte(s) of garbage after {api_key}"
    return f"Failed to deserialize record with type {api_key}"


def cluster_metadata_parser(record: Record) -> tuple[str | None, str | None]:
    value = record.value if record.value is not None else b""
    try:
        output = metadata_record_json(value)
    except SchemaError as e:
        output = f"Error at {record.offset}, skipping. {_kafka_serde_error(value, e)}"
    return None, output  # no keys for metadata records


def _enum_name(record_name: str) -> str:
    """``FeatureLevelRecord`` → ``FEATURE_LEVEL_RECORD`` (Kafka's MetadataRecordType names)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", record_name).upper()


def describe_control_record(record: Record) -> str:
    """What Kafka's tool prints after a control record's metadata (with a leading space)."""
    try:
        type_id = cr.parse_control_type(record.key)
    except SchemaError as e:
        return f" controlType: INVALID ({e})"
    value = record.value or b""
    try:
        if type_id in (cr.ABORT, cr.COMMIT):
            _version, epoch = cr.decode_end_txn_marker(value)
            return f" endTxnMarker: {cr.CONTROL_TYPE_NAMES[type_id]} coordinatorEpoch: {epoch}"
        label = _CONTROL_JSON_LABELS.get(type_id)
        if label is not None:
            fields = cr.decode_control_value(type_id, value)
            return f" {label} {dumps(to_json(cr.SCHEMAS[type_id].fields, 0, fields))}"
    except SchemaError as e:
        return f" controlType: {cr.CONTROL_TYPE_NAMES[type_id]}({type_id}) undecodable: {e}"
    return f" controlType: UNKNOWN({type_id})"


# --------------------------------------------------------------------------- the dumper


def batch_last_sequence(h: RecordBatchHeader) -> int:
    if h.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return last_sequence(h.base_sequence, h.last_offset_delta)


def record_sequence(h: RecordBatchHeader, offset: int) -> int:
    if h.base_sequence < 0:
        return NO_SEQUENCE
    return last_sequence(h.base_sequence, offset - h.base_offset)


def _bool(value: bool) -> str:
    return "true" if value else "false"


def format_batch(h: RecordBatchHeader, position: int, valid: bool) -> str:
    """The batch line of Kafka's ``printBatchLevel`` (magic 2)."""
    horizon = (
        f"OptionalLong[{h.base_timestamp}]"
        if h.attributes & DELETE_HORIZON_FLAG_MASK
        else "OptionalLong.empty"
    )
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {batch_last_sequence(h)} "
        f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
        f"partitionLeaderEpoch: {h.partition_leader_epoch} isTransactional: {_bool(h.is_transactional)} "
        f"isControl: {_bool(h.is_control)} deleteHorizonMs: {horizon} "
        f"position: {position} {TIMESTAMP_TYPES[h.timestamp_type]}: {h.max_timestamp} size: {h.size} "
        f"magic: {h.magic} compresscodec: {COMPRESSION_NAMES.get(h.compression, str(h.compression))} "
        f"crc: {h.crc} isvalid: {_bool(valid)}"
    )


def format_record(
    h: RecordBatchHeader, r: Record, parser: Parser | None, skip_metadata: bool = False
) -> str:
    """The ``| offset: ...`` line of one record; ``parser`` adds its key and payload. With
    ``skip_metadata`` only ``| key: ... payload: ...`` (and an empty line for a control record)."""
    line = ""
    if not skip_metadata:
        key_size = -1 if r.key is None else len(r.key)
        value_size = -1 if r.value is None else len(r.value)
        header_keys = ",".join(k for k, _ in r.headers)
        line = (
            f"{RECORD_INDENT} offset: {r.offset} {TIMESTAMP_TYPES[h.timestamp_type]}: {r.timestamp} "
            f"keySize: {key_size} valueSize: {value_size} sequence: {record_sequence(h, r.offset)} "
            f"headerKeys: [{header_keys}]"
        )
        if h.is_control:
            line += describe_control_record(r)
    if parser is not None and not h.is_control:
        key, payload = parser(r)
        prefix = RECORD_INDENT if skip_metadata else ""
        if key is not None:
            line += f"{prefix} key: {key}"
            prefix = ""
        if payload is not None:
            line += f"{prefix} payload: {payload}"
    return line


@contextmanager
def _mapped(path: str) -> Iterator[memoryview]:
    """The file's bytes, memory-mapped (a 1 GB segment is not read into memory)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            yield memoryview(b"")
            return
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        view = memoryview(m)
        try:
            yield view
        finally:
            view.release()
            try:
                m.close()
            except BufferError:
                pass  # a view still held by an exception's traceback: closed when collected


def _base_offset(path: str) -> int:
    name = os.path.basename(path)
    prefix = name.split(".")[0]
    if not prefix.isdigit():
        raise ValueError(f"{name}: the file name does not start with a base offset")
    return int(prefix)


_CORRUPT_INDEX = "org.apache.kafka.storage.internals.log.CorruptIndexException"


class IndexSanityError(Exception):
    """Kafka's ``sanityCheck`` failed: its tool stops at this file (exit code 1); ours prints the
    exception's line (not the JVM's stack trace) on stderr."""


def offset_index_sanity(path: str, base: int) -> None:
    """Kafka's ``OffsetIndex.sanityCheck`` as its tool opens the file (read-only: the length is
    rounded down to whole entries, the last slot is the last entry): only the last offset is checked."""
    with open(path, "rb") as f:
        data = f.read()
    entries = len(data) // 8
    if entries == 0:
        return
    last = base + int.from_bytes(data[(entries - 1) * 8:(entries - 1) * 8 + 4], "big", signed=True)
    if last < base:
        raise IndexSanityError(
            f"{_CORRUPT_INDEX}: Corrupt index found, index file {os.path.abspath(path)} has non-zero size "
            f"but the last offset is {last} which is less than the base offset {base}")


def time_index_sanity(path: str, base: int) -> None:
    """Kafka's ``TimeIndex.sanityCheck`` on the read-only file: the last whole slot's timestamp is
    not below the first's, its offset not below the base offset (order in between is not checked),
    and the length is whole entries."""
    with open(path, "rb") as f:
        data = f.read()
    entries = len(data) // 12
    if entries == 0:
        return
    first_ts = int.from_bytes(data[0:8], "big", signed=True)
    at = (entries - 1) * 12
    last_ts = int.from_bytes(data[at:at + 8], "big", signed=True)
    last = base + int.from_bytes(data[at + 8:at + 12], "big", signed=True)
    where = f"time index file ({os.path.abspath(path)}) has non-zero size but the last"
    if last_ts < first_ts:
        raise IndexSanityError(f"{_CORRUPT_INDEX}: Corrupt time index found, {where} timestamp is {last_ts} "
                               f"which is less than the first timestamp {first_ts}")
    if last < base:
        raise IndexSanityError(f"{_CORRUPT_INDEX}: Corrupt time index found, {where} offset is {last} "
                               f"which is less than the first offset {base}")
    if len(data) % 12:  # checked last, and (unlike the offset index's) on the file's own length
        raise IndexSanityError(f"{_CORRUPT_INDEX}: Time index file {os.path.abspath(path)} is corrupt, found "
                               f"{len(data)} bytes which is neither positive nor a multiple of 12")


class LogDumper:
    def __init__(
        self,
        out: TextIO,
        err: TextIO,
        *,
        print_data_log: bool = False,
        deep_iteration: bool = False,
        cluster_metadata: bool = False,
        verify_index_only: bool = False,
        index_sanity_check: bool = False,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        max_bytes: int = INT32_MAX,
        skip_record_metadata: bool = False,
        progress: bool = False,
    ) -> None:
        self.out = out
        self.progress = progress  # a bar on ``err`` for a large segment, when ``err`` is a terminal
        self.skip_record_metadata = skip_record_metadata
        self.err = err
        # As Kafka's tool: a decoder option implies --print-data-log, which implies deep iteration.
        self.print_data_log = print_data_log or cluster_metadata
        self.deep_iteration = deep_iteration or self.print_data_log
        self.parser: Parser = cluster_metadata_parser if cluster_metadata else string_parser
        self.verify_index_only = verify_index_only
        self.index_sanity_check = index_sanity_check
        self.max_message_size = max_message_size
        self.max_bytes = max_bytes
        self.failed = False
        # Reported on stderr after every file, as Kafka's tool does.
        # (Kafka keeps these two per file in TreeMaps keyed by the first offset: a repeated key
        # keeps its last value; mismatches print newest offset first, gaps oldest first.)
        self.index_mismatches: dict[str, dict[int, int]] = {}
        self.time_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_out_of_order: dict[str, list[tuple[int, int]]] = {}
        self.time_not_found: dict[str, list[tuple[int, int]]] = {}
        self.non_consecutive: dict[str, dict[int, int]] = {}

    def _print(self, line: str) -> None:
        self.out.write(line + "\n")

    def _error(self, path: str, message: str) -> None:
        self.failed = True
        self.out.flush()
        self.err.write(f"odradek dump-log: {path}: {message}\n")

    def dump(self, files: list[str]) -> int:
        for path in files:
            self._print(f"Dumping {path}")
            name = os.path.basename(path)
            suffix = name[name.rfind(".") :] if "." in name else ""
            try:
                if suffix in (".log", ".checkpoint"):
                    self.dump_log(path)
                elif suffix == ".index":
                    self.dump_index(path)
                elif suffix == ".timeindex":
                    self.dump_time_index(path)
                elif suffix == ".snapshot":
                    self.dump_producer_snapshot(path)
                elif suffix == ".txnindex":
                    self.dump_txn_index(path)
                else:
                    self.out.flush()
                    self.err.write(f"Ignoring unknown file {path}\n")
            except IndexSanityError as e:  # Kafka's tool ends here, reporting nothing more
                self.out.flush()
                self.err.write(f"{e}\n")
                self.err.flush()
                return 1
            except OSError as e:
                self._error(path, e.strerror or str(e))
            except (ValueError, RecordError, CorruptIndexError) as e:
                self._error(path, str(e))
        self.out.flush()
        self._report()
        return 1 if self.failed else 0

    def _report(self) -> None:
        w = self.err.write

        def items(
            reports: dict[str, list[tuple[int, int]]],
        ) -> list[tuple[str, list[tuple[int, int]]]]:
            return [(path, reports[path]) for path in java_hash_map_order(list(reports))]

        for path in java_hash_map_order(list(self.index_mismatches)):
            pairs = sorted(self.index_mismatches[path].items(), reverse=True)
            w(f"Mismatches in :{path}\n")
            for index_offset, log_offset in pairs:
                w(f"  Index offset: {index_offset}, log offset: {log_offset}\n")
        for path, pairs in items(self.time_mismatches):
            w(f"Found timestamp mismatch in :{path}\n")
            for index_ts, log_ts in pairs:
                w(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}\n")
        for path, pairs in items(self.time_out_of_order):
            w(f"Found out of order timestamp in :{path}\n")
            for index_ts, prev_ts in pairs:
                w(f"  Index timestamp: {index_ts}, Previously indexed timestamp: {prev_ts}\n")
        for path, pairs in items(self.time_not_found):
            w(f"The following indexed offsets are not found in :{path}\n")
            for index_offset, log_offset in pairs:
                w(f"Indexed offset: {index_offset}, found log offset: {log_offset}\n")
        for path in java_hash_map_order(list(self.non_consecutive)):
            pairs = sorted(self.non_consecutive[path].items())
            w(f"Non-consecutive offsets in {path}\n")
            for first, second in pairs:
                w(f"  {first} is followed by {second}\n")
        self.err.flush()

    # -- segments and snapshots -----------------------------------------------------------------

    def dump_log(self, path: str) -> None:
        name = os.path.basename(path)
        if name.endswith(".log"):
            self._print(f"Log starting offset: {_base_offset(path)}")
        elif name == BOOTSTRAP_CHECKPOINT:
            self._print("KRaft bootstrap snapshot")
        else:
            m = _SNAPSHOT_NAME.match(name)
            if m is None:
                raise ValueError(
                    f"{name} is not a snapshot file name (<end offset>-<epoch>.checkpoint)"
                )
            self._print(f"Snapshot end offset: {int(m.group(1))}, epoch: {int(m.group(2))}")
        with _mapped(path) as whole:
            data = whole[: self.max_bytes]
            valid_bytes = 0
            last_offset = -1
            abs_path = os.path.abspath(path)
            bar = Progress(len(data), "B", self.progress and len(data) >= PROGRESS_MIN_BYTES, self.err)
            try:
                for h in iter_batches(data):
                    position = h.position
                    bar.update(position + h.size - valid_bytes)
                    self._print(
                        format_batch(h, position, is_batch_crc_valid(data, position, h.size))
                    )
                    if self.deep_iteration:
                        batch = data[position : position + h.size]
                        try:
                            for r in iter_batch_records(batch, DECOMPRESS_LIMIT):
                                # As Kafka 4.x's tool: a segment not starting at 0 counts as a gap after -1.
                                if r.offset != last_offset + 1:
                                    self.non_consecutive.setdefault(abs_path, {})[last_offset] = (
                                        r.offset
                                    )
                                last_offset = r.offset
                                parser = self.parser if self.print_data_log else None
                                self._print(format_record(h, r, parser, self.skip_record_metadata))
                        except (RecordError, ValueError) as e:
                            self._error(
                                path,
                                f"cannot read the records of the batch at position {position}: {e}",
                            )
                        finally:
                            batch.release()
                    valid_bytes = position + h.size
            except RecordError as e:
                bar.close()
                self._error(path, f"{e} (after {valid_bytes} valid bytes)")
                return
            finally:
                bar.close()
                data.release()
            trailing = len(whole) - valid_bytes
            if trailing > 0 and self.max_bytes == INT32_MAX:
                self._print(f"Found {trailing} invalid bytes at the end of {name}")

    # -- indexes --------------------------------------------------------------------------------

    def _segment_path(self, index_path: str) -> str:
        directory = os.path.dirname(os.path.abspath(index_path))
        return os.path.join(directory, os.path.basename(index_path).split(".")[0] + ".log")

    def dump_index(self, path: str) -> None:
        base = _base_offset(path)
        log_path = self._segment_path(path)
        entries = read_offset_index_file(path, base)
        if not entries:
            self._print(f"{path} is empty.")
            return
        if self.index_sanity_check:
            offset_index_sanity(path, base)
            self._print(f"{path} passed sanity check.")
            return
        abs_path = os.path.abspath(path)
        with _mapped(log_path) as data:
            for i, (offset, position) in enumerate(entries):
                if offset == base and i > 0:
                    break  # the zero-filled tail of a preallocated index
                first = self._batch_at(data, position)
                found = first.last_offset if first is not None else -1
                if found != offset:
                    self.index_mismatches.setdefault(abs_path, {})[offset] = found
                if not self.verify_index_only:
                    self._print(f"offset: {offset} position: {position}")

    def _batch_at(self, data: memoryview, position: int) -> RecordBatchHeader | None:
        """The first batch of ``max_message_size`` bytes at ``position`` (Kafka's slice)."""
        window = data[position : position + self.max_message_size]
        try:
            return next(iter_batches(window), None)
        except RecordError:
            return None
        finally:
            window.release()

    def dump_txn_index(self, path: str) -> None:
        """The aborted transactions of a `.txnindex` (Kafka's dumpTxnIndex)."""
        for t in TransactionIndex(path, 0):
            self._print(
                f"version: 0 producerId: {t.producer_id} firstOffset: {t.first_offset} "
                f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}"
            )

    def dump_producer_snapshot(self, path: str) -> None:
        """The producers of a `.snapshot` (Kafka's dumpProducerIdSnapshot; a corrupt one is
        reported on stderr)."""
        try:
            entries = read_snapshot(path, MAX_SNAPSHOT_BYTES)
        except CorruptSnapshotError as exc:
            self.out.flush()
            self.err.write(f"{exc}\n")
            return
        for pid, e in entries.items():
            txn = e.current_txn_first_offset
            line = (
                f"producerId: {pid} producerEpoch: {e.epoch} coordinatorEpoch: "
                f"{e.coordinator_epoch} currentTxnFirstOffset: "
                f"{f'OptionalLong[{txn}]' if txn >= 0 else 'OptionalLong.empty'} "
                f"lastTimestamp: {e.last_timestamp} "
            )
            if e.batches:
                b = e.batches[0]
                line += (
                    f"firstSequence: {b.first_seq} lastSequence: {b.last_seq} lastOffset: "
                    f"{b.last_offset} offsetDelta: {b.last_offset - b.first_offset} "
                    f"timestamp: {b.max_timestamp}"
                )
            self._print(line)

    def dump_time_index(self, path: str) -> None:
        base = _base_offset(path)
        log_path = self._segment_path(path)
        index_path = log_path[: -len(".log")] + ".index"
        if self.index_sanity_check:
            time_index_sanity(path, base)
            self._print(f"{path} passed sanity check.")
            return
        entries = read_time_index_file(path, base)
        offset_entries = (
            read_offset_index_file(index_path, base) if os.path.exists(index_path) else []
        )
        abs_path = os.path.abspath(path)
        prev_timestamp = -1
        with _mapped(log_path) as data:
            for i, (timestamp, offset) in enumerate(entries):
                if offset == base and i > 0:
                    break
                position = 0
                for o, p in offset_entries:  # Kafka's OffsetIndex.lookup: the last entry <= offset
                    if o > offset:
                        break
                    position = p
                batch = self._first_batch_reaching(data, position, offset)
                if batch is None:
                    self.time_not_found.setdefault(abs_path, []).append((offset, -1))
                elif batch.last_offset != offset:
                    self.time_not_found.setdefault(abs_path, []).append((offset, batch.last_offset))
                else:
                    raw = data[batch.position : batch.position + batch.size]
                    try:
                        max_ts = max(
                            (r.timestamp for r in iter_batch_records(raw, DECOMPRESS_LIMIT)),
                            default=-1,
                        )
                    finally:
                        raw.release()
                    if max_ts != timestamp:
                        self.time_mismatches.setdefault(abs_path, []).append((timestamp, max_ts))
                    if prev_timestamp >= timestamp:
                        self.time_out_of_order.setdefault(abs_path, []).append(
                            (timestamp, prev_timestamp)
                        )
                if not self.verify_index_only:
                    self._print(f"timestamp: {timestamp} offset: {offset}")
                prev_timestamp = timestamp

    @staticmethod
    def _first_batch_reaching(
        data: memoryview, position: int, offset: int
    ) -> RecordBatchHeader | None:
        try:
            for h in iter_batches(data, position):
                if h.last_offset >= offset:
                    return h
        except RecordError:
            return None
        return None
