"""Several coordinator replicas sharing the group's store through leases, simulated.

Each replica decides with the real `core.leasing.ReplicaLeases` on the simulation's time.

`KGROUPS_REPLICA_SIM_SEED=n` replays one seed, `KGROUPS_REPLICA_SIM_SEEDS=n` runs the first
n; `KGROUPS_SIM_STEPS` as for the simulation.
"""

from __future__ import annotations

import os

import pytest

from tests.sim.replica_sim import ReplicatedSimulation
from tests.sim.simulation import InvariantViolation

SEEDS = int(os.environ.get("KGROUPS_REPLICA_SIM_SEEDS", "200"))
"""200 in `make check`; `make test` runs 1,000 and `make sim-long` 20,000."""
STEPS = int(os.environ.get("KGROUPS_SIM_STEPS", "3000"))
ONE = os.environ.get("KGROUPS_REPLICA_SIM_SEED")
BATCH = 50
CHOSEN = [range(int(ONE), int(ONE) + 1)] if ONE else [
    range(s, min(s + BATCH, SEEDS)) for s in range(0, SEEDS, BATCH)
]  # fmt: skip


@pytest.mark.sim
@pytest.mark.parametrize("seeds", CHOSEN, ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_replicas_moving_the_group_keep_every_invariant(seeds: range) -> None:
    for seed in seeds:
        sim = ReplicatedSimulation(seed, members=4 + seed % 3, partitions=6 + seed % 7)
        sim.run(STEPS)  # raises InvariantViolation naming the seed
        assert sim.max_generation > 0


@pytest.mark.sim
def test_the_replicated_simulation_does_move_freeze_crash_and_fence() -> None:
    """Guard against a simulator that quietly stops doing what it claims to."""
    moves = freezes = crashes = fenced = outages = stalls = renewals = 0
    for seed in range(10):
        sim = ReplicatedSimulation(seed)
        sim.run(STEPS)
        moves += sim.moves
        freezes += sim.freezes
        crashes += sim.crashes
        fenced += sim.fenced_writes
        outages += sim.outages
        stalls += sim.stalls
        renewals += sim.renewals
    seen = (moves, freezes, crashes, fenced, outages, stalls, renewals)
    assert moves >= 20 and freezes >= 5 and crashes >= 5 and fenced >= 3, seen
    assert outages >= 3 and stalls >= 3 and renewals >= 100, seen


@pytest.mark.sim
def test_without_the_stores_epoch_check_a_woken_replica_breaks_an_invariant() -> None:
    """Mutation: the write of a replica frozen inside it lands after another replica took
    the group over. The simulation must notice within its seeds."""
    assert some_seed_breaks(check_epochs=False), "no seed caught writes that skip the epoch check"


@pytest.mark.sim
def test_loading_a_shard_before_its_queued_writes_finish_breaks_an_invariant() -> None:
    """Mutation: a replica whose database was away self-fences, then loads its shard again
    while the commits it took meanwhile are still queued. Read before they are written,
    the shard comes back with the offsets before them, which the owner then serves though
    they were acknowledged. The simulation must notice within its seeds."""
    assert some_seed_breaks(load_after_writes=False), (
        "no seed caught a shard loaded ahead of its queued writes"
    )


@pytest.mark.sim
def test_a_replica_that_never_self_fences_breaks_an_invariant() -> None:
    """Mutation: the leasing machine never stops trusting its leases (`check` serves on,
    records read late are served). A replica frozen or cut from its database past its
    leases then acts on a shard another replica holds: the simulation must notice."""
    assert some_seed_breaks(self_fence=False), "no seed caught a replica serving past its leases"


def some_seed_breaks(**mutation: bool) -> bool:
    """Whether the simulation, mutated, finds an invariant broken within 40 seeds."""
    for seed in range(40):
        try:
            ReplicatedSimulation(seed, **mutation).run(STEPS)
        except InvariantViolation:
            return True
    return False
