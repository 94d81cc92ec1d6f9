"""JoinGroup: new members, returning members, static members (Kafka's classicGroupJoin).

The request is either answered at once (errors, MEMBER_ID_REQUIRED, a follower rejoining
a Stable group unchanged, a static member replaced without a rebalance) or parked on its
member until the join phase completes in `rebalance.complete_join`.
"""

from __future__ import annotations

import logging

from kgroups.coordinator.core import consumer_classic, ownership
from kgroups.coordinator.core import rebalance as rb
from kgroups.coordinator.core.authz import group_allowed
from kgroups.coordinator.core.context import Core, heartbeat_key
from kgroups.coordinator.core.effects import RebalanceReason
from kgroups.coordinator.core.group_configs import group_config
from kgroups.coordinator.core.model import (
    GROUP_RECORD_OVERHEAD,
    MEMBER_RECORD_OVERHEAD,
    Group,
    Member,
)
from kgroups.coordinator.core.msg_group import JoinGroupRequest, JoinGroupResponse, RequestContext
from kgroups.coordinator.core.states import GroupState
from kgroups.protocol.errors import ErrorCode, GroupError
from kgroups.security.actions import Operation
from kgroups.shown import shown, suppressed

log = logging.getLogger("kgroups.coordinator")

NEW_ID_SUFFIX = "0" * 36
"""Stands for the UUID a new member's id will end with, in size estimates."""
MEMBER_ID_REQUIRED_FROM = 4
"""JoinGroup versions from which a new dynamic member must rejoin with its id (KIP-394)."""
SKIP_ASSIGNMENT_FROM = 9
"""JoinGroup versions that understand SkipAssignment (KIP-814)."""


def handle_join(core: Core, ctx: RequestContext, req: JoinGroupRequest) -> None:
    def fail(code: ErrorCode, member_id: str = req.member_id) -> None:
        core.out.reply(ctx.ref, JoinGroupResponse(error=code, member_id=member_id))

    if not group_allowed(ctx, Operation.READ, req.group_id):
        # Before any other check, as Kafka's request layer does: nothing is created.
        return fail(ErrorCode.group_authorization_failed, member_id="")
    if not req.group_id:
        return fail(ErrorCode.invalid_group_id)
    cfg = group_config(core, req.group_id)
    if not (
        cfg.group_min_session_timeout_ms
        <= req.session_timeout_ms
        <= cfg.group_max_session_timeout_ms
    ):
        return fail(ErrorCode.invalid_session_timeout)
    if req.rebalance_timeout_ms <= 0:
        # KAFKA-8653: a zero or negative rebalance timeout would end every join phase at
        # once and kick out everyone else, forever.
        return fail(ErrorCode.invalid_request)

    unknown = req.member_id == ""
    consumer = core.consumer_groups.get(req.group_id)
    if consumer is not None:
        if consumer.members:
            # A classic member of a consumer-protocol group (Kafka's mixed groups).
            return consumer_classic.join(core, ctx, req, consumer)
        # An empty consumer-protocol group becomes a classic one (its offsets stay).
        ownership.drop_consumer(core, req.group_id)
    group = core.groups.get(req.group_id)
    if _record_too_large(core, ctx, req, group):
        return fail(ErrorCode.unknown_server_error)
    created = False
    if group is None:
        if not unknown:
            return fail(ErrorCode.unknown_member_id)
        if not ownership.may_create(core, ctx.principal):
            return fail(ErrorCode.policy_violation)  # groups per principal (ownership.py)
        owner = ownership.owner_of(ctx.principal)
        group = Group(req.group_id, state_timestamp_ms=core.now_ms, owner=owner)
        ownership.put(core, group)
        created = True

    records_before = len(core.out.records)
    if not _accept_joining_member(core, group, req.member_id):
        group.remove(req.member_id, core.out)
        fail(ErrorCode.group_max_size_reached, member_id="")
    elif unknown:
        _join_new_member(core, ctx, req, group)
    else:
        _join_existing_member(core, ctx, req, group)
    if created and len(core.out.records) == records_before:
        # Make the new group durable, as Kafka does, so it survives a restart.
        rb.persist(core, group)
    return None


