"""What admin answers are made of: plain views of groups, members, offsets and nodes,
the admin constants, and Kafka's own words for an error code.

Shared by the single-connection `Admin` and the routing `Cluster`, and by everything that
prints or mirrors their answers (the group CLI, the operator's status, kubectl views).
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
from dataclasses import dataclass, field

import kio.schema.errors

from kgroups.protocol.consumer import ConsumerProtocolError, decode_assignment
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.groups import GROUP_RESOURCE_TYPE, GroupState

TIMEOUT_MS = 30_000
GROUP_RESOURCE = GROUP_RESOURCE_TYPE
"""ConfigResource.Type.GROUP (KIP-848): per-group configs through (Incremental)AlterConfigs."""
SET, DELETE = 0, 1
"""IncrementalAlterConfigs operations."""
EARLIEST, LATEST = -2, -1
"""ListOffsets' special timestamps: the log's start and its end (the high watermark)."""
TP = tuple[str, int]
"""A topic partition."""


class AdminError(RuntimeError):
    """An admin request failed with a Kafka error code."""

    def __init__(self, code: ErrorCode, message: str | None) -> None:
        super().__init__(f"{code.name}: {message or 'no message'}")
        self.code = code


@dataclass(frozen=True, slots=True)
class MemberView:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: dict[str, tuple[int, ...]]
    epoch: int | None = None
    """A KIP-848 member's epoch (None for a classic group's member)."""
    target: dict[str, tuple[int, ...]] | None = None
    """A KIP-848 member's target assignment (None for a classic group's member)."""
    upgraded: bool | None = None
    """In a KIP-848 group: whether the member speaks the consumer protocol (False: a
    classic member inside it, while an application rolls between the protocols); None
    for a classic group's member (Kafka's MemberDescription.upgraded)."""


@dataclass(frozen=True, slots=True)
class GroupView:
    """A group as DescribeGroups shows it (generation and leader: kgroups' tagged fields)."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberView, ...] = field(default_factory=tuple)
    generation: int = -1
    leader: str = ""
    group_type: str = "classic"
    """"classic", or "consumer" for a KIP-848 group (Kafka 4): then `generation` is the
    group epoch, `protocol` the server-side assignor, and there is no leader."""
    assignment_epoch: int | None = None
    """A KIP-848 group's target assignment epoch."""

    @property
    def exists(self) -> bool:
        return self.state != GroupState.DEAD.value


@dataclass(frozen=True, slots=True)
class Node:
    """A broker as Metadata and FindCoordinator name it (kgroups is one node, id 0)."""

    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ListedGroup:
    """One group as ListGroups lists it."""

    group_id: str
    state: str
    protocol_type: str
    group_type: str


@dataclass(frozen=True, slots=True)
class Committed:
    """A committed offset as OffsetFetch returns it."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class Topology:
    """What Metadata says about brokers and topics: who leads each partition."""

    nodes: dict[int, Node]
    leaders: dict[str, dict[int, int]]
    """topic -> partition -> leader's node id (-1: no leader now)."""
    missing: dict[str, ErrorCode]
    """Topics asked for that the cluster does not serve, with the reason."""


@functools.cache
def _kafka_messages() -> dict[str, str]:
    """Kafka's message for each error code, which kio keeps as the enum members'
    docstrings (generated from Kafka's `Errors.java`); Python drops those at runtime,
    so they are read from kio's source once, when an error is first shown."""
    try:
        tree = ast.parse(inspect.getsource(kio.schema.errors))
    except (OSError, TypeError, SyntaxError):
        return {}
    messages: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ErrorCode":
            for assign, doc in itertools.pairwise(node.body):
                if (
                    isinstance(assign, ast.Assign)
                    and isinstance(assign.targets[0], ast.Name)
                    and isinstance(doc, ast.Expr)
                    and isinstance(doc.value, ast.Constant)
                    and isinstance(doc.value.value, str)
                ):
                    messages[assign.targets[0].id] = doc.value.value
    return messages


def error_text(code: ErrorCode) -> str:
    """Kafka's message for a code (`The group is not empty.`), or its name."""
    return _kafka_messages().get(code.name) or code.name.upper()


def error_message(code: ErrorCode) -> str:
    """`NON_EMPTY_GROUP: The group is not empty.`: Kafka's name and message for a code."""
    text = _kafka_messages().get(code.name)
    return f"{code.name.upper()}: {text}" if text else code.name.upper()


def raise_for(code: ErrorCode, message: str | None = None) -> None:
    if code is not ErrorCode.none:
        raise AdminError(code, message)


def assignment_of(protocol_type: str, data: bytes) -> dict[str, tuple[int, ...]]:
    if protocol_type != "consumer" or not data:
        return {}
    try:
        return dict(decode_assignment(data).partitions)
    except ConsumerProtocolError:
        return {}
