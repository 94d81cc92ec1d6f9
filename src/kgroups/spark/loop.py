"""The Spark member's loop, on the member's own event loop: one batch at a time, exactly once.

`BatchLoop` is the whole decision-making of a Spark application in a group, and it
knows nothing of Spark: the source, the user's `process` function and the outbox are
plain blocking calls that the loop hands to `blocking` (threads in production, so the
member keeps heartbeating while Spark works; in the tests, virtual time). Each turn:

1. take the member's generation and assignment (only while it is stable);
2. on a new generation, read the group's committed offsets for the assignment, roll
   forward each partition's committed-but-unpublished batch and sweep what its earlier
   owners staged but never got committed (`publish.Outbox.roll_forward`), and set each
   position from the committed offset (Kafka's auto.offset.reset when there is none or
   it is out of range, `plan.start_offset`);
3. plan one batch per partition with new records (`plan.next_batches`), read their
   ranges as one DataFrame, and run the user's `process(frame, batches)`, which returns
   each partition's output (JSON);
4. stage the outputs, commit every batch's end offset pinned to the generation the batch
   was planned in, with metadata naming the staged output (the decision), then publish.

The commit is the only fence: the loop never decides by itself that its work still
counts. A member that slept through its session (a frozen process) wakes with its batch
done, stages it and commits: the commit is refused, the loop discards what it staged
and reads again from what the group committed. When the outcome of a commit is unknown
(the coordinator went away before answering), the staged output stays: if the commit
was accepted its metadata names it, and the next turn (or the next owner) publishes it.

What it does is measured (`metrics.SparkMetrics`, in the member's registry): records and
micro-batches completed, each micro-batch's duration on the member's clock, and the lag
behind the ends the source reported on each turn.

The loop is the member's rebalance listener. A turn in flight holds a revocation until
it ends (its commit is still allowed while the member prepares to rejoin), bounded by
the member's rebalance timeout: past it the member reports the partitions lost. A loss
calls `cancel` (Spark's cancelAllJobs) so the batch stops at once; a batch that fails
after a loss is dropped, one that fails otherwise is the application's error and ends
the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from kgroups.client import (
    CommitFailedError,
    CoordinatorUnavailable,
    GroupMember,
    MemberError,
    MemberState,
    OffsetAndMetadata,
    RebalanceInProgressError,
    TopicPartition,
)
from kgroups.spark.metrics import LoopStats, SparkMetrics
from kgroups.spark.plan import Reset, next_batches, start_offset
from kgroups.spark.publish import Batch, Outbox
from kgroups.spark.sources import Source

log = logging.getLogger(__name__)
T = TypeVar("T")

Process = Callable[[Any, Sequence[Batch]], Mapping[int, Any]]
"""(the batch's DataFrame, its batches) -> partition -> that partition's output."""

Blocking = Callable[[Callable[[], Any]], Awaitable[Any]]
"""Runs a blocking call away from the event loop (`asyncio.to_thread`)."""


@dataclass
class Progress:
    """What one turn of the loop did."""

    generation: int
    published: list[Batch]
    dropped: list[Batch]


async def _in_thread(call: Callable[[], T]) -> T:
    return await asyncio.to_thread(call)


class BatchLoop:
    """See the module docstring. `member_options` go to `GroupMember`; `registry` (default
    prometheus_client's) receives the member's metrics and the loop's."""

    def __init__(
        self,
        *,
        bootstrap: str,
        group: str,
        topic: str,
        source: Source,
        process: Process,
        output: str,
        name: str = "spark",
        auto_offset_reset: Reset = "earliest",
        max_records: int = 10_000,
        poll_interval: float = 0.5,
        cancel: Callable[[], None] = lambda: None,
        blocking: Blocking = _in_thread,
        registry: CollectorRegistry | None = None,
        **member_options: Any,
    ) -> None:
        self.topic = topic
        self.source = source
        self.process = process
        self.outbox = Outbox(output)
        self.name = name
        self.reset: Reset = auto_offset_reset
        self.max_records = max_records
        self.poll_interval = poll_interval
        self.cancel = cancel
        self.blocking = blocking
        self.member = GroupMember(
            bootstrap, group, [topic], listener=self, client_id=name, registry=registry,
            **member_options,
        )  # fmt: skip
        self.stats = LoopStats(SparkMetrics.of(registry), group, topic)
        self.generation: int | None = None
        """The generation `positions` belong to (None: read committed offsets again)."""
        self.positions: dict[int, int] = {}
        self.stopping = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._lost = False

    # -- the member's rebalance listener ---------------------------------------------------

    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        await self._idle.wait()

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self._lost = True
        self.generation = None
        self.stats.lag(0)  # their lag is no longer this member's
        if not self._idle.is_set():
            log.warning("%s: partitions lost mid-batch: cancelling its Spark jobs", self.name)
            self.cancel()

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        pass  # the next turn reads the new assignment (and where to start) itself

    # -- running ---------------------------------------------------------------------------

    async def start(self, timeout: float | None = None) -> None:
        await self.member.start(timeout=timeout)

    async def run(self) -> None:
        """Turn the loop until `stop()` (or the member fails, which raises)."""
        while not self.stopping.is_set():
            progress = await self.run_once()
            if progress is None:  # no generation: go on the moment one forms
                with contextlib.suppress(TimeoutError, MemberError):
                    await self.member.wait_stable(timeout=self.poll_interval)
                if self.member.state is MemberState.STABLE or self.member.error is not None:
                    continue
            elif progress.published or progress.dropped:
                continue
            with contextlib.suppress(TimeoutError):  # nothing new to read (or closing)
                await asyncio.wait_for(self.stopping.wait(), self.poll_interval)

    def stop(self) -> None:
        self.stopping.set()

    async def close(self) -> None:
        await self.member.close()
        self.stats.close()

    async def run_once(self) -> Progress | None:
        """One turn; None when the member holds no generation."""
        member = self.member
        if member.error is not None:
            raise member.error
        if member.state is not MemberState.STABLE:
            return None
        self._idle.clear()
        self._lost = False
        try:
            return await self._turn(member.generation, member.assignment)
        finally:
            self._idle.set()

    async def _turn(self, generation: int, owned: frozenset[TopicPartition]) -> Progress:
        mine = sorted(tp.partition for tp in owned if tp.topic == self.topic)
        if generation != self.generation:
            try:
                await self._new_generation(generation, mine)
            except (CoordinatorUnavailable, RebalanceInProgressError) as exc:
                log.warning("%s: cannot read where to start yet: %s", self.name, exc)
                return Progress(generation, [], [])  # nothing done: try again shortly
        started = asyncio.get_running_loop().time()
        held = await self.blocking(lambda: self.source.offsets(self.topic, mine))
        ends = {p: end for p, (_, end) in held.items()}
        self._report_lag(ends)
        batches = next_batches(
            self.topic, generation, self.name,
            {p: self.positions[p] for p in mine}, ends, self.max_records,
        )  # fmt: skip
        if not batches:
            return Progress(generation, [], [])
        log.info("%s: generation %d: batch %s", self.name, generation,
                 [(b.partition, b.start, b.end) for b in batches])  # fmt: skip
        ranges = {b.partition: (b.start, b.end) for b in batches}
        try:
            outputs = await self.blocking(
                lambda: self.process(self.source.read(self.topic, ranges), batches)
            )
        except Exception:
            if not self._lost:
                raise
            return self._drop(batches, "the partitions were lost: the batch was cancelled")
        progress = await self._commit(generation, batches, outputs, ends)
        if progress.published:
            self._report_lag(ends)
            self.stats.completed(sum(b.end - b.start for b in batches),
                                 asyncio.get_running_loop().time() - started)  # fmt: skip
        return progress

    def _report_lag(self, ends: Mapping[int, int]) -> None:
        """The source's ends less where the member is (its committed offsets)."""
        self.stats.lag(sum(max(end - self.positions.get(p, end), 0) for p, end in ends.items()))

    async def _new_generation(self, generation: int, partitions: list[int]) -> None:
        tps = [TopicPartition(self.topic, p) for p in partitions]
        committed = await self.member.committed(tps)
        metadata = {tp.partition: (r.metadata if r else None) for tp, r in committed.items()}

        def roll_forward() -> dict[int, tuple[int, int]]:
            for p in partitions:
                self.outbox.roll_forward(self.topic, p, metadata.get(p))
            return self.source.offsets(self.topic, partitions)

        held = await self.blocking(roll_forward)
        positions = {}
        for tp in tps:
            record = committed.get(tp)
            earliest, end = held[tp.partition]
            positions[tp.partition] = start_offset(
                record.offset if record else None, earliest, end, self.reset, where=str(tp)
            )
        self.positions, self.generation = positions, generation
        log.info("%s: generation %d: reading %s from %s", self.name, generation,
                 self.topic, positions)  # fmt: skip

    async def _commit(
        self,
        generation: int,
        batches: list[Batch],
        outputs: Mapping[int, Any],
        ends: Mapping[int, int],
    ) -> Progress:
        staged = await self.blocking(
            lambda: {b: self.outbox.stage(b, outputs.get(b.partition, {})) for b in batches}
        )
        offsets = {
            TopicPartition(self.topic, b.partition): OffsetAndMetadata(b.end, metadata)
            for b, metadata in staged.items()
        }
        # The source's end goes with the commit: Kafka's tools then show the true lag.
        log_ends = {TopicPartition(self.topic, p): end for p, end in ends.items()}
        try:
            await self.member.commit(offsets, generation=generation, log_ends=log_ends)
        except (CommitFailedError, RebalanceInProgressError) as exc:

            def discard() -> None:
                for b in batches:
                    self.outbox.discard(b)

            await self.blocking(discard)
            return self._drop(batches, f"commit refused: {exc}")
        except (CoordinatorUnavailable, MemberError) as exc:
            # Maybe accepted: the staged output stays for whoever reads the commit next.
            return self._drop(batches, f"commit outcome unknown: {exc}")

        def publish() -> None:
            for metadata in staged.values():
                self.outbox.publish(metadata)

        await self.blocking(publish)
        for b in batches:
            self.positions[b.partition] = b.end
        return Progress(generation, batches, [])

    def _drop(self, batches: list[Batch], why: str) -> Progress:
        log.warning("%s: dropping %s: %s", self.name,
                    [(b.partition, b.start, b.end) for b in batches], why)  # fmt: skip
        self.generation = None  # read what the group committed before going on
        return Progress(batches[0].generation, [], batches)
