"""Incremental fetch sessions (KIP-227): FetchSessionCache, FetchManager and the FetchContexts.

Sans-I/O: nothing here reads a log or touches a socket. ``KafkaApis.handle_fetch`` parses the
request with :func:`parse_fetch_request`, asks :meth:`FetchManager.new_context` for a context,
reads the partitions the context names (:meth:`FetchContext.partitions`) and hands the per-partition
response dicts to :meth:`FetchContext.update_and_generate_response`, which says which of them go
into the response, the top-level error code and the session id.

Kafka's rules (``FetchManager``, ``FetchContext``, ``FetchSession``, ``FetchSessionCacheShard``):

* session id 0 with epoch -1: a *sessionless* fetch; the response carries session id 0.
* epoch 0 (``INITIAL_EPOCH``): a *full* fetch. Any session the request names is closed first; then a
  new session holding every requested partition is created when the cache has room (or can evict
  one, see :meth:`FetchSessionCache._try_evict`) and its id is returned, with next epoch 1.
* epoch -1 with a session id: the session is closed and the fetch is answered sessionless.
* any other epoch: an *incremental* fetch of that session. An unknown id answers
  ``FETCH_SESSION_ID_NOT_FOUND``; an epoch other than the session's ``INVALID_FETCH_SESSION_EPOCH``;
  a session created with topic ids (Fetch v13+) used by a request without them, or the other way,
  ``FETCH_SESSION_TOPIC_ID_ERROR``. Otherwise the request's partitions are added or updated, the
  forgotten ones removed (a session left empty is closed and the fetch is answered sessionless),
  and every partition of the session is read from its cached fetch offset. The response holds only
  partitions with records, a changed high watermark or log start offset, or an error.

Like Kafka, the last stable offset is not tracked: it never moves without the high watermark
moving in a broker without transactions. Kafka shards its cache in 8 (one lock each); Odradek
serves requests on one event loop, so there is one shard holding all the slots.
"""

from __future__ import annotations

import logging
import random
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from odradek.protocol.errors import Errors

log = logging.getLogger(__name__)

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
# Kafka's KafkaBroker.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: a session unused (or, for the
# size rule, younger) than this may not be evicted by another.
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS = 120_000
_MAX_INT32 = 2**31 - 1
_ZERO_UUID = uuid.UUID(int=0)

# A partition's identity in a session: (topic id, partition) for sessions created by Fetch v13+,
# (topic name, partition) before; like Kafka's CachedPartition equality.
PartitionKey = tuple[Any, int]


def next_epoch(prev: int) -> int:
    if prev < 0:
        return FINAL_EPOCH  # the epoch after FINAL_EPOCH is FINAL_EPOCH itself
    if prev == _MAX_INT32:
        return 1
    return prev + 1


def _records_size(resp: Mapping[str, Any]) -> int:
    records = resp.get("records")
    return len(records) if records is not None else 0


class CachedPartition:
    """One partition of a fetch: its request parameters and, in a session, the last response.

    ``topic`` is None while a topic id is unknown (Fetch v13+); an incremental fetch retries the
    name on every request, as Kafka's ``maybeResolveUnknownName`` does.
    """

    __slots__ = (
        "key", "topic", "topic_id", "partition", "max_bytes", "fetch_offset", "high_watermark",
        "current_leader_epoch", "fetcher_log_start_offset", "local_log_start_offset",
        "last_fetched_epoch",
    )

    def __init__(
        self,
        key: PartitionKey,
        topic: str | None,
        topic_id: uuid.UUID,
        partition: int,
        fetch_offset: int,
        max_bytes: int,
        current_leader_epoch: int = -1,
        fetcher_log_start_offset: int = -1,
        last_fetched_epoch: int = -1,
    ) -> None:
        self.key = key
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.current_leader_epoch = current_leader_epoch
        self.fetcher_log_start_offset = fetcher_log_start_offset
        self.last_fetched_epoch = last_fetched_epoch
        self.high_watermark = -1
        self.local_log_start_offset = -1

    def update_request_params(self, req: CachedPartition) -> None:
        self.max_bytes = req.max_bytes
        self.fetch_offset = req.fetch_offset
        self.fetcher_log_start_offset = req.fetcher_log_start_offset
        self.current_leader_epoch = req.current_leader_epoch
        self.last_fetched_epoch = req.last_fetched_epoch

    def maybe_update_response_data(self, resp: Mapping[str, Any], update: bool = True) -> bool:
        """Whether this partition must be in an incremental response; records what was sent."""
        must_respond = _records_size(resp) > 0
        hw = resp["high_watermark"]
        if self.high_watermark != hw:
            must_respond = True
            if update:
                self.high_watermark = hw
        lso = resp["log_start_offset"]
        if self.local_log_start_offset != lso:
            must_respond = True
            if update:
                self.local_log_start_offset = lso
        if resp.get("preferred_read_replica", -1) >= 0:
            must_respond = True
        if resp["error_code"] != Errors.NONE:
            # Errors are always sent; forgetting the high watermark makes the partition be sent
            # again once the error goes away.
            if update:
                self.high_watermark = -1
            must_respond = True
        return must_respond

    def __repr__(self) -> str:
        name = self.topic if self.topic is not None else self.topic_id
        return f"{name}-{self.partition}@{self.fetch_offset}"


