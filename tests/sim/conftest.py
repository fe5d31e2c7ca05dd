"""Options for the simulation tests: how many schedules, or one seed to replay."""

from __future__ import annotations

import os

import pytest

DEFAULT_SCHEDULES = 300
DEFAULT_CONTROLLER_SCHEDULES = 100  # test_controller_sim.py: the metadata state machine on top
DEFAULT_REPLICATION_SCHEDULES = 600  # test_replication_sim.py: about 0.04 s each
DEFAULT_TRANSACTION_SCHEDULES = 150  # test_transaction_sim.py: about 0.1 s each


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("odradek-sim")
    group.addoption("--sim-schedules", type=int, default=None, help="number of schedules to run")
    group.addoption("--sim-seed", type=int, default=None, help="replay exactly this seed")
    group.addoption("--sim-first-seed", type=int, default=None, help="the first seed to run")


def _option(config: pytest.Config, name: str, env: str) -> int | None:
    value = config.getoption(name)
    if value is not None:
        return int(value)
    raw = os.environ.get(env)
    return int(raw) if raw else None


def _seeds(config: pytest.Config, default_count: int) -> list[int]:
    seed = _option(config, "--sim-seed", "ODRADEK_SIM_SEED")
    if seed is not None:
        return [seed]
    count = _option(config, "--sim-schedules", "ODRADEK_SIM_SCHEDULES") or default_count
    first = _option(config, "--sim-first-seed", "ODRADEK_SIM_FIRST_SEED") or 0
    return list(range(first, first + count))


@pytest.fixture
def sim_seeds(request: pytest.FixtureRequest) -> list[int]:
    """The seeds to run: one replayed seed, or ``count`` seeds from the first one."""
    return _seeds(request.config, DEFAULT_SCHEDULES)


@pytest.fixture
def controller_sim_seeds(request: pytest.FixtureRequest) -> list[int]:
    """As ``sim_seeds``, for the controller schedules (fewer by default)."""
    return _seeds(request.config, DEFAULT_CONTROLLER_SCHEDULES)


@pytest.fixture
def replication_sim_seeds(request: pytest.FixtureRequest) -> list[int]:
    """As ``sim_seeds``, for the partition replication schedules (cheaper: more by default)."""
    return _seeds(request.config, DEFAULT_REPLICATION_SCHEDULES)


@pytest.fixture
def transaction_sim_seeds(request: pytest.FixtureRequest) -> list[int]:
    """As ``sim_seeds``, for the transaction schedules."""
    return _seeds(request.config, DEFAULT_TRANSACTION_SCHEDULES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Many schedules need more than the suite's per-test timeout: about a second each."""
    count = _option(config, "--sim-schedules", "ODRADEK_SIM_SCHEDULES") or DEFAULT_SCHEDULES
    for item in items:
        if item.name == "test_raft_schedules" and count > DEFAULT_SCHEDULES:
            item.add_marker(pytest.mark.timeout(60 + count))
        if item.name == "test_controller_schedules" and count > DEFAULT_CONTROLLER_SCHEDULES:
            item.add_marker(pytest.mark.timeout(60 + count))
        if item.name.startswith("test_replication_schedules") and count > DEFAULT_REPLICATION_SCHEDULES:
            item.add_marker(pytest.mark.timeout(60 + count // 5))
        if item.name == "test_transaction_schedules" and count > DEFAULT_TRANSACTION_SCHEDULES:
            item.add_marker(pytest.mark.timeout(60 + count))
