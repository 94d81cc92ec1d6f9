"""Tables laid out as kafka-consumer-groups lays them out.

Scripts and eyes used to Kafka's tool read the same columns in the same order, in
columns at least as wide as Kafka makes them (each has a minimum width and grows to its
widest value), separated by a space, the last one unpadded. kgroups' own columns come
after Kafka's, so whatever reads Kafka's columns by position still finds them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MISSING = "-"
"""What Kafka prints where a value is unknown."""


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    width: int = 15
    """Kafka's minimum width for the column."""


def cell(value: object) -> str:
    """A value as Kafka prints it: None is unknown (`-`)."""
    return MISSING if value is None else str(value)


def render(columns: Sequence[Column], rows: Sequence[Sequence[object]]) -> str:
    """The header and the rows, one line each, without a trailing newline."""
    texts = [[cell(v) for v in row] for row in rows]
    widths = [
        max([c.width, len(c.name), *(len(row[i]) for row in texts)]) for i, c in enumerate(columns)
    ]
    lines = []
    for row in [[c.name for c in columns], *texts]:
        padded = [text.ljust(width) for text, width in zip(row[:-1], widths, strict=False)]
        lines.append(" ".join([*padded, row[-1]]).rstrip())
    return "\n".join(lines)
