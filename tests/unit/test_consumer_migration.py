"""A live group moving between the classic and the consumer protocol (KIP-848), on fake
time: the online upgrade when a consumer-protocol member joins a classic group, classic
members working inside the consumer group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
commits), and the downgrade when the last consumer-protocol member leaves, under each
`group.consumer.migration.policy`. After every step no partition has two holders (the
core raises if it would) and what each member was told it may use is disjoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from kgroups.coordinator.core import CoordinatorConfig
from kgroups.coordinator.core import msg_consumer as mn
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core.config import MigrationPolicy
from kgroups.coordinator.core.consumer_group import ConsumerGroupState
from kgroups.coordinator.core.context import rebalance_key, session_key
from kgroups.coordinator.core.states import GroupState
from kgroups.protocol.consumer import (
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from kgroups.protocol.errors import ErrorCode
from tests.unit.test_consumer_protocol import Consumers, assigned

CLASSIC_SESSION_MS = 10_000
REBALANCE_MS = 60_000


@dataclass
class Classic:
    """A classic consumer as Java's ConsumerCoordinator behaves: cooperative members
    report what they own when they join and keep it across rounds; eager ones give
    everything up before joining."""

    ctx: Consumers
    member_id: str = ""
    cooperative: bool = True
    protocol: str = "cooperative-sticky"
    generation: int = -1
    owned: dict[str, set[int]] = field(default_factory=dict)
    user_data: bytes | None = None
    topics: tuple[str, ...] = ("t",)
    rebalance_ms: int = REBALANCE_MS
    instance_id: str | None = None

    def _protocols(self) -> tuple[mg.Protocol, ...]:
        owned = {t: tuple(sorted(ps)) for t, ps in self.owned.items() if ps}
        sub = Subscription(self.topics, self.user_data, owned if self.cooperative else {},
                           self.generation, version=1 if self.cooperative else 0)  # fmt: skip
        return (mg.Protocol(self.protocol, encode_subscription(sub)),)

    def send_join(self, version: int = 9) -> int:
        if not self.cooperative:
            self.owned = {}
        req = mg.JoinGroupRequest("g", CLASSIC_SESSION_MS, self.rebalance_ms, self.member_id,
                                  self.instance_id, "consumer", self._protocols())  # fmt: skip
        return self.ctx.send(req, version=version)

    def join(self) -> mg.JoinGroupResponse:
        """JoinGroup (twice for a new member, KIP-394), answered at once."""
        response: mg.JoinGroupResponse = self.ctx.reply(self.send_join())
        if response.error is ErrorCode.member_id_required:
            self.member_id = response.member_id
            response = self.ctx.reply(self.send_join())
        if response.error is ErrorCode.none:
            self.generation, self.member_id = response.generation_id, response.member_id
        return response

    def sync(self) -> mg.SyncGroupResponse:
        response: mg.SyncGroupResponse = self.ctx.reply(
            self.ctx.sync("g", self.member_id, self.generation, protocol_name=self.protocol)
        )
        if response.error is ErrorCode.none:
            got = decode_assignment(response.assignment).partitions
            self.owned = {t: set(ps) for t, ps in got.items()}
        return response

    def heartbeat(self) -> ErrorCode:
        return self.ctx.heartbeat("g", self.member_id, self.generation)

    def round(self) -> None:
        """Rejoin and sync, as a member told REBALANCE_IN_PROGRESS does."""
        assert self.join().error is ErrorCode.none
        assert self.sync().error is ErrorCode.none


@pytest.fixture
def ctx() -> Consumers:
    c = Consumers(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    c.create_topic("t", 4)
    return c


def classic_group(ctx: Consumers, n: int = 2, **kw: object) -> list[Classic]:
    """`n` classic members Stable, the leader (the first) splitting t's partitions."""
    members = [Classic(ctx, **kw) for _ in range(n)]  # type: ignore[arg-type]
    refs = []
    for m in members:
        first = ctx.reply(m.send_join())
        m.member_id = first.member_id
        refs.append(m.send_join())
    ctx.sleep(0)
    joined = [ctx.reply(r) for r in refs]
    generation = joined[0].generation_id
    shares = {m.member_id: {p for p in range(4) if p % n == i} for i, m in enumerate(members)}
    assignments = {
        m.member_id: encode_assignment(Assignment({"t": tuple(sorted(shares[m.member_id]))}))
        for m in members
    }
    leader = joined[0].leader
    refs = [
        ctx.sync("g", m.member_id, generation,
                 assignments if m.member_id == leader else None, protocol_name=m.protocol)
        for m in members
    ]  # fmt: skip
    for m, r in zip(members, refs, strict=True):
        answer = ctx.reply(r)
        assert answer.error is ErrorCode.none
        m.generation = generation
        m.owned = {t: set(ps) for t, ps in decode_assignment(answer.assignment).partitions.items()}
    return members


