"""KIP-467 with a real client: a batch refused because some of its records are invalid names
them, and librdkafka fails only those with INVALID_RECORD, the others of the batch with its own
"different record" error."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.embedded import EmbeddedBroker

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_librdkafka_fails_only_the_keyless_records_on_a_compacted_topic(
    broker: EmbeddedBroker, topic_name: str, compression: str
) -> None:
    bootstrap = broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, config={"cleanup.policy": "compact"})])[
        topic_name
    ].result(30)
    reports: dict[int, KafkaError | None] = {}
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 1000,  # one batch for all six
            "compression.type": compression,
            "enable.idempotence": False,
        }
    )

    def report(i: int) -> Any:
        return lambda err, _msg: reports.__setitem__(i, err)

    for i in range(6):
        key = None if i % 2 else b"key-%d" % i
        producer.produce(topic_name, value=b"value-%d" % i, key=key, partition=0, on_delivery=report(i))
    assert producer.flush(30) == 0
    assert sorted(reports) == list(range(6))
    codes = {i: err.code() if err is not None else None for i, err in reports.items()}
    # the keyless records: the broker's INVALID_RECORD (not retriable)
    assert [codes[i] for i in (1, 3, 5)] == [KafkaError.INVALID_RECORD] * 3
    # the keyed ones were not invalid themselves: librdkafka says so with its own error
    assert [codes[i] for i in (0, 2, 4)] == [KafkaError._INVALID_DIFFERENT_RECORD] * 3
    assert all(err is not None and not err.retriable() for err in reports.values())

    # Sent again on their own, the keyed records are stored.
    ok: list[KafkaError | None] = []
    for i in (0, 2, 4):
        producer.produce(topic_name, value=b"value-%d" % i, key=b"key-%d" % i, partition=0,
                         on_delivery=lambda err, _msg: ok.append(err))
    assert producer.flush(30) == 0
    assert ok == [None, None, None]