def _record_too_large(
    core: Core, ctx: RequestContext, req: JoinGroupRequest, group: Group | None
) -> bool:
    """Would this join make the group's record larger than `max_group_record_bytes`?

    Kafka finds out when the leader's SyncGroup writes the record, and fails the whole
    group's sync (UNKNOWN_SERVER_ERROR), round after round. Here the member whose join
    would pass the bound is refused with that error instead, and the group carries on.
    A join that does not grow the record (the same metadata again) is never refused."""
    existing = None
    if group is not None:
        existing = group.members.get(req.member_id)
        if existing is None and req.group_instance_id is not None:
            existing = group.members.get(group.static_members.get(req.group_instance_id, ""))
    before = existing.record_bytes() if existing is not None else 0
    member_id = req.member_id or f"{req.group_instance_id or ctx.client_id}-{NEW_ID_SUFFIX}"
    after = (
        MEMBER_RECORD_OVERHEAD
        + len(member_id)
        + len(req.group_instance_id or "")
        + len(ctx.client_id)
        + len(ctx.client_host)
        + sum(len(p.name) + len(p.metadata) for p in req.protocols)
        + (len(existing.assignment) if existing is not None else 0)
    )
    total = (group.record_bytes() if group is not None else GROUP_RECORD_OVERHEAD) - before
    total += after + (0 if group is not None else len(req.group_id))
    limit = core.config.max_group_record_bytes
    if after <= before or total <= limit:
        return False
    skipped = core.quiet.take(("oversized join", shown(req.group_id)), core.now_ms / 1000)
    if skipped is not None:
        log.warning(
            "refused a JoinGroup to group %s from %s: its %d bytes of member data would "
            "make the group's record %d bytes, over max_group_record_bytes (%d)%s",
            shown(req.group_id), shown(ctx.client_id), after, total, limit, suppressed(skipped),
        )  # fmt: skip
    return True


def _accept_joining_member(core: Core, group: Group, member_id: str) -> bool:
    max_size = group_config(core, group.group_id).group_max_size
    if group.state in (GroupState.EMPTY, GroupState.DEAD):
        return True
    member = group.members.get(member_id)
    if group.state is GroupState.PREPARING_REBALANCE:
        # Counting members already parked (not all members) lets the last ones to rejoin
        # be the ones turned away when the group is over capacity.
        return (
            member is not None and member.awaiting_join is not None
        ) or group.num_awaiting_join < max_size
    return member is not None or len(group.members) < max_size


def _join_new_member(core: Core, ctx: RequestContext, req: JoinGroupRequest, group: Group) -> None:
    if group.state is GroupState.DEAD:
        core.out.reply(ctx.ref, JoinGroupResponse(error=ErrorCode.coordinator_not_available))
        return
    if not group.supports_protocols(req.protocol_type, req.protocols):
        core.out.reply(ctx.ref, JoinGroupResponse(error=ErrorCode.inconsistent_group_protocol))
        return
    instance_id = req.group_instance_id
    new_id = core.new_member_id(instance_id if instance_id is not None else ctx.client_id)
    if instance_id is not None:
        existing = group.static_members.get(instance_id)
        if existing is not None:
            _replace_static_member(core, ctx, req, group, existing, new_id)
        else:
            _add_member(core, ctx, req, group, new_id)
    elif ctx.api_version >= MEMBER_ID_REQUIRED_FROM:
        group.pending_join[new_id] = None
        rb.schedule_pending_member_expiry(core, group, new_id, req.session_timeout_ms)
        core.out.reply(
            ctx.ref, JoinGroupResponse(error=ErrorCode.member_id_required, member_id=new_id)
        )
    else:
        _add_member(core, ctx, req, group, new_id)


def _join_existing_member(
    core: Core, ctx: RequestContext, req: JoinGroupRequest, group: Group
) -> None:
    member_id = req.member_id

    def answer(response: JoinGroupResponse) -> None:
        core.out.reply(ctx.ref, response)

    if group.state is GroupState.DEAD:
        return answer(JoinGroupResponse(ErrorCode.coordinator_not_available, member_id=member_id))
    if not group.supports_protocols(req.protocol_type, req.protocols):
        return answer(JoinGroupResponse(ErrorCode.inconsistent_group_protocol, member_id=member_id))
    if member_id in group.pending_join:
        if req.group_instance_id is not None:
            # Pending members are dynamic by construction; Kafka fails this the same way.
            return answer(JoinGroupResponse(ErrorCode.unknown_server_error, member_id=member_id))
        return _add_member(core, ctx, req, group, member_id)
    try:
        member = group.validate_member(member_id, req.group_instance_id)
    except GroupError as err:
        return answer(JoinGroupResponse(err.code, member_id=member_id))

    if group.state is GroupState.PREPARING_REBALANCE:
        return _update_member(core, ctx, req, group, member)
    if group.state is GroupState.COMPLETING_REBALANCE:
        if member.matches(req.protocols):
            # The member lost our first answer: repeat it for the current generation.
            leader = group.is_leader(member_id)
            return answer(_current_generation(group, member_id, with_members=leader))
        return _update_member(core, ctx, req, group, member)
    if group.state is GroupState.STABLE:
        if group.is_leader(member_id) or not member.matches(req.protocols):
            # The leader rejoins to signal metadata changes; a follower with new metadata
            # needs a new assignment.
            return _update_member(core, ctx, req, group, member)
        return answer(_current_generation(group, member_id, with_members=False))
    # Empty: the member's generation is gone; it must start over.
    return answer(JoinGroupResponse(ErrorCode.unknown_member_id, member_id=member_id))


