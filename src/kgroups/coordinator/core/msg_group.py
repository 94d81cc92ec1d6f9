"""Version-independent group API messages: what the core is asked and what it answers.

Kafka has up to ten versions of each request; the wire layer folds them into these plain
types (filling defaults the old versions lack, e.g. JoinGroup v0's rebalance timeout = its
session timeout) and unfolds the answers into the version the client asked for. The core
therefore never sees a version number except through `RequestContext.api_version`, and
only where Kafka's behaviour itself depends on it (MEMBER_ID_REQUIRED from JoinGroup v4,
SkipAssignment from v9, GROUP_ID_NOT_FOUND from DescribeGroups v6).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from kgroups.protocol.errors import ErrorCode
from kgroups.security.actions import Action

NONE = ErrorCode.none
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
"""Kafka's authorized_operations when they were not asked for (or the group is refused)."""


class RequestContext(NamedTuple):
    """Who is asking: `ref` routes the (possibly much later) reply back to the request.
    A named tuple: one is made for every request, heartbeats included, and a tuple is
    the cheapest immutable record Python makes."""

    ref: int
    api_version: int
    client_id: str = ""
    client_host: str = ""
    principal: str = "User:ANONYMOUS"
    """Who the connection authenticated as (Kafka's `User:name`)."""
    listener: str = ""
    """The listener the request came in on: FindCoordinator and Metadata answer with that
    listener's advertised address ("" or unknown: the coordinator's first)."""
    denied: frozenset[Action] = frozenset()
    """The actions this request needs (`authz.needed`) that the authorizer refused: the
    handler answers them with Kafka's authorization errors. Empty: everything allowed."""


@dataclass(frozen=True, slots=True)
class Protocol:
    """One (name, metadata) entry of a JoinGroup request, in the member's preference order."""

    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[Protocol, ...]
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error: ErrorCode = NONE
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: tuple[JoinGroupMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error: ErrorCode = NONE
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class HeartbeatRequest(NamedTuple):
    """A named tuple (not a frozen dataclass, as the other requests): thousands a second."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error: ErrorCode = NONE


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    members: tuple[LeavingMember, ...]


@dataclass(frozen=True, slots=True)
class LeftMember:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode = NONE


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    error: ErrorCode = NONE
    members: tuple[LeftMember, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest:
    group_ids: tuple[str, ...]
    include_authorized_operations: bool = False
    """v3+: answer each group's allowed operations as a bitfield (KIP-430)."""


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    state: str
    error: ErrorCode = NONE
    error_message: str | None = None
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedMember, ...] = ()
    generation_id: int = -1
    """Not in Kafka's DescribeGroups: sent in a tagged field (`protocol/extensions.py`)."""
    leader_id: str | None = None
    """Not in Kafka's DescribeGroups: sent in a tagged field."""
    authorized_operations: int = AUTHORIZED_OPERATIONS_OMITTED
    """Bit `op` set per allowed Kafka AclOperation code, when the request asked for them."""


@dataclass(frozen=True, slots=True)
class DescribeGroupsResponse:
    groups: tuple[DescribedGroup, ...]


@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    states_filter: tuple[str, ...] = ()
    types_filter: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    groups: tuple[ListedGroup, ...]
    error: ErrorCode = NONE


@dataclass(frozen=True, slots=True)
class DeleteGroupsRequest:
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse:
    results: tuple[tuple[str, ErrorCode], ...]
