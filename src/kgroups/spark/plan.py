"""Where a Spark member starts reading, and what its next batch is: pure decisions.

Kafka's rules, applied to committed offsets the group returns: a partition with no
committed offset, or one outside what the source holds (records deleted, or a source
that was reset), starts where `auto_offset_reset` says ("earliest", "latest", or "none":
an error naming the partition, as Kafka's NoOffsetForPartitionException /
OffsetOutOfRangeException). A batch then reads, per owned partition, from its position
to the end the source reported, at most `max_records` records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from kgroups.spark.publish import Batch

Reset = Literal["earliest", "latest", "none"]


class OffsetOutOfRange(LookupError):
    """No usable committed offset and auto_offset_reset="none"."""


def start_offset(
    committed: int | None, earliest: int, latest: int, reset: Reset, *, where: str = ""
) -> int:
    """The position to read from, given the committed offset and what the source holds."""
    if committed is not None and earliest <= committed <= latest:
        return committed
    if reset == "earliest":
        return earliest
    if reset == "latest":
        return latest
    what = "no committed offset" if committed is None else (
        f"committed offset {committed} is outside [{earliest}, {latest}]"
    )  # fmt: skip
    raise OffsetOutOfRange(f"{where}: {what} and auto_offset_reset is 'none'")


def next_batches(
    topic: str,
    generation: int,
    member: str,
    positions: Mapping[int, int],
    ends: Mapping[int, int],
    max_records: int,
) -> list[Batch]:
    """One batch per partition with records past its position (none for idle ones)."""
    if max_records <= 0:
        raise ValueError("max_records must be positive")
    batches = []
    for partition in sorted(positions):
        start, end = positions[partition], ends[partition]
        if end > start:
            batches.append(
                Batch(topic, partition, start, min(end, start + max_records), generation, member)
            )
    return batches
