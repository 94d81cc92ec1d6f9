"""Heartbeat: keeps a member's session alive and tells it when to rejoin.

During PreparingRebalance the generation has not moved yet, so members of the old
generation hear REBALANCE_IN_PROGRESS (their cue to rejoin), not ILLEGAL_GENERATION.
"""

from __future__ import annotations

from kgroups.coordinator.core import consumer_classic
from kgroups.coordinator.core import rebalance as rb
from kgroups.coordinator.core.authz import group_allowed
from kgroups.coordinator.core.context import Core
from kgroups.coordinator.core.msg_group import HeartbeatRequest, HeartbeatResponse, RequestContext
from kgroups.coordinator.core.states import GroupState
from kgroups.protocol.errors import ErrorCode, GroupError
from kgroups.security.actions import Operation

_ANSWERS = {code: HeartbeatResponse(code) for code in ErrorCode}
"""Every heartbeat answer, made once (they are immutable; thousands are sent a second)."""


def handle_heartbeat(core: Core, ctx: RequestContext, req: HeartbeatRequest) -> None:
    if ctx.denied and not group_allowed(ctx, Operation.READ, req.group_id):
        # Refused before anything else: the member's session is not extended.
        core.out.reply(ctx.ref, _ANSWERS[ErrorCode.group_authorization_failed])
        return
    core.out.reply(ctx.ref, _ANSWERS[heartbeat(core, req)])


def heartbeat(core: Core, req: HeartbeatRequest) -> ErrorCode:
    """The answer to an authorized heartbeat; the member's session timer is pushed back
    when it is still in the group's current generation."""
    if not req.group_id:
        return ErrorCode.invalid_group_id
    group = core.groups.get(req.group_id)
    if group is None:
        consumer = core.consumer_groups.get(req.group_id)
        if consumer is not None:
            return consumer_classic.heartbeat(core, req, consumer)
        return ErrorCode.unknown_member_id
    if group.state is GroupState.DEAD:
        return ErrorCode.coordinator_not_available
    try:
        member = group.validate_member(req.member_id, req.group_instance_id)
    except GroupError as err:
        return err.code
    if req.generation_id != group.generation_id:
        return ErrorCode.illegal_generation
    if group.state is GroupState.EMPTY:
        return ErrorCode.unknown_member_id
    rb.reschedule_heartbeat(core, group, member)
    if group.state is GroupState.PREPARING_REBALANCE:
        return ErrorCode.rebalance_in_progress
    return ErrorCode.none
