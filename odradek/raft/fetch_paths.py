"""The Fetch paths of the Raft core (Kafka's ``KafkaRaftClient`` ``handleFetchRequest``,
``tryCompleteFetchRequest``, ``handleFetchResponse`` and ``maybeSendFetchOrFetchSnapshot``), as
a mixin of :class:`~odradek.raft.raft_core.RaftCore`: the leader answers and parks Fetch
requests, followers and observers send them and append (or truncate on a diverging epoch) what
comes back, and where a follower fetches while its leader fails (``maybeSendFetchToBestNode``;
a refused connection starts the early pre-vote). Split out of ``raft_core.py`` to keep each module
short; the state lives in the core.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from odradek.raft import raft_messages as msgs
from odradek.raft.dynamic_quorum import UPDATE_RAFT_VOTER
from odradek.raft.epoch_state import FollowerState, LeaderState
from odradek.raft.raft_log import LogBatch, OffsetAndEpoch
from odradek.raft.raft_messages import (
    INVALID_REQUEST,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    RaftMessage,
)
from odradek.raft.snapshot_fetch import SnapshotFetchPaths

if TYPE_CHECKING:
    from odradek.raft.dynamic_quorum import DynamicQuorum
    from odradek.raft.quorum import QuorumConfig, QuorumState
    from odradek.raft.raft_core import RaftCore
    from odradek.raft.raft_log import RaftLog
    from odradek.raft.request_manager import FetchPurgatory, RequestManager

log = logging.getLogger("odradek.raft.raft_core")


class FetchPaths(SnapshotFetchPaths):
    """Fetch, both ends (and, from its base, FetchSnapshot). Everything it uses is defined by
    :class:`RaftCore`."""

    if TYPE_CHECKING:
        node_id: int
        voters: frozenset[int]
        bootstrap_ids: tuple[int, ...]
        pre_vote: bool
        dynamic: DynamicQuorum
        cluster_id: str
        config: QuorumConfig
        log: RaftLog
        quorum: QuorumState
        requests: RequestManager
        fetch_purgatory: FetchPurgatory
        max_fetch_batches: int
        _high_watermark: int | None
        _high_watermark_moved: bool
        _shutdown_deadline_ms: int | None
        _observer_fetch_index: int
        _high_watermark_sent: dict[int, tuple[int, int]]

        @property
        def epoch(self) -> int: ...

        def _append(self, batch: LogBatch) -> None: ...

        def _truncate(self, offset: int) -> None: ...

        def _send(
            self, destination: int, api_key: int, data: dict[str, Any], now_ms: int
        ) -> None: ...

        def _respond(self, request: RaftMessage, data: dict[str, Any]) -> None: ...

        def _update_committed(self, high_watermark: int | None) -> None: ...

        def _maybe_handle_common_response(
            self, error: int, leader_id: int | None, epoch: int, now_ms: int
        ) -> bool | None: ...

    # -- the leader's side ----------------------------------------------------------------------

    def _handle_fetch_request(self, request: RaftMessage, p: dict[str, Any], now_ms: int) -> None:
        data = request.data
        fetch_offset = int(p["fetch_offset"])
        last_fetched_epoch = int(p["last_fetched_epoch"])
        current_epoch = int(p.get("current_leader_epoch", -1))
        max_wait_ms = int(data.get("max_wait_ms", 0))
        if (
            max_wait_ms < 0
            or fetch_offset < 0
            or last_fetched_epoch < 0
            or last_fetched_epoch > current_epoch
        ):
            self._respond(
                request,
                msgs.fetch_response(INVALID_REQUEST, self.epoch, self.quorum.leader_id_or_nil, -1),
            )
            return
        response = self._try_complete_fetch(request, p, now_ms)
        partition = response["responses"][0]["partitions"][0] if response["responses"] else None
        parkable = (
            partition is not None
            and partition["error_code"] == NONE
            and not partition["records"]
            and partition["diverging_epoch"]["epoch"] < 0
            and partition["snapshot_id"]["end_offset"] < 0
            and max_wait_ms > 0
        )
        replica_id = msgs.fetch_replica_id(data)
        if parkable and replica_id >= 0 and not self._high_watermark_news(replica_id, response):
            previous = self.fetch_purgatory.park(replica_id, request, now_ms + max_wait_ms)
            if previous is not None:  # a replica has one fetch in flight: answer the old one
                self._respond_fetch(previous, response)
        else:
            self._respond_fetch(request, response)

    def _high_watermark_news(self, replica_id: int, response: dict[str, Any]) -> bool:
        """Does ``response`` carry a high watermark ``replica_id`` has not been sent in this
        epoch? Then it is answered at once rather than parked: a commit that lands between
        a replica's fetches (its records went out before they were committed) reaches it now,
        not a ``max_wait_ms`` later (what KIP-1166 does with the replica's HW in the request;
        here the leader remembers what it sent)."""
        hw = int(response["responses"][0]["partitions"][0]["high_watermark"])
        sent = self._high_watermark_sent.get(replica_id)
        return sent is None or sent[0] != self.epoch or hw > sent[1]

    def _respond_fetch(self, request: RaftMessage, response: dict[str, Any]) -> None:
        replica_id = msgs.fetch_replica_id(request.data)
        partitions = response["responses"][0]["partitions"] if response["responses"] else []
        if replica_id >= 0 and partitions and partitions[0]["error_code"] == NONE:
            self._high_watermark_sent[replica_id] = (self.epoch, int(partitions[0]["high_watermark"]))
        self._respond(request, response)

    def _try_complete_fetch(
        self, request: RaftMessage, p: dict[str, Any], now_ms: int
    ) -> dict[str, Any]:
        epoch, leader = self.epoch, self.quorum.leader_id_or_nil
        state = self.quorum.state
        error = self._leader_request_error(int(p.get("current_leader_epoch", -1)))
        if error != NONE or not isinstance(state, LeaderState):
            return msgs.fetch_response(error, epoch, leader, -1)
        fetch_offset = int(p["fetch_offset"])
        last_fetched_epoch = int(p["last_fetched_epoch"])
        hw = state.high_watermark if state.high_watermark is not None else -1
        snapshot_id = self._snapshot_for_fetch(fetch_offset, last_fetched_epoch)
        if snapshot_id is not None:
            return msgs.fetch_response(NONE, epoch, leader, hw, snapshot_id=snapshot_id)
        diverging = self.log.validate_offset_and_epoch(fetch_offset, last_fetched_epoch)
        if diverging is not None:
            return msgs.fetch_response(NONE, epoch, leader, hw, diverging=diverging)
        replica_id = msgs.fetch_replica_id(request.data)
        if replica_id >= 0 and replica_id != self.node_id:
            if state.update_replica_state(replica_id, now_ms, fetch_offset):
                self._update_committed(state.high_watermark)
                self._high_watermark_moved = True
                hw = state.high_watermark if state.high_watermark is not None else -1
        records = self.log.read(fetch_offset, self.max_fetch_batches)
        return msgs.fetch_response(NONE, epoch, leader, hw, records=records)

    def _complete_parked_fetches(self, now_ms: int, expired_only: bool = False) -> None:
        for request in self.fetch_purgatory.take(now_ms, expired_only):
            partition = msgs.single_partition(request.data)
            assert partition is not None
            self._respond_fetch(request, self._try_complete_fetch(request, partition, now_ms))

    def _fail_parked_fetches(self) -> None:
        self.dynamic.on_leadership_lost(cast("RaftCore", self))
        leader = self.quorum.leader_id_or_nil
        for request in self.fetch_purgatory.take(0, expired_only=False):
            error = msgs.fetch_response(NOT_LEADER_OR_FOLLOWER, self.epoch, leader, -1)
            self._respond(request, error)

    # -- the follower's side --------------------------------------------------------------------

    def _handle_fetch_response(self, source: int, p: dict[str, Any], now_ms: int) -> bool:
        error = int(p["error_code"])
        current = p.get("current_leader") or {}
        leader = int(current.get("leader_id", -1))
        leader_id = leader if leader >= 0 else None
        epoch = int(current.get("leader_epoch", -1))
        handled = self._maybe_handle_common_response(error, leader_id, epoch, now_ms)
        if handled is not None:
            # An error that did not reveal a leader to follow: back off before the next fetch.
            return handled and (error == NONE or isinstance(self.quorum.state, FollowerState))
        state = self.quorum.state
        if error != NONE:
            return False
        if not isinstance(state, FollowerState) or state.leader_id != source:
            return True
        diverging = p.get("diverging_epoch") or {}
        sid = p.get("snapshot_id") or {}
        snapshot = OffsetAndEpoch(int(sid.get("end_offset", -1)), int(sid.get("epoch", -1)))
        if int(diverging.get("epoch", -1)) >= 0:
            target = OffsetAndEpoch(int(diverging["end_offset"]), int(diverging["epoch"]))
            offset = self.log.truncation_offset(target)
            if self._high_watermark is not None and offset < self._high_watermark:
                log.error(
                    "node %d: leader %d asked to truncate to %d, below the high watermark %d",
                    self.node_id,
                    source,
                    offset,
                    self._high_watermark,
                )
                return False
            self._truncate(offset)
            log.info(
                "node %d: truncated to %d (diverging %s from leader %d)",
                self.node_id,
                offset,
                target,
                source,
            )
        elif snapshot.offset >= 0 or snapshot.epoch >= 0:
            # The records are gone below the leader's log start: fetch its snapshot.
            if not self._start_snapshot_fetch(state, snapshot):
                return False
        else:
            batches = p.get("records") or []
            for batch in batches:
                if not isinstance(batch, LogBatch):
                    raise TypeError("records must be decoded into LogBatch")
                if batch.end_offset <= self.log.end_offset:
                    continue
                if batch.base_offset != self.log.end_offset:
                    log.warning(
                        "node %d: fetched batch at %d, log ends at %d",
                        self.node_id,
                        batch.base_offset,
                        self.log.end_offset,
                    )
                    return False
                self._append(batch)
            hw = int(p.get("high_watermark", -1))
            if hw >= 0:
                state.update_high_watermark(hw)
                self._update_committed(hw)
        state.has_fetched_from_leader = True
        state.reset_fetch_timeout(now_ms, self.config.fetch_timeout_ms)
        return True

    def _maybe_send_fetch(self, leader_id: int | None, now_ms: int) -> None:
        if leader_id is None or not self.requests.is_ready(leader_id, now_ms):
            return
        if self._maybe_send_fetch_snapshot(leader_id, now_ms):
            return
        if self.log.durable_end_offset < self.log.end_offset:
            # The fetch offset tells the leader what is durable here: wait for fsync (observers
            # too: KIP-853 may make an observer a voter whose fetch offsets then count).
            return
        update = self.dynamic.update_voter_request(cast("RaftCore", self))
        if update is not None:
            self._send(leader_id, UPDATE_RAFT_VOTER, update, now_ms)
            return
        data = msgs.fetch_request(
            self.cluster_id, self.node_id, self.epoch, self.log.end_offset, self.log.last_epoch
        )
        self._send(leader_id, msgs.FETCH, data, now_ms)

    def _send_fetch_to_any_voter(self, now_ms: int) -> None:
        targets = frozenset(self.voters) or frozenset(self.bootstrap_ids)
        if self.requests.has_inflight(targets, now_ms):
            return
        if self.log.durable_end_offset < self.log.end_offset:
            return  # as _maybe_send_fetch: only durable offsets are fetched from
        voters = sorted(targets)
        if not voters:
            return
        self._fetch_from_next_ready(voters, now_ms)

    def _fetch_from_next_ready(self, candidates: list[int], now_ms: int) -> None:
        """Fetch from the first of ``candidates`` ready for a request, going round them from
        where the last such fetch stopped."""
        for i in range(len(candidates)):
            voter = candidates[(self._observer_fetch_index + i) % len(candidates)]
            if self.requests.is_ready(voter, now_ms):
                self._observer_fetch_index += i + 1
                data = msgs.fetch_request(
                    self.cluster_id,
                    self.node_id,
                    self.epoch,
                    self.log.end_offset,
                    self.log.last_epoch,
                )
                self._send(voter, msgs.FETCH, data, now_ms)
                return

    def _on_fetch_disconnected(self, source: int, now_ms: int) -> None:
        """A voter's leader refused or dropped the connection (on loopback: its process is
        gone). With pre-vote it runs a pre-vote after a short turn (see
        :meth:`QuorumState.leader_unreachable_timeout_ms`) instead of waiting out
        ``fetch.timeout.ms``: a live leader's other followers refuse the pre-vote, so a wrong
        guess costs no epoch."""
        state = self.quorum.state
        if (
            not self.pre_vote
            or not isinstance(state, FollowerState)
            or state.leader_id != source
            or not self.quorum.is_voter
            or self._shutdown_deadline_ms is not None
        ):
            return
        if state.mark_leader_unreachable(now_ms, self.quorum.leader_unreachable_timeout_ms(source)):
            log.info(
                "node %d: the leader %d of epoch %d is unreachable (connection refused or "
                "lost); pre-vote in %d ms unless it answers",
                self.node_id,
                source,
                state.epoch,
                state.remaining_fetch_ms(now_ms),
            )

    def _asked_in_vain(self, before: object, source: int) -> bool:
        """A Fetch to a voter other than the leader (asked while the leader backs off) told
        nothing new: that voter backs off too, rather than being asked again at once."""
        state = self.quorum.state
        return state is before and isinstance(state, FollowerState) and state.leader_id != source

    def _leader_failing(self, state: FollowerState, now_ms: int) -> bool:
        """The leader's last request failed and backs off, or (for an observer, which has no
        election to fall back on) timed out lately without a word from it since: ask the
        other voters, not the leader."""
        leader = state.leader_id
        if leader is None:
            return False
        if self.requests.is_backing_off(leader, now_ms):
            return True
        return self.quorum.is_observer and self.requests.is_silent(leader, now_ms)

    def _maybe_send_fetch_to_best_node(self, state: FollowerState, now_ms: int) -> None:
        """Kafka's ``maybeSendFetchToBestNode``: while the leader's connection backs off after
        a failure (or its last request timed out), ask another voter, which names a newer epoch
        and leader if there is one (how an observer finds the new leader without waiting for
        its fetch timeout, and then without waiting on a hung leader again)."""
        leader = state.leader_id
        if leader is None or not self._leader_failing(state, now_ms):
            self._maybe_send_fetch(leader, now_ms)
            return
        if self.log.durable_end_offset < self.log.end_offset:
            return  # the fetch offset must be durable here (observers too: see _maybe_send_fetch)
        others = [v for v in sorted(self.voters) if v not in (self.node_id, leader)]
        if not others:  # the leader is the only voter to ask (a quorum of one)
            self._maybe_send_fetch(leader, now_ms)
            return
        if any(v in self.requests.inflight for v in others):
            return
        self._fetch_from_next_ready(others, now_ms)
