"""SyncGroup, Heartbeat and LeaveGroup, with the timers that drive them."""

from __future__ import annotations

import pytest

from kgroups.coordinator.core import GroupState
from kgroups.coordinator.core.context import heartbeat_key, sync_key
from kgroups.coordinator.core.records import GroupRecord
from kgroups.protocol.errors import ErrorCode
from tests.core_context import CoreContext

E = ErrorCode


def completing(ctx: CoreContext, n: int = 2, **kw: object) -> tuple[list[str], int]:
    """n members through the join phase (CompletingRebalance); returns ids, generation."""
    ids, refs = [], []
    for _ in range(n):
        member_id, ref = ctx.join_new_member(**kw)  # type: ignore[arg-type]
        ids.append(member_id)
        refs.append(ref)
    ctx.sleep(0)
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE
    return ids, ctx.reply(refs[0]).generation_id


# -- SyncGroup ------------------------------------------------------------------------


def test_sync_group_followers_wait_for_the_leader() -> None:
    ctx = CoreContext()
    (leader, follower), generation = completing(ctx)
    parked = ctx.sync("g", follower, generation)
    assert ctx.parked(parked)
    led = ctx.reply(ctx.sync("g", leader, generation, {leader: b"L", follower: b"F"}))
    assert (led.error, led.assignment, led.protocol_name) == (E.none, b"L", "range")
    assert ctx.reply(parked).assignment == b"F"
    assert ctx.group().state is GroupState.STABLE


def test_sync_group_assignment_is_durable_before_anyone_hears_it() -> None:
    ctx = CoreContext()
    (leader, follower), generation = completing(ctx)
    parked = ctx.sync("g", follower, generation)
    effects_before = len(ctx.all_effects)
    led = ctx.sync("g", leader, generation, {leader: b"L", follower: b"F"})
    effects = ctx.all_effects[effects_before]
    (record,) = effects.records
    assert isinstance(record, GroupRecord) and record.value is not None
    assert record.value.state is GroupState.STABLE
    assert {m.member_id: m.assignment for m in record.value.members} == {
        leader: b"L",
        follower: b"F",
    }
    # Both answers leave in the same Effects as the record: after it is durable.
    assert {r.ref for r in effects.replies} == {parked, led}


def test_sync_group_members_missing_from_the_assignment_get_an_empty_one() -> None:
    ctx = CoreContext()
    (leader, follower), generation = completing(ctx)
    ctx.sync("g", leader, generation, {leader: b"L", "stranger": b"S"})
    assert ctx.reply(ctx.sync("g", follower, generation)).assignment == b""
    assert "stranger" not in ctx.group().members


def test_sync_in_stable_returns_the_stored_assignment() -> None:
    ctx = CoreContext()
    (a, b), generation = ctx.stable_group(n=2)
    assert ctx.reply(ctx.sync("g", b, generation)).assignment == f"assign-{b}".encode()


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("unknown-group", E.unknown_member_id),
        ("empty-group-id", E.invalid_group_id),
        ("unknown-member", E.unknown_member_id),
        ("stale-generation", E.illegal_generation),
        ("wrong-protocol", E.inconsistent_group_protocol),
        ("v5-without-protocol", E.inconsistent_group_protocol),
    ],
)
def test_sync_group_errors(case: str, expected: ErrorCode) -> None:
    ctx = CoreContext()
    (leader, _), generation = completing(ctx)
    args: dict[str, object] = {"group_id": "g", "member_id": leader, "generation": generation}
    kwargs: dict[str, object] = {}
    if case == "unknown-group":
        args["group_id"] = "other"
    elif case == "empty-group-id":
        args["group_id"] = ""
    elif case == "unknown-member":
        args["member_id"] = "nobody"
    elif case == "stale-generation":
        args["generation"] = generation - 1
    elif case == "wrong-protocol":
        kwargs["protocol_name"] = "roundrobin"
    else:
        kwargs["protocol_name"] = None
    ref = ctx.sync(args["group_id"], args["member_id"], args["generation"], **kwargs)  # type: ignore[arg-type]
    assert ctx.reply(ref).error is expected
    assert ctx.group().state is GroupState.COMPLETING_REBALANCE


def test_sync_group_without_protocol_before_v5_is_fine() -> None:
    ctx = CoreContext()
    (leader, _), generation = completing(ctx)
    assert ctx.reply(ctx.sync("g", leader, generation, version=4)).error is E.none


