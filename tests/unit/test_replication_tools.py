"""The pure parts of ``odradek topics``, ``odradek leader-election`` and ``odradek reassign``:
Kafka's output lines from responses, its JSON plan formats and their refusals."""

from __future__ import annotations

import argparse
import uuid
from typing import Any

import pytest

from odradek.cli.admin import AdminError, kafka_exception
from odradek.cli.leader_election import format_results, parse_election_json
from odradek.cli.reassign import check_execute_plan, format_plan, parse_plan
from odradek.cli.topics import describe_lines
from odradek.protocol.errors import Errors


def test_leader_election_lines_as_kafka() -> None:
    response = {"error_code": 0, "replica_election_results": [
        {"topic": "b", "partition_result": [
            {"partition_id": 1, "error_code": 0, "error_message": None},
            {"partition_id": 0, "error_code": Errors.ELECTION_NOT_NEEDED, "error_message": "x"},
        ]},
        {"topic": "a", "partition_result": [
            {"partition_id": 3, "error_code": 0, "error_message": None},
            {"partition_id": 2, "error_code": Errors.PREFERRED_LEADER_NOT_AVAILABLE,
             "error_message": "The preferred leader was not available."},
        ]},
    ]}
    lines, failed = format_results("PREFERRED", response)
    assert failed == 1
    assert lines == [
        "Successfully completed leader election (PREFERRED) for partitions a-3, b-1",
        "Valid replica already elected for partitions b-0",
        "Error completing leader election (PREFERRED) for partition: a-2: "
        "org.apache.kafka.common.errors.PreferredLeaderNotAvailableException: The preferred leader was not available.",
    ]
    assert format_results("UNCLEAN", {"error_code": 0, "replica_election_results": []}) == ([], 0)


def test_election_json_as_kafka() -> None:
    assert parse_election_json('{"partitions": [{"topic": "t", "partition": 1}, {"topic": "a", "partition": 0}]}') == [
        ("a", 0), ("t", 1)]
    with pytest.raises(AdminError, match='missing "partitions" field'):
        parse_election_json('{"x": 1}')
    with pytest.raises(AdminError, match=r"duplicate partitions: \[t-1\]"):
        parse_election_json('{"partitions": [{"topic": "t", "partition": 1}, {"topic": "t", "partition": 1}]}')


