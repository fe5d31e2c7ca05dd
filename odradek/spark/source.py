"""``OdradekDataSource``: the ``odradek`` format for Spark's Python Data Source API.

```python
from odradek.spark import OdradekDataSource
spark.dataSource.register(OdradekDataSource)
df = (spark.readStream.format("odradek")
      .option("kafka.bootstrap.servers", "localhost:9092")
      .option("subscribe", "clicks").load())
```

Where each piece runs: ``OdradekDataSource.__init__`` / ``schema()`` run when ``load()`` or
``save()`` is called (options are checked there); the batch reader's ``partitions()`` and the
stream reader's offset methods run on the driver; ``read()`` and the writers' ``write()`` run in
executors (everything they carry is picklable: frozen option dataclasses and offset ranges).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from odradek.spark import client
from odradek.spark.offsets import (
    OffsetRange,
    PartitionOffsets,
    available,
    from_json_offsets,
    rate_limit,
    split_ranges,
    to_json_offsets,
)
from odradek.spark.options import (
    OdradekOptionError,
    ReadOptions,
    WriteOptions,
    check_batch,
    check_known,
    check_stream,
    parse_read_options,
    parse_write_options,
)

log = logging.getLogger("odradek.spark")

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def kafka_schema(include_headers: bool = False) -> StructType:
    """spark-sql-kafka's source schema."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def _arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


class OdradekInputPartition(InputPartition):
    """One offset range of one topic-partition, read by one Spark task."""

    def __init__(self, opts: ReadOptions, offset_range: OffsetRange) -> None:
        self.opts = opts
        self.range = offset_range


def _read(partition: InputPartition, schema: StructType) -> Iterator[pa.RecordBatch]:
    assert isinstance(partition, OdradekInputPartition), partition
    opts = partition.opts
    read = client.read_range if opts.reader == "librdkafka" else client.read_range_native
    yield from read(opts, partition.range, _arrow_schema(schema))


def _check_schema(schema: StructType, opts: ReadOptions) -> None:
    expected = kafka_schema(opts.include_headers)
    if [(f.name, f.dataType) for f in schema.fields] != [
        (f.name, f.dataType) for f in expected.fields
    ]:
        raise OdradekOptionError(
            "the odradek source has a fixed schema and cannot read as "
            f"{schema.simpleString()}; expected {expected.simpleString()} "
            "(set 'includeHeaders' to get the headers column)"
        )


