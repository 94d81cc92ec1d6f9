"""Exactly-once output: stage, commit (the decision), publish (idempotent, rolled forward).

A batch is the records [start, end) of one partition, planned by one member in one
generation. Its output becomes visible in three steps:

1. *stage*: the output is written, atomically, under `<output>/.staging/<topic>/<partition>/`,
   named after the batch and the generation and member that produced it;
2. *commit*: the member commits `end` for the partition, pinned to the batch's
   generation, with metadata naming the staged file. This is the decision: the group's
   committed offset says which batch happened. A zombie's commit is refused (its
   generation is gone), so its staged output is never named;
3. *publish*: the staged file is renamed to `<output>/<topic>-<partition>-<start>-<end>.json`.
   Renaming is atomic and publishing twice changes nothing, so the member that committed
   publishes, and whoever owns the partition next publishes again from the committed
   metadata before reading on (roll-forward): a crash between commit and publish loses
   nothing.

At the start of a generation the committed metadata is final for every earlier
generation (their commits can no longer be accepted), so the new owner rolls forward the
named batch and then sweeps what it staged itself there earlier (and anything a day
old): output whose commit was refused or never sent. Another member's recent file is
left alone: it may be the current owner's, and the one sweeping a zombie.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgroups.files import fsync_dir, write_atomically

STAGING = ".staging"
METADATA_VERSION = 1
STALE_S = 24 * 3600.0
"""Staged files older than this are deleted by whoever owns the partition."""
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


class PublishError(RuntimeError):
    """The committed metadata names output that is neither staged nor published."""


@dataclass(frozen=True, slots=True)
class Batch:
    topic: str
    partition: int
    start: int
    end: int
    generation: int
    member: str

    @property
    def published_name(self) -> str:
        return f"{self.topic}-{self.partition}-{self.start}-{self.end}.json"

    @property
    def staged_name(self) -> str:
        """Under `.staging/<topic>/<partition>/`, so that one partition's staged files
        are one directory (topic names may contain "-" and digits)."""
        who = _SAFE.sub("_", self.member)
        name = f"{self.start}-{self.end}.g{self.generation}.{who}.json"
        return f"{self.topic}/{self.partition}/{name}"

    def metadata(self) -> str:
        """What the offset commit carries: enough to publish the batch from anywhere."""
        return json.dumps(
            {"v": METADATA_VERSION, "staged": self.staged_name, "published": self.published_name,
             "start": self.start, "end": self.end, "generation": self.generation},
            separators=(",", ":"), sort_keys=True,
        )  # fmt: skip


class Outbox:
    """The output directory of a pipeline, shared by every member of its group."""

    def __init__(self, output: Path | str) -> None:
        self.output = Path(output)
        self.staging = self.output / STAGING

    def stage(self, batch: Batch, result: Any) -> str:
        """Write `result` (JSON) as the batch's staged output; return the commit metadata."""
        path = self.staging / batch.staged_name
        path.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps(result, sort_keys=True).encode() + b"\n"
        write_atomically(path, body)
        return batch.metadata()

    def discard(self, batch: Batch) -> None:
        """Delete the batch's staged output: its commit was refused, so nothing names it."""
        with contextlib.suppress(FileNotFoundError):
            (self.staging / batch.staged_name).unlink()

    def publish(self, metadata: str) -> Path:
        """Make the batch named by committed `metadata` visible; publishing again, or after
        someone else did, changes nothing."""
        doc = _parse(metadata)
        staged: Path = self.staging / doc["staged"]
        published: Path = self.output / doc["published"]
        try:
            os.rename(staged, published)  # atomic; replaces an identical earlier copy
        except FileNotFoundError:
            if not published.exists():
                raise PublishError(
                    f"committed batch {doc['published']} is neither staged nor published"
                ) from None
        fsync_dir(self.output)
        return published

    def roll_forward(
        self, topic: str, partition: int, metadata: str | None, member: str
    ) -> Path | None:
        """At the start of a generation: publish the committed batch if it is not yet,
        then sweep the partition's other staged files (refused or never committed)."""
        published = None
        if metadata:
            doc = _parse(metadata, required=False)
            if doc is not None:
                published = self.publish(metadata)
        self.sweep(topic, partition, member)
        return published

    def sweep(self, topic: str, partition: int, member: str, *, now: float | None = None) -> int:
        """Delete the partition's files staged by `member`, and anyone's older than a day;
        returns how many. Never another member's recent file: it may be the current
        owner's batch between stage and publish (and the one sweeping a zombie)."""
        directory = self.staging / topic / str(partition)
        if not directory.is_dir():
            return 0
        removed = 0
        for path in directory.iterdir():
            with contextlib.suppress(FileNotFoundError):
                if sweepable(path, f".{safe(member)}.json", now):
                    path.unlink()
                    removed += 1
        return removed


def safe(name: str) -> str:
    """`name` as it appears in staged file and directory names."""
    return _SAFE.sub("_", name)


def sweepable(path: Path, suffix: str, now: float | None = None) -> bool:
    """Staged output a member may delete at a new generation: its own (`suffix` names
    it), or anyone's older than STALE_S; never another member's recent staging, which
    may be the current owner's between stage and publish."""
    stale = (time.time() if now is None else now) - STALE_S
    return path.name.endswith(suffix) or path.stat().st_mtime < stale


def _parse(metadata: str, *, required: bool = True) -> Any:
    """The batch named by commit metadata; None (if not `required`) for metadata some
    other writer left (a plain offset commit, another tool)."""
    try:
        doc = json.loads(metadata)
        ok = isinstance(doc, dict) and doc.get("v") == METADATA_VERSION
        ok = ok and isinstance(doc.get("published"), str) and "/" not in doc["published"]
        ok = ok and isinstance(doc.get("staged"), str) and ".." not in doc["staged"].split("/")
    except ValueError:
        ok = False
    if ok:
        return doc
    if required:
        raise PublishError(f"commit metadata names no batch: {metadata[:200]!r}")
    return None
