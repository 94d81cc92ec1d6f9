"""JoinGroup, named after the Kafka behaviours (GroupMetadataManagerTest) they mirror."""

from __future__ import annotations

import pytest

from kgroups.coordinator.core import CoordinatorConfig, GroupState
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core.context import heartbeat_key, join_key
from kgroups.protocol.errors import ErrorCode
from tests.core_context import CoreContext, subscription

E = ErrorCode


def delayed(delay_ms: int = 3000, **kw: int) -> CoreContext:
    return CoreContext(CoordinatorConfig(group_initial_rebalance_delay_ms=delay_ms, **kw))  # type: ignore[arg-type]


def test_join_group_with_empty_group_id_is_invalid() -> None:
    ctx = CoreContext()
    assert ctx.reply(ctx.join("")).error is E.invalid_group_id


@pytest.mark.parametrize("session_ms", [5999, 1_800_001])
def test_join_group_session_timeout_outside_bounds_is_invalid(session_ms: int) -> None:
    ctx = CoreContext()
    response = ctx.reply(ctx.join("g", "m-1", session_ms=session_ms))
    assert response.error is E.invalid_session_timeout
    assert response.member_id == "m-1"
    assert "g" not in ctx.coordinator.groups


def test_join_with_member_id_to_unknown_group_is_unknown_member() -> None:
    ctx = CoreContext()
    assert ctx.reply(ctx.join("g", "someone")).error is E.unknown_member_id
    assert "g" not in ctx.coordinator.groups


def test_new_dynamic_member_must_rejoin_with_its_id_from_v4() -> None:
    """KIP-394: the first JoinGroup only reserves an id (a pending member)."""
    ctx = CoreContext()
    first = ctx.reply(ctx.join("g", client_id="app"))
    assert first.error is E.member_id_required
    assert first.member_id.startswith("app-")
    group = ctx.group()
    assert list(group.pending_join) == [first.member_id]
    assert not group.members
    assert group.state is GroupState.EMPTY
    # The pending member is timed out by its session timeout if it never comes back.
    ctx.assert_timer(heartbeat_key("g", first.member_id), ctx.now_ms + 10_000)
    ref = ctx.join("g", first.member_id)
    assert ctx.parked(ref)
    assert list(group.members) == [first.member_id]
    ctx.sleep(0)
    assert ctx.reply(ref).generation_id == 1


def test_join_before_v4_adds_the_member_at_once() -> None:
    ctx = CoreContext()
    ref = ctx.join("g", version=3, client_id="old")
    ctx.sleep(0)
    response = ctx.reply(ref)
    assert response.error is E.none
    assert response.member_id.startswith("old-")
    assert response.leader == response.member_id
    assert response.members[0].member_id == response.member_id


def test_a_new_group_is_persisted_even_before_its_first_generation() -> None:
    ctx = CoreContext()
    ctx.join("g")
    ctx.restart()
    assert ctx.group().state is GroupState.EMPTY


def test_join_group_inconsistent_protocol_type_or_protocols() -> None:
    ctx = CoreContext()
    ids, _ = ctx.stable_group(n=1)
    wrong_type = ctx.reply(ctx.join("g", protocol_type="connect"))
    assert wrong_type.error is E.inconsistent_group_protocol
    wrong_protocol = ctx.reply(ctx.join("g", protocol_names=("sticky",)))
    assert wrong_protocol.error is E.inconsistent_group_protocol
    empty_type = CoreContext()
    assert empty_type.reply(empty_type.join("g", protocol_type="")).error is (
        E.inconsistent_group_protocol
    )


def test_delay_initial_rebalance_by_group_initial_rebalance_delay() -> None:
    ctx = delayed()
    _, ref = ctx.join_new_member()
    ctx.sleep(2999)
    assert ctx.parked(ref)
    ctx.sleep(1)
    assert ctx.reply(ref).generation_id == 1


def test_reset_rebalance_delay_when_new_member_joins_during_initial_rebalance() -> None:
    ctx = delayed()
    _, a = ctx.join_new_member(rebalance_ms=9000)
    ctx.sleep(2999)
    _, b = ctx.join_new_member(rebalance_ms=9000)
    ctx.sleep(1503)  # t = 4502
    assert ctx.parked(a) and ctx.parked(b)
    ctx.sleep(1498)  # t = 6000
    assert ctx.reply(a).generation_id == ctx.reply(b).generation_id == 1


def test_delay_rebalance_up_to_rebalance_timeout() -> None:
    ctx = delayed()
    _, a = ctx.join_new_member(rebalance_ms=6000)
    _, b = ctx.join_new_member(rebalance_ms=6000)
    ctx.sleep(3001)
    _, c = ctx.join_new_member(rebalance_ms=6000)
    ctx.sleep(2998)  # t = 5999
    assert ctx.parked(a) and ctx.parked(b) and ctx.parked(c)
    ctx.sleep(1)  # t = 6000: no more delay left, whoever is in is in
    assert {ctx.reply(r).generation_id for r in (a, b, c)} == {1}
    assert len(ctx.group().members) == 3


