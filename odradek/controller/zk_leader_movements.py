"""The ZooKeeper-mode controller's leader movements (part of KafkaController, split out for size):
replica leader elections (``/admin/preferred_replica_election``, ElectLeaders, the automatic
rebalance of ``leader.imbalance.*``) and controlled shutdown (leaders moved off the broker first,
then its followers stopped and taken out of the ISR; the partitions it still leads are answered).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Collection
from typing import TYPE_CHECKING

from odradek.controller import controller_event_manager as ev
from odradek.controller.controller_broker_request_batch import ControllerBrokerRequestBatch
from odradek.controller.controller_context import (
    ControllerContext,
    LeaderAndIsr,
    PartitionAndReplica,
    PartitionState,
    ReplicaState,
    TopicPartition,
)
from odradek.controller.controller_zk_client import (
    ControllerMovedException,
    StateChangeFailedException,
)
from odradek.controller.election import preferred_replica_partition_leader_election
from odradek.controller.kafka_controller_zk import KafkaControllerZkClient
from odradek.controller.partition_state_machine import (
    ControlledShutdownPartitionLeaderElectionStrategy,
    OfflinePartitionLeaderElectionStrategy,
    PartitionStateMachine,
    PreferredReplicaPartitionLeaderElectionStrategy,
)
from odradek.controller.replica_state_machine import ReplicaStateMachine
from odradek.controller.topic_deletion_manager import TopicDeletionManager
from odradek.protocol.errors import Errors

if TYPE_CHECKING:
    from odradek.controller.kafka_controller import ControllerScheduler, KafkaControllerConfig

log = logging.getLogger("odradek.controller.kafka_controller")

ElectionType = int  # ElectLeaders' values
PREFERRED: ElectionType = 0
UNCLEAN: ElectionType = 1


class StaleBrokerEpochError(Exception):
    """Kafka's StaleBrokerEpochException (STALE_BROKER_EPOCH)."""


class BrokerNotAvailableError(Exception):
    """Kafka's BrokerNotAvailableException (BROKER_NOT_AVAILABLE)."""


ElectionResults = dict[TopicPartition, LeaderAndIsr | tuple[Errors, str]]


