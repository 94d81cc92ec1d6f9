"""The range assignor (Kafka's `RangeAssignor`, name "range"), with KIP-881 rack awareness.

Per topic, independently: the subscribers in member order (static members by instance id,
then dynamic ones by member id) each take a contiguous range; the first `n % c` take one
extra. Topics with the same partition count and subscribers therefore give the same
member the same partition numbers: that is co-partitioning, for joins.

Example, two members subscribed to t0 and t1 with 3 partitions each::

    C0: t0 [0, 1], t1 [0, 1]
    C1: t0 [2],    t1 [2]

With racks (members' `rack`, partitions' replica racks) and a topic whose partitions are
not on every rack, members first take partitions on their own rack, within the same
quotas; co-partitioned topics are matched together so that a member still gets the same
partition numbers of every topic in the group; then plain ranges fill what is left.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kgroups.client.assignors.spec import (
    GroupAssignment,
    GroupSpec,
    MemberSpec,
    RebalanceProtocol,
    empty_assignment,
    sorted_members,
    subscribers_by_topic,
    without_gc_pauses,
)


def use_rack_aware(
    consumer_racks: set[str], partition_racks: set[str], per_partition: list[frozenset[str]]
) -> bool:
    """Kafka's gate: members have racks, they overlap the partitions' racks, and not every
    partition has a replica on every rack (otherwise any placement is rack-local)."""
    if not consumer_racks or consumer_racks.isdisjoint(partition_racks):
        return False
    return not all(racks == partition_racks for racks in per_partition)


@dataclass
class _TopicState:
    topic: str
    partitions: int
    consumers: list[str]
    racks: dict[str, str | None]
    partition_racks: list[frozenset[str]]
    quota: int = 0
    extra: int = 0
    assigned: dict[str, int] = field(default_factory=dict)
    unassigned: dict[int, None] = field(default_factory=dict)
    needs_rack_aware: bool = False

    def __post_init__(self) -> None:
        n, c = self.partitions, len(self.consumers)
        self.quota, self.extra = (n // c, n % c) if c else (0, 0)
        self.assigned = dict.fromkeys(self.consumers, 0)
        self.unassigned = dict.fromkeys(range(n))

    def racks_match(self, consumer: str, partition: int) -> bool:
        rack = self.racks.get(consumer)
        if rack is None:
            return True
        return bool(self.partition_racks) and rack in self.partition_racks[partition]

    def max_assignable(self, consumer: str) -> int:
        return max(0, self.quota + (1 if self.extra > 0 else 0) - self.assigned[consumer])

    def on_assigned(self, consumer: str, partitions: list[int]) -> None:
        self.assigned[consumer] += len(partitions)
        if self.assigned[consumer] > self.quota:
            self.extra -= 1
        for p in partitions:
            del self.unassigned[p]


class RangeAssignor:
    name = "range"
    rebalance_protocols: tuple[RebalanceProtocol, ...] = ("eager",)

    @without_gc_pauses
    def assign(self, group: GroupSpec) -> GroupAssignment:
        result = empty_assignment(group)
        members = sorted_members(group)
        topics = [t for t in sorted(group.partitions) if group.partitions[t] > 0]
        subscribers = subscribers_by_topic(members, topics)
        if not any(m.rack for m in members) or not group.partition_racks:
            self._plain(group, members, topics, subscribers, result)
            return result
        racks = {m.member_id: m.rack or None for m in members}
        states: list[_TopicState] = []
        for topic in topics:
            count = group.partitions[topic]
            consumers = [members[i].member_id for i in subscribers[topic]]
            if not consumers:
                continue
            topic_racks = {c: racks[c] for c in consumers}
            consumer_racks = {r for r in topic_racks.values() if r}
            per_partition = list(group.partition_racks.get(topic, ())) if consumer_racks else []
            state = _TopicState(topic, count, consumers, topic_racks, per_partition)
            all_partition_racks = set().union(*per_partition) if per_partition else set()
            state.needs_rack_aware = use_rack_aware(
                consumer_racks, all_partition_racks, per_partition
            )
            states.append(state)

        if not any(s.needs_rack_aware for s in states):
            self._plain(group, members, topics, subscribers, result)
            return result

        collected: dict[str, dict[str, list[int]]] = {m: {} for m in group.members}
        self._assign_with_rack_matching(states, collected)
        for s in states:
            self._assign_ranges(s, lambda c, p: True, collected)
        for member, by_topic in collected.items():
            result[member] = {t: sorted(ps) for t, ps in sorted(by_topic.items()) if ps}
        return result

    @staticmethod
    def _plain(
        group: GroupSpec,
        members: list[MemberSpec],
        topics: list[str],
        subscribers: dict[str, list[int]],
        result: GroupAssignment,
    ) -> None:
        """Contiguous ranges, computed once for all topics with the same subscribers and
        partition count (with equal subscriptions: once for the whole group)."""
        alike: dict[tuple[int, int], list[str]] = {}
        for topic in topics:
            if subscribers[topic]:
                key = (id(subscribers[topic]), group.partitions[topic])
                alike.setdefault(key, []).append(topic)
        for same in alike.values():
            consumers = subscribers[same[0]]
            quota, extra = divmod(group.partitions[same[0]], len(consumers))
            start = 0
            for i, index in enumerate(consumers):
                size = quota + (1 if i < extra else 0)
                if size:
                    target = result[members[index].member_id]
                    if size == 1:
                        target.update({t: [start] for t in same})
                    else:
                        span = range(start, start + size)
                        target.update({t: list(span) for t in same})
                start += size
        if len(alike) > 1:  # keep topics in name order in every member's dict
            for member_id, by_topic in result.items():
                result[member_id] = dict(sorted(by_topic.items()))

    @staticmethod
    def _assign(
        s: _TopicState, consumer: str, partitions: list[int], out: dict[str, dict[str, list[int]]]
    ) -> None:
        out[consumer].setdefault(s.topic, []).extend(partitions)
        s.on_assigned(consumer, partitions)

    def _assign_ranges(
        self,
        s: _TopicState,
        may_assign: Callable[[str, int], bool],
        out: dict[str, dict[str, list[int]]],
    ) -> None:
        for consumer in s.consumers:
            if not s.unassigned:
                break
            limit = s.max_assignable(consumer)
            chosen: list[int] = []
            for p in s.unassigned:
                if len(chosen) >= limit:
                    break
                if may_assign(consumer, p):
                    chosen.append(p)
            if chosen:
                self._assign(s, consumer, chosen, out)

    def _assign_with_rack_matching(
        self, states: list[_TopicState], out: dict[str, dict[str, list[int]]]
    ) -> None:
        # Topics with the same subscribers (and racks) and partition count are co-partitioned.
        groups: dict[tuple[tuple[str, str | None], ...], dict[int, list[_TopicState]]] = {}
        for s in states:
            key = tuple((c, s.racks[c]) for c in s.consumers)
            groups.setdefault(key, {}).setdefault(len(s.partition_racks), []).append(s)
        for by_count in groups.values():
            for count, group in by_count.items():
                if len(group) > 1:
                    self._assign_co_partitioned(group, count, out)
                elif group[0].needs_rack_aware:
                    self._assign_ranges(group[0], group[0].racks_match, out)

    def _assign_co_partitioned(
        self, states: list[_TopicState], count: int, out: dict[str, dict[str, list[int]]]
    ) -> None:
        remaining = list(states[0].consumers)
        for p in range(count):
            match = next(
                (
                    c
                    for c in remaining
                    if all(s.racks_match(c, p) and s.max_assignable(c) > 0 for s in states)
                ),
                None,
            )
            if match is None:
                continue
            for s in states:
                self._assign(s, match, [p], out)
            if all(s.max_assignable(match) <= 0 for s in states):
                remaining.remove(match)
                if not remaining:
                    break
