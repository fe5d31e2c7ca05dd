"""Voter changes (KIP-853) under faults in the deterministic simulator
(tests/sim/dynamic_quorum_sim.py): AddRaftVoter / RemoveRaftVoter sent to whoever leads while
the network and the disks misbehave; at most one leader per epoch, nothing committed lost or
changed, committed records durable on a majority of the voter set in effect, liveness after the
heal. ``--sim-schedules N`` / ``ODRADEK_SIM_SCHEDULES`` runs more (60 by default); a failure
names the command that replays its seed."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from .conftest import _seeds
from .dynamic_quorum_sim import run_dynamic_schedule
from .raft_sim import Violation

DEFAULT_SCHEDULES = 60
REPLAY = (
    "ODRADEK_SIM_SEED={seed} python3 -m pytest tests/sim/test_dynamic_quorum_sim.py "
    "-k 'test_voter_change_schedules and {light}' -q"
)


@pytest.fixture
def dynamic_sim_seeds(request: pytest.FixtureRequest) -> list[int]:
    return _seeds(request.config, DEFAULT_SCHEDULES)


@pytest.fixture(autouse=True)
def _quiet_raft_logs() -> Iterator[None]:
    logger = logging.getLogger("odradek.raft")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


@pytest.mark.parametrize("light", [False, True], ids=["faults", "light_faults"])
def test_voter_change_schedules(dynamic_sim_seeds: list[int], light: bool) -> None:
    """Heavy faults (most changes time out, leaders come and go) and light faults (most
    changes commit, the leader often removes itself)."""
    for seed in dynamic_sim_seeds:
        replay = REPLAY.format(seed=seed, light="light_faults" if light else "not light_faults")
        try:
            run_dynamic_schedule(seed, light)
        except Violation as e:
            pytest.fail(f"seed {seed}: {e}\nreplay with: {replay}", pytrace=False)
        except Exception as e:
            raise AssertionError(f"seed {seed} crashed; replay with: {replay}") from e


def test_schedules_change_the_voter_set() -> None:
    """The schedules really change voters: changes commit, and the final voter sets differ
    from the initial ones."""
    committed = 0
    changed = 0
    for seed in range(10):
        sim = run_dynamic_schedule(seed, light=True)
        committed += sim.changes_committed
        final = {frozenset(n.core.voters) for n in sim.nodes.values() if n.core is not None}
        changed += any(v != sim.voter_ids for v in final)
    assert committed >= 20 and changed >= 5, (committed, changed)


def test_replay_is_deterministic() -> None:
    first, second = run_dynamic_schedule(5), run_dynamic_schedule(5)
    assert first.trace == second.trace and first.committed == second.committed
