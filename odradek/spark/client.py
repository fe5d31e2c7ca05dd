"""Kafka I/O of the data source, on librdkafka (confluent-kafka).

- :class:`OffsetReader` (driver): which topic-partitions a subscription covers, and their
  earliest / latest / by-timestamp offsets, through the AdminClient. It never uses a consumer
  group: Spark's checkpoint owns the offsets.
- :func:`read_range` (executor): one offset range of one partition, as Arrow record batches in
  spark-sql-kafka's schema. A consumer with manual assignment, ``auto.offset.reset=error`` so
  that missing records are noticed, and ``failOnDataLoss`` applied.
- :func:`write_batches` (executor): Arrow record batches of rows to produce, acks=all by default;
  any delivery error fails the task.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from odradek.spark.offsets import OffsetRange, PartitionOffsets
from odradek.spark.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    ReadOptions,
    TopicPartition,
    WriteOptions,
)

log = logging.getLogger("odradek.spark")

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__cluster_metadata"})

# Rows per Arrow batch handed to Spark; consume() is asked for this many messages at a time.
BATCH_ROWS = 20_000
# Rows per Arrow batch from the odradek reader (a fetch response is decoded at once, then cut
# into zero-copy slices).
# Measured: local[2] Spark reads 20k-row batches about twice as fast as 200k-row ones.
NATIVE_BATCH_ROWS = 20_000

DATA_LOSS_HINT = (
    'If you want your query to go on in such cases, set the source option "failOnDataLoss" '
    'to "false" (the lost records are then skipped with a warning).'
)


class OdradekDataLossError(RuntimeError):
    """Records the query should read are gone (retention, DeleteRecords, a recreated topic)."""


def report_data_loss(fail: bool, message: str) -> None:
    """Raise :class:`OdradekDataLossError` when ``failOnDataLoss`` is true, else log a warning."""
    if fail:
        raise OdradekDataLossError(f"{message} {DATA_LOSS_HINT}")
    log.warning("%s Some data may have been lost; going on because failOnDataLoss=false.", message)


def _client_config(opts: ReadOptions) -> dict[str, Any]:
    conf: dict[str, Any] = opts.client_config()
    conf.setdefault("isolation.level", "read_uncommitted")  # the Java client's default
    return conf


def _admin_config(opts: ReadOptions) -> dict[str, Any]:
    # The admin handle is a producer-type handle: leave the consumer-only properties out, or
    # librdkafka logs a warning for each.
    from confluent_kafka.admin import AdminClient  # noqa: F401 - fail early if missing

    conf = opts.client_config()
    for key in ("isolation.level", "group.id", "fetch.queue.backoff.ms", "fetch.wait.max.ms"):
        conf.pop(key, None)
    return conf


class OffsetReader:
    """Driver-side metadata and offset look-ups for a subscription."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._admin: Any = None

    @property
    def admin(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(_admin_config(self.opts))
        return self._admin

    def close(self) -> None:
        self._admin = None

    def _timeout(self) -> float:
        return max(10.0, self.opts.poll_timeout_ms / 1000 / 4)

    def topic_partitions(self) -> list[TopicPartition]:
        """Current partitions of the subscribed topics (assign: the assigned ones)."""
        metadata = self._retry("list topics", lambda: self.admin.list_topics(timeout=self._timeout()))
        present: dict[str, int] = {}
        for name, topic in metadata.topics.items():
            if topic.error is not None and not topic.partitions:
                continue
            present[name] = len(topic.partitions)
        opts = self.opts
        if opts.assign is not None:
            missing = [
                f"{t}-{p}" for t, p in opts.assign if t not in present or p >= present[t]
            ]
            if missing:
                raise ValueError(
                    f"option 'assign' names partitions that do not exist: {', '.join(missing)}"
                )
            return list(opts.assign)
        topics = [
            t for t in present if t not in INTERNAL_TOPICS and opts.topic_matches(t)
        ]
        return sorted((t, p) for t in topics for p in range(present[t]))

    def _retry(self, what: str, call: Any) -> Any:
        attempts = self.opts.fetch_offset_retries + 1
        for attempt in range(attempts):
            try:
                return call()
            except Exception as e:  # noqa: BLE001 - retried, then re-raised
                if attempt + 1 >= attempts:
                    raise RuntimeError(
                        f"odradek data source: could not {what} from "
                        f"{self.opts.bootstrap_servers} after {attempts} attempts: {e}"
                    ) from e
                time.sleep(self.opts.fetch_offset_retry_interval_ms / 1000)
        raise AssertionError("unreachable")

    def list_offsets(self, specs: Mapping[TopicPartition, Any]) -> PartitionOffsets:
        """``specs``: topic-partition -> confluent OffsetSpec. Returns the offsets found."""
        if not specs:
            return {}
        from confluent_kafka import IsolationLevel
        from confluent_kafka import TopicPartition as CkTp

        level = (
            IsolationLevel.READ_COMMITTED
            if dict(self.opts.kafka_params).get("isolation.level") == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )

        def call() -> PartitionOffsets:
            request = {CkTp(t, p): spec for (t, p), spec in specs.items()}
            futures = self.admin.list_offsets(
                request, isolation_level=level, request_timeout=self._timeout()
            )
            return {
                (tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()
            }

        result: PartitionOffsets = self._retry("list offsets", call)
        return result

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        from confluent_kafka.admin import OffsetSpec as CkSpec

        return self.list_offsets({tp: CkSpec.earliest() for tp in tps})

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        from confluent_kafka.admin import OffsetSpec as CkSpec

        return self.list_offsets({tp: CkSpec.latest() for tp in tps})

    def by_timestamp(self, timestamps: Mapping[TopicPartition, int]) -> PartitionOffsets:
        """Offset of the first record with timestamp >= T; -1 where there is none."""
        from confluent_kafka.admin import OffsetSpec as CkSpec

        return self.list_offsets({tp: CkSpec.for_timestamp(ts) for tp, ts in timestamps.items()})

    def resolve(
        self, spec: OffsetSpec | None, tps: list[TopicPartition], *, ending: bool
    ) -> PartitionOffsets:
        """Concrete offsets for ``tps`` from a starting (or ending) option."""
        option = "endingOffsets" if ending else "startingOffsets"
        if spec is None:
            return self.latest(tps) if ending else self.earliest(tps)
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind == "offsets":
            given = spec.as_dict
            self._require_all(option, given, tps)
            out = {tp: given[tp] for tp in tps}
            earliest = self.earliest([tp for tp, o in out.items() if o == EARLIEST])
            latest = self.latest([tp for tp, o in out.items() if o == LATEST])
            out.update(earliest)
            out.update(latest)
            return out
        if spec.kind == "timestamps":
            option += "ByTimestamp"
            given = spec.as_dict
            self._require_all(option, given, tps)
            timestamps = {tp: given[tp] for tp in tps}
        else:
            option = "endingTimestamp" if ending else "startingTimestamp"
            assert spec.timestamp is not None
            timestamps = {tp: spec.timestamp for tp in tps}
        found = self.by_timestamp(timestamps)
        missing = [tp for tp, o in found.items() if o < 0]
        if missing:
            if not ending and self.opts.timestamp_strategy == "error":
                names = ", ".join(f"{t}-{p} (>= {timestamps[(t, p)]})" for t, p in missing)
                raise ValueError(
                    f"option '{option}': no record at or after the timestamp in {names}; "
                    "set 'startingOffsetsByTimestampStrategy' to 'latest' to start these "
                    "partitions at their latest offset instead"
                )
            found.update(self.latest(missing))
        return found

    @staticmethod
    def _require_all(
        option: str, given: Mapping[TopicPartition, int], tps: list[TopicPartition]
    ) -> None:
        absent = [f"{t}-{p}" for t, p in tps if (t, p) not in given]
        if absent:
            raise ValueError(
                f"option '{option}' gives specific offsets, so it must name every partition "
                f"read; it lacks {', '.join(absent)} (use -2 for earliest, -1 for latest)"
            )


# ---- executor: reading -----------------------------------------------------------------


def _consumer(opts: ReadOptions) -> Any:
    from confluent_kafka import Consumer

    conf = _client_config(opts)
    conf.setdefault("group.id", f"{opts.group_id_prefix}-{uuid.uuid4()}-executor")
    conf.update(
        {
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
        }
    )
    # librdkafka >= 2.4 pauses fetching for fetch.queue.backoff.ms (1 s) whenever its queue
    # holds queued.min.messages; a fast reader drains that long before.
    conf.setdefault("fetch.queue.backoff.ms", 10)
    return Consumer(conf)


def _timestamp_type(kind: int) -> int:
    # confluent: 1 = CreateTime, 2 = LogAppendTime, 0 = none; Kafka/Spark: 0, 1, -1.
    return kind - 1


def _to_batch(
    messages: list[Any],
    topic: str,
    partition: int,
    schema: pa.Schema,
    include_headers: bool,
) -> pa.RecordBatch:
    import numpy as np
    from confluent_kafka import Message

    n = len(messages)
    # map() over the unbound C methods and numpy for the (type, ms) pairs: about 4x faster
    # than per-field list comprehensions.
    keys = pa.array(list(map(Message.key, messages)), pa.binary())
    values = pa.array(list(map(Message.value, messages)), pa.binary())
    first = messages[0].offset()
    last = messages[-1].offset()
    if last - first + 1 == n:  # contiguous: no per-record offsets needed
        offsets = pa.array(np.arange(first, last + 1, dtype=np.int64))
    else:
        offsets = pa.array(list(map(Message.offset, messages)), pa.int64())
    stamps = np.array(list(map(Message.timestamp, messages)), dtype=np.int64).reshape(n, 2)
    timestamps = pa.array(stamps[:, 1] * 1000).cast(schema.field("timestamp").type)
    kinds = stamps[:, 0]
    if (kinds == kinds[0]).all():
        ts_types = pa.repeat(pa.scalar(_timestamp_type(int(kinds[0])), pa.int32()), n)
    else:
        ts_types = pa.array((kinds - 1).astype(np.int32))
    columns = [
        keys,
        values,
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        offsets,
        timestamps,
        ts_types,
    ]
    if include_headers:
        header_type = schema.field("headers").type
        columns.append(
            pa.array(
                [
                    [{"key": k, "value": v} for k, v in h] if (h := m.headers()) else []
                    for m in messages
                ],
                header_type,
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_range(
    opts: ReadOptions, offset_range: OffsetRange, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Records ``[from, until)`` of one partition as Arrow batches (``schema`` is Spark's)."""
    from confluent_kafka import OFFSET_END, KafkaError, KafkaException
    from confluent_kafka import TopicPartition as CkTp

    topic, partition = offset_range.topic, offset_range.partition
    start, until = offset_range.from_offset, offset_range.until_offset
    if start >= until:
        return
    name = f"{topic}-{partition}"
    consumer = _consumer(opts)
    try:
        low, high = consumer.get_watermark_offsets(
            CkTp(topic, partition), timeout=opts.poll_timeout_ms / 1000, cached=False
        )
        if start < low:
            report_data_loss(
                opts.fail_on_data_loss,
                f"Records {start} to {min(low, until) - 1} of {name} are no longer available "
                f"(the log now starts at {low}): they were deleted by retention or "
                "DeleteRecords, or the topic was recreated.",
            )
            start = low
        if high < until:
            report_data_loss(
                opts.fail_on_data_loss,
                f"{name} ends at offset {high} but the query expected records up to "
                f"{until - 1}: the topic may have been deleted and recreated.",
            )
            until = high
        if start >= until:
            return
        consumer.assign([CkTp(topic, partition, start)])
        deadline_s = opts.poll_timeout_ms / 1000
        last_progress = time.monotonic()
        include_headers = opts.include_headers
        while True:
            want = min(BATCH_ROWS, until - start)
            messages = consumer.consume(num_messages=want, timeout=1.0)
            if not messages:
                if time.monotonic() - last_progress > deadline_s:
                    raise TimeoutError(
                        f"odradek data source: no record of {name} at offset {start} within "
                        f"kafkaConsumer.pollTimeoutMs={opts.poll_timeout_ms}"
                    )
                continue
            last_progress = time.monotonic()
            done = False
            good = messages
            if any(m.error() is not None for m in messages):
                good = []
                for m in messages:
                    err = m.error()
                    if err is None:
                        good.append(m)
                        continue
                    if err.code() == KafkaError._PARTITION_EOF:
                        if m.offset() >= until or m.offset() == OFFSET_END:
                            done = True
                        else:
                            # The log ends before the range does: it was truncated.
                            _, now_high = consumer.get_watermark_offsets(
                                CkTp(topic, partition), timeout=10, cached=False
                            )
                            if now_high < until:
                                report_data_loss(
                                    opts.fail_on_data_loss,
                                    f"{name} now ends at offset {now_high} but the query "
                                    f"expected records up to {until - 1}.",
                                )
                                until = now_high
                                done = start >= until or m.offset() >= until
                        continue
                    if err.code() in (
                        KafkaError._AUTO_OFFSET_RESET,
                        KafkaError.OFFSET_OUT_OF_RANGE,
                    ):
                        now_low, _ = consumer.get_watermark_offsets(
                            CkTp(topic, partition), timeout=10, cached=False
                        )
                        report_data_loss(
                            opts.fail_on_data_loss,
                            f"Records of {name} from offset {start} are no longer available "
                            f"(the log now starts at {now_low}).",
                        )
                        good = []
                        start = max(start, now_low)
                        if start >= until:
                            done = True
                        else:
                            consumer.assign([CkTp(topic, partition, start)])
                        break
                    raise KafkaException(err)
            if good:
                if good[-1].offset() >= until:  # trim what lies past the range
                    good = [m for m in good if m.offset() < until]
                    done = True
                if good:
                    start = good[-1].offset() + 1
                    yield _to_batch(good, topic, partition, schema, include_headers)
            if done or start >= until:
                return
    finally:
        consumer.close()


def read_range_native(
    opts: ReadOptions, offset_range: OffsetRange, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """:func:`read_range` through Odradek's own fetch path (``odradek.reader=odradek``).

    Raw record batches from :class:`~odradek.spark.fetcher.PartitionFetcher`, decoded to Arrow
    by :mod:`odradek.spark.arrow_decode` without a Python object per record.
    """
    from odradek.spark.arrow_decode import decode_records, split_batch, to_record_batch
    from odradek.spark.fetcher import PartitionFetcher

    topic, partition = offset_range.topic, offset_range.partition
    start, until = offset_range.from_offset, offset_range.until_offset
    if start >= until:
        return
    include_headers = opts.include_headers
    header_type = schema.field("headers").type if include_headers else None
    fail = opts.fail_on_data_loss

    def lost(message: str) -> None:
        report_data_loss(fail, message)

    fetcher = PartitionFetcher(
        opts.bootstrap_servers,
        topic,
        partition,
        client_id=dict(opts.kafka_params).get("client.id", "odradek-spark"),
    )
    with fetcher:
        for chunk in fetcher.read_range(
            start, until, lost, timeout_s=opts.poll_timeout_ms / 1000
        ):
            kwargs: dict[str, Any] = {"include_headers": include_headers, "scan": chunk.scan}
            if header_type is not None:
                kwargs["header_type"] = header_type
            decoded = decode_records(chunk.records, chunk.start, chunk.until, **kwargs)
            if decoded.count:
                batch = to_record_batch(decoded, topic, partition, schema)
                yield from split_batch(batch, NATIVE_BATCH_ROWS)


# ---- executor: writing -----------------------------------------------------------------


def write_batches(opts: WriteOptions, batches: Iterable[pa.RecordBatch]) -> int:
    """Produce every row; returns the number of records delivered. Raises on any failure."""
    from confluent_kafka import KafkaException, Producer

    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None and len(errors) < 10:
            errors.append(f"{msg.topic()}-{msg.partition()}: {err.str()}")

    conf: dict[str, Any] = opts.client_config()
    conf.setdefault("linger.ms", 5)
    conf["on_delivery"] = on_delivery
    producer = Producer(conf)
    count = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        rows = _rows_to_produce(opts, batch)
        produce = producer.produce
        for topic, key, value, partition, headers in rows:
            kwargs: dict[str, Any] = {}
            if partition is not None:
                kwargs["partition"] = partition
            if headers:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers]
            while True:
                try:
                    produce(topic, value, key, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.05)
                except KafkaException as e:
                    raise RuntimeError(f"odradek data source: cannot produce to {topic}: {e}") from e
            count += 1
            if errors:
                break
        producer.poll(0)
        if errors:
            break
    remaining = producer.flush(60)
    if errors:
        raise RuntimeError(
            "odradek data source: delivery failed for "
            f"{len(errors)}+ record(s), e.g. {errors[0]}"
        )
    if remaining:
        raise RuntimeError(
            f"odradek data source: {remaining} record(s) not delivered within 60 s "
            f"to {opts.bootstrap_servers}"
        )
    return count


def _rows_to_produce(opts: WriteOptions, batch: pa.RecordBatch) -> Iterator[tuple[Any, ...]]:
    names = batch.schema.names
    n = batch.num_rows

    def column(name: str) -> list[Any]:
        if name not in names:
            return [None] * n
        col = batch.column(names.index(name))
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            if name in ("key", "value"):
                col = col.cast(pa.binary())
        return col.to_pylist()

    if opts.topic is not None:
        topics: list[Any] = [opts.topic] * n
    else:
        topics = column("topic")
        if None in topics:
            raise ValueError(
                "odradek data source: a row has a null 'topic' and no 'topic' option is set; "
                "set the option or fill the column (nothing of this batch was written)"
            )
    values = column("value")
    return iter(zip(topics, column("key"), values, column("partition"), column("headers"), strict=True))
