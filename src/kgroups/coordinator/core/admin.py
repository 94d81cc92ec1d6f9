"""DescribeGroups, ListGroups and DeleteGroups: the administrative view of groups.

What `kafka-consumer-groups.sh`, KafkaAdminClient and the kgroups operator read.
Unknown groups describe as "Dead" (or GROUP_ID_NOT_FOUND from v6, KIP-1043); only Empty
groups can be deleted, and deleting one removes its committed offsets too. A group the
principal may not describe (or delete) is answered GROUP_AUTHORIZATION_FAILED, whether or
not it exists; ListGroups silently leaves such groups out unless the principal may
describe the whole cluster.
"""

from __future__ import annotations

import dataclasses

from kgroups.coordinator.core import ownership, routing
from kgroups.coordinator.core.authz import allowed, authorized_operations, group_allowed
from kgroups.coordinator.core.context import Core
from kgroups.coordinator.core.group_configs import set_overrides
from kgroups.coordinator.core.model import Group
from kgroups.coordinator.core.msg_group import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    RequestContext,
)
from kgroups.coordinator.core.offsets import delete_all_offsets
from kgroups.coordinator.core.records import GroupRecord
from kgroups.coordinator.core.states import GroupState
from kgroups.protocol.errors import ErrorCode
from kgroups.security.actions import Operation, ResourceType, cluster

GROUP_NOT_FOUND_FROM = 6
"""DescribeGroups versions that flag unknown groups with GROUP_ID_NOT_FOUND (KIP-1043)."""
AUTHORIZED_OPERATIONS_FROM = 3
"""DescribeGroups versions that can ask for each group's authorized operations (KIP-430)."""
CLASSIC = "classic"
CONSUMER = "consumer"
"""A consumer-protocol group's type, and its protocol type (Kafka's `ModernGroup`)."""


def handle_describe(core: Core, ctx: RequestContext, req: DescribeGroupsRequest) -> None:
    with_operations = (
        req.include_authorized_operations and ctx.api_version >= AUTHORIZED_OPERATIONS_FROM
    )
    described: list[DescribedGroup] = []
    for group_id in req.group_ids:
        if not group_allowed(ctx, Operation.DESCRIBE, group_id):
            refused = ErrorCode.group_authorization_failed
            described.append(DescribedGroup(group_id, "", refused))
            continue
        elsewhere = routing.status(core, group_id)
        if elsewhere is not ErrorCode.none:
            described.append(DescribedGroup(group_id, "", elsewhere))
            continue
        answer = _describe(core, ctx, group_id)
        if with_operations and answer.error is ErrorCode.none:
            # As Kafka: only groups described without error carry their operations.
            ops = authorized_operations(ctx, ResourceType.GROUP, group_id)
            answer = dataclasses.replace(answer, authorized_operations=ops)
        described.append(answer)
    core.out.reply(ctx.ref, DescribeGroupsResponse(tuple(described)))


def describe_group(group: Group) -> DescribedGroup:
    """The DescribeGroups view of a live group (also used by tests and the operator)."""
    stable = group.state is GroupState.STABLE
    protocol = group.protocol_name if stable else None
    members = tuple(
        DescribedMember(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            metadata=m.metadata(protocol) if stable else b"",
            assignment=m.assignment,
        )
        for m in group.members.values()
    )
    return DescribedGroup(
        group_id=group.group_id,
        state=group.state.value,
        protocol_type=group.protocol_type or "",
        protocol_data=(protocol or "") if stable else "",
        members=members,
        generation_id=group.generation_id,
        leader_id=group.leader_id,
    )


def _describe(core: Core, ctx: RequestContext, group_id: str) -> DescribedGroup:
    group = core.groups.get(group_id)
    if group is None or group.state is GroupState.DEAD:
        if ctx.api_version >= GROUP_NOT_FOUND_FROM:
            return DescribedGroup(
                group_id,
                GroupState.DEAD.value,
                error=ErrorCode.group_id_not_found,
                error_message=f"Group {group_id} not found.",
            )
        return DescribedGroup(group_id, GroupState.DEAD.value)
    return describe_group(group)


def handle_list(core: Core, ctx: RequestContext, req: ListGroupsRequest) -> None:
    states = {s.strip().lower() for s in req.states_filter}
    types = {t.strip().lower() for t in req.types_filter}
    # Without DESCRIBE on the cluster, only the groups the principal may describe are
    # listed; the others are left out silently, as Kafka does.
    everything = allowed(ctx, cluster(Operation.DESCRIBE))
    listed = tuple(
        ListedGroup(g.group_id, g.protocol_type or "", g.state.value, CLASSIC)
        for g in core.groups.values()
        if (not states or g.state.lower in states)
        and (not types or CLASSIC in types)
        and (everything or group_allowed(ctx, Operation.DESCRIBE, g.group_id))
    ) + tuple(
        ListedGroup(c.group_id, CONSUMER, c.state.value, CONSUMER)
        for c in core.consumer_groups.values()
        if (not states or c.state.value.lower() in states)
        and (not types or CONSUMER in types)
        and (everything or group_allowed(ctx, Operation.DESCRIBE, c.group_id))
    )
    core.out.reply(ctx.ref, ListGroupsResponse(listed))


def handle_delete(core: Core, ctx: RequestContext, req: DeleteGroupsRequest) -> None:
    results = tuple(
        (group_id, routing.status(core, group_id) or _delete(core, group_id))
        if group_allowed(ctx, Operation.DELETE, group_id)
        else (group_id, ErrorCode.group_authorization_failed)
        for group_id in req.group_ids
    )
    core.out.reply(ctx.ref, DeleteGroupsResponse(results))


def _delete(core: Core, group_id: str) -> ErrorCode:
    consumer = core.consumer_groups.get(group_id)
    if consumer is not None:
        if consumer.members:
            return ErrorCode.non_empty_group
        delete_all_offsets(core, group_id)
        ownership.drop_consumer(core, group_id)
        core.out.persist(GroupRecord(group_id, None))
        set_overrides(core, group_id, {})
        return ErrorCode.none
    group = core.groups.get(group_id)
    if group is None or group.state is GroupState.DEAD:
        return ErrorCode.group_id_not_found
    if group.state is not GroupState.EMPTY:
        return ErrorCode.non_empty_group
    delete_all_offsets(core, group_id)
    group.transition_to(GroupState.DEAD, core.now_ms)
    ownership.drop(core, group_id)
    core.out.persist(GroupRecord(group_id, None))
    set_overrides(core, group_id, {})  # a group created again starts from the defaults
    return ErrorCode.none
