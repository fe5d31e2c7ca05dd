"""``odradek produce``: Kafka's console producer (kafka-console-producer.sh).

Reads records from standard input, one a line, and sends them to ``--topic``. With
``--property parse.key=true`` a line is ``key<key.separator>value``; with
``parse.headers=true`` it starts with ``h1:v1,h2:v2<headers.delimiter>``; ``null.marker`` makes
a key, value or header value null (Kafka's LineMessageReader). ``--format json`` reads JSON lines
instead: ``{"key": .., "value": .., "headers": {..} or [[k, v], ..], "partition": .., "timestamp": ..}``
(every field optional; bytes as ``--encoding`` says)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from odradek.cli.client_tools import (
    Progress,
    ToolFailure,
    add_encoding_flag,
    add_progress_flag,
    decode_bytes,
    run_tool,
)
from odradek.clients.cluster import Cluster
from odradek.clients.config import PRODUCER_DEFAULTS, ClientConfig, load_properties, parse_kv_args
from odradek.clients.producer import ProduceError, Producer
from odradek.records.compression import CODEC_IDS


@dataclass
class ParsedRecord:
    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    partition: int | None = None
    timestamp: int | None = None


class LineReader:
    """Kafka's LineMessageReader: its properties, their defaults and its error messages."""

    def __init__(self, props: dict[str, str]) -> None:
        self.parse_key = props.get("parse.key", "false").strip().lower() == "true"
        self.key_separator = props.get("key.separator", "\t")
        self.parse_headers = props.get("parse.headers", "false").strip().lower() == "true"
        self.headers_delimiter = props.get("headers.delimiter", "\t")
        self.headers_separator = props.get("headers.separator", ",")
        self.headers_key_separator = props.get("headers.key.separator", ":")
        self.ignore_error = props.get("ignore.error", "false").strip().lower() == "true"
        self.null_marker = props.get("null.marker")
        if self.headers_separator == self.headers_key_separator:
            raise ToolFailure("headers.separator and headers.key.separator may not be equal")
        for name, value in (("key.separator", self.key_separator), ("headers.separator", self.headers_separator),
                            ("headers.delimiter", self.headers_delimiter),
                            ("headers.key.separator", self.headers_key_separator)):
            if self.null_marker is not None and value == self.null_marker:
                raise ToolFailure(f"null.marker and {name} may not be equal")
        self.line_number = 0

    def _split(self, enabled: bool, line: str, start: int, sep: str, name: str) -> str | None:
        if not enabled:
            return None
        i = line.find(sep, start)
        if i < 0:
            if self.ignore_error:
                return None
            raise ToolFailure(f"No {name} found on line number {self.line_number}: '{line}'")
        return line[start:i]

    def _bytes(self, text: str | None) -> bytes | None:
        if text is None or text == self.null_marker:
            return None
        return text.encode("utf-8")

    def parse(self, line: str) -> ParsedRecord:
        self.line_number += 1
        headers = self._split(self.parse_headers, line, 0, self.headers_delimiter, "headers delimiter")
        offset = 0 if headers is None else len(headers) + len(self.headers_delimiter)
        key = self._split(self.parse_key, line, offset, self.key_separator, "key separator")
        offset += 0 if key is None else len(key) + len(self.key_separator)
        record = ParsedRecord(self._bytes(line[offset:]), self._bytes(key))
        if headers is not None and headers != self.null_marker:
            for pair in headers.split(self.headers_separator):
                i = pair.find(self.headers_key_separator)
                if i < 0:
                    if self.ignore_error:
                        record.headers.append((pair, None))
                        continue
                    raise ToolFailure(f"No header key separator found in pair '{pair}' on line number {self.line_number}")
                hkey = pair[:i]
                if hkey == self.null_marker:
                    raise ToolFailure(f"Header keys should not be equal to the null marker '{self.null_marker}' as they can't be null")
                record.headers.append((hkey, self._bytes(pair[i + len(self.headers_key_separator):])))
        return record


class JsonReader:
    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self.line_number = 0

    def parse(self, line: str) -> ParsedRecord | None:
        self.line_number += 1
        if not line.strip():
            return None
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError("a record is a JSON object")
            unknown = sorted(set(obj) - {"key", "value", "headers", "partition", "timestamp"})
            if unknown:
                raise ValueError(f"unknown field(s) {', '.join(unknown)}")
            raw_headers = obj.get("headers") or {}
            pairs = list(raw_headers.items()) if isinstance(raw_headers, dict) else list(raw_headers)
            headers = []
            for pair in pairs:
                if not (isinstance(pair, list | tuple) and len(pair) == 2 and isinstance(pair[0], str)):
                    raise ValueError("headers are an object or a list of [key, value] pairs")
                headers.append((pair[0], decode_bytes(pair[1], self.encoding, f"header {pair[0]!r}")))
            partition = obj.get("partition")
            timestamp = obj.get("timestamp")
            for name, v in (("partition", partition), ("timestamp", timestamp)):
                if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                    raise ValueError(f"{name} must be a non-negative integer")
            return ParsedRecord(decode_bytes(obj.get("value"), self.encoding, "value"),
                                decode_bytes(obj.get("key"), self.encoding, "key"), headers, partition, timestamp)
        except ValueError as e:
            raise ToolFailure(f"Invalid JSON record on line number {self.line_number}: {e}") from None


