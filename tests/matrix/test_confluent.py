"""confluent-kafka (librdkafka 2.16) consumers as group members, each its own process.

librdkafka is the other classic-protocol implementation most Kafka users run (through
confluent-kafka, node-rdkafka, kcat, the .NET and Go clients): its own assignors, its own
static membership, its own incremental (cooperative) rebalance. Every step below checks
what the clients report: every partition owned by exactly one live member in one generation,
and never twice in any generation. At rest the members must be idle: librdkafka once spun a
core against the coordinator (see tests/integration/test_librdkafka.py).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from kgroups import admin
from tests.integration.harness import (
    STATIC_SESSION_MS,
    Coordinator,
    Member,
    assert_idle,
    converged,
    create_topic,
    no_overlap_per_generation,
    wait_converged,
    wait_until,
)

SESSION_MS = 4000
STRATEGIES = ["range", "roundrobin", "cooperative-sticky"]
EXPIRY_S = SESSION_MS / 1000 + 20
"""How long a group may take to notice a silent member: its session, then a rebalance."""


@dataclass
class Group:
    """Members of one group on one topic: `live` are those expected to hold partitions,
    `everyone` every process ever started (for the per-generation overlap check)."""

    coordinator: Coordinator
    registry: list[Member]
    partitions: set[tuple[str, int]]
    strategy: str
    name: str = "g"
    live: list[Member] = field(default_factory=list)
    everyone: list[Member] = field(default_factory=list)

    def start(self, client: str, name: str, instance_id: str | None = None) -> Member:
        topics = sorted({t for t, _ in self.partitions})
        session_ms = STATIC_SESSION_MS if instance_id else SESSION_MS
        m = Member(
            client, self.coordinator.bootstrap, self.name, topics, client_id=name,
            strategy=self.strategy, instance_id=instance_id, session_timeout_ms=session_ms,
        )  # fmt: skip
        self.registry.append(m)
        self.live.append(m)
        self.everyone.append(m)
        return m

    def converge(self, timeout: float = 40) -> int:
        """Wait for one generation in which the live members own every partition exactly
        once, and check no generation so far had a partition twice."""
        generation = wait_converged(self.live, self.partitions, timeout)
        no_overlap_per_generation(self.everyone)
        return generation

    def owned(self, m: Member) -> set[tuple[str, int]]:
        report = m.assignment
        assert report is not None, f"{m.name} has no assignment"
        return {(t, p) for t, p in report["partitions"]}

    def committed(self) -> dict[tuple[str, int], int]:
        async def read() -> dict[tuple[str, int], int]:
            async with admin.Admin("127.0.0.1", self.coordinator.port) as a:
                return await a.committed_offsets(self.name)

        return asyncio.run(read())


def reports(m: Member, event: str) -> int:
    return sum(1 for e in m.events if e["event"] == event)


@pytest.fixture
def group_of(coordinator: Coordinator, members: list[Member]) -> Callable[[int, str], Group]:
    def make(partitions: int, strategy: str) -> Group:
        return Group(
            coordinator, members, create_topic(coordinator, "orders", partitions), strategy
        )

    return make


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_confluent_group_through_close_kill_static_restart_and_commits(
    group_of: Callable[[int, str], Group], strategy: str
) -> None:
    group: Group = group_of(12, strategy)
    c1 = group.start("confluent", "c1")
    c2 = group.start("confluent", "c2")
    c3 = group.start("confluent", "c3")
    static = group.start("confluent", "static1", instance_id="static-1")
    gen = group.converge()
    assert sorted(len(group.owned(m)) for m in group.live) == [3, 3, 3, 3]

    # A clean close (on SIGTERM, as a pod is stopped): LeaveGroup, and the others split its
    # partitions at once.
    kept = {m.name: group.owned(m) for m in (c1, c2, static)}
    revocations = {m.name: reports(m, "revoked") for m in (c1, c2, static)}
    c3.proc.send_signal(signal.SIGTERM)
    assert c3.proc.wait(timeout=20) == 0
    assert c3.events[-1]["event"] == "closed"
    group.live.remove(c3)
    gen_closed = group.converge(30)
    assert gen_closed > gen
    assert sorted(len(group.owned(m)) for m in group.live) == [4, 4, 4]
    if strategy == "cooperative-sticky":
        # Incremental rebalancing: a member leaving takes nothing away from the others.
        assert {m.name: reports(m, "revoked") for m in group.live} == revocations
        assert all(kept[m.name] <= group.owned(m) for m in group.live)

    # SIGKILL: no LeaveGroup; the coordinator notices when the session times out.
    c2.kill()
    group.live.remove(c2)
    gen_killed = group.converge(EXPIRY_S)
    assert gen_killed > gen_closed
    assert sorted(len(group.owned(m)) for m in group.live) == [6, 6]

    # A static member killed and back within its session keeps its identity (KIP-345):
    # same generation, same partitions, no rebalance for the others.
    before = static.assignment
    assert before is not None
    static.kill()
    group.live.remove(static)
    c1_reports = reports(c1, "assigned")
    static_again = group.start("confluent", "static1", instance_id="static-1")
    back = static_again.wait_event("assigned", timeout=30)
    assert back["generation"] == before["generation"] == gen_killed
    assert back["partitions"] == before["partitions"]
    assert back["member_id"] != before["member_id"]
    assert converged(group.live, group.partitions) == gen_killed
    no_overlap_per_generation(group.everyone)

    # Synchronous and asynchronous commits, read back from the coordinator.
    c1.send("commit 11")
    assert c1.wait_event("committed")["mode"] == "sync"
    static_again.send("commit-async 12")
    done = static_again.wait_event("committed")
    assert done["mode"] == "async" and done["partitions"] == before["partitions"]
    expected = dict.fromkeys(group.owned(c1), 11) | dict.fromkeys(group.owned(static_again), 12)
    assert group.committed() == expected

    assert_idle(group.live)
    assert reports(c1, "assigned") == c1_reports  # nothing moved while they idled
    assert converged(group.live, group.partitions) == gen_killed


def test_a_fenced_static_zombie_cannot_commit(group_of: Callable[[int, str], Group]) -> None:
    """A static member paused while its replacement takes its place is fenced when it wakes
    (FENCED_INSTANCE_ID, fatal in librdkafka), and its commits do not land."""
    group: Group = group_of(6, "range")
    other = group.start("confluent", "other")
    zombie = group.start("confluent", "static1", instance_id="static-1")
    gen = group.converge()
    zombie.proc.send_signal(signal.SIGSTOP)
    group.live.remove(zombie)
    replacement = group.start("confluent", "static1", instance_id="static-1")
    back = replacement.wait_event("assigned", timeout=30)
    assert back["generation"] == gen
    assert converged(group.live, group.partitions) == gen

    # The zombie's first act on waking is a commit with its old member id and generation:
    # the coordinator must refuse it (FENCED_INSTANCE_ID), whatever librdkafka does first.
    seen = len(zombie.events)
    zombie.send("commit 99")
    zombie.proc.send_signal(signal.SIGCONT)
    answer = wait_until(
        lambda: [e for e in zombie.events[seen:] if e["event"] in ("committed", "commit_failed")],
        20,
        "the zombie's commit to be answered",
    )[0]
    # Refused, or librdkafka learnt of its fencing first and dropped its partitions.
    assert answer["event"] == "commit_failed" or answer["partitions"] == [], answer
    fenced = zombie.wait_event("poll_error", after=seen, timeout=SESSION_MS / 1000 + 10)
    assert "fenced" in fenced["error"].lower(), fenced
    other.send("commit 7")
    other.wait_event("committed")
    assert 99 not in group.committed().values()
    assert converged(group.live, group.partitions) == gen
    no_overlap_per_generation(group.everyone)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_member_paused_past_its_session_loses_its_partitions_and_rejoins(
    group_of: Callable[[int, str], Group], strategy: str
) -> None:
    """SIGSTOP longer than the session: the others take its partitions; when it wakes,
    librdkafka reports them lost (not revoked: they are already someone else's) and
    rejoins as a new member."""
    group: Group = group_of(6, strategy)
    group.start("confluent", "c1")
    sleeper = group.start("confluent", "c2")
    gen = group.converge()
    held = group.owned(sleeper)
    sleeper.proc.send_signal(signal.SIGSTOP)
    group.live.remove(sleeper)
    gen_without = group.converge(EXPIRY_S)
    assert gen_without > gen

    seen = len(sleeper.events)
    sleeper.proc.send_signal(signal.SIGCONT)
    group.live.append(sleeper)
    lost = sleeper.wait_event("lost", after=seen, timeout=SESSION_MS / 1000 + 10)
    assert {(t, p) for t, p in lost["partitions"]} == held
    gen_back = group.converge()
    assert gen_back > gen_without
    assert_idle(group.live, seconds=3)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_group_of_confluent_kafka_and_kafka_python_members(
    group_of: Callable[[int, str], Group], strategy: str
) -> None:
    """Both clients implement Kafka's assignors under Kafka's names and encodings (for
    cooperative-sticky: owned partitions in the subscription and the sticky user data), so
    either may lead the group."""
    group: Group = group_of(8, strategy)
    c1 = group.start("confluent", "c1")
    k1 = group.start("kafka-python", "k1")
    c2 = group.start("confluent", "c2")
    k2 = group.start("kafka-python", "k2")
    gen = group.converge()
    assert sorted(len(group.owned(m)) for m in group.live) == [2, 2, 2, 2]

    c2.close()
    group.live.remove(c2)
    gen_closed = group.converge(30)
    assert gen_closed > gen

    k2.kill()
    group.live.remove(k2)
    gen_killed = group.converge(EXPIRY_S)
    assert gen_killed > gen_closed
    assert sorted(len(group.owned(m)) for m in group.live) == [4, 4]

    c1.send("commit 5")
    c1.wait_event("committed")
    k1.send("commit 6")
    k1.wait_event("committed")
    assert group.committed() == dict.fromkeys(group.owned(c1), 5) | dict.fromkeys(
        group.owned(k1), 6
    )
    assert_idle(group.live, seconds=3)
    assert converged(group.live, group.partitions) == gen_killed


def test_librdkafka_has_no_eager_sticky_assignor_and_the_member_says_so(
    coordinator: Coordinator, members: list[Member]
) -> None:
    create_topic(coordinator, "orders", 1)
    m = Member("confluent", coordinator.bootstrap, "g", ["orders"], client_id="c",
               strategy="sticky")  # fmt: skip
    members.append(m)
    failed = m.wait_event("failed")
    assert "cooperative-sticky" in failed["error"]
    assert m.proc.wait(timeout=20) == 2
