"""Options of the ``odradek`` data source: the names and meanings of spark-sql-kafka's.

Everything here is pure: a case-insensitive mapping of strings goes in, a frozen, picklable
:class:`ReadOptions` / :class:`WriteOptions` comes out, or :class:`OdradekOptionError` naming the
option. Nothing talks to a broker.

Offsets in JSON use spark-sql-kafka's conventions: ``{"topic": {"0": 23, "1": -2}}`` with ``-2``
for earliest and ``-1`` for latest; ``assign`` is ``{"topic": [0, 1]}``.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]

# Options of the source and the sink, lower-cased (Spark hands options over case-insensitively).
SOURCE_OPTIONS = {
    "assign",
    "subscribe",
    "subscribepattern",
    "startingoffsets",
    "endingoffsets",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestampstrategy",
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "minpartitions",
    "failondataloss",
    "includeheaders",
    "kafkaconsumer.polltimeoutms",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    "groupidprefix",
    "odradek.reader",
}
SINK_OPTIONS = {"topic", "includeheaders"}
# Set by Spark itself on some code paths (DataFrameReader.load(path), DataStreamWriter).
SPARK_OPTIONS = {"path", "checkpointlocation", "queryname"}

# Canonical spelling, for messages.
CANONICAL = {
    name.lower(): name
    for name in (
        "kafka.bootstrap.servers assign subscribe subscribePattern startingOffsets endingOffsets "
        "startingOffsetsByTimestamp endingOffsetsByTimestamp startingTimestamp endingTimestamp "
        "startingOffsetsByTimestampStrategy maxOffsetsPerTrigger minOffsetsPerTrigger "
        "maxTriggerDelay minPartitions failOnDataLoss includeHeaders kafkaConsumer.pollTimeoutMs "
        "fetchOffset.numRetries fetchOffset.retryIntervalMs groupIdPrefix odradek.reader topic path "
        "checkpointLocation queryName"
    ).split()
}

# kafka.* keys that spark-sql-kafka refuses, with the reason it gives.
SOURCE_REFUSED_KAFKA_KEYS = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "key.deserializer": "keys are always read as bytes; use DataFrame operations to deserialize",
    "value.deserializer": "values are always read as bytes; use DataFrame operations to deserialize",
    "enable.auto.commit": "offsets are tracked by Spark's checkpoint, not committed to Kafka",
    "interceptor.classes": "not supported by the Python data source",
}
# kafka.* keys of the Java consumer that spark-sql-kafka jobs commonly set and that mean nothing
# here: accepted (so such a job runs unchanged) and not handed to librdkafka (which, depending
# on its version, would refuse them). max.poll.records caps one poll() of the Java consumer;
# Spark's batch sizes come from maxOffsetsPerTrigger and the planned offset ranges.
IGNORED_KAFKA_KEYS = frozenset({"max.poll.records"})
SINK_REFUSED_KAFKA_KEYS = {
    "key.serializer": "keys are always written as bytes; serialize the 'key' column yourself",
    "value.serializer": "values are always written as bytes; serialize the 'value' column yourself",
    "interceptor.classes": "not supported by the Python data source",
}


class OdradekOptionError(ValueError):
    """An invalid, unknown or contradictory option; the message names it."""


def _canon(key: str) -> str:
    return CANONICAL.get(key.lower(), key)


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _parse_bool(opts: dict[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OdradekOptionError(
            f"option '{_canon(key)}' must be 'true' or 'false', got {raw!r}"
        )
    return value == "true"


def _parse_positive_int(opts: dict[str, str], key: str, *, minimum: int = 1) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise OdradekOptionError(
            f"option '{_canon(key)}' must be an integer, got {raw!r}"
        ) from None
    if value < minimum:
        raise OdradekOptionError(
            f"option '{_canon(key)}' must be at least {minimum}, got {value}"
        )
    return value


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _parse_duration_ms(opts: dict[str, str], key: str, default: int) -> int:
    raw = opts.get(key)
    if raw is None:
        return default
    match = _DURATION.match(raw)
    if match is None:
        raise OdradekOptionError(
            f"option '{_canon(key)}' must be a duration such as '15m', '30s' or '500ms', got {raw!r}"
        )
    return int(match.group(1)) * _DURATION_MS[(match.group(2) or "ms").lower()]


def _json(opts: dict[str, str], key: str) -> Any:
    raw = opts[key]
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise OdradekOptionError(f"option '{_canon(key)}' is not valid JSON ({e}): {raw!r}") from None


def _partition_number(key: str, topic: str, raw: Any) -> int:
    try:
        number = int(raw)
    except (TypeError, ValueError):
        raise OdradekOptionError(
            f"option '{_canon(key)}': partition {raw!r} of topic {topic!r} is not an integer"
        ) from None
    if number < 0:
        raise OdradekOptionError(
            f"option '{_canon(key)}': partition {number} of topic {topic!r} is negative"
        )
    return number


def parse_partition_longs(
    opts: dict[str, str], key: str, *, allowed_negative: tuple[int, ...] = ()
) -> dict[TopicPartition, int]:
    """``{"topic": {"0": 23}}`` -> ``{("topic", 0): 23}``, checking every value."""
    data = _json(opts, key)
    if not isinstance(data, dict) or not data:
        raise OdradekOptionError(
            f"option '{_canon(key)}' must be a non-empty JSON object "
            f'like {{"topicA": {{"0": 23, "1": -1}}}}, got {opts[key]!r}'
        )
    out: dict[TopicPartition, int] = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, dict):
            raise OdradekOptionError(
                f"option '{_canon(key)}': the value for topic {topic!r} must be an object "
                f"of partition -> value, got {partitions!r}"
            )
        for p, value in partitions.items():
            number = _partition_number(key, topic, p)
            if isinstance(value, bool) or not isinstance(value, int):
                raise OdradekOptionError(
                    f"option '{_canon(key)}': value {value!r} for {topic}-{number} is not an integer"
                )
            if value < 0 and value not in allowed_negative:
                allowed = " or ".join(
                    f"{v} ({'earliest' if v == EARLIEST else 'latest'})" for v in allowed_negative
                )
                extra = f"; only {allowed} may be negative" if allowed else ""
                raise OdradekOptionError(
                    f"option '{_canon(key)}': value {value} for {topic}-{number} is not allowed{extra}"
                )
            out[(topic, number)] = value
    return out


@dataclass(frozen=True)
class OffsetSpec:
    """Where a range starts or ends: ``kind`` is earliest, latest, offsets or timestamps.

    ``offsets`` holds per-partition offsets (``-2``/``-1`` allowed) for ``kind == "offsets"``, or
    per-partition timestamps for ``kind == "timestamps"``; ``timestamp`` is a global timestamp
    (``kind == "timestamp"``).
    """

    kind: str
    offsets: tuple[tuple[TopicPartition, int], ...] = ()
    timestamp: int | None = None

    @property
    def as_dict(self) -> dict[TopicPartition, int]:
        return dict(self.offsets)


@dataclass(frozen=True)
class ReadOptions:
    bootstrap_servers: str
    kafka_params: tuple[tuple[str, str], ...]
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartition, ...] | None = None
    starting: OffsetSpec | None = None  # None: mode default (earliest batch, latest stream)
    ending: OffsetSpec | None = None  # None: latest (batch); never set for streams
    timestamp_strategy: str = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10
    group_id_prefix: str = "spark-kafka-source"
    ending_given_by: str | None = field(default=None)
    # Executors' read path: "odradek" (our fetch path, Arrow decoding) or "librdkafka".
    reader: str = "odradek"

    def client_config(self) -> dict[str, str]:
        """librdkafka configuration: bootstrap servers plus every ``kafka.*`` option."""
        conf = {"bootstrap.servers": self.bootstrap_servers}
        conf.update(dict(self.kafka_params))
        return conf

    def topic_matches(self, topic: str) -> bool:
        if self.subscribe is not None:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        return self.assign is not None and any(t == topic for t, _ in self.assign)

    def describe_subscription(self) -> str:
        if self.subscribe is not None:
            return f"subscribe={','.join(self.subscribe)}"
        if self.subscribe_pattern is not None:
            return f"subscribePattern={self.subscribe_pattern}"
        return f"assign={sorted(self.assign or ())}"


@dataclass(frozen=True)
class WriteOptions:
    bootstrap_servers: str
    kafka_params: tuple[tuple[str, str], ...]
    topic: str | None = None

    def client_config(self) -> dict[str, str]:
        conf = {"bootstrap.servers": self.bootstrap_servers, "acks": "all"}
        conf.update(dict(self.kafka_params))
        return conf


def check_known(options: Mapping[str, str]) -> None:
    """Fail on any option that is neither a source, sink, Spark nor ``kafka.*`` option."""
    known = SOURCE_OPTIONS | SINK_OPTIONS | SPARK_OPTIONS
    for key in options:
        low = str(key).lower()
        if low.startswith("kafka."):
            if low == "kafka.":
                raise OdradekOptionError("option 'kafka.' names no Kafka client property")
            continue
        if low in known:
            continue
        candidates = sorted(CANONICAL.values())
        close = difflib.get_close_matches(_canon(str(key)), candidates, n=1, cutoff=0.6)
        if not close:
            close = difflib.get_close_matches(low, [c.lower() for c in candidates], n=1)
            close = [_canon(c) for c in close]
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise OdradekOptionError(f"unknown option '{key}'{hint}")


def _kafka_params(opts: dict[str, str], original: Mapping[str, str], *, sink: bool) -> tuple[
    str, tuple[tuple[str, str], ...]
]:
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise OdradekOptionError(
            "option 'kafka.bootstrap.servers' is required, e.g. "
            '.option("kafka.bootstrap.servers", "localhost:9092")'
        )
    params: list[tuple[str, str]] = []
    for key, value in original.items():
        low = str(key).lower()
        if not low.startswith("kafka.") or low == "kafka.bootstrap.servers":
            continue
        prop = str(key)[len("kafka.") :]
        refused = SINK_REFUSED_KAFKA_KEYS if sink else SOURCE_REFUSED_KAFKA_KEYS
        reason = refused.get(prop.lower())
        if reason is not None:
            raise OdradekOptionError(f"option '{key}' is not supported: {reason}")
        if prop.lower() in IGNORED_KAFKA_KEYS:
            continue
        params.append((prop, str(value)))
    return bootstrap, tuple(params)


def _offset_spec(
    opts: dict[str, str], *, ending: bool
) -> tuple[OffsetSpec | None, str | None]:
    """The one starting (or ending) position given, and the option that gave it."""
    prefix = "ending" if ending else "starting"
    names = [f"{prefix}offsets", f"{prefix}offsetsbytimestamp", f"{prefix}timestamp"]
    given = [n for n in names if n in opts]
    if len(given) > 1:
        raise OdradekOptionError(
            "contradictory options: "
            + " and ".join(f"'{_canon(n)}'" for n in given)
            + " both say where to "
            + ("stop" if ending else "start")
            + "; set only one"
        )
    if not given:
        return None, None
    key = given[0]
    raw = opts[key].strip()
    if key.endswith("bytimestamp"):
        per = parse_partition_longs(opts, key)
        return OffsetSpec("timestamps", offsets=tuple(sorted(per.items()))), key
    if key.endswith("timestamp"):  # startingTimestamp / endingTimestamp
        try:
            ts = int(raw)
        except ValueError:
            raise OdradekOptionError(
                f"option '{_canon(key)}' must be a timestamp in milliseconds, got {raw!r}"
            ) from None
        if ts < 0:
            raise OdradekOptionError(f"option '{_canon(key)}' must not be negative, got {ts}")
        return OffsetSpec("timestamp", timestamp=ts), key
    low = raw.lower()
    if low == "earliest":
        if ending:
            raise OdradekOptionError(
                "option 'endingOffsets' cannot be 'earliest'; use 'latest' or JSON offsets"
            )
        return OffsetSpec("earliest"), key
    if low == "latest":
        return OffsetSpec("latest"), key
    if not raw.startswith("{"):
        raise OdradekOptionError(
            f"option '{_canon(key)}' must be 'earliest', 'latest' or JSON offsets per "
            f'partition like {{"topicA": {{"0": 23}}}}, got {raw!r}'
        )
    allowed = (LATEST,) if ending else (EARLIEST, LATEST)
    per = parse_partition_longs(opts, key, allowed_negative=allowed)
    return OffsetSpec("offsets", offsets=tuple(sorted(per.items()))), key


def parse_read_options(options: Mapping[str, str]) -> ReadOptions:
    check_known(options)
    opts = _lower(options)
    bootstrap, params = _kafka_params(opts, options, sink=False)

    strategies = [k for k in ("assign", "subscribe", "subscribepattern") if k in opts]
    if not strategies:
        raise OdradekOptionError(
            "one of the options 'subscribe', 'subscribePattern' or 'assign' is required "
            "to say which topics to read"
        )
    if len(strategies) > 1:
        raise OdradekOptionError(
            "contradictory options: "
            + " and ".join(f"'{_canon(s)}'" for s in strategies)
            + "; set only one of 'subscribe', 'subscribePattern' and 'assign'"
        )
    subscribe = pattern = None
    assign: tuple[TopicPartition, ...] | None = None
    kind = strategies[0]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise OdradekOptionError("option 'subscribe' names no topic")
        subscribe = topics
    elif kind == "subscribepattern":
        pattern = opts["subscribepattern"].strip()
        if not pattern:
            raise OdradekOptionError("option 'subscribePattern' is empty")
        try:
            re.compile(pattern)
        except re.error as e:
            raise OdradekOptionError(
                f"option 'subscribePattern' is not a valid regular expression ({e}): {pattern!r}"
            ) from None
    else:
        data = _json(opts, "assign")
        if not isinstance(data, dict) or not data:
            raise OdradekOptionError(
                'option \'assign\' must be a JSON object like {"topicA": [0, 1]}, '
                f"got {opts['assign']!r}"
            )
        tps: list[TopicPartition] = []
        for topic, parts in data.items():
            if not isinstance(parts, list) or not parts:
                raise OdradekOptionError(
                    f"option 'assign': topic {topic!r} needs a non-empty list of partitions"
                )
            tps.extend((topic, _partition_number("assign", topic, p)) for p in parts)
        assign = tuple(sorted(set(tps)))

    starting, _ = _offset_spec(opts, ending=False)
    ending, ending_key = _offset_spec(opts, ending=True)

    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OdradekOptionError(
            "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"got {opts['startingoffsetsbytimestampstrategy']!r}"
        )

    max_per = _parse_positive_int(opts, "maxoffsetspertrigger")
    min_per = _parse_positive_int(opts, "minoffsetspertrigger")
    if max_per is not None and min_per is not None and min_per > max_per:
        raise OdradekOptionError(
            f"contradictory options: 'minOffsetsPerTrigger' ({min_per}) is greater than "
            f"'maxOffsetsPerTrigger' ({max_per})"
        )
    if "maxtriggerdelay" in opts and min_per is None:
        raise OdradekOptionError(
            "option 'maxTriggerDelay' only has a meaning with 'minOffsetsPerTrigger'"
        )

    out = ReadOptions(
        bootstrap_servers=bootstrap,
        kafka_params=params,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,
        max_offsets_per_trigger=max_per,
        min_offsets_per_trigger=min_per,
        max_trigger_delay_ms=_parse_duration_ms(opts, "maxtriggerdelay", 15 * 60 * 1000),
        min_partitions=_parse_positive_int(opts, "minpartitions"),
        fail_on_data_loss=_parse_bool(opts, "failondataloss", True),
        include_headers=_parse_bool(opts, "includeheaders", False),
        poll_timeout_ms=_parse_positive_int(opts, "kafkaconsumer.polltimeoutms") or 120_000,
        fetch_offset_retries=_parse_positive_int(opts, "fetchoffset.numretries", minimum=0) or 3,
        fetch_offset_retry_interval_ms=_parse_positive_int(
            opts, "fetchoffset.retryintervalms", minimum=0
        )
        or 10,
        group_id_prefix=opts.get("groupidprefix", "spark-kafka-source"),
        ending_given_by=ending_key,
        reader=_reader(opts, params),
    )
    _check_offsets_against_topics(out)
    return out


READERS = ("odradek", "librdkafka")
# kafka.* properties the odradek reader cannot honour (it speaks PLAINTEXT, read_uncommitted):
# with them the librdkafka reader is used, unless 'odradek.reader' insists on ours.
_SECURITY_PREFIXES = ("sasl.", "ssl.")


def _needs_librdkafka(params: tuple[tuple[str, str], ...]) -> str | None:
    for key, value in params:
        low = key.lower()
        if low == "security.protocol" and value.strip().lower() != "plaintext":
            return f"kafka.{key}={value}"
        if low.startswith(_SECURITY_PREFIXES):
            return f"kafka.{key}"
        if low == "isolation.level" and value.strip().lower() == "read_committed":
            return f"kafka.{key}={value}"
    return None


def _reader(opts: dict[str, str], params: tuple[tuple[str, str], ...]) -> str:
    """Which client the executors read with (option 'odradek.reader')."""
    raw = opts.get("odradek.reader")
    needs = _needs_librdkafka(params)
    if raw is None:
        return "librdkafka" if needs else "odradek"
    value = raw.strip().lower()
    if value not in READERS:
        raise OdradekOptionError(
            f"option 'odradek.reader' must be 'odradek' or 'librdkafka', got {raw!r}"
        )
    if value == "odradek" and needs:
        raise OdradekOptionError(
            f"option 'odradek.reader' is 'odradek' but {needs} needs the librdkafka reader "
            "(the odradek reader speaks PLAINTEXT and reads uncommitted records); set it to "
            "'librdkafka' or leave it out"
        )
    return value


def _check_offsets_against_topics(opts: ReadOptions) -> None:
    for spec, name in ((opts.starting, "starting"), (opts.ending, "ending")):
        if spec is None or spec.kind not in ("offsets", "timestamps"):
            continue
        key = f"{name}Offsets" if spec.kind == "offsets" else f"{name}OffsetsByTimestamp"
        for (topic, partition), _ in spec.offsets:
            if not opts.topic_matches(topic):
                raise OdradekOptionError(
                    f"option '{key}' names {topic}-{partition}, which is not read by "
                    f"{opts.describe_subscription()}"
                )
            if opts.assign is not None and (topic, partition) not in opts.assign:
                raise OdradekOptionError(
                    f"option '{key}' names {topic}-{partition}, which is not in option 'assign'"
                )


def check_batch(opts: ReadOptions) -> None:
    """Checks that only make sense once we know the query is a batch query."""
    if opts.starting is not None:
        if opts.starting.kind == "latest":
            raise OdradekOptionError(
                "option 'startingOffsets' cannot be 'latest' for a batch query "
                "(the range would be empty); use 'earliest' or JSON offsets"
            )
        if opts.starting.kind == "offsets" and LATEST in opts.starting.as_dict.values():
            raise OdradekOptionError(
                "option 'startingOffsets' cannot use -1 (latest) for a batch query"
            )
    for name, value in (
        ("maxOffsetsPerTrigger", opts.max_offsets_per_trigger),
        ("minOffsetsPerTrigger", opts.min_offsets_per_trigger),
    ):
        if value is not None:
            raise OdradekOptionError(f"option '{name}' only applies to streaming queries")


def check_stream(opts: ReadOptions) -> None:
    if opts.ending is not None:
        raise OdradekOptionError(
            f"option '{_canon(opts.ending_given_by or 'endingOffsets')}' does not apply to "
            "streaming queries (a stream has no end)"
        )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    check_known(options)
    opts = _lower(options)
    bootstrap, params = _kafka_params(opts, options, sink=True)
    source_only = sorted(k for k in opts if k in SOURCE_OPTIONS - SINK_OPTIONS)
    if source_only:
        raise OdradekOptionError(
            f"option '{_canon(source_only[0])}' only applies to reading, not to writing"
        )
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise OdradekOptionError("option 'topic' is empty")
    return WriteOptions(
        bootstrap_servers=bootstrap,
        kafka_params=params,
        topic=topic.strip() if topic is not None else None,
    )
