"""Hostile transactional requests against an ``odradek server`` process (issue 13): a 10 MB
transactional id, internal topics and 100k partitions in AddPartitionsToTxn, 10k markers in one
WriteTxnMarkers, 100k ids in DescribeTransactions and a transactional decompression bomb. Each
gets Kafka's answer (see tests/unit/test_txn_hostile.py for the references), the process stays
up with a bounded resident size, and a real transactional producer (librdkafka) still commits
what a ``read_committed`` consumer then reads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from tests.unit.txn_bomb_support import txn_bomb

from .support import RawConnection, ServerProcess, unique_name, wait_until
from .test_transaction_coordinator import read_committed

pytestmark = pytest.mark.integration

OVERRIDES = {"transaction.state.log.num.partitions": "3", "transaction.partition.verification.enable": "false"}
# Peak resident size: ~100 MB measured after all of this; the bomb's 40 MB value decompressed
# whole (and copied once) would pass the limit.
RSS_LIMIT = 160 * 1024 * 1024


def peak_rss(pid: int) -> int:
    """The process's peak resident size (VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_hostile_transactional_requests_leave_the_process_serving(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", OVERRIDES).start()
    try:
        assert server.proc is not None
        topic = unique_name("t")
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)

        # A 10 MB transactional id (past a Kafka string's 32767 bytes): closed, one log line.
        with RawConnection.to(server) as conn:
            _, payload = conn.encode_request(m.INIT_PRODUCER_ID, 4, {
                "transactional_id": "x" * (10 * 1024 * 1024), "transaction_timeout_ms": 60000,
                "producer_id": -1, "producer_epoch": -1})
            conn.send_frame(payload)
            assert conn.is_closed_by_peer()
        wait_until(lambda: "string had invalid length" in server.log_tail(20000), timeout=10,
                   what="the malformed request logged")

        with RawConnection.to(server, timeout=60) as conn:
            def find() -> bool:
                r = conn.request(m.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["h"]})
                return bool(r["coordinators"][0]["error_code"] == Errors.NONE)

            wait_until(find, timeout=30, what="the transaction coordinator")

            def init() -> dict[str, int] | None:
                r = conn.request(m.INIT_PRODUCER_ID, 4, {"transactional_id": "h", "transaction_timeout_ms": 60000,
                                                         "producer_id": -1, "producer_epoch": -1})
                return r if r["error_code"] == Errors.NONE else None

            r = wait_until(init, timeout=30, what="InitProducerId")
            pid, epoch = r["producer_id"], r["producer_epoch"]

            def add(topics: dict[str, list[int]]) -> dict[tuple[str, int], int]:
                resp = conn.request(g.ADD_PARTITIONS_TO_TXN, 3, {
                    "v3_and_below_transactional_id": "h", "v3_and_below_producer_id": pid,
                    "v3_and_below_producer_epoch": epoch,
                    "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
                return {(t["name"], p["partition_index"]): p["partition_error_code"]
                        for t in resp["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}

            assert add({topic: [0], "__transaction_state": [0]}) == {
                (topic, 0): Errors.OPERATION_NOT_ATTEMPTED, ("__transaction_state", 0): Errors.TOPIC_AUTHORIZATION_FAILED}
            big = add({topic: list(range(100_000))})
            assert len(big) == 100_000 and big[(topic, 0)] == Errors.OPERATION_NOT_ATTEMPTED
            assert sum(e == Errors.UNKNOWN_TOPIC_OR_PARTITION for e in big.values()) == 99_999

            resp = conn.request(m.WRITE_TXN_MARKERS, 1, {"markers": [
                {"producer_id": 10_000 + i, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": 0,
                 "topics": [{"name": "nope", "partition_indexes": [0]}]} for i in range(10_000)]})
            assert len(resp["markers"]) == 10_000

            ids = [f"id-{i}" for i in range(100_000)]
            resp = conn.request(g.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ids})
            assert {s["error_code"] for s in resp["transaction_states"]} == {Errors.TRANSACTIONAL_ID_NOT_FOUND}

            # The bomb: stored (Kafka's validation skips values), then aborted by its marker.
            bomb_pid = conn.request(m.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                                            "producer_id": -1, "producer_epoch": -1})["producer_id"]
            resp = conn.request(m.PRODUCE, 9, {"transactional_id": "bomb", "acks": -1, "timeout_ms": 30000,
                                               "topic_data": [{"name": topic, "partition_data": [
                                                   {"index": 0, "records": txn_bomb(bomb_pid)}]}]})
            code = resp["responses"][0]["partition_responses"][0]["error_code"]
            assert code in (Errors.NONE, Errors.MESSAGE_TOO_LARGE), resp
            resp = conn.request(m.WRITE_TXN_MARKERS, 1, {"markers": [
                {"producer_id": bomb_pid, "producer_epoch": 0, "transaction_result": False, "coordinator_epoch": 0,
                 "topics": [{"name": topic, "partition_indexes": [0]}]}]})
            assert resp["markers"][0]["topics"][0]["partitions"][0]["error_code"] == Errors.NONE
            resp = conn.request(g.END_TXN, 3, {"transactional_id": "h", "producer_id": pid, "producer_epoch": epoch,
                                               "committed": True})
            assert resp["error_code"] == Errors.INVALID_TXN_STATE  # nothing was added

        assert server.proc.poll() is None
        assert peak_rss(server.proc.pid) < RSS_LIMIT, peak_rss(server.proc.pid)

        # A real transactional producer still works; read_committed gets its record only.
        p = Producer({"bootstrap.servers": server.bootstrap_servers, "transactional.id": unique_name("tx"),
                      "transaction.timeout.ms": 60000})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, b"after", partition=0)
        p.commit_transaction(30)
        assert read_committed(server.bootstrap_servers, topic, 1, 1) == [b"after"]
        assert server.proc.poll() is None
        assert os.path.exists(tmp_path / "data")
    finally:
        server.kill()
