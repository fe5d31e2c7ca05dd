"""The controller-bound requests of a ZooKeeper-mode broker that hosts the active controller:
request body in, ControllerEvent on the controller's queue, response body out (Kafka's KafkaApis
handlers of AlterPartition, ControlledShutdown, AllocateProducerIds, ElectLeaders,
AlterPartitionReassignments and ListPartitionReassignments in ZooKeeper mode).

``put`` is the controller event manager's (thread-safe) ``put``; the event's callback runs on the
controller's event thread and resolves an asyncio future on the caller's loop. ElectLeaders and the
reassignment requests wait at most their ``timeout_ms`` (REQUEST_TIMED_OUT after that; the event
still runs, as in Kafka).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from typing import Any

from odradek.controller import controller_event_manager as ev
from odradek.controller.controller_context import LeaderAndIsr, ReplicaAssignment, TopicPartition
from odradek.controller.kafka_controller import AlterPartitionReceived
from odradek.controller.zk_leader_movements import (
    PREFERRED,
    BrokerNotAvailableError,
    StaleBrokerEpochError,
)
from odradek.controller.zk_producer_ids import AllocateProducerIds
from odradek.controller.zk_reassignment import ListPartitionReassignments
from odradek.protocol.errors import Errors

Put = Callable[[ev.ControllerEvent], None]


async def _ask(put: Put, make: Callable[[Callable[[Any], None]], ev.ControllerEvent],
               timeout_s: float | None = None) -> Any:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def resolve(result: Any) -> None:
        if not fut.done():
            fut.set_result(result)

    def done(result: Any) -> None:
        loop.call_soon_threadsafe(resolve, result)

    put(make(done))
    if timeout_s is None:
        return await fut
    return await asyncio.wait_for(fut, timeout_s)


async def alter_partition(put: Put, request: dict[str, Any], version: int) -> dict[str, Any]:
    result: dict[str, Any] = await _ask(
        put, lambda cb: AlterPartitionReceived(request=request, version=version, callback=cb))
    return result


async def allocate_producer_ids(put: Put, request: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = await _ask(put, lambda cb: AllocateProducerIds(
        broker_id=request["broker_id"], broker_epoch=request["broker_epoch"], callback=cb))
    return result


def _shutdown_error(e: Exception) -> Errors:
    if isinstance(e, StaleBrokerEpochError):
        return Errors.STALE_BROKER_EPOCH
    if isinstance(e, BrokerNotAvailableError):
        return Errors.BROKER_NOT_AVAILABLE
    if isinstance(e, ev.ControllerMovedError):
        return Errors.NOT_CONTROLLER
    return Errors.UNKNOWN_SERVER_ERROR


async def controlled_shutdown(put: Put, request: dict[str, Any]) -> dict[str, Any]:
    result = await _ask(put, lambda cb: ev.ControlledShutdown(
        broker_id=request["broker_id"], broker_epoch=request.get("broker_epoch", -1), callback=cb))
    if isinstance(result, Exception):
        return {"error_code": _shutdown_error(result), "remaining_partitions": []}
    return {"error_code": Errors.NONE, "remaining_partitions": [
        {"topic_name": t, "partition_index": p} for t, p in sorted(result)]}


async def elect_leaders(put: Put, request: dict[str, Any], version: int,
                        all_partitions: Callable[[], Collection[TopicPartition]]) -> dict[str, Any]:
    election_type = request.get("election_type", PREFERRED) if version >= 1 else PREFERRED
    tps = request.get("topic_partitions")
    partitions = set(all_partitions()) if tps is None else {
        (t["topic"], p) for t in tps for p in t["partitions"]}
    try:
        results = await _ask(put, lambda cb: ev.ReplicaLeaderElection(
            partitions=partitions, election_type=election_type,
            trigger=ev.ElectionTrigger.AdminClientTriggered, callback=cb),
            request.get("timeout_ms", 60000) / 1000)
    except TimeoutError:
        results = dict.fromkeys(partitions, (Errors.REQUEST_TIMED_OUT, None))
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (t, p), r in sorted(results.items()):
        if isinstance(r, LeaderAndIsr):
            code, msg = Errors.NONE, None
        elif isinstance(r, tuple):
            code, msg = r
        else:  # a preempted event answers "NOT_CONTROLLER"
            code, msg = Errors.NOT_CONTROLLER, None
        by_topic.setdefault(t, []).append({"partition_id": p, "error_code": code, "error_message": msg})
    return {"throttle_time_ms": 0, "error_code": Errors.NONE, "replica_election_results": [
        {"topic": t, "partition_result": ps} for t, ps in by_topic.items()]}


async def alter_partition_reassignments(put: Put, request: dict[str, Any]) -> dict[str, Any]:
    reassignments: dict[TopicPartition, list[int] | None] = {
        (t["name"], p["partition_index"]): (list(p["replicas"]) if p.get("replicas") is not None else None)
        for t in request.get("topics", []) for p in t["partitions"]}
    try:
        result = await _ask(put, lambda cb: ev.ApiPartitionReassignment(reassignments=reassignments, callback=cb),
                            request.get("timeout_ms", 60000) / 1000)
    except TimeoutError:
        return {"throttle_time_ms": 0, "error_code": Errors.REQUEST_TIMED_OUT, "error_message": None, "responses": []}
    if not isinstance(result, dict):
        return {"throttle_time_ms": 0, "error_code": Errors.NOT_CONTROLLER, "error_message": None, "responses": []}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (t, p), (code, msg) in sorted(result.items()):
        by_topic.setdefault(t, []).append({"partition_index": p, "error_code": code, "error_message": msg})
    return {"throttle_time_ms": 0, "error_code": Errors.NONE, "error_message": None, "responses": [
        {"name": t, "partitions": ps} for t, ps in by_topic.items()]}


async def list_partition_reassignments(put: Put, request: dict[str, Any]) -> dict[str, Any]:
    topics = request.get("topics")
    partitions = None if topics is None else [(t["name"], p) for t in topics for p in t["partition_indexes"]]
    try:
        result = await _ask(put, lambda cb: ListPartitionReassignments(partitions=partitions, callback=cb),
                            request.get("timeout_ms", 60000) / 1000)
    except TimeoutError:
        return {"throttle_time_ms": 0, "error_code": Errors.REQUEST_TIMED_OUT, "error_message": None, "topics": []}
    if not isinstance(result, dict):
        return {"throttle_time_ms": 0, "error_code": Errors.NOT_CONTROLLER, "error_message": None, "topics": []}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (t, p), a in sorted(result.items()):
        assert isinstance(a, ReplicaAssignment)
        by_topic.setdefault(t, []).append({
            "partition_index": p, "replicas": list(a.replicas), "adding_replicas": list(a.adding_replicas),
            "removing_replicas": list(a.removing_replicas)})
    return {"throttle_time_ms": 0, "error_code": Errors.NONE, "error_message": None, "topics": [
        {"name": t, "partitions": ps} for t, ps in by_topic.items()]}
