"""Kafka's ``KafkaController`` (ZooKeeper mode): election, failover, resignation and the processing
of every ControllerEvent, over the sans-I/O core (context, state machines, request batch, topic
deletion).

Sans-I/O itself: ZooKeeper through a :class:`KafkaControllerZkClient`, brokers through a channel
manager (``send_request`` / ``add_broker`` / ``remove_broker`` / ``startup`` / ``shutdown``), timers
through a :class:`ControllerScheduler`, new events through ``put``. The asyncio shell is
:mod:`odradek.controller.kafka_controller_driver`; the unit tests drive it with fakes.

- ``elect()``: if no ``/controller``, race to create it; the winner's multi also increments
  ``/controller_epoch`` on its read zkVersion, and runs ``on_controller_failover`` in Kafka's order:
  watches, clearing the ISR-change / log-dir notifications, the ControllerContext from ZooKeeper,
  topic deletion init, UpdateMetadata (no partitions) to every live broker, the replica state
  machine, the partition state machine, topic deletions, pending preferred elections, the
  auto-rebalance task. A ControllerMovedException anywhere (a write's epoch check failed: another
  broker is controller) makes the controller re-read ``/controller`` and resign
  (``maybe_resign``); any other failure of the election deletes ``/controller`` (Kafka's
  ``triggerControllerMove``) so that another round starts.
- Every request carries ``context.epoch``; every ZooKeeper write is checked against
  ``context.epoch_zk_version``.

Partition reassignment is :mod:`odradek.controller.zk_reassignment`. Not here: feature
versioning (``/feature``), delegation tokens, log-dir failure handling beyond clearing the
notifications.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from odradek.controller import controller_event_manager as ev
from odradek.controller.controller_broker_request_batch import ControllerBrokerRequestBatch
from odradek.controller.controller_context import (
    Broker,
    ControllerContext,
    LeaderIsrAndControllerEpoch,
    PartitionAndReplica,
    PartitionState,
    ReplicaState,
    TopicPartition,
)
from odradek.controller.controller_zk_client import (
    ControllerMovedException,
)
from odradek.controller.kafka_controller_zk import KafkaControllerZkClient
from odradek.controller.partition_state_machine import (
    OfflinePartitionLeaderElectionStrategy,
    PartitionStateMachine,
)
from odradek.controller.replica_state_machine import ReplicaStateMachine
from odradek.controller.topic_deletion_manager import TopicDeletionManager
from odradek.controller.zk_leader_movements import (
    PREFERRED,
    LeaderMovements,
)
from odradek.controller.zk_producer_ids import AllocateProducerIds, process_allocate_producer_ids
from odradek.controller.zk_reassignment import ListPartitionReassignments, ZkReassignment
from odradek.protocol.errors import Errors

log = logging.getLogger(__name__)

@dataclass
class AlterPartitionReceived(ev.ControllerEvent):
    """Kafka's ``AlterPartitionReceived``: a partition leader's AlterPartition request (the
    decoded body and its version); ``callback`` gets the response body."""

    request: dict[str, Any] = field(default_factory=dict)
    version: int = 3
    callback: Callable[[dict[str, Any]], None] | None = None
    state: ClassVar[ev.ControllerState] = ev.ControllerState.IsrChange

    def preempt(self) -> None:
        if self.callback is not None:
            self.callback({"throttle_time_ms": 0, "error_code": Errors.NOT_CONTROLLER, "topics": []})


class ChannelManager(Protocol):
    def send_request(self, broker_id: int, api_key: int, api_version: int, body: dict[str, Any],
                     callback: Callable[[dict[str, Any]], None]) -> None: ...

    def startup(self, brokers: Iterable[Broker]) -> None: ...

    def add_broker(self, broker: Broker) -> None: ...

    def remove_broker(self, broker_id: int) -> None: ...

    def shutdown(self) -> None: ...


class ControllerScheduler(Protocol):
    """Runs ``put(event)`` after ``delay_s`` (Kafka's kafkaScheduler); ``cancel_all`` on resignation."""

    def schedule(self, delay_s: float, event: ev.ControllerEvent) -> None: ...

    def cancel_all(self) -> None: ...


@dataclass
class KafkaControllerConfig:
    broker_id: int
    auto_leader_rebalance_enable: bool = True  # auto.leader.rebalance.enable
    leader_imbalance_per_broker_percentage: int = 10  # leader.imbalance.per.broker.percentage
    leader_imbalance_check_interval_seconds: int = 300  # leader.imbalance.check.interval.seconds
    delete_topic_enable: bool = True  # delete.topic.enable
    inter_broker_listener_name: str = "PLAINTEXT"
    controller_socket_timeout_ms: int = 30000  # controller.socket.timeout.ms
    unclean_leader_election_enable: bool = False  # unclean.leader.election.enable (topics may override)

    @classmethod
    def from_kafka_config(cls, cfg: Any) -> KafkaControllerConfig:
        """From a broker's KafkaConfig (anything with ``get(key)`` and ``inter_broker_listener_name``):
        Kafka's names and defaults."""
        return cls(
            broker_id=int(cfg.get("broker.id")),
            auto_leader_rebalance_enable=bool(cfg.get("auto.leader.rebalance.enable")),
            leader_imbalance_per_broker_percentage=int(cfg.get("leader.imbalance.per.broker.percentage")),
            leader_imbalance_check_interval_seconds=int(cfg.get("leader.imbalance.check.interval.seconds")),
            delete_topic_enable=bool(cfg.get("delete.topic.enable")),
            inter_broker_listener_name=str(cfg.inter_broker_listener_name),
            controller_socket_timeout_ms=int(cfg.get("controller.socket.timeout.ms")),
            unclean_leader_election_enable=bool(cfg.get("unclean.leader.election.enable")),
        )


class KafkaController(LeaderMovements):
    def __init__(
        self,
        config: KafkaControllerConfig,
        zk: KafkaControllerZkClient,
        channel: ChannelManager,
        scheduler: ControllerScheduler,
        put: Callable[[ev.ControllerEvent], None],
        register_broker: Callable[[], int] | None = None,
    ) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.zk = zk
        self.channel = channel
        self.scheduler = scheduler
        self.put = put
        self.register_broker = register_broker
        self.active_controller_id = -1
        self.context = ControllerContext()
        self.batch = ControllerBrokerRequestBatch(
            self.broker_id, self.context, channel, self, config.inter_broker_listener_name
        )
        self.replica_state_machine = ReplicaStateMachine(self.broker_id, self.context, zk, self.batch)
        self.partition_state_machine = PartitionStateMachine(self.broker_id, self.context, zk, self.batch)
        self.topic_deletion_manager = TopicDeletionManager(
            self.context, self.replica_state_machine, self.partition_state_machine, self,
            config.delete_topic_enable,
        )
        self._watched_topics: set[str] = set()
        self.reassignment = ZkReassignment(self)

    @property
    def is_active(self) -> bool:
        return self.active_controller_id == self.broker_id

    @property
    def epoch(self) -> int:
        return self.context.epoch

    # --- ControllerEventProcessor -------------------------------------------------------------

    def preempt(self, event: ev.ControllerEvent) -> None:
        event.preempt()

    def process(self, event: ev.ControllerEvent) -> None:
        try:
            self._dispatch(event)
        except ControllerMovedException as e:
            log.info("[Controller id=%d] Controller moved to another broker when processing %r: %s",
                     self.broker_id, type(event).__name__, e)
            self.maybe_resign()
        except Exception as e:
            log.error("[Controller id=%d] Error processing event %r", self.broker_id, event, exc_info=True)
            if isinstance(event, ev.Startup | ev.Reelect | ev.RegisterBrokerAndReelect):
                self.trigger_controller_move()
            else:
                raise e

    def _dispatch(self, event: ev.ControllerEvent) -> None:  # noqa: C901 (one branch per event)
        if isinstance(event, ev.Startup):
            self.zk.watch_controller(self.put)
            self.elect()
        elif isinstance(event, ev.ControllerChange):
            self.maybe_resign()
        elif isinstance(event, ev.Reelect):
            self.maybe_resign()
            self.elect()
        elif isinstance(event, ev.RegisterBrokerAndReelect):
            if self.register_broker is not None:
                self.register_broker()
            self.maybe_resign()
            self.elect()
        elif isinstance(event, ev.Expire):
            self.active_controller_id = -1
            self.on_controller_resignation()
        elif isinstance(event, ev.BrokerChange):
            self._process_broker_change()
        elif isinstance(event, ev.BrokerModifications):
            self._process_broker_modification(event.broker_id)
        elif isinstance(event, ev.TopicChange):
            self._process_topic_change()
        elif isinstance(event, ev.PartitionModifications):
            self._process_partition_modifications(event.topic)
        elif isinstance(event, ev.TopicDeletion):
            self._process_topic_deletion()
        elif isinstance(event, ev.TopicDeletionStopReplicaResponseReceived):
            self._process_topic_deletion_stop_replica_response(event)
        elif isinstance(event, ev.IsrChangeNotification):
            self._process_isr_change_notification()
        elif isinstance(event, ev.LogDirEventNotification):
            self._process_log_dir_event_notification()
        elif isinstance(event, ev.ReplicaLeaderElection):
            self._process_replica_leader_election(event)
        elif isinstance(event, ev.AutoPreferredReplicaLeaderElection):
            self._process_auto_preferred_replica_leader_election()
        elif isinstance(event, ev.ControlledShutdown):
            self._process_controlled_shutdown(event)
        elif isinstance(event, AlterPartitionReceived):
            self._process_alter_partition(event)
        elif isinstance(event, ev.LeaderAndIsrResponseReceived):
            self._process_leader_and_isr_response(event.broker_id, event.response)
        elif isinstance(event, ev.UpdateMetadataResponseReceived):
            if self.is_active and event.response.get("error_code", 0) != 0:
                log.error("Received error %s in UpdateMetadata response from broker %d",
                          event.response.get("error_code"), event.broker_id)
        elif isinstance(event, ev.UncleanLeaderElectionEnable):
            if self.is_active:
                self.partition_state_machine.trigger_online_partition_state_change()
        elif isinstance(event, ev.TopicUncleanLeaderElectionEnable):
            if self.is_active:
                self.partition_state_machine.trigger_online_partition_state_change(event.topic)
        elif isinstance(event, AllocateProducerIds):
            if event.callback is not None:
                event.callback(process_allocate_producer_ids(self.is_active, self.context, self.zk, event))
        elif isinstance(event, ev.ZkPartitionReassignment):
            self.reassignment.process_zk_reassignment()
        elif isinstance(event, ev.ApiPartitionReassignment):
            self.reassignment.process_api_reassignment(event)
        elif isinstance(event, ListPartitionReassignments):
            self.reassignment.process_list(event)
        elif isinstance(event, ev.PartitionReassignmentIsrChange):
            if self.is_active and event.partition in self.context.partitions_being_reassigned:
                self.reassignment.maybe_complete(event.partition)
        else:
            log.warning("[Controller id=%d] Unhandled event %r", self.broker_id, event)

    # --- election, failover, resignation --------------------------------------------------------

    def elect(self) -> None:
        self.active_controller_id = self.zk.get_controller_id() or -1
        if self.active_controller_id != -1:
            log.debug("Broker %d has been elected as the controller, so stopping the election process.",
                      self.active_controller_id)
            return
        try:
            epoch, epoch_zk_version = self.zk.register_controller_and_increment_controller_epoch(self.broker_id)
        except ControllerMovedException:
            self.maybe_resign()
            if self.active_controller_id != -1:
                log.debug("Broker %d was elected as controller instead of broker %d",
                          self.active_controller_id, self.broker_id)
            else:
                log.warning("A controller has been elected but just resigned, this will result in another "
                            "round of election")
            return
        self.context.epoch = epoch
        self.context.epoch_zk_version = epoch_zk_version
        self.active_controller_id = self.broker_id
        log.info("%d successfully elected as the controller. Epoch incremented to %d and epoch zk version is now %d",
                 self.broker_id, epoch, epoch_zk_version)
        self.on_controller_failover()

    def maybe_resign(self) -> None:
        was_active = self.is_active
        self.zk.watch_controller(self.put)
        self.active_controller_id = self.zk.get_controller_id() or -1
        if was_active and not self.is_active:
            self.on_controller_resignation()

    def trigger_controller_move(self) -> None:
        """Kafka's triggerControllerMove: resign and delete ``/controller`` (epoch-checked)."""
        was_active = self.is_active
        epoch_zk_version = self.context.epoch_zk_version
        self.active_controller_id = -1
        if was_active:
            self.on_controller_resignation()
            try:
                self.zk.delete_controller(epoch_zk_version)
            except ControllerMovedException:
                log.warning("Controller moved to another broker while deleting /controller")

    def on_controller_failover(self) -> None:
        ctx = self.context
        log.info("Registering handlers")
        self.zk.register_controller_watches(self.put)
        log.info("Deleting log dir event notifications")
        self.zk.delete_log_dir_event_notifications(None, ctx.epoch_zk_version)
        log.info("Deleting isr change notifications")
        self.zk.delete_isr_change_notifications(None, ctx.epoch_zk_version)
        log.info("Initializing controller context")
        self._initialize_controller_context()
        log.info("Fetching topic deletions in progress")
        to_delete, ineligible = self._fetch_topic_deletions_in_progress()
        log.info("Initializing topic deletion manager")
        self.topic_deletion_manager.init(to_delete, ineligible)
        log.info("Sending update metadata request")
        self.send_update_metadata_request(ctx.live_or_shutting_down_broker_ids, set())
        self.replica_state_machine.startup()
        self.partition_state_machine.startup()
        log.info("Ready to serve as the new controller with epoch %d", ctx.epoch)
        self.reassignment.initialize()
        self.topic_deletion_manager.try_topic_deletion()
        pending = self._fetch_pending_preferred_replica_elections()
        self.on_replica_election(pending, PREFERRED, ev.ElectionTrigger.ZkTriggered)
        if self.config.auto_leader_rebalance_enable:
            self.scheduler.schedule(5, ev.AutoPreferredReplicaLeaderElection())

    def on_controller_resignation(self) -> None:
        log.debug("Resigning")
        self.zk.unregister_controller_watches()
        self.scheduler.cancel_all()
        if self._watched_topics:
            self.zk.unwatch_partition_modifications(sorted(self._watched_topics))
            self._watched_topics.clear()
        self.channel.shutdown()
        self.batch.clear()
        self.context.reset_context()
        log.info("Resigned")

    def _initialize_controller_context(self) -> None:
        ctx = self.context
        ctx.set_live_brokers(self.zk.get_all_broker_and_epochs())
        log.info("Initialized broker epochs cache: %s", ctx.live_broker_id_and_epochs)
        ctx.set_all_topics(self.zk.get_all_topics())
        self._watch_topics(ctx.all_topics)
        self._add_assignments(ctx.all_topics)
        ctx.clear_partition_leadership_info()
        ctx.shutting_down_broker_ids.clear()
        self._update_leader_and_isr_cache(sorted(ctx.all_partitions()))
        self.channel.startup(ctx.live_or_shutting_down_brokers)
        log.info("Currently active brokers in the cluster: %s", sorted(ctx.live_broker_ids))
        log.info("Current list of topics in the cluster: %s", sorted(ctx.all_topics))

    def _add_assignments(self, topics: Collection[str]) -> set[TopicPartition]:
        added: set[TopicPartition] = set()
        if not topics:
            return added
        for topic, (topic_id, assignment) in self.zk.get_replica_assignment_and_topic_ids(topics).items():
            if topic_id is not None:
                self.context.add_topic_id(topic, topic_id)
            for tp, ra in assignment.items():
                self.context.update_partition_full_replica_assignment(tp, ra)
                if ra.is_being_reassigned:
                    self.context.partitions_being_reassigned.add(tp)
                added.add(tp)
        return added

    def _watch_topics(self, topics: Iterable[str]) -> None:
        new = set(topics) - self._watched_topics
        if new:
            self.zk.watch_partition_modifications(sorted(new), self.put)
            self._watched_topics |= new

    def _update_leader_and_isr_cache(self, partitions: Collection[TopicPartition]) -> None:
        if not partitions:
            return
        for tp, info in self.zk.get_topic_partition_states(partitions).items():
            if isinstance(info, LeaderIsrAndControllerEpoch):
                self.context.put_partition_leadership_info(tp, info)

    def _fetch_topic_deletions_in_progress(self) -> tuple[set[str], set[str]]:
        ctx = self.context
        to_delete = set(self.zk.get_topic_deletions())
        ineligible = {
            r.topic for r in ctx.replicas_for_partition(
                tp for t in to_delete for tp in ctx.partitions_for_topic(t))
            if not ctx.is_replica_online(r.replica, r.topic_partition)
        } | {t for t, _ in ctx.partitions_being_reassigned}
        log.info("List of topics to be deleted: %s; ineligible for deletion: %s", sorted(to_delete), sorted(ineligible))
        return to_delete, ineligible

    def _fetch_pending_preferred_replica_elections(self) -> set[TopicPartition]:
        ctx = self.context
        pending = set()
        for tp in self.zk.get_preferred_replica_election():
            info = ctx.partition_leadership_info(tp)
            replicas = ctx.partition_replica_assignment(tp)
            if info is None or not replicas or ctx.is_topic_queued_up_for_deletion(tp[0]):
                continue
            if info.leader_and_isr.leader != replicas[0]:
                pending.add(tp)
        return pending

    # --- requests and their answers ------------------------------------------------------------

    def send_update_metadata_request(self, brokers: Iterable[int], partitions: Collection[TopicPartition]) -> None:
        try:
            self.batch.new_batch()
            self.batch.add_update_metadata_request_for_brokers(brokers, sorted(partitions))
            self.batch.send_requests_to_brokers(self.context.epoch)
        except Exception:
            self.batch.clear()
            raise

    def leader_and_isr_response(self, broker_id: int, response: dict[str, Any]) -> None:
        self.put(ev.LeaderAndIsrResponseReceived(response=response, broker_id=broker_id))

    def update_metadata_response(self, broker_id: int, response: dict[str, Any]) -> None:
        self.put(ev.UpdateMetadataResponseReceived(response=response, broker_id=broker_id))

    def stop_replica_response(self, broker_id: int, response: dict[str, Any], deleted: set[TopicPartition]) -> None:
        errors = {
            (pe["topic_name"], pe["partition_index"]): pe.get("error_code", 0)
            for pe in response.get("partition_errors", [])
            if (pe["topic_name"], pe["partition_index"]) in deleted
        }
        self.put(ev.TopicDeletionStopReplicaResponseReceived(
            replica_id=broker_id, request_error=response.get("error_code", 0), partition_errors=errors))

    def _process_leader_and_isr_response(self, broker_id: int, response: dict[str, Any]) -> None:
        if not self.is_active:
            return
        if response.get("error_code", 0) != 0:
            log.error("Received error %s in LeaderAndIsr response from broker %d", response.get("error_code"), broker_id)
            return
        ctx = self.context
        offline: set[TopicPartition] = set()
        online: set[TopicPartition] = set()
        for topic in response.get("topics", []):
            name = ctx.topic_name(topic["topic_id"]) if "topic_id" in topic else topic.get("topic_name")
            if name is None:
                continue
            for pe in topic.get("partition_errors", []):
                tp = (name, pe["partition_index"])
                (offline if pe.get("error_code", 0) == Errors.KAFKA_STORAGE_ERROR else online).add(tp)
        previous = ctx.replicas_on_offline_dirs.get(broker_id, set())
        current = (previous - online) | offline
        ctx.replicas_on_offline_dirs[broker_id] = current
        if current - previous:
            self._on_replicas_become_offline({PartitionAndReplica(tp, broker_id) for tp in current - previous})

    def _process_log_dir_event_notification(self) -> None:
        """A broker's log directory failed: LeaderAndIsr for all its replicas (OnlineReplica), the
        ones on the failed directory answer KAFKA_STORAGE_ERROR and go offline."""
        if not self.is_active:
            return
        seqs = self.zk.get_all_log_dir_event_notifications()
        try:
            broker_ids = sorted(set(self.zk.get_broker_ids_from_log_dir_events(seqs)))
            if broker_ids:
                log.info("Handling log directory failure for brokers %s", broker_ids)
                replicas = self.context.replicas_on_brokers(set(broker_ids))
                self.replica_state_machine.handle_state_changes(sorted(replicas, key=_order), ReplicaState.OnlineReplica)
        finally:
            self.zk.delete_log_dir_event_notifications(seqs, self.context.epoch_zk_version)

    # --- brokers --------------------------------------------------------------------------------

    def _process_broker_change(self) -> None:
        if not self.is_active:
            return
        ctx = self.context
        cur = self.zk.get_all_broker_and_epochs()
        cur_epochs = {b.id: e for b, e in cur.items()}
        known = ctx.live_or_shutting_down_broker_ids
        new_ids = set(cur_epochs) - known
        dead_ids = known - set(cur_epochs)
        known_epochs = ctx.live_broker_id_and_epochs
        bounced_ids = {b for b in set(cur_epochs) & known if cur_epochs[b] > known_epochs.get(b, -1)}
        log.info("Newly added brokers: %s, deleted brokers: %s, bounced brokers: %s, all live brokers: %s",
                 sorted(new_ids), sorted(dead_ids), sorted(bounced_ids), sorted(cur_epochs))
        new = {b: e for b, e in cur.items() if b.id in new_ids}
        bounced = {b: e for b, e in cur.items() if b.id in bounced_ids}
        for b in new:
            self.channel.add_broker(b)
        for bid in bounced_ids:
            self.channel.remove_broker(bid)
        for b in bounced:
            self.channel.add_broker(b)
        for bid in dead_ids:
            self.channel.remove_broker(bid)
        if new:
            ctx.add_live_brokers(new)
            self.on_broker_startup(sorted(new_ids))
        if bounced:
            ctx.remove_live_brokers(bounced_ids)
            self.on_broker_failure(sorted(bounced_ids))
            ctx.add_live_brokers(bounced)
            self.on_broker_startup(sorted(bounced_ids))
        if dead_ids:
            ctx.remove_live_brokers(dead_ids)
            self.on_broker_failure(sorted(dead_ids))

    def _process_broker_modification(self, broker_id: int) -> None:
        if not self.is_active:
            return
        new = self.zk.get_broker(broker_id)
        old = self.context.live_or_shutting_down_broker(broker_id)
        if new is not None and old is not None and new.endpoints != old.endpoints:
            log.info("Updated broker metadata: %s -> %s", old, new)
            self.context.update_broker_metadata(new)
            self.send_update_metadata_request(self.context.live_or_shutting_down_broker_ids, set())

    def on_broker_startup(self, new_brokers: list[int]) -> None:
        log.info("New broker startup callback for %s", new_brokers)
        ctx = self.context
        for b in new_brokers:
            ctx.replicas_on_offline_dirs.pop(b, None)
        existing = ctx.live_or_shutting_down_broker_ids - set(new_brokers)
        self.send_update_metadata_request(existing, set())
        with_leaders = {tp for tp in ctx.partitions_leadership_info}
        self.send_update_metadata_request(new_brokers, with_leaders)
        replicas = sorted(ctx.replicas_on_brokers(set(new_brokers)), key=_order)
        self.replica_state_machine.handle_state_changes(replicas, ReplicaState.OnlineReplica)
        self.partition_state_machine.trigger_online_partition_state_change()
        started = set(new_brokers)
        self.reassignment.maybe_resume(lambda _, a: bool(started & set(a.target_replicas)))
        to_resume = {r.topic for r in replicas if self.topic_deletion_manager.is_topic_queued_up_for_deletion(r.topic)}
        if to_resume:
            log.info("Some replicas for topics scheduled for deletion %s are on the newly restarted brokers %s. "
                     "Signaling restart of topic deletion for these topics", sorted(to_resume), new_brokers)
            self.topic_deletion_manager.resume_deletion_for_topics(to_resume)

    def on_broker_failure(self, dead_brokers: list[int]) -> None:
        log.info("Broker failure callback for %s", dead_brokers)
        ctx = self.context
        for b in dead_brokers:
            ctx.replicas_on_offline_dirs.pop(b, None)
            ctx.shutting_down_broker_ids.discard(b)
        self._on_replicas_become_offline(ctx.replicas_on_brokers(set(dead_brokers)))

    def _on_replicas_become_offline(self, replicas: set[PartitionAndReplica]) -> None:
        tdm = self.topic_deletion_manager
        for_deletion = {r for r in replicas if tdm.is_topic_queued_up_for_deletion(r.topic)}
        not_for_deletion = replicas - for_deletion
        offline_leaders = sorted(self.context.partitions_with_offline_leader())
        self.partition_state_machine.handle_state_changes(offline_leaders, PartitionState.OfflinePartition)
        results = self.partition_state_machine.trigger_online_partition_state_change()
        self.replica_state_machine.handle_state_changes(sorted(not_for_deletion, key=_order), ReplicaState.OfflineReplica)
        if for_deletion:
            tdm.fail_replica_deletion(for_deletion)
        if not not_for_deletion and all(isinstance(r, Exception) for r in results.values()):
            self.send_update_metadata_request(self.context.live_or_shutting_down_broker_ids, set())

    # --- topics ---------------------------------------------------------------------------------

    def _process_topic_change(self) -> None:
        if not self.is_active:
            return
        ctx = self.context
        topics = self.zk.get_all_topics()
        new_topics = topics - ctx.all_topics
        deleted = ctx.all_topics - topics
        ctx.set_all_topics(topics)
        self._watch_topics(new_topics)
        for t in deleted:
            ctx.remove_topic(t)
        if deleted & self._watched_topics:
            self.zk.unwatch_partition_modifications(sorted(deleted & self._watched_topics))
            self._watched_topics -= deleted
        added = self._add_assignments(new_topics)
        log.info("New topics: %s, deleted topics: %s", sorted(new_topics), sorted(deleted))
        if added:
            self.on_new_partition_creation(added)

    def _process_partition_modifications(self, topic: str) -> None:
        if not self.is_active:
            return
        ctx = self.context
        got = self.zk.get_replica_assignment_and_topic_ids([topic]).get(topic)
        if got is None:
            return
        to_add = {tp: ra for tp, ra in got[1].items() if not ctx.partition_replica_assignment(tp)}
        if self.topic_deletion_manager.is_topic_queued_up_for_deletion(topic):
            if to_add:
                log.warning("Skipping adding partitions %s for topic %s since it is currently being deleted",
                            sorted(to_add), topic)
            return
        if to_add:
            log.info("New partitions to be added %s", sorted(to_add))
            for tp, ra in to_add.items():
                ctx.update_partition_full_replica_assignment(tp, ra)
            self.on_new_partition_creation(set(to_add))

    def on_new_partition_creation(self, partitions: set[TopicPartition]) -> None:
        log.info("New partition creation callback for %s", sorted(partitions))
        parts = sorted(partitions)
        psm, rsm = self.partition_state_machine, self.replica_state_machine
        psm.handle_state_changes(parts, PartitionState.NewPartition)
        rsm.handle_state_changes(sorted(self.context.replicas_for_partition(parts), key=_order), ReplicaState.NewReplica)
        psm.handle_state_changes(parts, PartitionState.OnlinePartition, OfflinePartitionLeaderElectionStrategy(False))
        rsm.handle_state_changes(sorted(self.context.replicas_for_partition(parts), key=_order), ReplicaState.OnlineReplica)

    def _process_topic_deletion(self) -> None:
        if not self.is_active:
            return
        ctx = self.context
        to_delete = set(self.zk.get_topic_deletions())
        non_existent = to_delete - ctx.all_topics
        if non_existent:
            log.warning("Ignoring request to delete non-existing topics %s", sorted(non_existent))
            self.zk.delete_topic_deletions(sorted(non_existent), ctx.epoch_zk_version)
        to_delete -= non_existent
        if not self.config.delete_topic_enable:
            if to_delete:
                log.info("Removing %s since delete topic is disabled", sorted(to_delete))
                self.zk.delete_topic_deletions(sorted(to_delete), ctx.epoch_zk_version)
            return
        if to_delete:
            log.info("Starting topic deletion for topics %s", sorted(to_delete))
            reassigning = {t for t, _ in ctx.partitions_being_reassigned} & to_delete
            if reassigning:
                self.topic_deletion_manager.mark_topic_ineligible_for_deletion(reassigning, "topic reassignment in progress")
            self.topic_deletion_manager.enqueue_topics_for_deletion(to_delete)

    def _process_topic_deletion_stop_replica_response(self, e: ev.TopicDeletionStopReplicaResponseReceived) -> None:
        if not self.is_active:
            return
        failed = {tp for tp, err in e.partition_errors.items() if err != 0 or e.request_error != 0}
        done = set(e.partition_errors) - failed
        tdm = self.topic_deletion_manager
        if failed:
            tdm.fail_replica_deletion({PartitionAndReplica(tp, e.replica_id) for tp in failed})
        if done:
            tdm.complete_replica_deletion({PartitionAndReplica(tp, e.replica_id) for tp in done})

    # DeletionClient (for the TopicDeletionManager)
    def delete_topic(self, topic: str, epoch_zk_version: int) -> None:
        self.zk.delete_topic(topic, epoch_zk_version)

    def delete_topic_deletions(self, topics: Collection[str], epoch_zk_version: int) -> None:
        self.zk.delete_topic_deletions(topics, epoch_zk_version)

    def mute_partition_modifications(self, topic: str) -> None:
        if topic in self._watched_topics:
            self.zk.unwatch_partition_modifications([topic])
            self._watched_topics.discard(topic)

    def send_metadata_update(self, partitions: set[TopicPartition]) -> None:
        self.send_update_metadata_request(self.context.live_or_shutting_down_broker_ids, partitions)

    # --- ISR changes ------------------------------------------------------------------------------

    def _process_isr_change_notification(self) -> None:
        if not self.is_active:
            return
        seqs = self.zk.get_all_isr_change_notifications()
        try:
            partitions = self.zk.get_partitions_from_isr_change_notifications(seqs)
            if partitions:
                self._update_leader_and_isr_cache(sorted(partitions))
                self.send_update_metadata_request(self.context.live_or_shutting_down_broker_ids, partitions)
                for tp in sorted(partitions & self.context.partitions_being_reassigned):
                    self.reassignment.maybe_complete(tp)
        finally:
            self.zk.delete_isr_change_notifications(seqs, self.context.epoch_zk_version)

    def _process_alter_partition(self, event: AlterPartitionReceived) -> None:
        from odradek.controller.zk_alter_partition import process_alter_partition

        assert event.callback is not None
        if not self.is_active:
            event.callback({"throttle_time_ms": 0, "error_code": Errors.NOT_CONTROLLER, "topics": []})
            return
        try:
            response, committed = process_alter_partition(self.context, self.zk, event.request, event.version)
        except ControllerMovedException:
            event.callback({"throttle_time_ms": 0, "error_code": Errors.NOT_CONTROLLER, "topics": []})
            raise
        except Exception:
            log.error("Error when processing AlterPartition: %s", event.request, exc_info=True)
            event.callback({"throttle_time_ms": 0, "error_code": Errors.UNKNOWN_SERVER_ERROR, "topics": []})
            return
        event.callback(response)
        if committed:
            self.send_update_metadata_request(self.context.live_or_shutting_down_broker_ids, committed)
        for tp in sorted(committed & self.context.partitions_being_reassigned):
            self.reassignment.maybe_complete(tp)


def _order(r: PartitionAndReplica) -> tuple[TopicPartition, int]:
    return (r.topic_partition, r.replica)
