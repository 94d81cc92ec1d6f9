"""Real `GroupMember`s against the real coordinator, on virtual time, replayable by seed.

Everything that decides who owns a partition is the production code: each member is a
`kgroups.client.GroupMember`, the coordinator is a `CoordinatorServer` (wire decoding,
the ordered store pipeline, the sans-IO core and its timers) with an in-memory store,
and the bytes between them are real Kafka frames over in-memory transports. Only time
(`FakeTimeLoop`) and the network (`Wire`) are simulated, so a seed fixes the whole
schedule: which members join, leave or crash, how long each application takes to stop
work on revoked partitions, which members are cut off from the coordinator and for how
long, when the coordinator restarts, latencies, duplicate static instances.

Each member's application works on what its listener says it owns: it starts on
assigned partitions, stops on revoked ones only when its (possibly slow, cancellable)
revocation callback returns, and stops at once on lost ones. It commits batches pinned
to the generation each batch was planned in, naming that generation in the metadata.

After every turn of the event loop:

1. no partition is worked on by two live applications (a process whose static
   instance id was taken by a newer process, the misconfiguration Kafka fences, is
   exempt until it learns it was fenced);
2. (on every store write) an accepted commit's work belongs to the group's current
   generation, or (cooperative only) to an earlier one in which, and ever since, no
   other member was assigned the partition;
3. a member fails only by being fenced, and only when another process has its
   instance id;
4. a member that nothing disturbed for a while (connected, coordinator up, callbacks
   within the rebalance timeout, no twin) never loses its partitions.

After the faults stop: every live member is stable in one generation, the partitions
are covered exactly once, and it stays so for two session timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from kgroups.client import (
    FencedInstanceError,
    GroupMember,
    MemberError,
    MemberState,
    OffsetAndMetadata,
    TopicPartition,
)
from kgroups.coordinator.core import CoordinatorConfig
from kgroups.coordinator.core.records import OffsetRecord
from kgroups.coordinator.server import CoordinatorServer
from tests.sim.fake_cluster import FakeCluster, MemoryStore, crash
from tests.sim.fake_loop import FakeTimeLoop, Wire

GROUP = "sim"
TOPIC = "jobs"
SESSION = 6.0
HEARTBEAT = 2.0
REBALANCE = 20.0
TRACE_TAIL = 60
STRATEGIES = ("range", "roundrobin", "sticky", "cooperative-sticky")


class MemberInvariantViolation(AssertionError):
    pass


class _TraceHandler(logging.Handler):
    """What the members and the coordinator log, into the trace, on virtual time."""

    def __init__(self, sim: MemberSimulation) -> None:
        super().__init__(logging.INFO)
        self.sim = sim

    def emit(self, record: logging.LogRecord) -> None:
        if "coordinator unavailable" in record.msg:
            return  # every retry backoff while the coordinator is down: noise
        if self.sim.loop is not None and not self.sim.loop.is_closed():
            self.sim.note(f"  [{record.name.rsplit('.', 1)[-1]}] {record.getMessage()[:200]}")


def identity(app: App) -> str:
    return app.instance_id or app.name


@dataclass(eq=False)
class App:
    """One member process: its application and its `GroupMember`."""

    sim: MemberSimulation
    name: str
    instance_id: str | None
    started: float
    working: set[int] = field(default_factory=set)
    alive: bool = True
    partitioned: bool = False
    wires: list[Wire] = field(default_factory=list)
    member: GroupMember | None = None
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    disturbed_at: float = 0.0
    recorded: tuple[int, frozenset[TopicPartition]] | None = None
    """The (generation, assignment) last added to the simulation's `assigned`."""
    """Until when this member's connections or callbacks gave it reason to lose its
    place (a partition, a reset, a revocation past the rebalance timeout)."""

    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        delay = self.sim.revoke_delay()
        # Too slow: the member gives up at the rebalance timeout (less a margin) counted
        # from its last proof that the group was stable, up to two heartbeats before the
        # rebalance began; losing the partitions then is the right outcome.
        if delay >= REBALANCE - 3 * HEARTBEAT:
            self.disturbed_at = self.sim.now() + delay
        try:
            await asyncio.sleep(delay)  # stopping work takes a while
        finally:  # done, or cancelled because they are lost now: stop at once
            self.working -= {tp.partition for tp in partitions}

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.working -= {tp.partition for tp in partitions}
        self.sim.check_healthy_loss(self)

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        if self.alive:
            self.working |= {tp.partition for tp in partitions}


