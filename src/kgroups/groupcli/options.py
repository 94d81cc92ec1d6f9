"""The reset-offsets options both command lines take, declared once.

`kgroups group reset-offsets` (against the coordinator) and `kubectl kgroups
reset-offsets` (a request on the ConsumerGroup) offer the same scenarios with the same
flags and help as kafka-consumer-groups; `chosen` picks the one given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, TypeVar

import typer

from kgroups.api.parse import UsageError
from kgroups.api.reset import Spec

AllTopics = Annotated[
    bool, typer.Option("--all-topics", help="Every partition the group has committed.")
]
ToEarliest = Annotated[bool, typer.Option("--to-earliest", help="The log's start.")]
ToLatest = Annotated[bool, typer.Option("--to-latest", help="The log's end.")]
ToCurrent = Annotated[
    bool, typer.Option("--to-current", help="The committed offset (else the end).")
]
ToOffset = Annotated[int | None, typer.Option("--to-offset", help="This offset.")]
ShiftBy = Annotated[
    int | None, typer.Option("--shift-by", help="The committed offset plus N (N may be < 0).")
]
ToDatetime = Annotated[
    str | None,
    typer.Option(
        "--to-datetime",
        help="The first offset at this time (YYYY-MM-DDTHH:mm:SS.sss; UTC unless a zone is given).",
    ),
]
ByDuration = Annotated[
    str | None, typer.Option("--by-duration", help="The first offset this long ago (PnDTnHnMnS).")
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Only show the new offsets (the default).")]
Execute = Annotated[bool, typer.Option("--execute", help="Commit the new offsets.")]

DRY_RUN_WARNING = "WARN: No action will be performed as the --execute option is missing."
"""Kafka's line when neither --dry-run nor --execute is given."""

A = TypeVar("A")
Argument = int | str | None


def scenarios(
    to_earliest: bool,
    to_latest: bool,
    to_current: bool,
    to_offset: int | None,
    shift_by: int | None,
    to_datetime: str | None,
    by_duration: str | None,
) -> dict[Spec, tuple[bool, Argument]]:
    """Each scenario: was it given, and with what argument."""
    return {
        Spec.TO_EARLIEST: (to_earliest, None),
        Spec.TO_LATEST: (to_latest, None),
        Spec.TO_CURRENT: (to_current, None),
        Spec.TO_OFFSET: (to_offset is not None, to_offset),
        Spec.SHIFT_BY: (shift_by is not None, shift_by),
        Spec.TO_DATETIME: (to_datetime is not None, to_datetime),
        Spec.BY_DURATION: (by_duration is not None, by_duration),
    }


def chosen(given: Mapping[Spec, tuple[bool, A]]) -> tuple[Spec, A]:
    """The one scenario present in `given` (scenario -> (present, its argument)), or a
    usage error naming the choices (or the clashing ones)."""
    present = [spec for spec, (there, _) in given.items() if there]
    if len(present) != 1:
        names = ", ".join(f"--{s.value}" for s in (present if len(present) > 1 else given))
        raise UsageError(f"give exactly one of {names}")
    return present[0], given[present[0]][1]
