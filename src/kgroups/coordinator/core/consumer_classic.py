"""Classic members inside a consumer-protocol group (Kafka 4's mixed groups, KIP-848).

While an application rolls from `group.protocol=classic` to `consumer`, its old
instances keep speaking JoinGroup, SyncGroup and Heartbeat to a group the coordinator
now assigns itself. Each classic member is a member of the consumer group like any other
(its target computed by the server assignor, reconciled by the same rules); only the
conversation differs (Kafka's `classicGroup*ToConsumerGroup`):

* **JoinGroup** carries its subscription and, since ConsumerProtocol v1, what it owns
  (an eager member owns nothing when it rejoins: it gave everything up first). It is
  answered at once: no barrier, no leader (every classic member is a follower), the
  generation is its member epoch, the protocol its first. It must send SyncGroup within
  its rebalance timeout.
* **SyncGroup** answers what the member may use now (its assigned partitions), or
  REBALANCE_IN_PROGRESS when the target moved since its join.
* **Heartbeat** keeps its session and tells it to rejoin (REBALANCE_IN_PROGRESS) when
  it must release partitions, when a newer target exists, or when partitions it waits
  for were released; it must rejoin within its rebalance timeout.
* **LeaveGroup** removes the members it names (by member id, or by instance id alone).

A member that fails a timeout is fenced like any member; the last consumer-protocol
member leaving, or a classic static member taking its place (an application rolled
back), turns the group back into a classic one (`consumer_migration.downgrade`).
"""

from __future__ import annotations

from kgroups.coordinator.core import consumer_heartbeat as ch
from kgroups.coordinator.core.config import MigrationPolicy
from kgroups.coordinator.core.consumer_group import (
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
)
from kgroups.coordinator.core.consumer_migration import (
    downgrade,
    metadata_version,
    subscription_of,
)
from kgroups.coordinator.core.context import Core, rebalance_key
from kgroups.coordinator.core.effects import RebalanceReason
from kgroups.coordinator.core.group_configs import group_config
from kgroups.coordinator.core.model import CONSUMER_PROTOCOL_TYPE
from kgroups.coordinator.core.msg_group import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeavingMember,
    LeftMember,
    RequestContext,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kgroups.coordinator.core.reconciliation import FREE, MemberState
from kgroups.protocol.consumer import Assignment, ConsumerProtocolError, encode_assignment
from kgroups.protocol.errors import ErrorCode, GroupError

MEMBER_ID_REQUIRED_FROM = 4
"""JoinGroup versions from which a new dynamic member must rejoin with its id (KIP-394)."""


def _inconsistent(message: str) -> GroupError:
    return GroupError(ErrorCode.inconsistent_group_protocol, message)


# -- JoinGroup ------------------------------------------------------------------------------


def join(core: Core, ctx: RequestContext, req: JoinGroupRequest, group: ConsumerGroup) -> None:
    """A classic member's JoinGroup to a consumer group, answered at once."""
    try:
        answer = _join(core, ctx, req, group)
    except GroupError as err:
        # MEMBER_ID_REQUIRED carries the id to rejoin with (nothing is kept of it here).
        given = err.message if err.code is ErrorCode.member_id_required else req.member_id
        answer = JoinGroupResponse(error=err.code, member_id=given or "")
    core.out.reply(ctx.ref, answer)


