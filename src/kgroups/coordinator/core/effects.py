"""What one call into the core produces: records to make durable, then replies to send.

The server appends `records` through one ordered writer and releases `replies` only
after those records (and every record of earlier calls) are durable. A reply may answer a
request parked many calls ago: `Reply.ref` says which.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from kgroups.coordinator.core import msg_cluster as c
from kgroups.coordinator.core import msg_configs as k
from kgroups.coordinator.core import msg_consumer as n
from kgroups.coordinator.core import msg_group as g
from kgroups.coordinator.core import msg_offsets as o
from kgroups.coordinator.core.records import Record

ResponseBody = (
    g.JoinGroupResponse
    | g.SyncGroupResponse
    | g.HeartbeatResponse
    | g.LeaveGroupResponse
    | g.DescribeGroupsResponse
    | g.ListGroupsResponse
    | g.DeleteGroupsResponse
    | o.OffsetCommitResponse
    | o.OffsetFetchResponse
    | o.OffsetDeleteResponse
    | c.MetadataResponse
    | c.FindCoordinatorResponse
    | c.CreateTopicsResponse
    | c.CreatePartitionsResponse
    | c.DeleteTopicsResponse
    | c.ListOffsetsResponse
    | c.FetchResponse
    | k.AlterConfigsResponse
    | k.DescribeConfigsResponse
    | n.ConsumerHeartbeatResponse
    | n.ConsumerDescribeResponse
)

RequestBody = (
    g.JoinGroupRequest
    | g.SyncGroupRequest
    | g.HeartbeatRequest
    | g.LeaveGroupRequest
    | g.DescribeGroupsRequest
    | g.ListGroupsRequest
    | g.DeleteGroupsRequest
    | o.OffsetCommitRequest
    | o.OffsetFetchRequest
    | o.OffsetDeleteRequest
    | c.MetadataRequest
    | c.FindCoordinatorRequest
    | c.CreateTopicsRequest
    | c.CreatePartitionsRequest
    | c.DeleteTopicsRequest
    | c.ListOffsetsRequest
    | c.FetchRequest
    | k.AlterConfigsRequest
    | k.DescribeConfigsRequest
    | n.ConsumerHeartbeatRequest
    | n.ConsumerDescribeRequest
)


class Reply(NamedTuple):
    """An answer to the request `ref` (a named tuple, like `Effects`: one per request)."""

    ref: int
    body: ResponseBody


class RebalanceReason(StrEnum):
    """Why a group entered PreparingRebalance: a small, fixed set (a metric label)."""

    MEMBER_JOINED = "member_joined"
    MEMBER_LEFT = "member_left"
    SESSION_EXPIRED = "session_expired"
    SYNC_TIMEOUT = "sync_timeout"
    METADATA_CHANGED = "metadata_changed"
    """A known member rejoined (new subscription, or the leader asking for a new round)."""
    STATIC_REPLACEMENT = "static_replacement"
    OVER_CAPACITY = "over_capacity"
    REVOCATION_TIMEOUT = "revocation_timeout"
    """A consumer-protocol member did not release its partitions within its rebalance
    timeout, and was fenced."""
    PROTOCOL_MIGRATION = "protocol_migration"
    """The group moved from the consumer protocol back to the classic one (its last
    consumer-protocol member left): its classic members rejoin."""


@dataclass(frozen=True, slots=True)
class RebalanceStarted:
    """A fact for the edge's metrics: a group entered PreparingRebalance (a consumer-
    protocol group: its group epoch moved)."""

    group_id: str
    reason: RebalanceReason


@dataclass(frozen=True, slots=True)
class JoinPhaseCompleted:
    """The join phase of a round ended: PreparingRebalance -> CompletingRebalance."""

    group_id: str
    duration_ms: int


@dataclass(frozen=True, slots=True)
class RebalanceCompleted:
    """A rebalance ended with a new Stable generation (a consumer-protocol group: every
    member reconciled to the assignment epoch, `generation`; `sync_ms` is 0)."""

    group_id: str
    generation: int
    members: int
    duration_ms: int
    """From the first PreparingRebalance (restarted rounds included) to the assignment."""
    sync_ms: int
    """The sync phase alone: CompletingRebalance -> Stable."""


@dataclass(frozen=True, slots=True)
class SessionExpired:
    """A member was removed because its session timed out without a heartbeat."""

    group_id: str


@dataclass(frozen=True, slots=True)
class MemberReconciled:
    """A consumer-protocol member reached its group's assignment epoch with nothing left
    to release or receive, `duration_ms` after that assignment was computed."""

    group_id: str
    duration_ms: int


@dataclass(frozen=True, slots=True)
class TargetComputed:
    """A consumer-protocol group's target assignment was computed, in `seconds` (of the
    coordinator's work clock) for `members` members and `partitions` partitions."""

    group_id: str
    members: int
    partitions: int
    seconds: float


Observation = (
    RebalanceStarted
    | JoinPhaseCompleted
    | RebalanceCompleted
    | SessionExpired
    | MemberReconciled
    | TargetComputed
)


class Effects(NamedTuple):
    """What one call changed: records to persist, answers to send once they are durable,
    and facts for metrics. A named tuple, not a frozen dataclass: every request makes one,
    and a tuple is made several times faster."""

    records: tuple[Record, ...] = ()
    replies: tuple[Reply, ...] = ()
    observations: tuple[Observation, ...] = ()

    def __bool__(self) -> bool:
        """Whether there is anything to persist or send (not a tuple's length)."""
        return bool(self.records or self.replies)


@dataclass(slots=True)
class Outbox:
    """Collects a call's effects in the order they happen."""

    records: list[Record] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)

    def persist(self, record: Record) -> None:
        self.records.append(record)

    def reply(self, ref: int, body: ResponseBody) -> None:
        self.replies.append(Reply(ref, body))

    def take(self) -> Effects:
        """Freeze and clear what was collected (most calls, a heartbeat's, collect one
        reply and nothing else: empty lists become the shared empty tuple)."""
        records, replies, observations = self.records, self.replies, self.observations
        effects = Effects(
            tuple(records) if records else (),
            tuple(replies) if replies else (),
            tuple(observations) if observations else (),
        )
        if records:
            records.clear()
        replies.clear()
        if observations:
            observations.clear()
        return effects
