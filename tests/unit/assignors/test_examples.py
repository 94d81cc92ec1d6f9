"""Worked examples: KIP-54's (seed 001) and Kafka's Java assignor tests (reference §5.1).

Range and roundrobin are deterministic in Java, so their expectations are exact. For
the sticky family the KIP states what must hold (balance, how many assignments survive)
rather than one layout, so those tests assert exactly that.
"""

from __future__ import annotations

import pytest

from kgroups.client import assignors
from kgroups.client.assignors.spec import GroupAssignment, GroupSpec, MemberSpec
from tests.unit.assignors.checks import check_balanced, check_complete, check_valid


def group(
    subs: dict[str, list[str]],
    partitions: dict[str, int],
    *,
    owned: GroupAssignment | None = None,
    instance: dict[str, str] | None = None,
) -> GroupSpec:
    members = {
        m: MemberSpec(
            m,
            frozenset(topics),
            {t: tuple(ps) for t, ps in (owned or {}).get(m, {}).items()},
            1 if owned else -1,
            (instance or {}).get(m),
        )
        for m, topics in subs.items()
    }
    return GroupSpec(members, partitions)


def pairs(result: GroupAssignment, member: str) -> list[str]:
    return sorted(f"{t}p{p}" for t, ps in result[member].items() for p in ps)


def preserved(before: GroupAssignment, after: GroupAssignment) -> int:
    return sum(
        len(set(ps) & set(after.get(m, {}).get(t, [])))
        for m, topics in before.items()
        for t, ps in topics.items()
    )


ALL4 = ["t0", "t1", "t2", "t3"]


# -- KIP-54 example 1: 3 consumers, 4 topics x 2 partitions, C1 leaves ------------------------


def test_kip54_example_1_roundrobin_exact() -> None:
    subs = {"C0": ALL4, "C1": ALL4, "C2": ALL4}
    parts = dict.fromkeys(ALL4, 2)
    rr = assignors.get("roundrobin").assign(group(subs, parts))
    assert pairs(rr, "C0") == ["t0p0", "t1p1", "t3p0"]
    assert pairs(rr, "C1") == ["t0p1", "t2p0", "t3p1"]
    assert pairs(rr, "C2") == ["t1p0", "t2p1"]
    after = assignors.get("roundrobin").assign(group({"C0": ALL4, "C2": ALL4}, parts))
    assert pairs(after, "C0") == ["t0p0", "t1p0", "t2p0", "t3p0"]
    assert preserved(rr, after) == 3


@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky"])
def test_kip54_example_1_sticky_preserves_five(name: str) -> None:
    parts = dict.fromkeys(ALL4, 2)
    before = {
        "C0": {"t0": [0], "t1": [1], "t3": [0]},
        "C1": {"t0": [1], "t2": [0], "t3": [1]},
        "C2": {"t1": [0], "t2": [1]},
    }
    fresh = assignors.get("sticky").assign(group({"C0": ALL4, "C1": ALL4, "C2": ALL4}, parts))
    assert sorted(len(pairs(fresh, m)) for m in fresh) == [2, 3, 3]
    survivors = {m: a for m, a in before.items() if m != "C1"}
    spec = group({"C0": ALL4, "C2": ALL4}, parts, owned=survivors)
    after = assignors.get(name).assign(spec)
    assert preserved(survivors, after) == 5  # everything C0 and C2 had
    if name == "sticky":
        check_complete(spec, after)
        assert sorted(len(pairs(after, m)) for m in after) == [4, 4]


# -- KIP-54 example 2: unequal subscriptions, C0 leaves --------------------------------------


