"""The controller's elections and reassignments over an image (sans-I/O): ElectLeaders PREFERRED
and UNCLEAN with Kafka's per-partition errors, unclean election on fencing/unfencing as the topic
config, the cluster default or the static default says, AlterPartitionReassignments records
(adding/removing, completion once the adding replicas are in the ISR, cancel), and the automatic
preferred-leader balancing. Every record is encoded and replayed as the log would."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from test_controller_managers import TOPIC_ID, Controller, unfenced

from odradek.controller.broker_partition_changes import handle_broker_fenced, handle_broker_unfenced
from odradek.controller.elect_leaders import (
    elect_leaders,
    elect_unclean_leaderless,
    unclean_enabled,
)
from odradek.controller.leader_rebalance import (
    imbalanced_partitions,
    maybe_balance_partition_leaders,
)
from odradek.controller.partition_change_builder import reassignment_replicas
from odradek.controller.reassignment import (
    alter_partition_reassignments,
    complete_reassignments,
    list_partition_reassignments,
)
from odradek.metadata.image import BROKER_RESOURCE, TOPIC_RESOURCE
from odradek.protocol.errors import Errors

PREFERRED, UNCLEAN = 0, 1


def cluster(*brokers: int) -> Controller:
    c = Controller()
    unfenced(c, *brokers)
    return c


def partition(c: Controller, pid: int = 0) -> Any:
    return c.image.topics_by_name["t"].partitions[pid]


def fence(c: Controller, broker_id: int) -> None:
    records = handle_broker_fenced(c.image, broker_id)
    b = c.image.brokers[broker_id]
    records.append(("BrokerRegistrationChangeRecord", {"broker_id": broker_id, "broker_epoch": b.epoch, "fenced": 1}))
    c.commit(records)


def unfence(c: Controller, broker_id: int) -> None:
    b = c.image.brokers[broker_id]
    c.commit([("BrokerRegistrationChangeRecord", {"broker_id": broker_id, "broker_epoch": b.epoch, "fenced": -1})])


def change(c: Controller, pid: int = 0, **fields: Any) -> None:
    c.commit([("PartitionChangeRecord", {"partition_id": pid, "topic_id": TOPIC_ID, **fields})])


def set_config(c: Controller, resource_type: int, name: str, key: str, value: str | None) -> None:
    c.commit([("ConfigRecord", {"resource_type": resource_type, "resource_name": name, "name": key, "value": value})])


def elect(c: Controller, election_type: int, tps: list[dict[str, Any]] | None) -> dict[str, Any]:
    body, records = elect_leaders(c.image, {"election_type": election_type, "topic_partitions": tps})
    c.commit(records)
    return body


def results(body: dict[str, Any]) -> dict[tuple[str, int], tuple[int, str | None]]:
    return {
        (t["topic"], r["partition_id"]): (r["error_code"], r["error_message"])
        for t in body["replica_election_results"]
        for r in t["partition_result"]
    }


# -- PREFERRED -----------------------------------------------------------------------------------


def test_preferred_election_moves_leadership_back_to_the_first_replica() -> None:
    c = cluster(1, 2, 3)
    c.add_partition(0, [1, 2, 3], 1)
    c.add_partition(1, [2, 3, 1], 2)
    fence(c, 1)  # broker 1 dies: partition 0 led by 2, 1 out of both ISRs
    p = partition(c)
    assert (p.leader, p.isr) == (2, (2, 3))
    unfence(c, 1)
    # Back but not yet in the ISR: the preferred replica is not available.
    body = elect(c, PREFERRED, [{"topic": "t", "partitions": [0]}])
    assert results(body) == {("t", 0): (Errors.PREFERRED_LEADER_NOT_AVAILABLE, "The preferred leader was not available.")}
    assert partition(c).leader == 2
    change(c, isr=[2, 3, 1])  # caught up: the leader's AlterPartition put it back
    epoch = partition(c).leader_epoch
    body = elect(c, PREFERRED, [{"topic": "t", "partitions": [0, 1]}, {"topic": "nope", "partitions": [0]}])
    assert results(body) == {
        ("t", 0): (Errors.NONE, None),
        ("t", 1): (Errors.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
        ("nope", 0): (Errors.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as nope"),
    }
    p = partition(c)
    assert (p.leader, p.leader_epoch, p.isr) == (1, epoch + 1, (2, 3, 1))
    body = elect(c, PREFERRED, [{"topic": "t", "partitions": [7]}])
    assert results(body) == {("t", 7): (Errors.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as t-7")}


def test_preferred_election_of_every_partition_leaves_out_those_already_balanced() -> None:
    c = cluster(1, 2)
    c.add_partition(0, [1, 2], 1)
    c.add_partition(1, [2, 1], 1)
    c.add_partition(2, [1, 2], 2)
    c.add_partition(3, [2, 1], 1)
    body = elect(c, PREFERRED, None)
    assert results(body) == {("t", 1): (Errors.NONE, None), ("t", 2): (Errors.NONE, None), ("t", 3): (Errors.NONE, None)}
    assert [partition(c, i).leader for i in range(4)] == [1, 2, 1, 2]
    fence(c, 2)  # the preferred replica of 1 and 3 is gone: they cannot move back
    body = elect(c, PREFERRED, None)
    assert results(body) == {
        ("t", 1): (Errors.PREFERRED_LEADER_NOT_AVAILABLE, "The preferred leader was not available."),
        ("t", 3): (Errors.PREFERRED_LEADER_NOT_AVAILABLE, "The preferred leader was not available."),
    }
    assert [partition(c, i).leader for i in range(4)] == [1, 1, 1, 1]
    # Nothing left to do: an empty answer.
    unfence(c, 2)
    change(c, 1, isr=[1, 2])
    change(c, 3, isr=[1, 2])
    assert results(elect(c, PREFERRED, None)) == {("t", 1): (Errors.NONE, None), ("t", 3): (Errors.NONE, None)}
    assert elect(c, PREFERRED, None)["replica_election_results"] == []


def test_a_broker_in_controlled_shutdown_is_not_elected() -> None:
    c = cluster(1, 2)
    c.add_partition(0, [1, 2], 2)
    b = c.image.brokers[1]
    c.commit([("BrokerRegistrationChangeRecord", {"broker_id": 1, "broker_epoch": b.epoch, "in_controlled_shutdown": 1})])
    body = elect(c, PREFERRED, [{"topic": "t", "partitions": [0]}])
    assert results(body)[("t", 0)][0] == Errors.PREFERRED_LEADER_NOT_AVAILABLE
    assert partition(c).leader == 2


# -- UNCLEAN -------------------------------------------------------------------------------------


def test_unclean_election_of_a_leaderless_partition_logs_the_loss(caplog: pytest.LogCaptureFixture) -> None:
    c = cluster(1, 2, 3)
    c.add_partition(0, [1, 2, 3], 1)
    c.add_partition(1, [3, 2], 3)
    change(c, isr=[1])  # the ISR shrank to the leader alone
    fence(c, 1)
    p = partition(c)
    assert (p.leader, p.isr) == (-1, (1,))  # unclean election is off: offline
    with caplog.at_level(logging.WARNING):
        body = elect(c, UNCLEAN, [{"topic": "t", "partitions": [0, 1]}])
    assert results(body) == {
        ("t", 0): (Errors.NONE, None),
        ("t", 1): (Errors.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
    }
    p = partition(c)
    assert (p.leader, p.isr) == (2, (2,))
    assert any("UNCLEAN election of broker 2" in r.getMessage() and "lost" in r.getMessage() for r in caplog.records)


def test_unclean_election_prefers_a_live_isr_member_and_fails_without_live_replicas() -> None:
    c = cluster(1, 2, 3)
    c.add_partition(0, [1, 2], 1)
    fence(c, 1)
    fence(c, 2)
    assert partition(c).leader == -1 and partition(c).isr == (2,)
    body = elect(c, UNCLEAN, [{"topic": "t", "partitions": [0]}])
    assert results(body) == {
        ("t", 0): (Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE, "Eligible topic partition leaders are not available.")
    }
    unfence(c, 2)  # an ISR member is back (the unfence path would elect it; here ElectLeaders does)
    body = elect(c, UNCLEAN, [{"topic": "t", "partitions": [0]}])
    assert results(body) == {("t", 0): (Errors.NONE, None)}
    assert (partition(c).leader, partition(c).isr) == (2, (2,))


def test_unclean_config_topic_overrides_cluster_default_overrides_static() -> None:
    c = cluster(1, 2)
    c.add_partition(0, [1, 2], 1)
    assert not unclean_enabled(c.image, "t", False) and unclean_enabled(c.image, "t", True)
    set_config(c, BROKER_RESOURCE, "", "unclean.leader.election.enable", "true")
    assert unclean_enabled(c.image, "t", False)
    set_config(c, TOPIC_RESOURCE, "t", "unclean.leader.election.enable", "false")
    assert not unclean_enabled(c.image, "t", True)


def test_fencing_elects_uncleanly_only_where_enabled() -> None:
    c = cluster(1, 2)
    c.add_partition(0, [1, 2], 1)
    change(c, isr=[1])
    # Off: the partition goes offline, ISR kept.
    off = handle_broker_fenced(c.image, 1)
    assert off[0][1]["leader"] == -1
    # The static default on: broker 2 leads, alone in the ISR.
    (rec,) = handle_broker_fenced(c.image, 1, unclean_default=True)
    assert (rec[1]["leader"], rec[1]["isr"]) == (2, [2])
    # The topic config on, the static default off: the same.
    set_config(c, TOPIC_RESOURCE, "t", "unclean.leader.election.enable", "true")
    (rec,) = handle_broker_fenced(c.image, 1)
    assert (rec[1]["leader"], rec[1]["isr"]) == (2, [2])


def test_unfencing_a_non_isr_replica_elects_it_only_with_unclean_enabled() -> None:
    c = cluster(1, 2)
    c.add_partition(0, [1, 2], 1)
    change(c, isr=[1])
    fence(c, 2)
    fence(c, 1)
    assert partition(c).leader == -1
    unfence(c, 2)
    assert handle_broker_unfenced(c.image, 2) == []
    set_config(c, TOPIC_RESOURCE, "t", "unclean.leader.election.enable", "true")
    (rec,) = handle_broker_unfenced(c.image, 2)
    assert (rec[1]["leader"], rec[1]["isr"]) == (2, [2])


def test_enabling_unclean_election_elects_leaderless_partitions() -> None:
    c = cluster(1, 2)
    c.add_partition(0, [1, 2], 1)
    change(c, isr=[1])
    fence(c, 1)
    t = c.image.topics_by_name["t"]
    c.commit(elect_unclean_leaderless(c.image, [t]))
    assert (partition(c).leader, partition(c).isr) == (2, (2,))


# -- reassignment --------------------------------------------------------------------------------


def reassign(c: Controller, pid: int, replicas: list[int] | None, unclean: bool = False) -> tuple[int, str | None]:
    request = {"topics": [{"name": "t", "partitions": [{"partition_index": pid, "replicas": replicas}]}]}
    body, records = alter_partition_reassignments(c.image, request, lambda _t: unclean)
    c.commit(records)
    r = body["responses"][0]["partitions"][0]
    return r["error_code"], r["error_message"]


def listed(c: Controller, topics: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    return list_partition_reassignments(c.image, {"topics": topics})["topics"]


def test_reassignment_replicas_are_target_then_removing() -> None:
    assert reassignment_replicas([1, 2, 3], [4, 5, 6]) == ([4, 5, 6, 1, 2, 3], [1, 2, 3], [4, 5, 6])
    assert reassignment_replicas([1, 2], [2, 3]) == ([2, 3, 1], [1], [3])
    assert reassignment_replicas([1], [1, 2, 3]) == ([1, 2, 3], [], [2, 3])


def test_reassignment_adds_then_completes_when_the_adding_replicas_join_the_isr() -> None:
    c = cluster(1, 2, 3)
    c.add_partition(0, [1, 2], 1)
    epoch = partition(c).leader_epoch
    assert reassign(c, 0, [2, 3]) == (Errors.NONE, None)
    p = partition(c)
    assert (p.replicas, p.adding_replicas, p.removing_replicas, p.isr) == ((2, 3, 1), (3,), (1,), (1, 2))
    # Nobody left the assignment yet: leader and epoch unchanged (the leader, being removed, stays).
    assert (p.leader, p.leader_epoch) == (1, epoch)
    assert listed(c) == [{
        "name": "t",
        "partitions": [{"partition_index": 0, "replicas": [2, 3, 1], "adding_replicas": [3], "removing_replicas": [1]}],
    }]
    assert complete_reassignments(c.image, [("t", 0)]) == []  # 3 has not caught up
    change(c, isr=[1, 2, 3])  # the leader's AlterPartition adds 3
    records = complete_reassignments(c.image, [("t", 0)])
    c.commit(records)
    p = partition(c)
    assert (p.replicas, p.adding_replicas, p.removing_replicas, p.isr, p.leader) == ((2, 3), (), (), (2, 3), 2)
    assert p.leader_epoch == epoch + 1
    assert listed(c) == []


def test_reassignment_that_only_removes_completes_at_once() -> None:
    c = cluster(1, 2, 3)
    c.add_partition(0, [1, 2, 3], 3)
    c.add_partition(1, [1, 2, 3], 1)
    assert reassign(c, 0, [1, 2]) == (Errors.NONE, None)
    p = partition(c)
    assert (p.replicas, p.isr, p.adding_replicas, p.removing_replicas, p.leader) == ((1, 2), (1, 2), (), (), 1)
    # The leader stays, but its epoch is bumped so that the removed replica is fenced.
    assert reassign(c, 1, [1, 2]) == (Errors.NONE, None)
    p = partition(c, 1)
    assert (p.replicas, p.isr, p.leader, p.leader_epoch) == ((1, 2), (1, 2), 1, 1)


def test_reassignment_cancel_reverts_and_errors() -> None:
    c = cluster(1, 2, 3, 4)
    c.add_partition(0, [1, 2], 1)
    assert reassign(c, 0, None) == (
        Errors.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress for this topic or partition."
    )
    assert reassign(c, 0, [3, 4]) == (Errors.NONE, None)
    assert partition(c).replicas == (3, 4, 1, 2)
    change(c, isr=[1, 2, 3])
    assert reassign(c, 0, None) == (Errors.NONE, None)
    p = partition(c)
    assert (p.replicas, p.isr, p.adding_replicas, p.removing_replicas, p.leader) == ((1, 2), (1, 2), (), (), 1)
    assert reassign(c, 0, [1, 9]) == (
        Errors.INVALID_REPLICA_ASSIGNMENT,
        "The manual partition assignment includes broker 9, but no such broker is registered.",
    )
    assert reassign(c, 0, [2, 2]) == (
        Errors.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes the broker 2 more than once."
    )
    assert reassign(c, 0, []) == (
        Errors.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."
    )
    assert reassign(c, 5, [1]) == (Errors.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:5.")


def test_cancel_that_needs_an_unclean_election_is_refused_unless_enabled() -> None:
    c = cluster(1, 2, 3)
    c.add_partition(0, [1], 1)
    assert reassign(c, 0, [2]) == (Errors.NONE, None)
    change(c, isr=[1, 2])
    change(c, isr=[2], leader=2)  # 1 fell out; only the adding replica is in sync
    code, msg = reassign(c, 0, None)
    assert code == Errors.INVALID_REPLICA_ASSIGNMENT and "would require an unclean leader election" in (msg or "")
    assert reassign(c, 0, None, unclean=True) == (Errors.NONE, None)
    p = partition(c)
    assert (p.replicas, p.leader, p.isr) == ((1,), 1, (1,))


def test_list_reassignments_of_named_partitions() -> None:
    c = cluster(1, 2, 3)
    c.add_partition(0, [1], 1)
    c.add_partition(1, [2], 2)
    reassign(c, 0, [1, 3])
    reassign(c, 1, [2, 3])
    assert [p["partition_index"] for p in listed(c)[0]["partitions"]] == [0, 1]
    only = listed(c, [{"name": "t", "partition_indexes": [1, 9]}, {"name": "nope", "partition_indexes": [0]}])
    assert only == [{
        "name": "t",
        "partitions": [{"partition_index": 1, "replicas": [2, 3], "adding_replicas": [3], "removing_replicas": []}],
    }]


# -- auto leader balancing -----------------------------------------------------------------------


def test_balancing_moves_leaders_back_where_the_preferred_replica_is_in_sync() -> None:
    c = cluster(1, 2, 3)
    c.add_partition(0, [1, 2, 3], 1)
    c.add_partition(1, [2, 3, 1], 2)
    c.add_partition(2, [3, 1, 2], 3)
    fence(c, 1)
    unfence(c, 1)
    assert imbalanced_partitions(c.image) == [("t", 0)]
    assert maybe_balance_partition_leaders(c.image) == []  # 1 is not back in the ISR yet
    change(c, isr=[2, 3, 1])
    c.commit(maybe_balance_partition_leaders(c.image))
    assert partition(c).leader == 1 and imbalanced_partitions(c.image) == []


def test_balancing_respects_the_imbalance_percentage() -> None:
    c = cluster(1, 2)
    for pid in range(10):
        c.add_partition(pid, [1, 2], 1)
    change(c, 0, leader=2)  # broker 1 should lead 10, leads 9: 10 % imbalance
    assert maybe_balance_partition_leaders(c.image, imbalance_percentage=10) == []
    records = maybe_balance_partition_leaders(c.image, imbalance_percentage=9)
    assert [r[1]["partition_id"] for r in records] == [0] and records[0][1]["leader"] == 1


def test_partition_change_records_round_trip_with_directories() -> None:
    c = cluster(1, 2, 3)
    c.add_partition(0, [1, 2], 1)
    reassign(c, 0, [3, 2])
    assert partition(c).directories == (uuid.UUID(int=0),) * 3


# -- in the QuorumController: what follows commits -----------------------------------------------


def test_quorum_controller_completes_reassignments_and_balances_leaders_after_commits() -> None:
    import asyncio

    from test_quorum_controller import FakeRaft, _settle

    from odradek.controller.quorum_controller import QuorumController
    from odradek.raft.raft_client import LeaderAndEpoch

    raft = FakeRaft()
    c = QuorumController(
        1, raft, default_partitions=1, default_replication_factor=1, delete_topic_enable=True,
        validate_config=lambda _k, _v: None, cluster_id="q1Sh-9_ISia_zwGINzRvyQ",
        replication_options={"leader_imbalance_check_interval_ms": 30},
    )
    offsets = iter(range(100, 1000))

    def replay(*records: tuple[str, dict[str, Any]]) -> None:
        c.replay([(next(offsets), name, fields) for name, fields in records])

    def proposed_changes() -> list[dict[str, Any]]:
        return [f for b in raft.proposed for n, f in b.records if n == "PartitionChangeRecord"]

    async def run() -> None:
        raft.leader = LeaderAndEpoch(1, 7)
        c.handle_leader_change(raft.leader)
        await _settle()
        c.handle_commit([raft.proposed[0]])  # the activation
        await _settle()
        for b in (1, 2, 3):
            replay(("RegisterBrokerRecord", {
                "broker_id": b, "broker_epoch": b, "incarnation_id": uuid.UUID(int=b), "fenced": False,
                "end_points": [{"name": "PLAINTEXT", "host": "h", "port": 9090 + b, "security_protocol": 0}],
            }))
        replay(
            ("TopicRecord", {"name": "t", "topic_id": TOPIC_ID}),
            ("PartitionRecord", {"partition_id": 0, "topic_id": TOPIC_ID, "replicas": [1, 2, 3], "isr": [2, 3],
                                 "leader": 2, "leader_epoch": 0, "partition_epoch": 0}),
            ("PartitionRecord", {"partition_id": 1, "topic_id": TOPIC_ID, "replicas": [2], "isr": [2],
                                 "leader": 2, "leader_epoch": 0, "partition_epoch": 0}),
        )
        assert c.replication_ops.imbalanced == {("t", 0)}
        # Partition 1 is reassigned to [2, 3]; once 3 is in the ISR the controller completes it.
        replay(("PartitionChangeRecord", {"partition_id": 1, "topic_id": TOPIC_ID, "replicas": [2, 3], "adding_replicas": [3]}))
        await _settle()
        assert proposed_changes() == []
        replay(("PartitionChangeRecord", {"partition_id": 1, "topic_id": TOPIC_ID, "isr": [2, 3]}))
        await _settle()
        (done,) = proposed_changes()
        assert done["partition_id"] == 1 and done["adding_replicas"] == [] and "isr" not in done
        c.handle_commit([raft.proposed[-1]])
        assert c.image.topics_by_name["t"].partitions[1].adding_replicas == ()
        # Partition 0: its preferred replica 1 rejoins the ISR; the balancing event moves it back.
        replay(("PartitionChangeRecord", {"partition_id": 0, "topic_id": TOPIC_ID, "isr": [2, 3, 1]}))
        for _ in range(100):
            await asyncio.sleep(0.02)
            if len(proposed_changes()) > 1:
                break
        balance = proposed_changes()[-1]
        assert (balance["partition_id"], balance["leader"]) == (0, 1)
        c.handle_commit([raft.proposed[-1]])
        assert c.image.topics_by_name["t"].partitions[0].leader == 1
        assert c.replication_ops.imbalanced == set()
        await c.close()

    asyncio.run(run())


def test_removal_waits_until_the_remaining_replicas_are_in_sync() -> None:
    """Kafka completes a reassignment only when every target replica is in the ISR, even one
    that adds nothing."""
    c = cluster(1, 2, 3)
    c.add_partition(0, [1, 2, 3], 1)
    change(c, isr=[1, 3])  # 2 is behind
    assert reassign(c, 0, [1, 2]) == (Errors.NONE, None)
    p = partition(c)
    assert (p.replicas, p.removing_replicas, p.adding_replicas) == ((1, 2, 3), (3,), ())
    assert complete_reassignments(c.image, [("t", 0)]) == []
    change(c, isr=[1, 3, 2])
    c.commit(complete_reassignments(c.image, [("t", 0)]))
    p = partition(c)
    assert (p.replicas, p.isr, p.removing_replicas) == ((1, 2), (1, 2), ())


def test_cancel_keeps_the_order_of_the_assignment_during_the_move() -> None:
    """Kafka's revert: the replicas during the move minus the adding ones (so 1,2 -> 2,3 cancelled
    is 2,1: the target came first)."""
    c = cluster(1, 2, 3)
    c.add_partition(0, [1, 2], 1)
    reassign(c, 0, [2, 3])
    assert reassign(c, 0, None) == (Errors.NONE, None)
    p = partition(c)
    assert (p.replicas, p.isr, p.leader) == ((2, 1), (1, 2), 1)


# -- manual assignments of CreateTopics / CreatePartitions (Kafka's messages) --------------------


def test_manual_assignments_are_validated_as_kafka() -> None:
    from odradek.controller.replication_control import ReplicationControlManager

    c = cluster(1, 2, 3)
    fence(c, 3)
    mgr = ReplicationControlManager(
        c.image, default_partitions=1, default_replication_factor=1, validate_config=lambda _k, _v: None
    )

    def create(assignments: list[tuple[int, list[int]]], parts: int = -1, rf: int = -1) -> tuple[int, str | None]:
        res, _ = mgr.create_topic(
            "m", parts, rf, [{"partition_index": p, "broker_ids": r} for p, r in assignments], [], pending_names=set()
        )
        return res.error, res.message

    inv = Errors.INVALID_REPLICA_ASSIGNMENT
    assert create([(0, [1])], rf=1) == (
        Errors.INVALID_REQUEST, "A manual partition assignment was specified, but replication factor was not set to -1."
    )
    assert create([(0, [1])], parts=1) == (
        Errors.INVALID_REQUEST, "A manual partition assignment was specified, but numPartitions was not set to -1."
    )
    assert create([(0, [1]), (0, [2])]) == (inv, "Found multiple manual partition assignments for partition 0")
    assert create([(0, [1, 9])]) == (
        inv, "The manual partition assignment includes broker 9, but no such broker is registered."
    )
    assert create([(0, [2, 1, 2])]) == (inv, "The manual partition assignment includes the broker 2 more than once.")
    assert create([(0, [1, 2]), (1, [1])]) == (inv, (
        "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with "
        "previous partitions, which have 2 replica(s)."
    ))
    assert create([(0, [3])]) == (
        inv, "All brokers specified in the manual partition assignment for partition 0 are fenced or in controlled shutdown."
    )
    assert create([(0, [1]), (2, [2])]) == (inv, "partitions should be a consecutive 0-based integer sequence")
    assert create([(0, [1, 3]), (1, [2, 1])]) == (Errors.NONE, None)
    # CreatePartitions with explicit assignments: the same rules, the topic's replication factor.
    res, records = mgr.create_topic("m", -1, -1, [{"partition_index": 0, "broker_ids": [1, 3]}], [], pending_names=set())
    c.commit(records)
    mgr.image = c.image
    assert mgr.create_partitions("m", 3, [{"broker_ids": [2, 1]}])[:2] == (
        inv, "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."
    )
    assert mgr.create_partitions("m", 2, [{"broker_ids": [2]}])[:2] == (inv, (
        "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with "
        "previous partitions, which have 2 replica(s)."
    ))
    code, msg, recs = mgr.create_partitions("m", 2, [{"broker_ids": [3, 2]}])
    assert (code, msg) == (Errors.NONE, None)
    (name, rec), = recs
    assert (name, rec["replicas"], rec["isr"], rec["leader"]) == ("PartitionRecord", [3, 2], [2], 2)


def test_quorum_controller_elects_leaderless_partitions_when_unclean_election_is_enabled() -> None:
    """Kafka 3.x+: enabling unclean.leader.election.enable (here the cluster-wide dynamic default)
    elects the partitions left without a leader, without waiting for a broker change."""
    import asyncio

    from test_quorum_controller import FakeRaft, _settle

    from odradek.controller.quorum_controller import QuorumController
    from odradek.raft.raft_client import LeaderAndEpoch

    raft = FakeRaft()
    c = QuorumController(
        1, raft, default_partitions=1, default_replication_factor=1, delete_topic_enable=True,
        validate_config=lambda _k, _v: None, cluster_id="q1Sh-9_ISia_zwGINzRvyQ",
        replication_options={"auto_leader_rebalance_enable": False},
    )
    offsets = iter(range(100, 1000))

    def replay(*records: tuple[str, dict[str, Any]]) -> None:
        c.replay([(next(offsets), name, fields) for name, fields in records])

    async def run() -> None:
        raft.leader = LeaderAndEpoch(1, 7)
        c.handle_leader_change(raft.leader)
        await _settle()
        c.handle_commit([raft.proposed[0]])
        for b, fenced in ((1, True), (2, False)):
            replay(("RegisterBrokerRecord", {
                "broker_id": b, "broker_epoch": b, "incarnation_id": uuid.UUID(int=b), "fenced": fenced,
                "end_points": [{"name": "PLAINTEXT", "host": "h", "port": 9090 + b, "security_protocol": 0}],
            }))
        replay(
            ("TopicRecord", {"name": "t", "topic_id": TOPIC_ID}),
            ("PartitionRecord", {"partition_id": 0, "topic_id": TOPIC_ID, "replicas": [1, 2], "isr": [1],
                                 "leader": -1, "leader_epoch": 3, "partition_epoch": 3}),
        )
        replay(("ConfigRecord", {"resource_type": BROKER_RESOURCE, "resource_name": "", "name": "log.retention.ms",
                                 "value": "1000"}))
        await _settle()
        assert len(raft.proposed) == 1  # nothing to do yet
        replay(("ConfigRecord", {"resource_type": BROKER_RESOURCE, "resource_name": "",
                                 "name": "unclean.leader.election.enable", "value": "true"}))
        await _settle()
        (name, rec), = raft.proposed[-1].records
        assert (name, rec["leader"], rec["isr"]) == ("PartitionChangeRecord", 2, [2])
        await c.close()

    asyncio.run(run())
