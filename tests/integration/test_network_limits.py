"""The broker's socket limits from its configuration: max.connections.per.ip (and overrides),
connections.max.idle.ms, and queued.max.request.bytes under real producers."""

from __future__ import annotations

import itertools
import logging
import socket
import threading

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.embedded import EmbeddedBroker

from .support import RawConnection, metadata


def _connect_from(broker: EmbeddedBroker, source: str) -> RawConnection:
    conn = RawConnection.__new__(RawConnection)
    conn.sock = socket.create_connection(
        ("127.0.0.1", broker.port), timeout=10, source_address=(source, 0)
    )
    conn._correlation = itertools.count(1)
    return conn


def test_connection_limits_and_idle_close_from_config() -> None:
    overrides = {
        "max.connections.per.ip": "1",
        "max.connections.per.ip.overrides": "127.0.0.2:2",
        "connections.max.idle.ms": "1000",
    }
    with EmbeddedBroker(overrides) as broker:
        first = RawConnection.to(broker)
        assert metadata(first)["brokers"]
        second = RawConnection.to(broker)
        assert second.is_closed_by_peer(5)  # 127.0.0.1 already has its one connection
        others = [_connect_from(broker, "127.0.0.2") for _ in range(3)]
        assert metadata(others[0])["brokers"] and metadata(others[1])["brokers"]
        assert others[2].is_closed_by_peer(5)  # the override allows 127.0.0.2 two
        # Left idle for connections.max.idle.ms, the first connection is closed by the broker.
        assert first.is_closed_by_peer(5)
        # Its slot is free again (once the broker has seen the close).
        third = None
        for _ in range(50):
            conn = RawConnection.to(broker)
            if not conn.is_closed_by_peer(0.2):
                conn.sock.settimeout(10)
                third = conn
                break
            conn.close()
        assert third is not None and metadata(third)["brokers"]
        for conn in [first, second, third, *others]:
            conn.close()


def test_producers_under_a_small_queued_max_request_bytes(
    topic_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two producers sending ~1 MB requests through a 300 kB request pool: the broker pauses and
    resumes reading, and every record arrives."""
    per_producer = 3000
    value = b"v" * 1000
    caplog.set_level(logging.WARNING, logger="odradek.network.limits")
    with EmbeddedBroker({"queued.max.request.bytes": "300000"}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)
        errors: list[str] = []

        def produce(partition: int) -> None:
            p = Producer({
                "bootstrap.servers": broker.bootstrap_servers,
                "linger.ms": 50,
                "batch.size": 1000000,
                "compression.type": "none",
            })
            for i in range(per_producer):
                p.produce(
                    topic_name, value, key=b"%d" % i, partition=partition,
                    on_delivery=lambda err, _msg: errors.append(str(err)) if err else None,
                )
                p.poll(0)
            assert p.flush(60) == 0

        threads = [threading.Thread(target=produce, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        assert errors == []
        c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": topic_name})
        try:
            for partition in range(2):
                low, high = c.get_watermark_offsets(TopicPartition(topic_name, partition), 10)
                assert (low, high) == (0, per_producer)
        finally:
            c.close()
    assert "queued.max.request.bytes=300000 reached" in caplog.text  # the pool did fill up
