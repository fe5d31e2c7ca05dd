"""Partition reassignment in a real cluster (one controller, three brokers, real processes), the
metadata side: ``odradek reassign`` --generate / --execute --throttle / --list / --verify /
--cancel against Kafka's ``kafka-reassign-partitions.sh`` on the same cluster, Metadata and
ListPartitionReassignments showing the replicas being added and removed, the throttle configs
set and cleared. (The data movement of a reassignment needs the followers' fetching: the test of
a reassignment completing under load belongs with it.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import ConfigResource, NewTopic

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors

from .kafka_reference import find_kafka_tools
from .replication_cluster import ReplicationCluster


def _create(cluster: ReplicationCluster, name: str, assignment: list[list[int]]) -> None:
    admin = cluster.admin()
    admin.create_topics([NewTopic(name, len(assignment), replica_assignment=assignment)],
                        request_timeout=20)[name].result(timeout=30)
    cluster.wait_for(name, lambda s: len(s) == len(assignment) and all(v[0] >= 0 for v in s.values()), what="led")


def _plan(tmp_path: Path, name: str, moves: dict[tuple[str, int], list[int]]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)} for (t, p), r in moves.items()]}))
    return path


def _topic_configs(cluster: ReplicationCluster, topic: str, expected: dict[str, str]) -> bool:
    """Waits (the broker applies committed metadata a moment after the controller answers)
    until the topic's non-default configs are ``expected``; True then, else the last seen."""
    admin = cluster.admin()
    res = ConfigResource("topic", topic)
    seen: dict[str, str] = {}
    end = time.monotonic() + 15
    while time.monotonic() < end:
        entries = admin.describe_configs([res])[res].result(timeout=30)
        seen = {k: v.value for k, v in entries.items() if not v.is_default}
        if seen == expected:
            return True
        time.sleep(0.2)
    raise AssertionError(f"{topic} configs {seen}, expected {expected}")