def disjoint(*owned: dict[str, set[int]]) -> None:
    seen: list[tuple[str, int]] = [(t, p) for o in owned for t, ps in o.items() for p in ps]
    assert len(seen) == len(set(seen)), owned


def settle(
    ctx: Consumers, c: mn.ConsumerHeartbeatResponse, *classic: Classic
) -> dict[str, set[int]]:
    """Every member does what it is told until the group is Stable; C's assignment."""
    mine = assigned(c) or {}
    for _ in range(5):
        for m in classic:
            if m.heartbeat() is ErrorCode.rebalance_in_progress:
                m.round()
        c = ctx.hb("C", c.member_epoch, owned=mine)
        mine = assigned(c) if c.assignment is not None else mine
        disjoint(mine, *(m.owned for m in classic))
    assert ctx.core.consumer_groups["g"].state is ConsumerGroupState.STABLE
    return mine


def test_a_consumer_member_joining_a_live_classic_group_upgrades_it_and_all_share(
    ctx: Consumers,
) -> None:
    a, b = classic_group(ctx)
    assert ctx.commit("g", {("t", 0): 5}, member_id=a.member_id, generation=a.generation) == {
        ("t", 0): ErrorCode.none
    }
    generation = a.generation

    c = ctx.join_consumer("C")
    assert c.error is ErrorCode.none
    assert "g" not in ctx.core.groups
    group = ctx.core.consumer_groups["g"]
    # The classic generation is where the group epoch starts; C's join moved it once.
    assert (group.group_epoch, c.member_epoch) == (generation + 1, generation + 1)
    assert assigned(c) == {}  # everything is still the classic members'
    assert group.members[a.member_id].classic is not None
    assert group.members[a.member_id].epoch == generation
    # Their sessions are their own (the classic session timeout), not the group's.
    ctx.assert_timer(session_key("g", a.member_id), ctx.now_ms + CLASSIC_SESSION_MS)
    assert ctx.committed("g", "t", [0]) == {0: 5}

    # The classic members hear of the new target through their heartbeat.
    assert a.heartbeat() is ErrorCode.rebalance_in_progress
    assert ctx.timer(rebalance_key("g", a.member_id)) == ctx.now_ms + REBALANCE_MS
    a.round()  # told what it keeps; it must give up the rest and rejoin
    b.round()
    disjoint(a.owned, b.owned)
    mine = settle(ctx, c, a, b)
    everyone = [(t, p) for o in (a.owned, b.owned, mine) for t, ps in o.items() for p in ps]
    assert sorted(everyone) == [("t", p) for p in range(4)]
    assert all(o.get("t") for o in (a.owned, b.owned, mine))
    assert group.state is ConsumerGroupState.STABLE
    assert a.heartbeat() is ErrorCode.none and b.heartbeat() is ErrorCode.none
    # A classic member commits with its generation (its member epoch), nothing older.
    assert ctx.commit("g", {("t", 1): 7}, member_id=a.member_id, generation=a.generation) == {
        ("t", 1): ErrorCode.none
    }
    stale = ctx.commit("g", {("t", 1): 8}, member_id=a.member_id, generation=generation - 1)
    assert stale == {("t", 1): ErrorCode.illegal_generation}


def test_the_last_consumer_member_leaving_turns_the_group_classic_again(ctx: Consumers) -> None:
    a, b = classic_group(ctx)
    c = ctx.join_consumer("C")
    settle(ctx, c, a, b)
    epoch = ctx.core.consumer_groups["g"].group_epoch
    assert a.generation == b.generation == epoch

    left = ctx.hb("C", -1)
    assert left.error is ErrorCode.none
    assert "g" not in ctx.core.consumer_groups
    group = ctx.group("g")
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.generation_id == epoch
    assert set(group.members) == {a.member_id, b.member_id}
    # The classic members at that epoch are told to rejoin, and the classic protocol
    # assigns again: a leader is elected and hands out the partitions.
    for m in (a, b):
        assert m.heartbeat() is ErrorCode.rebalance_in_progress
    ra, rb = a.send_join(), b.send_join()
    ja, jb = ctx.reply(ra), ctx.reply(rb)
    assert ja.generation_id == jb.generation_id == epoch + 1
    leader = ja if ja.leader == a.member_id else jb
    assert leader.members and {m.member_id for m in leader.members} == {a.member_id, b.member_id}
    assert ctx.group("g").state is GroupState.COMPLETING_REBALANCE


