"""A test context for the sans-IO coordinator: fake time, a fake store, restarts.

In the spirit of Kafka's `GroupMetadataManagerTestContext`: requests go straight into a
real `GroupCoordinator`; time only moves through `sleep(ms)`, which fires due timers;
every persisted record lands in an in-memory compacted store, and `restart()` replays that
store into a brand-new coordinator, exactly what the server does with SQLite on start.

Replies are collected by request ref; a parked request simply has no reply yet.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kgroups.coordinator.core import CoordinatorConfig, Effects, GroupCoordinator, Node
from kgroups.coordinator.core import msg_cluster as mc
from kgroups.coordinator.core import msg_configs as mk
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core import msg_offsets as mo
from kgroups.coordinator.core.effects import RequestBody, ResponseBody
from kgroups.coordinator.core.model import Group
from kgroups.coordinator.core.records import GroupConfigRecord, GroupRecord, Record, TopicRecord
from kgroups.protocol.errors import ErrorCode

START_MS = 1_700_000_000_000
NODE = Node(0, "127.0.0.1", 9092)
CONSUMER = "consumer"
WORK_STEP_S = 0.002
"""The work clock moves this much each time the core reads it (a target assignment is
read twice: it takes one step)."""


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0 for `topics` (what the coordinator parses)."""
    out = bytearray(b"\x00\x00")
    out += len(topics).to_bytes(4, "big")
    for t in topics:
        raw = t.encode()
        out += len(raw).to_bytes(2, "big") + raw
    out += b"\xff\xff\xff\xff"
    return bytes(out)


def protocols(*names: str, topics: tuple[str, ...] = ("t",)) -> tuple[mg.Protocol, ...]:
    return tuple(mg.Protocol(n, subscription(*topics)) for n in names or ("range",))


def record_key(record: Record) -> tuple[Any, ...]:
    if isinstance(record, TopicRecord):
        return ("topic", record.name)
    if isinstance(record, GroupRecord):
        return ("group", record.group_id)
    if isinstance(record, GroupConfigRecord):
        return ("group-config", record.group_id)
    return ("offset", record.group_id, record.topic, record.partition)


@dataclass
class CompactedStore:
    """Latest value per key, replayed topics-then-groups-then-offsets like the real store."""

    rows: dict[tuple[Any, ...], Record] = field(default_factory=dict)

    def append(self, records: Iterable[Record]) -> None:
        for r in records:
            key = record_key(r)
            if r.value is None:
                self.rows.pop(key, None)
            else:
                self.rows[key] = r

    def replay_order(self) -> list[Record]:
        order = {"topic": 0, "group-config": 1, "group": 2, "offset": 3}
        return sorted(self.rows.values(), key=lambda r: order[record_key(r)[0]])


