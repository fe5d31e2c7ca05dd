"""KIP-227 fetch sessions, sans-I/O: FetchManager contexts, session updates, eviction, filtering."""

from __future__ import annotations

import random
import uuid
from typing import Any

from odradek.protocol.errors import Errors
from odradek.server.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchContext,
    FetchManager,
    FetchSessionCache,
    FullFetchContext,
    IncrementalFetchContext,
    SessionErrorContext,
    SessionlessFetchContext,
    next_epoch,
    parse_fetch_request,
)

TID_A = uuid.UUID(int=0xA)
TID_B = uuid.UUID(int=0xB)
NAMES = {TID_A: "a", TID_B: "b"}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def req(
    parts: dict[str, dict[int, int]],
    *,
    session_id: int = 0,
    epoch: int = 0,
    forget: dict[str, list[int]] | None = None,
    ids: bool = True,
) -> dict[str, Any]:
    """A decoded Fetch request: {topic: {partition: fetch_offset}}."""
    def tkey(name: str) -> dict[str, Any]:
        if ids:
            return {"topic_id": {v: k for k, v in NAMES.items()}.get(name, uuid.UUID(int=0xDEAD))}
        return {"topic": name}

    return {
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [
            {
                **tkey(t),
                "partitions": [
                    {
                        "partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20,
                        "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1,
                    }
                    for p, o in ps.items()
                ],
            }
            for t, ps in parts.items()
        ],
        "forgotten_topics_data": [
            {**tkey(t), "partitions": ps} for t, ps in (forget or {}).items()
        ],
    }


def resp(hw: int, records: bytes = b"", lso: int = 0, error: Errors = Errors.NONE) -> dict[str, Any]:
    return {
        "partition_index": 0,
        "error_code": error,
        "high_watermark": hw,
        "last_stable_offset": hw,
        "log_start_offset": lso,
        "preferred_read_replica": -1,
        "records": records,
    }


class Broker:
    """Drives a FetchManager like handle_fetch does, with a fake log: {(topic, p): (hw, lso)}."""

    def __init__(self, slots: int = 10, eviction_ms: int = 120_000) -> None:
        self.clock = Clock()
        self.cache = FetchSessionCache(slots, eviction_ms, rng=random.Random(7))
        self.manager = FetchManager(self.cache, self.clock)
        self.logs: dict[tuple[str, int], tuple[int, int]] = {}
        self.errors: dict[tuple[str, int], Errors] = {}

    def context(self, request: dict[str, Any], version: int = 13, follower: bool = False) -> FetchContext:
        fetch_data, forget = parse_fetch_request(request, version, NAMES.get)
        return self.manager.new_context(
            version, request["session_id"], request["session_epoch"], follower, fetch_data, forget,
            NAMES.get,
        )

    def fetch(
        self, request: dict[str, Any], version: int = 13, follower: bool = False
    ) -> tuple[Errors, int, dict[tuple[str | None, int], int], list[tuple[str | None, int]]]:
        """(error, session id, {partition: fetch offset read}, [partitions in the response])."""
        ctx = self.context(request, version, follower)
        updates = []
        read: dict[tuple[str | None, int], int] = {}
        for part in ctx.partitions():
            tp = (part.topic, part.partition)
            read[tp] = part.fetch_offset
            if part.topic is None:
                updates.append((part, resp(-1, error=Errors.UNKNOWN_TOPIC_ID)))
                continue
            err = self.errors.get((part.topic, part.partition), Errors.NONE)
            hw, lso = self.logs.get((part.topic, part.partition), (0, 0))
            records = b"x" * (hw - part.fetch_offset) if hw > part.fetch_offset and not err else b""
            updates.append((part, resp(hw, records, lso, err)))
        error, sid, send = ctx.update_and_generate_response(updates)
        return error, sid, read, [(p.topic, p.partition) for p, _ in send]


def test_next_epoch_wraps_and_final_stays_final() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(5) == 6
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_sessionless_fetch_creates_no_session() -> None:
    b = Broker()
    b.logs[("a", 0)] = (3, 0)
    ctx = b.context(req({"a": {0: 0}}, epoch=-1))
    assert isinstance(ctx, SessionlessFetchContext)
    err, sid, _, sent = b.fetch(req({"a": {0: 0}}, epoch=-1))
    assert (err, sid, sent) == (Errors.NONE, INVALID_SESSION_ID, [("a", 0)])
    assert len(b.cache) == 0


