"""A virtual-time world for the Spark member's loop: one real coordinator
(tests/sim/fake_cluster.py), real `GroupMember`s (or `ConsumerProtocolMember`s: a world
of Kafka 4's consumer protocol), a simulated source and Spark.

Spark is `Spark`: a batch's job takes as long as a test says, in virtual seconds, and
`cancel` (Spark's cancelAllJobs) fails a running one, unless the job had already
finished (then the driver wakes with the batch done, as a frozen driver does).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

from kgroups.coordinator.core import CoordinatorConfig
from kgroups.spark.loop import BatchLoop, Progress
from kgroups.spark.plan import Reset
from kgroups.spark.publish import STAGING, Batch
from tests.sim.fake_cluster import ADDRESS, FakeCluster, MemoryStore
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
        self.running = 0
        """Jobs running now (turns side by side run theirs at once)."""
        self.batches: list[list[tuple[int, int, int]]] = []
        self.cancels = 0
        self._pending = 0.0
        self._cancelled: set[asyncio.Event] = set()

    def process(self, rows: Any, batches: Sequence[Batch]) -> Mapping[int, Any]:
        self.batches.append([(b.partition, b.start, b.end) for b in batches])
        self.job()
        return {b.partition: {"records": sum(1 for p, _ in rows if p == b.partition)}
                for b in batches}  # fmt: skip

    def job(self) -> None:
        """A batch's job starts: the blocking call running it takes `seconds`."""
        self._pending = self.seconds

    async def blocking(self, call: Callable[[], Any]) -> Any:
        result = call()
        delay, self._pending = self._pending, 0.0
        if not delay:
            return result
        cancelled = asyncio.Event()
        self.running += 1
        self._cancelled.add(cancelled)
        try:
            await asyncio.wait_for(cancelled.wait(), delay)
        except TimeoutError:
            return result
        finally:
            self.running -= 1
            self._cancelled.discard(cancelled)
        raise JobCancelled("the job was cancelled")

    def cancel(self) -> None:
        """Spark's cancelAllJobs: every running job fails."""
        self.cancels += 1
        if not self.finished_before_cancel:
            for job in self._cancelled:
                job.set()


class World:
    """One coordinator on virtual time, an output directory, and the test's pipelines,
    whose members speak `protocol` (classic, or consumer: the coordinator gives them a
    SESSION-long session and a HEARTBEAT interval)."""

    def __init__(self, tmp_path: Path, protocol: str = "classic") -> None:
        self.protocol = protocol
        self.loop = FakeTimeLoop()
        self.store = MemoryStore()
        self.store.create_topic(TOPIC, PARTITIONS)
        self.cluster = FakeCluster(self.loop, self.store)
        self.out = tmp_path / "out"
        self.cut: set[str] = set()
        self.wires: dict[str, list[Wire]] = {}

    def play(self, scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
        async def main() -> None:
            await self.cluster.start(CoordinatorConfig(
                group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=1000,
                group_consumer_session_timeout_ms=int(SESSION * 1000),
                group_consumer_heartbeat_interval_ms=int(HEARTBEAT * 1000),
            ))  # fmt: skip
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
        assignor: str = "range", max_records: int = 10_000, **options: Any,
    ) -> BatchLoop:  # fmt: skip
        """A pipeline publishing to the JSON outbox in `out`, unless `options` give
        another sink (and its transform)."""
        self.wires[name] = []
        topic = options.pop("topic", TOPIC)
        if "sink" not in options:
            options |= {"process": spark.process, "output": str(self.out)}
        if self.protocol == "consumer":  # the coordinator assigns
            options |= {"group_protocol": "consumer"}
        else:
            options |= {"assignors": [assignor]}
        return BatchLoop(
            bootstrap=ADDRESS, group="g", topic=topic, source=source, name=name,
            auto_offset_reset=reset, poll_interval=0.2,
            cancel=spark.cancel, blocking=spark.blocking,
            max_records=max_records,
            session_timeout_ms=int(SESSION * 1000), heartbeat_interval_ms=int(HEARTBEAT * 1000),
            rebalance_timeout_ms=int(REBALANCE * 1000), retry_backoff_ms=100,
            request_timeout_ms=int(SESSION * 1000),
            connect=self.cluster.connector(name, wires=self.wires[name],
                                           partitioned=lambda: name in self.cut),
            **options,
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
    # (A consumer-protocol member has joined once answered; its partitions follow.)
    await until(lambda: bool(loop.member.assignment), 30, f"{loop.name}'s partitions")
    for _ in range(100):
        progress = await loop.run_once()
        if progress is not None:
            return progress
        await asyncio.sleep(0.2)
    raise AssertionError(f"{loop.name} never held a generation")


async def survivor_in_flight(
    survivor: BatchLoop, dies: BatchLoop, spark: Spark
) -> tuple[set[int], set[int], asyncio.Task[None]]:
    """Start both members, wait until they hold two partitions each, then run
    `survivor` until its first batch is in flight on `spark`: (the survivor's
    partitions, the other's, the survivor's running task)."""
    await survivor.start(timeout=30)
    await dies.start(timeout=30)
    await until(lambda: len(survivor.member.assignment) == 2 == len(dies.member.assignment)
                and survivor.member.state == dies.member.state == "stable",
                10 * SESSION, "the split")  # fmt: skip
    mine = {tp.partition for tp in survivor.member.assignment}
    runner = asyncio.create_task(survivor.run())
    await until(lambda: spark.running == 1, 5, "the survivor's batch in flight")
    return mine, set(range(PARTITIONS)) - mine, runner


def tiled(tiles: list[tuple[int, int]], end: int) -> bool:
    edge = 0
    for start, stop in tiles:
        if start != edge:
            return False
        edge = stop
    return edge == end
