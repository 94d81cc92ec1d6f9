"""A group's record is bounded as Kafka bounds it (issue 23, finding 2).

Before, member metadata had no bound: 40 members with 1 MiB each joined one group, and
every snapshot of it was written and kept. Kafka's bound is the record's size in
__consumer_offsets (message.max.bytes); past it the whole group's SyncGroup fails with
UNKNOWN_SERVER_ERROR. Here the member whose join would pass the bound is the one
refused, and the group carries on; a leader's oversized assignment fails the round as
in Kafka.
"""

from __future__ import annotations

from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core.config import CoordinatorConfig
from kgroups.coordinator.core.states import GroupState
from kgroups.protocol.errors import ErrorCode
from tests.core_context import CoreContext

LIMIT = 64 * 1024


def big_join(ctx: CoreContext, member_id: str, size: int) -> int:
    req = mg.JoinGroupRequest(
        group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=60_000,
        member_id=member_id, group_instance_id=None, protocol_type="consumer",
        protocols=(mg.Protocol("range", b"\0" * size),),
    )  # fmt: skip
    return ctx.send(req)


def test_a_join_that_would_pass_the_bound_is_refused_and_the_group_goes_on() -> None:
    ctx = CoreContext(CoordinatorConfig(group_initial_rebalance_delay_ms=0,
                                        max_group_record_bytes=LIMIT))  # fmt: skip
    ids, generation = ctx.stable_group("g", n=2)
    first = ctx.reply(big_join(ctx, "", LIMIT))
    assert first.error is ErrorCode.unknown_server_error
    assert ctx.group().state is GroupState.STABLE
    assert ctx.group().generation_id == generation
    assert set(ctx.group().members) == set(ids)
    # a member growing its own metadata past the bound is refused the same way
    assert ctx.reply(big_join(ctx, ids[1], LIMIT)).error is ErrorCode.unknown_server_error
    assert ctx.group().state is GroupState.STABLE
    # what fits still joins
    member_id = ctx.reply(big_join(ctx, "", LIMIT // 4)).member_id
    ref = big_join(ctx, member_id, LIMIT // 4)
    assert ctx.parked(ref)
    assert ctx.group().state is GroupState.PREPARING_REBALANCE


def test_joining_again_with_the_same_metadata_is_not_refused_even_over_the_bound() -> None:
    """The bound may be lowered on a restart: members already in keep their place."""
    ctx = CoreContext(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    ids, generation = ctx.stable_group("g", n=2)
    ctx.config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, max_group_record_bytes=1024)
    ctx.restart()
    ref = ctx.join("g", ids[1])
    assert ctx.reply(ref).error is ErrorCode.none
    assert ctx.reply(ref).generation_id == generation


def test_an_assignment_that_would_pass_the_bound_fails_every_sync_and_the_group_rebalances() -> (
    None
):
    ctx = CoreContext(CoordinatorConfig(group_initial_rebalance_delay_ms=0,
                                        max_group_record_bytes=LIMIT))  # fmt: skip
    refs = [ctx.join_new_member("g") for _ in range(2)]
    ctx.sleep(0)
    joined = [ctx.reply(ref) for _, ref in refs]
    leader = next(j for j in joined if j.leader == j.member_id)
    follower = next(j for j in joined if j.leader != j.member_id)
    parked = ctx.sync("g", follower.member_id, follower.generation_id)
    assert ctx.parked(parked)
    too_big = {j.member_id: b"\1" * (LIMIT // 2 + 1) for j in joined}
    answer = ctx.reply(ctx.sync("g", leader.member_id, leader.generation_id, too_big))
    assert answer.error is ErrorCode.unknown_server_error
    assert ctx.reply(parked).error is ErrorCode.unknown_server_error
    assert ctx.group().state is GroupState.PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in ctx.group().members.values())