def test_full_fetch_creates_session_and_incremental_sends_only_changes() -> None:
    b = Broker()
    b.logs[("a", 0)] = (5, 0)
    b.logs[("a", 1)] = (0, 0)
    b.logs[("b", 0)] = (2, 0)
    err, sid, read, sent = b.fetch(req({"a": {0: 0, 1: 0}, "b": {0: 0}}))
    assert err == Errors.NONE and sid != INVALID_SESSION_ID
    assert sorted(sent) == [("a", 0), ("a", 1), ("b", 0)]  # a full response holds everything
    session = b.cache.get(sid)
    assert session is not None and session.epoch == 1 and len(session.partitions) == 3
    assert b.cache.num_partitions == 3

    # Epoch 1, the client moved a-0 to 5 and b-0 to 2: nothing new anywhere -> empty response,
    # but every cached partition is still read (a-1 from its cached offset 0).
    err, sid2, read, sent = b.fetch(req({"a": {0: 5}, "b": {0: 2}}, session_id=sid, epoch=1))
    assert (err, sid2, sent) == (Errors.NONE, sid, [])
    assert read == {("a", 0): 5, ("a", 1): 0, ("b", 0): 2}
    assert b.cache.incremental_fetches == 1

    # New records on a-1 (HW moves): only a-1 is sent.
    b.logs[("a", 1)] = (4, 0)
    err, _, _, sent = b.fetch(req({}, session_id=sid, epoch=2))
    assert (err, sent) == (Errors.NONE, [("a", 1)])
    # The client has not advanced a-1: the records are sent again, the HW alone would not be.
    err, _, read, sent = b.fetch(req({}, session_id=sid, epoch=3))
    assert read[("a", 1)] == 0 and sent == [("a", 1)]
    err, _, _, sent = b.fetch(req({"a": {1: 4}}, session_id=sid, epoch=4))
    assert sent == []
    # A log start offset change alone is sent.
    b.logs[("b", 0)] = (2, 1)
    _, _, _, sent = b.fetch(req({}, session_id=sid, epoch=5))
    assert sent == [("b", 0)]
    assert session.epoch == 6


def test_incremental_adds_updates_and_forgets_partitions() -> None:
    b = Broker()
    _, sid, _, _ = b.fetch(req({"a": {0: 0}}))
    # Add b-0 and a-1, forget a-0.
    err, _, read, sent = b.fetch(req({"b": {0: 7}, "a": {1: 3}}, session_id=sid, epoch=1, forget={"a": [0]}))
    assert err == Errors.NONE
    assert read == {("b", 0): 7, ("a", 1): 3}
    # New partitions have no cached HW yet, so they are sent once.
    assert sorted(sent) == [("a", 1), ("b", 0)]
    session = b.cache.get(sid)
    assert session is not None and set(session.partitions) == {(TID_B, 0), (TID_A, 1)}
    assert b.cache.num_partitions == 2
    # Forgetting a partition the session does not hold is a no-op.
    err, _, read, _ = b.fetch(req({}, session_id=sid, epoch=2, forget={"a": [9]}))
    assert err == Errors.NONE and set(read) == {("b", 0), ("a", 1)}
    # Forgetting everything closes the session; the fetch is answered sessionless.
    ctx = b.context(req({}, session_id=sid, epoch=3, forget={"a": [1], "b": [0]}))
    assert isinstance(ctx, SessionlessFetchContext)
    assert b.cache.get(sid) is None and b.cache.num_partitions == 0


def test_session_errors() -> None:
    b = Broker()
    _, sid, _, _ = b.fetch(req({"a": {0: 0}}))
    # Unknown id.
    ctx = b.context(req({}, session_id=sid + 1, epoch=1))
    assert isinstance(ctx, SessionErrorContext)
    assert ctx.update_and_generate_response([]) == (Errors.FETCH_SESSION_ID_NOT_FOUND, 0, [])
    # An incremental epoch with session id 0 names no session either.
    err, sid0, _, _ = b.fetch(req({}, session_id=0, epoch=1))
    assert (err, sid0) == (Errors.FETCH_SESSION_ID_NOT_FOUND, 0)
    # Wrong epoch (a replay of epoch 0's successor, or a skipped one).
    for wrong in (2, 7):
        err, s, _, _ = b.fetch(req({}, session_id=sid, epoch=wrong))
        assert (err, s) == (Errors.INVALID_FETCH_SESSION_EPOCH, 0)
    # The right epoch still works after the errors.
    err, s, _, _ = b.fetch(req({}, session_id=sid, epoch=1))
    assert (err, s) == (Errors.NONE, sid)
    # A topic-id session used by a Fetch v12 request, and the other way round.
    err, _, _, _ = b.fetch(req({}, session_id=sid, epoch=2, ids=False), version=12)
    assert err == Errors.FETCH_SESSION_TOPIC_ID_ERROR
    _, sid12, _, _ = b.fetch(req({"a": {0: 0}}, ids=False), version=12)
    session12 = b.cache.get(sid12)
    assert session12 is not None and not session12.uses_topic_ids
    err, _, _, _ = b.fetch(req({}, session_id=sid12, epoch=1), version=13)
    assert err == Errors.FETCH_SESSION_TOPIC_ID_ERROR
    # Name-keyed sessions work at v12.
    err, s, read, _ = b.fetch(req({"a": {0: 4}}, session_id=sid12, epoch=1, ids=False), version=12)
    assert (err, s, read) == (Errors.NONE, sid12, {("a", 0): 4})


