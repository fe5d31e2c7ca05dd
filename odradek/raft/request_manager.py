"""Kafka's ``RequestManager`` (which destinations have a request in flight, which are backing off
after a failure) and ``FetchPurgatory`` (Fetch requests the leader parks until there is something
new or their ``max_wait_ms`` passes) for the Raft core. Time is passed in."""

from __future__ import annotations

import logging

from odradek.raft.quorum import QuorumConfig
from odradek.raft.raft_messages import RaftMessage

log = logging.getLogger("odradek.raft.raft_core")


class RequestManager:
    """One request in flight per destination (Kafka's ``RequestManager``): a response is
    expected only for the latest correlation id sent there; a failed one backs off."""

    def __init__(self, config: QuorumConfig) -> None:
        self.config = config
        self.inflight: dict[int, tuple[int, int]] = {}  # destination -> (correlation, deadline)
        self.backoff_until: dict[int, int] = {}
        self.timed_out_at: dict[int, int] = {}  # destination -> when its last request timed out

    def is_ready(self, destination: int, now_ms: int) -> bool:
        entry = self.inflight.get(destination)
        if entry is not None:
            if now_ms < entry[1]:
                return False
            del self.inflight[destination]  # timed out
            self.backoff_until[destination] = now_ms + self.config.retry_backoff_ms
            self.timed_out_at[destination] = now_ms
        return now_ms >= self.backoff_until.get(destination, 0)

    def is_backing_off(self, destination: int, now_ms: int) -> bool:
        """The last request to ``destination`` failed (or timed out: Kafka's
        ``hasRequestTimedOut`` then ``reset``) and its retry backoff has not passed."""
        self.is_ready(destination, now_ms)  # a request past its deadline counts as failed
        return destination not in self.inflight and now_ms < self.backoff_until.get(destination, 0)

    def is_silent(self, destination: int, now_ms: int) -> bool:
        """A request to ``destination`` timed out less than ``request.timeout.ms`` ago and
        nothing has come back from it since (a hung process, a dead host)."""
        self.is_ready(destination, now_ms)
        at = self.timed_out_at.get(destination)
        return at is not None and now_ms - at < self.config.request_timeout_ms

    def has_inflight(self, destinations: frozenset[int], now_ms: int) -> bool:
        return any(not self.is_ready(d, now_ms) and d in self.inflight for d in destinations)

    def on_send(self, destination: int, correlation_id: int, now_ms: int) -> None:
        self.inflight[destination] = (correlation_id, now_ms + self.config.request_timeout_ms)

    def is_expected(self, source: int, correlation_id: int) -> bool:
        entry = self.inflight.get(source)
        return entry is not None and entry[0] == correlation_id

    def on_response(self, source: int, ok: bool, now_ms: int) -> None:
        self.inflight.pop(source, None)
        self.timed_out_at.pop(source, None)
        if not ok:
            self.backoff_until[source] = now_ms + self.config.retry_backoff_ms

    def reset_all(self) -> None:
        self.inflight.clear()
        self.backoff_until.clear()
        self.timed_out_at.clear()


class FetchPurgatory:
    """At most one parked Fetch per replica: a newer one replaces (and answers) the older."""

    def __init__(self) -> None:
        self._parked: dict[int, tuple[RaftMessage, int]] = {}  # replica -> (request, deadline)

    def park(self, replica_id: int, request: RaftMessage, deadline_ms: int) -> RaftMessage | None:
        """Park ``request``; returns the replica's previously parked request, if any."""
        previous = self._parked.pop(replica_id, None)
        self._parked[replica_id] = (request, deadline_ms)
        return previous[0] if previous is not None else None

    def take(self, now_ms: int, expired_only: bool) -> list[RaftMessage]:
        """Unpark every request (or only those whose deadline passed)."""
        taken = [
            replica
            for replica, (_, deadline) in self._parked.items()
            if not expired_only or now_ms >= deadline
        ]
        return [self._parked.pop(replica)[0] for replica in taken]


class PeerFailureLog:
    """Log lines for requests that fail as a whole (a peer that is down or unreachable: the
    network channel answers BROKER_NOT_AVAILABLE after each try, about once per retry backoff):
    the first failure is a warning, the next ones are debug lines until the peer answers again,
    which is an info line."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.failing: dict[int, int] = {}  # peer -> failures in a row

    def failed(self, peer: int, what: object, error: int) -> None:
        count = self.failing.get(peer, 0) + 1
        self.failing[peer] = count
        if count == 1:
            log.warning(
                "node %d: %s failed with error %d; further failures of node %d are logged at "
                "debug level until it answers",
                self.node_id,
                what,
                error,
                peer,
            )
        else:
            log.debug("node %d: %s failed with error %d (%d in a row)", self.node_id, what, error, count)

    def answered(self, peer: int) -> None:
        count = self.failing.pop(peer, 0)
        if count:
            log.info("node %d: node %d answers again after %d failed requests", self.node_id, peer, count)
