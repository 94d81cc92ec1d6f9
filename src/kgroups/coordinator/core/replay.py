"""Rebuilding the coordinator from its records after a restart.

Replay applies what the handlers persisted, without emitting anything: topics, then group
settings, then groups, then offsets, each at its latest value (tombstones remove).
`resume` then re-arms what a restart lost: every member's session timer (so members that
died with the old process are still expired), the pending-sync timer of a group persisted
mid-sync, and the offset-expiry sweep.
"""

from __future__ import annotations

from kgroups.coordinator.core import consumer_heartbeat as ch
from kgroups.coordinator.core import log_ends, ownership
from kgroups.coordinator.core import rebalance as rb
from kgroups.coordinator.core.consumer_group import ConsumerGroup
from kgroups.coordinator.core.context import Core, TopicInfo
from kgroups.coordinator.core.effects import RebalanceReason
from kgroups.coordinator.core.group_configs import group_config
from kgroups.coordinator.core.model import Group, Member
from kgroups.coordinator.core.records import (
    ConsumerGroupValue,
    GroupConfigRecord,
    GroupRecord,
    OffsetRecord,
    Record,
    TopicRecord,
)
from kgroups.coordinator.core.states import GroupState


def replay(core: Core, record: Record) -> None:
    if isinstance(record, GroupConfigRecord):
        if record.value is None:
            core.group_configs.pop(record.group_id, None)
        else:
            core.group_configs[record.group_id] = dict(record.value)
    elif isinstance(record, TopicRecord):
        _replay_topic(core, record)
    elif isinstance(record, GroupRecord):
        _replay_group(core, record)
    else:
        _replay_offset(core, record)


def _replay_topic(core: Core, record: TopicRecord) -> None:
    core.topics_version += 1
    old = core.topics.pop(record.name, None)
    if old is not None:
        core.topic_names_by_id.pop(old.topic_id, None)
    if record.value is not None:
        v = record.value
        core.topics[record.name] = TopicInfo(
            record.name, v.topic_id, v.partitions, v.created_ms, dict(v.configs)
        )
        core.topic_names_by_id[v.topic_id] = record.name


def _replay_group(core: Core, record: GroupRecord) -> None:
    if record.value is None:
        ownership.drop(core, record.group_id)
        ownership.drop_consumer(core, record.group_id)
        core.offsets.pop(record.group_id, None)
        return
    v = record.value
    if isinstance(v, ConsumerGroupValue):
        ownership.put_consumer(core, ConsumerGroup.from_value(record.group_id, v))
        return
    state = v.state
    if state is GroupState.PREPARING_REBALANCE or state is GroupState.DEAD:
        # Never written by this coordinator; treat a foreign record like Kafka does.
        state = GroupState.STABLE if v.members else GroupState.EMPTY
    group = Group(
        record.group_id,
        state=state,
        state_timestamp_ms=v.state_timestamp_ms,
        generation_id=v.generation_id,
        protocol_type=v.protocol_type,
        protocol_name=v.protocol_name,
        leader_id=v.leader_id,
        owner=v.owner,
    )
    for m in v.members:
        group.add(Member.from_value(m, v.protocol_type or ""), None)
    group.leader_id = v.leader_id if v.leader_id in group.members else group.leader_id
    if state is GroupState.COMPLETING_REBALANCE:
        group.pending_sync = dict.fromkeys(group.members)
    group.subscribed_topics = group.compute_subscribed_topics()
    ownership.put(core, group)


def _replay_offset(core: Core, record: OffsetRecord) -> None:
    key = (record.topic, record.partition)
    if record.value is None:
        committed = core.offsets.get(record.group_id)
        if committed is not None:
            committed.pop(key, None)
            if not committed:
                del core.offsets[record.group_id]
        return
    if record.group_id not in core.groups and record.group_id not in core.consumer_groups:
        # Offsets without group metadata belong to a simple group, as in Kafka.
        ownership.put(core, Group(record.group_id))
    core.offsets.setdefault(record.group_id, {})[key] = record.value
    value = record.value
    log_ends.observe(core.log_ends, *key, value.offset, value.commit_timestamp_ms)


def resume(core: Core) -> None:
    """Re-arm timers after replay; may start a rebalance (a group now over max size)."""
    for group in list(core.groups.values()):
        resume_group(core, group)
    for consumer in list(core.consumer_groups.values()):
        resume_consumer_group(core, consumer)


def resume_consumer_group(core: Core, group: ConsumerGroup) -> None:
    """A replayed consumer-protocol group's timers (Kafka's `onLoaded`): every member a
    fresh session, a rebalance timeout for each that must still revoke partitions."""
    for member in group.members.values():
        ch.schedule_session(core, group, member)
        ch.arm_rebalance_timer(core, group, member)


def resume_group(core: Core, group: Group) -> None:
    """One replayed group's timers (Kafka's `onLoaded`): every member a fresh session."""
    for member in group.members.values():
        rb.reschedule_heartbeat(core, group, member)
    if group.state is GroupState.COMPLETING_REBALANCE:
        rb.schedule_pending_sync(core, group)
    max_size = group_config(core, group.group_id).group_max_size
    if len(group.members) > max_size:
        rb.prepare_rebalance(
            core,
            group,
            f"freshly loaded group is over capacity {max_size}",
            RebalanceReason.OVER_CAPACITY,
        )
