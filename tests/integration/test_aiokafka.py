"""aiokafka against Odradek: AIOKafkaAdminClient, AIOKafkaProducer, AIOKafkaConsumer (assign).

No pytest-asyncio here: each test drives its own event loop with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import InvalidPartitionsError

from odradek.embedded import EmbeddedBroker

from .support import BASE_TIMESTAMP_MS, CODECS, Rec, check_exactly_once, make_records

pytestmark = pytest.mark.integration

Errors = {
    "NONE": 0,
    "UNKNOWN_TOPIC_OR_PARTITION": 3,
    "INVALID_TOPIC_EXCEPTION": 17,
    "TOPIC_ALREADY_EXISTS": 36,
    "INVALID_PARTITIONS": 37,
    "INVALID_REPLICATION_FACTOR": 38,
    "INVALID_CONFIG": 40,
}


def run(coro_fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(coro_fn(), 240))  # type: ignore[arg-type]


@asynccontextmanager
async def admin_client(bootstrap: str) -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


@asynccontextmanager
async def consumer_client(bootstrap: str, **config: Any) -> AsyncIterator[AIOKafkaConsumer]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **config)
    await consumer.start()
    try:
        yield consumer
    finally:
        await consumer.stop()


def create_errors(response: Any) -> dict[str, int]:
    return {t[0]: t[1] for t in response.topic_errors}


async def topic_configs(admin: AIOKafkaAdminClient, topic: str) -> dict[str, str]:
    (response,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    (resource,) = response.resources
    assert resource[0] == 0, resource
    return {entry[0]: entry[1] for entry in resource[4]}


async def produce_all(bootstrap: str, topic: str, records: Sequence[Rec], **config: Any) -> list[Any]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **config)
    await producer.start()
    try:
        futures = []
        for r in records:
            futures.append(
                await producer.send(
                    topic,
                    key=r.key,
                    value=r.value,
                    headers=list(r.headers),
                    partition=r.partition,
                    timestamp_ms=r.timestamp,
                )
            )
        return list(await asyncio.gather(*futures))
    finally:
        await producer.stop()


async def consume_to_end(bootstrap: str, topic: str, partitions: int) -> list[Rec]:
    async with consumer_client(bootstrap) as consumer:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[Rec] = []
        deadline = time.monotonic() + 120
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            assert time.monotonic() < deadline, "consume stalled"
            batches = await consumer.getmany(timeout_ms=500, max_records=10_000)
            for tp, msgs in batches.items():
                for msg in msgs:
                    out.append(
                        Rec(tp.partition, msg.key, msg.value, tuple(msg.headers), msg.timestamp, msg.offset)
                    )
        return out


# ---- admin ------------------------------------------------------------------------------------


def test_topic_lifecycle(broker: EmbeddedBroker, topic_name: str) -> None:
    async def body() -> None:
        async with admin_client(broker.bootstrap_servers) as admin:
            response = await admin.create_topics(
                [NewTopic(topic_name, 3, 1, topic_configs={"retention.ms": "3600000"})]
            )
            assert create_errors(response) == {topic_name: 0}
            assert topic_name in await admin.list_topics()
            (described,) = await admin.describe_topics([topic_name])
            assert len(described["partitions"]) == 3

            configs = await topic_configs(admin, topic_name)
            assert configs["retention.ms"] == "3600000"
            assert configs["cleanup.policy"] == "delete"

            # aiokafka only has the legacy AlterConfigs: the given set replaces the old one
            (altered,) = await admin.alter_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic_name, configs={"segment.ms": "7200000"})]
            )
            assert [r[0] for r in altered.resources] == [0]
            configs = await topic_configs(admin, topic_name)
            assert configs["segment.ms"] == "7200000"
            assert configs["retention.ms"] == "604800000"

            (bad,) = await admin.alter_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic_name, configs={"segment.ms": "-5"})]
            )
            assert [r[0] for r in bad.resources] == [Errors["INVALID_CONFIG"]]
            assert (await topic_configs(admin, topic_name))["segment.ms"] == "7200000"

            response = await admin.delete_topics([topic_name])
            assert [tuple(t) for t in response.topic_error_codes] == [(topic_name, 0)]
            for _ in range(100):
                if topic_name not in await admin.list_topics():
                    break
                await asyncio.sleep(0.1)
            assert topic_name not in await admin.list_topics()
            response = await admin.delete_topics([topic_name])
            assert [t[1] for t in response.topic_error_codes] == [Errors["UNKNOWN_TOPIC_OR_PARTITION"]]

    run(body)


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda n: NewTopic("bad name!", 1, 1), "INVALID_TOPIC_EXCEPTION"),
        (lambda n: NewTopic("__" + "z" * 248, 1, 1), "INVALID_TOPIC_EXCEPTION"),
        (lambda n: NewTopic(n, 1, 4), "INVALID_REPLICATION_FACTOR"),
        (lambda n: NewTopic(n, 1, 1, topic_configs={"max.message.bytes": "big"}), "INVALID_CONFIG"),
        (lambda n: NewTopic(n, 0, 1), "INVALID_PARTITIONS"),
        (lambda n: NewTopic(n, -2, 1), "INVALID_PARTITIONS"),
    ],
    ids=["name", "long-name", "rf", "config", "zero", "negative"],
)
def test_create_topic_errors(broker: EmbeddedBroker, topic_name: str, make: Any, error: str) -> None:
    async def body() -> None:
        async with admin_client(broker.bootstrap_servers) as admin:
            new = make(topic_name)
            response = await admin.create_topics([new])
            assert create_errors(response) == {new.name: Errors[error]}
            assert topic_name not in await admin.list_topics()

    run(body)


def test_duplicate_topic(broker: EmbeddedBroker, topic_name: str) -> None:
    async def body() -> None:
        async with admin_client(broker.bootstrap_servers) as admin:
            assert create_errors(await admin.create_topics([NewTopic(topic_name, 1, 1)])) == {topic_name: 0}
            again = await admin.create_topics([NewTopic(topic_name, 2, 1)])
            assert create_errors(again) == {topic_name: Errors["TOPIC_ALREADY_EXISTS"]}
            (described,) = await admin.describe_topics([topic_name])
            assert len(described["partitions"]) == 1

    run(body)


def test_partitions_records_cluster(broker: EmbeddedBroker, topic_name: str) -> None:
    async def body() -> None:
        bootstrap = broker.bootstrap_servers
        async with admin_client(bootstrap) as admin:
            await admin.create_topics([NewTopic(topic_name, 1, 1)])
            response = await admin.create_partitions({topic_name: NewPartitions(3)})
            assert [tuple(t)[:2] for t in response.topic_errors] == [(topic_name, 0)]
            with pytest.raises(InvalidPartitionsError):
                await admin.create_partitions({topic_name: NewPartitions(3)})

            records = make_records(300, 3, topic_name)
            await produce_all(bootstrap, topic_name, records)
            tps = [TopicPartition(topic_name, p) for p in range(3)]
            low = await admin.delete_records(
                {tps[0]: RecordsToDelete(10), tps[1]: RecordsToDelete(100), tps[2]: RecordsToDelete(0)}
            )
            assert low == {tps[0]: 10, tps[1]: 100, tps[2]: 0}
            async with consumer_client(bootstrap) as consumer:
                assert await consumer.beginning_offsets(tps) == {tps[0]: 10, tps[1]: 100, tps[2]: 0}
            received = await consume_to_end(bootstrap, topic_name, 3)
            kept = [r for r in records if r.partition == 2] + [r for r in records if r.partition == 0][10:]
            check_exactly_once(kept, received)

            cluster = await admin.describe_cluster()
            assert cluster["cluster_id"] == broker.cluster_id
            assert cluster["controller_id"] == 1
            assert [(b["node_id"], b["port"]) for b in cluster["brokers"]] == [(1, broker.port)]

    run(body)


# ---- produce / consume ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume(broker: EmbeddedBroker, topic_name: str, codec: str) -> None:
    async def body() -> None:
        bootstrap = broker.bootstrap_servers
        async with admin_client(bootstrap) as admin:
            await admin.create_topics([NewTopic(topic_name, 3, 1)])
        records = make_records(5_000, 3, f"{topic_name}-{codec}")
        config = {} if codec == "none" else {"compression_type": codec}
        metadata = await produce_all(bootstrap, topic_name, records, **config)
        received = await consume_to_end(bootstrap, topic_name, 3)
        check_exactly_once(records, received)
        where = {r.value: (r.partition, r.offset) for r in received}
        assert [where[r.value] for r in records] == [(md.partition, md.offset) for md in metadata]

    run(body)


def test_list_offsets(broker: EmbeddedBroker, topic_name: str) -> None:
    async def body() -> None:
        bootstrap = broker.bootstrap_servers
        async with admin_client(bootstrap) as admin:
            await admin.create_topics([NewTopic(topic_name, 2, 1)])
        await produce_all(bootstrap, topic_name, make_records(400, 2, topic_name))
        async with consumer_client(bootstrap) as consumer:
            tps = [TopicPartition(topic_name, p) for p in range(2)]
            assert await consumer.beginning_offsets(tps) == dict.fromkeys(tps, 0)
            assert await consumer.end_offsets(tps) == dict.fromkeys(tps, 200)
            # partition p holds the timestamps BASE + 2 * offset + p
            found = await consumer.offsets_for_times(
                {tps[0]: BASE_TIMESTAMP_MS + 31, tps[1]: BASE_TIMESTAMP_MS + 31}
            )
            assert (found[tps[0]].offset, found[tps[0]].timestamp) == (16, BASE_TIMESTAMP_MS + 32)
            assert (found[tps[1]].offset, found[tps[1]].timestamp) == (15, BASE_TIMESTAMP_MS + 31)
            late = await consumer.offsets_for_times({tps[1]: BASE_TIMESTAMP_MS + 10**9})
            assert late == {tps[1]: None}

    run(body)


def test_long_poll_fetch_wakes_on_produce(broker: EmbeddedBroker, topic_name: str) -> None:
    async def body() -> None:
        bootstrap = broker.bootstrap_servers
        async with admin_client(bootstrap) as admin:
            await admin.create_topics([NewTopic(topic_name, 1, 1)])
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            await producer.partitions_for(topic_name)
            async with consumer_client(bootstrap, fetch_max_wait_ms=5000) as consumer:
                tp = TopicPartition(topic_name, 0)
                consumer.assign([tp])
                consumer.seek(tp, 0)
                started = time.monotonic()
                assert await consumer.getmany(timeout_ms=1000) == {}
                produced_at = time.monotonic()
                await producer.send_and_wait(topic_name, b"wake up", partition=0)
                msg = await asyncio.wait_for(consumer.getone(), 15)
                arrived = time.monotonic()
                assert msg.value == b"wake up"
                assert arrived - started < 4.0, f"arrived {arrived - started:.2f}s after polling began"
                assert arrived - produced_at < 3.0, f"arrived {arrived - produced_at:.2f}s after produce"
        finally:
            await producer.stop()

    run(body)
