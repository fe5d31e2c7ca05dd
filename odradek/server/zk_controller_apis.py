"""A ZooKeeper-mode broker's handlers of the controller's requests: LeaderAndIsr, UpdateMetadata
and StopReplica (Kafka's KafkaApis.handleLeaderAndIsrRequest / handleUpdateMetadataRequest /
handleStopReplicaRequest with ReplicaManager.becomeLeaderOrFollower / maybeUpdateMetadataCache /
stopReplicas).

Fencing, as Kafka 3.9 does it:

- **Broker epoch**: a request whose broker epoch (v2+ LeaderAndIsr, v5+ UpdateMetadata, v1+
  StopReplica; -1 = unknown, not checked) is lower than this broker's current one (the czxid of
  its ``/brokers/ids/<id>`` znode) was meant for an earlier registration of this broker id:
  STALE_BROKER_EPOCH, nothing changes.
- **Controller epoch**: the broker keeps the highest controller epoch it has accepted from any of
  the three requests; a request from a lower one (an old controller) is refused with
  STALE_CONTROLLER_EPOCH and changes nothing. A request that is accepted raises it.
- **Leader epochs** (LeaderAndIsr, per partition): a state is applied only when its leader epoch
  is higher than the partition's current one; an equal or lower one is answered
  STALE_CONTROLLER_EPOCH and skipped (Kafka's wording); a partition this broker is not a replica
  of is answered UNKNOWN_TOPIC_OR_PARTITION; a topic id other than the hosted partition's (or its
  log's on disk) INCONSISTENT_TOPIC_ID. StopReplica (per partition) stops a hosted partition only
  when its leader epoch is not lower than the partition's (FENCED_LEADER_EPOCH otherwise), the
  sentinels -2 (``EpochDuringDelete``: topic deletion, which does not bump the epoch) and -1
  (``NoEpoch``: StopReplica before v3) passing always.

Accepted states go to the :class:`~odradek.server.replica_manager.ReplicaManager` as
:class:`~odradek.cluster.partition.PartitionState` (make_leaders / make_followers /
stop_replicas); a follower's fetcher finds its leader's endpoint in the metadata cache (which
UpdateMetadata fills), as Kafka's makeFollowers does. UpdateMetadata goes to the
:class:`~odradek.metadata.zk_metadata_cache.ZkMetadataCache`; the partitions it deletes and the
topics it names are handed to ``update_metadata_listeners`` (Kafka there removes deleted
partitions' group offsets and completes delayed CreateTopics/ElectLeaders).

Differences from Kafka: a LeaderAndIsr at the same leader epoch that only brings a topic id (an
upgrade from pre-2.8 brokers) is answered STALE_CONTROLLER_EPOCH without assigning the id; a
StopReplica without deletion drops the partition here (Kafka keeps the stopped partition's object
until a LeaderAndIsr or a deletion), so the next LeaderAndIsr starts it again from its log.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.cluster.partition import PartitionState
from odradek.metadata.zk_metadata_cache import ZkMetadataCache
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.protocol.schema import Api
from odradek.server.api_dispatcher import Handler, RequestContext
from odradek.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
ZERO_UUID = uuid.UUID(int=0)
# Kafka's LeaderAndIsr.EpochDuringDelete and LeaderAndIsr.NoEpoch.
EPOCH_DURING_DELETE = -2
NO_EPOCH = -1
# Kafka's KafkaController.InitialControllerEpoch.
INITIAL_CONTROLLER_EPOCH = 0

# (updated topics, deleted partitions) after an accepted UpdateMetadata.
UpdateMetadataListener = Callable[[list[str], list[TopicPartition]], None]


@dataclass(frozen=True, slots=True)
class LeaderAndIsrPartition:
    """One partition state of a LeaderAndIsr request, whatever its version."""

    topic: str
    topic_id: uuid.UUID  # ZERO_UUID before v5 (no topic ids)
    state: dict[str, Any]


def leader_and_isr_partitions(version: int, req: Mapping[str, Any]) -> list[LeaderAndIsrPartition]:
    if version <= 1:
        return [LeaderAndIsrPartition(ps["topic_name"], ZERO_UUID, ps) for ps in req.get("ungrouped_partition_states") or []]
    out: list[LeaderAndIsrPartition] = []
    for ts in req.get("topic_states") or []:
        tid = (ts.get("topic_id") or ZERO_UUID) if version >= 5 else ZERO_UUID
        out.extend(LeaderAndIsrPartition(ts["topic_name"], tid, ps) for ps in ts.get("partition_states") or [])
    return out


def leader_and_isr_response(
    version: int, error: Errors, parts: list[LeaderAndIsrPartition], errors: Mapping[TopicPartition, Errors],
) -> dict[str, Any]:
    """The response: ``errors`` per partition (v0-v4 by topic name, v5+ grouped by topic id)."""
    if version < 5:
        return {
            "error_code": error,
            "partition_errors": [
                {"topic_name": p.topic, "partition_index": p.state["partition_index"],
                 "error_code": errors.get((p.topic, p.state["partition_index"]), error)}
                for p in parts
            ],
        }
    topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for p in parts:
        idx = p.state["partition_index"]
        topics.setdefault(p.topic_id, []).append(
            {"partition_index": idx, "error_code": errors.get((p.topic, idx), error)}
        )
    return {"error_code": error, "topics": [{"topic_id": t, "partition_errors": pe} for t, pe in topics.items()]}


@dataclass(frozen=True, slots=True)
class StopReplicaPartition:
    topic: str
    partition: int
    leader_epoch: int
    delete: bool


def stop_replica_partitions(version: int, req: Mapping[str, Any]) -> list[StopReplicaPartition]:
    if version == 0:
        delete = bool(req["delete_partitions"])
        return [StopReplicaPartition(p["topic_name"], p["partition_index"], NO_EPOCH, delete)
                for p in req.get("ungrouped_partitions") or []]
    if version <= 2:
        delete = bool(req["delete_partitions"])
        return [StopReplicaPartition(t["name"], i, NO_EPOCH, delete)
                for t in req.get("topics") or [] for i in t["partition_indexes"]]
    return [StopReplicaPartition(t["topic_name"], ps["partition_index"], ps["leader_epoch"], bool(ps["delete_partition"]))
            for t in req.get("topic_states") or [] for ps in t.get("partition_states") or []]


class ZkControllerApis:
    """The broker's side of the ZooKeeper controller's requests (an ApiExtension of KafkaApis)."""

    def __init__(
        self,
        broker_id: int,
        metadata_cache: ZkMetadataCache,
        replica_manager: ReplicaManager,
        broker_epoch: Callable[[], int],
    ) -> None:
        self.broker_id = broker_id
        self.metadata_cache = metadata_cache
        self.replica_manager = replica_manager
        self.broker_epoch = broker_epoch
        # The highest controller epoch accepted (Kafka's ReplicaManager.controllerEpoch).
        self.controller_epoch = INITIAL_CONTROLLER_EPOCH
        self.update_metadata_listeners: list[UpdateMetadataListener] = []

    def handlers(self) -> dict[Api, Handler]:
        return {
            g.LEADER_AND_ISR: self.handle_leader_and_isr,
            g.UPDATE_METADATA: self.handle_update_metadata,
            g.STOP_REPLICA: self.handle_stop_replica,
        }

    def is_broker_epoch_stale(self, request_epoch: int) -> bool:
        """Kafka's ZkBrokerEpochManager.isBrokerEpochStale (a higher epoch is possible: the
        controller may learn of this registration before the broker does)."""
        return request_epoch != -1 and request_epoch < self.broker_epoch()

    def check_epochs(self, name: str, req: dict[str, Any], broker_epoch: int, old_controller_line: str = (
        "Ignoring {} request from controller %d since its controller epoch %d is old. "
        "Latest known controller epoch is %d"
    )) -> Errors:
        """The checks that open each control request (``name``), with Kafka's log lines: a stale
        broker epoch (STALE_BROKER_EPOCH), then an old controller epoch (STALE_CONTROLLER_EPOCH,
        logged with ``old_controller_line``); NONE when neither."""
        controller_id, controller_epoch = req["controller_id"], req["controller_epoch"]
        if self.is_broker_epoch_stale(broker_epoch):
            log.info("Received %s request with broker epoch %d smaller than the current broker epoch %d "
                     "from controller %d with epoch %d", name, broker_epoch, self.broker_epoch(), controller_id,
                     controller_epoch)
            return Errors.STALE_BROKER_EPOCH
        if controller_epoch < self.controller_epoch:
            log.warning(old_controller_line.format(name), controller_id, controller_epoch, self.controller_epoch)
            return Errors.STALE_CONTROLLER_EPOCH
        return Errors.NONE

    # -- LeaderAndIsr --------------------------------------------------------------------------------

    def handle_leader_and_isr(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        version = ctx.version
        parts = leader_and_isr_partitions(version, req)
        controller_id, controller_epoch = req["controller_id"], req["controller_epoch"]
        stale = self.check_epochs("LeaderAndIsr", req, req.get("broker_epoch", -1) if version >= 2 else -1)
        if stale != Errors.NONE:
            return leader_and_isr_response(version, stale, parts, {})
        self.controller_epoch = controller_epoch
        errors = self.become_leader_or_follower(controller_id, controller_epoch, parts)
        return leader_and_isr_response(version, Errors.NONE, parts, errors)

    def become_leader_or_follower(
        self, controller_id: int, controller_epoch: int, parts: list[LeaderAndIsrPartition]
    ) -> dict[TopicPartition, Errors]:
        """Kafka's ReplicaManager.becomeLeaderOrFollower after the controller epoch check."""
        rm = self.replica_manager
        errors: dict[TopicPartition, Errors] = {}
        leaders: list[PartitionState] = []
        followers: list[PartitionState] = []
        for part in parts:
            ps = part.state
            tp = (part.topic, ps["partition_index"])
            hosted = rm.partitions.get(tp)
            current_epoch = hosted.leader_epoch if hosted is not None else -1
            known_id = self._known_topic_id(tp)
            if part.topic_id != ZERO_UUID and known_id not in (None, ZERO_UUID, part.topic_id):
                log.error("Topic ID in memory: %s does not match the topic ID for partition %s-%d received: %s",
                          known_id, tp[0], tp[1], part.topic_id)
                errors[tp] = Errors.INCONSISTENT_TOPIC_ID
            elif ps["leader_epoch"] > current_epoch:
                if self.broker_id not in ps["replicas"]:
                    log.warning("Ignoring LeaderAndIsr request from controller %d epoch %d for partition %s-%d as "
                                "itself is not in assigned replica list %s", controller_id, controller_epoch,
                                tp[0], tp[1], ps["replicas"])
                    errors[tp] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                topic_id = part.topic_id if part.topic_id != ZERO_UUID else (known_id or ZERO_UUID)
                state = PartitionState(
                    topic=tp[0], partition=tp[1], topic_id=topic_id, leader=ps["leader"],
                    leader_epoch=ps["leader_epoch"], isr=tuple(ps["isr"]), replicas=tuple(ps["replicas"]),
                    partition_epoch=ps["partition_epoch"], adding_replicas=tuple(ps.get("adding_replicas") or ()),
                    removing_replicas=tuple(ps.get("removing_replicas") or ()),
                    controller_epoch=ps["controller_epoch"],
                )
                (leaders if ps["leader"] == self.broker_id else followers).append(state)
            else:
                what = "smaller than" if ps["leader_epoch"] < current_epoch else "matches"
                log.info("Ignoring LeaderAndIsr request from controller %d epoch %d for partition %s-%d since its "
                         "associated leader epoch %d %s the current leader epoch %d", controller_id,
                         controller_epoch, tp[0], tp[1], ps["leader_epoch"], what, current_epoch)
                errors[tp] = Errors.STALE_CONTROLLER_EPOCH
        if leaders:
            errors.update(rm.make_leaders(leaders))
        if followers:
            errors.update(rm.make_followers(followers))
        if leaders or followers:
            rm.shutdown_idle_fetchers()
        log.info("Handled LeaderAndIsr from controller %d epoch %d: %d leader(s), %d follower(s), %d refused",
                 controller_id, controller_epoch, len(leaders), len(followers),
                 sum(1 for e in errors.values() if e != Errors.NONE))
        return errors

    def _known_topic_id(self, tp: TopicPartition) -> uuid.UUID | None:
        """The topic id this broker has for ``tp``: its hosted partition's, else its log's."""
        hosted = self.replica_manager.partitions.get(tp)
        if hosted is not None:
            return hosted.topic_id
        lg = self.replica_manager.log_manager.get_log(*tp)
        if lg is None or not lg.topic_id:
            return None
        return uuid.UUID(bytes=bytes(lg.topic_id))

    # -- UpdateMetadata ------------------------------------------------------------------------------

    def handle_update_metadata(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        version = ctx.version
        stale = self.check_epochs(
            "UpdateMetadata", req, req.get("broker_epoch", -1) if version >= 5 else -1,
            "Received {} request from an old controller %d with epoch %d. Latest known controller epoch is %d",
        )
        if stale != Errors.NONE:
            return {"error_code": stale}
        controller_epoch = req["controller_epoch"]
        deleted = self.metadata_cache.update_metadata(version, req)
        self.controller_epoch = controller_epoch
        # A follower whose leader had no known endpoint yet can fetch now.
        self.replica_manager.retry_fetchers()
        topics = sorted({t for t, _p in deleted} | {
            ts["topic_name"] for ts in (req.get("topic_states") or [])
        } | {ps["topic_name"] for ps in (req.get("ungrouped_partition_states") or [])})
        for listener in self.update_metadata_listeners:
            try:
                listener(topics, deleted)
            except Exception:
                log.exception("UpdateMetadata listener failed")
        return {"error_code": Errors.NONE}

    # -- StopReplica ---------------------------------------------------------------------------------

    def handle_stop_replica(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        version = ctx.version
        controller_id, controller_epoch = req["controller_id"], req["controller_epoch"]
        stale = self.check_epochs("StopReplica", req, req.get("broker_epoch", -1) if version >= 1 else -1)
        if stale != Errors.NONE:
            return {"error_code": stale, "partition_errors": []}
        self.controller_epoch = controller_epoch
        rm = self.replica_manager
        errors: dict[TopicPartition, Errors] = {}
        stop: list[TopicPartition] = []
        delete: list[TopicPartition] = []
        for sp in stop_replica_partitions(version, req):
            tp = (sp.topic, sp.partition)
            hosted = rm.partitions.get(tp)
            if (hosted is not None and sp.leader_epoch not in (EPOCH_DURING_DELETE, NO_EPOCH)
                    and sp.leader_epoch < hosted.leader_epoch):
                log.warning("Ignoring StopReplica request (delete=%s) from controller %d epoch %d for partition "
                            "%s-%d since its associated leader epoch %d is smaller than the current leader epoch %d",
                            sp.delete, controller_id, controller_epoch, tp[0], tp[1], sp.leader_epoch,
                            hosted.leader_epoch)
                errors[tp] = Errors.FENCED_LEADER_EPOCH
                continue
            (delete if sp.delete else stop).append(tp)
            errors[tp] = Errors.NONE
        if stop:
            rm.stop_replicas(stop, delete=False)
        if delete:
            rm.stop_replicas(delete, delete=True)
        rm.shutdown_idle_fetchers()
        log.info("Handled StopReplica from controller %d epoch %d: %d stopped, %d deleted, %d refused",
                 controller_id, controller_epoch, len(stop), len(delete),
                 sum(1 for e in errors.values() if e != Errors.NONE))
        return {
            "error_code": Errors.NONE,
            "partition_errors": [
                {"topic_name": t, "partition_index": p, "error_code": e} for (t, p), e in errors.items()
            ],
        }
