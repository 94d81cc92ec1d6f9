"""`Admin`: admin requests over one reconnecting connection to one coordinator or broker.

It keeps its connection open and reopens it after a failure, which is what a long-running
caller (the operator polls every group each second) needs. Each method is one Kafka admin
API at a version every supported broker serves, with its answer turned into the plain
views of `views`, and a refused request raised as `AdminError`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import TypeVar

from kio.schema.consumer_group_describe.v1 import request as cgd
from kio.schema.consumer_group_describe.v1 import response as cgdr
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
from kio.schema.find_coordinator.v4 import request as fc
from kio.schema.find_coordinator.v4 import response as fcr
from kio.schema.incremental_alter_configs.v1 import request as iac
from kio.schema.incremental_alter_configs.v1 import response as iacr
from kio.schema.list_groups.v5 import request as lg
from kio.schema.list_groups.v5 import response as lgr
from kio.schema.list_offsets.v9 import request as lo
from kio.schema.list_offsets.v9 import response as lor
from kio.schema.metadata.v12 import request as md
from kio.schema.metadata.v12 import response as mdr
from kio.schema.offset_commit.v8 import request as oc
from kio.schema.offset_commit.v8 import response as ocr
from kio.schema.offset_delete.v0 import request as od
from kio.schema.offset_delete.v0 import response as odr
from kio.schema.offset_fetch.v8 import request as of
from kio.schema.offset_fetch.v8 import response as ofr

from kgroups.admin.views import (
    DELETE,
    GROUP_RESOURCE,
    SET,
    TIMEOUT_MS,
    TP,
    Committed,
    GroupView,
    ListedGroup,
    MemberView,
    Node,
    Topology,
    assignment_of,
    raise_for,
)
from kgroups.protocol.build import build
from kgroups.protocol.client import (
    Connector,
    CoordinatorUnavailable,
    ReconnectingConnection,
    fixed,
)
from kgroups.protocol.errors import ErrorCode
from kgroups.protocol.extensions import DescribeGroupsResponseV5
from kgroups.protocol.groups import NO_GENERATION, GroupState
from kgroups.security.client import ClientSecurity

R = TypeVar("R")

CONSUMER_MEMBER_TYPE = 1
"""ConsumerGroupDescribe v1's MemberType of a consumer-protocol member (0: classic)."""


