"""Kafka's ``TopicDeletionManager`` (ZooKeeper mode), sans-I/O.

A topic queued for deletion (``/admin/delete_topics/<t>``, ``delete.topic.enable`` true) is deleted
in rounds: its partitions go Offline -> NonExistent, UpdateMetadata tells every broker (leader -2),
its replicas go Offline -> ReplicaDeletionStarted (StopReplica with delete). A replica on a broker
that is down goes straight to ReplicaDeletionIneligible and the topic is marked ineligible; when the
broker comes back (``resume_deletion_for_topics``) the ineligible replicas are retried. When every
replica is ReplicaDeletionSuccessful the replicas become NonExistent, the topic's znodes are deleted
through the :class:`DeletionClient` and it leaves the context. With ``delete.topic.enable`` false
the requests are dropped (their znodes removed) and nothing is deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from typing import Protocol

from odradek.controller.controller_context import (
    ControllerContext,
    PartitionAndReplica,
    PartitionState,
    ReplicaState,
    TopicPartition,
)
from odradek.controller.partition_state_machine import PartitionStateMachine
from odradek.controller.replica_state_machine import ReplicaStateMachine

log = logging.getLogger(__name__)


class DeletionClient(Protocol):
    """The deletion's side effects (Kafka's ``DeletionClient``); ZooKeeper writes fenced by the
    controller epoch zkVersion."""

    def delete_topic(self, topic: str, epoch_zk_version: int) -> None:
        """Delete ``/brokers/topics/<t>``, ``/config/topics/<t>`` and ``/admin/delete_topics/<t>``."""
        ...

    def delete_topic_deletions(self, topics: Collection[str], epoch_zk_version: int) -> None:
        """Delete ``/admin/delete_topics/<t>`` for each topic."""
        ...

    def mute_partition_modifications(self, topic: str) -> None:
        """Stop watching ``/brokers/topics/<t>``."""
        ...

    def send_metadata_update(self, partitions: set[TopicPartition]) -> None:
        """UpdateMetadata for these partitions to every live or shutting-down broker."""
        ...


class TopicDeletionManager:
    def __init__(
        self,
        context: ControllerContext,
        replica_state_machine: ReplicaStateMachine,
        partition_state_machine: PartitionStateMachine,
        client: DeletionClient,
        delete_topic_enable: bool = True,
    ) -> None:
        self.context = context
        self.replica_state_machine = replica_state_machine
        self.partition_state_machine = partition_state_machine
        self.client = client
        self.is_delete_topic_enabled = delete_topic_enable

    def init(self, initial_topics_to_be_deleted: Iterable[str], initial_topics_ineligible: Iterable[str]) -> None:
        to_delete = set(initial_topics_to_be_deleted)
        if self.is_delete_topic_enabled:
            self.context.queue_topic_deletion(to_delete)
            self.context.topics_ineligible_for_deletion |= set(initial_topics_ineligible) & self.context.topics_to_be_deleted
        else:
            log.info("Removing %s since delete topic is disabled", sorted(to_delete))
            self.client.delete_topic_deletions(sorted(to_delete), self.context.epoch_zk_version)

    def try_topic_deletion(self) -> None:
        if self.is_delete_topic_enabled:
            self._resume_deletions()

    def enqueue_topics_for_deletion(self, topics: Iterable[str]) -> None:
        if self.is_delete_topic_enabled:
            self.context.queue_topic_deletion(topics)
            self._resume_deletions()

    def resume_deletion_for_topics(self, topics: Iterable[str]) -> None:
        """E.g. a broker came back, or a reassignment of the topic finished."""
        if self.is_delete_topic_enabled:
            resumed = set(topics) & self.context.topics_to_be_deleted
            if resumed:
                self.context.topics_ineligible_for_deletion -= resumed
                self._resume_deletions()

    def fail_replica_deletion(self, replicas: Iterable[PartitionAndReplica]) -> None:
        if self.is_delete_topic_enabled:
            failed = sorted((r for r in replicas if self.is_topic_queued_up_for_deletion(r.topic)), key=_order)
            if failed:
                topics = {r.topic for r in failed}
                log.debug("Deletion failed for replicas %s. Halting deletion for topics %s", failed, topics)
                self.replica_state_machine.handle_state_changes(failed, ReplicaState.ReplicaDeletionIneligible)
                self.mark_topic_ineligible_for_deletion(topics, "replica deletion failure")
                self._resume_deletions()

    def mark_topic_ineligible_for_deletion(self, topics: Iterable[str], reason: str) -> None:
        if self.is_delete_topic_enabled:
            halted = self.context.topics_to_be_deleted & set(topics)
            self.context.topics_ineligible_for_deletion |= halted
            if halted:
                log.info("Halted deletion of topics %s due to %s", ",".join(sorted(halted)), reason)

    def is_topic_queued_up_for_deletion(self, topic: str) -> bool:
        return self.is_delete_topic_enabled and self.context.is_topic_queued_up_for_deletion(topic)

    def complete_replica_deletion(self, replicas: Iterable[PartitionAndReplica]) -> None:
        done = sorted((r for r in replicas if self.is_topic_queued_up_for_deletion(r.topic)), key=_order)
        log.debug("Deletion successfully completed for replicas %s", done)
        self.replica_state_machine.handle_state_changes(done, ReplicaState.ReplicaDeletionSuccessful)
        self._resume_deletions()

    def _is_topic_ineligible_for_deletion(self, topic: str) -> bool:
        return topic in self.context.topics_ineligible_for_deletion if self.is_delete_topic_enabled else True

    def _is_topic_deletion_in_progress(self, topic: str) -> bool:
        return self.is_delete_topic_enabled and self.context.is_any_replica_in_state(
            topic, ReplicaState.ReplicaDeletionStarted
        )

    def _is_topic_eligible_for_deletion(self, topic: str) -> bool:
        return (
            self.context.is_topic_queued_up_for_deletion(topic)
            and not self._is_topic_deletion_in_progress(topic)
            and not self._is_topic_ineligible_for_deletion(topic)
        )

    def _retry_deletion_for_ineligible_replicas(self, topics: Iterable[str]) -> None:
        failed = sorted(
            (r for t in topics for r in self.context.replicas_in_state(t, ReplicaState.ReplicaDeletionIneligible)),
            key=_order,
        )
        log.debug("Retrying deletion of topics %s since replicas %s were not successfully deleted", topics, failed)
        self.replica_state_machine.handle_state_changes(failed, ReplicaState.OfflineReplica)

    def _complete_delete_topic(self, topic: str) -> None:
        self.client.mute_partition_modifications(topic)
        deleted = sorted(self.context.replicas_in_state(topic, ReplicaState.ReplicaDeletionSuccessful), key=_order)
        self.replica_state_machine.handle_state_changes(deleted, ReplicaState.NonExistentReplica)
        self.client.delete_topic(topic, self.context.epoch_zk_version)
        self.context.remove_topic(topic)

    def _on_topic_deletion(self, topics: set[str]) -> None:
        ctx = self.context
        unseen = topics - ctx.topics_with_deletion_started
        if unseen:
            partitions = sorted(tp for t in unseen for tp in ctx.partitions_for_topic(t))
            self.partition_state_machine.handle_state_changes(partitions, PartitionState.OfflinePartition)
            self.partition_state_machine.handle_state_changes(partitions, PartitionState.NonExistentPartition)
            ctx.begin_topic_deletion(unseen)  # after the state changes: the offline count stays right
        self.client.send_metadata_update({tp for t in topics for tp in ctx.partitions_for_topic(t)})
        self._on_partition_deletion(topics)

    def _on_partition_deletion(self, topics: set[str]) -> None:
        ctx = self.context
        dead: list[PartitionAndReplica] = []
        retry: list[PartitionAndReplica] = []
        ineligible: set[str] = set()
        for topic in sorted(topics):
            replicas = sorted(ctx.replicas_for_topic(topic), key=_order)
            alive = [r for r in replicas if ctx.is_replica_online(r.replica, r.topic_partition)]
            topic_dead = [r for r in replicas if not ctx.is_replica_online(r.replica, r.topic_partition)]
            succeeded = ctx.replicas_in_state(topic, ReplicaState.ReplicaDeletionSuccessful)
            retry.extend(r for r in alive if r not in succeeded)
            dead.extend(topic_dead)
            if topic_dead:
                log.debug("Dead Replicas (%s) found for topic %s", topic_dead, topic)
                ineligible.add(topic)
        rsm = self.replica_state_machine
        rsm.handle_state_changes(dead, ReplicaState.ReplicaDeletionIneligible)
        # StopReplica (no delete) first so the followers stop fetching, then with delete.
        rsm.handle_state_changes(retry, ReplicaState.OfflineReplica)
        rsm.handle_state_changes(retry, ReplicaState.ReplicaDeletionStarted)
        if ineligible:
            self.mark_topic_ineligible_for_deletion(ineligible, "offline replicas")

    def _resume_deletions(self) -> None:
        ctx = self.context
        queued = sorted(ctx.topics_to_be_deleted)
        retry: set[str] = set()
        eligible: set[str] = set()
        if queued:
            log.info("Handling deletion for topics %s", ",".join(queued))
        for topic in queued:
            if ctx.are_all_replicas_in_state(topic, ReplicaState.ReplicaDeletionSuccessful):
                self._complete_delete_topic(topic)
                log.info("Deletion of topic %s successfully completed", topic)
            elif not ctx.is_any_replica_in_state(topic, ReplicaState.ReplicaDeletionStarted):
                if ctx.is_any_replica_in_state(topic, ReplicaState.ReplicaDeletionIneligible):
                    retry.add(topic)
            if self._is_topic_eligible_for_deletion(topic):
                log.info("Deletion of topic %s (re)started", topic)
                eligible.add(topic)
        if retry:
            self._retry_deletion_for_ineligible_replicas(retry)
        if eligible:
            self._on_topic_deletion(eligible)


def _order(r: PartitionAndReplica) -> tuple[str, int, int]:
    return (r.topic_partition[0], r.topic_partition[1], r.replica)
