"""What the pipeline does with what the source says: a topic that grew there is grown on
the coordinator (and its new partitions read), a start by time begins at the first
record at or after it, and where growing is not possible it says why, once.

On test_loop.py's virtual-time world (a real coordinator, real members); the growth
goes through kgroups' admin client over the same simulated network.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from kgroups.spark.growth import TopicAdmin, TopicGrowth
from kgroups.spark.plan import reset_time, start_offset
from tests.unit.spark.world import PARTITIONS, SESSION, TOPIC, Log, Spark, World, until


class Source(Log):
    """The test's log, with a partition count and record timestamps (offset o of any
    partition was written at `base_ms + o`)."""

    def __init__(self, end: int, partitions: int = PARTITIONS, base_ms: int = 0) -> None:
        super().__init__(end)
        self.count = PARTITIONS  # what Log holds; grown below
        self.base_ms = base_ms
        self.asked: list[int] = []
        self.grow(partitions, end)

    def grow(self, partitions: int, end: int) -> None:
        for p in range(self.count, partitions):
            self.earliest[p], self.end[p] = 0, end
        self.count = partitions

    def partitions(self, topic: str) -> int | None:
        return self.count

    def offsets_for_time(
        self, topic: str, partitions: Sequence[int], timestamp_ms: int
    ) -> dict[int, int | None]:
        self.asked.append(timestamp_ms)
        at = timestamp_ms - self.base_ms
        return {p: (max(at, 0) if at < self.end[p] else None) for p in partitions}


def committed(world: World, partitions: int, topic: str = TOPIC) -> dict[int, int | None]:
    rows = world.store.rows.rows
    return {p: (r.value.offset if (r := rows.get(("offset", "g", topic, p))) else None)  # type: ignore[union-attr]
            for p in range(partitions)}  # fmt: skip


def six_pipeline(world: World, source: Source) -> Any:
    """A pipeline on topic "six", checking the source's partitions every second."""
    return world.pipeline("m", source, Spark(), partition_check_interval=1.0, topic="six")


def test_a_topic_that_grows_in_the_source_grows_on_the_coordinator_and_is_read(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    source = Source(end=20)

    async def scenario() -> None:
        a = world.pipeline("a", source, Spark(), partition_check_interval=1.0)
        b = world.pipeline("b", source, Spark(), partition_check_interval=1.0)
        await a.start(timeout=30)
        await b.start(timeout=30)
        runners = [asyncio.create_task(x.run()) for x in (a, b)]
        await until(lambda: committed(world, 4) == dict.fromkeys(range(4), 20), 30, "4 read")
        source.grow(6, 30)  # Kafka's topic now has six partitions
        await until(lambda: committed(world, 6) == {0: 20, 1: 20, 2: 20, 3: 20, 4: 30, 5: 30},
                    10 * SESSION, "the new partitions read")  # fmt: skip
        owned = [tp.partition for x in (a, b) for tp in x.member.assignment]
        assert sorted(owned) == list(range(6))  # each owned once
        a.stop(), b.stop()
        await asyncio.gather(*runners)

    world.play(scenario)


def test_a_start_by_time_begins_at_the_first_record_at_or_after_it(tmp_path: Path) -> None:
    world = World(tmp_path)
    source = Source(end=50, base_ms=1_000_000)

    async def scenario() -> None:
        loop = world.pipeline("m", source, Spark(), reset="by_timestamp:1000017")
        await loop.start(timeout=30)
        while (progress := await loop.run_once()) is None:
            await asyncio.sleep(0.2)
        [batch] = progress.published
        assert batch.ranges == tuple((p, 17, 50) for p in range(PARTITIONS))
        assert source.asked == [1_000_017]
        await loop.close()
        # Committed offsets win over the reset: a later member reads on from them.
        source.end = dict.fromkeys(range(PARTITIONS), 60)
        later = world.pipeline("later", source, Spark(), reset="by_duration:PT1H")
        await later.start(timeout=3 * SESSION)
        while (progress := await later.run_once()) is None:
            await asyncio.sleep(0.2)
        assert progress.published[0].ranges == tuple((p, 50, 60) for p in range(PARTITIONS))
        assert source.asked == [1_000_017]
        await later.close()

    world.play(scenario)


def test_resets_by_time_are_kafkas_and_need_a_source_with_timestamps(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    assert reset_time("by_duration:PT1H", now) == now - 3_600_000
    assert reset_time("by_duration:P1DT2H3M4.5S", now) == now - (93_784_500)
    assert reset_time("by_timestamp:1700000000000", now) == 1_700_000_000_000
    assert reset_time("earliest", now) is None
    for bad in ("by_duration:1h", "by_duration:P", "by_timestamp:-5", "newest"):
        with pytest.raises(ValueError, match="by_duration"):
            reset_time(bad, now)
    # No record at or after the time yet: the end, as Kafka's consumer does.
    assert start_offset(None, 0, 90, "by_duration:PT1S", found=None) == 90
    assert start_offset(None, 10, 90, "by_timestamp:5", found=3) == 10
    assert start_offset(40, 10, 90, "by_timestamp:5", found=3) == 40  # committed wins
    world = World(tmp_path)
    with pytest.raises(ValueError, match="no record timestamps"):
        world.pipeline("m", Log(end=1), Spark(), reset="by_duration:PT1H")


class RefusingAdmin:
    def __init__(self) -> None:
        self.calls = 0

    async def topics(self, names: list[str] | None = None) -> dict[str, int]:
        self.calls += 1
        return {TOPIC: 4}

    async def create_topic(self, name: str, partitions: int) -> None:
        raise AssertionError("the topic exists")

    async def create_partitions(self, name: str, partitions: int) -> None:
        raise PermissionError("TOPIC_AUTHORIZATION_FAILED: not allowed to alter clicks")


def test_a_coordinator_that_cannot_grow_is_reported_once_and_the_group_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    admin = RefusingAdmin()

    async def session(use: Callable[[TopicAdmin], Awaitable[None]]) -> None:
        await use(admin)

    growth = TopicGrowth(TOPIC, session, interval=5)

    async def checks() -> list[Any]:
        return [await growth.check(6, now) for now in (0.0, 5.0, 10.0)]

    with caplog.at_level(logging.INFO, logger="kgroups.spark.growth"):
        assert asyncio.run(checks()) == [False, False, False]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "TOPIC_AUTHORIZATION_FAILED" in said[0], said
    assert admin.calls == 6 and not growth.due(12.0) and growth.due(15.0)  # look, re-look


def test_partitions_the_source_did_not_know_yet_are_read_once_it_does(tmp_path: Path) -> None:
    """The coordinator's topic has six partitions, the source's metadata four (a Kafka
    client's view lags a topic just grown): partitions 4 and 5 wait, then are read from
    where the group left them once the source knows them, in the same generation."""
    world = World(tmp_path)
    world.store.create_topic("six", 6)
    source = Source(end=20, partitions=6)
    source.count = 4  # what the source says for now

    async def scenario() -> None:
        loop = six_pipeline(world, source)
        await loop.start(timeout=30)
        runner = asyncio.create_task(loop.run())
        await until(lambda: committed(world, 6, "six") == {0: 20, 1: 20, 2: 20, 3: 20, 4: None,
                                                          5: None}, 30, "four read")  # fmt: skip
        generation = loop.member.generation
        source.count = 6
        await until(lambda: committed(world, 6, "six") == dict.fromkeys(range(6), 20), 30,
                    "the other two read")  # fmt: skip
        assert loop.member.generation == generation and loop.member.error is None
        loop.stop()
        await runner

    world.play(scenario)
