"""The sticky assignors: "sticky" (KIP-54, eager) and "cooperative-sticky" (KIP-429).

Both produce the same balanced, sticky assignment (see `constrained` for equal
subscriptions and `general` for the rest). The cooperative one then withholds, for one
round, every partition that is changing hands: the previous owner must revoke it first
(its client sees it revoked, calls onPartitionsRevoked and rejoins), and the next round
assigns it, now unowned. No partition is ever assigned to one member while another still
owns it in the same round.

Worked example (KIP-54 example 1): C0, C1, C2 subscribe to t0..t3 with 2 partitions
each; C1 leaves. The remaining members keep everything they had and split C1's::

    before: C0 [t0p0, t1p1, t3p0]  C1 [t0p1, t2p0, t3p1]  C2 [t1p0, t2p1]
    after:  C0 [t0p0, t1p1, t3p0, t2p0]  C2 [t1p0, t2p1, t0p1, t3p1]
"""

from __future__ import annotations

from kgroups.client.assignors.constrained import ConstrainedBuilder
from kgroups.client.assignors.general import GeneralBuilder
from kgroups.client.assignors.ownership import RackInfo, resolve
from kgroups.client.assignors.spec import (
    GroupAssignment,
    GroupSpec,
    MemberSpec,
    RebalanceProtocol,
    TopicIndex,
    empty_assignment,
    without_gc_pauses,
)


@without_gc_pauses
def sticky_assignment(group: GroupSpec, *, cooperative: bool) -> GroupAssignment:
    result = empty_assignment(group)
    if not group.members:
        return result
    topics = {t for m in group.members.values() for t in m.topics}
    index = TopicIndex(group.partitions, sorted(topics))
    ownership = resolve(group, index)
    racks = RackInfo(group, index, ownership.members)
    transferring: dict[int, int] | None
    if ownership.all_equal:
        builder = ConstrainedBuilder(index, ownership, racks)
        assignment = builder.build()
        transferring = builder.transferring
    else:
        assignment = GeneralBuilder(group, index, ownership, racks).build()
        transferring = None
    if cooperative:
        if transferring is None:
            transferring = _transferring(group, index, ownership.members, assignment)
        for gp, member in transferring.items():
            assignment[member].remove(gp)
    for spec, partitions in zip(ownership.members, assignment, strict=True):
        result[spec.member_id] = index.to_names(partitions)
    return result


def _transferring(
    group: GroupSpec, index: TopicIndex, members: list[MemberSpec], assignment: list[list[int]]
) -> dict[int, int]:
    """Partitions newly assigned to a member while some other member still owns them."""
    added: dict[int, int] = {}
    revoked: set[int] = set()
    for i, member in enumerate(members):
        owned = set(index.owned_globals(member.owned))
        new = set(assignment[i])
        for gp in new - owned:
            added[gp] = i
        revoked |= owned - new
    return {gp: m for gp, m in added.items() if gp in revoked}


class StickyAssignor:
    name = "sticky"
    rebalance_protocols: tuple[RebalanceProtocol, ...] = ("eager",)

    def assign(self, group: GroupSpec) -> GroupAssignment:
        return sticky_assignment(group, cooperative=False)


class CooperativeStickyAssignor:
    name = "cooperative-sticky"
    rebalance_protocols: tuple[RebalanceProtocol, ...] = ("cooperative", "eager")

    def assign(self, group: GroupSpec) -> GroupAssignment:
        return sticky_assignment(group, cooperative=True)