class OdradekDataSource(DataSource):
    """Kafka topics of an Odradek (or any Kafka) cluster as a Spark source and sink."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        check_known(self.options)
        self._read_opts: ReadOptions | None = None

    @classmethod
    def name(cls) -> str:
        return "odradek"

    def read_options(self) -> ReadOptions:
        if self._read_opts is None:
            self._read_opts = parse_read_options(self.options)
            _check_client_config(self._read_opts.client_config(), consumer=True)
        return self._read_opts

    def schema(self) -> StructType:
        return kafka_schema(self.read_options().include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = self.read_options()
        check_batch(opts)
        _check_schema(schema, opts)
        return OdradekBatchReader(opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = self.read_options()
        check_stream(opts)
        _check_schema(schema, opts)
        return OdradekStreamReader(opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        opts = parse_write_options(self.options)
        _check_client_config(opts.client_config(), consumer=False)
        check_write_schema(schema, opts)
        return OdradekBatchWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        opts = parse_write_options(self.options)
        _check_client_config(opts.client_config(), consumer=False)
        check_write_schema(schema, opts)
        return OdradekStreamWriter(opts)


def _check_client_config(conf: dict[str, str], *, consumer: bool) -> None:
    """librdkafka checks property names and values when a client is created: do it at load()."""
    from confluent_kafka import KafkaException, Producer

    probe: dict[str, Any] = dict(conf)
    if consumer:
        probe.setdefault("group.id", "odradek-spark-option-check")
        from confluent_kafka import Consumer

        factory: Any = Consumer
    else:
        factory = Producer
    try:
        handle = factory(probe)
    except (KafkaException, ValueError, TypeError) as e:
        text = str(e.args[0].str() if e.args and hasattr(e.args[0], "str") else e)
        prop = text.split('"')[1] if text.count('"') >= 2 else None
        named = f"option 'kafka.{prop}'" if prop else "a 'kafka.*' option"
        raise OdradekOptionError(f"{named} is not accepted by the Kafka client: {text}") from None
    if consumer:
        handle.close()


# ---- batch read ------------------------------------------------------------------------


class OdradekBatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def plan(self) -> list[OffsetRange]:
        offsets = client.OffsetReader(self.opts)
        try:
            tps = offsets.topic_partitions()
            if not tps:
                log.warning("odradek: %s matches no partition", self.opts.describe_subscription())
                return []
            start = offsets.resolve(self.opts.starting, tps, ending=False)
            end = offsets.resolve(self.opts.ending, tps, ending=True)
        finally:
            offsets.close()
        ranges = []
        for tp in tps:
            s, e = start[tp], end[tp]
            if s > e:
                raise OdradekOptionError(
                    f"the starting offset {s} of {tp[0]}-{tp[1]} is after its ending offset {e}"
                )
            ranges.append(OffsetRange(tp[0], tp[1], s, e))
        return split_ranges(ranges, self.opts.min_partitions)

    def partitions(self) -> list[InputPartition]:
        return [OdradekInputPartition(self.opts, r) for r in self.plan()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OdradekInputPartition):  # nothing to read
            return iter(())
        return _read(partition, self.schema)


# ---- streaming read --------------------------------------------------------------------


class OdradekStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch source. Offsets are spark-sql-kafka's JSON: next offset per topic-partition.

    Exactly-once comes from Spark: it writes the end offset of each micro-batch to the
    checkpoint's offset log before running it, and a restarted query re-plans the last
    uncommitted batch from the same start and end, so every range is read exactly once.
    """

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._offsets: client.OffsetReader | None = None
        self._available_now: PartitionOffsets | None = None
        self._last_trigger = time.monotonic()

    @property
    def offsets(self) -> client.OffsetReader:
        if self._offsets is None:
            self._offsets = client.OffsetReader(self.opts)
        return self._offsets

    def initialOffset(self) -> dict:
        tps = self.offsets.topic_partitions()
        spec = self.opts.starting
        if spec is None or spec.kind == "latest":
            start = self.offsets.latest(tps)
        else:
            start = self.offsets.resolve(spec, tps, ending=False)
        return to_json_offsets(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self.offsets.latest(self.offsets.topic_partitions())

    def _current_latest(self) -> PartitionOffsets:
        if self._available_now is not None:
            return dict(self._available_now)
        return self.offsets.latest(self.offsets.topic_partitions())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_json_offsets(start)
        latest = self._current_latest()
        new = [tp for tp in latest if tp not in begin]
        if new:
            log.info("odradek: new partitions %s, read from their earliest offsets", new)
            begin.update(self.offsets.earliest(new))
        gone = [tp for tp in begin if tp not in latest]
        if gone:
            # Keep them out of the end offset; partitions() reports the loss.
            log.warning("odradek: partitions %s disappeared", gone)
        if isinstance(limit, ReadAllAvailable):
            return to_json_offsets(latest)
        minimum = self.opts.min_offsets_per_trigger
        if minimum is not None:
            waited_ms = (time.monotonic() - self._last_trigger) * 1000
            if available(begin, latest) < minimum and waited_ms < self.opts.max_trigger_delay_ms:
                return start
        end = latest
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(limit.max_rows, begin, latest)
        elif self.opts.max_offsets_per_trigger is not None:
            end = rate_limit(self.opts.max_offsets_per_trigger, begin, latest)
        self._last_trigger = time.monotonic()
        return to_json_offsets(end)

    def reportLatestOffset(self) -> dict | None:
        try:
            return to_json_offsets(self.offsets.latest(self.offsets.topic_partitions()))
        except Exception:  # noqa: BLE001 - progress reporting only
            return None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = from_json_offsets(start)
        until = from_json_offsets(end)
        fail = self.opts.fail_on_data_loss
        for tp in begin:
            if tp not in until:
                client.report_data_loss(
                    fail, f"Partition {tp[0]}-{tp[1]} was deleted (or its topic was)."
                )
        new = [tp for tp in until if tp not in begin]
        if new:
            earliest = self.offsets.earliest(new)
            for tp in new:
                if earliest.get(tp, 0) != 0:
                    client.report_data_loss(
                        fail,
                        f"Added partition {tp[0]}-{tp[1]} starts at {earliest[tp]} instead of "
                        "0: some of its records were deleted before they could be read.",
                    )
            begin.update(earliest)
        ranges = []
        for tp, until_offset in until.items():
            from_offset = begin[tp]
            if until_offset < from_offset:
                client.report_data_loss(
                    fail,
                    f"{tp[0]}-{tp[1]}'s offset went back from {from_offset} to {until_offset}: "
                    "the topic may have been deleted and recreated.",
                )
                continue
            ranges.append(OffsetRange(tp[0], tp[1], from_offset, until_offset))
        return [OdradekInputPartition(self.opts, r) for r in split_ranges(ranges, self.opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.schema)

    def commit(self, end: dict) -> None:
        # Offsets live in Spark's checkpoint; nothing is committed to Kafka.
        pass

    def stop(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None


# ---- write -----------------------------------------------------------------------------


def _is_text_or_binary(t: DataType) -> bool:
    return isinstance(t, StringType | BinaryType)


def check_write_schema(schema: StructType, opts: WriteOptions) -> None:
    """spark-sql-kafka's sink rules, checked before anything is written."""
    fields = {f.name.lower(): f for f in schema.fields}
    if "value" not in fields:
        raise OdradekOptionError(
            "the odradek sink needs a 'value' column (string or binary); the data has "
            f"{schema.simpleString()}"
        )
    for name in ("key", "value"):
        f = fields.get(name)
        if f is not None and not _is_text_or_binary(f.dataType):
            raise OdradekOptionError(
                f"column '{f.name}' must be string or binary, not {f.dataType.simpleString()}; "
                f"cast it (e.g. to_json(...) or CAST({f.name} AS STRING))"
            )
    topic = fields.get("topic")
    if topic is None and opts.topic is None:
        raise OdradekOptionError(
            "no topic to write to: add a 'topic' column or set the option 'topic'"
        )
    if topic is not None and not isinstance(topic.dataType, StringType):
        raise OdradekOptionError(
            f"column 'topic' must be a string, not {topic.dataType.simpleString()}"
        )
    partition = fields.get("partition")
    if partition is not None and not isinstance(partition.dataType, IntegerType):
        raise OdradekOptionError(
            f"column 'partition' must be an int, not {partition.dataType.simpleString()}"
        )
    headers = fields.get("headers")
    if headers is not None and headers.dataType != HEADERS_TYPE:
        raise OdradekOptionError(
            "column 'headers' must be array<struct<key:string,value:binary>>, not "
            f"{headers.dataType.simpleString()}"
        )


@dataclass
class WriteCommit(WriterCommitMessage):
    records: int


class OdradekBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteCommit:
        return WriteCommit(client.write_batches(self.opts, _lowercase_names(iterator)))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.records for m in messages if isinstance(m, WriteCommit))
        log.info("odradek: wrote %d records", total)


class OdradekStreamWriter(DataSourceStreamArrowWriter):
    """At-least-once, like spark-sql-kafka's sink: a replayed micro-batch is produced again."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> WriteCommit:
        batches = _as_batches(iterator)
        return WriteCommit(client.write_batches(self.opts, _lowercase_names(batches)))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.records for m in messages if isinstance(m, WriteCommit))
        log.info("odradek: micro-batch %d wrote %d records", batchId, total)


def _as_batches(iterator: Iterator[Any]) -> Iterator[pa.RecordBatch]:
    """Rows (DataSourceStreamWriter) or Arrow batches (DataSourceStreamArrowWriter) -> batches."""
    rows: list[Any] = []
    for item in iterator:
        if isinstance(item, pa.RecordBatch):
            yield item
            continue
        rows.append(item.asDict(recursive=True))
        if len(rows) >= client.BATCH_ROWS:
            yield pa.RecordBatch.from_pylist(rows)
            rows = []
    if rows:
        yield pa.RecordBatch.from_pylist(rows)


def _lowercase_names(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield batch.rename_columns([n.lower() for n in batch.schema.names])
