"""The sticky assignment when members subscribe to different topics.

KIP-54 asks for an assignment that is *balanced* (either every member's count is within
one of every other's, or no partition can move from a member with at least two more to a
member that could take it) and, within that, *sticky* (owned partitions stay put).
Kafka's `GeneralAssignmentBuilder` gets there by re-checking the whole assignment after
every move, which is quadratic; this builder reaches the same definition directly:

1. keep owned partitions that are still valid (topic exists, still subscribed);
2. give every unassigned partition to its least-loaded subscriber, topics with the fewest
   subscribers first (per topic a heap, so a million partitions cost n log m); with
   racks, a rack-local one among the least loaded;
3. balance: for each member from the least loaded up, while some member with at least
   two more partitions holds a partition it could take, move one from the most loaded
   such member. Each move lowers the sum of pairwise count differences, so the loop ends,
   and it ends exactly when the KIP-54 condition holds;
4. with racks, move rack-mismatched partitions to less-loaded rack-local subscribers.

Members with identical subscriptions form a class, and every member tracks how many of
its partitions each class could take, so finding a donor never scans partitions. The
partition that moves is chosen for stickiness: one that moved the other way this round
(undoing it), else a rack-local one (preferring one the donor only received this round),
else one the receiver owned in an earlier generation, else one the donor only received
this round, else the donor's last one of a shared topic.
"""

from __future__ import annotations

import heapq

from kgroups.client.assignors.ownership import Ownership, RackInfo
from kgroups.client.assignors.spec import GroupSpec, TopicIndex


