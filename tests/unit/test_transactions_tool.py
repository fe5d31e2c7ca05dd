"""``odradek transactions`` against a fake cluster (tests/unit/fake_kafka_cluster.py): the requests
it sends, to which node, and what it prints, as Kafka's kafka-transactions.sh."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_kafka_cluster import FakeCluster, Partition

from odradek.cli.main import main
from odradek.cli.transactions import execute, pretty_table, tp_hash
from odradek.java_order import java_hash_order, java_long_hash
from odradek.protocol.errors import Errors

NOW = 1_700_000_000_000
MIN = 60_000
HINT = " Enable debug logging for additional detail."


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    c = FakeCluster([1, 2], topics={
        "t": {0: Partition(1, [1, 2]), 1: Partition(2, [2, 1])},
        "solo": {0: Partition(1, [1])},
        "orphan": {0: Partition(-1, [2])},
    }).start()
    yield c
    c.stop()


def run(cluster: FakeCluster, *argv: str, fast: Path | None = None) -> tuple[int, str]:
    """Run the tool; the exit code and stdout (stderr is left to capsys)."""
    out = io.StringIO()
    pre = ["--bootstrap-server", cluster.bootstrap()]
    if fast is not None:
        pre += ["--command-config", str(fast)]
    code = execute([*pre, *argv], out=out, now_ms=lambda: NOW)
    return code, out.getvalue()


@pytest.fixture
def fast(tmp_path: Path) -> Path:
    """A --command-config with short timeouts, for the calls that retry until the deadline."""
    path = tmp_path / "admin.properties"
    path.write_text("default.api.timeout.ms=600\nrequest.timeout.ms=300\nretry.backoff.ms=50\n")
    return path


def producer(pid: int, epoch: int, last_ts: int, start: int = -1, coordinator_epoch: int = -1, seq: int = 4) -> dict[str, Any]:
    return {"producer_id": pid, "producer_epoch": epoch, "last_sequence": seq, "last_timestamp": last_ts,
            "coordinator_epoch": coordinator_epoch, "current_txn_start_offset": start}


def producers_handler(table: dict[tuple[str, int], list[dict[str, Any]]], errors: dict[tuple[str, int], int] | None = None) -> Any:
    def handle(node: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        topics = []
        for t in body["topics"]:
            parts = []
            for p in t["partition_indexes"]:
                code = (errors or {}).get((t["name"], p), 0)
                parts.append({"partition_index": p, "error_code": code, "error_message": None,
                              "active_producers": [] if code else table.get((t["name"], p), [])})
            topics.append({"name": t["name"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}
    return handle


def table(headers: list[str], *rows: list[str]) -> str:
    return pretty_table(headers, list(rows))


# ---- list ------------------------------------------------------------------------------------------


def test_list_asks_every_broker_and_prints_kafkas_table(cluster: FakeCluster) -> None:
    listings = {1: [("app-1", 5, "Ongoing")], 2: [("app-2", 7, "CompleteCommit"), ("app-3", 8, "Empty")]}
    cluster.handlers["ListTransactions"] = lambda node, v, body: {
        "throttle_time_ms": 0, "error_code": 0, "unknown_state_filters": [],
        "transaction_states": [{"transactional_id": t, "producer_id": p, "transaction_state": s} for t, p, s in listings[node]],
    }
    code, out = run(cluster, "list")
    assert code == 0
    sent = cluster.sent("ListTransactions")
    assert sorted(r.node for r in sent) == [1, 2]
    assert all(r.version == 1 and r.body == {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}
               for r in sent)
    assert out == (
        "TransactionalId\tCoordinator\tProducerId\tTransactionState\t\n"
        "app-1          \t1          \t5         \tOngoing         \t\n"
        "app-2          \t2          \t7         \tCompleteCommit  \t\n"
        "app-3          \t2          \t8         \tEmpty           \t\n"
    )
    cluster.requests.clear()
    code, _ = run(cluster, "list", "--duration-filter", "1000", "--state", "Ongoing", "--producer-id", "5",
                  "--producer-id", "6")
    assert code == 0
    assert [r.body for r in cluster.sent("ListTransactions")] == [
        {"state_filters": ["Ongoing"], "producer_id_filters": [5, 6], "duration_filter": 1000}] * 2


def test_list_errors(cluster: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[int] = []

    def handler(node: int, v: int, body: dict[str, Any]) -> dict[str, Any]:
        calls.append(node)
        # broker 2 is loading the first time (retried), then shutting down its coordinator
        code = 0 if node == 1 else Errors.COORDINATOR_LOAD_IN_PROGRESS if calls.count(2) == 1 else Errors.COORDINATOR_NOT_AVAILABLE
        return {"throttle_time_ms": 0, "error_code": code, "unknown_state_filters": [], "transaction_states": []}

    cluster.handlers["ListTransactions"] = handler
    assert run(cluster, "list")[0] == 1
    assert calls.count(2) == 2
    assert capsys.readouterr().err == (
        "Failed to list transactions: ListTransactions request sent to broker 2 failed because the coordinator is "
        f"shutting down.{HINT}\n")
    # ListTransactions v0 has no duration filter: Kafka's request builder refuses it
    cluster.api_versions["ListTransactions"] = 0
    cluster.handlers["ListTransactions"] = lambda n, v, b: {"error_code": 0, "transaction_states": []}
    cluster.requests.clear()
    assert run(cluster, "list", "--duration-filter", "5")[0] == 1
    assert cluster.sent("ListTransactions") == []
    assert capsys.readouterr().err.startswith(
        "Failed to list transactions: Duration filter can be set only when using API version 1 or higher.")
    assert run(cluster, "list")[0] == 0
    assert [r.version for r in cluster.sent("ListTransactions")] == [0, 0]


# ---- describe --------------------------------------------------------------------------------------


def _describe_state(tid: str, code: int = 0, start: int = NOW - 1234) -> dict[str, Any]:
    return {"error_code": code, "transactional_id": tid, "transaction_state": "Ongoing", "transaction_timeout_ms": 60000,
            "transaction_start_time_ms": start, "producer_id": 42, "producer_epoch": 3,
            "topics": [{"topic": "t", "partitions": [1, 0]}, {"topic": "solo", "partitions": [0]}]}


def test_describe_finds_the_coordinator_then_describes(cluster: FakeCluster) -> None:
    cluster.handlers["FindCoordinator"] = lambda n, v, b: {"throttle_time_ms": 0, "coordinators": [
        {"key": k, "node_id": 2, "host": "127.0.0.1", "port": cluster.ports[2], "error_code": 0, "error_message": None}
        for k in b["coordinator_keys"]]}
    cluster.handlers["DescribeTransactions"] = lambda n, v, b: {
        "throttle_time_ms": 0, "transaction_states": [_describe_state(t) for t in b["transactional_ids"]]}
    code, out = run(cluster, "describe", "--transactional-id", "app-1")
    assert code == 0
    [find] = cluster.sent("FindCoordinator")
    assert find.body["key_type"] == 1 and find.body["coordinator_keys"] == ["app-1"]
    [desc] = cluster.sent("DescribeTransactions")
    assert (desc.node, desc.body) == (2, {"transactional_ids": ["app-1"]})
    parts = ",".join(f"{t}-{p}" for t, p in java_hash_order([("t", 1), ("t", 0), ("solo", 0)], tp_hash))
    assert out == table(
        ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState", "TransactionTimeoutMs",
         "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
        ["2", "app-1", "42", "3", "Ongoing", "60000", str(NOW - 1234), "1234", parts],
    )
    assert sorted(parts.split(",")) == ["solo-0", "t-0", "t-1"]


def test_describe_retries_a_moved_coordinator_and_reports_unknown_ids(cluster: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    coordinator = iter([1, 2, 2, 2])
    cluster.handlers["FindCoordinator"] = lambda n, v, b: {"throttle_time_ms": 0, "coordinators": [
        {"key": k, "node_id": (c := next(coordinator)), "host": "127.0.0.1", "port": cluster.ports[c], "error_code": 0,
         "error_message": None} for k in b["coordinator_keys"]]}
    cluster.handlers["DescribeTransactions"] = lambda n, v, b: {"throttle_time_ms": 0, "transaction_states": [
        _describe_state(t, Errors.NOT_COORDINATOR if n == 1 else Errors.TRANSACTIONAL_ID_NOT_FOUND)
        for t in b["transactional_ids"]]}
    assert run(cluster, "describe", "--transactional-id", "gone")[0] == 1
    assert [r.node for r in cluster.sent("DescribeTransactions")] == [1, 2]
    assert len(cluster.sent("FindCoordinator")) == 2
    assert capsys.readouterr().err == (
        "Failed to describe transaction state of transactional-id `gone`: DescribeTransactions request for "
        f"transactionalId `gone` failed because the ID could not be found.{HINT}\n")


def test_describe_without_a_start_time_prints_none(cluster: FakeCluster) -> None:
    cluster.handlers["FindCoordinator"] = lambda n, v, b: {"coordinators": [
        {"key": "e", "node_id": 1, "host": "127.0.0.1", "port": cluster.ports[1], "error_code": 0}]}
    cluster.handlers["DescribeTransactions"] = lambda n, v, b: {"transaction_states": [
        {**_describe_state("e", start=-1), "transaction_state": "Empty", "topics": []}]}
    code, out = run(cluster, "describe", "--transactional-id", "e")
    assert code == 0
    assert out.splitlines()[1].split("\t") == ["1            ", "e              ", "42        ", "3            ",
                                               "Empty           ", "60000               ", "None                         ",
                                               "None                 ", "               ", ""]


# ---- describe-producers ----------------------------------------------------------------------------


def test_describe_producers_goes_to_the_leader(cluster: FakeCluster) -> None:
    cluster.handlers["DescribeProducers"] = producers_handler({("t", 1): [
        producer(7, 2, NOW - 5000, start=120, coordinator_epoch=4), producer(8, 0, NOW - 9000, seq=-1)]})
    code, out = run(cluster, "describe-producers", "--topic", "t", "--partition", "1")
    assert code == 0
    [sent] = cluster.sent("DescribeProducers")
    assert (sent.node, sent.body) == (2, {"topics": [{"name": "t", "partition_indexes": [1]}]})
    assert out == table(
        ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
         "CurrentTransactionStartOffset"],
        ["7", "2", "4", "4", str(NOW - 5000), "120"],
        ["8", "0", "-1", "-1", str(NOW - 9000), "None"],
    )
    cluster.requests.clear()
    assert run(cluster, "describe-producers", "--topic", "t", "--partition", "1", "--broker-id", "1")[0] == 0
    assert [r.node for r in cluster.sent("DescribeProducers")] == [1]


def test_describe_producers_failures(cluster: FakeCluster, fast: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.handlers["DescribeProducers"] = producers_handler({}, {("t", 1): Errors.NOT_LEADER_OR_FOLLOWER})
    assert run(cluster, "describe-producers", "--topic", "t", "--partition", "1", "--broker-id", "1")[0] == 1
    assert capsys.readouterr().err == (
        "Failed to describe producers for partition t-1 on broker 1: Failed to describe active producers for "
        f"partition t-1 on brokerId 1.{HINT}\n")
    # An unknown topic and a partition without a leader are looked up until the API timeout
    # (Kafka's PartitionLeaderStrategy tolerates both), then fail; nothing is sent to a broker.
    cluster.requests.clear()
    for topic, partition in (("nope", "0"), ("orphan", "0"), ("t", "9")):
        assert run(cluster, "describe-producers", "--topic", topic, "--partition", partition, fast=fast)[0] == 1
        assert capsys.readouterr().err == (
            f"Failed to describe producers for partition {topic}-{partition} on leader: Timed out waiting for a node "
            f"assignment. Call: describeProducers(api=METADATA).{HINT}\n")
    assert cluster.sent("DescribeProducers") == []
    assert len(cluster.sent("Metadata")) >= 6  # retried
    # A broker without the API
    cluster.api_versions["DescribeProducers"] = None
    assert run(cluster, "describe-producers", "--topic", "t", "--partition", "0")[0] == 1
    assert capsys.readouterr().err == (
        f"Failed to describe producers for partition t-0 on leader: The node does not support DESCRIBE_PRODUCERS.{HINT}\n")


def test_describe_producers_follows_a_leader_change(cluster: FakeCluster) -> None:
    answers = iter([Errors.NOT_LEADER_OR_FOLLOWER, 0])

    def handle(node: int, v: int, body: dict[str, Any]) -> dict[str, Any]:
        code = next(answers)
        if code:
            cluster.topics["t"][0] = Partition(2, [1, 2])
        return producers_handler({("t", 0): [producer(1, 0, NOW)]}, {("t", 0): code} if code else {})(node, v, body)

    cluster.handlers["DescribeProducers"] = handle
    code, out = run(cluster, "describe-producers", "--topic", "t", "--partition", "0")
    assert code == 0 and out.count("\n") == 2
    assert [r.node for r in cluster.sent("DescribeProducers")] == [1, 2]


# ---- abort -----------------------------------------------------------------------------------------


def markers_handler(code: int = 0) -> Any:
    return lambda n, v, b: {"markers": [{"producer_id": m["producer_id"], "topics": [
        {"name": t["name"], "partitions": [{"partition_index": p, "error_code": code} for p in t["partition_indexes"]]}
        for t in m["topics"]]} for m in b["markers"]]}


def test_abort_by_start_offset_resolves_the_producer(cluster: FakeCluster) -> None:
    cluster.handlers["DescribeProducers"] = producers_handler({("t", 1): [
        producer(7, 2, NOW, start=100, coordinator_epoch=5), producer(9, 1, NOW, start=120, coordinator_epoch=-1)]})
    cluster.handlers["WriteTxnMarkers"] = markers_handler()
    code, out = run(cluster, "abort", "--topic", "t", "--partition", "1", "--start-offset", "120")
    assert (code, out) == (0, "")
    [marker] = cluster.sent("WriteTxnMarkers")
    assert marker.node == 2
    # coordinator epoch -1 (the producer never completed a transaction) is sent as 0
    assert marker.body == {"markers": [{"producer_id": 9, "producer_epoch": 1, "transaction_result": False,
                                        "coordinator_epoch": 0, "topics": [{"name": "t", "partition_indexes": [1]}]}]}


def test_abort_by_producer_id(cluster: FakeCluster) -> None:
    cluster.handlers["WriteTxnMarkers"] = markers_handler()
    code, _ = run(cluster, "abort", "--topic", "t", "--partition", "0", "--producer-id", "11", "--producer-epoch", "3",
                  "--coordinator-epoch", "6")
    assert code == 0
    assert cluster.sent("DescribeProducers") == []
    [marker] = cluster.sent("WriteTxnMarkers")
    assert marker.node == 1 and marker.body["markers"] == [{
        "producer_id": 11, "producer_epoch": 3, "transaction_result": False, "coordinator_epoch": 6,
        "topics": [{"name": "t", "partition_indexes": [0]}]}]


def test_abort_refusals(cluster: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.handlers["DescribeProducers"] = producers_handler({("t", 0): [producer(7, 2, NOW, start=100)]})
    cluster.handlers["WriteTxnMarkers"] = markers_handler(Errors.INVALID_PRODUCER_EPOCH)
    cases = [
        (["--start-offset", "101"], "Could not find any open transactions starting at offset 101 on partition t-0\n"),
        ([], "The transaction to abort must be identified either with --start-offset (for brokers on 3.0 or above) "
             "or with --producer-id, --producer-epoch, and --coordinator-epoch (for older brokers)\n"),
        (["--producer-id", "7"], "Missing required argument --producer-epoch\n"),
        (["--producer-id", "7", "--producer-epoch", "2"], "Missing required argument --coordinator-epoch\n"),
    ]
    for extra, message in cases:
        assert run(cluster, "abort", "--topic", "t", "--partition", "0", *extra)[0] == 1
        assert capsys.readouterr().err == message
    assert cluster.sent("WriteTxnMarkers") == []
    assert run(cluster, "abort", "--topic", "t", "--partition", "0", "--start-offset", "100")[0] == 1
    spec = "AbortTransactionSpec(topicPartition=t-0, producerId=7, producerEpoch=2, coordinatorEpoch=0)"
    assert capsys.readouterr().err == (
        f"Failed to abort transaction {spec}: WriteTxnMarkers request with {spec} failed due an invalid producer "
        f"epoch.{HINT}\n")


# ---- find-hanging ----------------------------------------------------------------------------------


def _coordinator(cluster: FakeCluster, txns: dict[str, dict[str, Any]]) -> None:
    """ListTransactions (by producer id) on broker 1, DescribeTransactions, from ``txns``."""
    cluster.handlers["ListTransactions"] = lambda n, v, b: {"error_code": 0, "transaction_states": [
        {"transactional_id": tid, "producer_id": d["producer_id"], "transaction_state": "Ongoing"}
        for tid, d in txns.items() if n == 1 and d["producer_id"] in b["producer_id_filters"]]}
    cluster.handlers["FindCoordinator"] = lambda n, v, b: {"coordinators": [
        {"key": k, "node_id": 1, "host": "127.0.0.1", "port": cluster.ports[1], "error_code": 0}
        for k in b["coordinator_keys"]]}
    cluster.handlers["DescribeTransactions"] = lambda n, v, b: {"transaction_states": [
        {**_describe_state(tid), **txns[tid]} if tid in txns else
        {**_describe_state(tid, Errors.TRANSACTIONAL_ID_NOT_FOUND), "topics": []}
        for tid in b["transactional_ids"]]}


def test_find_hanging_by_topic(cluster: FakeCluster) -> None:
    cluster.handlers["DescribeProducers"] = producers_handler({
        ("t", 0): [producer(10, 1, NOW - 20 * MIN, start=5, coordinator_epoch=3),  # old, coordinator knows it
                   producer(11, 0, NOW - 1 * MIN, start=9),  # recent: not a candidate
                   producer(14, 0, NOW - 40 * MIN)],  # no open transaction
        ("t", 1): [producer(12, 2, NOW - 30 * MIN - 1, start=7),  # old, unknown to the coordinator
                   producer(10, 1, NOW - 16 * MIN, start=3, coordinator_epoch=3)],  # old, not in the transaction
    })
    _coordinator(cluster, {"app-a": {"producer_id": 10, "topics": [{"topic": "t", "partitions": [0]}]}})
    code, out = run(cluster, "find-hanging", "--topic", "t")
    assert code == 0
    assert sorted((r.node, str(r.body)) for r in cluster.sent("DescribeProducers")) == [
        (1, str({"topics": [{"name": "t", "partition_indexes": [0]}]})),
        (2, str({"topics": [{"name": "t", "partition_indexes": [1]}]}))]
    assert sorted(cluster.sent("ListTransactions")[0].body["producer_id_filters"]) == [10, 12]
    assert [r.body for r in cluster.sent("DescribeTransactions")] == [{"transactional_ids": ["app-a"]}]
    rows = {
        10: ["t", "1", "10", "1", "3", "3", str(NOW - 16 * MIN), "16"],
        12: ["t", "1", "12", "2", "-1", "7", str(NOW - 30 * MIN - 1), "30"],
    }
    headers = ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset", "LastTimestamp",
               "Duration(min)"]
    assert out == table(headers, *(rows[pid] for pid in java_hash_order([10, 12], java_long_hash)))
    # a longer maximum timeout leaves only producer 12
    code, out = run(cluster, "find-hanging", "--topic", "t", "--max-transaction-timeout", "20")
    assert code == 0 and out == table(headers, rows[12])
    # the coordinator has forgotten app-a: all of producer 10's open transactions hang
    _coordinator(cluster, {})
    code, out = run(cluster, "find-hanging", "--topic", "t", "--partition", "0")
    assert code == 0 and out == table(headers, ["t", "0", "10", "1", "3", "5", str(NOW - 20 * MIN), "20"])


def test_find_hanging_by_broker(cluster: FakeCluster) -> None:
    cluster.handlers["DescribeProducers"] = producers_handler({("t", 1): [producer(12, 2, NOW - 30 * MIN, start=7)]})
    _coordinator(cluster, {})
    code, out = run(cluster, "find-hanging", "--broker-id", "2")
    assert code == 0
    assert any(r.body["topics"] is None for r in cluster.sent("Metadata"))  # listTopics
    # every partition with a replica on broker 2, asked of broker 2 itself
    [sent] = cluster.sent("DescribeProducers")
    assert sent.node == 2
    asked = sorted((t["name"], p) for t in sent.body["topics"] for p in t["partition_indexes"])
    assert asked == [("orphan", 0), ("t", 0), ("t", 1)]
    assert out.splitlines()[1].split("\t")[:3] == ["t    ", "1        ", "12        "]


def test_find_hanging_refusals(cluster: FakeCluster, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        ([], "The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search\n"),
        (["--partition", "0", "--broker-id", "1"], "The --partition argument requires --topic to be provided\n"),
        (["--topic", "nope"], f"Failed to describe 1 topics: This server does not host this topic-partition..{HINT}\n"),
    ]
    for extra, message in cases:
        assert run(cluster, "find-hanging", *extra)[0] == 1
        assert capsys.readouterr().err == message
    assert cluster.sent("DescribeProducers") == []
    cluster.handlers["DescribeProducers"] = producers_handler({}, {("t", 1): Errors.TOPIC_AUTHORIZATION_FAILED})
    assert run(cluster, "find-hanging", "--topic", "t")[0] == 1
    assert capsys.readouterr().err == (
        "Failed to describe producers for 2 partitions on broker Optional.empty: Failed to describe active producers "
        f"for partition t-1 due to authorization failure on topic `t`.{HINT}\n")


# ---- the command line ------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["transactions"], "too few arguments"),
    (["transactions", "list"], "argument --bootstrap-server is required"),
    (["transactions", "--bootstrap-server", "h:1", "describe"], "argument --transactional-id is required"),
    (["transactions", "--bootstrap-server", "h:1", "describe-producers", "--topic", "t"],
     "argument --partition is required"),
    (["transactions", "--bootstrap-server", "h:1", "abort"], "argument --topic is required"),
    (["transactions", "--bootstrap-server", "h:1", "abort", "--topic", "t", "--partition", "x"],
     "argument --partition: could not convert 'x' to Integer (For input string: \"x\")"),
    (["transactions", "--bootstrap-server", "h:1", "abort", "--topic", "t", "--partition", "0", "--producer-epoch", "40000"],
     "argument --producer-epoch: could not convert '40000' to Short (Value out of range."),
    (["transactions", "--bootstrap-server", "h:1", "undo"], "argument COMMAND: invalid choice: 'undo'"),
])
def test_usage_errors_exit_1(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("usage: odradek transactions")
    assert f"\nodradek transactions: error: {message}" in err


def test_connection_flags_after_the_command_and_command_config(
    cluster: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    cluster.handlers["ListTransactions"] = lambda n, v, b: {"error_code": 0, "transaction_states": []}
    assert main(["transactions", "list", "--bootstrap-server", cluster.bootstrap(2)]) == 0
    assert capsys.readouterr().out == "TransactionalId\tCoordinator\tProducerId\tTransactionState\t\n"
    missing = tmp_path / "missing.properties"
    assert main(["transactions", "--bootstrap-server", cluster.bootstrap(), "--command-config", str(missing), "list"]) == 1
    assert capsys.readouterr().err == f"Failed to load admin client properties: {missing}.{HINT}\n"
    conf = tmp_path / "bad.properties"
    conf.write_text("default.api.timeout.ms=100\n")  # below request.timeout.ms (30 s)
    assert main(["transactions", "--bootstrap-server", cluster.bootstrap(), "--command-config", str(conf), "list"]) == 1
    assert "must be no smaller than the value of request.timeout.ms" in capsys.readouterr().err
    conf.write_text("request.timeout.ms=soon\n")
    assert main(["transactions", "--bootstrap-server", cluster.bootstrap(), "--command-config", str(conf), "list"]) == 1
    assert capsys.readouterr().err.endswith(
        "ConfigException: Invalid value soon for configuration request.timeout.ms: Not a number of type INT\n")
    assert main(["transactions", "--bootstrap-server", "no-such-host.invalid:9092", "list"]) == 1
    assert capsys.readouterr().err == (
        "org.apache.kafka.common.KafkaException: Failed to create new KafkaAdminClient\n"
        "Caused by: org.apache.kafka.common.config.ConfigException: No resolvable bootstrap urls given in "
        "bootstrap.servers\n")


def test_java_hash_codes() -> None:
    """Java's Long.hashCode and TopicPartition.hashCode, which order Kafka's tool's HashMaps."""
    assert [java_long_hash(v) for v in (1, -1, 1 << 32, (1 << 63) - 1)] == [1, 0, 1, -2147483648]
    assert tp_hash(("t", 0)) == 31 * 31 + ord("t")
    # bucket order, then insertion order within a bucket: 17 and 1 share bucket 1 of 16
    assert java_hash_order([20, 3, 17, 1], java_long_hash) == [17, 1, 3, 20]