@pytest.mark.parametrize("topics", [("t",), ("t", "u")], ids=["same", "resubscribed"])
def test_a_classic_static_member_replacing_the_last_consumer_member_turns_the_group_classic(
    ctx: Consumers, topics: tuple[str, ...]
) -> None:
    """Rolled back: a static application returns to the classic protocol, its new process
    joining under the instance id its consumer-protocol process had (a static member
    sends no leave). Kafka turns the group classic at once (KAFKA-19546): the newcomer
    syncs and holds its predecessor's partitions, and nobody rebalances unless its
    subscription differs."""
    ctx.create_topic("u", 2)
    a, b = classic_group(ctx)
    c = ctx.join_consumer("C", instance_id="i-c")
    mine = settle(ctx, c, a, b)
    epoch = ctx.core.consumer_groups["g"].group_epoch
    back = Classic(ctx, instance_id="i-c", topics=topics)
    joined = back.join()
    assert joined.error is ErrorCode.none, joined
    assert "g" not in ctx.core.consumer_groups
    group = ctx.group("g")
    assert group.generation_id == back.generation == (epoch if topics == ("t",) else epoch + 1)
    assert set(group.members) == {a.member_id, b.member_id, back.member_id}
    assert group.static_members == {"i-c": back.member_id}
    assert session_key("g", "C") not in ctx.core.timers
    if topics == ("t",):
        assert back.sync().error is ErrorCode.none
        assert back.owned == mine
        for _ in range(4):  # and it stays so: nobody is told to rejoin
            ctx.sleep(CLASSIC_SESSION_MS // 3)
            assert [m.heartbeat() for m in (a, b, back)] == [ErrorCode.none] * 3
            assert ctx.group("g").state is GroupState.STABLE
        ctx.restart()
        assert ctx.group("g").state is GroupState.STABLE
        assert back.heartbeat() is ErrorCode.none
    else:
        # It subscribes to more: the classic protocol assigns again, everyone rejoins (as
        # in Kafka the classic generation is the group epoch, which its join moved: the
        # others, a generation behind, hear ILLEGAL_GENERATION, and rejoin).
        assert group.state is GroupState.PREPARING_REBALANCE
        assert a.heartbeat() is ErrorCode.illegal_generation
        assert back.sync().error is ErrorCode.rebalance_in_progress
    everyone = [(t, p) for o in (a.owned, b.owned, back.owned) for t, ps in o.items() for p in ps]
    assert len(everyone) == len(set(everyone))


def test_a_replacement_before_the_group_reached_its_target_rebalances_the_classic_group(
    ctx: Consumers,
) -> None:
    """A left: its partitions are free, and B's new target has one of them, which B would
    take at its next rejoin. C's process is replaced (rolled back to classic) first: in
    the classic group B's assignment is what it holds, so that partition would be
    nobody's; the downgrade therefore rebalances (Kafka's KAFKA-20273: a stale target)."""
    a, b = classic_group(ctx)
    c = ctx.join_consumer("C", instance_id="i-c")
    settle(ctx, c, a, b)
    assert ctx.leave("g", (a.member_id, None)).error is ErrorCode.none
    back = Classic(ctx, instance_id="i-c")
    assert back.join().error is ErrorCode.none
    classic = ctx.group("g")
    assert classic.state is GroupState.PREPARING_REBALANCE
    assert b.heartbeat() in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation)
    # Both rejoin; the leader gives every partition out again, the free ones too.
    refs = {m.member_id: m.send_join() for m in (b, back)}
    joined = [ctx.reply(ref) for ref in refs.values()]
    leader = next(j for j in joined if j.members)
    shares = {m: encode_assignment(Assignment({"t": tuple(p for p in range(4) if p % 2 == i)}))
              for i, m in enumerate(sorted(refs))}  # fmt: skip
    syncs = [ctx.sync("g", m.member_id, leader.generation_id,
                      shares if m.member_id == leader.leader else None, protocol_name=m.protocol)
             for m in (b, back)]  # fmt: skip
    got = [decode_assignment(ctx.reply(r).assignment).partitions["t"] for r in syncs]
    assert sorted(p for ps in got for p in ps) == [0, 1, 2, 3]


