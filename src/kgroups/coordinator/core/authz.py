"""Which actions a request needs, and how handlers ask whether one was refused.

Authorization is split so the core stays sans-IO: `needed(core, request)` names exactly the
actions Kafka's request layer checks for that request (KafkaApis, ControllerApis,
ConfigHelper); the server's edge asks an authorizer about them and hands the refused ones
back in `RequestContext.denied`; the handlers then answer them with Kafka's error shapes.
Implied operations (READ implies DESCRIBE, ...) are the authorizer's business: each action
here is the one Kafka checks, and handlers test that exact action.

    API                     actions (one per named group/topic; "or": either suffices)
    ----------------------  ---------------------------------------------------------------
    FindCoordinator         DESCRIBE GROUP(key) per key (key type 0 only)
    JoinGroup, SyncGroup,   READ GROUP(group)
    Heartbeat, LeaveGroup
    OffsetCommit            READ GROUP(group); READ TOPIC(t) per topic
    OffsetFetch             DESCRIBE GROUP(g) per group; DESCRIBE TOPIC(t) per topic asked,
                            or per topic with an offset committed if all are asked
    OffsetDelete            DELETE GROUP(group); READ TOPIC(t) per topic
    DescribeGroups          DESCRIBE GROUP(g) per group; with include_authorized_operations,
                            also every operation Kafka supports on GROUP(g)
    ListGroups              DESCRIBE CLUSTER, or DESCRIBE GROUP(g) per live group
    DeleteGroups            DELETE GROUP(g) per group
    Metadata                DESCRIBE TOPIC(t) per topic asked, or per existing topic if all
                            are asked; auto-creating a missing topic: CREATE CLUSTER or
                            CREATE TOPIC(t)
    ListOffsets             DESCRIBE TOPIC(t) per topic
    Fetch                   READ TOPIC(t) per topic
    CreateTopics            CREATE CLUSTER or CREATE TOPIC(t)
    DeleteTopics            DELETE CLUSTER, or DESCRIBE TOPIC(t) and DELETE TOPIC(t)
    CreatePartitions        ALTER TOPIC(t) per topic
    DescribeConfigs         DESCRIBE_CONFIGS on CLUSTER (BROKER, BROKER_LOGGER and
                            CLIENT_METRICS resources), TOPIC(t) or GROUP(g)
    IncrementalAlterConfigs ALTER_CONFIGS on the same resources

A topic named by id is checked under the name the id resolves to now; an id that resolves
to nothing needs no action (Kafka answers UNKNOWN_TOPIC_ID before it authorizes).
Authorization comes before existence: a refused topic that does not exist is reported as
refused, never as unknown, so a client learns nothing about topics it may not see.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from kgroups.coordinator.core import msg_cluster as mc
from kgroups.coordinator.core import msg_configs as mk
from kgroups.coordinator.core import msg_consumer as mn
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core import msg_offsets as mo
from kgroups.coordinator.core.context import Core
from kgroups.coordinator.core.effects import RequestBody
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.groups import GROUP_RESOURCE_TYPE
from kgroups.security.actions import (
    SUPPORTED,
    Action,
    Operation,
    ResourceType,
    cluster,
    group,
    topic,
)

TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE = 2, 4, 8, 16
"""Kafka's ConfigResource.Type codes (GROUP is `GROUP_RESOURCE_TYPE`, 32)."""
_CLUSTER_CONFIG_RESOURCES = frozenset(
    {BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE}
)

MESSAGES: Mapping[ErrorCode, str] = {
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
}
"""Kafka's default messages (Errors.java), sent where Kafka sends `error.message()`."""


# -- what handlers ask -------------------------------------------------------------------


def allowed(ctx: mg.RequestContext, action: Action) -> bool:
    """Whether the edge let `action` through (everything is, when nothing was refused)."""
    return action not in ctx.denied


def group_allowed(ctx: mg.RequestContext, operation: Operation, group_id: str) -> bool:
    return allowed(ctx, group(operation, group_id))


def topic_allowed(ctx: mg.RequestContext, operation: Operation, name: str) -> bool:
    return allowed(ctx, topic(operation, name))


def may_create_topic(ctx: mg.RequestContext, name: str) -> bool:
    """CreateTopics and Metadata auto-creation: CREATE on the cluster or on the topic."""
    return allowed(ctx, cluster(Operation.CREATE)) or allowed(ctx, topic(Operation.CREATE, name))


