"""Partition: one topic-partition's replica on this broker, as leader or follower (Kafka's
``cluster/Partition.scala``).

It owns the leadership state the controller decided — a :class:`PartitionState`, which a KRaft
metadata delta and a ZooKeeper-mode LeaderAndIsr request both give — the local log, and the
high watermark: as leader, the HW is the smallest log end offset among the ISR (this replica's
own LEO plus the LEOs followers report when they fetch, :mod:`odradek.cluster.replica`), counting
the members an ISR change proposed to the controller adds (Kafka's maximal ISR). A single node is
its own whole ISR, so the HW follows every append, yet produce with acks=-1 waits for exactly this
rule. The leader proposes ISR changes (followers caught up, or lagging past
``replica.lag.time.max.ms``); they take effect once the controller has committed them. As
follower it appends what its replica fetcher brings, with the leader's offsets, epochs and HW.

A sans-I/O core: the replica manager creates, truncates and deletes logs (off the event loop)
and hands the log in; until it has (``log`` is None) the partition answers
NOT_LEADER_OR_FOLLOWER, as Kafka's does while its leadership change is under way.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from odradek.cluster.replica import IsrState, Replica, can_join_isr, out_of_sync_replicas
from odradek.log.append_origin import AppendOrigin
from odradek.log.errors import OffsetOutOfRangeError
from odradek.log.leader_epoch import UNDEFINED_EPOCH
from odradek.log.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    Log,
)
from odradek.protocol.errors import Errors, KafkaError
from odradek.records.batch import AppendInfo

log = logging.getLogger(__name__)

READ_COMMITTED = 1  # Fetch / ListOffsets isolation_level
NO_CONTROLLER_EPOCH = -1  # KRaft: leadership comes from the metadata log, not a controller epoch


@dataclass(frozen=True)
class PartitionState:
    """What the controller decided for one partition (Kafka's LeaderAndIsrPartitionState; in
    KRaft mode built from a PartitionRegistration). ``controller_epoch`` is ZooKeeper mode's
    fencing of old controllers and stays -1 under KRaft."""

    topic: str
    partition: int
    topic_id: uuid.UUID
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    partition_epoch: int
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    controller_epoch: int = NO_CONTROLLER_EPOCH


@dataclass
class LogReadResult:
    error: Errors
    # Bytes, or a FetchDataInfo (file regions) that the socket server sends with sendfile.
    records: Any
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    # KIP-320: (epoch, end offset) when a follower's last fetched epoch diverges from the log.
    diverging_epoch: tuple[int, int] | None = None
    # KIP-392: the replica the consumer should read from instead (-1: none); no records then.
    preferred_read_replica: int = -1
    # read_committed: (producer id, first offset) of the aborted transactions in the range read
    # (None for read_uncommitted and followers: the response's null list).
    aborted_transactions: list[tuple[int, int]] | None = None


class Partition:
    def __init__(self, topic: str, partition: int, topic_id: uuid.UUID, local_broker_id: int) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.local_broker_id = local_broker_id
        self.log: Log | None = None
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.controller_epoch = NO_CONTROLLER_EPOCH
        self.replicas: list[int] = []
        self.adding_replicas: list[int] = []
        self.removing_replicas: list[int] = []
        self.isr: list[int] = []  # the committed ISR (what the controller last decided)
        # An ISR change proposed to the controller with AlterPartition, until it answers.
        self.pending_isr: tuple[int, ...] | None = None
        # Each follower as its fetches report it (Kafka's remoteReplicas); leader only.
        self.remote_replicas: dict[int, Replica] = {}
        # The LEO when this leader epoch started (Kafka's leaderEpochStartOffsetOpt).
        self.leader_epoch_start_offset = -1
        self._reset_followers = False  # a new leadership whose followers' state is not reset yet

    def __repr__(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def is_leader(self) -> bool:
        """Leads, with its log ready (Kafka's leader has its log from makeLeader on)."""
        return self.leader_id == self.local_broker_id and self.log is not None

    # -- leadership -----------------------------------------------------------------------------

    def is_stale(self, state: PartitionState) -> bool:
        """A state older than the one applied: a lower partition epoch (Kafka's check in
        makeLeader/makeFollower), a lower leader epoch, or an older controller's."""
        return (
            state.partition_epoch < self.partition_epoch
            or state.leader_epoch < self.leader_epoch
            or state.controller_epoch < self.controller_epoch
        )

    def _take_state(self, state: PartitionState) -> None:
        self.replicas = list(state.replicas)
        self.adding_replicas = list(state.adding_replicas)
        self.removing_replicas = list(state.removing_replicas)
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.controller_epoch = state.controller_epoch

    def make_leader(self, state: PartitionState, log_: Log | None, now_ms: int = 0) -> bool:
        """Become leader (Kafka's Partition.makeLeader). ``log_`` is None while the replica
        manager is still working on its files (then :meth:`attach_log` follows); until then the
        partition serves nothing.

        True for a new leadership (not leader before, or a new leader epoch); False for one
        already applied or a stale state, which is refused and changes nothing."""
        if self.is_stale(state):
            log.info(
                "%s: skipped the become-leader state change to leader epoch %d, partition epoch %d: "
                "already at leader epoch %d, partition epoch %d",
                self, state.leader_epoch, state.partition_epoch, self.leader_epoch, self.partition_epoch,
            )
            return False
        if state.leader != self.local_broker_id:
            raise ValueError(f"{self}: state names leader {state.leader}, not this broker {self.local_broker_id}")
        is_new = self.leader_id != self.local_broker_id or state.leader_epoch != self.leader_epoch
        # The metadata may bring the partition epoch an AlterPartition answer already gave: a
        # proposal made since, at that epoch, may still be committed, so it stays pending (the
        # HW keeps counting a follower being added). A newer partition epoch supersedes it.
        keep_pending = not is_new and state.partition_epoch == self.partition_epoch
        self._take_state(state)
        self.isr = list(state.isr)
        if not keep_pending:
            self.pending_isr = None  # the controller's state supersedes what was proposed
        old = self.remote_replicas
        self.remote_replicas = {
            r: old.get(r) or Replica(r) for r in self.replicas if r != self.local_broker_id
        }
        if is_new:
            # Followers must report again before they count towards the HW (Kafka's
            # resetReplicaState, done with the time and LEO in attach_log).
            self._reset_followers = True
        self.log = None
        if log_ is not None:
            self.attach_log(log_, now_ms)
        return is_new

    def make_follower(self, state: PartitionState, log_: Log | None) -> bool:
        """Become a follower of ``state.leader`` (Kafka's Partition.makeFollower): produce and
        fetch are refused with NOT_LEADER_OR_FOLLOWER, the log is kept. A follower does not
        track the ISR (the leader does). True when the leader or leader epoch changed; False
        for a state already applied or a stale one, which is refused and changes nothing."""
        if self.is_stale(state):
            log.info(
                "%s: skipped the become-follower state change to leader epoch %d, partition epoch %d: "
                "already at leader epoch %d, partition epoch %d",
                self, state.leader_epoch, state.partition_epoch, self.leader_epoch, self.partition_epoch,
            )
            return False
        if state.leader == self.local_broker_id:
            raise ValueError(f"{self}: state names this broker {state.leader} leader, not follower")
        is_new = self.leader_id != state.leader or state.leader_epoch != self.leader_epoch
        self._take_state(state)
        self.isr = []
        self.pending_isr = None
        self.remote_replicas = {}
        self.log = log_
        if is_new:
            log.debug("%s: follower of broker %d at leader epoch %d", self, state.leader, state.leader_epoch)
        return is_new

    def attach_log(self, log_: Log, now_ms: int = 0) -> None:
        """The log is ready (created, or truncated for this role). A new leader starts its
        epoch at its log end offset in the leader epoch cache (Kafka's
        maybeAssignEpochStartOffset): a follower whose log goes beyond that offset in an older
        epoch learns from the diverging epoch where to truncate."""
        self.log = log_
        if self.is_leader:
            leo = log_.log_end_offset
            if log_.leader_epoch_cache.latest_epoch < self.leader_epoch:
                log_.leader_epoch_cache.assign(self.leader_epoch, leo)
            if self._reset_followers:
                self._reset_followers = False
                self.leader_epoch_start_offset = leo
                for r, rep in self.remote_replicas.items():
                    rep.reset(now_ms, leo, is_new_leader=True, in_sync=r in self.isr)
            log.debug(
                "%s: leader at epoch %d, ISR %s, log end offset %d, high watermark %d",
                self, self.leader_epoch, self.isr, log_.log_end_offset, log_.high_watermark,
            )
            self.maybe_increment_leader_hw()

    def stop(self) -> None:
        """This broker no longer hosts the replica (Kafka's StopReplica)."""
        self.leader_id = -1
        self.log = None

    # -- high watermark -------------------------------------------------------------------------

    @property
    def maximal_isr(self) -> list[int] | tuple[int, ...]:
        """The committed ISR plus the members a pending change adds (Kafka's maximalIsr)."""
        if self.pending_isr is None:
            return self.isr
        return IsrState(tuple(self.isr), self.pending_isr).maximal_isr

    def maybe_increment_leader_hw(self) -> bool:
        """HW = the smallest LEO in the maximal ISR (Kafka's maybeIncrementLeaderHW)."""
        if self.log is None or not self.is_leader:
            return False
        leo = self.log.log_end_offset
        new_hw = leo
        for r in self.maximal_isr:
            if r == self.local_broker_id:
                continue
            rep = self.remote_replicas.get(r)
            new_hw = min(new_hw, rep.log_end_offset if rep is not None else -1)
        if new_hw > self.log.high_watermark:
            self.log.high_watermark = new_hw
            return True
        return False

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, Errors]:
        """For acks=-1: has the HW reached ``required_offset``? (Kafka's same-named check.)"""
        if self.log is None or not self.is_leader:
            return True, Errors.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark >= required_offset:
            min_isr = self.log.config.min_insync_replicas
            if len(self.isr) < min_isr:
                return True, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return True, Errors.NONE
        return False, Errors.NONE

    # -- leader operations ----------------------------------------------------------------------

    def _leader_log(self, current_leader_epoch: int = -1) -> Log:
        if self.log is None or not self.is_leader:
            raise KafkaError(Errors.NOT_LEADER_OR_FOLLOWER, f"This broker is not the leader of {self}")
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                raise KafkaError(Errors.FENCED_LEADER_EPOCH)
            if current_leader_epoch > self.leader_epoch:
                raise KafkaError(Errors.UNKNOWN_LEADER_EPOCH)
        return self.log

    def append_records_to_leader(
        self, buf: bytearray, required_acks: int, now_ms: int, origin: AppendOrigin = AppendOrigin.CLIENT
    ) -> AppendInfo:
        log_ = self._leader_log()
        if required_acks == -1 and len(self.isr) < log_.config.min_insync_replicas:
            raise KafkaError(
                Errors.NOT_ENOUGH_REPLICAS,
                f"The size of the current ISR {self.isr} is insufficient to satisfy the "
                f"min.isr requirement of {log_.config.min_insync_replicas} for partition {self}",
            )
        info = log_.append_as_leader(buf, self.leader_epoch, now_ms, origin)
        self.maybe_increment_leader_hw()
        return info

    def read_records(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation_level: int,
        min_one_message: bool,
        current_leader_epoch: int = -1,
        last_fetched_epoch: int = -1,
        for_follower: bool = False,
        fetch_only_from_leader: bool = True,
    ) -> LogReadResult:
        """A consumer reads up to the HW (``isolation_level`` 0, read_uncommitted) or the last
        stable offset (1, read_committed: no record of an open transaction, and the aborted
        transactions of the range read so that the consumer can drop their records); a follower
        (``for_follower``) up to the LEO. A follower's ``last_fetched_epoch`` is checked against
        the leader epoch cache first (KIP-320): where the follower's log diverges, the answer is
        the diverging epoch and its end offset, with no records. Without
        ``fetch_only_from_leader`` (a consumer's Fetch v11+, KIP-392) a follower serves it too,
        up to its own HW / LSO."""
        if fetch_only_from_leader or self.is_leader:
            log_ = self._leader_log(current_leader_epoch)
        else:
            log_ = self._follower_log_for_consumer(current_leader_epoch)
        hw = log_.high_watermark
        lso = log_.last_stable_offset
        if last_fetched_epoch >= 0:
            epoch, end = log_.end_offset_for_epoch(last_fetched_epoch)
            if epoch == UNDEFINED_EPOCH or end < 0:
                # Nothing this leader knows at or below that epoch: the follower must reset.
                return LogReadResult(
                    Errors.OFFSET_OUT_OF_RANGE, None, hw, lso, log_.log_start_offset, log_.log_end_offset
                )
            if end < fetch_offset or epoch < last_fetched_epoch:
                return LogReadResult(
                    Errors.NONE, b"", hw, lso, log_.log_start_offset, log_.log_end_offset, (epoch, end)
                )
        read_committed = isolation_level == READ_COMMITTED and not for_follower
        if for_follower:
            max_offset = log_.log_end_offset
        else:
            max_offset = lso if read_committed else hw
        aborted: list[tuple[int, int]] | None = None
        try:
            data = log_.read(fetch_offset, max_bytes, max_offset, min_one_message)
            records: Any = data if data.regions else b""
            error = Errors.NONE
            if read_committed:
                # Every aborted transaction that overlaps what may have been read (Kafka bounds
                # it by the end of the data read; the LSO is a superset consumers accept).
                aborted = [
                    (t.producer_id, t.first_offset)
                    for t in log_.collect_aborted_transactions(fetch_offset, max_offset)
                ] if data.regions else []
        except OffsetOutOfRangeError:
            records, error = None, Errors.OFFSET_OUT_OF_RANGE
        return LogReadResult(
            error, records, hw, lso, log_.log_start_offset, log_.log_end_offset, aborted_transactions=aborted
        )

    def _follower_log_for_consumer(self, current_leader_epoch: int) -> Log:
        """A follower's log for a consumer's read (Kafka's localLogWithEpochOrThrow without
        requiring leadership): the consumer's leader epoch must be this replica's."""
        log_ = self._follower_log()
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                raise KafkaError(Errors.FENCED_LEADER_EPOCH)
            if current_leader_epoch > self.leader_epoch:
                raise KafkaError(Errors.UNKNOWN_LEADER_EPOCH)
        return log_

    def fetch_offset_for_timestamp(
        self, timestamp: int, isolation_level: int, current_leader_epoch: int
    ) -> tuple[int, int, int]:
        """(timestamp, offset, leader_epoch) for ListOffsets; offset -1 when there is none.
        Consumers see up to the HW (read_uncommitted) or the LSO (read_committed, isolation
        level 1): LATEST is that offset, and an offset found by timestamp at or beyond it is
        not answered (Kafka's lastFetchableOffset)."""
        log_ = self._leader_log(current_leader_epoch)
        last_fetchable = log_.last_stable_offset if isolation_level == READ_COMMITTED else log_.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            return -1, last_fetchable, self.leader_epoch
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return -1, -1, -1  # no tiered storage
        found = log_.fetch_offset_by_timestamp(timestamp)
        if found is None:
            return -1, -1, -1
        off, ts, epoch = found
        if timestamp not in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP) and off >= last_fetchable:
            return -1, -1, -1  # not yet visible to consumers (by timestamp or MAX_TIMESTAMP, as Kafka)
        return ts, off, epoch

    def last_offset_for_leader_epoch(self, current_leader_epoch: int, leader_epoch: int) -> tuple[int, int]:
        log_ = self._leader_log(current_leader_epoch)
        return log_.end_offset_for_epoch(leader_epoch)

    def delete_records_on_leader(self, offset: int) -> int:
        """DeleteRecords: move the log start offset; returns the new low watermark."""
        log_ = self._leader_log()
        try:
            return log_.delete_records(offset)
        except OffsetOutOfRangeError as e:
            raise KafkaError(Errors.OFFSET_OUT_OF_RANGE, str(e)) from e

    # -- the leader's view of its followers (Kafka's updateFollowerFetchState, ISR changes) -----

    def update_follower_fetch_state(
        self, replica_id: int, fetch_offset: int, log_start_offset: int, now_ms: int, broker_epoch: int = -1
    ) -> bool:
        """A follower fetched at ``fetch_offset``: record its LEO and caught-up time. True when
        the HW moved (the caller completes what waits on it). A fetch from a broker that is not
        a replica is refused with NOT_LEADER_OR_FOLLOWER."""
        log_ = self._leader_log()
        rep = self.remote_replicas.get(replica_id)
        if rep is None:
            raise KafkaError(
                Errors.NOT_LEADER_OR_FOLLOWER,
                f"Broker {replica_id} fetched {self} but is not one of its replicas {self.replicas}",
            )
        old_leo = rep.log_end_offset
        rep.update_fetch_state(fetch_offset, log_start_offset, now_ms, log_.log_end_offset, broker_epoch)
        if old_leo == fetch_offset:
            return False
        return self.maybe_increment_leader_hw()

    def maybe_expand_isr(self, replica_id: int) -> tuple[int, ...] | None:
        """The ISR to propose when ``replica_id`` has caught up (Kafka's maybeExpandIsr), marked
        pending; None when nothing is to change or a change is already in flight."""
        if self.log is None or not self.is_leader or self.pending_isr is not None:
            return None
        if replica_id in self.isr:
            return None
        rep = self.remote_replicas.get(replica_id)
        if rep is None or not can_join_isr(rep, self.log.high_watermark, self.leader_epoch_start_offset):
            return None
        proposed = (*self.isr, replica_id)
        self.pending_isr = proposed
        log.info(
            "%s: proposing to expand the ISR from %s to %s (follower %d reached %d, high watermark %d)",
            self, self.isr, list(proposed), replica_id, rep.log_end_offset, self.log.high_watermark,
        )
        return proposed

    def maybe_shrink_isr(self, now_ms: int, max_lag_ms: int) -> tuple[int, ...] | None:
        """The ISR to propose without the followers that fell behind for more than
        ``replica.lag.time.max.ms`` (Kafka's maybeShrinkIsr), marked pending; the HW may move
        only once the controller has committed it."""
        if self.log is None or not self.is_leader or self.pending_isr is not None:
            return None
        leo = self.log.log_end_offset
        lagging = out_of_sync_replicas(
            [r for r in self.isr if r != self.local_broker_id], self.remote_replicas, leo, now_ms, max_lag_ms
        )
        if not lagging:
            return None
        proposed = tuple(r for r in self.isr if r not in lagging)
        self.pending_isr = proposed
        for r in lagging:
            rep = self.remote_replicas[r]
            log.info(
                "%s: shrinking the ISR from %s to %s: follower %d is at %d, the leader at %d; last "
                "caught up %d ms ago", self, self.isr, list(proposed), r, rep.log_end_offset, leo,
                now_ms - rep.last_caught_up_time_ms,
            )
        return proposed

    def alter_isr_done(
        self, proposed: tuple[int, ...], error: Errors, leader_epoch: int = -1, partition_epoch: int = -1,
        isr: tuple[int, ...] = (),
    ) -> bool:
        """The controller's answer to the proposal ``proposed`` (Kafka's handleAlterPartition*).
        NONE: its ISR is committed and in effect (unless the metadata already moved past it).
        INELIGIBLE_REPLICA / OPERATION_NOT_ATTEMPTED: the controller says it did not apply it at
        the current partition epoch: dropped, the committed ISR stays. Any other error (e.g.
        INVALID_UPDATE_VERSION for a retry of a proposal that was committed but whose answer was
        lost, FENCED_LEADER_EPOCH): whether it was applied is unknown, so it stays pending — the
        HW keeps counting the maximal ISR and nothing else is proposed — until the metadata
        brings the controller's state (Kafka's handleAlterPartitionError). True when the HW moved."""
        if self.pending_isr != proposed:
            return False  # a newer state (metadata) replaced the proposal
        if error != Errors.NONE:
            level = logging.DEBUG if error == Errors.INVALID_UPDATE_VERSION else logging.INFO
            if error in (Errors.INELIGIBLE_REPLICA, Errors.OPERATION_NOT_ATTEMPTED):
                self.pending_isr = None
                log.log(level, "%s: the controller refused the ISR %s: %s", self, list(proposed), error.name)
            else:
                log.log(level, "%s: the controller refused the ISR %s: %s; awaiting the metadata",
                        self, list(proposed), error.name)
            return False
        self.pending_isr = None
        if leader_epoch != self.leader_epoch or partition_epoch <= self.partition_epoch:
            return False  # the metadata got here first, or it is another leadership's answer
        self.isr = list(isr)
        self.partition_epoch = partition_epoch
        log.info("%s: ISR updated to %s, partition epoch %d", self, list(isr), partition_epoch)
        return self.maybe_increment_leader_hw()

    # -- follower operations ---------------------------------------------------------------------

    def _follower_log(self) -> Log:
        if self.log is None or self.leader_id == self.local_broker_id or self.leader_id < 0:
            raise KafkaError(Errors.NOT_LEADER_OR_FOLLOWER, f"This broker does not follow {self}")
        return self.log

    def append_records_as_follower(
        self, records: bytes | bytearray | memoryview, leader_hw: int, leader_log_start_offset: int, now_ms: int
    ) -> int:
        """Append what the leader sent (its offsets and epochs kept, batches validated, the
        leader epoch cache updated) and take its HW (never beyond this log's end) and log start
        offset. Returns the bytes appended."""
        log_ = self._follower_log()
        n = 0
        if len(records):
            info = log_.append_as_follower(records, now_ms)
            n = info.valid_bytes
        log_.high_watermark = min(leader_hw, log_.log_end_offset)
        if leader_log_start_offset > log_.log_start_offset:
            log_.maybe_increment_log_start_offset(min(leader_log_start_offset, log_.high_watermark), now_ms)
        return n