@pytest.mark.timeout(300)
def test_reassign_tool_and_kafka_tool_on_the_metadata_side(tmp_path: Path) -> None:
    cluster = ReplicationCluster(tmp_path, controller_extra="auto.leader.rebalance.enable=false\n")
    cluster.start()
    bs = cluster.bootstrap
    try:
        _create(cluster, "grow", [[1]])
        _create(cluster, "shrink", [[1, 2, 3], [2, 3, 1]])
        _create(cluster, "swap", [[1, 2]])

        # --generate: the current assignment, and a proposal over the given brokers only.
        topics = tmp_path / "topics.json"
        topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "shrink"}]}))
        out = cluster.odradek("reassign", "--bootstrap-server", bs, "--generate",
                              "--topics-to-move-json-file", str(topics), "--broker-list", "1,2,3").stdout.splitlines()
        assert out[0] == "Current partition replica assignment"
        assert out[1] == ('{"version":1,"partitions":[{"topic":"shrink","partition":0,"replicas":[1,2,3],'
                          '"log_dirs":["any","any","any"]},{"topic":"shrink","partition":1,"replicas":[2,3,1],'
                          '"log_dirs":["any","any","any"]}]}')
        assert out[2:4] == ["", "Proposed partition reassignment configuration"]
        proposed = json.loads(out[4])["partitions"]
        assert [(p["topic"], p["partition"]) for p in proposed] == [("shrink", 0), ("shrink", 1)]
        assert all(sorted(p["replicas"]) == [1, 2, 3] for p in proposed), proposed
        # Round-robin: the two partitions do not start on the same broker.
        assert proposed[0]["replicas"][0] != proposed[1]["replicas"][0]
        too_few = cluster.odradek("reassign", "--bootstrap-server", bs, "--generate", "--topics-to-move-json-file",
                                  str(topics), "--broker-list", "2,3", check=False)
        assert too_few.returncode == 1
        assert too_few.stdout == "Error: Replication factor: 3 larger than available brokers: 2.\n"

        # --execute with a throttle: 1,2,3 -> 2,3 only removes a replica and completes at once.
        shrink = _plan(tmp_path, "shrink.json", {("shrink", 0): [2, 3]})
        out = cluster.odradek("reassign", "--bootstrap-server", bs, "--execute", "--reassignment-json-file",
                              str(shrink), "--throttle", "1000000").stdout
        assert out == (
            "Current partition replica assignment\n\n"
            '{"version":1,"partitions":[{"topic":"shrink","partition":0,"replicas":[1,2,3],'
            '"log_dirs":["any","any","any"]}]}\n\n'
            "Save this to use as the --reassignment-json-file option during rollback\n"
            "Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
            "throttle is removed.\n"
            "The inter-broker throttle limit was set to 1000000 B/s\n"
            "Successfully started partition reassignment for shrink-0\n"
        )
        cluster.wait_for("shrink", lambda s: s[0][1] == [2, 3] and s[0][2] == [2, 3] and s[0][0] == 2,
                         what="shrunk to 2,3 led by 2")
        assert _topic_configs(cluster, "shrink", {
            "leader.replication.throttled.replicas": "0:1,0:2,0:3", "follower.replication.throttled.replicas": "",
        })
        admin = cluster.admin()
        for b in (1, 2, 3):  # each broker, asked by the Admin client, describes its own
            res = ConfigResource("broker", str(b))
            rates: tuple[str | None, ...] = ()
            for _ in range(50):
                entries = admin.describe_configs([res])[res].result(timeout=30)
                rates = tuple(entries[k].value for k in ("leader.replication.throttled.rate",
                                                          "follower.replication.throttled.rate"))
                if rates == ("1000000", "1000000"):
                    break
                time.sleep(0.2)
            assert rates == ("1000000", "1000000"), (b, rates)

        # Broker 3 dies: fenced, still registered. The tools refuse to move replicas to it (it is
        # not a live broker); the controller accepts it, as Kafka's does, and such a reassignment
        # stays in progress, with or without follower fetching, until it returns and catches up.
        # 1 -> 1,2,3 adds two replicas; 1,2 -> 2,3 swaps one.
        cluster.brokers[3].kill()
        cluster.wait_for_brokers({1, 2}, 30)
        bs = ",".join(cluster.brokers[b].bootstrap for b in (1, 2))
        moves = {("grow", 0): [1, 2, 3], ("swap", 0): [2, 3]}
        plan = _plan(tmp_path, "plan.json", moves)
        refused = cluster.odradek("reassign", "--bootstrap-server", bs, "--execute", "--reassignment-json-file",
                                  str(plan), check=False)
        assert (refused.returncode, refused.stdout) == (1, "Error: Unknown broker id 3\n")
        resp = cluster.send(m.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 10_000, "topics": [
            {"name": "grow", "partitions": [{"partition_index": 0, "replicas": [1, 2, 3]}]},
            {"name": "swap", "partitions": [{"partition_index": 0, "replicas": [2, 3]}]},
            {"name": "nope", "partitions": [{"partition_index": 0, "replicas": [2, 3]}]},
        ]})
        assert [(t["name"], t["partitions"][0]["error_code"], t["partitions"][0]["error_message"])
                for t in resp["responses"]] == [
            ("grow", Errors.NONE, None), ("swap", Errors.NONE, None),
            ("nope", Errors.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope."),
        ]
        cluster.wait_for("grow", lambda s: s[0][1] == [1, 2, 3], what="with replicas 1,2,3")
        cluster.wait_for("swap", lambda s: s[0][1] == [2, 3, 1], what="with replicas 2,3,1 during the move")
        listed = cluster.send(m.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 10_000, "topics": None})
        assert listed["error_code"] == Errors.NONE
        assert {(t["name"], p["partition_index"]): (p["replicas"], p["adding_replicas"], p["removing_replicas"])
                for t in listed["topics"] for p in t["partitions"]} == {
            ("grow", 0): ([1, 2, 3], [2, 3], []),
            ("swap", 0): ([2, 3, 1], [3], [1]),
        }
        again = cluster.odradek("reassign", "--bootstrap-server", bs, "--execute", "--reassignment-json-file",
                                str(shrink), check=False)
        assert again.returncode == 1 and again.stdout.startswith("Cannot execute because there is an existing")

        ours_list = cluster.odradek("reassign", "--bootstrap-server", bs, "--list").stdout
        assert ours_list == (
            "Current partition reassignments:\n"
            "grow-0: replicas: 1,2,3. adding: 2,3.\n"
            "swap-0: replicas: 2,3,1. adding: 3. removing: 1.\n"
        )
        ours_verify = cluster.odradek("reassign", "--bootstrap-server", bs, "--verify",
                                      "--reassignment-json-file", str(plan)).stdout
        assert ours_verify == (
            "Status of partition reassignment:\n"
            "Reassignment of partition grow-0 is still in progress.\n"
            "Reassignment of partition swap-0 is still in progress.\n\n"
        )
        kafka = find_kafka_tools()
        assert kafka.run("kafka-reassign-partitions", "--bootstrap-server", bs, "--list").stdout == ours_list
        assert kafka.run("kafka-reassign-partitions", "--bootstrap-server", bs, "--verify",
                         "--reassignment-json-file", str(plan)).stdout == ours_verify
        describe = cluster.odradek("topics", "--bootstrap-server", bs, "--describe", "--topic", "swap").stdout
        assert describe == kafka.run("kafka-topics", "--bootstrap-server", bs, "--describe", "--topic", "swap").stdout
        assert "\tReplicas: 2,3,1\tIsr: 1,2\tAdding Replicas: 3\tRemoving Replicas: 1\t" in describe
        assert "ReplicationFactor: 2\t" in describe

        # --cancel: both go back to their original replicas, in the order they had during the move
        # (swap-0: 2,1), as Kafka's revert does.
        cancel = _plan(tmp_path, "cancel.json", {("swap", 0): [2, 3], ("grow", 0): [1, 2, 3]})
        out = cluster.odradek("reassign", "--bootstrap-server", bs, "--cancel", "--reassignment-json-file",
                              str(cancel), "--preserve-throttles").stdout
        assert out == (
            "Successfully cancelled partition reassignments for: grow-0,swap-0\n"
            "None of the specified partition moves are active."
        )
        cluster.wait_for("swap", lambda s: s[0][1] == [2, 1] and s[0][0] == 1, what="back to 2,1")
        cluster.wait_for("grow", lambda s: s[0][1] == [1], what="back to 1")
        theirs = kafka.run("kafka-reassign-partitions", "--bootstrap-server", bs, "--cancel",
                           "--reassignment-json-file", str(cancel), "--preserve-throttles").stdout
        assert theirs == "None of the specified partition reassignments are active.\nNone of the specified partition moves are active."
        assert cluster.odradek("reassign", "--bootstrap-server", bs, "--cancel", "--reassignment-json-file",
                               str(cancel), "--preserve-throttles").stdout == theirs
        again = cluster.send(m.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 10_000, "topics": [
            {"name": "grow", "partitions": [{"partition_index": 0, "replicas": None}]}]})
        assert again["responses"][0]["partitions"][0]["error_code"] == Errors.NO_REASSIGNMENT_IN_PROGRESS

        # Broker 3 returns; --verify, with nothing in progress, clears the throttles.
        cluster.brokers[3].start()
        cluster.wait_for_brokers({1, 2, 3}, 60)
        again = cluster.send(m.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 10_000, "topics": [
            {"name": "grow", "partitions": [{"partition_index": 0, "replicas": None}]}]})
        assert (again["responses"][0]["partitions"][0]["error_code"]) == Errors.NO_REASSIGNMENT_IN_PROGRESS
        both = _plan(tmp_path, "both.json", {**moves, ("shrink", 0): [2, 3]})
        done = cluster.odradek("reassign", "--bootstrap-server", bs, "--verify", "--reassignment-json-file",
                               str(both)).stdout
        assert done == (
            "Status of partition reassignment:\n"
            "There is no active reassignment of partition grow-0, but replica set is 1 rather than 1,2,3.\n"
            "Reassignment of partition shrink-0 is completed.\n"
            "There is no active reassignment of partition swap-0, but replica set is 2,1 rather than 2,3.\n\n"
            "Clearing broker-level throttles on brokers 1,2,3\n"
            "Clearing topic-level throttles on topics grow,shrink,swap\n"
        )
        assert _topic_configs(cluster, "shrink", {})
        assert cluster.odradek("reassign", "--bootstrap-server", bs, "--list").stdout == "No partition reassignments found.\n"
    finally:
        cluster.stop()


