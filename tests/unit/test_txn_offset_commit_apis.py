"""TxnOffsetCommit through the broker in-process (our own client over a real socket, the real
ReplicaManager and log): advertised in ApiVersions, the commit lands in __consumer_offsets as
the producer's transactional batch and is pending (OffsetFetch require_stable answers
UNSTABLE_OFFSET_COMMIT, a plain fetch the committed offset) until the replica manager reports
the producer's COMMIT marker to its txn_marker_listeners; a request without a producer id and
one to a group this broker does not coordinate are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_consumer_group_apis import broker, coordinator_ready, create_topic, run

from odradek.coordinator.group.group_metadata_manager import OFFSETS_TOPIC
from odradek.log.append_origin import AppendOrigin
from odradek.network.client import NetworkClient
from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.records.batch import iter_batches
from odradek.records.control_batch import build_end_txn_marker

PID, EPOCH = 4242, 3


def txn_commit_body(group: str, offset: int, producer_id: int = PID, **member: Any) -> dict[str, Any]:
    return {
        "transactional_id": "tx", "group_id": group, "producer_id": producer_id,
        "producer_epoch": EPOCH, "generation_id": -1, "member_id": "", "group_instance_id": None,
        **member,
        "topics": [{"name": "in", "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}],
    }


def partition_error(r: dict[str, Any]) -> int:
    return int(r["topics"][0]["partitions"][0]["error_code"])


async def fetch(c: NetworkClient, group: str, stable: bool) -> tuple[int, int]:
    r = await c.send(m.OFFSET_FETCH, 8, {"groups": [
        {"group_id": group, "topics": [{"name": "in", "partition_indexes": [0]}]}],
        "require_stable": stable})
    p = r["groups"][0]["topics"][0]["partitions"][0]
    return p["error_code"], p["committed_offset"]


def test_txn_offset_commit_pending_until_the_marker(tmp_path: Path) -> None:
    async def body() -> None:
        # No transaction coordinator state here: KIP-890 verification (tested with a real client
        # in tests/integration/test_txn_offsets.py) is off so the group side is tested alone.
        overrides = {"offsets.topic.num.partitions": "1", "transaction.partition.verification.enable": "false"}
        async with broker(tmp_path, **overrides) as (server, c):
            versions = await c.send(m.API_VERSIONS, 3, {"client_software_name": "t",
                                                        "client_software_version": "1"})
            advertised = {a["api_key"]: (a["min_version"], a["max_version"]) for a in versions["api_keys"]}
            assert advertised[m.TXN_OFFSET_COMMIT.api_key] == (0, 5)  # v5: KIP-890 part 2
            await create_topic(c, "in", 1)
            await coordinator_ready(c, "g")
            r = await c.send(m.OFFSET_COMMIT, 8, {
                "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "topics": [{"name": "in", "partitions": [
                    {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                     "committed_metadata": ""}]}]})
            assert partition_error(r) == Errors.NONE
            # v0 (no member fields) and v3 (with them); the same producer epoch twice.
            assert partition_error(await c.send(m.TXN_OFFSET_COMMIT, 0, txn_commit_body("g", 8))) == 0
            assert partition_error(await c.send(m.TXN_OFFSET_COMMIT, 3, txn_commit_body("g", 9))) == 0
            assert await fetch(c, "g", stable=False) == (Errors.NONE, 5)
            assert await fetch(c, "g", stable=True) == (Errors.UNSTABLE_OFFSET_COMMIT, -1)
            # In the log: the producer's transactional batches.
            rm = server.broker.replica_manager
            lg = rm.partitions[(OFFSETS_TOPIC, 0)].log
            data = lg.read(0, 1 << 20, isolation_max_offset=lg.log_end_offset).to_bytes()
            headers = [(h.producer_id, h.producer_epoch, h.is_transactional) for h in iter_batches(data)]
            assert headers[-2:] == [(PID, EPOCH, True), (PID, EPOCH, True)]
            # A COMMIT marker is appended and acknowledged: the broker tells the listeners.
            marker = build_end_txn_marker(PID, EPOCH, 0, True, 1)
            status = rm.append_records(5000, -1, {(OFFSETS_TOPIC, 0): marker}, AppendOrigin.COORDINATOR)
            if not isinstance(status, dict):
                status = await status
            assert status[(OFFSETS_TOPIC, 0)].error == Errors.NONE
            for listener in list(rm.txn_marker_listeners):
                listener(OFFSETS_TOPIC, 0, PID, True)
            assert await fetch(c, "g", stable=True) == (Errors.NONE, 9)

            # Refusals: no producer id; an unknown member; a generation for a group that does not
            # exist; an empty group id.
            none = await c.send(m.TXN_OFFSET_COMMIT, 3, txn_commit_body("g", 1, producer_id=-1))
            assert partition_error(none) == Errors.INVALID_PRODUCER_ID_MAPPING
            unknown = await c.send(m.TXN_OFFSET_COMMIT, 3, txn_commit_body("g", 1, generation_id=2, member_id="m"))
            assert partition_error(unknown) == Errors.UNKNOWN_MEMBER_ID
            stale = await c.send(m.TXN_OFFSET_COMMIT, 3, txn_commit_body("new", 1, generation_id=2, member_id="m"))
            assert partition_error(stale) == Errors.ILLEGAL_GENERATION
            empty = await c.send(m.TXN_OFFSET_COMMIT, 3, txn_commit_body("", 1))
            assert partition_error(empty) == Errors.INVALID_GROUP_ID
            # The group coordinator lost its partition: NOT_COORDINATOR.
            server.broker.group_coordinator.metadata_manager.unload_partition(0)
            moved = await c.send(m.TXN_OFFSET_COMMIT, 3, txn_commit_body("g", 1))
            assert partition_error(moved) == Errors.NOT_COORDINATOR

    run(body)


def test_txn_offset_commit_v5_adds_the_offsets_partition_with_transaction_version_2(tmp_path: Path) -> None:
    """KIP-890 part 2: a transactions-version-2 producer sends no AddOffsetsToTxn; TxnOffsetCommit
    v5 (with transaction.version 2 finalized) has the coordinator add the group's offsets
    partition first, and a refusal fails the commit. v4, or a lower level, does not."""
    async def body() -> None:
        # Without KIP-890 part 1 verification: no producer was initialised here.
        overrides = {"offsets.topic.num.partitions": "1", "transaction.partition.verification.enable": "false"}
        async with broker(tmp_path, **overrides) as (server, c):
            group_apis = server.broker.broker_apis.handlers[m.TXN_OFFSET_COMMIT.api_key].__self__
            assert group_apis.add_txn_partitions is not None  # wired to AddPartitionsToTxnManager
            calls: list[tuple[str, int, int, list[tuple[str, int]]]] = []
            refuse: dict[tuple[str, int], Errors] = {}

            async def add(tid: str, pid: int, epoch: int, tps: list[tuple[str, int]]) -> dict[tuple[str, int], Errors]:
                calls.append((tid, pid, epoch, tps))
                return {tp: refuse[tp] for tp in tps if tp in refuse}

            group_apis.add_txn_partitions = add
            await create_topic(c, "in", 1)
            await coordinator_ready(c, "g")
            # transaction.version 0: v5 commits without adding (a version-1 producer added it).
            assert partition_error(await c.send(m.TXN_OFFSET_COMMIT, 5, txn_commit_body("g", 1))) == 0
            assert calls == []
            group_apis.transaction_version = lambda: 2
            assert partition_error(await c.send(m.TXN_OFFSET_COMMIT, 4, txn_commit_body("g", 2))) == 0
            assert calls == []
            assert partition_error(await c.send(m.TXN_OFFSET_COMMIT, 5, txn_commit_body("g", 3))) == 0
            assert calls == [("tx", PID, EPOCH, [(OFFSETS_TOPIC, 0)])]
            rm = server.broker.replica_manager
            end = rm.partitions[(OFFSETS_TOPIC, 0)].log.log_end_offset
            refuse[(OFFSETS_TOPIC, 0)] = Errors.INVALID_PRODUCER_EPOCH
            r = await c.send(m.TXN_OFFSET_COMMIT, 5, txn_commit_body("g", 4))
            assert partition_error(r) == Errors.INVALID_PRODUCER_EPOCH
            assert rm.partitions[(OFFSETS_TOPIC, 0)].log.log_end_offset == end  # nothing written
            refuse[(OFFSETS_TOPIC, 0)] = Errors.COORDINATOR_NOT_AVAILABLE  # retriable for clients
            r = await c.send(m.TXN_OFFSET_COMMIT, 5, txn_commit_body("g", 4))
            assert partition_error(r) == Errors.COORDINATOR_LOAD_IN_PROGRESS

    run(body)
