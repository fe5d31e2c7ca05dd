"""A consumer: positions per assigned partition, one Fetch in flight per leader, batches decoded
into records (control batches dropped; with read_committed, aborted transactions' records too),
``auto.offset.reset`` on an out-of-range position, and a leader change followed by a metadata
refresh. Records are handed out one at a time; :attr:`Consumer.consumed` is what a commit
stores (the offset after the last record handed out)."""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field

from odradek.clients.cluster import Cluster, ClusterError, TopicPartition
from odradek.clients.config import ClientConfig
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors, error_name
from odradek.records.batch import RECORD_BATCH_OVERHEAD, iter_batches
from odradek.records.compression import decompress
from odradek.records.control_batch import control_record_type
from odradek.records.records import iter_records

EARLIEST, LATEST = -2, -1
RETRIABLE = frozenset({
    Errors.NOT_LEADER_OR_FOLLOWER, Errors.LEADER_NOT_AVAILABLE, Errors.UNKNOWN_TOPIC_OR_PARTITION,
    Errors.REPLICA_NOT_AVAILABLE, Errors.KAFKA_STORAGE_ERROR, Errors.FENCED_LEADER_EPOCH,
    Errors.UNKNOWN_LEADER_EPOCH, Errors.REQUEST_TIMED_OUT, Errors.OFFSET_NOT_AVAILABLE,
    Errors.NOT_COORDINATOR,
})


class ConsumeError(ClusterError):
    pass


