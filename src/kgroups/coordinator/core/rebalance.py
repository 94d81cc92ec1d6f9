"""The rebalance engine: entering a join phase, completing it, and the timers around it.

This is the heart of Kafka's classic protocol (`GroupMetadataManager`: prepareRebalance,
completeClassicGroupJoin, the delayed initial join, session and pending-sync expiry),
shared by every request handler that changes membership. Function names follow Kafka's
so the two can be read side by side.

One deliberate difference: when a join phase completes with members, the new generation
is persisted *before* the JoinGroup responses leave (Kafka only writes at SyncGroup). A
client is therefore never told a generation that a restart could hand out again.
"""

from __future__ import annotations

import logging

from kgroups.coordinator.core.context import Core, heartbeat_key, join_key, sync_key
from kgroups.coordinator.core.effects import (
    JoinPhaseCompleted,
    RebalanceReason,
    RebalanceStarted,
    SessionExpired,
)
from kgroups.coordinator.core.group_configs import group_config
from kgroups.coordinator.core.model import Group, Member
from kgroups.coordinator.core.msg_group import JoinGroupResponse, SyncGroupResponse
from kgroups.coordinator.core.records import GroupRecord, GroupValue
from kgroups.coordinator.core.states import GroupState
from kgroups.protocol.errors import ErrorCode
from kgroups.shown import shown

log = logging.getLogger("kgroups.coordinator.group")

PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE


# -- persistence ----------------------------------------------------------------------------


def snapshot(group: Group) -> GroupRecord:
    """The group as it is now, as a record."""
    members = tuple(m.to_value() for m in group.members.values())
    value = GroupValue(
        generation_id=group.generation_id,
        state=group.state,
        state_timestamp_ms=group.state_timestamp_ms,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        leader_id=group.leader_id,
        members=members,
        owner=group.owner,
    )
    return GroupRecord(group.group_id, value)


def persist(core: Core, group: Group) -> None:
    core.out.persist(snapshot(group))


# -- session timers -------------------------------------------------------------------------


def reschedule_heartbeat(
    core: Core, group: Group, member: Member, timeout_ms: int | None = None
) -> None:
    """(Re)arm the member's session timer: `timeout_ms` defaults to its session timeout."""
    group_id, member_id = group.group_id, member.member_id
    delay = member.session_timeout_ms if timeout_ms is None else timeout_ms
    core.timers.schedule(
        heartbeat_key(group_id, member_id),
        core.now_ms + delay,
        lambda now: expire_heartbeat(core, group_id, member_id),
    )


def schedule_pending_member_expiry(
    core: Core, group: Group, member_id: str, session_timeout_ms: int
) -> None:
    group_id = group.group_id
    core.timers.schedule(
        heartbeat_key(group_id, member_id),
        core.now_ms + session_timeout_ms,
        lambda now: expire_heartbeat(core, group_id, member_id),
    )


def expire_heartbeat(core: Core, group_id: str, member_id: str) -> None:
    """A member missed its session timeout (or a new member its join timeout)."""
    group = core.groups.get(group_id)
    if group is None or group.state is GroupState.DEAD:
        return
    if member_id in group.pending_join:
        group.remove(member_id, core.out)
        if group.state is PREPARING and group.has_all_members_joined():
            complete_join(core, group)
        return
    member = group.members.get(member_id)
    if member is None or member.has_satisfied_heartbeat():
        return
    log.info("member %s in group %s has failed, removing it from the group", shown(member_id),
             shown(group_id))  # fmt: skip
    core.out.observations.append(SessionExpired(group_id))
    remove_member_and_update(
        core,
        group,
        member,
        f"removing member {member_id} on heartbeat expiration",
        RebalanceReason.SESSION_EXPIRED,
    )


def remove_member_and_update(
    core: Core, group: Group, member: Member, reason: str, cause: RebalanceReason
) -> None:
    """Drop a failed member and move the group along (rebalance, or finish the join)."""
    group.remove(member.member_id, core.out)
    if group.state in (GroupState.STABLE, COMPLETING):
        maybe_prepare_rebalance_or_complete_join(core, group, reason, cause)
    elif group.state is PREPARING and group.has_all_members_joined():
        complete_join(core, group)


