"""Admin operations against a coordinator (or any Kafka broker) over the Kafka protocol.

Topics and groups are managed with the standard admin APIs, so the coordinator stays a
plain Kafka endpoint: the CLI, the operator and any Kafka admin client do the same thing.
`Admin` keeps one connection open and reopens it after a failure, which is what a
long-running caller (the operator polls every group each second) needs; the module-level
functions are one-shot conveniences for the CLI.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from kio.schema.create_partitions.v3 import request as cp
from kio.schema.create_partitions.v3 import response as cpr
from kio.schema.create_topics.v7 import request as ct
from kio.schema.create_topics.v7 import response as ctr
from kio.schema.delete_groups.v2 import request as dg
from kio.schema.delete_groups.v2 import response as dgrr
from kio.schema.delete_topics.v6 import request as dt
from kio.schema.delete_topics.v6 import response as dtr
from kio.schema.describe_configs.v4 import request as dc
from kio.schema.describe_configs.v4 import response as dcr
from kio.schema.describe_groups.v5 import request as dgr
from kio.schema.incremental_alter_configs.v1 import request as iac
from kio.schema.incremental_alter_configs.v1 import response as iacr
from kio.schema.list_offsets.v9 import request as lo
from kio.schema.list_offsets.v9 import response as lor
from kio.schema.metadata.v12 import request as md
from kio.schema.metadata.v12 import response as mdr
from kio.schema.offset_fetch.v8 import request as of
from kio.schema.offset_fetch.v8 import response as ofr

from kgroups.protocol.build import build
from kgroups.protocol.client import CoordinatorUnavailable, ReconnectingConnection, fixed
from kgroups.protocol.consumer import ConsumerProtocolError, decode_assignment
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.extensions import DescribeGroupsResponseV5
from kgroups.protocol.groups import GROUP_RESOURCE_TYPE, GroupState

TIMEOUT_MS = 30_000
R = TypeVar("R")
GROUP_RESOURCE = GROUP_RESOURCE_TYPE
"""ConfigResource.Type.GROUP (KIP-848): per-group configs through (Incremental)AlterConfigs."""
SET, DELETE = 0, 1
"""IncrementalAlterConfigs operations."""


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

    @property
    def exists(self) -> bool:
        return self.state != GroupState.DEAD.value


def _check(code: ErrorCode, message: str | None = None) -> None:
    if code is not ErrorCode.none:
        raise AdminError(code, message)


def _assignment(protocol_type: str, data: bytes) -> dict[str, tuple[int, ...]]:
    if protocol_type != "consumer" or not data:
        return {}
    try:
        return dict(decode_assignment(data).partitions)
    except ConsumerProtocolError:
        return {}


class Admin:
    """A reconnecting admin client for one coordinator address."""

    def __init__(self, host: str, port: int, *, client_id: str = "kgroups-admin") -> None:
        self.host, self.port = host, port
        self._conn = ReconnectingConnection(
            fixed(host, port), client_id=client_id, timeout=TIMEOUT_MS / 1000 + 5
        )

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._conn.close()

    async def request(self, body: object, answer: type[R], timeout: float | None = None) -> R:
        """Send one request and get an `answer` (the response class of its API and
        version); any connection failure becomes CoordinatorUnavailable."""
        try:
            return await self._conn.ask(body, answer, timeout=timeout)
        except CoordinatorUnavailable as exc:
            raise CoordinatorUnavailable(
                f"coordinator {self.host}:{self.port} unreachable: {exc}"
            ) from exc

    # --- topics ---------------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int) -> None:
        req = build(
            ct.CreateTopicsRequest,
            {
                "topics": [{"name": name, "num_partitions": partitions, "replication_factor": -1}],
                "timeout": TIMEOUT_MS,
            },
        )
        result = (await self.request(req, ctr.CreateTopicsResponse)).topics[0]
        _check(result.error_code, result.error_message)

    async def create_partitions(self, name: str, partitions: int) -> None:
        req = build(
            cp.CreatePartitionsRequest,
            {
                "topics": [{"name": name, "count": partitions, "assignments": None}],
                "timeout": TIMEOUT_MS,
            },
        )
        result = (await self.request(req, cpr.CreatePartitionsResponse)).results[0]
        _check(result.error_code, result.error_message)

    async def delete_topic(self, name: str) -> None:
        req = build(dt.DeleteTopicsRequest, {"topics": [{"name": name}], "timeout": TIMEOUT_MS})
        result = (await self.request(req, dtr.DeleteTopicsResponse)).responses[0]
        _check(result.error_code, result.error_message)

    async def topics(self, names: list[str] | None = None) -> dict[str, int]:
        """Partition counts of the named topics that exist (all topics for None)."""
        topics = None if names is None else [{"name": n} for n in names]
        req = build(md.MetadataRequest, {"topics": topics, "allow_auto_topic_creation": False})
        response = await self.request(req, mdr.MetadataResponse)
        return {
            t.name or "": len(t.partitions)
            for t in response.topics
            if t.error_code is ErrorCode.none
        }

    async def end_offsets(self, name: str, partitions: int) -> dict[int, int]:
        """Where each partition's log ends, as far as the coordinator knows (ListOffsets
        latest: the furthest committed or reported by a source)."""
        spec = [{"partition_index": p, "timestamp": -1} for p in range(partitions)]
        topics = [{"name": name, "partitions": spec}]
        req = build(lo.ListOffsetsRequest, {"replica_id": -1, "topics": topics})
        (topic,) = (await self.request(req, lor.ListOffsetsResponse)).topics
        for p in topic.partitions:
            _check(p.error_code)
        return {p.partition_index: p.offset for p in topic.partitions}

    # --- groups -----------------------------------------------------------------------------

    async def describe_group(self, group_id: str) -> GroupView:
        req = build(dgr.DescribeGroupsRequest, {"groups": [group_id]})
        g = (await self.request(req, DescribeGroupsResponseV5)).groups[0]
        if g.error_code is ErrorCode.group_id_not_found:
            return GroupView(group_id, GroupState.DEAD.value, "", "")
        _check(g.error_code)
        members = tuple(
            MemberView(
                member_id=m.member_id,
                instance_id=m.group_instance_id,
                client_id=m.client_id,
                host=m.client_host,
                assignment=_assignment(g.protocol_type, m.member_assignment),
            )
            for m in g.members
        )
        return GroupView(
            g.group_id,
            g.group_state,
            g.protocol_type,
            g.protocol_data,
            members,
            int(g.generation_id),
            g.leader_id,
        )

    async def committed_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        """Every committed offset of the group (OffsetFetch for all topics)."""
        req = build(of.OffsetFetchRequest, {"groups": [{"group_id": group_id, "topics": None}]})
        group = (await self.request(req, ofr.OffsetFetchResponse)).groups[0]
        _check(group.error_code)
        return {
            (t.name, p.partition_index): p.committed_offset
            for t in group.topics
            for p in t.partitions
            if p.error_code is ErrorCode.none and p.committed_offset >= 0
        }

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups; returns the group's error code (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND...)."""
        req = build(dg.DeleteGroupsRequest, {"groups_names": [group_id]})
        code: ErrorCode = (await self.request(req, dgrr.DeleteGroupsResponse)).results[0].error_code
        return code

    async def alter_group_configs(self, group_id: str, configs: Mapping[str, int | None]) -> None:
        """Set (or, for None, remove) per-group overrides of coordinator settings."""
        req = build(
            iac.IncrementalAlterConfigsRequest,
            {
                "resources": [
                    {
                        "resource_type": GROUP_RESOURCE,
                        "resource_name": group_id,
                        "configs": [
                            {
                                "name": name,
                                "config_operation": DELETE if value is None else SET,
                                "value": None if value is None else str(value),
                            }
                            for name, value in sorted(configs.items())
                        ],
                    }
                ],
                "validate_only": False,
            },
        )
        result = (await self.request(req, iacr.IncrementalAlterConfigsResponse)).responses[0]
        _check(result.error_code, result.error_message)

    async def group_configs(self, group_id: str) -> dict[str, str]:
        """The group's effective settings (overrides and coordinator defaults)."""
        req = build(
            dc.DescribeConfigsRequest,
            {
                "resources": [
                    {
                        "resource_type": GROUP_RESOURCE,
                        "resource_name": group_id,
                        "configuration_keys": None,
                    }
                ]
            },
        )
        result = (await self.request(req, dcr.DescribeConfigsResponse)).results[0]
        _check(result.error_code, result.error_message)
        return {c.name: c.value or "" for c in result.configs}


# --- one-shot helpers for the CLI ----------------------------------------------------------


async def create_topic(host: str, port: int, name: str, partitions: int) -> None:
    async with Admin(host, port) as admin:
        await admin.create_topic(name, partitions)


async def create_partitions(host: str, port: int, name: str, partitions: int) -> None:
    async with Admin(host, port) as admin:
        await admin.create_partitions(name, partitions)


async def delete_topic(host: str, port: int, name: str) -> None:
    async with Admin(host, port) as admin:
        await admin.delete_topic(name)


async def list_topics(host: str, port: int) -> list[tuple[str, int]]:
    async with Admin(host, port) as admin:
        return sorted((await admin.topics()).items())
