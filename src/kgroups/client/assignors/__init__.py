"""Partition assignors, by name: pure functions of plain data (see `spec`).

`get(name)` returns the assignor registered under a JoinGroup protocol name; `register`
adds a user's own. Built in: range, roundrobin, sticky, cooperative-sticky, redundant.
"""

from __future__ import annotations

from kgroups.client.assignors.range import RangeAssignor
from kgroups.client.assignors.redundant import RedundantAssignor
from kgroups.client.assignors.roundrobin import RoundRobinAssignor
from kgroups.client.assignors.spec import (
    Assignor,
    AssignorError,
    GroupAssignment,
    GroupSpec,
    MemberSpec,
)
from kgroups.client.assignors.sticky import CooperativeStickyAssignor, StickyAssignor

_REGISTRY: dict[str, Assignor] = {}


def register(assignor: Assignor) -> None:
    """Make `assignor` available under `assignor.name` (replacing any previous one)."""
    if not assignor.name:
        raise ValueError("an assignor needs a name")
    _REGISTRY[assignor.name] = assignor


def get(name: str) -> Assignor:
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise AssignorError(f"unknown assignor {name!r} (known: {known})") from None


def names() -> list[str]:
    return sorted(_REGISTRY)


for _builtin in (
    RangeAssignor(),
    RoundRobinAssignor(),
    StickyAssignor(),
    CooperativeStickyAssignor(),
    RedundantAssignor(),
):
    register(_builtin)

__all__ = [
    "Assignor",
    "AssignorError",
    "CooperativeStickyAssignor",
    "GroupAssignment",
    "GroupSpec",
    "MemberSpec",
    "RangeAssignor",
    "RedundantAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "get",
    "names",
    "register",
]