def test_sync_group_to_an_empty_group_is_unknown_member() -> None:
    ctx = CoreContext()
    (a,), generation = ctx.stable_group(n=1)
    ctx.leave("g", (a, None))
    assert ctx.reply(ctx.sync("g", a, generation + 1)).error is E.unknown_member_id


def test_sync_during_preparing_rebalance_is_rebalance_in_progress() -> None:
    ctx = CoreContext()
    (a, b), generation = ctx.stable_group(n=2)
    ctx.join("g", a)
    assert ctx.reply(ctx.sync("g", b, generation)).error is E.rebalance_in_progress


def test_a_new_join_cancels_parked_syncs_with_rebalance_in_progress() -> None:
    ctx = CoreContext()
    (leader, follower), generation = completing(ctx)
    parked = ctx.sync("g", follower, generation)
    ctx.join_new_member()
    assert ctx.reply(parked).error is E.rebalance_in_progress
    assert ctx.group().state is GroupState.PREPARING_REBALANCE


def test_a_superseded_parked_sync_is_answered() -> None:
    ctx = CoreContext()
    (leader, follower), generation = completing(ctx)
    first = ctx.sync("g", follower, generation)
    second = ctx.sync("g", follower, generation)
    assert ctx.reply(first).error is E.rebalance_in_progress
    ctx.sync("g", leader, generation, {follower: b"F"})
    assert ctx.reply(second).assignment == b"F"


def test_rebalance_times_out_when_a_sync_request_is_not_received() -> None:
    """KAFKA-12890: a member that heartbeats but never syncs cannot wedge the group."""
    ctx = CoreContext()
    (leader, lazy), generation = completing(ctx, rebalance_ms=5000)
    ctx.assert_timer(sync_key("g"), ctx.now_ms + 5000)
    ctx.sync("g", leader, generation, {leader: b"L", lazy: b"Z"})
    for _ in range(4):
        ctx.sleep(1000)
        assert ctx.heartbeat("g", lazy, generation) is E.none
    ctx.sleep(1000)
    assert lazy not in ctx.group().members
    assert ctx.group().state is GroupState.PREPARING_REBALANCE
    assert ctx.heartbeat("g", lazy, generation) is E.unknown_member_id


def test_the_sync_timer_is_cancelled_once_everyone_synced() -> None:
    ctx = CoreContext()
    (leader, follower), generation = completing(ctx)
    ctx.sync("g", follower, generation)
    assert ctx.timer(sync_key("g")) is not None
    ctx.sync("g", leader, generation, {})
    assert ctx.timer(sync_key("g")) is None


# -- Heartbeat ------------------------------------------------------------------------


def test_heartbeat_per_state() -> None:
    ctx = CoreContext()
    assert ctx.heartbeat("", "m", 0) is E.invalid_group_id
    assert ctx.heartbeat("nope", "m", 0) is E.unknown_member_id
    (leader, follower), generation = completing(ctx)
    assert ctx.heartbeat("g", follower, generation) is E.none  # CompletingRebalance
    assert ctx.heartbeat("g", follower, generation - 1) is E.illegal_generation
    assert ctx.heartbeat("g", "nobody", generation) is E.unknown_member_id
    ctx.sync("g", leader, generation, {})
    assert ctx.heartbeat("g", follower, generation) is E.none  # Stable
    ctx.join("g", leader)
    # PreparingRebalance: the generation has not moved, so this is the cue to rejoin.
    assert ctx.heartbeat("g", follower, generation) is E.rebalance_in_progress


def test_heartbeat_renews_the_session() -> None:
    ctx = CoreContext()
    (a, b), generation = ctx.stable_group(n=2, session_ms=10_000)
    for _ in range(5):
        ctx.sleep(9_000)
        assert ctx.heartbeat("g", a, generation) is E.none
        assert ctx.heartbeat("g", b, generation) is E.none
    ctx.assert_timer(heartbeat_key("g", a), ctx.now_ms + 10_000)
    assert ctx.group().state is GroupState.STABLE


