"""Replicas sharing the groups: which requests this one answers, and shards coming and going.

With `Core.sharding` set, this coordinator is one replica of several: it serves the
groups of the shards it has loaded and answers a request for any other group as Kafka's
broker answers for a `__consumer_offsets` partition it does not lead (reference:
`CoordinatorRuntime.withActiveContextOrThrow`, `GroupCoordinatorService`):

| request                         | shard elsewhere  | shard loading here           |
|---------------------------------|------------------|------------------------------|
| JoinGroup, LeaveGroup,          | NOT_COORDINATOR  | COORDINATOR_LOAD_IN_PROGRESS |
| OffsetCommit/Fetch/Delete,      |                  |                              |
| DescribeGroups, DeleteGroups    |                  |                              |
| Heartbeat                       | NOT_COORDINATOR  | NONE ("still loading, so     |
|                                 |                  | blindly respond")            |
| SyncGroup                       | NOT_COORDINATOR  | REBALANCE_IN_PROGRESS        |

SyncGroup while loading: Kafka 4 passes COORDINATOR_LOAD_IN_PROGRESS through, which the
Java consumer's SyncGroup handler does not expect (it fails the poll with "Unexpected
error"); Kafka's older coordinator answered REBALANCE_IN_PROGRESS, because the state of
the rebalance in flight is lost with the move: every client rejoins on that, so kgroups
keeps it. Multi-group requests answer per group (`status`); ListGroups lists what is
served here (Kafka's admin client asks every broker). FindCoordinator names the owner of
the group's shard, or COORDINATOR_NOT_AVAILABLE while no live replica owns it.

`load` replays a shard's records into the running core and gives each member a fresh
session (a move shorter than the session timeout rebalances nobody); `unload` forgets
the shard's groups, answering their parked JoinGroup and SyncGroup with NOT_COORDINATOR
(Kafka's `onUnloaded`) so the members find the new owner.
"""

from __future__ import annotations

from collections.abc import Iterable

from kgroups.coordinator.core import msg_consumer as mn
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core import msg_offsets as mo
from kgroups.coordinator.core import ownership
from kgroups.coordinator.core import replay as rp
from kgroups.coordinator.core.context import (
    Core,
    heartbeat_key,
    join_key,
    rebalance_key,
    session_key,
    sync_key,
)
from kgroups.coordinator.core.effects import RequestBody
from kgroups.coordinator.core.msg_cluster import CoordinatorResult, Node
from kgroups.coordinator.core.records import GroupRecord, OffsetRecord, Record
from kgroups.coordinator.core.shards import shard_of
from kgroups.protocol.errors import ErrorCode

NONE = ErrorCode.none
NOT_COORDINATOR = ErrorCode.not_coordinator
LOADING = ErrorCode.coordinator_load_in_progress


def status(core: Core, group_id: str) -> ErrorCode:
    """NONE if this replica serves `group_id`; else why not."""
    sharding = core.sharding
    if sharding is None:
        return NONE
    shard = shard_of(group_id, sharding.count)
    if shard in sharding.serving:
        return NONE
    return LOADING if shard in sharding.loading else NOT_COORDINATOR


def refuse(core: Core, ctx: mg.RequestContext, request: RequestBody) -> bool:
    """Answer a single-group request for a group served elsewhere (True), or not (False)."""
    group_id = getattr(request, "group_id", None)
    if core.sharding is None or not isinstance(group_id, str):
        return False
    code = status(core, group_id)
    if code is NONE:
        return False
    reply = core.out.reply
    if isinstance(request, mg.HeartbeatRequest):
        reply(ctx.ref, mg.HeartbeatResponse(NONE if code is LOADING else code))
    elif isinstance(request, mg.SyncGroupRequest):
        reply(ctx.ref, mg.SyncGroupResponse(
            ErrorCode.rebalance_in_progress if code is LOADING else code))  # fmt: skip
    elif isinstance(request, mg.JoinGroupRequest):
        reply(ctx.ref, mg.JoinGroupResponse(code, member_id=request.member_id))
    elif isinstance(request, mg.LeaveGroupRequest):
        reply(ctx.ref, mg.LeaveGroupResponse(code))
    elif isinstance(request, mo.OffsetCommitRequest):
        topics = tuple(
            mo.CommitTopicResult(t.name or "", t.topic_id,
                                 tuple((p.partition, code) for p in t.partitions))
            for t in request.topics
        )  # fmt: skip
        reply(ctx.ref, mo.OffsetCommitResponse(topics))
    elif isinstance(request, mn.ConsumerHeartbeatRequest):
        reply(ctx.ref, mn.ConsumerHeartbeatResponse(code))
    elif isinstance(request, mo.OffsetDeleteRequest):
        reply(ctx.ref, mo.OffsetDeleteResponse((), code))
    else:
        return False
    return True