def test_kip54_example_2() -> None:
    subs = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    parts = {"t0": 1, "t1": 2, "t2": 3}
    rr = assignors.get("roundrobin").assign(group(subs, parts))
    assert (pairs(rr, "C0"), pairs(rr, "C1")) == (["t0p0"], ["t1p0"])
    assert pairs(rr, "C2") == ["t1p1", "t2p0", "t2p1", "t2p2"]
    sticky = assignors.get("sticky").assign(group(subs, parts))
    assert pairs(sticky, "C0") == ["t0p0"]
    assert pairs(sticky, "C1") == ["t1p0", "t1p1"]
    assert pairs(sticky, "C2") == ["t2p0", "t2p1", "t2p2"]

    rest = {"C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    rr_after = assignors.get("roundrobin").assign(group(rest, parts))
    assert pairs(rr_after, "C1") == ["t0p0", "t1p1"]
    assert preserved(rr, rr_after) == 3
    owned = {m: a for m, a in sticky.items() if m != "C0"}
    after = assignors.get("sticky").assign(group(rest, parts, owned=owned))
    assert pairs(after, "C1") == ["t0p0", "t1p0", "t1p1"]
    assert pairs(after, "C2") == ["t2p0", "t2p1", "t2p2"]
    assert preserved(owned, after) == 5


# -- KIP-54 example 3: a third consumer joins ----------------------------------------------------


def test_kip54_example_3() -> None:
    subs = {"C0": ["t0", "t1"], "C1": ["t0", "t1"]}
    parts = {"t0": 2, "t1": 2}
    for name in ("range", "roundrobin", "sticky"):
        fresh = assignors.get(name).assign(group(subs, parts))
        assert (pairs(fresh, "C0"), pairs(fresh, "C1")) == (["t0p0", "t1p0"], ["t0p1", "t1p1"])
    three = {**subs, "C2": ["t0", "t1"]}
    rng = assignors.get("range").assign(group(three, parts))
    assert pairs(rng, "C2") == []  # range is not fair here
    rr = assignors.get("roundrobin").assign(group(three, parts))
    assert pairs(rr, "C0") == ["t0p0", "t1p1"]
    before = {"C0": {"t0": [0], "t1": [0]}, "C1": {"t0": [1], "t1": [1]}}
    spec = group(three, parts, owned=before)
    sticky = assignors.get("sticky").assign(spec)
    assert preserved(before, sticky) == 3 and len(pairs(sticky, "C2")) == 1
    check_balanced(spec, sticky)


# -- Java: RangeAssignorTest and RoundRobinAssignorTest -------------------------------------------


@pytest.mark.parametrize("name", ["range", "roundrobin", "sticky", "cooperative-sticky"])
def test_one_consumer_no_topic_and_nonexistent_topic(name: str) -> None:
    assert assignors.get(name).assign(group({"c": []}, {})) == {"c": {}}
    assert assignors.get(name).assign(group({"c": ["missing"]}, {})) == {"c": {}}


@pytest.mark.parametrize("name", ["range", "roundrobin", "sticky", "cooperative-sticky"])
def test_only_assigns_partitions_from_subscribed_topics(name: str) -> None:
    result = assignors.get(name).assign(group({"c": ["topic"]}, {"topic": 3, "other": 3}))
    assert result == {"c": {"topic": [0, 1, 2]}}


@pytest.mark.parametrize("name", ["range", "roundrobin", "sticky", "cooperative-sticky"])
def test_two_consumers_one_topic_one_partition(name: str) -> None:
    result = assignors.get(name).assign(group({"c1": ["t"], "c2": ["t"]}, {"t": 1}))
    assert sorted(len(pairs(result, m)) for m in result) == [0, 1]


def test_range_multiple_consumers_mixed_topics() -> None:
    subs = {"consumer1": ["topic1"], "consumer2": ["topic1", "topic2"], "consumer3": ["topic1"]}
    result = assignors.get("range").assign(group(subs, {"topic1": 3, "topic2": 2}))
    assert result == {
        "consumer1": {"topic1": [0]},
        "consumer2": {"topic1": [1], "topic2": [0, 1]},
        "consumer3": {"topic1": [2]},
    }


def test_range_two_consumers_two_topics_six_partitions() -> None:
    subs = {"consumer1": ["topic1", "topic2"], "consumer2": ["topic1", "topic2"]}
    result = assignors.get("range").assign(group(subs, {"topic1": 3, "topic2": 3}))
    assert result == {
        "consumer1": {"topic1": [0, 1], "topic2": [0, 1]},
        "consumer2": {"topic1": [2], "topic2": [2]},
    }


def test_roundrobin_multiple_consumers_mixed_topics() -> None:
    subs = {"consumer1": ["topic1"], "consumer2": ["topic1", "topic2"], "consumer3": ["topic1"]}
    result = assignors.get("roundrobin").assign(group(subs, {"topic1": 3, "topic2": 2}))
    assert result == {
        "consumer1": {"topic1": [0]},
        "consumer2": {"topic1": [1], "topic2": [0, 1]},
        "consumer3": {"topic1": [2]},
    }


def test_roundrobin_two_consumers_two_topics_six_partitions() -> None:
    subs = {"consumer1": ["topic1", "topic2"], "consumer2": ["topic1", "topic2"]}
    result = assignors.get("roundrobin").assign(group(subs, {"topic1": 3, "topic2": 3}))
    assert result == {
        "consumer1": {"topic1": [0, 2], "topic2": [1]},
        "consumer2": {"topic1": [1], "topic2": [0, 2]},
    }


@pytest.mark.parametrize("name", ["range", "roundrobin"])
def test_two_static_consumers_are_ordered_by_instance_id(name: str) -> None:
    """testTwoStaticConsumersTwoTopicsSixPartitions: instance ids, not member ids, decide."""
    subs = {"zzz": ["topic1", "topic2"], "aaa": ["topic1", "topic2"]}
    static = group(
        subs, {"topic1": 3, "topic2": 3}, instance={"zzz": "a-instance", "aaa": "b-instance"}
    )
    result = assignors.get(name).assign(static)
    dynamic = assignors.get(name).assign(
        group({"x": subs["zzz"], "y": subs["aaa"]}, {"topic1": 3, "topic2": 3})
    )
    assert result["zzz"] == dynamic["x"] and result["aaa"] == dynamic["y"]


def test_roundrobin_with_unequal_subscriptions_does_not_crash() -> None:
    """kafka-python 3.0.12 raises here; Java assigns each topic among its subscribers."""
    subs = {"a": ["t1"], "b": ["t1", "t2"], "c": ["t2", "t3"]}
    spec = group(subs, {"t1": 2, "t2": 3, "t3": 1})
    result = assignors.get("roundrobin").assign(spec)
    check_valid(spec, result)
    check_complete(spec, result)


# -- Java: AbstractStickyAssignorTest, the properties it asserts -----------------------------------


@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky"])
def test_add_remove_consumer_one_topic(name: str) -> None:
    parts = {"t": 3}
    first = assignors.get(name).assign(group({"c1": ["t"]}, parts))
    assert first == {"c1": {"t": [0, 1, 2]}}
    spec = group({"c1": ["t"], "c2": ["t"]}, parts, owned=first)
    second = assignors.get(name).assign(spec)
    assert set(second["c1"]["t"]) < {0, 1, 2} and len(second["c1"]["t"]) == 2
    if name == "sticky":
        assert len(second["c2"]["t"]) == 1
    else:
        assert second["c2"] == {}  # the partition changing hands waits one round
    third = assignors.get(name).assign(group({"c2": ["t"]}, parts, owned={"c2": second["c2"]}))
    assert third == {"c2": {"t": [0, 1, 2]}}


@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky"])
def test_same_subscriptions_and_owned_partitions_move_nothing(name: str) -> None:
    """testReassignmentAfterOneConsumerLeaves / isSticky: a balanced owned assignment is
    returned unchanged."""
    subs = {f"c{i}": ["a", "b"] for i in range(4)}
    parts = {"a": 5, "b": 7}
    fresh = assignors.get(name).assign(group(subs, parts))
    again = assignors.get(name).assign(group(subs, parts, owned=fresh))
    assert again == fresh


def test_all_consumers_have_owned_partition_invalidated_when_claimed_by_multiple() -> None:
    """testAllConsumersHaveOwnedPartitionInvalidatedWhenClaimedByMultipleConsumersInSameGeneration:
    eager gives the doubly claimed partition to someone; cooperative withholds it."""
    owned = {"c1": {"t": [0, 1]}, "c2": {"t": [0, 2]}, "c3": {"t": []}}
    spec = group({"c1": ["t"], "c2": ["t"], "c3": ["t"]}, {"t": 3}, owned=owned)
    eager = assignors.get("sticky").assign(spec)
    assert eager == {"c1": {"t": [1]}, "c2": {"t": [2]}, "c3": {"t": [0]}}
    coop = assignors.get("cooperative-sticky").assign(spec)
    assert coop == {"c1": {"t": [1]}, "c2": {"t": [2]}, "c3": {}}


# -- KIP-881 rack awareness -----------------------------------------------------------------------


def rack_group() -> GroupSpec:
    """Consumers on racks a and b; partitions 0 and 2 only on b, 1 and 3 only on a, so
    the rack-blind answer (range: c1 gets 0-1) would read across racks."""
    racks = [frozenset({"b"}), frozenset({"a"}), frozenset({"b"}), frozenset({"a"})]
    members = {
        "c1": MemberSpec("c1", frozenset({"t"}), rack="a"),
        "c2": MemberSpec("c2", frozenset({"t"}), rack="b"),
    }
    return GroupSpec(members, {"t": 4}, {"t": racks})


@pytest.mark.parametrize("name", ["range", "sticky", "cooperative-sticky", "roundrobin"])
def test_rack_aware_assignment_reads_from_the_local_rack(name: str) -> None:
    result = assignors.get(name).assign(rack_group())
    if name == "roundrobin":  # Kafka's roundrobin is not rack-aware
        assert result == {"c1": {"t": [0, 2]}, "c2": {"t": [1, 3]}}
    else:
        assert result == {"c1": {"t": [1, 3]}, "c2": {"t": [0, 2]}}


def test_rack_awareness_is_off_when_every_partition_is_on_every_rack() -> None:
    """Kafka's gate: nothing to gain, so the rack-blind (and cheaper) answer is given."""
    spec = rack_group()
    everywhere = GroupSpec(spec.members, spec.partitions, {"t": [frozenset({"a", "b"})] * 4})
    assert assignors.get("range").assign(everywhere) == {"c1": {"t": [0, 1]}, "c2": {"t": [2, 3]}}


def test_redundant_spreads_copies_over_racks() -> None:
    members = {f"m{i}": MemberSpec(f"m{i}", frozenset({"t"}), rack="ab"[i % 2]) for i in range(4)}
    spec = GroupSpec(members, {"t": 4}, {}, replicas=2)
    result = assignors.get("redundant").assign(spec)
    for p in range(4):
        owners = [m for m, topics in result.items() if p in topics.get("t", [])]
        assert len(owners) == 2 and {members[m].rack for m in owners} == {"a", "b"}


# -- Java: generations and conflicting claims (KIP-792) --------------------------------------------


def claims(owned: dict[str, tuple[int, list[int]]], partitions: int = 3) -> GroupSpec:
    """members -> (generation, owned partitions of topic t)."""
    members = {
        m: MemberSpec(m, frozenset({"t"}), {"t": tuple(ps)} if ps else {}, generation)
        for m, (generation, ps) in owned.items()
    }
    return GroupSpec(members, {"t": partitions})


@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky"])
@pytest.mark.parametrize("stale", [1, -1], ids=["stale-generation", "no-generation"])
def test_owned_partitions_are_invalidated_for_consumer_with_stale_generation(
    name: str, stale: int
) -> None:
    spec = claims({"c1": (2, [0, 1]), "c2": (stale, [0, 1, 2])})
    result = assignors.get(name).assign(spec)
    assert result == {"c1": {"t": [0, 1]}, "c2": {"t": [2]}}


@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky"])
def test_ensure_partitions_assigned_to_highest_generation(name: str) -> None:
    spec = claims({"c1": (3, [0, 1]), "c2": (2, [0, 1, 2, 3]), "c3": (1, [2, 3, 4, 5])}, 6)
    result = assignors.get(name).assign(spec)
    assert result["c1"] == {"t": [0, 1]}
    assert set(result["c2"]["t"]) <= {2, 3} and len(result["c2"]["t"]) == 2
    assert set(result["c3"]["t"]) <= {4, 5} and len(result["c3"]["t"]) == 2


@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky"])
def test_no_reassignment_on_current_members(name: str) -> None:
    """Current members keep everything; a newcomer with stale claims takes nothing away
    beyond what balance requires."""
    spec = claims({"c1": (5, [0, 1]), "c2": (5, [2, 3]), "c3": (5, [4, 5]), "new": (-1, [0, 2])}, 6)
    result = assignors.get(name).assign(spec)
    for m, kept in (("c1", {0, 1}), ("c2", {2, 3}), ("c3", {4, 5})):
        assert set(result[m].get("t", [])) <= kept
    moved = sum(
        len(kept - set(result[m].get("t", [])))
        for m, kept in (("c1", {0, 1}), ("c2", {2, 3}), ("c3", {4, 5}))
    )
    assert moved == 1  # 6 partitions over 4 members: exactly one changes hands


@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky"])
def test_assignment_updated_for_deleted_topic(name: str) -> None:
    owned = {"c": {"t": (0,), "gone": (0, 1)}}
    members = {"c": MemberSpec("c", frozenset({"t", "gone"}), owned["c"], 1)}
    result = assignors.get(name).assign(GroupSpec(members, {"t": 2}))
    assert result == {"c": {"t": [0, 1]}}
    only_gone = {"c": MemberSpec("c", frozenset({"gone"}), {"gone": (0,)}, 1)}
    assert assignors.get(name).assign(GroupSpec(only_gone, {})) == {"c": {}}


@pytest.mark.parametrize("name", ["range", "roundrobin"])
def test_static_member_assignment_persistent_after_member_id_changes(name: str) -> None:
    def spec(ids: dict[str, str]) -> GroupSpec:
        members = {
            member_id: MemberSpec(member_id, frozenset({"t1", "t2"}), instance_id=instance)
            for instance, member_id in ids.items()
        }
        return GroupSpec(members, {"t1": 5, "t2": 5})

    before = assignors.get(name).assign(spec({"i1": "m-z", "i2": "m-a", "i3": "m-k"}))
    after = assignors.get(name).assign(spec({"i1": "new-b", "i2": "new-y", "i3": "new-c"}))
    assert before["m-z"] == after["new-b"]
    assert before["m-a"] == after["new-y"]
    assert before["m-k"] == after["new-c"]


def test_member_info_sorting_static_first_by_instance_id_then_dynamic() -> None:
    from kgroups.client.assignors.spec import member_order_key

    members = [
        MemberSpec("a", frozenset()),
        MemberSpec("z", frozenset(), instance_id="i2"),
        MemberSpec("b", frozenset(), instance_id="i1"),
        MemberSpec("c", frozenset()),
    ]
    assert [m.member_id for m in sorted(members, key=member_order_key)] == ["b", "z", "a", "c"]
