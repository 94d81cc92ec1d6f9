"""Who owned what, trusted how far: the sticky assignors' starting point (KIP-792).

Members report owned partitions with the generation they owned them in. Claims can be
stale or conflicting (a member that missed a rebalance, a zombie); Kafka resolves them as
`AbstractStickyAssignor.allSubscriptionsEqual` does (KAFKA-12984, KAFKA-14639):

* two claims in the *same* generation: neither member keeps the partition (it goes into
  `multi_claimed`, and a cooperative assignment withholds it for a round);
* claims in different generations: the higher generation keeps it;
* partitions of topics without metadata are dropped.

Members are visited in member-id order (Java visits a HashMap), which only matters for
who a partition was last attributed to, never for the outcome above.

This module also holds the rack bookkeeping of KIP-881 shared by both sticky builders.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kgroups.client.assignors.range import use_rack_aware
from kgroups.client.assignors.spec import GroupSpec, MemberSpec, TopicIndex


@dataclass
class Ownership:
    members: list[MemberSpec]
    """All members, in member-id order; indices below refer to this list."""
    owned: list[dict[int, None]]
    """Per member, the global partitions it may keep (ordered sets)."""
    multi_claimed: set[int] = field(default_factory=set)
    max_generation: int = -1
    all_equal: bool = True
    """Every member subscribes to the same topics (the constrained builder applies)."""


def resolve(group: GroupSpec, index: TopicIndex) -> Ownership:
    members = sorted(group.members.values(), key=lambda m: m.member_id)
    owned: list[dict[int, None]] = [{} for _ in members]
    owner_of: dict[int, int] = {}
    generations = [m.generation for m in members]
    result = Ownership(members, owned)
    first_topics = members[0].topics if members else frozenset()
    for i, member in enumerate(members):
        if member.topics != first_topics:
            result.all_equal = False
        result.max_generation = max(result.max_generation, member.generation)
        for gp in index.owned_globals(member.owned):
            other = owner_of.get(gp)
            if other is None:
                owned[i][gp] = None
                owner_of[gp] = i
            elif generations[i] == generations[other]:
                result.multi_claimed.add(gp)
                owned[other].pop(gp, None)
                owner_of[gp] = i
            elif generations[i] > generations[other]:
                owned[i][gp] = None
                owned[other].pop(gp, None)
                owner_of[gp] = i
    return result


class RackInfo:
    """Members' racks and partitions' replica racks, when rack-aware assignment applies."""

    def __init__(self, group: GroupSpec, index: TopicIndex, members: Sequence[MemberSpec]) -> None:
        self.member_rack: list[str | None] = [None] * len(members)
        self.partition_racks: list[frozenset[str]] = []
        self.consumers_on_racks: list[int] = []
        by_rack: dict[str, int] = {}
        for m in members:
            if m.rack:
                by_rack[m.rack] = by_rack.get(m.rack, 0) + 1
        if not by_rack:
            self.enabled = False
            return
        racks: list[frozenset[str]] = []
        for topic, count in zip(index.names, index.counts, strict=True):
            given = list(group.partition_racks.get(topic, ()))
            racks.extend(given[p] if p < len(given) else frozenset() for p in range(count))
        all_racks = set().union(*racks) if racks else set()
        self.enabled = use_rack_aware(set(by_rack), all_racks, racks)
        if self.enabled:
            self.member_rack = [m.rack or None for m in members]
            self.partition_racks = racks
            self.consumers_on_racks = [sum(by_rack.get(r, 0) for r in rs) for rs in racks]

    def mismatch(self, member: int, gp: int) -> bool:
        """The member has a rack and the partition has no replica there."""
        if not self.enabled:
            return False
        rack = self.member_rack[member]
        return rack is not None and rack not in self.partition_racks[gp]

    def matches(self, member: int, gp: int) -> bool:
        """The member has a rack and the partition has a replica there."""
        if not self.enabled:
            return False
        rack = self.member_rack[member]
        return rack is not None and rack in self.partition_racks[gp]
