"""Kafka's ``ZkPartitionStateMachine``: NonExistentPartition, NewPartition, OnlinePartition,
OfflinePartition, with Kafka's legal transitions (an illegal one is logged and refused).

- NonExistent -> New: nothing but the state (the assignment is already in the context).
- New -> Online: the first live replica leads, the live replicas are the ISR; the state znodes are
  created (``create_topic_partition_states``), LeaderAndIsr (is_new) goes to the ISR and
  UpdateMetadata to every live broker.
- Online/Offline -> Online: a leader election with the given strategy (offline, reassign, preferred,
  controlled shutdown; the shared selectors of ``odradek.controller.election``), written with a
  zkVersion-conditional update; a BADVERSION (the partition leader changed the ISR meanwhile) is
  re-read and retried; a state written by a newer controller aborts the election.
- New/Online/Offline -> Offline, Offline -> NonExistent: nothing but the state.

Sans-I/O: ZooKeeper through a :class:`ControllerZkClient`, brokers through the request batch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from odradek.controller.controller_broker_request_batch import ControllerBrokerRequestBatch
from odradek.controller.controller_context import (
    ControllerContext,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    PartitionState,
    TopicPartition,
    tp_name,
)
from odradek.controller.controller_zk_client import (
    ControllerMovedException,
    ControllerZkClient,
    StateChangeFailedException,
    ZkCode,
)
from odradek.controller.election import (
    ControlledShutdownLeaderSelector,
    OfflinePartitionLeaderSelector,
    PartitionLeaderSelector,
    PartitionLeadership,
    PreferredReplicaPartitionLeaderSelector,
    ReassignedPartitionLeaderSelector,
)

__all__ = [
    "ControlledShutdownPartitionLeaderElectionStrategy",
    "ElectionOutcome",
    "OfflinePartitionLeaderElectionStrategy",
    "PartitionLeaderElectionStrategy",
    "PartitionState",
    "PartitionStateMachine",
    "PreferredReplicaPartitionLeaderElectionStrategy",
    "ReassignPartitionLeaderElectionStrategy",
]

log = logging.getLogger("odradek.state.change.logger")

MAX_ELECTION_ROUNDS = 100  # BADVERSION retries are bounded (Kafka loops until none remain)


@dataclass(frozen=True)
class OfflinePartitionLeaderElectionStrategy:
    allow_unclean: bool = False

    def __str__(self) -> str:  # Kafka's case class: OfflinePartitionLeaderElectionStrategy(false)
        return f"OfflinePartitionLeaderElectionStrategy({str(self.allow_unclean).lower()})"


@dataclass(frozen=True)
class ReassignPartitionLeaderElectionStrategy:
    pass


@dataclass(frozen=True)
class PreferredReplicaPartitionLeaderElectionStrategy:
    pass


@dataclass(frozen=True)
class ControlledShutdownPartitionLeaderElectionStrategy:
    pass


PartitionLeaderElectionStrategy = (
    OfflinePartitionLeaderElectionStrategy
    | ReassignPartitionLeaderElectionStrategy
    | PreferredReplicaPartitionLeaderElectionStrategy
    | ControlledShutdownPartitionLeaderElectionStrategy
)

# Per partition: the new LeaderAndIsr, or why the election failed.
ElectionOutcome = LeaderAndIsr | Exception


class PartitionStateMachine:
    def __init__(
        self,
        controller_id: int,
        context: ControllerContext,
        zk_client: ControllerZkClient,
        batch: ControllerBrokerRequestBatch,
        leader_recovery_supported: bool = True,
    ) -> None:
        self.controller_id = controller_id
        self.context = context
        self.zk = zk_client
        self.batch = batch
        self.leader_recovery_supported = leader_recovery_supported  # IBP >= 3.2: unclean -> RECOVERING

    # --- startup ------------------------------------------------------------------------------

    def startup(self) -> None:
        self.initialize_partition_state()
        self.trigger_online_partition_state_change()

    def initialize_partition_state(self) -> None:
        ctx = self.context
        for tp in ctx.all_partitions():
            info = ctx.partition_leadership_info(tp)
            if info is None:
                ctx.put_partition_state(tp, PartitionState.NewPartition)
            elif ctx.is_replica_online(info.leader_and_isr.leader, tp):
                ctx.put_partition_state(tp, PartitionState.OnlinePartition)
            else:
                ctx.put_partition_state(tp, PartitionState.OfflinePartition)

    def trigger_online_partition_state_change(self, topic: str | None = None) -> dict[TopicPartition, ElectionOutcome]:
        """New and Offline partitions (not of topics queued for deletion) -> Online, clean election."""
        ctx = self.context
        partitions = ctx.partitions_in_states({PartitionState.OfflinePartition, PartitionState.NewPartition}, topic)
        to_trigger = sorted(tp for tp in partitions if not ctx.is_topic_queued_up_for_deletion(tp[0]))
        return self.handle_state_changes(
            to_trigger, PartitionState.OnlinePartition, OfflinePartitionLeaderElectionStrategy(False)
        )

    # --- transitions --------------------------------------------------------------------------

    def handle_state_changes(
        self,
        partitions: Sequence[TopicPartition],
        target_state: PartitionState,
        strategy: PartitionLeaderElectionStrategy | None = None,
    ) -> dict[TopicPartition, ElectionOutcome]:
        """One round: the state changes, then the collected requests are sent."""
        if not partitions:
            return {}
        return self.batch.run_round(
            self.context.epoch, f"some partitions to {target_state.name}",
            lambda: self._do_handle_state_changes(partitions, target_state, strategy),
            lambda e: {tp: e for tp in partitions},
        )

    def _do_handle_state_changes(
        self,
        partitions: Sequence[TopicPartition],
        target: PartitionState,
        strategy: PartitionLeaderElectionStrategy | None,
    ) -> dict[TopicPartition, ElectionOutcome]:
        ctx = self.context
        for tp in partitions:
            ctx.put_partition_state_if_not_exists(tp, PartitionState.NonExistentPartition)
        valid = []
        for tp in partitions:
            if ctx.is_valid_partition_state_transition(tp, target):
                valid.append(tp)
            else:
                self._log_invalid_transition(tp, target)

        if target == PartitionState.NewPartition:
            for tp in valid:
                log.info(
                    "Changed partition %s state from %s to %s with assigned replicas %s",
                    tp_name(tp), ctx.partition_state(tp).name, target.name, ctx.partition_replica_assignment(tp),
                )
                ctx.put_partition_state(tp, PartitionState.NewPartition)
            return {}
        if target == PartitionState.OnlinePartition:
            uninitialized = [tp for tp in valid if ctx.partition_state(tp) == PartitionState.NewPartition]
            to_elect = [
                tp
                for tp in valid
                if ctx.partition_state(tp) in (PartitionState.OfflinePartition, PartitionState.OnlinePartition)
            ]
            for tp in self._initialize_leader_and_isr_for_partitions(uninitialized):
                log.info("Changed partition %s from NewPartition to OnlinePartition with state %s",
                         tp_name(tp), ctx.partition_leadership_info(tp))
                ctx.put_partition_state(tp, PartitionState.OnlinePartition)
            if not to_elect:
                return {}
            if strategy is None:
                raise ValueError("Election strategy is a required field when the target state is OnlinePartition")
            results = self._elect_leader_for_partitions(to_elect, strategy)
            for tp, outcome in results.items():
                if isinstance(outcome, LeaderAndIsr):
                    log.info("Changed partition %s from %s to OnlinePartition with state %s",
                             tp_name(tp), ctx.partition_state(tp).name, outcome)
                    ctx.put_partition_state(tp, PartitionState.OnlinePartition)
            return results
        for tp in valid:  # Offline, NonExistent
            ctx.put_partition_state(tp, target)
        return {}

    def _initialize_leader_and_isr_for_partitions(self, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
        ctx = self.context
        states: dict[TopicPartition, LeaderIsrAndControllerEpoch] = {}
        for tp in partitions:
            live = [r for r in ctx.partition_replica_assignment(tp) if ctx.is_replica_online(r, tp)]
            if not live:
                self._log_failed(
                    tp, PartitionState.NewPartition, PartitionState.OnlinePartition,
                    StateChangeFailedException(
                        f"Controller {self.controller_id} epoch {ctx.epoch} encountered error during state change of "
                        f"partition {tp_name(tp)} from New to Online, assigned replicas are "
                        f"[{','.join(map(str, ctx.partition_replica_assignment(tp)))}], live brokers are "
                        f"[{sorted(ctx.live_broker_ids)}]. No assigned replica is alive."
                    ),
                )
                continue
            states[tp] = LeaderIsrAndControllerEpoch(LeaderAndIsr.of(live[0], live), ctx.epoch)
        if not states:
            return []
        try:
            codes = self.zk.create_topic_partition_states(states, ctx.epoch_zk_version)
        except ControllerMovedException:
            raise
        except Exception as e:
            for tp in states:
                self._log_failed(tp, ctx.partition_state(tp), PartitionState.NewPartition, e)
            return []
        done = []
        for tp, state in states.items():
            code = codes.get(tp, ZkCode.CONNECTION_LOSS)
            if code == ZkCode.OK:
                ctx.put_partition_leadership_info(tp, state)
                self.batch.add_leader_and_isr_request_for_brokers(
                    state.leader_and_isr.isr, tp, state, ctx.partition_full_replica_assignment(tp), is_new=True
                )
                done.append(tp)
            else:
                self._log_failed(tp, PartitionState.NewPartition, PartitionState.OnlinePartition,
                                 StateChangeFailedException(f"create of the state znode failed: {code.name}"))
        return done

    def _elect_leader_for_partitions(
        self, partitions: Sequence[TopicPartition], strategy: PartitionLeaderElectionStrategy
    ) -> dict[TopicPartition, ElectionOutcome]:
        remaining = list(partitions)
        finished: dict[TopicPartition, ElectionOutcome] = {}
        for _ in range(MAX_ELECTION_ROUNDS):
            if not remaining:
                break
            done, remaining = self._do_elect_leader_for_partitions(remaining, strategy)
            for tp, outcome in done.items():
                if isinstance(outcome, Exception):
                    self._log_failed(tp, self.context.partition_state(tp), PartitionState.OnlinePartition, outcome)
            finished.update(done)
            if remaining:
                log.info("Retrying leader election with strategy %s for partitions %s", strategy,
                         ",".join(map(tp_name, remaining)))
        for tp in remaining:
            finished[tp] = StateChangeFailedException(f"gave up electing a leader for {tp_name(tp)} after repeated BADVERSION")
        return finished

    def _do_elect_leader_for_partitions(
        self, partitions: Sequence[TopicPartition], strategy: PartitionLeaderElectionStrategy
    ) -> tuple[dict[TopicPartition, ElectionOutcome], list[TopicPartition]]:
        ctx = self.context
        try:
            read = self.zk.get_topic_partition_states(partitions)
        except ControllerMovedException:
            raise
        except Exception as e:
            return {tp: e for tp in partitions}, []
        failed: dict[TopicPartition, ElectionOutcome] = {}
        valid: list[tuple[TopicPartition, LeaderAndIsr]] = []
        for tp in partitions:
            got = read.get(tp)
            if isinstance(got, Exception):
                failed[tp] = got
            elif got is None:
                failed[tp] = StateChangeFailedException(
                    f"LeaderAndIsr information doesn't exist for partition {tp_name(tp)} in "
                    f"{ctx.partition_state(tp).name} state"
                )
            elif got.controller_epoch > ctx.epoch:
                failed[tp] = StateChangeFailedException(
                    f"Aborted leader election for partition {tp_name(tp)} since the LeaderAndIsr path was already written by "
                    f"another controller. This probably means that the current controller {self.controller_id} went "
                    f"through a soft failure and another controller was elected with epoch {got.controller_epoch}."
                )
            else:
                valid.append((tp, got.leader_and_isr))
        if not valid:
            return failed, []

        new_states: dict[TopicPartition, LeaderAndIsr] = {}
        recipients: dict[TopicPartition, list[int]] = {}
        unclean = self._unclean_allowed(valid, strategy)
        for tp, lai in valid:
            allow = unclean.get(tp, False)
            if isinstance(allow, Exception):
                failed[tp] = allow
                continue
            elected = self._elect(tp, lai, strategy, allow)
            if elected is None:
                failed[tp] = StateChangeFailedException(
                    f"Failed to elect leader for partition {tp_name(tp)} under strategy {strategy}"
                )
                continue
            new_states[tp], recipients[tp] = elected
        if not new_states:
            return failed, []
        result = self.zk.update_leader_and_isr(new_states, ctx.epoch, ctx.epoch_zk_version)
        for tp, outcome in result.finished.items():
            if isinstance(outcome, LeaderAndIsr):
                info = LeaderIsrAndControllerEpoch(outcome, ctx.epoch)
                ctx.put_partition_leadership_info(tp, info)
                self.batch.add_leader_and_isr_request_for_brokers(
                    recipients[tp], tp, info, ctx.partition_full_replica_assignment(tp), is_new=False
                )
        for tp in result.to_retry:
            log.debug("Controller failed to elect leader for partition %s (state %s): bad ZK version, will retry",
                      tp_name(tp), new_states[tp])
        return {**result.finished, **failed}, list(result.to_retry)

    def _unclean_allowed(
        self, valid: Iterable[tuple[TopicPartition, LeaderAndIsr]], strategy: PartitionLeaderElectionStrategy
    ) -> dict[TopicPartition, bool | Exception]:
        """Kafka's ``collectUncleanLeaderElectionState``: only partitions with no live ISR member
        may go unclean; the strategy's flag or else the topic's config decides."""
        if not isinstance(strategy, OfflinePartitionLeaderElectionStrategy):
            return {}
        ctx = self.context
        no_live_isr = [tp for tp, lai in valid if not any(ctx.is_replica_online(r, tp) for r in lai.isr)]
        if not no_live_isr:
            return {}
        if strategy.allow_unclean:
            return dict.fromkeys(no_live_isr, True)
        configs = self.zk.unclean_leader_election_enable({tp[0] for tp in no_live_isr})
        out: dict[TopicPartition, bool | Exception] = {}
        for tp in no_live_isr:
            out[tp] = configs.get(tp[0], False)
        return out

    def _elect(
        self, tp: TopicPartition, lai: LeaderAndIsr, strategy: PartitionLeaderElectionStrategy, unclean: bool
    ) -> tuple[LeaderAndIsr, list[int]] | None:
        """Kafka's ``Election.leaderFor*``: the new state and the LeaderAndIsr recipients."""
        ctx = self.context
        full = ctx.partition_full_replica_assignment(tp)
        assignment = list(full.replicas)
        current = PartitionLeadership(assignment, list(lai.isr), lai.leader)
        selector: PartitionLeaderSelector
        if isinstance(strategy, OfflinePartitionLeaderElectionStrategy):
            live = [r for r in assignment if ctx.is_replica_online(r, tp)]
            res = OfflinePartitionLeaderSelector(unclean_enabled=unclean).select(current, set(live))
            if res.leader is None:
                return None
            if res.leader not in lai.isr and self.leader_recovery_supported:
                return lai.new_recovering_leader_and_isr(res.leader, res.isr), live
            return lai.new_leader_and_isr(res.leader, res.isr), live
        if isinstance(strategy, ReassignPartitionLeaderElectionStrategy):
            target = list(full.target_replicas)
            live = [r for r in target if ctx.is_replica_online(r, tp)]
            selector = ReassignedPartitionLeaderSelector(target)
            res = selector.select(current, set(live))
            return (lai.new_leader(res.leader), target) if res.leader is not None else None
        if isinstance(strategy, PreferredReplicaPartitionLeaderElectionStrategy):
            live = [r for r in assignment if ctx.is_replica_online(r, tp)]
            res = PreferredReplicaPartitionLeaderSelector().select(current, set(live))
            return (lai.new_leader(res.leader), assignment) if res.leader is not None else None
        live = [r for r in assignment if ctx.is_replica_online(r, tp, include_shutting_down_brokers=True)]
        selector = ControlledShutdownLeaderSelector(frozenset(ctx.shutting_down_broker_ids))
        res = selector.select(current, set(live))
        return (lai.new_leader_and_isr(res.leader, res.isr), live) if res.leader is not None else None

    # --- logging ------------------------------------------------------------------------------

    def _log_invalid_transition(self, tp: TopicPartition, target: PartitionState) -> None:
        current = self.context.partition_state(tp)
        self._log_failed(
            tp, current, target,
            StateChangeFailedException(
                f"Partition {tp_name(tp)} should be in one of "
                f"{','.join(sorted(s.name for s in target.valid_previous_states))} states before moving to "
                f"{target.name} state. Instead it is in {current.name} state"
            ),
        )

    def _log_failed(self, tp: TopicPartition, current: PartitionState, target: PartitionState, e: Exception) -> None:
        log.error(
            "Controller %d epoch %d failed to change state for partition %s from %s to %s: %s",
            self.controller_id, self.context.epoch, tp_name(tp), current.name, target.name, e,
        )
