"""Groups moving between the classic and the consumer protocol under random schedules.

Each seed drives the real sans-IO core (`CoreContext`, fake time) with two kinds of
simulated clients in one group: consumer-protocol clients (as in
test_consumer_protocol_sim.py) and classic eager clients, which follow Kafka's classic
rules (give everything up before rejoining, the elected leader splits the partitions,
parked JoinGroup and SyncGroup answered later). The group goes back and forth: it starts
classic or consumer, is upgraded when a consumer-protocol client joins a live classic
group, holds classic members inside the consumer group, and is downgraded when the last
consumer-protocol member leaves; clients join, heartbeat, leave, crash, come back, answers
are lost, the topic grows, the coordinator restarts; each seed picks its migration policy.

After every step: no partition is used by two clients whose members the coordinator
still has, and inside a consumer group the coordinator's holders agree with what each
client uses. After the schedule everyone does what it is told until quiet: every
partition is used by exactly one client.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from kgroups.coordinator.core import CoordinatorConfig
from kgroups.coordinator.core import msg_cluster as mc
from kgroups.coordinator.core import msg_consumer as mn
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core.config import MigrationPolicy
from kgroups.protocol.consumer import (
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from kgroups.protocol.errors import ErrorCode
from tests.core_context import CoreContext

SESSION_MS = 10_000
TOPIC = "t"
REJOIN = (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation)
FORGET = (ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch)


@dataclass
class Client:
    name: str
    classic: bool
    member_id: str = ""
    epoch: int = 0
    """The member epoch (consumer protocol) or the generation (classic)."""
    owned: set[int] = field(default_factory=set)
    joined: bool = False
    alive: bool = True
    processes: int = 0
    join_ref: int | None = None
    sync_ref: int | None = None
    instance: str | None = None
    """A static member's instance id: its processes take each other's place, and may roll
    from one protocol to the other (`roll`)."""


class Sim:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.policy = self.rng.choice(list(MigrationPolicy))
        self.ctx = CoreContext(CoordinatorConfig(group_consumer_session_timeout_ms=SESSION_MS,
                                                 group_consumer_heartbeat_interval_ms=1000,
                                                 group_initial_rebalance_delay_ms=0,
                                                 group_consumer_migration_policy=self.policy))  # fmt: skip
        self.partitions = self.rng.randint(1, 8)
        self.ctx.create_topic(TOPIC, self.partitions)
        n = self.rng.randint(2, 5)
        self.clients = [Client(f"c{i}", classic=self.rng.random() < 0.5) for i in range(n)]
        self.clients[0].classic, self.clients[1].classic = True, False  # both kinds
        for c in self.clients:
            if self.rng.random() < 0.6:
                c.instance = f"i-{c.name}"

    @property
    def topic_id(self) -> object:
        return self.ctx.core.topics[TOPIC].topic_id

    def members(self) -> dict[str, object]:
        core = self.ctx.core
        group = core.consumer_groups.get("g") or core.groups.get("g")
        return {} if group is None else group.members  # type: ignore[no-any-return]

    # -- consumer-protocol clients -------------------------------------------------------

    def heartbeat(self, c: Client, *, lose_answer: bool = False) -> None:
        if not c.joined:
            c.epoch, c.owned = 0, set()
        req = mn.ConsumerHeartbeatRequest(
            group_id="g", member_id=c.member_id, member_epoch=c.epoch,
            rebalance_timeout_ms=60_000 if not c.joined else -1,
            subscribed_topic_names=(TOPIC,) if not c.joined else None,
            owned=((self.topic_id, tuple(sorted(c.owned))),),
            instance_id=c.instance if not c.joined else None,
        )  # fmt: skip
        answer = self.ctx.reply(self.ctx.send(req, version=1))
        if lose_answer:
            return
        if answer.error is ErrorCode.unreleased_instance_id:
            # Its previous process neither left nor ran out of session yet: Java would
            # fail; here the new process tries again later.
            assert c.instance is not None and not c.joined, answer
            return
        if answer.error in FORGET or answer.error is ErrorCode.group_id_not_found:
            # (GROUP_ID_NOT_FOUND: an upgrade refused, e.g. a classic round in flight
            # had not assigned yet: Java would fail; here it simply tries again later.)
            c.owned, c.epoch, c.joined = set(), 0, False
            return
        assert answer.error is ErrorCode.none, answer
        c.joined, c.epoch = True, answer.member_epoch
        if answer.assignment is not None:
            c.owned = {p for t in answer.assignment for p in t.partitions}

    # -- classic eager clients ------------------------------------------------------------

    def _protocols(self) -> tuple[mg.Protocol, ...]:
        return (mg.Protocol("range", encode_subscription(Subscription((TOPIC,), version=0))),)

    def join(self, c: Client) -> None:
        c.owned, c.joined = set(), False  # eager: everything given up first
        req = mg.JoinGroupRequest("g", SESSION_MS, 60_000, c.member_id, c.instance, "consumer",
                                  self._protocols())  # fmt: skip
        c.join_ref, c.sync_ref = self.ctx.send(req, version=9), None

    def classic_step(self, c: Client) -> None:
        """Whatever the classic client does next: collect an answer, or heartbeat."""
        if c.join_ref is not None:
            if self.ctx.parked(c.join_ref):
                return
            answer = self.ctx.reply(c.join_ref)
            c.join_ref = None
            if answer.error is ErrorCode.member_id_required:
                c.member_id = answer.member_id
                self.join(c)
                return
            if answer.error in FORGET:
                c.member_id = ""
                self.join(c)
                return
            if answer.error is ErrorCode.inconsistent_group_protocol:
                # A consumer group that takes no classic member (`disabled`): Java would
                # fail; here it tries again later.
                assert self.policy is MigrationPolicy.DISABLED, answer
                return
            if answer.error is not ErrorCode.none:
                assert answer.error in REJOIN, answer
                self.join(c)
                return
            c.member_id, c.epoch = answer.member_id, answer.generation_id
            assignments = ()
            if answer.leader == c.member_id and answer.members:
                ids = sorted(m.member_id for m in answer.members)
                shares = {m: [p for p in range(self.partitions) if p % len(ids) == i]
                          for i, m in enumerate(ids)}  # fmt: skip
                assignments = tuple(
                    (m, encode_assignment(Assignment({TOPIC: tuple(ps)})))
                    for m, ps in shares.items()
                )
            req = mg.SyncGroupRequest("g", c.epoch, c.member_id, c.instance, "consumer",
                                      "range", assignments)  # fmt: skip
            c.sync_ref = self.ctx.send(req, version=5)
            return
        if c.sync_ref is not None:
            if self.ctx.parked(c.sync_ref):
                return
            answer = self.ctx.reply(c.sync_ref)
            c.sync_ref = None
            if answer.error in FORGET:
                c.member_id = ""
                self.join(c)
                return
            if answer.error is not ErrorCode.none:
                assert answer.error in REJOIN, answer
                self.join(c)
                return
            got = decode_assignment(answer.assignment).partitions.get(TOPIC, ())
            c.owned, c.joined = set(got), True
            return
        if not c.joined:
            self.join(c)
            return
        code = self.ctx.heartbeat("g", c.member_id, c.epoch, instance_id=c.instance)
        if code in FORGET:
            c.member_id = ""
            self.join(c)
        elif code in REJOIN:
            self.join(c)
        else:
            assert code is ErrorCode.none, code

    # -- both ------------------------------------------------------------------------------

    def act(self, c: Client, *, lose_answer: bool = False) -> None:
        if not c.alive:
            return
        if not c.member_id and not c.classic:
            c.processes += 1
            c.member_id = f"{c.name}-{c.processes}"
        if c.classic:
            self.classic_step(c)
        else:
            self.heartbeat(c, lose_answer=lose_answer)

    def leave(self, c: Client) -> None:
        if not (c.alive and c.member_id):
            return
        if c.classic:
            req = mg.LeaveGroupRequest("g", (mg.LeavingMember(c.member_id, c.instance),))
            self.ctx.send(req, version=5)
        else:
            # A static member leaves for a while (-2: its partitions wait for it).
            epoch = -1 if c.instance is None else -2
            self.ctx.send(mn.ConsumerHeartbeatRequest("g", c.member_id, epoch,
                                                      instance_id=c.instance), version=1)  # fmt: skip
        self.crash(c)

    def roll(self, c: Client) -> None:
        """A static application rolled to the other protocol: its process stops (without
        leaving, as static members do) and the next one speaks the other protocol under
        the same instance id, taking the old member's place (and, the last
        consumer-protocol member replaced by a classic one, turning the group classic)."""
        if c.instance is None:
            return
        self.crash(c)
        c.classic, c.alive = not c.classic, True

    def crash(self, c: Client) -> None:
        c.alive, c.owned, c.joined, c.member_id = False, set(), False, ""
        c.join_ref = c.sync_ref = None

    def step(self) -> None:
        c = self.rng.choice(self.clients)
        roll = self.rng.random()
        if roll < 0.62:
            self.act(c, lose_answer=self.rng.random() < 0.05)
        elif roll < 0.72:
            self.ctx.sleep(self.rng.randint(100, 4000))
        elif roll < 0.77:
            self.leave(c)
        elif roll < 0.8:
            self.crash(c)
        elif roll < 0.87:
            c.alive = True  # a new process
        elif roll < 0.89:
            self.partitions += 1
            req = mc.CreatePartitionsRequest(((TOPIC, self.partitions),))
            assert self.ctx.reply(self.ctx.send(req, version=3)).results[0].error is ErrorCode.none
        elif roll < 0.93:
            self.roll(c)
        elif roll < 0.95:
            self.ctx.restart()
            for each in self.clients:  # their connections closed: what they awaited is lost
                if each.join_ref is not None or each.sync_ref is not None:
                    each.join_ref = each.sync_ref = None
                    each.joined = False
        else:
            self.ctx.sleep(SESSION_MS)  # the silent are fenced
        self.check()

    def check(self) -> None:
        members = self.members()
        used: dict[int, str] = {}
        consumer = self.ctx.core.consumer_groups.get("g")
        for c in self.clients:
            if not c.alive or c.member_id not in members:
                continue  # fenced: its client learns it at its next request
            for p in c.owned:
                other = used.setdefault(p, c.name)
                assert other == c.name, f"partition {p} used by {other} and {c.name}"
                if consumer is not None:
                    held = consumer.holders.get((TOPIC, p))
                    assert held is not None and held[0] == c.member_id, (p, held, c)

    def settle(self) -> None:
        """Everyone comes back and does what it is told until quiet; then (half the
        seeds) every consumer-protocol client leaves for good, and the classic members
        left must share every partition again, whether the group turned classic
        (downgrade) or stays a consumer group (`upgrade` only)."""
        for c in self.clients:
            c.alive = True
        self.quiet()
        if self.rng.random() < 0.5 and any(c.classic for c in self.clients):
            leaving = [c for c in self.clients if not c.classic]
            for c in leaving:
                self.leave(c)
            # (A static member's leave keeps its partitions until its session ends.)
            self.quiet(fence_the_silent=any(c.instance is not None for c in leaving))

    def quiet(self, *, fence_the_silent: bool = True) -> None:
        if fence_the_silent:
            self.ctx.sleep(SESSION_MS)  # crashed processes' members are fenced
        for _ in range(8 * len(self.clients) + 10):
            for c in self.clients:
                self.act(c)
                self.check()
            self.ctx.sleep(300)
        members = self.members()
        held = sorted(
            p for c in self.clients if c.alive and c.member_id in members for p in c.owned
        )
        assert held == list(range(self.partitions)), (held, self.clients)


@pytest.mark.parametrize("seed", range(120))
def test_random_migrations_never_give_a_partition_to_two_members(seed: int) -> None:
    sim = Sim(seed)
    for _ in range(150):
        sim.step()
    sim.settle()
