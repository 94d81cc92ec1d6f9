"""The group simulation with several coordinator replicas sharing a store through leases.

`ReplicatedSimulation` runs the clients of `simulation.Simulation` against `REPLICAS`
real `GroupCoordinator`s, each one replica (`GroupCoordinator.share`) deciding about its
shards with the real `core.leasing.ReplicaLeases` (what `replicas.Replication` runs
around PostgreSQL), on the simulation's time. Modelled here is only what is I/O there: the
PostgreSQL store of `kgroups.coordinator.store` (shard leases on the database's clock,
renewed every `TICK_MS`, lasting `TTL_MS`, claimed up to the fair share with a higher
epoch; a compacted store shared by all; every write checked against the epochs of the
writer's fence), and each replica's ordered writer (replies leave after the write they
follow; a shard is loaded after the writes queued before it).

Faults, beside the clients' own: a replica crashes (its parked requests and queued
writes are lost; it comes back under its name later), or freezes in the middle of a
write (SIGSTOP: nothing of it runs, its leases expire, another replica takes the group
over; when it wakes, its write reaches the store first, then whatever it still believes),
for up to a few lease lifetimes, or loses its database for a while (PostgreSQL
restarting: its writes and lease renewals wait, requests do not, so it self-fences and
then loads its shards again). Clients stick to the replica they found and look again
on NOT_COORDINATOR or a broken connection.

The invariants are the simulation's, on the durable state (generations never go back in
the store; acknowledged offsets are never lost; no partition owned twice in one
generation; after the faults, one Stable group of every live client); at every step the
owner serving the group answers no offset older than one acknowledged; and before a
replica handles a request or a timer, every shard it still serves is, in the database,
its own at its fence's epoch with a lease not expired. Mutation tests switch off the
store's epoch check (`check_epochs`), the machine's self-fencing (`NoSelfFence`) or a
replica's loading after its queued writes (`load_after_writes`) and require a violation.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kgroups.coordinator.core import Effects, GroupCoordinator, GroupState, Node
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core.effects import RequestBody
from kgroups.coordinator.core.leasing import ReplicaLeases, Tick, set_aside
from kgroups.coordinator.core.records import GroupRecord, OffsetRecord, Record
from kgroups.coordinator.core.shards import fair_share, shard_of, to_claim, to_release
from kgroups.protocol.errors import ErrorCode
from tests.sim.simulation import GROUP, HEARTBEAT_MS, TOPIC, Agent, Simulation

E = ErrorCode
SHARDS = 4
REPLICAS = 3
TTL_MS = 3_000
TICK_MS = TTL_MS // 5
MARGIN_MS = TTL_MS // 4
SHARD = shard_of(GROUP, SHARDS)
MOVED = (E.not_coordinator, E.coordinator_load_in_progress, E.coordinator_not_available)


@dataclass
class Lease:
    owner: str | None = None
    epoch: int = 0
    expires: int = 0


class NoSelfFence(ReplicaLeases):
    """Mutation: a replica that never stops trusting its leases."""

    def check(self, now: float) -> list[int]:
        return []

    def read(self, fenced: Mapping[int, int], *, now: float) -> list[int]:
        return super().read(fenced, now=-math.inf)


@dataclass
class Replica:
    name: str
    node_id: int
    coordinator: GroupCoordinator
    machine: ReplicaLeases
    """Its decisions: the real `core.leasing` machine, on the simulation's time."""
    last_held: dict[int, int] = field(default_factory=dict)
    """shard -> epoch held at its last tick (what `ShardLeases.tick` finds lost against)."""
    up: bool = True
    paused_until: int = 0
    """Frozen (SIGSTOP) until then: nothing of it runs, its keep-alive neither."""
    stalled_until: int = 0
    """Its event loop is stuck until then (one long turn): requests, timers and ticks
    wait; its keep-alive thread goes on renewing while the machine asks for it."""
    life: int = 0
    """Bumped on crash: events of an earlier life are dropped."""
    queue: list[Effects] = field(default_factory=list)
    writing: bool = False
    freeze_in_write: int = 0
    """Freeze for this long at the next write (SIGSTOP in the middle of it)."""
    store_away_until: int = 0
    """Its database is away until then: writes and lease renewals wait, requests do not."""

    @property
    def blocked_until(self) -> int:
        """Until when its event loop runs nothing (frozen or stalled)."""
        return max(self.paused_until, self.stalled_until)


