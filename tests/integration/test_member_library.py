"""kgroups' own GroupMember in groups with kafka-python, aiokafka and Java members.

Every member is its own process reporting what its client believes (tests/integration/
member.py, tools/kafka/JavaMember.java). The assertions: all members converge on one
generation whose assignment covers the topic exactly once, no partition is ever held by
two members in one generation, and a member whose generation went stale cannot commit.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kgroups.admin import create_partitions
from tests.integration.harness import (
    STATIC_SESSION_MS,
    Coordinator,
    Member,
    create_topic,
    no_overlap_per_generation,
    wait_converged,
    wait_until,
)

SESSION_MS = 4000


def starter(coordinator: Coordinator, members: list[Member], strategy: str, topics: list[str]):  # type: ignore[no-untyped-def]
    def start(client: str, name: str, instance_id: str | None = None) -> Member:
        m = Member(
            client, coordinator.bootstrap, "g", topics, client_id=name,
            strategy=strategy, instance_id=instance_id,
            session_timeout_ms=STATIC_SESSION_MS if instance_id else SESSION_MS,
        )  # fmt: skip
        members.append(m)
        return m

    return start


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_kgroups_members_share_a_group_with_kafka_python_and_aiokafka(
    coordinator: Coordinator, members: list[Member], strategy: str
) -> None:
    partitions = create_topic(coordinator, "orders", 12)
    start = starter(coordinator, members, strategy, ["orders"])
    kg1, kg2 = start("kgroups", "kg1"), start("kgroups", "kg2")
    kp, aio = start("kafka-python", "kp"), start("aiokafka", "aio")
    live = [kg1, kg2, kp, aio]
    wait_converged(live, partitions, 40)

    # A kgroups member leaves cleanly, another is killed: the rest take over.
    kg1.close()
    assert kg1.events[-1]["event"] == "closed"
    live.remove(kg1)
    wait_converged(live, partitions, 40)
    kg2.kill()
    live.remove(kg2)
    wait_converged(live, partitions, 40)

    # A kgroups member joins again and gets its share.
    kg3 = start("kgroups", "kg3")
    live.append(kg3)
    wait_converged(live, partitions, 40)
    assert kg3.assignment is not None and len(kg3.assignment["partitions"]) == 4
    no_overlap_per_generation(members)


@pytest.mark.parametrize("peer", ["java", "kafka-python"])
def test_cooperative_sticky_with_peers_moves_only_what_it_must(
    coordinator: Coordinator, members: list[Member], peer: str
) -> None:
    """KIP-429 across implementations: a kgroups leader, incremental revocation, and no
    partition held by two members in one generation."""
    partitions = create_topic(coordinator, "events", 8)
    start = starter(coordinator, members, "cooperative-sticky", ["events"])
    kg1 = start("kgroups", "kg1")
    wait_converged([kg1], partitions, 60)
    java1 = start(peer, "peer1")
    wait_converged([kg1, java1], partitions, 60)
    before = {tuple(p) for p in (kg1.assignment or {})["partitions"]}
    marks = {m.name: len(m.events) for m in (kg1, java1)}

    kg2 = start("kgroups", "kg2")
    live = [kg1, java1, kg2]
    wait_converged(live, partitions, 60)
    after = {tuple(p) for p in (kg1.assignment or {})["partitions"]}
    # Sticky: kg1 only gave partitions away, it did not swap any.
    assert after <= before and len(after) in (2, 3)
    # Cooperative: each of the two gave up only its surplus (4 -> 3 or 2), nothing more.
    revoked = [
        e for m in (kg1, java1) for e in m.events[marks[m.name] :] if e["event"] == "revoked"
    ]
    assert revoked and all(len(e["partitions"]) <= 2 for e in revoked), revoked
    no_overlap_per_generation(members)


def test_a_member_with_a_stale_generation_cannot_commit(
    coordinator: Coordinator, members: list[Member]
) -> None:
    """The member is frozen (SIGSTOP) past its session timeout, the group moves on; when it
    wakes up, its commit with the old generation is rejected with a clear error, and it
    rejoins and can commit again in its new generation."""
    import os
    import signal

    partitions = create_topic(coordinator, "ledger", 4)
    start = starter(coordinator, members, "range", ["ledger"])
    stale, other = start("kgroups", "stale"), start("kafka-python", "other")
    wait_converged([stale, other], partitions, 40)
    old = (stale.assignment or {})["generation"]

    os.kill(stale.proc.pid, signal.SIGSTOP)
    try:
        wait_until(
            lambda: (
                (other.assignment or {}).get("generation", 0) > old
                and len((other.assignment or {})["partitions"]) == 4
            ),
            30,
            "the other member to take every partition",
        )
        mark = len(stale.events)
        stale.send("commit 7")
    finally:
        os.kill(stale.proc.pid, signal.SIGCONT)

    def commit_outcome(mark: int) -> dict[str, Any]:
        event: dict[str, Any] = wait_until(
            lambda: next(
                (e for e in stale.events[mark:] if e["event"] in ("committed", "commit_failed")),
                None,
            ),
            20,
            "the stale member's commit outcome",
        )
        return event

    first = commit_outcome(mark)
    # The commit may race the member noticing by itself (heartbeat): either way it must
    # not succeed with the old generation.
    assert first["event"] == "commit_failed", stale.events
    assert (
        first["code"]
        in (
            "illegal_generation",
            "unknown_member_id",
            "rebalance_in_progress",
        )
        or "holds no generation" in first["error"]
    ), first
    # Back in the group, the member commits in its new generation. A commit that meets a
    # further rebalance (kafka-python rejoins on its own schedule) is told to retry, as a
    # real application would; the stale-generation errors must not come back.
    outcomes = []
    for _ in range(3):
        generation = wait_converged([stale, other], partitions, 40)
        mark = len(stale.events)
        stale.send("commit 9")
        outcome = commit_outcome(mark)
        outcomes.append((generation, outcome))
        if outcome["event"] == "committed":
            break
        assert outcome["code"] == "rebalance_in_progress", outcomes
    assert outcomes[-1][1]["event"] == "committed" and outcomes[-1][1]["offset"] == 9, outcomes


@pytest.mark.parametrize("metadata_max_age_ms", [500, None], ids=["checked", "default-5min"])
def test_the_leader_rebalances_when_a_topic_grows(
    coordinator: Coordinator, members: list[Member], metadata_max_age_ms: int | None
) -> None:
    """Java's metadata snapshot check: new partitions get owners without anyone rejoining
    (with the 5-minute default the growth is not noticed within the test: the control)."""
    create_topic(coordinator, "grow", 2)
    live = [
        Member("kgroups", coordinator.bootstrap, "g", ["grow"], client_id=f"kg{i}",
               session_timeout_ms=SESSION_MS, metadata_max_age_ms=metadata_max_age_ms)
        for i in range(2)
    ]  # fmt: skip
    members.extend(live)
    generation = wait_converged(live, {("grow", 0), ("grow", 1)}, 30)
    grown = {("grow", p) for p in range(5)}
    asyncio.run(create_partitions("127.0.0.1", coordinator.port, "grow", 5))
    if metadata_max_age_ms is None:
        with pytest.raises(AssertionError):
            wait_converged(live, grown, 4)
        return
    assert wait_converged(live, grown, 15) > generation
