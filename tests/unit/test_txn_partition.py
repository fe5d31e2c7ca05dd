"""The partition side of transactions on one in-process broker: transactional produce,
WriteTxnMarkers (sent by hand, as the coordinator would), read_committed fetch and ListOffsets
bounded by the last stable offset, aborted transactions in the fetch response, DescribeProducers
and the marker listeners."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from purgatory_support import FakeTimer, ManualLogWorker
from test_add_partitions_to_txn_manager import NODE, FakeCoordinator
from test_broker_apis import broker, create, records_of, run
from test_txn_apis import PROPS, add_partitions, find_txn_coordinator, init_pid

from odradek.cluster.partition import PartitionState
from odradek.log.log_config import LogConfig
from odradek.log.log_manager import LogManager
from odradek.metadata.metadata_cache import KRaftMetadataCache
from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.protocol.messages import generated as g
from odradek.records.batch import iter_batches
from odradek.records.builder import build_batch
from odradek.records.control_batch import build_end_txn_marker
from odradek.server.delayed_fetch import FetchPartitionRequest
from odradek.server.replica_manager import ReplicaManager
from odradek.server.txn_partition_apis import TxnPartitionApis

NO_VERIFY = {"transaction.partition.verification.enable": "false"}


def txn_batch(pid: int, values: list[bytes], seq: int = 0, epoch: int = 0) -> bytes:
    return build_batch(
        [(b"k", v, [], 1_000 + i) for i, v in enumerate(values)],
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True,
    )


async def producer_id(c: NetworkClient) -> int:
    r = await c.send(m.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert r["error_code"] == Errors.NONE
    return int(r["producer_id"])


async def txn_produce(c: NetworkClient, topic: str, data: bytes, txn_id: str | None = "tx") -> dict[str, Any]:
    r = await c.send(m.PRODUCE, 9, {"transactional_id": txn_id, "acks": -1, "timeout_ms": 5000,
                                    "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": data}]}]})
    return r["responses"][0]["partition_responses"][0]  # type: ignore[no-any-return]


async def markers(c: NetworkClient, topic: str, pid: int, commit: bool, partitions: tuple[int, ...] = (0,),
                  coordinator_epoch: int = 0) -> dict[tuple[str, int], int]:
    r = await c.send(m.WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": pid, "producer_epoch": 0, "transaction_result": commit, "coordinator_epoch": coordinator_epoch,
        "topics": [{"name": topic, "partition_indexes": list(partitions)}]}]})
    (marker,) = r["markers"]
    assert marker["producer_id"] == pid
    return {(t["name"], p["partition_index"]): p["error_code"] for t in marker["topics"] for p in t["partitions"]}


async def fetch(c: NetworkClient, topic: str, offset: int, isolation: int, max_wait: int = 0) -> dict[str, Any]:
    r = await c.send(m.FETCH, 11, {
        "replica_id": -1, "max_wait_ms": max_wait, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": isolation,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1}]}]})
    return r["responses"][0]["partitions"][0]  # type: ignore[no-any-return]


async def latest(c: NetworkClient, topic: str, isolation: int) -> int:
    r = await c.send(m.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
    p = r["topics"][0]["partitions"][0]
    assert p["error_code"] == Errors.NONE
    return int(p["offset"])


def values(part: dict[str, Any]) -> list[bytes]:
    """The values of the data batches (control batches, the markers, skipped as clients do)."""
    raw = bytes(part["records"] or b"")
    out: list[bytes] = []
    for h in iter_batches(raw):
        if not h.is_control:
            out.extend(r.value for r in records_of(raw[h.position : h.position + h.size]) if r.value is not None)
    return out


def test_commit_and_abort_markers_and_read_committed(tmp_path: Path) -> None:
    heard: list[tuple[str, int, int, bool]] = []

    async def main() -> None:
        async with broker(tmp_path, **NO_VERIFY) as (server, c):
            assert server.broker is not None and server.broker.replica_manager is not None
            server.broker.replica_manager.txn_marker_listeners.append(lambda *a: heard.append(a))
            assert (await create(c, "t"))["error_code"] == Errors.NONE
            p1, p2 = await producer_id(c), await producer_id(c)
            assert (await txn_produce(c, "t", txn_batch(p1, [b"a1", b"a2"])))["error_code"] == Errors.NONE
            # The open transaction holds the LSO at its first offset; read_uncommitted sees it.
            rc = await fetch(c, "t", 0, 1)
            assert rc["error_code"] == Errors.NONE and rc["high_watermark"] == 2
            assert rc["last_stable_offset"] == 0 and values(rc) == [] and rc["aborted_transactions"] == []
            assert values(await fetch(c, "t", 0, 0)) == [b"a1", b"a2"]
            assert await latest(c, "t", 1) == 0 and await latest(c, "t", 0) == 2
            d = await c.send(m.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": "t", "partition_indexes": [0]}]})
            (state,) = d["topics"][0]["partitions"][0]["active_producers"]
            assert (state["producer_id"], state["current_txn_start_offset"]) == (p1, 0)

            assert await markers(c, "t", p1, True) == {("t", 0): Errors.NONE}
            assert heard == [("t", 0, p1, True)]
            rc = await fetch(c, "t", 0, 1)
            assert rc["last_stable_offset"] == rc["high_watermark"] == 3  # two records + the marker
            assert values(rc) == [b"a1", b"a2"] and rc["aborted_transactions"] == []
            assert await latest(c, "t", 1) == 3

            assert (await txn_produce(c, "t", txn_batch(p2, [b"b1"])))["error_code"] == Errors.NONE
            assert await markers(c, "t", p2, False) == {("t", 0): Errors.NONE}
            assert heard[-1] == ("t", 0, p2, False)
            rc = await fetch(c, "t", 3, 1)
            assert rc["last_stable_offset"] == 5
            # The aborted record is in the data; the consumer drops it by this list.
            assert rc["aborted_transactions"] == [{"producer_id": p2, "first_offset": 3}]
            ru = await fetch(c, "t", 3, 0)
            assert ru["aborted_transactions"] is None  # read_uncommitted: the null list
            d = await c.send(m.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": "t", "partition_indexes": [0]}]})
            states = {s["producer_id"]: s for s in d["topics"][0]["partitions"][0]["active_producers"]}
            assert states[p1]["current_txn_start_offset"] == states[p2]["current_txn_start_offset"] == -1

    run(main)


def test_write_txn_markers_errors(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, **NO_VERIFY) as (_, c):
            assert (await create(c, "t"))["error_code"] == Errors.NONE
            pid = await producer_id(c)
            assert (await txn_produce(c, "t", txn_batch(pid, [b"x"])))["error_code"] == Errors.NONE
            got = await markers(c, "t", pid, True, partitions=(0, 7))
            assert got == {("t", 0): Errors.NONE, ("t", 7): Errors.UNKNOWN_TOPIC_OR_PARTITION}
            assert await markers(c, "nope", pid, True) == {("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION}
            # A marker of an older coordinator epoch than the last one is fenced.
            assert (await txn_produce(c, "t", txn_batch(pid, [b"y"], seq=1)))["error_code"] == Errors.NONE
            assert await markers(c, "t", pid, True, coordinator_epoch=5) == {("t", 0): Errors.NONE}
            assert (await txn_produce(c, "t", txn_batch(pid, [b"z"], seq=2)))["error_code"] == Errors.NONE
            fenced = await markers(c, "t", pid, False, coordinator_epoch=4)
            assert fenced == {("t", 0): Errors.TRANSACTION_COORDINATOR_FENCED}
            r = await c.send(m.WRITE_TXN_MARKERS, 0, {"markers": []})
            assert r["markers"] == []
            d = await c.send(m.DESCRIBE_PRODUCERS, 0, {"topics": [
                {"name": "nope", "partition_indexes": [0]}, {"name": "bad name!", "partition_indexes": [0]},
                {"name": "t", "partition_indexes": [3]}]})
            codes = [t["partitions"][0]["error_code"] for t in d["topics"]]
            assert codes == [Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.INVALID_TOPIC_EXCEPTION,
                             Errors.UNKNOWN_TOPIC_OR_PARTITION]

    run(main)


def test_transactional_produce_checks(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, **NO_VERIFY) as (_, c):
            assert (await create(c, "t"))["error_code"] == Errors.NONE
            pid = await producer_id(c)
            # A transactional batch needs the request's transactional id (Kafka's authorization).
            r = await txn_produce(c, "t", txn_batch(pid, [b"x"]), txn_id=None)
            assert r["error_code"] == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            # A transactional id with plain batches is accepted, as by Kafka.
            plain = build_batch([(b"k", b"v", [], 1_000)])
            assert (await txn_produce(c, "t", plain, txn_id="tx"))["error_code"] == Errors.NONE
            # A client may not write markers: control batches are the coordinator's.
            ctl = build_end_txn_marker(pid, 0, 0, True, 1_000)
            assert (await txn_produce(c, "t", ctl))["error_code"] != Errors.NONE
            # Transactional batches of two producers in one request.
            p2 = await producer_id(c)
            assert (await create(c, "u"))["error_code"] == Errors.NONE
            r2 = await c.send(m.PRODUCE, 9, {"transactional_id": "tx", "acks": -1, "timeout_ms": 5000, "topic_data": [
                {"name": "t", "partition_data": [{"index": 0, "records": txn_batch(pid, [b"a"])}]},
                {"name": "u", "partition_data": [{"index": 0, "records": txn_batch(p2, [b"b"])}]}]})
            codes = {p["error_code"] for t in r2["responses"] for p in t["partition_responses"]}
            assert codes == {Errors.INVALID_PRODUCER_ID_MAPPING}

    run(main)


def test_verification_without_a_coordinator_refuses_the_append(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path) as (_, c):  # transaction.partition.verification.enable: true
            assert (await create(c, "t"))["error_code"] == Errors.NONE
            pid = await producer_id(c)
            r = await txn_produce(c, "t", txn_batch(pid, [b"x"]))
            # No __transaction_state leader to ask: retriable for every client, nothing appended.
            assert r["error_code"] == Errors.NOT_ENOUGH_REPLICAS
            assert "COORDINATOR_NOT_AVAILABLE" in r["error_message"]
            assert (await fetch(c, "t", 0, 0))["high_watermark"] == 0

    run(main)


def test_read_committed_long_poll_completes_when_the_marker_moves_the_lso(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path, **NO_VERIFY) as (_, c):
            assert (await create(c, "t"))["error_code"] == Errors.NONE
            pid = await producer_id(c)
            assert (await txn_produce(c, "t", txn_batch(pid, [b"x"])))["error_code"] == Errors.NONE
            other = NetworkClient(c.host, c.port)
            await other.connect()
            try:
                waiting = asyncio.ensure_future(fetch(other, "t", 0, 1, max_wait=10_000))
                await asyncio.sleep(0.3)
                assert not waiting.done()  # nothing stable to read yet
                assert await markers(c, "t", pid, True) == {("t", 0): Errors.NONE}
                got = await asyncio.wait_for(waiting, 5)
                assert values(got) == [b"x"] and got["last_stable_offset"] == 2
            finally:
                await other.close()

    run(main)


def test_produce_is_verified_with_the_coordinator_once_per_transaction(tmp_path: Path) -> None:
    async def main() -> None:
        async with broker(tmp_path) as (server, c):
            assert server.broker is not None and server.broker.broker_apis is not None
            verifier = server.broker.broker_apis.txn_apis.verifier
            assert verifier is not None and verifier.manager is not None
            fake = FakeCoordinator()
            verifier.manager.client_factory = lambda _node: fake  # type: ignore[assignment, return-value]
            verifier.manager.coordinator_for = lambda _txn: NODE  # type: ignore[method-assign]
            assert (await create(c, "t"))["error_code"] == Errors.NONE
            pid = await producer_id(c)
            # Not added to the transaction: refused, nothing appended.
            r = await txn_produce(c, "t", txn_batch(pid, [b"x"]), txn_id="tx")
            assert r["error_code"] == Errors.INVALID_TXN_STATE
            assert r["error_message"] == "Partition was not added to the transaction"
            assert (await fetch(c, "t", 0, 0))["high_watermark"] == 0
            fake.added["tx"] = {("t", 0)}
            assert (await txn_produce(c, "t", txn_batch(pid, [b"x"]), txn_id="tx"))["error_code"] == Errors.NONE
            asked = len(fake.requests)
            (_, body) = fake.requests[-1]
            assert body["transactions"][0]["producer_id"] == pid and body["transactions"][0]["transactional_id"] == "tx"
            assert (await txn_produce(c, "t", txn_batch(pid, [b"y"], seq=1), txn_id="tx"))["error_code"] == Errors.NONE
            assert len(fake.requests) == asked  # verified once per transaction and partition
            assert await markers(c, "t", pid, True) == {("t", 0): Errors.NONE}
            fake.added["tx"] = set()  # the next transaction has not added the partition
            r = await txn_produce(c, "t", txn_batch(pid, [b"z"], seq=2), txn_id="tx")
            assert r["error_code"] == Errors.INVALID_TXN_STATE and len(fake.requests) == asked + 1

    run(main)


def test_write_txn_markers_on_a_follower_is_not_leader_and_waits_for_acks_all(tmp_path: Path) -> None:
    """Through TxnPartitionApis on a ReplicaManager driven by hand: a follower answers
    NOT_LEADER_OR_FOLLOWER; a leader with a follower in its ISR answers once the HW passes the
    marker (acks=-1), and only then are the marker listeners told."""
    async def main() -> None:
        lm = LogManager([str(tmp_path)], LogConfig(), lambda: 0)
        worker = ManualLogWorker()
        rm = ReplicaManager(1, lm, KRaftMetadataCache(), lambda _t: LogConfig(), lambda: 0,
                            timer=FakeTimer(), log_worker=worker)
        heard: list[tuple[str, int, int, bool]] = []
        rm.txn_marker_listeners.append(lambda *a: heard.append(a))
        apis = TxnPartitionApis(rm, lambda: 30_000)
        tid = uuid.UUID(int=3)
        rm.make_leaders([PartitionState("a", 0, tid, leader=1, leader_epoch=0, isr=(1, 2), replicas=(1, 2),
                                        partition_epoch=0)])
        rm.make_followers([PartitionState("b", 0, tid, leader=2, leader_epoch=0, isr=(1, 2), replicas=(1, 2),
                                          partition_epoch=0)])
        worker.run_all()
        req = {"markers": [{"producer_id": 9, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": 0,
                            "topics": [{"name": "a", "partition_indexes": [0]}, {"name": "b", "partition_indexes": [0]}]}]}
        answer = asyncio.ensure_future(apis.handle_write_txn_markers(None, req))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        assert not answer.done() and heard == []  # the follower of "a" has not fetched the marker
        p = rm.partitions[("a", 0)]
        assert p.log is not None and p.log.log_end_offset == 1
        rm.fetch_messages(0, 1, 1 << 20, 0, [FetchPartitionRequest("a", 0, 1, 1 << 20)], replica_id=2)
        resp = await asyncio.wait_for(answer, 5)
        codes = {(t["name"], q["partition_index"]): q["error_code"] for t in resp["markers"][0]["topics"]
                 for q in t["partitions"]}
        assert codes == {("a", 0): Errors.NONE, ("b", 0): Errors.NOT_LEADER_OR_FOLLOWER}
        assert heard == [("a", 0, 9, True)]
        rm.shutdown()
        for lg in lm.all_logs().values():
            lg.close()

    asyncio.run(main())


def test_verification_and_markers_with_the_brokers_own_transaction_coordinator(tmp_path: Path) -> None:
    """The whole seam in one process: produce verified with the real coordinator over the
    network (AddPartitionsToTxn v4 verify_only), EndTxn making the coordinator send its
    WriteTxnMarkers here, read_committed seeing the records once the marker is acknowledged."""
    async def main() -> None:
        async with broker(tmp_path, **PROPS) as (_, c):
            assert (await create(c, "t"))["error_code"] == Errors.NONE
            await find_txn_coordinator(c, "tx")
            ip = await init_pid(c, "tx")
            assert ip["error_code"] == Errors.NONE
            pid, epoch = ip["producer_id"], ip["producer_epoch"]
            # The partition is not in the transaction: the coordinator says so, nothing appended.
            r = await txn_produce(c, "t", txn_batch(pid, [b"early"], epoch=epoch))
            assert r["error_code"] == Errors.INVALID_TXN_STATE, r
            assert (await fetch(c, "t", 0, 0))["high_watermark"] == 0
            assert await add_partitions(c, "tx", pid, epoch, {"t": [0]}) == {("t", 0): Errors.NONE}
            assert (await txn_produce(c, "t", txn_batch(pid, [b"x"], epoch=epoch)))["error_code"] == Errors.NONE
            assert (await fetch(c, "t", 0, 1))["last_stable_offset"] == 0
            r = await c.send(g.END_TXN, 3, {"transactional_id": "tx", "producer_id": pid, "producer_epoch": epoch,
                                            "committed": True})
            assert r["error_code"] == Errors.NONE
            got: dict[str, Any] = {}
            for _ in range(200):  # the coordinator's markers arrive asynchronously; bounded wait
                got = await fetch(c, "t", 0, 1)
                if got["last_stable_offset"] == 2:
                    break
                await asyncio.sleep(0.05)
            assert got["last_stable_offset"] == 2 and values(got) == [b"x"], got


def test_produce_v12_with_transaction_version_2_adds_the_partition(tmp_path: Path) -> None:
    """KIP-890 part 2: a Produce v12 of a transactional producer while transaction.version 2 is
    finalized has the coordinator add the partition (AddPartitionsToTxn v5 without verify_only),
    even with transaction.partition.verification.enable=false; v11 (or TV < 2) does not."""
    from test_add_partitions_to_txn_manager import NODE, FakeCoordinator

    from odradek.metadata.metadata_cache import FinalizedFeatures

    async def main() -> None:
        async with broker(tmp_path, **NO_VERIFY) as (server, c):
            apis = server.broker.broker_apis
            verifier = apis.txn_apis.verifier
            assert verifier is not None and verifier.manager is not None
            fake = FakeCoordinator()
            verifier.manager.client_factory = lambda _node: fake  # type: ignore[assignment, return-value]
            verifier.manager.coordinator_for = lambda _txn: NODE  # type: ignore[method-assign]
            assert (await create(c, "t"))["error_code"] == Errors.NONE
            pid = await producer_id(c)

            async def produce(version: int, data: bytes) -> dict[str, Any]:
                r = await c.send(m.PRODUCE, version, {
                    "transactional_id": "tx", "acks": -1, "timeout_ms": 5000,
                    "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": data}]}]})
                return r["responses"][0]["partition_responses"][0]  # type: ignore[no-any-return]

            # transaction.version 0: v12 appends unverified (verification disabled), as v11.
            assert (await produce(12, txn_batch(pid, [b"a"])))["error_code"] == Errors.NONE
            assert fake.requests == []
            assert await markers(c, "t", pid, False) == {("t", 0): Errors.NONE}
            apis.finalized_features = lambda: FinalizedFeatures({"transaction.version": 2}, 5)
            assert (await produce(11, txn_batch(pid, [b"b"], seq=1)))["error_code"] == Errors.NONE
            assert fake.requests == []  # v11: a transactions-version-1 producer added it itself
            assert await markers(c, "t", pid, False) == {("t", 0): Errors.NONE}
            assert (await produce(12, txn_batch(pid, [b"c"], seq=2)))["error_code"] == Errors.NONE
            ((version, body),) = fake.requests
            assert version == 5 and body["transactions"][0]["verify_only"] is False
            assert fake.added["tx"] == {("t", 0)}
            # Once added, the rest of the transaction is not sent again.
            assert (await produce(12, txn_batch(pid, [b"d"], seq=3)))["error_code"] == Errors.NONE
            assert len(fake.requests) == 1

    run(main)
