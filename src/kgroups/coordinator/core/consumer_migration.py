"""A live group moving between the classic protocol and the consumer protocol (KIP-848).

Kafka lets an application roll from `group.protocol=classic` to `consumer` (and back)
without stopping, so one group holds members of both protocols for a while:

* **upgrade**: the first consumer-protocol member joining a classic group with members
  turns it into a consumer group (`upgraded`, `retire`). Every classic member becomes a
  member of it at the classic generation, keeping its subscription and the partitions of
  its last assignment as both its current and its target assignment, so nothing moves
  until the newcomer's join moves the group epoch; their parked JoinGroup and SyncGroup
  are answered REBALANCE_IN_PROGRESS and they carry on as classic members of the consumer
  group (`consumer_classic`). Refused (GROUP_ID_NOT_FOUND, as Kafka answers) when the
  policy does not allow it, the group is not a consumer-protocol one, it is too large, or
  a member's assignment carries assignor data the server-side assignors would lose (a
  custom assignor).
* **downgrade**: when the last consumer-protocol member leaves and classic members stay,
  or a classic static member takes its place, the group becomes a classic group again
  (`downgrade`): Stable at the group epoch, then a rebalance so the classic protocol
  assigns again (not after a replacement that changed nothing: same subscription, every
  member at its target). Each member's assignment in it is
  what the member may still be using (its assigned partitions and those it has yet to
  release), where Kafka writes its target: the record is persisted before the rebalance,
  and if the coordinator restarts in between and a consumer-protocol member then joins,
  the upgrade takes those assignments as what each member owns, so they must be (a
  target can name a partition another member still uses: the test's simulation found
  that schedule).

An empty group converts either way whatever the policy (`consumer_heartbeat._group`,
`join.handle_join`).
"""

from __future__ import annotations

