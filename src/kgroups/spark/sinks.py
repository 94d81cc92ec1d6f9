"""Where a pipeline's output goes, and which of the two exactly-once protocols it follows.

The group's offset commit, pinned to the generation a batch was planned in, is the only
decision that a batch happened; a sink only has to make its output follow that decision.
There are two ways, and `loop.BatchLoop` runs whichever the sink is:

* `StagedSink` (*stage, commit, publish*): the output is written where nobody reads it
  (`stage`), the end offsets are committed with metadata naming it, and it is then made
  visible (`publish`, idempotent). Whoever owns a partition next publishes what its
  committed metadata names before reading on (`recover`), and deletes what is staged but
  named by no commit (refused or never sent). Needs a filesystem whose rename is atomic:
  `directory.DirectorySink` (any Spark file format) and `OutboxSink` (the JSON outbox of
  `publish.Outbox`, for a `process` function that returns each partition's output).
* `IdempotentSink` (*plan, write, commit*): the batch's plan is committed at its start
  offsets first, then the output is written with an identity derived from the plan alone
  (`MicroBatch.app_id`, `MicroBatch.version`) that the sink writes at most once, then the
  end offsets are committed. Whoever owns a partition next and finds a plan there writes
  the planned batch again, and the sink drops it if it was written: `delta.DeltaSink`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from kgroups.spark.batches import MicroBatch
from kgroups.spark.publish import Batch, Outbox


@runtime_checkable
class StagedSink(Protocol):
    def stage(self, batch: MicroBatch, frame: Any) -> Mapping[int, str]:
        """Write the batch's output where nobody reads it yet; return each partition's
        commit metadata (naming what was staged)."""
        ...

    def publish(self, batch: MicroBatch, metadata: Mapping[int, str]) -> None:
        """After the commit: make the output visible. Idempotent."""
        ...

    def discard(self, batch: MicroBatch) -> None:
        """The commit was refused: delete what `stage` wrote."""
        ...

    def recover(self, topic: str, partition: int, metadata: str | None, member: str) -> None:
        """At the start of a generation, for each owned partition: publish what its
        committed `metadata` names, then delete what `member` staged there before (and
        anyone's stale output), never another member's recent staging."""
        ...


@runtime_checkable
class IdempotentSink(Protocol):
    def write(self, batch: MicroBatch, frame: Any) -> bool:
        """Write the batch's output, at most once per (batch.app_id, batch.version):
        writing a batch again, or one whose version is not above the latest written
        for its app id, changes nothing. False when it changed nothing."""
        ...

    def written(self, app_id: str) -> int | None:
        """The highest version written for `app_id` (None: none)."""
        ...


Sink = StagedSink | IdempotentSink

Process = Callable[[Any, Sequence[Batch]], Mapping[int, Any]]
"""(the batch's DataFrame, its batches, one per partition) -> partition -> its output."""


class OutboxSink:
    """The JSON outbox: `process` returns each partition's output (collected to the
    driver), published as one JSON file per partition per batch (`publish.Outbox`)."""

    def __init__(self, output: str, process: Process) -> None:
        self.outbox = Outbox(output)
        self.process = process

    @staticmethod
    def parts(batch: MicroBatch) -> list[Batch]:
        return [Batch(batch.topic, p, s, e, batch.generation, batch.member)
                for p, s, e in batch.ranges]  # fmt: skip

    def stage(self, batch: MicroBatch, frame: Any) -> dict[int, str]:
        parts = self.parts(batch)
        outputs = self.process(frame, parts)
        return {b.partition: self.outbox.stage(b, outputs.get(b.partition, {})) for b in parts}

    def publish(self, batch: MicroBatch, metadata: Mapping[int, str]) -> None:
        for value in metadata.values():
            self.outbox.publish(value)

    def discard(self, batch: MicroBatch) -> None:
        for b in self.parts(batch):
            self.outbox.discard(b)

    def recover(self, topic: str, partition: int, metadata: str | None, member: str) -> None:
        self.outbox.roll_forward(topic, partition, metadata, member)
