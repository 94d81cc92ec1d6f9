"""One Spark application = one group member: a loop of batch reads, exactly once.

The member (`SyncGroupMember`) lives in the driver. Each turn of the loop:

1. snapshot the member's generation and assignment (only while it is stable);
2. on a new generation, read the group's committed offsets for the assignment, roll
   forward each partition's committed-but-unpublished batch and sweep what its earlier
   owners staged but never got committed (`publish.Outbox.roll_forward`), and set each
   position from the committed offset (Kafka's auto.offset.reset when there is none or
   it is out of range, `plan.start_offset`);
3. plan one batch per partition with new records (`plan.next_batches`), read their
   ranges as one DataFrame, and run the user's `process(frame, batches)`, which returns
   each partition's output (JSON);
4. stage the outputs, commit every batch's end offset pinned to the generation the
   batch was planned in, with metadata naming the staged output (the decision), then
   publish. A refused commit (the generation is gone) drops the batch: whoever owns the
   partitions now reads them again from what was committed.

The rebalance listener gates the loop: a revocation waits for the batch in flight (its
commit is still allowed while the member prepares to rejoin), bounded by the member's
rebalance timeout (past it the partitions are reported lost and the commit refused); a
loss abandons the batch at once (Spark jobs are cancelled, the commit is not sent).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kgroups.client import (
    CommitFailedError,
    MemberError,
    OffsetAndMetadata,
    RebalanceInProgressError,
    SyncGroupMember,
    TopicPartition,
)
from kgroups.client.link import CoordinatorUnavailable
from kgroups.spark.plan import Reset, next_batches, start_offset
from kgroups.spark.publish import Batch, Outbox
from kgroups.spark.sources import Source

log = logging.getLogger(__name__)

Process = Callable[[Any, Sequence[Batch]], Mapping[int, Any]]
"""(the batch's DataFrame, its batches) -> partition -> that partition's output."""


@dataclass
class Progress:
    """What one turn of the loop did."""

    generation: int
    published: list[Batch]
    dropped: list[Batch]


class _Gate:
    """The rebalance listener: holds revocations until the batch in flight is done."""

    def __init__(self, on_lost: Callable[[], None]) -> None:
        self.idle = threading.Event()
        self.idle.set()
        self.lost = threading.Event()
        self._on_lost = on_lost

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self.idle.wait()

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.lost.set()
        self._on_lost()

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        pass


class Pipeline:
    """See the module docstring. `member_options` go to `SyncGroupMember`."""

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
        self.gate = _Gate(cancel)
        self.member = SyncGroupMember(
            bootstrap, group, [topic], listener=self.gate, client_id=name, **member_options
        )
        self.generation: int | None = None
        """The generation `positions` belong to (None: read committed offsets again)."""
        self.positions: dict[int, int] = {}
        self.stopping = threading.Event()

    def start(self, timeout: float | None = None) -> None:
        self.member.start(timeout=timeout)

    def run(self) -> None:
        """Turn the loop until `stop()` (or the member fails, which raises)."""
        while not self.stopping.is_set():
            progress = self.run_once()
            if progress is None or not (progress.published or progress.dropped):
                self.stopping.wait(self.poll_interval)

    def stop(self) -> None:
        self.stopping.set()

    def close(self) -> None:
        self.member.close()

    # -- one turn ------------------------------------------------------------------------

    def run_once(self) -> Progress | None:
        error = self.member.error
        if error is not None:
            raise error
        if self.member.state != "stable":
            return None
        generation, owned = self.member.generation, self.member.assignment
        mine = sorted(tp.partition for tp in owned if tp.topic == self.topic)
        if generation != self.generation:
            self._new_generation(generation, mine)
        self.gate.lost.clear()
        ends = {p: e for p, (_, e) in self.source.offsets(self.topic, mine).items()}
        batches = next_batches(
            self.topic, generation, self.name,
            {p: self.positions[p] for p in mine}, ends, self.max_records,
        )  # fmt: skip
        if not batches:
            return Progress(generation, [], [])
        self.gate.idle.clear()
        try:
            return self._run(generation, batches)
        finally:
            self.gate.idle.set()

    def _new_generation(self, generation: int, partitions: list[int]) -> None:
        tps = [TopicPartition(self.topic, p) for p in partitions]
        committed = self.member.committed(tps)
        held = self.source.offsets(self.topic, partitions)
        self.positions = {}
        for tp in tps:
            record = committed.get(tp)
            self.outbox.roll_forward(self.topic, tp.partition, record.metadata if record else None)
            earliest, end = held[tp.partition]
            self.positions[tp.partition] = start_offset(
                record.offset if record else None, earliest, end, self.reset, where=str(tp)
            )
        self.generation = generation
        log.info("%s: generation %d: reading %s from %s", self.name, generation,
                 self.topic, self.positions)  # fmt: skip

    def _run(self, generation: int, batches: list[Batch]) -> Progress:
        ranges = {b.partition: (b.start, b.end) for b in batches}
        try:
            outputs = self.process(self.source.read(self.topic, ranges), batches)
        except Exception:
            if not self.gate.lost.is_set():
                raise
            return self._drop(batches, "the partitions were lost: the batch was cancelled")
        if self.gate.lost.is_set() or self.member.generation != generation:
            return self._drop(batches, "the partitions were lost during the batch")
        staged = {b: self.outbox.stage(b, outputs.get(b.partition, {})) for b in batches}
        offsets = {
            TopicPartition(self.topic, b.partition): OffsetAndMetadata(b.end, metadata)
            for b, metadata in staged.items()
        }
        try:
            self.member.commit(offsets, generation=generation)
        except (CommitFailedError, RebalanceInProgressError, CoordinatorUnavailable) as exc:
            return self._drop(batches, f"commit refused: {exc}")
        except MemberError as exc:
            return self._drop(batches, f"commit failed: {exc}")
        for b, metadata in staged.items():
            self.outbox.publish(metadata)
            self.positions[b.partition] = b.end
        return Progress(generation, batches, [])

    def _drop(self, batches: list[Batch], why: str) -> Progress:
        log.warning("%s: dropping %s: %s", self.name,
                    [(b.partition, b.start, b.end) for b in batches], why)  # fmt: skip
        self.generation = None  # read what the group committed before going on
        return Progress(batches[0].generation, [], batches)
