"""The Spark member's loop (`kgroups.spark.loop.BatchLoop`) on virtual time.

The members are real `GroupMember`s and the coordinator is the real `CoordinatorServer`
(tests/sim/fake_cluster.py); only time, the network and Spark are simulated. Spark is
`Spark` below: a batch's job takes as long as a test says, in virtual seconds, and
`cancel` (Spark's cancelAllJobs) fails a running one, unless the job had already
finished (then the driver wakes with the batch done, as a frozen driver does).

What is checked is what a user of `kgroups.spark` relies on: where reading starts
(committed offsets clamped to what the source holds, auto.offset.reset), that a batch's
commit is pinned to the generation it was planned in (a batch of a lost generation is
refused and never published), that a committed but unpublished batch is published by
the next owner, and that a revocation waits for the batch in flight, whose commit is
then accepted.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from kgroups.client import MemberState
from kgroups.spark.loop import BatchLoop, Progress
from kgroups.spark.plan import OffsetOutOfRange, Reset
from kgroups.spark.publish import STAGING, Batch
from tests.sim.fake_cluster import ADDRESS, FakeCluster, MemoryStore, crash
from tests.sim.fake_loop import FakeTimeLoop, Wire

TOPIC, PARTITIONS = "clicks", 4
SESSION, HEARTBEAT, REBALANCE = 6.0, 1.0, 60.0
PUBLISHED = re.compile(rf"^{TOPIC}-(\d+)-(\d+)-(\d+)\.json$")


class Log:
    """The source: partition p holds offsets [earliest[p], end[p])."""

    def __init__(self, end: int) -> None:
        self.earliest = dict.fromkeys(range(PARTITIONS), 0)
        self.end = dict.fromkeys(range(PARTITIONS), end)

    def offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, tuple[int, int]]:
        return {p: (self.earliest[p], self.end[p]) for p in partitions}

    def read(self, topic: str, ranges: Mapping[int, tuple[int, int]]) -> Any:
        return [(p, o) for p, (s, e) in sorted(ranges.items()) for o in range(s, e)]


class JobCancelled(RuntimeError):
    pass


class Spark:
    """Spark's side of one application. Each batch's job takes `seconds` (virtual)."""

    def __init__(self, seconds: float = 0.0, *, finished_before_cancel: bool = False) -> None:
        self.seconds = seconds
        self.finished_before_cancel = finished_before_cancel
        self.running = False
        self.batches: list[list[tuple[int, int, int]]] = []
        self.cancels = 0
        self._pending = 0.0
        self._cancelled: asyncio.Event | None = None

    def process(self, rows: Any, batches: Sequence[Batch]) -> Mapping[int, Any]:
        self.batches.append([(b.partition, b.start, b.end) for b in batches])
        self._pending = self.seconds
        return {b.partition: {"records": sum(1 for p, _ in rows if p == b.partition)}
                for b in batches}  # fmt: skip

    async def blocking(self, call: Callable[[], Any]) -> Any:
        result = call()
        delay, self._pending = self._pending, 0.0
        if not delay:
            return result
        self.running, self._cancelled = True, asyncio.Event()
        try:
            await asyncio.wait_for(self._cancelled.wait(), delay)
        except TimeoutError:
            return result
        finally:
            self.running = False
        raise JobCancelled("the job was cancelled")

    def cancel(self) -> None:
        self.cancels += 1
        if self._cancelled is not None and not self.finished_before_cancel:
            self._cancelled.set()


class World:
    """One coordinator on virtual time, an output directory, and the test's pipelines."""

    def __init__(self, tmp_path: Path) -> None:
        self.loop = FakeTimeLoop()
        self.store = MemoryStore()
        self.store.create_topic(TOPIC, PARTITIONS)
        self.cluster = FakeCluster(self.loop, self.store)
        self.out = tmp_path / "out"
        self.cut: set[str] = set()
        self.wires: dict[str, list[Wire]] = {}

    def play(self, scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
        async def main() -> None:
            await self.cluster.start()
            await scenario()

        try:
            self.loop.run_until_complete(main())
        finally:
            tasks = asyncio.all_tasks(self.loop)
            for task in tasks:
                task.cancel()
            if tasks:
                self.loop.run_until_complete(asyncio.wait(tasks, timeout=REBALANCE))
            self.loop.close()

    def pipeline(
        self, name: str, source: Log, spark: Spark, reset: Reset = "earliest",
        assignor: str = "range", max_records: int = 10_000,
    ) -> BatchLoop:  # fmt: skip
        self.wires[name] = []
        return BatchLoop(
            bootstrap=ADDRESS, group="g", topic=TOPIC, source=source, process=spark.process,
            output=str(self.out), name=name, auto_offset_reset=reset, poll_interval=0.2,
            cancel=spark.cancel, blocking=spark.blocking, assignors=[assignor],
            max_records=max_records,
            session_timeout_ms=int(SESSION * 1000), heartbeat_interval_ms=int(HEARTBEAT * 1000),
            rebalance_timeout_ms=int(REBALANCE * 1000), retry_backoff_ms=100,
            request_timeout_ms=int(SESSION * 1000),
            connect=self.cluster.connector(name, wires=self.wires[name],
                                           partitioned=lambda: name in self.cut),
        )  # fmt: skip

    def partition(self, name: str) -> None:
        """Packets from and to `name` vanish from now on."""
        self.cut.add(name)
        for wire in self.wires[name]:
            wire.cut = True

    def heal(self, name: str) -> None:
        """`name` is reachable again (its old connections did not survive)."""
        self.cut.discard(name)
        for wire in self.wires[name]:
            if wire.cut:
                wire.reset()

    def tiles(self) -> dict[int, list[tuple[int, int]]]:
        found: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
        if self.out.is_dir():
            for path in self.out.iterdir():
                m = PUBLISHED.match(path.name)
                if m:
                    found[int(m[1])].append((int(m[2]), int(m[3])))
        return {p: sorted(t) for p, t in found.items()}

    def staged(self) -> list[str]:
        return sorted(p.name for p in (self.out / STAGING).rglob("*.json"))

    def committed(self) -> dict[int, int | None]:
        rows = self.store.rows.rows
        return {p: (r.value.offset if (r := rows.get(("offset", "g", TOPIC, p))) else None)
                for p in range(PARTITIONS)}  # fmt: skip


async def until(check: Callable[[], bool], seconds: float, what: str) -> None:
    """Wait (virtual time) until `check()`; fail after `seconds`."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        await asyncio.sleep(0.05)


async def first_turn(loop: BatchLoop) -> Progress:
    """Start `loop`'s member and turn until it has done something."""
    await loop.start(timeout=30)
    for _ in range(100):
        progress = await loop.run_once()
        if progress is not None:
            return progress
        await asyncio.sleep(0.2)
    raise AssertionError(f"{loop.name} never held a generation")


def tiled(tiles: list[tuple[int, int]], end: int) -> bool:
    edge = 0
    for start, stop in tiles:
        if start != edge:
            return False
        edge = stop
    return edge == end


def test_each_commit_tells_the_coordinator_where_the_source_log_ends(tmp_path: Path) -> None:
    world = World(tmp_path)
    log = Log(end=100)

    def known_ends() -> dict[int, int]:
        assert world.cluster.server is not None and world.cluster.server.coordinator
        ends = world.cluster.server.coordinator.core.log_ends
        return {p: ends[(TOPIC, p)].end for p in range(PARTITIONS) if (TOPIC, p) in ends}

    async def scenario() -> None:
        # Batches of 30 records: the commits lag the log, and Kafka's tools must see that.
        member = world.pipeline("m", log, Spark(), max_records=30)
        await first_turn(member)
        assert world.committed() == dict.fromkeys(range(PARTITIONS), 30)
        assert known_ends() == dict.fromkeys(range(PARTITIONS), 100)
        log.end = dict.fromkeys(range(PARTITIONS), 250)
        await member.run_once()
        assert world.committed() == dict.fromkeys(range(PARTITIONS), 60)
        assert known_ends() == dict.fromkeys(range(PARTITIONS), 250)
        await member.close()

    world.play(scenario)


@pytest.mark.parametrize("reset", ["earliest", "latest", "none"])
def test_reading_starts_at_the_committed_offset_clamped_to_what_the_source_holds(
    tmp_path: Path, reset: Reset
) -> None:
    world = World(tmp_path)
    log = Log(end=100)

    async def scenario() -> None:
        before = world.pipeline("before", log, Spark())
        await first_turn(before)
        assert world.committed() == dict.fromkeys(range(PARTITIONS), 100)
        await before.close()
        # Partition 0's source was reset (it holds less than was committed); partition
        # 1's records before 150 were deleted; partitions 2 and 3 grew as usual.
        log.end = {0: 40, 1: 200, 2: 130, 3: 130}
        log.earliest[1] = 150
        after = world.pipeline("after", log, Spark(), reset)
        if reset == "none":
            with pytest.raises(OffsetOutOfRange, match="committed offset 100 is outside"):
                await first_turn(after)
            return
        progress = await first_turn(after)
        starts = {b.partition: b.start for b in progress.published}
        out_of_range = {0: 0, 1: 150} if reset == "earliest" else {0: 40, 1: 200}
        assert starts == {p: s for p, s in {**out_of_range, 2: 100, 3: 100}.items()
                          if s < log.end[p]}  # fmt: skip
        for p in starts:
            assert world.committed()[p] == log.end[p]

    world.play(scenario)


def test_a_revocation_waits_for_the_batch_in_flight_whose_commit_is_accepted(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    log = Log(end=50)
    slow = Spark(seconds=3 * SESSION)  # a batch three session timeouts long
    overlaps: list[str] = []

    async def scenario() -> None:
        first = world.pipeline("first", log, slow)
        second = world.pipeline("second", log, Spark())

        def check() -> None:  # after every step: nobody reads what the batch holds
            mine = {p for batch in slow.batches[-1:] for p, _, _ in batch}
            theirs = {tp.partition for tp in second.member.assignment}
            if slow.running and mine & theirs:
                overlaps.append(f"t={world.loop.time():.2f}: {sorted(mine & theirs)}")

        world.loop.after_step = check
        await first.start(timeout=30)
        generation = first.member.generation
        runner = asyncio.create_task(first.run())
        await until(lambda: slow.running, 5, "the first batch in flight")
        joiner = asyncio.create_task(second.start(timeout=10 * SESSION))
        await asyncio.sleep(2 * SESSION)
        assert slow.running and first.member.state is MemberState.PREPARING
        assert not second.member.assignment and world.tiles() == {p: [] for p in range(PARTITIONS)}
        slow.seconds = 0.0
        await joiner
        second_runner = asyncio.create_task(second.run())
        await until(lambda: len(second.member.assignment) == 2, 10, "the partitions split")
        assert first.member.generation > generation and slow.cancels == 0
        assert world.tiles() == {p: [(0, 50)] for p in range(PARTITIONS)}
        assert world.committed() == dict.fromkeys(range(PARTITIONS), 50)
        log.end = dict.fromkeys(range(PARTITIONS), 80)
        await until(lambda: world.committed() == dict.fromkeys(range(PARTITIONS), 80), 10,
                    "both members read on from where the held batch ended")  # fmt: skip
        assert world.tiles() == {p: [(0, 50), (50, 80)] for p in range(PARTITIONS)}
        assert first.member.error is None and not overlaps
        first.stop(), second.stop()
        await asyncio.gather(runner, second_runner)

    world.play(scenario)


@pytest.mark.parametrize("finished", [False, True], ids=["cancelled", "finished-and-refused"])
def test_a_batch_of_a_lost_generation_is_never_committed_or_published(
    tmp_path: Path, finished: bool, caplog: pytest.LogCaptureFixture
) -> None:
    world = World(tmp_path)
    log = Log(end=50)
    cut_off = Spark(seconds=5 * SESSION, finished_before_cancel=finished)

    async def scenario() -> None:
        zombie = world.pipeline("zombie", log, cut_off)
        other = world.pipeline("other", log, Spark())
        await zombie.start(timeout=30)
        await other.start(timeout=30)
        await until(lambda: len(zombie.member.assignment) == 2 == len(other.member.assignment)
                    and zombie.member.state is MemberState.STABLE, 30, "two members")  # fmt: skip
        planned_in = zombie.member.generation
        mine = {tp.partition for tp in zombie.member.assignment}
        turn = asyncio.create_task(zombie.run_once())
        await until(lambda: cut_off.running, 5, "the zombie's batch in flight")
        world.partition("zombie")  # it hears nothing: the group moves on without it
        runner = asyncio.create_task(other.run())
        await until(lambda: all(tiled(t, 50) for t in world.tiles().values()), 3 * SESSION,
                    "the other member read the zombie's partitions from the start")  # fmt: skip
        world.heal("zombie")  # back in the group, in a later generation, batch in hand
        await until(lambda: zombie.member.state is MemberState.STABLE
                    and len(zombie.member.assignment) == 2, 3 * SESSION, "the zombie back")  # fmt: skip
        assert zombie.member.generation > planned_in
        progress = await turn
        assert progress is not None and progress.dropped and not progress.published
        assert {b.partition for b in progress.dropped} == mine
        assert cut_off.cancels == 1
        assert world.tiles() == {p: [(0, 50)] for p in range(PARTITIONS)}
        assert world.committed() == dict.fromkeys(range(PARTITIONS), 50)
        assert not [name for name in world.staged() if "zombie" in name]
        other.stop()
        await runner
        crash(zombie.member, world.wires["zombie"])

    with caplog.at_level(logging.WARNING, logger="kgroups.spark.loop"):
        world.play(scenario)
    why = "commit refused" if finished else "the batch was cancelled"
    assert any(why in r.getMessage() for r in caplog.records if "zombie" in r.getMessage())


def test_a_cooperative_rebalance_that_keeps_the_batchs_partitions_lets_it_commit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch planned in generation g whose partitions the member holds throughout
    (kept by cooperative rebalances, or revoked only after it ends) commits in the
    generation it ends in: no work is thrown away and done again."""
    world = World(tmp_path)
    log = Log(end=50)
    slow = Spark(seconds=3 * SESSION)

    async def scenario() -> None:
        first = world.pipeline("first", log, slow, assignor="cooperative-sticky")
        second = world.pipeline("second", log, Spark(), assignor="cooperative-sticky")
        await first.start(timeout=30)
        planned_in = first.member.generation
        runner = asyncio.create_task(first.run())
        await until(lambda: slow.running, 5, "the first batch in flight")
        await second.start(timeout=10 * SESSION)
        second_runner = asyncio.create_task(second.run())
        await until(lambda: len(second.member.assignment) == 2, 10 * SESSION, "the split")
        assert first.member.generation > planned_in + 1  # two cooperative rounds
        await until(lambda: world.committed() == dict.fromkeys(range(PARTITIONS), 50), 10,
                    "everything committed")  # fmt: skip
        assert world.tiles() == {p: [(0, 50)] for p in range(PARTITIONS)}
        assert len(slow.batches) == 1  # the held batch committed; nothing was read twice
        first.stop(), second.stop()
        await asyncio.gather(runner, second_runner)

    with caplog.at_level(logging.WARNING, logger="kgroups.spark.loop"):
        world.play(scenario)
    assert not [r for r in caplog.records if "dropping" in r.getMessage()]


class Crash(Exception):
    """The process died here."""


def test_a_committed_but_unpublished_batch_is_published_by_the_next_owner(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    log = Log(end=30)

    async def scenario() -> None:
        dies = world.pipeline("dies", log, Spark())
        publish = dies.outbox.publish

        def crash_before_publishing(metadata: str) -> Path:
            raise Crash(metadata)

        dies.outbox.publish = crash_before_publishing  # type: ignore[method-assign]
        with pytest.raises(Crash):
            await first_turn(dies)
        crash(dies.member, world.wires["dies"])
        assert world.committed() == dict.fromkeys(range(PARTITIONS), 30)  # the decision
        assert world.tiles() == {p: [] for p in range(PARTITIONS)} and len(world.staged()) == 4
        dies.outbox.publish = publish  # type: ignore[method-assign]

        log.end = dict.fromkeys(range(PARTITIONS), 45)
        heir = world.pipeline("heir", log, Spark())
        await heir.start(timeout=3 * SESSION)  # after the dead member's session expires
        assert {tp.partition for tp in heir.member.assignment} == set(range(PARTITIONS))
        runner = asyncio.create_task(heir.run())
        await until(lambda: world.committed() == dict.fromkeys(range(PARTITIONS), 45), 10,
                    "the heir to read on")  # fmt: skip
        assert world.tiles() == {p: [(0, 30), (30, 45)] for p in range(PARTITIONS)}
        assert world.staged() == []
        heir.stop()
        await runner

    world.play(scenario)
