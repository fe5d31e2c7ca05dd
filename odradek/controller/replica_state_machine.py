"""Kafka's ``ZkReplicaStateMachine``: NewReplica, OnlineReplica, OfflineReplica,
ReplicaDeletionStarted, ReplicaDeletionSuccessful, ReplicaDeletionIneligible, NonExistentReplica,
with Kafka's legal transitions (an illegal one is logged and refused).

- -> New: LeaderAndIsr (is_new) to the replica when the partition has a leader (refused if the
  replica is that leader).
- -> Online: from New, only the state (and the replica added to the assignment if it was missing);
  otherwise LeaderAndIsr to the replica.
- -> Offline: StopReplica (no delete) to the replica; the replica leaves the ISR (and the
  leadership: leader -1) through a zkVersion-conditional write, BADVERSION retried; LeaderAndIsr
  to the other replicas (unless the topic is queued for deletion) and UpdateMetadata to all.
- -> ReplicaDeletionStarted: StopReplica with delete. -> ReplicaDeletionIneligible /
  ReplicaDeletionSuccessful: the state only. -> NonExistent: the replica leaves the assignment.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from odradek.controller.controller_broker_request_batch import ControllerBrokerRequestBatch
from odradek.controller.controller_context import (
    NO_LEADER,
    ControllerContext,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    PartitionAndReplica,
    ReplicaState,
    TopicPartition,
    tp_name,
)
from odradek.controller.controller_zk_client import (
    ControllerMovedException,
    ControllerZkClient,
    StateChangeFailedException,
)

__all__ = ["ReplicaState", "ReplicaStateMachine"]

log = logging.getLogger("odradek.state.change.logger")

MAX_ISR_REMOVAL_ROUNDS = 100  # BADVERSION retries are bounded (Kafka loops until none remain)


class ReplicaStateMachine:
    def __init__(
        self,
        controller_id: int,
        context: ControllerContext,
        zk_client: ControllerZkClient,
        batch: ControllerBrokerRequestBatch,
    ) -> None:
        self.controller_id = controller_id
        self.context = context
        self.zk = zk_client
        self.batch = batch

    def startup(self) -> None:
        """Every replica Online or (its broker down) ReplicaDeletionIneligible, then the
        transitions that send the requests: Online, and Offline for the replicas that are down."""
        self.initialize_replica_state()
        online, offline = self.context.online_and_offline_replicas()
        self.handle_state_changes(sorted(online, key=_order), ReplicaState.OnlineReplica)
        self.handle_state_changes(sorted(offline, key=_order), ReplicaState.OfflineReplica)

    def initialize_replica_state(self) -> None:
        ctx = self.context
        for tp in ctx.all_partitions():
            for r in ctx.partition_replica_assignment(tp):
                state = ReplicaState.OnlineReplica if ctx.is_replica_online(r, tp) else ReplicaState.ReplicaDeletionIneligible
                ctx.put_replica_state(PartitionAndReplica(tp, r), state)

    def handle_state_changes(self, replicas: Sequence[PartitionAndReplica], target: ReplicaState) -> None:
        if not replicas:
            return
        by_broker: dict[int, list[PartitionAndReplica]] = {}
        for r in replicas:
            by_broker.setdefault(r.replica, []).append(r)

        def work() -> None:
            for replica_id, rs in by_broker.items():
                self._do_handle_state_changes(replica_id, rs, target)

        self.batch.run_round(self.context.epoch, f"some replicas to {target.name}", work, lambda e: None)

    def _do_handle_state_changes(
        self, replica_id: int, replicas: Sequence[PartitionAndReplica], target: ReplicaState
    ) -> None:
        ctx = self.context
        batch = self.batch
        for r in replicas:
            ctx.put_replica_state_if_not_exists(r, ReplicaState.NonExistentReplica)
        valid = []
        for r in replicas:
            if ctx.is_valid_replica_state_transition(r, target):
                valid.append(r)
            else:
                self._log_invalid_transition(r, target)

        if target == ReplicaState.NewReplica:
            for r in valid:
                tp = r.topic_partition
                info = ctx.partition_leadership_info(tp)
                if info is not None:
                    if info.leader_and_isr.leader == replica_id:
                        self._log_failed(r, ctx.replica_state(r), ReplicaState.OfflineReplica, StateChangeFailedException(
                            f"Replica {replica_id} for partition {tp_name(tp)} cannot be moved to NewReplica state as it is "
                            "being requested to become leader"
                        ))
                        continue
                    batch.add_leader_and_isr_request_for_brokers(
                        [replica_id], tp, info, ctx.partition_full_replica_assignment(tp), is_new=True
                    )
                ctx.put_replica_state(r, ReplicaState.NewReplica)
        elif target == ReplicaState.OnlineReplica:
            for r in valid:
                tp = r.topic_partition
                if ctx.replica_state(r) == ReplicaState.NewReplica:
                    assignment = ctx.partition_full_replica_assignment(tp)
                    if replica_id not in assignment.replicas:
                        log.error("Adding replica (%d) that is not part of the assignment %s", replica_id, assignment)
                        ctx.update_partition_full_replica_assignment(
                            tp, replace(assignment, replicas=(*assignment.replicas, replica_id))
                        )
                else:
                    info = ctx.partition_leadership_info(tp)
                    if info is not None:
                        batch.add_leader_and_isr_request_for_brokers(
                            [replica_id], tp, info, ctx.partition_full_replica_assignment(tp), is_new=False
                        )
                ctx.put_replica_state(r, ReplicaState.OnlineReplica)
        elif target == ReplicaState.OfflineReplica:
            for r in valid:
                batch.add_stop_replica_request_for_brokers([replica_id], r.topic_partition, delete_partition=False)
            with_info = [r for r in valid if ctx.partition_leadership_info(r.topic_partition) is not None]
            without_info = [r for r in valid if ctx.partition_leadership_info(r.topic_partition) is None]
            updated = self._remove_replicas_from_isr(replica_id, [r.topic_partition for r in with_info])
            for tp, info in updated.items():
                log.info("Partition %s state changed to %s after removing replica %d from the ISR as part of "
                         "transition to OfflineReplica", tp_name(tp), info, replica_id)
                if not ctx.is_topic_queued_up_for_deletion(tp[0]):
                    recipients = [b for b in ctx.partition_replica_assignment(tp) if b != replica_id]
                    batch.add_leader_and_isr_request_for_brokers(
                        recipients, tp, info, ctx.partition_full_replica_assignment(tp), is_new=False
                    )
                ctx.put_replica_state(PartitionAndReplica(tp, replica_id), ReplicaState.OfflineReplica)
            for r in without_info:
                batch.add_update_metadata_request_for_brokers(ctx.live_or_shutting_down_broker_ids, [r.topic_partition])
                ctx.put_replica_state(r, ReplicaState.OfflineReplica)
        elif target == ReplicaState.ReplicaDeletionStarted:
            for r in valid:
                ctx.put_replica_state(r, ReplicaState.ReplicaDeletionStarted)
                batch.add_stop_replica_request_for_brokers([replica_id], r.topic_partition, delete_partition=True)
        elif target in (ReplicaState.ReplicaDeletionIneligible, ReplicaState.ReplicaDeletionSuccessful):
            for r in valid:
                ctx.put_replica_state(r, target)
        else:  # NonExistentReplica
            for r in valid:
                tp = r.topic_partition
                ctx.update_partition_full_replica_assignment(
                    tp, ctx.partition_full_replica_assignment(tp).remove_replica(replica_id)
                )
                ctx.remove_replica_state(r)

    def _remove_replicas_from_isr(
        self, replica_id: int, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, LeaderIsrAndControllerEpoch]:
        results: dict[TopicPartition, LeaderIsrAndControllerEpoch] = {}
        remaining = list(partitions)
        for _ in range(MAX_ISR_REMOVAL_ROUNDS):
            if not remaining:
                break
            finished, remaining = self._do_remove_replicas_from_isr(replica_id, remaining)
            for tp, outcome in finished.items():
                if isinstance(outcome, Exception):
                    r = PartitionAndReplica(tp, replica_id)
                    self._log_failed(r, self.context.replica_state(r), ReplicaState.OfflineReplica, outcome)
                else:
                    results[tp] = outcome
        for tp in remaining:
            r = PartitionAndReplica(tp, replica_id)
            self._log_failed(r, self.context.replica_state(r), ReplicaState.OfflineReplica,
                             StateChangeFailedException("gave up removing the replica from the ISR after repeated BADVERSION"))
        return results

    def _do_remove_replicas_from_isr(
        self, replica_id: int, partitions: Sequence[TopicPartition]
    ) -> tuple[dict[TopicPartition, LeaderIsrAndControllerEpoch | Exception], list[TopicPartition]]:
        ctx = self.context
        try:
            read = self.zk.get_topic_partition_states(partitions)
        except ControllerMovedException:
            raise
        except Exception as e:
            return dict.fromkeys(partitions, e), []
        out: dict[TopicPartition, LeaderIsrAndControllerEpoch | Exception] = {}
        adjusted: dict[TopicPartition, LeaderAndIsr] = {}
        for tp in partitions:
            got = read.get(tp)
            if isinstance(got, Exception):
                out[tp] = got
            elif got is None:
                if not ctx.is_topic_queued_up_for_deletion(tp[0]):
                    out[tp] = StateChangeFailedException(
                        f"Failed to change state of replica {replica_id} for partition {tp_name(tp)} since the leader and isr "
                        "path in zookeeper is empty"
                    )
            elif got.controller_epoch > ctx.epoch:
                out[tp] = StateChangeFailedException(
                    "Leader and isr path written by another controller. This probably means the current controller "
                    f"with epoch {ctx.epoch} went through a soft failure and another controller was elected with "
                    f"epoch {got.controller_epoch}. Aborting state change by this controller"
                )
            elif replica_id in got.leader_and_isr.isr:
                lai = got.leader_and_isr
                new_leader = NO_LEADER if lai.leader == replica_id else lai.leader
                # The last ISR member stays (Kafka keeps a one-replica ISR as it is).
                new_isr = lai.isr if len(lai.isr) == 1 else tuple(b for b in lai.isr if b != replica_id)
                adjusted[tp] = lai.new_leader_and_isr(new_leader, new_isr)
            else:
                info = LeaderIsrAndControllerEpoch(got.leader_and_isr, ctx.epoch)
                ctx.put_partition_leadership_info(tp, info)
                out[tp] = info
        retry: list[TopicPartition] = []
        if adjusted:
            result = self.zk.update_leader_and_isr(adjusted, ctx.epoch, ctx.epoch_zk_version)
            for tp, outcome in result.finished.items():
                if isinstance(outcome, LeaderAndIsr):
                    info = LeaderIsrAndControllerEpoch(outcome, ctx.epoch)
                    ctx.put_partition_leadership_info(tp, info)
                    out[tp] = info
                else:
                    out[tp] = outcome
            retry = list(result.to_retry)
            for tp in retry:
                log.debug("Controller failed to remove replica %d from ISR of partition %s: bad ZK version, "
                          "will retry", replica_id, tp_name(tp))
        return out, retry

    def _log_invalid_transition(self, r: PartitionAndReplica, target: ReplicaState) -> None:
        current = self.context.replica_state(r)
        self._log_failed(r, current, target, StateChangeFailedException(
            f"Replica {r} should be in the {','.join(sorted(s.name for s in target.valid_previous_states))} "
            f"states before moving to {target.name} state. Instead it is in {current.name} state"
        ))

    def _log_failed(self, r: PartitionAndReplica, current: ReplicaState, target: ReplicaState, e: Exception) -> None:
        log.error(
            "Controller %d epoch %d initiated state change of replica %d for partition %s from %s to %s failed: %s",
            self.controller_id, self.context.epoch, r.replica, tp_name(r.topic_partition), current.name, target.name, e,
        )


def _order(r: PartitionAndReplica) -> tuple[int, str, int]:
    return (r.replica, r.topic_partition[0], r.topic_partition[1])
