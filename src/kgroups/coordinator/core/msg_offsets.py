"""Version-independent OffsetCommit, OffsetFetch and OffsetDelete messages.

Topics are named by name up to OffsetCommit/OffsetFetch v9 and by topic id from v10; both
are carried so the core can resolve either and answer in kind.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kgroups.protocol.errors import ErrorCode

NONE = ErrorCode.none


@dataclass(frozen=True, slots=True)
class CommitPartition:
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    log_end: int = -1
    """Where the partition's log ends, if the committer reads it (a kgroups extension)."""


@dataclass(frozen=True, slots=True)
class CommitTopic:
    name: str | None
    partitions: tuple[CommitPartition, ...]
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    generation_id: int
    member_id: str
    topics: tuple[CommitTopic, ...]
    group_instance_id: str | None = None
    retention_time_ms: int = -1


@dataclass(frozen=True, slots=True)
class CommitTopicResult:
    name: str
    topic_id: uuid.UUID | None
    partitions: tuple[tuple[int, ErrorCode], ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    topics: tuple[CommitTopicResult, ...]


@dataclass(frozen=True, slots=True)
class FetchTopic:
    name: str | None
    partitions: tuple[int, ...]
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class FetchGroup:
    group_id: str
    topics: tuple[FetchTopic, ...] | None
    """None asks for every committed offset of the group."""
    member_id: str | None = None
    """v9+: the member asking, under the consumer protocol (`consumer_offsets`)."""
    member_epoch: int = -1


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    groups: tuple[FetchGroup, ...]
    require_stable: bool = False


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str | None = ""
    error: ErrorCode = NONE


@dataclass(frozen=True, slots=True)
class FetchedTopic:
    name: str
    topic_id: uuid.UUID | None
    partitions: tuple[FetchedPartition, ...]


@dataclass(frozen=True, slots=True)
class FetchedGroup:
    group_id: str
    topics: tuple[FetchedTopic, ...]
    error: ErrorCode = NONE


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    groups: tuple[FetchedGroup, ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteRequest:
    group_id: str
    topics: tuple[tuple[str, tuple[int, ...]], ...]
    """(topic name, partitions) pairs whose committed offsets to delete."""


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponse:
    topics: tuple[tuple[str, tuple[tuple[int, ErrorCode], ...]], ...]
    error: ErrorCode = NONE
