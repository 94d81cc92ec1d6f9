"""A member's Kafka consumer-coordinator metrics, on virtual time.

The members are real `GroupMember`s and the coordinator is the real `CoordinatorServer`
(tests/sim/fake_cluster.py); only time and the network are simulated. With no latency
on the wire, the only time a first rebalance takes is the coordinator's initial
rebalance delay (3 s here), so a duration the member measured on its event loop's clock
can be checked exactly; the metrics' timestamps come from an injected wall clock
(`WALL` + virtual time).

What is checked is what a user reads: one successful rebalance with its duration, a
failed JoinGroup counted as a failed rebalance (and a rebalance spanning failed
attempts), heartbeats counted with their round trips and the last one's time, the
listener's callbacks timed under their own label, assigned partitions and generation
following the assignment, one series per group, and registries that do not mix.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter, generate_latest

from kgroups.client import CommitFailedError, GroupMember, TopicPartition
from kgroups.client.metrics import MemberMetrics
from kgroups.coordinator.core import CoordinatorConfig
from tests.sim.fake_cluster import ADDRESS, FakeCluster, MemoryStore
from tests.sim.fake_loop import FakeTimeLoop

WALL = 1_000_000_000.0
"""The wall clock is this plus virtual time: nothing like the real time.time()."""
DELAY = 3.0
"""The coordinator's initial rebalance delay, in seconds."""
exactly = lambda x: pytest.approx(x, abs=1e-5)  # noqa: E731 (the core counts milliseconds)