# -- join phase -----------------------------------------------------------------------------


def maybe_prepare_rebalance_or_complete_join(
    core: Core, group: Group, reason: str, cause: RebalanceReason
) -> None:
    if group.can_rebalance():
        prepare_rebalance(core, group, reason, cause)
    else:
        maybe_complete_join_phase(core, group)


def prepare_rebalance(core: Core, group: Group, reason: str, cause: RebalanceReason) -> None:
    """Start a join phase: cancel any sync in flight, then wait for members to (re)join.

    `reason` is for the log (it names members); `cause` is its category, for metrics."""
    log.info(
        "preparing to rebalance group %s in state %s with old generation %d (reason: %s)",
        shown(group.group_id),
        group.state.value,
        group.generation_id,
        shown(reason, 600),
    )
    if group.state is COMPLETING:
        reset_and_propagate_assignment_with_error(core, group, ErrorCode.rebalance_in_progress)
    remove_sync_expiration(core, group)
    initial = group.state is GroupState.EMPTY
    if initial:
        delay = group_config(core, group.group_id).group_initial_rebalance_delay_ms
        remaining = max(group.rebalance_timeout_ms() - delay, 0)
        _schedule_initial_join(core, group.group_id, delay, remaining)
    if group.rebalance_started_ms is None:
        group.rebalance_started_ms = core.now_ms
    group.transition_to(PREPARING, core.now_ms)
    core.out.observations.append(RebalanceStarted(group.group_id, cause))
    if not initial:
        maybe_complete_join_else_schedule(core, group)


def _schedule_initial_join(core: Core, group_id: str, delay_ms: int, remaining_ms: int) -> None:
    core.timers.schedule(
        join_key(group_id),
        core.now_ms + delay_ms,
        lambda now: try_complete_initial_rebalance(core, group_id, delay_ms, remaining_ms),
    )


def try_complete_initial_rebalance(
    core: Core, group_id: str, delay_ms: int, remaining_ms: int
) -> None:
    """KIP-134: each newcomer during the initial delay buys another delay, within bounds."""
    group = core.groups.get(group_id)
    if group is None:
        return
    if group.new_member_added and remaining_ms != 0:
        group.new_member_added = False
        new_delay = min(group_config(core, group_id).group_initial_rebalance_delay_ms, remaining_ms)
        new_remaining = max(remaining_ms - delay_ms, 0)
        _schedule_initial_join(core, group_id, new_delay, new_remaining)
    else:
        complete_join(core, group)


def maybe_complete_join_else_schedule(core: Core, group: Group) -> None:
    if group.has_all_members_joined():
        complete_join(core, group)
    else:
        _schedule_join(core, group)


def _schedule_join(core: Core, group: Group) -> None:
    group_id = group.group_id
    core.timers.schedule(
        join_key(group_id),
        core.now_ms + group.rebalance_timeout_ms(),
        lambda now: _complete_join_by_id(core, group_id),
    )


def _complete_join_by_id(core: Core, group_id: str) -> None:
    group = core.groups.get(group_id)
    if group is not None:
        complete_join(core, group)


def maybe_complete_join_phase(core: Core, group: Group) -> None:
    """Finish the join phase early if everyone is in, except during the initial delay."""
    if group.state is not PREPARING:
        return
    if group.previous_state is GroupState.EMPTY:
        return
    if not group.has_all_members_joined():
        return
    complete_join(core, group)


