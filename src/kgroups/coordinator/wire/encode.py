"""From the core's answers to kio response objects of the version the client asked for.

Each encoder describes the answer once, as a dict with every field any version might
carry; `kgroups.protocol.build` keeps what the requested version has. The few real
version differences are folded here: LeaveGroup v0-2 report the member error at the top
level, OffsetFetch v0-7 answer a single group, FindCoordinator v0-3 a single key,
OffsetCommit/OffsetFetch/Fetch from v10/v10/v13 name topics by id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kgroups.coordinator.core import msg_cluster as mc
from kgroups.coordinator.core import msg_configs as mk
from kgroups.coordinator.core import msg_consumer as mn
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core import msg_offsets as mo
from kgroups.coordinator.core.effects import ResponseBody
from kgroups.protocol.apis import ApiKey, response_class
from kgroups.protocol.build import build
from kgroups.protocol.errors import ErrorCode

NO_OPERATIONS = mg.AUTHORIZED_OPERATIONS_OMITTED
"""Kafka's "authorized operations not requested" sentinel."""
TOPIC_IDS_IN_FETCH_FROM = 13


def _join(r: mg.JoinGroupResponse, version: int) -> dict[str, Any]:
    return {
        "error_code": r.error,
        "generation_id": r.generation_id,
        "protocol_type": r.protocol_type,
        "protocol_name": r.protocol_name,
        "leader": r.leader,
        "skip_assignment": r.skip_assignment,
        "member_id": r.member_id,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata,
            }
            for m in r.members
        ],
    }


def _sync(r: mg.SyncGroupResponse, version: int) -> dict[str, Any]:
    return {
        "error_code": r.error,
        "protocol_type": r.protocol_type,
        "protocol_name": r.protocol_name,
        "assignment": r.assignment,
    }


def _heartbeat(r: mg.HeartbeatResponse, version: int) -> dict[str, Any]:
    return {"error_code": r.error}


def _leave(r: mg.LeaveGroupResponse, version: int) -> dict[str, Any]:
    if version < 3:
        error = r.error
        if error is ErrorCode.none and r.members:
            error = r.members[0].error
        return {"error_code": error}
    return {
        "error_code": r.error,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "error_code": m.error,
            }
            for m in r.members
        ],
    }


def _commit(r: mo.OffsetCommitResponse, version: int) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": t.name,
                "topic_id": t.topic_id,
                "partitions": [{"partition_index": p, "error_code": e} for p, e in t.partitions],
            }
            for t in r.topics
        ]
    }


def _fetched_topics(topics: tuple[mo.FetchedTopic, ...], *, ids: bool) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            **({"topic_id": t.topic_id} if ids else {}),
            "partitions": [
                {
                    "partition_index": p.partition,
                    "committed_offset": p.offset,
                    "committed_leader_epoch": p.leader_epoch,
                    "metadata": p.metadata,
                    "error_code": p.error,
                }
                for p in t.partitions
            ],
        }
        for t in topics
    ]


def _offset_fetch(r: mo.OffsetFetchResponse, version: int) -> dict[str, Any]:
    if version >= 8:
        return {
            "groups": [
                {
                    "group_id": g.group_id,
                    "topics": _fetched_topics(g.topics, ids=True),
                    "error_code": g.error,
                }
                for g in r.groups
            ]
        }
    group = r.groups[0]
    return {"topics": _fetched_topics(group.topics, ids=False), "error_code": group.error}


def _offset_delete(r: mo.OffsetDeleteResponse, version: int) -> dict[str, Any]:
    return {
        "error_code": r.error,
        "topics": [
            {
                "name": name,
                "partitions": [{"partition_index": p, "error_code": e} for p, e in parts],
            }
            for name, parts in r.topics
        ],
    }