@dataclass(slots=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


class Consumer:
    def __init__(self, cluster: Cluster, config: ClientConfig) -> None:
        self.cluster = cluster
        self.reset = config.choice("auto.offset.reset", ("latest", "earliest", "none"))
        self.read_committed = config.choice("isolation.level", ("read_uncommitted", "read_committed")) == "read_committed"
        self.min_bytes = config.int("fetch.min.bytes")
        self.max_bytes = config.int("fetch.max.bytes")
        self.max_wait_ms = config.int("fetch.max.wait.ms")
        self.partition_max_bytes = config.int("max.partition.fetch.bytes")
        self.backoff_s = config.int("retry.backoff.ms") / 1000
        self.positions: dict[TopicPartition, int] = {}  # next offset to fetch
        self.consumed: dict[TopicPartition, int] = {}  # next offset to hand out
        self._buffer: collections.deque[ConsumerRecord] = collections.deque()
        self._fetches: dict[int, asyncio.Task[None]] = {}

    async def assign(self, starts: dict[TopicPartition, int]) -> None:
        """Assign partitions from the given starts: an offset, or EARLIEST / LATEST (looked up)."""
        await self.cancel_fetches()
        self._buffer.clear()
        for spec in (EARLIEST, LATEST):
            tps = [tp for tp, o in starts.items() if o == spec]
            if tps:
                starts = {**starts, **await self.cluster.list_offsets(tps, spec, int(self.read_committed))}
        self.positions = dict(starts)
        self.consumed = dict(starts)

    async def cancel_fetches(self) -> None:
        tasks = list(self._fetches.values())
        self._fetches.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def has_buffered(self) -> bool:
        return bool(self._buffer)

    async def next_record(self, timeout_s: float) -> ConsumerRecord | None:
        """The next record, or None when none came within ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self._buffer:
            remaining = deadline - loop.time()
            if remaining <= 0 or not self.positions:
                if not self.positions and remaining > 0:
                    await asyncio.sleep(min(remaining, 0.1))
                    continue
                return None
            self._start_fetches()
            done, _ = await asyncio.wait(list(self._fetches.values()), timeout=remaining,
                                         return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                for node, t in list(self._fetches.items()):
                    if t is task:
                        del self._fetches[node]
                task.result()  # a fatal error surfaces here
        record = self._buffer.popleft()
        self.consumed[(record.topic, record.partition)] = record.offset + 1
        return record

    def _start_fetches(self) -> None:
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in self.positions:
            info = self.cluster.topics.get(tp[0])
            leader = info.leaders.get(tp[1], -1) if info else -1
            by_leader.setdefault(leader, []).append(tp)
        loop = asyncio.get_running_loop()
        for leader, tps in by_leader.items():
            if leader not in self._fetches:
                self._fetches[leader] = loop.create_task(self._fetch(leader, tps))

    async def _fetch(self, leader: int, tps: list[TopicPartition]) -> None:
        try:
            if leader < 0:
                raise ConnectionError("no leader")
            topics: dict[str, list[dict[str, object]]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append({
                    "partition": p, "current_leader_epoch": -1, "fetch_offset": self.positions[(t, p)],
                    "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": self.partition_max_bytes,
                })
            resp = await self.cluster.send(self.cluster.address(leader), m.FETCH, {
                "replica_id": -1, "max_wait_ms": self.max_wait_ms, "min_bytes": self.min_bytes,
                "max_bytes": self.max_bytes, "isolation_level": int(self.read_committed),
                "session_id": 0, "session_epoch": -1, "rack_id": "",
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                "forgotten_topics_data": [],
            })
        except (OSError, ConnectionError, TimeoutError):
            await self._refresh()
            return
        if resp.get("error_code", 0):
            raise ConsumeError(f"Fetch failed: {error_name(resp['error_code'])}")
        refresh = False
        reset: list[TopicPartition] = []
        for t in resp["responses"]:
            for p in t["partitions"]:
                tp = (t["topic"], p["partition_index"])
                if tp not in self.positions:
                    continue
                code = p["error_code"]
                if code == Errors.OFFSET_OUT_OF_RANGE:
                    reset.append(tp)
                elif code in RETRIABLE:
                    refresh = True
                elif code != Errors.NONE:
                    raise ConsumeError(f"Fetch for {tp[0]}-{tp[1]} failed: {error_name(code)}")
                elif p["records"]:
                    self._decode(tp, p["records"], p.get("aborted_transactions") or [])
        if reset:
            if self.reset == "none":
                tp = reset[0]
                raise ConsumeError(
                    f"org.apache.kafka.clients.consumer.OffsetOutOfRangeException: Fetch position "
                    f"{self.positions[tp]} is out of range for partition {tp[0]}-{tp[1]}")
            new = await self.cluster.list_offsets(reset, EARLIEST if self.reset == "earliest" else LATEST,
                                                  int(self.read_committed))
            for tp, off in new.items():
                if tp in self.positions:
                    self.positions[tp] = off
        if refresh:
            await self._refresh()

    async def _refresh(self) -> None:
        await asyncio.sleep(self.backoff_s)
        try:
            await self.cluster.metadata(sorted({t for t, _ in self.positions}))
        except (OSError, ConnectionError, TimeoutError, ClusterError):
            pass

    def _decode(self, tp: TopicPartition, data: bytes | memoryview, aborted_list: list[dict[str, int]]) -> None:
        position = self.positions[tp]
        aborted = sorted((a["first_offset"], a["producer_id"]) for a in aborted_list) if self.read_committed else []
        aborting: set[int] = set()
        mv = memoryview(data)
        for header in iter_batches(mv):
            if header.next_offset <= position:
                continue
            start = header.position
            end = start + header.size
            while aborted and aborted[0][0] <= header.last_offset:
                aborting.add(aborted.pop(0)[1])
            if header.is_control:
                if header.producer_id in aborting:
                    payload = mv[start + RECORD_BATCH_OVERHEAD:end]
                    for r in iter_records(header, payload):
                        if control_record_type(r.key) == 0:  # ABORT marker
                            aborting.discard(header.producer_id)
                position = header.next_offset
                continue
            if header.is_transactional and header.producer_id in aborting:
                position = header.next_offset
                continue
            payload = mv[start + RECORD_BATCH_OVERHEAD:end]
            if header.compression:
                payload = memoryview(decompress(header.compression, payload, max(self.max_bytes, 64 << 20)))
            for r in iter_records(header, payload):
                if r.offset < position:
                    continue
                self._buffer.append(ConsumerRecord(tp[0], tp[1], r.offset, r.timestamp, header.timestamp_type,
                                                   r.key, r.value, r.headers))
            position = header.next_offset
        self.positions[tp] = position
