"""Where reading starts (Kafka's auto.offset.reset) and what the next batch is."""

from __future__ import annotations

import pytest

from kgroups.spark.plan import OffsetOutOfRange, next_batches, start_offset


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


def test_batches_cover_what_is_new_in_each_owned_partition_up_to_the_limit() -> None:
    batches = next_batches("t", 7, "app-a", {0: 0, 1: 50, 2: 30}, {0: 25, 1: 50, 2: 100}, 40)
    assert [(b.partition, b.start, b.end, b.generation) for b in batches] == [
        (0, 0, 25, 7),
        (2, 30, 70, 7),
    ]
    with pytest.raises(ValueError):
        next_batches("t", 7, "a", {0: 0}, {0: 1}, 0)