def heartbeat_status(core: Core, group_id: str) -> ErrorCode | None:
    """The heartbeat fast lane's answer for a group served elsewhere (None: served here)."""
    code = status(core, group_id)
    if code is NONE:
        return None
    return NONE if code is LOADING else code


def coordinator_of(core: Core, key: str, listener: str, here: Node) -> CoordinatorResult:
    """FindCoordinator's answer for one group: its shard's owner, as `listener` reaches it."""
    sharding = core.sharding
    if sharding is None:
        return CoordinatorResult(key, here.node_id, here.host, here.port)
    shard = shard_of(key, sharding.count)
    owner = sharding.owners.get(shard)
    if owner == here.node_id and shard not in sharding.serving and shard not in sharding.loading:
        # Released or self-fenced here since the owners were last read: the next owner
        # is not known yet, and this replica would answer NOT_COORDINATOR.
        owner = None
    node = None if owner is None else sharding.brokers.get(owner, {}).get(listener)
    if node is None:
        return CoordinatorResult(key, -1, "", -1, ErrorCode.coordinator_not_available)
    return CoordinatorResult(key, node.node_id, node.host, node.port)


def brokers(core: Core, listener: str, here: Node) -> tuple[tuple[Node, ...], int]:
    """Metadata's brokers (every live replica) and controller id (the owner of shard 0)."""
    sharding = core.sharding
    if sharding is None:
        return (here,), here.node_id
    nodes = [by[listener] for _, by in sorted(sharding.brokers.items()) if listener in by]
    if all(n.node_id != here.node_id for n in nodes):
        nodes.append(here)
    return tuple(nodes), sharding.owners.get(0, here.node_id)


def groups_of(core: Core, shard: int) -> list[str]:
    sharding = core.sharding
    assert sharding is not None
    ids: Iterable[str] = [*core.groups, *core.consumer_groups] + [
        g for g in core.offsets if g not in core.groups and g not in core.consumer_groups
    ]
    return [g for g in ids if shard_of(g, sharding.count) == shard]


def unload(core: Core, shard: int) -> None:
    """Stop serving `shard`: forget its groups; parked requests answer NOT_COORDINATOR."""
    sharding = core.sharding
    assert sharding is not None
    sharding.serving.discard(shard)
    sharding.loading.discard(shard)
    for group_id in groups_of(core, shard):
        consumer = ownership.drop_consumer(core, group_id)
        if consumer is not None:
            for member_id in consumer.members:
                core.timers.cancel(session_key(group_id, member_id))
                core.timers.cancel(rebalance_key(group_id, member_id))
        group = ownership.drop(core, group_id)
        core.offsets.pop(group_id, None)
        core.timers.cancel(join_key(group_id))
        core.timers.cancel(sync_key(group_id))
        if group is None:
            continue
        for member_id in [*group.members, *group.pending_join]:
            core.timers.cancel(heartbeat_key(group_id, member_id))
        for member in group.members.values():
            if member.awaiting_join is not None:
                core.out.reply(member.awaiting_join, mg.JoinGroupResponse(
                    NOT_COORDINATOR, member_id=member.member_id))  # fmt: skip
                member.awaiting_join = None
            if member.awaiting_sync is not None:
                core.out.reply(member.awaiting_sync, mg.SyncGroupResponse(NOT_COORDINATOR))
                member.awaiting_sync = None


def load(core: Core, shard: int, records: Iterable[Record]) -> None:
    """Serve `shard` from its records (groups and offsets; topics and group settings are
    the cluster's, not a shard's): groups come back as stored, members with fresh sessions."""
    sharding = core.sharding
    assert sharding is not None
    unload(core, shard)  # anything left from an earlier epoch goes
    for record in records:
        if isinstance(record, GroupRecord | OffsetRecord):
            rp.replay(core, record)
    for group_id in groups_of(core, shard):
        group = core.groups.get(group_id)
        if group is not None:
            rp.resume_group(core, group)
        consumer = core.consumer_groups.get(group_id)
        if consumer is not None:
            rp.resume_consumer_group(core, consumer)
    sharding.serving.add(shard)
