"""How a GroupMember reacts to what the real coordinator tells it (in-process server).

Each test provokes one situation with the real coordinator and checks what the
application sees: listener calls in Kafka's order, errors that say what happened, and
the member id / generation it keeps or resets (reference §7 item 3, KAFKA-13419).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.leave_group.v5 import request as lg

from kgroups import admin
from kgroups.client import (
    CommitFailedError,
    FencedInstanceError,
    GroupMember,
    MemberError,
    SyncGroupMember,
    TopicPartition,
)
from kgroups.coordinator.core import CoordinatorConfig
from kgroups.coordinator.server import CoordinatorServer, ServerSettings
from kgroups.protocol.build import build
from kgroups.protocol.client import KafkaConnection


class Recorder:
    """A rebalance listener that writes down what it was told, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[tuple[str, int]]]] = []

    def _add(self, kind: str, partitions: Any) -> None:
        self.calls.append((kind, sorted(partitions)))

    def on_partitions_assigned(self, partitions: Any) -> None:
        self._add("assigned", partitions)

    def on_partitions_revoked(self, partitions: Any) -> None:
        self._add("revoked", partitions)

    def on_partitions_lost(self, partitions: Any) -> None:
        self._add("lost", partitions)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[CoordinatorServer]:
    settings = ServerSettings(
        port=0,
        data_dir=tmp_path,
        coordinator=CoordinatorConfig(
            group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=500
        ),
    )
    srv = CoordinatorServer(settings)
    await srv.start()
    await admin.create_topic("127.0.0.1", srv.port, "t", 4)
    yield srv
    if not srv.stopped:
        await srv.stop()


def new_member(srv: CoordinatorServer, recorder: Recorder | None = None, **kw: Any) -> GroupMember:
    settings: dict[str, Any] = {
        "session_timeout_ms": 3000, "heartbeat_interval_ms": 100,
        "rebalance_timeout_ms": 5000, "retry_backoff_ms": 50,
    }  # fmt: skip
    settings.update(kw)
    return GroupMember(f"127.0.0.1:{srv.port}", "g", ["t"], listener=recorder, **settings)


ALL = [("t", p) for p in range(4)]


async def test_eager_members_revoke_everything_then_split(server: CoordinatorServer) -> None:
    r1, r2 = Recorder(), Recorder()
    m1 = new_member(server, r1, assignors=["range"])
    await m1.start(timeout=10)
    assert r1.calls == [("assigned", ALL)]
    m2 = new_member(server, r2, assignors=["range"])
    await m2.start(timeout=10)
    await m1.wait_stable(after_generation=1, timeout=10)
    # Eager (range): m1 revoked all four before rejoining, then got its half back.
    assert r1.calls[1] == ("revoked", ALL)
    assert sorted(m1.assignment | m2.assignment) == ALL
    assert len(m1.assignment) == len(m2.assignment) == 2
    assert m1.generation == m2.generation
    await m2.close()
    await m1.wait_stable(after_generation=m2.generation, timeout=10)
    assert sorted(m1.assignment) == ALL
    await m1.close()
    assert r1.calls[-1] == ("revoked", ALL)


async def test_cooperative_members_revoke_only_what_moves(server: CoordinatorServer) -> None:
    r1, r2 = Recorder(), Recorder()
    m1 = new_member(server, r1, assignors=["cooperative-sticky"])
    await m1.start(timeout=10)
    m2 = new_member(server, r2, assignors=["cooperative-sticky"])
    await m2.start(timeout=10)
    # m2 first gets nothing (the two partitions are still m1's), then, after m1 revoked
    # them and rejoined, gets them in the follow-up rebalance.
    while len(m2.assignment) < 2:
        await m2.wait_stable(after_generation=m2.generation, timeout=10)
    revoked = [c for c in r1.calls if c[0] == "revoked"]
    assert len(revoked) == 1 and len(revoked[0][1]) == 2, r1.calls
    assert set(revoked[0][1]) == {tuple(tp) for tp in m2.assignment}
    assert not set(m1.assignment) & set(m2.assignment)
    await m1.close()
    await m2.close()


