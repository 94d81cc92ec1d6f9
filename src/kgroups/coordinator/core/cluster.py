"""The one-node cluster: topics, Metadata, FindCoordinator, ListOffsets and Fetch.

kgroups coordinates partitions it does not store. A topic is a name, an id and a
partition count, registered through CreateTopics/CreatePartitions (so any Kafka admin
client can manage them) and persisted as a record. Every partition is led by node 0 and
holds no records: ListOffsets reports earliest 0 and the end the coordinator has learned
(`log_ends.py`), and Fetch long-polls and returns nothing, which is all a Kafka consumer
needs to keep `poll()` running while it takes part in the group. Fetch never reports
OFFSET_OUT_OF_RANGE: a consumer positioned at a committed offset stays there, so offsets
kgroups members commit are never reset by a Kafka peer.

Every API here checks authorization before existence, as Kafka does: a topic the
principal may not see answers TOPIC_AUTHORIZATION_FAILED whether or not it exists, and
requests for "all topics" silently leave such topics out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kgroups.coordinator.core import routing
from kgroups.coordinator.core.authz import (
    MESSAGES,
    allowed,
    group_allowed,
    may_create_topic,
    topic_allowed,
    topic_name,
)
from kgroups.coordinator.core.context import Core, TopicInfo
from kgroups.coordinator.core.log_ends import LogEnd, forget_topic
from kgroups.coordinator.core.msg_cluster import (
    CoordinatorResult,
    CreatedTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    FetchedPartitionData,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListedOffset,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    NewTopic,
    PartitionMetadata,
    TopicMetadata,
    TopicOutcome,
    TopicRef,
)
from kgroups.coordinator.core.msg_configs import ConfigRejected
from kgroups.coordinator.core.msg_group import RequestContext
from kgroups.coordinator.core.offsets import NULL_TOPIC_ID, delete_topic_offsets
from kgroups.coordinator.core.records import GroupConfigRecord, Record, TopicRecord
from kgroups.coordinator.core.replay import replay
from kgroups.coordinator.core.topic_configs import validate_configs
from kgroups.coordinator.core.topics import put_topic
from kgroups.protocol.errors import ErrorCode
from kgroups.security.actions import Operation, cluster

MAX_TOPIC_NAME = 249
MAX_PARTITIONS_PER_REQUEST = 10_000
"""Kafka's controller refuses a CreateTopics request asking for more partitions than this in
total (POLICY_VIOLATION, nothing created), before any other check; its bounded record
list caps CreatePartitions the same way."""
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -1, -2, -3, -4
NOTHING_KNOWN = LogEnd()
BATCHED_FIND_COORDINATOR_FROM = 4
"""FindCoordinator versions with a result per key; older ones carry an error message."""
TOPIC_REFUSED = ErrorCode.topic_authorization_failed
CREATE_REFUSED_MESSAGE = "Authorization failed."
"""What Kafka's controller says to a CreateTopics it refuses."""


def validate_topic_name(name: str) -> str | None:
    """Kafka's rules for a topic name; the reason it is invalid, or None."""
    if not name:
        return "Topic name is empty"
    if name in (".", ".."):
        return "Topic name cannot be '.' or '..'"
    if len(name) > MAX_TOPIC_NAME:
        return f"Topic name is longer than {MAX_TOPIC_NAME} characters"
    if not _LEGAL_TOPIC.fullmatch(name):
        return (
            f"Topic name {name!r} contains characters other than ASCII alphanumerics, "
            "'.', '_' and '-'"
        )
    return None


def _collides(core: Core, name: str) -> str | None:
    """Kafka refuses names that differ from an existing one only in '.' versus '_'."""
    normal = name.replace(".", "_")
    for existing in core.topics:
        if existing != name and existing.replace(".", "_") == normal:
            return existing
    return None


def create_topic(
    core: Core, name: str, partitions: int, configs: dict[str, str] | None = None
) -> TopicInfo:
    info = TopicInfo(name, core.new_topic_id(), partitions, core.now_ms, dict(configs or {}))
    put_topic(core, name, info)
    return info


