"""A producer: records are collected into a v2 batch per partition, sent when the batch is full
(``batch.size``) or ``linger.ms`` after its first record, one Produce request per leader; acks,
compression and retries of retriable errors (metadata refreshed) until ``delivery.timeout.ms``.
Keyed records go to ``murmur2(key) % partitions`` (Kafka's default partitioner), others stick to one
partition until its batch is sent (the sticky partitioner). Not idempotent, not transactional."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from odradek.clients.cluster import Cluster, ClusterError, TopicPartition
from odradek.clients.config import ClientConfig, ConfigError
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors, error_name
from odradek.records.builder import build_batch
from odradek.records.compression import CODEC_IDS

Header = tuple[str, bytes | None]

RETRIABLE = frozenset({
    Errors.NOT_LEADER_OR_FOLLOWER, Errors.LEADER_NOT_AVAILABLE, Errors.UNKNOWN_TOPIC_OR_PARTITION,
    Errors.REQUEST_TIMED_OUT, Errors.NOT_ENOUGH_REPLICAS, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    Errors.NETWORK_EXCEPTION, Errors.KAFKA_STORAGE_ERROR, Errors.CORRUPT_MESSAGE,
})


class ProduceError(Exception):
    """A record could not be delivered (the message is Kafka's exception line)."""


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (signed 32-bit result)."""
    length = len(data)
    seed = 0x9747B28C
    mm = 0x5BD1E995
    r = 24
    h = (seed ^ length) & 0xFFFFFFFF
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[i * 4: i * 4 + 4], "little")
        k = (k * mm) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * mm) & 0xFFFFFFFF
        h = (h * mm) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    tail = n4 * 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * mm) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * mm) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass
class _Batch:
    tp: TopicPartition
    created: float
    records: list[tuple[bytes | None, bytes | None, list[Header], int]] = field(default_factory=list)
    futures: list[asyncio.Future[tuple[int, int]]] = field(default_factory=list)
    size: int = 0
    attempts: int = 0


ACKS = {"all": -1, "-1": -1, "1": 1, "0": 0}


class Producer:
    def __init__(self, cluster: Cluster, config: ClientConfig) -> None:
        self.cluster = cluster
        acks = config.get("acks").strip().lower()
        if acks not in ACKS:
            raise ConfigError(f"Invalid value {acks} for configuration acks: String must be one of: all, -1, 0, 1")
        self.acks = ACKS[acks]
        codec = config.choice("compression.type", CODEC_IDS)
        self.compression = CODEC_IDS[codec]
        self.linger_s = config.int("linger.ms") / 1000
        self.batch_size = config.int("batch.size")
        self.buffer_memory = config.int("buffer.memory")
        self.max_block_ms = config.int("max.block.ms")
        self.request_timeout_ms = config.int("request.timeout.ms")
        self.delivery_timeout_s = config.int("delivery.timeout.ms") / 1000
        self.retries = config.int("retries")
        self.backoff_s = config.int("retry.backoff.ms") / 1000
        self.max_request_size = config.int("max.request.size")
        self.max_in_flight = max(1, config.int("max.in.flight.requests.per.connection"))
        self.auto_create = config.bool("allow.auto.create.topics")
        self._batches: dict[TopicPartition, _Batch] = {}
        self._sticky: dict[str, int] = {}  # keyless records: this partition until its batch goes
        self._buffered = 0
        self._room = asyncio.Event()
        self._wake = asyncio.Event()
        self._flushing = 0
        self._in_flight: set[asyncio.Task[None]] = set()
        self._node_slots: dict[int, asyncio.Semaphore] = {}
        self._sender: asyncio.Task[None] | None = None
        self._closed = False
        self.fatal: BaseException | None = None

    async def send(self, topic: str, value: bytes | None, key: bytes | None = None,
                   headers: list[Header] | None = None, partition: int | None = None,
                   timestamp: int | None = None) -> asyncio.Future[tuple[int, int]]:
        """Queue a record; the future resolves with its (partition, offset) (offset -1 with
        acks=0). Waits for metadata and for buffer room (both up to ``max.block.ms``)."""
        if self.fatal is not None:
            raise ProduceError(str(self.fatal))
        if topic not in self.cluster.topics:
            await self.cluster.wait_for_topics([topic], self.max_block_ms, self.auto_create, int(self.backoff_s * 1000))
        parts = self.cluster.topics[topic].partitions
        if partition is not None:
            if partition not in parts:
                raise ProduceError(
                    f"org.apache.kafka.common.KafkaException: Invalid partition given with record: "
                    f"{partition} is not in the range [0...{len(parts)}).")
        elif key is not None:
            partition = partition_for_key(key, len(parts))
        else:
            partition = self._sticky.setdefault(topic, parts[0]) % len(parts)
        size = 21 + (len(key) if key else 0) + (len(value) if value else 0) + sum(
            len(k) + len(v or b"") + 4 for k, v in headers or ())
        if size > self.max_request_size:
            raise ProduceError(
                f"org.apache.kafka.common.errors.RecordTooLargeException: The message is {size} bytes when "
                f"serialized which is larger than {self.max_request_size}, which is the value of the "
                "max.request.size configuration.")
        if self._buffered + size > self.buffer_memory:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.max_block_ms / 1000
            while self._buffered + size > self.buffer_memory:
                self._room.clear()
                self._wake.set()
                remaining = deadline - loop.time()
                try:
                    await asyncio.wait_for(self._room.wait(), max(remaining, 0.001))
                except TimeoutError:
                    raise ProduceError(
                        "org.apache.kafka.common.errors.TimeoutException: Failed to allocate memory "
                        f"within the configured max blocking time {self.max_block_ms} ms.") from None
        tp = (topic, partition)
        batch = self._batches.get(tp)
        now = time.monotonic()
        if batch is not None and batch.size + size > self.batch_size and batch.records:
            self._ready(tp)
            batch = None
        if batch is None:
            batch = self._batches[tp] = _Batch(tp, now)
        fut: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        ts = timestamp if timestamp is not None else int(time.time() * 1000)
        batch.records.append((key, value, list(headers or ()), ts))
        batch.futures.append(fut)
        batch.size += size
        self._buffered += size
        if batch.size >= self.batch_size:
            self._ready(tp)
        self._ensure_sender()
        return fut

    def _ensure_sender(self) -> None:
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._run_sender())

    def _ready(self, tp: TopicPartition) -> None:
        batch = self._batches.pop(tp, None)
        if self._sticky.get(tp[0]) == tp[1]:
            self._sticky[tp[0]] = (tp[1] + 1) % max(1, len(self.cluster.topics[tp[0]].leaders))
        if batch is not None:
            self._dispatch(batch)

    async def _run_sender(self) -> None:
        """Sends batches whose linger has passed (all of them while flushing)."""
        while self._batches:
            now = time.monotonic()
            due = [tp for tp, b in self._batches.items()
                   if self._flushing or self._closed or now - b.created >= self.linger_s]
            for tp in due:
                self._ready(tp)
            if not self._batches:
                break
            oldest = min(b.created for b in self._batches.values())
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), max(0.0, oldest + self.linger_s - time.monotonic()))
            except TimeoutError:
                pass

    def _dispatch(self, batch: _Batch) -> None:
        task = asyncio.get_running_loop().create_task(self._deliver(batch))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _deliver(self, batch: _Batch) -> None:
        deadline = batch.created + self.delivery_timeout_s
        error: str | None = None
        payload = build_batch(batch.records, compression=self.compression)
        while True:
            try:
                leader = self.cluster.topics[batch.tp[0]].leaders.get(batch.tp[1], -1)
                if leader < 0:
                    raise ConnectionError("no leader")
                result = await self._produce(leader, batch.tp, payload)
                if result is None:  # acks=0
                    self._complete(batch, -1, None)
                    return
                code, base_offset, message = result
                if code == Errors.NONE:
                    self._complete(batch, base_offset, None)
                    return
                error = kafka_error(code, message)
                if code not in RETRIABLE:
                    break
            except (OSError, ConnectionError, TimeoutError, KeyError) as e:
                error = f"org.apache.kafka.common.errors.NetworkException: {e}"
            batch.attempts += 1
            if batch.attempts > self.retries or time.monotonic() + self.backoff_s >= deadline:
                if time.monotonic() + self.backoff_s >= deadline:
                    error = (f"org.apache.kafka.common.errors.TimeoutException: Expiring {len(batch.records)} "
                             f"record(s) for {batch.tp[0]}-{batch.tp[1]}: {self.delivery_timeout_s * 1000:.0f} ms "
                             f"has passed since batch creation ({error})")
                break
            await asyncio.sleep(self.backoff_s)
            try:
                await self.cluster.metadata([batch.tp[0]], self.auto_create)
            except (OSError, ConnectionError, TimeoutError, ClusterError):
                pass
        self._complete(batch, -1, error or "unknown error")

    async def _produce(self, leader: int, tp: TopicPartition, payload: bytes) -> tuple[int, int, str | None] | None:
        slots = self._node_slots.setdefault(leader, asyncio.Semaphore(self.max_in_flight))
        async with slots:
            body = {
                "transactional_id": None, "acks": self.acks, "timeout_ms": self.request_timeout_ms,
                "topic_data": [{"name": tp[0], "partition_data": [{"index": tp[1], "records": payload}]}],
            }
            resp = await self.cluster.send(self.cluster.address(leader), m.PRODUCE, body)
        if self.acks == 0:
            return None
        p = resp["responses"][0]["partition_responses"][0]
        return p["error_code"], p["base_offset"], p.get("error_message")

    def _complete(self, batch: _Batch, base_offset: int, error: str | None) -> None:
        self._buffered -= batch.size
        self._room.set()
        for i, fut in enumerate(batch.futures):
            if fut.done():
                continue
            if error is not None:
                fut.set_exception(ProduceError(error))
            else:
                fut.set_result((batch.tp[1], base_offset + i if base_offset >= 0 else -1))

    async def flush(self) -> None:
        """Send everything queued and wait until every record is answered."""
        self._flushing += 1
        try:
            for tp in list(self._batches):
                self._ready(tp)
            while self._in_flight:
                await asyncio.gather(*list(self._in_flight), return_exceptions=True)
        finally:
            self._flushing -= 1

    async def close(self) -> None:
        self._closed = True
        await self.flush()
        if self._sender is not None and not self._sender.done():
            self._wake.set()
            await asyncio.gather(self._sender, return_exceptions=True)


def kafka_error(code: int, message: str | None) -> str:
    """``org.apache.kafka.common.errors.XxxException: message`` for an error code."""
    from odradek.cli.admin import kafka_exception

    return kafka_exception(code, message or error_name(code))
