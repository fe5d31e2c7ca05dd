"""Partition: one topic-partition's replica on this broker, as leader or follower (Kafka's
``cluster/Partition.scala``).

It owns the leadership state the controller decided — a :class:`PartitionState`, which a KRaft
metadata delta and a ZooKeeper-mode LeaderAndIsr request both give — the local log, and the
high watermark: as leader, the HW is the smallest log end offset among the ISR (this replica's
own LEO plus the LEOs followers report when they fetch). A single node is its own whole ISR, so
the HW follows every append, yet produce with acks=-1 waits for exactly this rule.

A sans-I/O core: the replica manager creates, truncates and deletes logs (off the event loop)
and hands the log in; until it has (``log`` is None) the partition answers
NOT_LEADER_OR_FOLLOWER, as Kafka's does while its leadership change is under way.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from odradek.log.errors import OffsetOutOfRangeError
from odradek.log.log import LATEST_TIERED_TIMESTAMP, LATEST_TIMESTAMP, Log
from odradek.protocol.errors import Errors, KafkaError
from odradek.records.batch import AppendInfo

log = logging.getLogger(__name__)

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
        self.isr: list[int] = []
        # Last LEO each follower reported (by fetching); the leader's own comes from its log.
        self.remote_leos: dict[int, int] = {}

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

    def make_leader(self, state: PartitionState, log_: Log | None) -> bool:
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
        self._take_state(state)
        self.isr = list(state.isr)
        if is_new:
            # Followers must report again before they count towards the HW.
            self.remote_leos = {r: -1 for r in self.replicas if r != self.local_broker_id}
        self.log = None
        if log_ is not None:
            self.attach_log(log_)
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
        self.remote_leos = {}
        self.log = log_
        if is_new:
            log.debug("%s: follower of broker %d at leader epoch %d", self, state.leader, state.leader_epoch)
        return is_new

    def attach_log(self, log_: Log) -> None:
        """The log is ready (created, or truncated for this role)."""
        self.log = log_
        if self.is_leader:
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

    def maybe_increment_leader_hw(self) -> bool:
        if self.log is None or not self.is_leader:
            return False
        leo = self.log.log_end_offset
        new_hw = leo
        for r in self.isr:
            if r == self.local_broker_id:
                continue
            new_hw = min(new_hw, self.remote_leos.get(r, -1))
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

    def append_records_to_leader(self, buf: bytearray, required_acks: int, now_ms: int) -> AppendInfo:
        log_ = self._leader_log()
        if required_acks == -1 and len(self.isr) < log_.config.min_insync_replicas:
            raise KafkaError(
                Errors.NOT_ENOUGH_REPLICAS,
                f"The size of the current ISR {self.isr} is insufficient to satisfy the "
                f"min.isr requirement of {log_.config.min_insync_replicas} for partition {self}",
            )
        info = log_.append_as_leader(buf, self.leader_epoch, now_ms)
        self.maybe_increment_leader_hw()
        return info

    def read_records(
        self,
        fetch_offset: int,
        max_bytes: int,
        isolation_level: int,
        min_one_message: bool,
        current_leader_epoch: int = -1,
    ) -> LogReadResult:
        log_ = self._leader_log(current_leader_epoch)
        hw = log_.high_watermark
        # No transactions yet: the last stable offset is the high watermark.
        max_offset = hw
        try:
            data = log_.read(fetch_offset, max_bytes, max_offset, min_one_message)
            records: Any = data if data.regions else b""
            error = Errors.NONE
        except OffsetOutOfRangeError:
            records, error = None, Errors.OFFSET_OUT_OF_RANGE
        return LogReadResult(error, records, hw, hw, log_.log_start_offset, log_.log_end_offset)

    def fetch_offset_for_timestamp(
        self, timestamp: int, isolation_level: int, current_leader_epoch: int
    ) -> tuple[int, int, int]:
        """(timestamp, offset, leader_epoch) for ListOffsets; offset -1 when there is none."""
        log_ = self._leader_log(current_leader_epoch)
        hw = log_.high_watermark
        if timestamp == LATEST_TIMESTAMP:
            return -1, hw, self.leader_epoch
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return -1, -1, -1  # no tiered storage
        found = log_.fetch_offset_by_timestamp(timestamp)
        if found is None:
            return -1, -1, -1
        off, ts, epoch = found
        if timestamp >= 0 and off >= hw:  # not yet visible to consumers
            return -1, -1, -1
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