async def test_stale_generation_cannot_commit_and_member_keeps_its_id(
    server: CoordinatorServer,
) -> None:
    """A member that missed a rebalance (long heartbeat interval) is expelled after the
    rebalance timeout; its commit is rejected, not silently accepted."""
    slow = new_member(
        server, assignors=["range"], heartbeat_interval_ms=20_000, session_timeout_ms=30_000,
        rebalance_timeout_ms=600,
    )  # fmt: skip
    await slow.start(timeout=10)
    await slow.commit({TopicPartition("t", 0): 10})
    other = new_member(server, assignors=["range"], rebalance_timeout_ms=600)
    await other.start(timeout=10)
    assert len(other.assignment) == 4  # slow was expelled when it did not rejoin
    with pytest.raises(CommitFailedError) as failure:
        await slow.commit({TopicPartition("t", 0): 11})
    assert "stale" in str(failure.value)
    offsets = await other.committed([TopicPartition("t", 0)])
    assert offsets[TopicPartition("t", 0)] is not None
    assert offsets[TopicPartition("t", 0)].offset == 10  # type: ignore[union-attr]
    await slow.close()
    await other.close()


async def test_removed_member_loses_partitions_and_rejoins_with_a_new_id(
    server: CoordinatorServer,
) -> None:
    """UNKNOWN_MEMBER_ID on heartbeat: partitions are *lost* (not revoked: someone else
    may own them already) and the member rejoins under a new member id."""
    recorder = Recorder()
    member = new_member(server, recorder, assignors=["range"])
    await member.start(timeout=10)
    old_id = member.member_id
    conn = await KafkaConnection.open("127.0.0.1", server.port)
    try:
        await conn.request(build(lg.LeaveGroupRequest, {
            "group_id": "g", "members": [{"member_id": old_id, "group_instance_id": None}],
        }))  # fmt: skip
    finally:
        await conn.close()
    await member.wait_stable(after_generation=member.generation, timeout=10)
    assert ("lost", ALL) in recorder.calls
    assert ("revoked", ALL) not in recorder.calls
    assert member.member_id and member.member_id != old_id
    assert sorted(member.assignment) == ALL
    await member.close()


async def test_a_fenced_static_member_stops_with_a_clear_error(server: CoordinatorServer) -> None:
    recorder = Recorder()
    first = new_member(server, recorder, assignors=["range"], instance_id="worker-1")
    await first.start(timeout=10)
    second = new_member(server, assignors=["range"], instance_id="worker-1")
    await second.start(timeout=10)
    with pytest.raises(FencedInstanceError):
        await first.wait_stable(after_generation=first.generation, timeout=10)
    assert recorder.calls[-1] == ("lost", ALL)
    assert first.state == "failed"
    with pytest.raises(MemberError):
        await first.commit({TopicPartition("t", 0): 1})
    assert sorted(second.assignment) == ALL
    await first.close()
    await second.close()


async def test_static_member_close_does_not_leave(server: CoordinatorServer) -> None:
    """Static members come back without a rebalance (KIP-345): close sends no LeaveGroup,
    so the group keeps the member and its generation."""
    member = new_member(server, assignors=["range"], instance_id="w")
    await member.start(timeout=10)
    generation = member.generation
    await member.close()
    again = new_member(server, assignors=["range"], instance_id="w")
    await again.start(timeout=10)
    assert again.generation == generation  # no rebalance: the static member was known
    assert sorted(again.assignment) == ALL
    await again.close(leave=True)


