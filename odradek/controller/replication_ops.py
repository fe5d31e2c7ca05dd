"""The QuorumController's elections and reassignments: ElectLeaders, AlterPartitionReassignments,
ListPartitionReassignments, and what follows commits.

The decisions are the sans-I/O functions of :mod:`elect_leaders`, :mod:`reassignment` and
:mod:`leader_rebalance`; this module runs them as controller writes (through the controller's one
event queue, committed through Raft before anyone acts on them) and reacts to committed changes,
as Kafka's QuorumController does:

- a partition whose reassignment may complete (its adding replicas all in the ISR, typically
  after the leader's AlterPartition) gets the completing PartitionChangeRecord;
- topic or cluster-default configs that enable ``unclean.leader.election.enable`` lead to the
  unclean election of the affected leaderless partitions;
- with ``auto.leader.rebalance.enable``, while some partition is led by another broker than its
  preferred replica, a deferred event (tag ``electPreferred``) runs every
  ``leader.imbalance.check.interval.seconds`` and moves leaderships back where it can.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from odradek.controller.elect_leaders import (
    UNCLEAN_KEY,
    elect_leaders,
    elect_unclean_leaderless,
    unclean_enabled,
)
from odradek.controller.event_queue import FunctionEvent, earliest_deadline
from odradek.controller.leader_rebalance import is_imbalanced, maybe_balance_partition_leaders
from odradek.controller.reassignment import (
    alter_partition_reassignments,
    completable,
    complete_reassignments,
    list_partition_reassignments,
)
from odradek.metadata.delta import MetadataDelta
from odradek.metadata.image import NO_LEADER as NO_LEADER_ID
from odradek.metadata.image import MetadataImage
from odradek.protocol.errors import KafkaError

if TYPE_CHECKING:
    from odradek.controller.quorum_controller import QuorumController

log = logging.getLogger(__name__)

MetadataRecord = tuple[str, dict[str, Any]]

# Kafka's tag of the deferred balancing event.
ELECT_PREFERRED = "electPreferred"


class ReplicationOps:
    def __init__(
        self,
        controller: QuorumController,
        *,
        auto_leader_rebalance_enable: bool = True,
        leader_imbalance_check_interval_ms: int = 300_000,
        leader_imbalance_per_broker_percentage: int = 10,
        unclean_leader_election_enable: bool = False,
    ) -> None:
        self.controller = controller
        self.auto_leader_rebalance_enable = auto_leader_rebalance_enable
        self.leader_imbalance_check_interval_ms = leader_imbalance_check_interval_ms
        self.leader_imbalance_per_broker_percentage = leader_imbalance_per_broker_percentage
        self.unclean_leader_election_enable = unclean_leader_election_enable
        # Partitions led by another broker than their preferred replica (Kafka's
        # imbalancedPartitions), kept from the committed changes.
        self.imbalanced: set[tuple[str, int]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def image(self) -> MetadataImage:
        """The controller's write image (committed + appended): what new records build on."""
        return self.controller.write_image

    def unclean_enabled(self, topic: str) -> bool:
        return unclean_enabled(self.image, topic, self.unclean_leader_election_enable)

    # -- requests -------------------------------------------------------------------------------

    async def elect_leaders(self, request: dict[str, Any]) -> dict[str, Any]:
        def op() -> tuple[dict[str, Any], list[MetadataRecord]]:
            return elect_leaders(self.image, request)

        return await self.controller._write("electLeaders", op, request.get("timeout_ms"))

    async def alter_partition_reassignments(self, request: dict[str, Any]) -> dict[str, Any]:
        def op() -> tuple[dict[str, Any], list[MetadataRecord]]:
            return alter_partition_reassignments(self.image, request, self.unclean_enabled)

        return await self.controller._write("alterPartitionReassignments", op, request.get("timeout_ms"))

    def list_partition_reassignments(self, request: dict[str, Any]) -> dict[str, Any]:
        return list_partition_reassignments(self.controller.image, request)

    # -- after commits --------------------------------------------------------------------------

    def after_replay(self, delta: MetadataDelta, full: bool) -> None:
        """Committed records were applied (``full``: a snapshot, the whole image is new)."""
        image = self.controller.image
        if full:
            self.imbalanced = {
                (name, pid)
                for name, t in image.topics_by_name.items()
                for pid, p in t.partitions.items()
                if is_imbalanced(p)
            }
        else:
            for name in delta.deleted_topics:
                self.imbalanced = {tp for tp in self.imbalanced if tp[0] != name}
            for name, pid in delta.changed_partitions:
                t = image.topics_by_name.get(name)
                p = None if t is None else t.partitions.get(pid)
                if p is not None and is_imbalanced(p):
                    self.imbalanced.add((name, pid))
                else:
                    self.imbalanced.discard((name, pid))
        if not self.controller.is_active:
            return
        done = [
            (name, pid)
            for name, pid in delta.changed_partitions
            if (t := image.topics_by_name.get(name)) is not None
            and (p := t.partitions.get(pid)) is not None
            and completable(p)
        ]
        if done:
            self._submit("completeReassignments", lambda: complete_reassignments(self.image, done))
        unclean_topics = self._unclean_config_changes(delta)
        if unclean_topics:
            self._submit(
                "electUncleanLeaders",
                lambda: elect_unclean_leaderless(
                    self.image,
                    [t for n in unclean_topics if (t := self.image.topics_by_name.get(n)) is not None
                     and self.unclean_enabled(n)],
                ),
            )
        self.reschedule_balance()

    def _unclean_config_changes(self, delta: MetadataDelta) -> list[str]:
        """Topics with leaderless partitions for which the commit enabled unclean election."""
        names: set[str] = set()
        if "" in delta.changed_broker_configs and self.image.broker_config("").get(UNCLEAN_KEY, "").lower() == "true":
            names.update(self.image.topics_by_name)
        for n in delta.changed_topic_configs:
            if self.image.topic_config(n).get(UNCLEAN_KEY, "").lower() == "true":
                names.add(n)
        return sorted(
            n for n in names
            if (t := self.image.topics_by_name.get(n)) is not None
            and any(p.leader == NO_LEADER_ID for p in t.partitions.values())
            and self.unclean_enabled(n)
        )

    def _submit(self, name: str, build: Any) -> None:
        """Queue a controller write of the records ``build()`` returns (run from the queue, on
        the image of that moment)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        fut = self.controller._write(name, lambda: (None, build()))
        fut.add_done_callback(_log_failure)

    # -- auto leader balancing ------------------------------------------------------------------

    def reschedule_balance(self) -> None:
        """(Re)arm the balancing event while partitions are imbalanced (Kafka's
        maybeScheduleNextBalancePartitionLeaders): one tagged deferred event, the earliest
        deadline kept, so commits do not postpone it."""
        if not self.auto_leader_rebalance_enable or not self.controller.is_active or not self.imbalanced:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        future: asyncio.Future[None] = loop.create_future()
        future.add_done_callback(_log_failure)
        when = self.controller.clock_ms() + self.leader_imbalance_check_interval_ms
        event = FunctionEvent(ELECT_PREFERRED, self._balance, future)
        self.controller.queue.schedule_deferred(ELECT_PREFERRED, earliest_deadline(when), event)

    async def _balance(self) -> None:
        def op() -> tuple[None, list[MetadataRecord]]:
            return None, maybe_balance_partition_leaders(self.image, self.leader_imbalance_per_broker_percentage)

        try:
            await self.controller._run_write(op)
        finally:
            self.reschedule_balance()

    def cancel(self) -> None:
        self.controller.queue.cancel_deferred(ELECT_PREFERRED)


def _log_failure(future: asyncio.Future[Any]) -> None:
    if future.cancelled():
        return
    error = future.exception()
    if error is None or isinstance(error, KafkaError):
        return
    log.error("Unexpected exception in a controller replication event", exc_info=error)
