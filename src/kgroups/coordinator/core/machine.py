"""The sans-IO group coordinator: requests and time in, records and replies out.

`GroupCoordinator` is what the server, the tests and the simulator drive:

* `handle(ctx, request, now_ms=...)` processes one request and returns `Effects`;
* `next_deadline_ms()` is the earliest timer, `handle_timers(now_ms=...)` fires the due ones;
* `replay(record)` then `resume(now_ms=...)` rebuild it from a store after a restart.

Nothing here reads a clock, touches a socket or a file, or awaits: one call runs to
completion, so no request ever observes another half-applied (the guarantee Kafka gets
from processing one event per shard at a time).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kgroups.coordinator.core import (
    admin,
    authz,
    cluster,
    consumer_describe,
    consumer_heartbeat,
    group_configs,
    heartbeat,
    join,
    leave,
    offsets,
    routing,
    sync,
)
from kgroups.coordinator.core import msg_cluster as mc
from kgroups.coordinator.core import msg_configs as mk
from kgroups.coordinator.core import msg_consumer as mn
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core import msg_offsets as mo
from kgroups.coordinator.core import replay as rp
from kgroups.coordinator.core.config import CoordinatorConfig
from kgroups.coordinator.core.context import EXPIRE_OFFSETS_KEY, Core
from kgroups.coordinator.core.effects import Effects, RequestBody
from kgroups.coordinator.core.model import Group
from kgroups.coordinator.core.msg_cluster import Node
from kgroups.coordinator.core.msg_group import RequestContext
from kgroups.coordinator.core.records import Record
from kgroups.coordinator.core.shards import Sharding
from kgroups.protocol.errors import ErrorCode
from kgroups.security.actions import Action

Handler = Callable[[Core, RequestContext, Any], None]

_HANDLERS: Mapping[type, Handler] = {
    mg.JoinGroupRequest: join.handle_join,
    mg.SyncGroupRequest: sync.handle_sync,
    mg.HeartbeatRequest: heartbeat.handle_heartbeat,
    mg.LeaveGroupRequest: leave.handle_leave,
    mg.DescribeGroupsRequest: admin.handle_describe,
    mg.ListGroupsRequest: admin.handle_list,
    mg.DeleteGroupsRequest: admin.handle_delete,
    mo.OffsetCommitRequest: offsets.handle_commit,
    mo.OffsetFetchRequest: offsets.handle_fetch,
    mo.OffsetDeleteRequest: offsets.handle_delete,
    mc.MetadataRequest: cluster.handle_metadata,
    mc.FindCoordinatorRequest: cluster.handle_find_coordinator,
    mc.CreateTopicsRequest: cluster.handle_create_topics,
    mc.CreatePartitionsRequest: cluster.handle_create_partitions,
    mc.DeleteTopicsRequest: cluster.handle_delete_topics,
    mc.ListOffsetsRequest: cluster.handle_list_offsets,
    mc.FetchRequest: cluster.handle_fetch,
    mk.AlterConfigsRequest: group_configs.handle_alter,
    mk.DescribeConfigsRequest: group_configs.handle_describe,
    mn.ConsumerHeartbeatRequest: consumer_heartbeat.handle_consumer_heartbeat,
    mn.ConsumerDescribeRequest: consumer_describe.handle_describe,
}


class HandlerFailed(Exception):
    """A bug surfaced while handling a request or timer.

    `effects` holds what the call had already done. The state in memory is then
    half-changed, which no record explains: the server stops without persisting or
    sending them (fail stop), and a restart replays what was durable before the call.
    """

    def __init__(self, effects: Effects) -> None:
        super().__init__("coordinator handler failed")
        self.effects = effects


class GroupCoordinator:
    """Kafka's classic group coordinator, for one single-node cluster."""

    def __init__(
        self,
        config: CoordinatorConfig,
        *,
        node: Node,
        cluster_id: str,
        new_member_id: Callable[[str], str] | None = None,
        new_topic_id: Callable[[], uuid.UUID] | None = None,
        nodes: Mapping[str, Node] | None = None,
        work_clock: Callable[[], float] | None = None,
    ) -> None:
        """`node` is this coordinator as clients reach it; `nodes`, per listener name, where
        listeners advertise different addresses."""
        config.validate()
        self._core = Core(config=config, node=node, cluster_id=cluster_id, nodes=dict(nodes or {}))
        if new_member_id is not None:
            self._core.new_member_id = new_member_id
        if new_topic_id is not None:
            self._core.new_topic_id = new_topic_id
        if work_clock is not None:
            self._core.work_clock = work_clock
        self._started = False

    @property
    def config(self) -> CoordinatorConfig:
        return self._core.config

    @property
    def groups(self) -> Mapping[str, Group]:
        """Live groups, for inspection only: mutate them through requests."""
        return self._core.groups

    @property
    def core(self) -> Core:
        """The whole state, for tests and invariant checks."""
        return self._core

    # -- driving ---------------------------------------------------------------------------

    def needed(self, request: RequestBody) -> frozenset[Action]:
        """The actions `request` needs (`authz.needed`): the edge asks its authorizer about
        them and passes the refused ones to `handle` in `RequestContext.denied`."""
        return authz.needed(self._core, request)

    def handle(self, ctx: RequestContext, request: RequestBody, *, now_ms: int) -> Effects:
        core = self._advance(now_ms)
        handler = _HANDLERS[type(request)]
        try:
            if core.sharding is None or not routing.refuse(core, ctx, request):
                handler(core, ctx, request)
        except Exception as exc:
            raise HandlerFailed(core.out.take()) from exc
        return core.out.take()

    def heartbeat(self, request: mg.HeartbeatRequest, *, now_ms: int) -> ErrorCode:
        """A heartbeat from a connection whose authorizer has nothing to refuse: what
        `handle` would answer, without building a context, a reply and effects (heartbeats
        are most of a coordinator's requests; they write nothing and observe nothing)."""
        core = self._advance(now_ms)
        if core.sharding is not None:
            elsewhere = routing.heartbeat_status(core, request.group_id)
            if elsewhere is not None:
                return elsewhere
        try:
            return heartbeat.heartbeat(core, request)
        except Exception as exc:
            raise HandlerFailed(core.out.take()) from exc

    def consumer_heartbeat(
        self, request: mn.ConsumerHeartbeatRequest, client_id: str, client_host: str, *,
        now_ms: int,
    ) -> mn.SteadyAnswer | None:  # fmt: skip
        """A ConsumerGroupHeartbeat from a connection with nothing to refuse that changes
        nothing: what `handle` would answer, without a context, effects or records; None
        when it needs `handle` (it would change something, or is not served here)."""
        core = self._advance(now_ms)
        if core.sharding is not None and routing.status(core, request.group_id) is not (
            ErrorCode.none
        ):
            return None
        try:
            return consumer_heartbeat.steady(core, request, client_id, client_host)
        except Exception as exc:
            raise HandlerFailed(core.out.take()) from exc

    def next_deadline_ms(self) -> int | None:
        return self._core.timers.next_deadline()

    def handle_timers(self, *, now_ms: int) -> Effects:
        """Fire every timer due by `now_ms`, each at its own deadline.

        A timer that fires late still acts as if on time: whatever it schedules is
        relative to its deadline, so the outcome does not depend on how coarsely the
        caller advances time (one big sleep or many small ones).
        """
        core = self._advance(self._core.now_ms)
        target = max(core.now_ms, now_ms)
        try:
            while (entry := core.timers.pop_due(target)) is not None:
                core.now_ms = max(core.now_ms, entry.deadline_ms)
                entry.action(core.now_ms)
        except Exception as exc:
            raise HandlerFailed(core.out.take()) from exc
        finally:
            core.now_ms = target
        return core.out.take()

    # -- replicas ----------------------------------------------------------------------------

    def share(self, shards: int) -> Sharding:
        """Become one replica of several sharing `shards` (serving none until `load`)."""
        self._core.sharding = Sharding(shards)
        return self._core.sharding

    def load(self, shard: int, records: Iterable[Record], *, now_ms: int) -> Effects:
        """Serve `shard` from its stored records (`routing.load`)."""
        core = self._advance(now_ms)
        try:
            routing.load(core, shard, records)
        except Exception as exc:
            raise HandlerFailed(core.out.take()) from exc
        return core.out.take()

    def refresh(self, records: Iterable[Record], *, now_ms: int) -> Effects:
        """Take the cluster's topics and group settings as other replicas left them."""
        core = self._advance(now_ms)
        try:
            cluster.refresh(core, list(records))
        except Exception as exc:
            raise HandlerFailed(core.out.take()) from exc
        return core.out.take()

    def unload(self, shard: int, *, now_ms: int) -> Effects:
        """Stop serving `shard`: its parked requests answer NOT_COORDINATOR."""
        core = self._advance(now_ms)
        routing.unload(core, shard)
        return core.out.take()

    # -- durability ------------------------------------------------------------------------

    def replay(self, record: Record) -> None:
        """Apply one stored record (before `resume`)."""
        if self._started:
            raise RuntimeError("replay() after resume()")
        rp.replay(self._core, record)

    def resume(self, *, now_ms: int) -> Effects:
        """Start serving: re-arm timers for everything replayed."""
        self._started = True
        core = self._advance(now_ms)
        rp.resume(core)
        self._schedule_offset_expiry()
        return core.out.take()

    def _schedule_offset_expiry(self) -> None:
        core = self._core

        def sweep(now_ms: int) -> None:
            offsets.expire_offsets(core)
            self._schedule_offset_expiry()

        core.timers.schedule(
            EXPIRE_OFFSETS_KEY, core.now_ms + core.config.offsets_retention_check_interval_ms, sweep
        )

    def _advance(self, now_ms: int) -> Core:
        core = self._core
        if not self._started:
            raise RuntimeError("resume() must be called before the coordinator serves")
        # Time never runs backwards inside the core, whatever the caller's clock does.
        core.now_ms = max(core.now_ms, now_ms)
        return core