class Admin:
    """A reconnecting admin client for one coordinator address."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "kgroups-admin",
        timeout: float = TIMEOUT_MS / 1000 + 5,
        security: ClientSecurity | None = None,
        connect: Connector | None = None,
    ) -> None:
        """`security`: TLS and SASL settings for a secured coordinator; `connect` opens
        its connections instead (a test's network)."""
        self.host, self.port = host, port
        security = self.security = security or ClientSecurity()
        self._conn = ReconnectingConnection(
            fixed(host, port), client_id=client_id, timeout=timeout,
            connect=connect or security.connector(), authenticate=security.authenticator(),
        )  # fmt: skip

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
        raise_for(result.error_code, result.error_message)

    async def create_partitions(self, name: str, partitions: int) -> None:
        req = build(
            cp.CreatePartitionsRequest,
            {
                "topics": [{"name": name, "count": partitions, "assignments": None}],
                "timeout": TIMEOUT_MS,
            },
        )
        result = (await self.request(req, cpr.CreatePartitionsResponse)).results[0]
        raise_for(result.error_code, result.error_message)

    async def delete_topic(self, name: str) -> None:
        req = build(dt.DeleteTopicsRequest, {"topics": [{"name": name}], "timeout": TIMEOUT_MS})
        result = (await self.request(req, dtr.DeleteTopicsResponse)).responses[0]
        raise_for(result.error_code, result.error_message)

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
            raise_for(p.error_code)
        return {p.partition_index: p.offset for p in topic.partitions}

    async def topology(self, topics: Iterable[str] | None = None) -> Topology:
        """Brokers, and the leader of every partition of `topics` (all topics for None)."""
        names = None if topics is None else [{"name": n} for n in sorted(set(topics))]
        req = build(md.MetadataRequest, {"topics": names, "allow_auto_topic_creation": False})
        response = await self.request(req, mdr.MetadataResponse)
        nodes = {
            int(b.node_id): Node(int(b.node_id), b.host, int(b.port)) for b in response.brokers
        }
        leaders: dict[str, dict[int, int]] = {}
        missing: dict[str, ErrorCode] = {}
        for t in response.topics:
            if t.error_code is ErrorCode.none:
                leaders[t.name or ""] = {
                    int(p.partition_index): int(p.leader_id) for p in t.partitions
                }
            else:
                missing[t.name or ""] = t.error_code
        return Topology(nodes, leaders, missing)

    async def list_offsets(self, specs: Mapping[TP, int]) -> dict[TP, int | ErrorCode]:
        """ListOffsets (read uncommitted, as Kafka's admin does): per partition, the
        offset for its timestamp (EARLIEST, LATEST or milliseconds; -1 when no record is
        that new), or the partition's error. Send it to the partitions' leader."""
        topics: dict[str, list[dict[str, int]]] = {}
        for (topic, partition), timestamp in sorted(specs.items()):
            topics.setdefault(topic, []).append(
                {"partition_index": partition, "timestamp": timestamp}
            )
        req = build(
            lo.ListOffsetsRequest,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            },
        )
        response = await self.request(req, lor.ListOffsetsResponse)
        return {
            (t.name, int(p.partition_index)): (
                int(p.offset) if p.error_code is ErrorCode.none else p.error_code
            )
            for t in response.topics
            for p in t.partitions
        }

    # --- groups -----------------------------------------------------------------------------

    async def find_coordinators(self, group_ids: Collection[str]) -> dict[str, Node | ErrorCode]:
        """FindCoordinator (batched, v4+): each group's coordinator, or why there is none."""
        req = build(fc.FindCoordinatorRequest, {"key_type": 0, "coordinator_keys": list(group_ids)})
        response = await self.request(req, fcr.FindCoordinatorResponse)
        return {
            c.key: (
                Node(int(c.node_id), c.host, int(c.port))
                if c.error_code is ErrorCode.none
                else c.error_code
            )
            for c in response.coordinators
        }

    async def describe_group(self, group_id: str) -> GroupView:
        """One group, of either protocol: a group DescribeGroups calls Dead is asked for
        with ConsumerGroupDescribe (a Kafka 4 consumer-protocol group is Dead to the
        former), and stays Dead if that does not know it either."""
        (view,) = await self.describe_groups([group_id])
        if view.exists:
            return view
        (consumer,) = await self.describe_consumer_groups([group_id])
        return consumer

    async def describe_groups(self, group_ids: Collection[str]) -> list[GroupView]:
        """DescribeGroups for several groups at once; a group the server does not know is
        Dead (Kafka answers so before v6; kgroups answers GROUP_ID_NOT_FOUND from v6)."""
        req = build(dgr.DescribeGroupsRequest, {"groups": list(group_ids)})
        views = []
        for g in (await self.request(req, DescribeGroupsResponseV5)).groups:
            if g.error_code is ErrorCode.group_id_not_found:
                views.append(GroupView(g.group_id, GroupState.DEAD.value, "", ""))
                continue
            raise_for(g.error_code, f"group {g.group_id!r}")
            members = tuple(
                MemberView(
                    member_id=m.member_id,
                    instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    host=m.client_host,
                    assignment=assignment_of(g.protocol_type, m.member_assignment),
                )
                for m in g.members
            )
            views.append(
                GroupView(
                    g.group_id,
                    g.group_state,
                    g.protocol_type,
                    g.protocol_data,
                    members,
                    int(g.generation_id),
                    g.leader_id,
                )
            )
        return views

    async def describe_consumer_groups(self, group_ids: Collection[str]) -> list[GroupView]:
        """ConsumerGroupDescribe (KIP-848): groups of Kafka 4's consumer protocol, which
        DescribeGroups calls Dead (on Kafka and on kgroups alike): ask for the groups
        ListGroups calls "consumer"."""
        req = build(
            cgd.ConsumerGroupDescribeRequest,
            {"group_ids": list(group_ids), "include_authorized_operations": False},
        )
        views = []
        for g in (await self.request(req, cgdr.ConsumerGroupDescribeResponse)).groups:
            if g.error_code is ErrorCode.group_id_not_found:
                views.append(GroupView(g.group_id, GroupState.DEAD.value, "", ""))
                continue
            raise_for(g.error_code, g.error_message or f"group {g.group_id!r}")
            members = tuple(
                MemberView(
                    member_id=m.member_id,
                    instance_id=m.instance_id,
                    client_id=m.client_id,
                    host=m.client_host,
                    assignment={
                        tp.topic_name: tuple(int(p) for p in tp.partitions)
                        for tp in m.assignment.topic_partitions
                    },
                    epoch=int(m.member_epoch),
                    target={
                        tp.topic_name: tuple(int(p) for p in tp.partitions)
                        for tp in m.target_assignment.topic_partitions
                    },
                    upgraded=None if m.member_type < 0 else m.member_type == CONSUMER_MEMBER_TYPE,
                )
                for m in g.members
            )
            views.append(
                GroupView(
                    g.group_id,
                    g.group_state,
                    "consumer",
                    g.assignor_name,
                    members,
                    generation=int(g.group_epoch),
                    group_type="consumer",
                    assignment_epoch=int(g.assignment_epoch),
                )
            )
        return views

    async def list_groups(
        self, states: Collection[str] = (), types: Collection[str] = ()
    ) -> list[ListedGroup]:
        """ListGroups, filtered by state and type on the server (v4/v5 filters)."""
        req = build(
            lg.ListGroupsRequest, {"states_filter": list(states), "types_filter": list(types)}
        )
        response = await self.request(req, lgr.ListGroupsResponse)
        raise_for(response.error_code)
        return [
            ListedGroup(g.group_id, g.group_state, g.protocol_type, g.group_type)
            for g in response.groups
        ]

    async def offsets(self, group_id: str) -> dict[TP, Committed]:
        """Every committed offset of the group, with its leader epoch and metadata."""
        req = build(of.OffsetFetchRequest, {"groups": [{"group_id": group_id, "topics": None}]})
        group = (await self.request(req, ofr.OffsetFetchResponse)).groups[0]
        raise_for(group.error_code, f"group {group_id!r}")
        return {
            (t.name, int(p.partition_index)): Committed(
                int(p.committed_offset), int(p.committed_leader_epoch), p.metadata or ""
            )
            for t in group.topics
            for p in t.partitions
            if p.error_code is ErrorCode.none and p.committed_offset >= 0
        }

    async def committed_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        """Every committed offset of the group (OffsetFetch for all topics)."""
        req = build(of.OffsetFetchRequest, {"groups": [{"group_id": group_id, "topics": None}]})
        group = (await self.request(req, ofr.OffsetFetchResponse)).groups[0]
        raise_for(group.error_code)
        return {
            (t.name, p.partition_index): p.committed_offset
            for t in group.topics
            for p in t.partitions
            if p.error_code is ErrorCode.none and p.committed_offset >= 0
        }

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups; returns the group's error code (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND...)."""
        return (await self.delete_groups([group_id]))[group_id]

    async def delete_groups(self, group_ids: Collection[str]) -> dict[str, ErrorCode]:
        """DeleteGroups for several groups; each group's error code."""
        req = build(dg.DeleteGroupsRequest, {"groups_names": list(group_ids)})
        response = await self.request(req, dgrr.DeleteGroupsResponse)
        return {r.group_id: r.error_code for r in response.results}

    async def commit_offsets(self, group_id: str, offsets: Mapping[TP, int]) -> dict[TP, ErrorCode]:
        """OffsetCommit as an admin, not a member (generation -1, no member id), which a
        coordinator accepts only while the group has no members; each partition's code."""
        topics: dict[str, list[dict[str, object]]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "committed_offset": offset,
                    "committed_leader_epoch": -1,
                    "committed_metadata": "",
                }
            )
        req = build(
            oc.OffsetCommitRequest,
            {
                "group_id": group_id,
                "generation_id_or_member_epoch": NO_GENERATION,
                "member_id": "",
                "group_instance_id": None,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            },
        )
        response = await self.request(req, ocr.OffsetCommitResponse)
        return {
            (t.name, int(p.partition_index)): p.error_code
            for t in response.topics
            for p in t.partitions
        }

    async def delete_offsets(
        self, group_id: str, partitions: Iterable[TP]
    ) -> tuple[ErrorCode, dict[TP, ErrorCode]]:
        """OffsetDelete: the group-level code and each partition's."""
        topics: dict[str, list[dict[str, int]]] = {}
        for topic, partition in sorted(set(partitions)):
            topics.setdefault(topic, []).append({"partition_index": partition})
        req = build(
            od.OffsetDeleteRequest,
            {
                "group_id": group_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            },
        )
        response = await self.request(req, odr.OffsetDeleteResponse)
        return response.error_code, {
            (t.name, int(p.partition_index)): p.error_code
            for t in response.topics
            for p in t.partitions
        }

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
        raise_for(result.error_code, result.error_message)

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
        raise_for(result.error_code, result.error_message)
        return {c.name: c.value or "" for c in result.configs}


# --- one-shot helpers for the CLI ----------------------------------------------------------


async def create_topic(
    host: str, port: int, name: str, partitions: int, security: ClientSecurity | None = None
) -> None:
    async with Admin(host, port, security=security) as admin:
        await admin.create_topic(name, partitions)


async def create_partitions(
    host: str, port: int, name: str, partitions: int, security: ClientSecurity | None = None
) -> None:
    async with Admin(host, port, security=security) as admin:
        await admin.create_partitions(name, partitions)


async def delete_topic(
    host: str, port: int, name: str, security: ClientSecurity | None = None
) -> None:
    async with Admin(host, port, security=security) as admin:
        await admin.delete_topic(name)


async def list_topics(
    host: str, port: int, security: ClientSecurity | None = None
) -> list[tuple[str, int]]:
    async with Admin(host, port, security=security) as admin:
        return sorted((await admin.topics()).items())
