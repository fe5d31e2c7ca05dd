"""Hostile and edge inputs on every transactional API, sent raw with odradek's own NetworkClient
to an in-process broker, each compared with what Apache Kafka answers (KafkaApis.scala,
TransactionCoordinator.scala, AddPartitionsToTxnManager.scala, ProducerStateManager.java,
LogValidator.java at apache/kafka 1eb7644). After each group of cases the broker is still up
and a normal transaction (InitProducerId, AddPartitionsToTxn, produce, EndTxn commit) still
commits and is read ``read_committed``."""

from __future__ import annotations

import asyncio
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from test_broker_apis import broker, create, run
from test_txn_apis import PROPS, add_partitions, describe, find_txn_coordinator, init_pid
from test_txn_partition import (
    NO_VERIFY,
    fetch,
    markers,
    producer_id,
    txn_batch,
    txn_produce,
    values,
)
from txn_bomb_support import txn_bomb

from odradek.coordinator.transaction.transaction_marker_channel_manager import PendingCompletion
from odradek.network.client import ConnectionClosed, NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.records.batch import iter_batches
from odradek.records.builder import build_batch
from odradek.records.records import decode_batch

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
                r = await c.send(m.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                                         "producer_id": pid, "producer_epoch": epoch})
                assert (r["error_code"], r["producer_id"]) == (Errors.INVALID_REQUEST, -1), r
            # Without a transactional id the timeout is not looked at, and KIP-360's pair gets a
            # new producer id (Kafka's coordinator with a null id).
            r = await c.send(m.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": -5,
                                                     "producer_id": 77, "producer_epoch": 4})
            assert r["error_code"] == Errors.NONE and r["producer_epoch"] == 0
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
            # The longest id a Kafka string holds (32766 bytes of UTF-8) is an id like any other.
            longest = "\u00e9" * 16383
            r = await init_pid(c, longest)
            assert r["error_code"] == Errors.NONE and (await describe(c, longest))["error_code"] == Errors.NONE
            # Versions no Kafka defines (InitProducerId v99, AddPartitionsToTxn v6, WriteTxnMarkers
            # v2, DescribeTransactions v1, ListTransactions v3): Kafka cannot parse the request and
            # closes the connection; so does odradek.
            for api, version in ((m.INIT_PRODUCER_ID, 99), (g.ADD_PARTITIONS_TO_TXN, 6), (m.WRITE_TXN_MARKERS, 2),
                                 (g.DESCRIBE_TRANSACTIONS, 1), (g.LIST_TRANSACTIONS, 3)):
                async with NetworkClient("127.0.0.1", server.bound_ports["PLAINTEXT"]) as c3:
                    with pytest.raises(ConnectionClosed):
                        await c3.send_raw(frame(api.api_key, version, b"\x00\x02tx\x00\x00\xea\x60"))
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
            # A negative partition, an invalid topic name: not in the metadata either.
            assert await add_partitions(c, "tx", pid, epoch, {"t": [-1, 0], "bad name!": [0], "x" * 300: [0]}) == {
                ("t", -1): Errors.UNKNOWN_TOPIC_OR_PARTITION, ("t", 0): Errors.OPERATION_NOT_ATTEMPTED,
                ("bad name!", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION, ("x" * 300, 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
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

            # A v4 batch of 5000 transactions (unknown ids and one known): each answered.
            r = await c.send(g.ADD_PARTITIONS_TO_TXN, 4, {"transactions": [
                {"transactional_id": f"z{i}", "producer_id": i, "producer_epoch": 0, "verify_only": i % 2 == 0,
                 "topics": [{"name": "t", "partitions": [0, 1]}]} for i in range(5000)] + [
                {"transactional_id": "tx", "producer_id": pid, "producer_epoch": epoch, "verify_only": True,
                 "topics": [{"name": "t", "partitions": [0]}]}]})
            res = r["results_by_transaction"]
            assert len(res) == 5001 and res[-1]["transactional_id"] == "tx"
            assert {p["partition_error_code"] for x in res[:5000] for t in x["topic_results"]
                    for p in t["results_by_partition"]} == {Errors.INVALID_PRODUCER_ID_MAPPING}
            assert res[-1]["topic_results"][0]["results_by_partition"][0]["partition_error_code"] == Errors.NONE

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
            tc.markers.add_txn_markers_to_send = held.append  # type: ignore[method-assign]
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
                tc.markers.add_txn_markers_to_send = send  # type: ignore[method-assign]
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
            # AddPartitionsToTxn naming no partition: as Kafka, the transaction begins with none
            # (prepareAddPartitions of an empty set) and its commit completes without markers.
            assert await add_partitions(c, "tx", pid, epoch, {}) == {}
            assert (await describe(c, "tx"))["transaction_state"] == "Ongoing"
            assert await end_txn(c, "tx", pid, epoch, True) == Errors.NONE
            await wait_state(c, "tx", "CompleteCommit")
            await normal_transaction(server, c)

    run(main)


# ------------------------------------------------------------------------------ WriteTxnMarkers


async def marker(c: NetworkClient, pid: int, epoch: int, commit: bool, coordinator_epoch: int) -> int:
    r = await c.send(m.WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
        "coordinator_epoch": coordinator_epoch, "topics": [{"name": "t", "partition_indexes": [0]}]}]})
    return int(r["markers"][0]["topics"][0]["partitions"][0]["error_code"])


