"""The sans-I/O pieces of ``odradek produce`` / ``consume`` / ``perf``: Kafka's partitioner hash,
line reader, message formatter, range assignor and perf-test lines."""

from __future__ import annotations

import io
import re

import pytest

from odradek.cli.client_tools import ToolFailure, decode_bytes, encode_bytes
from odradek.cli.console_consumer import DefaultFormatter, JsonFormatter, parse_timestamp
from odradek.cli.console_producer import JsonReader, LineReader
from odradek.cli.main import main
from odradek.cli.perf import ProducerStats, java_date
from odradek.clients.config import ConfigError, parse_kv_args
from odradek.clients.consumer import ConsumerRecord
from odradek.clients.group import range_assign
from odradek.clients.producer import murmur2, partition_for_key


def test_murmur2_matches_kafka_utils_test_vectors() -> None:
    # Kafka's UtilsTest.testMurmur2
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}
    for data, expected in cases.items():
        assert murmur2(data) == expected, data
    assert partition_for_key(b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7


def test_line_reader_keys_headers_null_marker() -> None:
    r = LineReader({"parse.key": "true", "parse.headers": "true", "null.marker": "NULL"})
    rec = r.parse("h1:v1,h2:NULL\tk\tvalue\twith tab")
    assert rec.key == b"k" and rec.value == b"value\twith tab"
    assert rec.headers == [("h1", b"v1"), ("h2", None)]
    rec = r.parse("NULL\tNULL\tNULL")
    assert rec.key is None and rec.value is None and rec.headers == []
    with pytest.raises(ToolFailure, match=r"No key separator found on line number 3: 'h:v\tno-key'"):
        r.parse("h:v\tno-key")
    with pytest.raises(ToolFailure, match="No header key separator found in pair 'bad' on line number 4"):
        r.parse("bad\tk\tv")
    with pytest.raises(ToolFailure, match="null.marker and key.separator may not be equal"):
        LineReader({"null.marker": "\t"})
    custom = LineReader({"parse.key": "true", "key.separator": "::"})
    assert (custom.parse("a::b::c").key, custom.parse("a::b::c").value) == (b"a", b"b::c")
    assert LineReader({"parse.key": "true", "ignore.error": "true"}).parse("plain").value == b"plain"


def test_json_reader() -> None:
    r = JsonReader("text")
    rec = r.parse('{"key": "k", "value": "v", "headers": {"a": "1", "b": null}, "partition": 2, "timestamp": 5}')
    assert rec is not None
    assert (rec.key, rec.value, rec.headers, rec.partition, rec.timestamp) == (b"k", b"v", [("a", b"1"), ("b", None)], 2, 5)
    assert r.parse("   ") is None
    b64 = JsonReader("base64").parse('{"value": "AAH/", "headers": [["x", "AA=="], ["x", "AQ=="]]}')
    assert b64 is not None and b64.value == b"\x00\x01\xff" and b64.headers == [("x", b"\x00"), ("x", b"\x01")]
    for bad, msg in (("{nope", "line number 3"), ('{"value": 1}', "value must be a string"),
                     ('{"valu": "x"}', "unknown field"), ('{"partition": -1}', "partition must be")):
        with pytest.raises(ToolFailure, match=msg):
            r.parse(bad)
    with pytest.raises(ValueError, match="not valid hex"):
        decode_bytes("zz", "hex", "value")


def test_default_formatter_matches_kafka() -> None:
    rec = ConsumerRecord("t", 1, 7, 1000, 0, b"k", b"v", [("h1", b"x"), ("h2", None)])
    f = DefaultFormatter({"print.key": "true", "print.timestamp": "true", "print.partition": "true",
                          "print.offset": "true", "print.headers": "true"})
    assert f.format(rec) == b"CreateTime:1000\tPartition:1\tOffset:7\th1:x,h2:null\tk\tv\n"
    f = DefaultFormatter({"print.key": "true", "key.separator": " => ", "line.separator": "\\n--\\n"})
    assert f.format(ConsumerRecord("t", 0, 0, 5, 1, None, b"v")) == b"null => v\n--\n"
    # print.value=false: a separator after each field but the last, no line separator (Kafka's)
    f = DefaultFormatter({"print.key": "true", "print.offset": "true", "print.value": "false"})
    assert f.format(rec) == b"Offset:7\tk"
    assert DefaultFormatter({"print.headers": "true"}).format(ConsumerRecord("t", 0, 0, 5, 0, None, b"v")) == b"NO_HEADERS\tv\n"


def test_json_formatter_binary() -> None:
    rec = ConsumerRecord("t", 0, 3, 9, 1, b"\xff\x00", "é".encode(), [("h", b"\x01")])
    line = JsonFormatter("text").format(rec).decode()
    assert '"key": "/wA="' in line and '"keyEncoding": "base64"' in line and '"value": "é"' in line
    assert '"timestampType": "LogAppendTime"' in line
    assert '"key": "ff00"' in JsonFormatter("hex").format(rec).decode()
    assert encode_bytes(None, "hex") is None


def test_parse_timestamp() -> None:
    assert parse_timestamp("1700000000000") == 1700000000000
    assert parse_timestamp("2023-11-14T22:13:20Z") == 1700000000000
    assert parse_timestamp("2023-11-14T23:13:20+01:00") == 1700000000000
    assert parse_timestamp("2023-11-14T22:13:20") == 1700000000000  # UTC without an offset
    with pytest.raises(Exception, match="neither milliseconds"):
        parse_timestamp("yesterday")


def test_range_assignor() -> None:
    plan = range_assign({"m2": ["a", "b"], "m1": ["a"], "m3": ["b"]}, {"a": 3, "b": 1})
    assert plan == {"m1": {"a": [0, 1]}, "m2": {"a": [2], "b": [0]}, "m3": {}}


def test_client_config_refuses_what_the_clients_do_not_do() -> None:
    from odradek.clients.config import PRODUCER_DEFAULTS, ClientConfig

    for props, msg in (({"enable.idempotence": "true"}, "not idempotent"),
                       ({"transactional.id": "x"}, "not transactional"),
                       ({"security.protocol": "TLS"}, "Invalid value TLS for configuration security.protocol"),
                       ({"security.protocol": "SASL_SSL"}, r"sasl.mechanism=GSSAPI \(Kerberos\) is not supported")):
        with pytest.raises(ConfigError, match=msg):
            ClientConfig(PRODUCER_DEFAULTS, props)
    warn = io.StringIO()
    config = ClientConfig(PRODUCER_DEFAULTS, {"linger.ms": "7", "no.such": "1"}, warn=warn)
    assert config.int("linger.ms") == 7
    assert warn.getvalue() == "WARN The configuration 'no.such' was supplied but isn't a known config.\n"
    with pytest.raises(ConfigError, match="Invalid value x for configuration batch.size"):
        ClientConfig(PRODUCER_DEFAULTS, {"batch.size": "x"}).int("batch.size")


def test_kv_args() -> None:
    assert parse_kv_args(["a=b", "c=d=e"]) == {"a": "b", "c": "d=e"}
    with pytest.raises(ConfigError, match="Invalid command line properties: acks"):
        parse_kv_args(["acks"])


def test_producer_stats_lines_have_kafkas_format() -> None:
    out = io.StringIO()
    stats = ProducerStats(10, 10**9, out)
    for i in range(10):
        stats.record(i, 100, 0)
    stats.print_window()
    stats.print_total()
    window, total = out.getvalue().splitlines()
    assert re.fullmatch(r"10 records sent, [0-9.]+ records/sec \([0-9.]+ MB/sec\), 4\.5 ms avg latency, 9\.0 ms max latency\.", window)
    assert re.fullmatch(r"10 records sent, [0-9.]+ records/sec \([0-9.]+ MB/sec\), 4\.50 ms avg latency, "
                        r"9\.00 ms max latency, 5 ms 50th, 9 ms 95th, 9 ms 99th, 9 ms 99\.9th\.", total)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}", java_date("yyyy-MM-dd HH:mm:ss:SSS", 1_700_000_000_123))


