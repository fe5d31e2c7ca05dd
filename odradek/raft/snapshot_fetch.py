"""FetchSnapshot in the Raft core (Kafka's ``KafkaRaftClient`` ``handleFetchSnapshotRequest`` /
``handleFetchSnapshotResponse`` and the snapshot half of ``tryCompleteFetchRequest``), sans I/O.

The leader: a Fetch below its log start offset (the records there were deleted once a snapshot
covered them), at offset 0 while it holds a snapshot, or with a last fetched epoch older than
its earliest snapshot is answered with ``snapshot_id`` (its latest snapshot) instead of records
(:meth:`SnapshotFetchPaths._snapshot_for_fetch`, Kafka's ``validateOffsetAndEpoch``). A
FetchSnapshot request is checked (cluster id, leader epoch, snapshot id, position) and answered
with a :class:`SnapshotSlice` in ``unaligned_records``: which bytes of which file, for the
driver to read (the core reads no files).

The follower: a Fetch answer with ``snapshot_id`` starts a :class:`SnapshotFetch`; while it
lasts the follower sends FetchSnapshot rather than Fetch, and writes each chunk as a
:class:`~odradek.raft.raft_ready.SnapshotChunk` op. When ``size`` bytes have come, a
:class:`~odradek.raft.raft_ready.SnapshotInstall` op has the driver freeze the file, empty the
log to start at the snapshot's end offset and hand the snapshot to the listeners; the core's log
and high watermark move there at once (as they do on a truncation). The fetch belongs to the
follower state it started in: a new epoch or leader abandons it (a
:class:`~odradek.raft.raft_ready.SnapshotAbort` op deletes the partial file).

The driver tells the core which snapshots it holds and where its log starts
(:meth:`SnapshotFetchPaths.update_snapshots`) at start-up and whenever it writes or cleans
snapshots.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.raft import raft_messages as msgs
from odradek.raft.epoch_state import EpochState, FollowerState, LeaderState
from odradek.raft.raft_log import OffsetAndEpoch
from odradek.raft.raft_messages import (
    BROKER_NOT_AVAILABLE,
    FENCED_LEADER_EPOCH,
    INCONSISTENT_CLUSTER_ID,
    INVALID_REQUEST,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    POSITION_OUT_OF_RANGE,
    SNAPSHOT_NOT_FOUND,
    UNKNOWN_LEADER_EPOCH,
    UNKNOWN_TOPIC_OR_PARTITION,
    Data,
    RaftMessage,
)
from odradek.raft.raft_ready import Ready, SnapshotAbort, SnapshotChunk, SnapshotInstall

if TYPE_CHECKING:
    from odradek.raft.quorum import QuorumConfig, QuorumState
    from odradek.raft.raft_log import RaftLog
    from odradek.raft.request_manager import RequestManager

log = logging.getLogger("odradek.raft.raft_core")

# Kafka's KafkaRaftClient.MAX_FETCH_SIZE_BYTES: FetchSnapshot's max_bytes (no configuration).
FETCH_SNAPSHOT_MAX_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class SnapshotSlice:
    """The bytes a FetchSnapshot response carries, for the driver to read from the snapshot
    file: ``length`` bytes from ``position`` of snapshot ``snapshot_id``."""

    snapshot_id: OffsetAndEpoch
    position: int
    length: int


@dataclass
class SnapshotFetch:
    """A snapshot the follower is fetching: ``position`` bytes written so far; ``size`` once
    the leader told it. ``owner`` is the follower state it belongs to."""

    snapshot_id: OffsetAndEpoch
    owner: EpochState
    position: int = 0
    size: int | None = None


class SnapshotCatalog:
    """The finished snapshots a node holds (id -> size in bytes), as its driver reports them.
    The bootstrap snapshot (end offset 0) is never replicated and is left out."""

    def __init__(self) -> None:
        self.sizes: dict[OffsetAndEpoch, int] = {}

    def replace(self, sizes: Mapping[OffsetAndEpoch, int]) -> None:
        self.sizes = {sid: size for sid, size in sizes.items() if sid.offset > 0 and size > 0}

    @property
    def earliest(self) -> OffsetAndEpoch | None:
        return min(self.sizes, key=_order) if self.sizes else None

    @property
    def latest(self) -> OffsetAndEpoch | None:
        return max(self.sizes, key=_order) if self.sizes else None


def _order(sid: OffsetAndEpoch) -> tuple[int, int]:
    return sid.offset, sid.epoch


# -- messages (the generated fetch_snapshot.py's fields) ----------------------------------------


def fetch_snapshot_request(
    cluster_id: str,
    replica_id: int,
    epoch: int,
    snapshot_id: OffsetAndEpoch,
    position: int,
    max_bytes: int,
) -> Data:
    partition = {
        "partition": msgs.METADATA_PARTITION,
        "current_leader_epoch": epoch,
        "snapshot_id": {"end_offset": snapshot_id.offset, "epoch": snapshot_id.epoch},
        "position": position,
        "replica_directory_id": None,
    }
    return {
        "cluster_id": cluster_id,
        "replica_id": replica_id,
        "max_bytes": max_bytes,
        "topics": [{"name": msgs.METADATA_TOPIC, "partitions": [partition]}],
    }


def fetch_snapshot_response(
    error: int,
    epoch: int,
    leader_id: int,
    snapshot_id: OffsetAndEpoch | None = None,
    size: int = -1,
    position: int = -1,
    records: SnapshotSlice | bytes = b"",
    top_error: int = 0,
) -> Data:
    if top_error:
        return {"throttle_time_ms": 0, "error_code": top_error, "topics": [], "node_endpoints": []}
    partition = {
        "index": msgs.METADATA_PARTITION,
        "error_code": error,
        "snapshot_id": {
            "end_offset": snapshot_id.offset if snapshot_id else -1,
            "epoch": snapshot_id.epoch if snapshot_id else -1,
        },
        "current_leader": {"leader_id": leader_id, "leader_epoch": epoch},
        "size": size,
        "position": position,
        "unaligned_records": records,
    }
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "topics": [{"name": msgs.METADATA_TOPIC, "partitions": [partition]}],
        "node_endpoints": [],
    }


def _snapshot_id(p: Data) -> OffsetAndEpoch:
    sid = p.get("snapshot_id") or {}
    return OffsetAndEpoch(int(sid.get("end_offset", -1)), int(sid.get("epoch", -1)))


class SnapshotFetchPaths:
    """FetchSnapshot, both ends, and the snapshot answer to a Fetch. Everything it uses is
    defined by :class:`~odradek.raft.raft_core.RaftCore`."""

    if TYPE_CHECKING:
        node_id: int
        voters: frozenset[int]
        cluster_id: str
        config: QuorumConfig
        log: RaftLog
        quorum: QuorumState
        requests: RequestManager
        snapshots: SnapshotCatalog
        snapshot_fetch_max_bytes: int
        _snapshot_fetch: SnapshotFetch | None
        _ready: Ready
        _high_watermark: int | None
        _next_commit_offset: int
        _shutdown_deadline_ms: int | None

        @property
        def epoch(self) -> int: ...

        def _send(self, destination: int, api_key: int, data: Data, now_ms: int) -> None: ...

        def _respond(self, request: RaftMessage, data: Data) -> None: ...

        def _maybe_handle_common_response(
            self, error: int, leader_id: int | None, epoch: int, now_ms: int
        ) -> bool | None: ...

    # -- the driver's input ---------------------------------------------------------------------

    def update_snapshots(
        self,
        snapshots: Mapping[OffsetAndEpoch, int],
        log_start: OffsetAndEpoch | None,
        now_ms: int,
    ) -> None:
        """The finished snapshots this node holds (id -> size in bytes) and the snapshot its
        log now starts at (None: offset 0), as the driver found them at start-up or after it
        wrote or cleaned snapshots. The records below the log start leave the core's log."""
        self.snapshots.replace(snapshots)
        if log_start is None or log_start.offset <= self.log.start.offset:
            return
        limit = min(self.log.end_offset, self._high_watermark or 0)
        if log_start.offset > limit:
            log.warning(
                "node %d: log start %s is past the committed log (%d); ignored",
                self.node_id,
                log_start,
                limit,
            )
            return
        self.log.delete_before(log_start)
        log.debug("node %d: log now starts at %s", self.node_id, log_start)

    # -- the leader's side ----------------------------------------------------------------------

    def _snapshot_for_fetch(self, offset: int, epoch: int) -> OffsetAndEpoch | None:
        """The snapshot a follower fetching at ``offset`` (last fetched ``epoch``) must fetch
        first, or None when the log serves it (Kafka's ``validateOffsetAndEpoch``)."""
        latest = self.snapshots.latest
        if latest is None:
            return None
        if offset == 0:
            return latest  # an empty follower: the snapshot is cheaper than the whole log
        earliest = self.snapshots.earliest
        start = self.log.start.offset
        assert earliest is not None
        if offset < start or (offset == start and epoch != earliest.epoch) or epoch < earliest.epoch:
            return latest
        return None

    def _handle_fetch_snapshot_request(self, request: RaftMessage, now_ms: int) -> None:
        data = request.data
        epoch, leader = self.epoch, self.quorum.leader_id_or_nil
        cluster_id = data.get("cluster_id")
        if cluster_id is not None and cluster_id != self.cluster_id:
            log.warning(
                "node %d: %r from cluster %r, this is %r",
                self.node_id,
                request,
                cluster_id,
                self.cluster_id,
            )
            self._respond(request, fetch_snapshot_response(0, 0, 0, top_error=INCONSISTENT_CLUSTER_ID))
            return
        topics = data.get("topics")
        if (
            not isinstance(topics, list)
            or len(topics) != 1
            or not isinstance(topics[0], dict)
            or not isinstance(topics[0].get("partitions"), list)
            or len(topics[0]["partitions"]) != 1
        ):
            self._respond(request, fetch_snapshot_response(0, 0, 0, top_error=INVALID_REQUEST))
            return
        p = msgs.single_partition(data)
        if p is None:
            self._respond(request, fetch_snapshot_response(UNKNOWN_TOPIC_OR_PARTITION, epoch, leader))
            return
        self._respond(request, self._answer_fetch_snapshot(request, p, now_ms))

    def _leader_request_error(self, current_epoch: int) -> int:
        """The error a Fetch or FetchSnapshot at ``current_epoch`` gets before anything is read
        (NONE: this node leads that epoch and is not shutting down)."""
        if current_epoch < self.epoch:
            return FENCED_LEADER_EPOCH
        if current_epoch > self.epoch:
            return UNKNOWN_LEADER_EPOCH
        if not isinstance(self.quorum.state, LeaderState):
            return NOT_LEADER_OR_FOLLOWER
        if self._shutdown_deadline_ms is not None:
            return BROKER_NOT_AVAILABLE
        return NONE

    def _answer_fetch_snapshot(self, request: RaftMessage, p: Data, now_ms: int) -> Data:
        epoch, leader = self.epoch, self.quorum.leader_id_or_nil
        state = self.quorum.state
        error = self._leader_request_error(int(p["current_leader_epoch"]))
        if error != NONE or not isinstance(state, LeaderState):
            return fetch_snapshot_response(error, epoch, leader)
        sid = _snapshot_id(p)
        size = self.snapshots.sizes.get(sid)
        if size is None:
            log.info("node %d: %r asks for snapshot %s, not here", self.node_id, request, sid)
            return fetch_snapshot_response(SNAPSHOT_NOT_FOUND, epoch, leader)
        position = int(p["position"])
        if position < 0 or position >= size:
            log.warning(
                "node %d: %r asks for position %d of snapshot %s (%d bytes)",
                self.node_id,
                request,
                position,
                sid,
                size,
            )
            return fetch_snapshot_response(POSITION_OUT_OF_RANGE, epoch, leader)
        max_bytes = max(1, int(request.data.get("max_bytes", FETCH_SNAPSHOT_MAX_BYTES)))
        replica_id = int(request.data.get("replica_id", msgs.NO_ID))
        if replica_id in self.voters and replica_id != self.node_id:
            state.update_check_quorum_for_following_voter(replica_id, now_ms)
        piece = SnapshotSlice(sid, position, min(max_bytes, size - position))
        return fetch_snapshot_response(NONE, epoch, leader, sid, size, position, piece)

    # -- the follower's side --------------------------------------------------------------------

    def _current_snapshot_fetch(self) -> SnapshotFetch | None:
        """The fetch in progress, if it belongs to the current follower state (else it is
        abandoned)."""
        fetch = self._snapshot_fetch
        if fetch is not None and fetch.owner is not self.quorum.state:
            log.info(
                "node %d: abandoned fetching snapshot %s (now %s)",
                self.node_id,
                fetch.snapshot_id,
                self.quorum.state,
            )
            self._abort_snapshot_fetch()
            return None
        return fetch

    def _abort_snapshot_fetch(self) -> None:
        fetch, self._snapshot_fetch = self._snapshot_fetch, None
        if fetch is not None and fetch.position > 0:
            self._ready.log_ops.append(SnapshotAbort(fetch.snapshot_id))

    def _start_snapshot_fetch(self, state: FollowerState, sid: OffsetAndEpoch) -> bool:
        """The leader answered a Fetch with ``sid``. False when the answer is unusable."""
        if sid.offset <= 0 or sid.epoch < 0:
            log.error("node %d: leader %s sent snapshot id %s", self.node_id, state.leader_id, sid)
            return False
        if self._high_watermark is not None and sid.offset < self._high_watermark:
            log.error(
                "node %d: leader %s sent snapshot %s, below the high watermark %d",
                self.node_id,
                state.leader_id,
                sid,
                self._high_watermark,
            )
            return False
        fetch = self._current_snapshot_fetch()
        if fetch is not None and fetch.snapshot_id == sid:
            return True
        self._abort_snapshot_fetch()
        size = self.snapshots.sizes.get(sid)
        if size is not None:
            log.info("node %d: leader %s sent snapshot %s, already here", self.node_id, state.leader_id, sid)
            self._install_snapshot(sid, size)
            return True
        log.info("node %d: fetching snapshot %s from leader %s", self.node_id, sid, state.leader_id)
        self._snapshot_fetch = SnapshotFetch(sid, state)
        return True

    def _maybe_send_fetch_snapshot(self, leader_id: int, now_ms: int) -> bool:
        """Send the next FetchSnapshot if a snapshot is being fetched (True: then no Fetch)."""
        fetch = self._current_snapshot_fetch()
        if fetch is None:
            return False
        data = fetch_snapshot_request(
            self.cluster_id,
            self.node_id,
            self.epoch,
            fetch.snapshot_id,
            fetch.position,
            self.snapshot_fetch_max_bytes,
        )
        self._send(leader_id, msgs.FETCH_SNAPSHOT, data, now_ms)
        return True

    def _handle_fetch_snapshot_response(self, source: int, p: Data, now_ms: int) -> bool:
        error = int(p["error_code"])
        current = p.get("current_leader") or {}
        leader = int(current.get("leader_id", -1))
        handled = self._maybe_handle_common_response(
            error, leader if leader >= 0 else None, int(current.get("leader_epoch", -1)), now_ms
        )
        if handled is not None:
            return handled
        state = self.quorum.state
        if not isinstance(state, FollowerState) or state.leader_id != source:
            return True
        fetch = self._current_snapshot_fetch()
        sid = _snapshot_id(p)
        if error == SNAPSHOT_NOT_FOUND or (error == NONE and (sid.offset < 0 or sid.epoch < 0)):
            # The leader deleted it meanwhile: start over with a Fetch.
            log.info("node %d: leader %d no longer has snapshot %s", self.node_id, source, fetch)
            self._abort_snapshot_fetch()
            state.reset_fetch_timeout(now_ms, self.config.fetch_timeout_ms)
            return True
        if error == POSITION_OUT_OF_RANGE:
            log.warning("node %d: leader %d: position out of range in %s", self.node_id, source, fetch)
            self._abort_snapshot_fetch()
            return False
        if error != NONE:
            return False
        if fetch is None or fetch.snapshot_id != sid:
            log.warning(
                "node %d: FetchSnapshot response for %s from %d, fetching %s",
                self.node_id,
                sid,
                source,
                fetch,
            )
            return False
        position, size = int(p["position"]), int(p["size"])
        data = p.get("unaligned_records") or b""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("unaligned_records must be bytes")
        if (
            position != fetch.position
            or size <= 0
            or (fetch.size is not None and size != fetch.size)
            or position + len(data) > size
            or not data
        ):
            log.warning(
                "node %d: FetchSnapshot response from %d at %d of %d bytes (%d bytes) does not "
                "continue %s: fetching it again",
                self.node_id,
                source,
                position,
                size,
                len(data),
                fetch,
            )
            self._abort_snapshot_fetch()
            return False
        fetch.size = size
        self._ready.log_ops.append(SnapshotChunk(sid, position, bytes(data)))
        fetch.position += len(data)
        if fetch.position == size:
            self._snapshot_fetch = None
            self._install_snapshot(sid, size)
            log.info(
                "node %d: fetched snapshot %s (%d bytes) from leader %d; the log starts there",
                self.node_id,
                sid,
                size,
                source,
            )
        state.reset_fetch_timeout(now_ms, self.config.fetch_timeout_ms)
        return True

    def _install_snapshot(self, sid: OffsetAndEpoch, size: int) -> None:
        self._ready.log_ops.append(SnapshotInstall(sid, size))
        self.log.reset_to(sid)
        self.snapshots.replace({sid: size})
        if self._high_watermark is None or self._high_watermark < sid.offset:
            self._high_watermark = sid.offset
        self._next_commit_offset = max(self._next_commit_offset, sid.offset)
        state = self.quorum.state
        if isinstance(state, FollowerState):
            state.update_high_watermark(sid.offset)
