"""ConsumerGroupHeartbeat (API 68): Kafka 4's consumer protocol, one member at a time.

A member joins, stays and leaves with this one request; there is no join phase and no
barrier. Each heartbeat, in Kafka's order (`GroupMetadataManager.consumerGroupHeartbeat`):

1. the request is checked on its own (`validate`: INVALID_REQUEST, UNSUPPORTED_ASSIGNOR),
   before any group is touched; epoch -1 (leave) and -2 (a static member leaving for a
   while) go to `leave`;
2. the group is found or, at epoch 0, created (an empty classic group of the same id
   becomes a consumer group; a classic group with members answers GROUP_ID_NOT_FOUND);
3. the member is found or created and its epoch checked (FENCED_MEMBER_EPOCH for one it
   cannot have; a lost response's previous epoch is tolerated; epoch 0 is always a
   rejoin, KAFKA-19233), static members by instance id (UNRELEASED_INSTANCE_ID while
   the old one has not left with -2, FENCED_INSTANCE_ID for another member's id);
4. a change of subscription or preferred assignor bumps the group epoch, and so does a
   change of the subscribed topics (created, grown, deleted: `topics_changed`);
5. the target assignment is computed again if the group epoch passed the assignment's
   (`server_assignors`), and the member is moved one step toward its share of it
   (`reconciliation`);
6. its session timer starts again; its rebalance timer runs while it must revoke;
7. it is told when to heartbeat next: the group's interval, or a short one while it waits
   for partitions others are releasing (kgroups' own; Kafka always answers the interval).

The answer's assignment is present when the member (re)joined, sent its whole state, or
its assigned partitions changed; it is what the member may use now, so a revocation is
told by leaving partitions out. Everything a heartbeat changed is persisted in one group
snapshot before the answer leaves; a refused heartbeat changes nothing (not even the
member's session).
"""

from __future__ import annotations

import hashlib
import uuid
import zlib
from collections.abc import Callable, Collection, Mapping

from kgroups.coordinator.core import consumer_migration as migration
from kgroups.coordinator.core import ownership
from kgroups.coordinator.core.authz import group_allowed, topic_allowed
from kgroups.coordinator.core.config import CoordinatorConfig
from kgroups.coordinator.core.consumer_group import (
    DEFAULT_ASSIGNORS,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerGroupState,
    ConsumerMember,
)
from kgroups.coordinator.core.context import Core, rebalance_key, session_key
from kgroups.coordinator.core.effects import (
    MemberReconciled,
    RebalanceCompleted,
    RebalanceReason,
    RebalanceStarted,
    SessionExpired,
    TargetComputed,
)
from kgroups.coordinator.core.group_configs import group_config
from kgroups.coordinator.core.model import MEMBER_RECORD_OVERHEAD
from kgroups.coordinator.core.msg_consumer import (
    AssignedTopic,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResponse,
    OwnedTopics,
    SteadyAnswer,
)
from kgroups.coordinator.core.msg_group import RequestContext
from kgroups.coordinator.core.patterns import InvalidPattern, whole_name_matcher
from kgroups.coordinator.core.reconciliation import (
    MemberAssignment,
    MemberState,
    reconcile,
)
from kgroups.coordinator.core.records import GroupRecord
from kgroups.coordinator.core.server_assignors import (
    AssignmentMember,
    range_assignment,
    uniform_assignment,
)
from kgroups.protocol.errors import ErrorCode, GroupError
from kgroups.security.actions import Operation

GENERATED_MEMBER_ID_FROM = 1
"""From v1 the member generates its id (KIP-1082); v0 may leave it to the coordinator."""


def handle_consumer_heartbeat(
    core: Core, ctx: RequestContext, req: ConsumerHeartbeatRequest
) -> None:
    if ctx.denied:
        if not group_allowed(ctx, Operation.READ, req.group_id):
            core.out.reply(
                ctx.ref,
                ConsumerHeartbeatResponse(
                    ErrorCode.group_authorization_failed, "Group authorization failed."
                ),
            )
            return
        names = req.subscribed_topic_names or ()
        if any(not topic_allowed(ctx, Operation.DESCRIBE, name) for name in names):
            core.out.reply(
                ctx.ref,
                ConsumerHeartbeatResponse(
                    ErrorCode.topic_authorization_failed, "Topic authorization failed."
                ),
            )
            return
    try:
        validate(req, ctx.api_version)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            answer = leave(core, req)
        else:
            answer = _heartbeat(core, ctx, req)
    except GroupError as err:
        answer = ConsumerHeartbeatResponse(err.code, err.message)
    core.out.reply(ctx.ref, answer)


