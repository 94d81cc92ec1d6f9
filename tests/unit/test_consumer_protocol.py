"""Kafka 4's consumer protocol (KIP-848) in the sans-IO core, on fake time.

ConsumerGroupHeartbeat end to end through `GroupCoordinator.handle`: Kafka's worked
example (revoke first, assign only what is free), every validation and epoch error a
client reacts to, static members, the session and rebalance timers, topic changes, the
records replayed after a restart, offsets fenced by member epoch, and the group's
conversions to and from a classic group.
"""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

import pytest

from kgroups.coordinator.core import CoordinatorConfig
from kgroups.coordinator.core import msg_cluster as mc
from kgroups.coordinator.core import msg_consumer as mn
from kgroups.coordinator.core import msg_group as mg
from kgroups.coordinator.core import msg_offsets as mo
from kgroups.coordinator.core.consumer_group import ConsumerGroupState
from kgroups.coordinator.core.consumer_heartbeat import phased
from kgroups.coordinator.core.context import rebalance_key, session_key
from kgroups.coordinator.metrics import CoordinatorMetrics
from kgroups.protocol.errors import ErrorCode
from tests.core_context import WORK_STEP_S, CoreContext
from tests.unit.test_coordinator_metrics import scrape

SESSION_MS = 45_000
INTERVAL_MS = 5_000
Assignment = dict[str, set[int]]


class Consumers(CoreContext):
    """A CoreContext that speaks ConsumerGroupHeartbeat with topic names (ids mapped)."""

    def grow(self, name: str, partitions: int) -> None:
        req = mc.CreatePartitionsRequest(((name, partitions),), False)
        assert self.reply(self.send(req, version=3)).results[0].error is ErrorCode.none

    def topic_id(self, name: str) -> uuid.UUID:
        return self.core.topics[name].topic_id  # type: ignore[no-any-return]

    def hb(
        self,
        member_id: str,
        epoch: int,
        *,
        group: str = "g",
        topics: tuple[str, ...] | None = None,
        owned: Assignment | None = None,
        rebalance_ms: int = -1,
        instance_id: str | None = None,
        assignor: str | None = None,
        regex: str | None = None,
        version: int = 1,
    ) -> mn.ConsumerHeartbeatResponse:
        req = mn.ConsumerHeartbeatRequest(
            group_id=group,
            member_id=member_id,
            member_epoch=epoch,
            instance_id=instance_id,
            rebalance_timeout_ms=rebalance_ms,
            subscribed_topic_names=topics,
            subscribed_topic_regex=regex,
            server_assignor=assignor,
            owned=None
            if owned is None
            else tuple((self.topic_id(t), tuple(sorted(ps))) for t, ps in owned.items()),
        )
        response: mn.ConsumerHeartbeatResponse = self.reply(self.send(req, version=version))
        return response

    def join_consumer(
        self, member_id: str, *topics: str, **kw: Any
    ) -> mn.ConsumerHeartbeatResponse:
        kw.setdefault("rebalance_ms", 300_000)
        return self.hb(member_id, 0, topics=topics or ("t",), owned={}, **kw)


def assigned(response: mn.ConsumerHeartbeatResponse) -> Assignment | None:
    if response.assignment is None:
        return None
    return {t.name: set(t.partitions) for t in response.assignment if t.partitions}