def test_duplicate_request_after_context_creation_answers_invalid_epoch() -> None:
    b = Broker()
    _, sid, _, _ = b.fetch(req({"a": {0: 0}}))
    first = b.context(req({}, session_id=sid, epoch=1))
    second = b.context(req({}, session_id=sid, epoch=2))  # advanced while the first waited
    assert isinstance(first, IncrementalFetchContext) and isinstance(second, IncrementalFetchContext)
    part = next(iter(first.partitions()))
    err, s, send = first.update_and_generate_response([(part, resp(0))])
    assert (err, s, send) == (Errors.INVALID_FETCH_SESSION_EPOCH, sid, [])


def test_close_and_full_fetch_replace_the_named_session() -> None:
    b = Broker()
    _, sid, _, _ = b.fetch(req({"a": {0: 0}}))
    # Epoch 0 with an id: the old session is closed and a new one is created.
    _, sid2, _, _ = b.fetch(req({"a": {0: 0}}, session_id=sid, epoch=0))
    assert sid2 not in (sid, INVALID_SESSION_ID)
    assert b.cache.get(sid) is None and len(b.cache) == 1
    # Epoch -1 with an id: closed, answered sessionless.
    err, s, _, sent = b.fetch(req({"a": {0: 0}}, session_id=sid2, epoch=FINAL_EPOCH))
    assert (err, s, sent) == (Errors.NONE, 0, [("a", 0)])
    assert len(b.cache) == 0
    err, _, _, _ = b.fetch(req({}, session_id=sid2, epoch=1))
    assert err == Errors.FETCH_SESSION_ID_NOT_FOUND


def test_errors_are_always_sent_and_resent_when_they_clear() -> None:
    b = Broker()
    b.logs[("a", 0)] = (3, 0)
    _, sid, _, _ = b.fetch(req({"a": {0: 3}, "b": {0: 0}}))
    b.errors[("a", 0)] = Errors.NOT_LEADER_OR_FOLLOWER
    _, _, _, sent = b.fetch(req({}, session_id=sid, epoch=1))
    assert sent == [("a", 0)]
    _, _, _, sent = b.fetch(req({}, session_id=sid, epoch=2))
    assert sent == [("a", 0)]  # still failing: sent again
    del b.errors[("a", 0)]
    _, _, _, sent = b.fetch(req({}, session_id=sid, epoch=3))
    assert sent == [("a", 0)]  # recovered: the (unchanged) HW is sent once more
    _, _, _, sent = b.fetch(req({}, session_id=sid, epoch=4))
    assert sent == []


def test_unknown_topic_id_is_cached_and_resolved_later() -> None:
    b = Broker()
    tid_c = uuid.UUID(int=0xC)
    fetch_data, forget = parse_fetch_request(
        {"topics": [{"topic_id": tid_c, "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1, "current_leader_epoch": -1,
             "log_start_offset": -1, "last_fetched_epoch": -1}]}],
         "forgotten_topics_data": []},
        13, NAMES.get,
    )
    ctx = b.manager.new_context(13, 0, 0, False, fetch_data, forget, NAMES.get)
    assert isinstance(ctx, FullFetchContext)
    parts = list(ctx.partitions())
    assert parts[0].topic is None
    _, sid, _ = ctx.update_and_generate_response([(parts[0], resp(-1, error=Errors.UNKNOWN_TOPIC_ID))])
    assert sid != 0
    # The topic appears (e.g. its metadata arrived): the session resolves the name on the next fetch.
    NAMES[tid_c] = "c"
    try:
        ctx2 = b.manager.new_context(13, sid, 1, False, {}, [], NAMES.get)
        assert [p.topic for p in ctx2.partitions()] == ["c"]
    finally:
        del NAMES[tid_c]