def _invalid(message: str) -> GroupError:
    return GroupError(ErrorCode.invalid_request, message)


def validate(req: ConsumerHeartbeatRequest, version: int) -> None:
    """Kafka's checks of the request alone (`throwIfConsumerGroupHeartbeatRequestIsInvalid`)."""
    if not req.member_id and (
        version >= GENERATED_MEMBER_ID_FROM or req.member_epoch > 0 or req.member_epoch == -1
    ):
        raise _invalid("MemberId can't be empty.")
    if not req.group_id.strip():
        raise GroupError(ErrorCode.invalid_request, "GroupId can't be empty.")
    if req.instance_id is not None and not req.instance_id.strip():
        raise _invalid("InstanceId can't be empty.")
    if req.rack_id is not None and not req.rack_id.strip():
        raise _invalid("RackId can't be empty.")
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise _invalid("RebalanceTimeoutMs must be provided in first request.")
        if req.owned is None or any(ps for _, ps in req.owned):
            raise _invalid("TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise _invalid(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
            )
    elif req.member_epoch == STATIC_LEAVE_EPOCH:
        if req.instance_id is None:
            raise _invalid("InstanceId can't be null.")
    elif req.member_epoch < STATIC_LEAVE_EPOCH:
        raise _invalid(f"MemberEpoch is invalid: {req.member_epoch}.")
    if req.server_assignor is not None and req.server_assignor not in DEFAULT_ASSIGNORS:
        raise GroupError(
            ErrorCode.unsupported_assignor,
            f"ServerAssignor {req.server_assignor} is not supported. "
            f"Supported assignors: {', '.join(DEFAULT_ASSIGNORS)}.",
        )


def steady(
    core: Core, req: ConsumerHeartbeatRequest, client_id: str, client_host: str
) -> SteadyAnswer | None:
    """The answer to a heartbeat that changes nothing (most of them: a member at the
    group's assignment epoch with nothing to do, saying nothing new), with its session
    pushed back; None when it needs the whole handling (`handle_consumer_heartbeat`),
    which would answer it the same way."""
    if (
        req.member_epoch <= 0
        or req.owned is not None
        or req.subscribed_topic_names is not None
        or req.subscribed_topic_regex is not None
        or req.server_assignor is not None
        or req.rebalance_timeout_ms != -1
        or req.rack_id is not None
    ):
        return None
    group = core.consumer_groups.get(req.group_id)
    member = None if group is None else group.members.get(req.member_id)
    if group is None or member is None or member.epoch != req.member_epoch:
        return None
    if req.instance_id is not None and req.instance_id != member.instance_id:
        return None
    if (member.client_id, member.client_host) != (client_id, client_host):
        return None
    if group.group_epoch != group.assignment_epoch or member.member_id in group.unreconciled:
        return None
    if group.hashed is None or group.hashed[0] != (
        core.topics_version,
        group.subscriptions_version,
    ):
        return None  # a topic changed since: the group's epoch may have to move
    config = group_config(core, group.group_id)
    timeout = _session_timeout(config, member)
    # The session pushed back (the armed timer's action is this member's already).
    before = core.timers.extend(
        session_key(group.group_id, member.member_id), core.now_ms + timeout
    )
    if before is None:
        return None  # no session armed, or one that ends later (a shorter timeout now)
    interval = _told(group, member.member_id, config, core.now_ms, before - timeout)
    return SteadyAnswer(member.member_id, member.epoch, interval)


# -- the regular heartbeat -----------------------------------------------------------------


def _not_found(group_id: str) -> GroupError:
    return GroupError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")