class MemberSimulation:
    def __init__(self, seed: int, *, members: int = 3, partitions: int = 6,
                 faults: int = 8) -> None:  # fmt: skip
        self.seed = seed
        self.rng = random.Random(seed)
        self.partitions = partitions
        self.initial = members
        self.fault_steps = faults
        self.strategy = self.rng.choice(STRATEGIES)
        self.store = MemoryStore(self.check_commits)
        self.cluster: FakeCluster | None = None
        self.apps: list[App] = []
        self.trace: list[str] = []
        self.violation: str | None = None
        self.names = itertools.count(1)
        self.accepted_commits = 0
        self.assigned: dict[tuple[int, int], set[str]] = defaultdict(set)
        """(generation, partition) -> who held it as assigned in it (a static member's
        instance id: its replacement takes over the same assignment in the same generation)."""
        self.restarts = 0
        self.loop: FakeTimeLoop | None = None
        self.closing: list[asyncio.Task[None]] = []
        self.disturbed_at = 0.0
        """Until when the coordinator's restarts gave every member reason to lose."""
        self.slow_revocations = self.rng.random() < 0.5

    # -- running ----------------------------------------------------------------------------

    def run(self) -> None:
        loop = FakeTimeLoop()
        self.loop = loop
        loop.after_step = self.check_owners
        handler = _TraceHandler(self)
        logger = logging.getLogger("kgroups")
        logger.addHandler(handler)
        try:
            loop.run_until_complete(self._main())
        finally:
            logger.removeHandler(handler)
            for _ in range(5):  # closing members may start tasks while they stop
                tasks = asyncio.all_tasks(loop)
                if not tasks:
                    break
                for task in tasks:
                    task.cancel()
                loop.run_until_complete(asyncio.wait(tasks, timeout=REBALANCE))
            loop.close()
        if self.violation is not None:
            self.fail(self.violation)

    def now(self) -> float:
        assert self.loop is not None
        return self.loop.time()

    def note(self, what: str) -> None:
        self.trace.append(f"{self.now():9.3f} {what}")

    def violate(self, message: str) -> None:
        if self.violation is None:  # the first one is what the trace explains
            self.violation = message
            self.note(f"VIOLATION: {message}")

    def fail(self, message: str) -> None:
        tail = "\n".join(self.trace[-TRACE_TAIL:])
        raise MemberInvariantViolation(
            f"seed {self.seed} ({self.strategy}) at t={self.now() if self.loop else 0:.3f}: "
            f"{message}\nreplay: KGROUPS_MEMBER_SIM_SEED={self.seed} PYTHONHASHSEED=0 "
            f"make test-sim\n{tail}"
        )

    def latency(self) -> float:
        return self.rng.uniform(0.0005, 0.03)

    def revoke_delay(self) -> float:
        if not self.slow_revocations:
            return self.rng.uniform(0, 0.2)
        return self.rng.choice([0.0, 0.1, 1.0, SESSION * 1.5, REBALANCE * 1.2])

    async def _main(self) -> None:
        self._create_topic()
        await self._start_coordinator()
        for _ in range(self.initial):
            self._spawn()
        for _ in range(self.fault_steps):
            await asyncio.sleep(self.rng.uniform(0.2, 2 * SESSION))
            await self._fault()
            if self.violation is not None:
                return
        await self._heal()
        if self.violation is None:
            await self._check_converged()

    # -- the coordinator --------------------------------------------------------------------

    @property
    def server(self) -> CoordinatorServer | None:
        return self.cluster.server if self.cluster is not None else None

    def _create_topic(self) -> None:
        self.store.create_topic(TOPIC, self.partitions)

    async def _start_coordinator(self) -> None:
        if self.cluster is None:
            assert self.loop is not None
            self.cluster = FakeCluster(self.loop, self.store, latency=self.latency)
        await self.cluster.start(CoordinatorConfig(
            group_initial_rebalance_delay_ms=self.rng.choice([0, 0, 500, 3000]),
            group_min_session_timeout_ms=1000,
        ))  # fmt: skip

    async def _restart_coordinator(self) -> None:
        self.restarts += 1
        self.note(f"coordinator restart #{self.restarts}")
        self.disturbed_at = self.now() + 2 * SESSION  # bounds the down time below
        assert self.cluster is not None and self.server is not None
        await self.cluster.stop()
        await asyncio.sleep(self.rng.uniform(0.1, SESSION))
        await self._start_coordinator()
        self.note("coordinator back")

    def connector(self, app: App) -> Any:
        assert self.cluster is not None
        return self.cluster.connector(app.name, wires=app.wires,
                                      partitioned=lambda: app.partitioned)  # fmt: skip

    # -- members ----------------------------------------------------------------------------

    def _spawn(self, instance_id: str | None = None) -> App:
        name = f"m{next(self.names)}"
        if instance_id is None and self.rng.random() < 0.4:
            instance_id = f"static-{self.rng.randint(1, 3)}"
            if any(a.alive and a.instance_id == instance_id for a in self.apps):
                instance_id = None  # duplicates only when chosen as a fault
        app = App(self, name, instance_id, self.now())
        app.member = GroupMember(
            "coordinator:9092", GROUP, [TOPIC], assignors=[self.strategy],
            instance_id=instance_id, client_id=name, listener=app,
            session_timeout_ms=int(SESSION * 1000), heartbeat_interval_ms=int(HEARTBEAT * 1000),
            rebalance_timeout_ms=int(REBALANCE * 1000), retry_backoff_ms=100,
            request_timeout_ms=int(SESSION * 1000), connect=self.connector(app),
        )  # fmt: skip
        self.apps.append(app)
        self.note(f"start {name} (instance {instance_id})")
        app.tasks = [
            asyncio.create_task(self._run_member(app)),
            asyncio.create_task(self._work(app)),
        ]
        return app

    async def _run_member(self, app: App) -> None:
        member = app.member
        assert member is not None
        with contextlib.suppress(MemberError):
            await member.start()
        error = await member.wait_failed()
        app.working.clear()
        if self.violation is not None or not app.alive:
            return
        app.alive = False
        self.note(f"{app.name} failed: {error!r}")
        if not isinstance(error, FencedInstanceError):
            self.violate(f"{app.name} failed: {error!r}")
            return
        # Fencing is for two processes with one instance id; without a twin, a member
        # was fenced by its own earlier self, which is the bug of finding 5. (Which twin
        # is fenced depends on who last joined without a member id, which this
        # simulation cannot see; tests/integration/test_member_findings.py pins the
        # frozen-member case.)
        if not any(a is not app and a.instance_id == app.instance_id for a in self.apps):
            self.violate(f"{app.name} was fenced, yet no other process has its instance id")

    async def _work(self, app: App) -> None:
        """The application's batches: plan in generation g, work, commit pinned to g."""
        member = app.member
        assert member is not None
        offset = 0
        while app.alive:
            await asyncio.sleep(self.rng.uniform(0.5, 3.0))
            if member.state != MemberState.STABLE or not member.assignment:
                continue
            generation, batch = member.generation, sorted(member.assignment)
            await asyncio.sleep(self.rng.choice([0.01, 0.5, 2.0, SESSION]))  # the work
            offset += 1
            metadata = f"{app.name}@{generation}"
            offsets = {tp: OffsetAndMetadata(offset, metadata) for tp in batch}
            try:
                await member.commit(offsets, generation=generation)
            except (MemberError, ConnectionError):
                continue

    async def _fault(self) -> None:
        live = [a for a in self.apps if a.alive]
        choice = self.rng.choice(
            ["spawn", "close", "crash", "partition", "partition", "reset", "restart",
             "duplicate", "nothing"]
        )  # fmt: skip
        if choice == "spawn" or not live:
            self._spawn()
            return
        app = self.rng.choice(live)
        if choice == "close":
            self.note(f"close {app.name}")
            self.closing.append(asyncio.create_task(self._close(app)))
        elif choice == "crash":
            self._crash(app)
        elif choice == "partition" and not app.partitioned:
            duration = self.rng.choice([0.5, SESSION * 0.8, SESSION * 1.5, REBALANCE * 2])
            self.note(f"partition {app.name} for {duration:.1f} s")
            app.partitioned = True
            app.disturbed_at = self.now() + duration
            for wire in app.wires:
                wire.cut = True
            app.tasks.append(asyncio.create_task(self._heal_later(app, duration)))
        elif choice == "reset":
            self.note(f"reset {app.name}'s connections")
            app.disturbed_at = self.now()
            for wire in app.wires:
                wire.reset()
        elif choice == "restart" and self.server is not None:
            await self._restart_coordinator()
        elif choice == "duplicate":
            static = [a for a in live if a.instance_id is not None]
            if static:
                twin = self.rng.choice(static)
                self.note(f"duplicate of {twin.name}'s instance {twin.instance_id}")
                self._spawn(instance_id=twin.instance_id)

    async def _close(self, app: App) -> None:
        assert app.member is not None
        if app.member.state in (MemberState.JOINING, MemberState.SYNCING):
            # Closing cancels the JoinGroup or SyncGroup in flight: the group may complete
            # that round without this member learning its new generation, and the
            # revocation that follows can end in a loss (Java reports one at once when it
            # closes mid-rebalance). Its own close disturbed it.
            app.disturbed_at = max(app.disturbed_at, self.now())
        with contextlib.suppress(MemberError):
            await app.member.close()
        app.alive = False
        app.working.clear()
        self.note(f"{app.name} closed")

    def _crash(self, app: App) -> None:
        """SIGKILL: the process and its application stop at once; no goodbye."""
        self.note(f"crash {app.name}")
        app.alive = False
        app.working.clear()
        assert app.member is not None
        crash(app.member, app.wires, app.tasks)

    async def _heal_later(self, app: App, duration: float) -> None:
        await asyncio.sleep(duration)
        self._heal_partition(app)

    def _heal_partition(self, app: App) -> None:
        if not app.partitioned:
            return
        app.partitioned = False
        app.disturbed_at = max(app.disturbed_at, self.now())
        for wire in app.wires:
            if wire.cut:
                wire.reset()  # the connection did not survive the outage
        self.note(f"{app.name} reconnected")

    async def _heal(self) -> None:
        self.note("faults stop")
        for app in self.apps:
            self._heal_partition(app)
        if self.server is None:
            await self._start_coordinator()
        for closing in self.closing:
            await closing

    # -- invariants -------------------------------------------------------------------------

    def check_owners(self) -> None:
        if self.violation is not None:
            return
        holders: dict[int, list[App]] = defaultdict(list)
        for app in self.apps:
            if not app.alive or self.superseded(app):
                continue
            member = app.member
            if member is not None and member.state is MemberState.STABLE:
                # Run after every turn of the loop: an assignment already recorded for
                # this generation is not recorded again.
                seen = (member.generation, member.assignment)
                if app.recorded != seen:
                    app.recorded = seen
                    for tp in member.assignment:
                        self.assigned[(member.generation, tp.partition)].add(identity(app))
            for p in app.working:
                holders[p].append(app)
        for p, apps in holders.items():
            if len(apps) > 1:
                self.violate(f"partition {p} is worked on by {[a.name for a in apps]} at once")
                return

    def check_healthy_loss(self, app: App) -> None:
        """A member that was healthy for a while (connected, its coordinator up, its
        callbacks within the rebalance timeout, no twin) never loses its partitions: a
        member expelled while it heartbeats is the bug of finding 1."""
        if not app.alive or (
            app.instance_id is not None
            and any(a is not app and a.instance_id == app.instance_id for a in self.apps)
        ):
            return
        quiet_since = max(app.disturbed_at, self.disturbed_at, app.started)
        if self.now() - quiet_since > SESSION + REBALANCE:
            self.violate(f"{app.name} lost its partitions although nothing disturbed it "
                         f"since t={quiet_since:.3f}")  # fmt: skip

    def superseded(self, app: App) -> bool:
        """Another process was started with this one's static instance id (the
        misconfiguration Kafka fences): until its next request is fenced, this one may
        still believe in partitions the group has since given to anyone. Its work is
        exempt from the ownership check; its commits are not exempt from fencing."""
        return app.instance_id is not None and any(
            a.instance_id == app.instance_id and a.started > app.started for a in self.apps
        )

    def check_commits(self, records: Any) -> None:
        server = self.server
        if server is None or server.coordinator is None:
            return
        group = server.coordinator.groups.get(GROUP)
        for record in records:
            if not isinstance(record, OffsetRecord) or record.value is None:
                continue
            name, _, text = record.value.metadata.partition("@")
            planned, current = int(text), group.generation_id if group is not None else None
            # Work of an earlier generation counts only from a member that held the
            # partition throughout (cooperative rebalances that kept it), never in eager.
            between = range(planned, (current or 0) + 1)
            others = {n for g in between for n in self.assigned.get((g, record.partition), ())}
            who = {identity(a) for a in self.apps if a.name == name}
            if (
                current is None
                or planned > current
                or others - who
                or (planned != current and self.strategy != "cooperative-sticky")
            ):
                self.violate(
                    f"a commit by {name} of work planned in generation {planned} was accepted "
                    f"in generation {current} ({record.topic}-{record.partition}; assigned "
                    f"meanwhile to {sorted(others)})"
                )
            self.accepted_commits += 1

    async def _check_converged(self) -> None:
        """Eventually settled, then settled at every check for two session timeouts
        (what members believed before the faults stopped may take a session to expire)."""
        deadline = self.now() + 4 * REBALANCE + 4 * SESSION
        settled_since: float | None = None
        while settled_since is None or self.now() - settled_since < 2 * SESSION:
            if self.violation is not None:
                return
            if self.now() > deadline:
                self.violate(f"did not converge: {self._describe()}")
                return
            if not self._settled():
                settled_since = None
            elif settled_since is None:
                settled_since = self.now()
            await asyncio.sleep(0.25)

    def _settled(self) -> bool:
        live = [a for a in self.apps if a.alive]
        if not live:
            return True
        members = [a.member for a in live if a.member is not None]
        if any(m.state != MemberState.STABLE for m in members):
            return False
        if len({m.generation for m in members}) != 1:
            return False
        owned = sorted(tp.partition for m in members for tp in m.assignment)
        if owned != list(range(self.partitions)):
            return False
        return all(a.working == {tp.partition for tp in a.member.assignment}
                   for a in live if a.member is not None)  # fmt: skip

    def _describe(self) -> str:
        return "; ".join(
            f"{a.name}: {a.member.state} g{a.member.generation} "
            f"{sorted(tp.partition for tp in a.member.assignment)} working {sorted(a.working)}"
            for a in self.apps
            if a.alive and a.member is not None
        )
