"""Transactions under the deterministic simulator (tests/sim/txn_sim.py).

``test_transaction_schedules`` runs the seeds from conftest.py (150 by default; any number with
``ODRADEK_SIM_SCHEDULES=N``, one seed with ``ODRADEK_SIM_SEED=S``): transactional producers,
coordinator failovers (crashes, and zombies that keep sending markers), producer crashes and
zombies, clock jumps, partition leader restarts and a lossy, duplicating, reordering network.
Every invariant is checked after every loop step; a failure names the seed, the command that
replays it exactly and the last events.

``test_simulator_catches_broken_rules`` breaks one rule at a time (a monkeypatched mutation) and
requires a failing seed, so that the invariants are known to bite.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest

from odradek.coordinator.transaction import transaction_coordinator as tc
from odradek.coordinator.transaction import transaction_metadata as tm
from odradek.log import producer_state as ps
from odradek.records.batch import RecordBatchHeader
from odradek.records.control_batch import EndTxnMarker

from .mutations import assert_a_schedule_catches
from .txn_sim import Result, Violation, run_schedule

REPLAY = "ODRADEK_SIM_SEED={seed} python3 -m pytest tests/sim/test_transaction_sim.py -k test_transaction_schedules -q"


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    logger = logging.getLogger("odradek")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def test_transaction_schedules(transaction_sim_seeds: list[int]) -> None:
    results: list[Result] = []
    for seed in transaction_sim_seeds:
        replay = REPLAY.format(seed=seed)
        try:
            results.append(run_schedule(seed))
        except Violation as e:
            pytest.fail(f"seed {seed}: {e}\nreplay with: {replay}", pytrace=False)
        except Exception as e:  # a crash of a core is a failure of the schedule too
            raise AssertionError(f"seed {seed} crashed; replay with: {replay}") from e
    assert all(r.committed + r.aborted > 0 for r in results)
    if len(results) >= 50:  # the faults did their work
        assert sum(r.coordinator_failovers for r in results) > len(results) // 2
        assert sum(r.fenced_producers for r in results) > len(results) // 5
        assert sum(r.timeouts for r in results) > len(results) // 10
        assert sum(r.aborted for r in results) > len(results)
        assert sum(r.visible_records for r in results) > 10 * len(results)


def test_replay_is_deterministic() -> None:
    first, second = run_schedule(7), run_schedule(7)
    assert (first.steps, first.committed, first.aborted) == (second.steps, second.committed, second.aborted)
    assert first.trace == second.trace
    assert first.committed > 0


# -- mutations: each must be caught ----------------------------------------------------------------

ORIGINAL_APPEND_MARKER = ps.ProducerAppend.append_marker
ORIGINAL_FIRST_UNSTABLE = ps.ProducerStateManager.first_unstable_offset


def _marker_without_coordinator_epoch(self: ps.ProducerAppend, h: RecordBatchHeader, marker: EndTxnMarker) -> None:
    self._entry(h.producer_id).coordinator_epoch = -1  # any coordinator epoch is accepted
    ORIGINAL_APPEND_MARKER(self, h, marker)


def _forget_unreplicated(self: ps.ProducerStateManager, high_watermark: int) -> int | None:
    self._unreplicated = []  # a completed transaction is stable before its marker is replicated
    return ORIGINAL_FIRST_UNSTABLE(self, high_watermark)


def _fence_without_bump(self: tm.TransactionMetadata, now_ms: int) -> tm.TxnTransitMetadata:
    return self._prepare(tm.S.PREPARE_ABORT, now_ms=now_ms)  # the old producer is not fenced


def _reload_flips_outcome(self: tc.TransactionCoordinator, partition: int, cepoch: int,
                          metas: list[tm.TransactionMetadata]) -> None:
    for meta in metas:
        if meta.state in (tm.S.PREPARE_COMMIT, tm.S.PREPARE_ABORT):
            self._send_markers(meta, cepoch, meta.state != tm.S.PREPARE_COMMIT)  # the wrong marker


MUTATIONS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], list[int]]] = {
    # name: (how to break a rule, seeds to try first)
    "the LSO ignores open transactions": (
        lambda mp: mp.setattr(ps.ProducerStateManager, "first_unstable_offset", lambda self, hw: None),
        [0],
    ),
    "the LSO passes completed transactions whose marker is not replicated": (
        lambda mp: mp.setattr(ps.ProducerStateManager, "first_unstable_offset", _forget_unreplicated),
        [0],
    ),
    "a marker skips the coordinator epoch check": (
        lambda mp: mp.setattr(ps.ProducerAppend, "append_marker", _marker_without_coordinator_epoch),
        [9, 11],  # a frozen zombie coordinator's marker closes the next transaction
    ),
    "a loaded coordinator does not send the markers of prepared transactions again": (
        lambda mp: mp.setattr(tc.TransactionCoordinator, "_on_loaded", lambda self, p, e, metas: None),
        [2],
    ),
    "a loaded coordinator sends the opposite markers of prepared transactions": (
        lambda mp: mp.setattr(tc.TransactionCoordinator, "_on_loaded", _reload_flips_outcome),
        [2],
    ),
    "a coordinator abort (timeout, new producer) does not bump the epoch": (
        lambda mp: mp.setattr(tm.TransactionMetadata, "prepare_fence_producer_epoch_abort", _fence_without_bump),
        [3],
    ),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_simulator_catches_broken_rules(mutation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    breaks, first_seeds = MUTATIONS[mutation]
    breaks(monkeypatch)
    assert_a_schedule_catches(mutation, run_schedule, Violation, first_seeds, 60)


