"""The broker in-process while a new topic's log is still being created off the event loop:
requests for its partition wait for the log instead of failing, and answer as usual after."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from purgatory_support import ManualLogWorker
from test_broker_apis import batch, broker, create, fetch, list_offset, produce, run

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors


def test_requests_wait_for_a_partition_whose_log_is_being_created(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (server, c):
            rm = server.broker.replica_manager
            assert rm is not None
            worker = ManualLogWorker()
            rm.log_worker = worker  # log work now runs only when the test says so
            assert (await create(c, "w"))["error_code"] == Errors.NONE
            assert rm.is_loading(("w", 0)) and len(worker.jobs) == 1
            assert server.broker.log_manager is not None and server.broker.log_manager.get_log("w", 0) is None

            async def epoch_end() -> dict[str, Any]:
                r = await c.send(m.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [
                    {"topic": "w", "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
                return r["topics"][0]["partitions"][0]  # type: ignore[no-any-return]

            async def delete_records() -> dict[str, Any]:
                r = await c.send(m.DELETE_RECORDS, 2, {"topics": [
                    {"name": "w", "partitions": [{"partition_index": 0, "offset": 0}]}], "timeout_ms": 1000})
                return r["topics"][0]["partitions"][0]  # type: ignore[no-any-return]

            waiting = [
                asyncio.ensure_future(produce(c, "w", 0, batch([b"a", b"b"]), acks=1)),
                asyncio.ensure_future(fetch(c, "w", 0, 0)),
                asyncio.ensure_future(list_offset(c, "w", -1)),
                asyncio.ensure_future(epoch_end()),
                asyncio.ensure_future(delete_records()),
            ]
            await asyncio.sleep(0.2)
            assert not any(w.done() for w in waiting)  # none answered NOT_LEADER_OR_FOLLOWER
            worker.run_all()
            produced, fetched, offsets, epoch, deleted = await asyncio.wait_for(asyncio.gather(*waiting), 10)
            assert produced["error_code"] == Errors.NONE
            assert all(r["error_code"] == Errors.NONE for r in (fetched, offsets, epoch, deleted))
            assert server.broker.log_manager.get_log("w", 0) is not None and not rm.is_loading(("w", 0))

    run(go)


def test_find_coordinator_waits_for_the_offsets_partition_log(tmp_path: Path) -> None:
    from test_internal_topics import commit

    from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC, partition_for

    async def find(c: Any, group: str) -> int:
        r = await c.send(m.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
        return int(r["coordinators"][0]["error_code"])

    async def go() -> None:
        async with broker(tmp_path, **{"offsets.topic.num.partitions": "3"}) as (server, c):
            rm = server.broker.replica_manager
            assert rm is not None
            worker = ManualLogWorker()
            rm.log_worker = worker
            assert (await create(c, "data"))["error_code"] == Errors.NONE
            worker.run_all()
            group = "g"
            tp = (OFFSETS_TOPIC, partition_for(group, 3))
            assert await find(c, group) == Errors.COORDINATOR_NOT_AVAILABLE  # starts creating the topic
            for _ in range(200):  # the creation commits in the background
                if rm.is_loading(tp):
                    break
                await asyncio.sleep(0.01)
            assert rm.is_loading(tp)
            # The topic exists and names this broker, but its log is not made yet.
            assert await find(c, group) == Errors.COORDINATOR_NOT_AVAILABLE
            worker.run_all()
            for _ in range(200):  # the coordinator loads the (empty) partition
                if await find(c, group) == Errors.NONE and await commit(c, group, "data", 3) == Errors.NONE:
                    break
                await asyncio.sleep(0.01)
            assert await commit(c, group, "data", 4) == Errors.NONE

    run(go)