def test_write_txn_markers_hostile(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, **NO_VERIFY, **PROPS) as (server, c):
            assert (await create(c, "t", 2))["error_code"] == Errors.NONE
            pid = await producer_id(c)
            # A marker for a producer without an open transaction: Kafka appends it
            # (ProducerAppendInfo.appendEndTxnMarker: no CompletedTxn, the LSO does not move).
            assert await markers(c, "t", pid, True) == {("t", 0): Errors.NONE}
            assert (await fetch(c, "t", 0, 1))["last_stable_offset"] == 1
            # A marker whose producer epoch is older than the log's: INVALID_PRODUCER_EPOCH
            # (checkProducerEpoch, origin COORDINATOR).
            assert (await txn_produce(c, "t", txn_batch(pid, [b"a"], epoch=3)))["error_code"] == Errors.NONE
            stale = await c.send(m.WRITE_TXN_MARKERS, 1, {"markers": [{
                "producer_id": pid, "producer_epoch": 2, "transaction_result": False, "coordinator_epoch": 0,
                "topics": [{"name": "t", "partition_indexes": [0]}]}]})
            assert stale["markers"][0]["topics"][0]["partitions"][0]["error_code"] == Errors.INVALID_PRODUCER_EPOCH
            assert (await fetch(c, "t", 0, 1))["last_stable_offset"] == 1  # still open
            # A partition named twice: one marker, one answer; another partition in the same marker.
            r = await c.send(m.WRITE_TXN_MARKERS, 1, {"markers": [{
                "producer_id": pid, "producer_epoch": 3, "transaction_result": False, "coordinator_epoch": 0,
                "topics": [{"name": "t", "partition_indexes": [0, 0, 1]}]}]})
            rows = [(p["partition_index"], p["error_code"]) for p in r["markers"][0]["topics"][0]["partitions"]]
            assert rows == [(0, Errors.NONE), (1, Errors.NONE)]
            rc = await fetch(c, "t", 0, 1)
            assert rc["last_stable_offset"] == rc["high_watermark"] == 3  # data, marker; one marker only
            assert rc["aborted_transactions"] == [{"producer_id": pid, "first_offset": 1}]
            # The coordinator epoch going back (a zombie coordinator): TRANSACTION_COORDINATOR_FENCED
            # (checkCoordinatorEpoch), nothing appended.
            assert (await txn_produce(c, "t", txn_batch(pid, [b"b"], seq=1, epoch=3)))["error_code"] == Errors.NONE
            assert await marker(c, pid, 3, True, 9) == Errors.NONE
            assert (await txn_produce(c, "t", txn_batch(pid, [b"c"], seq=2, epoch=3)))["error_code"] == Errors.NONE
            assert await marker(c, pid, 3, True, 8) == Errors.TRANSACTION_COORDINATOR_FENCED
            assert await marker(c, pid, 0, True, 9) == Errors.INVALID_PRODUCER_EPOCH  # both wrong: epoch first
            assert (await fetch(c, "t", 0, 1))["last_stable_offset"] == 5  # the open transaction at 5
            assert await marker(c, pid, 3, False, 9) == Errors.NONE
            # A huge marker list (10k markers of unknown partitions and 2k real ones): every marker
            # answered, in bounded time; the log gets the 2k markers.
            huge = [{"producer_id": 10_000 + i, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": 0,
                     "topics": [{"name": "nope", "partition_indexes": [0, 1, 2]}]} for i in range(10_000)]
            huge += [{"producer_id": 50_000 + i, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": 0,
                      "topics": [{"name": "t", "partition_indexes": [1]}]} for i in range(2_000)]
            r = await c.send(m.WRITE_TXN_MARKERS, 1, {"markers": huge})
            assert len(r["markers"]) == 12_000
            codes = {p["error_code"] for mk in r["markers"][:10_000] for t in mk["topics"] for p in t["partitions"]}
            assert codes == {Errors.UNKNOWN_TOPIC_OR_PARTITION}
            codes = {p["error_code"] for mk in r["markers"][10_000:] for t in mk["topics"] for p in t["partitions"]}
            assert codes == {Errors.NONE}
            await normal_transaction(server, c)

    run(main)