def complete_join(core: Core, group: Group) -> None:
    """End the join phase: drop dynamic members that did not rejoin, start a generation."""
    if group.state is not PREPARING:
        # A stale timer: the phase already ended some other way.
        return
    core.timers.cancel(join_key(group.group_id))
    dropped = [m for m in group.members.values() if m.awaiting_join is None and not m.is_static]
    for member in dropped:
        group.remove(member.member_id, core.out)
        core.timers.cancel(heartbeat_key(group.group_id, member.member_id))
    if dropped:
        log.info(
            "group %s removed dynamic members who have not rejoined: %s",
            shown(group.group_id),
            shown([m.member_id for m in dropped], 600),
        )
    if not group.maybe_elect_new_joined_leader() and group.members:
        # Only static members that have not rejoined remain: wait for them (or for their
        # session timeouts) another rebalance timeout.
        _schedule_join(core, group)
        return
    join_ms = core.now_ms - group.state_timestamp_ms
    group.init_next_generation(core.now_ms)
    persist(core, group)
    if group.state is GroupState.EMPTY:
        log.info("group %s with generation %d is now empty", shown(group.group_id),
                 group.generation_id)  # fmt: skip
        group.rebalance_started_ms = None
        return
    core.out.observations.append(JoinPhaseCompleted(group.group_id, join_ms))
    log.info(
        "stabilized group %s generation %d (protocol %s) with %d members",
        shown(group.group_id),
        group.generation_id,
        shown(group.protocol_name),
        len(group.members),
    )
    members = group.current_members()
    for member in group.members.values():
        response = JoinGroupResponse(
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            member_id=member.member_id,
            members=members if group.is_leader(member.member_id) else (),
        )
        group.complete_join(member, response, core.out)
        reschedule_heartbeat(core, group, member)
        member.is_new = False
        group.pending_sync[member.member_id] = None
    schedule_pending_sync(core, group)


# -- sync phase -----------------------------------------------------------------------------


def schedule_pending_sync(core: Core, group: Group) -> None:
    group_id, generation = group.group_id, group.generation_id
    core.timers.schedule(
        sync_key(group_id),
        core.now_ms + group.rebalance_timeout_ms(),
        lambda now: expire_pending_sync(core, group_id, generation),
    )


def remove_sync_expiration(core: Core, group: Group) -> None:
    group.pending_sync.clear()
    core.timers.cancel(sync_key(group.group_id))


def expire_pending_sync(core: Core, group_id: str, generation_id: int) -> None:
    """KAFKA-12890: members that never sent SyncGroup are removed, and the group rebalances."""
    group = core.groups.get(group_id)
    if group is None or group.generation_id != generation_id:
        return
    if group.state not in (COMPLETING, GroupState.STABLE) or not group.pending_sync:
        return
    missing = list(group.pending_sync)
    for member_id in missing:
        group.remove(member_id, core.out)
        core.timers.cancel(heartbeat_key(group_id, member_id))
    prepare_rebalance(
        core,
        group,
        f"removing {missing} on pending sync request expiration",
        RebalanceReason.SYNC_TIMEOUT,
    )


def remove_pending_sync_member(core: Core, group: Group, member_id: str) -> None:
    group.pending_sync.pop(member_id, None)
    if group.state in (COMPLETING, GroupState.STABLE):
        if not group.pending_sync:
            core.timers.cancel(sync_key(group.group_id))
    else:
        core.timers.cancel(sync_key(group.group_id))


def reset_and_propagate_assignment_with_error(core: Core, group: Group, error: ErrorCode) -> None:
    assert group.state is COMPLETING, group.state
    for member in group.members.values():
        group.set_assignment(member, b"")
    propagate_assignment(core, group, error)


def set_and_propagate_assignment(core: Core, group: Group, assignment: dict[str, bytes]) -> None:
    assert group.state is COMPLETING, group.state
    for member in group.members.values():
        group.set_assignment(member, assignment.get(member.member_id, b""))
    propagate_assignment(core, group, ErrorCode.none)


def propagate_assignment(core: Core, group: Group, error: ErrorCode) -> None:
    ok = error is ErrorCode.none
    for member in group.members.values():
        response = SyncGroupResponse(
            error=error,
            protocol_type=group.protocol_type if ok else None,
            protocol_name=group.protocol_name if ok else None,
            assignment=member.assignment,
        )
        if group.complete_sync(member, response, core.out):
            # The member's session may have lapsed while it waited for the leader.
            reschedule_heartbeat(core, group, member)
