"""The records the coordinator persists, and nothing else: its durable state.

Four kinds, each a key and a value where a None value is a tombstone (Kafka's
`GroupMetadataKey/Value`, `OffsetCommitKey/Value`, the topics this one-node cluster owns,
and per-group setting overrides). A store keeps the latest value per key; replaying those
values into a fresh core rebuilds everything a client was ever told.

A group record is a whole-group snapshot, written when a generation begins, when its
assignment is set, when a static member is replaced and when the group empties. Unlike
Kafka it keeps every member's full protocol list (so a restart does not force a rebalance
on members whose metadata did not change) and the state, so a group persisted mid-sync
resumes in CompletingRebalance rather than pretending to be Stable.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kgroups.coordinator.core.msg_group import Protocol
from kgroups.coordinator.core.states import GroupState


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: tuple[Protocol, ...]
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    generation_id: int
    state: GroupState
    """Empty, CompletingRebalance or Stable: the states a group is persisted in."""
    state_timestamp_ms: int
    protocol_type: str | None
    protocol_name: str | None
    leader_id: str | None
    members: tuple[MemberValue, ...]
    owner: str | None = None
    """The principal that created the group (counted against its groups per principal)."""


TopicPartitionEpochs = tuple[tuple[str, tuple[tuple[int, int], ...]], ...]
"""Topic -> (partition, the epoch at which it was assigned), sorted."""
TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]
"""Topic -> partitions, sorted."""


@dataclass(frozen=True, slots=True)
class ConsumerMemberValue:
    """One member of a consumer-protocol group (KIP-848): what Kafka keeps in its
    ConsumerGroupMemberMetadata, ConsumerGroupTargetAssignmentMember and
    ConsumerGroupCurrentMemberAssignment records, topics named rather than by id."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    epoch: int
    previous_epoch: int
    state: int
    assigned: TopicPartitionEpochs
    revoking: TopicPartitionEpochs
    target: TopicPartitions
    classic_session_timeout_ms: int | None = None
    """A member that speaks the classic protocol inside this group (Kafka's
    ClassicMemberMetadata): its session timeout. None: a consumer-protocol member."""
    classic_protocols: tuple[Protocol, ...] = ()
    """That classic member's JoinGroup protocols (names and metadata), in its order."""


@dataclass(frozen=True, slots=True)
class ConsumerGroupValue:
    """A consumer-protocol group: its epochs and members (Kafka's ConsumerGroupMetadata
    and ConsumerGroupTargetAssignmentMetadata, with the members' records)."""

    group_epoch: int
    assignment_epoch: int
    assignment_timestamp_ms: int
    members: tuple[ConsumerMemberValue, ...]
    metadata_hash: int = 0
    """What the subscribed topics were when the group epoch last moved (Kafka's
    MetadataHash): a topic created, grown or deleted since changes it."""
    owner: str | None = None


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """A group's snapshot: a classic group, or a consumer-protocol one (one group id is
    one or the other, as in Kafka, so they share the key)."""

    group_id: str
    value: GroupValue | ConsumerGroupValue | None


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class OffsetRecord:
    group_id: str
    topic: str
    partition: int
    value: OffsetValue | None


@dataclass(frozen=True, slots=True)
class TopicValue:
    topic_id: uuid.UUID
    partitions: int
    created_ms: int
    configs: tuple[tuple[str, str], ...] = ()
    """Topic configs set at creation or altered since (`topic_configs.py`), sorted."""


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    value: TopicValue | None


@dataclass(frozen=True, slots=True)
class GroupConfigRecord:
    """A group's overrides of coordinator settings, as (Kafka config name, value) pairs."""

    group_id: str
    value: tuple[tuple[str, int], ...] | None


Record = GroupRecord | OffsetRecord | TopicRecord | GroupConfigRecord