def _join(
    core: Core, ctx: RequestContext, req: JoinGroupRequest, group: ConsumerGroup
) -> JoinGroupResponse:
    if core.config.group_consumer_migration_policy is MigrationPolicy.DISABLED:
        raise _inconsistent("The migration policy keeps classic members out of consumer groups.")
    if req.protocol_type != CONSUMER_PROTOCOL_TYPE or not req.protocols:
        raise _inconsistent(f"Group {group.group_id} is a consumer group.")
    if not _shares_a_protocol(group, req):
        raise _inconsistent("The member supports no protocol every classic member supports.")
    try:
        subscription = subscription_of([(p.name, p.metadata) for p in req.protocols])
    except ConsumerProtocolError as exc:
        raise _inconsistent(f"The member's subscription does not parse: {exc}.") from None
    member, replaced = _member(core, ctx, req, group)
    owned = {t: ps for t, ps in subscription.owned.items() if ps}
    classic = ClassicMetadata(req.session_timeout_ms, req.protocols)
    topics = tuple(sorted(set(subscription.topics)))

    def update(m: ConsumerMember) -> None:
        m.instance_id = req.group_instance_id
        m.rack_id = subscription.rack
        m.client_id, m.client_host = ctx.client_id, ctx.client_host
        m.subscribed_topic_names, m.subscribed_topic_regex = topics, None
        m.rebalance_timeout_ms = req.rebalance_timeout_ms
        m.server_assignor = None
        m.classic = classic

    before = None if replaced is None else (replaced.subscribed_topic_names,
                                            replaced.subscribed_topic_regex)  # fmt: skip
    ch.apply(core, group, member, replaced, update, owned=owned)
    if replaced is not None and replaced.classic is None:
        # A rolling restart back to the classic protocol: if this member replaced the last
        # consumer-protocol one, the group is a classic group again.
        resubscribed = before != (member.subscribed_topic_names, member.subscribed_topic_regex)
        downgrade(core, group, resubscribed=resubscribed)
    if core.consumer_groups.get(group.group_id) is group:
        _arm(core, group, member, RebalanceReason.SYNC_TIMEOUT)
    return JoinGroupResponse(
        generation_id=member.epoch,
        protocol_type=CONSUMER_PROTOCOL_TYPE,
        protocol_name=classic.protocol_name,
        member_id=member.member_id,
    )


def _shares_a_protocol(group: ConsumerGroup, req: JoinGroupRequest) -> bool:
    """Kafka's `supportsClassicProtocols`: some protocol the joining member names is
    named by every other classic member."""
    names = {p.name for p in req.protocols}
    for m in group.members.values():
        if m.classic is not None and m.member_id != req.member_id:
            names &= {p.name for p in m.classic.protocols}
    return bool(names)


def _member(
    core: Core, ctx: RequestContext, req: JoinGroupRequest, group: ConsumerGroup
) -> tuple[ConsumerMember, ConsumerMember | None]:
    """(the joining member, the static member it replaces, if any); MEMBER_ID_REQUIRED
    for a new dynamic member of JoinGroup v4+, which rejoins with the id it is given."""
    instance = req.group_instance_id
    if req.member_id:
        member = group.members.get(req.member_id)
        if member is not None and member.classic is None:
            raise GroupError(ErrorCode.unknown_member_id)  # a consumer-protocol member's id
        if instance is not None and group.static_members.get(instance, req.member_id) != (
            req.member_id
        ):
            raise GroupError(ErrorCode.fenced_instance_id)
        if member is not None:
            return member, None
        # The id it was given with MEMBER_ID_REQUIRED (or one fenced since): a new member,
        # as Kafka makes it (nothing was kept of the first join).
        new_id = req.member_id
    else:
        new_id = core.new_member_id(instance or ctx.client_id)
    if instance is not None:
        existing_id = group.static_members.get(instance)
        existing = None if existing_id is None else group.members.get(existing_id)
        if existing is not None:
            # A static member back under a new id takes the old one's place and partitions.
            return ch.successor(existing, new_id), existing
    elif not req.member_id and ctx.api_version >= MEMBER_ID_REQUIRED_FROM:
        raise GroupError(ErrorCode.member_id_required, new_id)
    if len(group.members) >= group_config(core, group.group_id).group_max_size:
        raise GroupError(ErrorCode.group_max_size_reached)
    return ConsumerMember(new_id), None


# -- SyncGroup ------------------------------------------------------------------------------


def sync(core: Core, ctx: RequestContext, req: SyncGroupRequest, group: ConsumerGroup) -> None:
    try:
        answer = _sync(core, req, group)
    except GroupError as err:
        answer = SyncGroupResponse(err.code)
    core.out.reply(ctx.ref, answer)


def _sync(core: Core, req: SyncGroupRequest, group: ConsumerGroup) -> SyncGroupResponse:
    member = _classic_member(group, req.member_id, req.group_instance_id)
    assert member.classic is not None
    if req.generation_id != member.epoch:
        raise GroupError(ErrorCode.illegal_generation)
    name = member.classic.protocol_name
    if req.protocol_type not in (None, CONSUMER_PROTOCOL_TYPE) or req.protocol_name not in (
        None,
        name,
    ):
        raise GroupError(ErrorCode.inconsistent_group_protocol)
    if group.assignment_epoch > member.epoch and (
        member.current.state is not MemberState.UNREVOKED_PARTITIONS
    ):
        raise GroupError(ErrorCode.rebalance_in_progress)
    core.timers.cancel(rebalance_key(group.group_id, member.member_id))
    ch.schedule_session(core, group, member)
    partitions = {t: tuple(sorted(ps)) for t, ps in sorted(member.current.assigned.items()) if ps}
    version = metadata_version(member.classic)
    assignment = encode_assignment(Assignment(partitions, None, version))
    return SyncGroupResponse(
        protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=name, assignment=assignment
    )


