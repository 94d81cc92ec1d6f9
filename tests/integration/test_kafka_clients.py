"""Real kafka-python and aiokafka consumers as members of groups on the real coordinator.

Each member is its own process. The assertions are about what the *clients* report: in
every generation, the partitions they were handed cover the topic exactly once.
"""

from __future__ import annotations

import pytest

from tests.integration.harness import (
    STATIC_SESSION_MS,
    Coordinator,
    Member,
    converged,
    create_topic,
    no_overlap_per_generation,
    wait_converged,
)

SESSION_MS = 8000
"""The dynamic members' session: long enough that a loaded machine (make test's four
workers on two slow cores) does not fence a member between two heartbeats, which turns
the static restart's "no rebalance" into one."""


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_mixed_group_survives_close_kill_and_static_restart(
    coordinator: Coordinator, members: list[Member], strategy: str
) -> None:
    partitions = create_topic(coordinator, "orders", 12)

    def start(client: str, name: str, instance_id: str | None = None) -> Member:
        m = Member(
            client, coordinator.bootstrap, "g", ["orders"], client_id=name,
            strategy=strategy, instance_id=instance_id,
            session_timeout_ms=STATIC_SESSION_MS if instance_id else SESSION_MS,
        )  # fmt: skip
        members.append(m)
        return m

    kp1 = start("kafka-python", "kp1")
    kp2 = start("kafka-python", "kp2")
    aio1 = start("aiokafka", "aio1")
    static = start("kafka-python", "static1", instance_id="static-1")
    live = [kp1, kp2, aio1, static]
    gen = wait_converged(live, partitions, 40)

    # A clean close: LeaveGroup, then the others split its partitions.
    kp2.close()
    live.remove(kp2)
    gen_after_close = wait_converged(live, partitions, 30, after=gen)

    # SIGKILL: no LeaveGroup; the session timeout must notice.
    aio1.kill()
    live.remove(aio1)
    gen_after_kill = wait_converged(live, partitions, SESSION_MS / 1000 + 20, after=gen_after_close)

    # A static member killed and restarted within its session timeout keeps its identity:
    # same generation, same partitions, no rebalance for the others (KIP-345).
    before = static.assignment
    assert before is not None
    static.kill()
    live.remove(static)
    kp1_reports = len([e for e in kp1.events if e["event"] == "assigned"])
    static_again = start("kafka-python", "static1", instance_id="static-1")
    live.append(static_again)
    back = static_again.wait_event("assigned", timeout=30)
    assert back["generation"] == before["generation"]
    assert back["partitions"] == before["partitions"]
    assert back["member_id"] != before["member_id"]
    assert converged(live, partitions) == gen_after_kill
    assert len([e for e in kp1.events if e["event"] == "assigned"]) == kp1_reports

    no_overlap_per_generation([kp1, kp2, aio1, static, static_again])
