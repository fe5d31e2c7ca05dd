"""KIP-890 verification of transactional produce: AddPartitionsToTxnManager (batching per
coordinator, error mapping) and TransactionVerifier (verified producers remembered until their
marker, verifications voided by a marker written meanwhile), against a fake coordinator."""

from __future__ import annotations

import asyncio
from typing import Any

from odradek.network.client import ConnectionClosed
from odradek.protocol.errors import Errors
from odradek.protocol.schema import Api
from odradek.server.add_partitions_to_txn_manager import (
    AddPartitionsToTxnManager,
    TransactionVerifier,
    produce_error,
)
from odradek.server.replica_fetcher_manager import SourceBroker

NODE = SourceBroker(7, "127.0.0.1", 1)


class FakeCoordinator:
    """Answers verify_only AddPartitionsToTxn: partitions in ``added[txn id]`` are in the
    transaction, the others INVALID_TXN_STATE; without verify_only (KIP-890 part 2) it adds
    them. Holds each request until ``release`` is set."""

    def __init__(self) -> None:
        self.added: dict[str, set[tuple[str, int]]] = {}
        self.requests: list[tuple[int, dict[str, Any]]] = []
        self.release = asyncio.Event()
        self.release.set()
        self.fail: Exception | None = None
        self.top_error = Errors.NONE
        self.partition_error: Errors | None = None

    async def send(self, api: Api, version: int, body: dict[str, Any]) -> dict[str, Any]:
        assert api.name == "AddPartitionsToTxn"
        self.requests.append((version, body))
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        results = []
        for t in body["transactions"]:
            added = self.added.setdefault(t["transactional_id"], set())
            if not t["verify_only"]:
                assert version >= 5
                added.update((tp["name"], i) for tp in t["topics"] for i in tp["partitions"])
            results.append({"transactional_id": t["transactional_id"], "topic_results": [
                {"name": tp["name"], "results_by_partition": [
                    {"partition_index": i, "partition_error_code":
                     self.partition_error or (Errors.NONE if (tp["name"], i) in added else Errors.INVALID_TXN_STATE)}
                    for i in tp["partitions"]]} for tp in t["topics"]]})
        return {"throttle_time_ms": 0, "error_code": self.top_error, "results_by_transaction": results}

    async def close(self) -> None:
        pass


def manager(fake: FakeCoordinator, node: SourceBroker | None = NODE) -> AddPartitionsToTxnManager:
    mgr = AddPartitionsToTxnManager(None, "PLAINTEXT", 5000, 50, client_factory=lambda _s: fake)  # type: ignore[arg-type, return-value]
    mgr.coordinator_for = lambda _txn: node  # type: ignore[method-assign]
    return mgr


def test_verified_partitions_pass_others_are_refused_and_requests_are_batched() -> None:
    async def main() -> None:
        fake = FakeCoordinator()
        fake.added["tx"] = {("t", 0)}
        mgr = manager(fake)
        fake.release.clear()
        first = asyncio.ensure_future(mgr.verify("tx", 1, 0, [("t", 0)]))
        await asyncio.sleep(0)
        # While the first request is in flight, two more verifications wait and go together.
        second = asyncio.ensure_future(mgr.verify("tx", 1, 0, [("t", 1)]))
        third = asyncio.ensure_future(mgr.verify("other", 2, 0, [("t", 0)]))
        await asyncio.sleep(0)
        fake.release.set()
        assert await first == {}
        assert await second == {("t", 1): Errors.INVALID_TXN_STATE}
        assert await third == {("t", 0): Errors.INVALID_TXN_STATE}
        assert len(fake.requests) == 2
        assert all(v == 4 for v, _ in fake.requests)
        assert sorted(t["transactional_id"] for t in fake.requests[1][1]["transactions"]) == ["other", "tx"]
        await mgr.close()

    asyncio.run(main())


def test_error_mapping_and_fencing_of_older_epochs() -> None:
    async def main() -> None:
        fake = FakeCoordinator()
        mgr = manager(fake)
        fake.partition_error = Errors.PRODUCER_FENCED
        assert await mgr.verify("tx", 1, 0, [("t", 0)]) == {("t", 0): Errors.INVALID_PRODUCER_EPOCH}
        fake.partition_error = None
        fake.top_error = Errors.CLUSTER_AUTHORIZATION_FAILED
        assert await mgr.verify("tx", 1, 0, [("t", 0)]) == {("t", 0): Errors.INVALID_TXN_STATE}
        fake.top_error = Errors.NONE
        fake.fail = ConnectionClosed("gone")
        assert await mgr.verify("tx", 1, 0, [("t", 0)]) == {("t", 0): Errors.NETWORK_EXCEPTION}
        fake.fail = None
        # Two epochs of one transactional id waiting together: the older is fenced.
        fake.release.clear()
        blocker = asyncio.ensure_future(mgr.verify("x", 9, 0, [("t", 0)]))
        await asyncio.sleep(0)
        old = asyncio.ensure_future(mgr.verify("tx", 1, 3, [("t", 0)]))
        await asyncio.sleep(0)
        new = asyncio.ensure_future(mgr.verify("tx", 1, 4, [("t", 0)]))
        await asyncio.sleep(0)
        assert await old == {("t", 0): Errors.INVALID_PRODUCER_EPOCH}
        older = await mgr.verify("tx", 1, 2, [("t", 0)])
        assert older == {("t", 0): Errors.INVALID_PRODUCER_EPOCH}
        fake.added["tx"] = {("t", 0)}
        fake.release.set()
        assert await new == {}
        await blocker
        await mgr.close()

    asyncio.run(main())


