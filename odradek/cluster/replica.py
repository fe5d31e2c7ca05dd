"""What a leader knows of each follower of a partition (Kafka's ``cluster/Replica.scala`` and the
ISR rules of ``Partition.scala``), sans-I/O: time comes in as an argument.

- :class:`Replica`: one follower's log start and end offsets as its last fetch said, when it last
  fetched, and when it was last caught up (Kafka's ``Replica.updateFetchStateOrThrow``);
- the ISR decisions: which followers are out of sync after ``replica.lag.time.max.ms``
  (:func:`out_of_sync_replicas`), whether a follower may join the ISR (:func:`can_join_isr`);
- :class:`IsrState`: the committed ISR and the change proposed to the controller, pending until it
  answers (Kafka's ``PendingExpandIsr`` / ``PendingShrinkIsr``); the high watermark counts the
  *maximal* ISR (committed plus the members being added), as Kafka does.
"""

from __future__ import annotations

from dataclasses import dataclass

UNKNOWN_OFFSET = -1


@dataclass
class Replica:
    """A remote replica as the leader sees it."""

    broker_id: int
    log_start_offset: int = UNKNOWN_OFFSET
    log_end_offset: int = UNKNOWN_OFFSET
    # The leader's LEO when this follower last fetched (Kafka's lastFetchLeaderLogEndOffset).
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0
    broker_epoch: int = -1

    def update_fetch_state(
        self,
        fetch_offset: int,
        log_start_offset: int,
        fetch_time_ms: int,
        leader_end_offset: int,
        broker_epoch: int = -1,
    ) -> None:
        """A fetch from this follower at ``fetch_offset`` (its LEO) while the leader's LEO was
        ``leader_end_offset``. The follower was caught up at this fetch if it reached the
        leader's LEO, or at its previous fetch if it now reached the LEO the leader had then."""
        if fetch_offset >= leader_end_offset:
            caught_up = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            caught_up = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        else:
            caught_up = self.last_caught_up_time_ms
        self.log_start_offset = log_start_offset
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = max(leader_end_offset, self.last_fetch_leader_log_end_offset)
        self.last_fetch_time_ms = fetch_time_ms
        self.last_caught_up_time_ms = caught_up
        self.broker_epoch = broker_epoch

    def reset(self, now_ms: int, leader_end_offset: int, is_new_leader: bool, in_sync: bool) -> None:
        """The leader was (re-)elected (Kafka's resetReplicaState): an ISR member counts as
        caught up now, any other as never, so that it holds back neither the HW nor re-joins
        the ISR before it fetches again."""
        self.last_caught_up_time_ms = now_ms if in_sync else 0
        if is_new_leader:
            self.log_start_offset = UNKNOWN_OFFSET
            self.log_end_offset = UNKNOWN_OFFSET
            self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
            self.last_fetch_time_ms = 0
            self.broker_epoch = -1
        else:
            self.last_fetch_leader_log_end_offset = leader_end_offset
            self.last_fetch_time_ms = now_ms if in_sync else 0

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        """Kafka's Replica.isCaughtUp: at the leader's LEO, or caught up within the lag bound."""
        return leader_end_offset == self.log_end_offset or now_ms - self.last_caught_up_time_ms <= max_lag_ms


def out_of_sync_replicas(
    isr: tuple[int, ...] | list[int],
    replicas: dict[int, Replica],
    leader_end_offset: int,
    now_ms: int,
    max_lag_ms: int,
) -> list[int]:
    """The ISR followers that are behind the leader's LEO and have not been caught up for more
    than ``max_lag_ms`` (Kafka's getOutOfSyncReplicas / isFollowerOutOfSync); a follower the
    leader has no state for is not judged."""
    out = []
    for r in isr:
        rep = replicas.get(r)
        if rep is None:
            continue
        if rep.log_end_offset != leader_end_offset and now_ms - rep.last_caught_up_time_ms > max_lag_ms:
            out.append(r)
    return out


def can_join_isr(replica: Replica, high_watermark: int, leader_epoch_start_offset: int) -> bool:
    """A follower may join the ISR once it has reached the high watermark and the start of the
    current leader epoch (Kafka's isFollowerInSync: so that it holds every record of this
    epoch's leader, even one below the HW it has not fetched yet)."""
    leo = replica.log_end_offset
    return leo >= 0 and leo >= high_watermark and leo >= leader_epoch_start_offset


@dataclass(frozen=True)
class IsrState:
    """The ISR in effect (committed by the controller) and a change proposed with
    AlterPartition, pending until the controller answers or the metadata shows the result."""

    isr: tuple[int, ...]
    pending: tuple[int, ...] | None = None

    @property
    def is_inflight(self) -> bool:
        return self.pending is not None

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """Committed plus proposed members: the HW waits for a follower being added (it may
        be in the ISR as soon as the controller commits) and for one being removed (it is
        still in until then)."""
        if self.pending is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending if r not in self.isr)
