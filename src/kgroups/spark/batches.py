"""A micro-batch: what one member reads in one turn, and how it is named in commits.

A `MicroBatch` is the records `[start, end)` of each of some partitions of one topic,
planned by one member in one generation. Everything a later owner needs to find it again
is derived from it alone: its stable `id`, and for idempotent sinks (Delta Lake) the
application id and version its write carries. The *lane* of a batch is its lowest
partition: only that partition's owner plans batches in the lane, one generation at a
time, so `app_id` (the lane and the generation) and `version` (the lane partition's end
offset, which grows with every batch in the lane) never name two different batches.

`Record` is what the offset commit's metadata says about a batch (`encode`/`decode`):
`plan` (committed at the batch's start offsets before anything is written: the batch is
decided and must be written by whoever owns its partitions next), `done` (committed at
its end offsets once written), `staged` (committed at its end offsets once its output
waits, unpublished, under `where`). Metadata is one compact JSON object, so that a batch
of many partitions stays within Kafka's 4,096-byte `offset.metadata.max.bytes`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

VERSION = 2
Kind = Literal["plan", "done", "staged"]


@dataclass(frozen=True, slots=True)
class MicroBatch:
    """See the module docstring. `ranges` are (partition, start, end), sorted, non-empty."""

    topic: str
    ranges: tuple[tuple[int, int, int], ...]
    generation: int
    member: str
    app: str = "kgroups"
    """The prefix of `app_id`: the same for every member of a group (and changed when a
    group is deleted and made again, as Structured Streaming's txnAppId is when its
    checkpoint is)."""

    @classmethod
    def of(
        cls, topic: str, ranges: Mapping[int, tuple[int, int]], generation: int, member: str,
        app: str = "kgroups",
    ) -> MicroBatch:  # fmt: skip
        if not ranges:
            raise ValueError("a batch reads at least one partition")
        rows = tuple((p, s, e) for p, (s, e) in sorted(ranges.items()))
        if any(s < 0 or e <= s for _, s, e in rows):
            raise ValueError(f"empty or negative ranges in {rows}")
        return cls(topic, rows, generation, member, app)

    @property
    def partitions(self) -> tuple[int, ...]:
        return tuple(p for p, _, _ in self.ranges)

    @property
    def offsets(self) -> dict[int, tuple[int, int]]:
        """partition -> (start, end)."""
        return {p: (s, e) for p, s, e in self.ranges}

    @property
    def records(self) -> int:
        return sum(e - s for _, s, e in self.ranges)

    @property
    def lane(self) -> int:
        return self.ranges[0][0]

    @property
    def version(self) -> int:
        """The lane partition's end offset: grows with every batch of the lane."""
        return self.ranges[0][2]

    @property
    def app_id(self) -> str:
        return f"{self.app}/{self.topic}/{self.lane}/g{self.generation}"

    @property
    def id(self) -> str:
        """Stable across replays: the same batch has the same id wherever it runs."""
        _, start, end = self.ranges[0]
        return f"{self.topic}-{self.lane}-{start}-{end}-g{self.generation}"

    def encode(self, kind: Kind, where: str = "") -> str:
        doc: dict[str, object] = {
            "v": VERSION, "k": kind, "t": self.topic, "g": self.generation, "m": self.member,
            "a": self.app, "r": [list(r) for r in self.ranges],
        }  # fmt: skip
        if where:
            doc["w"] = where
        return json.dumps(doc, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Record:
    """A batch as a commit's metadata names it."""

    kind: Kind
    batch: MicroBatch
    where: str = ""


def decode(metadata: str | None) -> Record | None:
    """The batch named by commit metadata; None for anything else (no metadata, a plain
    offset commit by another tool, an older format)."""
    if not metadata or not metadata.startswith("{"):
        return None
    try:
        doc = json.loads(metadata)
        if not isinstance(doc, dict) or doc.get("v") != VERSION:
            return None
        kind = doc["k"]
        if kind not in ("plan", "done", "staged"):
            return None
        ranges = {int(p): (int(s), int(e)) for p, s, e in doc["r"]}
        batch = MicroBatch.of(str(doc["t"]), ranges, int(doc["g"]), str(doc["m"]), str(doc["a"]))
        where = doc.get("w", "")
        if not isinstance(where, str):
            return None
    except (KeyError, TypeError, ValueError):
        return None
    return Record(kind, batch, where)