async def test_losing_the_coordinator_for_a_session_means_partitions_are_lost(
    server: CoordinatorServer,
) -> None:
    recorder = Recorder()
    member = new_member(server, recorder, assignors=["range"], session_timeout_ms=1000)
    await member.start(timeout=10)
    await server.stop()
    for _ in range(100):
        if ("lost", ALL) in recorder.calls:
            break
        await asyncio.sleep(0.05)
    assert ("lost", ALL) in recorder.calls
    assert not member.assignment
    await member.close()


async def test_sync_facade_for_code_that_is_not_async(server: CoordinatorServer) -> None:
    def blocking_code() -> None:
        member = SyncGroupMember(
            f"127.0.0.1:{server.port}", "g", ["t"], assignors=["roundrobin"],
            heartbeat_interval_ms=100,
        )  # fmt: skip
        try:
            member.start(timeout=10)
            assert sorted(member.assignment) == ALL
            member.commit({TopicPartition("t", 1): 5})
            assert member.committed([TopicPartition("t", 1)])[TopicPartition("t", 1)] == (5, "")
        finally:
            member.close()

    # The coordinator runs on this test's loop; the blocking code runs in its own thread.
    await asyncio.wait_for(asyncio.to_thread(blocking_code), 30)


class FaultProxy:
    """A TCP proxy in front of the real coordinator that rewrites the error code of the
    next `count` responses to one API (fault injection; everything else passes through)."""

    def __init__(self, target_port: int, api_key: int, error: int, count: int = 1) -> None:
        self.target_port, self.api_key, self.error, self.count = target_port, api_key, error, count
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.server.wait_closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        apis: dict[int, int] = {}

        async def pump(
            src: asyncio.StreamReader, dst: asyncio.StreamWriter, upstream: bool
        ) -> None:
            try:
                while True:
                    size = await src.readexactly(4)
                    frame = bytearray(await src.readexactly(int.from_bytes(size, "big")))
                    correlation = int.from_bytes(frame[4:8] if upstream else frame[0:4], "big")
                    if upstream:
                        apis[correlation] = int.from_bytes(frame[0:2], "big")
                    elif apis.pop(correlation, None) == self.api_key and self.count > 0:
                        # Heartbeat v4 response: correlation id, header tags, throttle, error.
                        frame[9:11] = self.error.to_bytes(2, "big")
                        self.count -= 1
                    dst.write(size + bytes(frame))
                    await dst.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                dst.close()

        for task in (
            asyncio.create_task(pump(reader, up_writer, True)),
            asyncio.create_task(pump(up_reader, writer, False)),
        ):
            self.tasks.add(task)


async def test_illegal_generation_resets_only_the_generation(tmp_path: Path) -> None:
    """KAFKA-13419: on ILLEGAL_GENERATION the member keeps its member id (so the coordinator
    knows it on rejoin) and gives its partitions up as lost before rejoining."""
    proxy = FaultProxy(0, api_key=12, error=22, count=0)  # Heartbeat -> ILLEGAL_GENERATION
    port = await proxy.start()
    settings = ServerSettings(
        port=0, data_dir=tmp_path, advertised_port=port,  # clients come back via the proxy
        coordinator=CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=500),
    )  # fmt: skip
    srv = CoordinatorServer(settings)
    await srv.start()
    proxy.target_port = srv.port
    try:
        await admin.create_topic("127.0.0.1", srv.port, "t", 4)
        recorder = Recorder()
        member = GroupMember(f"127.0.0.1:{port}", "g", ["t"], listener=recorder, assignors=["range"],
                             session_timeout_ms=3000, heartbeat_interval_ms=100)  # fmt: skip
        await member.start(timeout=10)
        member_id = member.member_id
        proxy.count = 1
        for _ in range(100):
            if len(recorder.calls) >= 3:
                break
            await asyncio.sleep(0.05)
        assert recorder.calls == [("assigned", ALL), ("lost", ALL), ("assigned", ALL)]
        assert member.member_id == member_id  # kept: only the generation was reset
        assert proxy.count == 0
        await member.close()
    finally:
        await proxy.stop()
        await srv.stop()