def parse_fetch_request(
    req: Mapping[str, Any], version: int, resolve: Callable[[uuid.UUID], str | None]
) -> tuple[dict[PartitionKey, CachedPartition], list[PartitionKey]]:
    """The partitions of a decoded Fetch request and the forgotten ones, keyed for a session."""
    use_ids = version >= 13
    fetch_data: dict[PartitionKey, CachedPartition] = {}
    for t in req["topics"]:
        if use_ids:
            topic_id = t["topic_id"]
            name = resolve(topic_id)
            ident: Any = topic_id
        else:
            name = ident = t["topic"]
            topic_id = _ZERO_UUID
        for p in t["partitions"]:
            key = (ident, p["partition"])
            # The decoder fills in the defaults of fields older versions lack.
            fetch_data[key] = CachedPartition(
                key, name, topic_id, p["partition"], p["fetch_offset"], p["partition_max_bytes"],
                p["current_leader_epoch"], p["log_start_offset"], p["last_fetched_epoch"],
            )
    to_forget: list[PartitionKey] = []
    for t in req["forgotten_topics_data"]:
        ident = t["topic_id"] if use_ids else t["topic"]
        to_forget.extend((ident, p) for p in t["partitions"])
    return fetch_data, to_forget


class FetchSession:
    __slots__ = (
        "id", "privileged", "partitions", "uses_topic_ids", "creation_ms", "last_used_ms", "epoch",
        "cached_size",
    )

    def __init__(
        self,
        session_id: int,
        privileged: bool,
        partitions: dict[PartitionKey, CachedPartition],
        uses_topic_ids: bool,
        creation_ms: int,
        epoch: int,
    ) -> None:
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions  # insertion order is the fetch order (round robin)
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = creation_ms
        self.last_used_ms = creation_ms
        self.epoch = epoch
        self.cached_size = -1  # the size the cache last accounted for; -1: not in the cache

    def evictable_key(self) -> tuple[bool, int, int]:
        # Kafka's EvictableKey order: unprivileged before privileged, then smaller, then by id.
        return (self.privileged, self.cached_size, self.id)

    def update(
        self, fetch_data: Mapping[PartitionKey, CachedPartition], to_forget: Iterable[PartitionKey]
    ) -> tuple[int, int, int]:
        """Apply an incremental request; returns how many partitions were added/updated/removed."""
        added = updated = removed = 0
        parts = self.partitions
        for key, req in fetch_data.items():
            cached = parts.get(key)
            if cached is None:
                parts[key] = req
                added += 1
            else:
                cached.update_request_params(req)
                updated += 1
        for key in to_forget:
            if parts.pop(key, None) is not None:
                removed += 1
        return added, updated, removed

    def __repr__(self) -> str:
        return (
            f"FetchSession(id={self.id}, privileged={self.privileged}, "
            f"partitions={len(self.partitions)}, usesTopicIds={self.uses_topic_ids}, "
            f"epoch={self.epoch})"
        )


