"""SyncGroup: the leader hands out the assignment; everyone else waits for it.

Follower requests park until the leader's arrives. The leader's assignment is applied,
the group becomes Stable and the snapshot record is emitted in the same call, so every
parked answer leaves only once the assignment is durable.
"""

from __future__ import annotations

import logging

from kgroups.coordinator.core import consumer_classic
from kgroups.coordinator.core import rebalance as rb
from kgroups.coordinator.core.authz import group_allowed
from kgroups.coordinator.core.context import Core
from kgroups.coordinator.core.effects import RebalanceCompleted, RebalanceReason
from kgroups.coordinator.core.model import Group
from kgroups.coordinator.core.msg_group import RequestContext, SyncGroupRequest, SyncGroupResponse
from kgroups.coordinator.core.states import GroupState
from kgroups.protocol.errors import ErrorCode, GroupError
from kgroups.security.actions import Operation
from kgroups.shown import shown, suppressed

log = logging.getLogger("kgroups.coordinator")

PROTOCOL_IN_SYNC_FROM = 5
"""SyncGroup versions that must carry ProtocolType and ProtocolName (KIP-559)."""


def handle_sync(core: Core, ctx: RequestContext, req: SyncGroupRequest) -> None:
    if not group_allowed(ctx, Operation.READ, req.group_id):
        # Kafka's request layer checks the mandatory protocol fields first, then READ.
        code = (
            ErrorCode.inconsistent_group_protocol
            if _protocol_missing(ctx, req)
            else ErrorCode.group_authorization_failed
        )
        core.out.reply(ctx.ref, SyncGroupResponse(code))
        return
    consumer = core.consumer_groups.get(req.group_id)
    if consumer is not None:
        consumer_classic.sync(core, ctx, req, consumer)
        return
    try:
        group = _validate(core, ctx, req)
    except GroupError as err:
        core.out.reply(ctx.ref, SyncGroupResponse(err.code))
        return
    if group.state is GroupState.PREPARING_REBALANCE:
        core.out.reply(ctx.ref, SyncGroupResponse(ErrorCode.rebalance_in_progress))
    elif group.state is GroupState.COMPLETING_REBALANCE:
        member = group.members[req.member_id]
        if member.awaiting_sync is not None:
            # A retry while the first is still parked: answer the first so it is not lost.
            core.out.reply(member.awaiting_sync, SyncGroupResponse(ErrorCode.rebalance_in_progress))
        member.awaiting_sync = ctx.ref
        rb.remove_pending_sync_member(core, group, req.member_id)
        if group.is_leader(req.member_id):
            assignment = dict(req.assignments)
            if _record_too_large(core, group, assignment):
                # Kafka: the record cannot be written, every parked sync fails and the
                # group rebalances.
                rb.reset_and_propagate_assignment_with_error(
                    core, group, ErrorCode.unknown_server_error
                )
                rb.maybe_prepare_rebalance_or_complete_join(
                    core, group, "the leader's assignment makes the group's record too large",
                    RebalanceReason.OVER_CAPACITY,
                )  # fmt: skip
                return
            rb.set_and_propagate_assignment(core, group, assignment)
            sync_ms = core.now_ms - group.state_timestamp_ms
            group.transition_to(GroupState.STABLE, core.now_ms)
            if group.rebalance_started_ms is not None:
                core.out.observations.append(
                    RebalanceCompleted(
                        group.group_id,
                        group.generation_id,
                        len(group.members),
                        core.now_ms - group.rebalance_started_ms,
                        sync_ms,
                    )
                )
            group.rebalance_started_ms = None
            rb.persist(core, group)
    elif group.state is GroupState.STABLE:
        rb.remove_pending_sync_member(core, group, req.member_id)
        member = group.members[req.member_id]
        # The answer proves the member alive: its session restarts now (Kafka does the
        # same), or a member whose SyncGroup came late is expelled on the old session
        # while it holds its freshly synced assignment.
        rb.reschedule_heartbeat(core, group, member)
        core.out.reply(
            ctx.ref,
            SyncGroupResponse(
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                assignment=member.assignment,
            ),
        )


def _record_too_large(core: Core, group: Group, assignment: dict[str, bytes]) -> bool:
    """Would the group's record, with this assignment, pass `max_group_record_bytes`?"""
    now = sum(len(m.assignment) for m in group.members.values())
    new = sum(len(assignment.get(member_id, b"")) for member_id in group.members)
    total = group.record_bytes() - now + new
    limit = core.config.max_group_record_bytes
    if total <= limit:
        return False
    skipped = core.quiet.take(("oversized assignment", shown(group.group_id)), core.now_ms / 1000)
    if skipped is not None:
        log.warning("group %s: the leader's assignment would make its record %d bytes, over "
                    "max_group_record_bytes (%d); every member's SyncGroup fails%s",
                    shown(group.group_id), total, limit, suppressed(skipped))  # fmt: skip
    return True


def _validate(core: Core, ctx: RequestContext, req: SyncGroupRequest) -> Group:
    if not req.group_id:
        raise GroupError(ErrorCode.invalid_group_id)
    if _protocol_missing(ctx, req):
        raise GroupError(ErrorCode.inconsistent_group_protocol)
    group = core.groups.get(req.group_id)
    if group is None or group.state is GroupState.EMPTY:
        raise GroupError(ErrorCode.unknown_member_id)
    if group.state is GroupState.DEAD:
        raise GroupError(ErrorCode.coordinator_not_available)
    group.validate_member(req.member_id, req.group_instance_id)
    if req.generation_id != group.generation_id:
        raise GroupError(ErrorCode.illegal_generation)
    if _inconsistent(req.protocol_type, group.protocol_type) or _inconsistent(
        req.protocol_name, group.protocol_name
    ):
        raise GroupError(ErrorCode.inconsistent_group_protocol)
    return group


def _protocol_missing(ctx: RequestContext, req: SyncGroupRequest) -> bool:
    return ctx.api_version >= PROTOCOL_IN_SYNC_FROM and (
        req.protocol_type is None or req.protocol_name is None
    )


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
