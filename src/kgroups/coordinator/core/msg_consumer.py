"""Version-independent messages of Kafka 4's consumer protocol (KIP-848).

ConsumerGroupHeartbeat (API 68) and ConsumerGroupDescribe (API 69). Topics travel by id
on the wire; the requests keep the ids (the wire layer knows no topics) and the core
resolves them; the answers carry both, and the wire layer writes what its version has.
A None field of a heartbeat means "unchanged since my last heartbeat", as in Kafka.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import NamedTuple

from kgroups.protocol.errors import ErrorCode

NONE = ErrorCode.none

OwnedTopics = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: OwnedTopics | None = None
    """The partitions the member owns now (topic id, partitions); None: unchanged."""


@dataclass(frozen=True, slots=True)
class AssignedTopic:
    topic_id: uuid.UUID
    name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatResponse:
    error: ErrorCode = NONE
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: tuple[AssignedTopic, ...] | None = None
    """What the member may use now; None: unchanged since it was last told."""


class SteadyAnswer(NamedTuple):
    """The answer to a heartbeat that changed nothing (`consumer_heartbeat.steady`): a
    ConsumerHeartbeatResponse with no error and no assignment, as a tuple (made thousands
    of times a second: a frozen dataclass's init cost 5% of the server's time)."""

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int

    def response(self) -> ConsumerHeartbeatResponse:
        member_id, member_epoch, interval = self
        return ConsumerHeartbeatResponse(
            member_id=member_id, member_epoch=member_epoch, heartbeat_interval_ms=interval
        )


@dataclass(frozen=True, slots=True)
class ConsumerDescribeRequest:
    group_ids: tuple[str, ...]
    include_authorized_operations: bool = False


CLASSIC_MEMBER = 0
"""ConsumerGroupDescribe's MemberType of a member speaking the classic protocol."""
CONSUMER_MEMBER = 1


@dataclass(frozen=True, slots=True)
class DescribedConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[AssignedTopic, ...]
    target_assignment: tuple[AssignedTopic, ...]
    member_type: int = 1
    """CONSUMER_MEMBER, or CLASSIC_MEMBER for a classic one inside the group (v1+)."""


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroup:
    group_id: str
    error: ErrorCode = NONE
    error_message: str | None = None
    state: str = "Dead"
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()
    authorized_operations: int = -(2**31)


@dataclass(frozen=True, slots=True)
class ConsumerDescribeResponse:
    groups: tuple[DescribedConsumerGroup, ...]
