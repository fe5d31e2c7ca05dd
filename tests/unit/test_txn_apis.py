"""The transaction coordinator's APIs on a real (in-process) broker: FindCoordinator with key
type TRANSACTION creates ``__transaction_state``, InitProducerId/AddPartitionsToTxn/
AddOffsetsToTxn/EndTxn/DescribeTransactions/ListTransactions over the wire, and a restarted
broker reloads the transactions from ``__transaction_state``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from test_broker_apis import broker, create, records_of, run

from odradek.coordinator.transaction.transaction_marker_channel_manager import (
    TransactionMarkerChannelManager,
)
from odradek.coordinator.transaction.transaction_state_manager import partition_for
from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.records.builder import build_batch

PROPS = {"transaction.state.log.num.partitions": "3", "transaction.max.timeout.ms": "120000"}


async def find_txn_coordinator(c: NetworkClient, tid: str) -> dict[str, Any]:
    r: dict[str, Any] = {}
    for _ in range(200):  # the topic is created by the first lookup; bounded wait
        r = (await c.send(m.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [tid]}))["coordinators"][0]
        if r["error_code"] == Errors.NONE:
            return r
        assert r["error_code"] == Errors.COORDINATOR_NOT_AVAILABLE, r
        await asyncio.sleep(0.05)
    raise AssertionError(f"no transaction coordinator: {r}")


async def init_pid(c: NetworkClient, tid: str, timeout_ms: int = 60000, version: int = 4, **kw: int) -> dict[str, Any]:
    r: dict[str, Any] = {}
    for _ in range(200):  # COORDINATOR_LOAD_IN_PROGRESS while the partition loads
        r = await c.send(m.INIT_PRODUCER_ID, version, {"transactional_id": tid, "transaction_timeout_ms": timeout_ms, **kw})
        if r["error_code"] not in (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR):
            return r
        await asyncio.sleep(0.05)
    raise AssertionError(f"InitProducerId kept failing: {r}")


async def add_partitions(c: NetworkClient, tid: str, pid: int, epoch: int, topics: dict[str, list[int]], version: int = 3) -> dict[tuple[str, int], int]:
    r = await c.send(g.ADD_PARTITIONS_TO_TXN, version, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
    })
    return {(t["name"], p["partition_index"]): p["partition_error_code"]
            for t in r["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}


async def describe(c: NetworkClient, tid: str) -> dict[str, Any]:
    r = await c.send(g.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})
    return r["transaction_states"][0]  # type: ignore[no-any-return]


def test_transaction_apis_over_the_wire_and_reload_after_restart(tmp_path: Path) -> None:
    async def first() -> tuple[int, int]:
        async with broker(tmp_path, **PROPS) as (server, c):
            coord = await find_txn_coordinator(c, "tx")
            assert coord["node_id"] == server.broker.node_id
            old = await c.send(m.FIND_COORDINATOR, 1, {"key": "tx", "key_type": 1})
            assert old["error_code"] == Errors.NONE and old["port"] == coord["port"]
            empty = (await c.send(m.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [""]}))["coordinators"][0]
            assert empty["error_code"] == Errors.INVALID_REQUEST
            md = await c.send(m.METADATA, 12, {"topics": [{"name": "__transaction_state", "topic_id": None}]})
            (t,) = md["topics"]
            assert t["is_internal"] and len(t["partitions"]) == 3

            bad = await init_pid(c, "tx", timeout_ms=120001)
            assert bad["error_code"] == Errors.INVALID_TRANSACTION_TIMEOUT
            r = await init_pid(c, "tx")
            assert r["error_code"] == Errors.NONE and r["producer_epoch"] == 0
            pid = r["producer_id"]
            r = await init_pid(c, "tx")
            assert (r["error_code"], r["producer_id"], r["producer_epoch"]) == (Errors.NONE, pid, 1)
            # KIP-360 with a stale epoch: fenced (INVALID_PRODUCER_EPOCH before v4, KIP-588).
            r = await init_pid(c, "tx", version=4, producer_id=pid, producer_epoch=0)
            assert r["error_code"] == Errors.PRODUCER_FENCED
            r = await init_pid(c, "tx", version=3, producer_id=pid, producer_epoch=0)
            assert r["error_code"] == Errors.INVALID_PRODUCER_EPOCH

            assert (await create(c, "t", 2))["error_code"] == Errors.NONE
            # An unknown topic fails, the rest is not attempted.
            assert await add_partitions(c, "tx", pid, 1, {"t": [0], "nope": [0]}) == {
                ("t", 0): Errors.OPERATION_NOT_ATTEMPTED, ("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
            assert await add_partitions(c, "tx", pid, 1, {"t": [0, 1]}) == {
                ("t", 0): Errors.NONE, ("t", 1): Errors.NONE}
            assert await add_partitions(c, "tx", pid, 0, {"t": [0]}, version=1) == {("t", 0): Errors.INVALID_PRODUCER_EPOCH}
            r = await c.send(g.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "tx", "producer_id": pid,
                                                       "producer_epoch": 1, "group_id": "g"})
            assert r["error_code"] == Errors.NONE
            # KIP-890 verification as a broker sends it (v4, verify_only).
            r = await c.send(g.ADD_PARTITIONS_TO_TXN, 4, {"transactions": [{
                "transactional_id": "tx", "producer_id": pid, "producer_epoch": 1, "verify_only": True,
                "topics": [{"name": "t", "partitions": [0, 5]}]}]})
            (res,) = r["results_by_transaction"]
            # Partition 5 does not exist: as Kafka (metadataCache.contains, verify_only too), it is
            # UNKNOWN_TOPIC_OR_PARTITION and the others are not attempted.
            assert {p["partition_index"]: p["partition_error_code"] for p in res["topic_results"][0]["results_by_partition"]} == {
                0: Errors.OPERATION_NOT_ATTEMPTED, 5: Errors.UNKNOWN_TOPIC_OR_PARTITION}
            d = await describe(c, "tx")
            assert d["transaction_state"] == "Ongoing" and d["producer_epoch"] == 1
            parts = {(x["topic"], p) for x in d["topics"] for p in x["partitions"]}
            assert ("t", 0) in parts and ("t", 1) in parts
            assert any(tp[0] == "__consumer_offsets" for tp in parts)

            r = await c.send(g.END_TXN, 1, {"transactional_id": "tx", "producer_id": pid, "producer_epoch": 0, "committed": True})
            assert r["error_code"] == Errors.INVALID_PRODUCER_EPOCH
            r = await c.send(g.END_TXN, 3, {"transactional_id": "tx", "producer_id": pid, "producer_epoch": 1, "committed": True})
            assert r["error_code"] == Errors.NONE
            assert (await describe(c, "tx"))["transaction_state"] in ("PrepareCommit", "CompleteCommit")
            r = await c.send(g.LIST_TRANSACTIONS, 1, {"state_filters": ["Ongoing", "Nope"], "producer_id_filters": [], "duration_filter": -1})
            assert r["error_code"] == Errors.NONE and r["unknown_state_filters"] == ["Nope"]
            assert r["transaction_states"] == []

            # A second id, left Ongoing for the restart.
            r2 = await init_pid(c, "other")
            assert await add_partitions(c, "other", r2["producer_id"], 0, {"t": [1]}) == {("t", 1): Errors.NONE}
            return pid, r2["producer_id"]

    pids: list[int] = []

    async def go() -> None:
        pids.extend(await first())

    run(go)
    pid, other_pid = pids

    async def second() -> None:
        async with broker(tmp_path, **PROPS) as (server, c):
            await find_txn_coordinator(c, "other")
            d: dict[str, Any] = {}
            for _ in range(200):
                d = await describe(c, "other")
                if d["error_code"] not in (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR):
                    break
                await asyncio.sleep(0.05)
            assert d["error_code"] == Errors.NONE, d
            assert (d["transaction_state"], d["producer_id"], d["producer_epoch"]) == ("Ongoing", other_pid, 0)
            assert d["topics"] == [{"topic": "t", "partitions": [1]}]
            tx = await describe(c, "tx")
            assert tx["producer_id"] == pid and tx["producer_epoch"] == 1
            assert tx["transaction_state"] in ("PrepareCommit", "CompleteCommit")
            sm = server.broker.txn_apis.coordinator.state  # type: ignore[union-attr]
            assert sm.num_partitions == 3
            assert partition_for("tx", 3) in sm.owned
            # The next InitProducerId continues from the stored epoch; the ongoing transaction
            # of "other" is aborted by it (CONCURRENT_TRANSACTIONS, epoch bumped).
            r = await init_pid(c, "other")
            assert r["error_code"] == Errors.CONCURRENT_TRANSACTIONS
            d = await describe(c, "other")
            assert d["transaction_state"] in ("PrepareAbort", "CompleteAbort") and d["producer_epoch"] == 1

    run(second)


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(tmp_path: Path) -> None:
    async def go() -> None:
        props = {**PROPS, "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100"}
        async with broker(tmp_path, **props) as (_, c):
            await find_txn_coordinator(c, "slow")
            r = await init_pid(c, "slow", timeout_ms=300)
            assert r["error_code"] == Errors.NONE
            pid, epoch = r["producer_id"], r["producer_epoch"]
            assert (await create(c, "t"))["error_code"] == Errors.NONE
            assert await add_partitions(c, "slow", pid, epoch, {"t": [0]}) == {("t", 0): Errors.NONE}
            d: dict[str, Any] = {}
            for _ in range(100):  # bounded: the abort comes after 300 ms (+ one 100 ms interval)
                d = await describe(c, "slow")
                if d["transaction_state"] != "Ongoing":
                    break
                await asyncio.sleep(0.05)
            assert d["transaction_state"] in ("PrepareAbort", "CompleteAbort"), d
            assert d["producer_epoch"] == epoch + 1
            r = await c.send(g.END_TXN, 3, {"transactional_id": "slow", "producer_id": pid,
                                            "producer_epoch": epoch, "committed": True})
            assert r["error_code"] == Errors.PRODUCER_FENCED

    run(go)


def test_a_transaction_left_in_prepare_commit_is_completed_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator stops after writing PrepareCommit but before any marker went out: the
    restarted coordinator loads it from __transaction_state, sends the markers and completes it,
    and read_committed consumers get the records."""

    async def undelivered(self: Any, pc: Any, broker_id: int, tps: Any) -> bool:
        return False  # as if the coordinator died before its WriteTxnMarkers were answered

    monkeypatch.setattr(TransactionMarkerChannelManager, "_send", undelivered)

    async def first() -> None:
        async with broker(tmp_path, **PROPS) as (_, c):
            await find_txn_coordinator(c, "tx")
            r = await init_pid(c, "tx")
            pid, epoch = r["producer_id"], r["producer_epoch"]
            assert (await create(c, "t"))["error_code"] == Errors.NONE
            assert await add_partitions(c, "tx", pid, epoch, {"t": [0]}) == {("t", 0): Errors.NONE}
            data = build_batch([(b"k", b"v1", [], 1), (b"k", b"v2", [], 2)], producer_id=pid,
                               producer_epoch=epoch, base_sequence=0, is_transactional=True)
            resp = await c.send(m.PRODUCE, 9, {"transactional_id": "tx", "acks": -1, "timeout_ms": 5000,
                                               "topic_data": [{"name": "t", "partition_data": [
                                                   {"index": 0, "records": data}]}]})
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == Errors.NONE
            r = await c.send(g.END_TXN, 3, {"transactional_id": "tx", "producer_id": pid,
                                            "producer_epoch": epoch, "committed": True})
            assert r["error_code"] == Errors.NONE
            assert (await describe(c, "tx"))["transaction_state"] == "PrepareCommit"
            assert (await fetch_committed(c))["last_stable_offset"] == 0  # held by the open transaction

    run(first)
    monkeypatch.undo()

    async def second() -> None:
        async with broker(tmp_path, **PROPS) as (_, c):
            state = ""
            for _ in range(200):  # bounded: load, markers, CompleteCommit
                d = await describe(c, "tx")
                state = d["transaction_state"]
                if state == "CompleteCommit":
                    break
                await asyncio.sleep(0.05)
            assert state == "CompleteCommit"
            f = await fetch_committed(c)
            assert f["last_stable_offset"] == 3  # two records and the COMMIT marker
            assert [r.value for r in records_of(f["records"]) if r.value is not None and r.value != b""][:2] == [b"v1", b"v2"]
            assert not f["aborted_transactions"]

    run(second)


async def fetch_committed(c: NetworkClient) -> dict[str, Any]:
    resp = await c.send(m.FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 1,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": "t", "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1}]}],
    })
    return resp["responses"][0]["partitions"][0]  # type: ignore[no-any-return]
