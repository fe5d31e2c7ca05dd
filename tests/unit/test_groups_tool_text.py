"""The text helpers of ``odradek groups``: Java's HashMap order, Duration.parse, Jackson's CSV quoting."""

from __future__ import annotations

import pytest

from odradek.cli.groups import assignment_text, csv_text, parse_duration_ms, parse_topic_arg
from odradek.java_order import java_hash_order, java_string_hash, java_topic_partition_hash


def test_java_string_hash_and_hashmap_order() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -2147483648  # wraps to Integer.MIN_VALUE
    # kafka-consumer-groups.sh --list printed these three in this order (a HashMap's).
    assert java_hash_order(["g1", "k848", "live"], java_string_hash) == ["k848", "g1", "live"]
    assert java_topic_partition_hash(("t", 0)) == 31 * 31 + java_string_hash("t")
    keys = [f"group-{i}" for i in range(40)]  # more than 12 keys: a 64-bucket table
    assert sorted(java_hash_order(keys, java_string_hash)) == sorted(keys)


def test_duration_parse_as_java() -> None:
    assert parse_duration_ms("PT1H") == 3_600_000
    assert parse_duration_ms("P1DT2H3M4.5S") == ((24 + 2) * 60 + 3) * 60_000 + 4_500
    assert parse_duration_ms("pt15m") == 900_000
    assert parse_duration_ms("-PT1S") == -1_000
    for bad in ("1h", "P", "PT", "P1H", ""):
        with pytest.raises(ValueError):
            parse_duration_ms(bad)


def test_csv_quoting_and_topic_args() -> None:
    assert csv_text("orders") == "orders"
    assert csv_text("a" * 24) == "a" * 24
    assert csv_text("a" * 25) == '"' + "a" * 25 + '"'
    assert csv_text('x,"y') == '"x,""y"'
    assert parse_topic_arg("t") == ("t", None)
    assert parse_topic_arg("t:0,2") == ("t", [0, 2])
    with pytest.raises(ValueError, match="Invalid partition 'x' specified in topic arg 't:x''"):
        parse_topic_arg("t:x")
    assert assignment_text([("b", 10), ("a", 2), ("b", 9)]) == "a:2;b:9,10"
    assert assignment_text([]) == "-"
