"""Where each partition's log ends, as far as the coordinator knows: what ListOffsets answers.

kgroups stores no records, so a partition's end is not the coordinator's to invent. It is
learned: a committed offset O (by any group) proves records before O existed at the time
of the commit, and a kgroups source that reads the real log (the file log, a Kafka topic)
reports the log's end with its commits (`log_end_offset`, a tagged field Kafka ignores).
The known end is the highest of these; it only grows.

Kafka's tools compute resets from ListOffsets and clamp them into [earliest, latest], so
answering "empty" (latest = 0) made every reset write 0 and `--to-current` wipe offsets.
With the known end as latest, nothing a group committed is ever outside the range: resets
to an offset, by a shift or to the current position write what was asked, and LAG is never
negative.

A timestamp query ("the first offset at or after time T", `--to-datetime`) is answered
from marks: (time, end) pairs noted as the end grew. The answer is the end known at the
last mark no later than T: every record before it existed before T, so no record at or
after T is skipped (a few before T may be read again, the safe side). Marks are at least
`spacing_ms` apart; when there are too many, every other one goes and the spacing doubles,
so a partition keeps a bounded number, evenly spread over its history (dropping marks
only moves answers earlier, never later). Reported ends live in memory: after a restart the
known end comes back from the committed offsets, and sources report again with their next
commit.
"""

from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass, field

MARK_INTERVAL_MS = 1_000
"""The first spacing between marks."""
MAX_MARKS = 256
"""Marks kept per partition."""


@dataclass(slots=True)
class LogEnd:
    end: int = 0
    end_ms: int = -1
    """When `end` was first known (-1 before anything was)."""
    spacing_ms: int = MARK_INTERVAL_MS
    mark_times: array[int] = field(default_factory=lambda: array("q"))
    mark_ends: array[int] = field(default_factory=lambda: array("q"))

    def observe(self, offset: int, at_ms: int) -> None:
        """Records before `offset` existed at `at_ms`."""
        if offset <= self.end:
            return
        # Times are kept non-decreasing: a late-arriving older observation is noted at the
        # latest time seen, a weaker (still true) claim.
        at_ms = max(at_ms, self.end_ms)
        self.end, self.end_ms = offset, at_ms
        if self.mark_times and at_ms - self.mark_times[-1] < self.spacing_ms:
            return
        self.mark_times.append(at_ms)
        self.mark_ends.append(offset)
        if len(self.mark_times) > MAX_MARKS:
            self.mark_times = self.mark_times[::2]
            self.mark_ends = self.mark_ends[::2]
            self.spacing_ms *= 2

    def offset_at(self, timestamp_ms: int) -> int:
        """The earliest offset that may hold a record stamped at or after `timestamp_ms`."""
        if self.end_ms >= 0 and timestamp_ms >= self.end_ms:
            return self.end
        i = bisect.bisect_right(self.mark_times, timestamp_ms)
        return self.mark_ends[i - 1] if i else 0


LogEnds = dict[tuple[str, int], LogEnd]


def observe(ends: LogEnds, topic: str, partition: int, offset: int, at_ms: int) -> None:
    if offset > 0:
        ends.setdefault((topic, partition), LogEnd()).observe(offset, at_ms)


def forget_topic(ends: LogEnds, topic: str) -> None:
    for key in [k for k in ends if k[0] == topic]:
        del ends[key]
