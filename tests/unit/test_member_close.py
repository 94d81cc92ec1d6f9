"""Closing a member twice at once (a signal handler and a `finally`, say) closes it once.

Found by the member simulation (seed 391): a second `close()` while the first was still
revoking cancelled the first one's revocation and closed the connection under its
LeaveGroup, so the first call died with CancelledError. The member runs against the real
coordinator on virtual time (tests/sim/fake_cluster.py).
"""

from __future__ import annotations

import asyncio

from kgroups.client import GroupMember, TopicPartition
from tests.sim.fake_cluster import ADDRESS, FakeCluster, MemoryStore
from tests.sim.fake_loop import FakeTimeLoop


class SlowToStop:
    def __init__(self) -> None:
        self.revoked: list[frozenset[TopicPartition]] = []
        self.lost: list[frozenset[TopicPartition]] = []

    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        await asyncio.sleep(3.0)  # stopping work takes a while
        self.revoked.append(partitions)

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.lost.append(partitions)


def test_two_concurrent_closes_revoke_once_and_leave_the_group() -> None:
    loop = FakeTimeLoop()
    store = MemoryStore()
    store.create_topic("t", 3)
    cluster = FakeCluster(loop, store)
    listener = SlowToStop()

    async def scenario() -> None:
        server = await cluster.start()
        member = GroupMember(
            ADDRESS, "g", ["t"], listener=listener, session_timeout_ms=6000,
            heartbeat_interval_ms=1000, connect=cluster.connector("m"),
        )  # fmt: skip
        await member.start(timeout=10)
        assert len(member.assignment) == 3
        first = asyncio.create_task(member.close())
        await asyncio.sleep(1.0)  # the first close is revoking
        await asyncio.wait_for(asyncio.gather(first, member.close()), 30)
        assert listener.revoked == [frozenset(TopicPartition("t", p) for p in range(3))]
        assert listener.lost == []
        assert server.coordinator is not None
        assert not server.coordinator.groups["g"].members  # LeaveGroup was sent
        await member.close()  # and a third, after it is closed, is a no-op
        await cluster.stop()

    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()