def authorized_operations(ctx: mg.RequestContext, resource: ResourceType, name: str) -> int:
    """Kafka's bitfield of the operations allowed on a resource: bit `op` per allowed op."""
    bits = 0
    for op in SUPPORTED[resource]:
        if allowed(ctx, Action(op, resource, name)):
            bits |= 1 << op
    return bits


def config_action(operation: Operation, resource_type: int, name: str) -> Action | None:
    """The action DescribeConfigs/IncrementalAlterConfigs checks for one config resource."""
    if resource_type in _CLUSTER_CONFIG_RESOURCES:
        return cluster(operation)
    if resource_type == TOPIC_RESOURCE:
        return topic(operation, name)
    if resource_type == GROUP_RESOURCE_TYPE:
        return group(operation, name)
    return None  # Kafka refuses the whole request; kgroups answers INVALID_REQUEST per resource


def config_refusal(resource_type: int) -> ErrorCode:
    """The error for a refused config resource: the resource's own kind of refusal."""
    if resource_type == TOPIC_RESOURCE:
        return ErrorCode.topic_authorization_failed
    if resource_type == GROUP_RESOURCE_TYPE:
        return ErrorCode.group_authorization_failed
    return ErrorCode.cluster_authorization_failed


def topic_name(core: Core, name: str | None, topic_id: uuid.UUID | None) -> str | None:
    """The name a request's topic is authorized under: its own, or its id's, if known."""
    if not name and topic_id is not None and topic_id.int:
        return core.topic_names_by_id.get(topic_id)
    return name


# -- what requests need ------------------------------------------------------------------


def needed(core: Core, request: RequestBody) -> frozenset[Action]:
    """The actions Kafka checks for `request`, given the state it would be handled in.

    Pure: reads the state (live groups, topics, committed offsets) and changes nothing.
    Handlers treat any action missing from `denied` as allowed, so the refusals must be
    for the state `handle` runs in: an edge that waits for its authorizer while other
    requests change the state must compute `needed` again and ask about what is new.
    """
    return frozenset(_NEEDS[type(request)](core, request))


def _group_read(core: Core, req: Any) -> Iterator[Action]:
    yield group(Operation.READ, req.group_id)


def _find_coordinator(core: Core, req: mc.FindCoordinatorRequest) -> Iterator[Action]:
    if req.key_type == 0:
        for key in req.keys:
            yield group(Operation.DESCRIBE, key)


def _offset_commit(core: Core, req: mo.OffsetCommitRequest) -> Iterator[Action]:
    yield group(Operation.READ, req.group_id)
    yield from _topics(core, Operation.READ, ((t.name, t.topic_id) for t in req.topics))


def _offset_fetch(core: Core, req: mo.OffsetFetchRequest) -> Iterator[Action]:
    for spec in req.groups:
        yield group(Operation.DESCRIBE, spec.group_id)
        if spec.topics is None:
            committed = core.offsets.get(spec.group_id, {})
            for name in {name for name, _ in committed}:
                yield topic(Operation.DESCRIBE, name)
        else:
            yield from _topics(
                core, Operation.DESCRIBE, ((t.name, t.topic_id) for t in spec.topics)
            )


def _offset_delete(core: Core, req: mo.OffsetDeleteRequest) -> Iterator[Action]:
    yield group(Operation.DELETE, req.group_id)
    for name, _ in req.topics:
        yield topic(Operation.READ, name)


def _describe_groups(core: Core, req: mg.DescribeGroupsRequest) -> Iterator[Action]:
    yield from _described(req.group_ids, req.include_authorized_operations)


def _described(group_ids: Iterable[str], with_operations: bool) -> Iterator[Action]:
    """DescribeGroups and ConsumerGroupDescribe: DESCRIBE on each group, and every group
    operation when the authorized operations are asked for."""
    for group_id in group_ids:
        yield group(Operation.DESCRIBE, group_id)
        if with_operations:
            for op in SUPPORTED[ResourceType.GROUP]:
                yield group(op, group_id)


def _list_groups(core: Core, req: mg.ListGroupsRequest) -> Iterator[Action]:
    yield cluster(Operation.DESCRIBE)
    for group_id in [*core.groups, *core.consumer_groups]:
        yield group(Operation.DESCRIBE, group_id)


def _delete_groups(core: Core, req: mg.DeleteGroupsRequest) -> Iterator[Action]:
    for group_id in req.group_ids:
        yield group(Operation.DELETE, group_id)


