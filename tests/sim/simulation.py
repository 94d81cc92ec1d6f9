"""A deterministic simulation of a consumer group driving the real coordinator core.

One seed fixes everything: which members exist, when they join, leave, crash, pause,
sync slowly, restart with a static identity, and when the coordinator itself restarts
(losing every parked request and in-flight reply, replaying its records). Members are
small models of a Kafka consumer's group client: one request in flight at a time,
MEMBER_ID_REQUIRED, a range-assigning leader, heartbeats at a third of the session
timeout, periodic commits, the per-error reactions of `AbstractCoordinator`.

After every step the simulator checks the invariants:

1. no partition is assigned to two members in one generation;
2. the group's generation never goes backwards, restarts included;
3. a reply never refers to state that is not durable (JoinGroup generations, SyncGroup
   assignments, Heartbeat generations and committed offsets are in the store when the
   reply leaves);
4. an acknowledged offset is never lost across restarts;
5. once faults stop, the group is Stable with every live member, covering every
   partition exactly once, within a bounded time.

A failure raises `InvariantViolation` naming the seed, the time and a trace tail.
"""

from __future__ import annotations

import heapq
import itertools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kgroups.coordinator.core import CoordinatorConfig, Effects, GroupCoordinator, GroupState, Node
from kgroups.coordinator.core import msg_cluster as mc
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core import msg_offsets as mo
from kgroups.coordinator.core.effects import RequestBody
from kgroups.coordinator.core.records import GroupRecord, OffsetRecord
from kgroups.protocol.errors import ErrorCode
from tests.core_context import CompactedStore, subscription

E = ErrorCode
GROUP = "sim"
TOPIC = "topic"
SESSION_MS = 6_000
REBALANCE_MS = 12_000
HEARTBEAT_MS = SESSION_MS // 3


class InvariantViolation(AssertionError):
    pass


@dataclass
class Agent:
    """A simulated consumer's group client."""

    name: str
    instance_id: str | None
    member_id: str = ""
    generation: int = -1
    state: str = "down"  # down | unjoined | joining | syncing | stable | paused
    in_flight: int | None = None
    in_flight_kind: str = ""
    assignment: tuple[int, ...] = ()
    assignment_generation: int = -1
    slow_sync_ms: int = 0
    forget_sync: bool = False
    """The KAFKA-12890 client: joins, heartbeats, but never sends SyncGroup."""
    paused_until: int = 0
    epoch: int = 0
    """Bumped on crash/restart so stale scheduled actions of a previous life are ignored."""
    commits: int = 0
    heartbeat_loop: int = 0
    commit_loop: int = 0


@dataclass(order=True)
class _Event:
    at: int
    seq: int
    action: Callable[[], None] = field(compare=False)


