"""One consumer-protocol member (KIP-848) moved one step toward its target assignment.

Under the consumer protocol there is no group-wide barrier: the coordinator computes a
target assignment for the group, and each member's heartbeat moves that member toward its
share of it, partition by partition (Kafka's `CurrentAssignmentBuilder`). Two rules keep a
partition with one owner at a time:

* **revoke first**: while the member still owns partitions that are no longer its, it
  is told only what it keeps (`UNREVOKED_PARTITIONS`) and stays at its epoch; it gets
  nothing new until its heartbeat reports those partitions released;
* **assign only what is free**: a partition of its target that another member still
  holds (assigned, or pending its revocation) is withheld (`UNRELEASED_PARTITIONS`) and
  handed over on a later heartbeat, once its holder released it or was fenced.

A member reaches the target epoch once it has nothing left to revoke. `owned` is what the
member's request says it owns now (None: the request did not say, which counts as "still
owns" everything, as Kafka does). Each assigned partition carries the epoch at which it was
assigned (KIP-1251), which offset commits may be checked against.

Pure: the group's view of who holds what comes in as `holder_epoch` (the epoch of the
member holding a partition, -1 if nobody does); nothing here reads a clock or the group.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", str, uuid.UUID)
"""How topics are named: by id, as on the wire, or by name (see `server_assignors`)."""
Partitions = Mapping[K, Mapping[int, int]]
"""Topic -> partition -> the epoch at which it was assigned to the member."""
Owned = Mapping[K, Collection[int]]
"""Topic -> the partitions a member reports owning."""
FREE = -1
"""`holder_epoch` of a partition nobody holds."""


class MemberState(enum.IntEnum):
    """A consumer-protocol member's reconciliation state (persisted as this byte)."""

    STABLE = 0
    """Reconciled with its target (possibly an older one)."""
    UNREVOKED_PARTITIONS = 1
    """Must release partitions before it can move to the target epoch; stays at its own."""
    UNRELEASED_PARTITIONS = 2
    """At the target epoch, waiting for partitions others still hold."""
    UNKNOWN = 127
    """A state a newer version wrote: fenced unless the member reports owning nothing."""


class FencedMemberEpoch(Exception):
    """The member must drop its partitions and rejoin (FENCED_MEMBER_EPOCH)."""


@dataclass(frozen=True, slots=True)
class MemberAssignment(Generic[K]):
    """Where a member stands: its epoch, the one before, its state, what it may use now
    and what it must still release."""

    epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Partitions[K] = field(default_factory=dict)
    revoking: Partitions[K] = field(default_factory=dict)

    def reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.epoch == target_epoch


def reconcile(
    member: MemberAssignment[K],
    *,
    target_epoch: int,
    target: Mapping[K, Collection[int]],
    subscribed: Collection[K],
    holder_epoch: Callable[[K, int], int],
    owned: Owned[K] | None,
    subscription_changed: bool = False,
) -> MemberAssignment[K]:
    """The member after one heartbeat: `target` is its share of the group's target
    assignment at `target_epoch`; `subscribed` the topics it subscribes to now (a target
    partition of any other topic is not its any more). Raises `FencedMemberEpoch` for a
    member in an unknown state that still owns partitions."""
    if not subscription_changed and member.reconciled_to(target_epoch):
        return member
    step = _Step(member, target_epoch, target, subscribed, holder_epoch, owned)
    state = member.state
    if state is MemberState.STABLE:
        if member.epoch != target_epoch:
            return step.next_assignment(member.epoch)
        return step.drop_unsubscribed() if subscription_changed else member
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _still_owns(member.revoking, owned):
            return step.drop_unsubscribed() if subscription_changed else member
        return step.next_assignment(member.epoch)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return step.next_assignment(member.epoch)
    if owned is None or any(owned.values()):
        raise FencedMemberEpoch(f"the member is in an unknown state ({state})")
    return step.next_assignment(target_epoch)


def _still_owns(partitions: Partitions[K], owned: Owned[K] | None) -> bool:
    """Whether the member still owns any of `partitions` (not saying counts as yes)."""
    if owned is None:
        return any(partitions.values())
    return any(p in owned.get(topic, ()) for topic, ps in partitions.items() for p in ps)


@dataclass(slots=True)
class _Step(Generic[K]):
    member: MemberAssignment[K]
    target_epoch: int
    target: Mapping[K, Collection[int]]
    subscribed: Collection[K]
    holder_epoch: Callable[[K, int], int]
    owned: Owned[K] | None

    def next_assignment(self, member_epoch: int) -> MemberAssignment[K]:
        """Kafka's `computeNextAssignment`: keep what stays, revoke what goes, add what is
        new and free; the epoch moves to the target's only once nothing is left to revoke
        (`member_epoch` is where it stays until then)."""
        member = self.member
        kept: dict[K, dict[int, int]] = {}
        revoking: dict[K, dict[int, int]] = {}
        adding: dict[K, set[int]] = {}
        unreleased = False
        for topic in set(self.target) | set(member.assigned):
            wanted = set(self.target.get(topic, ())) if topic in self.subscribed else set()
            assigned = member.assigned.get(topic, {})
            stays = {p: e for p, e in assigned.items() if p in wanted}
            goes = {p: e for p, e in assigned.items() if p not in wanted}
            own_revoking = member.revoking.get(topic, {})
            new = wanted - stays.keys()
            free = {p for p in new
                    if self.holder_epoch(topic, p) == FREE or p in own_revoking}  # fmt: skip
            unreleased |= free != new
            if stays:
                kept[topic] = stays
            if goes:
                revoking[topic] = goes
            if free:
                adding[topic] = free
        if revoking and _still_owns(revoking, self.owned):
            return MemberAssignment(member_epoch, member.epoch,
                                    MemberState.UNREVOKED_PARTITIONS, kept, revoking)  # fmt: skip
        for topic, partitions in adding.items():
            kept.setdefault(topic, {}).update(dict.fromkeys(partitions, self.target_epoch))
        state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        return MemberAssignment(self.target_epoch, member.epoch, state, kept, {})

    def drop_unsubscribed(self) -> MemberAssignment[K]:
        """Kafka's `updateCurrentAssignment`, on a subscription change: the partitions of
        topics the member no longer subscribes to go to revocation at once, at its epoch
        (if it still owns any; if not, they are simply no longer its)."""
        member = self.member
        dropped = {t: ps for t, ps in member.assigned.items() if t not in self.subscribed and ps}
        if not dropped:
            return member
        kept = {t: ps for t, ps in member.assigned.items() if t in self.subscribed and ps}
        revoking = {t: dict(ps) for t, ps in member.revoking.items() if ps}
        for topic, partitions in dropped.items():
            revoking.setdefault(topic, {}).update(partitions)
        if _still_owns(revoking, self.owned):
            return MemberAssignment(member.epoch, member.epoch,
                                    MemberState.UNREVOKED_PARTITIONS, kept, revoking)  # fmt: skip
        return MemberAssignment(member.epoch, member.epoch, member.state, kept, {})
