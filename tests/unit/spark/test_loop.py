"""The Spark member's loop (`kgroups.spark.loop.BatchLoop`) on virtual time.

The members are real `GroupMember`s and the coordinator is the real `CoordinatorServer`
(tests/sim/fake_cluster.py); only time, the network and Spark are simulated
(tests/unit/spark/world.py). These tests run the JSON outbox (stage, commit, publish);
test_table_loop.py runs the other sinks' protocols.

What is checked is what a user of `kgroups.spark` relies on: where reading starts
(committed offsets clamped to what the source holds, auto.offset.reset), that a batch's
commit is pinned to the generation it was planned in (a batch of a lost generation is
refused and never published), that a committed but unpublished batch is published by
the next owner, and that a revocation waits for the batch in flight, whose commit is
then accepted. The tests marked `protocols` run twice: with classic members
(cooperative-sticky, the pipeline's default) and with members of Kafka 4's consumer
protocol (`group_protocol="consumer"`), where the coordinator assigns and a member
revokes while it goes on heartbeating.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from kgroups.client import MemberState
from kgroups.spark.plan import OffsetOutOfRange, Reset
from kgroups.spark.sinks import OutboxSink
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
    tiled,
    until,
)  # fmt: skip


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
        starts = {p: s for b in progress.published for p, s, _ in b.ranges}
        out_of_range = {0: 0, 1: 150} if reset == "earliest" else {0: 40, 1: 200}
        assert starts == {p: s for p, s in {**out_of_range, 2: 100, 3: 100}.items()
                          if s < log.end[p]}  # fmt: skip
        for p in starts:
            assert world.committed()[p] == log.end[p]

    world.play(scenario)


PROTOCOLS = pytest.mark.parametrize("protocol", ["classic", "consumer"])


@PROTOCOLS
def test_a_revocation_waits_for_the_batch_in_flight_whose_commit_is_accepted(
    tmp_path: Path, protocol: str
) -> None:
    world = World(tmp_path, protocol)
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
        if protocol == "classic":
            assert slow.running and first.member.state is MemberState.PREPARING
        else:  # revoking the joiner's share while it heartbeats
            assert slow.running and first.member.state is MemberState.STABLE
            assert len(first.member.revoking) == 2 and len(first.member.assignment) == 2
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


@PROTOCOLS
@pytest.mark.parametrize("finished", [False, True], ids=["cancelled", "finished-and-refused"])
def test_a_batch_of_a_lost_generation_is_never_committed_or_published(
    tmp_path: Path, finished: bool, caplog: pytest.LogCaptureFixture, protocol: str
) -> None:
    world = World(tmp_path, protocol)
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
        assert {p for b in progress.dropped for p in b.partitions} == mine
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


@PROTOCOLS
def test_a_cooperative_rebalance_that_keeps_the_batchs_partitions_lets_it_commit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, protocol: str
) -> None:
    """A batch planned in generation g whose partitions the member holds throughout
    (kept by cooperative rebalances, or revoked only after it ends) commits in the
    generation it ends in: no work is thrown away and done again. (Under the consumer
    protocol the commit carries the older epoch it was planned at: Kafka 4.3's rule
    accepts it for partitions held since.)"""
    world = World(tmp_path, protocol)
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
        # Two cooperative rounds; under the consumer protocol the epoch moves once at least.
        assert first.member.generation > planned_in + (1 if protocol == "classic" else 0)
        await until(lambda: world.committed() == dict.fromkeys(range(PARTITIONS), 50), 10,
                    "everything committed")  # fmt: skip
        assert world.tiles() == {p: [(0, 50)] for p in range(PARTITIONS)}
        assert len(slow.batches) == 1  # the held batch committed; nothing was read twice
        first.stop(), second.stop()
        await asyncio.gather(runner, second_runner)

    with caplog.at_level(logging.WARNING, logger="kgroups.spark.loop"):
        world.play(scenario)
    assert not [r for r in caplog.records if "dropping" in r.getMessage()]


@PROTOCOLS
def test_a_survivor_starts_a_dead_members_partitions_beside_its_batch_in_flight(
    tmp_path: Path, protocol: str
) -> None:
    """Takeover does not wait for the survivor's batch in flight: the partitions a
    cooperative rebalance gives it start in a turn of their own at once, and once both
    turns end the partitions go on in one batch again. Every record once."""
    world = World(tmp_path, protocol)
    log = Log(end=1000)
    slow = Spark(seconds=8 * SESSION)

    async def scenario() -> None:
        survivor = world.pipeline("survivor", log, slow, assignor="cooperative-sticky")
        dies = world.pipeline("dies", log, Spark(), assignor="cooperative-sticky")
        mine, theirs, runner = await survivor_in_flight(survivor, dies, slow)
        crash(dies.member, world.wires["dies"])
        slow.seconds = 1.0  # the takeover's batch is short: it must not wait for the long one
        committed = world.committed
        await until(lambda: all(committed()[p] == 1000 for p in theirs), 3 * SESSION,
                    "the dead member's partitions read to the end")  # fmt: skip
        assert slow.running == 1 and all(committed()[p] is None for p in mine)
        await until(lambda: all(committed()[p] == 1000 for p in mine), 8 * SESSION, "the rest")
        log.end = dict.fromkeys(range(PARTITIONS), 1500)
        await until(lambda: committed() == dict.fromkeys(range(PARTITIONS), 1500), 3 * SESSION,
                    "the next records")  # fmt: skip
        assert [sorted(p for p, _, _ in b) for b in slow.batches] == [
            sorted(mine),
            sorted(theirs),
            list(range(PARTITIONS)),
        ]  # two turns side by side, then one batch of every partition
        assert world.tiles() == {p: [(0, 1000), (1000, 1500)] for p in range(PARTITIONS)}
        survivor.stop()
        await runner

    world.play(scenario)


class Crash(Exception):
    """The process died here."""


@PROTOCOLS
def test_a_committed_but_unpublished_batch_is_published_by_the_next_owner(
    tmp_path: Path, protocol: str
) -> None:
    world = World(tmp_path, protocol)
    log = Log(end=30)

    async def scenario() -> None:
        dies = world.pipeline("dies", log, Spark())
        assert isinstance(dies.sink, OutboxSink)
        outbox = dies.sink.outbox
        publish = outbox.publish

        def crash_before_publishing(metadata: str) -> Path:
            raise Crash(metadata)

        outbox.publish = crash_before_publishing  # type: ignore[method-assign]
        with pytest.raises(Crash):
            await first_turn(dies)
        crash(dies.member, world.wires["dies"])
        assert world.committed() == dict.fromkeys(range(PARTITIONS), 30)  # the decision
        assert world.tiles() == {p: [] for p in range(PARTITIONS)} and len(world.staged()) == 4
        outbox.publish = publish  # type: ignore[method-assign]

        log.end = dict.fromkeys(range(PARTITIONS), 45)
        heir = world.pipeline("heir", log, Spark())
        await heir.start(timeout=3 * SESSION)
        await until(lambda: {tp.partition for tp in heir.member.assignment}
                    == set(range(PARTITIONS)), 3 * SESSION,
                    "every partition, once the dead member's session expired")  # fmt: skip
        runner = asyncio.create_task(heir.run())
        await until(lambda: world.committed() == dict.fromkeys(range(PARTITIONS), 45), 10,
                    "the heir to read on")  # fmt: skip
        assert world.tiles() == {p: [(0, 30), (30, 45)] for p in range(PARTITIONS)}
        assert world.staged() == []
        heir.stop()
        await runner

    world.play(scenario)


def test_a_pipeline_rebalances_cooperatively_unless_told_otherwise() -> None:
    """An eager rebalance would hold every member's batch in flight before anyone got a
    dead member's partitions: a Spark pipeline defaults to cooperative-sticky."""
    from prometheus_client import CollectorRegistry

    from kgroups.spark.loop import BatchLoop

    def loop(**options: object) -> BatchLoop:
        return BatchLoop(bootstrap="127.0.0.1:9", group="g", topic=TOPIC, source=Log(end=0),
                         process=Spark().process, output="out", registry=CollectorRegistry(),
                         **options)  # fmt: skip

    assert loop().member.protocol == "cooperative"
    assert loop(assignors=["range"]).member.protocol == "eager"
