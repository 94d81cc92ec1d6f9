"""Deterministic simulation (DESIGN testing tier 2), on a fixed budget in CI.

`KGROUPS_SIM_SEED=n` replays one seed (what a failure message prints);
`KGROUPS_SIM_SEEDS=n` and `KGROUPS_SIM_STEPS=n` widen the search.
"""

from __future__ import annotations

import os

import pytest

from tests.sim.simulation import Simulation

SEEDS = int(os.environ.get("KGROUPS_SIM_SEEDS", "60"))
STEPS = int(os.environ.get("KGROUPS_SIM_STEPS", "3000"))
ONE = os.environ.get("KGROUPS_SIM_SEED")
CHOSEN = [int(ONE)] if ONE else list(range(SEEDS))


@pytest.mark.sim
@pytest.mark.parametrize("seed", CHOSEN)
def test_random_schedules_keep_every_invariant(seed: int) -> None:
    sim = Simulation(seed, members=5 + seed % 4, partitions=6 + seed % 11)
    sim.run(STEPS)
    assert sim.max_generation > 0


@pytest.mark.sim
def test_the_simulation_is_deterministic() -> None:
    runs = []
    for _ in range(2):
        sim = Simulation(1234)
        sim.run(1500)
        runs.append((sim.now, sim.steps, sim.max_generation, sim.restarts, sim.trace))
    assert runs[0] == runs[1]


@pytest.mark.sim
def test_the_simulation_does_exercise_faults() -> None:
    """Guard against a simulator that quietly stops injecting what it claims to."""
    restarts = generations = 0
    for seed in range(10):
        sim = Simulation(seed)
        sim.run(STEPS)
        restarts += sim.restarts
        generations += sim.max_generation
    assert restarts >= 5
    assert generations >= 50
