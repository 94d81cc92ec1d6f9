"""OffsetCommit, OffsetFetch, OffsetDelete and offset expiry (Kafka's OffsetMetadataManager).

Commits are fenced by generation: a member of generation N cannot commit once the group
has moved to N+1. Commits with generation -1 and no member id are "simple" commits (an
admin tool, or a consumer that assigns partitions itself) and are accepted only while the
group has no members. Every accepted partition becomes an `OffsetRecord`; the answer
leaves once it is durable, so an acknowledged offset survives any restart.

Authorization is checked as Kafka's request layer checks it, before the group or topic is
looked up: a refused group fails the whole request (GROUP_AUTHORIZATION_FAILED), a refused
topic only its own partitions (TOPIC_AUTHORIZATION_FAILED, even if it does not exist).
"""

from __future__ import annotations

import uuid

from kgroups.coordinator.core import consumer_offsets, log_ends, ownership, routing
from kgroups.coordinator.core import rebalance as rb
from kgroups.coordinator.core.authz import group_allowed, topic_allowed, topic_name
from kgroups.coordinator.core.consumer_group import ConsumerGroup
from kgroups.coordinator.core.consumer_heartbeat import subscribed_topics
from kgroups.coordinator.core.context import Core, TopicInfo
from kgroups.coordinator.core.group_configs import group_config
from kgroups.coordinator.core.model import CONSUMER_PROTOCOL_TYPE, Group
from kgroups.coordinator.core.msg_group import RequestContext
from kgroups.coordinator.core.msg_offsets import (
    CommitTopic,
    CommitTopicResult,
    FetchedGroup,
    FetchedPartition,
    FetchedTopic,
    FetchGroup,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kgroups.coordinator.core.records import GroupRecord, OffsetRecord, OffsetValue
from kgroups.coordinator.core.states import GroupState
from kgroups.protocol.errors import ErrorCode, GroupError
from kgroups.security.actions import Operation

GROUP_ID_NOT_FOUND_FROM = 9
"""OffsetCommit versions that answer GROUP_ID_NOT_FOUND rather than ILLEGAL_GENERATION."""
TOP_LEVEL_FETCH_ERROR_FROM = 2
"""OffsetFetch versions with a top-level error; older ones carry it on every partition."""
NULL_TOPIC_ID = uuid.UUID(int=0)


def _resolve(core: Core, name: str | None, topic_id: uuid.UUID | None) -> TopicInfo | None:
    if name is None and topic_id is not None:
        name = core.topic_names_by_id.get(topic_id)
    return None if name is None else core.topics.get(name)


def _topic_error(topic: CommitTopic) -> ErrorCode:
    if topic.name is None and topic.topic_id is not None:
        return ErrorCode.unknown_topic_id
    return ErrorCode.unknown_topic_or_partition


def handle_commit(core: Core, ctx: RequestContext, req: OffsetCommitRequest) -> None:
    if not group_allowed(ctx, Operation.READ, req.group_id):
        refused = ErrorCode.group_authorization_failed
        answer = tuple(
            CommitTopicResult(
                topic.name or "",
                topic.topic_id,
                tuple((p.partition, refused) for p in topic.partitions),
            )
            for topic in req.topics
        )
        core.out.reply(ctx.ref, OffsetCommitResponse(answer))
        return
    results: list[CommitTopicResult] = []
    accepted: list[tuple[CommitTopic, TopicInfo, list[int]]] = []
    any_refused = False
    # Like Kafka's request layer: refused, then unknown topics and partitions fail first,
    # on their own.
    for topic in req.topics:
        name = topic_name(core, topic.name, topic.topic_id)
        if name is not None and not topic_allowed(ctx, Operation.READ, name):
            any_refused = True
            refused = ErrorCode.topic_authorization_failed
            parts = tuple((p.partition, refused) for p in topic.partitions)
            results.append(CommitTopicResult(topic.name or "", topic.topic_id, parts))
            continue
        info = _resolve(core, topic.name, topic.topic_id)
        if info is None:
            code = _topic_error(topic)
            parts = tuple((p.partition, code) for p in topic.partitions)
            results.append(CommitTopicResult(topic.name or "", topic.topic_id, parts))
            continue
        accepted.append((topic, info, [p.partition for p in topic.partitions]))

    if any_refused and not accepted:
        # Kafka does not reach the coordinator then: no group is created, no session
        # extended.
        core.out.reply(ctx.ref, OffsetCommitResponse(tuple(results)))
        return
    try:
        consumer = core.consumer_groups.get(req.group_id)
        if consumer is not None:
            consumer_offsets.validate_commit(core, ctx, req, consumer)
        group = None if consumer is not None else _validate_commit(core, ctx, req)
    except GroupError as err:
        for _, info, partitions in accepted:
            parts = tuple((p, err.code) for p in partitions)
            results.append(CommitTopicResult(info.name, info.topic_id, parts))
        core.out.reply(ctx.ref, OffsetCommitResponse(tuple(results)))
        return

    member = None if group is None else group.members.get(req.member_id)
    if (
        group is not None
        and member is not None
        and group.state
        in (
            GroupState.STABLE,
            GroupState.PREPARING_REBALANCE,
        )
    ):
        # A commit is proof of life, as in Kafka.
        rb.reschedule_heartbeat(core, group, member)

    expire_ms = None if req.retention_time_ms == -1 else core.now_ms + req.retention_time_ms
    max_metadata = core.config.offset_metadata_max_bytes
    for topic, info, _ in accepted:
        parts_out: list[tuple[int, ErrorCode]] = []
        for p in topic.partitions:
            if not 0 <= p.partition < info.partitions:
                parts_out.append((p.partition, ErrorCode.unknown_topic_or_partition))
            elif p.metadata is not None and len(p.metadata) > max_metadata:
                parts_out.append((p.partition, ErrorCode.offset_metadata_too_large))
            else:
                value = OffsetValue(
                    offset=p.offset,
                    leader_epoch=p.leader_epoch,
                    metadata=p.metadata or "",
                    commit_timestamp_ms=core.now_ms,
                    expire_timestamp_ms=expire_ms,
                )
                core.offsets.setdefault(req.group_id, {})[(info.name, p.partition)] = value
                core.out.persist(OffsetRecord(req.group_id, info.name, p.partition, value))
                known = max(p.offset, p.log_end)
                log_ends.observe(core.log_ends, info.name, p.partition, known, core.now_ms)
                parts_out.append((p.partition, ErrorCode.none))
        results.append(CommitTopicResult(info.name, info.topic_id, tuple(parts_out)))
    core.out.reply(ctx.ref, OffsetCommitResponse(tuple(results)))


def _validate_commit(core: Core, ctx: RequestContext, req: OffsetCommitRequest) -> Group:
    group = core.groups.get(req.group_id)
    if group is None:
        if req.generation_id < 0:
            # A simple group: offsets stored for a consumer outside group management.
            if not ownership.may_create(core, ctx.principal):
                raise GroupError(ErrorCode.policy_violation)  # groups per principal
            owner = ownership.owner_of(ctx.principal)
            group = Group(req.group_id, state_timestamp_ms=core.now_ms, owner=owner)
            ownership.put(core, group)
            if owner is not None:  # who created it must survive a restart
                rb.persist(core, group)
            return group
        if ctx.api_version >= GROUP_ID_NOT_FOUND_FROM:
            raise GroupError(ErrorCode.group_id_not_found)
        raise GroupError(ErrorCode.illegal_generation)
    if group.state is GroupState.DEAD:
        raise GroupError(ErrorCode.coordinator_not_available)
    if req.generation_id < 0 and group.state is GroupState.EMPTY:
        return group
    if req.generation_id >= 0 or req.member_id or req.group_instance_id is not None:
        group.validate_member(req.member_id, req.group_instance_id)
        if req.generation_id != group.generation_id:
            raise GroupError(ErrorCode.illegal_generation)
    else:
        raise GroupError(ErrorCode.unknown_member_id)
    if group.state is GroupState.COMPLETING_REBALANCE:
        raise GroupError(ErrorCode.rebalance_in_progress)
    return group


def handle_fetch(core: Core, ctx: RequestContext, req: OffsetFetchRequest) -> None:
    groups = tuple(
        _fetch_group(core, ctx, spec)
        if group_allowed(ctx, Operation.DESCRIBE, spec.group_id)
        and routing.status(core, spec.group_id) is ErrorCode.none
        else _refused_group(
            ctx, spec, routing.status(core, spec.group_id) or ErrorCode.group_authorization_failed
        )
        for spec in req.groups
    )
    core.out.reply(ctx.ref, OffsetFetchResponse(groups))


def _refused_group(ctx: RequestContext, spec: FetchGroup, refused: ErrorCode) -> FetchedGroup:
    if ctx.api_version >= TOP_LEVEL_FETCH_ERROR_FROM or spec.topics is None:
        return FetchedGroup(spec.group_id, (), refused)
    # Versions 0-1 have no top-level error: Kafka reports it on every partition asked.
    topics = tuple(
        FetchedTopic(
            t.name or "",
            t.topic_id,
            tuple(FetchedPartition(p, error=refused) for p in t.partitions),
        )
        for t in spec.topics
    )
    return FetchedGroup(spec.group_id, topics, refused)


def _fetch_group(core: Core, ctx: RequestContext, spec: FetchGroup) -> FetchedGroup:
    consumer = core.consumer_groups.get(spec.group_id)
    if consumer is not None:
        try:
            consumer_offsets.validate_fetch(spec, consumer)
        except GroupError as err:
            return _refused_group(ctx, spec, err.code)
    group = core.groups.get(spec.group_id)
    live = consumer is not None or (group is not None and group.state is not GroupState.DEAD)
    committed = core.offsets.get(spec.group_id, {}) if live else {}
    if spec.topics is None:
        by_topic: dict[str, list[FetchedPartition]] = {}
        for (topic, partition), value in sorted(committed.items()):
            if not topic_allowed(ctx, Operation.DESCRIBE, topic):
                continue  # offsets of topics the principal may not see are left out
            by_topic.setdefault(topic, []).append(
                FetchedPartition(partition, value.offset, value.leader_epoch, value.metadata)
            )
        topics = tuple(
            FetchedTopic(name, _topic_id(core, name), tuple(parts))
            for name, parts in by_topic.items()
        )
        return FetchedGroup(spec.group_id, topics)
    out: list[FetchedTopic] = []
    for wanted in spec.topics:
        name = wanted.name
        if name is None and wanted.topic_id is not None:
            name = core.topic_names_by_id.get(wanted.topic_id)
            if name is None:
                parts = tuple(
                    FetchedPartition(p, error=ErrorCode.unknown_topic_id) for p in wanted.partitions
                )
                out.append(FetchedTopic("", wanted.topic_id, parts))
                continue
        name = name or ""
        if not topic_allowed(ctx, Operation.DESCRIBE, name):
            refused = ErrorCode.topic_authorization_failed
            parts = tuple(FetchedPartition(p, error=refused) for p in wanted.partitions)
            out.append(FetchedTopic(name, wanted.topic_id or NULL_TOPIC_ID, parts))
            continue
        parts_out: list[FetchedPartition] = []
        for p in wanted.partitions:
            found = committed.get((name, p))
            if found is None:
                parts_out.append(FetchedPartition(p))
            else:
                parts_out.append(
                    FetchedPartition(p, found.offset, found.leader_epoch, found.metadata)
                )
        out.append(FetchedTopic(name, wanted.topic_id or _topic_id(core, name), tuple(parts_out)))
    return FetchedGroup(spec.group_id, tuple(out))


def _topic_id(core: Core, name: str) -> uuid.UUID:
    info = core.topics.get(name)
    return NULL_TOPIC_ID if info is None else info.topic_id


# -- expiry and deletion --------------------------------------------------------------------


def delete_all_offsets(core: Core, group_id: str) -> int:
    """Tombstone every offset of a group; returns how many there were."""
    committed = core.offsets.pop(group_id, {})
    for topic, partition in committed:
        core.out.persist(OffsetRecord(group_id, topic, partition, None))
    return len(committed)


def delete_topic_offsets(core: Core, topic: str) -> None:
    """A deleted topic takes its committed offsets with it, in every group."""
    for group_id, committed in core.offsets.items():
        for key in [k for k in committed if k[0] == topic]:
            del committed[key]
            core.out.persist(OffsetRecord(group_id, key[0], key[1], None))


def expire_offsets(core: Core) -> None:
    """The periodic sweep: drop expired offsets, then empty groups that have none left."""
    for group_id, group in list(core.groups.items()):
        if _cleanup_expired(core, group) and group.state is GroupState.EMPTY:
            core.offsets.pop(group_id, None)
            group.transition_to(GroupState.DEAD, core.now_ms)
            ownership.drop(core, group_id)
            core.out.persist(GroupRecord(group_id, None))
    for group_id, consumer in list(core.consumer_groups.items()):
        if _cleanup_consumer_expired(core, consumer) and not consumer.members:
            core.offsets.pop(group_id, None)
            ownership.drop_consumer(core, group_id)
            core.out.persist(GroupRecord(group_id, None))


def _cleanup_consumer_expired(core: Core, group: ConsumerGroup) -> bool:
    """A consumer-protocol group's offsets expire `retention` after their commit unless a
    member subscribes to their topic (Kafka's `ConsumerGroup.offsetExpirationCondition`);
    True if none are left."""
    committed = core.offsets.get(group.group_id)
    if not committed:
        return True
    subscribed: set[str] = set()
    for member in group.members.values():
        subscribed |= subscribed_topics(core, member)
    retention = group_config(core, group.group_id).offsets_retention_ms
    for (topic, partition), value in list(committed.items()):
        if topic in subscribed:
            continue
        if value.expire_timestamp_ms is not None:
            expired = core.now_ms >= value.expire_timestamp_ms
        else:
            expired = core.now_ms - value.commit_timestamp_ms >= retention
        if expired:
            del committed[(topic, partition)]
            core.out.persist(OffsetRecord(group.group_id, topic, partition, None))
    if not committed:
        core.offsets.pop(group.group_id, None)
        return True
    return False


def _cleanup_expired(core: Core, group: Group) -> bool:
    """Tombstone this group's expired offsets; True if none are left."""
    committed = core.offsets.get(group.group_id)
    if not committed:
        return True
    if group.protocol_type is not None:
        if group.state is GroupState.EMPTY:
            # KIP-211: offsets of an abandoned group expire `retention` after it emptied.
            empty_since = group.state_timestamp_ms

            def base(v: OffsetValue) -> int:
                return empty_since if empty_since >= 0 else v.commit_timestamp_ms
        elif (
            group.protocol_type == CONSUMER_PROTOCOL_TYPE
            and group.subscribed_topics is not None
            and group.state is GroupState.STABLE
        ):

            def base(v: OffsetValue) -> int:
                return v.commit_timestamp_ms
        else:
            return False
    else:

        def base(v: OffsetValue) -> int:
            return v.commit_timestamp_ms

    retention = group_config(core, group.group_id).offsets_retention_ms
    subscribed = group.subscribed_topics
    uses_consumer = group.protocol_type == CONSUMER_PROTOCOL_TYPE
    all_expired = True
    for (topic, partition), value in list(committed.items()):
        is_subscribed = topic in subscribed if subscribed is not None else uses_consumer
        if is_subscribed:
            all_expired = False
            continue
        if value.expire_timestamp_ms is not None:
            expired = core.now_ms >= value.expire_timestamp_ms
        else:
            expired = core.now_ms - base(value) >= retention
        if expired:
            del committed[(topic, partition)]
            core.out.persist(OffsetRecord(group.group_id, topic, partition, None))
        else:
            all_expired = False
    if not committed:
        core.offsets.pop(group.group_id, None)
    return all_expired


def handle_delete(core: Core, ctx: RequestContext, req: OffsetDeleteRequest) -> None:
    """OffsetDelete (`kafka-consumer-groups --delete-offsets`), as Kafka's coordinator does it.

    Only offsets nobody is using can go: any group that is Empty, or a group of the
    consumer protocol for topics its members do not subscribe to (those partitions answer
    GROUP_SUBSCRIBED_TO_TOPIC). A non-empty group of another protocol is NON_EMPTY_GROUP.
    Every partition asked about is answered, whether or not it had an offset.
    """
    if not group_allowed(ctx, Operation.DELETE, req.group_id):
        refused = ErrorCode.group_authorization_failed
        core.out.reply(ctx.ref, OffsetDeleteResponse((), refused))
        return
    group = core.groups.get(req.group_id)
    if group is None or group.state is GroupState.DEAD:
        core.out.reply(ctx.ref, OffsetDeleteResponse((), ErrorCode.group_id_not_found))
        return
    empty = group.state is GroupState.EMPTY
    if not empty and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        core.out.reply(ctx.ref, OffsetDeleteResponse((), ErrorCode.non_empty_group))
        return
    subscribed = frozenset() if empty else (group.subscribed_topics or frozenset())
    committed = core.offsets.get(req.group_id, {})
    topics: list[tuple[str, tuple[tuple[int, ErrorCode], ...]]] = []
    for name, partitions in req.topics:
        if not topic_allowed(ctx, Operation.READ, name):
            refused = ErrorCode.topic_authorization_failed
            topics.append((name, tuple((p, refused) for p in partitions)))
            continue
        info = core.topics.get(name)
        answers: list[tuple[int, ErrorCode]] = []
        for p in partitions:
            if info is None or not 0 <= p < info.partitions:
                answers.append((p, ErrorCode.unknown_topic_or_partition))
            elif name in subscribed:
                answers.append((p, ErrorCode.group_subscribed_to_topic))
            else:
                if committed.pop((name, p), None) is not None:
                    core.out.persist(OffsetRecord(req.group_id, name, p, None))
                answers.append((p, ErrorCode.none))
        topics.append((name, tuple(answers)))
    if not committed:
        core.offsets.pop(req.group_id, None)
    core.out.reply(ctx.ref, OffsetDeleteResponse(tuple(topics)))