def test_a_classic_static_member_replacing_a_consumer_member_among_others_keeps_the_group(
    ctx: Consumers,
) -> None:
    """Only the last consumer-protocol member's replacement turns the group classic; and
    the `upgrade` policy never does."""
    a, b = classic_group(ctx)
    ctx.join_consumer("C", instance_id="i-c")
    d = ctx.join_consumer("D")
    assert Classic(ctx, instance_id="i-c").join().error is ErrorCode.none
    assert "g" in ctx.core.consumer_groups and d.error is ErrorCode.none
    up = Consumers(CoordinatorConfig(group_initial_rebalance_delay_ms=0,
                                     group_consumer_migration_policy=MigrationPolicy.UPGRADE))  # fmt: skip
    up.create_topic("t", 4)
    classic_group(up)
    up.join_consumer("C", instance_id="i-c")
    assert Classic(up, instance_id="i-c").join().error is ErrorCode.none
    assert "g" in up.core.consumer_groups and "g" not in up.core.groups


def test_a_refused_upgrade_changes_nothing(ctx: Consumers) -> None:
    """GROUP_ID_NOT_FOUND, Kafka's answer, for a group whose assignments carry a custom
    assignor's data; the classic group goes on as it was."""
    a, b = classic_group(ctx, user_data=None)
    group = ctx.group("g")
    member = group.members[a.member_id]
    group.set_assignment(member, encode_assignment(Assignment({"t": (0, 2)}, b"custom")))
    refused = ctx.join_consumer("C")
    assert refused.error is ErrorCode.group_id_not_found
    assert "custom assignor" in (refused.error_message or "")
    assert "g" in ctx.core.groups and "g" not in ctx.core.consumer_groups
    assert a.heartbeat() is ErrorCode.none


@pytest.mark.parametrize(
    ("policy", "upgrades", "downgrades", "classic_joins"),
    [
        (MigrationPolicy.BIDIRECTIONAL, True, True, True),
        (MigrationPolicy.UPGRADE, True, False, True),
        (MigrationPolicy.DOWNGRADE, False, True, True),
        (MigrationPolicy.DISABLED, False, False, False),
    ],
)
def test_the_migration_policy_decides_what_may_move(
    policy: MigrationPolicy, upgrades: bool, downgrades: bool, classic_joins: bool
) -> None:
    ctx = Consumers(CoordinatorConfig(group_initial_rebalance_delay_ms=0,
                                      group_consumer_migration_policy=policy))  # fmt: skip
    ctx.create_topic("t", 4)
    classic_group(ctx)
    c = ctx.join_consumer("C")
    assert (c.error is ErrorCode.none) is upgrades
    if not upgrades:
        assert "g" in ctx.core.groups
        # An empty classic group converts whatever the policy.
        ctx.core.groups.pop("g")
        c = ctx.join_consumer("C")
        assert c.error is ErrorCode.none
    newcomer = Classic(ctx)
    joined = newcomer.join()
    assert (joined.error is ErrorCode.none) is classic_joins, joined
    if not classic_joins:
        assert joined.error is ErrorCode.inconsistent_group_protocol
        return
    ctx.hb("C", -1)
    assert ("g" in ctx.core.groups) is downgrades
    assert ("g" in ctx.core.consumer_groups) is not downgrades


def test_a_new_classic_member_joins_a_consumer_group_and_gets_its_share(ctx: Consumers) -> None:
    c = ctx.join_consumer("C")
    assert assigned(c) == {"t": {0, 1, 2, 3}}
    first = ctx.reply(Classic(ctx).send_join())
    assert first.error is ErrorCode.member_id_required and first.member_id
    assert len(ctx.core.consumer_groups["g"].members) == 1  # nothing kept of it
    eager = Classic(ctx, cooperative=False, protocol="range")
    joined = eager.join()
    assert joined.error is ErrorCode.none
    # No leader and no member list: every classic member is a follower.
    assert (joined.leader, joined.members, joined.protocol_name) == ("", (), "range")
    assert eager.sync().error is ErrorCode.none
    assert eager.owned == {}  # its share is still C's
    c = ctx.hb("C", c.member_epoch, owned={"t": {0, 1, 2, 3}})
    kept = assigned(c) or {}
    c = ctx.hb("C", c.member_epoch, owned=kept)
    assert eager.heartbeat() is ErrorCode.rebalance_in_progress  # its partitions are free
    eager.round()
    disjoint(kept, eager.owned)
    assert len(eager.owned["t"]) == 2 and len(kept["t"]) == 2
    assert eager.heartbeat() is ErrorCode.none