class Simulation:
    def __init__(self, seed: int, *, members: int = 5, partitions: int = 12) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.partitions = partitions
        self.now = 1_000_000
        self.events: list[_Event] = []
        self._seq = itertools.count()
        self._refs = itertools.count(1)
        self._ids = itertools.count(1)
        self.store = CompactedStore()
        self.config = CoordinatorConfig(
            group_initial_rebalance_delay_ms=self.rng.choice([0, 0, 1_000, 3_000]),
            group_min_session_timeout_ms=1_000,
            offsets_retention_minutes=100_000,
        )
        self.coordinator = self._fresh_coordinator()
        self.pending: dict[int, tuple[Agent, int, str, RequestBody]] = {}
        """ref -> (agent, agent epoch, kind, request) for requests the coordinator holds."""
        self.agents = [
            Agent(f"m{i}", f"static-{i}" if self.rng.random() < 0.4 else None)
            for i in range(members)
        ]
        self.trace: list[str] = []
        self.max_generation = 0
        self.owners: dict[tuple[int, int], str] = {}
        self.computed: dict[int, dict[str, bytes]] = {}
        """generation -> what its leader assigned, by instance id (or member id)."""
        self.acked: dict[int, int] = {}
        self.faults = True
        self.restarts = 0
        self.steps = 0
        self._bootstrap()

    # -- the coordinator side -------------------------------------------------------------

    def _fresh_coordinator(self) -> GroupCoordinator:
        coordinator = GroupCoordinator(
            self.config,
            node=Node(0, "sim", 9092),
            cluster_id="sim",
            new_member_id=lambda prefix: f"{prefix}-{next(self._ids)}",
        )
        for record in self.store.replay_order():
            coordinator.replay(record)
        self._apply(coordinator.resume(now_ms=self.now))
        return coordinator

    def _bootstrap(self) -> None:
        ref = next(self._refs)
        create = mc.CreateTopicsRequest((mc.NewTopic(TOPIC, self.partitions),))
        self._apply(self.coordinator.handle(mg.RequestContext(ref, 7), create, now_ms=self.now))
        for agent in self.agents:
            self._start(agent, delay=self.rng.randint(0, 5_000))

    def _apply(self, effects: Effects) -> None:
        """Make records durable, then release replies: what the server does."""
        self.store.append(effects.records)
        for record in effects.records:
            if isinstance(record, GroupRecord) and record.value is not None:
                self._check_generation(record.value.generation_id)
        for reply in effects.replies:
            held = self.pending.pop(reply.ref, None)
            if held is None:
                continue
            agent, epoch, kind, request = held
            self._check_durable(agent, kind, request, reply.body)
            self.schedule(self._latency(), lambda a=agent, e=epoch, k=kind, r=request, b=reply.body:
                          self._deliver(a, e, k, r, b))  # fmt: skip

    def send(self, agent: Agent, kind: str, request: RequestBody, version: int = 9) -> None:
        ref = next(self._refs)
        agent.in_flight = ref
        agent.in_flight_kind = kind
        epoch, restarts = agent.epoch, self.restarts

        def arrive() -> None:
            if restarts != self.restarts:
                # The connection broke with the coordinator: the client sees a disconnect.
                self.schedule(self._latency(), lambda: self._disconnected(agent, epoch, ref))
                return
            self.pending[ref] = (agent, epoch, kind, request)
            ctx = mg.RequestContext(ref, version, agent.name, "/sim")
            self._apply(self.coordinator.handle(ctx, request, now_ms=self.now))

        self.schedule(self._latency(), arrive)

    def restart_coordinator(self) -> None:
        self.restarts += 1
        self.trace.append(f"{self.now} coordinator restart #{self.restarts}")
        lost = list(self.pending.items())
        self.pending.clear()
        self.coordinator = self._fresh_coordinator()
        for ref, (agent, epoch, _, _) in lost:
            self.schedule(
                self._latency(), lambda a=agent, e=epoch, r=ref: self._disconnected(a, e, r)
            )
        self._check_acked_offsets()

    # -- time -----------------------------------------------------------------------------

    def schedule(self, delay: int, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, _Event(self.now + delay, next(self._seq), action))

    def _latency(self) -> int:
        return self.rng.randint(1, 30)

    def step(self) -> bool:
        deadline = self.coordinator.next_deadline_ms()
        if not self.events and deadline is None:
            return False
        if deadline is not None and (not self.events or deadline <= self.events[0].at):
            self.now = max(self.now, deadline)
            self._apply(self.coordinator.handle_timers(now_ms=self.now))
        else:
            event = heapq.heappop(self.events)
            self.now = max(self.now, event.at)
            event.action()
        self.steps += 1
        self._check_generation(self._group_generation())
        return True

    def run_until(self, until: int) -> None:
        while self.now < until and self.step():
            pass

    # -- the client model -----------------------------------------------------------------

    def _start(self, agent: Agent, delay: int = 0) -> None:
        agent.epoch += 1
        agent.state = "unjoined"
        agent.member_id = ""
        agent.generation = -1
        agent.in_flight = None
        agent.assignment = ()
        epoch = agent.epoch
        self.schedule(delay, lambda: self._join(agent, epoch))

    def _alive(self, agent: Agent, epoch: int) -> bool:
        return agent.epoch == epoch and agent.state != "down"

    def _join(self, agent: Agent, epoch: int) -> None:
        if not self._alive(agent, epoch) or agent.in_flight is not None:
            return
        agent.state = "joining"
        request = mg.JoinGroupRequest(
            GROUP, SESSION_MS, REBALANCE_MS, agent.member_id, agent.instance_id, "consumer",
            (mg.Protocol("range", subscription(TOPIC)),),
        )  # fmt: skip
        self.send(agent, "join", request)

    def _deliver(self, agent: Agent, epoch: int, kind: str, request: Any, body: Any) -> None:
        if not self._alive(agent, epoch):
            return
        agent.in_flight = None
        if agent.paused_until > self.now:
            self.schedule(agent.paused_until - self.now,
                          lambda: self._react(agent, epoch, kind, request, body))  # fmt: skip
        else:
            self._react(agent, epoch, kind, request, body)

    def _react(self, agent: Agent, epoch: int, kind: str, request: Any, body: Any) -> None:
        if not self._alive(agent, epoch):
            return
        error = body.error if hasattr(body, "error") else E.none
        if kind == "commit":
            self._on_commit(agent, request, body)
            return
        if kind == "leave":
            return
        if error is E.fenced_instance_id:
            self.trace.append(f"{self.now} {agent.name} fenced: stops (a zombie instance)")
            agent.state = "down"
            return
        if error in (E.unknown_member_id,):
            agent.member_id, agent.generation = "", -1
            return self._rejoin(agent, epoch)
        if error is E.illegal_generation:
            agent.generation = -1  # keep the member id (KAFKA-13419)
            return self._rejoin(agent, epoch)
        if error in (E.rebalance_in_progress, E.coordinator_not_available):
            return self._rejoin(agent, epoch)
        if kind == "join":
            return self._on_join(agent, epoch, body)
        if kind == "sync" and error is E.none:
            return self._on_sync(agent, epoch, request, body)
        if kind == "heartbeat":
            loop = agent.heartbeat_loop
            self.schedule(HEARTBEAT_MS, lambda: self._heartbeat(agent, epoch, loop))
            return None
        raise InvariantViolation(f"seed {self.seed}: unexpected {kind} answer {body}")

    def _rejoin(self, agent: Agent, epoch: int) -> None:
        agent.state = "unjoined"
        self.schedule(self.rng.randint(0, 50), lambda: self._join(agent, epoch))

    def _on_join(self, agent: Agent, epoch: int, body: mg.JoinGroupResponse) -> None:
        if body.error is E.member_id_required:
            agent.member_id = body.member_id
            return self._join(agent, epoch)
        if body.error is not E.none:
            raise InvariantViolation(f"seed {self.seed}: join failed {body}")
        agent.member_id = body.member_id
        agent.generation = body.generation_id
        agent.state = "syncing"
        assignments: dict[str, bytes] = {}
        if body.leader == body.member_id and not body.skip_assignment:
            members = sorted(m.member_id for m in body.members)
            identity = {m.member_id: m.group_instance_id or m.member_id for m in body.members}
            per, extra = divmod(self.partitions, len(members))
            start = 0
            for i, m in enumerate(members):
                count = per + (1 if i < extra else 0)
                assignments[m] = json.dumps(list(range(start, start + count))).encode()
                start += count
            computed = {identity[m]: a for m, a in assignments.items()}
            if self.computed.setdefault(body.generation_id, computed) != computed:
                self.fail(f"two different assignments computed for generation {body.generation_id}")
        delay = agent.slow_sync_ms or self.rng.randint(0, 20)
        agent.slow_sync_ms = 0
        generation = body.generation_id
        if agent.forget_sync:
            agent.forget_sync = False
            self.trace.append(f"{self.now} {agent.name} never syncs generation {generation}")
            self._start_heartbeats(agent, epoch)
            return None

        def sync() -> None:
            if not self._alive(agent, epoch) or agent.generation != generation:
                return
            request = mg.SyncGroupRequest(
                GROUP, generation, agent.member_id, agent.instance_id, "consumer", "range",
                tuple(assignments.items()),
            )  # fmt: skip
            self.send(agent, "sync", request)

        self.schedule(delay, sync)
        self._start_heartbeats(agent, epoch)
        return None

    def _start_heartbeats(self, agent: Agent, epoch: int) -> None:
        agent.heartbeat_loop += 1
        loop = agent.heartbeat_loop
        self.schedule(HEARTBEAT_MS, lambda: self._heartbeat(agent, epoch, loop))

    def _on_sync(self, agent: Agent, epoch: int, request: Any, body: mg.SyncGroupResponse) -> None:
        identity = request.group_instance_id or request.member_id
        expected = self.computed.get(request.generation_id, {})
        if expected and body.assignment != expected.get(identity, b""):
            self.fail(
                f"{agent.name} received an assignment its generation's leader did not compute "
                f"(generation {request.generation_id})"
            )
        partitions = tuple(json.loads(body.assignment)) if body.assignment else ()
        for p in partitions:
            other = self.owners.setdefault((request.generation_id, p), identity)
            if other != identity:
                self.fail(
                    f"partition {p} owned by {other} and {identity} in generation "
                    f"{request.generation_id}"
                )
        if (request.generation_id, request.member_id) != (agent.generation, agent.member_id):
            return  # a late answer for a generation this client already left, as Java does
        agent.assignment = partitions
        agent.assignment_generation = request.generation_id
        agent.state = "stable"
        self.trace.append(
            f"{self.now} {agent.name} gen {request.generation_id} owns {list(partitions)}"
        )
        agent.commit_loop += 1
        loop = agent.commit_loop
        self.schedule(self.rng.randint(100, 1_500), lambda: self._commit(agent, epoch, loop))

    def _heartbeat(self, agent: Agent, epoch: int, loop: int) -> None:
        if not self._alive(agent, epoch) or agent.generation < 0 or loop != agent.heartbeat_loop:
            return
        if agent.paused_until > self.now or agent.in_flight is not None:
            self.schedule(HEARTBEAT_MS // 2, lambda: self._heartbeat(agent, epoch, loop))
            return
        if agent.state not in ("stable", "syncing"):
            return
        request = mg.HeartbeatRequest(GROUP, agent.generation, agent.member_id, agent.instance_id)
        self.send(agent, "heartbeat", request)

    def _commit(self, agent: Agent, epoch: int, loop: int) -> None:
        if not self._alive(agent, epoch) or loop != agent.commit_loop:
            return
        if agent.state != "stable" or not agent.assignment:
            return
        if agent.in_flight is not None or agent.paused_until > self.now:
            self.schedule(200, lambda: self._commit(agent, epoch, loop))
            return
        agent.commits += 1
        offset = self.steps * 10 + agent.commits
        parts = tuple(mo.CommitPartition(p, offset) for p in agent.assignment)
        request = mo.OffsetCommitRequest(
            GROUP, agent.assignment_generation, agent.member_id, (mo.CommitTopic(TOPIC, parts),),
            agent.instance_id,
        )  # fmt: skip
        self.send(agent, "commit", request, version=8)

    def _on_commit(
        self, agent: Agent, request: mo.OffsetCommitRequest, body: mo.OffsetCommitResponse
    ) -> None:
        for (p, error), sent in zip(
            body.topics[0].partitions, request.topics[0].partitions, strict=True
        ):
            if error is E.none:
                self.acked[p] = max(self.acked.get(p, -1), sent.offset)
        epoch, loop = agent.epoch, agent.commit_loop
        self.schedule(self.rng.randint(500, 2_000), lambda: self._commit(agent, epoch, loop))

    def _disconnected(self, agent: Agent, epoch: int, ref: int) -> None:
        if not self._alive(agent, epoch) or agent.in_flight != ref:
            return
        kind = agent.in_flight_kind
        agent.in_flight = None
        if kind in ("join", "sync"):
            self._rejoin(agent, epoch)
        elif kind in ("heartbeat", "commit"):
            loop = agent.heartbeat_loop
            self.schedule(HEARTBEAT_MS // 2, lambda: self._heartbeat(agent, epoch, loop))

    # -- faults ---------------------------------------------------------------------------

    def inject_fault(self) -> None:
        roll = self.rng.random()
        agent = self.rng.choice(self.agents)
        if roll < 0.15:
            if agent.state == "down":
                self.trace.append(f"{self.now} {agent.name} starts")
                self._start(agent)
        elif roll < 0.30:
            if agent.state != "down":
                self.trace.append(f"{self.now} {agent.name} crashes")
                agent.state = "down"
                agent.epoch += 1
                if agent.instance_id and self.rng.random() < 0.7:
                    self.trace.append(f"{self.now} {agent.name} will restart statically")
                    self.schedule(self.rng.randint(500, SESSION_MS * 2), lambda: self._start(agent))
        elif roll < 0.40:
            if agent.state not in ("down",) and agent.member_id and agent.in_flight is None:
                self.trace.append(f"{self.now} {agent.name} leaves")
                request = mg.LeaveGroupRequest(
                    GROUP, (mg.LeavingMember(agent.member_id, agent.instance_id),)
                )
                self.send(agent, "leave", request)
                agent.state = "down"
                agent.epoch += 1
        elif roll < 0.55:
            pause = self.rng.randint(1_000, SESSION_MS * 2)
            self.trace.append(f"{self.now} {agent.name} pauses {pause} ms")
            agent.paused_until = self.now + pause
        elif roll < 0.65:
            agent.slow_sync_ms = self.rng.randint(1_000, REBALANCE_MS * 2)
            self.trace.append(f"{self.now} {agent.name} will sync slowly ({agent.slow_sync_ms} ms)")
        elif roll < 0.68:
            self.restart_coordinator()
        elif roll < 0.72:
            agent.forget_sync = True
        elif roll < 0.80 and agent.state != "down" and agent.member_id and agent.in_flight is None:
            epoch = agent.epoch
            self.trace.append(f"{self.now} {agent.name} rejoins (metadata refresh)")
            self._rejoin(agent, epoch)

    def run(self, fault_steps: int, *, heal_ms: int = REBALANCE_MS * 6 + SESSION_MS * 4) -> None:
        for _ in range(fault_steps):
            if self.rng.random() < 0.05:
                self.inject_fault()
            if not self.step():
                break
        self.faults = False
        for agent in self.agents:
            agent.paused_until = 0
            agent.slow_sync_ms = 0
            agent.forget_sync = False
        if not any(a.state != "down" for a in self.agents):
            self._start(self.agents[0])
        self.run_until(self.now + heal_ms)
        self._check_converged()

    # -- invariants ------------------------------------------------------------------------

    def fail(self, message: str) -> None:
        tail = "\n".join(self.trace[-40:])
        raise InvariantViolation(
            f"seed {self.seed} at t={self.now} (step {self.steps}): {message}\n"
            f"replay with KGROUPS_SIM_SEED={self.seed}\n--- trace tail ---\n{tail}"
        )

    def _group_generation(self) -> int:
        group = self.coordinator.groups.get(GROUP)
        return -1 if group is None else group.generation_id

    def _check_generation(self, generation: int) -> None:
        if generation < 0:
            return
        if generation < self.max_generation:
            self.fail(f"generation went back from {self.max_generation} to {generation}")
        self.max_generation = generation

    def _durable_group(self) -> Any:
        record = self.store.rows.get(("group", GROUP))
        return None if record is None else record.value

    def _check_durable(self, agent: Agent, kind: str, request: Any, body: Any) -> None:
        durable = self._durable_group()
        error = getattr(body, "error", E.none)
        if kind == "join" and error is E.none:
            if durable is None or durable.generation_id < body.generation_id:
                self.fail(f"JoinGroup told generation {body.generation_id} before it was durable")
        elif kind == "sync" and error is E.none:
            if durable is None or durable.generation_id < request.generation_id:
                self.fail("SyncGroup answered before its generation was durable")
            if durable.generation_id == request.generation_id:
                stored = {m.member_id: m.assignment for m in durable.members}
                if stored.get(request.member_id) != body.assignment:
                    self.fail(f"SyncGroup gave {agent.name} an assignment that is not durable")
        elif kind == "heartbeat" and error is E.none:
            if durable is None or durable.generation_id < request.generation_id:
                self.fail("Heartbeat accepted a generation that is not durable")
        elif kind == "commit":
            for p, code in body.topics[0].partitions:
                if code is E.none:
                    row = self.store.rows.get(("offset", GROUP, TOPIC, p))
                    if not isinstance(row, OffsetRecord) or row.value is None:
                        self.fail(f"OffsetCommit acknowledged partition {p} before it was durable")

    def _check_acked_offsets(self) -> None:
        spec = mo.FetchGroup(GROUP, (mo.FetchTopic(TOPIC, tuple(range(self.partitions))),))
        ref = next(self._refs)
        ctx = mg.RequestContext(ref, 8)
        effects = self.coordinator.handle(ctx, mo.OffsetFetchRequest((spec,)), now_ms=self.now)
        (reply,) = effects.replies
        assert isinstance(reply.body, mo.OffsetFetchResponse)
        fetched = {p.partition: p.offset for p in reply.body.groups[0].topics[0].partitions}
        for p, offset in self.acked.items():
            if fetched[p] < offset:
                self.fail(f"acknowledged offset {offset} of partition {p} lost: {fetched[p]}")

    def _check_converged(self) -> None:
        group = self.coordinator.groups.get(GROUP)
        live = [a for a in self.agents if a.state != "down"]
        if group is None or group.state is not GroupState.STABLE:
            self.fail(f"group not Stable after healing: {group and group.state}")
        assert group is not None
        ids = {a.member_id for a in live}
        if set(group.members) != ids:
            self.fail(f"members {sorted(group.members)} != live agents {sorted(ids)}")
        stale = [a.name for a in live if a.assignment_generation != group.generation_id]
        if stale:
            self.fail(f"agents {stale} not on generation {group.generation_id}")
        owned = sorted(p for a in live for p in a.assignment)
        if owned != list(range(self.partitions)):
            self.fail(f"partitions not covered exactly once: {owned}")
        self._check_acked_offsets()
