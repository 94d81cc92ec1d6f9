"""ConsumerGroupDescribe (API 69): a consumer-protocol group as admin tools show it.

What `kafka-consumer-groups --describe` and Kafka's admin client read for groups of the
consumer protocol (DescribeGroups answers them as Dead, as Kafka does): the group's state
and epochs, the assignor it uses, and per member its epoch, subscription, what it holds
(assigned and still being revoked, KAFKA-20431) and its target. An unknown group, or a
classic one, is GROUP_ID_NOT_FOUND; an empty id INVALID_GROUP_ID.
"""

from __future__ import annotations

from kgroups.coordinator.core import routing
from kgroups.coordinator.core.authz import authorized_operations, group_allowed
from kgroups.coordinator.core.consumer_group import ConsumerGroup, ConsumerMember
from kgroups.coordinator.core.consumer_heartbeat import assignment_of
from kgroups.coordinator.core.context import Core
from kgroups.coordinator.core.msg_consumer import (
    CLASSIC_MEMBER,
    CONSUMER_MEMBER,
    ConsumerDescribeRequest,
    ConsumerDescribeResponse,
    DescribedConsumerGroup,
    DescribedConsumerMember,
)
from kgroups.coordinator.core.msg_group import RequestContext
from kgroups.protocol.errors import ErrorCode
from kgroups.security.actions import Operation, ResourceType


def handle_describe(core: Core, ctx: RequestContext, req: ConsumerDescribeRequest) -> None:
    out: list[DescribedConsumerGroup] = []
    for group_id in req.group_ids:
        if not group_allowed(ctx, Operation.DESCRIBE, group_id):
            out.append(DescribedConsumerGroup(group_id, ErrorCode.group_authorization_failed,
                                              "Group authorization failed."))  # fmt: skip
            continue
        if not group_id:
            out.append(DescribedConsumerGroup(group_id, ErrorCode.invalid_group_id))
            continue
        elsewhere = routing.status(core, group_id)
        if elsewhere is not ErrorCode.none:
            out.append(DescribedConsumerGroup(group_id, elsewhere))
            continue
        group = core.consumer_groups.get(group_id)
        if group is None:
            message = (f"Group {group_id} is not a consumer group." if group_id in core.groups
                       else f"Group {group_id} not found.")  # fmt: skip
            out.append(DescribedConsumerGroup(group_id, ErrorCode.group_id_not_found, message))
            continue
        described = describe_consumer_group(core, group)
        if req.include_authorized_operations:
            ops = authorized_operations(ctx, ResourceType.GROUP, group_id)
            described = DescribedConsumerGroup(
                described.group_id, state=described.state, group_epoch=described.group_epoch,
                assignment_epoch=described.assignment_epoch,
                assignor_name=described.assignor_name, members=described.members,
                authorized_operations=ops,
            )  # fmt: skip
        out.append(described)
    core.out.reply(ctx.ref, ConsumerDescribeResponse(tuple(out)))


def _member(core: Core, member: ConsumerMember) -> DescribedConsumerMember:
    held: dict[str, set[int]] = {}
    for partitions in (member.current.assigned, member.current.revoking):
        for topic, ps in partitions.items():
            held.setdefault(topic, set()).update(ps)
    return DescribedConsumerMember(
        member_id=member.member_id,
        instance_id=member.instance_id,
        rack_id=member.rack_id,
        member_epoch=member.epoch,
        client_id=member.client_id,
        client_host=member.client_host,
        subscribed_topic_names=member.subscribed_topic_names,
        subscribed_topic_regex=member.subscribed_topic_regex,
        assignment=assignment_of(core, held),
        target_assignment=assignment_of(core, member.target),
        member_type=CONSUMER_MEMBER if member.classic is None else CLASSIC_MEMBER,
    )


def describe_consumer_group(core: Core, group: ConsumerGroup) -> DescribedConsumerGroup:
    """The ConsumerGroupDescribe view of a live group (also for tests and the operator)."""
    return DescribedConsumerGroup(
        group_id=group.group_id,
        state=group.state.value,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=group.preferred_assignor(),
        members=tuple(_member(core, m) for m in group.members.values()),
    )