def _describe(r: mg.DescribeGroupsResponse, version: int) -> dict[str, Any]:
    return {
        "groups": [
            {
                "error_code": g.error,
                "error_message": g.error_message,
                "group_id": g.group_id,
                "group_state": g.state,
                "protocol_type": g.protocol_type,
                "protocol_data": g.protocol_data,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in g.members
                ],
                "authorized_operations": g.authorized_operations,
                # Tagged fields of kgroups' v5+ extension (protocol.extensions).
                **(
                    {"generation_id": g.generation_id, "leader_id": g.leader_id or ""}
                    if version >= 5
                    else {}
                ),
            }
            for g in r.groups
        ]
    }


def _list(r: mg.ListGroupsResponse, version: int) -> dict[str, Any]:
    return {
        "error_code": r.error,
        "groups": [
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type,
                "group_state": g.state,
                "group_type": g.group_type,
            }
            for g in r.groups
        ],
    }


def _delete_groups(r: mg.DeleteGroupsResponse, version: int) -> dict[str, Any]:
    return {"results": [{"group_id": g, "error_code": e} for g, e in r.results]}


def _metadata(r: mc.MetadataResponse, version: int) -> dict[str, Any]:
    return {
        "brokers": [
            {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
            for b in r.brokers
        ],
        "cluster_id": r.cluster_id,
        "controller_id": r.controller_id,
        "cluster_authorized_operations": NO_OPERATIONS,
        "topics": [
            {
                "error_code": t.error,
                "name": t.name,
                "topic_id": t.topic_id,
                "is_internal": t.is_internal,
                "topic_authorized_operations": NO_OPERATIONS,
                "partitions": [
                    {
                        "error_code": p.error,
                        "partition_index": p.partition,
                        "leader_id": p.leader,
                        "leader_epoch": p.leader_epoch,
                        "replica_nodes": p.replicas,
                        "isr_nodes": p.isr,
                        "offline_replicas": (),
                    }
                    for p in t.partitions
                ],
            }
            for t in r.topics
        ],
    }


def _find_coordinator(r: mc.FindCoordinatorResponse, version: int) -> dict[str, Any]:
    if version < 4:
        c = r.coordinators[0]
        return {
            "error_code": c.error,
            "error_message": c.error_message,
            "node_id": c.node_id,
            "host": c.host,
            "port": c.port,
        }
    return {
        "coordinators": [
            {
                "key": c.key,
                "node_id": c.node_id,
                "host": c.host,
                "port": c.port,
                "error_code": c.error,
                "error_message": c.error_message,
            }
            for c in r.coordinators
        ]
    }


def _create_topics(r: mc.CreateTopicsResponse, version: int) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": t.name,
                "topic_id": t.topic_id,
                "error_code": t.error,
                "error_message": t.error_message,
                "num_partitions": t.num_partitions,
                "replication_factor": t.replication_factor,
                "configs": [] if t.error is ErrorCode.none else None,
            }
            for t in r.topics
        ]
    }


def _create_partitions(r: mc.CreatePartitionsResponse, version: int) -> dict[str, Any]:
    return {
        "results": [
            {"name": t.name, "error_code": t.error, "error_message": t.error_message}
            for t in r.results
        ]
    }


def _delete_topics(r: mc.DeleteTopicsResponse, version: int) -> dict[str, Any]:
    return {
        "responses": [
            {
                "name": t.name,
                "topic_id": t.topic_id,
                "error_code": t.error,
                "error_message": t.error_message,
            }
            for t in r.results
        ]
    }


def _list_offsets(r: mc.ListOffsetsResponse, version: int) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": name,
                "partitions": [
                    {
                        "partition_index": p.partition,
                        "error_code": p.error,
                        "timestamp": p.timestamp,
                        "offset": p.offset,
                        "leader_epoch": p.leader_epoch,
                    }
                    for p in parts
                ],
            }
            for name, parts in r.topics
        ]
    }


def _fetch(r: mc.FetchResponse, version: int) -> dict[str, Any]:
    return {
        "error_code": r.error,
        "session_id": 0,
        "responses": [
            {
                "topic": ref.name,
                "topic_id": ref.topic_id,
                "partitions": [
                    {
                        "partition_index": p.partition,
                        "error_code": p.error,
                        "high_watermark": p.high_watermark,
                        "last_stable_offset": p.last_stable_offset,
                        "log_start_offset": p.log_start_offset,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": b"",
                    }
                    for p in parts
                ],
            }
            for ref, parts in r.topics
        ],
    }


