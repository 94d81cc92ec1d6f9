"""The redundant assignor: every partition to `replicas` distinct members (seed 000's
"redundant partitioning", e.g. search indexers keeping k copies of each shard).

Each partition gets `min(replicas, its topic's subscribers)` distinct owners. The
assignment is balanced the KIP-54 way over replica slots (no slot can move from a member
holding two or more slots more than another member who could take it) and sticky: a
member keeps the slots it owned (newest generation first when a partition is claimed by
more owners than it may have), and only new or orphaned slots, or slots that must move
for balance, change hands. When members report racks, a partition's owners are spread
over distinct racks as far as balance allows.

Example, replicas=2, members A, B, C on topic t with 3 partitions::

    A: t [0, 1]   B: t [0, 2]   C: t [1, 2]
"""

from __future__ import annotations

import heapq

from kgroups.client.assignors.spec import (
    GroupAssignment,
    GroupSpec,
    RebalanceProtocol,
    TopicIndex,
    empty_assignment,
    without_gc_pauses,
)


class RedundantAssignor:
    name = "redundant"
    rebalance_protocols: tuple[RebalanceProtocol, ...] = ("eager",)

    @without_gc_pauses
    def assign(self, group: GroupSpec) -> GroupAssignment:
        result = empty_assignment(group)
        members = sorted(group.members.values(), key=lambda m: m.member_id)
        if not members:
            return result
        index = TopicIndex(group.partitions, sorted({t for m in members for t in m.topics}))
        replicas = max(1, group.replicas)
        subs = [frozenset(index.index[t] for t in m.topics if t in index.index) for m in members]
        subscribers: list[list[int]] = [[] for _ in index.names]
        for i, topics in enumerate(subs):
            for t in topics:
                subscribers[t].append(i)
        racks = [m.rack or None for m in members]
        ids = [m.member_id for m in members]
        owners: list[list[int]] = [[] for _ in range(index.total)]
        held: list[set[int]] = [set() for _ in members]

        # 1. Keep owned slots that are still valid, newest generation first.
        claims: dict[int, list[tuple[int, int]]] = {}
        for i, m in enumerate(members):
            for gp in index.owned_globals(m.owned):
                if index.topic_of(gp) in subs[i]:
                    claims.setdefault(gp, []).append((-m.generation, i))
        for gp, claimants in claims.items():
            limit = min(replicas, len(subscribers[index.topic_of(gp)]))
            for _, i in sorted(claimants)[:limit]:
                owners[gp].append(i)
                held[i].add(gp)

        # 2. Fill missing slots: least-loaded eligible member, new racks preferred.
        order = sorted(range(len(index.names)), key=lambda t: (len(subscribers[t]), index.names[t]))
        for t in order:
            eligible = subscribers[t]
            if not eligible:
                continue
            want = min(replicas, len(eligible))
            base = index.base[t]
            for gp in range(base, base + index.counts[t]):
                while len(owners[gp]) < want:
                    used = {racks[o] for o in owners[gp]}
                    member = min(
                        (i for i in eligible if i not in owners[gp]),
                        key=lambda i: (len(held[i]), racks[i] in used, ids[i]),
                    )
                    owners[gp].append(member)
                    held[member].add(gp)

        # 3. Balance slots: move from members two or more above a member who can take one.
        self._balance(index, subs, owners, held, ids)
        for i, m in enumerate(members):
            result[m.member_id] = index.to_names(list(held[i]))
        return result

    @staticmethod
    def _balance(
        index: TopicIndex,
        subs: list[frozenset[int]],
        owners: list[list[int]],
        held: list[set[int]],
        ids: list[str],
    ) -> None:
        moved = True
        while moved:
            moved = False
            for receiver in sorted(range(len(held)), key=lambda i: (len(held[i]), ids[i])):
                while True:
                    floor = len(held[receiver]) + 2
                    donors = [
                        (-len(held[i]), ids[i], i)
                        for i in range(len(held))
                        if len(held[i]) >= floor
                    ]
                    heapq.heapify(donors)
                    slot = None
                    while donors and slot is None:
                        _, _, donor = heapq.heappop(donors)
                        slot = next(
                            (
                                gp
                                for gp in sorted(held[donor], reverse=True)
                                if index.topic_of(gp) in subs[receiver]
                                and receiver not in owners[gp]
                            ),
                            None,
                        )
                    if slot is None:
                        break
                    owners[slot][owners[slot].index(donor)] = receiver
                    held[donor].discard(slot)
                    held[receiver].add(slot)
                    moved = True
