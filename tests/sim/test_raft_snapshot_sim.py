"""The KRaft core with snapshots and FetchSnapshot under the deterministic simulator
(tests/sim/snapshot_sim.py): nodes snapshot and delete their logs below; one is kept down past
the leaders' log start and catches up through FetchSnapshot; raft_sim's invariants hold, and
every snapshot holds exactly the committed records. A failure names the seed and the command
that replays it."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from .raft_sim import Violation
from .snapshot_sim import run_snapshot_schedule

REPLAY = "ODRADEK_SIM_SEED={seed} python3 -m pytest tests/sim/test_raft_snapshot_sim.py -q"


@pytest.fixture(autouse=True)
def _quiet_raft_logs() -> Iterator[None]:
    logger = logging.getLogger("odradek.raft")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


def test_raft_schedules_with_snapshots(sim_seeds: list[int]) -> None:
    seeds = sim_seeds
    caught_up = snapshotted = 0
    for seed in seeds:
        replay = REPLAY.format(seed=seed)
        try:
            sim = run_snapshot_schedule(seed)
        except Violation as e:
            pytest.fail(f"seed {seed}: {e}\nreplay with: {replay}", pytrace=False)
        except Exception as e:
            raise AssertionError(f"seed {seed} crashed; replay with: {replay}") from e
        snapshotted += sim.snapshots_taken > 0
        caught_up += bool(sim.installs)
    if len(seeds) >= 10:
        # Nodes snapshot, and the node kept down comes back behind the log start, in most
        # schedules (a few are so faulty that little commits).
        assert snapshotted >= len(seeds) * 3 // 4, (snapshotted, len(seeds))
        assert caught_up >= len(seeds) // 2, (caught_up, len(seeds))


def test_snapshot_replay_is_deterministic() -> None:
    first, second = run_snapshot_schedule(5), run_snapshot_schedule(5)
    assert first.trace == second.trace and first.installs == second.installs
    assert first.committed == second.committed


def test_snapshot_simulator_catches_a_leader_that_never_sends_its_snapshot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Broken on purpose: the leader serves Fetch below its log start from what is left of its
    log instead of pointing to its snapshot. A node behind the log start then never catches up,
    and the simulator must say so."""
    from odradek.raft.snapshot_fetch import SnapshotFetchPaths

    monkeypatch.setattr(SnapshotFetchPaths, "_snapshot_for_fetch", lambda self, offset, epoch: None)
    for seed in range(20):
        try:
            run_snapshot_schedule(seed)
        except Violation as e:
            assert "liveness" in str(e)
            return
    pytest.fail("no schedule found the broken leader")
