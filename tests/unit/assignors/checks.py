"""The properties every assignor is held to, as reusable checks.

They mirror Kafka's `verifyValidityAndBalance`, `isFullyBalanced` and `isSticky`
(AbstractStickyAssignorTest) and CooperativeStickyAssignorTest's convergence loop.
"""

from __future__ import annotations

from collections.abc import Mapping

from kgroups.client.assignors import Assignor, GroupAssignment, GroupSpec, MemberSpec

Pair = tuple[str, int]


def pairs(assignment: Mapping[str, list[int]]) -> set[Pair]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def check_valid(group: GroupSpec, result: GroupAssignment, *, exclusive: bool = True) -> None:
    """Every member answered; only subscribed, existing partitions; none twice."""
    assert set(result) == set(group.members), (set(result), set(group.members))
    seen: dict[Pair, str] = {}
    for member_id, topics in result.items():
        member = group.members[member_id]
        for topic, partitions in topics.items():
            assert topic in member.topics, f"{member_id} got {topic} it does not subscribe to"
            assert partitions == sorted(partitions), "partitions must come out sorted"
            assert len(set(partitions)) == len(partitions), f"{member_id} got a partition twice"
            for p in partitions:
                assert 0 <= p < group.partitions[topic], f"{topic}-{p} does not exist"
                if exclusive:
                    other = seen.setdefault((topic, p), member_id)
                    assert other == member_id, f"{topic}-{p} assigned to {other} and {member_id}"


def check_complete(group: GroupSpec, result: GroupAssignment) -> None:
    """Every partition of a topic someone subscribes to is assigned."""
    wanted = {
        (t, p)
        for t, n in group.partitions.items()
        if any(t in m.topics for m in group.members.values())
        for p in range(n)
    }
    got = {pair for topics in result.values() for pair in pairs(topics)}
    assert got == wanted, f"unassigned: {sorted(wanted - got)[:10]}"


def check_balanced(group: GroupSpec, result: GroupAssignment) -> None:
    """KIP-54: counts within one of each other, or no partition can move from a member
    with two or more extra to a member that could take it (and, with replicas, does not
    hold it already)."""
    counts = {m: sum(len(ps) for ps in topics.values()) for m, topics in result.items()}
    if not counts or max(counts.values()) - min(counts.values()) <= 1:
        return
    for light, light_count in counts.items():
        topics = group.members[light].topics
        for heavy, heavy_count in counts.items():
            if heavy_count >= light_count + 2:
                held = pairs(result[light])
                movable = [t for t, p in pairs(result[heavy]) if t in topics and (t, p) not in held]
                assert not movable, (
                    f"unbalanced: {heavy} has {heavy_count}, {light} has {light_count} and "
                    f"could take {heavy}'s {movable[0]} partitions"
                )


def check_no_movement_cycles(before: GroupAssignment, after: GroupAssignment) -> None:
    """Kafka's isSticky: no topic has partitions moving both a->b and b->a."""
    owner_before = {pair: m for m, topics in before.items() for pair in pairs(topics)}
    moves: set[tuple[str, str, str]] = set()
    for member, topics in after.items():
        for topic, p in pairs(topics):
            previous = owner_before.get((topic, p))
            if previous is not None and previous != member and previous in after:
                moves.add((previous, member, topic))
    for a, b, topic in moves:
        assert (b, a, topic) not in moves, f"{topic} partitions moved both {a}->{b} and {b}->{a}"


def with_ownership(group: GroupSpec, result: GroupAssignment, generation: int) -> GroupSpec:
    """The same group one round later: everyone owns what it was given."""
    members = {
        m.member_id: MemberSpec(
            m.member_id,
            m.topics,
            owned={t: tuple(ps) for t, ps in result.get(m.member_id, {}).items()},
            generation=generation,
            instance_id=m.instance_id,
            rack=m.rack,
        )
        for m in group.members.values()
    }
    return GroupSpec(members, group.partitions, group.partition_racks, group.replicas)


def converge_cooperatively(
    assignor: Assignor, group: GroupSpec, generation: int, *, max_rounds: int = 4
) -> tuple[GroupAssignment, int]:
    """Re-run the assignor with owned := assigned until a round revokes nothing (KIP-429).

    Every round, no partition may be given to one member while another member still owns
    it (assigned and revoked in the same round). Returns the final assignment and the
    number of follow-up rounds it took (Kafka's test allows at most four).
    """
    result = assignor.assign(group)
    for follow_ups in range(max_rounds + 1):
        claims: dict[Pair, set[str]] = {}
        for m in group.members.values():
            for t, ps in m.owned.items():
                for p in ps:
                    if p < group.partitions.get(t, 0):
                        claims.setdefault((t, p), set()).add(m.member_id)
        for member, topics in result.items():
            for pair in pairs(topics):
                others = claims.get(pair, set()) - {member}
                if member not in claims.get(pair, ()):
                    assert not others, f"{pair} added to {member} while {others} still own it"
        revoked = any(
            pair not in pairs(result[owner]) for pair, who in claims.items() for owner in who
        )
        withheld = {(t, p) for t, n in group.partitions.items() for p in range(n)} - {
            pair for topics in result.values() for pair in pairs(topics)
        }
        subscribed = {t for m in group.members.values() for t in m.topics}
        if not revoked and not {pair for pair in withheld if pair[0] in subscribed}:
            return result, follow_ups
        generation += 1
        group = with_ownership(group, result, generation)
        result = assignor.assign(group)
    raise AssertionError(f"no cooperative convergence within {max_rounds} follow-up rounds")