def test_no_coordinator_and_produce_error_translation() -> None:
    async def main() -> None:
        mgr = manager(FakeCoordinator(), node=None)
        assert await mgr.verify("tx", 1, 0, [("t", 0)]) == {("t", 0): Errors.COORDINATOR_NOT_AVAILABLE}

    asyncio.run(main())
    err, msg = produce_error(Errors.COORDINATOR_NOT_AVAILABLE)
    assert err == Errors.NOT_ENOUGH_REPLICAS and msg is not None and "COORDINATOR_NOT_AVAILABLE" in msg
    assert produce_error(Errors.INVALID_TXN_STATE) == (
        Errors.INVALID_TXN_STATE, "Partition was not added to the transaction")
    assert produce_error(Errors.INVALID_PRODUCER_EPOCH) == (Errors.INVALID_PRODUCER_EPOCH, None)


def test_verifier_remembers_until_the_marker_and_a_marker_voids_a_verification_in_flight() -> None:
    async def main() -> None:
        fake = FakeCoordinator()
        fake.added["tx"] = {("t", 0), ("t", 1)}
        verifier = TransactionVerifier(manager(fake), lambda: True)
        assert await verifier.verify("tx", 1, 0, [("t", 0)]) == {}
        assert len(fake.requests) == 1
        # Verified: the next append of this transaction asks nobody.
        assert await verifier.verify("tx", 1, 0, [("t", 0)]) == {}
        assert len(fake.requests) == 1
        # Another epoch is another transaction.
        assert verifier.needs_verification(("t", 0), 1, 1)
        verifier.on_marker(("t", 0), 1)
        assert verifier.needs_verification(("t", 0), 1, 0)
        # A marker written while the verification is in flight: the append is refused.
        fake.release.clear()
        pending = asyncio.ensure_future(verifier.verify("tx", 1, 0, [("t", 1)]))
        await asyncio.sleep(0)
        verifier.on_marker(("t", 1), 1)
        fake.release.set()
        (err, _msg), = (await pending).values()
        assert err == Errors.INVALID_TXN_STATE
        assert verifier.needs_verification(("t", 1), 1, 0)
        # Leadership changes forget what was verified.
        assert await verifier.verify("tx", 1, 0, [("t", 1)]) == {}
        verifier.on_leadership_change("t", 1, True, 3)
        assert verifier.needs_verification(("t", 1), 1, 0)
        # Disabled (transaction.partition.verification.enable=false): nothing asked.
        n = len(fake.requests)
        off = TransactionVerifier(manager(fake), lambda: False)
        assert await off.verify("tx", 1, 0, [("t", 5)]) == {}
        assert len(fake.requests) == n

    asyncio.run(main())


def test_verifier_memory_is_bounded() -> None:
    verifier = TransactionVerifier(None, lambda: True, limit=3)
    for i in range(10):
        verifier._remember(("t", i), i, 0)
    assert verifier._size <= 3
    assert sum(len(v) for v in verifier._ongoing.values()) == verifier._size
    assert not verifier.needs_verification(("t", 9), 9, 0)  # the newest is kept


def test_close_answers_verifications_waiting_and_in_flight() -> None:
    async def main() -> None:
        fake = FakeCoordinator()
        fake.release.clear()  # the coordinator never answers
        mgr = manager(fake)
        in_flight = asyncio.ensure_future(mgr.verify("a", 1, 0, [("t", 0)]))
        await asyncio.sleep(0)
        waiting = asyncio.ensure_future(mgr.verify("b", 2, 0, [("t", 1)]))
        await asyncio.sleep(0)
        await mgr.close()
        assert await asyncio.wait_for(in_flight, 5) == {("t", 0): Errors.COORDINATOR_NOT_AVAILABLE}
        assert await asyncio.wait_for(waiting, 5) == {("t", 1): Errors.COORDINATOR_NOT_AVAILABLE}
        assert await mgr.verify("c", 3, 0, [("t", 2)]) == {("t", 2): Errors.COORDINATOR_NOT_AVAILABLE}


def test_transactions_version_2_adds_instead_of_verifying() -> None:
    async def main() -> None:
        fake = FakeCoordinator()
        mgr = manager(fake)
        # Verification alone refuses a partition the coordinator does not know ...
        assert await mgr.verify("tx", 1, 0, [("t", 0)]) == {("t", 0): Errors.INVALID_TXN_STATE}
        assert fake.requests[-1][0] == 4 and fake.requests[-1][1]["transactions"][0]["verify_only"] is True
        # ... the add form (v5, verify_only false) puts it in the transaction.
        assert await mgr.verify("tx", 1, 0, [("t", 0)], add=True) == {}
        version, body = fake.requests[-1]
        assert version == 5 and body["transactions"][0]["verify_only"] is False
        assert fake.added["tx"] == {("t", 0)}
        # The verifier adds even with transaction.partition.verification.enable=false, and
        # remembers the partition until its marker.
        verifier = TransactionVerifier(mgr, lambda: False)
        assert await verifier.verify("tx", 1, 0, [("t", 1)]) == {}  # disabled: nothing sent
        n = len(fake.requests)
        assert await verifier.verify("tx", 1, 0, [("t", 1)], add=True) == {}
        assert len(fake.requests) == n + 1 and ("t", 1) in fake.added["tx"]
        assert not verifier.needs_verification(("t", 1), 1, 0)
        assert await verifier.verify("tx", 1, 0, [("t", 1)], add=True) == {}
        assert len(fake.requests) == n + 1  # remembered
        verifier.on_marker(("t", 1), 1)
        assert verifier.needs_verification(("t", 1), 1, 1)  # the next transaction (bumped epoch)

    asyncio.run(main())