# ------------------------------------------------------------------------------ Produce


async def produce_v(c: NetworkClient, topic: str, data: bytes, version: int, tid: str | None = "tx") -> dict[str, Any]:
    r = await c.send(m.PRODUCE, version, {"transactional_id": tid, "acks": -1, "timeout_ms": 5000,
                                          "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": data}]}]})
    return r["responses"][0]["partition_responses"][0]  # type: ignore[no-any-return]


def test_produce_hostile_without_verification(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, **NO_VERIFY, **PROPS) as (server, c):
            assert (await create(c, "t"))["error_code"] == Errors.NONE
            assert (await create(c, "compacted", configs={"cleanup.policy": "compact"}))["error_code"] == Errors.NONE
            pid = await producer_id(c)
            # A control batch from a client: LogValidator, "Clients are not allowed to write
            # control records": INVALID_RECORD.
            ctl = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [], 1_000)], producer_id=pid,
                              producer_epoch=0, is_control=True, is_transactional=True)
            r = await txn_produce(c, "t", ctl)
            assert r["error_code"] == Errors.INVALID_RECORD, r
            assert (await fetch(c, "t", 0, 0))["high_watermark"] == 0
            # A transactional batch with a producer id but no sequence: LogValidator, "Invalid
            # sequence number": INVALID_RECORD.
            nseq = build_batch([(b"k", b"v", [], 1_000)], producer_id=pid, producer_epoch=5, base_sequence=-1,
                               is_transactional=True)
            assert (await txn_produce(c, "t", nseq))["error_code"] == Errors.INVALID_RECORD
            # A transactional batch with an older producer epoch than the log has seen:
            # INVALID_PRODUCER_EPOCH (checkProducerEpoch), nothing appended.
            assert (await txn_produce(c, "t", txn_batch(pid, [b"a"], epoch=5)))["error_code"] == Errors.NONE
            r = await txn_produce(c, "t", txn_batch(pid, [b"b"], epoch=4))
            assert r["error_code"] == Errors.INVALID_PRODUCER_EPOCH, r
            assert (await fetch(c, "t", 0, 0))["high_watermark"] == 1
            # A non-transactional batch of the producer while its transaction is open:
            # ProducerAppendInfo, "Expected transactional write": INVALID_TXN_STATE.
            plain = build_batch([(b"k", b"p", [], 1_000)], producer_id=pid, producer_epoch=5, base_sequence=1)
            r = await txn_produce(c, "t", plain)
            assert r["error_code"] == Errors.INVALID_TXN_STATE, r
            assert (await fetch(c, "t", 0, 0))["high_watermark"] == 1
            # A transactional decompression bomb (40 MB of zeros in ~40 KB of gzip): to a
            # compacted topic (every record's key is read) refused as the non-transactional one;
            # nothing is appended, no transaction is left open.
            bomb_pid = await producer_id(c)
            r = await txn_produce(c, "compacted", bytes(txn_bomb(bomb_pid, 0)))
            assert r["error_code"] == Errors.MESSAGE_TOO_LARGE, r  # as test_decompression_bombs
            rc = await fetch(c, "compacted", 0, 1)
            assert rc["high_watermark"] == 0 and rc["last_stable_offset"] == 0
            # To a plain topic Kafka stores it (validation skips values); aborted, read_committed
            # skips it and the LSO moves on.
            data = bytes(txn_bomb(bomb_pid, 0))
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                r = await txn_produce(c, "t", data)
                peak = tracemalloc.get_traced_memory()[1] - base
            finally:
                tracemalloc.stop()
            assert peak < 16 * 1024 * 1024, peak  # the 40 MB value is never held whole
            r_bomb = r["error_code"]
            assert r_bomb in (Errors.NONE, Errors.MESSAGE_TOO_LARGE), r
            if r_bomb == Errors.NONE:
                assert (await fetch(c, "t", 0, 1))["last_stable_offset"] == 0  # pid's transaction is open too
            assert await markers(c, "t", bomb_pid, False) == {("t", 0): Errors.NONE}
            r = await c.send(m.WRITE_TXN_MARKERS, 1, {"markers": [{
                "producer_id": pid, "producer_epoch": 5, "transaction_result": True, "coordinator_epoch": 0,
                "topics": [{"name": "t", "partition_indexes": [0]}]}]})
            assert r["markers"][0]["topics"][0]["partitions"][0]["error_code"] == Errors.NONE
            rc = await fetch(c, "t", 0, 1)
            assert rc["last_stable_offset"] == rc["high_watermark"]
            raw = bytes(rc["records"])
            kept = [h for h in iter_batches(raw) if not h.is_control and h.producer_id != bomb_pid]
            assert [r.value for h in kept for r in decode_batch(raw[h.position : h.position + h.size])] == [b"a"]
            if r_bomb == Errors.NONE:  # the consumer drops the bomb by the aborted list
                assert rc["aborted_transactions"] == [{"producer_id": bomb_pid, "first_offset": 1}]
            await normal_transaction(server, c)

    run(main)


