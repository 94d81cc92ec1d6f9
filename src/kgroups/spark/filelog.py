"""The embedded record source: a partitioned log of JSON lines in plain files.

kgroups stores no records, so pipelines without Kafka read this: a topic is a directory,
partition p is the file `<p>.jsonl` in it, one JSON object per line, and a record's
offset is the 0-based index of its line. Only complete lines count: a line still being
written (no newline yet) is not there, so a reader never sees half a record while a
writer appends. One writer per partition file (`append` takes no lock).

Reading a range seeks straight to it: each reader keeps, per partition, the byte
position of every 1024th line it has seen, so a batch read costs what the batch holds,
not what precedes it. Spark's executors do not even keep that: the driver gives each of
them the byte position its chunk starts at (`position`, then `lines_at`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STRIDE = 1024
"""Every STRIDE-th line's byte position is remembered (a sparse index)."""


class FileLogError(ValueError):
    """A name or range the file log cannot serve."""


@dataclass
class _Index:
    marks: list[int] = field(default_factory=lambda: [0])
    """marks[i] = byte position of line i * STRIDE."""
    lines: int = 0
    """Complete lines counted so far."""
    scanned_to: int = 0
    """Byte position just after the last complete line counted."""


class FileLog:
    """Readers and writers of the topics under `root`."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self._indexes: dict[tuple[str, int], _Index] = {}

    def path(self, topic: str, partition: int) -> Path:
        if not topic or "/" in topic or topic in (".", "..") or "\0" in topic:
            raise FileLogError(f"not a topic name: {topic!r}")
        if partition < 0:
            raise FileLogError(f"partition {partition} of {topic!r} is negative")
        return self.root / topic / f"{partition}.jsonl"

    def create(self, topic: str, partitions: int) -> None:
        """Make the topic's directory and its (empty) partition files."""
        for p in range(partitions):
            path = self.path(topic, p)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(exist_ok=True)

    def partitions(self, topic: str) -> int | None:
        """The topic's partition count: its partition files 0, 1, ... (None: no topic)."""
        directory = self.path(topic, 0).parent
        if not directory.is_dir():
            return None
        count = 0
        while self.path(topic, count).exists():
            count += 1
        return count

    def append(self, topic: str, partition: int, records: Iterable[Mapping[str, Any]]) -> int:
        """Append records (each one line, then flushed); returns the new end offset."""
        path = self.path(topic, partition)
        data = b"".join(
            json.dumps(r, separators=(",", ":"), sort_keys=True).encode() + b"\n" for r in records
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return self.end_offset(topic, partition)

    def end_offset(self, topic: str, partition: int) -> int:
        """How many complete records the partition holds now (Kafka's log end offset)."""
        return self._scan(topic, partition).lines

    def end_offsets(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        return {p: self.end_offset(topic, p) for p in partitions}

    def read(self, topic: str, partition: int, start: int, end: int) -> list[dict[str, Any]]:
        """Records [start, end): every one of them must be complete already."""
        return [json.loads(line) for line in self.lines(topic, partition, start, end)]

    def lines(self, topic: str, partition: int, start: int, end: int) -> Iterator[bytes]:
        if not 0 <= start <= end:
            raise FileLogError(f"{topic}-{partition}: bad range [{start}, {end})")
        held = self.end_offset(topic, partition)
        if end > held:
            raise FileLogError(
                f"{topic}-{partition}: [{start}, {end}) goes past the end offset {held}"
            )
        if start == end:
            return iter(())
        return self.lines_at(topic, partition, self.position(topic, partition, start), end - start)

    def position(self, topic: str, partition: int, offset: int) -> int:
        """The byte position where record `offset` (complete already) begins."""
        index = self._scan(topic, partition)
        if not 0 <= offset <= index.lines:
            raise FileLogError(f"{topic}-{partition}: no offset {offset} (end {index.lines})")
        mark = offset // STRIDE
        with self.path(topic, partition).open("rb") as f:
            f.seek(index.marks[mark])
            for _ in range(offset - mark * STRIDE):
                f.readline()
            return f.tell()

    def lines_at(self, topic: str, partition: int, position: int, count: int) -> Iterator[bytes]:
        """`count` complete lines from byte `position` (from `position()`), read without
        scanning what precedes them: how Spark's executors read a planned batch."""
        with self.path(topic, partition).open("rb") as f:
            f.seek(position)
            for _ in range(count):
                line = f.readline()
                if not line.endswith(b"\n"):
                    raise FileLogError(f"{topic}-{partition}: a record at byte {f.tell()} "
                                       "is not complete; was the file rewritten?")  # fmt: skip
                yield line[:-1]

    def _scan(self, topic: str, partition: int) -> _Index:
        """Count the complete lines appended since the last scan, extending the index."""
        key = (topic, partition)
        index = self._indexes.setdefault(key, _Index())
        path = self.path(topic, partition)
        try:
            f = path.open("rb")
        except FileNotFoundError:
            return index  # a partition nobody has written to yet holds nothing
        with f:
            f.seek(index.scanned_to)
            position = index.scanned_to
            for line in f:
                if not line.endswith(b"\n"):
                    break  # still being written
                position += len(line)
                index.lines += 1
                if index.lines % STRIDE == 0:
                    index.marks.append(position)
            index.scanned_to = position
        return index
