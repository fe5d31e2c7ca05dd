"""Mutation checks shared by the simulations: a deliberately broken rule must make some seeded
schedule fail, or the simulation's invariants could not catch that bug."""

from __future__ import annotations

from collections.abc import Callable

import pytest


def assert_a_schedule_catches(
    mutation: str,
    run_schedule: Callable[[int], object],
    violation: type[BaseException],
    first_seeds: list[int],
    seeds: int = 60,
) -> None:
    """Run ``first_seeds`` (the seeds known to catch ``mutation``), then the others below
    ``seeds``, until one raises ``violation``; fail if none does."""
    order = first_seeds + [s for s in range(seeds) if s not in first_seeds]
    for seed in order:
        try:
            run_schedule(seed)
        except violation:
            return
    pytest.fail(f"no schedule among {len(order)} caught the mutation {mutation!r}")