def handle_create_topics(core: Core, ctx: RequestContext, req: CreateTopicsRequest) -> None:
    seen: dict[str, int] = {}
    for t in req.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    # Duplicates are refused before authorization; refused topics never reach the
    # controller's checks (Kafka's ControllerApis.createTopics).
    refused = {
        t.name for t in req.topics if seen[t.name] == 1 and not may_create_topic(ctx, t.name)
    }

    def refusal(t: NewTopic) -> CreatedTopic:
        return CreatedTopic(t.name, TOPIC_REFUSED, CREATE_REFUSED_MESSAGE)

    requested = sum(
        len(t.assignments)
        if t.assignments
        else (core.config.num_partitions if t.num_partitions == -1 else max(t.num_partitions, 0))
        for t in req.topics
        if t.name not in refused
    )
    if requested > MAX_PARTITIONS_PER_REQUEST:
        violation = ErrorCode.policy_violation
        answer = tuple(
            refusal(t)
            if t.name in refused
            else CreatedTopic(t.name, violation, TOO_MANY_PARTITIONS)
            for t in req.topics
        )
        core.out.reply(ctx.ref, CreateTopicsResponse(answer))
        return
    results = tuple(
        CreatedTopic(t.name, ErrorCode.invalid_request, "Duplicate topic name in the request.")
        if seen[t.name] > 1
        else refusal(t)
        if t.name in refused
        else _create_one(core, t, validate_only=req.validate_only)
        for t in req.topics
    )
    core.out.reply(ctx.ref, CreateTopicsResponse(results))


def _create_one(core: Core, t: NewTopic, *, validate_only: bool) -> CreatedTopic:
    def fail(code: ErrorCode, message: str) -> CreatedTopic:
        return CreatedTopic(t.name, code, message)

    reason = validate_topic_name(t.name)
    if reason is not None:
        return fail(ErrorCode.invalid_topic_exception, reason)
    if t.name in core.topics:
        return fail(ErrorCode.topic_already_exists, f"Topic '{t.name}' already exists.")
    clash = _collides(core, t.name)
    if clash is not None:
        return fail(ErrorCode.invalid_topic_exception, f"Topic '{t.name}' collides with '{clash}'.")
    if t.assignments:
        if t.num_partitions != -1 or t.replication_factor != -1:
            return fail(
                ErrorCode.invalid_request,
                "Both numPartitions or replicationFactor and replicasAssignments were set.",
            )
        indexes = sorted(p for p, _ in t.assignments)
        if indexes != list(range(len(indexes))):
            return fail(ErrorCode.invalid_replica_assignment, "Partitions must be 0..n-1.")
        if any(tuple(brokers) != (0,) for _, brokers in t.assignments):
            return fail(ErrorCode.invalid_replica_assignment, "The only broker is node 0.")
        partitions = len(indexes)
    else:
        partitions = core.config.num_partitions if t.num_partitions == -1 else t.num_partitions
        if partitions < 1:
            return fail(ErrorCode.invalid_partitions, "Number of partitions must be larger than 0.")
        if t.replication_factor == 0 or t.replication_factor < -1:
            return fail(
                ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0."
            )
        if t.replication_factor > 1:
            return fail(
                ErrorCode.invalid_replication_factor,
                f"Replication factor: {t.replication_factor} larger than available brokers: 1.",
            )
    try:
        configs = validate_configs(t.configs)
    except ConfigRejected as exc:
        return fail(ErrorCode.invalid_config, str(exc))
    if validate_only:
        return CreatedTopic(t.name, num_partitions=partitions, replication_factor=1)
    info = create_topic(core, t.name, partitions, configs)
    return CreatedTopic(
        t.name, topic_id=info.topic_id, num_partitions=partitions, replication_factor=1
    )


def handle_create_partitions(core: Core, ctx: RequestContext, req: CreatePartitionsRequest) -> None:
    seen: dict[str, int] = {}
    for name, _ in req.topics:
        seen[name] = seen.get(name, 0) + 1
    results: list[TopicOutcome] = []
    for name, count in req.topics:
        info = core.topics.get(name)
        if seen[name] > 1:
            results.append(TopicOutcome(name, ErrorCode.invalid_request, "Duplicate topic name."))
        elif not topic_allowed(ctx, Operation.ALTER, name):
            results.append(TopicOutcome(name, TOPIC_REFUSED))  # Kafka sends no message here
        elif info is None:
            results.append(
                TopicOutcome(
                    name, ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist."
                )
            )
        elif count == info.partitions:
            results.append(
                TopicOutcome(
                    name, ErrorCode.invalid_partitions, f"Topic already has {count} partitions."
                )
            )
        elif count < info.partitions:
            message = (
                f"Topic currently has {info.partitions} partitions, which is higher than the "
                f"requested {count}."
            )
            results.append(TopicOutcome(name, ErrorCode.invalid_partitions, message))
        else:
            if not req.validate_only:
                grown = TopicInfo(name, info.topic_id, count, info.created_ms, info.configs)
                put_topic(core, name, grown)
            results.append(TopicOutcome(name))
    core.out.reply(ctx.ref, CreatePartitionsResponse(tuple(results)))


