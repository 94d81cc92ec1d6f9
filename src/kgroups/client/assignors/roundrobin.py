"""The round-robin assignor (Kafka's `RoundRobinAssignor`, name "roundrobin").

All partitions of all subscribed topics, topics in name order, are dealt to the members
in member order (static by instance id first, then dynamic by member id) by one cursor
that runs across topics and skips members not subscribed to the partition's topic.

Example, C0 and C1 subscribed to t0 and t1 with 3 partitions each::

    C0: t0 [0, 2], t1 [1]
    C1: t0 [1],    t1 [0, 2]

Unequal subscriptions are handled exactly as Kafka does (kafka-python 3.0.12 crashes
there). Per topic the deal is computed in closed form rather than partition by partition:
the topic's subscribers take partitions in turn starting from the first subscriber at or
after the cursor, so a million partitions cost a million list appends, not a million
subscription checks.
"""

from __future__ import annotations

from bisect import bisect_left

from kgroups.client.assignors.spec import (
    AssignorError,
    GroupAssignment,
    GroupSpec,
    RebalanceProtocol,
    empty_assignment,
    sorted_members,
    subscribers_by_topic,
    without_gc_pauses,
)


class RoundRobinAssignor:
    name = "roundrobin"
    rebalance_protocols: tuple[RebalanceProtocol, ...] = ("eager",)

    @without_gc_pauses
    def assign(self, group: GroupSpec) -> GroupAssignment:
        result = empty_assignment(group)
        members = sorted_members(group)
        if not members:
            raise AssignorError("roundrobin needs at least one member")
        topics = sorted({t for m in members for t in m.topics if group.partitions.get(t, 0) > 0})
        subscribers_of = subscribers_by_topic(members, topics)
        targets = [result[m.member_id] for m in members]
        count = len(members)
        cursor = 0
        for topic in topics:
            subscribers = subscribers_of[topic]
            n = group.partitions[topic]
            start = bisect_left(subscribers, cursor)
            k = len(subscribers)
            rotated = subscribers[start:] + subscribers[:start]
            if n == k:
                for j, index in enumerate(rotated):
                    targets[index][topic] = [j]
            else:
                for j, index in enumerate(rotated[:n]):
                    targets[index][topic] = list(range(j, n, k))
            cursor = (rotated[(n - 1) % k] + 1) % count
        return result