class ReplicatedSimulation(Simulation):
    def __init__(self, seed: int, *, check_epochs: bool = True, self_fence: bool = True,
                 load_after_writes: bool = True, **kw: Any) -> None:  # fmt: skip
        self.check_epochs = check_epochs
        self.self_fence = self_fence
        self.load_after_writes = load_after_writes
        self.replicas: list[Replica] = []
        self.leases = {s: Lease() for s in range(SHARDS)}
        self.replica_rows: dict[str, int] = {}
        """replica name -> its row's expiry (live replicas)."""
        self.route: dict[str, Replica] = {}
        """client -> the replica it found (FindCoordinator), until told to look again."""
        self.kinds: dict[int, str] = {}
        """ref -> what kind of request it was, until it is answered or broken."""
        self.held_by: dict[int, Replica] = {}
        """ref -> the replica holding that request (a crash breaks its connection)."""
        self.moves = self.freezes = self.crashes = self.fenced_writes = self.outages = 0
        self.stalls = self.renewals = 0
        self._counter = itertools.count(1)
        super().__init__(seed, **kw)

    # -- replicas -------------------------------------------------------------------------

    def _fresh_coordinator(self) -> GroupCoordinator:
        """The base simulation's coordinator: replica 0 (the others are made here)."""
        if not self.replicas:
            for n in range(REPLICAS):
                self.replicas.append(Replica(f"r{n}", n, self._core(n), self._machine()))
                self._register(self.replicas[-1])
                self.schedule(n * 7, lambda r=self.replicas[-1], life=0: self._tick(r, life))
                self.schedule(n * 7 + TICK_MS // 2,
                              lambda r=self.replicas[-1], life=0: self._keep_alive(r, life))  # fmt: skip
        return self.replicas[0].coordinator

    def _machine(self) -> ReplicaLeases:
        kind = ReplicaLeases if self.self_fence else NoSelfFence
        return kind(TTL_MS / 1000, now=self.now / 1000)

    def _core(self, node_id: int) -> GroupCoordinator:
        core = GroupCoordinator(
            self.config, node=Node(node_id, f"r{node_id}", 9092), cluster_id="sim",
            new_member_id=lambda prefix: f"{prefix}-{next(self._ids)}",
        )  # fmt: skip
        for record in self.store.replay_order():
            if not isinstance(record, GroupRecord | OffsetRecord):
                core.replay(record)  # topics and group settings: the cluster's
        core.resume(now_ms=self.now)
        core.share(SHARDS)
        return core

    def _register(self, replica: Replica) -> None:
        """Start (or restart) under its name: the name's shards get a new epoch."""
        for lease in self.leases.values():
            if lease.owner == replica.name:
                lease.epoch += 1
        self.replica_rows[replica.name] = self.now + TTL_MS

    def _tick(self, replica: Replica, life: int) -> None:
        if not replica.up or replica.life != life:
            return
        if replica.blocked_until > self.now:
            self.schedule(replica.blocked_until - self.now, lambda: self._tick(replica, life))
            return
        if replica.store_away_until > self.now:  # no renewal: it self-fences meanwhile
            self.schedule(replica.store_away_until - self.now, lambda: self._tick(replica, life))
            return
        self.schedule(TICK_MS, lambda: self._tick(replica, life))
        now = self.now
        replica.machine.loop_turned(now / 1000)
        self.replica_rows[replica.name] = now + TTL_MS
        held = {s: ls.epoch for s, ls in self.leases.items() if ls.owner == replica.name}
        for s in held:
            self.leases[s].expires = now + TTL_MS
        live = [n for n, expiry in self.replica_rows.items() if expiry > now]
        share = fair_share(SHARDS, len(live))
        free = [s for s, ls in self.leases.items() if ls.owner is None or ls.expires <= now]
        for s in to_claim(len(held), share, free):
            lease = self.leases[s]
            lease.owner, lease.epoch, lease.expires = replica.name, lease.epoch + 1, now + TTL_MS
            held[s] = lease.epoch
        owners = {s: ls.owner for s, ls in self.leases.items() if ls.expires > now}
        sharding = replica.coordinator.core.sharding
        sharding.owners = {s: int(o[1:]) for s, o in owners.items() if o is not None}
        lost = frozenset(s for s, e in replica.last_held.items() if held.get(s) != e)
        replica.last_held = dict(held)
        release = tuple(to_release(list(held), share))
        machine = replica.machine
        gone, handed = machine.ticked(Tick(now / 1000, held, {}, lost, release, ()))
        self._forget(replica, [*gone, *handed])
        for s in handed:  # handed over: unloaded, its writes finished, then released
            self._flush(replica, then=lambda s=s, e=held[s]: self._release(replica, s, e))
        for s, epoch in machine.to_load(held).items():
            self._load(replica, s, epoch)

    def _keep_alive(self, replica: Replica, life: int) -> None:
        """`Replication._keep_alive`, a thread: every tick, the renewal the machine asks
        for (none once the loop has not turned for `stall_s`), made as
        `ShardLeases.renew` makes it."""
        if not replica.up or replica.life != life:
            return
        if replica.paused_until > self.now:  # SIGSTOP stops every thread
            self.schedule(replica.paused_until - self.now, lambda: self._keep_alive(replica, life))
            return
        self.schedule(TICK_MS, lambda: self._keep_alive(replica, life))
        if replica.store_away_until > self.now:
            return
        renewal = replica.machine.renewal(self.now / 1000)
        if renewal is None:
            return
        every_one = True
        for shard, epoch in renewal.epochs.items():
            lease = self.leases[shard]
            if lease.owner == replica.name and lease.epoch == epoch:
                lease.expires = self.now + TTL_MS
            else:
                every_one = False
        self.replica_rows[replica.name] = self.now + TTL_MS
        replica.machine.renewed(renewal, began=self.now / 1000, every_one=every_one)
        self.renewals += 1

    def _release(self, replica: Replica, shard: int, epoch: int) -> None:
        if not replica.machine.still_releasing([shard]):
            return  # lost, or taken up again, while its writes finished
        lease = self.leases[shard]
        if lease.owner == replica.name and lease.epoch == epoch:
            lease.owner, lease.expires = None, 0
        replica.last_held.pop(shard, None)
        replica.machine.released([shard])

    def _load(self, replica: Replica, shard: int, epoch: int) -> None:
        """`Replication._load`: the writes queued before finish first (under the fence they
        were produced with), then the machine fences the epoch and the records are read."""
        replica.coordinator.core.sharding.loading = set(replica.machine.loading)
        if self.load_after_writes and (replica.writing or replica.queue):
            life = replica.life
            self._flush(replica, then=lambda: self._load_now(replica, life, shard, epoch))
            return
        self._load_now(replica, replica.life, shard, epoch)

    def _load_now(self, replica: Replica, life: int, shard: int, epoch: int) -> None:
        if replica.life != life:
            return
        machine = replica.machine
        fenced = machine.drained({shard: epoch})
        if not fenced:
            return  # lost or expired meanwhile: the next tick decides
        records = [
            r for r in self.store.replay_order()
            if isinstance(r, GroupRecord | OffsetRecord) and shard_of(r.group_id, SHARDS) == shard
        ]  # fmt: skip
        if not machine.read(fenced, now=self.now / 1000):
            replica.coordinator.core.sharding.loading = set(machine.loading)
            return
        self._enqueue(replica, replica.coordinator.load(shard, records, now_ms=self.now))
        replica.coordinator.core.sharding.loading = set(machine.loading)
        if shard == SHARD:
            self.moves += 1
            self.trace.append(f"{self.now} {replica.name} serves the group (epoch {epoch})")

    def _forget(self, replica: Replica, shards: list[int]) -> None:
        """`Replication._forget`: shards the machine no longer holds leave the core."""
        sharding = replica.coordinator.core.sharding
        loaded = [s for s in shards if s in sharding.serving or s in sharding.loading]
        sharding.loading = set(replica.machine.loading)
        for shard in loaded:
            self._enqueue(replica, replica.coordinator.unload(shard, now_ms=self.now))

    def _check_leases(self, replica: Replica) -> None:
        """`Replication.check`, before a request or a timer: past its leases' validity, a
        replica serves nothing. Then the invariant: whatever it still serves, the
        database says it holds, at the epoch of its fence, with a lease not expired."""
        self._forget(replica, replica.machine.check(self.now / 1000))
        for shard in sorted(replica.coordinator.core.sharding.serving):
            lease = self.leases[shard]
            if (
                lease.owner != replica.name
                or lease.expires <= self.now
                or lease.epoch != replica.machine.fence.get(shard)
            ):
                self.fail(f"{replica.name} acts on shard {shard} it does not hold: owner "
                          f"{lease.owner} at epoch {lease.epoch} until {lease.expires}, its "
                          f"fence {dict(replica.machine.fence)}")  # fmt: skip

    # -- the ordered writer, fenced ---------------------------------------------------------

    def _apply(self, effects: Effects) -> None:
        """Effects of the base simulation's own calls (bootstrap): straight to the store."""
        super()._apply(effects)

    def _enqueue(self, replica: Replica, effects: Effects) -> None:
        if not effects.records and not effects.replies:
            return
        replica.queue.append(effects)
        if not replica.writing:
            self._flush(replica)

    def _flush(self, replica: Replica, then: Any = None) -> None:
        life = replica.life
        if replica.writing or not replica.queue:
            if then is not None:
                self.schedule(1, lambda: self._flush_then(replica, life, then))
            return
        batch, replica.queue = replica.queue, []
        replica.writing = True
        if replica.freeze_in_write and self.faults:
            pause, replica.freeze_in_write = replica.freeze_in_write, 0
            replica.paused_until = self.now + pause
            self.freezes += 1
            self.trace.append(f"{self.now} {replica.name} freezes {pause} ms inside a write")
        if replica.blocked_until > self.now:  # frozen inside it: it lands first when it wakes
            delay = replica.blocked_until - self.now
        elif replica.store_away_until > self.now:  # retried until the database is back
            delay = replica.store_away_until - self.now + self.rng.randint(1, 15)
        else:
            delay = self.rng.randint(1, 15)
        self.schedule(delay, lambda: self._written(replica, life, batch, then))

    def _flush_then(self, replica: Replica, life: int, then: Any) -> None:
        if replica.life != life:
            return
        if replica.writing or replica.queue:
            self._flush(replica, then)
        else:
            then()

    def _written(self, replica: Replica, life: int, batch: list[Effects], then: Any) -> None:
        if replica.life != life:
            return  # crashed: nothing of it was written, nothing answered
        replica.writing = False
        records = [r for e in batch for r in e.records]
        touched = {shard_of(r.group_id, SHARDS) for r in records
                   if isinstance(r, GroupRecord | OffsetRecord)}  # fmt: skip
        refused = {
            s for s in touched
            if self.leases[s].owner != replica.name
            or self.leases[s].epoch != replica.machine.fence.get(s, -1)
        }  # fmt: skip
        if refused and self.check_epochs:
            self.fenced_writes += 1
            self.trace.append(f"{self.now} {replica.name}: write refused (shards {refused})")
            # What is written again and what is never acknowledged: the writer's rule
            # (`OrderedWriter._set_aside`); every request here is about the one group.
            again, lost = set_aside(
                batch, replica.queue, frozenset(refused),
                written_to=lambda e: {shard_of(r.group_id, SHARDS) for r in e.records
                                      if isinstance(r, GroupRecord | OffsetRecord)},
                answers_about=lambda e: {SHARD} if any(
                    r.ref in self.pending for r in e.replies) else set(),
            )  # fmt: skip
            replica.queue = again
            for effects in lost:
                for reply in effects.replies:
                    held = self.pending.pop(reply.ref, None)
                    if held is not None:  # the connection closes: not acknowledged
                        agent, epoch, _, _ = held
                        self.schedule(self._latency(),
                                      lambda a=agent, e=epoch, r=reply.ref: self._disconnected(a, e, r))  # fmt: skip
            self._forget(replica, replica.machine.refused(frozenset(refused)))
        else:
            for effects in batch:
                super()._apply(effects)
        if then is not None:
            then()
        if replica.queue:
            self._flush(replica)

    # -- requests ---------------------------------------------------------------------------

    def _owner(self) -> Replica | None:
        lease = self.leases[SHARD]
        if lease.owner is None or lease.expires <= self.now:
            return None
        return next(r for r in self.replicas if r.name == lease.owner)

    def _find(self, agent: Agent) -> Replica:
        """FindCoordinator: the group's owner, or (none yet) any replica."""
        owner = self._owner()
        found = owner if owner is not None and owner.up else self.rng.choice(self.replicas)
        self.route[agent.name] = found
        return found

    def send(self, agent: Agent, kind: str, request: RequestBody, version: int = 9) -> None:
        ref = next(self._refs)
        agent.in_flight = ref
        agent.in_flight_kind = kind
        self.kinds[ref] = kind
        epoch = agent.epoch
        replica = self.route.get(agent.name) or self._find(agent)
        life = replica.life

        def arrive() -> None:
            if not replica.up or replica.life != life:
                self.schedule(self._latency(), lambda: self._disconnected(agent, epoch, ref))
                self.route.pop(agent.name, None)
                return
            if replica.blocked_until > self.now:
                self.schedule(replica.blocked_until - self.now, arrive)
                return
            replica.machine.loop_turned(self.now / 1000)
            self._check_leases(replica)
            self.pending[ref] = (agent, epoch, kind, request)
            self.held_by = {r: h for r, h in self.held_by.items() if r in self.pending}
            self.held_by[ref] = replica
            ctx = mg.RequestContext(ref, version, agent.name, "/sim")
            self._enqueue(replica, replica.coordinator.handle(ctx, request, now_ms=self.now))

        self.schedule(self._latency(), arrive)

    def _disconnected(self, agent: Agent, epoch: int, ref: int) -> None:
        if agent.in_flight == ref:
            self.route.pop(agent.name, None)
        elif self.kinds.get(ref) == "heartbeat" and self._alive(agent, epoch):
            # A heartbeat a later request overtook (the model's slow SyncGroup): its loop
            # goes on, as a real client's heartbeat thread does.
            loop = agent.heartbeat_loop
            self.schedule(HEARTBEAT_MS // 2, lambda: self._heartbeat(agent, epoch, loop))
        self.kinds.pop(ref, None)
        super()._disconnected(agent, epoch, ref)

    def _join(self, agent: Agent, epoch: int) -> None:
        if self._alive(agent, epoch) and agent.state == "unjoined" and agent.in_flight:
            # A rejoin decided while a heartbeat or commit waits on a replica whose loop
            # is stuck: a client sends its JoinGroup once that request is answered.
            self.schedule(HEARTBEAT_MS // 4, lambda: self._join(agent, epoch))
            return
        super()._join(agent, epoch)

    def _deliver(self, agent: Agent, epoch: int, kind: str, request: Any, body: Any) -> None:
        if agent.in_flight is not None and kind != agent.in_flight_kind:
            # The answer to a request another one overtook (the model's slow SyncGroup):
            # the newer request is still in flight; a heartbeat's loop goes on.
            if kind == "heartbeat" and self._alive(agent, epoch):
                loop = agent.heartbeat_loop
                self.schedule(HEARTBEAT_MS // 2, lambda: self._heartbeat(agent, epoch, loop))
            return
        super()._deliver(agent, epoch, kind, request, body)

    def _react(self, agent: Agent, epoch: int, kind: str, request: Any, body: Any) -> None:
        if not self._alive(agent, epoch):
            return
        error = getattr(body, "error", E.none)
        if kind != "commit" and error in MOVED:
            self.route.pop(agent.name, None)  # look for the coordinator again
            if kind in ("join", "sync"):
                return self._rejoin(agent, epoch)
            if agent.state == "unjoined":  # a rejoin that found this request in flight
                return self._rejoin(agent, epoch)
            if kind == "heartbeat":
                loop = agent.heartbeat_loop
                self.schedule(HEARTBEAT_MS // 4, lambda: self._heartbeat(agent, epoch, loop))
            return None
        if kind == "commit" and any(c in MOVED for _, c in body.topics[0].partitions):
            self.route.pop(agent.name, None)
        return super()._react(agent, epoch, kind, request, body)

    # -- time and faults --------------------------------------------------------------------

    def _bootstrap(self) -> None:
        super()._bootstrap()
        topics = self.store.replay_order()
        for replica in self.replicas[1:]:
            replica.coordinator.refresh(topics, now_ms=self.now)

    def step(self) -> bool:
        due = [
            (d, r) for r in self.replicas
            if r.up and r.blocked_until <= self.now
            and (d := r.coordinator.next_deadline_ms()) is not None
        ]  # fmt: skip
        deadline, replica = min(due, key=lambda x: x[0]) if due else (None, None)
        if not self.events and deadline is None:
            return False
        if (
            replica is not None
            and deadline is not None
            and (not self.events or deadline <= self.events[0].at)
        ):
            self.now = max(self.now, deadline)
            self._check_leases(replica)
            self._enqueue(replica, replica.coordinator.handle_timers(now_ms=self.now))
        else:
            event = heapq.heappop(self.events)
            self.now = max(self.now, event.at)
            event.action()
        self.steps += 1
        self._check_generation(self._group_generation())
        self._check_served_offsets()
        return True

    def restart_coordinator(self) -> None:
        """A replica fault instead of the base simulation's restart."""
        replica = self.rng.choice(self.replicas)
        if not replica.up:
            return
        roll = self.rng.random()
        if roll < 0.3:
            replica.freeze_in_write = self.rng.randint(TTL_MS, TTL_MS * 3)
            self.trace.append(f"{self.now} {replica.name} will freeze at its next write")
            return
        if roll < 0.4:  # one long turn of its event loop: within the keep-alive's patience, or not
            stall_ms = int(replica.machine.timings.stall_s * 1000)
            replica.stalled_until = self.now + self.rng.randint(TTL_MS // 2, stall_ms * 3 // 2)
            self.stalls += 1
            self.trace.append(f"{self.now} {replica.name}'s loop stalls until "
                              f"{replica.stalled_until}")  # fmt: skip
            return
        if roll < 0.6:  # PostgreSQL restarting under it: long enough to self-fence
            replica.store_away_until = self.now + self.rng.randint(TTL_MS - MARGIN_MS, TTL_MS * 2)
            self.outages += 1
            self.trace.append(f"{self.now} {replica.name}'s database away until "
                              f"{replica.store_away_until}")  # fmt: skip
            return
        self.crashes += 1
        self.restarts += 1
        self.trace.append(f"{self.now} {replica.name} crashes")
        replica.up = False
        replica.life += 1
        replica.queue.clear()
        replica.writing = False
        for ref, (agent, epoch, _, _) in list(self.pending.items()):
            if self.held_by.get(ref) is replica:
                del self.pending[ref]
                self.schedule(self._latency(),
                              lambda a=agent, e=epoch, r=ref: self._disconnected(a, e, r))  # fmt: skip
        self.schedule(self.rng.randint(200, TTL_MS * 2), lambda: self._restart(replica))

    def _restart(self, replica: Replica) -> None:
        replica.coordinator = self._core(replica.node_id)
        replica.machine = self._machine()
        replica.last_held = {}
        replica.up = True
        replica.paused_until = replica.stalled_until = replica.store_away_until = 0
        self._register(replica)
        self.trace.append(f"{self.now} {replica.name} restarts")
        life = replica.life
        self._tick(replica, life)
        self.schedule(TICK_MS // 2, lambda: self._keep_alive(replica, life))

    def inject_fault(self) -> None:
        if self.rng.random() < 0.25:
            self.restart_coordinator()
            return
        super().inject_fault()
        for agent in self.agents:  # clients that never sync are the base simulation's topic
            agent.forget_sync = False

    # -- invariants, on the durable state ---------------------------------------------------

    def _group_generation(self) -> int:
        durable = self._durable_group()
        return -1 if durable is None else durable.generation_id

    def _check_acked_offsets(self) -> None:
        for p, offset in self.acked.items():
            row = self.store.rows.get(("offset", GROUP, TOPIC, p))
            stored = row.value.offset if isinstance(row, OffsetRecord) and row.value else -1
            if stored < offset:
                self.fail(f"acknowledged offset {offset} of partition {p} lost: {stored}")

    def _check_served_offsets(self) -> None:
        """What the group's owner answers OffsetFetch with is never behind an
        acknowledged commit (a shard loaded before its replica's queued writes finished
        would be, though the store is not)."""
        owner = self._owner()
        if owner is None or not owner.up or SHARD not in owner.coordinator.core.sharding.serving:
            return
        offsets = owner.coordinator.core.offsets.get(GROUP, {})
        for p, acked in self.acked.items():
            value = offsets.get((TOPIC, p))
            served = value.offset if value is not None else -1
            if served < acked:
                self.fail(f"{owner.name} serves offset {served} of partition {p}, "
                          f"acknowledged {acked}")  # fmt: skip

    def _check_converged(self) -> None:
        owner = self._owner()
        if owner is None:
            self.fail("no replica owns the group after healing")
        assert owner is not None
        self.coordinator = owner.coordinator
        group = owner.coordinator.groups.get(GROUP)
        if group is not None and group.state is GroupState.STABLE:
            durable = self._durable_group()
            if durable is None or durable.generation_id != group.generation_id:
                self.fail("the owner's Stable generation is not the durable one")
        super()._check_converged()

    def durable_records(self) -> list[Record]:
        return self.store.replay_order()