class World:
    """One coordinator on virtual time, reached over wires of adjustable latency."""

    def __init__(self) -> None:
        self.loop = FakeTimeLoop()
        self.store = MemoryStore()
        self.store.create_topic("t", 4)
        self.store.create_topic("u", 2)
        self.latency = 0.0
        self.cluster = FakeCluster(self.loop, self.store, latency=lambda: self.latency)

    async def start_coordinator(self) -> None:
        await self.cluster.start(
            CoordinatorConfig(
                group_initial_rebalance_delay_ms=int(DELAY * 1000),
                group_min_session_timeout_ms=1000,
            )
        )

    def member(
        self, name: str, registry: CollectorRegistry | None, *, group: str = "g",
        topic: str = "t", **options: Any,
    ) -> GroupMember:  # fmt: skip
        return GroupMember(
            ADDRESS, group, [topic], session_timeout_ms=6000, heartbeat_interval_ms=1000,
            connect=self.cluster.connector(name), registry=registry,
            wall_clock=lambda: WALL + self.loop.time(), **options,
        )  # fmt: skip

    def play(self, scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
        try:
            self.loop.run_until_complete(scenario())
        finally:
            tasks = asyncio.all_tasks(self.loop)
            for task in tasks:
                task.cancel()
            if tasks:
                self.loop.run_until_complete(asyncio.wait(tasks, timeout=60))
            self.loop.close()


def value(registry: CollectorRegistry, name: str, group: str = "g", **labels: str) -> float:
    found = registry.get_sample_value(name, {"group": group, **labels})
    assert found is not None, f"no sample {name}{{group={group!r}, {labels}}}"
    return found


def test_a_rebalance_is_recorded_once_with_its_duration_on_the_members_clock() -> None:
    world = World()
    registry = CollectorRegistry()

    async def scenario() -> None:
        await world.start_coordinator()
        member = world.member("m", registry)
        started = world.loop.time()
        await member.start(timeout=30)
        assert world.loop.time() - started == exactly(DELAY)
        assert value(registry, "kgroups_member_rebalances_total") == 1
        assert value(registry, "kgroups_member_failed_rebalances_total") == 0
        assert value(registry, "kgroups_member_rebalance_duration_seconds_count") == 1
        assert value(registry, "kgroups_member_rebalance_duration_seconds_sum") == exactly(DELAY)
        assert value(registry, "kgroups_member_rebalance_duration_seconds_bucket", le="2.5") == 0
        assert value(registry, "kgroups_member_rebalance_duration_seconds_bucket", le="5.0") == 1
        assert value(registry, "kgroups_member_last_rebalance_timestamp_seconds") == exactly(
            WALL + started + DELAY
        )
        # The JoinGroup parked through the delay; MEMBER_ID_REQUIRED's answer is not a join.
        assert value(registry, "kgroups_member_join_duration_seconds_count") == 1
        assert value(registry, "kgroups_member_join_duration_seconds_sum") == exactly(DELAY)
        assert value(registry, "kgroups_member_sync_duration_seconds_count") == 1
        assert value(registry, "kgroups_member_generation") == member.generation == 1
        assert value(registry, "kgroups_member_assigned_partitions") == len(member.assignment) == 4

        # Heartbeats: each one's round trip is two wire latencies.
        world.latency = 0.125
        # The first heartbeat finds the coordinator for its own connection (one more
        # round trip); from the second on, each takes the two latencies.
        await asyncio.sleep(2.0)
        before_count = value(registry, "kgroups_member_heartbeat_response_duration_seconds_count")
        before_sum = value(registry, "kgroups_member_heartbeat_response_duration_seconds_sum")
        await asyncio.sleep(6.0)
        beats = value(registry, "kgroups_member_heartbeat_response_duration_seconds_count")
        beats -= before_count
        assert beats >= 4  # one per interval (1 s) plus its round trip
        spent = value(registry, "kgroups_member_heartbeat_response_duration_seconds_sum")
        assert spent - before_sum == exactly(0.25 * beats)
        last = value(registry, "kgroups_member_last_heartbeat_timestamp_seconds")
        assert WALL + world.loop.time() - 1.25 <= last <= WALL + world.loop.time()
        assert value(registry, "kgroups_member_rebalances_total") == 1  # nothing else moved
        await member.close()
        assert value(registry, "kgroups_member_generation") == -1
        assert value(registry, "kgroups_member_assigned_partitions") == 0
        await world.cluster.stop()

    world.play(scenario)


def test_a_joingroup_answered_with_an_error_is_a_failed_rebalance() -> None:
    """A JoinGroup with a member id the coordinator does not know is answered
    UNKNOWN_MEMBER_ID; the member forgets the id and joins again, successfully."""
    world = World()
    registry = CollectorRegistry()

    async def scenario() -> None:
        await world.start_coordinator()
        member = world.member("m", registry)
        member.member_id = "left-over-from-a-previous-life"
        await member.start(timeout=30)
        assert value(registry, "kgroups_member_failed_rebalances_total") == 1
        assert value(registry, "kgroups_member_rebalances_total") == 1
        assert value(registry, "kgroups_member_join_duration_seconds_count") == 1
        assert value(registry, "kgroups_member_generation") == member.generation == 1
        await member.close()
        await world.cluster.stop()

    world.play(scenario)


def test_a_rebalance_spans_its_failed_attempts_like_kafkas_rebalance_latency() -> None:
    """The coordinator is unreachable for the first 1.2 s: attempts at 0, 0.5 and 1 s
    fail (retry backoff 0.5 s), the one at 1.5 s joins and waits out the delay."""
    world = World()
    registry = CollectorRegistry()

    async def scenario() -> None:
        member = world.member("m", registry, retry_backoff_ms=500)
        started = world.loop.time()
        starting = asyncio.create_task(member.start(timeout=30))
        await asyncio.sleep(1.2)
        assert value(registry, "kgroups_member_failed_rebalances_total") == 3
        assert value(registry, "kgroups_member_rebalances_total") == 0
        await world.start_coordinator()
        await starting
        assert world.loop.time() - started == exactly(1.5 + DELAY)
        assert value(registry, "kgroups_member_failed_rebalances_total") == 3
        assert value(registry, "kgroups_member_rebalances_total") == 1
        assert value(registry, "kgroups_member_rebalance_duration_seconds_sum") == exactly(
            1.5 + DELAY
        )
        assert value(registry, "kgroups_member_join_duration_seconds_sum") == exactly(DELAY)
        await member.close()
        await world.cluster.stop()

    world.play(scenario)


class Listener:
    """Each callback takes a known (virtual) time."""

    async def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        await asyncio.sleep(0.5)

    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        await asyncio.sleep(2.0)

    async def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        await asyncio.sleep(0.25)


def test_callbacks_and_the_assignment_through_a_join_a_leave_and_a_loss() -> None:
    """Two members of one group, each reporting to its own registry (as two processes
    would): each registry shows its own member only."""
    world = World()
    reg_a, reg_b = CollectorRegistry(), CollectorRegistry()

    def callback(registry: CollectorRegistry, name: str, what: str) -> float:
        metric = f"kgroups_member_partitions_callback_duration_seconds_{what}"
        return value(registry, metric, callback=name)

    async def scenario() -> None:
        await world.start_coordinator()
        a = world.member("a", reg_a, listener=Listener())
        await a.start(timeout=30)
        await asyncio.sleep(1.0)  # the assigned callback runs once the member is stable
        assert callback(reg_a, "assigned", "count") == 1
        assert callback(reg_a, "assigned", "sum") == exactly(0.5)
        assert callback(reg_a, "revoked", "count") == callback(reg_a, "lost", "count") == 0

        b = world.member("b", reg_b)
        await b.start(timeout=30)
        await a.wait_stable(after_generation=1, timeout=30)
        await asyncio.sleep(1.0)
        assert a.generation == b.generation == 2
        for member, registry in ((a, reg_a), (b, reg_b)):
            assert value(registry, "kgroups_member_generation") == 2
            assert value(registry, "kgroups_member_assigned_partitions") == 2
            assert len(member.assignment) == 2
        # Eager: a revoked all it held (2 s), then took its new share (0.5 s).
        assert callback(reg_a, "revoked", "count") == 1
        assert callback(reg_a, "revoked", "sum") == exactly(2.0)
        assert callback(reg_a, "assigned", "count") == 2
        assert callback(reg_a, "assigned", "sum") == exactly(1.0)
        assert value(reg_a, "kgroups_member_rebalances_total") == 2
        assert value(reg_b, "kgroups_member_rebalances_total") == 1  # registries do not mix
        assert callback(reg_b, "assigned", "count") == 0  # b has no listener

        await b.close()
        await a.wait_stable(after_generation=2, timeout=30)
        await asyncio.sleep(1.0)
        assert value(reg_a, "kgroups_member_generation") == a.generation == 3
        assert value(reg_a, "kgroups_member_assigned_partitions") == 4
        assert value(reg_b, "kgroups_member_generation") == -1
        assert value(reg_b, "kgroups_member_assigned_partitions") == 0
        assert callback(reg_a, "revoked", "count") == 2

        # The coordinator goes away: a session timeout later, a's partitions are lost,
        # and its attempts to rejoin fail.
        await world.cluster.stop()
        failed_before = value(reg_a, "kgroups_member_failed_rebalances_total")
        await asyncio.sleep(8.0)
        assert callback(reg_a, "lost", "count") == 1
        assert callback(reg_a, "lost", "sum") == exactly(0.25)
        assert value(reg_a, "kgroups_member_generation") == a.generation == -1
        assert value(reg_a, "kgroups_member_assigned_partitions") == 0
        assert value(reg_a, "kgroups_member_failed_rebalances_total") > failed_before
        await a.close()

    world.play(scenario)


def test_members_of_two_groups_in_one_registry_are_separate_series() -> None:
    world = World()
    registry = CollectorRegistry()

    async def scenario() -> None:
        await world.start_coordinator()
        a = world.member("a", registry, group="ga", topic="t")
        b = world.member("b", registry, group="gb", topic="u")
        await asyncio.gather(a.start(timeout=30), b.start(timeout=30))
        assert MemberMetrics.of(registry) is MemberMetrics.of(registry)
        for group, partitions in (("ga", 4), ("gb", 2)):
            assert value(registry, "kgroups_member_rebalances_total", group) == 1
            assert value(registry, "kgroups_member_generation", group) == 1
            assert value(registry, "kgroups_member_assigned_partitions", group) == partitions
        await a.close()
        assert value(registry, "kgroups_member_generation", "ga") == -1
        assert value(registry, "kgroups_member_assigned_partitions", "ga") == 0
        assert value(registry, "kgroups_member_generation", "gb") == 1
        assert value(registry, "kgroups_member_assigned_partitions", "gb") == 2
        await b.close()
        await world.cluster.stop()

    world.play(scenario)


def test_commits_are_timed_and_refusals_counted() -> None:
    world = World()
    registry = CollectorRegistry()

    async def scenario() -> None:
        await world.start_coordinator()
        member = world.member("m", registry)
        await member.start(timeout=30)
        world.latency = 0.125
        await member.commit({TopicPartition("t", 0): 5})
        assert value(registry, "kgroups_member_commit_duration_seconds_count") == 1
        assert value(registry, "kgroups_member_commit_duration_seconds_sum") == exactly(0.25)
        assert value(registry, "kgroups_member_commit_failures_total") == 0
        # Work of an older generation: refused by the member itself, nothing sent.
        with pytest.raises(CommitFailedError):
            await member.commit({TopicPartition("t", 0): 6}, generation=member.generation - 1)
        assert value(registry, "kgroups_member_commit_failures_total") == 1
        assert value(registry, "kgroups_member_commit_duration_seconds_count") == 1
        await member.close()
        await world.cluster.stop()

    world.play(scenario)


def test_no_created_series_while_the_applications_own_metrics_keep_theirs() -> None:
    registry = CollectorRegistry()
    theirs = Counter("app_requests", "The application's own counter.", registry=registry)
    theirs.inc()
    member = MemberMetrics.of(registry).member("g", lambda: (5, 3))
    member.rebalance_failed()
    text = generate_latest(registry).decode()
    assert "app_requests_created" in text  # prometheus_client's switch was left alone
    assert "kgroups_member_failed_rebalances_total" in text
    assert [
        line for line in text.splitlines() if line.startswith("kgroups_") and "_created" in line
    ] == []
    assert value(registry, "kgroups_member_generation") == 5
    assert value(registry, "kgroups_member_assigned_partitions") == 3


def test_members_without_a_registry_share_the_default_one() -> None:
    """Many members in one process: no duplicate registration, one family per name."""
    world = World()
    group = "default-registry-test"

    async def scenario() -> None:
        await world.start_coordinator()
        members = [world.member(f"m{i}", None, group=group) for i in range(2)]
        await asyncio.gather(*(m.start(timeout=30) for m in members))
        await asyncio.gather(*(m.wait_stable(after_generation=0, timeout=30) for m in members))
        assert MemberMetrics.of() is MemberMetrics.of(REGISTRY)
        # One process, two members of the group: their partitions add up.
        assert value(REGISTRY, "kgroups_member_assigned_partitions", group) == 4
        assert value(REGISTRY, "kgroups_member_generation", group) == max(
            m.generation for m in members
        )
        for m in members:
            await m.close()
        assert value(REGISTRY, "kgroups_member_assigned_partitions", group) == 0
        await world.cluster.stop()

    world.play(scenario)