def producer_props(ns: argparse.Namespace) -> dict[str, str]:
    """Kafka's order: the properties file, then --producer-property, then the flags (a flag left
    at its default does not override a property set explicitly)."""
    props = load_properties(ns.producer_config or ns.command_config)
    props.update(parse_kv_args(ns.producer_property))
    flags = {
        "compression.type": ns.compression_codec,
        "acks": ns.request_required_acks,
        "linger.ms": ns.timeout,
        "batch.size": ns.batch_size,
        "request.timeout.ms": ns.request_timeout_ms,
        "max.block.ms": ns.max_block_ms,
        "retries": ns.message_send_max_retries,
        "retry.backoff.ms": ns.retry_backoff_ms,
    }
    defaults = {"compression.type": "none", "acks": "-1", "linger.ms": "1000", "batch.size": "16384",
                "request.timeout.ms": "1500", "max.block.ms": "60000", "retries": "3", "retry.backoff.ms": "100"}
    for key, value in flags.items():
        if value is not None:
            props[key] = str(value)
        elif key not in props:
            props[key] = defaults[key]
    props.setdefault("client.id", "console-producer")
    return props


def _lines(stream: Any) -> Iterator[str]:
    for raw in stream:
        yield raw.decode("utf-8", errors="replace").rstrip("\n").removesuffix("\r")


async def produce(ns: argparse.Namespace, stop: asyncio.Event) -> int:
    props = producer_props(ns)
    reader_props = load_properties(ns.reader_config)
    reader_props.update(parse_kv_args(ns.property))
    reader: LineReader | JsonReader = JsonReader(ns.encoding) if ns.format == "json" else LineReader(reader_props)
    config = ClientConfig(PRODUCER_DEFAULTS, props)
    cluster = Cluster(ns.bootstrap_server, config.get("client.id"), config.int("request.timeout.ms") + 5000, security=config.security)
    await cluster.start()
    producer = Producer(cluster, config)
    failed = 0
    sent = 0
    progress = Progress(None, "rec", not ns.no_progress and not sys.stdin.isatty())
    pending: set[asyncio.Future[tuple[int, int]]] = set()

    def delivered(fut: asyncio.Future[tuple[int, int]], key: bytes | None, value: bytes | None) -> None:
        nonlocal failed
        pending.discard(fut)
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            failed += 1
            print(f"ERROR Error when sending message to topic {ns.topic} with key: "
                  f"{'null' if key is None else f'{len(key)} bytes'}, value: "
                  f"{'null' if value is None else f'{len(value)} bytes'} with error: {exc}", file=sys.stderr)
        else:
            progress.update()

    loop = asyncio.get_running_loop()
    lines = _lines(sys.stdin.buffer)
    try:
        while not stop.is_set():
            line = await loop.run_in_executor(None, next, lines, None)
            if line is None:
                break
            record = reader.parse(line)
            if record is None:
                continue
            try:
                fut = await producer.send(ns.topic, record.value, record.key, record.headers,
                                          record.partition, record.timestamp)
            except ProduceError as e:
                raise ToolFailure(str(e)) from None
            sent += 1
            pending.add(fut)
            fut.add_done_callback(functools.partial(delivered, key=record.key, value=record.value))
            if ns.sync:
                await asyncio.gather(fut, return_exceptions=True)
    finally:
        await producer.close()
        await asyncio.gather(*pending, return_exceptions=True)
        progress.close()
        await cluster.close()
    if failed:
        print(f"ERROR {failed} of {sent} record(s) were not delivered", file=sys.stderr)
        return 1
    return 0


def run(ns: argparse.Namespace) -> int:
    return run_tool(lambda stop: produce(ns, stop))


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "produce", help="send records from standard input to a topic (kafka-console-producer.sh)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 all records delivered; 1 a failure (unknown topic after max.block.ms, no "
               "reachable broker, a record not delivered, a malformed line); 2 bad flags.")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]",
                   help="REQUIRED: the server(s) to connect to")
    p.add_argument("--topic", required=True, help="REQUIRED: the topic to produce to")
    p.add_argument("--property", "--reader-property", dest="property", action="append", metavar="KEY=VALUE",
                   help="line reader property: parse.key, key.separator, parse.headers, headers.delimiter, "
                        "headers.separator, headers.key.separator, null.marker, ignore.error")
    p.add_argument("--reader-config", metavar="FILE", help="line reader properties file (--property wins)")
    p.add_argument("--producer-property", "--command-property", dest="producer_property", action="append",
                   metavar="KEY=VALUE",
                   help="a producer property (acks, linger.ms, batch.size, compression.type, ...)")
    p.add_argument("--producer.config", dest="producer_config", metavar="FILE",
                   help="producer properties file (--producer-property wins)")
    p.add_argument("--command-config", metavar="FILE", help="the same as --producer.config")
    p.add_argument("--compression-codec", nargs="?", const="gzip", choices=sorted(CODEC_IDS),
                   help="compression: none, gzip (without a value), snappy, lz4 or zstd")
    p.add_argument("--request-required-acks", choices=["-1", "0", "1", "all"], help="acks (default -1)")
    p.add_argument("--sync", action="store_true", help="send each record and wait for it before the next")
    p.add_argument("--batch-size", type=int, help="batch.size in bytes (default 16384)")
    p.add_argument("--timeout", type=int, metavar="MS", help="linger.ms (default 1000)")
    p.add_argument("--request-timeout-ms", type=int, help="request.timeout.ms (default 1500)")
    p.add_argument("--max-block-ms", type=int, help="max.block.ms: how long to wait for metadata / buffer room (default 60000)")
    p.add_argument("--message-send-max-retries", type=int, help="retries (default 3)")
    p.add_argument("--retry-backoff-ms", type=int, help="retry.backoff.ms (default 100)")
    p.add_argument("--format", choices=["line", "json"], default="line",
                   help="line: Kafka's line reader (default); json: one JSON object a line")
    add_encoding_flag(p, "read")
    add_progress_flag(p)
    p.set_defaults(func=run)
