"""The sticky assignment when every member subscribes to the same topics.

Kafka's `ConstrainedAssignmentBuilder`, on global partition numbers. With N partitions and
C members each member must end with `floor(N/C)` or `ceil(N/C)` partitions, and exactly
`N % C` of them with the larger number. So:

1. each member keeps its owned partitions up to its quota (sorted by partition number
   then topic, so members keep the same partition numbers across topics), the rest may
   be revoked;
2. members under quota, in member-id order, take the unassigned partitions round-robin
   (rack-local ones first when racks apply), then members at the minimum take one more
   until exactly `N % C` are at the maximum.

Every step is linear or `n log n`: two thousand members and a million partitions take a
few seconds in Python. Partitions handed to a member other than their previous owner (or
claimed twice in one generation) are recorded in `transferring`, which the cooperative
assignor withholds for one round (KIP-429).
"""

from __future__ import annotations

from collections import deque

from kgroups.client.assignors.ownership import Ownership, RackInfo
from kgroups.client.assignors.spec import AssignorError, TopicIndex


class ConstrainedBuilder:
    def __init__(self, index: TopicIndex, ownership: Ownership, racks: RackInfo) -> None:
        self.index = index
        self.own = ownership
        self.racks = racks
        members = len(ownership.members)
        total = index.total
        self.min_quota = total // members
        self.max_quota = -(-total // members)
        self.expected_over = total % members
        self.current_over = 0
        self.assignment: list[list[int]] = [[] for _ in range(members)]
        self.maybe_revoked: dict[int, int] = {}
        self.transferring: dict[int, int] = {}
        self.under: list[int] = []
        self.at_min: deque[int] = deque()

    def build(self) -> list[list[int]]:
        assigned = bytearray(self.index.total)
        self._keep_owned(assigned)
        unassigned = [gp for gp in range(self.index.total) if not assigned[gp]]
        ids = [m.member_id for m in self.own.members]
        self.under.sort(key=ids.__getitem__)
        self.at_min = deque(sorted(self.at_min, key=ids.__getitem__))
        if self.racks.enabled:
            unassigned.sort(key=self.racks.consumers_on_racks.__getitem__)
            unassigned = self._rack_aware_round_robin(unassigned)
        self._round_robin(unassigned)
        self._verify()
        return self.assignment

    def _keep_owned(self, assigned: bytearray) -> None:
        base, topic_of = self.index.base, self.index.topic_of
        multi = self.own.multi_claimed
        for member, owned in enumerate(self.own.owned):
            keep: list[int] = []
            for gp in owned:
                if self.racks.mismatch(member, gp):
                    self.maybe_revoked[gp] = member
                elif gp not in multi:
                    keep.append(gp)
            # By partition number, then topic: a member keeps the same numbers everywhere.
            keep.sort(key=lambda gp: (gp - base[topic_of(gp)], topic_of(gp)))
            if len(keep) < self.min_quota:
                taken = keep
                self.under.append(member)
            elif len(keep) >= self.max_quota and self.current_over < self.expected_over:
                taken = keep[: self.max_quota]
                self.current_over += 1
                if self.current_over == self.expected_over:
                    self.at_min.clear()
            else:
                taken = keep[: self.min_quota]
                if self.current_over < self.expected_over:
                    self.at_min.append(member)
            for gp in keep[len(taken) :]:
                self.maybe_revoked[gp] = member
            self.assignment[member].extend(taken)
            for gp in taken:
                assigned[gp] = 1

    def _give(self, gp: int, member: int) -> int:
        target = self.assignment[member]
        target.append(gp)
        previous = self.maybe_revoked.get(gp)
        if (previous is not None and previous != member) or gp in self.own.multi_claimed:
            self.transferring[gp] = member
        return len(target)

    def _round_robin(self, unassigned: list[int]) -> None:
        under, at_min = self.under, self.at_min
        pos = 0
        for gp in unassigned:
            from_under = True
            if pos < len(under):
                member = under[pos]
                pos += 1
            elif not under and not at_min:
                raise AssignorError("no member left to fill: the sticky quotas are inconsistent")
            elif not under:
                member = at_min.popleft()
                from_under = False
            else:
                pos = 0
                member = under[pos]
                pos += 1
            count = self._give(gp, member)
            if count == self.min_quota and from_under:
                pos -= 1
                del under[pos]
                at_min.append(member)
            elif count == self.max_quota:
                self.current_over += 1

    def _rack_aware_round_robin(self, unassigned: list[int]) -> list[int]:
        """Kafka's assignRackAwareRoundRobin: rack-local placements within the quotas."""
        under, at_min = self.under, self.at_min
        left: list[int] = []
        next_index = 0
        for gp in unassigned:
            member = None
            index = self._next_rack_member(gp, under, next_index)
            if index >= 0:
                member = under[index]
                count = len(self.assignment[member]) + 1
                if count >= self.min_quota:
                    under.remove(member)
                    if count < self.max_quota and self.current_over < self.expected_over:
                        at_min.append(member)
                else:
                    index += 1
                next_index = index % len(under) if under else 0
            elif at_min:
                first = self._next_rack_member(gp, list(at_min), 0)
                if first >= 0:
                    member = at_min[first]
                    if len(self.assignment[member]) + 1 == self.max_quota:
                        del at_min[first]
                        self.current_over += 1
                        if self.current_over == self.expected_over:
                            at_min.clear()
            if member is None:
                left.append(gp)
            else:
                self._give(gp, member)
        return left

    def _next_rack_member(self, gp: int, members: list[int] | deque[int], first: int) -> int:
        racks = self.racks.partition_racks[gp]
        if not racks:
            return -1
        n = len(members)
        for i in range(n):
            index = (first + i) % n
            rack = self.racks.member_rack[members[index]]
            if rack is not None and rack in racks:
                return index
        return -1

    def _verify(self) -> None:
        if not self.under:
            return
        if self.current_over != self.expected_over:
            raise AssignorError(
                "sticky quotas not reached: fewer members at the maximum than expected"
            )
        for member in self.under:
            if len(self.assignment[member]) != self.min_quota:
                raise AssignorError(f"member {member} did not reach the minimum quota")
