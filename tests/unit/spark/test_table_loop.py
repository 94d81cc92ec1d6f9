"""The plan, write, commit protocol of idempotent sinks (Delta Lake), on virtual time.

The world is test_loop.py's (a real coordinator and real members, simulated time,
network and Spark); the sink is `Table`, which keeps Delta's rule for `txnAppId` /
`txnVersion` (a write whose version is not above the latest for its app id is skipped,
atomically with the data) and the history of every write it was asked for. What a user
relies on: after a crash at any step, the next owners leave every record in the table
exactly once; a batch planned by one member and then split between two heirs is written
by one of them and skipped by the other; a zombie whose plan was accepted and who writes
late is skipped; a zombie whose plan was refused never writes; a refusal that retrying
cannot cure stops the pipeline saying why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kgroups.spark.batches import MicroBatch
from kgroups.spark.loop import BatchLoop, PipelineError
from tests.sim.fake_cluster import crash
from tests.unit.spark.world import (
    PARTITIONS,
    SESSION,
    TOPIC,
    Log,
    Spark,
    World,
    first_turn,
    survivor_in_flight,
    until,
)  # fmt: skip


class Crash(Exception):
    """The process died here."""


class Table:
    """One Delta table, shared by every pipeline: rows (partition, offset), the highest
    version per app id, and who asked to write which batch with what outcome."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int]] = []
        self.versions: dict[str, int] = {}
        self.history: list[tuple[str, str, str]] = []
        """(member, batch id, "written" | "skipped")."""

    def writer(self, member: str) -> Writer:
        return Writer(self, member)

    def exactly_once(self, end: int) -> bool:
        return sorted(self.rows) == [(p, o) for p in range(PARTITIONS) for o in range(end)]

    def outcomes(self, batch_id: str) -> list[tuple[str, str]]:
        return [(who, what) for who, bid, what in self.history if bid == batch_id]


class Writer:
    """A pipeline's handle on the table (the sink), with hooks to crash around a write."""

    def __init__(self, table: Table, member: str) -> None:
        self.table = table
        self.member = member
        self.before: Callable[[MicroBatch], None] = lambda batch: None
        self.after: Callable[[MicroBatch], None] = lambda batch: None
        self.batches: list[MicroBatch] = []

    def write(self, batch: MicroBatch, frame: Any) -> bool:
        self.before(batch)
        rows = list(frame)
        self.batches.append(batch)
        latest = self.table.versions.get(batch.app_id)
        wrote = latest is None or batch.version > latest
        if wrote:
            self.table.versions[batch.app_id] = batch.version
            self.table.rows.extend(rows)
        self.table.history.append((self.member, batch.id, "written" if wrote else "skipped"))
        self.after(batch)
        return wrote

    def written(self, app_id: str) -> int | None:
        return self.table.versions.get(app_id)


def pipeline(world: World, name: str, log: Log, table: Table, **options: Any) -> BatchLoop:
    spark = options.pop("spark", Spark())
    return world.pipeline(name, log, spark, sink=table.writer(name), **options)


def writer(loop: BatchLoop) -> Writer:
    assert isinstance(loop.sink, Writer)
    return loop.sink


async def run_until(loop: BatchLoop, check: Callable[[], bool], what: str) -> None:
    loop.stopping.clear()  # run again after an earlier stop
    runner = asyncio.create_task(loop.run())
    try:
        await until(check, 10 * SESSION, what)
    finally:
        loop.stop()
        await runner


def crash_with(why: str) -> Callable[[MicroBatch], None]:
    def hook(batch: MicroBatch) -> None:
        raise Crash(why)

    return hook