class LeaderMovements(ABC):
    """Mixed into KafkaController, whose state it uses."""

    broker_id: int
    zk: KafkaControllerZkClient
    context: ControllerContext
    batch: ControllerBrokerRequestBatch
    partition_state_machine: PartitionStateMachine
    replica_state_machine: ReplicaStateMachine
    topic_deletion_manager: TopicDeletionManager
    scheduler: ControllerScheduler
    config: KafkaControllerConfig

    @property
    @abstractmethod
    def is_active(self) -> bool:
        """Whether this node is the active controller (KafkaController's)."""

    # --- leader elections ------------------------------------------------------------------------

    def on_replica_election(
        self, partitions: Collection[TopicPartition], election_type: ElectionType, trigger: ev.ElectionTrigger
    ) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        log.info("Starting replica leader election (%s) for partitions %s triggered by %s",
                 "PREFERRED" if election_type == PREFERRED else "UNCLEAN", sorted(partitions), trigger.value)
        admin = trigger == ev.ElectionTrigger.AdminClientTriggered
        try:
            strategy = (PreferredReplicaPartitionLeaderElectionStrategy() if election_type == PREFERRED
                        else OfflinePartitionLeaderElectionStrategy(allow_unclean=admin))
            results = self.partition_state_machine.handle_state_changes(
                sorted(partitions), PartitionState.OnlinePartition, strategy)
            if not admin:
                for tp, r in results.items():
                    if isinstance(r, Exception):
                        log.error("Error completing replica leader election for partition %s: %s", tp, r)
            return results
        finally:
            if trigger == ev.ElectionTrigger.ZkTriggered:
                self.zk.delete_preferred_replica_election(self.context.epoch_zk_version)

    def _process_replica_leader_election(self, e: ev.ReplicaLeaderElection) -> None:
        ctx = self.context
        partitions = set(e.partitions) if e.partitions is not None else None
        if not self.is_active:
            if e.callback is not None:
                e.callback(dict.fromkeys(partitions or (), (Errors.NOT_CONTROLLER, "")))
            return
        if partitions is None:
            partitions = self.zk.get_preferred_replica_election()
        out: ElectionResults = {}
        valid = set()
        for tp in partitions:
            info = ctx.partition_leadership_info(tp)
            replicas = ctx.partition_replica_assignment(tp)
            if not replicas or info is None:
                out[tp] = (Errors.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
            elif ctx.is_topic_queued_up_for_deletion(tp[0]):
                out[tp] = (Errors.INVALID_TOPIC_EXCEPTION, "Deletion of topic is in progress.")
            elif e.election_type == PREFERRED and info.leader_and_isr.leader == replicas[0]:
                out[tp] = (Errors.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")
            elif e.election_type == UNCLEAN and ctx.is_replica_online(info.leader_and_isr.leader, tp):
                out[tp] = (Errors.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")
            else:
                valid.add(tp)
        results = self.on_replica_election(valid, e.election_type, e.trigger)
        for tp, r in results.items():
            if isinstance(r, LeaderAndIsr):
                out[tp] = r
            elif isinstance(r, StateChangeFailedException):
                code = Errors.PREFERRED_LEADER_NOT_AVAILABLE if e.election_type == PREFERRED \
                    else Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
                out[tp] = (code, str(r))
            else:
                out[tp] = (Errors.UNKNOWN_SERVER_ERROR, str(r))
        if e.callback is not None:
            e.callback(out)

    def _process_auto_preferred_replica_leader_election(self) -> None:
        if not self.is_active:
            return
        try:
            log.info("Processing automatic preferred replica leader election")
            self.check_and_trigger_auto_leader_rebalance()
        finally:
            self.scheduler.schedule(self.config.leader_imbalance_check_interval_seconds,
                                    ev.AutoPreferredReplicaLeaderElection())

    def check_and_trigger_auto_leader_rebalance(self) -> None:
        ctx = self.context
        by_preferred: dict[int, list[TopicPartition]] = {}
        for tp in ctx.all_partitions():
            replicas = ctx.partition_replica_assignment(tp)
            if replicas and not self.topic_deletion_manager.is_topic_queued_up_for_deletion(tp[0]):
                by_preferred.setdefault(replicas[0], []).append(tp)
        threshold = self.config.leader_imbalance_per_broker_percentage / 100
        for broker, tps in sorted(by_preferred.items()):
            not_preferred = [
                tp for tp in tps
                if (info := ctx.partition_leadership_info(tp)) is not None and info.leader_and_isr.leader != broker
            ]
            ratio = len(not_preferred) / len(tps)
            if ratio > threshold:
                candidates = {tp for tp in not_preferred if tp[0] in ctx.all_topics and self._can_preferred_lead(tp)}
                if candidates:
                    self.on_replica_election(candidates, PREFERRED, ev.ElectionTrigger.AutoTriggered)

    def _can_preferred_lead(self, tp: TopicPartition) -> bool:
        ctx = self.context
        replicas = ctx.partition_replica_assignment(tp)
        info = ctx.partition_leadership_info(tp)
        if info is None:
            return False
        live = {r for r in replicas if ctx.is_replica_online(r, tp)}
        return preferred_replica_partition_leader_election(list(replicas), list(info.leader_and_isr.isr), live) \
            is not None

    # --- controlled shutdown -----------------------------------------------------------------------

    def _process_controlled_shutdown(self, e: ev.ControlledShutdown) -> None:
        try:
            result: set[TopicPartition] | Exception = self.do_controlled_shutdown(e.broker_id, e.broker_epoch)
        except ControllerMovedException as ex:
            if e.callback is not None:
                e.callback(ev.ControllerMovedError(str(ex)))
            raise
        except Exception as ex:
            result = ex
        if e.callback is not None:
            e.callback(result)

    def do_controlled_shutdown(self, broker_id: int, broker_epoch: int) -> set[TopicPartition]:
        ctx = self.context
        if not self.is_active:
            raise ev.ControllerMovedError("Controller moved to another broker. Aborting controlled shutdown")
        if broker_epoch != -1:
            cached = ctx.live_broker_id_and_epochs.get(broker_id)
            if cached is not None and broker_epoch < cached:
                msg = (f"Received controlled shutdown request from an old broker epoch {broker_epoch} for broker "
                       f"{broker_id}. Current broker epoch is {cached}.")
                log.info(msg)
                raise StaleBrokerEpochError(msg)
        log.info("Shutting down broker %d", broker_id)
        if broker_id not in ctx.live_or_shutting_down_broker_ids:
            raise BrokerNotAvailableError(f"Broker id {broker_id} does not exist.")
        ctx.shutting_down_broker_ids.add(broker_id)
        to_act_on = [
            tp for tp in sorted(ctx.partitions_on_broker(broker_id))
            if len(ctx.partition_replica_assignment(tp)) > 1 and ctx.partition_leadership_info(tp) is not None
            and not self.topic_deletion_manager.is_topic_queued_up_for_deletion(tp[0])
        ]
        led: list[TopicPartition] = []
        followed: list[TopicPartition] = []
        for tp in to_act_on:
            info = ctx.partition_leadership_info(tp)
            assert info is not None
            (led if info.leader_and_isr.leader == broker_id else followed).append(tp)
        self.partition_state_machine.handle_state_changes(
            led, PartitionState.OnlinePartition, ControlledShutdownPartitionLeaderElectionStrategy())
        try:
            self.batch.new_batch()
            for tp in followed:
                self.batch.add_stop_replica_request_for_brokers([broker_id], tp, delete_partition=False)
            self.batch.send_requests_to_brokers(ctx.epoch)
        except Exception:
            self.batch.clear()
            raise
        self.replica_state_machine.handle_state_changes(
            [PartitionAndReplica(tp, broker_id) for tp in followed], ReplicaState.OfflineReplica)
        return ctx.partition_leaders_on_broker(broker_id)