from kgroups.coordinator.core import ownership
from kgroups.coordinator.core import rebalance as rb
from kgroups.coordinator.core.consumer_group import (
    INITIAL_EPOCH,
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
)
from kgroups.coordinator.core.context import (
    Core,
    heartbeat_key,
    join_key,
    rebalance_key,
    session_key,
    sync_key,
)
from kgroups.coordinator.core.effects import RebalanceReason
from kgroups.coordinator.core.group_configs import group_config
from kgroups.coordinator.core.model import CONSUMER_PROTOCOL_TYPE, Group, Member
from kgroups.coordinator.core.msg_group import JoinGroupResponse, SyncGroupResponse
from kgroups.coordinator.core.reconciliation import MemberAssignment, MemberState
from kgroups.coordinator.core.states import GroupState
from kgroups.protocol.consumer import (
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from kgroups.protocol.errors import ErrorCode, GroupError


def _refused(group_id: str, why: str) -> GroupError:
    return GroupError(
        ErrorCode.group_id_not_found,
        f"Cannot upgrade classic group {group_id} to a consumer group: {why}.",
    )


def subscription_of(protocols: tuple[tuple[str, bytes], ...] | list[tuple[str, bytes]],
                    name: str | None = None) -> Subscription:  # fmt: skip
    """A classic member's subscription: the metadata of protocol `name` (its first when
    None, as Kafka reads it). ConsumerProtocolError when it is not one."""
    chosen = next((md for n, md in protocols if n == name), None) if name else None
    if chosen is None:
        if not protocols:
            raise ConsumerProtocolError("no protocol")
        chosen = protocols[0][1]
    return decode_subscription(chosen)


def upgraded(core: Core, classic: Group) -> ConsumerGroup:
    """The consumer group `classic` becomes when a consumer-protocol member joins it
    (nothing changes yet: `retire` and `consumer_heartbeat._admit` make it so)."""
    group_id = classic.group_id
    if not core.config.group_consumer_migration_policy.upgrades:
        raise _refused(group_id, "the migration policy does not allow upgrades")
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
        raise _refused(group_id, f"its protocol type is {classic.protocol_type!r}")
    if len(classic.members) >= group_config(core, group_id).group_max_size:
        raise _refused(group_id, "the group is full")
    epoch = max(classic.generation_id, INITIAL_EPOCH)
    group = ConsumerGroup(group_id, epoch, epoch, 0, owner=classic.owner)
    for member in classic.members.values():
        protocols = tuple((p.name, p.metadata) for p in member.protocols)
        try:
            subscription = subscription_of(protocols, classic.protocol_name)
            assignment = decode_assignment(member.assignment)
        except ConsumerProtocolError as exc:
            raise _refused(group_id, f"member {member.member_id} sent {exc}") from None
        if assignment.user_data:
            raise _refused(group_id, "an unsupported custom assignor is in use")
        owned = {
            t: dict.fromkeys(ps, epoch)
            for t, ps in assignment.partitions.items()
            if t in core.topics and ps
        }
        if any(group.holders.get((t, p)) for t, ps in owned.items() for p in ps):
            raise _refused(group_id, "two members were assigned one partition")
        group.add(
            ConsumerMember(
                member.member_id,
                member.group_instance_id,
                subscription.rack,
                member.client_id,
                member.client_host,
                tuple(sorted(set(subscription.topics))),
                None,
                member.rebalance_timeout_ms,
                None,
                MemberAssignment(epoch, epoch, MemberState.STABLE, owned, {}),
                {t: tuple(sorted(ps)) for t, ps in owned.items()},
                classic=ClassicMetadata(member.session_timeout_ms, member.protocols),
            )
        )
    return group


def retire(core: Core, classic: Group) -> None:
    """The classic group is gone (its consumer group takes its place): what its members
    had parked is answered REBALANCE_IN_PROGRESS (they join again) and its timers stop."""
    for member in classic.members.values():
        if member.awaiting_join is not None:
            core.out.reply(
                member.awaiting_join,
                JoinGroupResponse(ErrorCode.rebalance_in_progress, member_id=member.member_id),
            )
            member.awaiting_join = None
        if member.awaiting_sync is not None:
            core.out.reply(member.awaiting_sync, SyncGroupResponse(ErrorCode.rebalance_in_progress))
            member.awaiting_sync = None
    for member_id in [*classic.members, *classic.pending_join]:
        core.timers.cancel(heartbeat_key(classic.group_id, member_id))
    core.timers.cancel(join_key(classic.group_id))
    core.timers.cancel(sync_key(classic.group_id))


def downgrade(core: Core, group: ConsumerGroup, *, resubscribed: bool | None = None) -> bool:
    """After a member left (`resubscribed` None), or after a classic static member took
    the place of a consumer-protocol one (Kafka's
    `validateOnlineDowngradeWithReplacedMember`): if every member now speaks the classic
    protocol (and the policy and `group.max.size` allow), the group becomes a classic
    group again. True when it did. It then rebalances, unless a replacement left it as it
    was: the newcomer subscribed as its predecessor had (`resubscribed` False) and every
    member holds its target (Kafka's KAFKA-19546 and KAFKA-20273): the newcomer then
    syncs and gets its predecessor's partitions, and nobody else is disturbed."""
    members = list(group.members.values())
    if not members or any(m.classic is None for m in members):
        return False
    if not core.config.group_consumer_migration_policy.downgrades:
        return False
    if len(members) > group_config(core, group.group_id).group_max_size:
        return False
    classic = Group(
        group.group_id,
        state=GroupState.STABLE,
        state_timestamp_ms=core.now_ms,
        generation_id=group.group_epoch,
        protocol_type=CONSUMER_PROTOCOL_TYPE,
        owner=group.owner,
    )
    for m in members:
        assert m.classic is not None
        version = metadata_version(m.classic)
        assignment = encode_assignment(Assignment(_holding(m), None, version))
        classic.add(
            Member(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.classic.session_timeout_ms,
                CONSUMER_PROTOCOL_TYPE,
                m.classic.protocols,
                assignment,
            ),
            None,
        )
        core.timers.cancel(session_key(group.group_id, m.member_id))
        core.timers.cancel(rebalance_key(group.group_id, m.member_id))
    classic.protocol_name = classic.select_protocol()
    classic.subscribed_topics = classic.compute_subscribed_topics()
    ownership.put(core, classic)
    rb.persist(core, classic)
    for member in classic.members.values():
        rb.reschedule_heartbeat(core, classic, member)
    if resubscribed is None:
        why = "the last consumer-protocol member left: the group is a classic group again"
    elif resubscribed:
        why = ("a classic static member with another subscription replaced the last "
               "consumer-protocol member: the group is a classic group again")  # fmt: skip
    elif not _reconciled(group):
        why = ("a classic static member replaced the last consumer-protocol member before "
               "the group reached its target: the group is a classic group again")  # fmt: skip
    else:
        return True
    rb.prepare_rebalance(core, classic, why, RebalanceReason.PROTOCOL_MIGRATION)
    return True


def _reconciled(group: ConsumerGroup) -> bool:
    """Every member holds its target (asked only after a replacement)."""
    return group.group_epoch == group.assignment_epoch and all(
        _holding(m) == {t: ps for t, ps in sorted(m.target.items()) if ps}
        for m in group.members.values()
    )


def _holding(member: ConsumerMember) -> dict[str, tuple[int, ...]]:
    """What the member may still be using: its assigned partitions and those it has yet to
    release (disjoint from every other member's, by the one-holder rule)."""
    held: dict[str, set[int]] = {}
    for partitions in (member.current.assigned, member.current.revoking):
        for topic, ps in partitions.items():
            held.setdefault(topic, set()).update(ps)
    return {t: tuple(sorted(ps)) for t, ps in sorted(held.items()) if ps}


def metadata_version(classic: ClassicMetadata) -> int:
    """The ConsumerProtocol version a classic member speaks (its first protocol's
    subscription version): the assignments it is given are written in it."""
    try:
        return subscription_of([(p.name, p.metadata) for p in classic.protocols]).version
    except ConsumerProtocolError:
        return 0
