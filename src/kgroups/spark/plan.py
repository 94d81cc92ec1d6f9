"""Where a Spark member starts reading, and what its next batch is: pure decisions.

Kafka's rules, applied to committed offsets the group returns: a partition with no
committed offset, or one outside what the source holds (records deleted, or a source
that was reset), starts where `auto_offset_reset` says ("earliest", "latest", or "none":
an error naming the partition, as Kafka's NoOffsetForPartitionException /
OffsetOutOfRangeException). A batch then reads, per owned partition, from its position
to the end the source reported, at most `max_records` records.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from kgroups.spark.batches import MicroBatch

Reset = str
"""Kafka's auto.offset.reset: "earliest", "latest", "none", or "by_duration:<ISO-8601
duration>" (Kafka 4.0's KIP-1106: the first record no older than that), and ours,
"by_timestamp:<epoch ms>" (the first record at or after that time, as Spark's
startingTimestamp)."""

_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")


class OffsetOutOfRange(LookupError):
    """No usable committed offset and auto_offset_reset="none"."""


def reset_time(reset: Reset, now_ms: int) -> int | None:
    """The time a "by_duration:"/"by_timestamp:" reset starts from (None for the others);
    ValueError for anything that is not a reset."""
    if reset in ("earliest", "latest", "none"):
        return None
    kind, _, value = reset.partition(":")
    if kind == "by_timestamp" and value.isdigit():
        return int(value)
    match = _DURATION.fullmatch(value.upper()) if kind == "by_duration" else None
    if match is None or value.upper() in ("P", "PT"):
        raise ValueError(
            f"auto_offset_reset {reset!r}: say earliest, latest, none, "
            "by_duration:<ISO-8601 duration, e.g. PT1H or P1DT12H> or by_timestamp:<epoch ms>"
        )
    days, hours, minutes, seconds = (float(g or 0) for g in match.groups())
    return now_ms - int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def start_offset(
    committed: int | None, earliest: int, latest: int, reset: Reset, *, where: str = "",
    found: int | None = None,
) -> int:  # fmt: skip
    """The position to read from, given the committed offset and what the source holds;
    `found`: for a reset by time, the first offset at or after it (None: no such record,
    so the end, as Kafka's consumer does)."""
    if committed is not None and earliest <= committed <= latest:
        return committed
    if reset == "earliest":
        return earliest
    if reset == "latest":
        return latest
    if reset.startswith(("by_duration:", "by_timestamp:")):
        return latest if found is None else min(max(found, earliest), latest)
    what = "no committed offset" if committed is None else (
        f"committed offset {committed} is outside [{earliest}, {latest}]"
    )  # fmt: skip
    raise OffsetOutOfRange(f"{where}: {what} and auto_offset_reset is 'none'")


def next_batch(
    topic: str,
    generation: int,
    member: str,
    positions: Mapping[int, int],
    ends: Mapping[int, int],
    max_records: int,
    *,
    app: str = "kgroups",
    max_metadata_bytes: int = 4_096,
) -> MicroBatch | None:
    """The owned partitions with records past their position, each up to `max_records`
    (None when every one is idle). Partitions are taken in order while the batch's plan
    fits in `max_metadata_bytes` of commit metadata (Kafka's offset.metadata.max.bytes);
    the rest wait for the next batch."""
    if max_records <= 0:
        raise ValueError("max_records must be positive")
    ranges: dict[int, tuple[int, int]] = {}
    batch = None
    where = "x" * (2 * len(topic) + len(member) + 64)  # what a staging sink adds at most
    for partition in sorted(positions):
        start, end = positions[partition], ends[partition]
        if end <= start:
            continue
        ranges[partition] = (start, min(end, start + max_records))
        candidate = MicroBatch.of(topic, ranges, generation, member, app)
        if len(candidate.encode("staged", where).encode()) > max_metadata_bytes:
            if batch is None:
                raise ValueError(f"max_metadata_bytes {max_metadata_bytes} holds no plan")
            break
        batch = candidate
    return batch