def test_session_timeout_expires_a_silent_member_and_rebalances() -> None:
    ctx = CoreContext()
    (a, b), generation = ctx.stable_group(n=2, session_ms=10_000)
    ctx.sleep(5_000)
    assert ctx.heartbeat("g", a, generation) is E.none
    ctx.sleep(4_999)
    assert b in ctx.group().members
    ctx.sleep(1)
    assert b not in ctx.group().members
    assert ctx.group().state is GroupState.PREPARING_REBALANCE
    assert ctx.heartbeat("g", a, generation) is E.rebalance_in_progress
    ref = ctx.join("g", a)
    assert ctx.reply(ref).generation_id == generation + 1  # a was the only one left


def test_a_member_parked_in_join_is_never_expired_by_its_session() -> None:
    ctx = CoreContext()
    (a, b), generation = ctx.stable_group(n=2, session_ms=10_000, rebalance_ms=60_000)
    ref = ctx.join("g", a, session_ms=10_000, rebalance_ms=60_000)
    for _ in range(6):  # 30 s: three of a's session timeouts, while b keeps heartbeating
        ctx.sleep(5_000)
        assert ctx.heartbeat("g", b, generation) is E.rebalance_in_progress
    assert a in ctx.group().members and ctx.parked(ref)
    rejoined = ctx.join("g", b, session_ms=10_000, rebalance_ms=60_000)
    assert ctx.reply(ref).generation_id == ctx.reply(rejoined).generation_id == generation + 1


# -- LeaveGroup -----------------------------------------------------------------------


def test_leave_group_batch_reports_per_member() -> None:
    ctx = CoreContext()
    (a, b, c), _ = ctx.stable_group(n=3)
    response = ctx.leave("g", (a, None), ("nobody", None), (b, None))
    assert [(m.member_id, m.error) for m in response.members] == [
        (a, E.none),
        ("nobody", E.unknown_member_id),
        (b, E.none),
    ]
    assert list(ctx.group().members) == [c]
    assert ctx.group().state is GroupState.PREPARING_REBALANCE
    assert ctx.timer(heartbeat_key("g", a)) is None


def test_last_member_leaving_empties_the_group_and_bumps_the_generation() -> None:
    ctx = CoreContext()
    (a,), generation = ctx.stable_group(n=1)
    ctx.leave("g", (a, None))
    assert ctx.group().state is GroupState.EMPTY
    assert ctx.group().generation_id == generation + 1


def test_leave_from_an_unknown_group_is_unknown_member_per_member() -> None:
    ctx = CoreContext()
    response = ctx.leave("nope", ("m1", None), ("m2", "i2"))
    assert response.error is E.none
    assert {m.error for m in response.members} == {E.unknown_member_id}


def test_pending_members_can_leave() -> None:
    ctx = CoreContext()
    pending = ctx.reply(ctx.join("g")).member_id
    response = ctx.leave("g", (pending, None))
    assert response.members[0].error is E.none
    assert not ctx.group().pending_join
    assert ctx.timer(heartbeat_key("g", pending)) is None


def test_leave_during_join_phase_completes_it_when_the_rest_rejoined() -> None:
    """streamnative/kop#380: removing a member must re-check join completion."""
    ctx = CoreContext()
    (a, b), generation = ctx.stable_group(n=2)
    ref = ctx.join("g", a)
    assert ctx.parked(ref)
    ctx.leave("g", (b, None))
    assert ctx.reply(ref).generation_id == generation + 1


def test_leave_of_a_parked_member_answers_its_join() -> None:
    ctx = CoreContext()
    (a, b), _ = ctx.stable_group(n=2)
    ref = ctx.join("g", a)
    ctx.leave("g", (a, None))
    assert ctx.reply(ref).error is E.unknown_member_id


def test_a_late_sync_group_in_stable_restarts_the_members_session() -> None:
    """Kafka reschedules the heartbeat when it answers a SyncGroup in Stable: a member
    whose SyncGroup came late (its first one lost on the network) must not be expelled
    on the session that began at the join, while it holds the assignment just sent."""
    ctx = CoreContext()
    (leader, follower), generation = completing(ctx, session_ms=10_000)
    ctx.reply(ctx.sync("g", leader, generation, {leader: b"L", follower: b"F"}))
    assert ctx.group().state is GroupState.STABLE
    ctx.sleep(8_000)  # the follower's SyncGroup was lost; it retries late
    assert ctx.reply(ctx.sync("g", follower, generation)).assignment == b"F"
    ctx.assert_timer(heartbeat_key("g", follower), ctx.now_ms + 10_000)
    ctx.sleep(4_000)  # past the session counted from the join
    assert follower in ctx.group().members