def test_initial_rebalance_is_not_completed_early_when_everyone_joined() -> None:
    ctx = delayed()
    _, a = ctx.join_new_member()
    ctx.sleep(100)
    member_b, b = ctx.join_new_member()
    ctx.leave("g", (member_b, None))
    assert ctx.parked(a)
    ctx.sleep(2900)
    assert ctx.parked(a)
    ctx.sleep(3000)
    assert ctx.reply(a).generation_id == 1


def test_leader_is_the_first_member_and_alone_gets_the_member_list() -> None:
    ctx = CoreContext()
    a, ra = ctx.join_new_member(topics=("x",))
    b, rb = ctx.join_new_member(topics=("y",))
    ctx.sleep(0)
    leader, follower = ctx.reply(ra), ctx.reply(rb)
    assert leader.leader == follower.leader == a
    assert [m.member_id for m in leader.members] == [a, b]
    assert follower.members == ()
    assert leader.protocol_name == follower.protocol_name == "range"
    assert leader.protocol_type == "consumer"


def test_protocol_is_chosen_by_vote_among_protocols_every_member_supports() -> None:
    ctx = CoreContext()
    _, r1 = ctx.join_new_member(protocol_names=("sticky", "roundrobin", "range"))
    _, r2 = ctx.join_new_member(protocol_names=("roundrobin", "range"))
    _, r3 = ctx.join_new_member(protocol_names=("range", "roundrobin"))
    ctx.sleep(0)
    # sticky is not common; votes: roundrobin, roundrobin, range.
    assert {ctx.reply(r).protocol_name for r in (r1, r2, r3)} == {"roundrobin"}


def test_leader_failure_elects_a_member_that_rejoined() -> None:
    ctx = CoreContext()
    (leader, follower), generation = ctx.stable_group(n=2, rebalance_ms=10_000)
    assert ctx.group().leader_id == leader
    # A follower with new metadata forces a rebalance...
    ref = ctx.join("g", follower, rebalance_ms=10_000, topics=("t", "u"))
    assert ctx.parked(ref)
    ctx.heartbeat("g", leader, generation)  # ...that the old leader ignores.
    ctx.sleep(10_000)
    response = ctx.reply(ref)
    assert response.generation_id == generation + 1
    assert response.leader == follower
    assert list(ctx.group().members) == [follower]


def test_follower_rejoining_a_stable_group_unchanged_gets_the_current_generation() -> None:
    ctx = CoreContext()
    (leader, follower), generation = ctx.stable_group(n=2)
    response = ctx.reply(ctx.join("g", follower))
    assert response.error is E.none
    assert response.generation_id == generation
    assert response.leader == leader
    assert response.members == ()
    assert ctx.group().state is GroupState.STABLE


def test_leader_rejoining_a_stable_group_forces_a_rebalance() -> None:
    ctx = CoreContext()
    (leader, _), _ = ctx.stable_group(n=2)
    ref = ctx.join("g", leader)
    assert ctx.parked(ref)
    assert ctx.group().state is GroupState.PREPARING_REBALANCE


def test_follower_with_changed_metadata_forces_a_rebalance() -> None:
    ctx = CoreContext()
    (_, follower), _ = ctx.stable_group(n=2)
    ref = ctx.join("g", follower, topics=("t", "u"))
    assert ctx.parked(ref)
    assert ctx.group().state is GroupState.PREPARING_REBALANCE


def test_rejoin_during_completing_rebalance_with_same_metadata_repeats_the_answer() -> None:
    """A member that lost its JoinGroup response asks again and gets the same one."""
    ctx = CoreContext()
    a, ra = ctx.join_new_member()
    b, rb = ctx.join_new_member()
    ctx.sleep(0)
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE
    again_leader = ctx.reply(ctx.join("g", a))
    assert again_leader == ctx.reply(ra)
    again_follower = ctx.reply(ctx.join("g", b))
    assert again_follower == ctx.reply(rb)
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE


def test_rejoin_during_completing_rebalance_with_new_metadata_restarts_the_join() -> None:
    ctx = CoreContext()
    a, _ = ctx.join_new_member()
    b, _ = ctx.join_new_member()
    ctx.sleep(0)
    sync = ctx.sync("g", b, 1)
    assert ctx.parked(sync)
    ref = ctx.join("g", a, topics=("other",))
    assert ctx.reply(sync).error is E.rebalance_in_progress
    assert ctx.parked(ref)
    assert ctx.group().state is GroupState.PREPARING_REBALANCE


def test_join_with_a_member_id_in_an_empty_group_is_unknown_member() -> None:
    ctx = CoreContext()
    (a,), _ = ctx.stable_group(n=1)
    ctx.leave("g", (a, None))
    assert ctx.group().state is GroupState.EMPTY
    assert ctx.reply(ctx.join("g", a)).error is E.unknown_member_id


def test_a_superseded_parked_join_is_answered_so_its_connection_is_not_stuck() -> None:
    ctx = CoreContext()
    (a, b), _ = ctx.stable_group(n=2)
    first = ctx.join("g", a)
    second = ctx.join("g", a)
    assert ctx.reply(first).error is E.rebalance_in_progress
    assert ctx.parked(second)
    assert ctx.group().num_awaiting_join == 1
    ctx.join("g", b)
    ctx.sleep(0)
    assert ctx.reply(second).generation_id == 2


