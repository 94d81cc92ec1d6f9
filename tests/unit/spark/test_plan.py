"""Where reading starts (Kafka's auto.offset.reset) and what the next batch is."""

from __future__ import annotations

import pytest

from kgroups.spark.plan import OffsetOutOfRange, next_batch, start_offset


@pytest.mark.parametrize(
    ("committed", "reset", "expected"),
    [
        (42, "none", 42),  # inside [earliest, latest]: where the group left off
        (10, "none", 10),  # == earliest
        (90, "none", 90),  # == latest: nothing new yet
        (None, "earliest", 10),
        (None, "latest", 90),
        (5, "earliest", 10),  # below what the source still holds
        (95, "earliest", 10),  # past the end (the source was reset)
        (95, "latest", 90),
    ],
)
def test_start_offset(committed: int | None, reset: str, expected: int) -> None:
    assert start_offset(committed, 10, 90, reset) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("committed", [None, 5, 95])
def test_no_usable_offset_with_reset_none_is_an_error_naming_the_partition(
    committed: int | None,
) -> None:
    with pytest.raises(OffsetOutOfRange, match="clicks-3"):
        start_offset(committed, 10, 90, "none", where="clicks-3")


def test_a_batch_covers_what_is_new_in_each_owned_partition_up_to_the_limit() -> None:
    batch = next_batch("t", 7, "app-a", {0: 0, 1: 50, 2: 30}, {0: 25, 1: 50, 2: 100}, 40)
    assert batch is not None
    assert (batch.ranges, batch.generation, batch.member) == (((0, 0, 25), (2, 30, 70)), 7, "app-a")
    assert next_batch("t", 7, "a", {0: 5}, {0: 5}, 10) is None  # nothing new
    with pytest.raises(ValueError):
        next_batch("t", 7, "a", {0: 0}, {0: 1}, 0)


def test_a_batch_takes_only_the_partitions_whose_plan_fits_in_commit_metadata() -> None:
    many = dict.fromkeys(range(500), 0)
    batch = next_batch("t", 7, "a", many, dict.fromkeys(range(500), 10**12), 10**6)
    assert batch is not None and 10 < len(batch.partitions) < 500
    assert batch.partitions == tuple(range(len(batch.partitions)))  # in order; the rest next
    where = "x" * (2 * len("t") + len("a") + 64)
    assert len(batch.encode("staged", where).encode()) <= 4096
    with pytest.raises(ValueError, match="holds no plan"):
        next_batch("t", 7, "a", many, dict.fromkeys(range(500), 10), 5, max_metadata_bytes=50)
