"""The consumer protocol (KIP-848) under random schedules: joins, heartbeats in any order,
lost answers, leaves, crashes, static restarts, topic growth and coordinator restarts.

Each seed drives the real sans-IO core (`CoreContext`, fake time) with simulated clients
that follow the protocol as Kafka's do: a client uses what its last answer assigned,
releases what an answer leaves out, reports what it owns, and drops everything when
fenced. After every step:

* no partition is used by two clients whose members the coordinator still has (what
  "never work on the same partition twice" means to an application), and the
  coordinator's own holders agree: a partition held by one member at a time;
* no client uses a partition its member has not been given (nor one it was told to
  release, once it answered).

After the schedule, everyone heartbeats until quiet: the group must be Stable, every
member holding exactly its target, and every partition of the topic held by one member.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from kgroups.coordinator.core import CoordinatorConfig
from kgroups.coordinator.core import msg_cluster as mc
from kgroups.coordinator.core import msg_consumer as mn
from kgroups.coordinator.core.consumer_group import ConsumerGroupState
from kgroups.protocol.errors import ErrorCode
from tests.core_context import CoreContext

SESSION_MS = 10_000
TOPIC = "t"


@dataclass
class Client:
    """One consumer process, honest but possibly slow, crashed or deaf to an answer."""

    name: str
    instance_id: str | None = None
    member_id: str = ""
    epoch: int = 0
    owned: set[int] = field(default_factory=set)
    joined: bool = False
    alive: bool = True
    generation: int = 0
    """How many processes of this name have run (a new member id per process)."""


class Sim:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ctx = CoreContext(CoordinatorConfig(group_consumer_session_timeout_ms=SESSION_MS,
                                                 group_consumer_heartbeat_interval_ms=1000))  # fmt: skip
        self.partitions = self.rng.randint(1, 8)
        self.ctx.create_topic(TOPIC, self.partitions)
        self.clients = [
            Client(f"c{i}", instance_id=f"i{i}" if self.rng.random() < 0.3 else None)
            for i in range(self.rng.randint(1, 5))
        ]
        self.assignor = self.rng.choice([None, "uniform", "range"])

    @property
    def topic_id(self) -> object:
        return self.ctx.core.topics[TOPIC].topic_id

    def group(self) -> object:
        return self.ctx.core.consumer_groups.get("g")

    def heartbeat(self, c: Client, *, lose_answer: bool = False) -> None:
        if not c.alive:
            return
        if not c.member_id:  # a new process: its own member id, for its lifetime
            c.generation += 1
            c.member_id = f"{c.name}-{c.generation}"
        if not c.joined:
            c.epoch, c.owned = 0, set()
        req = mn.ConsumerHeartbeatRequest(
            group_id="g", member_id=c.member_id, member_epoch=c.epoch,
            instance_id=c.instance_id,
            rebalance_timeout_ms=60_000 if not c.joined else -1,
            subscribed_topic_names=(TOPIC,) if not c.joined else None,
            server_assignor=self.assignor if not c.joined else None,
            owned=((self.topic_id, tuple(sorted(c.owned))),),
        )  # fmt: skip
        answer = self.ctx.reply(self.ctx.send(req, version=1))
        if lose_answer:
            return  # the coordinator acted; the client never heard
        if answer.error in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id):
            c.owned, c.epoch, c.joined = set(), 0, False  # rejoin, as Java does
            return
        if answer.error is ErrorCode.unreleased_instance_id:
            return  # its crashed predecessor is still in the group: try again later
        assert answer.error is ErrorCode.none, answer
        c.joined = True
        c.epoch = answer.member_epoch
        if answer.assignment is not None:
            c.owned = {p for t in answer.assignment for p in t.partitions}

    def leave(self, c: Client) -> None:
        """close(): a static member leaves for a while (-2), then its process ends."""
        if not (c.alive and c.joined):
            return
        epoch = -2 if c.instance_id is not None else -1
        req = mn.ConsumerHeartbeatRequest("g", c.member_id, epoch, instance_id=c.instance_id)
        answer = self.ctx.reply(self.ctx.send(req, version=1)).error
        # Already fenced (its session ended) is the only way a leave is refused.
        assert answer in (ErrorCode.none, ErrorCode.unknown_member_id), answer
        c.alive, c.owned, c.joined, c.member_id = False, set(), False, ""

    def crash(self, c: Client) -> None:
        c.alive, c.owned, c.joined, c.member_id = False, set(), False, ""

    def step(self) -> None:
        c = self.rng.choice(self.clients)
        roll = self.rng.random()
        if roll < 0.6:
            self.heartbeat(c, lose_answer=self.rng.random() < 0.05)
        elif roll < 0.7:
            self.ctx.sleep(self.rng.randint(100, 4000))
        elif roll < 0.75:
            self.leave(c)
        elif roll < 0.8:
            self.crash(c)
        elif roll < 0.88:
            c.alive = True  # a new process (a static member under its instance id)
        elif roll < 0.9:
            self.partitions += 1
            req = mc.CreatePartitionsRequest(((TOPIC, self.partitions),))
            assert self.ctx.reply(self.ctx.send(req, version=3)).results[0].error is ErrorCode.none
        elif roll < 0.92:
            self.ctx.restart()
        else:
            self.ctx.sleep(SESSION_MS)  # the silent are fenced
        self.check()

    def check(self) -> None:
        group = self.group()
        if group is None:
            return
        members = group.members  # type: ignore[attr-defined]
        epoch = group.assignment_epoch  # type: ignore[attr-defined]
        behind = {m for m, member in members.items() if not member.current.reconciled_to(epoch)}
        assert group.unreconciled == behind  # type: ignore[attr-defined]
        used: dict[int, str] = {}
        for c in self.clients:
            member = members.get(c.member_id)
            if member is None or not c.alive:
                continue  # fenced: its client learns it at its next heartbeat
            for p in c.owned:
                other = used.setdefault(p, c.name)
                assert other == c.name, f"partition {p} used by {other} and {c.name}"
                held = group.holders.get((TOPIC, p))  # type: ignore[attr-defined]
                assert held is not None and held[0] == c.member_id, (p, held, c)

    def settle(self) -> None:
        for c in self.clients:
            c.alive = True
        self.ctx.sleep(SESSION_MS)  # crashed processes' members are fenced
        for _ in range(6 * len(self.clients) + 6):
            for c in self.clients:
                self.heartbeat(c)
                self.check()
        group = self.group()
        assert group is not None
        assert group.state is ConsumerGroupState.STABLE  # type: ignore[attr-defined]
        held: list[int] = []
        for c in self.clients:
            member = group.members[c.member_id]  # type: ignore[attr-defined]
            assert c.owned == set(member.target.get(TOPIC, ())), (c, member.target)
            held += sorted(c.owned)
        assert sorted(held) == list(range(self.partitions))


@pytest.mark.parametrize("seed", range(150))
def test_random_schedules_never_give_a_partition_to_two_members(seed: int) -> None:
    sim = Sim(seed)
    for _ in range(120):
        sim.step()
    sim.settle()