def test_new_member_join_expiration() -> None:
    """KAFKA-7610/9752: a new member parked in a long join phase is dropped after 5 min."""
    ctx = CoreContext()
    (old,), generation = ctx.stable_group(n=1, rebalance_ms=600_000, session_ms=30_000)
    new, ref = ctx.join_new_member(rebalance_ms=600_000, session_ms=30_000)
    ctx.assert_timer(heartbeat_key("g", new), ctx.now_ms + 300_000)
    for _ in range(29):
        ctx.sleep(10_000)
        ctx.heartbeat("g", old, generation)  # the old member is alive but never rejoins
    assert ctx.parked(ref)
    ctx.sleep(10_000)
    response = ctx.reply(ref)
    assert response.error is E.unknown_member_id
    assert response.member_id == ""
    assert new not in ctx.group().members


def test_pending_member_that_never_rejoins_is_removed_and_unblocks_the_rebalance() -> None:
    """redpanda#3300: pending members count as not joined until they expire."""
    ctx = CoreContext()
    (a,), _ = ctx.stable_group(n=1)
    pending = ctx.reply(ctx.join("g")).member_id
    ref = ctx.join("g", a, topics=("t", "u"))
    # The pending member blocks completion...
    assert ctx.group().pending_join and ctx.parked(ref)
    ctx.sleep(10_000)
    # ...until its session timeout removes it.
    assert pending not in ctx.group().pending_join
    assert ctx.reply(ref).generation_id == 2


def test_last_joining_members_are_kicked_out_when_rejoining_group_with_max_size() -> None:
    ctx = CoreContext()
    ids, generation = ctx.stable_group(n=3)
    ctx.config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_max_size=2)
    ctx.restart()  # the loaded group is over capacity: it rebalances at once
    assert ctx.group().state is GroupState.PREPARING_REBALANCE
    first, second, third = (ctx.join("g", m) for m in ids)
    assert ctx.reply(third).error is E.group_max_size_reached
    assert ctx.reply(third).member_id == ""
    assert ctx.parked(first) and ctx.parked(second)
    assert ids[2] not in ctx.group().members
    ctx.sleep(60_000)
    assert ctx.reply(first).generation_id == ctx.reply(second).generation_id == generation + 1


def test_new_member_is_refused_when_group_is_full() -> None:
    ctx = CoreContext(CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_max_size=2))
    ctx.stable_group(n=2)
    refused = ctx.reply(ctx.join("g"))
    assert refused.error is E.group_max_size_reached
    assert refused.member_id == ""
    assert not ctx.group().pending_join


def test_rebalance_timeout_must_be_positive() -> None:
    """KAFKA-8653: a non-positive rebalance timeout would end every join phase at once."""
    ctx = CoreContext()
    assert ctx.reply(ctx.join("g", rebalance_ms=0)).error is E.invalid_request


def test_join_v0_uses_the_session_timeout_as_rebalance_timeout() -> None:
    from kgroups.coordinator.wire.decode import decode
    from kgroups.protocol.apis import ApiKey, request_class
    from kgroups.protocol.build import build

    body = build(
        request_class(ApiKey.JOIN_GROUP, 0),
        {"group_id": "g", "session_timeout": 7000, "member_id": "", "protocol_type": "consumer",
         "protocols": [{"name": "range", "metadata": b""}]},
    )  # fmt: skip
    request = decode(ApiKey.JOIN_GROUP, 0, body)
    assert request.rebalance_timeout_ms == 7000  # type: ignore[union-attr]


def test_join_timer_is_the_group_rebalance_timeout() -> None:
    ctx = CoreContext()
    (a, b), _ = ctx.stable_group(n=2, rebalance_ms=12_345)
    ctx.join("g", a, rebalance_ms=12_345)
    ctx.assert_timer(join_key("g"), ctx.now_ms + 12_345)


def test_a_member_listing_a_protocol_twice_cannot_break_the_vote() -> None:
    """Found by the wire fuzzer (issue 23): a member listing `range` twice was counted as
    two supporters of it, so in a group of one no protocol was supported by exactly one
    member; the vote then failed inside the join timer and the coordinator stopped. Each
    member now counts once per name."""
    ctx = CoreContext()
    twice = (mg.Protocol("range", subscription("t")), mg.Protocol("range", b""))
    first = ctx.reply(ctx.send(mg.JoinGroupRequest("g", 10_000, 60_000, "", None, "consumer",
                                                   twice)))  # fmt: skip
    ref = ctx.send(
        mg.JoinGroupRequest("g", 10_000, 60_000, first.member_id, None, "consumer", twice)
    )
    other = ctx.join_new_member("g", protocol_names=("roundrobin", "range"))[1]
    ctx.sleep(0)
    assert ctx.reply(ref).error is ErrorCode.none
    assert ctx.reply(other).error is ErrorCode.none
    assert ctx.group().protocol_name == "range"
