"""The ZooKeeper-mode controller core under the deterministic simulation (zk_controller_sim.py):
seeded broker deaths, restarts, controlled shutdowns, leader ISR changes racing the controller's
conditional writes, preferred elections; invariants checked after every step.

``test_zk_controller_schedules`` runs the seeds from conftest.py (``--sim-schedules`` /
``--sim-seed``); ``test_simulation_catches_broken_controllers`` breaks the controller on purpose
and requires a failing seed, so the invariants are known to bite.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from odradek.controller import partition_state_machine, replica_state_machine
from odradek.controller.controller_context import LeaderAndIsr
from odradek.controller.replica_state_machine import ReplicaStateMachine

from .zk_controller_sim import Violation, run_schedule


@pytest.fixture(autouse=True)
def _quiet() -> None:
    # failed elections (no live ISR member) are expected and logged at ERROR, as Kafka does
    logging.getLogger("odradek.state.change.logger").setLevel(logging.CRITICAL)


def test_zk_controller_schedules(controller_sim_seeds: list[int]) -> None:
    for seed in controller_sim_seeds:
        try:
            run_schedule(seed)
        except Violation as e:
            pytest.fail(f"{e}\nreplay: python3 -m pytest tests/sim/test_zk_controller_sim.py --sim-seed {seed}")


def test_schedules_exercise_the_interesting_paths() -> None:
    bad_versions = 0
    elections = 0
    for seed in range(30):
        sim = run_schedule(seed)
        bad_versions += sim.zk.bad_versions
        elections += sum(1 for _, _, e in sim.zk.history if e > 0)
        assert any(s.startswith("broker") for s in sim.steps)
    assert bad_versions > 0 and elections > 0


def test_replay_is_deterministic() -> None:
    a, b = run_schedule(7), run_schedule(7)
    assert a.steps == b.steps and a.zk.history == b.zk.history


def _no_epoch_bump(self: LeaderAndIsr, leader: int, isr: object) -> LeaderAndIsr:
    return LeaderAndIsr(leader, tuple(isr), self.leader_epoch, self.leader_recovery_state,  # type: ignore[arg-type]
                        self.partition_epoch)


def _keep_offline_replicas_in_isr(self: ReplicaStateMachine, replica_id: int, partitions: object) -> dict:
    return {}


BREAKAGES: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "leader epoch not bumped": lambda mp: mp.setattr(LeaderAndIsr, "new_leader_and_isr", _no_epoch_bump),
    "BADVERSION not retried": lambda mp: (
        mp.setattr(partition_state_machine, "MAX_ELECTION_ROUNDS", 1),
        mp.setattr(replica_state_machine, "MAX_ISR_REMOVAL_ROUNDS", 1),
    ),
    "offline replica left in the ISR": lambda mp: mp.setattr(
        ReplicaStateMachine, "_remove_replicas_from_isr", _keep_offline_replicas_in_isr
    ),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_simulation_catches_broken_controllers(breakage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    BREAKAGES[breakage](monkeypatch)
    for seed in range(200):
        try:
            run_schedule(seed)
        except Violation:
            return
    pytest.fail(f"no seed caught the broken controller ({breakage})")