def _group(core: Core, ctx: RequestContext, req: ConsumerHeartbeatRequest) -> ConsumerGroup:
    """The group, or at epoch 0 a new one (not yet in `core`: `_admit` puts it there)."""
    group = core.consumer_groups.get(req.group_id)
    if group is not None:
        return group
    if req.member_epoch != 0:
        raise _not_found(req.group_id)
    classic = core.groups.get(req.group_id)
    if classic is not None and classic.members:
        # A consumer-protocol member joins a live classic group: it is upgraded online.
        upgraded = migration.upgraded(core, classic)
        upgraded.metadata_hash = topics_hash(core, upgraded)
        return upgraded
    if classic is None and not ownership.may_create(core, ctx.principal):
        raise GroupError(
            ErrorCode.group_max_size_reached, "The principal has created as many groups as it may."
        )
    owner = classic.owner if classic is not None else ownership.owner_of(ctx.principal)
    return ConsumerGroup(req.group_id, owner=owner)


def _admit(core: Core, group: ConsumerGroup) -> None:
    """A group made by `_group` joins the coordinator's, replacing a classic group of the
    same id (its committed offsets stay: they are the group id's); the classic members
    it took over start their sessions."""
    if core.consumer_groups.get(group.group_id) is not group:
        classic = ownership.drop(core, group.group_id)
        if classic is not None:
            migration.retire(core, classic)
        ownership.put_consumer(core, group)
        for member in group.members.values():
            schedule_session(core, group, member)


def _compile(regex: str) -> Callable[[str], bool]:
    try:
        return whole_name_matcher(regex)
    except InvalidPattern as exc:
        raise GroupError(
            ErrorCode.invalid_regular_expression,
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}.",
        ) from None


def subscribed_topics(core: Core, member: ConsumerMember) -> frozenset[str]:
    """The existing topics the member subscribes to: by name, and by its regex (matched
    whole, as Kafka matches it)."""
    key = (core.topics_version, member.subscribed_topic_names, member.subscribed_topic_regex)
    if member.resolved is not None and member.resolved[0] == key:
        return member.resolved[1]
    names = {n for n in member.subscribed_topic_names if n in core.topics}
    if member.subscribed_topic_regex:
        matches = _compile(member.subscribed_topic_regex)
        names.update(name for name in core.topics if matches(name))
    member.resolved = (key, frozenset(names))
    return member.resolved[1]


def topics_hash(core: Core, group: ConsumerGroup) -> int:
    """A hash of every topic the group subscribes to (id, name, partition count): Kafka's
    group metadata hash, which moves when one is created, grown or deleted."""
    key = (core.topics_version, group.subscriptions_version)
    if group.hashed is not None and group.hashed[0] == key:
        return group.hashed[1]
    topics: set[str] = set()
    for member in group.members.values():
        topics |= subscribed_topics(core, member)
    value = 0
    if topics:
        digest = hashlib.blake2b(digest_size=8)
        for name in sorted(topics):
            info = core.topics[name]
            digest.update(f"{info.topic_id}\0{name}\0{info.partitions}\0".encode())
        value = int.from_bytes(digest.digest(), "big", signed=True)
    group.hashed = (key, value)
    return value


