"""kcat (librdkafka's command-line client) against Odradek.

kcat has no admin commands: topics come from auto-creation on produce (or from another client),
``-L`` lists them, ``-Q`` queries offsets by time. kcat cannot set a record's timestamp on
produce, so timestamps are checked against the time of the produce run instead.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.embedded import EmbeddedBroker
from odradek.records.batch import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    iter_batches,
)

from .support import CODECS, REQUIRES_KCAT, Rec, check_exactly_once

pytestmark = [
    pytest.mark.integration,
    REQUIRES_KCAT,
]

FORMAT = "%p\t%o\t%K\t%k\t%s\t%h\t%T\n"


def kcat(bootstrap: str, *args: str, stdin: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run(
        ["kcat", "-b", bootstrap, *args], input=stdin, capture_output=True, timeout=120
    )
    if check:
        assert result.returncode == 0, f"kcat {' '.join(args)} exited {result.returncode}: {result.stderr.decode()}"
    return result


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions)])[name].result(30)


def parse_headers(text: str) -> tuple[tuple[str, bytes | None], ...]:
    if not text:
        return ()
    out: list[tuple[str, bytes | None]] = []
    for item in text.split(","):
        key, _, value = item.partition("=")
        out.append((key, None if value == "NULL" else value.encode()))
    return tuple(out)


def consume_all(bootstrap: str, topic: str, *extra: str) -> list[Rec]:
    result = kcat(bootstrap, "-C", "-t", topic, "-e", "-q", "-f", FORMAT, *extra)
    out: list[Rec] = []
    for line in result.stdout.decode().splitlines():
        part, offset, key_len, key, value, headers, ts = line.split("\t")
        out.append(
            Rec(
                int(part),
                None if int(key_len) < 0 else key.encode(),
                value.encode(),
                parse_headers(headers),
                int(ts),
                offset=int(offset),
            )
        )
    return out


def produce_partition(
    bootstrap: str, topic: str, partition: int, records: Sequence[Rec], headers: Sequence[str], *extra: str
) -> None:
    lines = b"".join((r.key or b"") + b"\t" + r.value + b"\n" for r in records)
    args = ["-P", "-t", topic, "-p", str(partition), "-K", "\t"]
    for h in headers:
        args += ["-H", h]
    kcat(bootstrap, *args, *extra, stdin=lines)


def kcat_records(n: int, partitions: int, tag: str) -> tuple[list[Rec], dict[int, list[str]]]:
    """Records kcat can express: headers are per invocation (one per partition here)."""
    headers_by_part = {p: [f"part={p}", f"tag={tag}", "empty=", "nul"] for p in range(partitions)}
    header_tuples: dict[int, tuple[tuple[str, bytes | None], ...]] = {
        p: (("part", str(p).encode()), ("tag", tag.encode()), ("empty", b""), ("nul", None))
        for p in range(partitions)
    }
    records = [
        Rec(
            i % partitions,
            b"" if i % 13 == 0 else f"key-{i}".encode(),
            f"{tag}|{i:08d}|{'v' * (i % 50)}".encode(),
            header_tuples[i % partitions],
            -1,
        )
        for i in range(n)
    ]
    return records, headers_by_part


def produce_and_check(bootstrap: str, topic: str, partitions: int, n: int, *extra: str) -> None:
    records, headers = kcat_records(n, partitions, topic)
    before = int(time.time() * 1000)
    for p in range(partitions):
        produce_partition(bootstrap, topic, p, [r for r in records if r.partition == p], headers[p], *extra)
    after = int(time.time() * 1000)
    received = consume_all(bootstrap, topic)
    late = [r for r in received if not before - 1000 <= r.timestamp <= after + 1000]
    assert not late, f"{len(late)} timestamps outside the produce run, e.g. {late[:3]}"
    # kcat's timestamps are the producer's clock; compare everything else
    stamped = {r.value: r.timestamp for r in received}
    check_exactly_once(
        [Rec(r.partition, r.key, r.value, r.headers, stamped.get(r.value, -1)) for r in records], received
    )


# ---- topics -----------------------------------------------------------------------------------


def test_list_and_auto_create(broker: EmbeddedBroker, topic_name: str) -> None:
    bootstrap = broker.bootstrap_servers
    kcat(bootstrap, "-P", "-t", topic_name, stdin=b"hello\n")  # auto-created, num.partitions=1
    create_topic(bootstrap, f"{topic_name}-three", 3)

    listing = json.loads(kcat(bootstrap, "-L", "-J").stdout)
    assert listing["brokers"] == [{"id": 1, "name": bootstrap}]
    assert listing["controllerid"] == 1
    topics = {t["topic"]: t for t in listing["topics"]}
    assert len(topics[topic_name]["partitions"]) == 1
    three = topics[f"{topic_name}-three"]["partitions"]
    assert sorted(p["partition"] for p in three) == [0, 1, 2]
    assert all(p["leader"] == 1 and p["isrs"] == [{"id": 1}] for p in three)

    (one,) = json.loads(kcat(bootstrap, "-L", "-J", "-t", f"{topic_name}-three").stdout)["topics"]
    assert one["topic"] == f"{topic_name}-three" and len(one["partitions"]) == 3


def test_produce_to_invalid_topic(broker: EmbeddedBroker) -> None:
    result = kcat(broker.bootstrap_servers, "-P", "-t", "not a topic!", stdin=b"x\n", check=False)
    assert result.returncode != 0
    assert b"Invalid topic" in result.stderr, result.stderr


def test_produce_to_unknown_partition(broker: EmbeddedBroker, topic_name: str) -> None:
    create_topic(broker.bootstrap_servers, topic_name, 2)
    result = kcat(
        broker.bootstrap_servers, "-P", "-t", topic_name, "-p", "7", stdin=b"x\n", check=False
    )
    assert result.returncode != 0
    assert b"Unknown partition" in result.stderr or b"Unknown topic or partition" in result.stderr, result.stderr


# ---- produce / consume ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume(broker: EmbeddedBroker, topic_name: str, codec: str) -> None:
    create_topic(broker.bootstrap_servers, topic_name, 3)
    produce_and_check(broker.bootstrap_servers, topic_name, 3, 3_000, "-z", codec)


STORED_CODEC = {"gzip": COMPRESSION_GZIP, "snappy": COMPRESSION_SNAPPY, "lz4": COMPRESSION_LZ4, "zstd": COMPRESSION_ZSTD}


@pytest.mark.parametrize("codec", sorted(STORED_CODEC))
def test_produced_batches_are_stored_compressed(broker: EmbeddedBroker, topic_name: str, codec: str) -> None:
    """librdkafka before 2.11.1 (Debian 12's kcat has 2.0.2) compresses with gzip, snappy or lz4
    only if the broker's advertised Produce range reaches v0 (KAFKA-18659); otherwise it logs
    "Broker does not support compression type" and sends the batch uncompressed."""
    create_topic(broker.bootstrap_servers, topic_name, 1)
    lines = b"".join(b"compressible-record-%05d-%s\n" % (i, b"x" * 64) for i in range(200))
    result = kcat(broker.bootstrap_servers, "-P", "-t", topic_name, "-p", "0", "-z", codec, stdin=lines)
    assert b"does not support compression" not in result.stderr, result.stderr.decode()
    seen: list[int] = []
    directory = Path(broker.log_dir) / f"{topic_name}-0"
    for segment in sorted(directory.glob("*.log")):
        seen.extend(h.compression for h in iter_batches(segment.read_bytes()))
    assert seen, f"no batches stored in {directory}"
    assert set(seen) == {STORED_CODEC[codec]}, f"{codec}: stored codecs {seen}"
    assert len(consume_all(broker.bootstrap_servers, topic_name)) == 200


def test_json_envelope(broker: EmbeddedBroker, topic_name: str) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic_name, 1)
    kcat(bootstrap, "-P", "-t", topic_name, "-K", "=", "-H", "a=1", "-H", "b", stdin=b"k=v\n=empty-key\n")
    lines = kcat(bootstrap, "-C", "-t", topic_name, "-e", "-q", "-J").stdout.decode().splitlines()
    got = [json.loads(line) for line in lines]
    assert [(g["offset"], g["key"], g["payload"], g["headers"]) for g in got] == [
        (0, "k", "v", ["a", "1", "b", None]),
        (1, "", "empty-key", ["a", "1", "b", None]),
    ]
    assert all(g["tstype"] == "create" and g["broker"] == 1 for g in got)


# ---- offsets ----------------------------------------------------------------------------------


def query_offset(bootstrap: str, topic: str, partition: int, timestamp: int) -> int:
    out = kcat(bootstrap, "-Q", "-t", f"{topic}:{partition}:{timestamp}").stdout.decode().strip()
    # "<topic> [<partition>] offset <n>"
    prefix = f"{topic} [{partition}] offset "
    assert out.startswith(prefix), out
    return int(out[len(prefix):])


def test_offsets(broker: EmbeddedBroker, topic_name: str) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic_name, 1)
    kcat(bootstrap, "-P", "-t", topic_name, stdin=b"".join(b"first-%d\n" % i for i in range(10)))
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    kcat(bootstrap, "-P", "-t", topic_name, stdin=b"".join(b"second-%d\n" % i for i in range(10)))

    assert query_offset(bootstrap, topic_name, 0, -2) == 0  # earliest
    assert query_offset(bootstrap, topic_name, 0, -1) == 20  # latest
    assert query_offset(bootstrap, topic_name, 0, middle) == 10  # by time
    assert query_offset(bootstrap, topic_name, 0, 0) == 0
    assert query_offset(bootstrap, topic_name, 0, middle + 3_600_000) == -1  # none that late

    from_time = consume_all(bootstrap, topic_name, "-o", f"s@{middle}")
    assert [r.value for r in from_time] == [b"second-%d" % i for i in range(10)]
    tail = consume_all(bootstrap, topic_name, "-o", "-3")
    assert [r.offset for r in tail] == [17, 18, 19]


def test_long_poll_consumer_wakes(broker: EmbeddedBroker, topic_name: str) -> None:
    """kcat waiting at the end of an empty partition gets a record produced a second later."""
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic_name, 1)
    consumer = subprocess.Popen(
        ["kcat", "-b", bootstrap, "-C", "-t", topic_name, "-p", "0", "-o", "beginning", "-c", "1",
         "-q", "-f", "%s\n", "-X", "fetch.wait.max.ms=5000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        started = time.monotonic()
        time.sleep(1.0)
        assert consumer.poll() is None
        produced_at = time.monotonic()
        kcat(bootstrap, "-P", "-t", topic_name, "-p", "0", stdin=b"wake up\n")
        out, err = consumer.communicate(timeout=15)
        arrived = time.monotonic()
        assert out == b"wake up\n", err
        # kcat's own start-up and the producer process are inside these margins
        assert arrived - started < 4.0, f"record arrived {arrived - started:.2f}s after kcat started"
        assert arrived - produced_at < 3.0, f"record arrived {arrived - produced_at:.2f}s after produce"
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