class FetchSessionCache:
    """The broker's fetch sessions, bounded by ``max.incremental.fetch.session.cache.slots``.

    Eviction is Kafka's: a new session may take the slot of the least recently used session if that
    one has been unused for more than ``eviction_ms``; otherwise that of the smallest evictable
    session whose key (privileged, size, id) is not greater than the new one's. Sessions younger
    than ``eviction_ms`` are evictable only by privileged (follower) sessions, and only when they
    are not privileged themselves.
    """

    def __init__(
        self,
        max_entries: int,
        eviction_ms: int = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS,
        rng: random.Random | None = None,
    ) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._rng = rng or random.Random()
        # Ordered by last use: touch() moves a session to the end, so the first is the LRU one.
        self.sessions: dict[int, FetchSession] = {}
        self.num_partitions = 0
        # Counters (Kafka's IncrementalFetchSessionEvictionsPerSec, plus what tests and operators
        # want to see: sessions created and incremental fetches served).
        self.evictions = 0
        self.sessions_created = 0
        self.incremental_fetches = 0

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def _new_session_id(self) -> int:
        while True:
            sid = self._rng.randint(1, _MAX_INT32)
            if sid not in self.sessions:
                return sid

    def maybe_create_session(
        self,
        now: int,
        privileged: bool,
        uses_topic_ids: bool,
        partitions: dict[PartitionKey, CachedPartition],
    ) -> int:
        size = len(partitions)
        if len(self.sessions) < self.max_entries or self._try_evict(privileged, (privileged, size, 0), now):
            session = FetchSession(
                self._new_session_id(), privileged, partitions, uses_topic_ids, now,
                next_epoch(INITIAL_EPOCH),
            )
            self.sessions[session.id] = session
            self.touch(session, now)
            self.sessions_created += 1
            log.debug("Created fetch session %s", session)
            return session.id
        log.debug("No fetch session created for privileged=%s, size=%d.", privileged, size)
        return INVALID_SESSION_ID

    def _try_evict(self, privileged: bool, key: tuple[bool, int, int], now: int) -> bool:
        if not self.sessions:
            return False
        lru = next(iter(self.sessions.values()))
        if now - lru.last_used_ms > self.eviction_ms:
            log.debug("Evicting stale fetch session %d.", lru.id)
            self.remove(lru.id)
            self.evictions += 1
            return True
        # The cheapest session the newcomer may evict. A scan over the cache runs only when the
        # cache is full and no session is stale; Kafka keeps two sorted maps for it instead.
        young = now - self.eviction_ms
        best: FetchSession | None = None
        for s in self.sessions.values():
            old = s.creation_ms < young
            if not (old or (privileged and not s.privileged)):
                continue
            if best is None or s.evictable_key() < best.evictable_key():
                best = s
        if best is None:
            return False
        if key < best.evictable_key():
            log.debug("Can't evict %s with %s", best.evictable_key(), key)
            return False
        log.debug("Evicting %s with %s.", best.evictable_key(), key)
        self.remove(best.id)
        self.evictions += 1
        return True

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self.num_partitions -= session.cached_size
            session.cached_size = -1
        return session

    def touch(self, session: FetchSession, now: int) -> None:
        sessions = self.sessions
        del sessions[session.id]
        sessions[session.id] = session  # most recently used last
        session.last_used_ms = now
        if session.cached_size != -1:
            self.num_partitions -= session.cached_size
        session.cached_size = len(session.partitions)
        self.num_partitions += session.cached_size


class FetchContext(ABC):
    """What one Fetch request reads and how its response is trimmed (Kafka's FetchContext)."""

    error: Errors = Errors.NONE
    session_id: int = INVALID_SESSION_ID

    @abstractmethod
    def partitions(self) -> Iterator[CachedPartition]:
        """The partitions this fetch reads, in the order to read them."""

    @abstractmethod
    def update_and_generate_response(
        self, updates: list[tuple[CachedPartition, dict[str, Any]]]
    ) -> tuple[Errors, int, list[tuple[CachedPartition, dict[str, Any]]]]:
        """(top-level error, session id, the partition responses to send) for ``updates``."""


class SessionErrorContext(FetchContext):
    def __init__(self, error: Errors) -> None:
        self.error = error

    def partitions(self) -> Iterator[CachedPartition]:
        return iter(())

    def update_and_generate_response(
        self, updates: list[tuple[CachedPartition, dict[str, Any]]]
    ) -> tuple[Errors, int, list[tuple[CachedPartition, dict[str, Any]]]]:
        return self.error, INVALID_SESSION_ID, []


class SessionlessFetchContext(FetchContext):
    def __init__(self, fetch_data: dict[PartitionKey, CachedPartition]) -> None:
        self.fetch_data = fetch_data

    def partitions(self) -> Iterator[CachedPartition]:
        return iter(self.fetch_data.values())

    def update_and_generate_response(
        self, updates: list[tuple[CachedPartition, dict[str, Any]]]
    ) -> tuple[Errors, int, list[tuple[CachedPartition, dict[str, Any]]]]:
        return Errors.NONE, INVALID_SESSION_ID, updates


class FullFetchContext(FetchContext):
    def __init__(
        self,
        cache: FetchSessionCache,
        fetch_data: dict[PartitionKey, CachedPartition],
        uses_topic_ids: bool,
        is_from_follower: bool,
        now: int,
    ) -> None:
        self.cache = cache
        self.fetch_data = fetch_data
        self.uses_topic_ids = uses_topic_ids
        self.is_from_follower = is_from_follower
        self.now = now

    def partitions(self) -> Iterator[CachedPartition]:
        return iter(self.fetch_data.values())

    def update_and_generate_response(
        self, updates: list[tuple[CachedPartition, dict[str, Any]]]
    ) -> tuple[Errors, int, list[tuple[CachedPartition, dict[str, Any]]]]:
        cached: dict[PartitionKey, CachedPartition] = {}
        for part, resp in updates:
            part.maybe_update_response_data(resp)
            cached[part.key] = part
        session_id = self.cache.maybe_create_session(
            self.now, self.is_from_follower, self.uses_topic_ids, cached
        )
        return Errors.NONE, session_id, updates