def _heartbeat(
    core: Core, ctx: RequestContext, req: ConsumerHeartbeatRequest
) -> ConsumerHeartbeatResponse:
    group = _group(core, ctx, req)
    settings = group_config(core, group.group_id)
    member_id = req.member_id or str(uuid.uuid4())
    known = member_id in group.members or (
        req.instance_id is not None and req.instance_id in group.static_members
    )
    if not known and len(group.members) >= settings.group_max_size:
        raise GroupError(
            ErrorCode.group_max_size_reached,
            f"The consumer group has reached its maximum capacity of "
            f"{settings.group_max_size} members.",
        )
    if req.instance_id is None:
        member, replaced = _dynamic_member(core, group, req, member_id), None
    else:
        member, replaced = _static_member(core, group, req, member_id)
    if req.subscribed_topic_regex:
        _compile(req.subscribed_topic_regex)
    if _record_bytes(req) > core.config.max_group_record_bytes:
        # Kafka cannot append a member record past message.max.bytes either.
        raise GroupError(
            ErrorCode.unknown_server_error,
            "The member's subscription is larger than a group record may be.",
        )
    owned = None if req.owned is None else _owned_names(core, req.owned)
    if member.current.state is MemberState.UNKNOWN and (owned is None or any(owned.values())):
        raise GroupError(
            ErrorCode.fenced_member_epoch,
            "The member is in a state this coordinator does not know.",
        )
    # Nothing below refuses the request: the group and the member may change.
    before = member.current
    heard = _heard_ms(core, group, member)
    current = apply(core, group, member, replaced, lambda m: _update(m, ctx, req), owned=owned)
    full = (
        req.rebalance_timeout_ms != -1
        and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
        and req.owned is not None
    )
    tell = req.member_epoch == 0 or full or current.assigned != before.assigned
    interval = _told(group, member.member_id, settings, core.now_ms, heard)
    if current.state is MemberState.UNRELEASED_PARTITIONS:
        # Waiting for partitions others are releasing: ask again soon, so a freed
        # partition reaches it in a fraction of an interval (the server sets the pace),
        # the sooner the fewer members wait (they add at most 1,000/WAITING_MS_PER_MEMBER
        # heartbeats a second, however many they are).
        waiting = len(group.waiting) * WAITING_MS_PER_MEMBER
        floor = settings.group_consumer_waiting_heartbeat_interval_ms
        interval = min(interval, max(floor, waiting))
    return ConsumerHeartbeatResponse(
        member_id=member.member_id,
        member_epoch=member.epoch,
        heartbeat_interval_ms=interval,
        assignment=assignment_of(core, current.assigned) if tell else None,
    )


def apply(
    core: Core,
    group: ConsumerGroup,
    member: ConsumerMember,
    replaced: ConsumerMember | None,
    update: Callable[[ConsumerMember], None],
    *,
    owned: Mapping[str, Collection[int]] | None,
) -> MemberAssignment[str]:
    """A member's accepted request takes effect (a heartbeat, or a classic member's
    JoinGroup): `update` writes what it says into the member (new, or replacing the static
    member `replaced`); the group epoch moves if the subscriptions or their topics did, the
    target is computed again if due, and the member moves one step toward its share with
    `owned` what it says it owns (None: not said). Persisted if anything changed; its
    session starts again. Returns where the member stands now."""
    _admit(core, group)
    is_new = member.member_id not in group.members
    metadata = member.metadata_key()
    subscription = (member.subscribed_topic_names, member.subscribed_topic_regex)
    assignor = member.server_assignor
    preferred = group.preferred_assignor()
    update(member)
    if is_new:
        if replaced is not None:
            group.remove(replaced.member_id)
            _cancel_timers(core, group.group_id, replaced.member_id)
        group.add(member)
    changed = is_new or member.metadata_key() != metadata
    if changed:
        group.touch(member)
    resubscribed = (member.subscribed_topic_names, member.subscribed_topic_regex) != subscription
    if resubscribed or member.server_assignor != assignor:
        group.subscriptions_version += 1
    bump = resubscribed or group.preferred_assignor() != preferred
    metadata_hash = topics_hash(core, group)
    if metadata_hash != group.metadata_hash:
        group.metadata_hash = metadata_hash
        bump = True
    if bump:
        reason = RebalanceReason.MEMBER_JOINED if is_new else RebalanceReason.METADATA_CHANGED
        bump_epoch(core, group, reason)
        changed = True
    if group.group_epoch > group.assignment_epoch:
        compute_target(core, group)
        changed = True
    current = reconcile(
        member.current,
        target_epoch=group.assignment_epoch,
        target=member.target,
        subscribed=subscribed_topics(core, member),
        holder_epoch=group.holder_epoch,
        owned=owned,
        subscription_changed=resubscribed,
    )
    if current != member.current:
        was_reconciled = member.member_id not in group.unreconciled
        group.update_assignment(member, current)
        if member.classic is None:
            arm_rebalance_timer(core, group, member)
        changed = True
        if not was_reconciled and member.member_id not in group.unreconciled:
            since = group.assignment_timestamp_ms
            core.out.observations.append(MemberReconciled(group.group_id, core.now_ms - since))
    settled(core, group)
    if changed:
        core.out.persist(GroupRecord(group.group_id, group.to_value()))
    schedule_session(core, group, member)
    return current


ON_TIME = 10
"""A heartbeat within 1/ON_TIME of an interval of its member's slot is on time."""


