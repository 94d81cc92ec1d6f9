"""Replay: what a coordinator rebuilt from its records knows, and what it re-arms."""

from __future__ import annotations

import pytest

from kgroups.coordinator.core import GroupState
from kgroups.coordinator.core.context import heartbeat_key, sync_key
from kgroups.protocol.errors import ErrorCode
from tests.core_context import CoreContext

E = ErrorCode


def test_a_stable_group_is_reloaded_stable_and_its_members_keep_heartbeating() -> None:
    ctx = CoreContext()
    (a, b), generation = ctx.stable_group(n=2, session_ms=10_000)
    ctx.restart()
    group = ctx.group()
    assert group.state is GroupState.STABLE
    assert group.generation_id == generation
    assert list(group.members) == [a, b]
    assert group.leader_id == a
    assert group.members[b].assignment == f"assign-{b}".encode()
    for _ in range(5):
        ctx.sleep(8_000)
        assert ctx.heartbeat("g", a, generation) is E.none
        assert ctx.heartbeat("g", b, generation) is E.none
    assert ctx.group().state is GroupState.STABLE
    # The same members rejoining unchanged need no rebalance: every protocol was kept.
    assert ctx.reply(ctx.join("g", b)).generation_id == generation


def test_members_that_died_with_the_old_process_are_still_expired() -> None:
    ctx = CoreContext()
    (a, b), generation = ctx.stable_group(n=2, session_ms=10_000)
    ctx.restart()
    ctx.assert_timer(heartbeat_key("g", a), ctx.now_ms + 10_000)
    ctx.sleep(5_000)
    ctx.heartbeat("g", a, generation)
    ctx.sleep(5_000)
    assert b not in ctx.group().members
    assert ctx.group().state is GroupState.PREPARING_REBALANCE


def test_a_generation_handed_out_is_never_handed_out_again() -> None:
    """JoinGroup answers wait for the new generation to be durable (Kafka only writes at
    SyncGroup, so a restart in between can reissue a generation number)."""
    ctx = CoreContext()
    a, ra = ctx.join_new_member()
    b, rb = ctx.join_new_member()
    ctx.sleep(0)
    told = ctx.reply(ra).generation_id
    ctx.restart()  # before anyone synced
    group = ctx.group()
    assert group.generation_id == told
    assert group.state is GroupState.COMPLETING_REBALANCE
    ctx.assert_timer(sync_key("g"), ctx.now_ms + 60_000)
    # The members carry on where they were: sync, the leader assigns, Stable.
    parked = ctx.sync("g", b, told)
    assert ctx.parked(parked)
    ctx.sync("g", a, told, {a: b"A", b: b"B"})
    assert ctx.reply(parked).assignment == b"B"
    # The next rebalance moves forward, never back.
    ctx.join("g", a)
    ctx.join("g", b)
    assert ctx.group().generation_id == told + 1


def test_members_of_a_group_persisted_mid_sync_that_never_sync_are_removed() -> None:
    ctx = CoreContext()
    ctx.join_new_member(rebalance_ms=7_000)
    ctx.join_new_member(rebalance_ms=7_000)
    ctx.sleep(0)
    ctx.restart()
    ctx.sleep(7_000)
    assert ctx.group().state is GroupState.EMPTY


def test_the_empty_generation_and_deleted_groups_stay_as_they_were() -> None:
    ctx = CoreContext()
    (a,), generation = ctx.stable_group("leaving", n=1)
    ctx.leave("leaving", (a, None))
    ctx.stable_group("stays", n=1)
    ctx.restart()
    assert ctx.group("leaving").state is GroupState.EMPTY
    assert ctx.group("leaving").generation_id == generation + 1
    assert ctx.group("stays").state is GroupState.STABLE


def test_replay_then_resume_is_the_only_order() -> None:
    ctx = CoreContext()
    ctx.stable_group(n=1)
    record = next(iter(ctx.store.rows.values()))
    with pytest.raises(RuntimeError, match="after resume"):
        ctx.coordinator.replay(record)
