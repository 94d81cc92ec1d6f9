"""Static membership (KIP-345) and its field fixes: KAFKA-8500, 8220, 9801, 13435, 14009."""

from __future__ import annotations

from kgroups.coordinator.core import GroupState
from kgroups.coordinator.core.context import heartbeat_key
from kgroups.protocol.errors import ErrorCode
from tests.core_context import CoreContext

E = ErrorCode


def static_group(ctx: CoreContext, *instances: str, **kw: object) -> tuple[list[str], int]:
    """Static members to Stable; returns (member ids in instance order, generation)."""
    refs = [ctx.join("g", instance_id=i, **kw) for i in instances]  # type: ignore[arg-type]
    ctx.sleep(0)
    responses = [ctx.reply(r) for r in refs]
    ids = [r.member_id for r in responses]
    generation = responses[0].generation_id
    leader = responses[0].leader
    assignments = {m: f"a-{m}".encode() for m in ids}
    for m, i in zip(ids, instances, strict=True):
        ctx.sync("g", m, generation, assignments if m == leader else None, instance_id=i)
    assert ctx.group().state is GroupState.STABLE
    return ids, generation


def test_static_member_joins_without_member_id_required() -> None:
    ctx = CoreContext()
    ref = ctx.join("g", instance_id="i1")
    ctx.sleep(0)
    response = ctx.reply(ref)
    assert response.error is E.none
    assert response.member_id.startswith("i1-")
    assert ctx.group().static_members == {"i1": response.member_id}


def test_static_follower_rejoin_in_stable_keeps_generation_and_assignment() -> None:
    ctx = CoreContext()
    (leader, follower), generation = static_group(ctx, "i1", "i2")
    response = ctx.reply(ctx.join("g", instance_id="i2"))
    assert response.error is E.none
    assert response.generation_id == generation
    assert response.member_id not in (leader, follower)
    assert response.leader == leader
    assert not response.skip_assignment
    assert ctx.group().state is GroupState.STABLE
    new = ctx.group().members[response.member_id]
    assert new.assignment == f"a-{follower}".encode()
    sync = ctx.reply(ctx.sync("g", response.member_id, generation, instance_id="i2"))
    assert sync.assignment == f"a-{follower}".encode()
    # The replacement is durable: a restart still knows the new id, not the old one.
    ctx.restart()
    assert ctx.group().static_members["i2"] == response.member_id


def test_static_leader_rejoin_v9_skips_assignment() -> None:
    """KIP-814/KAFKA-13435: a returning static leader must not recompute the assignment."""
    ctx = CoreContext()
    (leader, follower), generation = static_group(ctx, "i1", "i2")
    response = ctx.reply(ctx.join("g", instance_id="i1", version=9))
    assert response.skip_assignment
    assert response.leader == response.member_id != leader
    assert {m.member_id for m in response.members} == {response.member_id, follower}
    assert response.generation_id == generation


def test_static_leader_rejoin_before_v9_is_told_the_old_leader() -> None:
    ctx = CoreContext()
    (leader, _), _ = static_group(ctx, "i1", "i2")
    response = ctx.reply(ctx.join("g", instance_id="i1", version=7))
    assert response.leader == leader != response.member_id
    assert response.members == ()
    assert not response.skip_assignment


def test_static_rejoin_fences_the_old_member_id() -> None:
    """KAFKA-8500: requests still parked under the old id are answered FENCED_INSTANCE_ID."""
    ctx = CoreContext()
    (leader, follower), generation = static_group(ctx, "i1", "i2")
    parked = ctx.join("g", follower, instance_id="i2", topics=("t", "u"))
    assert ctx.parked(parked)
    ctx.join("g", instance_id="i2")
    assert ctx.reply(parked).error is E.fenced_instance_id
    assert ctx.heartbeat("g", follower, generation, "i2") is E.fenced_instance_id
    assert ctx.timer(heartbeat_key("g", follower)) is None


def test_static_rejoin_during_completing_rebalance_triggers_a_rebalance() -> None:
    """KAFKA-9801: otherwise the leader's assignment for the old id would be lost."""
    ctx = CoreContext()
    refs = [ctx.join("g", instance_id=i) for i in ("i1", "i2")]
    ctx.sleep(0)
    follower = ctx.reply(refs[1]).member_id
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE
    follower_sync = ctx.sync("g", follower, 1, instance_id="i2")
    assert ctx.parked(follower_sync)
    again = ctx.join("g", instance_id="i2")
    assert ctx.reply(follower_sync).error is E.fenced_instance_id
    assert ctx.group().state is GroupState.PREPARING_REBALANCE
    assert ctx.parked(again)