class IncrementalFetchContext(FetchContext):
    def __init__(
        self, request_epoch: int, session: FetchSession, resolve: Callable[[uuid.UUID], str | None]
    ) -> None:
        self.request_epoch = request_epoch
        self.session = session
        self.resolve = resolve

    def partitions(self) -> Iterator[CachedPartition]:
        resolve = self.resolve if self.session.uses_topic_ids else None
        for part in list(self.session.partitions.values()):
            if resolve is not None and part.topic is None:
                part.topic = resolve(part.topic_id)
            yield part

    def update_and_generate_response(
        self, updates: list[tuple[CachedPartition, dict[str, Any]]]
    ) -> tuple[Errors, int, list[tuple[CachedPartition, dict[str, Any]]]]:
        session = self.session
        if session.epoch != next_epoch(self.request_epoch):
            log.info(
                "Incremental fetch session %d expected epoch %d, but got %d. Possible duplicate request.",
                session.id, next_epoch(self.request_epoch), session.epoch,
            )
            return Errors.INVALID_FETCH_SESSION_EPOCH, session.id, []
        parts = session.partitions
        out: list[tuple[CachedPartition, dict[str, Any]]] = []
        for part, resp in updates:
            cached = parts.get(part.key)
            if cached is None or not cached.maybe_update_response_data(resp):
                continue
            out.append((part, resp))
            if _records_size(resp) > 0:
                # Round robin: a partition that returned data goes to the back of the session.
                del parts[part.key]
                parts[part.key] = cached
        return Errors.NONE, session.id, out


class FetchManager:
    def __init__(self, cache: FetchSessionCache, clock_ms: Callable[[], int]) -> None:
        self.cache = cache
        self.clock_ms = clock_ms

    def new_context(
        self,
        version: int,
        session_id: int,
        epoch: int,
        is_from_follower: bool,
        fetch_data: dict[PartitionKey, CachedPartition],
        to_forget: list[PartitionKey],
        resolve: Callable[[uuid.UUID], str | None],
    ) -> FetchContext:
        cache = self.cache
        if epoch == INITIAL_EPOCH or epoch == FINAL_EPOCH:
            removed = ""
            if session_id != INVALID_SESSION_ID and cache.remove(session_id) is not None:
                removed = f" Removed fetch session {session_id}."
            if epoch == FINAL_EPOCH:
                log.debug(
                    "Created a new full FetchContext with %d partition(s).%s Will not try to create a "
                    "new session.", len(fetch_data), removed,
                )
                return SessionlessFetchContext(fetch_data)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("Created a new full FetchContext with %d partition(s).%s", len(fetch_data), removed)
            return FullFetchContext(cache, fetch_data, version >= 13, is_from_follower, self.clock_ms())
        session = cache.get(session_id)
        if session is None:
            log.debug("Session error for %d: no such session ID found.", session_id)
            return SessionErrorContext(Errors.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            log.debug(
                "Session error for %d: expected epoch %d, but got %d instead.",
                session_id, session.epoch, epoch,
            )
            return SessionErrorContext(Errors.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != (version >= 13):
            log.debug(
                "Session error for %d: expected %s, but request version %d means that we can not.",
                session_id, "to use topic IDs" if session.uses_topic_ids else "to not use topic IDs",
                version,
            )
            return SessionErrorContext(Errors.FETCH_SESSION_TOPIC_ID_ERROR)
        added, updated, removed_n = session.update(fetch_data, to_forget)
        if not session.partitions:
            log.debug(
                "Created a new sessionless FetchContext and closing session id %d, epoch %d: after "
                "removing %d partition(s), there are no more partitions left.",
                session.id, session.epoch, removed_n,
            )
            cache.remove(session.id)
            return SessionlessFetchContext(fetch_data)
        cache.touch(session, self.clock_ms())
        session.epoch = next_epoch(session.epoch)
        cache.incremental_fetches += 1
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "Created a new incremental FetchContext for session id %d, epoch %d: added %d "
                "partition(s), updated %d partition(s), removed %d partition(s)",
                session.id, session.epoch, added, updated, removed_n,
            )
        return IncrementalFetchContext(epoch, session, resolve)