def test_classic_members_are_fenced_on_their_own_timeouts(ctx: Consumers) -> None:
    c = ctx.join_consumer("C")

    def wait(ms: int) -> None:
        """Time passes; C heartbeats all along (it stays)."""
        for _ in range(ms // 1_000):
            ctx.sleep(1_000)
            ctx.hb("C", c.member_epoch)

    late = Classic(ctx, rebalance_ms=5_000)
    assert late.join().error is ErrorCode.none
    group = ctx.core.consumer_groups["g"]
    # No SyncGroup within its rebalance timeout (shorter than its session): fenced.
    wait(4_000)
    assert late.member_id in group.members
    wait(1_000)
    assert late.member_id not in group.members
    assert late.sync().error is ErrorCode.unknown_member_id

    quiet = Classic(ctx)
    quiet.round()
    wait(CLASSIC_SESSION_MS - 1_000)
    assert quiet.heartbeat() in (ErrorCode.none, ErrorCode.rebalance_in_progress)
    wait(CLASSIC_SESSION_MS - 1_000)
    assert quiet.member_id in group.members
    wait(1_000)
    assert quiet.member_id not in group.members
    assert quiet.heartbeat() is ErrorCode.unknown_member_id


def test_wrong_generations_and_ids_get_classic_errors(ctx: Consumers) -> None:
    ctx.join_consumer("C")
    m = Classic(ctx)
    m.round()
    assert ctx.heartbeat("g", m.member_id, m.generation + 1) is ErrorCode.illegal_generation
    assert ctx.heartbeat("g", "C", 2) is ErrorCode.unknown_member_id  # not a classic member
    stale = ctx.reply(ctx.sync("g", m.member_id, m.generation - 1, protocol_name=m.protocol))
    assert stale.error is ErrorCode.illegal_generation
    other = ctx.reply(ctx.sync("g", m.member_id, m.generation, protocol_name="roundrobin"))
    assert other.error is ErrorCode.inconsistent_group_protocol
    # A consumer-protocol heartbeat cannot speak for a classic member.
    assert ctx.hb(m.member_id, m.generation).error is ErrorCode.unknown_member_id


def test_a_classic_member_leaving_frees_its_partitions(ctx: Consumers) -> None:
    c = ctx.join_consumer("C")
    m = Classic(ctx)
    m.round()
    c = ctx.hb("C", c.member_epoch, owned={"t": {0, 1, 2, 3}})
    kept = assigned(c) or {}
    ctx.hb("C", c.member_epoch, owned=kept)
    m.round()
    assert m.owned
    left = ctx.leave("g", (m.member_id, None))
    assert left.members == (mg.LeftMember(m.member_id, None),)
    assert m.member_id not in ctx.core.consumer_groups["g"].members
    again = ctx.leave("g", (m.member_id, None))
    assert again.members[0].error is ErrorCode.unknown_member_id
    c = ctx.hb("C", ctx.core.consumer_groups["g"].members["C"].epoch, owned=kept)
    assert assigned(c) == {"t": {0, 1, 2, 3}}


def test_a_mixed_group_comes_back_the_same_after_a_restart(ctx: Consumers) -> None:
    a, b = classic_group(ctx)
    c = ctx.join_consumer("C")
    a.heartbeat()
    a.round()
    before = ctx.core.consumer_groups["g"].to_value()
    ctx.restart()
    group = ctx.core.consumer_groups["g"]
    assert group.to_value() == before
    assert group.members[a.member_id].classic is not None
    ctx.assert_timer(session_key("g", a.member_id), ctx.now_ms + CLASSIC_SESSION_MS)
    assert a.heartbeat() in (ErrorCode.none, ErrorCode.rebalance_in_progress)
    assert ctx.hb("C", c.member_epoch, owned={}).error is ErrorCode.none


def test_a_consumer_protocol_member_takes_a_classic_static_members_place_at_once(
    ctx: Consumers,
) -> None:
    """A static application rolled to the consumer protocol: its new process joins under
    the instance id its classic process had, which never left (static members send no
    LeaveGroup); Kafka lets it in at once, with the old member's partitions."""
    a, b = classic_group(ctx)
    group_record = ctx.group("g")
    member = group_record.members[a.member_id]
    group_record.static_members["i-a"] = a.member_id
    member.group_instance_id = "i-a"
    c = ctx.join_consumer("C", instance_id="i-a")
    assert c.error is ErrorCode.none, c
    group = ctx.core.consumer_groups["g"]
    assert a.member_id not in group.members and group.static_members["i-a"] == "C"
    assert assigned(c) == {t: set(ps) for t, ps in a.owned.items()}
    # A consumer-protocol static member that has not left still blocks its instance id.
    again = ctx.join_consumer("D", instance_id="i-a")
    assert again.error is ErrorCode.unreleased_instance_id