@pytest.fixture
def ctx() -> Consumers:
    c = Consumers(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    c.create_topic("t", 4)
    return c


def holders(ctx: Consumers, group: str = "g") -> dict[tuple[str, int], str]:
    return {tp: m for tp, (m, _) in ctx.core.consumer_groups[group].holders.items()}


# -- Kafka's worked example ---------------------------------------------------------------


def test_heartbeats_that_came_together_are_spread_over_the_interval() -> None:
    """Members answered at once (after a rebalance) are told intervals that bring each
    back at its own slot, then the interval itself: the group's heartbeats stay spread,
    so whoever's heartbeat is due next hears of a change within a fraction of one."""
    interval, members = 500, [f"member-{n}" for n in range(200)]
    told = {m: phased(m, 10_000, interval) for m in members}
    assert all(interval // 2 <= t < 3 * interval // 2 for t in told.values())
    back = sorted((10_000 + t) % interval for t in told.values())
    gaps = [b - a for a, b in itertools.pairwise(back)] + [back[0] + interval - back[-1]]
    # Spread, not bunched (those within a tenth of their slot come back at once: a gap
    # of a tenth follows them).
    assert max(gaps) < interval // 5 and len(set(back)) > len(members) // 2
    # Back at its slot, each is told the interval itself from then on (cached answers).
    assert all(phased(m, 10_000 + told[m], interval) == interval for m in members)
    # One that comes early (within half an interval of its last) is told the interval.
    assert all(phased(m, 10_000, interval, heard_ms=10_000 - 200) == interval for m in members)
    moved = [m for m in members if told[m] != interval]
    assert len(moved) > len(members) // 2  # (the others were within a tenth of their slot)
    # At its slot, give or take the network's jitter.
    assert all(phased(m, 10_000 + told[m] + 7 * interval + 20, interval) == interval
               for m in moved)  # fmt: skip


def test_members_waiting_for_partitions_are_told_to_ask_sooner_the_fewer_they_are(
    ctx: Consumers,
) -> None:
    """2 ms per member waiting for partitions, from a floor of 20 ms up to the interval:
    however many wait, their heartbeats add at most 500 a second."""
    ctx.create_topic("w", 64)
    ctx.join_consumer("A", "w")
    waits = [ctx.join_consumer(f"M{n:02d}", "w").heartbeat_interval_ms for n in range(40)]
    group = ctx.core.consumer_groups["g"]
    assert waits[:10] == [20] * 10  # up to 10 members waiting: the floor
    assert waits[-1] == 2 * len(group.waiting) == 80  # 40 waiting
    slow = ctx.core.config.group_consumer_heartbeat_interval_ms
    assert all(20 <= w < slow for w in waits) and waits == sorted(waits)


def _settle(ctx: Consumers, epochs: dict[str, int], owned: dict[str, Assignment]) -> None:
    """Every member heartbeats, acknowledging what it was told, until the group is Stable."""
    group = ctx.core.consumer_groups["g"]
    for _ in range(10):
        for m in list(epochs):
            r = ctx.hb(m, epochs[m], owned=owned[m])
            epochs[m] = r.member_epoch
            if r.assignment is not None:
                owned[m] = assigned(r) or {}
        if group.state is ConsumerGroupState.STABLE:
            return
    raise AssertionError(f"not Stable: {group.state}")


def test_members_a_joiner_must_take_from_are_told_to_heartbeat_sooner(ctx: Consumers) -> None:
    """After a leave, the members given the leaver's partitions hold more than a share of
    the group one larger: the next member to join takes from them whatever their phase.
    So they (a few of a large group) are told a tenth of the interval, and a joiner waits
    that for its first partition instead of up to a whole interval; the others, and every
    member of a small group, are told the interval as before."""
    ctx.create_topic("w", 200)
    epochs = {f"M{n:03d}": ctx.join_consumer(f"M{n:03d}", "w").member_epoch for n in range(100)}
    owned: dict[str, Assignment] = {m: {} for m in epochs}
    _settle(ctx, epochs, owned)
    group = ctx.core.consumer_groups["g"]
    assert group.first_to_give == frozenset()  # 2 each: a joiner takes from anyone
    epochs.pop("M000"), owned.pop("M000")
    ctx.hb("M000", -1)  # leaves
    _settle(ctx, epochs, owned)
    heavy = {m for m, o in owned.items() if len(o.get("w", ())) == 3}
    assert len(heavy) == 2 and group.first_to_give == heavy
    ctx.sleep(INTERVAL_MS)
    eager = INTERVAL_MS // 10
    for m in sorted(epochs):
        full = ctx.hb(m, epochs[m]).heartbeat_interval_ms
        steady = ctx.coordinator.consumer_heartbeat(mn.ConsumerHeartbeatRequest("g", m, epochs[m]),
                                                    "client", "/127.0.0.1", now_ms=ctx.now_ms)  # fmt: skip
        assert steady is not None
        assert (full == eager, steady.heartbeat_interval_ms == eager) == (m in heavy,) * 2, m
    # A joiner's share comes from those two.
    new = ctx.join_consumer("NEW", "w")
    assert assigned(new) == {}
    shares = {m: len(group.members[m].target.get("w", ())) for m in epochs}
    assert {m for m, n in shares.items() if n < len(owned[m]["w"])} == heavy
    assert len(group.members["NEW"].target["w"]) == 2


def test_in_a_small_group_nobody_is_told_to_heartbeat_sooner(ctx: Consumers) -> None:
    """Three members on four partitions: one holds two, which the next joiner takes one
    of, but a third of the group heartbeating ten times as often would cost more than a
    joiner's wait: every member is told the interval."""
    epochs = {m: ctx.join_consumer(m).member_epoch for m in ("A", "B", "C")}
    owned: dict[str, Assignment] = {m: {} for m in epochs}
    _settle(ctx, epochs, owned)
    assert sorted(len(o["t"]) for o in owned.values()) == [1, 1, 2]
    group = ctx.core.consumer_groups["g"]
    assert group.first_to_give == frozenset()
    ctx.sleep(INTERVAL_MS)
    assert all(ctx.hb(m, epochs[m]).heartbeat_interval_ms >= INTERVAL_MS // 2 for m in epochs)


def test_the_worked_example_revokes_first_and_assigns_only_what_is_free(ctx: Consumers) -> None:
    a = ctx.join_consumer("A")
    assert (a.error, a.member_epoch, assigned(a)) == (ErrorCode.none, 2, {"t": {0, 1, 2, 3}})
    assert a.heartbeat_interval_ms == phased("A", ctx.now_ms, INTERVAL_MS)

    b = ctx.join_consumer("B")
    # B's share is still A's: it is told its epoch and an empty assignment, and to ask
    # again soon (kgroups' own: a freed partition reaches it in a fraction of an interval).
    assert (b.member_epoch, assigned(b)) == (3, {})
    assert b.heartbeat_interval_ms == 20  # the floor: two members wait (2 x 2 ms)
    group = ctx.core.consumer_groups["g"]
    assert group.state is ConsumerGroupState.RECONCILING
    b_share = set(group.members["B"].target["t"])
    a_share = {0, 1, 2, 3} - b_share
    assert len(b_share) == 2

    # A is told to keep its share only, and stays at its epoch while it revokes.
    a = ctx.hb("A", 2, owned={"t": {0, 1, 2, 3}})
    assert (a.member_epoch, assigned(a)) == (2, {"t": a_share})
    ctx.assert_timer(rebalance_key("g", "A"), ctx.now_ms + 300_000)
    # B asks again before A released anything: still nothing (no partition twice).
    b = ctx.hb("B", 3, owned={})
    assert (b.member_epoch, b.assignment) == (3, None)
    assert set(holders(ctx).values()) == {"A"}

    # A released B's share: it moves to epoch 3 and its rebalance timer stops.
    a = ctx.hb("A", 2, owned={"t": a_share})
    assert (a.member_epoch, a.assignment) == (3, None)
    assert ctx.timer(rebalance_key("g", "A")) is None
    b = ctx.hb("B", 3, owned={})
    assert (b.member_epoch, assigned(b)) == (3, {"t": b_share})
    assert b.heartbeat_interval_ms == INTERVAL_MS  # (early: told the interval itself)
    assert group.state is ConsumerGroupState.STABLE
    assert holders(ctx) == {("t", p): ("A" if p in a_share else "B") for p in range(4)}


def test_a_member_that_leaves_frees_its_partitions_for_the_others(ctx: Consumers) -> None:
    ctx.join_consumer("A")
    ctx.join_consumer("B")
    share = set(ctx.core.consumer_groups["g"].members["A"].target["t"])
    ctx.hb("A", 2, owned={"t": {0, 1, 2, 3}})
    ctx.hb("A", 2, owned={"t": share})
    ctx.hb("B", 3, owned={})
    left = ctx.hb("A", -1)
    assert (left.error, left.member_id, left.member_epoch) == (ErrorCode.none, "A", -1)
    assert ctx.timer(session_key("g", "A")) is None
    b = ctx.hb("B", 3, owned={"t": {0, 1, 2, 3} - share})
    assert (b.member_epoch, assigned(b)) == (4, {"t": {0, 1, 2, 3}})


# -- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_kw", "version", "code", "message"),
    [
        ({"member_id": "", "member_epoch": 0}, 1, ErrorCode.invalid_request, "MemberId"),
        ({"member_id": "", "member_epoch": 5}, 0, ErrorCode.invalid_request, "MemberId"),
        ({"group_id": " "}, 1, ErrorCode.invalid_request, "GroupId"),
        ({"instance_id": " "}, 1, ErrorCode.invalid_request, "InstanceId"),
        ({"rack_id": ""}, 1, ErrorCode.invalid_request, "RackId"),
        ({"rebalance_timeout_ms": -1}, 1, ErrorCode.invalid_request, "RebalanceTimeoutMs"),
        ({"owned": None}, 1, ErrorCode.invalid_request, "TopicPartitions"),
        ({"subscribed_topic_names": None}, 1, ErrorCode.invalid_request, "Subscribed"),
        ({"member_epoch": -2}, 1, ErrorCode.invalid_request, "InstanceId"),
        ({"member_epoch": -3}, 1, ErrorCode.invalid_request, "MemberEpoch"),
        ({"server_assignor": "sticky"}, 1, ErrorCode.unsupported_assignor, "uniform"),
    ],
)
def test_invalid_requests_are_refused_before_any_group_exists(
    ctx: Consumers, request_kw: dict[str, Any], version: int, code: ErrorCode, message: str
) -> None:
    fields: dict[str, Any] = {
        "group_id": "g", "member_id": "m", "member_epoch": 0, "rebalance_timeout_ms": 1000,
        "subscribed_topic_names": ("t",), "owned": (),
    }  # fmt: skip
    fields.update(request_kw)
    response = ctx.reply(ctx.send(mn.ConsumerHeartbeatRequest(**fields), version=version))
    assert response.error is code
    assert message in (response.error_message or "")
    assert "g" not in ctx.core.consumer_groups
    assert ctx.core.timers.keys() == ["expire-offsets"]


def test_rejoining_with_owned_partitions_is_invalid(ctx: Consumers) -> None:
    ctx.join_consumer("A")
    response = ctx.hb("A", 0, topics=("t",), owned={"t": {0}}, rebalance_ms=1000)
    assert response.error is ErrorCode.invalid_request


def test_version_0_lets_the_coordinator_name_the_member(ctx: Consumers) -> None:
    response = ctx.hb("", 0, topics=("t",), owned={}, rebalance_ms=1000, version=0)
    assert response.error is ErrorCode.none
    uuid.UUID(response.member_id or "")
    assert response.member_id in ctx.core.consumer_groups["g"].members


def test_an_invalid_regex_is_refused_and_a_valid_one_matches_whole_names(ctx: Consumers) -> None:
    ctx.create_topic("orders-1", 1)
    ctx.create_topic("xorders-1", 1)
    bad = ctx.hb("m", 0, topics=None, regex="orders-(", owned={}, rebalance_ms=1000)
    assert bad.error is ErrorCode.invalid_regular_expression
    assert "g" not in ctx.core.consumer_groups
    good = ctx.hb("m", 0, topics=None, regex="orders-.*", owned={}, rebalance_ms=1000)
    assert assigned(good) == {"orders-1": {0}}


def test_patterns_are_re2_a_backtracking_one_cannot_stall_and_a_bad_one_logs_nothing(
    ctx: Consumers, capfd: pytest.CaptureFixture[str]
) -> None:
    ctx.create_topic("a" * 240 + "b", 1)  # `(a+)+$` would take Python's re 2**240 steps
    started = time.monotonic()
    stalls = ctx.hb("m", 0, topics=None, regex="(a+)+$", owned={}, rebalance_ms=1000)
    assert stalls.error is ErrorCode.none and assigned(stalls) == {}
    assert time.monotonic() - started < 5
    for bad in ("orders-(", "x" * 5000, r"(a)\1"):  # no backreferences in RE2
        refused = ctx.hb("n", 0, topics=None, regex=bad, owned={}, rebalance_ms=1000)
        assert refused.error is ErrorCode.invalid_regular_expression, bad
    assert capfd.readouterr().err == ""
    # RE2 syntax Python's re lacks is understood (Kafka's RE2/J has it too).
    ctx.create_topic("ok7", 1)
    posix = ctx.hb("p", 0, topics=None, regex="ok[[:digit:]]", owned={}, rebalance_ms=1000)
    assert assigned(posix) == {"ok7": {0}}


def test_a_subscription_larger_than_a_group_record_is_refused_and_nothing_stays(
    ctx: Consumers,
) -> None:
    names = tuple(f"topic-{n:07d}" for n in range(80_000))  # about 1.2 MB of names
    refused = ctx.hb("m", 0, topics=names, owned={}, rebalance_ms=1000)
    assert refused.error is ErrorCode.unknown_server_error
    assert "g" not in ctx.core.consumer_groups and not ctx.store.rows.keys() - {("topic", "t")}


# -- epochs ------------------------------------------------------------------------------


def test_epoch_errors_are_kafkas(ctx: Consumers) -> None:
    assert ctx.hb("A", 1).error is ErrorCode.group_id_not_found
    ctx.join_consumer("A")
    assert ctx.hb("B", 2).error is ErrorCode.unknown_member_id
    assert ctx.hb("A", 3, owned={"t": {0, 1, 2, 3}}).error is ErrorCode.fenced_member_epoch
    assert ctx.hb("A", 1, owned={"t": {0}}).error is ErrorCode.fenced_member_epoch
    # A fenced member rejoins with epoch 0 and the same id (KAFKA-19233: no fencing loop).
    again = ctx.hb("A", 0, topics=("t",), owned={}, rebalance_ms=300_000)
    assert (again.error, again.member_epoch) == (ErrorCode.none, 2)


def test_the_previous_epoch_is_accepted_when_the_answer_was_lost(ctx: Consumers) -> None:
    ctx.join_consumer("A")
    ctx.join_consumer("B")
    share = set(ctx.core.consumer_groups["g"].members["A"].target["t"])
    ctx.hb("A", 2, owned={"t": {0, 1, 2, 3}})
    ctx.hb("A", 2, owned={"t": share})  # A is at 3 now; suppose it never heard
    retry = ctx.hb("A", 2, owned={"t": share})
    assert (retry.error, retry.member_epoch) == (ErrorCode.none, 3)
    # ... but not if it claims a partition it does not have.
    claims = ctx.hb("A", 2, owned={"t": {0, 1, 2, 3}})
    assert claims.error is ErrorCode.fenced_member_epoch


# -- timers ------------------------------------------------------------------------------


def test_a_silent_member_is_fenced_after_its_session(ctx: Consumers) -> None:
    ctx.join_consumer("A")
    ctx.join_consumer("B")
    ctx.sleep(SESSION_MS - 1)
    ctx.hb("B", 3, owned={})
    ctx.sleep(1)
    assert "A" not in ctx.core.consumer_groups["g"].members
    b = ctx.hb("B", 3, owned={})
    assert (b.member_epoch, assigned(b)) == (4, {"t": {0, 1, 2, 3}})


def test_a_refused_heartbeat_does_not_extend_the_session(ctx: Consumers) -> None:
    ctx.join_consumer("A")
    deadline = ctx.timer(session_key("g", "A"))
    ctx.sleep(1000)
    assert ctx.hb("A", 7, owned={}).error is ErrorCode.fenced_member_epoch
    assert ctx.timer(session_key("g", "A")) == deadline


def test_a_member_that_does_not_revoke_in_time_is_fenced(ctx: Consumers) -> None:
    ctx.join_consumer("A", rebalance_ms=10_000)
    ctx.join_consumer("B")
    ctx.hb("A", 2, owned={"t": {0, 1, 2, 3}})  # told to revoke, never does
    ctx.sleep(5_000)
    ctx.hb("A", 2, owned={"t": {0, 1, 2, 3}})  # still owning: the timer is not pushed back
    ctx.sleep(5_000)
    assert "A" not in ctx.core.consumer_groups["g"].members
    assert ctx.hb("A", 2, owned={"t": {0, 1}}).error is ErrorCode.unknown_member_id


# -- static members ----------------------------------------------------------------------


def test_a_static_member_comes_back_to_its_partitions_without_a_rebalance(ctx: Consumers) -> None:
    ctx.join_consumer("A", instance_id="a")
    ctx.join_consumer("B", instance_id="b")
    share = set(ctx.core.consumer_groups["g"].members["A"].target["t"])
    ctx.hb("A", 2, owned={"t": {0, 1, 2, 3}}, instance_id="a")
    ctx.hb("A", 2, owned={"t": share}, instance_id="a")
    b_first = assigned(ctx.hb("B", 3, owned={}, instance_id="b"))
    assert b_first is not None
    b_share = b_first["t"]
    assert b_share == {0, 1, 2, 3} - share
    epoch = ctx.core.consumer_groups["g"].group_epoch

    # Another process with the same instance id while A has not left: refused.
    twin = ctx.join_consumer("A2", instance_id="a")
    assert twin.error is ErrorCode.unreleased_instance_id
    assert twin.error_message == (
        "Static member A2 with instance id a cannot join the group because the instance id "
        "is owned by A member."
    )
    gone = ctx.hb("A", -2, instance_id="a")
    assert (gone.error, gone.member_epoch) == (ErrorCode.none, -2)
    # While it is away nobody gets its partitions.
    b = ctx.hb("B", 3, owned={"t": b_share}, instance_id="b")
    assert b.assignment is None and holders(ctx)[("t", min(share))] == "A"

    back = ctx.join_consumer("A2", instance_id="a")
    assert (back.error, assigned(back)) == (ErrorCode.none, {"t": share})
    assert ctx.core.consumer_groups["g"].group_epoch == epoch
    assert "A" not in ctx.core.consumer_groups["g"].members
    # The old member id is fenced by the new one.
    assert ctx.hb("A", 3, instance_id="a").error is ErrorCode.fenced_instance_id


def test_a_static_member_away_longer_than_its_session_is_fenced(ctx: Consumers) -> None:
    ctx.join_consumer("A", instance_id="a")
    ctx.hb("A", -2, instance_id="a")
    ctx.sleep(SESSION_MS)
    assert ctx.core.consumer_groups["g"].members == {}
    assert ctx.core.consumer_groups["g"].state is ConsumerGroupState.EMPTY


# -- topics ------------------------------------------------------------------------------


def test_a_grown_topic_moves_the_group_epoch_and_its_new_partitions_are_assigned(
    ctx: Consumers,
) -> None:
    ctx.join_consumer("A")
    ctx.grow("t", 6)
    a = ctx.hb("A", 2, owned={"t": {0, 1, 2, 3}})
    assert (a.member_epoch, assigned(a)) == (3, {"t": set(range(6))})


def test_a_topic_created_after_the_member_subscribed_is_assigned(ctx: Consumers) -> None:
    a = ctx.join_consumer("A", "t", "later")
    assert assigned(a) == {"t": {0, 1, 2, 3}}
    ctx.create_topic("later", 2)
    a = ctx.hb("A", 2, owned={"t": {0, 1, 2, 3}})
    assert assigned(a) == {"t": {0, 1, 2, 3}, "later": {0, 1}}


def test_group_configs_set_the_session_and_the_heartbeat_interval(ctx: Consumers) -> None:
    ctx.alter_group_config(
        "g", {"consumer.session.timeout.ms": "8000", "consumer.heartbeat.interval.ms": "1000"}
    )
    assert ctx.join_consumer("A").heartbeat_interval_ms == phased("A", ctx.now_ms, 1000)
    ctx.assert_timer(session_key("g", "A"), ctx.now_ms + 8000)
    refused = ctx.alter_group_config("g", {"consumer.heartbeat.interval.ms": "8000"})
    assert refused.error is ErrorCode.invalid_config
    # Changed again: the next heartbeat (the hot path's as the full one's) has the new ones.
    steady = mn.ConsumerHeartbeatRequest("g", "A", 2)
    for interval, session in ((1500, 9000), (1000, 9000)):
        ctx.alter_group_config("g", {"consumer.session.timeout.ms": str(session),
                                     "consumer.heartbeat.interval.ms": str(interval)})  # fmt: skip
        heard = ctx.now_ms
        ctx.sleep(interval)
        answer = ctx.coordinator.consumer_heartbeat(steady, "client", "/127.0.0.1",
                                                    now_ms=ctx.now_ms)  # fmt: skip
        assert answer is not None
        assert answer.heartbeat_interval_ms == phased("A", ctx.now_ms, interval, heard)
        ctx.assert_timer(session_key("g", "A"), ctx.now_ms + session)
        heard = ctx.now_ms
        ctx.sleep(interval)
        full = ctx.hb("A", 2).heartbeat_interval_ms
        assert full == phased("A", ctx.now_ms, interval, heard)


# -- durability --------------------------------------------------------------------------


def test_what_a_member_says_of_itself_alone_survives_a_restart(ctx: Consumers) -> None:
    """A heartbeat that changes only the member's metadata (its rebalance timeout, the
    client it came from) moves nothing, but is persisted all the same."""
    joined = ctx.join_consumer("A")
    assert ctx.hb("A", 2, owned=assigned(joined)).error is ErrorCode.none  # Stable
    assert ctx.core.consumer_groups["g"].state is ConsumerGroupState.STABLE
    assert ctx.hb("A", 2, rebalance_ms=45_000).error is ErrorCode.none
    moved = ctx.send(mn.ConsumerHeartbeatRequest("g", "A", 2), host="/10.0.0.9")
    assert ctx.reply(moved).error is ErrorCode.none
    ctx.restart()
    member = ctx.core.consumer_groups["g"].members["A"]
    assert (member.rebalance_timeout_ms, member.client_host) == (45_000, "/10.0.0.9")


def test_a_restart_mid_reconciliation_resumes_where_it_was(ctx: Consumers) -> None:
    ctx.join_consumer("A")
    ctx.join_consumer("B")
    share = set(ctx.core.consumer_groups["g"].members["A"].target["t"])
    ctx.hb("A", 2, owned={"t": {0, 1, 2, 3}})
    before = ctx.core.consumer_groups["g"].to_value()
    ctx.restart()
    group = ctx.core.consumer_groups["g"]
    assert group.to_value() == before
    assert set(holders(ctx).values()) == {"A"}
    ctx.assert_timer(session_key("g", "B"), ctx.now_ms + SESSION_MS)
    ctx.assert_timer(rebalance_key("g", "A"), ctx.now_ms + 300_000)
    ctx.hb("A", 2, owned={"t": share})
    assert assigned(ctx.hb("B", 3, owned={})) == {"t": {0, 1, 2, 3} - share}


# -- offsets -----------------------------------------------------------------------------


def commit(
    ctx: Consumers, member: str, epoch: int, partitions: set[int], version: int = 9
) -> set[ErrorCode]:
    codes = ctx.commit("g", {("t", p): 5 for p in partitions}, member_id=member,
                       generation=epoch, version=version)  # fmt: skip
    return set(codes.values())


def test_commits_are_fenced_by_member_epoch(ctx: Consumers) -> None:
    ctx.join_consumer("A")
    assert commit(ctx, "A", 2, {0, 1}) == {ErrorCode.none}
    assert commit(ctx, "A", 3, {0}) == {ErrorCode.stale_member_epoch}
    assert commit(ctx, "B", 2, {0}) == {ErrorCode.unknown_member_id}
    assert commit(ctx, "", -1, {0}) == {ErrorCode.unknown_member_id}  # admin, members live
    assert commit(ctx, "A", 2, {0}, version=8) == {ErrorCode.unsupported_version}
    ctx.join_consumer("B")
    share = set(ctx.core.consumer_groups["g"].members["A"].target["t"])
    ctx.hb("A", 2, owned={"t": {0, 1, 2, 3}})
    ctx.hb("A", 2, owned={"t": share})  # A at epoch 3; a commit at 2 was in flight
    # KIP-1251: an older epoch commits partitions the member had since then ...
    assert commit(ctx, "A", 2, share) == {ErrorCode.none}
    # ... not partitions it no longer has, nor ones it got later.
    assert commit(ctx, "A", 2, {0, 1, 2, 3} - share) == {ErrorCode.stale_member_epoch}
    b = ctx.hb("B", 3, owned={})
    assert commit(ctx, "B", 3, set(assigned(b)["t"])) == {ErrorCode.none}  # type: ignore[index]
    assert commit(ctx, "B", 2, set(assigned(b)["t"])) == {ErrorCode.stale_member_epoch}  # type: ignore[index]


def test_fetches_under_the_consumer_protocol_need_the_exact_epoch(ctx: Consumers) -> None:
    ctx.join_consumer("A")
    commit(ctx, "A", 2, {0})

    def fetch(member: str | None, epoch: int) -> mo.FetchedGroup:
        spec = mo.FetchGroup("g", (mo.FetchTopic("t", (0,)),), member, epoch)
        response: mo.OffsetFetchResponse = ctx.reply(
            ctx.send(mo.OffsetFetchRequest((spec,), True), version=9)
        )
        return response.groups[0]

    assert fetch("A", 2).topics[0].partitions[0].offset == 5
    assert fetch(None, -1).topics[0].partitions[0].offset == 5  # an admin's
    assert fetch("A", 1).error is ErrorCode.stale_member_epoch
    assert fetch("Z", 2).error is ErrorCode.unknown_member_id


def test_offsets_of_unsubscribed_topics_expire_and_an_empty_group_with_none_goes() -> None:
    ctx = Consumers(CoordinatorConfig(offsets_retention_minutes=1,
                                      offsets_retention_check_interval_ms=10_000))  # fmt: skip
    ctx.create_topic("t", 4)
    ctx.create_topic("old", 1)
    ctx.join_consumer("A")
    assert set(ctx.commit("g", {("t", 0): 5, ("old", 0): 7}, member_id="A", generation=2,
                          version=9).values()) == {ErrorCode.none}  # fmt: skip
    for _ in range(8):  # 80 s, A heartbeating all along
        ctx.sleep(10_000)
        ctx.hb("A", 2, owned={"t": {0, 1, 2, 3}})
    # `t` is subscribed: kept; `old` is not: expired a minute after its commit.
    assert set(ctx.core.offsets["g"]) == {("t", 0)}
    assert commit(ctx, "A", 2, {0}) == {ErrorCode.none}  # its last commit, at 80 s
    ctx.hb("A", -1)
    ctx.sleep(50_000)
    assert "g" in ctx.core.consumer_groups  # empty, but its offset is not a minute old yet
    ctx.sleep(40_000)
    assert "g" not in ctx.core.consumer_groups and "g" not in ctx.core.offsets
    ctx.restart()
    assert "g" not in ctx.core.consumer_groups


# -- admin APIs and conversions -----------------------------------------------------------


def test_admin_apis_see_consumer_groups(ctx: Consumers) -> None:
    ctx.join_consumer("A")
    listed = ctx.reply(ctx.send(mg.ListGroupsRequest((), ("consumer",)), version=5))
    assert [(g.group_id, g.protocol_type, g.state, g.group_type) for g in listed.groups] == [
        ("g", "consumer", "Stable", "consumer")
    ]
    classic_only = ctx.reply(ctx.send(mg.ListGroupsRequest((), ("classic",)), version=5))
    assert classic_only.groups == ()
    described = ctx.reply(ctx.send(mg.DescribeGroupsRequest(("g",)), version=6)).groups[0]
    assert (described.state, described.error) == ("Dead", ErrorCode.group_id_not_found)
    group = ctx.reply(ctx.send(mn.ConsumerDescribeRequest(("g", "nope")), version=1)).groups
    assert (group[0].state, group[0].group_epoch, group[0].assignment_epoch) == ("Stable", 2, 2)
    assert group[0].assignor_name == "uniform"
    member = group[0].members[0]
    assert (member.member_id, member.member_epoch, member.subscribed_topic_names) == (
        "A", 2, ("t",))  # fmt: skip
    assert [(t.name, t.partitions) for t in member.assignment] == [("t", (0, 1, 2, 3))]
    assert group[1].error is ErrorCode.group_id_not_found
    deleted = ctx.reply(ctx.send(mg.DeleteGroupsRequest(("g",)), version=2))
    assert deleted.results == (("g", ErrorCode.non_empty_group),)
    ctx.hb("A", -1)
    deleted = ctx.reply(ctx.send(mg.DeleteGroupsRequest(("g",)), version=2))
    assert deleted.results == (("g", ErrorCode.none),)
    assert "g" not in ctx.core.consumer_groups


def test_an_empty_classic_group_becomes_a_consumer_group_with_its_offsets(ctx: Consumers) -> None:
    assert set(ctx.commit("g", {("t", 0): 42}).values()) == {ErrorCode.none}  # a simple group
    assert "g" in ctx.core.groups
    a = ctx.join_consumer("A")
    assert a.error is ErrorCode.none
    assert "g" not in ctx.core.groups and "g" in ctx.core.consumer_groups
    assert ctx.committed("g", "t", [0]) == {0: 42}
    ctx.restart()
    assert "g" in ctx.core.consumer_groups and ctx.committed("g", "t", [0]) == {0: 42}


def test_a_live_classic_group_of_another_protocol_type_is_not_taken_over(ctx: Consumers) -> None:
    """(A consumer group's classic group is upgraded: test_consumer_migration.py.)"""
    member_id, ref = ctx.join_new_member("g", protocol_type="connect")
    ctx.sleep(0)
    assert ctx.reply(ref).error is ErrorCode.none
    refused = ctx.join_consumer("A")
    assert refused.error is ErrorCode.group_id_not_found
    assert "protocol type is 'connect'" in (refused.error_message or "")
    assert "g" not in ctx.core.consumer_groups


def test_an_empty_consumer_group_becomes_a_classic_one_but_a_live_one_does_not(
    ctx: Consumers,
) -> None:
    ctx.join_consumer("A")
    other = ctx.reply(ctx.join("g", protocol_type="connect"))
    assert other.error is ErrorCode.inconsistent_group_protocol
    ctx.hb("A", -1)
    member_id, ref = ctx.join_new_member("g")
    ctx.sleep(0)
    assert ctx.reply(ref).error is ErrorCode.none
    assert "g" in ctx.core.groups and "g" not in ctx.core.consumer_groups


# -- metrics -----------------------------------------------------------------------------


def test_a_scrape_shows_consumer_groups_their_epochs_and_reconciliation_times(
    ctx: Consumers,
) -> None:
    ctx.join_consumer("A")
    ctx.sleep(1_000)
    ctx.join_consumer("B")
    ctx.sleep(200)
    share = set(ctx.core.consumer_groups["g"].members["A"].target["t"])
    ctx.hb("A", 2, owned={"t": {0, 1, 2, 3}})
    ctx.sleep(300)
    metrics = CoordinatorMetrics(lambda: ctx.coordinator, lambda: 2, lambda: 1.0e9)
    metrics.observe(o for e in ctx.all_effects for o in e.observations)
    midway = scrape(metrics)
    g = (("group", "g"),)
    assert midway["kgroups_consumer_groups", (("state", "Reconciling"),)] == 1
    assert midway["kgroups_consumer_group_epoch", g] == 3
    assert midway["kgroups_consumer_group_assignment_epoch", g] == 3
    assert midway["kgroups_consumer_group_unreconciled_members", g] == 2
    assert midway["kgroups_group_members", g] == 2
    assert midway["kgroups_group_assigned_partitions", g] == 4  # A still holds them all
    assert (
        midway["kgroups_group_rebalances_total", (("group", "g"), ("reason", "member_joined"))] == 2
    )

    ctx.hb("A", 2, owned={"t": share})  # 0.5 s after the target: A is done
    ctx.sleep(100)
    ctx.hb("B", 3, owned={})  # 0.6 s: B got what A released
    metrics = CoordinatorMetrics(lambda: ctx.coordinator, lambda: 2, lambda: 1.0e9)
    metrics.observe(o for e in ctx.all_effects for o in e.observations)
    done = scrape(metrics)
    assert done["kgroups_consumer_groups", (("state", "Stable"),)] == 1
    assert done["kgroups_consumer_group_unreconciled_members", g] == 0
    assert done["kgroups_consumer_member_reconciliation_seconds_count", g] == 3  # A at 2, then A, B
    # Two targets computed (A's join, B's), each one step of the work clock.
    assert done["kgroups_consumer_assignment_seconds_count", g] == 2
    assert abs(done["kgroups_consumer_assignment_seconds_sum", g] - 2 * WORK_STEP_S) < 1e-9
    assert abs(done["kgroups_consumer_member_reconciliation_seconds_sum", g] - 1.1) < 1e-9
    # epoch 2 at once, then 0.2 + 0.3 + 0.1 s from B's join to B holding its share
    assert done["kgroups_group_rebalance_duration_seconds_count", g] == 2
    assert abs(done["kgroups_group_rebalance_duration_seconds_sum", g] - 0.6) < 1e-9
    assert ("kgroups_group_sync_phase_duration_seconds_count", g) not in done  # no sync phase

    ctx.sleep(SESSION_MS)  # both silent: fenced
    metrics.observe(o for e in ctx.all_effects[-1:] for o in e.observations)
    gone = scrape(metrics)
    assert gone["kgroups_session_expirations_total", g] == 2
    assert gone["kgroups_consumer_groups", (("state", "Empty"),)] == 1


# -- the hot path -------------------------------------------------------------------------


def test_a_heartbeat_that_changes_nothing_gets_the_full_paths_answer_from_the_hot_path(
    ctx: Consumers,
) -> None:
    ctx.join_consumer("A")
    steady = mn.ConsumerHeartbeatRequest("g", "A", 2)

    def fast(req: mn.ConsumerHeartbeatRequest = steady, host: str = "/127.0.0.1") -> object:
        return ctx.coordinator.consumer_heartbeat(req, "client", host, now_ms=ctx.now_ms)

    ctx.sleep(1000)
    answer = fast()
    assert isinstance(answer, mn.SteadyAnswer)
    assert answer.response() == ctx.hb("A", 2)  # the same as the whole handling gives
    ctx.assert_timer(session_key("g", "A"), ctx.now_ms + SESSION_MS)
    # Anything that may change something takes the whole path (None here).
    for req in (
        mn.ConsumerHeartbeatRequest("g", "A", 1),
        mn.ConsumerHeartbeatRequest("g", "B", 2),
        mn.ConsumerHeartbeatRequest("h", "A", 2),
        mn.ConsumerHeartbeatRequest("g", "A", 2, owned=()),
        mn.ConsumerHeartbeatRequest("g", "A", 2, subscribed_topic_names=("t",)),
        mn.ConsumerHeartbeatRequest("g", "A", 2, server_assignor="range"),
        mn.ConsumerHeartbeatRequest("g", "A", 2, instance_id="i"),
        mn.ConsumerHeartbeatRequest("g", "A", -1),
    ):
        assert fast(req) is None, req
    assert fast(host="/10.9.9.9") is None  # reconnected from elsewhere: recorded by the full path
    ctx.grow("t", 5)
    assert fast() is None  # a topic changed: the group's epoch must move
    assert ctx.hb("A", 2).member_epoch == 3
    ctx.join_consumer("B")
    assert fast(mn.ConsumerHeartbeatRequest("g", "A", 3)) is None  # A must revoke
