"""Property tests (hypothesis) for every assignor: validity, balance, stickiness,
cooperative convergence, and robustness to stale or conflicting ownership claims."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgroups.client import assignors
from kgroups.client.assignors import GroupAssignment, GroupSpec, MemberSpec
from tests.unit.assignors.checks import (
    check_balanced,
    check_complete,
    check_no_movement_cycles,
    check_valid,
    converge_cooperatively,
    pairs,
    with_ownership,
)

RACKS = ("a", "b", "c")
EXCLUSIVE = ("range", "roundrobin", "sticky", "cooperative-sticky")
BALANCED = ("sticky", "cooperative-sticky")
SETTINGS = settings(
    max_examples=int(os.environ.get("KGROUPS_PROPERTY_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def groups(draw: st.DrawFn, *, equal: bool | None = None, racks: bool | None = None) -> GroupSpec:
    topics = {f"t{i}": draw(st.integers(1, 12)) for i in range(draw(st.integers(1, 5)))}
    names = sorted(topics)
    n = draw(st.integers(1, 9))
    same = draw(st.booleans()) if equal is None else equal
    use_racks = draw(st.booleans()) if racks is None else racks
    everyone = frozenset(draw(st.sets(st.sampled_from(names), min_size=1)))
    members = {}
    for i in range(n):
        subscribed = (
            everyone if same else frozenset(draw(st.sets(st.sampled_from(names), min_size=1)))
        )
        static = draw(st.booleans())
        members[f"m{i}"] = MemberSpec(
            f"m{i}",
            subscribed,
            instance_id=f"i{n - i}" if static else None,
            rack=draw(st.sampled_from(RACKS)) if use_racks else None,
        )
    partition_racks = {}
    if use_racks:
        for topic, count in topics.items():
            partition_racks[topic] = [
                frozenset(draw(st.sets(st.sampled_from(RACKS), min_size=1, max_size=2)))
                for _ in range(count)
            ]
    return GroupSpec(members, topics, partition_racks)


def mutate(group: GroupSpec, data: st.DataObject) -> GroupSpec:
    """One membership, subscription or metadata change, as triggers a rebalance."""
    members = dict(group.members)
    topics = dict(group.partitions)
    change = data.draw(st.sampled_from(["leave", "join", "resubscribe", "grow", "drop-topic"]))
    if change == "leave" and len(members) > 1:
        del members[data.draw(st.sampled_from(sorted(members)))]
    elif change == "join":
        subscribed = frozenset(data.draw(st.sets(st.sampled_from(sorted(topics)), min_size=1)))
        members["new"] = MemberSpec("new", subscribed)
    elif change == "resubscribe":
        who = data.draw(st.sampled_from(sorted(members)))
        subscribed = frozenset(data.draw(st.sets(st.sampled_from(sorted(topics)), min_size=1)))
        old = members[who]
        members[who] = MemberSpec(
            who, subscribed, old.owned, old.generation, old.instance_id, old.rack
        )
    elif change == "grow":
        topic = data.draw(st.sampled_from(sorted(topics)))
        topics[topic] += data.draw(st.integers(1, 5))
    elif change == "drop-topic" and len(topics) > 1:
        topic = data.draw(st.sampled_from(sorted(topics)))
        del topics[topic]
    racks = {
        t: list(r) + [frozenset({"a"})] * (topics[t] - len(r))
        for t, r in group.partition_racks.items()
        if t in topics
    }
    return GroupSpec(members, topics, racks, group.replicas)


def fresh(group: GroupSpec, result: GroupAssignment, generation: int = 1) -> GroupSpec:
    return with_ownership(group, result, generation)


@SETTINGS
@given(groups(), st.sampled_from(EXCLUSIVE))
def test_every_assignment_is_valid_and_complete(group: GroupSpec, name: str) -> None:
    result = assignors.get(name).assign(group)
    check_valid(group, result)
    check_complete(group, result)


@SETTINGS
@given(groups(), st.sampled_from(BALANCED))
def test_sticky_assignments_are_balanced(group: GroupSpec, name: str) -> None:
    result = assignors.get(name).assign(group)
    check_balanced(group, result)  # nothing owned yet: nothing is withheld either


@SETTINGS
@given(groups(racks=False), st.data())
def test_sticky_reassignment_is_valid_balanced_and_sticky(
    group: GroupSpec, data: st.DataObject
) -> None:
    assignor = assignors.get("sticky")
    before = assignor.assign(group)
    changed = mutate(fresh(group, before), data)
    after = assignor.assign(changed)
    check_valid(changed, after)
    check_complete(changed, after)
    check_balanced(changed, after)
    check_no_movement_cycles(before, after)


@SETTINGS
@given(groups(equal=True, racks=False), st.data())
def test_with_equal_subscriptions_members_keep_their_partitions_up_to_quota(
    group: GroupSpec, data: st.DataObject
) -> None:
    assignor = assignors.get("sticky")
    before = assignor.assign(group)
    changed = mutate(fresh(group, before), data)
    if len({m.topics for m in changed.members.values()}) != 1:
        return
    after = assignor.assign(changed)
    total = sum(
        n for t, n in changed.partitions.items() if t in next(iter(changed.members.values())).topics
    )
    quota = total // len(changed.members)
    for member_id, member in changed.members.items():
        still_valid = {
            (t, p) for t, ps in member.owned.items() for p in ps
            if t in changed.partitions and p < changed.partitions[t] and t in member.topics
        }  # fmt: skip
        kept = still_valid & pairs(after[member_id])
        assert len(kept) >= min(len(still_valid), quota), (member_id, kept, still_valid)


@SETTINGS
@given(groups(), st.data())
def test_cooperative_sticky_converges_in_at_most_four_follow_ups(
    group: GroupSpec, data: st.DataObject
) -> None:
    assignor = assignors.get("cooperative-sticky")
    first, _ = converge_cooperatively(assignor, group, generation=0)
    changed = mutate(fresh(group, first, generation=5), data)
    final, follow_ups = converge_cooperatively(assignor, changed, generation=5)
    assert follow_ups <= 4
    check_valid(changed, final)
    check_complete(changed, final)
    check_balanced(changed, final)


@st.composite
def messy_claims(draw: st.DrawFn) -> GroupSpec:
    """Members claiming random partitions, duplicates included, at random generations:
    zombies, members that missed a rebalance, a leader restarted mid-way."""
    group = draw(groups(racks=False))
    members = {}
    for member_id, m in group.members.items():
        owned: dict[str, tuple[int, ...]] = {}
        for topic in draw(st.sets(st.sampled_from([*sorted(group.partitions), "gone"]))):
            limit = group.partitions.get(topic, 3) + 2
            owned[topic] = tuple(sorted(draw(st.sets(st.integers(0, limit), max_size=6))))
        members[member_id] = MemberSpec(
            member_id, m.topics, owned, draw(st.integers(-1, 3)), m.instance_id, m.rack
        )
    return GroupSpec(members, group.partitions)


@SETTINGS
@given(messy_claims(), st.sampled_from(BALANCED))
def test_stale_and_conflicting_claims_never_break_validity_or_balance(
    group: GroupSpec, name: str
) -> None:
    assignor = assignors.get(name)
    result = assignor.assign(group)
    check_valid(group, result)
    if name == "cooperative-sticky":
        # Partitions changing hands are withheld for a round: balance holds once settled.
        result, _ = converge_cooperatively(assignor, group, generation=10)
    check_complete(group, result)
    check_balanced(group, result)


@SETTINGS
@given(messy_claims())
def test_cooperative_never_gives_away_what_someone_still_owns(group: GroupSpec) -> None:
    """KAFKA-14639: no partition is assigned and revoked in the same round, even when
    claims conflict; claims of the same generation are withheld from everyone."""
    final, follow_ups = converge_cooperatively(
        assignors.get("cooperative-sticky"), group, generation=10
    )
    assert follow_ups <= 4
    check_complete(group, final)


@SETTINGS
@given(groups(racks=False), st.integers(1, 4), st.data())
def test_redundant_gives_each_partition_k_distinct_balanced_owners(
    group: GroupSpec, replicas: int, data: st.DataObject
) -> None:
    group = GroupSpec(group.members, group.partitions, replicas=replicas)
    assignor = assignors.get("redundant")
    result = assignor.assign(group)
    check_valid(group, result, exclusive=False)
    check_balanced(group, result)
    for topic, n in group.partitions.items():
        subscribers = [m for m in group.members.values() if topic in m.topics]
        for p in range(n):
            holders = [m for m, ts in result.items() if p in ts.get(topic, [])]
            assert len(holders) == min(replicas, len(subscribers))
    # Sticky: after a change, everyone keeps what is still valid unless balance needs it.
    changed = mutate(fresh(group, result), data)
    after = assignor.assign(changed)
    check_valid(changed, after, exclusive=False)
    check_balanced(changed, after)