@pytest.mark.timeout(300)
def test_rack_aware_placement_and_generate(tmp_path: Path) -> None:
    """Brokers register their broker.rack; new topics and --generate proposals put the replicas
    of each partition on different racks."""
    racks = {1: "a", 2: "b", 3: "a"}
    cluster = ReplicationCluster(tmp_path, racks=racks)
    cluster.start()
    try:
        admin = cluster.admin()
        admin.create_topics([NewTopic("racked", 6, 2)], request_timeout=20)["racked"].result(timeout=30)
        state = cluster.wait_for("racked", lambda s: len(s) == 6, what="created")
        for _leader, replicas, _isr in state.values():
            assert {racks[b] for b in replicas} == {"a", "b"}, state
        topics = tmp_path / "topics.json"
        topics.write_text(json.dumps({"version": 1, "topics": [{"topic": "racked"}]}))
        out = cluster.odradek("reassign", "--bootstrap-server", cluster.bootstrap, "--generate",
                              "--topics-to-move-json-file", str(topics), "--broker-list", "1,2,3").stdout
        proposed = json.loads(out.splitlines()[4])["partitions"]
        assert len(proposed) == 6
        for p in proposed:
            assert {racks[b] for b in p["replicas"]} == {"a", "b"}, proposed
    finally:
        cluster.stop()