def _current_generation(
    group: Group,
    member_id: str,
    *,
    with_members: bool,
    leader: str | None = None,
    skip_assignment: bool = False,
) -> JoinGroupResponse:
    return JoinGroupResponse(
        generation_id=group.generation_id,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        leader=(group.leader_id if leader is None else leader) or "",
        member_id=member_id,
        members=group.current_members() if with_members else (),
        skip_assignment=skip_assignment,
    )


def _update_member(
    core: Core, ctx: RequestContext, req: JoinGroupRequest, group: Group, member: Member
) -> None:
    group.update_member(
        member,
        req.protocols,
        req.rebalance_timeout_ms,
        req.session_timeout_ms,
        ctx.ref,
        core.out,
    )
    rb.maybe_prepare_rebalance_or_complete_join(
        core,
        group,
        f"member {member.member_id} is joining group during {group.state.value}; "
        f"client reason: {req.reason or 'not provided'}",
        RebalanceReason.METADATA_CHANGED,
    )


def _add_member(
    core: Core, ctx: RequestContext, req: JoinGroupRequest, group: Group, member_id: str
) -> None:
    member = Member(
        member_id=member_id,
        group_instance_id=req.group_instance_id,
        client_id=ctx.client_id,
        client_host=ctx.client_host,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        session_timeout_ms=req.session_timeout_ms,
        protocol_type=req.protocol_type,
        protocols=req.protocols,
        is_new=True,
    )
    if group.state is GroupState.PREPARING_REBALANCE and group.previous_state is GroupState.EMPTY:
        group.new_member_added = True
    group.add(member, ctx.ref)
    # A parked new member cannot heartbeat, and a disconnect is invisible while it is
    # parked; the new-member timeout stops retries from piling up defunct members.
    rb.reschedule_heartbeat(core, group, member, core.config.group_new_member_join_timeout_ms)
    rb.maybe_prepare_rebalance_or_complete_join(
        core,
        group,
        f"adding new member {member_id} with group instance id {req.group_instance_id}; "
        f"client reason: {req.reason or 'not provided'}",
        RebalanceReason.MEMBER_JOINED,
    )


def _replace_static_member(
    core: Core,
    ctx: RequestContext,
    req: JoinGroupRequest,
    group: Group,
    old_member_id: str,
    new_member_id: str,
) -> None:
    """A static member came back under a new member id (KIP-345, KAFKA-8500/9801/14009)."""
    old_leader = group.leader_id
    assert req.group_instance_id is not None
    member = group.replace_static_member(
        req.group_instance_id, old_member_id, new_member_id, core.out
    )
    core.timers.cancel(heartbeat_key(group.group_id, old_member_id))
    rb.reschedule_heartbeat(core, group, member)
    group.update_member(
        member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, ctx.ref, core.out
    )
    if group.state is GroupState.STABLE:
        if group.protocol_name == group.select_protocol():
            # Same protocol: no rebalance. The member takes over its predecessor's
            # assignment, which becomes durable before the answer leaves.
            rb.persist(core, group)
            if ctx.api_version >= SKIP_ASSIGNMENT_FROM:
                leader = group.is_leader(new_member_id)
                response = _current_generation(
                    group, new_member_id, with_members=leader, skip_assignment=leader
                )
            else:
                # Older clients must not believe they lead, or they would reassign.
                response = _current_generation(
                    group, new_member_id, with_members=False, leader=old_leader or ""
                )
            group.complete_join(member, response, core.out)
        else:
            rb.maybe_prepare_rebalance_or_complete_join(
                core,
                group,
                f"group's selected protocol will change because static member "
                f"{new_member_id} joined with a change of protocol",
                RebalanceReason.STATIC_REPLACEMENT,
            )
    elif group.state is GroupState.COMPLETING_REBALANCE:
        # The leader may already be assigning to the old id; only a new round is safe.
        rb.prepare_rebalance(
            core,
            group,
            f"updating metadata for static member {new_member_id} during sync",
            RebalanceReason.STATIC_REPLACEMENT,
        )
    else:
        rb.maybe_complete_join_phase(core, group)
