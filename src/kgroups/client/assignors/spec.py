"""What an assignor sees and returns: plain, immutable data.

An assignor is a pure function `assign(GroupSpec) -> GroupAssignment`, in the spirit of
Kafka's `PartitionAssignor.assign(GroupSpec, SubscribedTopicDescriber)`: no network, no
clock, no state. The member library decodes subscriptions into `MemberSpec`s (choosing,
per assignor, where ownership comes from: the sticky assignor's user data or the
subscription's owned partitions) and encodes the result; `kgroups assign` reads the same
data from JSON. Partitions come out sorted, topics in name order.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, ParamSpec, Protocol, TypeVar

from kgroups.protocol.groups import NO_GENERATION

RebalanceProtocol = Literal["eager", "cooperative"]
GroupAssignment = dict[str, dict[str, list[int]]]
"""member id -> topic -> sorted partitions."""


class AssignorError(ValueError):
    """The group cannot be assigned as asked (e.g. an empty group for roundrobin)."""


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """One member as the leader sees it."""

    member_id: str
    topics: frozenset[str]
    owned: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """Partitions it owned, as the assignor should trust them (see `generation`)."""
    generation: int = NO_GENERATION
    """The generation of that ownership (KIP-792); -1 when unknown."""
    instance_id: str | None = None
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class GroupSpec:
    members: Mapping[str, MemberSpec]
    partitions: Mapping[str, int]
    """Partition count of every topic with metadata; topics without are not assigned."""
    partition_racks: Mapping[str, Sequence[frozenset[str]]] = field(default_factory=dict)
    """Racks of each partition's replicas, per topic (for rack-aware assignment)."""
    replicas: int = 1
    """How many distinct members should get each partition (the redundant assignor)."""


class Assignor(Protocol):
    """A partition assignment strategy, by name (the JoinGroup protocol name)."""

    name: str
    rebalance_protocols: tuple[RebalanceProtocol, ...]
    """What it supports, preferred first; cooperative needs the owned partitions."""

    def assign(self, group: GroupSpec) -> GroupAssignment: ...


P = ParamSpec("P")
R = TypeVar("R")


def without_gc_pauses(fn: Callable[P, R]) -> Callable[P, R]:
    """Run `fn` with CPython's cyclic garbage collector paused (then restored as it was).

    An assignment for a million partitions allocates millions of small lists, ints and
    dict entries and no reference cycles; the generational collector would still rescan
    the growing heap again and again (it doubled the time of a 2000 x 1M assignment).
    Reference counting frees everything as usual meanwhile.
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    return wrapper


def subscribers_by_topic(
    members: Sequence[MemberSpec], topics: Sequence[str]
) -> dict[str, list[int]]:
    """Topic -> indexes of its subscribers in `members` order. Topics subscribed to by the
    same members share one list (members with equal subscriptions are checked once)."""
    classes: dict[frozenset[str], list[int]] = {}
    for i, m in enumerate(members):
        classes.setdefault(m.topics, []).append(i)
    shared: dict[tuple[int, ...], list[int]] = {}
    out: dict[str, list[int]] = {}
    keys = list(classes)
    for topic in topics:
        which = tuple(k for k, key in enumerate(keys) if topic in key)
        found = shared.get(which)
        if found is None:
            found = sorted(i for k in which for i in classes[keys[k]])
            shared[which] = found
        out[topic] = found
    return out


def member_order_key(member: MemberSpec) -> tuple[int, str]:
    """Kafka's MemberInfo order: static members first by instance id, then dynamic ones by
    member id. Python's str order equals Java's String.compareTo except between
    supplementary-plane characters and U+E000..U+FFFF, which member ids do not mix."""
    if member.instance_id is not None:
        return (0, member.instance_id)
    return (1, member.member_id)


def sorted_members(group: GroupSpec) -> list[MemberSpec]:
    return sorted(group.members.values(), key=member_order_key)


def empty_assignment(group: GroupSpec) -> GroupAssignment:
    return {member_id: {} for member_id in group.members}


class TopicIndex:
    """Topics with metadata numbered in name order, partitions numbered globally.

    Partition `p` of the topic at index `t` is `base[t] + p`, so sorting global numbers
    sorts by (topic, partition) and a whole assignment is a list of ints until it is
    turned back into names at the very end.
    """

    def __init__(self, partitions: Mapping[str, int], topics: Sequence[str] | None = None) -> None:
        names = sorted(
            t for t in (topics if topics is not None else partitions) if partitions.get(t, 0) > 0
        )
        self.names = names
        self.index = {name: i for i, name in enumerate(names)}
        self.counts = [partitions[name] for name in names]
        self.base: list[int] = []
        total = 0
        for count in self.counts:
            self.base.append(total)
            total += count
        self.total = total
        self._topic_of: list[int] | None = None

    def topic_of(self, gp: int) -> int:
        """The topic index of a global partition number."""
        if self._topic_of is None:
            owners: list[int] = []
            for t, count in enumerate(self.counts):
                owners.extend([t] * count)
            self._topic_of = owners
        return self._topic_of[gp]

    def to_global(self, topic: str, partition: int) -> int | None:
        t = self.index.get(topic)
        if t is None or not 0 <= partition < self.counts[t]:
            return None
        return self.base[t] + partition

    def owned_globals(self, owned: Mapping[str, Sequence[int]]) -> list[int]:
        out: list[int] = []
        for topic, partitions in owned.items():
            t = self.index.get(topic)
            if t is None:
                continue
            base, count = self.base[t], self.counts[t]
            out.extend(base + p for p in partitions if 0 <= p < count)
        return out

    def to_names(self, globals_: Sequence[int]) -> dict[str, list[int]]:
        """Global numbers (any order) to {topic: sorted partitions}, topics in name order."""
        out: dict[str, list[int]] = {}
        if not globals_:
            return out
        ordered = sorted(globals_)
        base, names, counts = self.base, self.names, self.counts
        t = 0
        current: list[int] | None = None
        for gp in ordered:
            if current is None or gp >= base[t] + counts[t]:
                while gp >= base[t] + counts[t]:
                    t += 1
                current = out.setdefault(names[t], [])
            current.append(gp - base[t])
        return out