def test_static_rejoin_with_a_protocol_change_triggers_a_rebalance() -> None:
    ctx = CoreContext()
    static_group(ctx, "i1", protocol_names=("range", "roundrobin"))
    response = ctx.reply(ctx.join("g", instance_id="i1", protocol_names=("roundrobin",)))
    # The only member rejoined, so the new join phase completes at once.
    assert response.protocol_name == "roundrobin"
    assert response.generation_id == 2
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE


def test_static_rejoin_updates_session_and_rebalance_timeouts() -> None:
    """KAFKA-14009."""
    ctx = CoreContext()
    static_group(ctx, "i1", session_ms=10_000, rebalance_ms=20_000)
    response = ctx.reply(ctx.join("g", instance_id="i1", session_ms=25_000, rebalance_ms=50_000))
    member = ctx.group().members[response.member_id]
    assert (member.session_timeout_ms, member.rebalance_timeout_ms) == (25_000, 50_000)
    assert ctx.group().rebalance_timeout_ms() == 50_000
    assert ctx.heartbeat("g", response.member_id, 1, "i1") is E.none
    ctx.assert_timer(heartbeat_key("g", response.member_id), ctx.now_ms + 25_000)


def test_static_member_that_does_not_rejoin_is_kept_until_its_session_expires() -> None:
    """KAFKA-8220: the rebalance timeout removes dynamic laggards, never static ones."""
    ctx = CoreContext()
    (leader, follower), generation = static_group(
        ctx, "i1", "i2", session_ms=30_000, rebalance_ms=10_000
    )
    ref = ctx.join("g", leader, instance_id="i1", session_ms=30_000, rebalance_ms=10_000)
    ctx.sleep(10_000)
    response = ctx.reply(ref)
    assert response.generation_id == generation + 1
    assert {m.member_id for m in response.members} == {leader, follower}
    ctx.sync("g", leader, generation + 1, {leader: b"x", follower: b"y"}, instance_id="i1")
    assert ctx.group().state is GroupState.STABLE
    ctx.sleep(9_999)
    assert follower in ctx.group().members
    # It never synced this generation either: the pending-sync timer removes it.
    ctx.sleep(1)
    assert follower not in ctx.group().members
    assert ctx.group().state is GroupState.PREPARING_REBALANCE


def test_join_phase_is_extended_when_no_member_rejoined() -> None:
    """testCompleteJoinPhaseNoMembersRejoinedExtendsJoinPhase."""
    ctx = CoreContext()
    (a, b), generation = static_group(ctx, "i1", "i2", session_ms=60_000, rebalance_ms=10_000)
    ctx.leave("g", ("", "i1"))  # admin removal of i1 starts a rebalance; i2 never rejoins
    assert ctx.group().state is GroupState.PREPARING_REBALANCE
    ctx.sleep(10_000)
    assert ctx.group().state is GroupState.PREPARING_REBALANCE
    assert ctx.group().generation_id == generation
    ctx.sleep(50_000)  # i2's session expires: the group empties
    assert ctx.group().state is GroupState.EMPTY
    assert ctx.group().generation_id == generation + 1


def test_admin_removes_a_static_member_by_instance_id() -> None:
    ctx = CoreContext()
    (m1, m2), _ = static_group(ctx, "i1", "i2")
    response = ctx.leave("g", ("", "i1"), ("", "nobody"))
    assert [(r.group_instance_id, r.error) for r in response.members] == [
        ("i1", E.none),
        ("nobody", E.unknown_member_id),
    ]
    assert set(ctx.group().members) == {m2}
    assert ctx.group().state is GroupState.PREPARING_REBALANCE


def test_instance_id_mapped_to_another_member_is_fenced_everywhere() -> None:
    ctx = CoreContext()
    (m1, _), generation = static_group(ctx, "i1", "i2")
    assert ctx.heartbeat("g", "impostor", generation, "i1") is E.fenced_instance_id
    sync = ctx.reply(ctx.sync("g", "impostor", generation, instance_id="i1"))
    assert sync.error is E.fenced_instance_id
    commit = ctx.commit(
        "g", {("t", 0): 1}, member_id="impostor", generation=generation, instance_id="i1"
    )
    assert set(commit.values()) == {E.unknown_topic_or_partition}  # no such topic here
    ctx.create_topic("t", 1)
    commit = ctx.commit(
        "g", {("t", 0): 1}, member_id="impostor", generation=generation, instance_id="i1"
    )
    assert set(commit.values()) == {E.fenced_instance_id}
    leave = ctx.leave("g", ("impostor", "i1"))
    assert leave.members[0].error is E.fenced_instance_id
    assert ctx.heartbeat("g", m1, generation, "unknown-instance") is E.unknown_member_id
