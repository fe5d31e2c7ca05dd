"""Options and offset arithmetic of the data source, without Spark or a broker."""

from __future__ import annotations

import pytest

from odradek.spark.offsets import OffsetRange, rate_limit, split_ranges
from odradek.spark.options import (
    OdradekOptionError,
    check_batch,
    check_stream,
    parse_read_options,
    parse_write_options,
)

BOOT = {"kafka.bootstrap.servers": "localhost:9092"}


def test_defaults_and_kafka_params() -> None:
    opts = parse_read_options({**BOOT, "subscribe": "a, b", "kafka.client.id": "x"})
    assert opts.subscribe == ("a", "b")
    assert opts.fail_on_data_loss and not opts.include_headers
    assert opts.client_config() == {"bootstrap.servers": "localhost:9092", "client.id": "x"}


def test_json_offsets_and_assign() -> None:
    opts = parse_read_options(
        {**BOOT, "assign": '{"t": [0, 1]}', "startingOffsets": '{"t": {"0": 5, "1": -2}}'}
    )
    assert opts.assign == (("t", 0), ("t", 1))
    assert opts.starting is not None and opts.starting.as_dict == {("t", 0): 5, ("t", 1): -2}
    with pytest.raises(OdradekOptionError, match="'endingOffsets': value -2"):
        parse_read_options({**BOOT, "subscribe": "t", "endingOffsets": '{"t": {"0": -2}}'})
    with pytest.raises(OdradekOptionError, match="not in option 'assign'"):
        parse_read_options({**BOOT, "assign": '{"t": [0]}', "startingOffsets": '{"t": {"1": 0}}'})


def test_mode_checks() -> None:
    with pytest.raises(OdradekOptionError, match="only applies to streaming"):
        check_batch(parse_read_options({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "5"}))
    with pytest.raises(OdradekOptionError, match="does not apply to streaming"):
        check_stream(parse_read_options({**BOOT, "subscribe": "t", "endingOffsets": "latest"}))


def test_write_options() -> None:
    assert parse_write_options({**BOOT, "topic": "out"}).client_config()["acks"] == "all"
    assert parse_write_options({**BOOT, "kafka.acks": "1"}).client_config()["acks"] == "1"
    with pytest.raises(OdradekOptionError, match="kafka.bootstrap.servers' is required"):
        parse_write_options({"topic": "x"})


def test_split_ranges_by_min_partitions() -> None:
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 0, 10), OffsetRange("t", 2, 5, 5)]
    assert split_ranges(ranges, None) == ranges[:2]
    parts = split_ranges(ranges, 10)
    assert len(parts) >= 10
    assert sum(r.size for r in parts) == 1010
    p0 = sorted((r.from_offset, r.until_offset) for r in parts if r.partition == 0)
    assert p0[0][0] == 0 and p0[-1][1] == 1000
    assert all(a[1] == b[0] for a, b in zip(p0, p0[1:], strict=False))


def test_rate_limit_is_proportional_and_always_advances() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    latest = {("t", 0): 900, ("t", 1): 100, ("t", 2): 100}
    assert rate_limit(100, start, latest) == {("t", 0): 90, ("t", 1): 10, ("t", 2): 100}
    assert rate_limit(5000, start, latest) == latest
    tiny = rate_limit(1, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 1})
    assert tiny[("t", 1)] == 1  # a share below one record still moves


def test_reader_option_picks_the_executor_read_path() -> None:
    assert parse_read_options({**BOOT, "subscribe": "t"}).reader == "odradek"
    opts = parse_read_options({**BOOT, "subscribe": "t", "odradek.reader": "librdkafka"})
    assert opts.reader == "librdkafka"
    # Settings only librdkafka honours switch the default over; insisting on ours is an error.
    for key, value in (
        ("kafka.security.protocol", "SASL_SSL"),
        ("kafka.isolation.level", "read_committed"),
        ("kafka.ssl.ca.location", "/tmp/ca.pem"),
    ):
        assert parse_read_options({**BOOT, "subscribe": "t", key: value}).reader == "librdkafka"
        with pytest.raises(OdradekOptionError, match="needs the librdkafka reader"):
            parse_read_options({**BOOT, "subscribe": "t", key: value, "odradek.reader": "odradek"})
    with pytest.raises(OdradekOptionError, match="'odradek.reader' must be"):
        parse_read_options({**BOOT, "subscribe": "t", "odradek.reader": "java"})
    with pytest.raises(OdradekOptionError, match="only applies to reading"):
        parse_write_options({**BOOT, "topic": "t", "odradek.reader": "odradek"})


def test_java_consumer_only_keys() -> None:
    """kafka.max.poll.records (a spark-sql-kafka habit) is accepted and not handed to librdkafka;
    a key librdkafka does not know is refused when the source loads, naming the option."""
    from odradek.spark.source import _check_client_config

    opts = parse_read_options({**BOOT, "subscribe": "t", "kafka.max.poll.records": "500"})
    assert opts.client_config() == {"bootstrap.servers": "localhost:9092"}
    wopts = parse_write_options({**BOOT, "topic": "t", "kafka.MAX.POLL.RECORDS": "500"})
    assert "max.poll.records" not in {k.lower() for k in wopts.client_config()}
    bad = parse_read_options({**BOOT, "subscribe": "t", "kafka.default.api.timeout.ms": "1000"})
    with pytest.raises(OdradekOptionError, match="option 'kafka.default.api.timeout.ms' is not accepted"):
        _check_client_config(bad.client_config(), consumer=True)