def _metadata(core: Core, req: mc.MetadataRequest) -> Iterator[Action]:
    if req.topics is None:
        for existing in core.topics:
            yield topic(Operation.DESCRIBE, existing)
        return
    auto_create = req.allow_auto_topic_creation and core.config.auto_create_topics_enable
    for ref in req.topics:
        name = topic_name(core, ref.name, ref.topic_id)
        if name is None:
            continue
        yield topic(Operation.DESCRIBE, name)
        if auto_create and ref.name is not None and name not in core.topics:
            yield cluster(Operation.CREATE)
            yield topic(Operation.CREATE, name)


def _list_offsets(core: Core, req: mc.ListOffsetsRequest) -> Iterator[Action]:
    for t in req.topics:
        yield topic(Operation.DESCRIBE, t.name)


def _fetch(core: Core, req: mc.FetchRequest) -> Iterator[Action]:
    yield from _topics(core, Operation.READ, ((t.ref.name, t.ref.topic_id) for t in req.topics))


def _create_topics(core: Core, req: mc.CreateTopicsRequest) -> Iterator[Action]:
    yield cluster(Operation.CREATE)
    for t in req.topics:
        yield topic(Operation.CREATE, t.name)


def _delete_topics(core: Core, req: mc.DeleteTopicsRequest) -> Iterator[Action]:
    yield cluster(Operation.DELETE)
    for ref in req.topics:
        name = topic_name(core, ref.name, ref.topic_id)
        if name is not None:
            yield topic(Operation.DESCRIBE, name)
            yield topic(Operation.DELETE, name)


def _create_partitions(core: Core, req: mc.CreatePartitionsRequest) -> Iterator[Action]:
    for name, _ in req.topics:
        yield topic(Operation.ALTER, name)


def _describe_configs(core: Core, req: mk.DescribeConfigsRequest) -> Iterator[Action]:
    yield from _configs(Operation.DESCRIBE_CONFIGS, req.resources)


def _alter_configs(core: Core, req: mk.AlterConfigsRequest) -> Iterator[Action]:
    yield from _configs(Operation.ALTER_CONFIGS, req.resources)


def _configs(
    operation: Operation,
    resources: Iterable[mk.DescribeConfigsResource | mk.AlterConfigsResource],
) -> Iterator[Action]:
    for resource in resources:
        action = config_action(operation, resource.resource_type, resource.name)
        if action is not None:
            yield action


def _topics(
    core: Core, operation: Operation, refs: Iterable[tuple[str | None, uuid.UUID | None]]
) -> Iterator[Action]:
    for name, topic_id in refs:
        resolved = topic_name(core, name, topic_id)
        if resolved is not None:
            yield topic(operation, resolved)


def _consumer_heartbeat(core: Core, req: mn.ConsumerHeartbeatRequest) -> Iterator[Action]:
    yield group(Operation.READ, req.group_id)
    for name in req.subscribed_topic_names or ():
        yield topic(Operation.DESCRIBE, name)


def _consumer_describe(core: Core, req: mn.ConsumerDescribeRequest) -> Iterator[Action]:
    yield from _described(req.group_ids, req.include_authorized_operations)


_NEEDS: Mapping[type, Callable[[Core, Any], Iterable[Action]]] = {
    mn.ConsumerHeartbeatRequest: _consumer_heartbeat,
    mn.ConsumerDescribeRequest: _consumer_describe,
    mg.JoinGroupRequest: _group_read,
    mg.SyncGroupRequest: _group_read,
    mg.HeartbeatRequest: _group_read,
    mg.LeaveGroupRequest: _group_read,
    mg.DescribeGroupsRequest: _describe_groups,
    mg.ListGroupsRequest: _list_groups,
    mg.DeleteGroupsRequest: _delete_groups,
    mo.OffsetCommitRequest: _offset_commit,
    mo.OffsetFetchRequest: _offset_fetch,
    mo.OffsetDeleteRequest: _offset_delete,
    mc.MetadataRequest: _metadata,
    mc.FindCoordinatorRequest: _find_coordinator,
    mc.CreateTopicsRequest: _create_topics,
    mc.CreatePartitionsRequest: _create_partitions,
    mc.DeleteTopicsRequest: _delete_topics,
    mc.ListOffsetsRequest: _list_offsets,
    mc.FetchRequest: _fetch,
    mk.AlterConfigsRequest: _alter_configs,
    mk.DescribeConfigsRequest: _describe_configs,
}