@pytest.mark.parametrize("argv, message", [
    (["consume", "--bootstrap-server", "h:1"], "Exactly one of --include/--topic is required."),
    (["consume", "--bootstrap-server", "h:1", "--topic", "t", "--include", "x"], "Exactly one of --include/--topic"),
    (["consume", "--bootstrap-server", "h:1", "--topic", "t", "--offset", "5"], "The partition is required when offset is specified."),
    (["consume", "--bootstrap-server", "h:1", "--include", "t", "--partition", "0"], "The topic is required when partition is specified."),
    (["consume", "--bootstrap-server", "h:1", "--topic", "t", "--partition", "0", "--offset", "1", "--from-beginning"],
     "Options from-beginning and offset cannot be specified together."),
    (["consume", "--bootstrap-server", "h:1", "--topic", "t", "--partition", "0", "--group", "g"],
     "Options group and partition cannot be specified together."),
    (["consume", "--bootstrap-server", "h:1", "--topic", "t", "--partition", "0", "--offset", "x"],
     "The provided offset value 'x' is incorrect."),
    (["consume", "--bootstrap-server", "h:1", "--topic", "t", "--from-timestamp", "1", "--from-beginning"],
     "Option from-timestamp cannot be specified with offset or from-beginning."),
    (["perf", "produce", "--topic", "t", "--num-records", "0", "--record-size", "1", "--throughput", "-1"],
     "--num-records should be greater than zero"),
    (["perf", "produce", "--topic", "t", "--num-records", "5", "--throughput", "-1", "--producer-props", "a=b"],
     "exactly one of --record-size, --payload-file or --payload-monotonic is required"),
    (["produce", "--topic", "t"], "the following arguments are required: --bootstrap-server"),
])
def test_bad_flags_exit_2_with_kafkas_message(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