def test_produce_to_a_partition_not_added_with_verification(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, **PROPS) as (server, c):  # verification on (Kafka's default)
            assert (await create(c, "t"))["error_code"] == Errors.NONE
            assert (await create(c, "u"))["error_code"] == Errors.NONE
            pid, epoch = await ready(server, c, "tx")
            assert await add_partitions(c, "tx", pid, epoch, {"u": [0]}) == {("u", 0): Errors.NONE}
            # "t" was not added: Kafka's verification refuses the append; INVALID_TXN_STATE for
            # Produce v10 and older, TRANSACTION_ABORTABLE from v11 (KafkaApis: apiVersion > 10 is
            # genericError; AddPartitionsToTxnManager maps TRANSACTION_ABORTABLE otherwise).
            r = await produce_v(c, "t", txn_batch(pid, [b"x"], epoch=epoch), 9)
            assert r["error_code"] == Errors.INVALID_TXN_STATE, r
            r = await produce_v(c, "t", txn_batch(pid, [b"x"], epoch=epoch), 11)
            assert r["error_code"] == Errors.TRANSACTION_ABORTABLE, r
            # A stale epoch: the coordinator says PRODUCER_FENCED, producers get INVALID_PRODUCER_EPOCH.
            r = await produce_v(c, "u", txn_batch(pid, [b"x"], epoch=epoch - 1), 9)
            assert r["error_code"] == Errors.INVALID_PRODUCER_EPOCH, r
            # Another producer id than the transactional id's: INVALID_PRODUCER_ID_MAPPING.
            r = await produce_v(c, "u", txn_batch(pid + 7, [b"x"], epoch=epoch), 9)
            assert r["error_code"] == Errors.INVALID_PRODUCER_ID_MAPPING, r
            # An empty transactional id: the coordinator's verification answers INVALID_REQUEST.
            r = await produce_v(c, "u", txn_batch(pid, [b"x"], epoch=epoch), 9, tid="")
            assert r["error_code"] == Errors.INVALID_REQUEST, r
            # A transactional id that was never initialised.
            r = await produce_v(c, "u", txn_batch(pid, [b"x"], epoch=epoch), 9, tid="never")
            assert r["error_code"] == Errors.INVALID_PRODUCER_ID_MAPPING, r
            for topic in ("t", "u"):
                assert (await fetch(c, topic, 0, 0))["high_watermark"] == 0
            assert await end_txn(c, "tx", pid, epoch, False) == Errors.NONE
            await wait_state(c, "tx", "CompleteAbort")
            await normal_transaction(server, c)

    run(main)


