"""The controller-bound requests of a broker hosting the ZooKeeper controller, end to end through
the real event manager (worker thread) and KafkaController over the fake ZooKeeper: request body
in, response body out."""

from __future__ import annotations

import asyncio

from odradek.controller import controller_event_manager as ev
from odradek.controller import zk_controller_requests as req
from odradek.controller.kafka_controller import KafkaController, KafkaControllerConfig
from odradek.controller.kafka_controller_driver import ControllerEventManager
from odradek.protocol.errors import Errors
from tests.unit.kafka_controller_fakes import FakeChannel, FakeControllerZk, FakeScheduler, ZkView
from tests.unit.zk_controller_fakes import broker_epoch


def cluster() -> FakeControllerZk:
    zk = FakeControllerZk()
    for b in (1, 2, 3, 4):
        zk.add_broker(b)
    zk.add_topic("t", {0: [1, 2, 3], 1: [2, 3, 1]})
    return zk


async def running(zk: FakeControllerZk, broker_id: int) -> tuple[KafkaController, ControllerEventManager]:
    loop = asyncio.get_running_loop()
    holder: list[ControllerEventManager] = []
    c = KafkaController(KafkaControllerConfig(broker_id=broker_id), ZkView(zk, broker_id), FakeChannel(),
                        FakeScheduler(), lambda e: holder[0].put(e))
    mgr = ControllerEventManager(broker_id, c, loop)
    holder.append(mgr)
    mgr.start()
    mgr.put(ev.Startup())
    return c, mgr


def test_requests_in_responses_out() -> None:
    async def main() -> None:
        zk = cluster()
        c, mgr = await running(zk, 1)
        other, other_mgr = await running(zk, 2)
        put = mgr.put
        try:
            r = await req.elect_leaders(put, {"election_type": 0, "topic_partitions": [
                {"topic": "t", "partitions": [0]}, {"topic": "x", "partitions": [3]}], "timeout_ms": 5000}, 2,
                lambda: set())
            assert r["error_code"] == 0
            results = {(t["topic"], p["partition_id"]): p["error_code"]
                       for t in r["replica_election_results"] for p in t["partition_result"]}
            assert results == {("t", 0): Errors.ELECTION_NOT_NEEDED, ("x", 3): Errors.UNKNOWN_TOPIC_OR_PARTITION}
            r = await req.elect_leaders(put, {"topic_partitions": None}, 0, lambda: {("t", 0), ("t", 1)})
            assert {p["partition_id"] for t in r["replica_election_results"] for p in t["partition_result"]} == {0, 1}

            r = await req.alter_partition_reassignments(put, {"timeout_ms": 5000, "topics": [
                {"name": "t", "partitions": [{"partition_index": 1, "replicas": [2, 3, 4]},
                                             {"partition_index": 0, "replicas": [1, 1]}]}]})
            errs = {p["partition_index"]: p["error_code"] for t in r["responses"] for p in t["partitions"]}
            assert r["error_code"] == 0 and errs == {1: 0, 0: Errors.INVALID_REPLICA_ASSIGNMENT}
            r = await req.list_partition_reassignments(put, {"timeout_ms": 5000, "topics": None})
            assert r["topics"] == [{"name": "t", "partitions": [
                {"partition_index": 1, "replicas": [2, 3, 4, 1], "adding_replicas": [4], "removing_replicas": [1]}]}]

            r = await req.allocate_producer_ids(put, {"broker_id": 3, "broker_epoch": broker_epoch(3)})
            assert (r["error_code"], r["producer_id_start"], r["producer_id_len"]) == (0, 0, 1000)

            r = await req.controlled_shutdown(put, {"broker_id": 3, "broker_epoch": broker_epoch(3) - 1})
            assert r["error_code"] == Errors.STALE_BROKER_EPOCH
            r = await req.controlled_shutdown(put, {"broker_id": 3, "broker_epoch": broker_epoch(3)})
            assert r == {"error_code": 0, "remaining_partitions": []}
            assert zk.leader_and_isr(("t", 1)).leader != 3

            lai = zk.leader_and_isr(("t", 0))
            tid = zk.topics["t"][0]
            r = await req.alter_partition(put, {"broker_id": lai.leader, "broker_epoch": broker_epoch(lai.leader),
                                                "topics": [{"topic_id": tid, "partitions": [{
                                                    "partition_index": 0, "leader_epoch": lai.leader_epoch,
                                                    "new_isr_with_epochs": [{"broker_id": lai.leader, "broker_epoch": -1}],
                                                    "leader_recovery_state": 0,
                                                    "partition_epoch": lai.partition_epoch}]}]}, 3)
            assert r["topics"][0]["partitions"][0]["partition_epoch"] == lai.partition_epoch + 1

            # the broker that is not the controller answers NOT_CONTROLLER
            r = await req.alter_partition_reassignments(other_mgr.put, {"timeout_ms": 5000, "topics": []})
            assert r["error_code"] == Errors.NOT_CONTROLLER
            r = await req.controlled_shutdown(other_mgr.put, {"broker_id": 2, "broker_epoch": broker_epoch(2)})
            assert r["error_code"] == Errors.NOT_CONTROLLER
            assert other.active_controller_id == 1 and c.is_active
        finally:
            await mgr.close()
            await other_mgr.close()

    asyncio.run(main())
