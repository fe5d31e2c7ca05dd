"""The KRaft core under the deterministic simulator (tests/sim/raft_sim.py).

``test_raft_schedules`` runs the seeds from conftest.py (300 by default); a failure names the
seed and the command that replays it. ``test_simulator_catches_broken_cores`` breaks the core on
purpose (a monkeypatched mutation) and requires the simulator to find a failing seed, so that
the invariants are known to bite.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Iterator

import pytest

from odradek.raft import epoch_state, quorum, raft_core

from .mutations import assert_a_schedule_catches
from .raft_sim import Faults, Simulation, Violation, run_schedule

REPLAY = (
    "ODRADEK_SIM_SEED={seed} python3 -m pytest tests/sim/test_raft_sim.py -k {test} -q"
)


@pytest.fixture(autouse=True)
def _quiet_raft_logs() -> Iterator[None]:
    logger = logging.getLogger("odradek.raft")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


def _run_schedules(seeds: list[int], pre_vote: bool, test: str) -> None:
    for seed in seeds:
        replay = REPLAY.format(seed=seed, test=test)
        try:
            run_schedule(seed, pre_vote)
        except Violation as e:
            pytest.fail(f"seed {seed}: {e}\nreplay with: {replay}", pytrace=False)
        except Exception as e:  # a crash of the core is a failure of the schedule too
            raise AssertionError(f"seed {seed} crashed; replay with: {replay}") from e


def test_raft_schedules(sim_seeds: list[int]) -> None:
    _run_schedules(sim_seeds, True, "'test_raft_schedules and not without'")


def test_raft_schedules_without_pre_vote(sim_seeds: list[int]) -> None:
    """The cores as the network runs them: no pre-vote (Vote v0-v1 cannot carry it)."""
    _run_schedules(sim_seeds, False, "test_raft_schedules_without_pre_vote")


def test_replay_is_deterministic() -> None:
    first, second = run_schedule(11), run_schedule(11)
    assert first.steps == second.steps
    assert first.trace == second.trace
    assert first.committed == second.committed
    assert len(first.committed) > 0


def test_schedules_exercise_failover() -> None:
    """The default schedules elect several leaders and truncate diverging followers."""
    epochs = [max(run_schedule(seed).leaders, default=0) for seed in range(20)]
    assert max(epochs) >= 3


def _run_until(sim: Simulation, until_ms: int) -> None:
    while sim._queue and sim._queue[0][0] <= until_ms:
        time_ms, _, action = heapq.heappop(sim._queue)
        sim.now = time_ms
        action()
        sim.check_step()
    sim.now = until_ms


def _rejoin(seed: int, pre_vote: bool) -> tuple[int, int, int, int]:
    """A stable 3-voter quorum; one follower cut off for 10 s (five fetch timeouts), then let
    back in for 5 s. (leader, epoch) before the cut and after the heal."""
    sim = Simulation(
        seed, voters=3, observers=1, faults=Faults(drop=0.0, duplicate=0.0), pre_vote=pre_vote
    )
    for node in sim.nodes.values():
        sim.start(node)
    _run_until(sim, 4000)
    leader = sim._current_leader()
    assert leader is not None, sim.trace[-20:]
    epoch = sim.nodes[leader].core.epoch  # type: ignore[union-attr]
    outsider = min(v for v in sim.voter_ids if v != leader)
    sim._set_partition(frozenset({outsider}), frozenset(sim.nodes) - {outsider})
    _run_until(sim, 14_000)
    sim._set_partition(None, None)
    _run_until(sim, 19_000)
    after = sim._current_leader()
    assert after is not None, sim.trace[-20:]
    return leader, epoch, after, sim.nodes[after].core.epoch  # type: ignore[union-attr]


def test_a_voter_cut_off_and_let_back_in_does_not_disturb_a_stable_leader() -> None:
    """KIP-996's point: the cut-off voter keeps asking with pre-votes at its own epoch, which
    the others refuse while they hear from their leader; back in, it follows the same leader in
    the same epoch. Without pre-vote it bumps the epoch and deposes the leader (the check
    bites)."""
    for seed in range(5):
        leader, epoch, after, after_epoch = _rejoin(seed, pre_vote=True)
        assert (after, after_epoch) == (leader, epoch), f"seed {seed}"
    _, epoch, _, after_epoch = _rejoin(0, pre_vote=False)
    assert after_epoch > epoch


def _hw_counts_minority(self: epoch_state.LeaderState) -> bool:
    offsets = sorted(
        (s.end_offset if s.end_offset is not None else -1 for s in self.voter_states.values()),
        reverse=True,
    )
    candidate = offsets[0]  # the best replica instead of the majority's
    if candidate <= self.epoch_start_offset:
        return False
    if self.high_watermark is not None and candidate <= self.high_watermark:
        return False
    self.high_watermark = candidate
    return True


def _fetch_before_durable(self: raft_core.RaftCore, leader_id: int | None, now_ms: int) -> None:
    saved = self.log.durable_end_offset
    self.log.durable_end_offset = self.log.end_offset
    try:
        ORIGINAL_SEND_FETCH(self, leader_id, now_ms)
    finally:
        self.log.durable_end_offset = saved


ORIGINAL_SEND_FETCH = raft_core.RaftCore._maybe_send_fetch
ORIGINAL_VOTED = quorum.QuorumState.transition_to_unattached_voted
ORIGINAL_CAN_GRANT = epoch_state.UnattachedState.can_grant_vote


def _vote_not_persisted(self: quorum.QuorumState, epoch: int, candidate: int, now_ms: int) -> None:
    ORIGINAL_VOTED(self, epoch, candidate, now_ms)
    self.pending_election = None


def _ignore_log_up_to_date(
    self: epoch_state.UnattachedState, candidate: int, up_to_date: bool, pre_vote: bool
) -> bool:
    return ORIGINAL_CAN_GRANT(self, candidate, True, pre_vote)


MUTATIONS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], list[int]]] = {
    # name: (how to break the core, seeds to try first)
    "high watermark from the best replica, not a majority": (
        lambda mp: mp.setattr(
            epoch_state.LeaderState, "_maybe_update_high_watermark", _hw_counts_minority
        ),
        [0],
    ),
    "majority of votes counted as n // 2": (
        lambda mp: mp.setattr(
            epoch_state._Nominee, "majority", property(lambda s: len(s.voters) // 2)
        ),
        [0],
    ),
    "follower fetches before its log is durable": (
        lambda mp: mp.setattr(raft_core.RaftCore, "_maybe_send_fetch", _fetch_before_durable),
        [1],
    ),
    "vote granted without persisting it": (
        lambda mp: mp.setattr(
            quorum.QuorumState, "transition_to_unattached_voted", _vote_not_persisted
        ),
        [475],
    ),
    "vote granted to a candidate whose log is behind": (
        lambda mp: mp.setattr(
            epoch_state.UnattachedState, "can_grant_vote", _ignore_log_up_to_date
        ),
        [40],
    ),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_simulator_catches_broken_cores(mutation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    breaks, first_seeds = MUTATIONS[mutation]
    breaks(monkeypatch)
    assert_a_schedule_catches(mutation, run_schedule, Violation, first_seeds, 60)
