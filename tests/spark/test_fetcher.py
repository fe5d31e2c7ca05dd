"""The executors' own fetch path (``odradek.reader=odradek``) against an embedded broker."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from odradek.embedded import EmbeddedBroker
from odradek.spark.arrow_decode import decode_records
from odradek.spark.fetcher import (
    FetchedRecords,
    PartitionFetcher,
    UnsupportedBrokerError,
    parse_bootstrap,
)

from .support import create_topic, produce


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def read_all(
    fetcher: PartitionFetcher, start: int, until: int, losses: list[str] | None = None
) -> tuple[list[int], list[bytes | None], list[FetchedRecords]]:
    offsets: list[int] = []
    values: list[bytes | None] = []
    chunks: list[FetchedRecords] = []
    lost = losses if losses is not None else []
    for chunk in fetcher.read_range(start, until, lost.append, timeout_s=10):
        chunks.append(chunk)
        decoded = decode_records(chunk.records, chunk.start, chunk.until, scan=chunk.scan)
        offsets += decoded.offsets.tolist()
        values += decoded.values.to_pylist()
    return offsets, values, chunks


def test_parse_bootstrap() -> None:
    assert parse_bootstrap("a:1, PLAINTEXT://b:2,[::1]:3") == [("a", 1), ("b", 2), ("::1", 3)]
    with pytest.raises(ValueError):
        parse_bootstrap(" , ")


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_reads_exactly_the_range_over_many_fetches(
    broker: EmbeddedBroker, topic: str, compression: str
) -> None:
    create_topic(broker.bootstrap_servers, topic, 2)
    produce(
        broker.bootstrap_servers,
        topic,
        ({"value": f"v{i}".encode() * 20, "partition": 1} for i in range(20_000)),
    )
    # Small fetches: several round trips (each batch is larger than partition_max_bytes, so
    # the limit grows to it), each next one sent before the previous is decoded.
    fetcher = PartitionFetcher(
        broker.bootstrap_servers, topic, 1, partition_max_bytes=64 * 1024
    )
    with fetcher:
        assert fetcher.watermarks() == (0, 20_000)
        offsets, values, chunks = read_all(fetcher, 123, 19_000)
    assert offsets == list(range(123, 19_000))
    assert values == [f"v{i}".encode() * 20 for i in range(123, 19_000)]
    assert len(chunks) >= 2  # batches of ~1 MB here: one per fetch
    # Partition 0 is empty: an empty range reads nothing; past the end is data loss.
    losses: list[str] = []
    with PartitionFetcher(broker.bootstrap_servers, topic, 0) as empty:
        assert read_all(empty, 0, 5, losses)[0] == []
    assert len(losses) == 1 and "ends at offset 0" in losses[0]


def test_a_batch_larger_than_partition_max_bytes_is_still_read(
    broker: EmbeddedBroker, topic: str
) -> None:
    create_topic(broker.bootstrap_servers, topic, 1)
    produce(broker.bootstrap_servers, topic, [{"value": b"x" * 200_000}])
    with PartitionFetcher(broker.bootstrap_servers, topic, 0, partition_max_bytes=1000) as f:
        offsets, values, _ = read_all(f, 0, 1)
    assert offsets == [0] and values == [b"x" * 200_000]


def test_deleted_records_and_missing_topics_are_data_loss(
    broker: EmbeddedBroker, topic: str
) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    create_topic(broker.bootstrap_servers, topic, 1)
    produce(broker.bootstrap_servers, topic, ({"value": str(i).encode()} for i in range(100)))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for future in admin.delete_records([TopicPartition(topic, 0, 40)]).values():
        future.result(30)
    losses: list[str] = []
    with PartitionFetcher(broker.bootstrap_servers, topic, 0) as f:
        offsets, _, _ = read_all(f, 10, 60, losses)
    assert offsets == list(range(40, 60))
    assert losses == [
        f"Records 10 to 39 of {topic}-0 are no longer available (the log now starts at 40): "
        "they were deleted by retention or DeleteRecords, or the topic was recreated."
    ]

    # OFFSET_OUT_OF_RANGE in the middle of a read: the records went after the first look.
    fetcher = PartitionFetcher(broker.bootstrap_servers, topic, 0)
    real = fetcher.watermarks
    stale = iter([(0, 100)])
    fetcher.watermarks = lambda: next(stale, None) or real()  # type: ignore[method-assign]
    losses = []
    with fetcher:
        offsets, _, _ = read_all(fetcher, 20, 50, losses)
    assert offsets == list(range(40, 50))
    assert len(losses) == 1 and "from offset 20 are no longer available" in losses[0]

    losses = []
    with PartitionFetcher(broker.bootstrap_servers, f"{topic}-nope", 0, retries=1) as f:
        assert read_all(f, 0, 10, losses)[0] == []
    assert len(losses) == 1 and "no longer exists" in losses[0]


def test_a_broker_closing_on_our_request_version_gives_a_clear_error() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def serve() -> None:
        for _ in range(2):
            conn, _ = server.accept()
            conn.recv(4096)  # the request, then hang up like Kafka on an unknown version
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with PartitionFetcher(f"127.0.0.1:{port}", "t", 0) as f:
            with pytest.raises(UnsupportedBrokerError, match=r"Metadata v9.*odradek.reader=librdkafka"):
                f.watermarks()
    finally:
        server.close()