def phased(member_id: str, now_ms: int, interval_ms: int, heard_ms: int = 0) -> int:
    """The interval to tell a member so that its heartbeats come at its own slot of each
    interval (a hash of its id), spreading a group's heartbeats evenly over the interval:
    after a rebalance answered every member at once, they would all come back together,
    and whatever happens in between waits up to a whole interval for anyone to hear of it
    (a partition freed by a leaver, a partition a joiner needs released). Spread, the
    members whose heartbeats are due first (`server_assignors`) hear of it within
    interval/members. A member on time (most heartbeats) is told the interval itself, and
    so is one whose heartbeat comes early (within half an interval of the previous one,
    `heard_ms`: an acknowledgement, or a client that heartbeats at its own pace)."""
    if (now_ms - heard_ms) * 2 < interval_ms:
        return interval_ms
    slot = zlib.crc32(member_id.encode()) % interval_ms
    late = (now_ms - slot) % interval_ms
    if late * ON_TIME <= interval_ms or (interval_ms - late) * ON_TIME <= interval_ms:
        return interval_ms
    wait = interval_ms - late
    return wait if wait * 2 >= interval_ms else wait + interval_ms


FIRST_TO_GIVE = 40
"""A member that must give up a partition to the next member to join, whenever that
comes (its target holds more than a share of the group one larger: the leaver's
partitions went to it), is told a tenth of the interval (`_told`), so that a joiner
waits a tenth of an interval for it, not up to a whole one; only while such members are
at most one in FIRST_TO_GIVE of the group (they add at most a quarter to its heartbeats;
a smaller group's joiner waits as in Kafka)."""


