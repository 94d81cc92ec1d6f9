"""The current Java client (kafka-clients, classic protocol) as a group member.

The Java consumer sends the newest versions (JoinGroup v9, OffsetCommit/OffsetFetch v9,
Fetch v18, Metadata v13), supports every assignor including cooperative-sticky, and is
the reference every other client imitates. It comes from Maven Central through
tools/kafka/fetch.sh (cached in ~/.cache/kgroups).
"""

from __future__ import annotations

import asyncio

from kgroups import admin
from tests.integration.harness import (
    STATIC_SESSION_MS,
    Coordinator,
    Member,
    commit_is_read_back,
    converged,
    no_overlap_per_generation,
    wait_until,
)


def topic(coordinator: Coordinator, name: str, partitions: int) -> set[tuple[str, int]]:
    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, name, partitions))
    return {(name, p) for p in range(partitions)}


def test_java_and_python_clients_share_a_group(
    coordinator: Coordinator, members: list[Member]
) -> None:
    partitions = topic(coordinator, "orders", 9)

    def start(client: str, name: str, **kw: str | int) -> Member:
        m = Member(client, coordinator.bootstrap, "mixed", ["orders"], client_id=name, **kw)  # type: ignore[arg-type]
        members.append(m)
        return m

    java = start("java", "java-1")
    static_java = start("java", "java-static", instance_id="js-1",
                        session_timeout_ms=STATIC_SESSION_MS)  # fmt: skip
    kp = start("kafka-python", "kp")
    aio = start("aiokafka", "aio")
    live = [java, static_java, kp, aio]
    generation = wait_until(lambda: converged(live, partitions), 60, "a mixed group to converge")

    # A Java commit is read back by a Python client: the offsets really are shared.
    commit_is_read_back(java, coordinator.bootstrap, "mixed", 11)

    # A Java member killed without LeaveGroup is expired; the rest take over.
    java.kill()
    live.remove(java)
    after_kill = wait_until(lambda: converged(live, partitions), 30, "a rebalance after kill -9")
    assert after_kill > generation

    # A static Java member restarted within its session keeps generation and partitions.
    before = static_java.assignment
    assert before is not None
    static_java.kill()
    live.remove(static_java)
    again = start("java", "java-static", instance_id="js-1", session_timeout_ms=STATIC_SESSION_MS)
    live.append(again)
    back = again.wait_event("assigned", timeout=40)
    assert (back["generation"], back["partitions"]) == (before["generation"], before["partitions"])
    assert converged(live, partitions) == after_kill
    no_overlap_per_generation([java, static_java, kp, aio, again])


COOP_SESSION_MS = 10_000
"""Long enough that a loaded machine does not fence a member mid-test: a fenced member
gives up its whole assignment, which is what this test says cooperative members never do
in an ordinary rebalance."""


def test_cooperative_sticky_java_members_rebalance_incrementally(
    coordinator: Coordinator, members: list[Member]
) -> None:
    """KIP-429: the coordinator runs plain join phases; the Java client does the two-step
    revocation. A newcomer gets partitions without the others revoking everything."""
    partitions = topic(coordinator, "events", 8)
    first = [
        Member(
            "java",
            coordinator.bootstrap,
            "coop",
            ["events"],
            client_id=f"c{i}",
            strategy="cooperative-sticky",
            session_timeout_ms=COOP_SESSION_MS,
        )
        for i in range(2)
    ]
    members.extend(first)
    wait_until(lambda: converged(first, partitions), 60, "two cooperative members")
    kept = {m.name: set(map(tuple, m.assignment["partitions"])) for m in first}  # type: ignore[index]
    # What each had revoked before the newcomer is not this rebalance's: on a loaded
    # machine one member may form the group alone and hand half to the other.
    seen = {m.name: len(m.events) for m in first}
    newcomer = Member("java", coordinator.bootstrap, "coop", ["events"], client_id="c2",
                      strategy="cooperative-sticky", session_timeout_ms=COOP_SESSION_MS)  # fmt: skip
    members.append(newcomer)
    everyone = [*first, newcomer]
    wait_until(lambda: converged(everyone, partitions), 60, "three cooperative members")
    for m in first:
        # Sticky: each old member still owns most of what it had...
        now = set(map(tuple, m.assignment["partitions"]))  # type: ignore[index]
        assert len(now & kept[m.name]) >= len(now) - 1
        # ...and revoked only what moved, never its whole assignment (not eager).
        revoked = [e["partitions"] for e in m.events[seen[m.name] :] if e["event"] == "revoked"]
        assert all(len(r) < len(kept[m.name]) for r in revoked)
    assert len(newcomer.assignment["partitions"]) >= 2  # type: ignore[index]
