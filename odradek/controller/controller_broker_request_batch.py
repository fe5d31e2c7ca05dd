"""Kafka's ``ControllerBrokerRequestBatch``: the LeaderAndIsr / UpdateMetadata / StopReplica
requests of one round of state changes, collected per broker and sent together.

Sans-I/O: ``send_requests_to_brokers`` builds the request bodies (dicts in the shape of
``odradek.protocol.messages.generated``) and hands each to a :class:`ControllerRequestSender`
(the controller channel manager: a queue and a sender per broker, retried until the broker answers
or leaves). The versions are those Kafka 3.9's controller sends at ``inter.broker.protocol.version``
3.9 (>= 3.4-IV0): LeaderAndIsr v7, UpdateMetadata v8, StopReplica v4. Every request carries the
controller id, the controller epoch and the receiving broker's epoch (its registration znode's
czxid), which the broker checks. The answers come back through ``response_handler``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from odradek.controller.controller_context import (
    ZERO_UUID,
    ControllerContext,
    LeaderAndIsr,
    LeaderIsrAndControllerEpoch,
    ReplicaAssignment,
    TopicPartition,
)
from odradek.controller.controller_zk_client import ControllerMovedException

log = logging.getLogger("odradek.state.change.logger")

T = TypeVar("T")

LEADER_AND_ISR_API_KEY = 4
STOP_REPLICA_API_KEY = 5
UPDATE_METADATA_API_KEY = 6

LEADER_AND_ISR_VERSION = 7
UPDATE_METADATA_VERSION = 8
STOP_REPLICA_VERSION = 4

# AbstractControlRequest.Type: the ZooKeeper controller leaves it UNKNOWN (0); FULL/INCREMENTAL
# are the KRaft-migration controller's.
UPDATE_TYPE_UNKNOWN = 0

ResponseCallback = Callable[[dict[str, Any]], None]


class ControllerRequestSender(Protocol):
    """The channel manager's ``sendRequest``: queue a request for a broker; ``callback`` gets
    the decoded response body once the broker answers (never if it leaves first)."""

    def send_request(
        self, broker_id: int, api_key: int, api_version: int, body: dict[str, Any], callback: ResponseCallback
    ) -> None: ...


class BrokerResponseHandler(Protocol):
    """Where answers go (the controller turns each into a ControllerEvent on its queue)."""

    def leader_and_isr_response(self, broker_id: int, response: dict[str, Any]) -> None: ...

    def update_metadata_response(self, broker_id: int, response: dict[str, Any]) -> None: ...

    def stop_replica_response(
        self, broker_id: int, response: dict[str, Any], deleted_partitions: set[TopicPartition]
    ) -> None:
        """Only for StopReplica requests with partitions of topics being deleted
        (``deleted_partitions``: those the request asked to delete)."""
        ...


class ControllerBrokerRequestBatch:
    def __init__(
        self,
        controller_id: int,
        context: ControllerContext,
        sender: ControllerRequestSender,
        response_handler: BrokerResponseHandler,
        inter_broker_listener_name: str = "PLAINTEXT",
    ) -> None:
        self.controller_id = controller_id
        self.context = context
        self.sender = sender
        self.response_handler = response_handler
        self.inter_broker_listener_name = inter_broker_listener_name
        self.leader_and_isr_request_map: dict[int, dict[TopicPartition, dict[str, Any]]] = {}
        self.stop_replica_request_map: dict[int, dict[TopicPartition, dict[str, Any]]] = {}
        self.update_metadata_request_broker_set: set[int] = set()
        self.update_metadata_request_partition_info_map: dict[TopicPartition, dict[str, Any]] = {}
        self.update_type = UPDATE_TYPE_UNKNOWN

    # --- collecting ---------------------------------------------------------------------------

    def is_empty(self) -> bool:
        return not (
            self.leader_and_isr_request_map or self.stop_replica_request_map or self.update_metadata_request_broker_set
        )

    def new_batch(self) -> None:
        """Start a round; the previous one must have been sent (or cleared)."""
        if not self.is_empty():
            raise RuntimeError(
                "Controller to broker state change requests batch is not empty while creating a new one: "
                f"LeaderAndIsr for {sorted(self.leader_and_isr_request_map)}, StopReplica for "
                f"{sorted(self.stop_replica_request_map)}, UpdateMetadata for "
                f"{sorted(self.update_metadata_request_broker_set)} might be lost"
            )

    def run_round(
        self, controller_epoch: int, what: str, work: Callable[[], T], on_error: Callable[[Exception], T]
    ) -> T:
        """One round of a state machine: a new batch, ``work`` (the state changes, which add
        requests), then the requests sent. If it fails the batch is cleared: a
        ControllerMovedException is raised on, any other error is logged and ``on_error(e)`` is
        returned. ``what`` names the change in the log lines ("some partitions to Online")."""
        try:
            self.new_batch()
            result = work()
            self.send_requests_to_brokers(controller_epoch)
            return result
        except ControllerMovedException:
            log.error("Controller moved to another broker when moving %s state", what)
            self.clear()
            raise
        except Exception as e:
            log.error("Error while moving %s state: %r", what, e)
            self.clear()
            return on_error(e)

    def clear(self) -> None:
        self.leader_and_isr_request_map.clear()
        self.stop_replica_request_map.clear()
        self.update_metadata_request_broker_set.clear()
        self.update_metadata_request_partition_info_map.clear()
        self.update_type = UPDATE_TYPE_UNKNOWN

    def add_leader_and_isr_request_for_brokers(
        self,
        broker_ids: Iterable[int],
        partition: TopicPartition,
        leader_isr_and_controller_epoch: LeaderIsrAndControllerEpoch,
        replica_assignment: ReplicaAssignment,
        is_new: bool,
    ) -> None:
        lai = leader_isr_and_controller_epoch.leader_and_isr
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            per_broker = self.leader_and_isr_request_map.setdefault(broker_id, {})
            already_new = bool(per_broker.get(partition, {}).get("is_new", False))
            per_broker[partition] = {
                "topic_name": partition[0],
                "partition_index": partition[1],
                "controller_epoch": leader_isr_and_controller_epoch.controller_epoch,
                "leader": lai.leader,
                "leader_epoch": lai.leader_epoch,
                "isr": list(lai.isr),
                "partition_epoch": lai.partition_epoch,
                "replicas": list(replica_assignment.replicas),
                "adding_replicas": list(replica_assignment.adding_replicas),
                "removing_replicas": list(replica_assignment.removing_replicas),
                "is_new": is_new or already_new,
                "leader_recovery_state": lai.leader_recovery_state,
            }
        self.add_update_metadata_request_for_brokers(self.context.live_or_shutting_down_broker_ids, [partition])

    def add_stop_replica_request_for_brokers(
        self, broker_ids: Iterable[int], partition: TopicPartition, delete_partition: bool
    ) -> None:
        leader_epoch = self.context.leader_epoch(partition)  # -2 for a topic queued for deletion
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            per_broker = self.stop_replica_request_map.setdefault(broker_id, {})
            already_delete = bool(per_broker.get(partition, {}).get("delete_partition", False))
            per_broker[partition] = {
                "partition_index": partition[1],
                "leader_epoch": leader_epoch,
                "delete_partition": already_delete or delete_partition,
            }

    def add_update_metadata_request_for_brokers(
        self, broker_ids: Iterable[int], partitions: Iterable[TopicPartition] = ()
    ) -> None:
        self.update_metadata_request_broker_set.update(b for b in broker_ids if b >= 0)
        ctx = self.context
        for partition in partitions:
            info = ctx.partition_leadership_info(partition)
            if info is None:
                log.info("Leader not yet assigned for partition %s. Skip sending UpdateMetadataRequest.", partition)
                continue
            replicas = ctx.partition_replica_assignment(partition)
            offline = [r for r in replicas if not ctx.is_replica_online(r, partition)]
            lai = info.leader_and_isr
            if ctx.is_topic_queued_up_for_deletion(partition[0]):
                lai = LeaderAndIsr.during_delete(lai.isr)
            self.update_metadata_request_partition_info_map[partition] = {
                "topic_name": partition[0],
                "partition_index": partition[1],
                "controller_epoch": info.controller_epoch,
                "leader": lai.leader,
                "leader_epoch": lai.leader_epoch,
                "isr": list(lai.isr),
                "zk_version": lai.partition_epoch,
                "replicas": list(replicas),
                "offline_replicas": offline,
            }

    # --- sending ------------------------------------------------------------------------------

    def send_requests_to_brokers(self, controller_epoch: int) -> None:
        try:
            self._send_leader_and_isr_requests(controller_epoch)
            self._send_update_metadata_requests(controller_epoch)
            self._send_stop_replica_requests(controller_epoch)
            self.update_type = UPDATE_TYPE_UNKNOWN
        except Exception as e:
            log.error("Could not send the controller's requests to brokers: %r", e)
            raise RuntimeError(e) from e

    def _live_leaders(self, leader_ids: set[int]) -> list[dict[str, Any]]:
        out = []
        for broker in self.context.live_or_shutting_down_brokers:
            if broker.id not in leader_ids:
                continue
            ep = broker.endpoint(self.inter_broker_listener_name)
            if ep is None:
                raise RuntimeError(f"broker {broker.id} has no endpoint for listener {self.inter_broker_listener_name}")
            out.append({"broker_id": broker.id, "host_name": ep.host, "port": ep.port})
        return out

    def _send_leader_and_isr_requests(self, controller_epoch: int) -> None:
        ctx = self.context
        live = ctx.live_or_shutting_down_broker_ids
        for broker_id, states in self.leader_and_isr_request_map.items():
            if broker_id not in live:
                continue
            leaders = {s["leader"] for s in states.values()}
            n_leaders = sum(1 for s in states.values() if s["leader"] == broker_id)
            log.info(
                "Sending LeaderAndIsr request to broker %d with %d become-leader and %d become-follower partitions",
                broker_id, n_leaders, len(states) - n_leaders,
            )
            topics: dict[str, list[dict[str, Any]]] = {}
            for (topic, _), state in states.items():
                ps = dict(state)
                del ps["topic_name"]  # v2+: grouped under the topic
                topics.setdefault(topic, []).append(ps)
            body = {
                "controller_id": self.controller_id,
                "is_k_raft_controller": False,
                "controller_epoch": controller_epoch,
                "broker_epoch": ctx.broker_epoch(broker_id),
                "type": self.update_type,
                "topic_states": [
                    {"topic_name": t, "topic_id": ctx.topic_ids.get(t, ZERO_UUID), "partition_states": ps}
                    for t, ps in topics.items()
                ],
                "live_leaders": self._live_leaders(leaders),
            }

            def callback(resp: dict[str, Any], b: int = broker_id) -> None:
                self.response_handler.leader_and_isr_response(b, resp)

            self.sender.send_request(broker_id, LEADER_AND_ISR_API_KEY, LEADER_AND_ISR_VERSION, body, callback)
        self.leader_and_isr_request_map.clear()

    def _send_update_metadata_requests(self, controller_epoch: int) -> None:
        ctx = self.context
        states = list(self.update_metadata_request_partition_info_map.values())
        if self.update_metadata_request_broker_set:
            log.info(
                "Sending UpdateMetadata request to brokers %s for %d partitions",
                sorted(self.update_metadata_request_broker_set), len(states),
            )
        live_brokers = [
            {
                "id": b.id,
                "endpoints": [
                    {"port": ep.port, "host": ep.host, "listener": ep.listener_name, "security_protocol": ep.security_protocol}
                    for ep in b.endpoints
                ],
                "rack": b.rack,
            }
            for b in ctx.live_or_shutting_down_brokers
        ]
        topics: dict[str, list[dict[str, Any]]] = {}
        for s in states:
            ps = dict(s)
            topic = ps.pop("topic_name")  # v5+: grouped under the topic
            topics.setdefault(topic, []).append(ps)
        topic_states = [
            {"topic_name": t, "topic_id": ctx.topic_ids.get(t, ZERO_UUID), "partition_states": ps}
            for t, ps in topics.items()
        ]
        for broker_id in sorted(self.update_metadata_request_broker_set & ctx.live_or_shutting_down_broker_ids):
            body = {
                "controller_id": self.controller_id,
                "is_k_raft_controller": False,
                "type": self.update_type,
                "controller_epoch": controller_epoch,
                "broker_epoch": ctx.broker_epoch(broker_id),
                "topic_states": topic_states,
                "live_brokers": live_brokers,
            }

            def callback(resp: dict[str, Any], b: int = broker_id) -> None:
                self.response_handler.update_metadata_response(b, resp)

            self.sender.send_request(broker_id, UPDATE_METADATA_API_KEY, UPDATE_METADATA_VERSION, body, callback)
        self.update_metadata_request_broker_set.clear()
        self.update_metadata_request_partition_info_map.clear()

    def _send_stop_replica_requests(self, controller_epoch: int) -> None:
        ctx = self.context
        for broker_id, states in self.stop_replica_request_map.items():
            if broker_id not in ctx.live_or_shutting_down_broker_ids:
                continue
            log.info("Sending StopReplica request for %d replicas to broker %d", len(states), broker_id)
            topics: dict[str, list[dict[str, Any]]] = {}
            for (topic, _), state in states.items():
                topics.setdefault(topic, []).append(dict(state))
            body = {
                "controller_id": self.controller_id,
                "is_k_raft_controller": False,
                "controller_epoch": controller_epoch,
                "broker_epoch": ctx.broker_epoch(broker_id),
                "topic_states": [{"topic_name": t, "partition_states": ps} for t, ps in topics.items()],
            }
            deleted = {tp for tp, s in states.items() if s["delete_partition"]}

            def callback(resp: dict[str, Any], b: int = broker_id, d: set[TopicPartition] = deleted) -> None:
                errors = {
                    (pe["topic_name"], pe["partition_index"])
                    for pe in resp.get("partition_errors", [])
                    if ctx.is_topic_deletion_in_progress(pe["topic_name"])
                    and (pe["topic_name"], pe["partition_index"]) in d
                }
                if errors:
                    self.response_handler.stop_replica_response(b, resp, errors)

            self.sender.send_request(broker_id, STOP_REPLICA_API_KEY, STOP_REPLICA_VERSION, body, callback)
        self.stop_replica_request_map.clear()