def handle_delete_topics(core: Core, ctx: RequestContext, req: DeleteTopicsRequest) -> None:
    results: list[TopicOutcome] = []
    cluster_wide = allowed(ctx, cluster(Operation.DELETE))
    message = MESSAGES[TOPIC_REFUSED]
    for ref in req.topics:
        name, by_id = ref.name, ref.name is None and ref.topic_id is not None
        if ref.name is None and ref.topic_id is not None:
            name = core.topic_names_by_id.get(ref.topic_id)
            if name is None:
                results.append(
                    TopicOutcome(None, ErrorCode.unknown_topic_id, topic_id=ref.topic_id)
                )
                continue
        name = name or ""
        describable = cluster_wide or topic_allowed(ctx, Operation.DESCRIBE, name)
        deletable = cluster_wide or topic_allowed(ctx, Operation.DELETE, name)
        if by_id and not deletable:
            # Kafka names the topic only to a principal that may describe it.
            shown = name if describable else None
            results.append(TopicOutcome(shown, TOPIC_REFUSED, message, ref.topic_id))
            continue
        if not describable:
            results.append(TopicOutcome(name, TOPIC_REFUSED, message))
            continue
        info = core.topics.get(name)
        if info is None:
            results.append(TopicOutcome(name, ErrorCode.unknown_topic_or_partition))
            continue
        if not deletable:
            results.append(TopicOutcome(name, TOPIC_REFUSED, message))
            continue
        del core.topics[info.name]
        del core.topic_names_by_id[info.topic_id]
        core.topics_version += 1
        core.out.persist(TopicRecord(info.name, None))
        delete_topic_offsets(core, info.name)
        forget_topic(core.log_ends, info.name)
        results.append(TopicOutcome(info.name, topic_id=info.topic_id))
    core.out.reply(ctx.ref, DeleteTopicsResponse(tuple(results)))


def _topic_metadata(core: Core, info: TopicInfo) -> TopicMetadata:
    node = core.node.node_id
    partitions = tuple(
        PartitionMetadata(p, node, 0, (node,), (node,)) for p in range(info.partitions)
    )
    return TopicMetadata(info.name, info.topic_id, partitions)


def handle_metadata(core: Core, ctx: RequestContext, req: MetadataRequest) -> None:
    if req.topics is None:
        topics = tuple(
            _topic_metadata(core, info)
            for info in core.topics.values()
            if topic_allowed(ctx, Operation.DESCRIBE, info.name)
        )
    else:
        auto_create = req.allow_auto_topic_creation and core.config.auto_create_topics_enable
        out: list[TopicMetadata] = []
        for ref in req.topics:
            # By id: no name (Kafka's clients send null or "", the schema's default) and
            # a real id, as the consumer protocol's clients ask for assigned topics.
            by_id = not ref.name and ref.topic_id not in (None, NULL_TOPIC_ID)
            name = ref.name
            if by_id and ref.topic_id is not None:
                name = core.topic_names_by_id.get(ref.topic_id)
                if name is None:
                    out.append(TopicMetadata(None, ref.topic_id, (), ErrorCode.unknown_topic_id))
                    continue
            name = name or ""
            if not topic_allowed(ctx, Operation.DESCRIBE, name):
                # Ids are not secret (Kafka echoes a requested id); names' ids are.
                if by_id:
                    out.append(
                        TopicMetadata(None, ref.topic_id or NULL_TOPIC_ID, (), TOPIC_REFUSED)
                    )
                else:
                    out.append(TopicMetadata(name, NULL_TOPIC_ID, (), TOPIC_REFUSED))
                continue
            info = core.topics.get(name)
            if info is None and auto_create and not by_id and not may_create_topic(ctx, name):
                out.append(TopicMetadata(name, NULL_TOPIC_ID, (), TOPIC_REFUSED))
                continue
            if info is None and auto_create and validate_topic_name(name) is None:
                info = create_topic(core, name, core.config.num_partitions)
            if info is None:
                code = (
                    ErrorCode.invalid_topic_exception
                    if validate_topic_name(name)
                    else ErrorCode.unknown_topic_or_partition
                )
                out.append(TopicMetadata(name, NULL_TOPIC_ID, (), code))
            else:
                out.append(_topic_metadata(core, info))
        topics = tuple(out)
    nodes, controller = routing.brokers(core, ctx.listener, core.nodes.get(ctx.listener, core.node))
    core.out.reply(
        ctx.ref,
        MetadataResponse(
            brokers=nodes, cluster_id=core.cluster_id, controller_id=controller, topics=topics
        ),
    )


def handle_find_coordinator(core: Core, ctx: RequestContext, req: FindCoordinatorRequest) -> None:
    node = core.nodes.get(ctx.listener, core.node)
    if req.key_type == 0:
        # A refused key gets Kafka's Node.noNode; only old versions carry a message.
        message = (
            MESSAGES[ErrorCode.group_authorization_failed]
            if ctx.api_version < BATCHED_FIND_COORDINATOR_FROM
            else None
        )
        results = tuple(
            routing.coordinator_of(core, key, ctx.listener, node)
            if group_allowed(ctx, Operation.DESCRIBE, key)
            else CoordinatorResult(key, -1, "", -1, ErrorCode.group_authorization_failed, message)
            for key in req.keys
        )
    else:
        message = "kgroups coordinates consumer groups only (key type 0)"
        results = tuple(
            CoordinatorResult(key, -1, "", -1, ErrorCode.invalid_request, message)
            for key in req.keys
        )
    core.out.reply(ctx.ref, FindCoordinatorResponse(results))


