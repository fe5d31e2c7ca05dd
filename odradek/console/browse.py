"""The message browser: up to N records of one partition from an offset or a timestamp.

Bounded on every side: at most :data:`MAX_LIMIT` records, Fetch asks for at most
:data:`FETCH_MAX_BYTES` per request and makes at most :data:`MAX_FETCHES` requests, a compressed
batch may decompress to at most :data:`DECOMPRESS_LIMIT` bytes, and keys, values and headers are
cut to :data:`MAX_SHOWN_BYTES` for display (the page says how long they were). Control batches
(transaction markers) are not shown; aborted transactional records are (READ_UNCOMMITTED).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from odradek.console.client import EARLIEST, LATEST, ConsoleClient, ConsoleError
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors, error_name
from odradek.records.batch import iter_batches
from odradek.records.errors import RecordError
from odradek.records.records import iter_batch_records

DEFAULT_LIMIT = 20
MAX_LIMIT = 200
FETCH_MAX_BYTES = 1024 * 1024
MAX_FETCHES = 8
DECOMPRESS_LIMIT = 16 * 1024 * 1024
MAX_SHOWN_BYTES = 2048
MAX_HEADERS = 50
_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass
class Shown:
    """Bytes to display: the first :data:`MAX_SHOWN_BYTES` and the real length."""

    data: bytes | None
    length: int

    @classmethod
    def of(cls, b: bytes | None) -> Shown:
        return cls(None if b is None else b[:MAX_SHOWN_BYTES], -1 if b is None else len(b))

    @property
    def truncated(self) -> bool:
        return self.data is not None and self.length > len(self.data)

    def text(self) -> str:
        return "" if self.data is None else self.data.decode("utf-8", "replace")

    def hex(self) -> str:
        return "" if self.data is None else self.data.hex(" ")

    @property
    def is_text(self) -> bool:
        """UTF-8 without control characters other than tab and line breaks."""
        if self.data is None:
            return True
        if _CONTROL.search(self.data):
            return False
        try:
            self.data.decode("utf-8")
        except UnicodeDecodeError as e:  # a multi-byte character cut at the end is still text
            return self.truncated and e.start >= len(self.data) - 3
        return True


@dataclass
class Message:
    offset: int
    timestamp: int
    key: Shown
    value: Shown
    headers: list[tuple[str, Shown]]
    more_headers: int = 0


@dataclass
class BrowseResult:
    topic: str
    partition: int
    start: int
    first_offset: int
    next_offset: int
    messages: list[Message] = field(default_factory=list)
    note: str = ""  # why fewer messages than asked for


def _fetch_body(topic: str, partition: int, offset: int) -> dict[str, object]:
    return {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": FETCH_MAX_BYTES,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": FETCH_MAX_BYTES,
        }]}],
        "forgotten_topics_data": [], "rack_id": "",
    }


def _offset(value: int | str | None, what: str) -> int:
    if not isinstance(value, int):
        raise ConsoleError(f"ListOffsets ({what}): {value or 'no answer'}")
    return value


async def browse(
    client: ConsoleClient, topic: str, partition: int, *,
    offset: int | None = None, timestamp: int | None = None, limit: int = DEFAULT_LIMIT,
) -> BrowseResult:
    """``offset`` and ``timestamp`` None: the last ``limit`` records."""
    limit = max(1, min(limit, MAX_LIMIT))
    tp = (topic, partition)
    leaders = await client.leaders([topic])
    if tp not in leaders:
        raise ConsoleError(f"no partition {partition} of topic {topic!r}")
    leader = leaders[tp]
    if leader < 0:
        raise ConsoleError(f"partition {partition} of {topic!r} has no leader (offline)")
    low = _offset((await client.list_offsets([tp], EARLIEST, leaders))[tp], "earliest")
    high = _offset((await client.list_offsets([tp], LATEST, leaders))[tp], "latest")
    if timestamp is not None:
        found = (await client.list_offsets([tp], timestamp, leaders))[tp]
        start = _offset(found, f"timestamp {timestamp}")
        if start < 0:
            start = high  # no record at or after the timestamp
    elif offset is not None:
        start = offset
    else:
        start = max(low, high - limit)
    start = max(low, min(start, high))
    result = BrowseResult(topic, partition, start, low, high)
    addr = client.broker_address(leader)
    position = start
    for _ in range(MAX_FETCHES):
        if len(result.messages) >= limit or position >= high:
            break
        _, r = await client.send(addr, m.FETCH, 12, _fetch_body(topic, partition, position))
        if r.get("error_code", 0) != Errors.NONE:
            raise ConsoleError(f"Fetch: {error_name(r['error_code'])}")
        pd = r["responses"][0]["partitions"][0]
        if pd["error_code"] != Errors.NONE:
            raise ConsoleError(f"Fetch {topic}-{partition} at {position}: {error_name(pd['error_code'])}")
        data = pd["records"] or b""
        progressed = False
        try:
            for h in iter_batches(data):
                if h.next_offset <= position:
                    continue
                progressed = True
                if not h.is_control:
                    batch = memoryview(data)[h.position:h.position + h.size]
                    for rec in iter_batch_records(batch, DECOMPRESS_LIMIT):
                        if rec.offset < position:
                            continue
                        headers = rec.headers[:MAX_HEADERS]
                        result.messages.append(Message(
                            rec.offset, rec.timestamp, Shown.of(rec.key), Shown.of(rec.value),
                            [(k, Shown.of(v)) for k, v in headers], len(rec.headers) - len(headers),
                        ))
                        if len(result.messages) >= limit:
                            break
                position = h.next_offset
                if len(result.messages) >= limit:
                    break
        except RecordError as e:
            result.note = f"cannot show the records at offset {position}: {e}"
            break
        if not progressed:
            if data:
                result.note = f"the batch at offset {position} is larger than {FETCH_MAX_BYTES} bytes"
            break
    return result
