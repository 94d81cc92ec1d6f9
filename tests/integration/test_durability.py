"""What survives a coordinator restart: offsets, topics, generations, Stable groups.

Restarts are both clean (SIGTERM) and brutal (SIGKILL while members are live): a
committed offset is acknowledged only once it is durable, so neither may lose one.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from kafka import KafkaConsumer, TopicPartition

from kgroups import admin
from tests.integration.harness import Coordinator, Member, converged, wait_until

SESSION_MS = 10_000


def committed_offsets(bootstrap: str, group: str, topic: str, n: int) -> dict[int, int | None]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {p: consumer.committed(TopicPartition(topic, p)) for p in range(n)}
    finally:
        consumer.close()


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "sigkill"])
def test_committed_offsets_survive_restart(
    coordinator: Coordinator, members: list[Member], hard: bool
) -> None:
    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, "events", 4))
    partitions = {("events", p) for p in range(4)}
    group = [
        Member("kafka-python", coordinator.bootstrap, "g", ["events"], client_id="kp"),
        Member("aiokafka", coordinator.bootstrap, "g", ["events"], client_id="aio"),
    ]
    members.extend(group)
    wait_until(lambda: converged(group, partitions), 40, "the group to converge")
    for offset, m in zip((41, 42), group, strict=True):
        m.send(f"commit {offset}")
        m.wait_event("committed")
    expected = {}
    for offset, m in zip((41, 42), group, strict=True):
        assert m.assignment is not None
        for _, p in m.assignment["partitions"]:
            expected[p] = offset

    coordinator.restart(hard=hard)

    assert committed_offsets(coordinator.bootstrap, "g", "events", 4) == expected
    topics = asyncio.run(admin.list_topics("127.0.0.1", coordinator.port))
    assert ("events", 4) in topics


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "sigkill"])
def test_stable_group_keeps_its_generation_across_restart(
    coordinator: Coordinator, members: list[Member], hard: bool
) -> None:
    """Members keep heartbeating on the same generation: no rebalance, no lost partition."""
    asyncio.run(admin.create_topic("127.0.0.1", coordinator.port, "t", 6))
    partitions = {("t", p) for p in range(6)}
    # A realistic session timeout: kafka-python backs off reconnecting while the coordinator
    # is down, and a 4 s session can lapse during that backoff (as with a Kafka broker).
    group = [
        Member(
            "kafka-python",
            coordinator.bootstrap,
            "g",
            ["t"],
            client_id=f"m{i}",
            session_timeout_ms=SESSION_MS,
        )
        for i in range(3)
    ]
    members.extend(group)
    generation = wait_until(lambda: converged(group, partitions), 40, "the group to converge")
    reports = [len(m.events) for m in group]

    coordinator.restart(hard=hard)

    # Longer than the session timeout: a member the reloaded coordinator did not know,
    # or one that could not heartbeat, would have been expired and triggered a rebalance.
    time.sleep(SESSION_MS / 1000 + 2)
    after = {
        m.name: [e for e in m.events[r:] if e["event"] != "poll_error"]
        for m, r in zip(group, reports, strict=True)
    }
    stderr = {m.name: "".join(m.stderr[-20:]) for m in group}
    diagnosis = (
        f"after the restart: {after}\n{stderr}\ncoordinator log:\n{coordinator.log()[-6000:]}"
    )
    assert converged(group, partitions) == generation, diagnosis
    assert not any(after.values()), diagnosis
    described = asyncio.run(_describe(coordinator.port, "g"))
    assert described.group_state == "Stable"
    assert len(described.members) == 3


async def _describe(port: int, group: str) -> object:
    from kio.schema.describe_groups.v5 import request as dg

    from kgroups.protocol.build import build
    from kgroups.protocol.client import KafkaConnection

    conn = await KafkaConnection.open("127.0.0.1", port)
    try:
        response = await conn.request(build(dg.DescribeGroupsRequest, {"groups": [group]}))
    finally:
        await conn.close()
    return response.groups[0]