class CoreContext:
    """Drives one coordinator through requests, sleeps and restarts."""

    def __init__(self, config: CoordinatorConfig | None = None, *, start_ms: int = START_MS):
        self.config = config or CoordinatorConfig(group_initial_rebalance_delay_ms=0)
        self.now_ms = start_ms
        self.store = CompactedStore()
        self.replies: dict[int, ResponseBody] = {}
        self.all_effects: list[Effects] = []
        self._refs = itertools.count(1)
        self._ids = itertools.count(1)
        self._work = itertools.count()
        self.coordinator = self._fresh()

    # -- plumbing ------------------------------------------------------------------------

    def _fresh(self) -> GroupCoordinator:
        coordinator = GroupCoordinator(
            self.config,
            node=NODE,
            cluster_id="test-cluster",
            new_member_id=lambda prefix: f"{prefix}-{next(self._ids)}",
            new_topic_id=lambda: uuid.UUID(int=next(self._ids)),
            work_clock=lambda: next(self._work) * WORK_STEP_S,
        )
        for record in self.store.replay_order():
            coordinator.replay(record)
        self._absorb(coordinator.resume(now_ms=self.now_ms))
        return coordinator

    def _absorb(self, effects: Effects) -> Effects:
        self.store.append(effects.records)
        for reply in effects.replies:
            assert reply.ref not in self.replies, f"ref {reply.ref} answered twice"
            self.replies[reply.ref] = reply.body
        self.all_effects.append(effects)
        for group in (
            getattr(self, "coordinator", None) and self.coordinator.groups.values()
        ) or ():
            # The running size every join and assignment is checked against is the sum
            # of its members' sizes, whatever happened (max_group_record_bytes).
            assert group.member_bytes == sum(m.record_bytes() for m in group.members.values())
        for consumer in (
            getattr(self, "coordinator", None) and self.coordinator.core.consumer_groups.values()
        ) or ():
            # A snapshot remakes only the members marked changed: it must be the same as
            # one made from scratch (a change not marked would be lost on a restart).
            made = consumer.to_value()
            fresh = tuple(m._value() for m in consumer.members.values())
            assert made.members == fresh, consumer.group_id
        return effects

    @property
    def core(self) -> Any:
        return self.coordinator.core

    def group(self, group_id: str = "g") -> Group:
        return self.coordinator.groups[group_id]

    def send(
        self,
        request: RequestBody,
        *,
        version: int = 9,
        client_id: str = "client",
        host: str = "/127.0.0.1",
        principal: str = "User:ANONYMOUS",
    ) -> int:
        ref = next(self._refs)
        ctx = mg.RequestContext(ref, version, client_id, host, principal)
        self._absorb(self.coordinator.handle(ctx, request, now_ms=self.now_ms))
        return ref

    def reply(self, ref: int) -> Any:
        """The reply to `ref`; fails if the request is still parked."""
        assert ref in self.replies, f"request {ref} has no reply (parked)"
        return self.replies[ref]

    def parked(self, ref: int) -> bool:
        return ref not in self.replies

    def sleep(self, ms: int) -> Effects:
        self.now_ms += ms
        return self._absorb(self.coordinator.handle_timers(now_ms=self.now_ms))

    def timer(self, key: str) -> int | None:
        return self.coordinator.core.timers.deadline(key)

    def assert_timer(self, key: str, deadline_ms: int | None) -> None:
        assert self.timer(key) == deadline_ms, (key, self.timer(key), deadline_ms)

    def restart(self) -> None:
        """Replay the store into a new coordinator, as after a crash (kill -9 included)."""
        self.coordinator = self._fresh()

    # -- requests --------------------------------------------------------------------------

    def join(
        self,
        group_id: str = "g",
        member_id: str = "",
        *,
        instance_id: str | None = None,
        protocol_names: tuple[str, ...] = ("range",),
        topics: tuple[str, ...] = ("t",),
        session_ms: int = 10_000,
        rebalance_ms: int = 60_000,
        protocol_type: str = CONSUMER,
        version: int = 9,
        client_id: str = "client",
        principal: str = "User:ANONYMOUS",
    ) -> int:
        req = mg.JoinGroupRequest(
            group_id=group_id,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocols=protocols(*protocol_names, topics=topics),
        )
        return self.send(req, version=version, client_id=client_id, principal=principal)

    def join_new_member(self, group_id: str = "g", **kw: Any) -> tuple[str, int]:
        """JoinGroup twice (KIP-394): returns (member id, ref of the parked second join)."""
        first = self.reply(self.join(group_id, **kw))
        assert first.error is ErrorCode.member_id_required, first
        return first.member_id, self.join(group_id, first.member_id, **kw)

    def sync(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        instance_id: str | None = None,
        protocol_name: str | None = "range",
        version: int = 5,
    ) -> int:
        req = mg.SyncGroupRequest(
            group_id=group_id,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=CONSUMER if version >= 5 else None,
            protocol_name=protocol_name if version >= 5 else None,
            assignments=tuple((assignments or {}).items()),
        )
        return self.send(req, version=version)

    def heartbeat(
        self, group_id: str, member_id: str, generation: int, instance_id: str | None = None
    ) -> ErrorCode:
        ref = self.send(
            mg.HeartbeatRequest(group_id, generation, member_id, instance_id), version=4
        )
        return self.reply(ref).error

    def leave(self, group_id: str, *members: tuple[str, str | None]) -> mg.LeaveGroupResponse:
        req = mg.LeaveGroupRequest(group_id, tuple(mg.LeavingMember(m, i) for m, i in members))
        response: mg.LeaveGroupResponse = self.reply(self.send(req, version=5))
        return response

    def commit(
        self,
        group_id: str,
        offsets: dict[tuple[str, int], int],
        *,
        member_id: str = "",
        generation: int = -1,
        instance_id: str | None = None,
        version: int = 8,
        metadata: str = "",
        log_ends: dict[tuple[str, int], int] | None = None,
    ) -> dict[tuple[str, int], ErrorCode]:
        by_topic: dict[str, list[mo.CommitPartition]] = {}
        for (topic, partition), offset in offsets.items():
            log_end = (log_ends or {}).get((topic, partition), -1)
            by_topic.setdefault(topic, []).append(
                mo.CommitPartition(partition, offset, metadata=metadata, log_end=log_end)
            )
        req = mo.OffsetCommitRequest(
            group_id=group_id,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            topics=tuple(mo.CommitTopic(t, tuple(ps)) for t, ps in by_topic.items()),
        )
        response: mo.OffsetCommitResponse = self.reply(self.send(req, version=version))
        return {(t.name, p): code for t in response.topics for p, code in t.partitions}

    def committed(self, group_id: str, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        spec = mo.FetchGroup(group_id, (mo.FetchTopic(topic, tuple(partitions)),))
        response: mo.OffsetFetchResponse = self.reply(
            self.send(mo.OffsetFetchRequest((spec,)), version=8)
        )
        return {p.partition: p.offset for t in response.groups[0].topics for p in t.partitions}

    def create_topic(self, name: str, partitions: int) -> mc.CreatedTopic:
        req = mc.CreateTopicsRequest((mc.NewTopic(name, partitions),))
        response: mc.CreateTopicsResponse = self.reply(self.send(req, version=7))
        return response.topics[0]

    def alter_group_config(
        self, group_id: str, changes: dict[str, str | None], *, validate_only: bool = False
    ) -> mk.ResourceOutcome:
        ops = tuple(
            mk.ConfigChange(name, 1 if value is None else 0, value)
            for name, value in changes.items()
        )
        req = mk.AlterConfigsRequest((mk.AlterConfigsResource(32, group_id, ops),), validate_only)
        response: mk.AlterConfigsResponse = self.reply(self.send(req, version=1))
        return response.results[0]

    def group_config(self, group_id: str) -> dict[str, tuple[str, int]]:
        req = mk.DescribeConfigsRequest((mk.DescribeConfigsResource(32, group_id, None),))
        response: mk.DescribeConfigsResponse = self.reply(self.send(req, version=4))
        return {e.name: (e.value, e.source) for e in response.results[0].entries}

    def describe(self, group_id: str = "g", *, version: int = 5) -> mg.DescribedGroup:
        response: mg.DescribeGroupsResponse = self.reply(
            self.send(mg.DescribeGroupsRequest((group_id,)), version=version)
        )
        return response.groups[0]

    # -- compound steps ----------------------------------------------------------------------

    def stable_group(self, group_id: str = "g", n: int = 2, **kw: Any) -> tuple[list[str], int]:
        """Bring `n` dynamic members to Stable; returns (member ids, generation)."""
        ids: list[str] = []
        refs: list[int] = []
        for _ in range(n):
            member_id, ref = self.join_new_member(group_id, **kw)
            ids.append(member_id)
            refs.append(ref)
        self.sleep(self.config.group_initial_rebalance_delay_ms)
        responses = [self.reply(r) for r in refs]
        generation = responses[0].generation_id
        leader = responses[0].leader
        assignments = {m: f"assign-{m}".encode() for m in ids}
        sync_refs = [
            self.sync(group_id, m, generation, assignments if m == leader else None) for m in ids
        ]
        for r in sync_refs:
            assert self.reply(r).error is ErrorCode.none
        return ids, generation
