"""LeaveGroup: members leaving on close, and administrators removing static members.

v3+ carries a batch with a result per member; the wire layer folds v0-2's single member
into a batch of one and the first member error back into the top-level code.
"""

from __future__ import annotations

from kgroups.coordinator.core import consumer_classic
from kgroups.coordinator.core import rebalance as rb
from kgroups.coordinator.core.authz import group_allowed
from kgroups.coordinator.core.context import Core, heartbeat_key
from kgroups.coordinator.core.effects import RebalanceReason
from kgroups.coordinator.core.model import Group
from kgroups.coordinator.core.msg_group import (
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeavingMember,
    LeftMember,
    RequestContext,
)
from kgroups.coordinator.core.states import GroupState
from kgroups.protocol.errors import ErrorCode, GroupError
from kgroups.security.actions import Operation


def handle_leave(core: Core, ctx: RequestContext, req: LeaveGroupRequest) -> None:
    if not group_allowed(ctx, Operation.READ, req.group_id):
        # Kafka answers the whole request at the top level, with no member entries.
        core.out.reply(ctx.ref, LeaveGroupResponse(ErrorCode.group_authorization_failed))
        return
    if not req.group_id:
        core.out.reply(ctx.ref, LeaveGroupResponse(ErrorCode.invalid_group_id))
        return
    consumer = core.consumer_groups.get(req.group_id)
    if consumer is not None:
        consumer_classic.leave(core, ctx, req, consumer)
        return
    group = core.groups.get(req.group_id)
    if group is None:
        unknown = tuple(
            LeftMember(m.member_id, m.group_instance_id, ErrorCode.unknown_member_id)
            for m in req.members
        )
        core.out.reply(ctx.ref, LeaveGroupResponse(members=unknown))
        return
    if group.state is GroupState.DEAD:
        core.out.reply(ctx.ref, LeaveGroupResponse(ErrorCode.coordinator_not_available))
        return
    results = tuple(_leave_one(core, group, m) for m in req.members)
    if any(not r.error for r in results):
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            left = [r.member_id or r.group_instance_id for r in results if not r.error]
            rb.maybe_prepare_rebalance_or_complete_join(
                core, group, f"explicit LeaveGroup request for {left}", RebalanceReason.MEMBER_LEFT
            )
        elif group.state is GroupState.PREPARING_REBALANCE:
            rb.maybe_complete_join_phase(core, group)
    core.out.reply(ctx.ref, LeaveGroupResponse(members=results))


def _leave_one(core: Core, group: Group, leaving: LeavingMember) -> LeftMember:
    member_id, instance_id = leaving.member_id, leaving.group_instance_id
    if member_id == "":
        # Administrative removal of a static member by its instance id (KIP-345).
        target = group.static_members.get(instance_id) if instance_id is not None else None
        if target is None:
            return LeftMember(member_id, instance_id, ErrorCode.unknown_member_id)
        _remove(core, group, target)
        return LeftMember(member_id, instance_id)
    if member_id in group.pending_join:
        group.remove(member_id, core.out)
        core.timers.cancel(heartbeat_key(group.group_id, member_id))
        return LeftMember(member_id, instance_id)
    try:
        group.validate_member(member_id, instance_id)
    except GroupError as err:
        return LeftMember(member_id, instance_id, err.code)
    _remove(core, group, member_id)
    return LeftMember(member_id, instance_id)


def _remove(core: Core, group: Group, member_id: str) -> None:
    core.timers.cancel(heartbeat_key(group.group_id, member_id))
    group.remove(member_id, core.out)
