"""Partition reassignment in the ZooKeeper-mode controller (Kafka 3.9's ``onPartitionReassignment``
and its triggers: ``/admin/reassign_partitions``, AlterPartitionReassignments, the ISR catching up
(AlterPartition or ``/isr_change_notification``), a target broker starting, controller failover).

RS = replicas, ORS = origin, TRS = target, AR = adding, RR = removing.

- Phase U: ZooKeeper (``/brokers/topics/<t>``) then memory get RS = ORS + TRS, AR, RR; replicas of
  a replaced reassignment that are no longer wanted are stopped and deleted.
- Phase A (TRS not yet all in the ISR): the leader epoch is bumped (conditional write), LeaderAndIsr
  with the full assignment goes to ORS, and (is_new) to AR, whose replicas become NewReplica.
- Phase B (TRS all in the ISR): AR Online; RS = TRS in memory; the leader moves if it is not in
  TRS or is dead (else its epoch is bumped); RR go Offline -> deletion -> NonExistent (StopReplica
  with delete); ZooKeeper gets RS = TRS; the partition leaves ``/admin/reassign_partitions`` (the
  znode is deleted with its last entry); UpdateMetadata to every broker; a topic deletion waiting
  on the reassignment resumes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from odradek.controller import controller_event_manager as ev
from odradek.controller.controller_context import (
    LeaderIsrAndControllerEpoch,
    PartitionAndReplica,
    PartitionState,
    ReplicaAssignment,
    ReplicaState,
    TopicPartition,
)
from odradek.controller.controller_zk_client import (
    ControllerMovedException,
    StateChangeFailedException,
)
from odradek.controller.partition_state_machine import ReassignPartitionLeaderElectionStrategy
from odradek.protocol.errors import Errors

if TYPE_CHECKING:
    from odradek.controller.kafka_controller import KafkaController

log = logging.getLogger(__name__)

ApiError = tuple[Errors, str | None]
MAX_EPOCH_BUMP_ROUNDS = 100


@dataclass
class ListPartitionReassignments(ev.ControllerEvent):
    """``partitions`` None: every partition being reassigned. ``callback`` gets the assignments
    being reassigned, or Errors.NOT_CONTROLLER."""

    partitions: Collection[TopicPartition] | None = None
    callback: Callable[[dict[TopicPartition, ReplicaAssignment] | Errors], None] | None = None
    state: ClassVar[ev.ControllerState] = ev.ControllerState.ListPartitionReassignment

    def preempt(self) -> None:
        if self.callback is not None:
            self.callback(Errors.NOT_CONTROLLER)


class ZkReassignment:
    def __init__(self, controller: KafkaController) -> None:
        self.c = controller

    # --- triggers -------------------------------------------------------------------------------

    def process_zk_reassignment(self) -> set[TopicPartition]:
        c = self.c
        if not c.is_active:
            return set()
        pending = c.zk.get_partition_reassignment()
        if not pending:
            return set()
        results: dict[TopicPartition, ApiError] = {}
        to_reassign: dict[TopicPartition, ReplicaAssignment] = {}
        for tp, target in pending.items():
            built = self._build(tp, list(target))
            if built is None:
                results[tp] = (Errors.NO_REASSIGNMENT_IN_PROGRESS, None)
            else:
                to_reassign[tp] = built
        results.update(self._trigger(to_reassign))
        failed = {tp for tp, (err, _) in results.items() if err != Errors.NONE}
        if failed:
            log.warning("Failed reassignment through zk with the following errors: %s", {tp: results[tp] for tp in failed})
            self._remove_from_zk(lambda tp, _: tp in failed)
        return {tp for tp, (err, _) in results.items() if err == Errors.NONE}

    def process_api_reassignment(self, e: ev.ApiPartitionReassignment) -> None:
        c = self.c
        callback: Callable[[Any], None] = e.callback or (lambda _: None)
        if not c.is_active:
            callback(Errors.NOT_CONTROLLER)
            return
        results: dict[TopicPartition, ApiError] = {}
        to_reassign: dict[TopicPartition, ReplicaAssignment] = {}
        for tp, target in e.reassignments.items():
            err = self._validate(tp, target) if target is not None else None
            if err is not None:
                results[tp] = err
                continue
            built = self._build(tp, list(target) if target is not None else None)
            if built is None:
                results[tp] = (Errors.NO_REASSIGNMENT_IN_PROGRESS, None)
            else:
                to_reassign[tp] = built
        self._remove_from_zk(lambda tp, _: tp in to_reassign)
        results.update(self._trigger(to_reassign))
        callback(results)

    def process_list(self, e: ListPartitionReassignments) -> None:
        c = self.c
        if e.callback is None:
            return
        if not c.is_active:
            e.callback(Errors.NOT_CONTROLLER)
            return
        parts = set(e.partitions) if e.partitions is not None else set(c.context.partitions_being_reassigned)
        out = {}
        for tp in parts:
            a = c.context.partition_full_replica_assignment(tp)
            if a.is_being_reassigned:
                out[tp] = a
        e.callback(out)

    def initialize(self) -> None:
        """On failover: the znode's reassignments, then those found in the topic znodes."""
        resumed = self.process_zk_reassignment()
        self.maybe_resume(lambda tp, _: tp not in resumed)

    def maybe_resume(self, should: Callable[[TopicPartition, ReplicaAssignment], bool]) -> None:
        ctx = self.c.context
        for tp in sorted(ctx.partitions_being_reassigned):
            a = ctx.partition_full_replica_assignment(tp)
            if should(tp, a):
                self.on_partition_reassignment(tp, a)

    def maybe_complete(self, tp: TopicPartition) -> None:
        a = self.c.context.partition_full_replica_assignment(tp)
        if self._is_complete(tp, a):
            log.info("Target replicas %s have all caught up with the leader for reassigning partition %s",
                     list(a.target_replicas), tp)
            self.on_partition_reassignment(tp, a)

    # --- Kafka's onPartitionReassignment ----------------------------------------------------------

    def on_partition_reassignment(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
        c = self.c
        ctx = c.context
        c.topic_deletion_manager.mark_topic_ineligible_for_deletion({tp[0]}, "topic reassignment in progress")
        self._update_current(tp, reassignment)
        if not self._is_complete(tp, reassignment):
            self._bump_leader_epoch_and_send(tp, reassignment)
            for r in reassignment.adding_replicas:
                c.replica_state_machine.handle_state_changes([PartitionAndReplica(tp, r)], ReplicaState.NewReplica)
            return
        c.replica_state_machine.handle_state_changes(
            [PartitionAndReplica(tp, r) for r in reassignment.adding_replicas], ReplicaState.OnlineReplica)
        completed = ReplicaAssignment.of(reassignment.target_replicas)
        ctx.update_partition_full_replica_assignment(tp, completed)
        self._move_leader_if_required(tp, completed)
        self._stop_removed(tp, reassignment.removing_replicas)
        self._write_assignment(tp, completed)
        if tp in ctx.partitions_being_reassigned:
            self._remove_from_zk(lambda p, replicas: p == tp and list(replicas) == list(completed.replicas))
            ctx.partitions_being_reassigned.discard(tp)
        c.send_update_metadata_request(ctx.live_or_shutting_down_broker_ids, {tp})
        c.topic_deletion_manager.resume_deletion_for_topics({tp[0]})

    def _update_current(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
        ctx = self.c.context
        current = ctx.partition_full_replica_assignment(tp)
        if current != reassignment:
            log.debug("Updating assignment of partition %s from %s to %s", tp, current, reassignment)
            self._write_assignment(tp, reassignment)
            ctx.update_partition_full_replica_assignment(tp, reassignment)
            unneeded = [r for r in current.replicas if r not in reassignment.replicas]
            if unneeded:
                self._stop_removed(tp, tuple(unneeded))
        ctx.partitions_being_reassigned.add(tp)

    def _is_complete(self, tp: TopicPartition, a: ReplicaAssignment) -> bool:
        if not a.is_being_reassigned:
            return True
        info = self.c.zk.get_topic_partition_states([tp]).get(tp)
        if not isinstance(info, LeaderIsrAndControllerEpoch):
            return False
        return set(a.target_replicas) <= set(info.leader_and_isr.isr)

    def _move_leader_if_required(self, tp: TopicPartition, new: ReplicaAssignment) -> None:
        c = self.c
        info = c.context.partition_leadership_info(tp)
        leader = info.leader_and_isr.leader if info is not None else -1
        if leader not in new.replicas or not c.context.is_replica_online(leader, tp):
            log.info("Leader %d for partition %s being reassigned is not in the new replicas %s or is dead. "
                     "Re-electing leader", leader, tp, list(new.replicas))
            c.partition_state_machine.handle_state_changes(
                [tp], PartitionState.OnlinePartition, ReassignPartitionLeaderElectionStrategy())
        else:
            self._bump_leader_epoch_and_send(tp, new)

    def _stop_removed(self, tp: TopicPartition, removed: Collection[int]) -> None:
        rsm = self.c.replica_state_machine
        replicas = [PartitionAndReplica(tp, r) for r in removed]
        for target in (ReplicaState.OfflineReplica, ReplicaState.ReplicaDeletionStarted,
                       ReplicaState.ReplicaDeletionSuccessful, ReplicaState.NonExistentReplica):
            rsm.handle_state_changes(replicas, target)

    def _write_assignment(self, tp: TopicPartition, a: ReplicaAssignment) -> None:
        ctx = self.c.context
        topic = tp[0]
        assignment = {p: ra for (_, p), ra in ctx.partition_full_replica_assignment_for_topic(topic).items()}
        assignment[tp[1]] = a
        self.c.zk.set_topic_assignment(topic, ctx.topic_ids.get(topic), assignment, ctx.epoch_zk_version)
        log.info("Successfully updated assignment of partition %s to %s", tp, a)

    def _bump_leader_epoch_and_send(self, tp: TopicPartition, a: ReplicaAssignment) -> None:
        c = self.c
        ctx = c.context
        updated: LeaderIsrAndControllerEpoch | None = None
        for _ in range(MAX_EPOCH_BUMP_ROUNDS):
            info = c.zk.get_topic_partition_states([tp]).get(tp)
            if not isinstance(info, LeaderIsrAndControllerEpoch):
                raise StateChangeFailedException(f"Cannot update leader epoch for partition {tp}: no state znode")
            if info.controller_epoch > ctx.epoch:
                raise StateChangeFailedException(
                    f"Leader and isr path written by another controller (epoch {info.controller_epoch})")
            lai = info.leader_and_isr
            new = lai.new_leader_and_isr(lai.leader, lai.isr)
            result = c.zk.update_leader_and_isr({tp: new}, ctx.epoch, ctx.epoch_zk_version)
            written = result.finished.get(tp)
            if isinstance(written, Exception):
                raise written
            if written is not None:
                updated = LeaderIsrAndControllerEpoch(written, ctx.epoch)
                ctx.put_partition_leadership_info(tp, updated)
                break
        if updated is None:
            log.error("Failed to send LeaderAndIsr request with new replica assignment %s for partition being "
                      "reassigned %s", a, tp)
            return
        batch = c.batch
        try:
            batch.new_batch()
            batch.add_leader_and_isr_request_for_brokers(a.origin_replicas, tp, updated, a, is_new=False)
            batch.add_leader_and_isr_request_for_brokers(a.adding_replicas, tp, updated, a, is_new=True)
            batch.send_requests_to_brokers(ctx.epoch)
        except Exception:
            batch.clear()
            raise

    def _remove_from_zk(self, should_remove: Callable[[TopicPartition, list[int]], bool]) -> None:
        c = self.c
        current = c.zk.get_partition_reassignment()
        if not current:
            return
        keep = {tp: r for tp, r in current.items() if not should_remove(tp, list(r))}
        if len(keep) == len(current):
            return
        log.info("Removing partitions %s from the list of reassigned partitions in zookeeper",
                 sorted(set(current) - set(keep)))
        if not keep:
            log.info("No more partitions need to be reassigned. Deleting zk path /admin/reassign_partitions")
            c.zk.delete_partition_reassignment(c.context.epoch_zk_version)
        else:
            c.zk.set_partition_reassignment(keep, c.context.epoch_zk_version)

    # --- helpers --------------------------------------------------------------------------------

    def _trigger(self, reassignments: Mapping[TopicPartition, ReplicaAssignment]) -> dict[TopicPartition, ApiError]:
        c = self.c
        out: dict[TopicPartition, ApiError] = {}
        for tp, a in reassignments.items():
            if c.topic_deletion_manager.is_topic_queued_up_for_deletion(tp[0]):
                log.info("Skipping reassignment of %s since the topic is currently being deleted", tp)
                out[tp] = (Errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            elif not c.context.partition_replica_assignment(tp):
                out[tp] = (Errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            else:
                try:
                    self.on_partition_reassignment(tp, a)
                    out[tp] = (Errors.NONE, None)
                except ControllerMovedException:
                    log.info("Failed completing reassignment of partition %s because controller has moved", tp)
                    raise
                except Exception as e:
                    log.error("Error completing reassignment of partition %s: %r", tp, e, exc_info=True)
                    out[tp] = (Errors.UNKNOWN_SERVER_ERROR, None)
        return out

    def _build(self, tp: TopicPartition, target: list[int] | None) -> ReplicaAssignment | None:
        a = self.c.context.partition_full_replica_assignment(tp)
        if a.is_being_reassigned:
            return a.reassign_to(target if target is not None else a.origin_replicas)
        return a.reassign_to(target) if target is not None else None

    def _validate(self, tp: TopicPartition, replicas: list[int]) -> ApiError | None:
        ctx = self.c.context
        if not replicas:
            return (Errors.INVALID_REPLICA_ASSIGNMENT, "Empty replica list specified in partition reassignment.")
        if len(set(replicas)) != len(replicas):
            return (Errors.INVALID_REPLICA_ASSIGNMENT,
                    f"Duplicate replica ids in partition reassignment replica list: {replicas}")
        if any(r < 0 for r in replicas):
            return (Errors.INVALID_REPLICA_ASSIGNMENT, f"Invalid broker id in replica list: {replicas}")
        new = ctx.partition_full_replica_assignment(tp).reassign_to(replicas)
        if not set(new.adding_replicas) <= ctx.live_broker_ids:
            return (Errors.INVALID_REPLICA_ASSIGNMENT,
                    f"Replica assignment has brokers that are not alive. Replica list: {list(new.adding_replicas)}, "
                    f"live broker list: {sorted(ctx.live_broker_ids)}")
        return None
