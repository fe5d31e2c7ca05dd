"""Leader elections in a real cluster (one controller, three brokers, real processes): ElectLeaders
PREFERRED through ``odradek leader-election`` and Kafka's own ``kafka-leader-election.sh``, the
automatic preferred-leader balancing, kill -9 of brokers down to an offline partition, then
UNCLEAN election through the tool and through enabling ``unclean.leader.election.enable`` on the
topic; ``odradek topics --describe`` against ``kafka-topics.sh --describe`` on the same state."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import ConfigResource, NewTopic

from .kafka_reference import find_kafka_tools
from .replication_cluster import ReplicationCluster

PREFERRED_LAYOUT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]


def _create(cluster: ReplicationCluster, name: str, assignment: list[list[int]], **configs: str) -> None:
    admin = cluster.admin()  # kept alive until the result is in
    fut = admin.create_topics(
        [NewTopic(name, len(assignment), replica_assignment=assignment, config=configs)], request_timeout=20
    )[name]
    fut.result(timeout=30)
    cluster.wait_for(name, lambda s: len(s) == len(assignment) and all(v[0] >= 0 for v in s.values()), what="led")


def _reorder(cluster: ReplicationCluster, tmp_path: Path, topic: str, partition: int, replicas: list[int]) -> None:
    """A reassignment that only reorders the replicas: it completes at once, the leader stays."""
    plan = tmp_path / f"reorder-{topic}-{partition}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": partition, "replicas": replicas}]}))
    out = cluster.odradek("reassign", "--bootstrap-server", cluster.bootstrap, "--execute",
                          "--reassignment-json-file", str(plan)).stdout
    assert f"Successfully started partition reassignment for {topic}-{partition}" in out, out
    cluster.wait_for(topic, lambda s: s[partition][1] == replicas, what=f"reordered to {replicas}")


@pytest.mark.timeout(300)
def test_preferred_election_with_odradek_and_kafka_tools(tmp_path: Path) -> None:
    cluster = ReplicationCluster(tmp_path, controller_extra="auto.leader.rebalance.enable=false\n")
    cluster.start()
    try:
        _create(cluster, "pref", PREFERRED_LAYOUT)
        assert {p: v[0] for p, v in cluster.partitions("pref").items()} == {0: 1, 1: 2, 2: 3}
        _reorder(cluster, tmp_path, "pref", 0, [2, 1, 3])
        time.sleep(1)  # no automatic balancing here: the leader stays where it was
        assert cluster.partitions("pref")[0][0] == 1

        bs = cluster.bootstrap
        out = cluster.odradek("leader-election", "--bootstrap-server", bs, "--election-type", "PREFERRED",
                              "--all-topic-partitions").stdout
        assert out == "Successfully completed leader election (PREFERRED) for partitions pref-0\n"
        cluster.wait_for("pref", lambda s: s[0][0] == 2, what="led by 2")
        # Nothing left to elect: with every partition the answer is empty, as Kafka's.
        assert cluster.odradek("leader-election", "--bootstrap-server", bs, "--election-type", "preferred",
                               "--all-topic-partitions").stdout == ""
        ours_noop = cluster.odradek("leader-election", "--bootstrap-server", bs, "--election-type", "PREFERRED",
                                    "--topic", "pref", "--partition", "0").stdout
        assert ours_noop == "Valid replica already elected for partitions pref-0\n"
        missing = cluster.odradek("leader-election", "--bootstrap-server", bs, "--election-type", "PREFERRED",
                                  "--topic", "pref", "--partition", "9", check=False)
        assert missing.returncode == 1
        assert missing.stdout == (
            "Error completing leader election (PREFERRED) for partition: pref-9: "
            "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: No such partition as pref-9\n"
        )

        # Kafka's own tool against the same cluster: the same lines.
        kafka = find_kafka_tools()
        _reorder(cluster, tmp_path, "pref", 1, [3, 2, 1])
        plan = tmp_path / "elect.json"
        plan.write_text(json.dumps({"partitions": [{"topic": "pref", "partition": 1}]}))
        theirs = kafka.run("kafka-leader-election", "--bootstrap-server", bs, "--election-type", "PREFERRED",
                           "--path-to-json-file", str(plan)).stdout
        assert theirs == "Successfully completed leader election (PREFERRED) for partitions pref-1\n"
        cluster.wait_for("pref", lambda s: s[1][0] == 3, what="led by 3")
        theirs_noop = kafka.run("kafka-leader-election", "--bootstrap-server", bs, "--election-type", "PREFERRED",
                                "--topic", "pref", "--partition", "0").stdout
        assert theirs_noop == ours_noop
        theirs_missing = kafka.run("kafka-leader-election", "--bootstrap-server", bs, "--election-type",
                                   "PREFERRED", "--topic", "pref", "--partition", "9", check=False)
        assert theirs_missing.returncode == 1 and theirs_missing.stdout == missing.stdout

        # kafka-topics.sh --describe and ours print the same lines.
        ours = cluster.odradek("topics", "--bootstrap-server", bs, "--describe", "--topic", "pref").stdout
        theirs = kafka.run("kafka-topics", "--bootstrap-server", bs, "--describe", "--topic", "pref").stdout
        assert ours == theirs
        assert "\tTopic: pref\tPartition: 0\tLeader: 2\tReplicas: 2,1,3\tIsr: " in ours
    finally:
        cluster.stop()


@pytest.mark.timeout(300)
def test_auto_leader_rebalance_moves_leaders_back_to_the_preferred_replica(tmp_path: Path) -> None:
    cluster = ReplicationCluster(tmp_path, controller_extra="leader.imbalance.check.interval.seconds=1\n")
    cluster.start()
    try:
        _create(cluster, "bal", PREFERRED_LAYOUT)
        _reorder(cluster, tmp_path, "bal", 2, [1, 3, 2])
        # Broker 1 is now the preferred replica of partition 2: the balancing event elects it.
        cluster.wait_for("bal", lambda s: s[2][0] == 1, deadline_s=20, what="balanced back to broker 1")
        assert "Auto leader balancing: broker 1 (preferred) leads bal-2 again" in cluster.controller.log_tail() or \
            "Auto leader balancing" in cluster.controller.log_path.read_text()
    finally:
        cluster.stop()


@pytest.mark.timeout(300)
def test_killed_broker_returns_and_gets_its_leadership_back(tmp_path: Path) -> None:
    """kill -9 of a broker: its partitions get other leaders; it restarts, catches up, rejoins
    the ISR (the followers' fetching and the leader's AlterPartition) and becomes leader again,
    once through ElectLeaders and once through the automatic balancing."""
    # The balancing runs 20 s after a partition becomes imbalanced: the first return is handled
    # by ElectLeaders before that, the second one is left to the balancing.
    cluster = ReplicationCluster(tmp_path, controller_extra="leader.imbalance.check.interval.seconds=20\n")
    cluster.start()
    try:
        _create(cluster, "back", PREFERRED_LAYOUT)
        for via_tool in (True, False):
            cluster.brokers[1].kill()
            cluster.wait_for("back", lambda s: s[0][0] in (2, 3) and 1 not in s[0][2], what="led by another broker")
            cluster.brokers[1].start()
            cluster.wait_for("back", lambda s: 1 in s[0][2], deadline_s=60, what="with 1 back in the ISR")
            if via_tool:
                out = cluster.odradek("leader-election", "--bootstrap-server", cluster.bootstrap,
                                      "--election-type", "PREFERRED", "--topic", "back", "--partition", "0").stdout
                assert out == "Successfully completed leader election (PREFERRED) for partitions back-0\n"
            cluster.wait_for("back", lambda s: s[0][0] == 1, deadline_s=60,
                             what="led by 1 again " + ("(ElectLeaders)" if via_tool else "(balancing)"))
    finally:
        cluster.stop()


@pytest.mark.timeout(300)
def test_offline_partition_needs_an_unclean_election(tmp_path: Path) -> None:
    cluster = ReplicationCluster(tmp_path, controller_extra="auto.leader.rebalance.enable=false\n")
    cluster.start()
    try:
        _create(cluster, "unc", [[1, 2, 3]])
        _create(cluster, "unc2", [[1, 2, 3]])
        # Every broker dies in turn; the last ISR member (3) stays in the ISR, without a leader.
        for b in (1, 2, 3):
            cluster.brokers[b].kill()
            if b < 3:
                cluster.wait_for("unc", lambda s, b=b: s[0][0] not in (-1, b) and b not in s[0][2],
                                 what=f"moved off broker {b}")
        cluster.brokers[2].start()
        cluster.wait_for_brokers({2}, 60)
        cluster.wait_for("unc", lambda s: s[0][0] == -1 and s[0][2] == [3], what="offline with ISR [3]")
        time.sleep(1)
        assert cluster.partitions("unc2")[0][0] == -1  # broker 2 is not in the ISR: no clean leader
        bs = cluster.brokers[2].bootstrap
        unavailable = cluster.odradek("topics", "--bootstrap-server", bs, "--describe",
                                      "--unavailable-partitions").stdout
        assert "\tTopic: unc\tPartition: 0\tLeader: none\tReplicas: 1,2,3\tIsr: 3" in unavailable
        assert "\tTopic: unc2\tPartition: 0\tLeader: none" in unavailable
        kafka = find_kafka_tools()
        for report in ("--unavailable-partitions", "--under-replicated-partitions", "--under-min-isr-partitions"):
            ours = cluster.odradek("topics", "--bootstrap-server", bs, "--describe", report).stdout
            theirs = kafka.run("kafka-topics", "--bootstrap-server", bs, "--describe", report).stdout
            assert ours == theirs, report

        preferred = cluster.odradek("leader-election", "--bootstrap-server", bs, "--election-type", "PREFERRED",
                                    "--topic", "unc", "--partition", "0", check=False)
        assert preferred.returncode == 1 and "PreferredLeaderNotAvailableException" in preferred.stdout
        out = cluster.odradek("leader-election", "--bootstrap-server", bs, "--election-type", "UNCLEAN",
                              "--topic", "unc", "--partition", "0").stdout
        assert out == "Successfully completed leader election (UNCLEAN) for partitions unc-0\n"
        cluster.wait_for("unc", lambda s: s[0][0] == 2 and s[0][2] == [2], what="led by 2 (unclean)")

        # Enabling unclean election on the topic elects its leaderless partitions (Kafka 3.x+).
        assert cluster.partitions("unc2")[0][0] == -1
        res = ConfigResource("topic", "unc2", set_config={"unclean.leader.election.enable": "true"})
        admin = cluster.admin()
        admin.alter_configs([res])[res].result(timeout=30)
        cluster.wait_for("unc2", lambda s: s[0][0] == 2, what="led by 2 after the config change")
        log = cluster.controller.log_path.read_text()
        assert "UNCLEAN election of broker 2 as leader of unc-0" in log
        assert "UNCLEAN election of broker 2 as leader of unc2-0" in log
    finally:
        cluster.stop()