# -- Heartbeat ------------------------------------------------------------------------------


def heartbeat(core: Core, req: HeartbeatRequest, group: ConsumerGroup) -> ErrorCode:
    try:
        member = _classic_member(group, req.member_id, req.group_instance_id)
    except GroupError as err:
        return err.code
    if req.generation_id != member.epoch:
        return ErrorCode.illegal_generation
    ch.schedule_session(core, group, member)
    if must_rejoin(group, member):
        key = rebalance_key(group.group_id, member.member_id)
        if key not in core.timers:
            _arm(core, group, member, RebalanceReason.REVOCATION_TIMEOUT)
        return ErrorCode.rebalance_in_progress
    return ErrorCode.none


def must_rejoin(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Whether a classic member has something to do that only a rejoin can bring: a
    newer target (or one due: the group epoch moved, and a classic member's heartbeat
    computes none; a group of classic members only would otherwise never get one),
    partitions to release, or partitions it waits for now free."""
    current = member.current
    if current.epoch < group.group_epoch:
        return True
    if current.state is MemberState.UNREVOKED_PARTITIONS:
        return True
    if current.state is MemberState.UNRELEASED_PARTITIONS:
        for topic, partitions in member.target.items():
            held = current.assigned.get(topic, {})
            for p in partitions:
                if p not in held and group.holder_epoch(topic, p) == FREE:
                    return True
    return False


# -- LeaveGroup ------------------------------------------------------------------------------


def leave(core: Core, ctx: RequestContext, req: LeaveGroupRequest, group: ConsumerGroup) -> None:
    results = tuple(_leave_one(core, group, m) for m in req.members)
    core.out.reply(ctx.ref, LeaveGroupResponse(members=results))


def _leave_one(core: Core, group: ConsumerGroup, leaving: LeavingMember) -> LeftMember:
    member_id, instance_id = leaving.member_id, leaving.group_instance_id
    if member_id == "":
        # An administrator removing a static member by its instance id (KIP-345).
        target = group.static_members.get(instance_id) if instance_id is not None else None
    else:
        target = member_id
        if instance_id is not None and group.static_members.get(instance_id) != member_id:
            code = (
                ErrorCode.unknown_member_id
                if instance_id not in group.static_members
                else ErrorCode.fenced_instance_id
            )
            return LeftMember(member_id, instance_id, code)
    live = core.consumer_groups.get(group.group_id)
    if target is None or live is not group or target not in group.members:
        # (An earlier leave of this request may have turned the group classic again.)
        return LeftMember(member_id, instance_id, ErrorCode.unknown_member_id)
    ch.fence(core, group, target, RebalanceReason.MEMBER_LEFT)
    return LeftMember(member_id, instance_id)


# -- shared ---------------------------------------------------------------------------------


def _classic_member(
    group: ConsumerGroup, member_id: str, instance_id: str | None
) -> ConsumerMember:
    """The classic member a SyncGroup or Heartbeat names: UNKNOWN_MEMBER_ID when there is
    none (or it speaks the consumer protocol), FENCED_INSTANCE_ID when its instance id now
    belongs to another member."""
    if instance_id is not None:
        owner = group.static_members.get(instance_id)
        if owner is None:
            raise GroupError(ErrorCode.unknown_member_id)
        if owner != member_id:
            raise GroupError(ErrorCode.fenced_instance_id)
    member = group.members.get(member_id)
    if member is None or member.classic is None:
        raise GroupError(ErrorCode.unknown_member_id)
    return member


def _arm(core: Core, group: ConsumerGroup, member: ConsumerMember, why: RebalanceReason) -> None:
    """The classic member has its rebalance timeout to send SyncGroup (after its join) or
    to rejoin (after being told to); otherwise it is fenced."""
    group_id, member_id = group.group_id, member.member_id

    def expire(now_ms: int) -> None:
        live = core.consumer_groups.get(group_id)
        if live is not None and member_id in live.members:
            ch.fence(core, live, member_id, why)

    deadline = core.now_ms + max(0, member.rebalance_timeout_ms)
    core.timers.schedule(rebalance_key(group_id, member_id), deadline, expire)
