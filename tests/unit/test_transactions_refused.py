"""Transactional requests fail at once with an error clients treat as fatal, and the broker logs
one line per client and transactional id (there is no transaction coordinator yet)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from test_broker_apis import batch, broker, create, produce, run

from odradek.protocol import messages as m
from odradek.protocol.errors import Errors
from odradek.server.transactions import TRANSACTIONS_UNSUPPORTED, TransactionRefusalLog


def test_transactional_requests_are_refused_fatally(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with broker(tmp_path) as (_, c):
            for _ in range(3):  # retried: still one log line
                r = await c.send(m.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["tx-1"]})
                (coord,) = r["coordinators"]
                assert coord["error_code"] == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED == 53
                assert coord["error_message"] == TRANSACTIONS_UNSUPPORTED
            old = await c.send(m.FIND_COORDINATOR, 1, {"key": "tx-1", "key_type": 1})
            assert old["error_code"] == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            assert old["error_message"] == TRANSACTIONS_UNSUPPORTED
            ip = await c.send(m.INIT_PRODUCER_ID, 4, {"transactional_id": "tx-2", "transaction_timeout_ms": 60000})
            assert ip["error_code"] == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            assert ip["producer_id"] == -1
            # the idempotent producer is unaffected
            ip = await c.send(m.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000})
            assert ip["error_code"] == Errors.NONE and ip["producer_id"] >= 0
            assert (await create(c, "t"))["error_code"] == Errors.NONE
            r = await c.send(m.PRODUCE, 9, {"transactional_id": "tx-3", "acks": -1, "timeout_ms": 5000,
                                            "topic_data": [{"name": "t", "partition_data": [
                                                {"index": 0, "records": batch([b"v"])}]}]})
            # Produce is no longer refused: a transactional id with plain batches is accepted,
            # as by Kafka (tests/unit/test_txn_partition.py covers transactional batches).
            p = r["responses"][0]["partition_responses"][0]
            assert p["error_code"] == Errors.NONE
            assert (await produce(c, "t", 0, batch([b"v"])))["error_code"] == Errors.NONE

    with caplog.at_level(logging.WARNING, logger="odradek.server.transactions"):
        run(main)
    lines = [r.getMessage() for r in caplog.records if r.name == "odradek.server.transactions"]
    assert len([x for x in lines if "'tx-1'" in x]) == 1, lines
    assert len([x for x in lines if "'tx-2'" in x and "InitProducerId" in x]) == 1, lines
    assert not [x for x in lines if "'tx-3'" in x], lines


def test_refusal_log_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    refusals = TransactionRefusalLog(limit=2)
    with caplog.at_level(logging.WARNING, logger="odradek.server.transactions"):
        for tid in ("a", "b", "b", "c", "a"):  # "a" is forgotten once "c" pushes it out
            refusals.refused("FindCoordinator", tid, "client\nforged", "127.0.0.1:5555")
    assert len(refusals._seen) == 2
    ids = [r.args[1] for r in caplog.records if isinstance(r.args, tuple)]
    assert ids == ["a", "b", "c", "a"]
    assert all("\n" not in r.getMessage() for r in caplog.records)