# ------------------------------------------------------------------------------ TxnOffsetCommit


def test_txn_offset_commit_hostile(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, **PROPS) as (server, c):
            assert (await create(c, "in"))["error_code"] == Errors.NONE
            pid, epoch = await ready(server, c, "tx")

            async def commit_all(group: str, p: int, e: int, topics: dict[str, list[int]], tid: str = "tx",
                                 version: int = 3) -> dict[tuple[str, int], int]:
                r = await c.send(m.TXN_OFFSET_COMMIT, version, {
                    "transactional_id": tid, "group_id": group, "producer_id": p, "producer_epoch": e,
                    "generation_id": -1, "member_id": "", "group_instance_id": None,
                    "topics": [{"name": t, "partitions": [{"partition_index": i, "committed_offset": 5,
                                                           "committed_leader_epoch": -1, "committed_metadata": ""}
                                                          for i in ps]} for t, ps in topics.items()]})
                return {(t["name"], x["partition_index"]): x["error_code"] for t in r["topics"] for x in t["partitions"]}

            async def commit(group: str, p: int, e: int, tid: str = "tx", version: int = 3) -> int:
                for _ in range(200):  # the group coordinator loads its partition first
                    code = (await commit_all(group, p, e, {"in": [0]}, tid, version))[("in", 0)]
                    if code not in (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR):
                        return code
                    await asyncio.sleep(0.05)
                raise AssertionError(f"TxnOffsetCommit kept failing: {code}")

            await c.send(m.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})
            # GroupCoordinatorService.commitTransactionalOffsets: an empty group id is INVALID_GROUP_ID.
            assert await commit("", pid, epoch) == Errors.INVALID_GROUP_ID
            # The group's __consumer_offsets partition not added (no AddOffsetsToTxn): the
            # verification answers INVALID_TXN_STATE (v3: defaultError).
            assert await commit("g", pid, epoch) == Errors.INVALID_TXN_STATE
            r = await c.send(g.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "tx", "producer_id": pid,
                                                       "producer_epoch": epoch, "group_id": "g"})
            assert r["error_code"] == Errors.NONE
            # Another producer id than the transactional id's, a stale epoch, an unknown id.
            assert await commit("g", pid + 1, epoch) == Errors.INVALID_PRODUCER_ID_MAPPING
            assert await commit("g", pid, epoch - 1) == Errors.INVALID_PRODUCER_EPOCH
            assert await commit("g", pid, epoch, tid="never") == Errors.INVALID_PRODUCER_ID_MAPPING
            assert await commit("g", -1, -1) == Errors.INVALID_PRODUCER_ID_MAPPING
            # KafkaApis.handleTxnOffsetCommitRequest checks the partitions against the metadata
            # before the group coordinator sees the request: unknown ones are
            # UNKNOWN_TOPIC_OR_PARTITION whatever the group id or producer; if none is known the
            # coordinator is not asked at all.
            assert await commit_all("", pid, epoch, {"nope": [0], "in": [0, 9]}) == {
                ("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION, ("in", 9): Errors.UNKNOWN_TOPIC_OR_PARTITION,
                ("in", 0): Errors.INVALID_GROUP_ID}
            assert await commit_all("", -1, -1, {"nope": [0]}) == {("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
            assert await commit_all("g", -1, -1, {"nope": [0], "in": [0]}) == {
                ("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION, ("in", 0): Errors.INVALID_PRODUCER_ID_MAPPING}
            # Nothing commits before this point, so group g does not exist; a commit of unknown
            # partitions only does not create it (the coordinator is not asked).
            assert await commit_all("g", pid, epoch, {"in": [3]}) == {("in", 3): Errors.UNKNOWN_TOPIC_OR_PARTITION}
            r = await c.send(m.DESCRIBE_GROUPS, 5, {"groups": ["g"], "include_authorized_operations": False})
            assert r["groups"][0]["group_state"] == "Dead", r
            # 100k partitions of a one-partition topic: partition 0 committed, the others unknown.
            many = await commit_all("g", pid, epoch, {"in": list(range(100_000))})
            assert many.pop(("in", 0)) == Errors.NONE
            assert len(many) == 99_999 and set(many.values()) == {Errors.UNKNOWN_TOPIC_OR_PARTITION}
            assert await commit("g", pid, epoch) == Errors.NONE
            assert await end_txn(c, "tx", pid, epoch, True) == Errors.NONE
            await wait_state(c, "tx", "CompleteCommit")
            await normal_transaction(server, c)

    run(main)


# ------------------------------------------------------------------------------ admin APIs


def test_describe_and_list_hostile(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, **PROPS) as (server, c):
            assert (await create(c, "t"))["error_code"] == Errors.NONE
            pid, epoch = await ready(server, c, "tx")
            # 100k transactional ids in one DescribeTransactions: every one answered
            # (TRANSACTIONAL_ID_NOT_FOUND for the unknown, INVALID_REQUEST for the empty one).
            ids = [f"id-{i}" for i in range(100_000)] + ["", "tx"]
            r = await c.send(g.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ids})
            states = r["transaction_states"]
            assert [s["transactional_id"] for s in states] == ids
            assert {s["error_code"] for s in states[:100_000]} == {Errors.TRANSACTIONAL_ID_NOT_FOUND}
            assert states[100_000]["error_code"] == Errors.INVALID_REQUEST
            assert (states[-1]["error_code"], states[-1]["producer_id"]) == (Errors.NONE, pid)
            # ListTransactions: unknown state names come back in unknown_state_filters (and filter
            # everything out if no known state is named); 100k producer ids are only a filter.
            r = await c.send(g.LIST_TRANSACTIONS, 1, {"state_filters": ["nope", "ONGOING", "Empty"],
                                                      "producer_id_filters": [], "duration_filter": -1})
            assert r["error_code"] == Errors.NONE and r["unknown_state_filters"] == ["nope", "ONGOING"]
            assert [t["transactional_id"] for t in r["transaction_states"]] == ["tx"]
            r = await c.send(g.LIST_TRANSACTIONS, 1, {"state_filters": ["nope"], "producer_id_filters": [],
                                                      "duration_filter": -1})
            assert r["unknown_state_filters"] == ["nope"] and r["transaction_states"] == []
            r = await c.send(g.LIST_TRANSACTIONS, 1, {"state_filters": [], "producer_id_filters": list(range(100_000)),
                                                      "duration_filter": -1})
            assert r["error_code"] == Errors.NONE
            assert [t["transactional_id"] for t in r["transaction_states"]] == (["tx"] if pid < 100_000 else [])
            r = await c.send(g.LIST_TRANSACTIONS, 1, {"state_filters": [], "producer_id_filters": [-5],
                                                      "duration_filter": -7})
            assert r["error_code"] == Errors.NONE and r["transaction_states"] == []
            # DescribeProducers: unknown topic, invalid name, partition out of range, 10k partitions.
            d = await c.send(m.DESCRIBE_PRODUCERS, 0, {"topics": [
                {"name": "nope", "partition_indexes": [0]}, {"name": "", "partition_indexes": [0]},
                {"name": "t", "partition_indexes": [0, -1, 5, *range(10, 10_010)]}]})
            codes = [[p["error_code"] for p in t["partitions"]] for t in d["topics"]]
            assert codes[0] == [Errors.UNKNOWN_TOPIC_OR_PARTITION]
            assert codes[1] == [Errors.INVALID_TOPIC_EXCEPTION]
            assert codes[2][0] == Errors.NONE and set(codes[2][1:]) == {Errors.UNKNOWN_TOPIC_OR_PARTITION}
            assert len(codes[2]) == 10_003
            await normal_transaction(server, c)

    run(main)