class GeneralBuilder:
    def __init__(
        self, group: GroupSpec, index: TopicIndex, ownership: Ownership, racks: RackInfo
    ) -> None:
        self.index = index
        self.own = ownership
        self.racks = racks
        members = ownership.members
        self.n = len(members)
        self.order = {m.member_id: i for i, m in enumerate(members)}
        self.subs: list[frozenset[int]] = [
            frozenset(index.index[t] for t in m.topics if t in index.index) for m in members
        ]
        self.subscribers: list[list[int]] = [[] for _ in index.names]
        for i, topics in enumerate(self.subs):
            for t in topics:
                self.subscribers[t].append(i)
        classes: dict[frozenset[int], int] = {}
        self.klass = [classes.setdefault(s, len(classes)) for s in self.subs]
        self.class_topics = list(classes)
        self.classes_of_topic: list[list[int]] = [[] for _ in index.names]
        for k, topics in enumerate(self.class_topics):
            for t in topics:
                self.classes_of_topic[t].append(k)
        self.held: list[dict[int, list[int]]] = [{} for _ in members]
        self.count = [0] * self.n
        self.buckets: dict[int, dict[int, None]] = {0: dict.fromkeys(range(self.n))}
        """count -> members with that many partitions (ordered sets, member order)."""
        self.takeable = [[0] * len(classes) for _ in members]
        """takeable[m][k]: how many of m's partitions a member of class k could take."""
        self.fresh: list[set[int]] = [set() for _ in members]
        self.prev_owner: dict[int, int] = {}
        self.moves: dict[tuple[int, int, int], list[int]] = {}
        """(from, to, topic) -> partitions moved that way in the balancing phase."""

    # -- bookkeeping ------------------------------------------------------------------------

    def _recount(self, member: int, delta: int) -> None:
        old = self.count[member]
        bucket = self.buckets[old]
        del bucket[member]
        if not bucket:
            del self.buckets[old]
        self.count[member] = old + delta
        self.buckets.setdefault(old + delta, {})[member] = None

    def _add(self, member: int, gp: int, t: int) -> None:
        self.held[member].setdefault(t, []).append(gp)
        self._recount(member, 1)
        row = self.takeable[member]
        for k in self.classes_of_topic[t]:
            row[k] += 1

    def _remove(self, member: int, gp: int, t: int) -> None:
        partitions = self.held[member][t]
        partitions.remove(gp)
        if not partitions:
            del self.held[member][t]
        self._recount(member, -1)
        row = self.takeable[member]
        for k in self.classes_of_topic[t]:
            row[k] -= 1

    # -- the three phases ----------------------------------------------------------------------

    def build(self) -> list[list[int]]:
        topic_of = self.index.topic_of
        assigned = bytearray(self.index.total)
        for member, owned in enumerate(self.own.owned):
            for gp in owned:
                t = topic_of(gp)
                if t in self.subs[member]:
                    self._add(member, gp, t)
                    assigned[gp] = 1
        self._note_previous_owners()
        self._fill(assigned)
        self._balance()
        if self.racks.enabled:
            self._rack_moves()
        return [[gp for partitions in held.values() for gp in partitions] for held in self.held]

    def _note_previous_owners(self) -> None:
        """Claims older than the newest generation: where a partition lived before."""
        newest = self.own.max_generation
        best: dict[int, int] = {}
        for i, member in enumerate(self.own.members):
            generation = member.generation
            if generation >= newest and generation != -1:
                continue
            for gp in self.index.owned_globals(member.owned):
                if gp not in best or generation > best[gp]:
                    best[gp] = generation
                    self.prev_owner[gp] = i

    def _fill(self, assigned: bytearray) -> None:
        names, counts, base = self.index.names, self.index.counts, self.index.base
        topics = sorted(range(len(names)), key=lambda t: (len(self.subscribers[t]), names[t]))
        for t in topics:
            subscribers = self.subscribers[t]
            if not subscribers:
                continue
            todo = [base[t] + p for p in range(counts[t]) if not assigned[base[t] + p]]
            if not todo:
                continue
            if self.racks.enabled:
                self._fill_rack_aware(t, todo)
                continue
            heap = [(self.count[m], self.own.members[m].member_id, m) for m in subscribers]
            heapq.heapify(heap)
            for gp in todo:
                _, member_id, m = heapq.heappop(heap)
                self._add(m, gp, t)
                self.fresh[m].add(gp)
                heapq.heappush(heap, (self.count[m], member_id, m))

    def _fill_rack_aware(self, t: int, todo: list[int]) -> None:
        """Least-loaded subscriber first, as without racks; among the least loaded, one on
        a rack holding a replica. Heaps per rack, with stale entries skipped lazily."""
        ids = [m.member_id for m in self.own.members]
        everyone = [(self.count[m], ids[m], m) for m in self.subscribers[t]]
        by_rack: dict[str, list[tuple[int, str, int]]] = {}
        for entry in everyone:
            rack = self.racks.member_rack[entry[2]]
            if rack is not None:
                by_rack.setdefault(rack, []).append(entry)
        heaps = [everyone, *by_rack.values()]
        for heap in heaps:
            heapq.heapify(heap)

        def top(heap: list[tuple[int, str, int]]) -> tuple[int, str, int] | None:
            while heap and heap[0][0] != self.count[heap[0][2]]:
                heapq.heappop(heap)
            return heap[0] if heap else None

        for gp in todo:
            best = top(everyone)
            assert best is not None
            if not self.racks.matches(best[2], gp):
                tied = [
                    local
                    for rack in self.racks.partition_racks[gp]
                    if (local := top(by_rack.get(rack, []))) is not None and local[0] == best[0]
                ]
                best = min(tied, default=best)
            m = best[2]
            self._add(m, gp, t)
            self.fresh[m].add(gp)
            entry = (self.count[m], ids[m], m)
            heapq.heappush(everyone, entry)
            rack = self.racks.member_rack[m]
            if rack is not None:
                heapq.heappush(by_rack[rack], entry)

    def _rack_moves(self) -> None:
        """Move a partition with no replica on its member's rack to a subscriber on a rack
        that has one, when that subscriber holds fewer partitions and both members stay
        balanced (KIP-54). Every move adds a rack-local partition, so this ends.
        Owned partitions are kept through rack changes and moved here, so an assignment
        that is already as good as this makes it stays exactly as it is (a fixpoint: the
        cooperative protocol settles instead of shuffling partitions every round)."""
        local: dict[tuple[int, str], list[int]] = {}
        for t, subscribers in enumerate(self.subscribers):
            for m in subscribers:
                rack = self.racks.member_rack[m]
                if rack is not None:
                    local.setdefault((t, rack), []).append(m)
        ids = [m.member_id for m in self.own.members]
        moved = True
        while moved:
            moved = False
            for donor in range(self.n):
                for t, held in list(self.held[donor].items()):
                    for gp in list(held):
                        if not self.racks.mismatch(donor, gp):
                            continue
                        candidates = [
                            m
                            for rack in self.racks.partition_racks[gp]
                            for m in local.get((t, rack), ())
                            if self.count[m] < self.count[donor]
                        ]
                        if not candidates:
                            continue
                        receiver = min(candidates, key=lambda m: (self.count[m], ids[m]))
                        self._remove(donor, gp, t)
                        self._add(receiver, gp, t)
                        if self._balanced_at(donor) and self._balanced_at(receiver):
                            self.fresh[donor].discard(gp)
                            self.fresh[receiver].add(gp)
                            moved = True
                        else:
                            self._remove(receiver, gp, t)
                            self._add(donor, gp, t)

    def _balanced_at(self, member: int) -> bool:
        """KIP-54 balance around one member: nobody with two fewer could take one of its
        partitions, and it could take none from anybody with two more."""
        count, k, row = self.count[member], self.klass[member], self.takeable[member]
        for c, bucket in self.buckets.items():
            if c <= count - 2 and any(row[self.klass[x]] for x in bucket):
                return False
            if c >= count + 2 and any(self.takeable[y][k] for y in bucket):
                return False
        return True

    def _balance(self) -> None:
        ids = [m.member_id for m in self.own.members]
        moved = True
        while moved:
            moved = False
            for receiver in sorted(range(self.n), key=lambda m: (self.count[m], ids[m])):
                while (donor := self._donor(receiver)) is not None:
                    self._move(donor, receiver)
                    moved = True

    def _donor(self, receiver: int) -> int | None:
        """The most loaded member with at least two more partitions than `receiver` that
        holds a partition `receiver` can take (ties: member order)."""
        k = self.klass[receiver]
        floor = self.count[receiver] + 2
        for c in sorted((c for c in self.buckets if c >= floor), reverse=True):
            for m in self.buckets[c]:
                if self.takeable[m][k] > 0:
                    return m
        return None

    def _move(self, donor: int, receiver: int) -> None:
        topics = self.subs[receiver]
        held = self.held[donor]
        shared = (
            [t for t in held if t in topics]
            if len(held) <= len(topics)
            else [t for t in topics if t in held]
        )
        shared.sort()
        choice: tuple[int, int] | None = None
        for t in shared:
            undo = self.moves.get((receiver, donor, t))
            if undo:
                choice = (undo.pop(), t)
                break
        fresh = self.fresh[donor]
        if choice is None and self.racks.enabled:
            # Rack-local first; among those, one the donor did not own (moving an owned one
            # would make the cooperative assignor withhold it, and the next round's fill
            # could hand it straight back: a rebalance that never settles).
            local = [(gp, t) for t in shared for gp in held[t] if self.racks.matches(receiver, gp)]
            choice = next((c for c in local if c[0] in fresh), local[0] if local else None)
        if choice is None:
            choice = next(
                ((gp, t) for t in shared for gp in held[t] if self.prev_owner.get(gp) == receiver),
                None,
            )
        if choice is None:
            choice = next(((gp, t) for t in shared for gp in held[t] if gp in fresh), None)
        if choice is None:
            t = shared[0]
            choice = (held[t][-1], t)
        gp, t = choice
        self._remove(donor, gp, t)
        self._add(receiver, gp, t)
        self.fresh[donor].discard(gp)
        self.fresh[receiver].add(gp)
        self.moves.setdefault((donor, receiver, t), []).append(gp)
