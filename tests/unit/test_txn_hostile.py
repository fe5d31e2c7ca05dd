"""Hostile and edge inputs on every transactional API, sent raw with odradek's own NetworkClient
to an in-process broker, each compared with what Apache Kafka answers (KafkaApis.scala,
TransactionCoordinator.scala, AddPartitionsToTxnManager.scala, ProducerStateManager.java,
LogValidator.java at apache/kafka 1eb7644). After each group of cases the broker is still up
and a normal transaction (InitProducerId, AddPartitionsToTxn, produce, EndTxn commit) still
commits and is read ``read_committed``."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any

import pytest
from test_broker_apis import broker, create, run
from test_txn_apis import PROPS, add_partitions, describe, find_txn_coordinator, init_pid
from test_txn_partition import (
    fetch,
    txn_batch,
    txn_produce,
    values,
)

from odradek.coordinator.transaction.transaction_marker_channel_manager import PendingCompletion
from odradek.network.client import ConnectionClosed, NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g

MAX_TIMEOUT = int(PROPS["transaction.max.timeout.ms"])


async def end_txn(c: NetworkClient, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    r = await c.send(g.END_TXN, version, {"transactional_id": tid, "producer_id": pid,
                                          "producer_epoch": epoch, "committed": commit})
    return int(r["error_code"])


async def wait_state(c: NetworkClient, tid: str, state: str) -> None:
    d: dict[str, Any] = {}
    for _ in range(200):  # bounded: the markers and CompleteCommit take a few appends
        d = await describe(c, tid)
        if d["transaction_state"] == state:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{tid} never reached {state}: {d}")


async def normal_transaction(server: Any, c: NetworkClient, tid: str = "normal", topic: str = "ok") -> None:
    """The broker still serves a whole transaction: committed and read read_committed."""
    port = server.bound_ports["PLAINTEXT"]
    async with NetworkClient("127.0.0.1", port) as c2:  # a fresh connection: c may be closed
        md = await c2.send(m.METADATA, 12, {"topics": [{"name": topic, "topic_id": None}],
                                            "allow_auto_topic_creation": False})
        if md["topics"][0]["error_code"] != Errors.NONE:
            assert (await create(c2, topic))["error_code"] == Errors.NONE
        await find_txn_coordinator(c2, tid)
        r = await init_pid(c2, tid)
        assert r["error_code"] == Errors.NONE, r
        pid, epoch = r["producer_id"], r["producer_epoch"]
        assert await add_partitions(c2, tid, pid, epoch, {topic: [0]}) == {(topic, 0): Errors.NONE}
        start = (await fetch(c2, topic, 0, 0))["high_watermark"]
        p = await txn_produce(c2, topic, txn_batch(pid, [b"fine"], epoch=epoch), txn_id=tid)
        assert p["error_code"] == Errors.NONE, p
        assert await end_txn(c2, tid, pid, epoch, True) == Errors.NONE
        await wait_state(c2, tid, "CompleteCommit")
        rc: dict[str, Any] = {}
        for _ in range(200):
            rc = await fetch(c2, topic, start, 1)
            if values(rc):
                break
            await asyncio.sleep(0.02)
        assert values(rc) == [b"fine"], rc


async def ready(server: Any, c: NetworkClient, tid: str) -> tuple[int, int]:
    """A producer id with epoch 1 (initialised twice), so that epoch 0 is a stale one."""
    await find_txn_coordinator(c, tid)
    for _ in range(2):
        r = await init_pid(c, tid)
        assert r["error_code"] == Errors.NONE, r
    assert r["producer_epoch"] == 1
    return int(r["producer_id"]), int(r["producer_epoch"])


def frame(api_key: int, version: int, body: bytes, correlation_id: int = 7) -> bytes:
    """A request frame with header v1 (client id null) and a hand-made body."""
    out = struct.pack(">hhih", api_key, version, correlation_id, -1) + body
    return struct.pack(">i", len(out)) + out


# ------------------------------------------------------------------------------ InitProducerId


def test_init_producer_id_hostile(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, **PROPS) as (server, c):
            await find_txn_coordinator(c, "tx")
            # Kafka's validateTransactionTimeoutMs: 0 < timeout <= transaction.max.timeout.ms.
            for bad in (0, -1, -(2**31), MAX_TIMEOUT + 1, 2**31 - 1):
                r = await init_pid(c, "tx", timeout_ms=bad)
                assert (r["error_code"], r["producer_id"], r["producer_epoch"]) == (
                    Errors.INVALID_TRANSACTION_TIMEOUT, -1, -1), bad
            # TransactionCoordinator.handleInitProducerId: an empty id is INVALID_REQUEST.
            assert (await init_pid(c, ""))["error_code"] == Errors.INVALID_REQUEST
            # KafkaApis.handleInitProducerIdRequest: a producer id without an epoch (or the
            # reverse) is INVALID_REQUEST, before the coordinator is asked.
            for pid, epoch in ((-1, 3), (1234, -1)):
                r = await init_pid(c, "tx", producer_id=pid, producer_epoch=epoch)
                assert r["error_code"] == Errors.INVALID_REQUEST, (pid, epoch, r)
            r = await init_pid(c, "tx")
            assert r["error_code"] == Errors.NONE
            pid = r["producer_id"]
            # KIP-360 with another producer's id: fenced (isValidProducerId), INVALID_PRODUCER_EPOCH
            # before v4 (KIP-588).
            assert (await init_pid(c, "tx", producer_id=pid + 1000, producer_epoch=0))["error_code"] == Errors.PRODUCER_FENCED
            assert (await init_pid(c, "tx", version=3, producer_id=pid + 1000, producer_epoch=0))["error_code"] == Errors.INVALID_PRODUCER_EPOCH
            # KIP-360 with an epoch from the future: fenced as well (prepareIncrementProducerEpoch).
            assert (await init_pid(c, "tx", producer_id=pid, producer_epoch=200))["error_code"] == Errors.PRODUCER_FENCED
            # KIP-360 on an id never seen: the new metadata has no epoch, the request is accepted.
            r = await init_pid(c, "fresh", producer_id=99999, producer_epoch=7)
            assert r["error_code"] == Errors.NONE and r["producer_epoch"] == 0

            # A transactional id longer than a Kafka string (0x7fff bytes): Kafka's generated
            # reader throws ("string field transactionalId had invalid length") and the request
            # cannot be parsed: the connection is closed. 10 MB, flexible version (compact string).
            huge = "x" * (10 * 1024 * 1024)
            async with NetworkClient("127.0.0.1", server.bound_ports["PLAINTEXT"]) as c2:
                with pytest.raises(ConnectionClosed):
                    await c2.send(m.INIT_PRODUCER_ID, 4, {"transactional_id": huge, "transaction_timeout_ms": 60000,
                                                          "producer_id": -1, "producer_epoch": -1})
            # An unknown version of InitProducerId: Kafka cannot parse it either (closed).
            async with NetworkClient("127.0.0.1", server.bound_ports["PLAINTEXT"]) as c3:
                with pytest.raises(ConnectionClosed):
                    await c3.send_raw(frame(m.INIT_PRODUCER_ID.api_key, 99, b"\x00\x02tx\x00\x00\xea\x60"))
            assert (await describe(c, "x" * 40)).get("error_code") == Errors.TRANSACTIONAL_ID_NOT_FOUND
            await normal_transaction(server, c)

    run(main)


# ------------------------------------------------------------------------------ AddPartitionsToTxn / AddOffsetsToTxn


async def add_v4(c: NetworkClient, tid: str, pid: int, epoch: int, topics: dict[str, list[int]],
                 verify_only: bool, version: int = 4) -> dict[tuple[str, int], int]:
    r = await c.send(g.ADD_PARTITIONS_TO_TXN, version, {"transactions": [{
        "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "verify_only": verify_only,
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}]})
    assert r["error_code"] == Errors.NONE
    (res,) = r["results_by_transaction"]
    assert res["transactional_id"] == tid
    return {(t["name"], p["partition_index"]): p["partition_error_code"]
            for t in res["topic_results"] for p in t["results_by_partition"]}


def test_add_partitions_and_offsets_hostile(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, **PROPS) as (server, c):
            assert (await create(c, "t", 2))["error_code"] == Errors.NONE
            await find_txn_coordinator(c, "tx")
            # Before InitProducerId: no metadata for the id (handleAddPartitionsToTransaction).
            assert await add_partitions(c, "tx", 1, 0, {"t": [0]}) == {("t", 0): Errors.INVALID_PRODUCER_ID_MAPPING}
            # An empty transactional id.
            assert await add_partitions(c, "", 1, 0, {"t": [0]}) == {("t", 0): Errors.INVALID_REQUEST}
            pid, epoch = await ready(server, c, "tx")
            # Wrong producer id for the transactional id; a stale epoch (INVALID_PRODUCER_EPOCH before v2).
            assert await add_partitions(c, "tx", pid + 1, epoch, {"t": [0]}) == {("t", 0): Errors.INVALID_PRODUCER_ID_MAPPING}
            assert await add_partitions(c, "tx", pid, epoch + 1, {"t": [0]}) == {("t", 0): Errors.PRODUCER_FENCED}
            assert await add_partitions(c, "tx", pid, epoch + 1, {"t": [0]}, version=1) == {("t", 0): Errors.INVALID_PRODUCER_EPOCH}
            # A partition the topic does not have: UNKNOWN_TOPIC_OR_PARTITION (metadataCache.contains),
            # the others OPERATION_NOT_ATTEMPTED.
            assert await add_partitions(c, "tx", pid, epoch, {"t": [0, 9]}) == {
                ("t", 0): Errors.OPERATION_NOT_ATTEMPTED, ("t", 9): Errors.UNKNOWN_TOPIC_OR_PARTITION}
            # Internal topics from a client (v0-v3): KafkaApis filters them out of the authorized
            # topics (filterNot(Topic.isInternal)), so TOPIC_AUTHORIZATION_FAILED, the others
            # not attempted — also without an authorizer.
            got = await add_partitions(c, "tx", pid, epoch, {"t": [1], "__consumer_offsets": [0], "__transaction_state": [0]})
            assert got == {("t", 1): Errors.OPERATION_NOT_ATTEMPTED,
                           ("__consumer_offsets", 0): Errors.TOPIC_AUTHORIZATION_FAILED,
                           ("__transaction_state", 0): Errors.TOPIC_AUTHORIZATION_FAILED}
            assert (await describe(c, "tx"))["transaction_state"] == "Empty"
            # Duplicate partitions: one partition, one result (Kafka's results are a map).
            r = await c.send(g.ADD_PARTITIONS_TO_TXN, 3, {
                "v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [{"name": "t", "partitions": [0, 0, 0]}, {"name": "t", "partitions": [0]}]})
            rows = [(t["name"], p["partition_index"], p["partition_error_code"])
                    for t in r["results_by_topic_v3_and_below"] for p in t["results_by_partition"]]
            assert rows == [("t", 0, Errors.NONE)]
            # 100k partitions: each checked against the metadata, Kafka answers all of them; the
            # one that exists is not attempted and nothing is added.
            many = list(range(100_000))
            big = await add_partitions(c, "tx", pid, epoch, {"t": many})
            assert len(big) == 100_000
            assert big[("t", 0)] == big[("t", 1)] == Errors.OPERATION_NOT_ATTEMPTED
            assert all(big[("t", i)] == Errors.UNKNOWN_TOPIC_OR_PARTITION for i in range(2, 100_000))
            d = await describe(c, "tx")
            assert d["transaction_state"] == "Ongoing"
            assert {(x["topic"], p) for x in d["topics"] for p in x["partitions"]} == {("t", 0)}

            # v4+ (the brokers' batch form) from a client: Kafka authorizes CLUSTER_ACTION, which
            # without an authorizer is allowed; a non-verify_only transaction is added.
            assert await add_v4(c, "tx", pid, epoch, {"t": [1]}, verify_only=False) == {("t", 1): Errors.NONE}
            # verify_only of a partition not in the transaction: TRANSACTION_ABORTABLE, which
            # odradek answers INVALID_TXN_STATE to v4 (older than the error); a partition the
            # topic does not have: UNKNOWN_TOPIC_OR_PARTITION, the others not attempted.
            assert (await create(c, "u", 1))["error_code"] == Errors.NONE
            assert await add_v4(c, "tx", pid, epoch, {"t": [0], "u": [0]}, verify_only=True) == {
                ("t", 0): Errors.NONE, ("u", 0): Errors.INVALID_TXN_STATE}
            assert await add_v4(c, "tx", pid, epoch, {"u": [0]}, verify_only=True, version=5) == {
                ("u", 0): Errors.TRANSACTION_ABORTABLE}
            assert await add_v4(c, "tx", pid, epoch, {"t": [0], "u": [3]}, verify_only=True) == {
                ("t", 0): Errors.OPERATION_NOT_ATTEMPTED, ("u", 3): Errors.UNKNOWN_TOPIC_OR_PARTITION}
            # v4 from a client may add internal topics: Kafka filters them only below v4.
            # verify_only for an id the coordinator does not know: INVALID_PRODUCER_ID_MAPPING.
            assert await add_v4(c, "nobody", 5, 0, {"t": [0]}, verify_only=True) == {("t", 0): Errors.INVALID_PRODUCER_ID_MAPPING}
            assert await add_v4(c, "", 5, 0, {"t": [0]}, verify_only=True) == {("t", 0): Errors.INVALID_REQUEST}
            assert await add_v4(c, "tx", pid, epoch + 3, {"t": [0]}, verify_only=True) == {("t", 0): Errors.PRODUCER_FENCED}

            # AddOffsetsToTxn: Kafka does not validate the group id (partitionFor("") is a
            # partition like any); an unknown transactional id or producer is refused.
            async def add_offsets(tid: str, p: int, e: int, group: str) -> int:
                r = await c.send(g.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": tid, "producer_id": p,
                                                           "producer_epoch": e, "group_id": group})
                return int(r["error_code"])

            assert await add_offsets("tx", pid, epoch, "") == Errors.NONE
            assert await add_offsets("tx", pid, epoch, "g" * 30000) == Errors.NONE
            assert await add_offsets("nobody", pid, epoch, "g") == Errors.INVALID_PRODUCER_ID_MAPPING
            assert await add_offsets("tx", pid + 1, epoch, "g") == Errors.INVALID_PRODUCER_ID_MAPPING
            assert await add_offsets("tx", pid, epoch - 1, "g") == Errors.PRODUCER_FENCED
            assert await add_offsets("", pid, epoch, "g") == Errors.INVALID_REQUEST
            assert await end_txn(c, "tx", pid, epoch, False) == Errors.NONE
            await wait_state(c, "tx", "CompleteAbort")
            await normal_transaction(server, c)

    run(main)


# ------------------------------------------------------------------------------ EndTxn


def test_end_txn_hostile(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, **PROPS) as (server, c):
            assert (await create(c, "t"))["error_code"] == Errors.NONE
            await find_txn_coordinator(c, "tx")
            assert await end_txn(c, "tx", 1, 0, True) == Errors.INVALID_PRODUCER_ID_MAPPING  # never initialised
            assert await end_txn(c, "", 1, 0, True) == Errors.INVALID_REQUEST
            pid, epoch = await ready(server, c, "tx")
            # No transaction (Empty): INVALID_TXN_STATE, commit or abort.
            assert await end_txn(c, "tx", pid, epoch, True) == Errors.INVALID_TXN_STATE
            assert await end_txn(c, "tx", pid, epoch, False) == Errors.INVALID_TXN_STATE
            assert await add_partitions(c, "tx", pid, epoch, {"t": [0]}) == {("t", 0): Errors.NONE}
            # A stale epoch: PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2); another id: mapping.
            assert await end_txn(c, "tx", pid, epoch - 1, True) == Errors.PRODUCER_FENCED
            assert await end_txn(c, "tx", pid, epoch - 1, True, version=1) == Errors.INVALID_PRODUCER_EPOCH
            assert await end_txn(c, "tx", pid, epoch + 1, True) == Errors.PRODUCER_FENCED
            assert await end_txn(c, "tx", pid + 1, epoch, True) == Errors.INVALID_PRODUCER_ID_MAPPING

            # Hold the markers: the transaction stays in PrepareAbort while "the previous completes".
            tc = server.broker.txn_apis.coordinator  # type: ignore[union-attr]
            held: list[PendingCompletion] = []
            send = tc.markers.add_txn_markers_to_send
            tc.markers.add_txn_markers_to_send = held.append
            try:
                assert await end_txn(c, "tx", pid, epoch, False) == Errors.NONE
                assert len(held) == 1 and (await describe(c, "tx"))["transaction_state"] == "PrepareAbort"
                # While the markers go out the metadata has CompleteAbort pending (Kafka's
                # prepareComplete before addTxnMarkersToSend): pendingTransitionInProgress, so
                # CONCURRENT_TRANSACTIONS for the same outcome and for the other one as well.
                assert await end_txn(c, "tx", pid, epoch, False) == Errors.CONCURRENT_TRANSACTIONS
                assert await end_txn(c, "tx", pid, epoch, True) == Errors.CONCURRENT_TRANSACTIONS
                # A stale epoch is still fenced first.
                assert await end_txn(c, "tx", pid, epoch - 1, True) == Errors.PRODUCER_FENCED
                # A new transaction's partitions, an InitProducerId meanwhile: CONCURRENT_TRANSACTIONS.
                assert await add_partitions(c, "tx", pid, epoch, {"t": [0]}) == {("t", 0): Errors.CONCURRENT_TRANSACTIONS}
                assert (await c.send(m.INIT_PRODUCER_ID, 4, {"transactional_id": "tx", "transaction_timeout_ms": 60000,
                                                             "producer_id": -1, "producer_epoch": -1}))["error_code"] == Errors.CONCURRENT_TRANSACTIONS
            finally:
                tc.markers.add_txn_markers_to_send = send
            for pc in held:
                send(pc)
            await wait_state(c, "tx", "CompleteAbort")
            # Commit after abort: INVALID_TXN_STATE; abort again (a retry): NONE.
            assert await end_txn(c, "tx", pid, epoch, True) == Errors.INVALID_TXN_STATE
            assert await end_txn(c, "tx", pid, epoch, False) == Errors.NONE
            # Commit twice: the second is a retry of a completed commit, NONE.
            assert await add_partitions(c, "tx", pid, epoch, {"t": [0]}) == {("t", 0): Errors.NONE}
            assert await end_txn(c, "tx", pid, epoch, True) == Errors.NONE
            second = await end_txn(c, "tx", pid, epoch, True)
            assert second in (Errors.NONE, Errors.CONCURRENT_TRANSACTIONS)  # PrepareCommit or CompleteCommit
            await wait_state(c, "tx", "CompleteCommit")
            assert await end_txn(c, "tx", pid, epoch, True) == Errors.NONE
            assert await end_txn(c, "tx", pid, epoch, False) == Errors.INVALID_TXN_STATE
            await normal_transaction(server, c)

    run(main)
