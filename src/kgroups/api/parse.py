"""The arguments of `kgroups group`, read the way kafka-consumer-groups reads them.

Operators arrive with Kafka's habits and Kafka's files: `--topic orders:0,2`, a
`--by-duration P1DT2H` in java.time's notation, a `--to-datetime` without a zone (UTC),
a CSV that `--export` wrote (with or without a group column). Each is parsed here, with
Kafka's wording for what it refuses, so the commands only ever see clean values.
"""

from __future__ import annotations

import csv
import datetime
import io
import re
from collections.abc import Iterable, Mapping

from kgroups.admin import TP

KAFKA_STATES = (
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
    "Empty",
    "Assigning",
    "Reconciling",
)
"""The states `--state` accepts for consumer groups (Kafka's GroupState for that type;
the last two exist only for KIP-848 groups, which kgroups does not have)."""


class UsageError(ValueError):
    """An argument that cannot be right; shown as a usage error (exit code 2)."""


def topic_arg(arg: str) -> tuple[str, tuple[int, ...] | None]:
    """`orders` -> ("orders", None): every partition; `orders:0,2` -> ("orders", (0, 2))."""
    if ":" not in arg:
        if not arg:
            raise UsageError("Invalid topic arg '', expected a topic name")
        return arg, None
    parts = arg.split(":")
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise UsageError(f"Invalid topic arg '{arg}', expected topic name and partitions")
    topic, listed = parts
    partitions = []
    for text in listed.split(","):
        if not re.fullmatch(r"\d+", text.strip()):
            raise UsageError(f"Invalid partition '{text}' specified in topic arg '{arg}'")
        partitions.append(int(text))
    return topic, tuple(dict.fromkeys(partitions))


def states_arg(value: str) -> tuple[str, ...]:
    """`stable,empty` -> ("Stable", "Empty"): Kafka's names, matched without case."""
    by_lower = {s.lower(): s for s in KAFKA_STATES}
    states = [s.strip() for s in value.split(",") if s.strip()]
    unknown = [s for s in states if s.lower() not in by_lower]
    if unknown or not states:
        raise UsageError(
            f"Invalid state list '{value}'. Valid states are: {', '.join(KAFKA_STATES)}"
        )
    return tuple(dict.fromkeys(by_lower[s.lower()] for s in states))


_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?"
    r"(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


def parse_duration(text: str) -> datetime.timedelta:
    """java.time.Duration's text form, as `--by-duration` takes it: `PnDTnHnMn.nS`
    (`P1D`, `PT30M`, `PT0.5S`, `-PT1H`); days are the largest unit."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or text.strip().upper().endswith("T") or not any(match.groups()[1:]):
        raise UsageError(f"'{text}' is not a duration such as P1DT2H30M (ISO 8601, PnDTnHnMn.nS)")
    sign, days, hours, minutes, seconds, fraction = match.groups()
    frac = (fraction or "").ljust(9, "0")
    secs = int(seconds or 0)
    nanos = int(frac) * (-1 if seconds and seconds.startswith("-") else 1)
    total = datetime.timedelta(
        days=int(days or 0),
        hours=int(hours or 0),
        minutes=int(minutes or 0),
        seconds=secs,
        microseconds=nanos / 1000,
    )
    return -total if sign == "-" else total


def parse_datetime(text: str) -> int:
    """`--to-datetime`: an ISO 8601 date-time (`2024-05-01T12:00:00.000`, with or without
    a zone such as `Z` or `+02:00`); without a zone it is UTC, as in Kafka. Milliseconds."""
    if "T" not in text:
        raise UsageError(
            f"Error parsing timestamp '{text}'. It does not contain a 'T' according to "
            "ISO8601 format (YYYY-MM-DDTHH:mm:SS.sss)"
        )
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError as exc:
        raise UsageError(f"Error parsing timestamp '{text}': {exc}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def parse_plan(text: str, groups: Iterable[str]) -> dict[str, dict[TP, int]]:
    """A reset plan as `--export` writes it: `topic,partition,offset` lines for one group
    (the one `--group` names), or `group,topic,partition,offset` lines for several."""
    named = list(groups)
    rows = [row for row in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in row)]
    plans: dict[str, dict[TP, int]] = {}
    for number, row in enumerate(rows, start=1):
        cells = [cell.strip() for cell in row]
        if len(cells) == 3:
            if len(named) != 1:
                raise UsageError(
                    f"line {number} has no group column (topic,partition,offset): "
                    "such a file is for exactly one --group"
                )
            group, (topic, partition, offset) = named[0], cells
        elif len(cells) == 4:
            group, topic, partition, offset = cells
        else:
            raise UsageError(
                f"line {number}: expected topic,partition,offset or "
                f"group,topic,partition,offset, got {','.join(row)!r}"
            )
        if not re.fullmatch(r"\d+", partition) or not re.fullmatch(r"-?\d+", offset):
            raise UsageError(f"line {number}: partition and offset must be numbers: {row!r}")
        plans.setdefault(group, {})[(topic, int(partition))] = int(offset)
    return plans


def plan_csv(plans: Mapping[str, Mapping[TP, int]], *, with_group: bool) -> str:
    """What `--export` prints and `--from-file` reads back."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for group in sorted(plans):
        for (topic, partition), offset in sorted(plans[group].items()):
            row = [topic, partition, offset]
            writer.writerow([group, *row] if with_group else row)
    return out.getvalue()
