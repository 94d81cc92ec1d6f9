"""The consumer protocol's server-side assignors, `range` and `uniform` (KIP-848).

What Kafka's give and users rely on: every partition of a subscribed topic to exactly one
of its subscribers, never to a member that does not subscribe to its topic; `range`'s
contiguous, co-partitioned ranges with static members first; `uniform`'s balance (shares
differ by at most one when subscriptions are equal) and stickiness (a member leaving
moves only its partitions).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from kgroups.coordinator.core.server_assignors import (
    AssignmentMember,
    Target,
    range_assignment,
    uniform_assignment,
)

T, U, V = (uuid.UUID(int=n) for n in (1, 2, 3))


def member(mid: str, *topics: uuid.UUID, instance: str | None = None,
           target: Target | None = None) -> AssignmentMember:  # fmt: skip
    return AssignmentMember(mid, frozenset(topics), instance, target or {})


def covers(out: Mapping[str, Target], members: list[AssignmentMember],
           partitions: Mapping[uuid.UUID, int]) -> None:  # fmt: skip
    """Every partition of a topic someone subscribes to, exactly once, to a subscriber."""
    seen = Counter((t, p) for share in out.values() for t, ps in share.items() for p in ps)
    subscribed = {t for m in members for t in m.topics if partitions.get(t, 0) > 0}
    assert set(seen) == {(t, p) for t in subscribed for p in range(partitions[t])}
    assert all(n == 1 for n in seen.values())
    by_id = {m.member_id: m for m in members}
    assert all(t in by_id[mid].topics for mid, share in out.items() for t in share)


def test_range_gives_contiguous_co_partitioned_ranges_static_members_first() -> None:
    members = [member("b", T, U), member("a", T, U), member("z", T, U, instance="i-1")]
    out = range_assignment(members, {T: 7, U: 7})
    assert out["z"] == {T: (0, 1, 2), U: (0, 1, 2)}
    assert out["a"] == {T: (3, 4), U: (3, 4)}
    assert out["b"] == {T: (5, 6), U: (5, 6)}


def test_range_is_recomputed_not_sticky() -> None:
    before = {"a": {T: (2, 3)}, "b": {T: (0, 1)}}
    members = [member("a", T, target=before["a"]), member("b", T, target=before["b"])]
    assert range_assignment(members, {T: 4}) == {"a": {T: (0, 1)}, "b": {T: (2, 3)}}


def test_a_topic_that_does_not_exist_is_ignored() -> None:
    members = [member("a", T, V), member("b", T)]
    for assign in (range_assignment, uniform_assignment):
        out = assign(members, {T: 2})
        covers(out, members, {T: 2})


def test_uniform_with_equal_subscriptions_moves_only_the_leavers_partitions() -> None:
    members = [member(m, T, U) for m in "abcd"]
    first = uniform_assignment(members, {T: 6, U: 5})
    covers(first, members, {T: 6, U: 5})
    assert sorted(sum(map(len, s.values())) for s in first.values()) == [2, 3, 3, 3]
    stayed = [member(m, T, U, target=first[m]) for m in "abd"]
    second = uniform_assignment(stayed, {T: 6, U: 5})
    covers(second, stayed, {T: 6, U: 5})
    for m in "abd":  # each keeps everything it had, and takes some of c's
        assert all(set(first[m][t]) <= set(second[m].get(t, ())) for t in first[m]), m
    assert sorted(sum(map(len, s.values())) for s in second.values()) == [3, 4, 4]


def test_uniform_keeps_an_extra_partition_where_it_is() -> None:
    """Any member may hold one of the `total % members` extra partitions: a balanced
    assignment is left as it is (KAFKA-18688)."""
    target = {"a": {T: (0, 1)}, "b": {T: (2, 3, 4)}}
    members = [member("a", T, target=target["a"]), member("b", T, target=target["b"])]
    assert uniform_assignment(members, {T: 5}) == target


def test_uniform_moves_partitions_between_the_members_whose_heartbeats_come_first() -> None:
    """Among members equal in load, the one heard from longest ago (whose next heartbeat
    is due soonest) gives up the partition a joiner needs, and gets a leaver's."""
    import dataclasses

    heard = {"a": 300, "b": 100, "c": 400, "d": 200}  # b was heard from first
    settled = {m: {T: (2 * k, 2 * k + 1)} for k, m in enumerate("abcd")}
    members = [dataclasses.replace(member(m, T, target=settled[m]), heard_ms=heard[m])
               for m in "abcd"]  # fmt: skip
    joined = uniform_assignment([*members, member("e", T)], {T: 8})
    assert joined["e"] == {T: (3,)} and joined["b"] == {T: (2,)}  # b gives one up
    assert all(joined[m] == settled[m] for m in "acd")
    left = uniform_assignment([m for m in members if m.member_id != "c"], {T: 8})
    assert sorted(left["b"][T]) == [2, 3, 4] and sorted(left["d"][T]) == [5, 6, 7]  # first heard
    assert left["a"] == settled["a"]


def test_uniform_with_different_subscriptions_balances_first() -> None:
    members = [member("a", T), member("b", T, U), member("c", U)]
    out = uniform_assignment(members, {T: 4, U: 4})
    covers(out, members, {T: 4, U: 4})
    loads = sorted(sum(map(len, s.values())) for s in out.values())
    assert loads[-1] - loads[0] <= 1, out


subscriptions = st.lists(st.sets(st.sampled_from([T, U, V]), min_size=1), min_size=1,
                         max_size=6)  # fmt: skip
counts = st.fixed_dictionaries({T: st.integers(0, 12), U: st.integers(0, 12), V: st.integers(0, 3)})


@settings(max_examples=300, deadline=None)
@given(subscriptions, counts, st.integers(0, 5))
def test_every_partition_once_to_a_subscriber_and_a_leaver_moves_only_its_own(
    subs: list[set[uuid.UUID]], partitions: dict[uuid.UUID, int], leaver: int
) -> None:
    members = [member(f"m{i}", *topics) for i, topics in enumerate(subs)]
    for assign in (range_assignment, uniform_assignment):
        covers(assign(members, partitions), members, partitions)
    first = uniform_assignment(members, partitions)
    if all(m.topics == members[0].topics for m in members):
        loads = [sum(map(len, s.values())) for s in first.values()]
        assert max(loads) - min(loads) <= 1
    if len(members) < 2:
        return
    gone = members[leaver % len(members)].member_id
    stayed = [member(m.member_id, *m.topics, target=first[m.member_id])
              for m in members if m.member_id != gone]  # fmt: skip
    second = uniform_assignment(stayed, partitions)
    covers(second, stayed, partitions)
    if all(m.topics == members[0].topics for m in members):
        for m in stayed:  # equal subscriptions: nobody loses a partition to the leaving
            mine, now = first[m.member_id], second[m.member_id]
            assert all(set(mine[t]) <= set(now.get(t, ())) for t in mine), (m.member_id, mine, now)