def test_partitions_with_records_go_to_the_back() -> None:
    b = Broker()
    _, sid, _, _ = b.fetch(req({"a": {0: 0, 1: 0, 2: 0}}))
    b.logs[("a", 0)] = (1, 0)
    _, _, read, sent = b.fetch(req({}, session_id=sid, epoch=1))
    assert list(read) == [("a", 0), ("a", 1), ("a", 2)] and sent == [("a", 0)]
    _, _, read, _ = b.fetch(req({"a": {0: 1}}, session_id=sid, epoch=2))
    assert list(read) == [("a", 1), ("a", 2), ("a", 0)]


def test_full_cache_creates_no_session() -> None:
    b = Broker(slots=1)
    _, sid1, _, _ = b.fetch(req({"a": {0: 0}}))
    assert sid1 != 0
    # A second consumer with as many partitions, the first session recently used: no room.
    err, sid2, _, sent = b.fetch(req({"a": {0: 0}}))
    assert (err, sid2, sent) == (Errors.NONE, 0, [("a", 0)])
    assert b.cache.get(sid1) is not None and b.cache.evictions == 0
    # Zero slots: never a session.
    b0 = Broker(slots=0)
    assert b0.fetch(req({"a": {0: 0}}))[1] == 0


def test_eviction_of_stale_session() -> None:
    b = Broker(slots=2, eviction_ms=1000)
    _, s1, _, _ = b.fetch(req({"a": {0: 0, 1: 0, 2: 0}}))
    b.clock.now += 10
    _, s2, _, _ = b.fetch(req({"a": {0: 0, 1: 0, 2: 0}}))
    b.clock.now += 500
    b.fetch(req({}, session_id=s1, epoch=1))  # s1 used: s2 is now the least recently used
    b.clock.now += 700  # s2 unused for 1200 ms > 1000
    _, s3, _, _ = b.fetch(req({"a": {0: 0}}))  # a smaller session evicts the stale one
    assert s3 != 0 and b.cache.get(s2) is None and b.cache.get(s1) is not None
    assert b.cache.evictions == 1
    err, _, _, _ = b.fetch(req({}, session_id=s2, epoch=1))
    assert err == Errors.FETCH_SESSION_ID_NOT_FOUND


def test_eviction_by_size_and_privilege() -> None:
    b = Broker(slots=2, eviction_ms=1000)
    _, small, _, _ = b.fetch(req({"a": {0: 0}}))
    _, big, _, _ = b.fetch(req({"a": {0: 0, 1: 0, 2: 0}}))
    # Both young: a bigger consumer session may not evict them, a follower (privileged) may evict
    # the smallest unprivileged one.
    assert b.fetch(req({"a": {0: 0, 1: 0, 2: 0, 3: 0}}))[1] == 0
    _, follower, _, _ = b.fetch(req({"b": {0: 0}}), follower=True)
    assert follower != 0 and b.cache.get(small) is None and b.cache.get(big) is not None
    # Keep both in use so none is stale; once older than eviction_ms, a bigger consumer session
    # evicts the smallest unprivileged one (big has 3 < 4), but never a privileged one first.
    b.clock.now += 1500
    b.fetch(req({}, session_id=big, epoch=1))
    b.fetch(req({}, session_id=follower, epoch=1), follower=True)
    _, newer, _, _ = b.fetch(req({"a": {0: 0, 1: 0, 2: 0, 3: 0}}))
    assert newer != 0 and b.cache.get(big) is None and b.cache.get(follower) is not None
    # A smaller consumer session evicts nothing (the follower's key is privileged, newer's bigger).
    b.fetch(req({}, session_id=newer, epoch=1))
    assert b.fetch(req({"a": {0: 0}}))[1] == 0
    assert b.cache.evictions == 2
    assert b.cache.num_partitions == 1 + 4


def test_parse_fetch_request_by_name_and_by_id() -> None:
    data, forget = parse_fetch_request(req({"a": {0: 5}}, forget={"b": [1, 2]}, ids=False), 12, NAMES.get)
    (key, part), = data.items()
    assert key == ("a", 0) and isinstance(part, CachedPartition)
    assert (part.topic, part.partition, part.fetch_offset, part.high_watermark) == ("a", 0, 5, -1)
    assert forget == [("b", 1), ("b", 2)]
    data, forget = parse_fetch_request(req({"zzz": {0: 0}}, forget={"a": [0]}), 13, NAMES.get)
    (key, part), = data.items()
    assert part.topic is None and key[1] == 0
    assert forget == [(TID_A, 0)]
