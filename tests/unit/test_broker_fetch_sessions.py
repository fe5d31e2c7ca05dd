"""Fetch sessions (KIP-227) through the broker in-process: real Fetch requests over a socket."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from test_broker_apis import batch, broker, create, produce, records_of, run

from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors


async def fetch(
    c: NetworkClient,
    version: int,
    session_id: int,
    epoch: int,
    topics: list[tuple[Any, list[tuple[int, int]]]],
    forget: list[tuple[Any, list[int]]] | None = None,
    max_wait: int = 0,
) -> dict[str, Any]:
    """topics: [(name or topic id, [(partition, fetch offset)])]."""
    key = "topic_id" if version >= 13 else "topic"
    return await c.send(  # type: ignore[no-any-return]
        m.FETCH,
        version,
        {
            "replica_id": -1,
            "max_wait_ms": max_wait,
            "min_bytes": 1,
            "max_bytes": 50 << 20,
            "isolation_level": 0,
            "session_id": session_id,
            "session_epoch": epoch,
            "topics": [
                {
                    key: t,
                    "partitions": [
                        {"partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20}
                        for p, o in parts
                    ],
                }
                for t, parts in topics
            ],
            "forgotten_topics_data": [{key: t, "partitions": ps} for t, ps in (forget or [])],
            "rack_id": "",
        },
    )


def sent(resp: dict[str, Any], version: int) -> dict[tuple[Any, int], dict[str, Any]]:
    key = "topic_id" if version >= 13 else "topic"
    return {(t[key], p["partition_index"]): p for t in resp["responses"] for p in t["partitions"]}


def test_fetch_session_round_trip_by_topic_id(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (server, c):
            assert (await create(c, "s", partitions=2))["error_code"] == 0
            tid = server.broker.metadata_cache.get_topic_id("s")
            assert tid is not None
            await produce(c, "s", 0, batch([b"a", b"b"]))
            v = 17
            full = await fetch(c, v, 0, 0, [(tid, [(0, 0), (1, 0)])])
            assert full["error_code"] == 0
            sid = full["session_id"]
            assert sid != 0
            got = sent(full, v)
            assert set(got) == {(tid, 0), (tid, 1)}
            assert [r.value for r in records_of(got[(tid, 0)]["records"])] == [b"a", b"b"]

            # Epoch 1: the client advanced partition 0 to 2; nothing new -> empty response.
            inc = await fetch(c, v, sid, 1, [(tid, [(0, 2)])], max_wait=10)
            assert (inc["error_code"], inc["session_id"], inc["responses"]) == (0, sid, [])

            # New records on partition 1 only: the session reads it from its cached offset 0.
            await produce(c, "s", 1, batch([b"c"]))
            inc = await fetch(c, v, sid, 2, [])
            got = sent(inc, v)
            assert list(got) == [(tid, 1)]
            assert [r.value for r in records_of(got[(tid, 1)]["records"])] == [b"c"]
            assert got[(tid, 1)]["high_watermark"] == 1

            # Forget partition 1; new records there are no longer fetched.
            inc = await fetch(c, v, sid, 3, [(tid, [(1, 1)])], forget=None)
            assert inc["responses"] == []
            inc = await fetch(c, v, sid, 4, [], forget=[(tid, [1])])
            await produce(c, "s", 1, batch([b"d"]))
            inc = await fetch(c, v, sid, 5, [])
            assert inc["error_code"] == 0 and inc["responses"] == []

            # Session errors.
            bad = await fetch(c, v, sid, 9, [])
            assert (bad["error_code"], bad["session_id"]) == (Errors.INVALID_FETCH_SESSION_EPOCH, 0)
            bad = await fetch(c, v, sid ^ 0x5A5A, 1, [])
            assert bad["error_code"] == Errors.FETCH_SESSION_ID_NOT_FOUND
            bad = await fetch(c, 12, sid, 6, [])
            assert bad["error_code"] == Errors.FETCH_SESSION_TOPIC_ID_ERROR

            # An unknown topic id in a session: UNKNOWN_TOPIC_ID, sent on every fetch.
            ghost = uuid.uuid4()
            inc = await fetch(c, v, sid, 6, [(ghost, [(0, 0)])])
            assert sent(inc, v)[(ghost, 0)]["error_code"] == Errors.UNKNOWN_TOPIC_ID
            inc = await fetch(c, v, sid, 7, [])
            assert sent(inc, v)[(ghost, 0)]["error_code"] == Errors.UNKNOWN_TOPIC_ID

            cache = server.broker.broker_apis.fetch_manager.cache
            assert cache.incremental_fetches >= 7 and len(cache) == 1

            # Close: epoch -1 answers sessionless and the id is gone.
            close = await fetch(c, v, sid, -1, [(tid, [(0, 0)])])
            assert close["error_code"] == 0 and close["session_id"] == 0
            assert set(sent(close, v)) == {(tid, 0)}
            gone = await fetch(c, v, sid, 8, [])
            assert gone["error_code"] == Errors.FETCH_SESSION_ID_NOT_FOUND
            assert len(cache) == 0

    run(go)


def test_fetch_session_by_name_and_long_poll(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path) as (server, c):
            assert (await create(c, "n"))["error_code"] == 0
            v = 12
            full = await fetch(c, v, 0, 0, [("n", [(0, 0)])])
            sid = full["session_id"]
            assert sid != 0 and set(sent(full, v)) == {("n", 0)}
            # A long poll in an incremental fetch: nothing arrives, an empty response after the wait.
            inc = await fetch(c, v, sid, 1, [], max_wait=50)
            assert (inc["error_code"], inc["session_id"], inc["responses"]) == (0, sid, [])
            await produce(c, "n", 0, batch([b"x"]))
            inc = await fetch(c, v, sid, 2, [], max_wait=500)
            got = sent(inc, v)
            assert [r.value for r in records_of(got[("n", 0)]["records"])] == [b"x"]
            # A sessionless fetch (epoch -1, id 0) still answers everything and creates nothing.
            before = len(server.broker.broker_apis.fetch_manager.cache)
            plain = await fetch(c, v, 0, -1, [("n", [(0, 1)])])
            assert plain["session_id"] == 0 and set(sent(plain, v)) == {("n", 0)}
            assert len(server.broker.broker_apis.fetch_manager.cache) == before

    run(go)


def test_session_cache_slots_config(tmp_path: Path) -> None:
    async def go() -> None:
        async with broker(tmp_path, **{"max.incremental.fetch.session.cache.slots": "0"}) as (server, c):
            assert (await create(c, "z"))["error_code"] == 0
            full = await fetch(c, 12, 0, 0, [("z", [(0, 0)])])
            assert full["error_code"] == 0 and full["session_id"] == 0
            assert server.broker.broker_apis.fetch_manager.cache.max_entries == 0

    run(go)
