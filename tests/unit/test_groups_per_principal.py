"""Groups per principal: an authenticated principal creates at most
`max_groups_per_principal` groups (by JoinGroup or by a simple-group OffsetCommit); the
next is refused with POLICY_VIOLATION and nothing is created or stored; deleting one of
its groups frees a place; the counts survive a restart (the owner is in the group record);
ANONYMOUS, everyone on an unauthenticated listener, is not counted."""

from __future__ import annotations

from kgroups.coordinator.core import CoordinatorConfig
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core import msg_offsets as mo
from kgroups.protocol.errors import ErrorCode as E
from tests.core_context import CoreContext

ALICE, BOB = "User:alice", "User:bob"


def context(limit: int = 2) -> CoreContext:
    ctx = CoreContext(
        CoordinatorConfig(group_initial_rebalance_delay_ms=0, max_groups_per_principal=limit)
    )
    assert ctx.create_topic("t", 1).error is E.none
    return ctx


def joined(ctx: CoreContext, group: str, principal: str) -> E:
    """A new member's first JoinGroup: MEMBER_ID_REQUIRED (KIP-394) once the group
    exists, reported as NONE; the error otherwise."""
    error = E(ctx.reply(ctx.join(group, principal=principal)).error)
    return E.none if error is E.member_id_required else error


def simple_commit(ctx: CoreContext, group: str, principal: str) -> E:
    req = mo.OffsetCommitRequest(group, -1, "", (mo.CommitTopic("t", (mo.CommitPartition(0, 5),)),))
    return E(ctx.reply(ctx.send(req, version=2, principal=principal)).topics[0].partitions[0][1])


def test_a_principal_at_its_limit_cannot_create_a_group_and_nothing_is_stored() -> None:
    ctx = context()
    assert joined(ctx, "a1", ALICE) is E.none
    assert simple_commit(ctx, "a2", ALICE) is E.none
    records = len(ctx.store.replay_order())
    assert joined(ctx, "a3", ALICE) is E.policy_violation
    assert simple_commit(ctx, "a4", ALICE) is E.policy_violation
    assert not {"a3", "a4"} & set(ctx.coordinator.groups)
    assert len(ctx.store.replay_order()) == records
    # Others are not affected, and joining or committing to existing groups is not creating.
    assert joined(ctx, "b1", BOB) is E.none
    assert joined(ctx, "b1", ALICE) is E.none
    assert simple_commit(ctx, "a2", ALICE) is E.none


def test_anonymous_is_not_counted_and_zero_means_no_limit() -> None:
    ctx = context()
    assert all(joined(ctx, f"g{i}", "User:ANONYMOUS") is E.none for i in range(5))
    unlimited = context(limit=0)
    assert all(simple_commit(unlimited, f"g{i}", ALICE) is E.none for i in range(5))


def test_deleting_a_group_frees_a_place_and_counts_survive_a_restart() -> None:
    ctx = context()
    assert simple_commit(ctx, "a1", ALICE) is E.none
    assert simple_commit(ctx, "a2", ALICE) is E.none
    ctx.restart()
    assert simple_commit(ctx, "a3", ALICE) is E.policy_violation
    deleted = ctx.reply(ctx.send(mg.DeleteGroupsRequest(("a1",)), version=2))
    assert deleted.results == (("a1", E.none),)
    assert simple_commit(ctx, "a3", ALICE) is E.none
    ctx.restart()
    assert ctx.coordinator.core.owned[ALICE] == 2
    assert simple_commit(ctx, "a4", ALICE) is E.policy_violation
