"""The group requests a member sends, built from plain values, and the leader's job.

Kept apart from the member's state machine so that `member.py` reads as decisions only:
JoinGroup v9, SyncGroup v5, Heartbeat v4 and LeaveGroup v5 as the Java consumer sends
them, and `lead`, which runs the chosen assignor over every member's subscription.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from kio.schema.heartbeat.v4 import request as hb
from kio.schema.join_group.v9 import request as jg
from kio.schema.leave_group.v5 import request as lg
from kio.schema.sync_group.v5 import request as sg

from kgroups.client.assignors.spec import Assignor, GroupSpec
from kgroups.client.errors import MemberError
from kgroups.client.link import CoordinatorLink
from kgroups.client.metadata import member_spec
from kgroups.protocol.build import build
from kgroups.protocol.consumer import PROTOCOL_TYPE, Assignment, encode_assignment

log = logging.getLogger(__name__)


def join_request(
    group_id: str,
    member_id: str,
    instance_id: str | None,
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    protocols: Sequence[tuple[str, bytes]],
    reason: str | None,
) -> jg.JoinGroupRequest:
    return build(
        jg.JoinGroupRequest,
        {
            "group_id": group_id,
            "session_timeout": timedelta(milliseconds=session_timeout_ms),
            "rebalance_timeout": timedelta(milliseconds=rebalance_timeout_ms),
            "member_id": member_id,
            "group_instance_id": instance_id,
            "protocol_type": PROTOCOL_TYPE,
            "protocols": [{"name": name, "metadata": data} for name, data in protocols],
            "reason": reason,
        },
    )


def sync_request(
    group_id: str,
    generation: int,
    member_id: str,
    instance_id: str | None,
    protocol_name: str | None,
    assignments: list[dict[str, Any]],
) -> sg.SyncGroupRequest:
    return build(
        sg.SyncGroupRequest,
        {
            "group_id": group_id,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": instance_id,
            "protocol_type": PROTOCOL_TYPE,
            "protocol_name": protocol_name,
            "assignments": assignments,
        },
    )


def heartbeat_request(
    group_id: str, generation: int, member_id: str, instance_id: str | None
) -> hb.HeartbeatRequest:
    return build(
        hb.HeartbeatRequest,
        {
            "group_id": group_id,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": instance_id,
        },
    )


def leave_request(
    group_id: str, member_id: str, instance_id: str | None, reason: str
) -> lg.LeaveGroupRequest:
    return build(
        lg.LeaveGroupRequest,
        {
            "group_id": group_id,
            "members": [
                {"member_id": member_id, "group_instance_id": instance_id, "reason": reason}
            ],
        },
    )


async def lead(
    link: CoordinatorLink,
    assignors: Sequence[Assignor],
    response: Any,
    replicas: int,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The leader's job: run the chosen assignor over every member's subscription.

    Returns SyncGroup's assignments and the partition counts they were computed from."""
    name = response.protocol_name
    assignor = next((a for a in assignors if a.name == name), None)
    if assignor is None:
        raise MemberError(f"the coordinator chose assignor {name!r}, which is not configured")
    specs = {
        m.member_id: member_spec(name, m.member_id, m.group_instance_id, m.metadata)
        for m in response.members
    }
    topics = sorted({t for spec in specs.values() for t in spec.topics})
    counts, racks = await link.partitions(topics)
    group = GroupSpec(specs, counts, racks, replicas)
    # In a thread: a million-partition assignment takes seconds, and heartbeats (this
    # member's and, in the sidecar, HTTP) must keep going meanwhile.
    result = await asyncio.to_thread(assignor.assign, group)
    log.info(
        "%s: leader of generation %d assigned %d partitions to %d members with %s",
        response.member_id,
        response.generation_id,
        sum(len(ps) for t in result.values() for ps in t.values()),
        len(specs),
        name,
    )
    assignments = [
        {
            "member_id": member_id,
            "assignment": encode_assignment(
                Assignment({t: tuple(ps) for t, ps in result.get(member_id, {}).items() if ps})
            ),
        }
        for member_id in specs
    ]
    return assignments, dict(counts)