def handle_list_offsets(core: Core, ctx: RequestContext, req: ListOffsetsRequest) -> None:
    topics: list[tuple[str, tuple[ListedOffset, ...]]] = []
    for topic in req.topics:
        if not topic_allowed(ctx, Operation.DESCRIBE, topic.name):
            refused = tuple(ListedOffset(p, TOPIC_REFUSED) for p, _ in topic.partitions)
            topics.append((topic.name, refused))
            continue
        info = core.topics.get(topic.name)
        listed: list[ListedOffset] = []
        for partition, timestamp in topic.partitions:
            if info is None or not 0 <= partition < info.partitions:
                listed.append(ListedOffset(partition, ErrorCode.unknown_topic_or_partition))
            else:
                known = core.log_ends.get((topic.name, partition), NOTHING_KNOWN)
                listed.append(_listed(partition, timestamp, known))
        topics.append((topic.name, tuple(listed)))
    core.out.reply(ctx.ref, ListOffsetsResponse(tuple(topics)))


def _listed(partition: int, timestamp: int, known: LogEnd) -> ListedOffset:
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return ListedOffset(partition, offset=0, leader_epoch=0)
    if timestamp == LATEST:
        return ListedOffset(partition, offset=known.end, leader_epoch=0)
    if timestamp == MAX_TIMESTAMP:
        if known.end == 0:
            return ListedOffset(partition)  # no record: no newest one
        return ListedOffset(partition, timestamp=known.end_ms, offset=known.end - 1, leader_epoch=0)
    if timestamp >= 0:
        return ListedOffset(partition, offset=known.offset_at(timestamp), leader_epoch=0)
    return ListedOffset(partition)  # tiered-storage specs: no tiered storage here


def handle_fetch(core: Core, ctx: RequestContext, req: FetchRequest) -> None:
    if req.session_id != 0:
        core.out.reply(ctx.ref, FetchResponse((), ErrorCode.fetch_session_id_not_found))
        return
    if req.session_epoch not in (0, -1):
        core.out.reply(ctx.ref, FetchResponse((), ErrorCode.invalid_fetch_session_epoch))
        return
    answered: list[tuple[TopicRef, tuple[FetchedPartitionData, ...]]] = []
    for topic in req.topics:
        ref = topic.ref
        name = topic_name(core, ref.name, ref.topic_id)
        if name is not None and not topic_allowed(ctx, Operation.READ, name):
            # Kafka's error partition: every offset unknown (-1), no records.
            refused = tuple(
                FetchedPartitionData(p.partition, TOPIC_REFUSED, -1, -1, -1)
                for p in topic.partitions
            )
            answered.append((ref, refused))
            continue
        info = core.topics.get(name) if name is not None else None
        missing = (
            ErrorCode.unknown_topic_id
            if info is None and ref.name is None
            else ErrorCode.unknown_topic_or_partition
        )
        parts = tuple(
            FetchedPartitionData(p.partition, missing)
            if info is None or not 0 <= p.partition < info.partitions
            else FetchedPartitionData(
                p.partition,
                high_watermark=max(p.fetch_offset, 0),
                last_stable_offset=max(p.fetch_offset, 0),
            )
            for p in topic.partitions
        )
        answered.append((ref, parts))
    wait = 0 if req.min_bytes <= 0 else max(0, min(req.max_wait_ms, core.config.fetch_max_wait_ms))
    core.out.reply(ctx.ref, FetchResponse(tuple(answered), wait_ms=wait))


def refresh(core: Core, records: Iterable[Record]) -> None:
    """Replace topics and group settings with the cluster's current ones (a replica
    reloading what other replicas wrote). A topic gone takes its offsets with it, in the
    groups served here, as when it is deleted here."""
    topics = {r.name: r for r in records if isinstance(r, TopicRecord) and r.value is not None}
    core.topics_version += 1
    for name in [n for n in core.topics if n not in topics]:
        info = core.topics.pop(name)
        core.topic_names_by_id.pop(info.topic_id, None)
        delete_topic_offsets(core, name)
        forget_topic(core.log_ends, name)
    for record in topics.values():
        replay(core, record)
    core.group_configs = {
        r.group_id: dict(r.value)
        for r in records
        if isinstance(r, GroupConfigRecord) and r.value is not None
    }