def crash_on_commit(loop: BatchLoop, number: int) -> None:
    """The process dies as it is about to send its `number`-th commit (1: the plan)."""
    commit = loop.member.commit
    calls = 0

    async def dying(*args: Any, **kwargs: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == number:
            raise Crash(f"before commit {number}")
        await commit(*args, **kwargs)

    loop.member.commit = dying  # type: ignore[method-assign]


async def plan_and_die(world: World, log: Log, table: Table) -> None:
    """A member "dies" plans a batch of every partition, commits the plan and dies
    before its write."""
    dies = pipeline(world, "dies", log, table)
    writer(dies).before = crash_with("before the write")
    with pytest.raises(Crash):
        await first_turn(dies)
    crash(dies.member, world.wires["dies"])


def committed_everywhere(world: World, end: int) -> Callable[[], bool]:
    return lambda: world.committed() == dict.fromkeys(range(PARTITIONS), end)


async def split_between(world: World, a: BatchLoop, b: BatchLoop) -> None:
    await a.start(timeout=3 * SESSION)
    await b.start(timeout=3 * SESSION)
    await until(lambda: len(a.member.assignment) == 2 == len(b.member.assignment)
                and a.member.generation == b.member.generation, 3 * SESSION, "a split")  # fmt: skip


def owned(loop: BatchLoop) -> set[int]:
    return {tp.partition for tp in loop.member.assignment}


def written_once_by_two_heirs(
    world: World, table: Table, a: BatchLoop, b: BatchLoop, *, end: int
) -> MicroBatch:
    """Both heirs wrote the dead member's whole planned batch again; the table kept one
    copy; every partition's end is committed. Returns the batch."""
    [planned] = writer(a).batches
    assert writer(b).batches == [planned] and planned.member == "dies"
    assert sorted(what for _, what in table.outcomes(planned.id)) == ["skipped", "written"]
    assert world.committed() == dict.fromkeys(range(PARTITIONS), end)
    assert table.exactly_once(end)
    return planned


@pytest.mark.parametrize("where", ["before-plan", "after-plan", "after-write", "before-end-commit"])
def test_after_a_crash_at_any_step_the_next_owner_leaves_every_record_once(
    tmp_path: Path, where: str
) -> None:
    world = World(tmp_path)
    log = Log(end=30)
    table = Table()

    async def scenario() -> None:
        dies = pipeline(world, "dies", log, table)
        if where == "before-plan":
            crash_on_commit(dies, 1)
        elif where == "before-end-commit":
            crash_on_commit(dies, 2)
        elif where == "after-plan":  # or mid-write: the table's commit never happened
            writer(dies).before = crash_with("before the write")
        else:
            writer(dies).after = crash_with("after the write")
        with pytest.raises(Crash):
            await first_turn(dies)
        crash(dies.member, world.wires["dies"])
        planned = where != "before-plan"
        assert world.committed() == dict.fromkeys(range(PARTITIONS), 0 if planned else None)
        written = where in ("after-write", "before-end-commit")
        assert table.exactly_once(30) if written else table.rows == []

        log.end = dict.fromkeys(range(PARTITIONS), 45)
        heir = pipeline(world, "heir", log, table)
        await heir.start(timeout=3 * SESSION)  # once the dead member's session is over
        await run_until(heir, committed_everywhere(world, 45), "the heir read on")
        assert table.exactly_once(45)
        first = writer(heir).batches[0]
        if planned:  # the heir wrote the planned batch first, exactly as planned
            assert (first.member, first.ranges) == ("dies", tuple((p, 0, 30) for p in range(4)))
            assert table.outcomes(first.id)[-1] == ("heir", "skipped" if written else "written")
        else:
            assert first.member == "heir"

    world.play(scenario)


def test_two_heirs_of_one_planned_batch_write_it_once_between_them(tmp_path: Path) -> None:
    """The batch spanned four partitions; its planner died after the plan commit; the
    partitions went two and two to two members. Each writes the whole batch again (its
    transform may mix partitions), the table keeps one copy, and each commits the end
    of its own partitions."""
    world = World(tmp_path)
    log = Log(end=30)
    table = Table()

    async def scenario() -> None:
        await plan_and_die(world, log, table)
        assert table.rows == [] and world.committed() == dict.fromkeys(range(PARTITIONS), 0)

        a, b = pipeline(world, "a", log, table), pipeline(world, "b", log, table)
        await split_between(world, a, b)
        await asyncio.gather(a.run_once(), b.run_once())
        planned = written_once_by_two_heirs(world, table, a, b, end=30)
        assert planned.partitions == (0, 1, 2, 3)

    world.play(scenario)


def test_an_heir_whose_write_is_slow_goes_on_once_the_other_heir_finishes_the_batch(
    tmp_path: Path,
) -> None:
    """The dead member's planned batch spans both heirs' partitions, and one heir's write
    of it is slow (its Spark busy with its own batch, or Delta rebuilding the table's
    state). It commits its partitions' end as soon as the group shows the other heir's
    "done" for the batch, not when its own write ends; the table keeps one copy."""
    world = World(tmp_path)
    log = Log(end=30)
    table = Table()
    slow = Spark(seconds=8 * SESSION)

    async def scenario() -> None:
        await plan_and_die(world, log, table)
        a, b = pipeline(world, "a", log, table), pipeline(world, "b", log, table, spark=slow)
        writer(b).before = lambda batch: slow.job()
        await split_between(world, a, b)
        b_turn = asyncio.create_task(b.run_once())
        await until(lambda: slow.running == 1, 5, "b's write of the planned batch in flight")
        started = asyncio.get_running_loop().time()
        await a.run_once()
        await until(lambda: all(world.committed()[p] == 30 for p in owned(b)), 2,
                    "b's partitions ended after a's done")  # fmt: skip
        assert asyncio.get_running_loop().time() - started < 2
        assert slow.running == 1  # b's own write of it still going
        await b_turn
        written_once_by_two_heirs(world, table, a, b, end=30)

    world.play(scenario)


def test_an_heir_that_finds_the_batch_finished_and_moved_past_does_not_write_it(
    tmp_path: Path,
) -> None:
    """By the time the second heir reads the group, the first has written the planned
    batch and gone on to a batch of its own from the plan's end: the second heir does
    not write the planned batch at all, and commits its partitions' end."""
    world = World(tmp_path)
    log = Log(end=30)
    table = Table()

    async def scenario() -> None:
        await plan_and_die(world, log, table)
        log.end = dict.fromkeys(range(PARTITIONS), 50)  # records arrive after the plan
        a, b = pipeline(world, "a", log, table), pipeline(world, "b", log, table)
        await split_between(world, a, b)
        await a.run_once()  # the planned batch, then one of a's own from 30
        planned, later = writer(a).batches
        assert planned.member == "dies" and later.offsets == dict.fromkeys(owned(a), (30, 50))
        await b.run_once()
        assert planned not in writer(b).batches
        assert table.outcomes(planned.id) == [("a", "written")]
        assert all(world.committed()[p] == 50 for p in owned(b))  # its own batch from 30
        assert table.exactly_once(50)

    world.play(scenario)


def test_a_survivor_writes_a_dead_members_plan_beside_its_batch_in_flight(
    tmp_path: Path,
) -> None:
    """The dead member committed its plan and died before writing; the survivor, its
    own batch in flight, takes the partitions over at once (a cooperative rebalance)
    and writes the plan in a turn of its own, before its long batch ends."""
    world = World(tmp_path)
    log = Log(end=1000)
    table = Table()
    slow = Spark(seconds=8 * SESSION)

    async def scenario() -> None:
        survivor = pipeline(
            world, "survivor", log, table, spark=slow, assignor="cooperative-sticky"
        )
        writer(survivor).before = lambda batch: slow.job()  # each write takes its time
        dies = pipeline(world, "dies", log, table, assignor="cooperative-sticky")
        mine, theirs, runner = await survivor_in_flight(survivor, dies, slow)
        writer(dies).before = crash_with("before the write")
        with pytest.raises(Crash):
            await dies.run_once()
        crash(dies.member, world.wires["dies"])
        slow.seconds = 1.0
        committed = world.committed
        await until(lambda: all(committed()[p] == 1000 for p in theirs), 3 * SESSION,
                    "the dead member's plan written and its end committed")  # fmt: skip
        assert slow.running == 1 and all(committed()[p] == 0 for p in mine)  # planned, not ended
        [replayed] = [b for b in writer(survivor).batches if b.member == "dies"]
        assert set(replayed.partitions) == theirs
        assert table.outcomes(replayed.id) == [("survivor", "written")]
        await until(committed_everywhere(world, 1000), 8 * SESSION, "the long batch")
        assert table.exactly_once(1000)
        survivor.stop()
        await runner

    world.play(scenario)


def test_a_zombie_whose_plan_was_accepted_and_who_writes_late_is_skipped(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    log = Log(end=30)
    table = Table()
    frozen = asyncio.Event()

    async def scenario() -> None:
        zombie = pipeline(world, "zombie", log, table)
        thaw = asyncio.Event()
        blocking = zombie.blocking

        async def freezing(call: Callable[[], Any]) -> Any:
            # The plan is committed; the process stops before its write, for longer than
            # its session, and then writes.
            if world.committed() == dict.fromkeys(range(PARTITIONS), 0) and not frozen.is_set():
                frozen.set()
                world.partition("zombie")
                await thaw.wait()
                world.heal("zombie")
            return await blocking(call)

        zombie.blocking = freezing
        await zombie.start(timeout=30)
        turn = asyncio.create_task(zombie.run_once())
        await until(frozen.is_set, 10, "the zombie frozen after its plan commit")

        heir = pipeline(world, "heir", log, table)
        await heir.start(timeout=3 * SESSION)
        await run_until(heir, committed_everywhere(world, 30), "the heir wrote the plan")
        [replayed] = writer(heir).batches
        assert replayed.member == "zombie" and table.outcomes(replayed.id) == [("heir", "written")]

        thaw.set()
        progress = await turn  # the late write, then its end commit (refused)
        assert progress is not None
        assert table.outcomes(replayed.id) == [("heir", "written"), ("zombie", "skipped")]
        assert table.exactly_once(30)
        assert world.committed() == dict.fromkeys(range(PARTITIONS), 30)
        crash(zombie.member, world.wires["zombie"])

    world.play(scenario)


def test_a_loss_during_the_tables_version_check_drops_the_batch_not_the_pipeline(
    tmp_path: Path,
) -> None:
    """Reading a table's log for a new app id can run a Spark job, and a loss cancels
    every job: the batch is dropped and the pipeline goes on (make demo died there once)."""
    world = World(tmp_path)
    log = Log(end=30)
    table = Table()
    slow = Spark(seconds=3 * SESSION)

    async def scenario() -> None:
        member = pipeline(world, "m", log, table, spark=slow)
        check = writer(member).written

        def slow_check(app_id: str) -> int | None:
            slow.job()
            return check(app_id)

        writer(member).written = slow_check  # type: ignore[method-assign]
        await member.start(timeout=30)
        turn = asyncio.create_task(member.run_once())
        await until(lambda: slow.running == 1, 5, "the check in flight")
        world.partition("m")  # past its session: the partitions are lost, the job cancelled
        progress = await turn
        assert progress is not None and progress.dropped and not progress.published
        assert slow.cancels == 1 and table.rows == []
        world.heal("m")
        writer(member).written = check  # type: ignore[method-assign]
        await run_until(member, committed_everywhere(world, 30), "the member back at work")
        assert table.exactly_once(30)

    world.play(scenario)


def test_a_zombie_whose_plan_commit_is_refused_never_writes(tmp_path: Path) -> None:
    world = World(tmp_path)
    log = Log(end=30)
    table = Table()

    async def scenario() -> None:
        zombie = pipeline(world, "zombie", log, table)
        commit = zombie.member.commit
        heir: list[BatchLoop] = []

        async def late(*args: Any, **kwargs: Any) -> None:
            # Frozen before its plan commit, past its session: the group moves on.
            world.partition("zombie")
            heir.append(pipeline(world, "heir", log, table))
            await heir[0].start(timeout=3 * SESSION)
            await run_until(heir[0], committed_everywhere(world, 30), "the heir's batch")
            world.heal("zombie")
            await commit(*args, **kwargs)

        zombie.member.commit = late  # type: ignore[method-assign]
        await zombie.start(timeout=30)
        progress = None
        while progress is None:
            progress = await zombie.run_once()
        assert progress.dropped and not progress.published
        assert writer(zombie).batches == []  # it never wrote
        assert [who for who, _, _ in table.history] == ["heir"]
        assert table.exactly_once(30)
        crash(zombie.member, world.wires["zombie"])

    world.play(scenario)


def test_a_commit_refused_for_good_stops_the_pipeline_saying_why(tmp_path: Path) -> None:
    """Commit metadata over the coordinator's limit (offset.metadata.max.bytes) can never
    be accepted: the pipeline stops with Kafka's reason instead of trying forever."""
    world = World(tmp_path)
    log = Log(end=30)
    table = Table()

    async def scenario() -> None:
        loop = pipeline(world, "x" * 5000, log, table, max_metadata_bytes=10**6)
        await loop.start(timeout=30)
        with pytest.raises(PipelineError, match="offset_metadata_too_large"):
            await asyncio.wait_for(loop.run(), 10)
        assert table.history == [] and world.committed() == dict.fromkeys(range(PARTITIONS))
        await loop.close()

    world.play(scenario)


def test_a_table_already_holding_the_versions_of_a_new_batch_is_an_error(
    tmp_path: Path,
) -> None:
    """Only a table written by an earlier group of the same id (deleted and made again)
    holds versions for app ids this group has not written: its new batches would be
    skipped silently, so the pipeline stops and says to change the app id."""
    world = World(tmp_path)
    log = Log(end=30)
    table = Table()
    for generation in range(1, 10):
        table.versions[f"kgroups/g/{TOPIC}/0/g{generation}"] = 10**6

    async def scenario() -> None:
        loop = pipeline(world, "m", log, table)
        await loop.start(timeout=30)
        with pytest.raises(PipelineError, match="deleted and made again"):
            await asyncio.wait_for(loop.run(), 10)
        assert table.rows == [] and world.committed() == dict.fromkeys(range(PARTITIONS))
        await loop.close()
        fresh = pipeline(world, "m2", log, table, app_id="kgroups/g-2")
        await fresh.start(timeout=3 * SESSION)
        await run_until(fresh, committed_everywhere(world, 30), "a new app id writes")
        assert table.exactly_once(30)

    world.play(scenario)


def test_writing_a_plan_again_commits_only_the_partitions_still_waiting_for_it(
    tmp_path: Path,
) -> None:
    """A batch over four partitions was planned and never written. The heir of two of
    them writes it and reads on; the other two wait (their new owner has not turned yet)
    until the heir gets them too. Writing the plan then must commit the end of those two
    only: committing it for all four would move the first two back (seen in make demo:
    500 records written twice)."""
    world = World(tmp_path)
    log = Log(end=30)
    table = Table()

    async def scenario() -> None:
        await plan_and_die(world, log, table)

        idle, heir = pipeline(world, "idle", log, table), pipeline(world, "heir", log, table)
        await idle.start(timeout=3 * SESSION)
        await heir.start(timeout=3 * SESSION)
        await until(lambda: len(idle.member.assignment) == 2 == len(heir.member.assignment)
                    and idle.member.generation == heir.member.generation, 3 * SESSION, "a split")  # fmt: skip
        mine = sorted(tp.partition for tp in heir.member.assignment)
        log.end = dict.fromkeys(range(PARTITIONS), 45)
        await run_until(heir, lambda: all(world.committed()[p] == 45 for p in mine),
                        "the heir past the plan on its partitions")  # fmt: skip
        theirs = [p for p in range(PARTITIONS) if p not in mine]
        assert [world.committed()[p] for p in theirs] == [0, 0]  # still planned
        await idle.close()  # its partitions go to the heir, still waiting for the plan
        await until(lambda: len(heir.member.assignment) == PARTITIONS, 3 * SESSION, "all four")
        await run_until(heir, committed_everywhere(world, 45), "everything read")
        assert table.exactly_once(45)

    world.play(scenario)


def test_a_new_batch_the_table_skips_stops_the_pipeline_instead_of_losing_it(
    tmp_path: Path,
) -> None:
    """Nobody else writes a member's new batch while it keeps its generation, so a skip
    means another batch had the same app id and version: its records would be lost."""
    world = World(tmp_path)
    log = Log(end=30)
    table = Table()

    async def scenario() -> None:
        loop = pipeline(world, "m", log, table, max_records=10)
        await loop.start(timeout=30)
        while not table.rows:
            await loop.run_once()
        [first] = writer(loop).batches
        table.versions[first.app_id] = 10**6  # as if another batch had taken the version
        with pytest.raises(PipelineError, match="another batch wrote"):
            await asyncio.wait_for(loop.run(), 10)
        assert world.committed() == dict.fromkeys(range(PARTITIONS), 10)  # not past it
        await loop.close()

    world.play(scenario)


def test_a_turn_whose_partitions_are_lost_before_it_reads_the_group_does_nothing(
    tmp_path: Path,
) -> None:
    """A member that loses its partitions while a turn is starting (a zombie waking up:
    its own session check fires first) does not read the group's plans for them and write
    another member's batch for a generation it no longer holds."""
    world = World(tmp_path)
    log = Log(end=30)
    table = Table()

    async def scenario() -> None:
        await plan_and_die(world, log, table)
        heir = pipeline(world, "heir", log, table)
        await heir.start(timeout=3 * SESSION)
        await until(lambda: len(heir.member.assignment) == PARTITIONS, 3 * SESSION, "all mine")
        check = heir._check_partitions

        async def lost_meanwhile() -> None:
            await check()
            heir.on_partitions_lost(frozenset(heir.member.assignment))

        heir._check_partitions = lost_meanwhile  # type: ignore[method-assign]
        progress = await heir.run_once()
        assert progress is not None and not progress.published
        assert writer(heir).batches == [] and table.rows == []
        heir._check_partitions = check  # type: ignore[method-assign]
        await run_until(heir, committed_everywhere(world, 30), "the plan written next turn")
        assert table.exactly_once(30)

    world.play(scenario)
