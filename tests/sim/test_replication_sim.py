"""Partition replication under the deterministic simulator (tests/sim/replication_sim.py).

``test_replication_schedules`` runs the seeds from conftest.py (600 by default; any number with
``ODRADEK_SIM_SCHEDULES=N``, one seed with ``ODRADEK_SIM_SEED=S``) with unclean leader election
disabled: every invariant is asserted, acknowledged records are never lost. The unclean variant
runs a third as many with ``unclean.leader.election.enable=true``: losses are counted and
reported, not asserted. A failure names the seed and the command that replays it exactly.

``test_simulator_catches_broken_rules`` breaks one replication rule at a time (a monkeypatched
mutation: among them the two product bugs the simulator found) and requires a failing seed, so
that the invariants are known to bite.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from odradek.cluster import partition as partition_mod
from odradek.controller import election
from odradek.log.leader_epoch import UNDEFINED_EPOCH
from odradek.protocol.errors import Errors

from .mutations import assert_a_schedule_catches
from .replication_sim import Result, Violation, run_schedule

REPLAY = "ODRADEK_SIM_SEED={seed} python3 -m pytest tests/sim/test_replication_sim.py -k {test} -q"


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    logger = logging.getLogger("odradek")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def _run_schedules(seeds: list[int], unclean: bool, test: str) -> list[Result]:
    results = []
    for seed in seeds:
        replay = REPLAY.format(seed=seed, test=test)
        try:
            results.append(run_schedule(seed, unclean))
        except Violation as e:
            pytest.fail(f"seed {seed}: {e}\nreplay with: {replay}", pytrace=False)
        except Exception as e:  # a crash of a rule is a failure of the schedule too
            raise AssertionError(f"seed {seed} crashed; replay with: {replay}") from e
    return results


def test_replication_schedules(replication_sim_seeds: list[int]) -> None:
    results = _run_schedules(replication_sim_seeds, False, "'test_replication_schedules and not unclean'")
    assert all(r.lost_acked == 0 and r.lost_consumed == 0 for r in results)
    if len(results) >= 100:  # the faults did their work: failovers, truncations, acknowledgements
        assert sum(r.leader_epochs for r in results) > 2 * len(results)
        assert sum(r.truncations for r in results) > len(results)
        assert sum(r.acked for r in results) > 20 * len(results)


def test_replication_schedules_unclean(replication_sim_seeds: list[int]) -> None:
    seeds = replication_sim_seeds if len(replication_sim_seeds) == 1 else replication_sim_seeds[
        : max(1, len(replication_sim_seeds) // 3)
    ]
    results = _run_schedules(seeds, True, "test_replication_schedules_unclean")
    lost = sum(r.lost_acked for r in results)
    consumed = sum(r.lost_consumed for r in results)
    acked = sum(r.acked for r in results)
    print(
        f"unclean leader election: {lost} of {acked} acknowledged records lost, {consumed} records "
        f"consumers had seen, in {sum(1 for r in results if r.lost_acked)} of {len(results)} schedules"
    )
    if len(results) >= 50:
        assert lost > 0  # the simulator does produce the 2013 Jepsen case; clean runs lose none


def test_replay_is_deterministic() -> None:
    first, second = run_schedule(7), run_schedule(7)
    assert (first.steps, first.acked, first.truncations) == (second.steps, second.acked, second.truncations)
    assert first.trace == second.trace
    assert first.acked > 0


# -- mutations: each must be caught ----------------------------------------------------------------

ORIGINAL_MAKE_LEADER = partition_mod.Partition.make_leader
ORIGINAL_ALTER_DONE = partition_mod.Partition.alter_isr_done
ORIGINAL_OFFLINE = election.offline_partition_leader_election


def _hw_from_leader_only(self: partition_mod.Partition) -> bool:
    if self.log is None or not self.is_leader or self.log.log_end_offset <= self.log.high_watermark:
        return False
    self.log.high_watermark = self.log.log_end_offset
    return True


def _make_leader_drops_pending(self: partition_mod.Partition, *args: Any, **kwargs: Any) -> bool:
    result = ORIGINAL_MAKE_LEADER(self, *args, **kwargs)
    self.pending_isr = None
    return result


def _alter_error_drops_pending(
    self: partition_mod.Partition, proposed: tuple[int, ...], error: Errors, *args: Any
) -> bool:
    if error != Errors.NONE and self.pending_isr == proposed:
        self.pending_isr = None
        return False
    return ORIGINAL_ALTER_DONE(self, proposed, error, *args)


def _always_unclean(assignment: Any, isr: Any, live: Any, unclean_enabled: bool) -> tuple[int | None, bool]:
    return ORIGINAL_OFFLINE(assignment, (), live, True)


def _leader_answers_no_divergence(
    self: partition_mod.Partition, fetch_offset: int, max_bytes: int, isolation_level: int,
    min_one_message: bool, current_leader_epoch: int = -1, last_fetched_epoch: int = -1,
    for_follower: bool = False,
) -> Any:
    return ORIGINAL_READ(self, fetch_offset, max_bytes, isolation_level, min_one_message, current_leader_epoch,
                         UNDEFINED_EPOCH, for_follower)


ORIGINAL_READ = partition_mod.Partition.read_records

MUTATIONS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], list[int]]] = {
    # name: (how to break a rule, seeds to try first)
    "HW from the leader's log end alone": (
        lambda mp: mp.setattr(partition_mod.Partition, "maybe_increment_leader_hw", _hw_from_leader_only),
        [0],
    ),
    "metadata at the answered partition epoch drops a pending expand (bug found)": (
        lambda mp: mp.setattr(partition_mod.Partition, "make_leader", _make_leader_drops_pending),
        [237, 310],
    ),
    "any AlterPartition error drops the proposal (bug found)": (
        lambda mp: mp.setattr(partition_mod.Partition, "alter_isr_done", _alter_error_drops_pending),
        [700],
    ),
    "leader ignores the follower's last fetched epoch (no KIP-320 divergence)": (
        lambda mp: mp.setattr(partition_mod.Partition, "read_records", _leader_answers_no_divergence),
        [1],
    ),
    "offline election ignores the ISR (unclean while disabled)": (
        lambda mp: mp.setattr(election, "offline_partition_leader_election", _always_unclean),
        [0],
    ),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_simulator_catches_broken_rules(mutation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    breaks, first_seeds = MUTATIONS[mutation]
    breaks(monkeypatch)
    assert_a_schedule_catches(mutation, run_schedule, Violation, first_seeds, 150)
