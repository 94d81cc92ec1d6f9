"""Version-independent messages about the cluster and its topics.

The coordinator is its own one-node cluster: node 0 is the controller, the group
coordinator and the leader of every partition it knows. Topics exist so that real Kafka
consumers find partitions to be assigned and commit offsets against; the coordinator
stores no records, so Fetch returns none, and ListOffsets reports the log end members
told it (`log_ends.py`), else the committed offsets.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kgroups.protocol.errors import ErrorCode

NONE = ErrorCode.none


@dataclass(frozen=True, slots=True)
class Node:
    """How clients reach this coordinator (its advertised listener)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class TopicRef:
    """A topic named by name, by id, or both."""

    name: str | None
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    topics: tuple[TopicRef, ...] | None
    """None asks for every topic."""
    allow_auto_topic_creation: bool = False


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: ErrorCode = NONE


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str | None
    topic_id: uuid.UUID
    partitions: tuple[PartitionMetadata, ...]
    error: ErrorCode = NONE
    is_internal: bool = False


@dataclass(frozen=True, slots=True)
class MetadataResponse:
    brokers: tuple[Node, ...]
    cluster_id: str
    controller_id: int
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest:
    keys: tuple[str, ...]
    key_type: int = 0


@dataclass(frozen=True, slots=True)
class CoordinatorResult:
    key: str
    node_id: int
    host: str
    port: int
    error: ErrorCode = NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class FindCoordinatorResponse:
    coordinators: tuple[CoordinatorResult, ...]


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int
    replication_factor: int = -1
    assignments: tuple[tuple[int, tuple[int, ...]], ...] = ()
    configs: tuple[tuple[str, str | None], ...] = ()


@dataclass(frozen=True, slots=True)
class CreateTopicsRequest:
    topics: tuple[NewTopic, ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class CreatedTopic:
    name: str
    error: ErrorCode = NONE
    error_message: str | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1


@dataclass(frozen=True, slots=True)
class CreateTopicsResponse:
    topics: tuple[CreatedTopic, ...]


@dataclass(frozen=True, slots=True)
class CreatePartitionsRequest:
    topics: tuple[tuple[str, int], ...]
    """(topic name, new total partition count)."""
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class TopicOutcome:
    name: str | None
    error: ErrorCode = NONE
    error_message: str | None = None
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsResponse:
    results: tuple[TopicOutcome, ...]


@dataclass(frozen=True, slots=True)
class DeleteTopicsRequest:
    topics: tuple[TopicRef, ...]


@dataclass(frozen=True, slots=True)
class DeleteTopicsResponse:
    results: tuple[TopicOutcome, ...]


@dataclass(frozen=True, slots=True)
class ListOffsetsTopic:
    name: str
    partitions: tuple[tuple[int, int], ...]
    """(partition, timestamp); -1 latest, -2 earliest, -3 max timestamp."""


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    topics: tuple[ListOffsetsTopic, ...]


@dataclass(frozen=True, slots=True)
class ListedOffset:
    partition: int
    error: ErrorCode = NONE
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse:
    topics: tuple[tuple[str, tuple[ListedOffset, ...]], ...]


@dataclass(frozen=True, slots=True)
class FetchPartitionSpec:
    partition: int
    fetch_offset: int


@dataclass(frozen=True, slots=True)
class FetchTopicSpec:
    ref: TopicRef
    partitions: tuple[FetchPartitionSpec, ...]


@dataclass(frozen=True, slots=True)
class FetchRequest:
    topics: tuple[FetchTopicSpec, ...]
    max_wait_ms: int = 0
    min_bytes: int = 0
    session_id: int = 0
    session_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchedPartitionData:
    partition: int
    error: ErrorCode = NONE
    high_watermark: int = 0
    last_stable_offset: int = 0
    log_start_offset: int = 0


@dataclass(frozen=True, slots=True)
class FetchResponse:
    topics: tuple[tuple[TopicRef, tuple[FetchedPartitionData, ...]], ...]
    error: ErrorCode = NONE
    wait_ms: int = 0
    """How long the server holds the answer (a long poll with no records to return)."""