def _alter_configs(r: mk.AlterConfigsResponse, version: int) -> dict[str, Any]:
    return {
        "responses": [
            {
                "error_code": o.error,
                "error_message": o.error_message,
                "resource_type": o.resource_type,
                "resource_name": o.name,
            }
            for o in r.results
        ]
    }


def _describe_configs(r: mk.DescribeConfigsResponse, version: int) -> dict[str, Any]:
    return {
        "results": [
            {
                "error_code": d.error,
                "error_message": d.error_message,
                "resource_type": d.resource_type,
                "resource_name": d.name,
                "configs": [
                    {
                        "name": e.name,
                        "value": e.value,
                        "read_only": e.read_only,
                        "config_source": e.source,
                        "is_sensitive": False,
                        "synonyms": [],
                        "config_type": e.config_type,
                        "documentation": None,
                    }
                    for e in d.entries
                ],
            }
            for d in r.results
        ]
    }


def _assigned(topics: tuple[mn.AssignedTopic, ...], *, names: bool) -> list[dict[str, Any]]:
    return [
        {
            "topic_id": t.topic_id,
            **({"topic_name": t.name} if names else {}),
            "partitions": list(t.partitions),
        }
        for t in topics
    ]


def _consumer_heartbeat(r: mn.ConsumerHeartbeatResponse, version: int) -> dict[str, Any]:
    return {
        "error_code": r.error,
        "error_message": r.error_message,
        "member_id": r.member_id,
        "member_epoch": r.member_epoch,
        "heartbeat_interval": r.heartbeat_interval_ms,
        "assignment": None
        if r.assignment is None
        else {"topic_partitions": _assigned(r.assignment, names=False)},
    }


def _consumer_describe(r: mn.ConsumerDescribeResponse, version: int) -> dict[str, Any]:
    return {
        "groups": [
            {
                "error_code": g.error,
                "error_message": g.error_message,
                "group_id": g.group_id,
                "group_state": g.state,
                "group_epoch": g.group_epoch,
                "assignment_epoch": g.assignment_epoch,
                "assignor_name": g.assignor_name,
                "authorized_operations": g.authorized_operations,
                "members": [
                    {
                        "member_id": m.member_id,
                        "instance_id": m.instance_id,
                        "rack_id": m.rack_id,
                        "member_epoch": m.member_epoch,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "subscribed_topic_names": list(m.subscribed_topic_names),
                        "subscribed_topic_regex": m.subscribed_topic_regex,
                        "assignment": {"topic_partitions": _assigned(m.assignment, names=True)},
                        "target_assignment": {
                            "topic_partitions": _assigned(m.target_assignment, names=True)
                        },
                        "member_type": m.member_type,
                    }
                    for m in g.members
                ],
            }
            for g in r.groups
        ]
    }


Encoder = Callable[[Any, int], dict[str, Any]]

ENCODERS: dict[int, Encoder] = {
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _consumer_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: _consumer_describe,
    ApiKey.JOIN_GROUP: _join,
    ApiKey.SYNC_GROUP: _sync,
    ApiKey.HEARTBEAT: _heartbeat,
    ApiKey.LEAVE_GROUP: _leave,
    ApiKey.OFFSET_COMMIT: _commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.OFFSET_DELETE: _offset_delete,
    ApiKey.DESCRIBE_GROUPS: _describe,
    ApiKey.LIST_GROUPS: _list,
    ApiKey.DELETE_GROUPS: _delete_groups,
    ApiKey.METADATA: _metadata,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.FETCH: _fetch,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _alter_configs,
    ApiKey.DESCRIBE_CONFIGS: _describe_configs,
}


def encode(api_key: int, version: int, response: ResponseBody) -> Any:
    """The kio response object for `response`, in `version` of API `api_key`."""
    return build(response_class(api_key, version), ENCODERS[api_key](response, version))