def test_exception_names() -> None:
    assert kafka_exception(Errors.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as x") == (
        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: No such topic as x")
    assert kafka_exception(Errors.NOT_CONTROLLER, None).startswith("org.apache.kafka.common.errors.NotControllerException")


def test_reassignment_plans_as_kafka() -> None:
    parts = {("t", 1): [3, 1], ("a", 0): [2]}
    text = format_plan(parts)
    assert text == ('{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[2],"log_dirs":["any"]},'
                    '{"topic":"t","partition":1,"replicas":[3,1],"log_dirs":["any","any"]}]}')
    assert dict(parse_plan(text)) == parts
    assert parse_plan('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}]}') == [(("t", 0), [1])]
    with pytest.raises(AdminError, match="Not supported version field value 2"):
        parse_plan('{"version": 2, "partitions": []}')
    with pytest.raises(AdminError, match="Size of replicas list"):
        parse_plan('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}]}')
    with pytest.raises(AdminError, match="Partition reassignment list cannot be empty"):
        check_execute_plan([])
    with pytest.raises(AdminError, match="Partition replica list cannot be empty"):
        check_execute_plan([(("t", 0), [])])
    with pytest.raises(AdminError, match="duplicate topic partitions: t-0"):
        check_execute_plan([(("t", 0), [1]), (("t", 0), [2])])
    with pytest.raises(AdminError, match="t-0 contains multiple entries for 1"):
        check_execute_plan([(("t", 0), [1, 2, 1])])


def _partition(pid: int, leader: int, replicas: list[int], isr: list[int]) -> dict[str, Any]:
    return {"partition_index": pid, "leader_id": leader, "replica_nodes": replicas, "isr_nodes": isr}


def _opts(**flags: bool) -> argparse.Namespace:
    names = ("under_replicated_partitions", "unavailable_partitions", "under_min_isr_partitions", "at_min_isr_partitions")
    return argparse.Namespace(**{n: flags.get(n, False) for n in names})


def test_topics_describe_lines_and_report_filters() -> None:
    tid = uuid.UUID(int=1)
    topics = [{"name": "t", "topic_id": tid, "partitions": [
        _partition(1, 2, [2, 3], [2]), _partition(0, 1, [1, 2], [1, 2]), _partition(2, -1, [3, 1], [3]),
    ]}]
    configs = {"t": [
        {"name": "min.insync.replicas", "value": "2", "config_source": 1},
        {"name": "retention.ms", "value": "604800000", "config_source": 5},
    ]}
    reassign = {("t", 1): {"replicas": [2, 3, 1], "adding_replicas": [3], "removing_replicas": [1]}}
    live = {1, 2}
    lines = describe_lines(topics, configs, reassign, live, _opts())
    assert lines == [
        "Topic: t\tTopicId: AAAAAAAAAAAAAAAAAAAAAQ\tPartitionCount: 3\tReplicationFactor: 2\tConfigs: min.insync.replicas=2",
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2\tIsr: 1,2\tElr: N/A\tLastKnownElr: N/A",
        "\tTopic: t\tPartition: 1\tLeader: 2\tReplicas: 2,3\tIsr: 2\tAdding Replicas: 3\tRemoving Replicas: 1"
        "\tElr: N/A\tLastKnownElr: N/A",
        "\tTopic: t\tPartition: 2\tLeader: none\tReplicas: 3,1\tIsr: 3\tElr: N/A\tLastKnownElr: N/A",
    ]
    under = describe_lines(topics, configs, reassign, live, _opts(under_replicated_partitions=True))
    assert [line.split("\t")[2] for line in under] == ["Partition: 1", "Partition: 2"]
    unavailable = describe_lines(topics, configs, reassign, live, _opts(unavailable_partitions=True))
    assert [line.split("\t")[2] for line in unavailable] == ["Partition: 2"]
    under_min = describe_lines(topics, configs, reassign, live, _opts(under_min_isr_partitions=True))
    assert [line.split("\t")[2] for line in under_min] == ["Partition: 1", "Partition: 2"]
    at_min = describe_lines(topics, configs, reassign, live, _opts(at_min_isr_partitions=True))
    assert [line.split("\t")[2] for line in at_min] == ["Partition: 0"]


def test_topics_come_in_the_order_of_kafkas_admin_result() -> None:
    """kafka-topics.sh --describe printed unc2 before unc (a HashMap of capacity 4 for two
    topics: buckets 2 and 3); with the default capacity 16 it would be the other way round."""
    from odradek.java_order import java_hash_map_order

    assert java_hash_map_order(["unc", "unc2"], initial_capacity=2) == ["unc2", "unc"]
    assert java_hash_map_order(["unc", "unc2"]) == ["unc", "unc2"]


def test_forwarding_error_responses_encode_for_every_version() -> None:
    """A forward that finds no controller answers ElectLeaders / Alter- / ListPartitionReassignments
    with the error in every entry (Kafka's getErrorResponse), encodable at each version."""
    from odradek.protocol import messages as m
    from odradek.server.controller_channel import ControllerRequest, error_response

    cases = [
        (m.ELECT_LEADERS, {"election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [0, 1]}],
                           "timeout_ms": 1}),
        (m.ELECT_LEADERS, {"election_type": 1, "topic_partitions": None, "timeout_ms": 1}),
        (m.ALTER_PARTITION_REASSIGNMENTS, {"timeout_ms": 1, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "replicas": [1]}]}]}),
        (m.LIST_PARTITION_REASSIGNMENTS, {"timeout_ms": 1, "topics": None}),
    ]
    for api, data in cases:
        for v in range(api.min_version, api.max_version + 1):
            body = error_response(ControllerRequest(api.api_key, v, data), Errors.REQUEST_TIMED_OUT, "no controller")
            assert b"".join(bytes(p) for p in api.encode_response(v, body))
            if api is m.ELECT_LEADERS and data["topic_partitions"]:
                codes = [r["error_code"] for t in body["replica_election_results"] for r in t["partition_result"]]
                assert codes == [Errors.REQUEST_TIMED_OUT] * 2
