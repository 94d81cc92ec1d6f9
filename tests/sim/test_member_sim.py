"""Real members against the real coordinator on virtual time (tests/sim/member_sim.py).

`KGROUPS_MEMBER_SIM_SEED=n` replays one seed (what a failure prints; run with
PYTHONHASHSEED=0, as `make test` does, for the same schedule); `KGROUPS_MEMBER_SIM_SEEDS=n`
sets how many seeds a run takes (default 500, about a minute alone; `make sim-long` runs
5,000) and
`KGROUPS_MEMBER_SIM_FIRST=n` where they start (default 0): `make test` runs the same
seeds every time, and a search elsewhere is one command. Seeds such a search found
failing stay in `FOUND`, run every time.

The last tests break the member on purpose, one way per finding the simulation is there
to catch, and require the simulation to notice: an invariant that cannot fail proves
nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

import kgroups.client.member as member_module
from kgroups.client.states import MemberState
from tests.sim.member_sim import MemberInvariantViolation, MemberSimulation

SEEDS = int(os.environ.get("KGROUPS_MEMBER_SIM_SEEDS", "500"))
FIRST = int(os.environ.get("KGROUPS_MEMBER_SIM_FIRST", "0"))
FOUND = (474329,)
"""474329: a member closed while its JoinGroup was in flight (see member_sim's `_close`)."""
ONE = os.environ.get("KGROUPS_MEMBER_SIM_SEED")
BATCH = 100


@pytest.fixture(autouse=True)
def quiet() -> Iterator[None]:
    """Thousands of schedules log a lot: the simulation's own trace keeps it (a failure
    prints its tail); nothing goes on to pytest's capture."""
    logger = logging.getLogger("kgroups")
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield
    logger.setLevel(level)
    logger.propagate = propagate


def run(seed: int) -> MemberSimulation:
    sim = MemberSimulation(seed, members=2 + seed % 3, partitions=3 + seed % 6)
    sim.run()
    return sim


def batches() -> list[range]:
    if ONE is not None:
        return [range(int(ONE), int(ONE) + 1)]
    end = FIRST + SEEDS
    found = [range(seed, seed + 1) for seed in FOUND if not FIRST <= seed < end]
    return [range(s, min(s + BATCH, end)) for s in range(FIRST, end, BATCH)] + found


@pytest.mark.sim
@pytest.mark.parametrize("seeds", batches(), ids=lambda r: f"seeds{r.start}-{r.stop - 1}")
def test_real_members_keep_every_invariant(seeds: range) -> None:
    for seed in seeds:
        sim = run(seed)  # raises MemberInvariantViolation naming the seed
        assert sim.loop is not None and sim.loop.turns > 100


@pytest.mark.sim
def test_the_member_simulation_is_deterministic() -> None:
    first, second = run(7), run(7)
    assert first.trace == second.trace
    assert len(first.trace) > 20


@pytest.mark.sim
def test_the_schedules_exercise_what_they_claim() -> None:
    sims = [run(seed) for seed in range(60)]
    notes = "\n".join(line for sim in sims for line in sim.trace)
    for fault in ("partition", "crash", "close", "coordinator restart", "duplicate", "reset"):
        assert fault in notes, fault
    assert sum(sim.accepted_commits for sim in sims) > 500
    assert {sim.strategy for sim in sims} == {"range", "roundrobin", "sticky",
                                              "cooperative-sticky"}  # fmt: skip
    assert "fenced" in notes and "partitions lost" in notes


def caught(seeds: int = 120) -> list[str]:
    found = []
    for seed in range(seeds):
        try:
            run(seed)
        except MemberInvariantViolation as exc:
            found.append(str(exc).splitlines()[0])
    return found


@pytest.mark.sim
def test_it_catches_a_member_that_stops_heartbeating_while_it_revokes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Finding 1: without heartbeats in PREPARING, a slow revocation costs the member its
    place although nothing was wrong with it."""
    monkeypatch.setattr(member_module, "HEARTBEATING",
                        frozenset({MemberState.JOINING, MemberState.SYNCING, MemberState.STABLE}))  # fmt: skip
    found = caught()
    assert any("although nothing disturbed it" in f for f in found), found


@pytest.mark.sim
def test_it_catches_commits_that_are_not_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 2: a commit sent in the member's current generation instead of the one its
    batch was planned in."""
    real = member_module.GroupMember.commit

    async def unpinned(self: Any, offsets: Any, *, generation: int | None = None) -> None:
        await real(self, offsets)

    monkeypatch.setattr(member_module.GroupMember, "commit", unpinned)
    found = caught(40)
    assert any("was accepted in generation" in f for f in found), found


@pytest.mark.sim
def test_it_catches_a_member_without_a_session_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 7: a member cut off from the coordinator that never declares its partitions
    lost keeps working on them after the coordinator gave them away."""
    monkeypatch.setattr(member_module.GroupMember, "_rearm_session_deadline", lambda self: None)
    found = caught()
    assert any("is worked on by" in f for f in found), found


@pytest.mark.sim
def test_it_catches_carried_commits_of_partitions_someone_else_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A commit of an earlier generation's work is carried into the current one only when
    the member held its partitions throughout; carrying every one lets a member commit
    work on partitions another member was given meanwhile (cooperative included)."""
    monkeypatch.setattr(member_module.GroupMember, "_held_throughout",
                        lambda self, offsets, generation, current: True)  # fmt: skip
    found = caught(200)
    assert any("(cooperative-sticky)" in f and "assigned meanwhile to" in f
               for f in found), found  # fmt: skip
