"""Transactional produce fails at once with an error clients treat as fatal, and the broker logs
one line per client and transactional id (FindCoordinator and InitProducerId for transactional
ids are the transaction coordinator's now: tests/unit/test_txn_apis.py)."""

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
            # the idempotent producer is unaffected
            ip = await c.send(m.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000})
            assert ip["error_code"] == Errors.NONE and ip["producer_id"] >= 0
            assert (await create(c, "t"))["error_code"] == Errors.NONE
            r = await c.send(m.PRODUCE, 9, {"transactional_id": "tx-3", "acks": -1, "timeout_ms": 5000,
                                            "topic_data": [{"name": "t", "partition_data": [
                                                {"index": 0, "records": batch([b"v"])}]}]})
            p = r["responses"][0]["partition_responses"][0]
            assert p["error_code"] == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            assert p["error_message"] == TRANSACTIONS_UNSUPPORTED
            assert (await produce(c, "t", 0, batch([b"v"])))["error_code"] == Errors.NONE

    with caplog.at_level(logging.WARNING, logger="odradek.server.transactions"):
        run(main)
    lines = [r.getMessage() for r in caplog.records if r.name == "odradek.server.transactions"]
    assert len([x for x in lines if "'tx-3'" in x and "Produce" in x]) == 1, lines


def test_refusal_log_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    refusals = TransactionRefusalLog(limit=2)
    with caplog.at_level(logging.WARNING, logger="odradek.server.transactions"):
        for tid in ("a", "b", "b", "c", "a"):  # "a" is forgotten once "c" pushes it out
            refusals.refused("FindCoordinator", tid, "client\nforged", "127.0.0.1:5555")
    assert len(refusals._seen) == 2
    ids = [r.args[1] for r in caplog.records if isinstance(r.args, tuple)]
    assert ids == ["a", "b", "c", "a"]
    assert all("\n" not in r.getMessage() for r in caplog.records)