def _told(group: ConsumerGroup, member_id: str, config: CoordinatorConfig, now_ms: int,
          heard_ms: int) -> int:  # fmt: skip
    """The interval a member is told (the full and the hot path alike): its phase's
    (`phased`), a tenth of the interval for a member first to give (`FIRST_TO_GIVE`)."""
    interval = config.group_consumer_heartbeat_interval_ms
    told = phased(member_id, now_ms, interval, heard_ms)
    if member_id in group.first_to_give:
        return min(told, max(config.group_consumer_waiting_heartbeat_interval_ms, interval // 10))
    return told


def first_to_give(targets: Mapping[str, Mapping[str, Collection[int]]]) -> frozenset[str]:
    """The members of `targets` (member id -> topic -> partitions) that the next member to
    join takes from whatever their heartbeats' phase, if they are few enough to be told
    to heartbeat sooner (`FIRST_TO_GIVE`); none otherwise."""
    counts = {m: sum(len(ps) for ps in t.values()) for m, t in targets.items()}
    share = -(-sum(counts.values()) // (len(counts) + 1))  # with one more member
    over = frozenset(m for m, n in counts.items() if n > share)
    return over if len(over) * FIRST_TO_GIVE <= len(counts) else frozenset()


WAITING_MS_PER_MEMBER = 2
"""A waiting member's heartbeat interval grows by this much per member waiting (see
`_heartbeat`)."""


def _record_bytes(req: ConsumerHeartbeatRequest) -> int:
    """About what the member's metadata adds to its group's record."""
    names = req.subscribed_topic_names or ()
    return (MEMBER_RECORD_OVERHEAD + len(req.member_id) + len(req.instance_id or "")
            + len(req.rack_id or "") + len(req.subscribed_topic_regex or "")
            + sum(len(n) + 2 for n in names))  # fmt: skip


def _update(member: ConsumerMember, ctx: RequestContext, req: ConsumerHeartbeatRequest) -> None:
    """Kafka's `maybeUpdate*`: a None (or -1) field keeps what the member had."""
    if req.instance_id is not None:
        member.instance_id = req.instance_id
    if req.rack_id is not None:
        member.rack_id = req.rack_id
    if req.rebalance_timeout_ms != -1:
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
    if req.subscribed_topic_names is not None:
        member.subscribed_topic_names = tuple(sorted(set(req.subscribed_topic_names)))
    if req.subscribed_topic_regex is not None:
        member.subscribed_topic_regex = req.subscribed_topic_regex or None
    if req.server_assignor is not None:
        member.server_assignor = req.server_assignor
    member.client_id = ctx.client_id
    member.client_host = ctx.client_host
    member.classic = None  # a classic member rejoining with this protocol speaks it now


def _owned_names(core: Core, owned: OwnedTopics) -> dict[str, tuple[int, ...]]:
    """What a member reports owning, by topic name (ids of unknown topics are left out:
    nothing of theirs can be in its assignment)."""
    out: dict[str, tuple[int, ...]] = {}
    for topic_id, partitions in owned:
        name = core.topic_names_by_id.get(topic_id)
        if name is not None:
            out[name] = out.get(name, ()) + tuple(partitions)
    return out


def assignment_of(
    core: Core, partitions: Mapping[str, Collection[int]]
) -> tuple[AssignedTopic, ...]:
    """An assignment as the wire carries it: by topic id (topics gone are left out)."""
    out = []
    for name, ps in sorted(partitions.items()):
        info = core.topics.get(name)
        if info is not None and ps:
            out.append(AssignedTopic(info.topic_id, name, tuple(sorted(ps))))
    return tuple(out)


def _fenced(received: int, known: int) -> GroupError:
    return GroupError(
        ErrorCode.fenced_member_epoch,
        f"The consumer group member has a smaller or larger member epoch "
        f"({received}) than the one known by the group coordinator "
        f"({known}). The member must abandon all its partitions and "
        f"rejoin.",
    )


def _check_epoch(core: Core, member: ConsumerMember, req: ConsumerHeartbeatRequest) -> None:
    """Kafka's `throwIfConsumerGroupMemberEpochIsInvalid`: epoch 0 is always a rejoin
    (KAFKA-19233); an older epoch is the previous one of a member whose answer was lost,
    accepted if what it owns is part of what it has."""
    received = req.member_epoch
    if member.classic is not None and received != 0:
        # It joined with JoinGroup: it is not known to this protocol until it rejoins.
        raise GroupError(
            ErrorCode.unknown_member_id, f"Member {member.member_id} uses the classic protocol."
        )
    if received in (0, member.epoch):
        return
    if received > member.epoch or received != member.current.previous_epoch:
        raise _fenced(received, member.epoch)
    if req.owned is None:
        raise _fenced(received, member.epoch)
    assigned = member.current.assigned
    for topic, partitions in _owned_names(core, req.owned).items():
        if not set(partitions) <= assigned.get(topic, {}).keys():
            raise _fenced(received, member.epoch)
    if any(core.topic_names_by_id.get(t) is None and ps for t, ps in req.owned):
        raise _fenced(received, member.epoch)


def _dynamic_member(
    core: Core, group: ConsumerGroup, req: ConsumerHeartbeatRequest, member_id: str
) -> ConsumerMember:
    member = group.members.get(member_id)
    if member is None:
        if req.member_epoch != 0:
            raise GroupError(
                ErrorCode.unknown_member_id,
                f"Member {member_id} is not a member of group {group.group_id}.",
            )
        return ConsumerMember(member_id)
    _check_epoch(core, member, req)
    return member


def successor(existing: ConsumerMember, member_id: str) -> ConsumerMember:
    """A static member back under a new id (either protocol): a copy of the member it
    replaces, at epoch 0, with its subscription, target and partitions (Kafka's
    `getOrMaybeSubscribeStaticConsumerGroupMember`); what its request says is applied to
    it next (a classic member's JoinGroup sets its classic metadata)."""
    current = MemberAssignment(
        0, 0, MemberState.STABLE, existing.current.assigned, existing.current.revoking
    )
    return ConsumerMember(
        member_id,
        existing.instance_id,
        existing.rack_id,
        existing.client_id,
        existing.client_host,
        existing.subscribed_topic_names,
        existing.subscribed_topic_regex,
        existing.rebalance_timeout_ms,
        existing.server_assignor,
        current,
        dict(existing.target),
    )


def _static_member(
    core: Core, group: ConsumerGroup, req: ConsumerHeartbeatRequest, member_id: str
) -> tuple[ConsumerMember, ConsumerMember | None]:
    """(the member, the released static member it replaces, if any)."""
    assert req.instance_id is not None
    existing_id = group.static_members.get(req.instance_id)
    existing = None if existing_id is None else group.members.get(existing_id)
    if req.member_epoch == 0:
        if existing is None:
            return group.members.get(member_id) or ConsumerMember(member_id), None
        if existing.epoch != STATIC_LEAVE_EPOCH and existing.classic is None:
            # (A classic member's instance id is taken over at once, as in Kafka: an
            # application rolling to this protocol restarts its static members.)
            raise GroupError(
                ErrorCode.unreleased_instance_id,
                f"Static member {member_id} with instance id {req.instance_id} cannot join "
                f"the group because the instance id is owned by {existing.member_id} member.",
            )
        return successor(existing, member_id), existing
    if existing is None:
        raise GroupError(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
    if existing.member_id != member_id:
        raise GroupError(
            ErrorCode.fenced_instance_id,
            f"Static member {member_id} with instance id {req.instance_id} was "
            f"fenced by member {existing.member_id}.",
        )
    _check_epoch(core, existing, req)
    return existing, None


# -- the target assignment ------------------------------------------------------------------


def compute_target(core: Core, group: ConsumerGroup) -> None:
    """The group's target at its epoch, by its preferred assignor; each member's current
    target is what a sticky assignor keeps."""
    started = core.work_clock()
    members = [
        AssignmentMember(
            m.member_id,
            subscribed_topics(core, m),
            m.instance_id,
            m.target,
            _heard_ms(core, group, m),
        )
        for m in group.members.values()
    ]
    topics: set[str] = set()
    for am in members:
        topics |= am.topics
    partitions = {t: core.topics[t].partitions for t in topics}
    assign = range_assignment if group.preferred_assignor() == "range" else uniform_assignment
    result = assign(members, partitions)
    for member in group.members.values():
        target = dict(result.get(member.member_id, {}))
        if target != member.target:
            group.set_target(member, target)
    group.first_to_give = (
        first_to_give({m.member_id: m.target for m in group.members.values()})
        if assign is uniform_assignment
        else frozenset()
    )
    group.assignment_timestamp_ms = core.now_ms
    group.set_assignment_epoch(group.group_epoch)
    took = core.work_clock() - started
    total = sum(partitions.values())
    core.out.observations.append(TargetComputed(group.group_id, len(members), total, took))


# -- timers and leaving -------------------------------------------------------------------


def _session_ms(core: Core, group: ConsumerGroup, member: ConsumerMember) -> int:
    """The group's consumer session timeout, or a classic member's own (its JoinGroup's)."""
    return _session_timeout(group_config(core, group.group_id), member)


def _session_timeout(config: CoordinatorConfig, member: ConsumerMember) -> int:
    """`_session_ms` with the group's settings in hand (the hot path reads them once)."""
    if member.classic is not None:
        return member.classic.session_timeout_ms
    return config.group_consumer_session_timeout_ms


def _heard_ms(core: Core, group: ConsumerGroup, member: ConsumerMember) -> int:
    """When the coordinator last heard from the member: its session's start (0: never)."""
    return _heard(core, session_key(group.group_id, member.member_id),
                  _session_ms(core, group, member))  # fmt: skip


def _heard(core: Core, key: str, timeout_ms: int) -> int:
    deadline = core.timers.deadline(key)
    return 0 if deadline is None else deadline - timeout_ms


def schedule_session(core: Core, group: ConsumerGroup, member: ConsumerMember) -> int:
    """The member's session starts again: the group's consumer session timeout, or a
    classic member's own (from its JoinGroup). When it was last heard from before now
    (0: never; the hot path's `phased` wants it, at no second lookup)."""
    timeout = _session_ms(core, group, member)
    group_id, member_id = group.group_id, member.member_id
    key = session_key(group_id, member_id)
    heard = _heard(core, key, timeout)

    def expire(now_ms: int) -> None:
        live = core.consumer_groups.get(group_id)
        if live is not None and member_id in live.members:
            fence(core, live, member_id, RebalanceReason.SESSION_EXPIRED)

    core.timers.schedule(key, core.now_ms + timeout, expire)
    return heard


def arm_rebalance_timer(core: Core, group: ConsumerGroup, member: ConsumerMember) -> None:
    """While a member must revoke partitions it has `rebalance_timeout_ms` to do so at the
    epoch it is at; still there then, it is fenced."""
    key = rebalance_key(group.group_id, member.member_id)
    if member.current.state is not MemberState.UNREVOKED_PARTITIONS:
        core.timers.cancel(key)
        return
    group_id, member_id, epoch = group.group_id, member.member_id, member.epoch

    def expire(now_ms: int) -> None:
        live = core.consumer_groups.get(group_id)
        held = None if live is None else live.members.get(member_id)
        if live is not None and held is not None and held.epoch == epoch:
            fence(core, live, member_id, RebalanceReason.REVOCATION_TIMEOUT)

    core.timers.schedule(key, core.now_ms + max(0, member.rebalance_timeout_ms), expire)


def _cancel_timers(core: Core, group_id: str, member_id: str) -> None:
    core.timers.cancel(session_key(group_id, member_id))
    core.timers.cancel(rebalance_key(group_id, member_id))


def bump_epoch(core: Core, group: ConsumerGroup, reason: RebalanceReason) -> None:
    """The group epoch moves: a new target assignment is due."""
    group.group_epoch += 1
    if group.unsettled_since_ms is None:
        group.unsettled_since_ms = core.now_ms
    core.out.observations.append(RebalanceStarted(group.group_id, reason))


def settled(core: Core, group: ConsumerGroup) -> None:
    """Report a group that has just become Stable again (every member reconciled)."""
    since = group.unsettled_since_ms
    if since is not None and group.state is ConsumerGroupState.STABLE:
        group.unsettled_since_ms = None
        took = core.now_ms - since
        done = RebalanceCompleted(
            group.group_id, group.assignment_epoch, len(group.members), took, 0
        )
        core.out.observations.append(done)


def fence(core: Core, group: ConsumerGroup, member_id: str, reason: RebalanceReason) -> None:
    """Remove a member (it left, or its session or rebalance timeout passed): what it held
    is free at once, and the group epoch moves so the others share its partitions."""
    group.remove(member_id)
    _cancel_timers(core, group.group_id, member_id)
    if reason is RebalanceReason.SESSION_EXPIRED:
        core.out.observations.append(SessionExpired(group.group_id))
    if migration.downgrade(core, group):
        return
    bump_epoch(core, group, reason)
    group.metadata_hash = topics_hash(core, group)
    if not group.members:
        # Nothing to assign: the next member to join is not kept waiting (KAFKA-20442).
        group.assignment_timestamp_ms = 0
        group.set_assignment_epoch(group.group_epoch)
        group.unsettled_since_ms = None
    settled(core, group)
    core.out.persist(GroupRecord(group.group_id, group.to_value()))


def leave(core: Core, req: ConsumerHeartbeatRequest) -> ConsumerHeartbeatResponse:
    """Epoch -1: the member leaves (fenced at once). Epoch -2: a static member leaves for
    a while: it keeps its partitions (nobody else gets them) until it comes back under a
    new member id or its session ends."""
    group = core.consumer_groups.get(req.group_id)
    if group is None:
        raise _not_found(req.group_id)
    if req.instance_id is None:
        member = group.members.get(req.member_id)
        if member is None:
            raise GroupError(
                ErrorCode.unknown_member_id,
                f"Member {req.member_id} is not a member of group {group.group_id}.",
            )
    else:
        member_id = group.static_members.get(req.instance_id)
        member = None if member_id is None else group.members.get(member_id)
        if member is None:
            raise GroupError(
                ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown."
            )
        if member.member_id != req.member_id:
            raise GroupError(
                ErrorCode.fenced_instance_id,
                f"Static member {req.member_id} with instance id "
                f"{req.instance_id} was fenced by member {member.member_id}.",
            )
    if req.member_epoch == LEAVE_EPOCH:
        fence(core, group, member.member_id, RebalanceReason.MEMBER_LEFT)
    else:
        released = {t: dict.fromkeys(ps, 0) for t, ps in member.current.assigned.items()}
        group.update_assignment(
            member,
            MemberAssignment(STATIC_LEAVE_EPOCH, member.epoch, MemberState.STABLE, released, {}),
        )
        core.timers.cancel(rebalance_key(group.group_id, member.member_id))
        core.out.persist(GroupRecord(group.group_id, group.to_value()))
    return ConsumerHeartbeatResponse(member_id=req.member_id, member_epoch=req.member_epoch)
