"""Internal topics through the broker in-process: clients cannot append to them or delete their
records, and a client that creates ``__consumer_offsets`` itself does not break the group
coordinator (it uses the partitions the topic has, as Kafka does)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from test_broker_apis import batch, broker, create, produce, run

from odradek.coordinator.group.group_metadata_manager import partition_for
from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors


async def find_coordinator(c: NetworkClient, group: str, timeout: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        r = await c.send(m.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
        coord: dict[str, Any] = r["coordinators"][0]
        if coord["error_code"] == Errors.NONE or time.monotonic() > deadline:
            return coord
        await asyncio.sleep(0.05)


async def commit(c: NetworkClient, group: str, topic: str, offset: int) -> int:
    r = await c.send(
        m.OFFSET_COMMIT,
        8,
        {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
         "retention_time_ms": -1,
         "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                    "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
    )
    return int(r["topics"][0]["partitions"][0]["error_code"])


async def committed(c: NetworkClient, group: str, topic: str) -> int:
    r = await c.send(
        m.OFFSET_FETCH, 7,
        {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}], "require_stable": True},
    )
    p = r["topics"][0]["partitions"][0]
    assert p["error_code"] == Errors.NONE, p
    return int(p["committed_offset"])


def test_clients_cannot_append_to_or_delete_records_of_internal_topics(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path) as (_, c):
            assert (await create(c, "data"))["error_code"] == Errors.NONE
            group = "victim"
            assert (await find_coordinator(c, group))["error_code"] == Errors.NONE  # creates __consumer_offsets
            assert await commit(c, group, "data", 7) == Errors.NONE
            offsets_partition = partition_for(group, 50)
            for topic, partition in (
                ("__consumer_offsets", offsets_partition),
                ("__transaction_state", 0),
                ("__cluster_metadata", 0),
                ("__share_group_state", 0),
            ):
                p = await produce(c, topic, partition, batch([b"forged"]))
                assert p["error_code"] == Errors.INVALID_TOPIC_EXCEPTION == 17, (topic, p)
                assert p["error_message"] == f"Cannot append to internal topic {topic}"
                old = await produce(c, topic, partition, batch([b"forged"]), version=3)
                assert old["error_code"] == Errors.INVALID_TOPIC_EXCEPTION
            # the broker's own writes still go through
            assert await commit(c, group, "data", 8) == Errors.NONE
            assert await committed(c, group, "data") == 8

            r = await c.send(
                m.DELETE_RECORDS, 2,
                {"topics": [{"name": "__consumer_offsets", "partitions": [{"partition_index": offsets_partition,
                                                                           "offset": -1}]}],
                 "timeout_ms": 5000},
            )
            assert r["topics"][0]["partitions"][0]["error_code"] == Errors.INVALID_TOPIC_EXCEPTION
            assert await committed(c, group, "data") == 8

    run(main)


def test_metadata_topic_cannot_be_created(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path) as (_, c):
            t = await create(c, "__cluster_metadata")
            assert t["error_code"] == Errors.INVALID_REQUEST
            assert t["error_message"] == "Creation of internal topic __cluster_metadata is prohibited."

    run(main)


def test_client_created_offsets_topic_is_used_as_it_is(tmp_path: Path) -> None:
    """Kafka lets a client create __consumer_offsets (only ACLs guard it); its coordinator then
    spreads groups over the partitions the topic has. A group whose id hashes to a partition
    beyond the client's count must still find its coordinator and keep its offsets."""
    group = next(g for g in (f"group-{i}" for i in range(100)) if partition_for(g, 50) != 0)

    async def main() -> None:
        async with broker(tmp_path) as (_, c):
            assert (await create(c, "data"))["error_code"] == Errors.NONE
            made = await create(c, "__consumer_offsets", partitions=1)
            assert made["error_code"] == Errors.NONE
            coord = await find_coordinator(c, group)
            assert coord["error_code"] == Errors.NONE, coord
            assert await commit(c, group, "data", 42) == Errors.NONE
            assert await committed(c, group, "data") == 42
        async with broker(tmp_path) as (_, c):  # and after a restart
            assert (await find_coordinator(c, group))["error_code"] == Errors.NONE
            assert await committed(c, group, "data") == 42

    run(main)
