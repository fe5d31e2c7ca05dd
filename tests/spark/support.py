"""Helpers of the Spark tests: topics and records through confluent-kafka."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)


def produce(
    bootstrap: str, topic: str, records: Iterable[dict[str, Any]]
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Produce records (dicts of produce() keyword arguments); returns (partition, offset, key, value)."""
    delivered: list[tuple[int, int, bytes | None, bytes | None]] = []
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "enable.idempotence": True,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for record in records:
        while True:
            try:
                producer.produce(topic, on_delivery=on_delivery, **record)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return delivered


def consume_all(bootstrap: str, topic: str, partitions: int) -> list[Any]:
    """Every record of the topic, via manual assignment (no consumer group)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "odradek-spark-tests",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[Any] = []
    eof: set[int] = set()
    try:
        while len(eof) < partitions:
            for m in consumer.consume(1000, 0.5):
                if m.error() is None:
                    out.append(m)
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                else:
                    raise AssertionError(m.error())
    finally:
        consumer.close()
    return out
