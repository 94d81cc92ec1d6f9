"""From kio request objects (any version) to the core's version-independent requests.

Fields a version lacks take the value Kafka gives them for that version: JoinGroup v0's
rebalance timeout is its session timeout (KAFKA-8653), LeaveGroup v0-2's single member
becomes a batch of one, OffsetFetch v0-7's single group becomes a list of one, Metadata
v0's empty topic list means "all topics", FindCoordinator v0-3's key becomes one key.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from typing import Any

from kgroups.coordinator.core import msg_cluster as mc
from kgroups.coordinator.core import msg_configs as mk
from kgroups.coordinator.core import msg_consumer as mn
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core import msg_offsets as mo
from kgroups.coordinator.core.effects import RequestBody
from kgroups.protocol.apis import ApiKey
from kgroups.protocol.frames import MalformedFrame

NULL_TOPIC_ID = uuid.UUID(int=0)


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def _join(body: Any, version: int) -> mg.JoinGroupRequest:
    session = _ms(body.session_timeout)
    rebalance = _ms(body.rebalance_timeout) if version >= 1 else session
    return mg.JoinGroupRequest(
        group_id=body.group_id,
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=body.protocol_type,
        protocols=tuple(mg.Protocol(p.name, p.metadata) for p in body.protocols),
        reason=getattr(body, "reason", None),
    )


def _sync(body: Any, version: int) -> mg.SyncGroupRequest:
    return mg.SyncGroupRequest(
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=getattr(body, "protocol_type", None),
        protocol_name=getattr(body, "protocol_name", None),
        assignments=tuple((a.member_id, a.assignment) for a in body.assignments),
    )


def _heartbeat(body: Any, version: int) -> mg.HeartbeatRequest:
    return mg.HeartbeatRequest(
        body.group_id, body.generation_id, body.member_id, getattr(body, "group_instance_id", None)
    )


def _leave(body: Any, version: int) -> mg.LeaveGroupRequest:
    if version < 3:
        return mg.LeaveGroupRequest(body.group_id, (mg.LeavingMember(body.member_id),))
    members = tuple(
        mg.LeavingMember(m.member_id, m.group_instance_id, getattr(m, "reason", None))
        for m in body.members
    )
    return mg.LeaveGroupRequest(body.group_id, members)


def _commit(body: Any, version: int) -> mo.OffsetCommitRequest:
    topics = tuple(
        mo.CommitTopic(
            name=getattr(t, "name", None),
            topic_id=getattr(t, "topic_id", None),
            partitions=tuple(
                mo.CommitPartition(
                    p.partition_index,
                    p.committed_offset,
                    getattr(p, "committed_leader_epoch", -1),
                    p.committed_metadata,
                    getattr(p, "log_end_offset", -1),
                )
                for p in t.partitions
            ),
        )
        for t in body.topics
    )
    retention = getattr(body, "retention_time", None)
    return mo.OffsetCommitRequest(
        group_id=body.group_id,
        generation_id=body.generation_id_or_member_epoch,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        topics=topics,
        retention_time_ms=-1 if retention is None else _ms(retention),
    )


def _fetch_topics(topics: Any) -> tuple[mo.FetchTopic, ...] | None:
    if topics is None:
        return None
    return tuple(
        mo.FetchTopic(
            getattr(t, "name", None), tuple(t.partition_indexes), getattr(t, "topic_id", None)
        )
        for t in topics
    )


def _offset_fetch(body: Any, version: int) -> mo.OffsetFetchRequest:
    stable = bool(getattr(body, "require_stable", False))
    if version >= 8:
        groups = tuple(
            mo.FetchGroup(g.group_id, _fetch_topics(g.topics), getattr(g, "member_id", None),
                          int(getattr(g, "member_epoch", -1)))
            for g in body.groups
        )  # fmt: skip
        return mo.OffsetFetchRequest(groups, stable)
    return mo.OffsetFetchRequest(
        (mo.FetchGroup(body.group_id, _fetch_topics(body.topics)),), stable
    )


def _offset_delete(body: Any, version: int) -> mo.OffsetDeleteRequest:
    topics = tuple((t.name, tuple(p.partition_index for p in t.partitions)) for t in body.topics)
    return mo.OffsetDeleteRequest(body.group_id, topics)


def _describe(body: Any, version: int) -> mg.DescribeGroupsRequest:
    return mg.DescribeGroupsRequest(
        tuple(body.groups), bool(getattr(body, "include_authorized_operations", False))
    )


def _list(body: Any, version: int) -> mg.ListGroupsRequest:
    return mg.ListGroupsRequest(
        tuple(getattr(body, "states_filter", ())), tuple(getattr(body, "types_filter", ()))
    )


def _delete_groups(body: Any, version: int) -> mg.DeleteGroupsRequest:
    return mg.DeleteGroupsRequest(tuple(body.groups_names))


def _metadata(body: Any, version: int) -> mc.MetadataRequest:
    topics = body.topics
    if topics is None or (version == 0 and not topics):
        refs = None
    else:
        refs = tuple(mc.TopicRef(t.name, getattr(t, "topic_id", None)) for t in topics)
    auto = bool(getattr(body, "allow_auto_topic_creation", version < 4))
    return mc.MetadataRequest(refs, auto)


def _find_coordinator(body: Any, version: int) -> mc.FindCoordinatorRequest:
    key_type = int(getattr(body, "key_type", 0))
    if version >= 4:
        return mc.FindCoordinatorRequest(tuple(body.coordinator_keys), key_type)
    return mc.FindCoordinatorRequest((body.key,), key_type)


def _create_topics(body: Any, version: int) -> mc.CreateTopicsRequest:
    topics = tuple(
        mc.NewTopic(
            t.name,
            t.num_partitions,
            t.replication_factor,
            tuple((a.partition_index, tuple(a.broker_ids)) for a in t.assignments),
            tuple((c.name, c.value) for c in t.configs),
        )
        for t in body.topics
    )
    return mc.CreateTopicsRequest(topics, bool(getattr(body, "validate_only", False)))


def _create_partitions(body: Any, version: int) -> mc.CreatePartitionsRequest:
    return mc.CreatePartitionsRequest(
        tuple((t.name, t.count) for t in body.topics), bool(body.validate_only)
    )


def _delete_topics(body: Any, version: int) -> mc.DeleteTopicsRequest:
    if version >= 6:
        refs = tuple(mc.TopicRef(t.name, t.topic_id) for t in body.topics)
    else:
        refs = tuple(mc.TopicRef(name) for name in body.topic_names)
    return mc.DeleteTopicsRequest(refs)


def _list_offsets(body: Any, version: int) -> mc.ListOffsetsRequest:
    return mc.ListOffsetsRequest(
        tuple(
            mc.ListOffsetsTopic(
                t.name, tuple((p.partition_index, p.timestamp) for p in t.partitions)
            )
            for t in body.topics
        )
    )


def _fetch(body: Any, version: int) -> mc.FetchRequest:
    topics = tuple(
        mc.FetchTopicSpec(
            mc.TopicRef(getattr(t, "topic", None), getattr(t, "topic_id", None)),
            tuple(mc.FetchPartitionSpec(p.partition, p.fetch_offset) for p in t.partitions),
        )
        for t in body.topics
    )
    return mc.FetchRequest(
        topics,
        max_wait_ms=_ms(body.max_wait),
        min_bytes=body.min_bytes,
        session_id=getattr(body, "session_id", 0),
        session_epoch=getattr(body, "session_epoch", -1),
    )


def _alter_configs(body: Any, version: int) -> mk.AlterConfigsRequest:
    return mk.AlterConfigsRequest(
        tuple(
            mk.AlterConfigsResource(
                int(r.resource_type),
                r.resource_name,
                tuple(mk.ConfigChange(c.name, int(c.config_operation), c.value) for c in r.configs),
            )
            for r in body.resources
        ),
        bool(body.validate_only),
    )


def _describe_configs(body: Any, version: int) -> mk.DescribeConfigsRequest:
    return mk.DescribeConfigsRequest(
        tuple(
            mk.DescribeConfigsResource(
                int(r.resource_type),
                r.resource_name,
                None if r.configuration_keys is None else tuple(r.configuration_keys),
            )
            for r in body.resources
        )
    )


def _consumer_heartbeat(body: Any, version: int) -> mn.ConsumerHeartbeatRequest:
    owned = body.topic_partitions
    names = body.subscribed_topic_names
    return mn.ConsumerHeartbeatRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        member_epoch=int(body.member_epoch),
        instance_id=body.instance_id,
        rack_id=body.rack_id,
        rebalance_timeout_ms=_ms(body.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
        server_assignor=body.server_assignor,
        owned=None if owned is None else tuple(
            (t.topic_id or NULL_TOPIC_ID, tuple(int(p) for p in t.partitions)) for t in owned
        ),
    )  # fmt: skip


def _consumer_describe(body: Any, version: int) -> mn.ConsumerDescribeRequest:
    return mn.ConsumerDescribeRequest(
        tuple(body.group_ids), bool(body.include_authorized_operations)
    )


DECODERS: dict[int, Callable[[Any, int], RequestBody]] = {
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _consumer_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: _consumer_describe,
    ApiKey.JOIN_GROUP: _join,
    ApiKey.SYNC_GROUP: _sync,
    ApiKey.HEARTBEAT: _heartbeat,
    ApiKey.LEAVE_GROUP: _leave,
    ApiKey.OFFSET_COMMIT: _commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.OFFSET_DELETE: _offset_delete,
    ApiKey.DESCRIBE_GROUPS: _describe,
    ApiKey.LIST_GROUPS: _list,
    ApiKey.DELETE_GROUPS: _delete_groups,
    ApiKey.METADATA: _metadata,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.FETCH: _fetch,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _alter_configs,
    ApiKey.DESCRIBE_CONFIGS: _describe_configs,
}
"""Every API the core serves, by key (ApiVersions is answered by the server itself)."""


def decode(api_key: int, version: int, body: Any) -> RequestBody:
    """The core's request for a parsed kio body; `MalformedFrame` if it cannot be one
    (kio reads a -1 length as None even where Kafka's schema forbids null)."""
    try:
        return DECODERS[api_key](body, version)
    except (TypeError, AttributeError, ValueError) as exc:
        raise MalformedFrame(f"{api_key} v{version} has a null or invalid field: {exc}") from exc
