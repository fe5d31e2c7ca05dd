"""The controller-bound requests on a ZooKeeper-mode broker's listeners (Kafka 3.9's KafkaApis in
ZooKeeper mode): AlterPartition, ControlledShutdown, AllocateProducerIds, ElectLeaders and the
partition reassignment requests are handed to this
process's KafkaController when it is the active controller (:mod:`odradek.controller.zk_controller_requests`)
and answered NOT_CONTROLLER otherwise (the sender looks for the controller again).

:meth:`ZkControllerBoundApis.restrict` also takes out of ApiVersions what a Kafka 3.9 ZooKeeper
broker does not serve: DescribeQuorum (KRaft only) and the KIP-848 consumer group APIs (Kafka
refuses the ``consumer`` rebalance protocol in ZooKeeper mode).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from odradek.controller import controller_event_manager as ev
from odradek.controller import zk_controller_requests as zcr
from odradek.protocol.errors import Errors
from odradek.protocol.messages import Api
from odradek.protocol.messages import generated as g
from odradek.server.api_dispatcher import Handler, RequestContext

# Not served by a ZooKeeper-mode broker (not in its ApiVersions).
NOT_IN_ZK_MODE = (
    g.DESCRIBE_QUORUM, g.ADD_RAFT_VOTER, g.REMOVE_RAFT_VOTER, g.CONSUMER_GROUP_HEARTBEAT, g.CONSUMER_GROUP_DESCRIBE,
)


class ZkControllerBoundApis:
    def __init__(self, is_active: Callable[[], bool], put: Callable[[ev.ControllerEvent], None],
                 all_partitions: Callable[[], Collection[tuple[str, int]]] = list) -> None:
        self.is_active = is_active
        self.put = put
        self.all_partitions = all_partitions  # ElectLeaders without partitions: every partition

    def handlers(self) -> dict[Api, Handler]:
        return {
            g.ALTER_PARTITION: self.handle_alter_partition,
            g.CONTROLLED_SHUTDOWN: self.handle_controlled_shutdown,
            g.ALLOCATE_PRODUCER_IDS: self.handle_allocate_producer_ids,
            g.ELECT_LEADERS: self.handle_elect_leaders,
            g.ALTER_PARTITION_REASSIGNMENTS: self.handle_alter_partition_reassignments,
            g.LIST_PARTITION_REASSIGNMENTS: self.handle_list_partition_reassignments,
        }

    @staticmethod
    def restrict(apis: Any) -> None:
        """Remove the APIs a ZooKeeper-mode broker does not serve from ``apis`` (a KafkaApis)."""
        for api in NOT_IN_ZK_MODE:
            apis.apis.pop(api.api_key, None)
            apis.handlers.pop(api.api_key, None)

    async def handle_alter_partition(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        if not self.is_active():
            return {"throttle_time_ms": 0, "error_code": Errors.NOT_CONTROLLER, "topics": []}
        return await zcr.alter_partition(self.put, req, ctx.version)

    async def handle_controlled_shutdown(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        if not self.is_active():
            return {"error_code": Errors.NOT_CONTROLLER, "remaining_partitions": []}
        return await zcr.controlled_shutdown(self.put, req)

    async def handle_allocate_producer_ids(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        if not self.is_active():
            return {"throttle_time_ms": 0, "error_code": Errors.NOT_CONTROLLER, "producer_id_start": -1,
                    "producer_id_len": 0}
        return await zcr.allocate_producer_ids(self.put, req)

    async def handle_elect_leaders(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        if not self.is_active():
            tps = req.get("topic_partitions")
            partitions = sorted(self.all_partitions()) if tps is None else sorted(
                (t["topic"], p) for t in tps for p in t["partitions"])
            by_topic: dict[str, list[dict[str, Any]]] = {}
            for t, p in partitions:
                by_topic.setdefault(t, []).append({"partition_id": p, "error_code": Errors.NOT_CONTROLLER,
                                                   "error_message": None})
            return {"throttle_time_ms": 0, "error_code": Errors.NONE, "replica_election_results": [
                {"topic": t, "partition_result": ps} for t, ps in by_topic.items()]}
        return await zcr.elect_leaders(self.put, req, ctx.version, self.all_partitions)

    async def handle_alter_partition_reassignments(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        if not self.is_active():
            return {"throttle_time_ms": 0, "error_code": Errors.NOT_CONTROLLER, "error_message": None,
                    "responses": []}
        return await zcr.alter_partition_reassignments(self.put, req)

    async def handle_list_partition_reassignments(self, ctx: RequestContext, req: dict[str, Any]) -> dict[str, Any]:
        if not self.is_active():
            return {"throttle_time_ms": 0, "error_code": Errors.NOT_CONTROLLER, "error_message": None, "topics": []}
        return await zcr.list_partition_reassignments(self.put, req)
